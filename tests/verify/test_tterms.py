"""The tensor-level normal form (``verify/terms/``): steps that must keep a sum's bound
variable inside its sum."""

from __future__ import annotations

import symengine as se

from verify import _tdecide
from verify import terms as _terms


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


def test_a_lifted_bracket_is_not_multiplied_into_a_division_by_a_bracket() -> None:
    # ``1 / (e^x([q >= 1]) [q >= 1] + e^y(q) [q <= 0])`` lifted on the nested ``[q >= 1]`` as
    # ``[b] on + (1 - [b]) off`` had ``off = e^-y(q) / [q <= 0]``: at q >= 1 that is
    # ``0 * zoo``, NaN, where the term is e^-x(1). Which bracket was lifted first followed the
    # symbols' names, so the padded 2-D smooth_max_pool (neg beta) verified or not depending on
    # how many fresh variables earlier checks had made. The choice is a Piecewise now.
    q = _terms.fresh("_q", -3, 8, bound=False)
    x, y = _terms.fn("lift_x"), _terms.fn("lift_y")  # leaf names no other test registers
    b, c = _terms.GE(q - 1), _terms.GE(-q)
    t = 1 / (se.exp(x(b)) * b + se.exp(y(q)) * c)
    n = _terms.normalize(t, unroll=_terms.UNROLL_SHORT)
    for v in range(-3, 8):
        at = _terms.normalize(n.xreplace({q: se.Integer(v)}), unroll=_terms.UNROLL_SHORT)
        assert at == (se.exp(-x(1)) if v >= 1 else se.exp(-y(se.Integer(v)))), (v, at)
    right = b * se.exp(-x(1)) + c * se.exp(-y(q))
    wrong = b * se.exp(-x(1)) + c * se.exp(-y(q + 1))
    assert _tdecide.decide_tensor(t, right, [q]).equal is True
    assert _tdecide.decide_tensor(t, wrong, [q]).equal is not True
