"""Human-readable text form of a graph (jaxpr-like, a type on every binder).

::

    graph(%x: f32[4] input, %W: f32[3,4] param, %b: f32[3] param; #label: nat[]) {
      %3: f32[3] = linear(%W, %b, %x)
      %4: f32[3] = clamp(%3){hi=1.0, lo=0.0}
      %5: f32[] = gather_scalar_nat(%4; #label)
      return %5
    }

Leaves are named ``%<name>``, nodes ``%<value id>``, index inputs ``#<name>``. A leaf that
differs from its kind's default ``requires_grad`` (params: true, inputs: false) says so with
``grad`` / ``nograd``; a static index input shows its value (``#i: nat[] = 3``).

The text form is exact: :func:`~torchlean_ir.parse_graph` reads it back to an equal graph
(floats print as their shortest exact decimal, tensor literals as ``f32[2] [1.5, -2.0]`` or,
above 64 elements, as ``f32[100] b64"..."`` little-endian bytes). ``short=True`` abbreviates
literals above 8 elements (``f32[100] [...]``) for messages and display; that form does not
parse. The grammar is in ``docs/ir-format.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._attrs import format_attr_value

if TYPE_CHECKING:  # the records are read by their fields; _graph imports this module
    from ._graph import GraphData, IndexInput, Leaf, Node


def value_name(graph: GraphData, v: int) -> str:
    """The printed name of value ``v``: ``%<leaf name>`` or ``%<id>``."""
    if 0 <= v < graph.num_leaves:
        return "%" + graph.leaves[v].name
    return f"%{v}"


def index_name(graph: GraphData, i: int) -> str:
    if 0 <= i < len(graph.index_inputs):
        return "#" + graph.index_inputs[i].name
    return f"#<{i}?>"


def format_leaf(leaf: Leaf) -> str:
    default = leaf.kind == "param"
    flag = "" if leaf.requires_grad == default else (" grad" if leaf.requires_grad else " nograd")
    return f"%{leaf.name}: {leaf.type} {leaf.kind}{flag}"


def format_index_input(ix: IndexInput) -> str:
    text = f"#{ix.name}: {ix.type}"
    if ix.value is not None:
        v = ix.value[0] if len(ix.type.shape) == 0 else list(ix.value)
        text += f" = {v}"
    return text


def format_node_rhs(graph: GraphData, node: Node, *, short: bool = False) -> str:
    """The right-hand side of a node line: ``op(args; index args){attrs}``."""

    def vname(a: int) -> str:
        if 0 <= a < graph.num_values:
            return value_name(graph, a)
        return f"%<{a}?>"

    args = ", ".join(vname(a) for a in node.args)
    if node.index_args:
        args += "; " + ", ".join(index_name(graph, i) for i in node.index_args)
    text = f"{node.op}({args})"
    if node.attrs:
        shown = (f"{k}={format_attr_value(v, short=short)}" for k, v in node.attrs.items())
        text += "{" + ", ".join(shown) + "}"
    return text


def format_node(graph: GraphData, j: int, *, short: bool = True) -> str:
    """One node line, ``%5: f32[] = sum(%4)`` (``j`` is the node's index in ``graph.nodes``).

    Short by default: this is the form error messages show."""
    node = graph.nodes[j]
    return f"%{graph.num_leaves + j}: {node.type} = {format_node_rhs(graph, node, short=short)}"


def format_graph(graph: GraphData, *, short: bool = False) -> str:
    """The text form of ``graph`` (exact and parseable unless ``short``)."""
    params = ", ".join(format_leaf(leaf) for leaf in graph.leaves)
    if graph.index_inputs:
        params += "; " + ", ".join(format_index_input(ix) for ix in graph.index_inputs)
    lines = [f"graph({params}) {{"]
    lines += ["  " + format_node(graph, j, short=short) for j in range(len(graph.nodes))]
    outs = ", ".join(value_name(graph, v) for v in graph.outputs)
    lines.append(f"  return {outs}")
    lines.append("}")
    return "\n".join(lines)
