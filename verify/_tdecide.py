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
   :data:`EXPAND_MAX` nodes) is not expanded: both terms are evaluated over every element at
   once in certified interval arithmetic (:mod:`verify._tnumeric`), and an element whose
   enclosures are disjoint is the counterexample. When no element differs, the check is
   undecided at tensor level and the caller falls back to the element-wise method or says
   "not verified".
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from . import _tnatvec, _tnumeric
from . import terms as T
from ._decide import Decision, decide_equal, decide_memo
from ._dims import sign as dims_sign
from .terms import grid
from .terms.smt import Z3
from .terms.smt import solver as smt_solver

#: At most this many regions are enumerated per comparison.
MAX_REGIONS = 256
#: Concrete elements tried for a counterexample.
MAX_POINTS = 24


# -- canonical renaming of bound variables -----------------------------------------------------


def canonical(e: Any) -> Any:
    """``e`` with every sum written as one multi-variable sum ``_SUM(body, b_1, ..., b_n)`` whose
    variables are renamed ``_b<level>`` in a canonical order (bodies without nested sums as
    factors: a sum multiplied into another sum's body is merged into it)."""
    memo: dict[Any, Any] = {}
    return _canon(e, memo)


def _canon(e: Any, memo: dict[Any, Any]) -> Any:
    if not isinstance(e, se.Basic) or not e.args:
        return e
    hit = memo.get(e)
    if hit is not None:
        return hit
    if T.is_sum(e):
        out = _canon_sum(e, memo)
    else:
        args = [_canon(a, memo) for a in e.args]
        out = T.rebuild(e, args)
    memo[e] = out
    return out


def _flatten_sum(e: Any) -> tuple[list[Any], Any]:
    """``sum_{k} body`` with nested sums in the body's factors pulled out: (variables, body)."""
    body, k = e.args[0], e.args[1]
    variables = [k]
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    while True:
        inner = [f for f in factors if T.is_sum(f)]
        if not inner:
            break
        f = inner[0]
        rest = [g for g in factors if g != f] if factors.count(f) == 1 else _drop_one(factors, f)
        ivars, ibody = _flatten_sum(f)
        variables += ivars
        factors = rest + (list(ibody.args) if isinstance(ibody, se.Mul) else [ibody])
    return variables, se.Mul(*factors)


def _translated(variables: Sequence[Any], body: Any) -> tuple[list[Any], Any]:
    """The variables and body with each bound variable ``v`` translated, ``v = w - t`` for a
    fresh ``w`` (an integer ``t``), so that its *anchor* read has no constant term: a sum over
    every integer of ``body`` (its range is in its brackets) is the same sum after any
    translation of its variable, so this is exact; ``w``'s registered range is ``v``'s moved by
    ``t`` (ranges simplify floors). It makes two sums that differ by a shift of their variable
    (a transposed convolution's weight gradient read as ``x[k] ct[k + 1]`` by the rule and
    ``x[k - 1] ct[k]`` by the adjoint) the same sum.

    The anchor is chosen alike under every translation of the variables: among the reads in
    ``body``'s factors with an argument ``+-v + rest + c`` (``rest`` free of bound variables,
    ``c`` an integer), the smallest by (read name, argument position, sign, ``rest``), ties
    broken by the smallest ``c``. Translations change only the ``c``, each variable's own
    (its anchor does not hold the others), so both sides of a shift pick the same anchor. The
    reads and brackets moved are normalised again (both are translation-equivariant: gcd
    division and sign normalisation leave the variables' coefficients as they are)."""
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    reads = [f for f in factors if T.is_read(f)]
    if not reads:
        return list(variables), body
    shifts, out = {}, []
    for v in variables:
        best = None
        for f in reads:
            for pos, arg in enumerate(f.args):
                cand = _anchor(v, arg)
                if cand is not None:
                    key = (T.name_of(f) or "", pos, *cand)
                    best = key if best is None or key < best else best
        rng = T.RANGES.get(v)
        if best is None or best[-1] == 0 or rng is None:
            out.append(v)
            continue
        t = best[2] * best[-1]  # a v + c = a (v + a c)
        w = _SHIFTED.get((v, t))
        if w is None:
            w = T.fresh("_k", rng[0] + t, None if rng[1] is None else rng[1] + t)
            if len(_SHIFTED) > 200000:
                _SHIFTED.clear()
            _SHIFTED[(v, t)] = w
        shifts[v] = se.expand(w - t)
        out.append(w)
    if not shifts:
        return out, body
    moved = [f.xreplace(shifts) for f in factors]
    moved = [T.normalize(g) if g != f else g for f, g in zip(factors, moved, strict=True)]
    return out, se.Mul(*moved)


