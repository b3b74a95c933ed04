"""Bracket regions and sign facts over a small box of index values (``verify/terms/grid.py``).

The padded 2-D smooth_max_pool (neg beta) of the large sweep splits its compiled VJP on
brackets with nested floors; z3 took about 5 s of its 10 s timeout on one such query alone and
timed out after the sweep's other pooling rows (its time depends on the process's z3 state), so
the split stopped and the check ran past 600 s. Boxes this small are decided by exhaustion now:
exact, with no timeout, the same in every process.
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from typing import Any

import pytest
import symengine as se
import z3

from verify import _tregions
from verify import terms as _terms
from verify.terms import grid as _tgrid


def _q(n: int) -> Any:
    return _terms.fresh("_q", 0, n, bound=False)


def _half(e: Any) -> Any:
    return se.floor((e + 1) / 2)


def _pool_brackets(p: Any, q: Any) -> list[Any]:
    """Brackets with nested floors, as the neg-beta row's compiled VJP meets them (a padded
    window read through a reshape)."""
    a1 = 3 + 2 * _half(q) + q + 64 * _half(p) + 2 * p
    a2 = 3 + 2 * _half(q) + q + 2 * p
    a3 = se.floor(a2 / 4) + 16 * _half(p)
    return [
        _terms.GE(se.floor(a1 / 68) - 1),
        _terms.GE(a3 - 1 - 17 * se.floor(a3 / 17)),
        _terms.GE(15 - a3 + 17 * se.floor(a3 / 17)),
        _terms.GE(15 - se.floor(a1 / 68)),
    ]


def _value(e: Any, point: dict[Any, int]) -> int:
    """An index expression at a point, by Python's exact rationals (an oracle independent of
    the NumPy evaluation)."""
    v = Fraction(str(e.xreplace({s: se.Integer(x) for s, x in point.items()})))
    assert v.denominator == 1, e
    return int(v)


def _brute_regions(brackets: list[Any], box: dict[Any, range]) -> list[tuple[int, ...]]:
    seen = set()
    names = list(box)
    for values in itertools.product(*box.values()):
        point = dict(zip(names, values, strict=True))
        seen.add(tuple(int(_value(b.args[0], point) >= 0) for b in brackets))
    return sorted(seen, key=lambda r: [-x for x in r])


@pytest.fixture
def z3_gives_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every z3 check answers ``unknown`` (as one that runs into its timeout does)."""
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)


def test_nested_floor_regions_are_decided_without_z3(z3_gives_up: None) -> None:
    p, q = _q(32), _q(32)
    brackets = _pool_brackets(p, q)
    got = _tregions._regions_of(brackets, [])
    assert got is not None  # before: z3's "unknown" stopped the split (None)
    rows = [tuple(int(r[b]) for b in brackets) for r in got]
    assert rows == _brute_regions(brackets, {p: range(32), q: range(32)})


def test_regions_under_facts_match_brute_force(z3_gives_up: None) -> None:
    p, q = _q(32), _q(32)
    brackets = _pool_brackets(p, q)
    fact = _terms.GE(p - 20)
    got = _tregions._regions_of(brackets[1:], [(fact, 1)])
    assert got is not None
    rows = [tuple(int(r[b]) for b in brackets[1:]) for r in got]
    assert rows == _brute_regions(brackets[1:], {p: range(20, 32), q: range(32)})


def test_regions_agree_with_z3(monkeypatch: pytest.MonkeyPatch) -> None:
    p, q = _q(7), _terms.fresh("_q", -3, 5, bound=False)
    cases = [
        [_terms.GE(se.floor((p + 1) / 3) - q), _terms.EQ(p - 2 * se.floor(p / 2))],
        [_terms.GE(3 - p - q), _terms.GE(p + q - 9)],  # the second: only with the first 0
        [_terms.EQ(se.floor(p / 2) - se.floor((q + 3) / 2))],
        [],
    ]
    facts = [[], [(_terms.GE(q), 1)], [(_terms.GE(q - 10), 1)]]  # the last: infeasible
    for brackets, fs in itertools.product(cases, facts):
        grid = _tregions._regions_of(brackets, fs)
        with monkeypatch.context() as m:
            m.setattr(_tgrid, "regions", _decline)
            by_z3 = _tregions._regions_of(brackets, fs)
        assert grid == by_z3, (brackets, fs)


def _decline(*args: Any, **kw: Any) -> Any:
    raise _tgrid.NotGridded("the z3 route")


def test_sign_facts_of_nested_floors_without_z3(z3_gives_up: None) -> None:
    p, q = _q(32), _q(32)
    a = 3 + 2 * _half(q) + q + 2 * p
    always = se.floor(a / 4) + 16 * _half(p) - 17 * se.floor((se.floor(a / 4) + 16 * _half(p)) / 17)
    assert _terms._sign_facts(always) == (True, False, False)  # a residue mod 17: >= 0
    # a wrong variant: negative at one point of the box (p = q = 0) is not "always >= 0"
    assert _terms._sign_facts(always - 3 + se.floor((p + q + 62) / 64)) == (False, False, False)


def test_sign_facts_decline_a_bound_variable_where_only_facts_count() -> None:
    k = _terms.fresh("_k", 0, 4)
    e = se.floor((k + 1) / 2)
    with pytest.raises(_tgrid.NotGridded):
        _tgrid.sign_facts(e, facts=True)
    assert _tgrid.sign_facts(e, facts=False) == (True, False, False)


def test_values_too_large_for_int64_are_declined() -> None:
    p = _terms.fresh("_q", 0, 4, bound=False)
    with pytest.raises(_tgrid.NotGridded):
        _tgrid.sign_facts(se.floor((2**40 * p + 1) / 3), facts=True)


def test_a_budget_that_runs_out_in_z3_is_raised_not_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before, the "unknown" of a check cut short by the budget was cached for the process: a
    # later row met (False, False, False) for that expression without asking again.
    def out_of_time(self: Any, *a: Any) -> Any:
        raise _terms.OutOfTime("budget")

    monkeypatch.setattr(_tgrid, "sign_facts", _decline)
    monkeypatch.setattr(z3.Solver, "check", out_of_time)
    e = se.floor((_q(1 << 20) + 1) / 3)
    with pytest.raises(_terms.OutOfTime):
        _terms._sign_facts(e)
    assert (e, True) not in _terms._SIGN_CACHE


def test_an_empty_box_makes_every_sign_fact_hold() -> None:
    # as z3 answers: no value, so no counterexample to any of the three
    p = _terms.fresh("_q", 3, 3, bound=False)
    assert _tgrid.sign_facts(se.floor(p / 2), facts=True) == (True, True, True)
