"""Training over a backend-generic loss (TorchLean's ``ScalarTrainer``) and running model code
for predictions (:class:`Predictor`), on either backend.

The loss is written once, ``loss(ops, *inputs) -> scalar Tensor``, reaching its parameters with
``ops.use(param)``. With ``Options(backend="eager")`` every call runs it on an
:class:`~torchlean.EagerSession`; with ``backend="compiled"`` it is traced once to a
graph and compiled (``compiler.compile``), and the params live on the device between steps
(synchronised to the host when read).

``batched=True`` on any call means the inputs carry a leading batch axis and the loss is the
mean of the per-sample losses (model code is per sample; the compiled backend maps the graph
over the batch with ``jax.vmap``, the eager one runs each op once on the whole batch, declaring
the inputs batched, and reduces the parameters' gradients with ``grads="mean"``).

``ScalarTrainer(..., mesh=jax.sharding.Mesh(...))`` (compiled backend) trains data parallel:
each training step is ``compiler.TrainStep(..., mesh=mesh)``, the batch split over the mesh's
data axis, parameters and optimizer moments replicated, gradients reduced by XLA.
"""

from __future__ import annotations

import array
import functools
import operator
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from torchlean_ir import GraphData, TorchleanError

from ._compiled import NatInput, as_specs, compile_graph, input_name, nat_name, trace, verify_graph
from ._eager import EagerSession
from ._ops import Ops
from ._optim import Optimizer, _check_hyper
from ._options import Options, as_options
from ._param import Param, ParamList, as_param_list
from ._plot import plot_losses
from ._tensor import NatRef, Tensor

LossFn = Callable[..., Tensor]
# (id of the compiled graph, optimizer, id of the mesh, data axis, the hyperparameters where
# they are the step's constants, else None) -> TrainStep
_STEPS: dict[tuple[Any, ...], Any] = {}


#: device losses in a row that ScalarTrainer stacks into one device array
_LOSS_RUN = 64

#: the optax hyperparameters of each compiled step, in order
_SGD = ("learning_rate",)
_ADAM = ("learning_rate", "b1", "b2", "eps")
_ADAMW = (*_ADAM, "weight_decay")


@functools.cache
def _stack_losses() -> Callable[..., Any]:
    """A jitted ``jnp.stack`` of 0-d losses (JAX imported when first needed)."""
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda *xs: jnp.stack(xs))


def _batch_size(specs: Sequence[Any], inputs: Sequence[Any]) -> int:
    n = -1
    for v in inputs:
        shape = getattr(v, "shape", None)
        if shape is None:
            shape = np.shape(v)
        if shape:
            if n < 0:
                n = int(shape[0])
            elif shape[0] != n:
                n = -2
                break
    if n < 0:
        sizes = {int(s[0]) for s in map(np.shape, inputs) if s}
        raise TorchleanError(
            f"batched inputs must share one leading batch size, got sizes {sorted(sizes)}"
        )
    if n == 0:
        raise TorchleanError("batched inputs: the batch is empty")
    return n


