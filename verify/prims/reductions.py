"""Reductions: ``reduce_*``, ``argmax`` / ``argmin``, the cumulative ``cum*`` and ``sort``.

Element level: every kept position reduced over its values (sums and products of exact
expressions, maxima with the terms common to every value taken out, :func:`_extremum`; concrete
integers and booleans by NumPy); ``argmax`` a :class:`verify._jaxpr.Choice` where the comparisons
are symbolic. Tensor level: a reduction is a sum (a maximum) over a bound variable
(:func:`verify._tensor.reduce`), a product over a short axis written out factor by factor, a
prefix sum a sum under a bracket, a prefix product or maximum (``cumprod``, ``cummax``,
``cummin``) written out position by position over a short axis (a sum over the positions ``m``
of ``[i == m]`` times the product, or the maximum as ``reduce_max`` writes it, of the prefix
up to ``m``), ``argmax`` a first-maximum ``Piecewise`` chain over the (short) axis, ``sort``
(tensor level only) order statistics in the stable order, its sorted ``iota`` a choice among
the positions (:func:`verify.prims.indexing._at_chosen` reads a gather at it).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import symengine as se

from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import (
    Choice,
    Interpreter,
    _bool_value,
    _concrete,
    _ew,
    out_kind,
    to_float_array,
)
from .._primitives import Unsupported, element, out_dtype, tensor
from .._tensor import TArray
from .._tjaxpr import TInterpreter, concrete, from_concrete, out_tkind
from .elementwise import _INFINITE, _known_relation
from .indexing import _branch


def _reduce(a: np.ndarray, axes: Sequence[int], fn: Callable[[list[Any]], Any]) -> np.ndarray:
    axes = tuple(sorted(ax % a.ndim for ax in axes)) if a.ndim else ()
    keep = [d for d in range(a.ndim) if d not in axes]
    moved = np.transpose(a, keep + list(axes))
    kshape = tuple(a.shape[d] for d in keep)
    flat = moved.reshape(kshape + (-1,))
    out = np.empty(kshape, dtype=object)
    for ix in np.ndindex(kshape):
        out[ix] = fn(list(flat[ix]))
    return out


def _extremum(fn: Any, xs: list[Any]) -> Any:
    """``fn(*xs)`` (``se.Max`` or ``se.Min``) with the terms added to every value taken out,
    ``max_i (a_i + c) = max_i a_i + c``: the maximum of values already shifted by their maximum
    (the JAX backend's second shift of softmax-like forms) is then exactly 0."""
    if len(xs) == 1:
        return xs[0]
    terms = [set(x.args) if isinstance(x, se.Add) else {x} for x in xs]
    # an infinite common value is not taken out: max(-oo, -oo) is -oo, not nan + -oo
    common = {t for t in terms[0].intersection(*terms[1:]) if t not in _INFINITE}
    c = se.Add(*common) if common else se.Integer(0)
    return fn(*[x - c for x in xs]) + c


@element("reduce_sum")
def _reduce_sum_e(it: Interpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> np.ndarray:
    a = invals[0]
    if out_kind(eqn) != "f":
        if not _concrete(a):
            raise Unsupported("reduce_sum of symbolic integers")
        return np.sum(a, axis=tuple(axes)).astype(out_dtype(eqn))
    return _reduce(to_float_array(a), axes, lambda xs: se.Add(*xs) if xs else se.Integer(0))


@tensor("reduce_sum")
def _reduce_sum_t(it: TInterpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> TArray:
    a = invals[0]
    if out_tkind(eqn) != "f":
        c = concrete(a)
        if c is None:
            raise Unsupported("reduce_sum of symbolic integers")
        return from_concrete(np.sum(c, axis=tuple(axes)).astype(out_dtype(eqn)))
    return TT.reduce(a, tuple(axes), False, "sum")


@element("reduce_prod")
def _reduce_prod_e(it: Interpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> np.ndarray:
    a = invals[0]
    if _concrete(a):
        return np.prod(a, axis=tuple(axes)).astype(out_dtype(eqn))
    return _reduce(a, axes, lambda xs: se.Mul(*xs) if xs else se.Integer(1))


#: A product is written out factor by factor up to this many factors per element.
PROD_MAX = 64


@tensor("reduce_prod")
def _reduce_prod_t(it: TInterpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> TArray:
    """The product of the values over ``axes``, written out (no bound variable: a product over
    a symbolic range has no term); at most :data:`PROD_MAX` factors."""
    a = invals[0]
    axes = tuple(sorted(ax % a.ndim for ax in axes))
    if out_tkind(eqn) != "f":
        c = concrete(a)
        if c is None:
            raise Unsupported("reduce_prod of symbolic integers")
        return from_concrete(np.prod(c, axis=axes).astype(out_dtype(eqn)))
    sizes = [a.shape[d] for d in axes]
    if not all(isinstance(n, int | np.integer) for n in sizes):
        raise Unsupported("reduce_prod over an axis of symbolic size")
    count = int(np.prod(sizes, dtype=np.int64))
    if count > PROD_MAX:
        raise Unsupported(f"reduce_prod over {count} entries (at most {PROD_MAX})")
    keep = [d for d in range(a.ndim) if d not in axes]

    def fn(idx: tuple) -> Any:
        factors = []
        for combo in itertools.product(*[range(n) for n in sizes]):
            at: list[Any] = [None] * a.ndim
            for d, i in zip(keep, idx, strict=True):
                at[d] = i
            for d, j in zip(axes, combo, strict=True):
                at[d] = se.Integer(j)
            factors.append(a.at(tuple(at)))
        return se.Mul(*factors) if factors else T.ONE

    return TArray(tuple(a.shape[d] for d in keep), fn, "f")


@element("reduce_max", "reduce_min")
def _reduce_max_e(it: Interpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> np.ndarray:
    a = invals[0]
    big = eqn.primitive.name == "reduce_max"
    if _concrete(a):
        return (np.max if big else np.min)(a, axis=tuple(axes))
    if any(a.shape[d] == 0 for d in axes):
        raise Unsupported("max over an empty axis")
    fn = se.Max if big else se.Min
    return _reduce(a, axes, lambda xs: _extremum(fn, xs))


@tensor("reduce_max", "reduce_min")
def _reduce_max_t(it: TInterpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> TArray:
    a = invals[0]
    if eqn.primitive.name == "reduce_min":
        return TT.unary(TT.reduce(TT.unary(a, lambda v: -v, a.kind), tuple(axes), False, "max"),
                        lambda v: -v, a.kind)  # fmt: skip
    return TT.reduce(a, tuple(axes), False, "max")


@element("reduce_and", "reduce_or")
def _reduce_bool_e(it: Interpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> np.ndarray:
    a = invals[0]
    is_and = eqn.primitive.name == "reduce_and"
    if _concrete(a):
        return (np.all if is_and else np.any)(a, axis=tuple(axes))
    return _reduce(a, axes, lambda xs: (se.And if is_and else se.Or)(*xs))


@tensor("reduce_and", "reduce_or")
def _reduce_bool_t(it: TInterpreter, eqn: Any, invals: list, *, axes: Any, **_: Any) -> TArray:
    """Over concrete conditions, NumPy's; over a relation on values that holds or fails for
    every element (:func:`verify.prims.elementwise._known_relation`: ``x != x``, the NaN check
    of ``jnp.quantile``, is false for every real ``x``), that value over a nonempty axis (an
    empty one gives the identity); any other relation is refused, never guessed."""
    a = invals[0]
    is_and = eqn.primitive.name == "reduce_and"
    c = concrete(a) if a.kind in "ic" else None
    if c is None:
        known = _known_relation(a) if a.kind == "b" else None
        if known is None or not all(isinstance(d, int | np.integer) for d in a.shape):
            raise Unsupported(f"{eqn.primitive.name} of symbolic conditions")
        empty = any(a.shape[d] == 0 for d in axes)
        shape = tuple(eqn.outvars[0].aval.shape)
        return from_concrete(np.full(shape, is_and if empty else known, dtype=bool))
    fn = np.all if is_and else np.any
    return from_concrete(fn(c.astype(bool), axis=tuple(axes)))


@element("argmax", "argmin")
def _argmax_e(
    it: Interpreter, eqn: Any, invals: list, *, axes: Any, index_dtype: Any
) -> np.ndarray:
    a = to_float_array(invals[0])
    (axis,) = axes
    big = eqn.primitive.name == "argmax"
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape[:-1], dtype=object)
    for ix in np.ndindex(out.shape):
        row = list(moved[ix])
        conds = []
        for k, x in enumerate(row):
            c = [(x > y if big else x < y) for y in row[:k]]
            c += [(x >= y if big else x <= y) for y in row[k + 1 :]]
            conds.append(se.And(*c) if c else se.true)
        decided = [_bool_value(c) for c in conds]
        if all(d is not None for d in decided):
            out[ix] = next(k for k, d in enumerate(decided) if d)
        else:
            out[ix] = Choice(tuple(range(len(row))), tuple(conds))
    if all(not isinstance(x, Choice) for x in out.reshape(-1)):
        return out.astype(np.dtype(index_dtype))
    return out


@tensor("argmax", "argmin")
def _argmax_t(it: TInterpreter, eqn: Any, invals: list, *, axes: Any, index_dtype: Any) -> TArray:
    a = invals[0]
    (axis,) = axes
    n = a.shape[axis]
    big = eqn.primitive.name == "argmax"
    if n > T.UNROLL_MAX * 8:
        raise Unsupported(f"{eqn.primitive.name} over {n} entries")
    shape = tuple(d for i, d in enumerate(a.shape) if i != axis)

    def fn(idx: tuple) -> Any:
        def cell(j: int) -> tuple:
            return (*idx[:axis], se.Integer(j), *idx[axis:])

        vals = [a.at(cell(j)) for j in range(n)]
        pieces = []
        for k in range(n):
            conds = []
            for j in range(n):
                if j == k:
                    continue
                x, y = vals[k], vals[j]
                if big:
                    conds.append(se.Lt(y, x) if j < k else se.Le(y, x))
                else:
                    conds.append(se.Lt(x, y) if j < k else se.Le(x, y))
            cond = se.And(*conds) if len(conds) > 1 else (conds[0] if conds else se.true)
            pieces.append((se.Integer(k), cond))
        pieces[-1] = (pieces[-1][0], se.true)
        return se.Piecewise(*pieces) if len(pieces) > 1 else pieces[0][0]

    return TArray(shape, fn, "i")


def _cumulative(fn: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, *, axis: int, reverse: bool) -> np.ndarray:
        a = invals[0]
        if out_kind(eqn) == "f":
            a = to_float_array(a)
        elif not _concrete(a):
            raise Unsupported("cumulative op on symbolic integers")
        moved = np.moveaxis(a, axis, 0).copy()
        order = range(moved.shape[0] - 1, -1, -1) if reverse else range(moved.shape[0])
        acc = None
        for i in order:
            acc = moved[i] if acc is None else _ew(fn, acc, moved[i])
            moved[i] = acc
        return np.moveaxis(moved, 0, axis)

    return impl


def _prefix_sum(a: TArray, axis: int, reverse: bool, term: Callable[[Any], Any]) -> TArray:
    """``out[..., i, ...] = sum over k <= i (k >= i when reversed) of term(a[..., k, ...])``."""
    n = a.shape[axis]

    def fn(idx: tuple[Any, ...]) -> Any:
        i = idx[axis]

        def body(k: Any) -> Any:
            at = list(idx)
            at[axis] = k
            return term(a.at(tuple(at))) * T.ge(k - i if reverse else i - k)

        return T.ssum(body, 0, n)

    return TArray(a.shape, fn, a.kind)


element("cumsum")(_cumulative(lambda x, y: x + y))
element("cumprod")(_cumulative(lambda x, y: x * y))
element("cummax")(_cumulative(lambda x, y: se.Max(x, y)))
element("cummin")(_cumulative(lambda x, y: se.Min(x, y)))


@tensor("cumsum")
def _cumsum_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, reverse: bool,
              **_: Any) -> TArray:  # fmt: skip
    return _prefix_sum(invals[0], axis, reverse, lambda v: v)


#: A cumulative product or maximum is written out position by position (a product over a
#: symbolic range has no term, and the derivative of a maximum needs its values): at most this
#: many positions along the axis.
CUM_MAX = 16


def _per_position(a: TArray, axis: int, reverse: bool, what: str,
                  prefix: Callable[[Callable[[Any], Any], int, int], Any]) -> TArray:  # fmt: skip
    """``out[..., i, ...] = sum_m [i == m] prefix(read, lo, hi)``, ``read(k)`` the value
    ``a[..., k, ...]`` and ``[lo, hi)`` the prefix ``k <= m`` (``k >= m`` when reversed): one
    term per position of the (static, at most :data:`CUM_MAX`) axis."""
    n = a.shape[axis]
    if not isinstance(n, int | np.integer):
        raise Unsupported(f"{what} over an axis of symbolic size")
    if n > CUM_MAX:
        raise Unsupported(f"{what} over an axis of {n} entries (at most {CUM_MAX}: each "
                          "position's prefix is written out)")  # fmt: skip

    def fn(idx: tuple[Any, ...]) -> Any:
        i = idx[axis]

        def read(k: Any) -> Any:
            at = list(idx)
            at[axis] = k
            return a.at(tuple(at))

        terms = []
        for m in range(n):
            sel = T.eq(i - m)
            if sel == 0:
                continue
            lo, hi = (m, n) if reverse else (0, m + 1)
            terms.append(sel * prefix(read, lo, hi))
        return se.Add(*terms) if terms else T.ZERO

    return TArray(a.shape, fn, a.kind)


@tensor("cumprod")
def _cumprod_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, reverse: bool,
               **_: Any) -> TArray:  # fmt: skip
    """Each position's prefix product written out (:func:`_per_position`)."""
    if out_tkind(eqn) != "f":
        c = concrete(invals[0])
        if c is None:
            raise Unsupported("cumprod of symbolic integers")
        moved = np.flip(c, axis) if reverse else c
        out = np.cumprod(moved, axis=axis)
        return from_concrete((np.flip(out, axis) if reverse else out).astype(out_dtype(eqn)))
    return _per_position(invals[0], axis, reverse, "cumprod", _prefix_prod)


def _prefix_prod(read: Callable[[Any], Any], lo: int, hi: int) -> Any:
    return se.Mul(*[read(se.Integer(k)) for k in range(lo, hi)])


@tensor("cummax", "cummin")
def _cummax_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, reverse: bool,
              **_: Any) -> TArray:  # fmt: skip
    """Each position's prefix maximum written out as ``reduce_max`` writes a maximum over an
    axis (:func:`verify._tensor.reduce`: ``Max`` of the values, two of them splitting a tie in
    halves, more giving it to the first maximum, ops.md's ``max`` and ``max_pool``); ``cummin``
    the negated maximum of the negated values."""
    a = invals[0]
    if out_tkind(eqn) != "f":
        c = concrete(a)
        if c is None:
            raise Unsupported(f"{eqn.primitive.name} of symbolic integers")
        acc = np.maximum if eqn.primitive.name == "cummax" else np.minimum
        moved = np.flip(c, axis) if reverse else c
        out = acc.accumulate(moved, axis=axis)
        return from_concrete((np.flip(out, axis) if reverse else out).astype(out_dtype(eqn)))
    if eqn.primitive.name == "cummin":
        neg = TT.unary(a, lambda v: -v, a.kind)
        return TT.unary(_per_position(neg, axis, reverse, "cummin", T.smax),
                        lambda v: -v, a.kind)  # fmt: skip
    return _per_position(a, axis, reverse, "cummax", T.smax)


@tensor("cumlogsumexp")
def _cumlogsumexp_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, reverse: bool,
                    **_: Any) -> TArray:  # fmt: skip
    if out_tkind(eqn) != "f":
        raise Unsupported(f"cumlogsumexp on {eqn.outvars[0].aval.dtype}")
    return TT.unary(_prefix_sum(invals[0], axis, reverse, se.exp), se.log, "f")


#: A sort is written out as order statistics over an axis of at most this many entries (each
#: output position a choice among the entries, its conditions counting the entries before
#: each: the terms grow as the cube of the length).
SORT_MAX = 16


def _stable_ranks(keys: list[Any], descending: bool = False) -> list[list[Any]]:
    """``cond[k][m]``: entry ``k`` is at position ``m`` of the stable ascending sort of
    ``keys`` (real values), ``m`` entries precede it: the count of the earlier entries ``j``
    with ``keys[j] <= keys[k]`` and the later ones with ``keys[j] < keys[k]`` (each a 0/1
    ``Piecewise``) is ``m``. ``descending``: the stable descending order (``top_k``'s: an
    earlier entry precedes when ``keys[j] >= keys[k]``, a later one when ``keys[j] >
    keys[k]``, so equal values keep the lower index first). For any real values the ranks are
    a permutation: exactly one ``k`` has each position."""
    n = len(keys)
    le: Callable[[Any, Any], Any] = se.Le if not descending else lambda a, b: se.Le(b, a)
    lt: Callable[[Any, Any], Any] = se.Lt if not descending else lambda a, b: se.Lt(b, a)
    out = []
    for k in range(n):
        before = [le(keys[j], keys[k]) if j < k else lt(keys[j], keys[k])
                  for j in range(n) if j != k]  # fmt: skip
        count = se.Add(*[se.Piecewise((T.ONE, b), (T.ZERO, True)) for b in before])
        out.append([se.Eq(count, m) for m in range(n)])
    return out


def _ordered(keys: TArray, dimension: int, size: int, descending: bool,
             values: Callable[[tuple[Any, ...], int], Any], kind: str) -> TArray:  # fmt: skip
    """The first ``size`` positions along ``dimension`` of the stable (ascending or
    descending) order of ``keys``: ``out[..., i, ...] = sum_m [i == m] v_m``, where ``v_m`` is
    ``sum_k values(idx, k) [k is at m]`` for a float ``kind`` (:func:`_stable_ranks`, the
    indicators as :func:`verify.prims.indexing._branch` writes a ``Piecewise``'s branches, the
    last entry's condition ``True`` since exactly one holds) and otherwise the ``Piecewise``
    choice of ``values(idx, k)`` (an index: the permutation, which ``gather`` /
    ``scatter-add`` read case by case)."""
    n = keys.shape[dimension]

    def at(a: TArray, idx: tuple[Any, ...], k: int) -> Any:
        pos = list(idx)
        pos[dimension] = se.Integer(k)
        return a.at(tuple(pos))

    def fn(idx: tuple[Any, ...]) -> Any:
        i = idx[dimension]
        ranks = _stable_ranks([at(keys, idx, k) for k in range(n)], descending)
        terms = []
        for m in range(size):
            sel = T.eq(i - m)
            if sel == 0:
                continue
            conds = [ranks[k][m] for k in range(n - 1)] + [se.true]
            if kind == "f":  # each entry times the indicator that it is at m
                value = se.Add(*[values(idx, k) * _branch(conds, k) for k in range(n)])
            else:
                pieces = [(values(idx, k), c) for k, c in enumerate(conds)]
                value = se.Piecewise(*pieces) if n > 1 else pieces[0][0]
            terms.append(sel * value)
        return se.Add(*terms) if terms else T.ZERO

    shape = list(keys.shape)
    shape[dimension] = size
    return TArray(tuple(shape), fn, kind)


def _at_axis(a: TArray, dimension: int) -> Callable[[tuple[Any, ...], int], Any]:
    def read(idx: tuple[Any, ...], k: int) -> Any:
        pos = list(idx)
        pos[dimension] = se.Integer(k)
        return a.at(tuple(pos))

    return read


@tensor("sort")
def _sort_t(it: TInterpreter, eqn: Any, invals: list, *, dimension: int, is_stable: bool,
            num_keys: int) -> list[TArray]:  # fmt: skip
    """Order statistics: every operand permuted as the stable ascending sort of the first puts
    its entries (:func:`_ordered`; an integer operand, the sorted ``iota`` that JAX's
    derivative gathers with, as the ``Piecewise`` choice of its entries, which ``gather`` /
    ``scatter-add`` read case by case). At a tie the stable order decides, and so does the
    derivative: each position's is that of the entry the sort puts there (the branch-wise
    derivative). One key, real values (no NaN), over a static axis of at most
    :data:`SORT_MAX` entries; a key of concrete integers is sorted by NumPy."""
    if num_keys != 1:
        raise Unsupported(f"sort with {num_keys} keys")
    keys = invals[0]
    n = keys.shape[dimension]
    if not isinstance(n, int | np.integer):
        raise Unsupported("sort over an axis of symbolic size")
    if keys.kind != "f":
        c = concrete(keys)
        vals = [concrete(v) for v in invals]
        if c is None or any(v is None for v in vals):
            raise Unsupported("sort of symbolic integers")
        order = np.argsort(c, axis=dimension, kind="stable")
        return [from_concrete(np.take_along_axis(v, order, dimension).astype(
            eqn.outvars[j].aval.dtype)) for j, v in enumerate(vals)]  # fmt: skip
    if not is_stable and len(invals) > 1:
        raise Unsupported("an unstable sort of several operands (the order of ties unspecified)")
    if n > SORT_MAX:
        raise Unsupported(f"sort over an axis of {n} entries (at most {SORT_MAX}: each position "
                          "is a choice among the entries, written out)")  # fmt: skip
    return [_ordered(keys, dimension, n, False, _at_axis(a, dimension), a.kind) for a in invals]


@tensor("top_k")
def _top_k_t(it: TInterpreter, eqn: Any, invals: list, *, k: int, axis: int = -1,
             **_: Any) -> list[TArray]:  # fmt: skip
    """The ``k`` largest entries along ``axis`` and their positions, in ``lax.top_k``'s order:
    descending, equal values with the lower index first (the stable descending order,
    :func:`_ordered`); the values order statistics, the indices the ``Piecewise`` choice of
    the positions (read case by case by the ``gather`` / ``scatter-add`` of JAX's
    derivative). Static ``k``, real values (no NaN), an axis of at most :data:`SORT_MAX`
    entries; concrete integers by NumPy."""
    a = invals[0]
    dimension = axis % a.ndim
    n = a.shape[dimension]
    if not isinstance(n, int | np.integer) or not isinstance(k, int | np.integer):
        raise Unsupported("top_k over an axis of symbolic size")
    if not 0 <= k <= n:
        raise Unsupported(f"top_k with k = {k} over an axis of {n} entries")
    idx_dtype = eqn.outvars[1].aval.dtype
    if a.kind != "f":
        c = concrete(a)
        if c is None:
            raise Unsupported("top_k of symbolic integers")
        keys = c.astype(np.int64)
        order = np.take(np.argsort(~keys, axis=dimension, kind="stable"), range(k), dimension)
        vals = np.take_along_axis(c, order, dimension).astype(eqn.outvars[0].aval.dtype)
        return [from_concrete(vals), from_concrete(order.astype(idx_dtype))]
    if n > SORT_MAX:
        raise Unsupported(f"top_k over an axis of {n} entries (at most {SORT_MAX}: each position "
                          "is a choice among the entries, written out)")  # fmt: skip
    values = _ordered(a, dimension, k, True, _at_axis(a, dimension), "f")
    indices = _ordered(a, dimension, k, True, lambda idx, j: se.Integer(j), "i")
    return [values, indices]
