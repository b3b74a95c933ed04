"""The compiled functions: short interpreters over the tape, traced once by ``jax.jit``.

Each builds a function with a flat positional signature (see :mod:`compiler._compiled`):

* forward ``(*leaves, *index) -> (outputs,)``
* jvp ``(*leaves, *tangents, *index) -> ((outputs,), (output tangents,))``
* vjp ``(*leaves, *seeds, *index) -> ((outputs,), (gradients,))``

``leaves`` are all leaves in context order, ``tangents`` and ``gradients`` one per leaf with
``requires_grad`` in context order, ``seeds`` one per output, ``index`` the runtime index inputs in
context order (int32). The tape functions call only the nested per-node rules and accumulate
cotangents with ``add``; ``mode="jax"`` differentiates the forward with ``jax.jvp`` /
``jax.vjp`` instead. The loops look alike on purpose.

Fusion boundaries: XLA inlines every nested call and fuses what it can. On a long chain of
elementwise nodes that makes one fused kernel of the whole chain (forward or backward), and
XLA's CPU fusion and code generation grow much faster than linearly with a kernel's size (a
2,000-node chain did not compile in 400 s). Every ``BOUNDARY_EVERY``-th tape entry's rule calls
are therefore marked not to be inlined (the XLA frontend attribute ``inlineable="false"``, set
with ``jax.experimental.xla_metadata``): XLA compiles them as real calls, which no fusion
crosses, so no kernel spans more than about ``BOUNDARY_EVERY`` nodes. The jaxpr is unchanged
(the attribute lives in the equation's context, not in its parameters); only what XLA may fuse
changes. Graphs of fewer nodes have no boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.xla_metadata import set_xla_metadata

from torchlean_ir import GraphData
from torchlean_ir.extend import at_node

from ._errors import CompileError
from ._precision import traced_at
from ._tape import Analysis, Batching, TapeEntry

Kind = Literal["forward", "jvp", "vjp"]
KINDS: tuple[Kind, ...] = ("forward", "jvp", "vjp")

#: Every this many tape entries, one entry's rule calls are compiled as real calls (a fusion
#: boundary; see the module docstring). Measured on a chain of elementwise nodes: 32 to 128
#: compile alike, 256 and more grow slower again.
BOUNDARY_EVERY = 128


@dataclass(frozen=True, eq=False)
class Program:
    """Everything the traced functions read: the graph, its tape and the static facts."""

    graph: GraphData
    dtype: Any  # numpy dtype
    tape: tuple[TapeEntry, ...]
    analysis: Analysis
    batching: Batching | None
    batch_level: bool  # the tape's rules are vmapped per node (summed / mean gradients)
    grad_leaves: tuple[int, ...]
    runtime_index: tuple[int, ...]
    static_index: dict[int, np.ndarray]
    boundaries: frozenset[int] = frozenset()  # nodes whose rule calls XLA must not inline
    precision: str = "float32"  # matrix products and convolutions (compiler._precision)

    @property
    def n_leaves(self) -> int:
        return self.graph.num_leaves


def boundary_nodes(tape: Sequence[TapeEntry]) -> frozenset[int]:
    """The nodes of every ``BOUNDARY_EVERY``-th tape entry (the fusion boundaries)."""
    every = BOUNDARY_EVERY
    return frozenset(e.node for k, e in enumerate(tape) if k % every == every - 1)


def _call(p: Program, e: TapeEntry, rule: Callable[..., Any], *args: Any) -> Any:
    """``rule(*args)``; at a boundary node, as a call XLA does not inline."""
    if e.node in p.boundaries:
        with set_xla_metadata(inlineable="false"):
            return rule(*args)
    return rule(*args)


def _index(p: Program, runtime: Sequence[Any]) -> list[Any]:
    idx: list[Any] = [None] * len(p.graph.index_inputs)
    for k, i in enumerate(p.runtime_index):
        idx[i] = runtime[k]
    for i, arr in p.static_index.items():
        idx[i] = jnp.asarray(arr)
    return idx


def batch_size(p: Program, leaves: Sequence[Any], runtime: Sequence[Any]) -> Any:
    """The batch size (an int, or a symbolic dimension when exported with a symbolic batch)."""
    for v, b in zip(leaves, p.analysis.batched, strict=False):
        if b:
            return v.shape[0]
    for k, i in enumerate(p.runtime_index):
        if p.analysis.batched_index[i]:
            return runtime[k].shape[0]
    raise AssertionError("a batched program has a batched input")


def _acc(cts: list[Any], v: int, g: Any) -> None:
    cts[v] = g if cts[v] is None else lax.add(cts[v], g)


def _zeros(p: Program, v: int, batch: Any) -> Any:
    shape = p.graph.value_type(v).shape
    if batch is not None and p.analysis.batched[v]:
        shape = (batch, *shape)
    return jnp.zeros(shape, p.dtype)


def _per_sample(p: Program, x: Any, v: int, batch: Any) -> Any:
    """In a batch-level tape, an output without a batch axis is the same for every sample."""
    if batch is None or p.analysis.batched[v]:
        return x
    return jnp.broadcast_to(x, (batch, *x.shape))


def _forward_node(p: Program, e: TapeEntry, vals: list[Any], idx: list[Any]) -> None:
    with at_node(p.graph, e.node, "lowering", error=CompileError):
        vals[e.value] = _call(
            p, e, e.forward, *(vals[a] for a in e.parents), *(idx[i] for i in e.index_args)
        )


def _forward_values(p: Program, leaves: Sequence[Any], idx: list[Any]) -> list[Any]:
    vals: list[Any] = [*leaves, *([None] * len(p.graph.nodes))]
    for e in p.tape:
        _forward_node(p, e, vals, idx)
    return vals


# -- tape mode -------------------------------------------------------------------------------


def tape_forward(p: Program) -> Callable[..., tuple[Any, ...]]:
    L = p.n_leaves

    def forward(*flat: Any) -> tuple[Any, ...]:
        leaves, runtime = flat[:L], flat[L:]
        batch = batch_size(p, leaves, runtime) if p.batch_level else None
        vals = _forward_values(p, leaves, _index(p, runtime))
        return tuple(_per_sample(p, vals[o], o, batch) for o in p.graph.outputs)

    return forward


def tape_jvp(p: Program) -> Callable[..., tuple[Any, ...]]:
    L, G = p.n_leaves, len(p.grad_leaves)

    def jvp(*flat: Any) -> tuple[Any, ...]:
        leaves, tangents, runtime = flat[:L], flat[L : L + G], flat[L + G :]
        batch = batch_size(p, leaves, runtime) if p.batch_level else None
        idx = _index(p, runtime)
        vals: list[Any] = [*leaves, *([None] * len(p.graph.nodes))]
        tans: list[Any] = [None] * len(vals)
        for i, t in zip(p.grad_leaves, tangents, strict=True):
            tans[i] = t
        for e in p.tape:
            _forward_node(p, e, vals, idx)
            if e.jvp is None:
                continue
            with at_node(p.graph, e.node, "differentiating (jvp)", error=CompileError):
                tans[e.value] = _call(
                    p,
                    e,
                    e.jvp,
                    *(vals[a] for a in e.parents),
                    vals[e.value],
                    *(tans[a] for a in e.receiving_parents),
                    *(idx[i] for i in e.index_args),
                )
        outs = tuple(_per_sample(p, vals[o], o, batch) for o in p.graph.outputs)
        touts = tuple(
            _per_sample(p, _zeros(p, o, batch) if tans[o] is None else tans[o], o, batch)
            for o in p.graph.outputs
        )
        return outs, touts

    return jvp


def tape_vjp(p: Program) -> Callable[..., tuple[Any, ...]]:
    L, K = p.n_leaves, len(p.graph.outputs)
    mean = p.batch_level and p.batching is not None and p.batching.grads == "mean"

    def vjp(*flat: Any) -> tuple[Any, ...]:
        leaves, seeds, runtime = flat[:L], flat[L : L + K], flat[L + K :]
        batch = batch_size(p, leaves, runtime) if p.batch_level else None
        idx = _index(p, runtime)
        vals = _forward_values(p, leaves, idx)
        cts: list[Any] = [None] * len(vals)
        for o, s in zip(p.graph.outputs, seeds, strict=True):
            if mean:
                # The mean over the batch, as a hand-written mean loss does it: on the seeds
                # (one small multiply), not on every summed gradient at the end.
                s = _divide(s, batch, p.dtype)
            if batch is not None and not p.analysis.batched[o]:
                s = jnp.sum(s, axis=0)  # the same output for every sample: seeds add up
            _acc(cts, o, s)
        for e in reversed(p.tape):
            if e.vjp is None:
                continue
            with at_node(p.graph, e.node, "back-propagating through", error=CompileError):
                gs = _call(
                    p,
                    e,
                    e.vjp,
                    *(vals[a] for a in e.parents),
                    vals[e.value],
                    cts[e.value],
                    *(idx[i] for i in e.index_args),
                )
            for a, g in zip(e.receiving_parents, gs, strict=True):
                _acc(cts, a, g)
        outs = tuple(_per_sample(p, vals[o], o, batch) for o in p.graph.outputs)
        grads = []
        for i in p.grad_leaves:
            g = _zeros(p, i, batch) if cts[i] is None else cts[i]
            if mean and p.analysis.batched[i] and cts[i] is not None:
                g = g * lax.convert_element_type(jnp.asarray(batch), p.dtype)  # per sample
            grads.append(g)
        return outs, tuple(grads)

    return vjp


def _divide(g: Any, batch: Any, dtype: Any) -> Any:
    return g / lax.convert_element_type(jnp.asarray(batch), dtype)


# -- jax mode --------------------------------------------------------------------------------


def _with_diff(p: Program, leaves: Sequence[Any], diff: Sequence[Any]) -> list[Any]:
    full = list(leaves)
    for i, d in zip(p.grad_leaves, diff, strict=True):
        full[i] = d
    return full


def jax_jvp(p: Program) -> Callable[..., tuple[Any, ...]]:
    L, G = p.n_leaves, len(p.grad_leaves)

    def jvp(*flat: Any) -> tuple[Any, ...]:
        leaves, tangents, runtime = flat[:L], flat[L : L + G], flat[L + G :]
        idx = _index(p, runtime)

        def f(*diff: Any) -> tuple[Any, ...]:
            vals = _forward_values(p, _with_diff(p, leaves, diff), idx)
            return tuple(vals[o] for o in p.graph.outputs)

        return jax.jvp(f, tuple(leaves[i] for i in p.grad_leaves), tuple(tangents))

    return jvp


def jax_vjp(p: Program, forward_batched: Callable[..., tuple[Any, ...]] | None = None) -> Any:
    """JAX's reverse mode of the forward. With ``forward_batched`` (the vmapped forward), the
    gradients of leaves without a batch axis come out summed (or averaged) over the batch."""
    L, K = p.n_leaves, len(p.graph.outputs)

    def vjp(*flat: Any) -> tuple[Any, ...]:
        leaves, seeds, runtime = flat[:L], flat[L : L + K], flat[L + K :]
        if forward_batched is None:
            idx = _index(p, runtime)

            def f(*diff: Any) -> tuple[Any, ...]:
                vals = _forward_values(p, _with_diff(p, leaves, diff), idx)
                return tuple(vals[o] for o in p.graph.outputs)
        else:

            def f(*diff: Any) -> tuple[Any, ...]:
                return forward_batched(*_with_diff(p, leaves, diff), *runtime)

        outs, pull = jax.vjp(f, *(leaves[i] for i in p.grad_leaves))
        grads = pull(tuple(seeds))
        if forward_batched is not None and p.batching is not None and p.batching.grads == "mean":
            batch = batch_size(p, leaves, runtime)
            grads = tuple(
                g if p.analysis.batched[i] else _divide(g, batch, p.dtype)
                for i, g in zip(p.grad_leaves, grads, strict=True)
            )
        return outs, tuple(grads)

    return vjp


# -- whole-function batching -----------------------------------------------------------------


def in_axes(p: Program, kind: Kind) -> tuple[int | None, ...]:
    """Per flat argument of ``kind``, its batch axis (0) or ``None``."""
    leaf = tuple(0 if b else None for b in p.analysis.batched[: p.n_leaves])
    index = tuple(0 if p.analysis.batched_index[i] else None for i in p.runtime_index)
    if kind == "forward":
        return (*leaf, *index)
    if kind == "jvp":
        return (*leaf, *(leaf[i] for i in p.grad_leaves), *index)
    return (*leaf, *((0,) * len(p.graph.outputs)), *index)


def build(p: Program, kind: Kind, mode: str) -> Callable[..., Any]:
    """The (unjitted) function of ``kind`` for ``mode`` ("tape" or "jax") and the program's
    batching, traced at the program's matmul precision."""
    return traced_at(p.precision, _build(p, kind, mode))


def _build(p: Program, kind: Kind, mode: str) -> Callable[..., Any]:
    whole_vmap = p.batching is not None and not p.batch_level
    if mode == "tape":
        fn = {"forward": tape_forward, "jvp": tape_jvp, "vjp": tape_vjp}[kind](p)
        return jax.vmap(fn, in_axes=in_axes(p, kind)) if whole_vmap else fn
    if mode != "jax":
        raise CompileError(f"mode must be 'tape' or 'jax', got {mode!r}")
    if kind == "forward":
        fn = tape_forward(p)  # the same nested forward rules
    elif kind == "jvp":
        fn = jax_jvp(p)
    elif p.batching is not None and p.batching.grads != "per_sample":
        fwd = jax.vmap(tape_forward(p), in_axes=in_axes(p, "forward"))
        return jax_vjp(p, fwd)
    else:
        fn = jax_vjp(p)
    return jax.vmap(fn, in_axes=in_axes(p, kind)) if p.batching is not None else fn