class _Runner:
    """Model code bound to params and input specs, on one backend."""

    def __init__(
        self,
        fn: LossFn,
        params: ParamList | Sequence[Param],
        inputs: Sequence[Any],
        options: Options | None,
    ) -> None:
        self.options = as_options(options)
        self.params = as_param_list(params)
        self.specs = as_specs(inputs)
        # per input: whether it is an index input, and its name in the traced graph
        self._slots = tuple(
            (True, nat_name(i)) if isinstance(s, NatInput) else (False, input_name(i))
            for i, s in enumerate(self.specs)
        )
        self.fn = fn
        self._graph: GraphData | None = None
        if self.options.backend == "compiled":
            traced = trace(fn, self.specs, self.params, self.options)
            self._check_params(traced.params.names()[len(self.params) :])
            self._graph = traced.graph
            self._cg = compile_graph(traced.graph, self.options)
            self._batched: dict[str, Any] = {}
        else:
            self.session = EagerSession(self.options)

    def _check_params(self, extra: Sequence[str]) -> None:
        if extra:
            raise TorchleanError(
                f"the function uses param {extra[0]!r}, which is not in the params given "
                f"({', '.join(self.params.names()) or 'none'})"
            )

    @property
    def graph(self) -> GraphData:
        """The graph of the function (traced now on the eager backend)."""
        if self._graph is None:
            self._graph = trace(self.fn, self.specs, self.params, self.options).graph
        return self._graph

    def _check_inputs(self, inputs: Sequence[Any]) -> None:
        if len(inputs) != len(self.specs):
            raise TorchleanError(f"expected {len(self.specs)} inputs, got {len(inputs)}")

    # -- eager -----------------------------------------------------------------------------
    def _eager_refs(
        self, s: EagerSession, inputs: Sequence[Any], batched: bool
    ) -> list[Tensor | NatRef]:
        refs: list[Tensor | NatRef] = []
        for i, (spec, v) in enumerate(zip(self.specs, inputs, strict=True)):
            if isinstance(spec, NatInput):
                name = nat_name(i)
                if spec.size is None:
                    refs.append(s.nat(v, name=name, batched=batched))
                else:
                    refs.append(s.nat_vec(v, name=name, batched=batched))
            else:
                refs.append(s.input(v, name=input_name(i), shape=spec, batched=batched))
        return refs

    def _eager_output(self, inputs: Sequence[Any], batched: bool) -> Tensor:
        """Run the function on the session (tape reset first), on the whole batch at once
        (inputs declared batched) when ``batched``."""
        self._check_inputs(inputs)
        if batched:
            _batch_size(self.specs, inputs)
        s = self.session
        s.reset_tape()
        for p in self.params:
            s.use(p)
        out = self.fn(s, *self._eager_refs(s, inputs, batched))
        extra = [p.name or "?" for p in s.used_params() if p not in self.params]
        self._check_params(extra)
        if not isinstance(out, Tensor) or out.ops is not s:
            raise TorchleanError(
                f"the function must return a Tensor of the ops it was given, got "
                f"{type(out).__name__}"
            )
        return out

    # -- compiled --------------------------------------------------------------------------
    def _compiled_call(self, inputs: Sequence[Any], batched: bool) -> tuple[Any, dict, dict]:
        """The compiled graph for the call (mapped over the batch, with mean gradients, when
        ``batched``) and its leaves (params as device mirrors) and index inputs."""
        cg = self._graph_for(inputs, batched)
        leaves, index = self._input_args(inputs, cg, ())
        return cg, leaves, index

    def _graph_for(self, inputs: Sequence[Any], batched: bool) -> Any:
        """The compiled graph for the call, the inputs checked: the graph of one sample, or
        mapped over the batch with mean gradients when ``batched``."""
        self._check_inputs(inputs)
        if not batched:
            return self._cg
        _batch_size(self.specs, inputs)
        cg = self._batched.get("mean")
        if cg is None:
            cg = self._batched["mean"] = self._cg.batched(over=self._names(), grads="mean")
        return cg

    def _input_args(
        self, inputs: Sequence[Any], cg: Any, skip: Collection[str]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The leaves (the params not in ``skip``, as device mirrors, then the inputs) and the
        index inputs of a call."""
        leaves: dict[str, Any] = (
            {}
            if len(skip) == len(self.params)
            else {
                p.name: p.device_value(cg.device, cg.dtype)  # type: ignore[misc]
                for p in self.params
                if p.name not in skip
            }
        )
        index: dict[str, Any] = {}
        for (is_index, name), v in zip(self._slots, inputs, strict=True):
            if is_index:
                index[name] = v
            else:
                leaves[name] = v
        return leaves, index

    def _names(self) -> list[str]:
        return [name for _, name in self._slots]


class Predictor(_Runner):
    """Model code bound to params, for outputs: ``Predictor(fn, params, inputs, options)``
    then ``pred(*inputs)`` (one sample) or ``pred(*inputs, batched=True)`` (a leading batch
    axis on every input, outputs stacked). Eager or compiled by ``options.backend``."""

    def __call__(self, *inputs: Any, batched: bool = False) -> np.ndarray:
        if self.options.backend == "compiled":
            cg, leaves, index = self._compiled_call(inputs, batched)
            return np.asarray(cg.forward(leaves, index))
        out = self._eager_output(inputs, batched)
        value = out.numpy()
        if batched and not out.batched:  # independent of the inputs: the same for every sample
            n = _batch_size(self.specs, inputs)
            value = np.broadcast_to(value, (n, *value.shape)).copy()
        return value


class ScalarTrainer(_Runner):
    """A training loop over a backend-generic scalar loss (TorchLean's ``ScalarTrainer``).

    ::

        trainer = ScalarTrainer(loss, model.parameters(), inputs=[(64,), NatInput()],
                                options=Options(backend="compiled"))
        for xb, yb in batches:
            trainer.adam_step(xb, yb, lr=1e-3, batched=True)
        trainer.get_params()

    ``forward`` gives the loss, ``backward`` the gradients of the trainable params (by name),
    ``step`` / ``adam_step`` / ``adamw_step`` update the params (optax math, moments per
    param) and return the loss before the update.

    ``mesh`` (a ``jax.sharding.Mesh``; compiled backend only) makes the training steps data
    parallel (``compiler.TrainStep(..., mesh=mesh)``): call them with ``batched=True``; the
    batch is split over the mesh axis ``data_axis`` (default: the mesh's only axis, else
    ``"data"``) and must be a multiple of its size; parameters and moments are replicated and
    XLA reduces the gradients. ``forward`` / ``backward`` still run on the options' device.
    """

    def __init__(
        self,
        loss: LossFn,
        params: ParamList | Sequence[Param],
        inputs: Sequence[Any],
        options: Options | None = None,
        *,
        mesh: Any = None,
        data_axis: str | None = None,
    ) -> None:
        super().__init__(loss, params, inputs, options)
        self.mesh = mesh
        self.data_axis = None if mesh is None else _check_mesh(mesh, data_axis, self.options)
        self._optimizer = Optimizer()
        self._opt_states: dict[str, Any] = {}
        # per optimizer kind: the hyperparameter values of the last step, and the kinds whose
        # values have changed once (their steps take them as a runtime vector from then on)
        self._hyper: dict[str, tuple[float, ...]] = {}
        self._varying: set[str] = set()
        # per optimizer kind: the last compiled step and what it left (see _Hot); while the
        # params still hold its outputs, the next step runs from there with no set-up
        self._hot: dict[str, _Hot] = {}
        # the losses of the steps, in order: the older ones as host floats; after them the
        # pending ones (floats, 0-d device arrays, and runs of _LOSS_RUN device losses stacked
        # into one 1-d device array, each copied to the host asynchronously and moved to the
        # floats once there), so a loop of any length holds a few device buffers and 8 bytes
        # of host memory a step
        self._host_losses = array.array("d")  # 8 bytes a step
        self._losses: list[Any] = []
        self._device_run = 0  # 0-d device losses at the end of _losses
        if self._graph is not None and self._graph.output_types[0].shape != ():
            raise TorchleanError(
                f"ScalarTrainer: the loss must be a scalar, got {self._graph.output_types[0]}"
            )

    @property
    def losses(self) -> list[float]:
        """The loss of every step (``step`` / ``adam_step`` / ``adamw_step``), in order, as
        floats. Losses still on the device are fetched here, all in one transfer (a training
        loop that does not read them never waits for the device)."""
        pending = [k for k, v in enumerate(self._losses) if not isinstance(v, float)]
        if pending:
            import jax

            got = iter(jax.device_get([self._losses[k] for k in pending]))
            self._losses = [
                float(v)
                for entry in self._losses
                for v in ((entry,) if isinstance(entry, float) else np.ravel(next(got)))
            ]
            self._device_run = 0
        if self._losses:
            self._host_losses.extend(self._losses)
            self._losses = []
        return self._host_losses.tolist()

    @losses.setter
    def losses(self, values: Sequence[float]) -> None:
        self._host_losses = array.array("d", [float(v) for v in values])
        self._losses = []
        self._device_run = 0

    def _record(self, loss: Any) -> None:
        """Keep a step's loss: a float, or a 0-d device array left on the device; every
        ``_LOSS_RUN`` device losses in a row become one stacked device array (one dispatch)
        whose copy to the host starts at once, and the runs already on the host become floats
        (no wait), so a training loop of any length holds a few device buffers."""
        self._losses.append(loss)
        if isinstance(loss, float):
            self._device_run = 0
            return
        self._device_run += 1
        if self._device_run == _LOSS_RUN:
            run = self._losses[-_LOSS_RUN:]
            del self._losses[-_LOSS_RUN:]
            stacked = _stack_losses()(*run)
            stacked.copy_to_host_async()
            self._losses.append(stacked)
            self._device_run = 0
            self._move_ready_losses()

    def _move_ready_losses(self) -> None:
        """Move the oldest pending losses that are computed (and copied to the host when
        their run was stacked) to the host floats, in order, up to the first one that is not
        ready or is among the trailing 0-d losses of a run in progress."""
        pending = self._losses
        end = len(pending) - self._device_run
        k = 0
        while k < end:
            entry = pending[k]
            if isinstance(entry, float):
                self._host_losses.append(entry)
            elif entry.is_ready():
                import jax

                self._host_losses.frombytes(np.asarray(jax.device_get(entry), np.float64).tobytes())
            else:
                break
            k += 1
        if k:
            del pending[:k]

    def _eager_loss(self, inputs: Sequence[Any], batched: bool) -> tuple[Tensor, Any]:
        """The loss tensor (per sample when batched) and its value (the mean over the batch):
        a float on the NumPy path, a 0-d device array on the JAX path (read when needed)."""
        out = self._eager_output(inputs, batched)
        if out.shape != ():
            raise TorchleanError(f"ScalarTrainer: the loss must be a scalar, got {out.type}")
        value = self.session._device_value(out)
        if value is None:
            return out, float(np.mean(out.numpy()))
        return out, _device_mean(value)

    def _value_and_grads(
        self, inputs: Sequence[Any], batched: bool
    ) -> tuple[Any, list[tuple[Param, Any]]]:
        if self.options.backend == "compiled":
            cg, leaves, index = self._compiled_call(inputs, batched)
            value, grads = cg.value_and_grad(leaves, index)
            loss = _device_mean(value)
            return loss, [(p, grads[p.name]) for p in self.params if p.requires_grad]
        t, loss = self._eager_loss(inputs, batched)
        self.session.backward(t, grads="mean")
        return loss, self.session._param_grads()

    @property
    def _on_device(self) -> bool:
        return self.options.backend == "compiled" or self.session._on_device

    def forward(self, *inputs: Any, batched: bool = False) -> float:
        """The loss (the mean over the batch when ``batched``), as a float."""
        if self.options.backend == "compiled":
            cg, leaves, index = self._compiled_call(inputs, batched)
            return float(np.mean(np.asarray(cg.forward(leaves, index))))
        return float(self._eager_loss(inputs, batched)[1])

    def backward(self, *inputs: Any, batched: bool = False) -> dict[str, np.ndarray]:
        """The gradients of the loss for the params with ``requires_grad``, by name."""
        _, pairs = self._value_and_grads(inputs, batched)
        return {p.name: np.asarray(g, dtype=np.float64) for p, g in pairs}  # type: ignore[misc]

    def _fused_step(
        self,
        kind: str,
        inputs: Sequence[Any],
        batched: bool,
        names: tuple[str, ...],
        values: tuple[float, ...],
    ) -> Any:
        """Compiled backend: one jitted call (``compiler.TrainStep``): forward, tape VJP and
        the optax update, params and moments donated and kept on the device; the loss comes
        back as a 0-d device array (nothing waits for the device). Hyperparameters are
        constants of the step while they stay the same (as in a hand-written step); once they
        change (a schedule), the step takes them as a runtime vector (``TrainStep(...,
        hyperparams=...)``), a NumPy vector transferred with the call (no recompilation, no
        ``jax.device_put`` of its own). While the params still hold the last step's outputs,
        the step runs from its state with no set-up (the steady state of a training loop).
        ``names`` and ``values``: the optax hyperparameters."""
        hot = self._hot.get(kind)
        if (
            hot is None
            or hot.batched is not batched
            or (hot.values is not None and hot.values != values)
            or not all(map(operator.is_, map(_DEVICE, hot.params), hot.arrays))
        ):
            hot = self._set_up(kind, inputs, batched, dict(zip(names, values, strict=True)))
        else:
            self._check_inputs(inputs)
            if batched:
                _batch_size(self.specs, inputs)
            if hot.values is None and values != hot.last:
                hot.hyper = np.array(values, hot.hyper.dtype)
                hot.last = values
        data, index = self._input_args(inputs, hot.cg, hot.names)
        arrays, opt_state, loss = hot.step.apply(
            hot.arrays, hot.opt_state, hot.hyper, data, index or None
        )
        for p, a in zip(hot.params, arrays, strict=True):
            p._set_device(a)
        hot.arrays = arrays
        hot.opt_state = self._opt_states[kind] = opt_state
        self._record(loss)
        return loss

    def _set_up(
        self,
        kind: str,
        inputs: Sequence[Any],
        batched: bool,
        hyper: Mapping[str, float],
    ) -> _Hot:
        """The step of ``kind`` for this call, from the params' current values and this
        trainer's optimizer state (a fresh one the first time): the inputs checked, the
        hyperparameters' change noted (the step takes them as a runtime vector from the first
        change on)."""
        if self.mesh is not None and not batched:
            raise TorchleanError(
                "ScalarTrainer: with a mesh, a training step splits the batch over the devices: "
                "call it with batched=True"
            )
        cg = self._graph_for(inputs, batched)
        values = tuple(hyper.values())
        seen = self._hyper.get(kind)
        if seen is not None and seen != values:
            self._varying.add(kind)
        self._hyper[kind] = values
        step = self._train_step(kind, cg, hyper, values)
        by_name = {p.name: p for p in self.params}
        params = tuple(by_name[n] for n in step.param_names)
        state = self._fresh_state(kind, step, cg)
        hot = _Hot(step, cg, batched, params, state)
        if step.hyper_names:
            hot.hyper = step.host_hyperparams(**hyper)
            hot.last = values
        else:
            hot.values = values
        self._hot[kind] = hot
        return hot

    def _train_step(
        self, kind: str, cg: Any, hyper: Mapping[str, float], values: tuple[float, ...]
    ) -> Any:
        """The ``compiler.TrainStep`` of this compiled graph, optimizer and mesh, shared by
        every trainer of them: with these hyperparameters as constants, or (once this trainer
        changed them) with a runtime hyperparameter vector, one jitted step for all values."""
        import compiler

        varying = kind in self._varying
        key = (id(cg), kind, id(self.mesh), self.data_axis, None if varying else values)
        step = _STEPS.get(key)
        if step is None or step.compiled is not cg or step.mesh is not self.mesh:
            import optax

            make = {"sgd": optax.sgd, "adam": optax.adam, "adamw": optax.adamw}[kind]
            step = _STEPS[key] = compiler.TrainStep(
                cg,
                make if varying else make(**hyper),
                mesh=self.mesh,
                data_axis=self.data_axis,
                hyperparams=dict(hyper) if varying else None,
            )
        return step

    def _fresh_state(self, kind: str, step: Any, cg: Any) -> Any:
        """A ``TrainState`` from the params' current values (device mirrors, replicated over the
        mesh) and this trainer's optimizer state of ``kind`` (a fresh one the first time)."""
        import compiler

        params = {
            p.name: p.device_value(cg.device, cg.dtype)
            for p in self.params
            if p.name in step.param_names
        }
        if self.mesh is not None:  # replicated over the mesh (a no-op once they are)
            import jax

            params = {n: jax.device_put(v, step.param_sharding) for n, v in params.items()}
        opt_state = self._opt_states.get(kind)
        if opt_state is None:
            opt_state = step.init(params).opt_state
        return compiler.TrainState(params, opt_state, 0, step.param_names)

    def step(self, *inputs: Any, lr: float, batched: bool = False) -> Any:
        """One SGD step; returns the loss before it (see :meth:`adam_step`)."""
        if self.options.backend == "compiled":
            _check_hyper(lr, 0.0, 0.0, 0.0)
            return self._fused_step("sgd", inputs, batched, _SGD, (lr,))
        loss, pairs = self._value_and_grads(inputs, batched)
        self._optimizer.sgd(pairs, lr, on_device=self._on_device)
        self._record(loss)
        return loss

    def adam_step(
        self,
        *inputs: Any,
        lr: float,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        batched: bool = False,
    ) -> Any:
        """One Adam step (``optax.adam``); returns the loss before it: a float on the eager
        CPU path, else a 0-d array that stays on the device until read (``float(loss)``), so
        a training loop never waits for the device (:attr:`losses` reads them all at once)."""
        if self.options.backend == "compiled":
            _check_hyper(lr, b1, b2, eps)
            return self._fused_step("adam", inputs, batched, _ADAM, (lr, b1, b2, eps))
        loss, pairs = self._value_and_grads(inputs, batched)
        self._optimizer.adam("adam", pairs, lr=lr, b1=b1, b2=b2, eps=eps, on_device=self._on_device)
        self._record(loss)
        return loss

    def adamw_step(
        self,
        *inputs: Any,
        lr: float,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        batched: bool = False,
    ) -> Any:
        """One AdamW step (``optax.adamw``); returns the loss before it (see
        :meth:`adam_step`)."""
        if self.options.backend == "compiled":
            _check_hyper(lr, b1, b2, eps, weight_decay)
            return self._fused_step(
                "adamw", inputs, batched, _ADAMW, (lr, b1, b2, eps, weight_decay)
            )
        loss, pairs = self._value_and_grads(inputs, batched)
        self._optimizer.adam(
            "adamw",
            pairs,
            lr=lr,
            b1=b1,
            b2=b2,
            eps=eps,
            weight_decay=weight_decay,
            on_device=self._on_device,
        )
        self._record(loss)
        return loss

    def save_loss_curve(
        self,
        path: str,
        *,
        compare: Mapping[str, ScalarTrainer | Sequence[float]] | None = None,
        label: str | None = None,
        title: str = "training loss",
        log: bool = False,
    ) -> str:
        """Write :attr:`losses` (one point per step, labelled ``label``, by default the
        backend) as a PNG, with the curves of ``compare`` (other trainers, or loss lists, by
        label) on the same chart, e.g. ``eager.save_loss_curve("c.png", compare={"compiled":
        compiled})``. Needs matplotlib (the ``examples`` extra); returns the path."""
        curves: dict[str, Sequence[float]] = {label or self.options.backend: self.losses}
        for label, other in (compare or {}).items():
            curves[label] = other.losses if isinstance(other, ScalarTrainer) else other
        return plot_losses(path, curves, title=title, log=log)

    def get_params(self) -> dict[str, np.ndarray]:
        """The current param values by name (synchronised from the device)."""
        return self.params.values()

    def verify(self, **kwargs: Any) -> Any:
        """The verifier's report on the loss graph: its compiled backward equals the reference
        ``backprop_ctx``."""
        return verify_graph(self.graph, self.options, **kwargs)


