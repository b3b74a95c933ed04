"""Index conditions: sign facts of index expressions (by exhaustion over a box,
:mod:`verify.terms.grid`, else z3, :mod:`verify.terms.smt`), Iverson brackets ``[e >= 0]`` /
``[e == 0]`` normalised, reads of leaves and constant tables at canonical indices."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from .._dims import Dim, size_expr
from . import grid
from .core import EQ, GE, LEAF_SHAPES, ONE, TABLES, ZERO, TermError, exact_scalar
from .index import (
    _assemble,
    _integer_form,
    _symbolic_bound,
    delinearize,
    flat_index,
    interval,
    simplify_index,
)
from .smt import Z3, solver


def leaf_read(name: str, idx: Sequence[Any], shape: Sequence[int]) -> Any:
    """The read of leaf ``name`` (of ``shape``) at ``idx``. Indices with floors (a reshape)
    are rewritten from the flat index when that is affine: ``(floor(f / 3), f mod 3)`` of a
    ``(2, 3)`` array is canonical whichever way the reshapes were composed."""
    shape = tuple(d if isinstance(d, Dim) else int(d) for d in shape)
    LEAF_SHAPES[name] = shape
    return se.Function(name)(*canonical_index(idx, shape))


def canonical_index(idx: Sequence[Any], shape: Sequence[int]) -> tuple[Any, ...]:
    idx = tuple(simplify_index(i) for i in idx)
    if not any(getattr(i, "atoms", None) and i.atoms(se.floor) for i in idx):
        return idx
    if any(isinstance(d, Dim) for d in shape):
        return idx  # a symbolic size: the reads are compared as they are
    flat = flat_index(idx, shape)
    if flat.atoms(se.floor) or not _in_range(idx, shape):
        return idx
    return delinearize(flat, shape)


def _in_range(idx: Sequence[Any], shape: Sequence[int]) -> bool:
    for i, d in zip(idx, shape, strict=True):
        lo, hi = interval(i)
        if lo is None or hi is None or lo < 0 or hi >= d:
            nonneg, _, _ = _sign_facts(i, facts=False)
            below, _, _ = _sign_facts(se.expand(d - 1 - i), facts=False)
            if not (nonneg and below):
                return False
    return True


def _sign_facts(e: Any, facts: bool = True) -> tuple[bool, bool, bool]:
    """For an index expression with floors: is it always >= 0, always < 0, always == 0 over the
    ranges that are facts (or, with ``facts=False``, over every symbol's range)? (Cached; by
    exhaustion over a small box of values, :mod:`verify.terms.grid`, else z3, ``False`` when
    unknown; z3 alone where a symbolic size bounds a symbol, :data:`UPPER`.)"""
    if not e.atoms(se.floor) and not _symbolic_bound(e):
        return False, False, False
    hit = _SIGN_CACHE.get((e, facts))
    if hit is not None:
        return hit
    try:
        out = grid.sign_facts(e, facts)  # by exhaustion over a small box: exact, no timeout
    except grid.NotGridded:
        out = _sign_facts_z3(e, facts)
    if len(_SIGN_CACHE) > 100000:
        _SIGN_CACHE.clear()
    _SIGN_CACHE[(e, facts)] = out
    return out


def _sign_facts_z3(e: Any, facts: bool) -> tuple[bool, bool, bool]:
    """:func:`_sign_facts` by z3 (``False`` where z3 does not answer in time). A budget that
    runs out meanwhile is raised, not cached as "unknown" for the rest of the process."""
    out = (False, False, False)
    try:
        import z3

        z = Z3(facts_only=facts)
        t = z.term(e)
        s = solver(2)
        s.add(*z.facts)
        nonneg = s.check(t < 0) == z3.unsat
        neg = s.check(t >= 0) == z3.unsat
        zero = s.check(t != 0) == z3.unsat
        out = (nonneg, neg, zero)
    except Exception:
        pass
    return out


_SIGN_CACHE: dict[tuple[Any, bool], tuple[bool, bool, bool]] = {}


def ge(e: Any) -> Any:
    """``[e >= 0]`` for an integer expression, normalised: integer coefficients divided by their
    gcd (the constant rounded down, which is exact over the integers), decided by intervals."""
    e = simplify_index(e)
    if isinstance(e, se.Number):
        return ONE if e >= 0 else ZERO
    lo, hi = interval(e, facts=True)
    if lo is not None and lo >= 0:
        return ONE
    if hi is not None and hi < 0:
        return ZERO
    nonneg, neg, _ = _sign_facts(e)
    if nonneg:
        return ONE
    if neg:
        return ZERO
    form = _integer_form(e)
    if form is None:
        return GE(e)
    coeffs, const = form
    g = math.gcd(*coeffs.values()) if coeffs else 1
    if g > 1:
        coeffs = {v: c // g for v, c in coeffs.items()}
        const = math.floor(Fraction(const, g))
    return GE(_assemble(coeffs, const))


def eq(e: Any) -> Any:
    """``[e == 0]`` for an integer expression, normalised (gcd, sign of the first term)."""
    e = simplify_index(e)
    if isinstance(e, se.Number):
        return ONE if e == 0 else ZERO
    lo, hi = interval(e, facts=True)
    if (lo is not None and lo > 0) or (hi is not None and hi < 0):
        return ZERO
    if lo == 0 and hi == 0:
        return ONE
    _, neg, zero = _sign_facts(e)
    if zero:
        return ONE
    if neg:
        return ZERO
    form = _integer_form(e)
    if form is None:
        return EQ(e)
    coeffs, const = form
    g = math.gcd(*coeffs.values()) if coeffs else 1
    if const % g:
        return ZERO
    coeffs = {v: c // g for v, c in coeffs.items()}
    const //= g
    expr = _assemble(coeffs, const)
    if _leading_negative(expr):
        expr = -expr
    return EQ(se.expand(expr))


def _leading_negative(e: Any) -> bool:
    terms = e.args if isinstance(e, se.Add) else (e,)
    keyed = sorted((str(t), t) for t in terms if not isinstance(t, se.Number))
    if not keyed:
        return False
    t = keyed[0][1]
    c = [a for a in t.args if isinstance(a, se.Number)] if isinstance(t, se.Mul) else []
    return bool(c) and c[0] < 0


def bracket(cond: Any) -> Any:
    """The 0/1 integer expression of an index condition (relations between integer
    expressions, combined with And / Or / Not)."""
    if cond is True or cond == se.true:
        return ONE
    if cond is False or cond == se.false:
        return ZERO
    if isinstance(cond, se.StrictLessThan):
        a, b = cond.args
        return ge(b - a - 1)
    if isinstance(cond, se.LessThan):
        a, b = cond.args
        return ge(b - a)
    if isinstance(cond, se.Equality):
        a, b = cond.args
        return eq(a - b)
    if isinstance(cond, se.Unequality):
        a, b = cond.args
        return 1 - eq(a - b)
    if isinstance(cond, se.And):
        out = ONE
        for c in cond.args:
            out = out * bracket(c)
        return out
    if isinstance(cond, se.Or):
        out = ZERO
        for c in cond.args:
            b = bracket(c)
            out = out + b - out * b
        return se.expand(out)
    if isinstance(cond, se.Not):
        return 1 - bracket(cond.args[0])
    raise TermError(f"not an index condition: {cond}")


def range_brackets(k: Any, lo: Any, hi: Any) -> Any:
    """``[lo <= k < hi]`` (bounds may be symbolic sizes)."""
    lo, hi = size_expr(lo), size_expr(hi)
    return ge(k - lo) * ge(hi - 1 - k)


# -- tables ------------------------------------------------------------------------------------


def _table_brackets(name: str, args: Sequence[Any]) -> Any:
    """A read of a 0/1 table at integers and distinct index symbols as a product of interval
    brackets on the symbols, when the table (at those integers) is such a product; else
    ``None``."""
    table = TABLES[name]
    key: list[Any] = []
    syms: list[Any] = []
    for a, d in zip(args, table.shape, strict=True):
        if isinstance(a, se.Integer):
            if not 0 <= int(a) < d:
                return ZERO
            key.append(int(a))
        elif isinstance(a, se.Symbol) and a not in syms:
            key.append(slice(None))
            syms.append(a)
        else:
            return None
    sub = table[tuple(key)]
    if sub.dtype.kind not in "iubf" or not np.all((sub == 0) | (sub == 1)):
        return None
    mask = sub.astype(bool)
    if not mask.any():
        return ZERO
    out = ONE
    rebuilt = np.ones(mask.shape, dtype=bool)
    for ax, v in enumerate(syms):
        others = tuple(i for i in range(mask.ndim) if i != ax)
        m = np.any(mask, axis=others) if others else mask
        runs = _runs(m)
        if len(runs) != 1:
            return None
        lo, hi = runs[0]
        shape = [1] * mask.ndim
        shape[ax] = mask.shape[ax]
        rebuilt = rebuilt & m.reshape(shape)
        out = out * range_brackets(v, lo, hi)
    if not np.array_equal(rebuilt, mask):
        return None
    return out


def _runs(m: np.ndarray) -> list[tuple[int, int]]:
    out, start = [], None
    for i, v in enumerate([*m.tolist(), False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


def table_name(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha1(a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()).hexdigest()
    name = f"_T{h[:16]}"
    TABLES.setdefault(name, a)
    return name


def table_read(a: np.ndarray, idx: Sequence[Any]) -> Any:
    """``a[idx]`` for a concrete array ``a`` at index expressions (a constant when ``a`` is
    uniform or the indices are numbers)."""
    a = np.asarray(a)
    if a.size and np.all(a == a.reshape(-1)[0]):
        return exact_scalar(a.reshape(-1)[0])
    if all(isinstance(i, se.Integer) for i in idx):
        return exact_scalar(a[tuple(int(i) for i in idx)])
    a, idx = _uniform_axes_dropped(a, idx)
    if all(isinstance(i, se.Integer) for i in idx):
        return exact_scalar(a[tuple(int(i) for i in idx)])
    return se.Function(table_name(a))(*canonical_index(idx, a.shape))


#: Per table name, the axes along which the table is constant (every slice equal to the first).
_UNIFORM_AXES: dict[str, tuple[int, ...]] = {}


def _uniform_axes(a: np.ndarray) -> tuple[int, ...]:
    name = table_name(a)
    hit = _UNIFORM_AXES.get(name)
    if hit is None:
        hit = tuple(ax for ax, d in enumerate(a.shape)
                    if d > 1 and bool(np.all(a == a.take([0], axis=ax))))  # fmt: skip
        _UNIFORM_AXES[name] = hit
    return hit


def _uniform_axes_dropped(a: np.ndarray, idx: Sequence[Any]) -> tuple[np.ndarray, tuple]:
    """``a[idx]`` as a read of the table with each axis along which ``a`` is constant cut to
    its first slice, read there at 0, where that axis's index is proved in range.

    Exact: when ``a[..., i, ...]`` equals ``a[..., 0, ...]`` for every ``i`` of the axis, a read
    at any in-range index expression ``e`` has the value of the read at 0, and the index is
    rewritten only where its interval over the ranges of its symbols lies in ``[0, d)``. So a
    mask broadcast along the channels (a softmax atom's) and the same mask read at channel 0
    (the reference's) are one table."""
    idx = tuple(idx)
    axes = [ax for ax in _uniform_axes(a) if _within(idx[ax], a.shape[ax])]
    if not axes:
        return a, idx
    for ax in axes:
        a = a.take([0], axis=ax)
    idx = tuple(ZERO if ax in axes else i for ax, i in enumerate(idx))
    return np.ascontiguousarray(a), idx


def _within(i: Any, d: int) -> bool:
    """Whether the index expression ``i`` lies in ``[0, d)`` for every value of its symbols."""
    lo, hi = interval(simplify_index(i))
    return lo is not None and hi is not None and lo >= 0 and hi <= d - 1
