"""Term atoms and constructors: reads, sums, brackets as symengine functions; index symbols and
their ranges; the registries (leaf shapes, tables, derived atoms) the other layers read."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from .._dims import is_one, size_expr
from .._dims import register as register_size

# -- relations of extrema ---------------------------------------------------------------------


def fold_extrema(r: Any) -> Any:
    """A relation with a maximum or minimum written without it where that is exact (JAX's
    derivative of ``max`` tests which argument equals it; ``clip`` compares a maximum with a
    bound): ``x == max(x, y...)`` is ``y <= x`` for every ``y``, ``x == min(x, y...)`` is
    ``x <= y`` (``!=`` their negation); ``max(a...) <= c`` is ``a <= c`` for every ``a``,
    ``c <= max(a...)`` for some ``a``, and the same for ``<`` and, swapped, for ``min``."""
    if isinstance(r, (se.Equality, se.Unequality)):
        a, b = (_unnegated(v) for v in r.args)
        for x, m in ((a, b), (b, a)):
            if isinstance(m, (se.Max, se.Min)) and x in m.args:
                others = [y for y in m.args if y != x]
                le = [fold_extrema(se.Le(y, x) if isinstance(m, se.Max) else se.Le(x, y))
                      for y in others]  # fmt: skip
                both = se.And(*le) if le else se.true
                return both if isinstance(r, se.Equality) else se.Not(both)
        return r
    if isinstance(r, (se.LessThan, se.StrictLessThan)):
        lo, hi = (_unnegated(v) for v in r.args)
        rel = type(r)
        if isinstance(lo, se.Max):  # max(a...) <= hi: every a <= hi
            return se.And(*[fold_extrema(rel(a, hi)) for a in lo.args])
        if isinstance(lo, se.Min):  # min(a...) <= hi: some a <= hi
            return se.Or(*[fold_extrema(rel(a, hi)) for a in lo.args])
        if isinstance(hi, se.Max):  # lo <= max(a...): some a
            return se.Or(*[fold_extrema(rel(lo, a)) for a in hi.args])
        if isinstance(hi, se.Min):  # lo <= min(a...): every a
            return se.And(*[fold_extrema(rel(lo, a)) for a in hi.args])
    return r


def _unnegated(v: Any) -> Any:
    """``-max(a, b)`` as ``min(-a, -b)``, ``-min(a, b)`` as ``max(-a, -b)`` (a minimum read as
    the negated maximum of negated values), else ``v``."""
    if isinstance(v, se.Mul) and len(v.args) == 2 and v.args[0] == -1:
        m = v.args[1]
        if isinstance(m, se.Max):
            return se.Min(*[-a for a in m.args])
        if isinstance(m, se.Min):
            return se.Max(*[-a for a in m.args])
    return v


# -- atoms -----------------------------------------------------------------------------------

SUM = se.Function("_SUM")
GE = se.Function("_GE")
EQ = se.Function("_EQ")
MAXR = se.Function("_MAXR")
#: ``_KINK(u)``: 0 as a value, ``du`` as a derivative (:func:`verify.terms.jvp_term`), so a
#: one-sided choice at a tie changes the derivative there and not the value's form
#: (:mod:`verify._kinks`); none is left in a derivative.
KINK = se.Function("_KINK")

ZERO, ONE = se.Integer(0), se.Integer(1)
_SPECIAL = ("_SUM", "_GE", "_EQ", "_MAXR", "_XS", "_KINK")

#: Sums over at most this many values of their variable (a constant range, e.g. a kernel axis)
#: are unrolled by :func:`normalize`, so that a window written as a sum and the same window
#: written term by term get the same normal form.
UNROLL_MAX = 8
#: The ``unroll`` levels of :func:`normalize`: sums kept as sums; ranges of up to
#: :data:`UNROLL_MAX` values written term by term; and also ranges of up to
#: :data:`UNROLL_WIDE_MAX` values, the decision's last pass, tried only where a sum over such a
#: range occurs (an 11x11 kernel summed by JAX's convolution against the reference's 121
#: offsets written term by term).
UNROLL_NONE, UNROLL_SHORT, UNROLL_WIDE = 0, 1, 2
UNROLL_WIDE_MAX = 16


class TermError(Exception):
    """A term could not be built or transformed (e.g. a non-linear use of a tangent)."""


def name_of(e: Any) -> str | None:
    """The function name of a ``FunctionSymbol`` (a read, a sum, a bracket), else ``None``."""
    if isinstance(e, se.FunctionSymbol):
        return str(e.get_name())
    return None


_HAS_MEMO: dict[tuple[Any, Any], bool] = {}


def has_atom(e: Any, kinds: type | tuple[type, ...]) -> bool:
    """Does ``e`` contain a node of type ``kinds`` (``se.Piecewise``, ``(se.Max, se.Min)``)?
    Memoised over shared subterms, so a large term that shares its subterms (a DAG) is walked
    once, where symengine's ``atoms`` walks it as a tree."""
    if isinstance(e, kinds):
        return True
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number):
        return False
    key = (e, kinds)
    hit = _HAS_MEMO.get(key)
    if hit is None:
        hit = any(has_atom(a, kinds) for a in e.args)
        if len(_HAS_MEMO) > 500000:
            _HAS_MEMO.clear()
        _HAS_MEMO[key] = hit
    return hit


