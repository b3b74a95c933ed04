"""Chains of conditions completed: the final ``True`` branch of a ``Piecewise`` chain written as
a condition met elsewhere in the terms where the earlier conditions and it cover every value
(refuted quickly at seeded rational points, proved by the first-max families of
:mod:`verify._tmaxima`, else by z3 over the reals), so that a compiled argmax chain meets the
reference's one-hot. Memoised: the results are functions of the terms alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import symengine as se

from . import terms as T
from ._tmaxima import _first_max_family
from .terms.smt import solver as smt_solver


def _piecewises(*es: Any) -> set:
    """Every ``Piecewise`` in ``es`` (inside sums and reads too)."""
    out: set = set()
    seen: set = set()
    stack = list(es)
    while stack:
        e = stack.pop()
        if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number) or e in seen:
            continue
        seen.add(e)
        if isinstance(e, se.Piecewise):
            out.add(e)
        stack.extend(e.args)
    return out


class _Reals:
    """Order conditions as z3 formulas over the reals, every non-numeric subterm (a read, a
    product of reads) an independent real unknown: a formula valid so is valid whatever
    values those subterms take. ``None`` for anything else (an infinity, a non-order
    relation)."""

    def __init__(self) -> None:
        import z3

        self.z3 = z3
        self.atoms: dict[Any, Any] = {}

    def term(self, e: Any) -> Any:
        z3 = self.z3
        if isinstance(e, se.Integer | se.Rational):
            return z3.RealVal(str(e))
        if isinstance(e, se.Number) or e in (se.oo, -se.oo, se.zoo, se.nan):
            return None
        if isinstance(e, se.Add):
            args = [self.term(a) for a in e.args]
            return None if any(a is None for a in args) else z3.Sum(*args)
        if isinstance(e, se.Mul) and isinstance(e.args[0], se.Integer | se.Rational):
            rest = self.term(se.Mul(*e.args[1:]))
            return None if rest is None else z3.RealVal(str(e.args[0])) * rest
        if T.has_infinity(e):
            return None
        v = self.atoms.get(e)
        if v is None:
            v = self.atoms[e] = z3.Real(f"a{len(self.atoms)}")
        return v

    def cond(self, c: Any) -> Any:
        z3 = self.z3
        if c == se.true:
            return z3.BoolVal(True)
        if isinstance(c, se.And | se.Or):
            args = [self.cond(a) for a in c.args]
            if any(a is None for a in args):
                return None
            return z3.And(*args) if isinstance(c, se.And) else z3.Or(*args)
        if isinstance(c, se.LessThan | se.StrictLessThan | se.Equality):
            a, b = (self.term(x) for x in c.args)
            if a is None or b is None:
                return None
            if isinstance(c, se.LessThan):
                return a <= b
            return a < b if isinstance(c, se.StrictLessThan) else a == b
        return None


#: Memo of :func:`_covers`: (earlier conditions, candidate) -> proved. A pure function of the
#: conditions, so the memo is exact.
_COVERS: dict[tuple, bool] = {}
#: Memo of :func:`_complete_chains`: (got, expected, unroll) -> the completed pair. The result
#: is a function of the terms alone (normal forms are memoised on the term the same way).
_CHAINS: dict[tuple, tuple[Any, Any]] = {}
#: The memos above are cleared past this many entries (memory; a miss only recomputes).
CHAIN_MEMO_MAX = 100000


def _memoised(table: dict[Any, Any], key: Any, compute: Callable[[Any], Any]) -> Any:
    """``compute(key)``, once per key of ``table`` (``None`` results kept too)."""
    if key not in table:
        table[key] = compute(key)
    return table[key]


class _RealPoint:
    """The conditions of :class:`_Reals` evaluated exactly (rationals) at one point: each
    unknown of :class:`_Reals` (a non-numeric subterm) at a value drawn from a seeded generator
    the first time it is met, then fixed. ``None`` where :class:`_Reals` has no formula. Any
    such assignment is a point of the unknowns, so a point is kept across queries (values of
    terms and conditions memoised)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.values: dict[Any, Fraction | None] = {}
        self.truths: dict[Any, bool | None] = {}

    def term(self, e: Any) -> Fraction | None:
        return _memoised(self.values, e, self._term)

    def _term(self, e: Any) -> Fraction | None:
        if isinstance(e, se.Integer | se.Rational):
            return Fraction(str(e))
        if isinstance(e, se.Number) or e in (se.oo, -se.oo, se.zoo, se.nan):
            return None
        if isinstance(e, se.Add):
            args = [self.term(a) for a in e.args]
            return None if any(a is None for a in args) else sum(args, Fraction(0))  # type: ignore[arg-type]
        if isinstance(e, se.Mul) and isinstance(e.args[0], se.Integer | se.Rational):
            rest = self.term(se.Mul(*e.args[1:]))
            return None if rest is None else Fraction(str(e.args[0])) * rest
        if T.has_infinity(e):
            return None
        return Fraction(self.rng.randrange(-64, 64), 1 + self.rng.randrange(4))  # an unknown

    def cond(self, c: Any) -> bool | None:
        return _memoised(self.truths, c, self._cond)

    def _cond(self, c: Any) -> bool | None:
        if c == se.true:
            return True
        if isinstance(c, se.And | se.Or):
            args = [self.cond(a) for a in c.args]
            if any(a is None for a in args):
                return None
            return all(args) if isinstance(c, se.And) else any(args)
        if isinstance(c, se.LessThan | se.StrictLessThan | se.Equality):
            a, b = (self.term(x) for x in c.args)
            if a is None or b is None:
                return None
            if isinstance(c, se.LessThan):
                return a <= b
            return a < b if isinstance(c, se.StrictLessThan) else a == b
        return None