#: The translated variable ``w = v + t`` of each ``(v, t)`` (one per pair: canonical forms of
#: the same sum agree across calls).
_SHIFTED: dict[tuple[Any, int], Any] = {}


def _anchor(v: Any, arg: Any) -> tuple[int, str, int] | None:
    """``(a, rest, c)`` for an index argument ``a v + rest + c`` with ``a = +-1``, ``rest`` an
    integer combination of atoms free of ``v`` and of every bound variable (which another
    translation would move), ``c`` an integer; else ``None``."""
    if v not in arg.free_symbols:
        return None
    lin = T.linear(arg)
    if lin is None:
        return None
    coeffs, const = lin
    a = coeffs.get(v)
    if a not in (1, -1) or not isinstance(const, se.Integer):
        return None
    rest = {u: c for u, c in coeffs.items() if u != v}
    if not all(isinstance(c, se.Integer) and not _moves(u, v) for u, c in rest.items()):
        return None
    return int(a), str(se.Add(*[c * u for u, c in rest.items()])), int(const)


def _moves(u: Any, v: Any) -> bool:
    """Whether the atom ``u`` holds ``v`` or a bound variable (registered, or canonical)."""
    syms = u.free_symbols
    return v in syms or bool(syms & T.BOUND) or any(s.name.startswith("_b") for s in syms)


def _drop_one(factors: list[Any], f: Any) -> list[Any]:
    out, dropped = [], False
    for g in factors:
        if not dropped and g == f:
            dropped = True
            continue
        out.append(g)
    return out


def _level(e: Any) -> int:
    """1 + the largest ``_b<level>`` index used inside ``e`` (0 if none)."""
    best = 0
    for s in e.free_symbols:
        name = s.name
        if name.startswith("_b") and name[2:].isdigit():
            best = max(best, int(name[2:]) + 1)
    for f in e.atoms(se.FunctionSymbol):
        if T.is_sum(f):
            for v in f.args[1:]:
                name = v.name
                if name.startswith("_b") and name[2:].isdigit():
                    best = max(best, int(name[2:]) + 1)
    return best


def _canon_sum(e: Any, memo: dict[Any, Any]) -> Any:
    variables, body = _flatten_sum(e)
    variables, body = _translated(variables, se.expand(body))
    body = _canon(se.expand(body), memo)
    base = _level(body)
    n = len(variables)
    sigs = {v: _signature(v, body, variables) for v in variables}
    order = sorted(variables, key=lambda v: sigs[v])
    # variables with the same signature: try their permutations, keep the smallest text
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda v: sigs[v])]
    best = None
    perms = 1
    for g in groups:
        perms *= len(range(1, len(g) + 1)) and _fact(len(g))
    choices = itertools.product(*[itertools.permutations(g) for g in groups]) if perms <= 120 \
        else [tuple(tuple(g) for g in groups)]  # fmt: skip
    for choice in choices:
        seq = [v for g in choice for v in g]
        names = {v: se.Symbol(f"_b{base + i}") for i, v in enumerate(seq)}
        cand_body = body.xreplace(names)
        cand = T.SUM(cand_body, *[names[v] for v in seq])
        key = str(cand)
        if best is None or key < best[0]:
            best = (key, cand)
    assert best is not None
    del n
    return best[1]


def _fact(n: int) -> int:
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out