def has_floor(e: Any) -> bool:
    """Does ``e`` contain a ``floor``? (memoised over shared subterms)"""
    return has_atom(e, se.floor)


_ATOMS_MEMO: dict[type, dict[Any, frozenset]] = {}
_NONE: frozenset = frozenset()


def atoms_of(e: Any, kind: type, prune: bool = False) -> frozenset:
    """The subterms of ``e`` of type ``kind``, nested ones and nullary ones (the read of a 0-d
    leaf) included: ``e.atoms(kind)`` memoised over shared subterms (``atoms`` walks a term as a
    tree, seconds on the large shared terms of a window's derivative). ``prune``: subterms
    without one are skipped by :func:`has_atom` first (for a kind most subterms lack)."""
    if isinstance(e, kind) and not e.args:
        return frozenset((e,))
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number):
        return _NONE
    if prune and not has_atom(e, kind):
        return _NONE
    memo = _ATOMS_MEMO.setdefault(kind, {})
    hit = memo.get(e)
    if hit is None:
        out: set = set()
        for a in e.args:
            out |= atoms_of(a, kind, prune)
        if isinstance(e, kind):
            out.add(e)
        hit = frozenset(out)
        if len(memo) > 500000:
            memo.clear()
        memo[e] = hit
    return hit


def fn_atoms(e: Any) -> frozenset:
    """The ``FunctionSymbol`` atoms of ``e``, nested ones included (memoised)."""
    return atoms_of(e, se.FunctionSymbol)


def floor_atoms(e: Any) -> frozenset:
    """The ``floor`` subterms of ``e`` (memoised)."""
    return atoms_of(e, se.floor, prune=True)


def is_sum(e: Any) -> bool:
    return name_of(e) == "_SUM"


def is_bracket(e: Any) -> bool:
    return name_of(e) in ("_GE", "_EQ")


def is_table(e: Any) -> bool:
    n = name_of(e)
    return n is not None and n.startswith("_T")


#: Derived reads: atoms defined by a term (``verify/_tsoftmax.py``'s softmax atoms), by name.
#: A definition has ``mentions(names)``, ``jvp(args, d)``, ``explicit(args)`` and
#: ``concrete(idx, value)``.
DERIVED: dict[str, Any] = {}


def has_derived(e: Any) -> bool:
    """Whether ``e`` reads a derived atom."""
    return any(name_of(f) in DERIVED for f in fn_atoms(e))


def expand_derived(e: Any) -> Any:
    """``e`` with every derived atom written out by its definition (recursively)."""
    if not has_derived(e):
        return e
    repl = {f: expand_derived(DERIVED[name_of(f)].explicit(f.args)) for f in fn_atoms(e)
            if name_of(f) in DERIVED}  # fmt: skip
    return e.xreplace(repl)


