"""The imperative session API shared by the eager and the proof-linked sessions, and the
unified :class:`Session` that picks one from the options."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from torchlean_ir import IndexType, TorchleanError

from ._ops import Ops
from ._optim import Optimizer
from ._options import Options, as_options
from ._param import Param
from ._tensor import NatRef, Tensor


def nat_value(value: Any, size: int | None, what: str) -> np.ndarray:
    """Validate a natural (``size is None``) or a vector of ``size`` naturals."""
    arr = np.asarray(value)
    shape: tuple[int, ...] = () if size is None else (size,)
    ok = arr.shape == shape and (arr.size == 0 or np.issubdtype(arr.dtype, np.integer))
    if ok and arr.size:
        ok = bool(np.all(arr >= 0))
    if not ok:
        want = "a non-negative int" if size is None else f"a vector of {size} non-negative ints"
        raise TorchleanError(f"{what}: expected {want}, got {value!r}")
    return arr.astype(np.int64)


class Session(Ops):
    """An imperative session: create parameters and inputs, call ops, run ``backward``, step an
    optimizer (TorchLean's ``Session``).

    ``Session(options)`` returns the session the options ask for: an
    :class:`~torchlean.EagerSession` (``backend="eager"``) or a
    :class:`~torchlean.LinkedSession` (``backend="compiled"``); both offer this API,
    so the same user code runs on either::

        s = Session(Options(backend="compiled"))
        W = s.param(np.ones((2, 3)), name="W")
        s.reset_tape()
        x = s.input(np.arange(3.0))
        loss = s.sum(s.tanh(s.matmul(s.use(W), s.reshape(x, shape=(3, 1)))))
        s.backward(loss)
        s.sgd_step_all(0.1)
    """

    def __new__(cls, options: Options | None = None, **kwargs: Any) -> Session:
        if cls is Session:
            opts = as_options(options)
            if opts.backend == "eager":
                from ._eager import EagerSession

                cls = EagerSession
            else:
                from ._linked import LinkedSession

                cls = LinkedSession
        return object.__new__(cls)

    def __init__(self, options: Options | None = None) -> None:
        self.options = as_options(options)
        self._optimizer = Optimizer()
        self._gen = 0
        self._nat_values: list[np.ndarray] = []
        self._nat_refs: list[NatRef] = []

    # -- parameters ------------------------------------------------------------------------
    def param(self, init: Any, name: str | None = None, requires_grad: bool | None = None) -> Param:
        """A new :class:`Param` (not yet on the tape: :meth:`use` records it).
        ``requires_grad`` defaults to ``options.requires_grad``."""
        rg = self.options.requires_grad if requires_grad is None else requires_grad
        return Param(init, name=name, requires_grad=rg)

    @abstractmethod
    def used_params(self) -> list[Param]:
        """The params used since the last :meth:`reset_tape`, in order of first use."""

    # -- nat environment ---------------------------------------------------------------------
    def _check_nat(self, ref: NatRef, what: str) -> int:
        if not isinstance(ref, NatRef) or ref._ops is not self:
            raise TorchleanError(f"{what}: not a NatRef of this session")
        if ref._gen != self._gen:
            raise TorchleanError(f"{what}: {ref.name} is from before the last reset_tape()")
        return int(ref._key)

    def _add_nat(self, value: Any, size: int | None, name: str | None, what: str) -> NatRef:
        arr = nat_value(value, size, what)
        key = len(self._nat_values)
        ref = NatRef(self, key, IndexType(arr.shape), name or f"nat{key}", self._gen)
        self._nat_values.append(arr)
        self._nat_refs.append(ref)
        self._nats_changed()
        return ref

    def _nats_changed(self) -> None:
        """Hook: a nat value was added or overwritten."""

    def nat(self, value: int | None = None, *, name: str | None = None) -> NatRef:
        """Record a non-differentiable natural (a label, an index); never receives gradient."""
        return self._add_nat(0 if value is None else value, None, name, "nat")

    def nat_vec(
        self, values: Any = None, *, size: int | None = None, name: str | None = None
    ) -> NatRef:
        """Record a non-differentiable vector of naturals (gather indices)."""
        if values is None:
            if size is None:
                raise TorchleanError("nat_vec: give the values (or a size for zeros)")
            values = np.zeros(size, dtype=np.int64)
        n = int(np.shape(values)[0]) if np.ndim(values) == 1 else -1
        if n < 0:
            raise TorchleanError(f"nat_vec: expected a vector of non-negative ints, got {values!r}")
        if size is not None and size != n:
            raise TorchleanError(f"nat_vec: size {size} but {n} values given")
        return self._add_nat(values, n, name, "nat_vec")

    def read_nat(self, ref: NatRef) -> int:
        """The current value of a nat scalar."""
        k = self._check_nat(ref, "read_nat")
        if ref.size is not None:
            raise TorchleanError(f"read_nat: {ref.name} is a vector; use read_nat_vec")
        return int(self._nat_values[k])

    def set_nat(self, ref: NatRef, value: int) -> None:
        """Overwrite a nat scalar (ops already run in an eager session keep their results)."""
        k = self._check_nat(ref, "set_nat")
        if ref.size is not None:
            raise TorchleanError(f"set_nat: {ref.name} is a vector; use set_nat_vec")
        self._nat_values[k] = nat_value(value, None, f"set_nat({ref.name})")
        self._nats_changed()

    def read_nat_vec(self, ref: NatRef) -> np.ndarray:
        """The current values of a nat vector (a copy)."""
        k = self._check_nat(ref, "read_nat_vec")
        if ref.size is None:
            raise TorchleanError(f"read_nat_vec: {ref.name} is a scalar; use read_nat")
        return self._nat_values[k].copy()

    def set_nat_vec(self, ref: NatRef, values: Any) -> None:
        """Overwrite a nat vector (same length)."""
        k = self._check_nat(ref, "set_nat_vec")
        if ref.size is None:
            raise TorchleanError(f"set_nat_vec: {ref.name} is a scalar; use set_nat")
        self._nat_values[k] = nat_value(values, ref.size, f"set_nat_vec({ref.name})")
        self._nats_changed()

    # -- the tape ------------------------------------------------------------------------
    @abstractmethod
    def reset_tape(self) -> None:
        """Discard every recorded value, node, nat input and gradient (params keep their values
        and the optimizer keeps its moments). Handles from before become invalid."""

    @abstractmethod
    def backward(self, t: Tensor, seed: Any = None) -> None:
        """Reverse mode from ``t``: seed 1 for a scalar, or an explicit cotangent ``seed`` of
        ``t``'s shape. Gradients are then read with :meth:`grad`."""

    @abstractmethod
    def _param_grads(self) -> list[tuple[Param, Any]]:
        """(param, gradient) for every used param with ``requires_grad`` (zeros where no
        gradient reached it)."""

    @property
    def _on_device(self) -> bool:
        """Whether optimizer steps update device-resident mirrors (else host values)."""
        return False

    def param_grads(self) -> dict[Param, np.ndarray]:
        """The gradient of every used, trainable param from the last :meth:`backward`."""
        return {p: np.asarray(g, dtype=np.float64) for p, g in self._param_grads()}

    def _after_step(self) -> None:
        """Hook: params changed (a later ``use`` must record the new values)."""

    # -- optimizer steps over the params that were used ------------------------------------
    def sgd_step_all(self, lr: float) -> None:
        """``p <- p - lr * grad`` for every used param with ``requires_grad``."""
        self._optimizer.sgd(self._param_grads(), lr, on_device=self._on_device)
        self._after_step()

    def adam_step_all(
        self, lr: float, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8
    ) -> None:
        """One Adam step (``optax.adam``) for every used param with ``requires_grad``; the
        moment estimates are kept per param across steps (and across ``reset_tape``)."""
        self._optimizer.adam(
            "adam", self._param_grads(), lr=lr, b1=b1, b2=b2, eps=eps, on_device=self._on_device
        )
        self._after_step()

    def adamw_step_all(
        self,
        lr: float,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        """One AdamW step (``optax.adamw``, decoupled weight decay) for every used param with
        ``requires_grad``; moments kept per param."""
        self._optimizer.adam(
            "adamw",
            self._param_grads(),
            lr=lr,
            b1=b1,
            b2=b2,
            eps=eps,
            weight_decay=weight_decay,
            on_device=self._on_device,
        )
        self._after_step()
