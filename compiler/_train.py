"""A jitted training step: forward, tape VJP and an optax update fused in one compiled function.

::

    step = TrainStep(compiled.batched(over=("x", "label"), grads="mean"),
                     optimizer("adam", learning_rate=1e-3))
    state = step.init({"W": W0, "b": b0})
    state, loss = step(state, {"x": xs}, {"label": ys})     # one dispatch

The parameter and optimizer-state buffers are donated to the step: after a call, the previous
state's arrays are no longer valid (use the returned state).

Data parallel: ``TrainStep(batched, opt, mesh=jax.sharding.Mesh(jax.devices(), ("data",)))``
splits each batch over the mesh's data axis and replicates the parameters and optimizer state;
XLA sums the gradients across devices (no hand-written all-reduce). The same code runs on one
CPU, several GPUs, or several hosts after ``jax.distributed.initialize()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ._args import Group
from ._compiled import CompiledGraph, Index
from ._errors import ArgumentError, CompileError
from ._lower import batch_size

_OPTIMIZERS: dict[str, Callable[..., optax.GradientTransformation]] = {
    "sgd": optax.sgd,
    "adam": optax.adam,
    "adamw": optax.adamw,
}


def optimizer(name: str, learning_rate: Any, **kwargs: Any) -> optax.GradientTransformation:
    """An optax optimizer by name: ``"sgd"`` (``momentum=``, ``nesterov=``), ``"adam"``
    (``b1=``, ``b2=``, ``eps=``) or ``"adamw"`` (also ``weight_decay=``); ``learning_rate`` may be
    an optax schedule. Any ``optax.GradientTransformation`` can be given to :class:`TrainStep`
    directly instead."""
    try:
        make = _OPTIMIZERS[name]
    except KeyError:
        raise CompileError(
            f"optimizer: unknown name {name!r} (expected one of {', '.join(_OPTIMIZERS)})"
        ) from None
    return make(learning_rate, **kwargs)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class TrainState:
    """Parameters (by name), optimizer state and the number of steps taken; for a step built
    with ``hyperparams``, also the hyperparameter vector the next step runs with (see
    :meth:`TrainStep.hyperparams`)."""

    params: dict[str, Any]
    opt_state: Any
    step: int = 0
    names: tuple[str, ...] = field(default=(), repr=False)
    hyper: Any = None

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        values = tuple(self.params[n] for n in self.names)
        return (values, self.opt_state, self.hyper), (self.step, self.names)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: tuple[Any, ...]) -> TrainState:
        values, opt_state, hyper = children
        step, names = aux
        return cls(dict(zip(names, values, strict=True)), opt_state, step, names, hyper)

    def replace(self, **changes: Any) -> TrainState:
        """A copy with some fields replaced (``state.replace(hyper=step.hyperparams(...))``)."""
        return dataclasses.replace(self, **changes)


class TrainStep:
    """One training step of a compiled graph with a single scalar (per-sample) output, the loss.

    ``compiled`` is a :class:`CompiledGraph` (one sample) or its :meth:`~CompiledGraph.batched`
    form with ``grads="sum"`` or ``"mean"`` (the loss is then the sum or mean of the per-sample
    losses). ``params`` names the leaves the optimizer updates (default: the ``param`` leaves
    with ``requires_grad``); every other leaf is data, passed at each call. The step is one
    jitted function: forward and backward (the compiled graph's VJP, tape or jax mode), the
    optimizer's update and ``optax.apply_updates``, with the parameter and optimizer-state
    buffers donated.

    ``mesh`` (a ``jax.sharding.Mesh``) makes the step data parallel: the batched arguments are
    split along their batch axis over the mesh axis ``data_axis`` (default: the mesh's only
    axis, else ``"data"``), parameters and optimizer state are replicated, and XLA reduces the
    gradients across devices. The graph must be batched; a batch size that does not split
    evenly over the data axis is refused with an :class:`ArgumentError`.

    ``hyperparams`` (a mapping of names to floats) makes the hyperparameters runtime values:
    ``optimizer`` is then an optax factory (``optax.adam``), called inside the step with the
    hyperparameters as traced scalars (``optax.adam(learning_rate=..., b1=..., ...)``). They
    travel in the :class:`TrainState` as one small vector on the device, an argument of the
    step that is neither donated nor returned, so a new learning rate at every step never
    recompiles and costs one upload: ``state = state.replace(hyper=step.hyperparams(
    learning_rate=5e-4))``. :meth:`host_hyperparams` gives the vector as a NumPy array instead,
    transferred with the step's own call (a few microseconds of host time, against tens for a
    ``jax.device_put``; allowed under ``jax.transfer_guard("disallow")`` when every other
    argument is already on the device). Unlike ``optax.inject_hyperparams`` they are not
    optimizer state (no copy in and out at every step). The factory's state must not depend on
    the values (true of optax's ``sgd``, ``adam``, ``adamw``)."""

    def __init__(
        self,
        compiled: CompiledGraph,
        optimizer: optax.GradientTransformation | Callable[..., optax.GradientTransformation],
        *,
        params: Sequence[str] | None = None,
        mesh: Mesh | None = None,
        data_axis: str | None = None,
        hyperparams: Mapping[str, float] | None = None,
    ) -> None:
        if not isinstance(compiled, CompiledGraph):
            raise CompileError(f"TrainStep: expected a CompiledGraph, got {type(compiled)}")
        graph = compiled.graph
        if len(graph.outputs) != 1 or compiled.output_shapes[0] != ():
            raise CompileError("TrainStep: the graph needs a single scalar output (the loss)")
        batching = compiled.batching
        if batching is not None and batching.grads == "per_sample":
            raise CompileError("TrainStep: batch with grads='sum' or 'mean', not 'per_sample'")
        if params is None:
            params = [
                leaf.name
                for leaf in graph.leaves
                if leaf.kind == "param" and leaf.requires_grad and leaf.name in compiled.grad_names
            ]
        params = list(params)
        for n in params:
            if n not in compiled.grad_names:
                raise CompileError(
                    f"TrainStep: params: {n!r} is not a leaf with requires_grad "
                    f"(those are: {', '.join(compiled.grad_names)})"
                )
            if batching is not None and n in batching.leaves:
                raise CompileError(f"TrainStep: params: {n!r} is batched; parameters cannot be")
        if not params:
            raise CompileError("TrainStep: no parameters to train")
        self.compiled = compiled
        self.hyper_names: tuple[str, ...] = ()
        self._hyper_default = np.zeros((0,), compiled.dtype)
        make: Callable[..., optax.GradientTransformation] | None = None
        if hyperparams is not None:
            if isinstance(optimizer, optax.GradientTransformation) or not callable(optimizer):
                raise CompileError(
                    "TrainStep: with hyperparams, optimizer must be an optax factory such as "
                    f"optax.adam (called with them), got {type(optimizer).__name__}"
                )
            self.hyper_names = tuple(hyperparams)
            zeros = np.zeros((len(self.hyper_names),), compiled.dtype)
            self._hyper_default = self._hyper_vector(hyperparams, zeros)
            make = optimizer
            try:
                optimizer = make(**dict(hyperparams))
            except TypeError as exc:
                raise CompileError(f"TrainStep: hyperparams: {exc}") from None
        self.optimizer = optimizer
        self.param_names: tuple[str, ...] = tuple(n for n in compiled.leaf_names if n in params)
        self.data_names: tuple[str, ...] = tuple(
            n for n in compiled.leaf_names if n not in self.param_names
        )
        leaves = compiled._leaves
        pos = {n: k for k, n in enumerate(compiled.leaf_names)}
        self._param_pos = tuple(pos[n] for n in self.param_names)
        self._data_pos = tuple(pos[n] for n in self.data_names)
        self._grad_pos = tuple(compiled.grad_names.index(n) for n in self.param_names)
        self._data = Group(
            "data",
            self.data_names,
            tuple(leaves.shapes[k] for k in self._data_pos),
            tuple(leaves.batched[k] for k in self._data_pos),
            dtype=compiled.dtype,
        )
        self._params = Group(
            "params",
            self.param_names,
            tuple(leaves.shapes[k] for k in self._param_pos),
            (False,) * len(self.param_names),
            dtype=compiled.dtype,
        )
        self.mesh = mesh
        self.data_axis: str | None = None
        if mesh is not None:
            self.data_axis = _data_axis(mesh, data_axis, batching is not None)
        self.trace_count = 0
        vjp = compiled._program_fn("vjp")
        mean = batching is not None and batching.grads == "mean"
        n_leaves = len(compiled.leaf_names)
        dtype = compiled.dtype

        hyper_names = self.hyper_names
        # index arrays on an accelerator are checked by the step itself: it returns the lowest
        # value of each index argument, read by a later call (no program of its own per call;
        # host data is checked before the call and its lowest value is not read)

        def step(
            params: tuple[Any, ...], opt_state: Any, hyper: Any, *rest: Any
        ) -> tuple[Any, ...]:
            self.trace_count += 1
            data, index = rest[: len(self._data_pos)], rest[len(self._data_pos) :]
            leaves_: list[Any] = [None] * n_leaves
            for k, v in zip(self._param_pos, params, strict=True):
                leaves_[k] = v
            for k, v in zip(self._data_pos, data, strict=True):
                leaves_[k] = v
            if batching is None:
                seed = jnp.ones((), dtype)
            else:
                seed = jnp.ones((batch_size(compiled._program, leaves_, index),), dtype)
            (out,), grads = vjp(*leaves_, seed, *index)
            loss = out if batching is None else (jnp.mean(out) if mean else jnp.sum(out))
            g = tuple(grads[k] for k in self._grad_pos)
            tx = optimizer
            if make is not None:
                tx = make(**{n: hyper[k] for k, n in enumerate(hyper_names)})
            updates, opt_state = tx.update(g, opt_state, params)
            lows = tuple(jnp.min(ix, initial=0) for ix in index)
            return optax.apply_updates(params, updates), opt_state, loss, lows

        step.__name__ = step.__qualname__ = "tl_train_step"
        if mesh is None:
            self._replicated: Any = compiled._sharding
            self._step = jax.jit(step, donate_argnums=(0, 1), **compiled._placement)
        else:
            # data parallel: the batch split over the mesh's data axis, parameters and optimizer
            # state replicated; XLA's partitioner sums the per-device gradients (an all-reduce)
            self._replicated = NamedSharding(mesh, PartitionSpec())
            split = NamedSharding(mesh, PartitionSpec(self.data_axis))
            data_sh = [split if b else self._replicated for b in self._data.batched]
            index_sh = [
                split if b else self._replicated
                for b in compiled._index.batched  # runtime index inputs, in order
            ]
            self._arg_shardings = (*data_sh, *index_sh)
            self._step = jax.jit(
                step,
                donate_argnums=(0, 1),
                in_shardings=(
                    self._replicated,
                    self._replicated,
                    self._replicated,
                    *self._arg_shardings,
                ),
                out_shardings=(
                    self._replicated,
                    self._replicated,
                    self._replicated,
                    self._replicated,
                ),
            )
        self._init = jax.jit(optimizer.init, out_shardings=self._replicated)
        self._fn = step

    def init(self, params: Mapping[str, Any] | Sequence[Any]) -> TrainState:
        """A fresh :class:`TrainState` from initial parameter values (copied to the device)."""
        vals = self.compiled._floats(self._params, params, None)
        values = tuple(
            jax.device_put(jnp.array(v, dtype=self.compiled.dtype), self._replicated) for v in vals
        )
        return TrainState(
            dict(zip(self.param_names, values, strict=True)),
            self._init(values),
            0,
            self.param_names,
            self._upload(self._hyper_default) if self.hyper_names else None,
        )

    def hyperparams(self, **values: float) -> Any:
        """The hyperparameter vector for :attr:`TrainState.hyper`, on the step's device: the
        given values, the others as given at construction (a step built with
        ``hyperparams``)."""
        if not self.hyper_names:
            raise ArgumentError("hyperparams: this step was built without hyperparams=")
        return self._upload(self._hyper_vector(values, self._hyper_default))

    def host_hyperparams(self, **values: float) -> np.ndarray:
        """As :meth:`hyperparams`, but a NumPy vector: the step transfers it with its call
        (JAX's dispatch copies it, no ``jax.device_put`` of its own), the cheap way to change
        a hyperparameter at every step (a schedule). Use one kind of vector throughout: a
        host vector and a device one are two argument types of the jitted step (one
        compilation each)."""
        if not self.hyper_names:
            raise ArgumentError("hyperparams: this step was built without hyperparams=")
        return self._hyper_vector(values, self._hyper_default)

    def _hyper_vector(self, values: Mapping[str, Any], default: np.ndarray) -> np.ndarray:
        """``values`` over ``default`` as a host vector in the hyperparameters' order; names and
        values checked (finite floats)."""
        names = self.hyper_names
        unknown = [n for n in values if n not in names]
        if unknown:
            raise ArgumentError(
                f"hyperparams: unknown name {unknown[0]!r} (this step's: {', '.join(names)})"
            )
        vec = default.copy()
        for k, n in enumerate(names):
            if n in values:
                v = values[n]
                if isinstance(v, bool) or not isinstance(v, int | float | np.floating | np.integer):
                    raise ArgumentError(f"hyperparams: {n} must be a number, got {v!r}")
                if not np.isfinite(v):
                    raise ArgumentError(f"hyperparams: {n} must be finite, got {v!r}")
                vec[k] = v
        return vec

    def _upload(self, vec: np.ndarray) -> Any:
        return jax.device_put(vec, self._replicated)

    def __call__(
        self, state: TrainState, data: Mapping[str, Any] | Sequence[Any], index: Index = None
    ) -> tuple[TrainState, Any]:
        """One step: ``(new state, loss)``. ``data`` holds the non-parameter leaves (by name or
        in context order), ``index`` the runtime index inputs. The loss stays on the device
        (no synchronisation)."""
        if not isinstance(state, TrainState) or state.names != self.param_names:
            raise ArgumentError("state: expected a TrainState from this step's init()")
        params = tuple(state.params[n] for n in self.param_names)
        new_params, opt_state, loss = self.apply(
            params, state.opt_state, self._hyper_arg(state), data, index
        )
        new = TrainState(
            dict(zip(self.param_names, new_params, strict=True)),
            opt_state,
            state.step + 1,
            self.param_names,
            state.hyper,
        )
        return new, loss

    def apply(
        self, params: tuple[Any, ...], opt_state: Any, hyper: Any, data: Any, index: Index
    ) -> tuple[tuple[Any, ...], Any, Any]:
        """The step on raw values, for a training loop that keeps its own state (the front
        end's ``ScalarTrainer``): the parameters in :attr:`param_names` order (donated), the
        optimizer state (donated) and the hyperparameter vector (``()`` for a step without
        hyperparams); returns ``(new parameters, new optimizer state, loss)``. The arguments
        are checked and the index checks deferred as in :meth:`__call__`, which wraps this in
        :class:`TrainState` s."""
        deferred: list[tuple[int, str]] = []
        args = self._args(data, index, deferred)
        try:
            if (
                type(hyper) is np.ndarray
                and jax.config.jax_transfer_guard_host_to_device not in _ALLOWED
                and _all_arrays(params)
                and _all_arrays(args)
            ):
                # the host vector is the only host value: its transfer is this step's own
                # (as a device_put would be) and goes with the call, whatever the transfer
                # guard says of implicit ones; host data keeps the guard's verdict. (Only
                # under a guard: entering the context costs the call tens of microseconds.)
                with jax.transfer_guard_host_to_device("allow"):
                    out = self._step(params, opt_state, hyper, *args)
            else:
                out = self._step(params, opt_state, hyper, *args)
        except BaseException:
            if deferred:
                self.compiled._forget_index()
            raise
        new_params, opt_state, loss, lows = out
        for k, where in deferred:
            self.compiled._defer_check(where, lows[k])
        return new_params, opt_state, loss

    def _hyper_arg(self, state: TrainState) -> Any:
        """The step's hyperparameter argument: the state's vector (a step with hyperparams),
        else an empty tuple (no argument buffers)."""
        if not self.hyper_names:
            return ()
        hyper = state.hyper
        if hyper is None:
            raise ArgumentError("state: no hyperparameter vector (use this step's init())")
        if type(hyper) is np.ndarray and (
            hyper.shape != self._hyper_default.shape or hyper.dtype != self._hyper_default.dtype
        ):
            raise ArgumentError(
                f"state: hyper: expected a vector of {len(self.hyper_names)} "
                f"{self._hyper_default.dtype} values ({', '.join(self.hyper_names)}), got "
                f"{hyper.dtype} of shape {hyper.shape} (use this step's hyperparams())"
            )
        return hyper

    def lower(self, state: TrainState, data: Any, index: Index = None) -> Any:
        """The ``jax.stages.Lowered`` step for these argument types (for ``.compile()``,
        ``.as_text()`` or ``memory_analysis()``)."""
        args = self._args(data, index)
        params = tuple(state.params[n] for n in self.param_names)
        return self._step.lower(params, state.opt_state, self._hyper_arg(state), *args)

    @property
    def param_sharding(self) -> Any:
        """The sharding of the parameters and optimizer state: replicated over the mesh, or the
        compiled graph's device without one."""
        return self._replicated

    @property
    def batch_sharding(self) -> Any:
        """With a mesh: the sharding of batched arguments (leading axis over the data axis);
        for building global arrays from per-host data (``jax.make_array_from_process_local_data``).
        ``None`` without a mesh."""
        if self.mesh is None:
            return None
        return NamedSharding(self.mesh, PartitionSpec(self.data_axis))

    def _args(
        self, data: Any, index: Index, deferred: list[tuple[int, str]] | None = None
    ) -> list[Any]:
        """The data and index arguments, checked (and, with a mesh, the batch checked to split
        evenly over the data axis); ``deferred`` collects the index arrays the step checks
        itself (see ``CompiledGraph._index_args``)."""
        cg = self.compiled
        batch = [-1] if cg.is_batched else None
        args = cg._floats(self._data, data, batch) if self.data_names else []
        if cg.index_names or index is not None:
            args += cg._index_args(index, batch, deferred)
        if self.mesh is not None and batch is not None:
            devices = self.mesh.shape[self.data_axis]
            if batch[0] % devices:
                raise ArgumentError(
                    f"data: batch size {batch[0]} does not split evenly over the {devices} "
                    f"devices of mesh axis {self.data_axis!r} (use a multiple of {devices})"
                )
        return args


#: transfer guard levels under which a host hyperparameter vector goes in as it is
_ALLOWED = frozenset({None, "allow"})


def _all_arrays(values: Iterable[Any]) -> bool:
    """Whether every value is a ``jax.Array`` (no host value among them)."""
    return all(isinstance(v, jax.Array) for v in values)


def _data_axis(mesh: Mesh, name: str | None, batched: bool) -> str:
    """The mesh axis the batch is split over: ``name``, else the mesh's only axis, else
    ``"data"``."""
    if not isinstance(mesh, Mesh):
        raise CompileError(f"TrainStep: mesh must be a jax.sharding.Mesh, got {type(mesh)}")
    if not batched:
        raise CompileError(
            "TrainStep: a mesh splits the batch, so the graph must be batched "
            "(compiled.batched(over=..., grads='mean' or 'sum'))"
        )
    axes = tuple(mesh.axis_names)
    if name is None:
        name = axes[0] if len(axes) == 1 else "data"
    if name not in axes:
        raise CompileError(
            f"TrainStep: data_axis {name!r} is not an axis of the mesh (axes: {', '.join(axes)})"
        )
    return name


def fit(
    step: TrainStep,
    state: TrainState,
    batches: Iterable[Any] | Callable[[], Iterable[Any]],
    *,
    epochs: int = 1,
) -> tuple[TrainState, np.ndarray]:
    """Run ``step`` over ``batches`` for ``epochs`` epochs; return the final state and the loss
    of every step (fetched from the device once, at the end).

    Each batch is ``data`` or a ``(data, index)`` pair. ``batches`` is re-iterated each epoch
    (a list), or called to get a fresh iterable (a generator function)."""
    losses = []
    for _ in range(epochs):
        for batch in batches() if callable(batches) else batches:
            data, index = batch if isinstance(batch, tuple) else (batch, None)
            state, loss = step(state, data, index)
            losses.append(loss)
    return state, np.asarray(jax.device_get(losses))