#: Points tried by :func:`_uncovered_at_a_point` before z3 is asked.
COVER_POINTS = 4
#: The points (:class:`_RealPoint`), made again when they hold more than
#: :data:`CHAIN_MEMO_MAX` values.
_POINTS: list[_RealPoint] = []


def _uncovered_at_a_point(conds: tuple) -> bool:
    """Whether a point of the unknowns of :class:`_Reals` makes every condition of ``conds``
    false (exact rationals): a witness that they do not cover every value, so z3 would find
    the negation of their disjunction satisfiable. A quick refutation only: ``False`` proves
    nothing (z3 decides)."""
    if not _POINTS or sum(len(p.values) + len(p.truths) for p in _POINTS) > CHAIN_MEMO_MAX:
        _POINTS[:] = [_RealPoint(seed) for seed in range(COVER_POINTS)]
    for at in _POINTS:
        values = [at.cond(x) for x in conds]
        if any(v is None for v in values):
            return False
        if not any(values):
            return True
    return False


def _covers(conds: tuple, c: Any) -> bool:
    """Whether ``c_1 or ... or c_n or c`` holds for all reals (z3, exact; a point where none
    holds answers no first, and the first-max conditions of a totally ordered set answer yes:
    :func:`verify._tmaxima._first_max_family`)."""
    if _uncovered_at_a_point((*conds, c)):
        return False
    if _first_max_family((*conds, c)):
        return True
    r = _Reals()
    zs = [r.cond(x) for x in (*conds, c)]
    if any(z is None for z in zs):
        return False
    solver = smt_solver(5)
    solver.add(r.z3.Not(r.z3.Or(*zs)))
    return bool(solver.check() == r.z3.unsat)


def _covers_memo(prior: tuple, c: Any) -> bool:
    """:func:`_covers`, memoised: the conditions of one window's chains recur in every case of
    a split and in both passes."""
    key = (prior, c)
    hit = _COVERS.get(key)
    if hit is None:
        hit = _covers(prior, c)
        if len(_COVERS) > CHAIN_MEMO_MAX:
            _COVERS.clear()
        _COVERS[key] = hit
    return hit


def _negations(c: Any) -> frozenset:
    """The negations of the order conjuncts of ``c`` (:func:`verify.terms._negated`): ``c``
    and ``d`` are disjoint in the sense of :func:`verify.terms.disjoint` exactly when this
    meets the conjuncts of ``d``."""
    return frozenset(n for n in map(T._negated, T._literals(c)) if n is not None)


def _complete_chains(g: Any, x: Any, unroll: int) -> tuple[Any, Any]:
    """Both sides with the final ``True`` branch of each ``Piecewise`` chain written as a
    condition met elsewhere in them, where that is exact: ``Piecewise(..., (v, True))`` is
    ``Piecewise(..., (v, c), (0, True))`` when the earlier conditions and ``c`` cover every
    value (z3 over the reals). A compiled argmax chain ``(0, c_0), ..., (0, c_4), (1, True)``
    then meets the reference's one-hot ``(1, c_5), (0, True)`` (normal forms drop the branches
    disjoint from ``c_5``). Candidates are the conditions over the chain's own symbols that
    are syntactically disjoint from every earlier one (:func:`verify.terms.disjoint`), so the
    chain does simplify. Memoised on the pair (the same normal forms meet again in the
    shifted and plain passes and in the first case of a split)."""
    key = (g, x, unroll)
    hit = _CHAINS.get(key)
    if hit is None:
        hit = _completed_chains(g, x, unroll)
        if len(_CHAINS) > CHAIN_MEMO_MAX:
            _CHAINS.clear()
        _CHAINS[key] = hit
    return hit


def _completed_chains(g: Any, x: Any, unroll: int) -> tuple[Any, Any]:
    """:func:`_complete_chains`, not memoised."""
    pws = _piecewises(g, x)
    if not pws:
        return g, x
    conds = sorted({p.args[i] for p in pws for i in range(1, len(p.args), 2)} - {se.true},
                   key=str)  # fmt: skip
    scopes = {c: c.free_symbols for c in conds}
    negations = {c: _negations(c) for c in conds}
    literals = {c: frozenset(T._literals(c)) for c in conds}
    repl: dict[Any, Any] = {}
    for p in pws:
        pairs = [(p.args[i], p.args[i + 1]) for i in range(0, len(p.args), 2)]
        if len(pairs) < 2 or pairs[-1][1] != se.true:
            continue
        prior = tuple(c for _, c in pairs[:-1])
        prior_literals = [literals.get(d) or frozenset(T._literals(d)) for d in prior]
        scope = p.free_symbols
        for c in conds:
            if c in prior or not scopes[c] <= scope:
                continue  # (a condition from another sum's body reads its bound variables)
            if not all(negations[c] & lits for lits in prior_literals):
                continue  # not disjoint from an earlier condition: the chain would not shrink
            if _covers_memo(prior, c):
                repl[p] = se.Piecewise(*pairs[:-1], (pairs[-1][0], c), (T.ZERO, True))
                break
    if not repl:
        return g, x
    return (T.normalize(g.xreplace(repl), unroll=unroll),
            T.normalize(x.xreplace(repl), unroll=unroll))  # fmt: skip


__all__ = ["CHAIN_MEMO_MAX", "COVER_POINTS"]