class _Hot:
    """A compiled training step of one optimizer kind and what it left: the params it trains
    (in the step's order), their device values it returned (still held by the params while
    nobody else changed them), the optimizer state, and the hyperparameter argument (``()``
    for a step with constant ones, ``values`` those constants; else a NumPy vector of the
    values ``last``)."""

    __slots__ = (
        "arrays",
        "batched",
        "cg",
        "hyper",
        "last",
        "names",
        "opt_state",
        "params",
        "step",
        "values",
    )

    def __init__(
        self, step: Any, cg: Any, batched: bool, params: tuple[Param, ...], state: Any
    ) -> None:
        self.step = step
        self.cg = cg
        self.batched = batched
        self.params = params
        self.names: tuple[str, ...] = step.param_names
        self.arrays: tuple[Any, ...] = tuple(state.params[n] for n in self.names)
        self.opt_state = state.opt_state
        self.values: tuple[float, ...] | None = None
        self.hyper: Any = ()
        self.last: tuple[float, ...] | None = None


#: a param's device mirror (the hot path compares it with what the last step left)
_DEVICE = operator.attrgetter("_device")


def _device_mean(value: Any) -> Any:
    """The mean of a (batch of) loss values that stays on the device: a 0-d array."""
    import jax.numpy as jnp

    return value if value.ndim == 0 else jnp.mean(value)


