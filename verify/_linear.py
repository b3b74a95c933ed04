"""Exact reasoning about conjunctions of linear (in)equalities with rational coefficients.

Branch conditions of the piecewise expressions the verifier meets (``x > 0``, ``a < b``, clamp
bounds, first-maximum conditions) are linear. :func:`solve` decides whether a conjunction of such
constraints has a real solution (Fourier-Motzkin elimination in exact rationals) and, when it has
one, draws a random exact witness point, so that an equality can be tested inside a branch,
including lower-dimensional ones such as ties (``a == b``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import symengine as se
import sympy as sp

from .terms.index import linear

Kind = Literal[">", ">=", "=="]

#: Give up (undecided) when elimination produces more constraints than this.
MAX_CONSTRAINTS = 4000


@dataclass(frozen=True, slots=True)
class Lin:
    """``sum(coeffs[v] * v) + const  <kind>  0`` with exact rational coefficients."""

    coeffs: tuple[tuple[str, Fraction], ...]
    const: Fraction
    kind: Kind

    def coeff(self, v: str) -> Fraction:
        for name, c in self.coeffs:
            if name == v:
                return c
        return Fraction(0)

    def value(self, point: Mapping[str, Fraction]) -> Fraction:
        return self.const + sum((c * point[v] for v, c in self.coeffs), Fraction(0))

    def holds(self, point: Mapping[str, Fraction]) -> bool:
        val = self.value(point)
        return val > 0 if self.kind == ">" else val >= 0 if self.kind == ">=" else val == 0


class Nonlinear(Exception):
    """A relation that is not linear with rational coefficients."""


def linearize(expr: Any) -> tuple[dict[str, Fraction], Fraction]:
    """``expr`` (symengine, or sympy: converted) as ``(coefficients by symbol name, constant)``:
    the index layer's one linearizer (:func:`verify.terms.index.linear`) restricted to symbols and
    rational coefficients; raises :class:`Nonlinear` otherwise."""
    form = linear(se.sympify(expr))
    if form is None:
        raise Nonlinear(str(expr))
    coeffs: dict[str, Fraction] = {}
    for atom, c in form[0].items():
        if not isinstance(atom, se.Symbol):
            raise Nonlinear(str(atom))
        coeffs[atom.name] = coeffs.get(atom.name, Fraction(0)) + _frac(c)
    return {k: v for k, v in coeffs.items() if v != 0}, _frac(form[1])


def _frac(v: Any) -> Fraction:
    if not isinstance(v, se.Rational):  # symengine's Integer is a Rational
        raise Nonlinear(str(v))
    return Fraction(int(v.p), int(v.q))


def _make(coeffs: Mapping[str, Fraction], const: Fraction, kind: Kind) -> Lin:
    return Lin(tuple(sorted((k, v) for k, v in coeffs.items() if v != 0)), const, kind)


def _rel(kind: Kind, d: Any) -> Lin:
    co, c = linearize(d)
    return _make(co, c, kind)


def dnf(cond: Any, negate: bool = False, max_terms: int = 256) -> list[list[Lin]]:
    """A boolean combination of linear relations (symengine, or sympy: converted), negated if
    asked, in disjunctive normal form: a list (or) of lists (and) of :class:`Lin`.

    Raises :class:`Nonlinear` for other atoms or when the form grows past ``max_terms``."""
    if isinstance(cond, sp.Basic | bool):
        cond = se.sympify(cond)
    name = type(cond).__name__
    if cond == se.true or name == "BooleanTrue":
        return [] if negate else [[]]
    if cond == se.false or name == "BooleanFalse":
        return [[]] if negate else []
    if name == "Not":
        return dnf(cond.args[0], not negate, max_terms)
    if name in ("And", "Or"):
        parts = [dnf(a, negate, max_terms) for a in cond.args]
        if (name == "And") == negate:  # a disjunction
            out = [t for p in parts for t in p]
        else:
            out = [[]]
            for p in parts:
                out = [x + y for x in out for y in p]
                if len(out) > max_terms:
                    raise Nonlinear("condition too large")
        if len(out) > max_terms:
            raise Nonlinear("condition too large")
        return out
    if name in ("StrictLessThan", "LessThan", "Equality", "Unequality"):
        lhs, rhs = cond.args
        d = rhs - lhs  # lhs < rhs  <=>  rhs - lhs > 0
        if name == "StrictLessThan":
            return [[_rel(">=", -d)]] if negate else [[_rel(">", d)]]
        if name == "LessThan":
            return [[_rel(">", -d)]] if negate else [[_rel(">=", d)]]
        if (name == "Equality") != negate:
            return [[_rel("==", d)]]
        return [[_rel(">", d)], [_rel(">", -d)]]
    raise Nonlinear(name)


@dataclass
class _Step:
    var: str
    lower: list[Lin]  # constraints with a positive coefficient of var
    upper: list[Lin]  # negative coefficient


def _substitute(con: Lin, var: str, coeffs: Mapping[str, Fraction], const: Fraction) -> Lin:
    """Replace ``var`` by ``sum(coeffs) + const`` in ``con``."""
    a = con.coeff(var)
    if a == 0:
        return con
    new = {k: v for k, v in con.coeffs if k != var}
    for k, v in coeffs.items():
        new[k] = new.get(k, Fraction(0)) + a * v
    return _make(new, con.const + a * const, con.kind)


def _trivial(con: Lin) -> bool | None:
    """``True``/``False`` for a constraint without variables, else ``None``."""
    if con.coeffs:
        return None
    if con.kind == ">":
        return con.const > 0
    if con.kind == ">=":
        return con.const >= 0
    return con.const == 0


def eliminate_equalities(
    constraints: Sequence[Lin],
) -> tuple[list[tuple[str, dict[str, Fraction], Fraction]], list[Lin]]:
    """Solve the equalities one variable each (Gaussian elimination): the solved variables as
    ``(var, coefficients, constant)`` in order (each may mention variables solved later), and
    the remaining constraints with them substituted."""
    cons = list(constraints)
    solved: list[tuple[str, dict[str, Fraction], Fraction]] = []
    while True:
        eq = next((c for c in cons if c.kind == "==" and c.coeffs), None)
        if eq is None:
            return solved, cons
        var, a = eq.coeffs[0]
        expr = {k: -v / a for k, v in eq.coeffs if k != var}
        const = -eq.const / a
        solved.append((var, expr, const))
        cons = [_substitute(c, var, expr, const) for c in cons if c is not eq]


def equality_substitution(
    constraints: Sequence[Lin],
) -> dict[str, tuple[dict[str, Fraction], Fraction]]:
    """The equalities of a conjunction as a substitution ``var -> (coefficients, constant)`` in
    the remaining free variables."""
    solved, _ = eliminate_equalities(constraints)
    out: dict[str, tuple[dict[str, Fraction], Fraction]] = {}
    for var, expr, const in reversed(solved):
        co: dict[str, Fraction] = {}
        c0 = const
        for k, v in expr.items():
            if k in out:
                kc, kk = out[k]
                c0 += v * kk
                for k2, v2 in kc.items():
                    co[k2] = co.get(k2, Fraction(0)) + v * v2
            else:
                co[k] = co.get(k, Fraction(0)) + v
        out[var] = ({k: v for k, v in co.items() if v != 0}, c0)
    return out


def solve(
    constraints: Sequence[Lin],
    variables: Iterable[str],
    rng: random.Random,
    box: Mapping[str, tuple[Fraction | None, Fraction | None]] | None = None,
) -> dict[str, Fraction] | Literal["unknown"] | None:
    """A random exact point satisfying every constraint, ``None`` if there is none, or
    ``"unknown"`` when elimination grows too large.

    ``variables`` lists every variable to assign (free ones get a random value in ``box`` or in
    [-2, 2])."""
    box = dict(box or {})
    solved, cons = eliminate_equalities(constraints)
    steps: list[_Step] = []
    while True:
        rest = []
        for c in cons:
            t = _trivial(c)
            if t is False:
                return None
            if t is None:
                rest.append(c)
        cons = rest
        if not cons:
            break
        counts: dict[str, tuple[int, int]] = {}
        for c in cons:
            for v, a in c.coeffs:
                lo, hi = counts.get(v, (0, 0))
                counts[v] = (lo + (a > 0), hi + (a < 0))
        var = min(counts, key=lambda v: counts[v][0] * counts[v][1] - sum(counts[v]))
        lower = [c for c in cons if c.coeff(var) > 0]
        upper = [c for c in cons if c.coeff(var) < 0]
        keep = [c for c in cons if c.coeff(var) == 0]
        for lo in lower:
            for up in upper:
                a, b = lo.coeff(var), -up.coeff(var)
                co: dict[str, Fraction] = {}
                for k, v in lo.coeffs:
                    co[k] = co.get(k, Fraction(0)) + v * b
                for k, v in up.coeffs:
                    co[k] = co.get(k, Fraction(0)) + v * a
                co.pop(var, None)
                kind: Kind = ">" if ">" in (lo.kind, up.kind) else ">="
                keep.append(_make(co, lo.const * b + up.const * a, kind))
        if len(keep) > MAX_CONSTRAINTS:
            return "unknown"
        steps.append(_Step(var, lower, upper))
        cons = keep
    # Back-substitution: a random value strictly inside each variable's interval.
    point: dict[str, Fraction] = {}
    eliminated = {s.var for s in steps} | {v for v, _, _ in solved}
    for v in variables:
        if v not in eliminated:
            point[v] = _pick(rng, *box.get(v, (None, None)), True, True)
    for s in reversed(steps):
        lo_val: Fraction | None = None
        lo_strict = False
        hi_val: Fraction | None = None
        hi_strict = False
        for c in s.lower:  # a*v + r > 0  =>  v > -r/a
            a = c.coeff(s.var)
            r = c.value({**point, s.var: Fraction(0)})
            bound = -r / a
            if lo_val is None or bound > lo_val or (bound == lo_val and c.kind == ">"):
                lo_val, lo_strict = bound, c.kind == ">"
        for c in s.upper:  # a*v + r > 0 with a < 0  =>  v < -r/a
            a = c.coeff(s.var)
            r = c.value({**point, s.var: Fraction(0)})
            bound = -r / a
            if hi_val is None or bound < hi_val or (bound == hi_val and c.kind == ">"):
                hi_val, hi_strict = bound, c.kind == ">"
        blo, bhi = box.get(s.var, (None, None))
        if lo_val is None and blo is not None:
            lo_val, lo_strict = blo, True
        if hi_val is None and bhi is not None:
            hi_val, hi_strict = bhi, True
        point[s.var] = _pick(rng, lo_val, hi_val, lo_strict, hi_strict)
    for var, expr, const in reversed(solved):
        point[var] = const + sum(
            (c * point.get(k, Fraction(0)) for k, c in expr.items()), Fraction(0)
        )
    for v in variables:
        point.setdefault(v, _pick(rng, *box.get(v, (None, None)), True, True))
    return point


def _pick(
    rng: random.Random,
    lo: Fraction | None,
    hi: Fraction | None,
    lo_strict: bool,
    hi_strict: bool,
) -> Fraction:
    """A random dyadic-ish rational in the interval (its end points only when forced)."""
    if lo is not None and hi is not None:
        if lo == hi:
            return lo
        u = Fraction(rng.randint(1, 1023), 1024)
        return lo + (hi - lo) * u
    if lo is not None:
        return lo + Fraction(rng.randint(1, 2048), 1024)
    if hi is not None:
        return hi - Fraction(rng.randint(1, 2048), 1024)
    return Fraction(rng.randint(-2048, 2048), 1024)


def tighten(constraints: Sequence[Lin]) -> list[Lin]:
    """Make implicit equalities explicit: a non-strict ``c >= 0`` whose strict version is
    infeasible together with the others holds with equality (``a >= b`` and ``b >= a``)."""
    cons = list(constraints)
    rng = random.Random(0)
    names = sorted({v for c in cons for v, _ in c.coeffs})
    for i, c in enumerate(cons):
        if c.kind != ">=" or not c.coeffs:
            continue
        trial = [*cons[:i], Lin(c.coeffs, c.const, ">"), *cons[i + 1 :]]
        if solve(trial, names, rng) is None:
            cons[i] = Lin(c.coeffs, c.const, "==")
    return cons