def is_read(e: Any) -> bool:
    """A read of a leaf or a table (not a sum, bracket or max)."""
    n = name_of(e)
    return n is not None and n not in _SPECIAL


def is_leaf_read(e: Any) -> bool:
    n = name_of(e)
    return n is not None and n not in _SPECIAL and not n.startswith("_T")


def fn(name: str) -> Any:
    return se.Function(name)


#: The shapes of the leaves read by flat index (:func:`leaf_read`), by name.
LEAF_SHAPES: dict[str, tuple[int, ...]] = {}


_REBUILD: dict[type, Callable[..., Any]] = {
    se.StrictLessThan: se.Lt,
    se.LessThan: se.Le,
    se.Equality: se.Eq,
    se.Unequality: se.Ne,
    se.And: se.And,
    se.Or: se.Or,
    se.Not: se.Not,
}


def rebuild(e: Any, args: Sequence[Any]) -> Any:
    """``e`` with new arguments (FunctionSymbols are rebuilt by name)."""
    n = name_of(e)
    if n is not None:
        return se.Function(n)(*args)
    if isinstance(e, se.Piecewise):
        return se.Piecewise(*[(args[i], args[i + 1]) for i in range(0, len(args), 2)])
    if isinstance(e, se.Number):
        return e
    maker = _REBUILD.get(type(e))
    if maker is not None:
        return maker(*args)
    return e.func(*args)


def rewrite(
    e: Any,
    node: Callable[[Any, list[Any]], Any] = rebuild,
    first: Callable[[Any], Any] | None = None,
) -> Any:
    """``e`` rewritten bottom up, each shared subterm once (memoised): a subterm ``x`` becomes
    ``first(x)`` where that is not ``None`` (its arguments not visited), else ``node(x, args)``
    with its arguments rewritten (by default :func:`rebuild`). Numbers and atoms stay."""
    memo: dict[Any, Any] = {}

    def go(x: Any) -> Any:
        if not isinstance(x, se.Basic) or not x.args or isinstance(x, se.Number):
            return x  # a number is a leaf (-oo has args (-1,) but no func)
        hit = memo.get(x)
        if hit is None:
            hit = first(x) if first is not None else None
            if hit is None:
                hit = node(x, [go(a) for a in x.args])
            memo[x] = hit
        return hit

    return go(e)


# -- index symbols and their ranges ------------------------------------------------------------

#: Every index symbol's range ``[lo, hi)`` (``hi`` may be ``None``: unbounded above).
RANGES: dict[Any, tuple[int, int | None]] = {}
#: The exclusive upper bound of an index symbol over an axis of symbolic length (an expression
#: in size symbols, :mod:`verify._dims`); its :data:`RANGES` entry then says ``hi = None``, so
#: everything that reads ranges numerically treats it as unbounded (fewer facts, never wrong),
#: and z3 (:func:`_sign_facts`, ``verify.terms.smt.Z3``) gets the bound as a fact.
UPPER: dict[Any, Any] = {}
#: The size symbols (each a positive integer, range ``[1, oo)``, a fact like a free index's).
SIZES: set[Any] = set()
#: The bound (summation) variables among them: their range is also written as brackets in the
#: body of their sum, and only those brackets say it (a bracket is never dropped because of a
#: bound variable's registered range; the range only serves to simplify floors and to unroll).
BOUND: set[Any] = set()
_COUNTER = itertools.count()


def fresh(prefix: str, lo: int, hi: Any, *, bound: bool = True) -> Any:
    """A new integer symbol ranging over ``[lo, hi)`` (``hi`` may be a symbolic size, a
    :class:`verify._dims.Dim` or its expression: see :data:`UPPER`)."""
    s = se.Symbol(f"{prefix}{next(_COUNTER)}")
    if hi is not None and not isinstance(hi, int | np.integer | se.Integer):
        RANGES[s] = (int(lo), None)
        UPPER[s] = size_expr(hi)
    else:
        RANGES[s] = (int(lo), None if hi is None else int(hi))
    if bound:
        BOUND.add(s)
    return s


