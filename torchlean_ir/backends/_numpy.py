"""The NumPy backend: the reference semantics, in float64."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._attrs import ConstArray
from . import _random


def _first_max_onehot(xp: Any, x: Any, axis: int, valid: Any = None) -> Any:
    axis = axis % x.ndim
    xm = x if valid is None else xp.where(valid, x, -np.inf)
    arg = xp.argmax(xm, axis=axis)
    ar = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    onehot = (xp.expand_dims(arg, axis) == ar).astype(x.dtype)
    if valid is not None:  # zero where the mask excludes (a slice with no valid entry: all 0)
        onehot = onehot * np.asarray(valid, dtype=onehot.dtype)
    return onehot


def _any_valid(valid: Any, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Per slice along ``axis``: does the static mask ``valid`` allow any entry?"""
    return np.any(np.broadcast_to(np.asarray(valid, dtype=bool), shape), axis=axis, keepdims=True)


def _shifted_exp(
    xp: Any, x: Any, axis: int, valid: Any, stop: Any, twice: bool = False
) -> tuple[Any, Any]:
    """``(exp(x - m), m)`` with ``m`` the (stopped) maximum of the valid entries along ``axis``
    (0 for a slice the static mask leaves empty); invalid entries are exactly 0. As in the core
    softmax, the shift assumes finite inputs (an infinite one gives NaN). ``twice``: shift by the
    maximum of the shifted values again (the JAX backend, see ``twice_shifted``)."""

    def top(v: Any) -> Any:
        if valid is None:
            return stop(xp.max(v, axis=axis, keepdims=True))
        best = xp.max(v, axis=axis, keepdims=True)
        return stop(xp.where(_any_valid(valid, v.shape, axis), best, 0.0))

    if valid is not None:
        x = xp.where(valid, x, -np.inf)
    m = top(x)
    s = x - m
    if twice:
        m2 = top(s)
        s, m = s - m2, m + m2
    return xp.exp(s), m


def _logsumexp(
    xp: Any, x: Any, axis: int, keepdims: bool, valid: Any, stop: Any, twice: bool = False
) -> Any:
    e, m = _shifted_exp(xp, x, axis, valid, stop, twice)
    out = xp.log(xp.sum(e, axis=axis, keepdims=True)) + m
    return out if keepdims else xp.squeeze(out, axis=axis)


def _softmax(xp: Any, x: Any, axis: int, valid: Any, stop: Any, twice: bool = False) -> Any:
    e, _ = _shifted_exp(xp, x, axis, valid, stop, twice)
    s = xp.sum(e, axis=axis, keepdims=True)
    if valid is not None:
        s = xp.where(_any_valid(valid, x.shape, axis), s, 1.0)
    return e / s


def _softplus(xp: Any, x: Any) -> Any:
    return xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(x, 0.0)


def _sigmoid(xp: Any, x: Any) -> Any:
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1.0, e) / (1.0 + e)


#: ``math.erf`` (correctly rounded to float64 but for an ulp) elementwise: NumPy has no erf.
_ERF = np.vectorize(math.erf, otypes=[np.float64])


