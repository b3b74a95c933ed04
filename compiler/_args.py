"""Checking and converting call arguments before JAX sees them.

The hot path is a dict of ``jax.Array`` s: a name lookup, no conversion; their types are checked
when the compiled function first meets a combination of them (``compiler._compiled``). Anything
else goes through :func:`convert_float` / :func:`convert_index`, which convert NumPy and Python
data and raise :class:`ArgumentError` (one line, naming the argument) for anything wrong.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src.array import ArrayImpl as ArrayImpl
from jax.core import ShapedArray

from ._errors import ArgumentError

# ArrayImpl: the concrete type of a committed or uncommitted jax array (``jax.Array`` is
# abstract), imported rather than taken from a new array so that importing the compiler does
# not start a backend (``jax.distributed.initialize`` must come before that).
INT32_MAX = int(np.iinfo(np.int32).max)

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Group:
    """One group of float arguments (leaves, tangents or seeds): names, per-sample shapes and
    which of them carry a leading batch axis."""

    what: str
    names: tuple[str, ...]
    shapes: tuple[Shape, ...]
    batched: tuple[bool, ...]
    partial: bool = False  # missing entries are zeros (tangents)
    dtype: Any = None

    @cached_property
    def getter(self) -> Callable[[Mapping[str, Any]], Any]:
        """``itemgetter`` of the names (one C call for a dict)."""
        names = self.names
        if len(names) > 1:
            return operator.itemgetter(*names)
        if names:
            name = names[0]
            return lambda d: (d[name],)
        return lambda d: ()

    @cached_property
    def avals(self) -> list[Any]:
        """The abstract value of each (unbatched) argument: the fast-path check."""
        return [ShapedArray(s, np.dtype(self.dtype)) for s in self.shapes]

    @cached_property
    def labels(self) -> tuple[str, ...]:
        """How error messages name each argument: ``leaves['W']``."""
        return tuple(f"{self.what}[{n!r}]" for n in self.names)


def _shape_text(s: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _dtype_name(d: Any) -> str:
    return {"float32": "f32", "float64": "f64"}.get(str(d), str(d))


def as_list(g: Group, values: Any) -> list[Any]:
    """The values of group ``g`` in order, from a mapping by name or a sequence in order."""
    names = g.names
    if isinstance(values, Mapping):
        unknown = [k for k in values if k not in names]
        if unknown:
            shown = ", ".join(names) or "none"
            raise ArgumentError(f"{g.what}: unknown name {unknown[0]!r} (expected: {shown})")
        if not g.partial:
            missing = [n for n in names if n not in values]
            if missing:
                raise ArgumentError(f"{g.what}: missing {missing[0]!r}")
        return [values.get(n) for n in names]
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise ArgumentError(
            f"{g.what}: expected a mapping by name or a sequence in context order, "
            f"got {type(values).__name__}"
        )
    if len(values) != len(names):
        raise ArgumentError(
            f"{g.what}: expected {len(names)} values in context order "
            f"({', '.join(names) or 'none'}), got {len(values)}"
        )
    return list(values)


def convert_float(v: Any, shape: Shape, batch: int | None, dtype: Any, where: str) -> Any:
    """A float argument as an array of ``dtype`` and shape ``shape`` (with a leading ``batch``
    axis when ``batch`` is not ``None``; ``batch=-1`` accepts any batch size).

    A ``jax.Array`` must already have the dtype. NumPy float arrays of another precision and
    Python numbers / lists are cast on the host. Integer, bool, complex and object arrays are
    refused (they are almost always a mistake: labels belong in ``index``)."""
    if isinstance(v, jax.Array):
        if v.dtype != dtype:
            raise ArgumentError(
                f"{where}: expected dtype {_dtype_name(dtype)}, got a jax array of "
                f"{_dtype_name(v.dtype)} (convert it with .astype)"
            )
        arr: Any = v
    elif isinstance(v, np.ndarray | np.generic):
        if v.dtype.kind != "f":
            raise ArgumentError(f"{where}: expected a float array, got dtype {v.dtype}")
        arr = np.asarray(v, dtype=dtype)
    elif v is None:
        raise ArgumentError(f"{where}: missing value")
    else:  # Python numbers and (nested) lists of them; not strings, bools or ragged lists
        try:
            raw = np.asarray(v)
            if raw.dtype.kind not in "iuf" and raw.dtype != object:
                raise TypeError
            arr = np.asarray(raw, dtype=np.float64)
        except (TypeError, ValueError, OverflowError):
            raise ArgumentError(f"{where}: expected a float array, got {_short(v)}") from None
        arr = arr.astype(dtype)
    _check_shape(tuple(arr.shape), shape, batch, where)
    return arr


def _check_shape(got: Shape, shape: Shape, batch: int | None, where: str) -> None:
    if batch is None:
        if got != shape:
            raise ArgumentError(
                f"{where}: expected shape {_shape_text(shape)}, got {_shape_text(got)}"
            )
        return
    if len(got) != len(shape) + 1 or got[1:] != shape:
        raise ArgumentError(
            f"{where}: expected shape [batch, {_shape_text(shape)[1:-1]}] "
            f"(a leading batch axis), got {_shape_text(got)}".replace(", ]", "]")
        )
    if batch >= 0 and got[0] != batch:
        raise ArgumentError(
            f"{where}: batch size {got[0]} differs from the other batched arguments' {batch}"
        )


def convert_index(v: Any, shape: Shape, batch: int | None, where: str) -> Any:
    """An index value as an int32 NumPy array: non-negative integers of the right shape.

    Values above the int32 range are out of range for any dimension anyway: they become
    ``INT32_MAX`` (never wrap), so they read 0 and send no gradient. A ``jax.Array`` spread over
    several processes (a global batch after ``jax.distributed.initialize``) stays one: each
    process checks the rows it holds, and the cast runs on the devices."""
    if v is None:
        raise ArgumentError(f"{where}: missing value")
    if isinstance(v, jax.Array) and not v.is_fully_addressable:
        return _global_index(v, shape, batch, where)
    arr = np.asarray(v)
    if arr.dtype == object:  # Python ints beyond int64
        flat = arr.reshape(-1)
        if not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in flat):
            raise ArgumentError(f"{where}: expected non-negative integers, got {_short(v)}")
        arr = np.array([min(int(x), INT32_MAX) if x >= 0 else -1 for x in flat], np.int64).reshape(
            arr.shape
        )
    elif arr.dtype.kind not in "iu":
        raise ArgumentError(f"{where}: expected non-negative integers, got dtype {arr.dtype}")
    _check_shape(tuple(arr.shape), shape, batch, where)
    if arr.size and arr.dtype.kind == "i" and arr.min() < 0:
        raise ArgumentError(f"{where}: expected non-negative integers, got {_short(v)}")
    if arr.dtype.itemsize > 4 or arr.dtype == np.uint32:
        arr = np.minimum(arr, INT32_MAX)
    return arr.astype(np.int32, copy=False)


def on_accelerator(v: Any) -> bool:
    """Whether ``v`` is a ``jax.Array`` held by one process on a non-CPU device (reading its
    values on the host would wait for the device: a round trip per call)."""
    if type(v) is not ArrayImpl or not v.is_fully_addressable:
        return False
    return any(d.platform != "cpu" for d in v.devices())


@jax.jit
def _lowest(v: jax.Array) -> jax.Array:
    return jnp.min(v, initial=0)


@jax.jit
def _as_int32(v: jax.Array) -> jax.Array:
    return jnp.minimum(v, INT32_MAX).astype(np.int32)


@dataclass(frozen=True)
class PendingCheck:
    """The device-side check of one index argument: its lowest value (0 for an empty
    array), on its way to the host; read by a later call once computed (``raise_if_bad``)."""

    where: str
    lowest: jax.Array

    def raise_if_bad(self) -> None:
        low = int(self.lowest)  # copied to the host asynchronously when the check was made
        if low < 0:
            raise ArgumentError(
                f"{self.where} (in an earlier call): expected non-negative integers, got "
                f"{low} (an index array on an accelerator is checked there; the result is read "
                "by a later call, or by check_index())"
            )


def device_index(
    v: jax.Array, shape: Shape, batch: int | None, where: str, *, check: bool = True
) -> tuple[jax.Array, PendingCheck | None]:
    """:func:`convert_index` of a ``jax.Array`` on an accelerator, without a round trip: the
    dtype and shape are checked on the host (they are known without the values); the int32
    cast and the check for negative values run on the device, and the check's result comes
    back with a :class:`PendingCheck` (``None`` for unsigned values), read by a later call.
    ``check=False``: the caller's own program computes the lowest value (no pending check)."""
    if v.dtype.kind not in "iu":
        raise ArgumentError(f"{where}: expected non-negative integers, got dtype {v.dtype}")
    _check_shape(tuple(v.shape), shape, batch, where)
    pending = None
    if check and v.dtype.kind == "i" and v.size:
        low = _lowest(v)
        low.copy_to_host_async()
        pending = PendingCheck(where, low)
    if v.dtype != np.int32:
        v = _as_int32(v) if v.dtype.itemsize > 4 or v.dtype == np.uint32 else v.astype(np.int32)
    return v, pending


def _global_index(v: jax.Array, shape: Shape, batch: int | None, where: str) -> jax.Array:
    """:func:`convert_index` of a ``jax.Array`` whose shards live in several processes: the
    dtype and global shape checked, the values checked non-negative by a reduction every
    process runs (so all of them refuse the same batch, and none is left waiting in a
    collective), the int32 cast done on the devices."""
    if v.dtype.kind not in "iu":
        raise ArgumentError(f"{where}: expected non-negative integers, got dtype {v.dtype}")
    _check_shape(tuple(v.shape), shape, batch, where)
    if v.dtype.kind == "i" and v.size:
        low = int(np.asarray(jnp.min(v).addressable_data(0)))
        if low < 0:
            raise ArgumentError(f"{where}: expected non-negative integers, got {low}")
    if v.dtype.itemsize > 4 or v.dtype == np.uint32:
        v = jnp.minimum(v, INT32_MAX)
    return v if v.dtype == np.int32 else v.astype(np.int32)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
