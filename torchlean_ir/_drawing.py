"""What a drawing of a graph shows, independent of how it is laid out.

:func:`drawing` decides which nodes are drawn (with ``collapse=True``, each run of repeated
blocks is drawn once, with a count); :func:`scene` turns a drawing into boxes and arrows
(:class:`Scene`): nodes labelled ``op : type`` with their value name (``%6``) underneath,
leaves (inputs and params), index inputs and outputs as distinct kinds, one edge per use (a
value used more than once says so: ``%8 · 3 uses``), the argument's name on each edge into a
multi-argument op, and optional per-node styles and notes (a page colours nodes by a verification
result and puts a counterexample beside its node). Two writers lay a scene out: Graphviz DOT
(:mod:`._dot`) and a simple layered SVG that needs no Graphviz (:mod:`._layout`).

Every item has a name (``v<value id>`` for leaves and nodes, ``ix<i>`` for index inputs,
``out<k>`` for outputs, ``note<value id>`` for a note, ``block<k>`` for a collapsed block) that
both writers use as its SVG ``id`` (after ``id_prefix``), and CSS classes (``tl-node``,
``tl-leaf tl-input`` / ``tl-param``, ``tl-index``, ``tl-output``, ``tl-note``, ``tl-block``), so a
page that embeds the SVG can find them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from ._attrs import format_attr_value
from ._graph import GraphData, Node
from ._registry import get_op, has_op

#: Longest block (in nodes) that ``collapse`` looks for.
MAX_PERIOD = 256

ItemKind = Literal["input", "param", "index", "node", "output", "note"]
EdgeKind = Literal["data", "index", "repeat", "output", "note"]


@dataclass(frozen=True)
class Block:
    """``repeats`` consecutive copies of the ``period`` nodes starting at node ``start``
    (indices in ``graph.nodes``): same ops, attributes and types, wired the same way."""

    start: int
    period: int
    repeats: int

    @property
    def stop(self) -> int:
        return self.start + self.period * self.repeats


@dataclass(frozen=True)
class Drawing:
    """What is drawn of ``graph``: every node is drawn, except the later repeats of each
    collapsed block, which are represented by the same node of the first repeat."""

    graph: GraphData
    blocks: tuple[Block, ...] = ()
    drawn_as: tuple[int, ...] = field(default=())  # per node index: the node index drawn for it

    def is_drawn(self, j: int) -> bool:
        return self.drawn_as[j] == j

    @cached_property
    def _represents(self) -> dict[int, tuple[int, ...]]:
        reps: dict[int, list[int]] = {}
        for k, j in enumerate(self.drawn_as):
            reps.setdefault(j, []).append(k)
        return {j: tuple(ks) for j, ks in reps.items()}

    @cached_property
    def _block_index(self) -> dict[int, Block]:
        return {j: b for b in self.blocks for j in range(b.start, b.stop)}

    def represents(self, j: int) -> tuple[int, ...]:
        """The node indices that drawn node ``j`` stands for (``j`` first)."""
        return self._represents.get(j, ())

    def block_of(self, j: int) -> Block | None:
        """The collapsed block node ``j`` belongs to, if any."""
        return self._block_index.get(j)


# --- collapsing repeated blocks -------------------------------------------------------------


def _node_key(graph: GraphData, node: Node) -> tuple:
    """What must be equal for two nodes to be repeats: op, attributes, types."""
    arg_types = tuple(graph.value_type(a) for a in node.args)
    ix_types = tuple(graph.index_inputs[i].type for i in node.index_args)
    return (node.op, node.attrs, node.type, arg_types, ix_types)


def _same_wiring(graph: GraphData, j: int, p: int) -> bool:
    """Node ``j + p`` uses what node ``j`` uses, shifted by ``p`` nodes (or the very same
    value, or a leaf of the same kind)."""
    L = graph.num_leaves
    a_node, b_node = graph.nodes[j], graph.nodes[j + p]
    for a, b in zip(a_node.args, b_node.args, strict=True):
        if a < L and b < L:
            if graph.leaves[a].kind != graph.leaves[b].kind:
                return False
        elif a < L or b < L or b not in (a, a + p):
            return False
    return True


def find_blocks(
    graph: GraphData, *, max_period: int = MAX_PERIOD, min_repeats: int = 2
) -> tuple[Block, ...]:
    """Runs of repeated blocks, left to right, each as long as possible (greedy: at each node,
    the period that covers the most nodes, the shortest among equals, shifted to end where the
    run of repeats ends)."""
    n = len(graph.nodes)
    keys = [_node_key(graph, node) for node in graph.nodes]
    positions: dict[tuple, list[int]] = {}
    for j, k in enumerate(keys):
        positions.setdefault(k, []).append(j)
    where: list[tuple[list[int], int]] = [([], 0)] * n  # (positions of j's key, j's place)
    for pos in positions.values():
        for idx, j in enumerate(pos):
            where[j] = (pos, idx)
    blocks: list[Block] = []
    i = 0
    while i < n:
        best: Block | None = None
        pos, idx = where[i]
        for t in range(idx + 1, len(pos)):
            p = pos[t] - i
            if p > max_period or p * min_repeats > n - i:
                break
            if best is not None and p % best.period == 0:
                continue  # a multiple of a period found covers no more (the same repeats)
            run = 0  # consecutive j from i with node j + p a repeat of node j
            while i + run + p < n and keys[i + run] == keys[i + run + p]:
                if not _same_wiring(graph, i + run, p):
                    break
                run += 1
            repeats = 1 + run // p
            covered = 0 if best is None else best.period * best.repeats
            if repeats >= min_repeats and p * repeats > covered:
                # as late as the same count allows: the block ends with the run, at the end of
                # a complete repeat (an MLP draws as linear, tanh, [linear, tanh] x k)
                best = Block(i + run % p, p, repeats)
            if best is not None and best.stop == n:
                break
        if best is None:
            i += 1
        else:
            blocks.append(best)
            i = best.stop
    return tuple(blocks)


def drawing(graph: GraphData, *, collapse: bool = False) -> Drawing:
    """What to draw of ``graph``; with ``collapse``, each run of repeated blocks (see
    :func:`find_blocks`) is drawn once, in a box that says how many times it repeats."""
    drawn = list(range(len(graph.nodes)))
    blocks = find_blocks(graph) if collapse else ()
    for b in blocks:
        for j in range(b.start + b.period, b.stop):
            drawn[j] = b.start + (j - b.start) % b.period
    return Drawing(graph, blocks, tuple(drawn))


# --- the scene -----------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeStyle:
    """How a page wants one node drawn (all optional)."""

    fill: str = ""  # fill colour, ``#rrggbb``
    border: str = ""  # border colour (drawn thicker)
    css_class: str = ""  # extra CSS classes of its SVG group
    badge: str = ""  # an extra label line
    tooltip: str = ""  # replaces the default (the node's text form)
    url: str = ""  # a link, e.g. ``#g0-node-3``
    note: str = ""  # text drawn in a note beside the node (a counterexample)


@dataclass(frozen=True)
class Item:
    """One box: a leaf, an index input, a node, an output marker or a note."""

    name: str
    kind: ItemKind
    title: str  # bold: the op, leaf or index name
    type: str = ""  # after the title: ``: f32[3]``
    sub: str = ""  # a smaller grey line: ``%6 · 2 uses``
    badge: str = ""
    lines: tuple[str, ...] = ()  # a note's text, wrapped
    tooltip: str = ""
    url: str = ""
    fill: str = ""
    border: str = ""
    css_class: str = ""
    block: int | None = None  # the collapsed block it is drawn in
    beside: str | None = None  # a note: the item it belongs to


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    kind: EdgeKind = "data"
    label: str = ""


@dataclass(frozen=True)
class Cluster:
    """A collapsed block: the box around its first repeat."""

    name: str
    label: str


@dataclass(frozen=True)
class Scene:
    """Boxes and arrows, in drawing order (leaves, index inputs, nodes, outputs, notes)."""

    name: str
    items: tuple[Item, ...]
    edges: tuple[Edge, ...]
    clusters: tuple[Cluster, ...] = ()


def _wrap(text: str, width: int = 60) -> tuple[str, ...]:
    """Split ``text`` into lines of at most ``width`` characters, at spaces where possible."""
    lines: list[str] = []
    for para in text.splitlines() or [""]:
        line = ""
        for word in para.split(" "):
            while len(word) > width:  # a very long token (a long number): cut it
                if line:
                    lines.append(line)
                    line = ""
                lines.append(word[:width])
                word = word[width:]
            if line and len(line) + 1 + len(word) > width:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return tuple(lines)


def _uses(graph: GraphData) -> list[int]:
    """How many times each value is used: as an argument (per position) or as an output."""
    uses = [0] * graph.num_values
    for node in graph.nodes:
        for a in node.args:
            uses[a] += 1
    for v in graph.outputs:
        uses[v] += 1
    return uses


def _arg_names(node: Node) -> list[str]:
    """Edge labels: the op's argument names, for ops with more than one argument."""
    if not has_op(node.op) or len(node.args) < 2:
        return [""] * len(node.args)
    op = get_op(node.op)
    if op.variadic:
        return [f"{op.arg_names[0]}{i}" for i in range(len(node.args))]
    return list(op.arg_names) if len(op.arg_names) == len(node.args) else [""] * len(node.args)


