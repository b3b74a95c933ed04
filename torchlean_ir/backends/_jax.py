"""The JAX backend: op rules run on ``jax.numpy`` arrays (this is the lowering)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._attrs import ConstArray
from ._numpy import _first_max_onehot


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

    # -- reductions and linear algebra ----------------------------------------------------
    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return jnp.sum(x, axis=axis, keepdims=keepdims)

    def max(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        return jnp.max(x, axis=axis, keepdims=keepdims)

    def matmul(self, a: Any, b: Any) -> Any:
        return jnp.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        return jnp.einsum(subscripts, *operands)

    def first_max_onehot(self, x: Any, axis: int = -1) -> Any:
        return _first_max_onehot(jnp, x, axis)

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
        return jnp.take(x, idx, axis=axis, mode="fill", fill_value=0)

    def scatter_add(self, x: Any, idx: Any, updates: Any, axis: int = 0) -> Any:
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


@cache
def jax_backend(dtype: str = "float32") -> JaxBackend:
    """The (cached) JAX backend for a float dtype name."""
    return JaxBackend(jnp.dtype(dtype))