def size_symbol(name: str, lo: int = 1) -> Any:
    """The size symbol ``name`` (an integer ``>= lo >= 1``; the same symbol for the same
    name, which must always come with the same ``lo``)."""
    s = se.Symbol(name)
    register_size(s, lo)
    RANGES[s] = (int(lo), None)
    SIZES.add(s)
    return s


def rename_bound(e: Any) -> Any:
    """``e`` with the variables of its sums and maxima renamed to fresh ones (a term copied
    into another keeps its sums apart)."""
    bound = {}
    for f in fn_atoms(e):
        n = name_of(f)
        if n == "_SUM":
            variables = f.args[1:]
        elif n == "_MAXR":
            variables = f.args[1:2]
        else:
            continue
        for v in variables:
            if isinstance(v, se.Symbol) and v not in bound:
                lo, hi = RANGES.get(v, (0, None))
                bound[v] = fresh("_k", lo, hi)
    return e.xreplace(bound) if bound else e


def free_vars(shape: Sequence[int], prefix: str = "_q") -> tuple[Any, ...]:
    """Fresh element indices for an array of ``shape`` (free: their range is a fact); an axis
    of size 1 has the index 0."""
    return tuple(ZERO if is_one(n) else fresh(prefix, 0, n, bound=False) for n in shape)


def is_index_symbol(s: Any) -> bool:
    return s in RANGES


#: Concrete arrays met while building terms, by name (the name is a hash of the content).
TABLES: dict[str, np.ndarray] = {}


def exact_scalar(v: Any) -> Any:
    """A NumPy / Python scalar as an exact symengine number (booleans as 0/1)."""
    if isinstance(v, se.Basic):
        return v
    if isinstance(v, bool | np.bool_):
        return ONE if v else ZERO
    if isinstance(v, int | np.integer):
        return se.Integer(int(v))
    f = float(v)
    if math.isinf(f):
        return se.oo if f > 0 else -se.oo
    if math.isnan(f):
        raise TermError("NaN has no exact value")
    fr = Fraction(f)
    return se.Rational(fr.numerator, fr.denominator)


def _add_terms(e: Any) -> tuple[Any, ...]:
    return e.args if isinstance(e, se.Add) else (e,)


def _factors(t: Any) -> list[Any]:
    return list(t.args) if isinstance(t, se.Mul) else [t]


# -- max-shifted exponentials --------------------------------------------------------------------


#: ``_XS(s)`` = ``exp(s)`` for a finite shift ``s`` (:func:`split_shifts`): opaque, so that
#: symengine does not merge it back into ``exp(r) exp(s) = exp(r + s)``.
XS = se.Function("_XS")

#: Names of leaves that stand for a maximum held as a free real (the running maximum of an
#: online softmax, read by ``verify._functions``): each read is a finite real, so
#: :func:`split_shifts` writes ``exp(r + c m)`` as ``exp(r) _XS(m)^c``, one ``_XS`` per read,
#: and a product of shifted exponentials cancels factor by factor.
SHIFT_LEAVES: set[str] = set()


def _subterms(e: Any) -> Iterable[Any]:
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, se.Basic) and not isinstance(x, se.FunctionSymbol):
            stack.extend(x.args)


def has_infinity(e: Any) -> bool:
    """Whether ``e`` holds an infinity or NaN anywhere (then a 0/1 bracket may not multiply
    it: ``0 * -oo`` is NaN). Memoised over shared subterms (:func:`has_atom`; symengine's
    ``has`` walks a shared term as a tree)."""
    return isinstance(e, se.Basic) and has_atom(e, _INFINITIES)


_INFINITIES = tuple(type(v) for v in (se.oo, -se.oo, se.zoo, se.nan))


# -- concrete elements -------------------------------------------------------------------------


def element_symbol(name: str, idx: Sequence[int]) -> Any:
    """The element symbol of the element method (``x[1,2]``; ``x`` for a scalar)."""
    return se.Symbol(f"{name}[{','.join(map(str, idx))}]" if idx else name)