def _node_text(graph: GraphData, j: int) -> str:
    """``%6: f32[16] = linear{...}`` (attributes abbreviated) for a tooltip."""
    node = graph.nodes[j]
    attrs = ", ".join(f"{k}={format_attr_value(x, short=True)}" for k, x in node.attrs.items())
    text = f"%{graph.num_leaves + j}: {node.type} = {node.op}" + (
        "{" + attrs + "}" if attrs else ""
    )
    return text[:2000]


def scene(
    graph_or_drawing: GraphData | Drawing,
    *,
    styles: Mapping[int, NodeStyle] | None = None,
    collapse: bool = False,
    name: str = "graph",
) -> Scene:
    """The boxes and arrows of a graph (or of a :func:`drawing` of it). ``styles`` is keyed by
    node index in ``graph.nodes``; ``collapse`` applies when a graph, not a drawing, is given."""
    d = (
        graph_or_drawing
        if isinstance(graph_or_drawing, Drawing)
        else drawing(graph_or_drawing, collapse=collapse)
    )
    g = d.graph
    styles = styles or {}
    L = g.num_leaves
    uses = _uses(g)
    drawn_nodes = [j for j in range(len(g.nodes)) if d.is_drawn(j)]
    used_leaves = {v for v in g.outputs if v < L}
    used_index: set[int] = set()
    for j in drawn_nodes:
        used_leaves.update(a for a in g.nodes[j].args if a < L)
        used_index.update(g.nodes[j].index_args)

    def vid(v: int) -> str:
        return f"v{v}" if v < L else f"v{L + d.drawn_as[v - L]}"

    def times(v: int) -> str:
        return f" · {uses[v]} uses" if uses[v] > 1 else ""

    items: list[Item] = []
    for v, leaf in enumerate(g.leaves):
        if v in used_leaves:
            kind = leaf.kind + ("" if leaf.requires_grad else ", no grad")
            items.append(
                Item(
                    f"v{v}",
                    leaf.kind,
                    leaf.name,
                    str(leaf.type),
                    kind + times(v),
                    tooltip=f"%{leaf.name}: {leaf.type} {kind}",
                )
            )
    for i, ix in enumerate(g.index_inputs):
        if i in used_index:
            what = "index input"
            if ix.value is not None:
                what = "static index = " + str(ix.value[0] if not ix.type.shape else list(ix.value))
            items.append(
                Item(
                    f"ix{i}",
                    "index",
                    "#" + ix.name,
                    str(ix.type),
                    what,
                    tooltip=f"#{ix.name}: {ix.type} ({what})",
                )
            )
    block_no = {j: k for k, b in enumerate(d.blocks) for j in range(b.start, b.start + b.period)}
    for j in drawn_nodes:
        node, s, v = g.nodes[j], styles.get(j, NodeStyle()), L + j
        count = len(d.represents(j))
        sub = f"%{v}{times(v)}" + (f" · ×{count}" if count > 1 else "")
        items.append(
            Item(
                f"v{v}",
                "node",
                node.op,
                str(node.type),
                sub,
                badge=s.badge,
                tooltip=s.tooltip or _node_text(g, j),
                url=s.url,
                fill=s.fill,
                border=s.border,
                css_class=s.css_class,
                block=block_no.get(j),
            )
        )

    # one edge per use, from the drawn source to the drawn consumer; a hidden repeat adds only
    # what the first repeat does not show (a use from outside, the link to the next repeat)
    def repeat_of(j: int) -> tuple[Block | None, int]:
        b = d.block_of(j)
        return b, (-1 if b is None else (j - b.start) // b.period)

    edges: list[Edge] = []
    seen: set[tuple[str, str, str]] = set()
    for j, node in enumerate(g.nodes):
        dst, hidden = f"v{L + d.drawn_as[j]}", not d.is_drawn(j)
        block, rep = repeat_of(j)
        for a, arg_name in zip(node.args, _arg_names(node), strict=True):
            if a < L and a not in used_leaves:
                continue
            a_block, a_rep = repeat_of(a - L) if a >= L else (None, -1)
            link = hidden and block is not None and a_block is block and a_rep != rep
            if link:
                edge = Edge(vid(a), dst, "repeat", "next repeat")
            else:
                edge = Edge(vid(a), dst, "data", arg_name)
            key = (edge.src, edge.dst, edge.kind + edge.label)
            if hidden and key in seen:
                continue
            seen.add(key)
            edges.append(edge)
        for i in node.index_args:
            key = (f"ix{i}", dst, "index")
            if key not in seen:
                seen.add(key)
                edges.append(Edge(f"ix{i}", dst, "index"))
    for k, v in enumerate(g.outputs):
        items.append(Item(f"out{k}", "output", "output" if len(g.outputs) == 1 else f"output {k}"))
        edges.append(Edge(vid(v), f"out{k}", "output"))
    for j in drawn_nodes:
        s = styles.get(j)
        if s is not None and s.note:
            v = L + j
            items.append(
                Item(
                    f"note{v}",
                    "note",
                    "",
                    lines=_wrap(s.note),
                    beside=f"v{v}",
                    block=block_no.get(j),
                )
            )
            edges.append(Edge(f"v{v}", f"note{v}", "note"))
    clusters = tuple(
        Cluster(
            f"block{k}",
            f"repeated ×{b.repeats}: %{L + b.start} … %{L + b.stop - 1}, "
            f"{b.period} node{'s' if b.period > 1 else ''} each (first drawn)",
        )
        for k, b in enumerate(d.blocks)
    )
    return Scene(name, tuple(items), tuple(edges), clusters)
