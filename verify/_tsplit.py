"""The case splitter (step 3 of :mod:`verify._tdecide`): :class:`_Splitter` splits the index
space on the brackets of free indices (their feasible regions, :mod:`verify._tregions`) and on
floors of them (by value or by residue), narrows each case's index ranges (:func:`_narrowed`),
and decides each case by canonical forms, identified sums and reads, maxima and completed
chains, then the scalar procedure (:mod:`verify._tatoms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import symengine as se

from . import terms as T
from ._dims import sign as dims_sign
from ._tatoms import Atoms, _scalar
from ._tcanonical import canonical
from ._tchains import _complete_chains
from ._tidentify import _identify_reads, _identify_sums
from ._tmaxima import _as_maxima, _maxish
from ._tregions import (
    MAX_REGIONS,
    _bracket_residue,
    _fact_values,
    _floor_conditions,
    _floor_values,
    _index_atoms,
    _is_index_bracket,
    _nested,
    _regions_of,
    _residue_split,
    _sub,
    residue_class,
)
from ._ttables import _retabled
from .terms.smt import Z3
from .terms.smt import solver as smt_solver

#: Case splits deeper than this, or more cases than :data:`verify._tregions.MAX_REGIONS`, give up.
MAX_DEPTH = 6


def _narrowed(var: Any, lows: list[Any], highs: list[Any]) -> Any:
    """The range of the free index ``var`` narrowed to ``lows`` and ``highs`` (exclusive) as
    well: ``None`` (not narrower, empty, or not decided), its one value, or ``(offset, lo,
    hi)`` for ``offset + t`` with ``t`` a fresh index over ``[lo, hi)``. With symbolic bounds
    (polynomials in size symbols; :data:`verify.terms.UPPER` is ``var``'s own bound) the
    tightest is the one below (above) every other for every size, else ``None``; a symbolic
    lower bound is kept only where the width is a constant (``q = n - 2 + t``, ``t < 2``).
    The fresh index's range is exactly the region's (empty for the sizes where ``hi <= lo``:
    its facts then contradict, as the region's brackets do), or, where no size decides
    between two bounds, a range of constant width that holds the region's."""
    lo0, hi0 = T.RANGES[var]
    top = T.UPPER.get(var, None if hi0 is None else se.Integer(hi0))
    lo = _tightest_bound([se.Integer(lo0), *lows], larger=True)
    hi = _tightest_bound([h for h in (top, *highs) if h is not None], larger=False)
    if lo is None or (hi is None and (top is not None or highs)):
        # two bounds no size decides between: a lower and an upper one a constant apart still
        # bound the index (the others stay facts of the region, as brackets on the sizes)
        for low in (se.Integer(lo0), *lows):
            for high in (h for h in (top, *highs) if h is not None):
                w = se.expand(high - low)
                if isinstance(w, se.Integer) and w >= 1:
                    return low if w == 1 else (low, 0, int(w))
        return None
    if se.expand(lo - lo0) == 0 and (hi is None or (top is not None and se.expand(hi - top) == 0)):
        return None
    width = None if hi is None else se.expand(hi - lo)
    if width is not None and isinstance(width, se.Integer):
        if width <= 0:
            return None  # an empty region: the split's other cases decide
        if width == 1:
            return lo
        if not isinstance(lo, se.Integer):
            return (lo, 0, int(width))
    if not isinstance(lo, se.Integer):
        return None
    return (se.Integer(0), int(lo), None if hi is None else (int(hi) if isinstance(
        hi, se.Integer) else hi))  # fmt: skip


def _tightest_bound(bounds: list[Any], larger: bool) -> Any:
    """The largest (``larger``) or smallest of ``bounds`` for every size, or ``None``."""
    if not bounds:
        return None
    best = bounds[0]
    for b in bounds[1:]:
        s = dims_sign(se.expand(b - best))
        if s is None:
            return None
        if (s in ("+", "0+")) if larger else (s in ("-", "0-")):
            best = b
    return best


class _Splitter:
    """Case analysis over the free indices: brackets on them, floors of them (by value or by
    residue), each case decided by normal forms and the scalar procedure."""

    def __init__(self, allowed: list[Any], domains: Mapping[str, str], seed: int,
                 unroll: int = T.UNROLL_SHORT) -> None:  # fmt: skip
        self.unroll = unroll
        self.allowed = allowed
        self.domains = domains
        self.seed = seed
        self.cases = 0
        self.probabilistic = False
        #: A case split stopped at :data:`MAX_DEPTH`, :data:`verify._tregions.MAX_REGIONS` or an
        #: undecided region enumeration (rather than at a case that failed).
        self.limited = False

    def _equal(self, g: Any, x: Any, facts: list[tuple[Any, int]], scalar: bool = True
               ) -> bool:  # fmt: skip
        """``g == x`` (normal forms, not yet canonical) proved by canonical forms, identified
        sums, identified reads or (with ``scalar``) the scalar procedure."""
        ok, gi, xi = self._identified(g, x, facts)
        if ok:
            return True
        if _maxish(g) or _maxish(x):
            # a case fixes indices: the argmax chains and window maxima it determines meet now
            gc, xc = _complete_chains(g, x, self.unroll)
            if (gc, xc) != (g, x):
                ok, gi, xi = self._identified(gc, xc, facts)
                if ok:
                    return True
            known = _fact_values(facts)
            gm, xm = _as_maxima(gc, self.unroll, known), _as_maxima(xc, self.unroll, known)
            if (gm, xm) != (gc, xc) and self._identified(gm, xm, facts)[0]:
                return True
        if not scalar:
            return False
        # sympy's steps only on the unrolled pass: the first pass (sums kept) is the quick try
        d = _scalar(gi, xi, Atoms.empty(), self.domains, self.seed, use_sympy=self.unroll)
        if d is None:
            return False
        if d.method != "exact":
            self.probabilistic = True
        return True

    def _identified(self, g: Any, x: Any, facts: list[tuple[Any, int]]
                    ) -> tuple[bool, Any, Any]:  # fmt: skip
        """Whether normal forms ``g == x`` by canonical forms, identified sums or identified
        reads; with the two sides as compared last."""
        g, x = canonical(g), canonical(x)
        if g == x or se.expand(g - x) == 0:
            return True, g, x
        gi, xi = _identify_sums(g, x, set(self.allowed))
        if gi == xi or se.expand(gi - xi) == 0:
            return True, gi, xi
        gi, xi = _identify_reads(gi, xi, facts)
        return gi == xi or se.expand(gi - xi) == 0, gi, xi

    def prove(self, g: Any, x: Any, facts: list[tuple[Any, int]], depth: int
              ) -> tuple[bool, dict | None]:  # fmt: skip
        """(proved, a point of a case that was not) for ``g == x`` under ``facts`` (brackets
        with their values).

        Brackets on free indices are split on before the scalar procedure runs: each case is
        smaller (a padded cell's ``-oo`` or a masked term gone), and the scalar procedure on the
        unsplit Piecewise of index conditions is slow. When the split does not prove it, the
        scalar procedure still gets the unsplit pair."""
        T.tick()
        allowed = set(self.allowed)
        found = {f for side in (g, x) for f in T.fn_atoms(side)
                 if _is_index_bracket(f, allowed) and not _nested(f)}  # fmt: skip
        brackets = sorted(found, key=str)
        limit = depth >= MAX_DEPTH or self.cases > MAX_REGIONS
        # 0. brackets on floors of free indices (a reshape's quasi-affine indices): split an
        # index by its residue first, so that what z3 meets (regions, reads) is affine
        res = None if limit else _bracket_residue(brackets, allowed)
        if res is not None:
            ok, point = self._residue_first(g, x, facts, depth, res)
            if ok is not None:
                return ok, point
        elif self._equal(g, x, facts, scalar=not brackets):
            return True, None
        if limit:
            self.limited = True
            if brackets and self._equal(g, x, facts):
                return True, None
            return False, self._point(facts)
        # 1. brackets on free indices: enumerate their feasible values together
        if brackets:
            limited, self.limited = self.limited, False
            ok, point = self._by_brackets(g, x, facts, depth, brackets)
            if not ok and self.limited and self._equal(g, x, facts):
                ok, point = True, None  # the split stopped at a limit, not at a failed case
            self.limited = self.limited or limited
            return ok, point
        # 2. floors of free indices with few values: split by value
        floors = sorted({f for f in T.floor_atoms(g) | T.floor_atoms(x)
                         if _index_atoms(f) <= allowed}, key=str)  # fmt: skip
        for f in floors:
            conds = _floor_conditions(f)
            if conds is not None:
                return self._by_brackets(g, x, facts, depth, conds)
        # 3. floors with many values: split a free index by its residue
        for f in floors if self.unroll else ():
            res = _residue_split(f, allowed)
            if res is not None:
                return self._by_residue(g, x, facts, depth, *res)
        return False, self._point(facts)

    def _residue_first(self, g: Any, x: Any, facts: list[tuple[Any, int]], depth: int,
                       res: tuple[Any, int]) -> tuple[bool | None, dict | None]:  # fmt: skip
        """Step 0 of :meth:`prove`: identical canonical forms, else the residue split of
        ``res``; ``None`` when that split did not prove it (the caller goes on as without
        step 0: the brackets as they are), with ``self.limited`` as it was."""
        cg, cx = canonical(g), canonical(x)
        if cg == cx or se.expand(cg - cx) == 0:
            return True, None
        limited, cases = self.limited, self.cases
        ok, point = self._by_residue(g, x, facts, depth, *res)
        if ok or not self.unroll:
            return ok, point
        self.limited, self.cases = limited, cases
        if self._equal(g, x, facts, scalar=False):
            return True, None
        return None, None

    def _by_brackets(self, g: Any, x: Any, facts: list[tuple[Any, int]], depth: int,
                     brackets: list[Any]) -> tuple[bool, dict | None]:  # fmt: skip
        regions = _regions_of(brackets, facts)
        if regions is None:
            self.limited = True
            return False, self._point(facts)
        floors_gx = T.floor_atoms(g) | T.floor_atoms(x)
        for assign in regions:
            self.cases += 1
            if self.cases > MAX_REGIONS:
                self.limited = True
                return False, self._point(facts + list(assign.items()))
            repl = dict(assign)
            repl.update(_floor_values(floors_gx, assign))
            narrow = self._narrow(assign)
            narrow.update(self._fixed(g, x, facts, assign, narrow))
            gr = T.normalize(_sub(_sub(g, repl), narrow), unroll=self.unroll)
            xr = T.normalize(_sub(_sub(x, repl), narrow), unroll=self.unroll)
            if narrow:  # reads of tables at shifted indices may be in range now
                gr, xr = _retabled(gr, self.unroll), _retabled(xr, self.unroll)
            fr = [(_sub(b, narrow), v) for b, v in facts]
            fr += [(_sub(b, narrow), int(v)) for b, v in assign.items()]
            ok, point = self.prove(gr, xr, fr, depth + 1)
            if not ok:
                return False, self._unnarrow(point, narrow)
        return True, None

    def _narrow(self, assign: Mapping[Any, Any]) -> dict[Any, Any]:
        """Free indices whose range the assigned brackets narrow: a value when one is left,
        else a fresh index over the narrower range. A bound may be symbolic, a polynomial in
        size symbols (``q <= n - 2`` from ``[n - 2 - q >= 0]``): see :func:`_narrowed`."""
        lows: dict[Any, list[Any]] = {}
        highs: dict[Any, list[Any]] = {}  # exclusive
        for b, v in assign.items():
            form = T._integer_form(b.args[0])
            if form is None:
                continue
            index = [u for u in form[0] if u not in T.SIZES]
            if len(index) != 1 or not all(isinstance(u, se.Symbol) for u in form[0]):
                continue
            (var,) = index
            a = form[0][var]
            if var not in self.allowed or a not in (1, -1) or var not in T.RANGES:
                continue
            c = T._assemble({u: k for u, k in form[0].items() if u != var}, form[1])
            is_ge, holds = T.name_of(b) == "_GE", int(v) == 1
            lo, hi = lows.setdefault(var, []), highs.setdefault(var, [])
            if not is_ge:
                if holds:  # a v + c == 0
                    lo.append(se.expand(-c * a))
                    hi.append(se.expand(-c * a + 1))
            elif a == 1:  # v + c >= 0 (or < 0)
                (lo if holds else hi).append(se.expand(-c))
            elif holds:  # -v + c >= 0
                hi.append(se.expand(c + 1))
            else:
                lo.append(se.expand(c + 1))
        out: dict[Any, Any] = {}
        for var in lows:
            value = _narrowed(var, lows[var], highs[var])
            if value is None:
                continue
            if isinstance(value, tuple):  # a fresh index over [lo, hi), plus an offset
                offset, lo, hi = value
                t = T.fresh("_r", lo, hi, bound=False)
                self.allowed.append(t)
                value = se.expand(offset + t)
            out[var] = value
        return out

    def _fixed(self, g: Any, x: Any, facts: list[tuple[Any, int]], assign: Mapping[Any, Any],
               narrow: Mapping[Any, Any]) -> dict[Any, Any]:  # fmt: skip
        """Free indices that the region's brackets fix to one value (z3)."""
        present = (g.free_symbols | x.free_symbols) & set(self.allowed)
        todo = [v for v in present if v not in narrow and isinstance(v, se.Symbol)]
        if not todo:
            return {}
        try:
            z = Z3()
            conds = [z.bracket(b) if int(v) else z.z3.Not(z.bracket(b))
                     for b, v in [*facts, *assign.items()]]  # fmt: skip
            zv = {v: z.var(v) for v in todo}
            solver = smt_solver(5)
            solver.add(*z.facts, *conds)
            if solver.check() != z.z3.sat:
                return {}
            m = solver.model()
            out = {}
            for v, t in zv.items():
                val = m.eval(t, model_completion=True).as_long()
                if solver.check(t != val) == z.z3.unsat:
                    out[v] = se.Integer(val)
            return out
        except (T.TermError, Exception):
            return {}

    @staticmethod
    def _unnarrow(point: dict | None, narrow: Mapping[Any, Any]) -> dict | None:
        if point is None:
            return None
        out = dict(point)
        for var, val in narrow.items():
            if isinstance(val, se.Integer):
                out[var] = int(val)
            elif val in out:
                out[var] = out[val]
        return out

    def _by_residue(self, g: Any, x: Any, facts: list[tuple[Any, int]], depth: int, q: Any,
                    d: int) -> tuple[bool, dict | None]:  # fmt: skip
        lo, hi = T.RANGES[q]
        if hi is None:
            return False, self._point(facts)
        for r in range(d):
            first, n = residue_class(lo, hi, d, r)
            if n == 0:
                continue
            self.cases += 1
            t = T.fresh("_t", 0, n, bound=False)
            # one value left: the index is that value (no fresh index of range 1)
            value = se.Integer(first) + d * t if n > 1 else se.Integer(first)
            repl = {q: value}
            gr = T.normalize(_sub(g, repl), unroll=self.unroll)
            xr = T.normalize(_sub(x, repl), unroll=self.unroll)
            fr = [(_sub(b, repl), v) for b, v in facts]
            if n > 1:
                self.allowed.append(t)
            ok, point = self.prove(gr, xr, fr, depth + 1)
            if not ok:
                if point is not None and t.name in {s.name for s in point}:
                    tv = next(v for s, v in point.items() if s.name == t.name)
                    point = {**point, q: first + d * tv}
                return False, point
        return True, None

    def _point(self, facts: list[tuple[Any, int]]) -> dict | None:
        """A point satisfying the facts (z3), for a counterexample search."""
        try:
            z = Z3()
            conds = [z.bracket(b) if v else z.z3.Not(z.bracket(b)) for b, v in facts]
            for s in self.allowed:
                if isinstance(s, se.Symbol):
                    z.var(s)
            solver = smt_solver(5)
            solver.add(*z.facts, *conds)
            if solver.check() != z.z3.sat:
                return None
            m = solver.model()
            return {s: m.eval(v, model_completion=True).as_long() for s, v in z.vars.items()}
        except Exception:
            return None


__all__ = ["MAX_DEPTH"]
