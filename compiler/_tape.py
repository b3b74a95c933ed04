"""The tape: a static plan of which rule runs for which node, and where cotangents flow.

Built once per compilation from the graph alone (no tracing). Three facts per value decide it:

* *live*: the value is an ancestor of an output (or an output). Only live nodes are computed.
* *differentiable*: the value depends on a leaf with ``requires_grad`` through arguments the op
  differentiates (``op.is_diff_arg``). A node argument *receives* a cotangent (and carries a
  tangent into the node's JVP) iff the op differentiates it and the argument is differentiable.
* *reached*: an output, or a receiving argument of a node in the backward pass. A node is in the
  backward pass iff it is live, reached and has a receiving argument.

With batching, a value is *batched* iff it depends on a batched leaf or index input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from torchlean_ir import GraphData, get_op

from ._errors import CompileError
from ._rules import RuleBatching, node_rule

GradReduction = Literal["sum", "mean", "per_sample"]


@dataclass(frozen=True, slots=True)
class Batching:
    """Map over a leading batch axis of the named leaves and index inputs.

    ``grads`` says what the gradient of a leaf *without* a batch axis is: ``"sum"`` over the
    batch, ``"mean"`` over the batch, or ``"per_sample"`` (one per sample, with a batch axis).
    Leaves with a batch axis always get per-sample gradients."""

    leaves: frozenset[str]
    index: frozenset[str]
    grads: GradReduction = "sum"

    def key(self) -> tuple[Any, ...]:
        return (tuple(sorted(self.leaves)), tuple(sorted(self.index)), self.grads)


@dataclass(frozen=True, slots=True)
class TapeEntry:
    """One live node of the compiled graph, in node order.

    ``parents`` are value ids (the node's tensor arguments, leaves ``0..L-1`` then nodes);
    ``index_args`` positions in ``graph.index_inputs``. ``receives[p]`` says whether parent ``p``
    receives a cotangent from this node in the tape VJP, which is also whether it carries a tangent
    into this node's JVP rule. ``forward``, ``jvp`` and ``vjp`` are the jitted per-node rules
    (``tl_fwd_<op>``, ``tl_jvp_<op>``, ``tl_vjp_<op>``; see :mod:`compiler._rules` for their
    signatures); ``jvp`` is ``None`` when no parent carries a tangent, ``vjp`` when the node is not
    in the backward pass. In a batch-level tape (batched with summed or mean gradients),
    ``batched`` says per parent, then per index argument, whether it has a leading batch axis; a
    node with any batched input runs vmapped rules and its own value is batched."""

    node: int
    value: int
    op: str
    parents: tuple[int, ...]
    index_args: tuple[int, ...]
    receives: tuple[bool, ...]
    in_backward: bool
    forward: Callable[..., Any]
    jvp: Callable[..., Any] | None
    vjp: Callable[..., Any] | None
    batched: tuple[bool, ...] = ()

    @property
    def is_batched(self) -> bool:
        return any(self.batched)

    @property
    def receiving_parents(self) -> tuple[int, ...]:
        """Value ids of the parents that receive a cotangent, in argument order (the order of
        the VJP rule's results)."""
        return tuple(a for a, r in zip(self.parents, self.receives, strict=True) if r)


@dataclass(frozen=True, slots=True)
class Analysis:
    """Per value: live / differentiable / batched; per node: receives and in_backward."""

    live: tuple[bool, ...]
    differentiable: tuple[bool, ...]
    batched: tuple[bool, ...]
    batched_index: tuple[bool, ...]
    receives: tuple[tuple[bool, ...], ...]
    in_backward: tuple[bool, ...]


def analyse(graph: GraphData, batching: Batching | None = None) -> Analysis:
    n_leaves, nodes = graph.num_leaves, graph.nodes
    nv = graph.num_values
    live = [False] * nv
    for o in graph.outputs:
        live[o] = True
    for j in range(len(nodes) - 1, -1, -1):
        if live[n_leaves + j]:
            for a in nodes[j].args:
                live[a] = True

    diff = [leaf.requires_grad for leaf in graph.leaves] + [False] * len(nodes)
    receives: list[tuple[bool, ...]] = []
    for j, node in enumerate(nodes):
        op = get_op(node.op)
        r = tuple(op.is_diff_arg(p) and diff[a] for p, a in enumerate(node.args))
        receives.append(r)
        diff[n_leaves + j] = any(r)

    bat_leaves = batching.leaves if batching else frozenset()
    bat_index = batching.index if batching else frozenset()
    batched = [leaf.name in bat_leaves for leaf in graph.leaves] + [False] * len(nodes)
    batched_index = tuple(ix.name in bat_index for ix in graph.index_inputs)
    for j, node in enumerate(nodes):
        batched[n_leaves + j] = any(batched[a] for a in node.args) or any(
            batched_index[i] for i in node.index_args
        )

    reached = [False] * nv
    for o in graph.outputs:
        reached[o] = True
    in_backward = [False] * len(nodes)
    for j in range(len(nodes) - 1, -1, -1):
        v = n_leaves + j
        if live[v] and reached[v] and any(receives[j]):
            in_backward[j] = True
            for a, r in zip(nodes[j].args, receives[j], strict=True):
                if r:
                    reached[a] = True
    return Analysis(
        tuple(live),
        tuple(diff),
        tuple(batched),
        batched_index,
        tuple(receives),
        tuple(in_backward),
    )


def build_tape(
    graph: GraphData,
    dtype: str,
    analysis: Analysis,
    batch_level: bool,
    precision: str = "float32",
) -> tuple[TapeEntry, ...]:
    """The tape of ``graph``: one entry per live node, with its jitted rules.

    ``batch_level`` builds vmapped rules for batched nodes (a batch-level tape); otherwise every
    rule is per-sample (the whole function may still be vmapped as one). Every rule is traced at
    the matmul ``precision`` (``compiler._precision``)."""
    n_leaves = graph.num_leaves
    entries = []
    for j, node in enumerate(graph.nodes):
        v = n_leaves + j
        if not analysis.live[v]:
            continue
        op = get_op(node.op)
        rules = {"lowering": op.lowering, "jvp": op.lowering_jvp, "vjp": op.lowering_vjp}
        missing = [r for r, fn in rules.items() if fn is None]
        if missing:
            raise CompileError(f"node {j} ({node.op}): the op has no {', '.join(missing)} rule")
        arg_shapes = tuple(graph.value_type(a).shape for a in node.args)
        index_shapes = tuple(graph.index_inputs[i].type.shape for i in node.index_args)
        receives = analysis.receives[j]
        flags_b: tuple[bool, ...] = ()
        rb_fwd = rb_jvp = rb_vjp = None
        if batch_level:
            arg_b = tuple(analysis.batched[a] for a in node.args)
            idx_b = tuple(analysis.batched_index[i] for i in node.index_args)
            flags_b = arg_b + idx_b
            if any(flags_b):
                rb_fwd = rb_jvp = RuleBatching(arg_b, idx_b)
                summed = tuple(not b for b, r in zip(arg_b, receives, strict=True) if r)
                rb_vjp = RuleBatching(arg_b, idx_b, summed)

        rule = partial(
            node_rule,
            op=op,
            attrs=node.attrs,
            arg_shapes=arg_shapes,
            index_shapes=index_shapes,
            out_shape=node.type.shape,
            dtype=dtype,
            position=j,
            precision=precision,
        )
        entries.append(
            TapeEntry(
                node=j,
                value=v,
                op=node.op,
                parents=node.args,
                index_args=node.index_args,
                receives=receives,
                in_backward=analysis.in_backward[j],
                forward=rule("fwd", flags=(), batching=rb_fwd),
                jvp=rule("jvp", flags=receives, batching=rb_jvp) if any(receives) else None,
                vjp=rule("vjp", flags=receives, batching=rb_vjp)
                if analysis.in_backward[j]
                else None,
                batched=flags_b,
            )
        )
    return tuple(entries)