def _signature(v: Any, body: Any, variables: Sequence[Any]) -> str:
    """Where ``v`` occurs in ``body``, with the other bound variables masked: reads and
    brackets by name and argument position, with ``v``'s coefficient."""
    mask = {u: se.Symbol("_v") for u in variables if u != v}
    occ = []
    for f in body.atoms(se.FunctionSymbol):
        if v not in f.free_symbols:
            continue
        n = T.name_of(f) or "?"
        for pos, a in enumerate(f.args):
            if v in getattr(a, "free_symbols", set()):
                lin = T.linear(a) if n not in ("_SUM", "_MAXR") else None
                c = lin[0].get(v) if lin else None
                occ.append(f"{n}:{pos}:{c}:{a.xreplace(mask).xreplace({v: se.Symbol('_u')})!s}")
    return "|".join(sorted(occ))


# -- atoms as symbols --------------------------------------------------------------------------


@dataclass
class Atoms:
    """A consistent naming of atoms as symbols for one comparison."""

    to_sym: dict[Any, Any]
    from_sym: dict[str, Any]
    domains: dict[str, str]

    @classmethod
    def empty(cls) -> Atoms:
        return cls({}, {}, {})

    def symbol(self, atom: Any, domain: str = "real") -> Any:
        s = self.to_sym.get(atom)
        if s is None:
            s = se.Symbol(f"_a{len(self.to_sym)}")
            self.to_sym[atom] = s
            self.from_sym[s.name] = atom
            self.domains[s.name] = domain
        return s


def symbolize(e: Any, atoms: Atoms, domains: Mapping[str, str]) -> Any:
    """``e`` with every read, sum, bracket and maximum replaced by a symbol."""
    outer = _outer_functions(e)
    repl = {}
    for a in outer:
        dom = domains.get(T.name_of(a) or "", "real") if T.is_leaf_read(a) else "real"
        repl[a] = atoms.symbol(a, dom)
    return e.xreplace(repl) if repl else e


def _outer_functions(e: Any) -> list[Any]:
    """The function atoms of ``e`` not inside another one's arguments."""
    out: dict[Any, None] = {}
    seen: set = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, se.Basic) or x in seen or not x.args:
            continue
        seen.add(x)
        if isinstance(x, se.FunctionSymbol):
            out[x] = None
            continue
        stack.extend(x.args)
    return list(out)


# -- integer reasoning (z3) --------------------------------------------------------------------


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


# -- the decision ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TDecision:
    """The outcome of a tensor comparison: ``equal`` True (proved), False (a counterexample at
    ``element``), None (undecided at tensor level); ``how`` says how."""

    equal: bool | None
    how: str
    element: tuple[int, ...] | None = None
    decision: Decision | None = None  # the element-level decision of a counterexample
    nat: dict[str, Any] | None = None
    method: str = "exact"
    #: How the inputs of a counterexample are shown when they are not in ``decision.point``
    #: (a certified numeric one: every leaf element drawn by ``verify._tnumeric.leaf_values``).
    inputs: dict[str, str] | None = None


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
        for unrolls in ((False,), (True,)):
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
            unrolls: tuple[bool, ...] = (False, True)) -> TDecision:  # fmt: skip
    domains = dict(domains or {})
    free = [v for v in free_all if isinstance(v, se.Symbol)]
    point = None
    # sums kept as sums first (cheap when both sides contract alike), then short ranges unrolled
    # (a window written as a sum on one side and term by term on the other)
    for unroll, shifted in itertools.product(unrolls, (True, False)):
        T.tick()
        g = _tables(T.normalize(got, unroll=unroll))
        x = _tables(T.normalize(expected, unroll=unroll))
        g, x = _complete_chains(g, x, unroll)
        if shifted:
            gs, xs = _shifted(g, unroll), _shifted(x, unroll)
            if gs == g and xs == x:
                continue  # no shift to split off: the plain pass below
            g, x = gs, xs
        cg, cx = canonical(g), canonical(x)
        if cg == cx:
            return TDecision(True, "identical normal forms")
        if se.expand(cg - cx) == 0:
            return TDecision(True, "normal forms expand to the same")
        split = _Splitter(list(free) + list(nat_symbols), domains, seed, unroll)
        ok, point = split.prove(g, x, [], 0)
        if ok:
            how = "atoms as symbols" if split.cases == 0 else f"{split.cases} index cases"
            if unroll:
                how += ", short ranges unrolled"
            method = "probabilistic" if split.probabilistic else "exact"
            return TDecision(True, how, method=method)
    if not counterexamples:
        return TDecision(None, "not proved at tensor level")
    return _search(got, expected, free_all, nat_symbols, point, domains, seed)


