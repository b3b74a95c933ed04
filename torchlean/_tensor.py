"""Opaque handles: :class:`Tensor` (TorchLean's ``TensorRef``) and :class:`NatRef` (a handle to a
non-differentiable natural or vector of naturals in a session's nat environment)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from torchlean_ir import DType, IndexType, TensorType, has_op
from torchlean_ir.extend import Operand, is_number

if TYPE_CHECKING:
    from ._ops import Ops


class Tensor(Operand):
    """A handle to a value owned by an :class:`~torchlean.Ops` backend.

    In an eager session it names a value on the hidden tape; in a graph-recording backend it names
    a value of the graph being built. It has a type (:attr:`shape`, :attr:`dtype`) but no data of
    its own: read values with :meth:`numpy` (eager and linked sessions only).

    Every op of the registry is a method (``x.tanh()``), and so is every derived op of
    :class:`~torchlean.Ops` (``x.gelu()``); ``+ - * / @`` and unary ``-`` work, with
    Python numbers on either side. There is no implicit broadcasting (use ``broadcast_to``).
    """

    __slots__ = ("_gen", "_key", "_ops", "type")

    def __init__(self, ops: Ops, key: Any, type: TensorType, gen: int = 0) -> None:
        self._ops = ops
        self._key = key
        self._gen = gen
        self.type = type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def size(self) -> int:
        return self.type.size

    @property
    def ops(self) -> Ops:
        """The backend that owns this tensor."""
        return self._ops

    @property
    def batched(self) -> bool:
        """Whether the value carries a leading batch axis (a session's batched input, or an op
        result that depends on one); :attr:`shape` is then the per-sample shape."""
        return self._ops._is_batched(self)

    def numpy(self) -> np.ndarray:
        """The current value (``session.get_value(t)``; the batch leading when batched)."""
        return self._ops.get_value(self)

    def item(self) -> float:
        """The value of a one-element tensor as a Python float."""
        v = self.numpy()
        return float(v.reshape(-1)[0]) if v.size == 1 else self._not_scalar(v)

    def _not_scalar(self, v: np.ndarray) -> float:
        batch = f" (a batch of {v.shape[0]})" if self.batched else ""
        raise TypeError(f"item() needs a tensor with one element, got {self.type}{batch}")

    @property
    def grad(self) -> np.ndarray | None:
        """The gradient from the session's last ``backward`` (``session.grad(t)``)."""
        return self._ops.grad(self)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        v = self.numpy()
        return v if dtype is None else v.astype(dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.type}, {self._ops._describe(self)})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        ops = self._ops
        if has_op(name) or name in ops.derived_ops():

            def method(*args: Any, **attrs: Any) -> Tensor:
                return getattr(ops, name)(self, *args, **attrs)

            method.__name__ = name
            return method
        raise AttributeError(f"'Tensor' has no attribute {name!r} (and no op of that name exists)")

    # -- arithmetic (``+ - * / @``, ``-x``): torchlean_ir's Operand, written once for both -----
    def _apply(self, op: str, *args: Any, **attrs: Any) -> Tensor:
        return self._ops.apply(op, *args, **attrs)

    def _lift(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return other
        if is_number(other):
            return self._ops.full(self.shape, float(other))
        raise TypeError(f"cannot combine a Tensor with {type(other).__name__}")

    def __bool__(self) -> bool:
        raise TypeError(
            "a Tensor has no truth value (the same code must also record a graph, which has no "
            "data-dependent control flow); read the value with .numpy() in eager code"
        )


class NatRef:
    """A handle to a natural (``size is None``) or a vector of naturals in a session's nat
    environment (TorchLean's ``NatRef`` / ``NatVecRef``): labels and gather indices. Nat values
    never receive gradient. Read and overwrite them through the owning session
    (``read_nat`` / ``set_nat``)."""

    __slots__ = ("_gen", "_key", "_ops", "name", "type")

    def __init__(self, ops: Ops, key: Any, type: IndexType, name: str, gen: int = 0) -> None:
        self._ops = ops
        self._key = key
        self._gen = gen
        self.type = type
        self.name = name

    @property
    def size(self) -> int | None:
        """``None`` for a scalar natural, the length for a vector."""
        return None if self.type.shape == () else self.type.shape[0]

    def __repr__(self) -> str:
        return f"NatRef({self.name}: {self.type})"
