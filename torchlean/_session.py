"""The imperative session API shared by the eager and the proof-linked sessions, and the
unified :class:`Session` that picks one from the options."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from torchlean_ir import IndexType, TorchleanError
from torchlean_ir.extend import user_call_site

from ._ops import Ops
from ._optim import Optimizer
from ._options import Options, as_options
from ._param import Param
from ._tensor import NatRef, Tensor


def nat_value(value: Any, size: int | None, what: str, batched: bool = False) -> np.ndarray:
    """Validate a natural (``size is None``) or a vector of ``size`` naturals; ``batched``: one
    per sample, the batch leading (any batch size of at least 1)."""
    arr = np.asarray(value)
    shape: tuple[int, ...] = () if size is None else (size,)
    if batched:
        shape = (arr.shape[0] if arr.ndim and arr.shape[0] else -1, *shape)
    ok = arr.shape == shape and (arr.size == 0 or np.issubdtype(arr.dtype, np.integer))
    if ok and arr.size:
        ok = bool(np.all(arr >= 0))
    if not ok:
        want = "a non-negative int" if size is None else f"a vector of {size} non-negative ints"
        if batched:
            want = f"one {want.removeprefix('a ')} per sample (a non-empty leading batch axis)"
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
        self._nat_batched: list[bool] = []
        self._batch: int | None = None

    # -- parameters ------------------------------------------------------------------------
    def param(self, init: Any, name: str | None = None, requires_grad: bool | None = None) -> Param:
        """A new :class:`Param` (not yet on the tape: :meth:`use` records it).
        ``requires_grad`` defaults to ``options.requires_grad``."""
        rg = self.options.requires_grad if requires_grad is None else requires_grad
        return Param(init, name=name, requires_grad=rg)

    @abstractmethod
    def used_params(self) -> list[Param]:
        """The params used since the last :meth:`reset_tape`, in order of first use."""

    # -- the batch and input values ------------------------------------------------------------
    #: What a batch size belongs to, and how to start another, in the error for a second size.
    _BATCH_SCOPE = "graph"
    _BATCH_HINT = ""

    @property
    def batch_size(self) -> int | None:
        """The batch size (``None`` until a batched input or nat is given)."""
        return self._batch

    def _set_batch(self, n: int, what: str) -> None:
        if n == 0:
            raise TorchleanError(f"{what}: the batch is empty, at {user_call_site()}")
        if self._batch is not None and n != self._batch:
            raise TorchleanError(
                f"{what}: batch size {n}, but this {self._BATCH_SCOPE}'s batch size is "
                f"{self._batch}{self._BATCH_HINT}, at {user_call_site()}"
            )
        self._batch = n

    def _input_shape(
        self, value_shape: tuple[int, ...], shape: Any, batched: bool, what: str = "input"
    ) -> tuple[int, ...]:
        """The per-sample shape of an input value of ``value_shape`` (with ``batched``, its
        leading axis is the batch, which is set), checked against the ``shape`` asked for."""
        per_sample = tuple(value_shape)
        if batched:
            if not per_sample:
                raise TorchleanError(
                    f"{what}: a batched input needs a leading batch axis, got a scalar, at "
                    f"{user_call_site()}"
                )
            self._set_batch(int(per_sample[0]), what)
            per_sample = per_sample[1:]
        if shape is not None and tuple(shape) != per_sample:
            kind = "per-sample shape" if batched else "shape"
            raise TorchleanError(
                f"{what}: value has {kind} {list(per_sample)}, expected {list(shape)}, at "
                f"{user_call_site()}"
            )
        return per_sample

    # -- nat environment ---------------------------------------------------------------------
    def _check_nat(self, ref: NatRef, what: str) -> int:
        if not isinstance(ref, NatRef) or ref._ops is not self:
            raise TorchleanError(f"{what}: not a NatRef of this session")
        if ref._gen != self._gen:
            raise TorchleanError(f"{what}: {ref.name} is from before the last reset_tape()")
        return int(ref._key)

    def _add_nat(
        self, value: Any, size: int | None, name: str | None, what: str, batched: bool = False
    ) -> NatRef:
        arr = nat_value(value, size, what, batched)
        key = len(self._nat_values)
        shape = arr.shape[1:] if batched else arr.shape
        ref = NatRef(self, key, IndexType(shape), name or f"nat{key}", self._gen)
        self._nat_values.append(arr)
        self._nat_refs.append(ref)
        self._nat_batched.append(batched)
        self._nats_changed()
        return ref

    def _nats_changed(self) -> None:
        """Hook: a nat value was added or overwritten."""

    def nat(self, value: Any = None, *, name: str | None = None, batched: bool = False) -> NatRef:
        """Record a non-differentiable natural (a label, an index); never receives gradient.
        ``batched=True``: one natural per sample (a vector whose length is the batch)."""
        if value is None:
            if batched:
                raise TorchleanError("nat: a batched nat needs its values")
            value = 0
        return self._add_nat(value, None, name, "nat", bool(batched))

    def nat_vec(
        self,
        values: Any = None,
        *,
        size: int | None = None,
        name: str | None = None,
        batched: bool = False,
    ) -> NatRef:
        """Record a non-differentiable vector of naturals (gather indices). ``batched=True``:
        one vector per sample (a matrix whose rows are the samples)."""
        if values is None:
            if size is None or batched:
                raise TorchleanError("nat_vec: give the values (or a size for zeros)")
            values = np.zeros(size, dtype=np.int64)
        rank = 2 if batched else 1
        n = int(np.shape(values)[-1]) if np.ndim(values) == rank else -1
        if n < 0:
            want = "one vector of non-negative ints per sample" if batched else "a vector of"
            want = want if batched else f"{want} non-negative ints"
            raise TorchleanError(f"nat_vec: expected {want}, got {values!r}")
        if size is not None and size != n:
            raise TorchleanError(f"nat_vec: size {size} but {n} values given")
        return self._add_nat(values, n, name, "nat_vec", bool(batched))

    def read_nat(self, ref: NatRef) -> Any:
        """The current value of a nat scalar (an int; per sample, an int array, when batched)."""
        k = self._check_nat(ref, "read_nat")
        if ref.size is not None:
            raise TorchleanError(f"read_nat: {ref.name} is a vector; use read_nat_vec")
        return self._nat_values[k].copy() if self._nat_batched[k] else int(self._nat_values[k])

    def set_nat(self, ref: NatRef, value: Any) -> None:
        """Overwrite a nat scalar (ops already run in an eager session keep their results); a
        batched one takes one value per sample, the same batch size."""
        k = self._check_nat(ref, "set_nat")
        if ref.size is not None:
            raise TorchleanError(f"set_nat: {ref.name} is a vector; use set_nat_vec")
        self._nat_values[k] = self._nat_update(k, value, None, f"set_nat({ref.name})")
        self._nats_changed()

    def read_nat_vec(self, ref: NatRef) -> np.ndarray:
        """The current values of a nat vector (a copy; one row per sample when batched)."""
        k = self._check_nat(ref, "read_nat_vec")
        if ref.size is None:
            raise TorchleanError(f"read_nat_vec: {ref.name} is a scalar; use read_nat")
        return self._nat_values[k].copy()

    def set_nat_vec(self, ref: NatRef, values: Any) -> None:
        """Overwrite a nat vector (same length; same batch size when batched)."""
        k = self._check_nat(ref, "set_nat_vec")
        if ref.size is None:
            raise TorchleanError(f"set_nat_vec: {ref.name} is a scalar; use set_nat")
        self._nat_values[k] = self._nat_update(k, values, ref.size, f"set_nat_vec({ref.name})")
        self._nats_changed()

    def _nat_update(self, k: int, value: Any, size: int | None, what: str) -> np.ndarray:
        batched = self._nat_batched[k]
        arr = nat_value(value, size, what, batched)
        if batched and arr.shape[0] != self._nat_values[k].shape[0]:
            raise TorchleanError(
                f"{what}: {arr.shape[0]} samples, the batch has {self._nat_values[k].shape[0]}"
            )
        return arr

    # -- the tape ------------------------------------------------------------------------
    @abstractmethod
    def reset_tape(self) -> None:
        """Discard every recorded value, node, nat input and gradient (params keep their values
        and the optimizer keeps its moments). Handles from before become invalid."""

    @abstractmethod
    def backward(self, t: Tensor, seed: Any = None, *, grads: str = "sum") -> None:
        """Reverse mode from ``t``: seed 1 for a scalar, or an explicit cotangent ``seed`` of
        ``t``'s shape. Gradients are then read with :meth:`grad`. For a batched ``t`` each
        sample is seeded and the gradients of unbatched values (parameters) are summed over
        the batch (``grads="sum"``) or averaged (``"mean"``)."""

    @abstractmethod
    def _param_grads(self) -> list[tuple[Param, Any]]:
        """(param, gradient) for every used param with ``requires_grad`` (zeros where no
        gradient reached it)."""

    @property
    def _on_device(self) -> bool:
        """Whether optimizer steps update device-resident mirrors (else host values)."""
        return False

    def param_grads(self) -> dict[Param, np.ndarray]:
        """The gradient of every used, trainable param from the last :meth:`backward` (in the
        session's dtype)."""
        dt = self.dtype.numpy_name
        return {p: np.asarray(g, dtype=dt) for p, g in self._param_grads()}

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