#: A table read is materialised over at most this many index values (:func:`_tables`): 2^22
#: covers the 512x4096 draws of the large sweep (about 2.3 GB peak for the whole check there).
TABLE_CELLS_MAX = 1 << 22


def _tables(e: Any) -> Any:
    """``e`` with every ``c * T(f(q))`` (``T`` a concrete table read at index expressions of
    free element indices only, ``c`` a power of two: the product is exact in float64) written
    as the read ``U(q...)`` of the table ``U[q] = c T[f(q)]`` over the indices' ranges, so that
    the same draws read through a reshape on one side and directly on the other are the same
    table (tables are named by content)."""
    memo: dict[Any, Any] = {}

    def go(x: Any) -> Any:
        if not isinstance(x, se.Basic) or not x.args or isinstance(x, se.Number):
            return x
        hit = memo.get(x)
        if hit is None:
            hit = _materialised(x)
            if hit is None:
                hit = T.rebuild(x, [go(a) for a in x.args])
            memo[x] = hit
        return hit

    return go(e)


def _materialised(x: Any) -> Any:
    c, read = T.ONE, x
    if isinstance(x, se.Mul) and len(x.args) == 2 and isinstance(x.args[0], se.Number):
        c, read = x.args
    n = T.name_of(read)
    if n is None or not n.startswith("_T") or not read.args:
        return None
    num = Fraction(str(c))
    if num == 0 or any(v & (v - 1) for v in (abs(num.numerator), num.denominator)):
        return None  # not +-2^k: the product would round
    syms = sorted({s for a in read.args for s in a.free_symbols}, key=str)
    if c == 1 and list(read.args) == syms:
        return None  # already the plain read
    if any(s in T.BOUND or s not in T.RANGES or T.RANGES[s][1] is None or T.RANGES[s][0] < 0
           for s in syms):  # fmt: skip
        return None
    if any(not isinstance(f, se.floor) and T.is_read(f) for a in read.args
           for f in T.fn_atoms(a)):  # fmt: skip
        return None
    sizes = [T.RANGES[s][1] - T.RANGES[s][0] for s in syms]
    if int(np.prod(sizes)) > TABLE_CELLS_MAX:
        return None
    grids = np.meshgrid(*[np.arange(T.RANGES[s][0], T.RANGES[s][1]) for s in syms],
                        indexing="ij")  # fmt: skip
    env = dict(zip(syms, grids, strict=True))
    table = T.TABLES[n]
    try:
        idx = [np.broadcast_to(np.asarray(T.np_eval(a, env)), grids[0].shape if grids else ())
               for a in read.args]  # fmt: skip
    except T.TermError:
        return None
    if any(((i < 0) | (i >= d)).any() for i, d in zip(idx, table.shape, strict=True)):
        return None  # a read outside the table: it is under a bracket that is 0 there
    values = np.asarray(table[tuple(idx)])
    if values.dtype.kind not in "iuf" or (
        values.dtype.kind in "iu" and np.abs(values).max(initial=0) >= 2**53
    ):
        return None  # fmt: skip
    exact = values.astype(np.float64)
    scaled = exact * float(num)
    tiny = np.finfo(np.float64).tiny
    nonzero = exact != 0
    if not np.isfinite(scaled[np.isfinite(exact)]).all() or (
        np.abs(scaled[nonzero]) < tiny
    ).any():  # fmt: skip
        return None  # overflow or a subnormal: the scaling would round
    return T.table_read(_absolute(scaled, [T.RANGES[s][0] for s in syms]), syms)


