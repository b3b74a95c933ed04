"""Window maxima in their three forms: a ``_MAXR`` whose values are determined, nested ``max``
(a compiled ``reduce_window``) and a first-max one-hot sum ``sum_j v_j [v_j first max]`` (a
``sym`` rule), all written as ``Max`` so that they meet; the first-max conditions of a totally
ordered set recognised (exactly one of them holds for any real values); finite max shifts of
exponentials split off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import symengine as se

from . import terms as T
from ._tregions import _sub

#: A window maximum ``_MAXR`` over at most this many values is written as ``Max`` of them when
#: they are determined (:func:`_as_maxima`).
MAXR_VALUES_MAX = 64


def _maxr_values(m: Any, unroll: int, facts: Mapping[Any, Any] | None = None) -> Any:
    """``_MAXR(body, k, lo, hi)`` as ``Max`` of its values, when every value is a finite term
    or ``-oo`` (a masked cell); else ``None``. ``facts`` (brackets with their values in the
    case at hand) decide the brackets a value gets once ``k`` is substituted (a padding
    border ``[n - 2 >= 0]`` on a symbolic size)."""
    body, k, lo, hi = m.args
    if not (isinstance(lo, se.Integer) and isinstance(hi, se.Integer)):
        return None
    if not 0 < int(hi) - int(lo) <= MAXR_VALUES_MAX:
        return None
    values = []
    for v in range(int(lo), int(hi)):
        val = T.normalize(body.xreplace({k: se.Integer(v)}), unroll=unroll)
        if facts and T.has_infinity(val):
            val = T.normalize(_sub(val, facts), unroll=unroll)
        if val == -se.oo:
            continue
        if T.has_infinity(val):
            return None  # a mask this case does not decide
        values.append(val)
    return se.Max(*values) if values else -se.oo


def _first_max_term(t: Any) -> tuple[Any, dict[Any, bool]] | None:
    """``(v, {u: strict})`` for a monomial ``v [u_1 (<|<=) v and ...]`` (the Piecewise
    ``((1, cond), (0, True))``), else ``None``."""
    factors = list(t.args) if isinstance(t, se.Mul) else [t]
    pws = [f for f in factors if isinstance(f, se.Piecewise)]
    if len(pws) != 1:
        return None
    pw = pws[0]
    if len(pw.args) != 4 or pw.args[0] != 1 or pw.args[2] != 0 or pw.args[3] != se.true:
        return None
    v = se.Mul(*[f for f in factors if f is not pw])
    if v.is_Number or T.has_infinity(v):
        return None
    others: dict[Any, bool] = {}
    for lit in T._literals(pw.args[1]):
        if not isinstance(lit, se.LessThan | se.StrictLessThan) or lit.args[1] != v:
            return None
        u = lit.args[0]
        if u in others or u == v or T.has_infinity(u):
            return None
        others[u] = isinstance(lit, se.StrictLessThan)
    return (v, others) if others else None


def _total_first_max(members: Mapping[Any, Mapping[Any, bool]]) -> bool:
    """Whether the conditions ``{v: {u: strict}}`` (``v`` is the first maximum: ``u < v`` for
    the strict ``u``, ``u <= v`` for the others) are the first-max conditions of the set ``S``
    of the ``v`` under a total order: each compares its ``v`` with every other element of
    ``S``, and "``u`` before ``v``" (strict in ``v``'s condition) holds for exactly one of
    ``u, v`` and ranks ``S`` (its counts are ``0, 1, ..., n - 1``: a transitive tournament).
    Then for any real values exactly one condition holds, the first maximum's: every element
    before it is smaller, every one after it at most as large, and any other element has the
    first maximum either after it and larger or before it and not smaller."""
    group = set(members)
    if len(group) < 2:
        return False
    before = {v: {u for u, strict in others.items() if strict} for v, others in members.items()}
    ok = all(set(others) == group - {v} for v, others in members.items()) and all(
        (u in before[v]) != (v in before[u]) for u in group for v in group if u != v
    )
    return ok and sorted(len(b) for b in before.values()) == list(range(len(group)))


def _first_max_condition(c: Any) -> tuple[Any, dict[Any, bool]] | None:
    """``(v, {u: strict})`` for a condition ``u_1 (<|<=) v and ...`` (one right side ``v``,
    finite terms), else ``None``."""
    lits = T._literals(c)
    if not isinstance(lits[0], se.LessThan | se.StrictLessThan):
        return None
    v = lits[0].args[1]
    if T.has_infinity(v):
        return None
    others: dict[Any, bool] = {}
    for lit in lits:
        if not isinstance(lit, se.LessThan | se.StrictLessThan) or lit.args[1] != v:
            return None
        u = lit.args[0]
        if u in others or u == v or T.has_infinity(u):
            return None
        others[u] = isinstance(lit, se.StrictLessThan)
    return v, others


def _first_max_family(conds: tuple) -> bool:
    """Whether some of ``conds`` are the complete first-max conditions of a set under a total
    order (:func:`_total_first_max`): then one of them holds for any real values, so ``conds``
    cover every value (the chain of a window's argmax with its last cell's condition; z3 may
    take seconds on 27 cells)."""
    groups: dict[frozenset, dict[Any, dict[Any, bool]]] = {}
    doubled: set[frozenset] = set()  # two conditions for one element: not such a family
    for c in conds:
        fm = _first_max_condition(c)
        if fm is None:
            continue
        v, others = fm
        group = frozenset([v, *others])
        members = groups.setdefault(group, {})
        if v in members:
            doubled.add(group)
        members[v] = others
    return any(
        group not in doubled and len(members) == len(group) and _total_first_max(members)
        for group, members in groups.items()
    )


def _one_hot_maxima(e: Any) -> Any:
    """``e`` (expanded) with each complete set of first-max terms summed into ``Max``:
    ``sum_{v in S} v [v is the first maximum of S]`` is ``Max(S)`` when every ``v`` in ``S``
    has one term, its condition compares it with every other element of ``S`` (``u < v`` for
    ``u`` before ``v``, ``u <= v`` after), and "before" is a total order (then exactly one
    condition holds, the first maximum's, for any real values)."""
    terms = list(e.args) if isinstance(e, se.Add) else [e]
    found: dict[frozenset, list[tuple[int, Any, dict[Any, bool]]]] = {}
    for i, t in enumerate(terms):
        fm = _first_max_term(t)
        if fm is not None:
            v, others = fm
            found.setdefault(frozenset([v, *others]), []).append((i, v, others))
    used: set[int] = set()
    maxima = []
    for group, members in found.items():
        if len(members) != len(group) or len({v for _, v, _ in members}) != len(group):
            continue
        if not _total_first_max({v: others for _, v, others in members}):
            continue  # not a total order: a tie may satisfy no condition, or two
        used.update(i for i, _, _ in members)
        maxima.append(se.Max(*group))
    if not maxima:
        return e
    return se.Add(*[t for i, t in enumerate(terms) if i not in used], *maxima)


def _as_maxima(e: Any, unroll: int, facts: Mapping[Any, Any] | None = None) -> Any:
    """``e`` with window maxima written as ``Max``: each ``_MAXR`` whose values are determined
    (:func:`_maxr_values`) and each complete first-max one-hot sum (:func:`_one_hot_maxima`),
    so that a maximum met as ``_MAXR`` (the reference), as nested ``max`` (a compiled
    ``reduce_window``) and as ``sum_j v_j [v_j first max]`` (a ``sym`` rule) meet."""
    repl = {}
    for f in T.fn_atoms(e):
        if T.name_of(f) == "_MAXR":
            m = _maxr_values(f, unroll, facts)
            if m is not None:
                repl[f] = m
    # a masked cell never wins: max(-oo, a, ...) = max(a, ...)
    for m in T.atoms_of(e, se.Max):
        if -se.oo in m.args and len(m.args) > 1:
            repl[m] = se.Max(*[a for a in m.args if a != -se.oo])
    if repl:
        e = e.xreplace(repl)
    return _one_hot_maxima(se.expand(e))


def _shifted(e: Any, unroll: int) -> Any:
    """A normal form with the finite max shifts of its exponentials split off
    (:func:`verify.terms.split_shifts`), normalised again (sums pull the shifts out)."""
    s = T.split_shifts(e)
    return e if s == e else T.normalize(s, unroll=unroll)


def _maxish(e: Any) -> bool:
    """Whether ``e`` holds a window maximum ``_MAXR`` or a Piecewise (a one-hot)."""
    return T.has_atom(e, se.Piecewise) or any(T.name_of(f) == "_MAXR" for f in T.fn_atoms(e))


__all__ = ["MAXR_VALUES_MAX"]