class NumpyBackend:
    """Array operations used by op rules, on NumPy arrays in float64 (the reference semantics;
    :func:`numpy_backend` gives the same functions in float32, for an eager session in that
    dtype).

    Every backend offers the same functions with the same meaning (the JAX backend on
    ``jax.numpy`` arrays, the symbolic backend on exact symbolic arrays); op rules may use these
    functions, Python arithmetic operators (``+ - * / ** @``, unary ``-``, comparisons), ``.shape``,
    ``.ndim`` and basic indexing with static slices, and nothing else.
    """

    name = "numpy"
    index_dtype = np.int64

    def __init__(self, float_dtype: Any = np.float64) -> None:
        self.float_dtype = _random.float_dtype(float_dtype).type

    def __repr__(self) -> str:
        return f"NumpyBackend({np.dtype(self.float_dtype)})"

    # -- creation -------------------------------------------------------------------------
    def static_arrays(self, *sizes: Any) -> Any:
        """The array module that builds static arrays from ``sizes`` (a pooling rule's padding
        mask): NumPy. Static arrays are constants of a compiled program; the verifier's tensor
        level builds them with symbolic sizes instead."""
        return np

    def asarray(self, value: Any) -> Any:
        """A float array from a tensor literal, NumPy data or a Python number."""
        if isinstance(value, ConstArray):
            value = value.to_numpy()
        return np.asarray(value, dtype=self.float_dtype)

    def zeros(self, shape: Sequence[int]) -> Any:
        return np.zeros(tuple(shape), dtype=self.float_dtype)

    def ones(self, shape: Sequence[int]) -> Any:
        return np.ones(tuple(shape), dtype=self.float_dtype)

    def full(self, shape: Sequence[int], value: float) -> Any:
        return np.full(tuple(shape), value, dtype=self.float_dtype)

    def zeros_like(self, x: Any) -> Any:
        return self.zeros(x.shape)

    def ones_like(self, x: Any) -> Any:
        return self.ones(x.shape)

    # -- elementwise ----------------------------------------------------------------------
    def exp(self, x: Any) -> Any:
        return np.exp(x)

    def log(self, x: Any) -> Any:
        return np.log(x)

    def log1p(self, x: Any) -> Any:
        return np.log1p(x)

    def expm1(self, x: Any) -> Any:
        return np.expm1(x)

    def tanh(self, x: Any) -> Any:
        return np.tanh(x)

    def sqrt(self, x: Any) -> Any:
        return np.sqrt(x)

    def erf(self, x: Any) -> Any:
        x = np.asarray(x)
        return _ERF(x).astype(x.dtype if x.dtype.kind == "f" else self.float_dtype)

    def pi(self) -> Any:
        return np.asarray(np.pi, dtype=self.float_dtype)

    def abs(self, x: Any) -> Any:
        return np.abs(x)

    def sign(self, x: Any) -> Any:
        return np.sign(x)

    def maximum(self, a: Any, b: Any) -> Any:
        """Elementwise maximum, as a value (derivative conventions are the rules' business)."""
        return np.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return np.minimum(a, b)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return np.where(cond, a, b)

    def logical_and(self, a: Any, b: Any) -> Any:
        return np.logical_and(a, b)

    def logical_or(self, a: Any, b: Any) -> Any:
        return np.logical_or(a, b)

    def logical_not(self, a: Any) -> Any:
        return np.logical_not(a)

    def to_float(self, cond: Any) -> Any:
        """A boolean array as 0.0 / 1.0."""
        return np.asarray(cond, dtype=self.float_dtype)

    def softplus(self, x: Any) -> Any:
        """``log(1 + exp(x))``, computed stably as ``log1p(exp(-|x|)) + max(x, 0)``."""
        return _softplus(np, x)

    def sigmoid(self, x: Any) -> Any:
        """``1 / (1 + exp(-x))`` with full relative accuracy on both tails (no overflow)."""
        return _sigmoid(np, x)

    # -- reductions and linear algebra ----------------------------------------------------
    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return np.sum(x, axis=axis, keepdims=keepdims)

    def max(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return np.max(x, axis=axis, keepdims=keepdims)

    def matmul(self, a: Any, b: Any) -> Any:
        return np.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        return np.einsum(subscripts, *operands)

    def first_max_onehot(self, x: Any, axis: int = -1, valid: Any = None) -> Any:
        """A 0/1 mask marking, along ``axis``, the first maximal element (row-major order).

        ``valid`` (optional) is a static NumPy boolean mask broadcastable to ``x``: entries where
        it is false never win and are not compared (padded cells of a pooling window); a slice
        with no valid entry is all zeros."""
        return _first_max_onehot(np, x, axis, valid)

    def logsumexp(self, x: Any, axis: int = -1, keepdims: bool = False, valid: Any = None) -> Any:
        """``log(sum(exp(x)))`` along ``axis`` over the entries ``valid`` allows (a static mask
        as in :meth:`first_max_onehot`); computed max-shifted, so it never overflows."""
        return _logsumexp(np, x, axis, keepdims, valid, self.stop_gradient)

    def softmax(self, x: Any, axis: int = -1, valid: Any = None) -> Any:
        """``exp(x) / sum(exp(x))`` along ``axis`` over the entries ``valid`` allows; the others
        get exactly 0 (a slice with no valid entry is all zeros). Computed max-shifted."""
        return _softmax(np, x, axis, valid, self.stop_gradient)

    # -- shape ----------------------------------------------------------------------------
    def reshape(self, x: Any, shape: Sequence[int]) -> Any:
        return np.reshape(x, tuple(shape))

    def transpose(self, x: Any, axes: Sequence[int] | None = None) -> Any:
        return np.transpose(x, axes)

    def swapaxes(self, x: Any, a: int, b: int) -> Any:
        return np.swapaxes(x, a, b)

    def moveaxis(self, x: Any, src: int, dst: int) -> Any:
        return np.moveaxis(x, src, dst)

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Any:
        return np.broadcast_to(x, tuple(shape))

    def expand_dims(self, x: Any, axis: int) -> Any:
        return np.expand_dims(x, axis)

    def concatenate(self, xs: Sequence[Any], axis: int = 0) -> Any:
        return np.concatenate(list(xs), axis=axis)

    def stack(self, xs: Sequence[Any], axis: int = 0) -> Any:
        return np.stack(list(xs), axis=axis)

    def pad(self, x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> Any:
        return np.pad(x, [tuple(w) for w in widths], constant_values=value)

    def take(self, x: Any, indices: Sequence[int], axis: int = 0) -> Any:
        """Static gather (indices are Python ints, in range)."""
        return np.take(x, np.asarray(indices, dtype=np.int64), axis=axis)

    # -- runtime indices (nat inputs) -----------------------------------------------------
    def gather(self, x: Any, idx: Any, axis: int = 0) -> Any:
        """``x`` indexed along ``axis`` by a runtime nat scalar or vector; an out-of-range index
        reads zeros."""
        idx = np.asarray(idx, dtype=np.int64)
        n = x.shape[axis]
        if n == 0:  # every index is out of range
            return np.zeros(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], self.float_dtype)
        ok = idx < n
        safe = np.where(ok, idx, 0)
        taken = np.take(x, safe, axis=axis)
        mask_shape = [1] * taken.ndim
        for i, d in enumerate(idx.shape):
            mask_shape[axis + i] = d
        return np.where(np.reshape(ok, mask_shape), taken, 0.0)

    def scatter_add(self, x: Any, idx: Any, updates: Any, axis: int = 0) -> Any:
        """A copy of ``x`` with ``updates`` added at the runtime indices ``idx`` along ``axis``
        (repeated indices accumulate); out-of-range indices are dropped."""
        idx = np.asarray(idx, dtype=np.int64)
        out = np.array(x, dtype=self.float_dtype, copy=True)
        n = x.shape[axis]
        moved = np.moveaxis(out, axis, 0)
        upd = np.moveaxis(np.asarray(updates), axis, 0) if idx.ndim else np.asarray(updates)
        flat_idx = idx.reshape(-1)
        upd = upd.reshape((flat_idx.size,) + moved.shape[1:])
        for k, i in enumerate(flat_idx):
            if 0 <= i < n:
                moved[i] += upd[k]
        return out

    def stop_gradient(self, x: Any) -> Any:
        return x

    def max_shift(self, x: Any, axis: int = -1) -> Any:
        """``x - max(x)`` along ``axis`` (the maximum stopped: no gradient flows through it),
        the shift of softmax-like forms; its maximum is exactly 0 in every backend (the JAX
        backend shifts twice for that, see ``twice_shifted``)."""
        return x - self.stop_gradient(self.max(x, axis=axis, keepdims=True))

    def wide(self) -> NumpyBackend:
        """The backend of the widest float this one offers (here: itself, float64). A rule
        whose intermediate values leave the range of its dtype, although its results do not,
        runs there (see :func:`torchlean_ir.lower_widened`)."""
        return self

    # -- seeded randomness ----------------------------------------------------------------
    def rand_uniform(self, seed: int, counter: int, shape: Sequence[int], dtype: Any = None) -> Any:
        """The SplitMix64 uniform draws in [0, 1) of the random node at position ``counter``
        (see :mod:`torchlean_ir.backends._random`), rounded toward zero in ``dtype`` (``"f32"``
        or ``"f64"``; default, and at most, this backend's precision) and returned in this
        backend's dtype; bit-identical in every backend."""
        narrow = _random.narrowest(self.float_dtype, dtype)
        return _random.uniform(seed, counter, shape, narrow).astype(self.float_dtype, copy=False)


NUMPY = NumpyBackend()
_FLOAT32 = NumpyBackend(np.float32)


def numpy_backend(dtype: Any = np.float64) -> NumpyBackend:
    """The NumPy backend in ``dtype`` (``"float64"``/``"f64"``: :data:`NUMPY`, the reference;
    ``"float32"``/``"f32"``: the same rules in float32, as an eager session in that dtype runs
    them). Rules may still produce a wider dtype here and there; callers cast results."""
    dt = _random.float_dtype(dtype)
    if dt == np.float64:
        return NUMPY
    if dt == np.float32:
        return _FLOAT32
    raise ValueError(f"the NumPy backend computes in float32 or float64, not {dt}")
