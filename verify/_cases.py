"""Deciding piecewise equalities by case splitting with exact linear reasoning (symengine).

``got - expected`` containing ``Piecewise`` (and ``Max`` / ``Min``, read as the piecewise
"first maximal argument" form, an identity of values) is decided like a small SMT solver:

* the context is a conjunction of linear constraints (exact rationals, :mod:`verify._linear`);
* every ``Piecewise`` whose branch the context determines is replaced by that branch (the
  context implies its condition: the negation is infeasible; earlier conditions contradicted);
* otherwise the first undetermined ``Piecewise`` is split: one case per branch and per term of
  its effective condition in disjunctive normal form; infeasible cases are dropped;
* at a leaf (no ``Piecewise`` left) the context's equalities are substituted (ties such as
  ``a == b``, implicit ones made explicit) and the smooth difference is decided by symengine's
  normal forms, then sympy's rewriting; a leaf that stays nonzero is evaluated at an exact
  witness point of its case: a counterexample, or "not proved here".

A condition on a polynomial ``d`` that is not linear is made linear by a change of variables
where ``d = c*u + r`` for a variable ``u`` with a rational ``c != 0`` and ``r`` free of ``u``
(``u := (w - r) / c``, ``w`` new: a bijection of the variables, so a proof in ``w`` is a proof
in ``u``; a clipped variance ``max(0, E[x^2] - E[x]^2)`` with the sums as symbols); points are
given back in the original variables. Other conditions that are not linear with rational
coefficients end the attempt (``None``): the caller falls back to the next method.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import symengine as se

from . import _linear as lin

#: Give up past this many leaves (cases) for one equality.
MAX_LEAVES = 4096


class _GiveUp(Exception):
    pass


def first_max_pieces(e: Any) -> Any:
    """``Max`` / ``Min`` atoms as ``Piecewise`` (the first maximal argument): the same value."""
    atoms = list(e.atoms(se.Max, se.Min)) if isinstance(e, se.Basic) else []
    if not atoms:
        return e
    atoms.sort(key=lambda a: len(str(a)))
    for a in atoms:
        # Symbols in index order (row-major: a pooling window's order), so that the pieces
        # match first-maximum indicators written over the same window; the value is the same
        # in any order.
        big = isinstance(a, se.Max)
        neutral = -se.oo if big else se.oo  # Max(-oo, a, ...) = Max(a, ...)
        args = sorted((first_max_pieces(x) for x in a.args if x != neutral), key=_order)
        if len(args) == 1:
            e = e.xreplace({a: args[0]})
            continue
        if not args:
            e = e.xreplace({a: neutral})
            continue
        pieces = []
        for k, x in enumerate(args):
            cs = [(x > y if big else x < y) for y in args[:k]]
            cs += [(x >= y if big else x <= y) for y in args[k + 1 :]]
            pieces.append((x, se.And(*cs) if len(cs) > 1 else cs[0]))
        # Every piece keeps its own condition (they are exclusive and exhaustive): a final
        # "otherwise" would make the last case the negation of all the others.
        e = e.xreplace({a: se.Piecewise(*pieces)})
    return e


def parse_name(name: str) -> tuple[str, tuple[int, ...]]:
    """A symbol's base name and index: ``"x[1,2]"`` is ``("x", (1, 2))``, ``"x#3"`` (how the
    decision memo renumbers symbols) is ``("x", (3,))``, anything else ``(name, ())``."""
    if name.endswith("]") and "[" in name:
        base, rest = name[:-1].split("[", 1)
        try:
            return base, tuple(int(v) for v in rest.split(",")) if rest else ()
        except ValueError:
            return name, ()
    base, sep, rank = name.rpartition("#")
    if sep and rank.isdigit():
        return base, (int(rank),)
    return name, ()


def _order(x: Any) -> tuple:
    """Sort key of a ``Max`` argument: symbols by base name, then by index as numbers
    (``x[0,10]`` after ``x[0,9]``, ``x#10`` after ``x#9``), so that the order is row-major
    whatever the number of digits."""
    if isinstance(x, se.Symbol):
        return (0, *parse_name(x.name))
    return (1, "", ())


@dataclass
class _State:
    names: list[str]
    rng: random.Random
    leaves: int = 0
    unproved: list[dict[str, Fraction]] = field(default_factory=list)
    counterexample: dict[str, Fraction] | None = None


def flat_pieces(e: Any) -> Any:
    """``Piecewise`` atoms whose branches all have the same value, replaced by it (what
    differentiating a piecewise constant gives: ``Piecewise((0, c), (0, True))``)."""
    if not isinstance(e, se.Basic):
        return e
    for _ in range(16):
        repl = {}
        for p in e.atoms(se.Piecewise):
            values = p.args[::2]
            if all(v == values[0] for v in values[1:]):
                repl[p] = values[0]
        if not repl:
            return e
        e = e.xreplace(repl)
    return e


def _feasible(ctx: list[lin.Lin], st: _State) -> dict[str, Fraction] | None:
    pt = lin.solve(ctx, st.names, st.rng)
    if pt == "unknown":
        raise _GiveUp
    return pt  # type: ignore[return-value]


def _implied(ctx: list[lin.Lin], cond: Any, st: _State) -> bool:
    """The context implies ``cond``: every term of ``not cond`` is infeasible with it."""
    return all(_feasible(ctx + t, st) is None for t in lin.dnf(cond, negate=True))


def _possible(ctx: list[lin.Lin], cond: Any, st: _State) -> bool:
    return any(_feasible(ctx + t, st) is not None for t in lin.dnf(cond))


def _pieces(p: Any) -> list[tuple[Any, Any]]:
    a = p.args
    return [(a[k], a[k + 1]) for k in range(0, len(a), 2)]


def _resolve(e: Any, ctx: list[lin.Lin], st: _State) -> Any:
    """Replace every Piecewise whose branch the context determines, to a fixed point."""
    for _ in range(64):
        repl = {}
        for p in e.atoms(se.Piecewise):
            values = p.args[::2]
            if all(v == values[0] for v in values[1:]):
                repl[p] = values[0]
                continue
            for value, cond in _pieces(p):
                if _implied(ctx, cond, st):
                    repl[p] = value
                    break
                if _possible(ctx, cond, st):
                    break  # undetermined: keep it
        if not repl:
            return e
        e = e.xreplace(repl)
    return e


def _substitute(e: Any, ctx: list[lin.Lin]) -> Any:
    sub = {}
    for var, (co, c0) in lin.equality_substitution(lin.tighten(ctx)).items():
        expr = se.Rational(c0.numerator, c0.denominator)
        for k, v in co.items():
            expr += se.Rational(v.numerator, v.denominator) * se.Symbol(k)
        sub[se.Symbol(var)] = expr
    return e.subs(sub) if sub else e


def _split(e: Any, ctx: list[lin.Lin], st: _State, leaf_zero: Any, differ: Any) -> None:
    e = _resolve(e, ctx, st)
    pws = list(e.atoms(se.Piecewise))
    if not pws:
        st.leaves += 1
        if st.leaves > MAX_LEAVES:
            raise _GiveUp
        if leaf_zero(_substitute(e, ctx)):
            return
        pt = _feasible(ctx, st)
        if pt is not None:
            if differ(pt):
                st.counterexample = pt
                raise _GiveUp
            st.unproved.append(pt)
        return
    # The Piecewise with the most branches first: its cases usually determine the others.
    p = max(pws, key=lambda q: len(q.args))
    pieces = _pieces(p)
    for i, (value, cond) in enumerate(pieces):
        for ctx2 in _cases_of(ctx, cond, [c for _, c in pieces[:i]], st):
            _split(e.xreplace({p: value}), ctx2, st, leaf_zero, differ)


def _cases_of(ctx: list[lin.Lin], cond: Any, earlier: list[Any], st: _State) -> list[list[lin.Lin]]:
    """The feasible contexts where ``cond`` holds and no earlier condition does. An earlier
    condition that the context already excludes adds nothing (exclusive branches, such as
    first-maximum conditions, need no negation)."""
    contexts = [ctx + t for t in lin.dnf(cond)]
    contexts = [c for c in contexts if _feasible(c, st) is not None]
    for c_j in earlier:
        out = []
        for cx in contexts:
            if not _possible(cx, c_j, st):
                out.append(cx)
                continue
            for t in lin.dnf(c_j, negate=True):
                cx2 = cx + t
                if _feasible(cx2, st) is not None:
                    out.append(cx2)
        contexts = out
        if len(contexts) > 256:
            raise _GiveUp
    return contexts


@dataclass(frozen=True)
class CaseResult:
    """``proved``: every case is 0; else ``counterexample`` (a point) or ``unproved`` cases."""

    proved: bool
    leaves: int
    counterexample: dict[str, Fraction] | None = None
    unproved: tuple[dict[str, Fraction], ...] = ()


_RELATIONS = (se.StrictLessThan, se.LessThan, se.Equality, se.Unequality)

#: Changes of variables tried for one equality, at most.
MAX_CHANGES = 8


def _relations(e: Any) -> list[Any]:
    """The relations in the conditions of ``e``'s ``Piecewise`` atoms."""
    out: dict[Any, None] = {}
    for p in e.atoms(se.Piecewise):
        stack = list(p.args[1::2])
        while stack:
            c = stack.pop()
            if isinstance(c, _RELATIONS):
                out[c] = None
            elif type(c).__name__ in ("And", "Or", "Not", "Xor"):
                stack.extend(c.args)
    return list(out)


def _is_linear(d: Any) -> bool:
    try:
        lin.linearize(d)
    except lin.Nonlinear:
        return False
    return True


def _expanded_relations(e: Any) -> Any:
    """Every relation ``a < b`` of a condition written ``0 < expand(b - a)`` (the same
    relation): a change of variables then shows as the new symbol."""
    repl = {r: type(r)(se.Integer(0), se.expand(r.args[1] - r.args[0])) for r in _relations(e)}
    return e.xreplace(repl) if repl else e


@dataclass(frozen=True)
class _Change:
    """``var := value``, ``value`` in the variables after the change, ``new`` among them."""

    var: Any
    value: Any
    new: str


def linear_conditions(e: Any, names: list[str]) -> tuple[Any, list[str], list[_Change]] | None:
    """``e`` with conditions made linear by changes of variables: a relation of a polynomial
    ``d`` that is not linear, where ``d = c*u + r`` for a symbol ``u`` with a rational ``c != 0``
    and ``r`` free of ``u`` (a variance ``E[x^2] - E[x]^2`` with ``E[x^2]`` a symbol), is a
    relation of a new symbol ``w := d``: ``u := (w - r) / c`` everywhere. Such a change is a
    bijection of the real variables (``u`` is free and real), so ``e`` is 0 for every value of
    the old variables exactly when it is for every value of the new ones. ``u`` appears in no
    linear relation (which would become nonlinear). Returns the new expression, the new
    variable names and the changes (to map a point back, :func:`_point_back`); ``e`` as it is
    when every condition is linear; ``None`` when one is not and no change makes it linear."""
    changes: list[_Change] = []
    if not _relations(e):
        return e, names, changes
    e = _expanded_relations(e)
    for k in range(MAX_CHANGES + 1):
        diffs = [r.args[1] - r.args[0] for r in _relations(e)]
        nonlinear = [d for d in diffs if not _is_linear(d)]
        if not nonlinear:
            return e, names, changes
        if k == MAX_CHANGES:
            break
        fixed = set().union(*(d.free_symbols for d in diffs if _is_linear(d)))
        d = min(nonlinear, key=str)
        pick = None
        for u in sorted(d.free_symbols, key=lambda s: s.name):
            if u in fixed or u.name not in names:
                continue
            c = d.diff(u)
            if isinstance(c, se.Rational) and c != 0 and u not in se.expand(d - c * u).free_symbols:
                pick = (u, c)
                break
        if pick is None:
            break
        u, c = pick
        w = f"_cv{k}"
        while w in names:
            w += "_"
        value = se.expand((se.Symbol(w) - se.expand(d - c * u)) / c)
        e = _expanded_relations(e.subs({u: value}))
        names = [n for n in names if n != u.name] + [w]
        changes.append(_Change(u, value, w))
    return None


def _point_back(pt: dict[str, Fraction], changes: list[_Change]) -> dict[str, Fraction]:
    """A point of the new variables as a point of the old ones (the changes undone, last
    first)."""
    if not changes:
        return pt
    out = dict(pt)
    for ch in reversed(changes):
        sub = {se.Symbol(k): se.Rational(v.numerator, v.denominator) for k, v in out.items()}
        v = se.expand(ch.value.subs(sub))
        if not isinstance(v, se.Rational):  # a variable the point does not name: 0
            v = se.expand(v.subs({s: 0 for s in v.free_symbols}))
        out[ch.var.name] = Fraction(int(v.p), int(v.q))
    fresh = {ch.new for ch in changes}
    return {k: v for k, v in out.items() if k not in fresh}


def decide_cases(
    diff: Any,
    names: list[str],
    base: list[lin.Lin],
    leaf_zero: Any,
    differ: Any,
    seed: int = 0,
) -> CaseResult | None:
    """Case-split ``diff`` (see the module doc); ``None`` when conditions are out of reach.
    Where a condition is not linear, it is made linear by a change of variables if one exists
    (:func:`linear_conditions`; not under ``base`` constraints, which are on the original
    variables), and the points found are given back in the original variables."""
    e = first_max_pieces(diff)
    try:
        return _decide(e, names, base, leaf_zero, differ, seed, [])
    except lin.Nonlinear:
        pass
    made = linear_conditions(e, list(names)) if not base else None
    if made is None or not made[2]:
        return None
    try:
        return _decide(made[0], made[1], base, leaf_zero, differ, seed, made[2])
    except lin.Nonlinear:
        return None


def _decide(e: Any, names: list[str], base: list[lin.Lin], leaf_zero: Any, differ: Any,
            seed: int, changes: list[_Change]) -> CaseResult | None:  # fmt: skip
    st = _State(list(names), random.Random(seed))
    try:
        _split(e, list(base), st, leaf_zero, lambda pt: differ(_point_back(pt, changes)))
    except _GiveUp:
        if st.counterexample is not None:
            return CaseResult(False, st.leaves, _point_back(st.counterexample, changes))
        return None
    unproved = tuple(_point_back(pt, changes) for pt in st.unproved)
    return CaseResult(not st.unproved, st.leaves, None, unproved)
