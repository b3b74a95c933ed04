"""Index regions (step 3 of :mod:`verify._tdecide`): which brackets are on the free indices and
index inputs; the feasible 0/1 assignments of a set of them under a case's facts (by
exhaustion over a small box, :mod:`verify.terms.grid`, else z3); floors of free indices fixed
by a few brackets when they take few values, or made affine by splitting an index by its
residue; a case's facts substituted into a term.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

import symengine as se

from . import terms as T
from .terms import grid
from .terms.smt import Z3
from .terms.smt import solver as smt_solver

#: At most this many regions are enumerated per comparison.
MAX_REGIONS = 256


def _nested(b: Any) -> bool:
    """A bracket with another bracket inside its argument (split the inner one first)."""
    return any(T.is_bracket(f) for f in T.fn_atoms(b.args[0]))


def _is_index_bracket(b: Any, allowed: set) -> bool:
    return T.is_bracket(b) and _index_atoms(b.args[0]) <= allowed


def _index_atoms(e: Any) -> set:
    out = set(e.free_symbols)
    for f in T.fn_atoms(e):
        if T.is_read(f):
            out.add(f)
    return out


#: A floor of a free index with at most this many values is split by value.
FLOOR_VALUES = 4


def residue_class(lo: int, hi: int, d: int, r: int) -> tuple[int, int]:
    """The values of ``[lo, hi)`` congruent to ``r`` modulo ``d``: ``first, first + d, ...``,
    ``n`` of them."""
    first = lo + (r - lo) % d
    return first, len(range(first, hi, d))


def _fact_values(facts: Sequence[tuple[Any, int]]) -> dict[Any, Any]:
    """The brackets of ``facts`` with their values, each also in its normal form (a bracket
    met after a substitution is normalised)."""
    out: dict[Any, Any] = {}
    for b, v in facts:
        out[b] = se.Integer(int(v))
        n = T.name_of(b)
        if n in ("_GE", "_EQ"):
            norm = (T.ge if n == "_GE" else T.eq)(b.args[0])
            if T.name_of(norm) == n:
                out.setdefault(norm, se.Integer(int(v)))
    return out


def _sub(e: Any, repl: Mapping[Any, Any]) -> Any:
    return e.xreplace(dict(repl)) if repl else e


def _floor_conditions(f: Any) -> list[Any] | None:
    """For ``floor(e / d)`` of free indices with at most :data:`FLOOR_VALUES` values: the
    brackets ``[e >= d v]`` that fix its value (one per value but the lowest)."""
    inner = f.args[0]
    lo, hi = T.interval(inner, facts=True)
    if lo is None or hi is None:
        return None
    vlo, vhi = math.floor(lo), math.floor(hi)
    if vhi - vlo + 1 > FLOOR_VALUES or vhi == vlo:
        return None
    lin = T.linear(inner)
    if lin is None:
        return None
    coeffs, const = lin
    den = math.lcm(*[Fraction(str(c)).denominator for c in [*coeffs.values(), const]])
    num = se.expand(inner * den)
    return [T.GE(se.expand(num - den * v)) for v in range(vlo + 1, vhi + 1)]


def _floor_values(floors: set, assign: Mapping[Any, Any]) -> dict[Any, Any]:
    """Floors whose value the assigned brackets fix (see :func:`_floor_conditions`)."""
    out = {}
    for f in floors:
        conds = _floor_conditions(f)
        if not conds or not all(c in assign for c in conds):
            continue
        lo, _ = T.interval(f.args[0], facts=True)
        out[f] = se.Integer(math.floor(lo) + sum(int(assign[c]) for c in conds))  # type: ignore[arg-type]
    return out


def _residue_split(f: Any, allowed: set) -> tuple[Any, int] | None:
    """A free index of ``floor(e / d)`` and the modulus that makes the floor affine in it."""
    lin = T.linear(f.args[0])
    if lin is None:
        return None
    coeffs, const = lin
    den = math.lcm(*[Fraction(str(c)).denominator for c in [*coeffs.values(), const]])
    for v, c in sorted(coeffs.items(), key=lambda kv: str(kv[0])):
        if isinstance(v, se.Symbol) and v in allowed:
            a = int(Fraction(str(c)) * den)
            m = den // math.gcd(a, den)
            if m > 1:
                return v, m
    return None


def _bracket_residue(brackets: list[Any], allowed: set) -> tuple[Any, int] | None:
    """A free index and modulus (:func:`_residue_split`) of a floor inside one of
    ``brackets``."""
    floors = sorted({f for b in brackets for f in T.floor_atoms(b)
                     if _index_atoms(f) <= allowed}, key=str)  # fmt: skip
    for f in floors:
        res = _residue_split(f, allowed)
        if res is not None:
            return res
    return None


def _regions_of(brackets: list[Any], facts: list[tuple[Any, int]]) -> list[dict] | None:
    """The feasible 0/1 assignments of ``brackets`` under ``facts``: by exhaustion over a small
    box of index values (:mod:`verify.terms.grid`, exact and the same in every process), else z3."""
    try:
        return grid.regions(brackets, facts, MAX_REGIONS)
    except grid.NotGridded:
        pass
    try:
        z = Z3()
        conds = [z.bracket(b) for b in brackets]
        known = [z.bracket(b) if v else z.z3.Not(z.bracket(b)) for b, v in facts]
    except T.TermError:
        return None
    z3 = z.z3
    solver = smt_solver(10)
    solver.add(*z.facts, *known)
    out: list[dict] = []

    def rec(i: int, assign: dict) -> bool:
        if len(out) > MAX_REGIONS:
            return False
        r = solver.check()
        if r == z3.unsat:
            return True
        if r != z3.sat:
            return False
        if i == len(brackets):
            out.append(dict(assign))
            return True
        for val in (1, 0):
            solver.push()
            solver.add(conds[i] if val else z3.Not(conds[i]))
            ok = rec(i + 1, {**assign, brackets[i]: se.Integer(val)})
            solver.pop()
            if not ok:
                return False
        return True

    if not rec(0, {}):
        return None
    return out


__all__ = ["FLOOR_VALUES", "MAX_REGIONS", "residue_class"]
