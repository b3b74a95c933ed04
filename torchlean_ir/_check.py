"""``check(graph)``: re-validate any graph (built, loaded from a file, or made by hand).

Like JAX's ``check_jaxpr``: references in range and earlier, op known, attributes valid and
canonical, index arguments well-typed, and every recorded type equal to the shape rule's. An error
names the node index and prints the node.
"""

from __future__ import annotations

from ._attrs import Attrs, make_attrs
from ._errors import AttrError, GraphCheckError, ShapeError, UnknownOpError
from ._graph import GraphData, valid_name
from ._printer import format_node
from ._registry import get_op
from ._types import DType, IndexType, TensorType, is_nat
from ._util import clip, gc_paused, short_repr


def _node_error(graph: GraphData, j: int, message: str) -> GraphCheckError:
    try:
        shown = clip(format_node(graph, j), 160)
    except Exception:  # a node too broken to print still gets a message
        shown = short_repr(graph.nodes[j], 160)
    return GraphCheckError(f"node {j} (`{shown}`): {message}", node=j, detail=message)


def _check_type(t: object, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise GraphCheckError(f"{what}: type must be a TensorType, got {short_repr(t)}")
    if not isinstance(t.shape, tuple) or any(
        isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in t.shape
    ):
        raise GraphCheckError(
            f"{what}: shape must be a tuple of non-negative ints, got {short_repr(t.shape)}"
        )
    if not isinstance(t.dtype, DType) or not t.dtype.is_float:
        raise GraphCheckError(f"{what}: dtype must be f32 or f64, got {t.dtype}")
    return t


def check(graph: GraphData) -> GraphData:
    """Validate ``graph``; return it unchanged, or raise :class:`GraphCheckError`."""
    with gc_paused():
        return _check(graph)


def _check(graph: GraphData) -> GraphData:
    ctx = graph.context
    seen: dict[str, str] = {}
    for i, leaf in enumerate(ctx.leaves):
        where = f"leaf {i} ({leaf.name!r})"
        if not valid_name(leaf.name):
            raise GraphCheckError(
                f"leaf {i}: invalid name {short_repr(leaf.name)} (an identifier, dots allowed)"
            )
        if leaf.name in seen:
            raise GraphCheckError(f"{where}: name already used by {seen[leaf.name]}")
        seen[leaf.name] = f"leaf {i}"
        _check_type(leaf.type, where)
        if leaf.kind not in ("param", "input"):
            raise GraphCheckError(
                f"{where}: kind must be 'param' or 'input', got {short_repr(leaf.kind)}"
            )
        if not isinstance(leaf.requires_grad, bool):
            raise GraphCheckError(f"{where}: requires_grad must be a bool")
        if leaf.type.dtype != ctx.leaves[0].type.dtype:
            raise GraphCheckError(
                f"{where}: dtype {leaf.type.dtype} differs from leaf 0's "
                f"{ctx.leaves[0].type.dtype} (a graph has one float dtype)"
            )
    for i, ix in enumerate(ctx.index_inputs):
        where = f"index input {i} ({ix.name!r})"
        if not valid_name(ix.name):
            raise GraphCheckError(f"index input {i}: invalid name {short_repr(ix.name)}")
        if ix.name in seen:
            raise GraphCheckError(f"{where}: name already used by {seen[ix.name]}")
        seen[ix.name] = f"index input {i}"
        if not isinstance(ix.type, IndexType) or len(ix.type.shape) > 1:
            raise GraphCheckError(f"{where}: must be a nat scalar or vector, got {ix.type}")
        if ix.value is not None:
            ok = (
                isinstance(ix.value, tuple)
                and len(ix.value) == ix.type.size
                and all(is_nat(v) for v in ix.value)
            )
            if not ok:
                raise GraphCheckError(
                    f"{where}: a static value must be a tuple of {ix.type.size} naturals "
                    f"below 2**63, got {short_repr(ix.value)}"
                )

    n_leaves = len(ctx.leaves)
    n_index = len(ctx.index_inputs)
    dtype = ctx.leaves[0].type.dtype if ctx.leaves else None  # the graph's one float dtype
    types: list[TensorType] = [leaf.type for leaf in ctx.leaves]
    for j, node in enumerate(graph.nodes):
        v = n_leaves + j
        try:
            op = get_op(node.op)
        except UnknownOpError as e:
            raise _node_error(graph, j, str(e)) from None
        for p, a in enumerate(node.args):
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < v:
                raise _node_error(
                    graph,
                    j,
                    f"argument {p} refers to %{short_repr(a)}, which is not an earlier value "
                    f"(0..{v - 1})",
                )
        for p, a in enumerate(node.index_args):
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < n_index:
                raise _node_error(
                    graph,
                    j,
                    f"index argument {p} refers to #{short_repr(a)}, but the graph declares "
                    f"{n_index} index input{'' if n_index == 1 else 's'}",
                )
        if not isinstance(node.attrs, Attrs):
            raise _node_error(graph, j, "attrs must be an Attrs record")
        try:
            canonical = make_attrs(node.op, op.attrs, dict(node.attrs))
        except AttrError as e:
            raise _node_error(graph, j, str(e)) from None
        if canonical != node.attrs:
            raise _node_error(graph, j, f"attributes are not canonical; expected {canonical!r}")
        recorded = node.type
        try:
            _check_type(recorded, "output")
        except GraphCheckError as e:
            raise _node_error(graph, j, str(e)) from None
        arg_types = tuple(types[a] for a in node.args)
        index_types = tuple(ctx.index_inputs[a].type for a in node.index_args)
        try:
            inferred = op.infer_type(arg_types, index_types, node.attrs)
        except ShapeError as e:
            shown = ", ".join(str(t) for t in arg_types)
            raise _node_error(graph, j, f"{node.op}({shown}): {e}") from None
        if inferred != recorded:
            raise _node_error(
                graph,
                j,
                f"recorded type {recorded} but the shape rule of {node.op} gives {inferred}",
            )
        if dtype is None:
            dtype = recorded.dtype
        elif recorded.dtype != dtype:
            first = "leaf 0" if n_leaves else "node 0"
            raise _node_error(
                graph,
                j,
                f"recorded dtype {recorded.dtype} differs from {first}'s {dtype} "
                "(a graph has one float dtype)",
            )
        types.append(recorded)

    if not graph.outputs:
        raise GraphCheckError("graph has no outputs")
    for k, o in enumerate(graph.outputs):
        if isinstance(o, bool) or not isinstance(o, int) or not 0 <= o < len(types):
            raise GraphCheckError(
                f"output {k} refers to %{short_repr(o)}, which is not a value (0..{len(types) - 1})"
            )
    return graph
