"""The tensor backend: the backend functions op rules call (meanings as in ``NumpyBackend``),
on :class:`verify._tensor.TArray` values. The softmax returns the atoms of
:mod:`verify._tsoftmax`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import FLOAT_CONSTANTS, cast_floats, narrowest, piecewise, uniform

from . import _tsoftmax
from . import terms as T
from ._dims import is_symbolic
from ._tensor import (
    Index,
    TArray,
    _mask,
    asarray,
    binary,
    broadcast_to,
    concatenate,
    constant,
    einsum,
    expand_dims,
    from_numpy,
    gather,
    logical,
    matmul,
    moveaxis,
    pad,
    reduce,
    reshape,
    scatter_add,
    stack,
    swapaxes,
    take,
    transpose,
    unary,
    valid_exp,
    where,
)

# -- the backend -------------------------------------------------------------------------------


def _gt0(v: Any) -> Any:
    """``v > 0``, decided where the sign of ``v`` is known (a sum of exponentials)."""
    return T.known_relation(se.Lt(T.ZERO, v))


def _float_unary(fn: Callable[[Any], Any]) -> Callable[[Any, Any], TArray]:
    """A backend method applying ``fn`` to every element (a real result)."""

    def method(self: Any, x: Any) -> TArray:
        return unary(x, fn, "f")

    return method


class TensorBackend:
    """The backend functions on :class:`TArray` (meanings as in ``NumpyBackend``); those that
    are :mod:`verify._tensor`'s own functions, unchanged, are taken as they are."""

    name = "tensor"
    float_dtype = object
    index_dtype = np.int64

    def asarray(self, value: Any) -> TArray:
        return asarray(cast_floats(value))

    def static_arrays(self, *sizes: Any) -> Any:
        """NumPy for concrete sizes (the static array is then a table, as in the other
        backends); for symbolic ones, :data:`STATIC`, which builds it at tensor level with the
        same code (``torchlean_ir/ops/_windows.valid_mask``)."""
        return STATIC if is_symbolic(sizes) else np

    def zeros(self, shape: Sequence[int]) -> TArray:
        return constant(0, tuple(shape))

    def ones(self, shape: Sequence[int]) -> TArray:
        return constant(1, tuple(shape))

    def full(self, shape: Sequence[int], value: float) -> TArray:
        return constant(cast_floats(value), tuple(shape))

    def zeros_like(self, x: Any) -> TArray:
        return self.zeros(asarray(x).shape)

    def ones_like(self, x: Any) -> TArray:
        return self.ones(asarray(x).shape)

    # elementwise
    exp = _float_unary(se.exp)
    log = _float_unary(se.log)
    log1p = _float_unary(lambda v: se.log(1 + v))
    expm1 = _float_unary(lambda v: se.exp(v) - 1)
    tanh = _float_unary(se.tanh)
    sqrt = _float_unary(se.sqrt)
    erf = _float_unary(se.erf)

    def pi(self) -> TArray:
        return TArray((), lambda idx: se.pi, "f")

    def abs(self, x: Any) -> TArray:
        z = T.ZERO
        return unary(x, lambda v: piecewise(_gt0(v), v, piecewise(_gt0(-v), -v, z)), "f")

    def sign(self, x: Any) -> TArray:
        one, z = T.ONE, T.ZERO
        return unary(x, lambda v: piecewise(_gt0(v), one, piecewise(_gt0(-v), -one, z)), "f")

    def maximum(self, a: Any, b: Any) -> TArray:
        return binary(a, b, lambda x, y: se.Max(x, y))

    def minimum(self, a: Any, b: Any) -> TArray:
        return binary(a, b, lambda x, y: se.Min(x, y))

    where = staticmethod(where)

    def logical_and(self, a: Any, b: Any) -> TArray:
        return logical("and", a, b)

    def logical_or(self, a: Any, b: Any) -> TArray:
        return logical("or", a, b)

    def logical_not(self, a: Any) -> TArray:
        return logical("not", a)

    def to_float(self, cond: Any) -> TArray:
        C = asarray(cond)
        if C.kind in "cin":
            return unary(C, lambda v: v, "f")
        one, z = T.ONE, T.ZERO
        return unary(C, lambda c: piecewise(c, one, z), "f")

    softplus = _float_unary(lambda v: se.log(1 + se.exp(v)))
    sigmoid = _float_unary(lambda v: 1 / (1 + se.exp(-v)))

    # reductions and products
    def sum(self, x: Any, axis: Any = None, keepdims: bool = False) -> TArray:
        return reduce(x, axis, keepdims, "sum")

    def max(self, x: Any, axis: Any = None, keepdims: bool = False) -> TArray:
        return reduce(x, axis, keepdims, "max")

    matmul = staticmethod(matmul)
    einsum = staticmethod(einsum)

    def first_max_onehot(self, x: Any, axis: int = -1, valid: Any = None) -> TArray:
        X = asarray(x)
        ax = axis % X.ndim
        n = X.shape[ax]
        if n > T.UNROLL_MAX * 8:
            raise T.TermError(f"first_max_onehot over an axis of {n} entries")
        V = None if valid is None else _mask(valid, X.shape)

        def fn(idx: Index) -> Any:
            def cell(j: int) -> Index:
                sub = list(idx)
                sub[ax] = se.Integer(j)
                return tuple(sub)

            vals = [X.at(cell(j)) for j in range(n)]
            oks = [T.ONE if V is None else V.at(cell(j)) for j in range(n)]
            out = T.ZERO
            for k in range(n):
                conds = []
                for j in range(n):
                    if j == k:
                        continue
                    rel = se.Lt(vals[j], vals[k]) if j < k else se.Le(vals[j], vals[k])
                    # an excluded entry takes no part: its comparison holds
                    conds.append(_or_excluded(oks[j], rel))
                cond = se.And(*conds) if len(conds) > 1 else (conds[0] if conds else se.true)
                win = piecewise(cond, T.ONE, T.ZERO)
                out = out + T.eq(idx[ax] - k) * oks[k] * win
            return out

        return TArray(X.shape, fn, "f")

    _valid_exp = staticmethod(valid_exp)

    def logsumexp(self, x: Any, axis: int = -1, keepdims: bool = False, valid: Any = None) -> Any:
        return self.log(self.sum(self._valid_exp(x, valid), axis=axis, keepdims=keepdims))

    def softmax(self, x: Any, axis: int = -1, valid: Any = None) -> TArray:
        """The softmax's atoms (``verify/_tsoftmax.py``); written out for constant scores."""
        out = _tsoftmax.softmax(x, axis, valid)
        return out if out is not None else _tsoftmax.explicit_softmax(x, valid, axis)

    # shape
    reshape = staticmethod(reshape)
    transpose = staticmethod(transpose)
    swapaxes = staticmethod(swapaxes)
    moveaxis = staticmethod(moveaxis)
    broadcast_to = staticmethod(broadcast_to)
    expand_dims = staticmethod(expand_dims)
    concatenate = staticmethod(concatenate)
    stack = staticmethod(stack)

    def pad(self, x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> TArray:
        return pad(x, widths, cast_floats(value))

    take = staticmethod(take)
    # runtime indices
    gather = staticmethod(gather)
    scatter_add = staticmethod(scatter_add)

    def stop_gradient(self, x: Any) -> Any:
        return x

    def max_shift(self, x: Any, axis: int = -1) -> TArray:
        """``x - max(x)`` along ``axis`` (the shift of softmax-like forms, as in the reference
        backends; the JAX backend's second shift is read from its jaxpr)."""
        return asarray(x) - self.max(x, axis=axis, keepdims=True)

    def rand_uniform(
        self, seed: int, counter: int, shape: Sequence[int], dtype: Any = None
    ) -> TArray:
        """The draws as exact values, rounded toward zero in ``dtype`` and in a float32
        compilation's dtype (``verify/_f32.py``), whichever is narrower."""
        narrow = narrowest(np.float64, dtype, FLOAT_CONSTANTS.get())
        return from_numpy(uniform(seed, counter, shape, narrow))


class StaticArrays:
    """The few NumPy functions static arrays are built with (``arange``, ``logical_and``),
    at tensor level: with symbolic sizes, a pooling rule's padding mask is a product of index
    brackets ``[0 <= o s + k - p < n]`` for every size (see ``TensorBackend.static_arrays``)."""

    @staticmethod
    def arange(n: Any) -> TArray:
        """``0, 1, ..., n - 1`` (``n`` may be a symbolic size)."""
        return TArray((n,), lambda idx: idx[0], "i")

    @staticmethod
    def logical_and(a: Any, b: Any) -> TArray:
        return logical("and", a, b)


STATIC = StaticArrays()


def _or_excluded(ok: Any, rel: Any) -> Any:
    if ok == 1:
        return rel
    if ok == 0:
        return se.true
    return se.Or(se.Eq(ok, 0), rel)


TENSOR = TensorBackend()

__all__ = ["STATIC", "TENSOR", "TensorBackend"]
