"""The JAX backend: op rules run on ``jax.numpy`` arrays (this is the lowering)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._attrs import ConstArray
from . import _random
from ._numpy import _first_max_onehot, _logsumexp, _softmax, _softplus


def twice_shifted(x: Any, axis: int) -> Any:
    """``x - max(x)`` along ``axis``, shifted once more by the maximum of the result.

    In real arithmetic the second maximum is 0. In XLA it is not always: when a multiply that
    produced ``x`` is fused into the subtraction, it is contracted into one FMA (the product
    exact, the maximum computed from the rounded products), and the maximum's own entry comes
    out as the product's rounding error, positive or negative, up to 1e285 for scores of 1e301
    in float64 (1.5e9 in float32): its exp is inf or 0 and the softmax NaN. The second shift
    works on the values the first produced, with nothing left to contract: the maximum's entry
    is exactly 0. (The verifier reads both shifts as common factors ``exp(-max)`` that cancel.)"""
    stop = jax.lax.stop_gradient
    s = x - stop(jnp.max(x, axis=axis, keepdims=True))
    return s - stop(jnp.max(s, axis=axis, keepdims=True))


@cache
def _softmax_call(valid_key: tuple[bytes, tuple[int, ...]] | None) -> Any:
    """A jitted ``tl_softmax`` over the last axis for one static mask (``None``: no mask)."""
    valid = None
    if valid_key is not None:
        valid = np.frombuffer(valid_key[0], dtype=bool).reshape(valid_key[1])

    def tl_softmax(x: Any) -> Any:
        return _softmax(jnp, x, -1, valid, jax.lax.stop_gradient, twice=True)

    return jax.jit(tl_softmax)


class JaxBackend:
    """The same functions as :class:`~torchlean_ir.backends.NumpyBackend`, on ``jax.numpy``
    arrays of one float dtype, traceable under ``jax.jit``."""

    name = "jax"

    def __init__(self, dtype: Any = jnp.float32) -> None:
        self.float_dtype = jnp.dtype(dtype)
        self.index_dtype = jnp.int32

    def __repr__(self) -> str:
        return f"JaxBackend({self.float_dtype})"

    # -- creation -------------------------------------------------------------------------
    def static_arrays(self, *sizes: Any) -> Any:
        """NumPy (see :meth:`NumpyBackend.static_arrays`)."""
        return np

    def asarray(self, value: Any) -> Any:
        if isinstance(value, ConstArray):
            value = value.to_numpy()
        if isinstance(value, np.ndarray | float | int):
            # Literals become constants of the compiled function, not traced inputs.
            return jnp.asarray(np.asarray(value, dtype=self.float_dtype))
        return jnp.asarray(value, dtype=self.float_dtype)

    def zeros(self, shape: Sequence[int]) -> Any:
        return jnp.zeros(tuple(shape), dtype=self.float_dtype)

    def ones(self, shape: Sequence[int]) -> Any:
        return jnp.ones(tuple(shape), dtype=self.float_dtype)

    def full(self, shape: Sequence[int], value: float) -> Any:
        return jnp.full(tuple(shape), value, dtype=self.float_dtype)

    def zeros_like(self, x: Any) -> Any:
        return jnp.zeros(x.shape, dtype=self.float_dtype)

    def ones_like(self, x: Any) -> Any:
        return jnp.ones(x.shape, dtype=self.float_dtype)

    # -- elementwise ----------------------------------------------------------------------
    def exp(self, x: Any) -> Any:
        return jnp.exp(x)

    def log(self, x: Any) -> Any:
        return jnp.log(x)

    def log1p(self, x: Any) -> Any:
        return jnp.log1p(x)

    def expm1(self, x: Any) -> Any:
        return jnp.expm1(x)

    def tanh(self, x: Any) -> Any:
        return jnp.tanh(x)

    def sqrt(self, x: Any) -> Any:
        return jnp.sqrt(x)

    def erf(self, x: Any) -> Any:
        return jax.lax.erf(jnp.asarray(x, dtype=self.float_dtype))

    def pi(self) -> Any:
        # computed in the program as atan2(0, -1), which the verifier reads as exactly pi (a
        # literal would be read as the rational of its float value)
        return jnp.arctan2(jnp.zeros((), self.float_dtype), -jnp.ones((), self.float_dtype))

    def abs(self, x: Any) -> Any:
        return jnp.abs(x)

    def sign(self, x: Any) -> Any:
        return jnp.sign(x)

    def maximum(self, a: Any, b: Any) -> Any:
        return jnp.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        return jnp.minimum(a, b)

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        return jnp.where(cond, a, b)

    def logical_and(self, a: Any, b: Any) -> Any:
        return jnp.logical_and(a, b)

    def logical_or(self, a: Any, b: Any) -> Any:
        return jnp.logical_or(a, b)

    def logical_not(self, a: Any) -> Any:
        return jnp.logical_not(a)

    def to_float(self, cond: Any) -> Any:
        return jnp.asarray(cond, dtype=self.float_dtype)

    def softplus(self, x: Any) -> Any:
        return _softplus(jnp, x)

    def sigmoid(self, x: Any) -> Any:
        # lax.logistic: XLA's own stable kernel, and one primitive the verifier reads exactly as
        # 1 / (1 + exp(-x)) (a where-form would need a case split per element)
        return jax.nn.sigmoid(x)

    # -- reductions and linear algebra ----------------------------------------------------
    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return jnp.sum(x, axis=axis, keepdims=keepdims)

    def max(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return jnp.max(x, axis=axis, keepdims=keepdims)

    def matmul(self, a: Any, b: Any) -> Any:
        return jnp.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        return jnp.einsum(subscripts, *operands)

    def first_max_onehot(self, x: Any, axis: int = -1, valid: Any = None) -> Any:
        return _first_max_onehot(jnp, x, axis, valid)

    def logsumexp(self, x: Any, axis: int = -1, keepdims: bool = False, valid: Any = None) -> Any:
        return _logsumexp(jnp, x, axis, keepdims, valid, self.stop_gradient, twice=True)

    def softmax(self, x: Any, axis: int = -1, valid: Any = None) -> Any:
        """The max-shifted softmax, as one nested call named ``tl_softmax`` (over the last
        axis, the mask baked in): the verifier proves that call's body equal to
        ``exp(x_j) / sum_k exp(x_k)`` once per shape and mask, then reasons about its outputs
        by the softmax's derivative identity instead of re-expanding exponentials."""
        x = jnp.asarray(x)
        axis = axis % x.ndim if x.ndim else 0
        key = None
        if valid is not None:
            v = np.moveaxis(np.broadcast_to(np.asarray(valid, bool), x.shape), axis, -1)
            key = (v.tobytes(), v.shape)
        out = _softmax_call(key)(jnp.moveaxis(x, axis, -1))
        return jnp.moveaxis(out, -1, axis)

    # -- shape ----------------------------------------------------------------------------
    def reshape(self, x: Any, shape: Sequence[int]) -> Any:
        return jnp.reshape(x, tuple(shape))

    def transpose(self, x: Any, axes: Sequence[int] | None = None) -> Any:
        return jnp.transpose(x, axes)

    def swapaxes(self, x: Any, a: int, b: int) -> Any:
        return jnp.swapaxes(x, a, b)

    def moveaxis(self, x: Any, src: int, dst: int) -> Any:
        return jnp.moveaxis(x, src, dst)

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> Any:
        return jnp.broadcast_to(x, tuple(shape))

    def expand_dims(self, x: Any, axis: int) -> Any:
        return jnp.expand_dims(x, axis)

    def concatenate(self, xs: Sequence[Any], axis: int = 0) -> Any:
        return jnp.concatenate(list(xs), axis=axis)

    def stack(self, xs: Sequence[Any], axis: int = 0) -> Any:
        return jnp.stack(list(xs), axis=axis)

    def pad(self, x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> Any:
        return jnp.pad(x, [tuple(w) for w in widths], constant_values=value)

    def take(self, x: Any, indices: Sequence[int], axis: int = 0) -> Any:
        return jnp.take(x, np.asarray(indices, dtype=np.int32), axis=axis)

    # -- runtime indices (nat inputs) -----------------------------------------------------
    def gather(self, x: Any, idx: Any, axis: int = 0) -> Any:
        if x.shape[axis] == 0:  # every index is out of range (jnp.take refuses an empty axis)
            shape = x.shape[:axis] + jnp.shape(idx) + x.shape[axis + 1 :]
            return jnp.zeros(shape, dtype=self.float_dtype)
        return jnp.take(x, idx, axis=axis, mode="fill", fill_value=0)

    def scatter_add(self, x: Any, idx: Any, updates: Any, axis: int = 0) -> Any:
        if x.shape[axis] == 0:  # every index is out of range: nothing is added
            return jnp.asarray(x, dtype=self.float_dtype)
        moved = jnp.moveaxis(x, axis, 0)
        upd = jnp.moveaxis(updates, axis, 0) if jnp.ndim(idx) else updates
        # JAX narrows scatter indices to int32: map every out-of-range index to n first, or one
        # past 2^32 would wrap into range and receive gradient.
        n = moved.shape[0]
        idx = jnp.where(jnp.asarray(idx) < n, idx, n)
        out = moved.at[idx].add(upd, mode="drop")
        return jnp.moveaxis(out, 0, axis)

    def stop_gradient(self, x: Any) -> Any:
        return jax.lax.stop_gradient(x)

    def max_shift(self, x: Any, axis: int = -1) -> Any:
        """``x - max(x)`` along ``axis``, shifted twice (see :func:`twice_shifted`)."""
        return twice_shifted(x, axis)

    def wide(self) -> JaxBackend:
        """The float64 backend for a float32 one (under JAX's x64 mode, which the compiler
        turns on); otherwise itself."""
        if self.float_dtype == jnp.float32 and jax.config.read("jax_enable_x64"):
            return jax_backend("float64")
        return self

    # -- seeded randomness ----------------------------------------------------------------
    def rand_uniform(self, seed: int, counter: int, shape: Sequence[int], dtype: Any = None) -> Any:
        """The same draws as the NumPy reference, computed on device (see
        :func:`random_bits`), rounded in ``dtype`` or this backend's dtype, whichever is
        narrower, and returned in this backend's dtype."""
        narrow = _random.narrowest(self.float_dtype, dtype)
        u = uniform_from_bits(random_bits(seed, counter, shape), narrow)
        return u if narrow == self.float_dtype else u.astype(self.float_dtype)


# -- SplitMix64 on pairs of uint32 words ----------------------------------------------------
# The reference (``_random``) works on uint64; JAX has uint64 only under ``jax_enable_x64``, so
# here a 64-bit value is a pair (hi, lo) of uint32 arrays and products are assembled from
# 16-bit halves. ``tests/test_op_parity.py`` checks the bits against the reference.

_U32 = np.uint32


def _const64(c: int) -> tuple[np.uint32, np.uint32]:
    return _U32(c >> 32), _U32(c & _random.MASK32)


def _add64(ah: Any, al: Any, bh: Any, bl: Any) -> tuple[Any, Any]:
    lo = al + bl
    return ah + bh + (lo < al).astype(jnp.uint32), lo


def _mulhi32(a: Any, b: int) -> Any:
    """The high 32 bits of the 64-bit product of uint32 ``a`` and the constant ``b``."""
    a0, a1 = a & _U32(0xFFFF), a >> _U32(16)
    b0, b1 = _U32(b & 0xFFFF), _U32(b >> 16)
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U32(16)) + (p01 & _U32(0xFFFF)) + (p10 & _U32(0xFFFF))
    return p11 + (p01 >> _U32(16)) + (p10 >> _U32(16)) + (mid >> _U32(16))


