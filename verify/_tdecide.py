"""Deciding ``got == expected`` for tensor terms, for every element at once.

Both sides are terms of the same free element indices (:mod:`verify.terms`). The procedure:

1. **Normal form.** Both sides are normalised (Kronecker deltas eliminated, sums split over
   their terms, constant factors taken out, short constant ranges unrolled) and every sum is
   renamed canonically (its bound variables ordered by where they occur and renamed by
   level), so that sums equal up to the names and order of their variables are identical.
   Identical normal forms, or a difference that symengine expands to 0: *exact*.
2. **Atoms as symbols.** Every read, sum and bracket becomes a symbol (the same atom, the same
   symbol) and the scalar decision procedure (:func:`verify._decide.decide_equal`) decides the
   equality of the two sides as functions of independent symbols. That is sound: an identity
   in independent symbols holds whatever values the atoms take. Only its ``exact`` proofs
   are taken; anything else goes on.
3. **Regions.** The brackets on the free indices and index inputs (padding borders, masks,
   index ranges) split the index space into regions, each decided once: an integer-arithmetic
   solver (z3) finds which combinations of brackets are feasible, the brackets become 0 or 1,
   and step 2 runs in each region. Sums whose bodies agree but whose domains are written
   differently are identified when z3 proves their domains equal.
4. **Counterexamples.** When a region is not proved, concrete elements are tried (a point of
   the region found by z3, the corners of the index space, the positions where a table is
   nonzero, random ones; a runtime index vector read in the terms gets a few concrete vectors
   per element, :mod:`verify._tnatvec`): each is expanded to its element-level expression and
   decided by the element-level procedure, which gives an exact counterexample (element index
   and input values) when the sides differ there. An element too large to write out (more than
   :data:`verify._tcounterexample.EXPAND_MAX` nodes) is not expanded: both terms are evaluated
   over every element at once in certified interval arithmetic (:mod:`verify._tnumeric`), and
   an element whose enclosures are disjoint is the counterexample. When no element differs, the
   check is undecided at tensor level and the caller falls back to the element-wise method or
   says "not verified".

The steps live in their own modules, below this one: canonical forms in :mod:`verify._tcanonical`,
atoms as symbols in :mod:`verify._tatoms`, concrete tables in :mod:`verify._ttables`, the case
splitter in :mod:`verify._tsplit` (over :mod:`verify._tregions`, :mod:`verify._tidentify`,
:mod:`verify._tchains` and :mod:`verify._tmaxima`), the counterexample search in
:mod:`verify._tcounterexample`; the outcome is a :class:`verify._toutcome.TDecision`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import symengine as se

from . import terms as T
from ._tcanonical import canonical
from ._tchains import _complete_chains
from ._tcounterexample import _search
from ._tmaxima import _shifted
from ._toutcome import TDecision
from ._tsplit import _Splitter
from ._tsummands import MAX_DEPTH as MAX_SUMMAND_DEPTH
from ._tsummands import summands
from ._ttables import _tables


def decide_tensor(
    got: Any,
    expected: Any,
    free_all: Sequence[Any],
    *,
    domains: Mapping[str, str] | None = None,
    nat_symbols: Sequence[Any] = (),
    seed: int = 0,
    counterexamples: bool = True,
) -> TDecision:
    """Decide ``got == expected`` for every value of the free indices ``free_all`` (and of the
    index-input symbols ``nat_symbols``). Softmax atoms (``verify/_tsoftmax.py``) are read as
    reads first; what that does not prove is decided with them written out."""
    if T.has_derived(got) or T.has_derived(expected):
        found = None
        for unrolls in ((T.UNROLL_NONE,), (T.UNROLL_SHORT,)):
            d = _decide(got, expected, free_all, domains, nat_symbols, seed, False, unrolls)
            if d.equal is True:
                return replace(d, how=f"{d.how}, softmax rows as atoms")
            if counterexamples and found is None:
                # concrete elements evaluate the softmax itself: search them before the
                # unrolled pass (slow where it fails)
                found = _search(got, expected, free_all, nat_symbols, None, dict(domains or {}),
                                seed)  # fmt: skip
                if found.equal is False:
                    return found
        got, expected = T.expand_derived(got), T.expand_derived(expected)
        d = _decide(got, expected, free_all, domains, nat_symbols, seed, False)
        return d if d.equal is True or found is None else found
    return _decide(got, expected, free_all, domains, nat_symbols, seed, counterexamples)


def _decide(got: Any, expected: Any, free_all: Sequence[Any], domains: Mapping[str, str] | None,
            nat_symbols: Sequence[Any], seed: int, counterexamples: bool,
            unrolls: tuple[int, ...] = (T.UNROLL_NONE, T.UNROLL_SHORT),
            depth: int = 0) -> TDecision:  # fmt: skip
    domains = dict(domains or {})
    free = [v for v in free_all if isinstance(v, se.Symbol)]
    point = None
    if counterexamples and _kinked(got) and _kinked(expected):
        # both sides branch on values (a maximum's ties): a quick look at a few elements and
        # points, tie points among them, before a proof attempt that may spend the budget
        quick = _search(got, expected, free_all, nat_symbols, None, domains, seed,
                        probe_only=True)  # fmt: skip
        if quick.equal is False:
            return quick
    # sums kept as sums first (cheap when both sides contract alike), then short ranges unrolled
    # (a window written as a sum on one side and term by term on the other), then, where a sum
    # ranges over UNROLL_MAX + 1 to UNROLL_WIDE_MAX values (an 11x11 kernel), those too
    levels = list(unrolls)
    if True in levels and (T.wide_sums(got) or T.wide_sums(expected)):
        levels.append(T.UNROLL_WIDE)
    for unroll, shifted in itertools.product(levels, (True, False)):
        T.tick()
        g = _tables(T.normalize(got, unroll=unroll))
        x = _tables(T.normalize(expected, unroll=unroll))
        g, x = _complete_chains(g, x, unroll)
        if shifted:
            gs, xs = _shifted(g, unroll), _shifted(x, unroll)
            if gs == g and xs == x:
                continue  # no shift to split off: the plain pass below
            g, x = gs, xs
        wide = (f", ranges of up to {T.UNROLL_WIDE_MAX} unrolled"
                if unroll == T.UNROLL_WIDE else "")  # fmt: skip
        cg, cx = canonical(g), canonical(x)
        if cg == cx:
            return TDecision(True, "identical normal forms" + wide)
        if se.expand(cg - cx) == 0:
            return TDecision(True, "normal forms expand to the same" + wide)
        split = _Splitter(list(free) + list(nat_symbols), domains, seed, unroll)
        ok, point = split.prove(g, x, [], 0)
        if ok:
            how = "atoms as symbols" if split.cases == 0 else f"{split.cases} index cases"
            how += wide or (", short ranges unrolled" if unroll else "")
            method = "probabilistic" if split.probabilistic else "exact"
            return TDecision(True, how, method=method)
        merged = _by_summands(g, x, free_all, domains, nat_symbols, seed, unroll, depth)
        if merged is not None:
            return merged
    if not counterexamples:
        return TDecision(None, "not proved at tensor level")
    return _search(got, expected, free_all, nat_symbols, point, domains, seed)


def _by_summands(g: Any, x: Any, free_all: Sequence[Any], domains: Mapping[str, str],
                 nat_symbols: Sequence[Any], seed: int, unroll: int,
                 depth: int) -> TDecision | None:  # fmt: skip
    """``g == x`` decided by the summands of its sums over one range (:mod:`verify._tsummands`):
    each group's summand proved equal at a free index over the range, and the rest equal;
    ``None`` when that does not apply or does not prove it (no counterexample from here)."""
    if depth >= MAX_SUMMAND_DEPTH:
        return None
    parts = summands(g, x)
    if parts is None:
        return None
    groups, g_rest, x_rest = parts
    hows = []
    for gs, xs, q in groups:
        d = _decide(gs, xs, [*free_all, q], domains, nat_symbols, seed, False, (unroll,),
                    depth + 1)  # fmt: skip
        if d.equal is not True or d.method != "exact":
            return None
        hows.append(d.how)
    if g_rest != x_rest and se.expand(g_rest - x_rest) != 0:
        d = _decide(g_rest, x_rest, free_all, domains, nat_symbols, seed, False, (unroll,),
                    depth + 1)  # fmt: skip
        if d.equal is not True or d.method != "exact":
            return None
    return TDecision(True, f"sums by their summands over {len(groups)} range(s) "
                           f"({'; '.join(sorted(set(hows)))})")  # fmt: skip


def _kinked(e: Any) -> bool:
    """Whether ``e`` branches on a relation of values: it holds a Piecewise (index conditions
    are brackets, not Piecewise)."""
    return T.has_atom(e, se.Piecewise)


__all__ = ["decide_tensor"]