def _check_mesh(mesh: Any, data_axis: str | None, options: Options) -> str:
    """The mesh axis a data-parallel trainer splits the batch over, the mesh checked."""
    from jax.sharding import Mesh

    if options.backend != "compiled":
        raise TorchleanError(
            "ScalarTrainer: mesh= needs Options(backend='compiled') (the eager backend runs on "
            "one device)"
        )
    if not isinstance(mesh, Mesh):
        raise TorchleanError(
            f"ScalarTrainer: mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}"
        )
    axes = tuple(mesh.axis_names)
    name = data_axis if data_axis is not None else (axes[0] if len(axes) == 1 else "data")
    if name not in axes:
        raise TorchleanError(
            f"ScalarTrainer: data_axis {name!r} is not an axis of the mesh "
            f"(axes: {', '.join(map(str, axes))})"
        )
    return name


def scalar_trainer(
    loss: LossFn,
    params: ParamList | Sequence[Param],
    inputs: Sequence[Any],
    options: Options | None = None,
    *,
    mesh: Any = None,
    data_axis: str | None = None,
) -> ScalarTrainer:
    """Build a :class:`ScalarTrainer` (TorchLean's ``scalarTrainer``)."""
    return ScalarTrainer(loss, params, inputs, options, mesh=mesh, data_axis=data_axis)


__all__ = ["NatInput", "Ops", "Predictor", "ScalarTrainer", "scalar_trainer"]
