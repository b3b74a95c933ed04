"""A jitted training step: forward, tape VJP and an optax update fused in one compiled function.

::

    step = TrainStep(compiled.batched(over=("x", "label"), grads="mean"),
                     optimizer("adam", learning_rate=1e-3))
    state = step.init({"W": W0, "b": b0})
    state, loss = step(state, {"x": xs}, {"label": ys})     # one dispatch

The parameter and optimizer-state buffers are donated to the step: after a call, the previous
state's arrays are no longer valid (use the returned state).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

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
    """Parameters (by name), optimizer state and the number of steps taken."""

    params: dict[str, Any]
    opt_state: Any
    step: int = 0
    names: tuple[str, ...] = field(default=(), repr=False)

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        return (tuple(self.params[n] for n in self.names), self.opt_state), (self.step, self.names)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: tuple[Any, ...]) -> TrainState:
        values, opt_state = children
        step, names = aux
        return cls(dict(zip(names, values, strict=True)), opt_state, step, names)


class TrainStep:
    """One training step of a compiled graph with a single scalar (per-sample) output, the loss.

    ``compiled`` is a :class:`CompiledGraph` (one sample) or its :meth:`~CompiledGraph.batched`
    form with ``grads="sum"`` or ``"mean"`` (the loss is then the sum or mean of the per-sample
    losses). ``params`` names the leaves the optimizer updates (default: the ``param`` leaves
    with ``requires_grad``); every other leaf is data, passed at each call. The step is one
    jitted function: forward and backward (the compiled graph's VJP, tape or jax mode), the
    optimizer's update and ``optax.apply_updates``, with the parameter and optimizer-state
    buffers donated."""

    def __init__(
        self,
        compiled: CompiledGraph,
        optimizer: optax.GradientTransformation,
        *,
        params: Sequence[str] | None = None,
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
        self.trace_count = 0
        vjp = compiled._program_fn("vjp")
        mean = batching is not None and batching.grads == "mean"
        n_leaves = len(compiled.leaf_names)
        dtype = compiled.dtype

        def step(params: tuple[Any, ...], opt_state: Any, *rest: Any) -> tuple[Any, ...]:
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
            updates, opt_state = optimizer.update(g, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        step.__name__ = step.__qualname__ = "tl_train_step"
        self._step = jax.jit(step, donate_argnums=(0, 1), **compiled._placement)
        self._init = jax.jit(optimizer.init, out_shardings=compiled._sharding)
        self._fn = step

    def init(self, params: Mapping[str, Any] | Sequence[Any]) -> TrainState:
        """A fresh :class:`TrainState` from initial parameter values (copied to the device)."""
        vals = self.compiled._floats(self._params, params, None)
        values = tuple(
            jax.device_put(jnp.array(v, dtype=self.compiled.dtype), self.compiled._sharding)
            for v in vals
        )
        return TrainState(
            dict(zip(self.param_names, values, strict=True)),
            self._init(values),
            0,
            self.param_names,
        )

    def __call__(
        self, state: TrainState, data: Mapping[str, Any] | Sequence[Any], index: Index = None
    ) -> tuple[TrainState, Any]:
        """One step: ``(new state, loss)``. ``data`` holds the non-parameter leaves (by name or
        in context order), ``index`` the runtime index inputs. The loss stays on the device
        (no synchronisation)."""
        if not isinstance(state, TrainState) or state.names != self.param_names:
            raise ArgumentError("state: expected a TrainState from this step's init()")
        cg = self.compiled
        batch = [-1] if cg.is_batched else None
        args = cg._floats(self._data, data, batch) if self.data_names else []
        if cg.index_names or index is not None:
            args += cg._index_args(index, batch)
        params = tuple(state.params[n] for n in self.param_names)
        new_params, opt_state, loss = self._step(params, state.opt_state, *args)
        new = TrainState(
            dict(zip(self.param_names, new_params, strict=True)),
            opt_state,
            state.step + 1,
            self.param_names,
        )
        return new, loss

    def lower(self, state: TrainState, data: Any, index: Index = None) -> Any:
        """The ``jax.stages.Lowered`` step for these argument types (for ``.compile()``,
        ``.as_text()`` or ``memory_analysis()``)."""
        cg = self.compiled
        batch = [-1] if cg.is_batched else None
        args = cg._floats(self._data, data, batch) if self.data_names else []
        if cg.index_names or index is not None:
            args += cg._index_args(index, batch)
        params = tuple(state.params[n] for n in self.param_names)
        return self._step.lower(params, state.opt_state, *args)


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
