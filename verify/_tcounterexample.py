"""The counterexample search (step 4 of :mod:`verify._tdecide`): concrete elements (a point of
an undecided region, positions where a table is unusual, corners, the middle, random ones; a
few concrete runtime index vectors per element, :mod:`verify._tnatvec`) written out and decided
by the element-level procedure, or, where an element is too large to write out
(:data:`EXPAND_MAX`), both terms evaluated over every element in certified interval arithmetic
(:mod:`verify._tnumeric`).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import symengine as se

from . import _tnatvec, _tnumeric
from . import terms as T
from ._decide import Decision, decide_memo
from ._toutcome import TDecision

#: Concrete elements tried for a counterexample.
MAX_POINTS = 24

#: Of those, the elements the quick look before a proof attempt probes (``probe_only``): the
#: first ones (an undecided region's point, unusual table positions, corners), each written
#: out in full; the search after a failed proof probes them all.
QUICK_POINTS = 8


def _search(
    got: Any,
    expected: Any,
    free: Sequence[Any],
    nat_symbols: Sequence[Any],
    region_point: dict | None,
    domains: Mapping[str, str],
    seed: int,
    probe_only: bool = False,
) -> TDecision:
    """With ``probe_only``, the first :data:`QUICK_POINTS` elements are only probed at a few
    points (the quick look before a proof attempt, :func:`verify._tdecide.decide_tensor`)."""
    free_all = list(free)
    free = [v for v in free if isinstance(v, se.Symbol)]
    rng = random.Random(seed)
    points = _candidate_points(got, expected, free, nat_symbols, region_point, rng)
    if probe_only:
        points = points[:QUICK_POINTS]
    vectors = _tnatvec.nat_vectors(got, expected)
    if vectors:
        points = _tnatvec.elements(points)
    big = False
    pairs: list[tuple] = []  # (values, index vectors, got, expected) written out so far

    def written_out() -> Any:
        """The elements written out one by one, as the first pass asks for them (a large sum
        written out at 24 elements costs seconds; the first one often refutes)."""
        nonlocal big
        for values in points:
            if expanded_size(got, values) + expanded_size(expected, values) > EXPAND_MAX:
                big = True  # too large to write out: certified numbers below
                return
            # runtime index vectors read in the terms get concrete values too (a few each)
            for nat in (_tnatvec.assignments(values, vectors, rng, (got, expected))
                        if vectors else [{}]):  # fmt: skip
                try:
                    ge = T.concretize(T.normalize(got), values, nat)
                    xe = T.concretize(T.normalize(expected), values, nat)
                except T.TermError:
                    continue
                pairs.append((values, nat, ge, xe))
                yield pairs[-1]

    # every element probed at random points first (cheap), then decided in full (a proof
    # attempt on one large true element must not keep a false one from being looked at)
    for probing in (True,) if probe_only else (True, False):
        for values, nat, ge, xe in written_out() if probing else pairs:
            d = decide_memo(ge, xe, dict(domains_for_elements(ge, xe, domains)), seed,
                            probe_only=probing)  # fmt: skip
            if d.equal is False:
                element = tuple(
                    int(values[v]) if isinstance(v, se.Symbol) else int(v) for v in free_all
                )
                scalars = {s.name: int(values[s]) for s in nat_symbols if s in values}
                return TDecision(False, "counterexample at a concrete element", element, d,
                                 scalars, method=d.method,
                                 inputs=_tnatvec.shown(nat, vectors) or None)  # fmt: skip
    if probe_only:
        return TDecision(None, "no counterexample at the probed points")
    if not nat_symbols:
        m = _tnumeric.find_mismatch(got, expected, free, domains, points, seed)
        if m is not None:
            at = dict(zip(free, m.element, strict=True))
            element = tuple(at[v] if isinstance(v, se.Symbol) else int(v) for v in free_all)
            shown = {"got": m.show(m.got), "expected": m.show(m.expected)}
            d = Decision(False, "exact", "certified enclosures disjoint", evidence=m.evidence,
                         **shown)  # fmt: skip
            return TDecision(False, "counterexample at a concrete element (interval arithmetic)",
                             element, d, {}, method="exact", inputs=m.inputs)  # fmt: skip
    how = "written out" if not big else "too large to write out; interval arithmetic"
    return TDecision(None, f"not proved at tensor level; no counterexample among {len(points)} "
                           f"concrete elements ({how})")  # fmt: skip


#: An element whose written-out expression would have more nodes than this is not expanded
#: (:func:`expanded_size`); the search evaluates it in certified interval arithmetic instead.
EXPAND_MAX = 200_000


def expanded_size(e: Any, values: Mapping[Any, int]) -> int:
    """An upper estimate of the size of ``e``'s element-level expression (sums expanded)."""
    memo: dict[Any, int] = {}
    env = {k: se.Integer(int(v)) for k, v in values.items()}

    def go(x: Any) -> int:
        if not isinstance(x, se.Basic) or not x.args:
            return 1
        hit = memo.get(x)
        if hit is not None:
            return hit
        n = T.name_of(x)
        if n == "_SUM":
            body, k = x.args
            try:
                lo, hi = T._concrete_range(k, body, env, {})
            except T.TermError:
                return EXPAND_MAX + 1
            out = max(hi - lo + 1, 0) * go(body)
        elif n == "_MAXR":
            body, k, lo, hi = x.args
            out = max(int(hi) - int(lo), 0) * go(body)
        elif n is not None and n in T.DERIVED:
            d = T.DERIVED[n]
            out = getattr(d, "length", 1) * (go(d.body) + 2)
        else:
            out = 1 + sum(go(a) for a in x.args)
        out = min(out, EXPAND_MAX + 1)
        memo[x] = out
        return out

    return go(e)