def _absolute(values: np.ndarray, lows: Sequence[int]) -> np.ndarray:
    """``values`` (one cell per index value ``lo, lo + 1, ...`` of each axis) as a table read
    at the index itself: ``lo`` cells in front of each axis, copies of its first slice. The
    new table ``U`` is read as ``U(q)`` with ``q`` over ``[lo, hi)``, so ``U[q]`` must be the
    value at ``q``, not at ``q - lo`` (a later case that fixes ``q`` reads that cell); the
    cells in front are never read, and copying the first slice keeps a table that is uniform
    (or constant along an axis) over the range uniform (constant along it)."""
    if not any(lows):
        return values
    return np.pad(values, [(int(lo), 0) for lo in lows], mode="edge")


def _retabled(e: Any, unroll: bool) -> Any:
    """``e`` (a normal form) with its table reads materialised (:func:`_tables`) again, after a
    case split narrowed the ranges of its free indices: a read at a shifted index (``T(q - 1)``
    beside the bracket ``[q >= 1]``) that ran off the table over the whole range is in it over
    the case's narrower one (and a table uniform there is a constant)."""
    t = _tables(e)
    return e if t == e else T.normalize(t, unroll=unroll)


# -- chains of conditions completed ---------------------------------------------------------


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
    :func:`_first_max_family`)."""
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


def _complete_chains(g: Any, x: Any, unroll: bool) -> tuple[Any, Any]:
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


def _completed_chains(g: Any, x: Any, unroll: bool) -> tuple[Any, Any]:
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


# -- maxima -------------------------------------------------------------------------------------

#: A window maximum ``_MAXR`` over at most this many values is written as ``Max`` of them when
#: they are determined (:func:`_as_maxima`).
MAXR_VALUES_MAX = 64


def _maxr_values(m: Any, unroll: bool, facts: Mapping[Any, Any] | None = None) -> Any:
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


def _as_maxima(e: Any, unroll: bool, facts: Mapping[Any, Any] | None = None) -> Any:
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
    for m in e.atoms(se.Max):
        if -se.oo in m.args and len(m.args) > 1:
            repl[m] = se.Max(*[a for a in m.args if a != -se.oo])
    if repl:
        e = e.xreplace(repl)
    return _one_hot_maxima(se.expand(e))


def _shifted(e: Any, unroll: bool) -> Any:
    """A normal form with the finite max shifts of its exponentials split off
    (:func:`verify.terms.split_shifts`), normalised again (sums pull the shifts out)."""
    s = T.split_shifts(e)
    return e if s == e else T.normalize(s, unroll=unroll)


#: Case splits deeper than this, or more cases than :data:`MAX_REGIONS`, give up.
MAX_DEPTH = 6
#: A floor of a free index with at most this many values is split by value.
FLOOR_VALUES = 4


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
                 unroll: bool = True) -> None:  # fmt: skip
        self.unroll = unroll
        self.allowed = allowed
        self.domains = domains
        self.seed = seed
        self.cases = 0
        self.probabilistic = False
        #: A case split stopped at :data:`MAX_DEPTH`, :data:`MAX_REGIONS` or an undecided
        #: region enumeration (rather than at a case that failed).
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


def _maxish(e: Any) -> bool:
    """Whether ``e`` holds a window maximum ``_MAXR`` or a Piecewise (a one-hot)."""
    return bool(e.atoms(se.Piecewise)) or any(T.name_of(f) == "_MAXR" for f in T.fn_atoms(e))


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
    import math

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
        import math

        lo, _ = T.interval(f.args[0], facts=True)
        out[f] = se.Integer(math.floor(lo) + sum(int(assign[c]) for c in conds))  # type: ignore[arg-type]
    return out


def _residue_split(f: Any, allowed: set) -> tuple[Any, int] | None:
    """A free index of ``floor(e / d)`` and the modulus that makes the floor affine in it."""
    import math

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


def _scalar(g: Any, x: Any, atoms: Atoms, domains: Mapping[str, str], seed: int,
            use_sympy: bool = True) -> Decision | None:  # fmt: skip
    """Step 2: an exact proof with atoms as independent symbols, else ``None``."""
    gs, xs = symbolize(g, atoms, domains), symbolize(x, atoms, domains)
    if gs == xs:
        return Decision(True, "exact", "identical")
    try:
        d = decide_equal(gs, xs, domains=atoms.domains, seed=seed, use_sympy=use_sympy,
                         sample=False)  # fmt: skip
    except Exception:
        return None
    if d.equal is True and d.method == "exact":
        return d
    return None


def _identify_sums(g: Any, x: Any, allowed: set) -> tuple[Any, Any]:
    """Sums of both sides with the same body (brackets aside) whose domains z3 proves equal are
    replaced by one of them."""
    sums = [f for f in (T.fn_atoms(g) | T.fn_atoms(x)) if T.is_sum(f)]
    if len(sums) < 2:
        return g, x
    groups: dict[Any, list[Any]] = {}
    for s in sums:
        body, variables = s.args[0], s.args[1:]
        plain, _ = _split_brackets(body)
        groups.setdefault((plain, len(variables)), []).append(s)
    repl: dict[Any, Any] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        members = sorted(members, key=str)
        reps: list[Any] = []
        for s in members:
            for r in reps:
                if _same_domain(s, r):
                    repl[s] = r
                    break
            else:
                reps.append(s)
    if not repl:
        return g, x
    return g.xreplace(repl), x.xreplace(repl)


#: At most this many pairs of reads are compared by :func:`_identify_reads` per comparison.
MAX_READ_PAIRS = 400


def _identify_reads(g: Any, x: Any, facts: list[tuple[Any, int]]) -> tuple[Any, Any]:
    """Reads of the same leaf on both sides whose index expressions z3 proves equal, for every
    value of the indices in their ranges under ``facts`` (the case's brackets), written alike:
    the quasi-affine index of a reshape of a reshape (nested floors) and its plain form are the
    same element. A read on one side only is replaced by its equal on the other side.

    Pairs are first compared at a few points z3 finds (ranges and facts satisfied): only the
    pairs equal there go to the proof."""
    reads_g = {f for f in T.fn_atoms(g) if T.is_leaf_read(f) and f.args}
    reads_x = {f for f in T.fn_atoms(x) if T.is_leaf_read(f) and f.args}
    only_g = sorted(reads_g - reads_x, key=str)
    only_x = sorted(reads_x - reads_g, key=str)
    names = {T.name_of(r) for r in only_g} & {T.name_of(r) for r in only_x}
    only_g = [r for r in only_g if T.name_of(r) in names]
    only_x = [r for r in only_x if T.name_of(r) in names]
    if not only_g or not only_x:
        return g, x
    try:
        z = Z3()
        known = [z.bracket(b) if v else z.z3.Not(z.bracket(b)) for b, v in facts]
        terms = {r: [z.term(a) for a in r.args] for r in only_g + only_x}
    except T.TermError:
        return g, x
    z3 = z.z3
    solver = smt_solver(2)
    solver.add(*z.facts, *known)
    points = _points(solver, z, 3)
    if points is None:
        return g, x

    def at(r: Any, pt: Any) -> tuple | None:
        vals = []
        for t in terms[r]:
            v = pt.eval(t, model_completion=True)
            if not z3.is_int_value(v):
                return None
            vals.append(v.as_long())
        return tuple(vals)

    keys = {r: [at(r, pt) for pt in points] for r in only_g + only_x}
    budget = MAX_READ_PAIRS
    repl: dict[Any, Any] = {}
    for r in only_g:
        for c in only_x:
            if T.name_of(r) != T.name_of(c) or len(r.args) != len(c.args):
                continue
            if any(a is not None and b is not None and a != b
                   for a, b in zip(keys[r], keys[c], strict=True)):  # fmt: skip
                continue
            if budget <= 0:
                break
            budget -= 1
            solver.push()
            solver.add(z3.Or(*[p != q for p, q in zip(terms[r], terms[c], strict=True)]))
            proved = solver.check() == z3.unsat
            solver.pop()
            if proved:
                repl[r] = c
                break
    return (g.xreplace(repl) if repl else g), x


def _points(solver: Any, z: Z3, n: int) -> list[Any] | None:
    """Up to ``n`` distinct models of ``solver``'s assertions (``None`` when it has none)."""
    z3 = z.z3
    out = []
    solver.push()
    for _ in range(n):
        if solver.check() != z3.sat:
            break
        m = solver.model()
        out.append(m)
        vs = list(z.vars.values())
        if not vs:
            break
        solver.add(z3.Or(*[v != m.eval(v, model_completion=True) for v in vs]))
    solver.pop()
    return out or None


def _split_brackets(body: Any) -> tuple[Any, list[Any]]:
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    plain = [f for f in factors if not T.is_bracket(f)]
    brs = [f for f in factors if T.is_bracket(f)]
    return se.Mul(*plain), brs


def _same_domain(a: Any, b: Any) -> bool:
    """Two canonical sums with the same plain body: are their bracket domains equal?"""
    if a.args[1:] != b.args[1:]:
        return False
    _, ba = _split_brackets(a.args[0])
    _, bb = _split_brackets(b.args[0])
    try:
        z = Z3()
        fa = z.z3.And(*[z.bracket(f) for f in ba]) if ba else z.z3.BoolVal(True)
        fb = z.z3.And(*[z.bracket(f) for f in bb]) if bb else z.z3.BoolVal(True)
    except T.TermError:
        return False
    z3 = z.z3
    s = smt_solver(5)
    facts = [f for f in z.facts if not _mentions_bound(f, a.args[1:], z)]
    s.add(*facts)
    s.add(fa != fb)
    return s.check() == z3.unsat


def _mentions_bound(fact: Any, variables: Sequence[Any], z: Z3) -> bool:
    names = {v.name for v in variables}
    return any(str(c) in names for c in _z3_consts(fact, z))


def _z3_consts(f: Any, z: Z3) -> list[Any]:
    out = []
    stack = [f]
    while stack:
        t = stack.pop()
        if z.z3.is_const(t) and t.decl().kind() == z.z3.Z3_OP_UNINTERPRETED:
            out.append(t)
        stack.extend(t.children())
    return out


# -- counterexamples ---------------------------------------------------------------------------


def _search(
    got: Any,
    expected: Any,
    free: Sequence[Any],
    nat_symbols: Sequence[Any],
    region_point: dict | None,
    domains: Mapping[str, str],
    seed: int,
) -> TDecision:
    free_all = list(free)
    free = [v for v in free if isinstance(v, se.Symbol)]
    rng = random.Random(seed)
    points = _candidate_points(got, expected, free, nat_symbols, region_point, rng)
    vectors = _tnatvec.nat_vectors(got, expected)
    if vectors:
        points = _tnatvec.elements(points)
    big = False
    pairs = []  # (values, index vectors, got, expected) written out at concrete elements
    for values in points:
        if not big and expanded_size(got, values) + expanded_size(expected, values) > EXPAND_MAX:
            big = True  # too large to write out: certified numbers below
        if big:
            break
        # runtime index vectors read in the terms get concrete values too (a few per element)
        for nat in (_tnatvec.assignments(values, vectors, rng, (got, expected))
                    if vectors else [{}]):  # fmt: skip
            try:
                ge = T.concretize(T.normalize(got), values, nat)
                xe = T.concretize(T.normalize(expected), values, nat)
            except T.OutOfTime:
                raise  # the budget is spent: not a point without a value
            except T.TermError:
                continue
            pairs.append((values, nat, ge, xe))
    # every element probed at random points first (cheap), then decided in full (a proof
    # attempt on one large true element must not keep a false one from being looked at)
    for probe_only in (True, False):
        for values, nat, ge, xe in pairs:
            d = decide_memo(ge, xe, dict(domains_for_elements(ge, xe, domains)), seed,
                            probe_only=probe_only)  # fmt: skip
            if d.equal is False:
                element = tuple(
                    int(values[v]) if isinstance(v, se.Symbol) else int(v) for v in free_all
                )
                scalars = {s.name: int(values[s]) for s in nat_symbols if s in values}
                return TDecision(False, "counterexample at a concrete element", element, d,
                                 scalars, method=d.method,
                                 inputs=_tnatvec.shown(nat, vectors) or None)  # fmt: skip
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
    for f in got.atoms(se.FunctionSymbol) | expected.atoms(se.FunctionSymbol):
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


__all__ = ["TDecision", "canonical", "decide_tensor"]
