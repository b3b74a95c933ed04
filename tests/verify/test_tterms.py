"""The tensor-level normal form (``verify/_terms.py``): steps that must keep a sum's bound
variable inside its sum."""

from __future__ import annotations

import symengine as se

from verify import _tdecide, _terms


def _row_sum(q: se.Basic, n: int) -> se.Basic:
    x = _terms.fn("x")
    return _terms.ssum(lambda k: x(q, k), 0, n)


def _bound_outside_sums(e: se.Basic) -> set:
    """The bound variables that occur in ``e`` outside the sums that bind them."""
    out: set = set()
    stack = [e]
    while stack:
        t = stack.pop()
        if not isinstance(t, se.Basic) or isinstance(t, se.Number):
            continue
        if _terms.is_sum(t):
            continue
        if isinstance(t, se.Symbol) and t in _terms.BOUND:
            out.add(t)
        stack.extend(t.args)
    return out


def test_a_bracket_of_a_bound_variable_is_not_lifted_out_of_a_sum_under_a_function() -> None:
    # The lifting of nested brackets (``_lift``) once took the range brackets of a sum inside a
    # ``log`` for brackets of the monomial, leaving the sum unbounded and its variable free.
    q = _terms.fresh("_q", 0, 2, bound=False)
    x = _terms.fn("x")
    e = se.log(_row_sum(q, 16)) * x(q, 0)
    for unroll in (False, True):
        n = _terms.normalize(e, unroll=unroll)
        assert not _bound_outside_sums(n), n
        assert n == e, n


def test_log_sums_of_different_lengths_are_not_proved_equal() -> None:
    q = _terms.fresh("_q", 0, 2, bound=False)
    x = _terms.fn("x")
    got = se.log(_row_sum(q, 16)) * x(q, 0)
    expected = se.log(_row_sum(q, 15)) * x(q, 0)
    d = _tdecide.decide_tensor(got, expected, [q], counterexamples=False)
    assert d.equal is not True, d