def domains_for_elements(ge: Any, xe: Any, domains: Mapping[str, str]) -> dict[str, str]:
    """Element symbols ``x[1,2]`` take the domain of their leaf ``x``."""
    out = {}
    for s in ge.free_symbols | xe.free_symbols:
        base = s.name.split("[", 1)[0]
        if base in domains:
            out[s.name] = domains[base]
    return out


def _candidate_points(
    got: Any,
    expected: Any,
    free: Sequence[Any],
    nat_symbols: Sequence[Any],
    region_point: dict | None,
    rng: random.Random,
) -> list[dict]:
    syms = list(free) + list(nat_symbols)
    ranges = []
    for s in syms:
        lo, hi = T.RANGES[s]
        ranges.append((lo, hi if hi is not None else lo + 2**31 - 1))
    out: list[dict] = []

    def add(vals: Sequence[int]) -> None:
        d = {s: int(v) for s, v in zip(syms, vals, strict=True)}
        if all(lo <= d[s] < hi for s, (lo, hi) in zip(syms, ranges, strict=True)) and d not in out:
            out.append(d)

    if region_point is not None:
        add([region_point.get(s, ranges[i][0]) for i, s in enumerate(syms)])
    # table positions: where a table read at the free indices is nonzero / unusual
    for f in T.fn_atoms(got) | T.fn_atoms(expected):
        if not T.is_table(f) or len(out) > MAX_POINTS // 2:
            continue
        table = T.TABLES[T.name_of(f)]
        args = list(f.args)
        if all(a in syms or isinstance(a, se.Integer) for a in args):
            flat = table.reshape(-1) if table.size else table
            if not flat.size:
                continue
            common = np.bincount(np.unique(flat, return_inverse=True)[1].reshape(-1)).argmax()
            values = np.unique(flat)
            rare = np.argwhere(table != values[common])[:4]
            for pos in rare:
                vals = [ranges[i][0] for i in range(len(syms))]
                ok = True
                for a, p in zip(args, pos, strict=True):
                    if isinstance(a, se.Integer):
                        ok = ok and int(a) == int(p)
                    else:
                        vals[syms.index(a)] = int(p)
                if ok:
                    add(vals)
    corners = [[lo, hi - 1] for lo, hi in ranges]
    for combo in itertools.islice(itertools.product(*corners), 8):
        add(combo)
    add([(lo + hi - 1) // 2 for lo, hi in ranges])
    while len(out) < MAX_POINTS:
        before = len(out)
        add([rng.randrange(lo, hi) for lo, hi in ranges])
        if len(out) == before and rng.random() < 0.1:
            break
    return out[:MAX_POINTS]


__all__ = ["EXPAND_MAX", "MAX_POINTS", "domains_for_elements", "expanded_size"]