def _mul64(h: Any, l: Any, c: int) -> tuple[Any, Any]:
    """(h, l) * c mod 2^64 for a 64-bit constant c."""
    ch, cl = c >> 32, c & _random.MASK32
    return _mulhi32(l, cl) + l * _U32(ch) + h * _U32(cl), l * _U32(cl)


def _xorshift64(h: Any, l: Any, s: int) -> tuple[Any, Any]:
    """(h, l) ^ ((h, l) >> s) for 0 < s < 32."""
    return h ^ (h >> _U32(s)), l ^ ((l >> _U32(s)) | (h << _U32(32 - s)))


def random_bits(seed: int, counter: int, shape: Sequence[int]) -> Any:
    """:func:`torchlean_ir.backends._random.random_bits` in JAX (uint32, traceable, no x64)."""
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n >= 1 << 32:
        raise ValueError(f"random tensors are limited to 2^32 elements, got shape {shape}")
    bh, bl = _const64((_random.stream_key(seed, counter) + _random.GAMMA) & _random.MASK64)
    h, l = _add64(bh, bl, _U32(0), jax.lax.iota(jnp.uint32, n))
    h, l = _mul64(*_xorshift64(h, l, 30), _random.MIX1)
    h, l = _mul64(*_xorshift64(h, l, 27), _random.MIX2)
    _, l = _xorshift64(h, l, 31)
    return jnp.reshape(l, shape)


def uniform_from_bits(bits: Any, dtype: Any) -> Any:
    """:func:`torchlean_ir.backends._random.uniform_from_bits` in JAX (round toward zero)."""
    dt = jnp.dtype(dtype)
    p = _random.significant_bits(dt)
    if p < 32:
        # bits to drop: max(bit length - p, 0), counted as the powers 2^p .. 2^31 that k
        # reaches (comparisons only, so the verifier's jaxpr interpreter reads it exactly)
        drop = sum((bits >= _U32(1 << j)).astype(jnp.uint32) for j in range(p, 32))
        bits = (bits >> drop) << drop
    return bits.astype(dt) * jnp.asarray(_random.UNIT, dtype=dt)


@cache
def jax_backend(dtype: str = "float32") -> JaxBackend:
    """The (cached) JAX backend for a float dtype name."""
    return JaxBackend(jnp.dtype(dtype))
