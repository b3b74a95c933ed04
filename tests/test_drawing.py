"""Graph drawings: the scene (what is drawn), DOT, SVG through Graphviz, the built-in layout,
and collapsing repeated blocks."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import torchlean_ir as tl

from .programs import need_dot

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))
SVG = "{http://www.w3.org/2000/svg}"


def mlp(layers: int, width: int = 4) -> tl.GraphData:
    """``layers`` x (linear, tanh) after a first layer that reads the input."""
    b = tl.GraphBuilder("f32")
    h = b.input("x", (width,))
    for i in range(layers):
        W, bias = b.param(f"l{i}.W", (width, width)), b.param(f"l{i}.b", (width,))
        h = b.linear(W, bias, h).tanh()
    return b.build(b.sum(h * h))


def uses(g: tl.GraphData) -> int:
    return sum(len(n.args) for n in g.nodes)


def svg_ids(svg: str) -> dict[str, str]:
    """id -> class of every element of an SVG document."""
    root = ET.fromstring(svg[svg.index("<svg") :])
    return {e.get("id", ""): e.get("class", "") for e in root.iter() if e.get("id")}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_scene_has_every_value_and_one_edge_per_use(path: Path) -> None:
    g = tl.load(path)
    sc = tl.scene(g)
    names = {it.name: it for it in sc.items}
    L = g.num_leaves
    for v, leaf in enumerate(g.leaves):
        assert names[f"v{v}"].kind == leaf.kind and names[f"v{v}"].title == leaf.name
    for j, node in enumerate(g.nodes):
        item = names[f"v{L + j}"]
        assert (item.kind, item.title, item.type) == ("node", node.op, str(node.type))
        assert item.sub.startswith(f"%{L + j}")
    for i, _ in enumerate(g.index_inputs):
        assert names[f"ix{i}"].kind == "index"
    data = [e for e in sc.edges if e.kind == "data"]
    assert len(data) == uses(g)
    assert len([e for e in sc.edges if e.kind == "index"]) == sum(
        len(n.index_args) for n in g.nodes
    )
    assert [e.dst for e in sc.edges if e.kind == "output"] == [
        f"out{k}" for k in range(len(g.outputs))
    ]


def test_labels_fan_out_and_argument_names() -> None:
    g = tl.load(ROOT / "examples" / "graphs" / "attention_block.json")
    dot = tl.to_dot(g)
    # op : type, value name underneath; x is used twice, layer_norm's output three times
    assert "<B>layer_norm</B>&#160;: f32[4,8]" in dot
    assert re.search(r"%8 · 3 uses", dot) and "input, no grad · 2 uses" in dot
    assert sum(1 for line in dot.splitlines() if line.strip().startswith("v8 -> ")) == 3
    # matmul(a, b): which argument each edge is
    assert 'v8 -> v9 [label="a"]' in dot and 'v4 -> v9 [label="b"]' in dot
    # inputs are ellipses, params boxes, nodes rounded boxes
    assert re.search(r'v0 \[id="v0", [^\n]*shape="ellipse"', dot)
    assert re.search(r'v2 \[id="v2", [^\n]*shape="box", style="filled"', dot)
    assert re.search(r'v9 \[id="v9", [^\n]*style="rounded,filled"', dot)


def test_index_inputs_are_dashed_hexagons() -> None:
    g = tl.load(ROOT / "examples" / "graphs" / "softmax_classifier.json")
    dot = tl.to_dot(g)
    assert re.search(
        r'ix0 \[id="ix0", label=<<B>#label</B>&#160;: nat\[\][^\n]*shape="hexagon"', dot
    )
    assert 'ix0 -> v9 [style="dashed"' in dot


def test_special_characters_are_escaped() -> None:
    b = tl.GraphBuilder("f32")
    x = b.input("a.b_c", (2,))
    g = b.build(b.sum(x))
    sc = tl.scene(g, styles={0: tl.NodeStyle(badge='<&"x">', note='a < b & "c"', tooltip="<t\\q>")})
    dot = tl.to_dot(sc)
    assert "&lt;&amp;&quot;x&quot;&gt;" in dot and "a &lt; b &amp; &quot;c&quot;" in dot
    assert 'tooltip="<t\\\\q>"' in dot  # a plain string, even when it starts with <


def test_escaped_labels_render() -> None:
    need_dot()
    b = tl.GraphBuilder("f32")
    g = b.build(b.sum(b.input("x", (2,))))
    style = tl.NodeStyle(badge='<&"x">', note='a < b & "c"\nnext line', tooltip="<t\\q>")
    svg = tl.render_svg(tl.to_dot(g, styles={0: style}))
    assert "&lt;&amp;&quot;x&quot;&gt;" in svg and "a &lt; b &amp; &quot;c&quot;" in svg


def test_find_blocks_collapses_a_deep_mlp() -> None:
    g = mlp(40)
    # node 0 reads the input leaf, so repeats start at the second layer and end with the last
    assert tl.find_blocks(g) == (tl.Block(start=2, period=2, repeats=39),)
    d = tl.drawing(g, collapse=True)
    L = g.num_leaves
    for j, node in enumerate(g.nodes):
        drawn = g.nodes[d.drawn_as[j]]
        assert (drawn.op, drawn.type) == (node.op, node.type)
    assert d.represents(2) == tuple(range(2, 80, 2))
    sc = tl.scene(d)
    nodes = [it for it in sc.items if it.kind == "node"]
    assert len(nodes) == 2 + 2 + 2  # the first layer, the block's two, mul and sum
    assert [c.label for c in sc.clusters] == [
        f"repeated ×39: %{L + 2} … %{L + 79}, 2 nodes each (first drawn)"
    ]
    assert [it.sub for it in nodes if it.block == 0] == [f"%{L + 2} · ×39", f"%{L + 3} · ×39"]
    # the last repeat feeds the tail from the drawn node; the link to the next repeat is shown
    edges = {(e.src, e.dst, e.kind) for e in sc.edges}
    assert (f"v{L + 3}", f"v{L + 80}", "data") in edges
    assert (f"v{L + 3}", f"v{L + 2}", "repeat") in edges
    # only the leaves of the drawn layers are drawn
    leaves = [it.title for it in sc.items if it.kind in ("param", "input")]
    assert leaves == ["x", "l0.W", "l0.b", "l1.W", "l1.b"]


def test_find_blocks_needs_the_same_wiring() -> None:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (3,))
    e0, e1 = x.exp(), x.exp()  # the same op on the same leaf: repeats
    s2 = e0 + e1
    s3 = e0 + e0  # add, like s2, but wired differently: not a repeat of s2
    g = b.build(b.sum(s2 * s3))
    assert tl.find_blocks(g) == (tl.Block(0, 1, 2),)
    assert tl.find_blocks(g, min_repeats=3) == ()
    # a chain reads the previous repeat: tanh(x) reads a leaf, so the run starts at node 1
    b = tl.GraphBuilder("f32")
    h = b.input("x", (3,))
    for _ in range(4):
        h = h.tanh()
    assert tl.find_blocks(b.build(b.sum(h))) == (tl.Block(1, 1, 3),)
    assert tl.find_blocks(tl.load(ROOT / "examples" / "graphs" / "mlp_regression.json")) == ()


def test_uncollapsed_drawing_draws_everything() -> None:
    g = mlp(5)
    d = tl.drawing(g)
    assert d.blocks == () and all(d.is_drawn(j) for j in range(len(g.nodes)))
    assert len([it for it in tl.scene(g).items if it.kind == "node"]) == len(g.nodes)


def test_collapse_is_linear_on_long_chains() -> None:
    g = mlp(3000)  # 6003 nodes; quadratic scanning would take minutes
    (block,) = tl.find_blocks(g)
    assert (block.start, block.period, block.repeats) == (2, 2, 2999)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_graphviz_svg_has_every_item(path: Path) -> None:
    need_dot()
    g = tl.load(path)
    ids = svg_ids(tl.render_svg(tl.to_dot(g, id_prefix="p-")))
    L = g.num_leaves
    for v in range(L):
        assert "tl-leaf" in ids[f"p-v{v}"]
    for j in range(len(g.nodes)):
        assert "tl-node" in ids[f"p-v{L + j}"]
    for i in range(len(g.index_inputs)):
        assert "tl-index" in ids[f"p-ix{i}"]
    assert "tl-output" in ids["p-out0"]


def test_graphviz_draws_notes_beside_nodes_and_blocks() -> None:
    need_dot()
    g = mlp(4)
    L = g.num_leaves
    styles = {3: tl.NodeStyle(fill="#f8d3d1", css_class="tl-mismatch", note="expected 1, got 2")}
    svg = tl.render_svg(tl.to_dot(g, styles=styles, collapse=True))
    ids = svg_ids(svg)
    assert "tl-mismatch" in ids[f"v{L + 3}"] and "tl-note" in ids[f"note{L + 3}"]
    assert "tl-block" in ids["block0"] and "expected 1, got 2" in svg
    # the note is on the node's rank: their centres are level
    root = ET.fromstring(svg[svg.index("<svg") :])

    def centre_y(item_id: str) -> float:
        g_el = next(e for e in root.iter() if e.get("id") == item_id)
        ys = [float(t.get("y", "0")) for t in g_el.iter(f"{SVG}text")]
        return sum(ys) / len(ys)

    assert abs(centre_y(f"v{L + 3}") - centre_y(f"note{L + 3}")) < 12


def test_render_svg_errors_are_one_line() -> None:
    with pytest.raises(tl.GraphvizError, match=r"'no-such-dot-program' is not installed") as e:
        tl.render_svg("digraph { a }", program="no-such-dot-program")
    assert e.value.missing and "\n" not in str(e.value)
    need_dot()
    with pytest.raises(tl.GraphvizError, match=r"Graphviz 'dot' failed \(exit 1\): ") as e:
        tl.render_svg("digraph { a -> }")
    assert not e.value.missing and "\n" not in str(e.value)


@pytest.mark.parametrize("collapse", [False, True])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_layered_svg_is_valid_and_has_every_item(path: Path, collapse: bool) -> None:
    g = tl.load(path)
    sc = tl.scene(g, collapse=collapse, styles={0: tl.NodeStyle(note="a note", url="#x")})
    svg = tl.layered_svg(sc, id_prefix="q-")
    ids = svg_ids(svg)  # parses: well-formed XML
    for it in sc.items:
        assert f"q-{it.name}" in ids
    assert "tl-note" in ids[f"q-note{g.num_leaves}"]


def test_layered_svg_rows_follow_the_data_flow() -> None:
    g = mlp(2)
    svg = tl.layered_svg(tl.scene(g))
    root = ET.fromstring(svg)
    top: dict[str, float] = {}
    for el in root.iter(f"{SVG}g"):
        shapes = [s for s in el if s.tag in (f"{SVG}rect", f"{SVG}ellipse", f"{SVG}polygon")]
        if shapes and el.get("id"):
            s = shapes[0]
            if s.tag.endswith("ellipse"):
                top[el.get("id", "")] = float(s.get("cy", 0)) - float(s.get("ry", 0))
            elif s.tag.endswith("rect"):
                top[el.get("id", "")] = float(s.get("y", 0))
            else:
                top[el.get("id", "")] = min(
                    float(p.split(",")[1]) for p in s.get("points", "").split()
                )
    sc = tl.scene(g)
    for e in sc.edges:
        if e.kind in ("data", "output"):
            assert top[e.src] < top[e.dst], e
