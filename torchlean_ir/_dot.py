"""Graph drawings in Graphviz DOT, and SVG through Graphviz's ``dot`` program.

:func:`to_dot` writes a :class:`~torchlean_ir._drawing.Scene` (or a graph) as DOT: nodes are
rounded boxes labelled ``op : type``, inputs ellipses, params boxes, index inputs dashed
hexagons with dashed edges, outputs a marker under their value, notes (counterexamples) beside
their node; every item's SVG ``id`` is its scene name after ``id_prefix``, and its SVG ``class``
names its kind. :func:`render_svg` runs ``dot -Tsvg``; a missing, failing or slow ``dot`` is a
:class:`GraphvizError` with a one-line message.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping

from ._drawing import Drawing, Item, NodeStyle, Scene, scene
from ._errors import TorchleanError
from ._graph import GraphData

FONT = "Helvetica,Arial,sans-serif"
DIM = "#666666"

#: Fill and border colour of each item kind (a node's style may override them).
COLOURS: dict[str, tuple[str, str]] = {
    "input": ("#eef3fb", "#7a8fb3"),
    "param": ("#f6f0fa", "#9a7fb3"),
    "index": ("#fdf6e3", "#b58900"),
    "node": ("#ffffff", "#444444"),
    "output": ("#eeeeee", "#444444"),
    "note": ("#fff4f4", "#c0392b"),
}

_SHAPES = {
    "input": ("ellipse", "filled"),
    "param": ("box", "filled"),
    "index": ("hexagon", "filled,dashed"),
    "node": ("box", "rounded,filled"),
    "output": ("invhouse", "filled"),
    "note": ("note", "filled"),
}

#: CSS classes of each item kind (the SVG ``class`` of its group).
CLASSES = {
    "input": "tl-leaf tl-input",
    "param": "tl-leaf tl-param",
    "index": "tl-index",
    "node": "tl-node",
    "output": "tl-output",
    "note": "tl-note",
}


class GraphvizError(TorchleanError):
    """Graphviz's ``dot`` is not installed, failed, or ran out of time (one-line message)."""

    def __init__(self, message: str, *, missing: bool = False) -> None:
        super().__init__(message)
        #: True when the program itself was not found.
        self.missing = missing


def _html(text: str) -> str:
    """Escape text for a Graphviz HTML-like label."""
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _quote(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


class _Html(str):
    """A Graphviz HTML-like label (``<...>``), written as it is."""


def _attrs(**kv: str | None) -> str:
    """`` [k="v", ...]`` without empty values; an :class:`_Html` value is written unquoted."""
    parts = [
        f"{k}={v if isinstance(v, _Html) else _quote(v)}"
        for k, v in kv.items()
        if v is not None and v
    ]
    return " [" + ", ".join(parts) + "]" if parts else ""


def _label(item: Item) -> _Html:
    if item.kind == "note":
        left = '<BR ALIGN="LEFT"/>'
        return _Html("<" + left.join(_html(line) for line in item.lines) + left + ">")
    if item.kind == "output":
        return _Html("<" + _html(item.title) + ">")
    # a no-break space: SVG viewers drop an ordinary one at the start of the text after the title
    lines = [f"<B>{_html(item.title)}</B>&#160;: {_html(item.type)}"]
    if item.sub:
        lines.append(f'<FONT POINT-SIZE="9" COLOR="{DIM}">{_html(item.sub)}</FONT>')
    if item.badge:
        lines.append(f'<FONT POINT-SIZE="9">{_html(item.badge)}</FONT>')
    return _Html("<" + "<BR/>".join(lines) + ">")


def _item_line(item: Item, id_prefix: str) -> str:
    shape, style = _SHAPES[item.kind]
    fill, border = COLOURS[item.kind]
    css = (CLASSES[item.kind] + " " + item.css_class).strip()
    return f"{item.name}" + _attrs(
        id=id_prefix + item.name,
        label=_label(item),
        shape=shape,
        style=style,
        fillcolor=item.fill or fill,
        color=item.border or border,
        penwidth="2.5" if item.border else None,
        fontsize="9" if item.kind in ("note", "output") else None,
        tooltip=item.tooltip or None,
        URL=item.url or None,
        target="_self" if item.url else None,
        **{"class": css},
    )


def _beside(item: Item, indent: str) -> str:
    """A note on the same rank as its node (inside the node's cluster, or Graphviz moves the
    node out of it)."""
    return f"{indent}{{rank=same; {item.beside}; {item.name};}}"


def to_dot(
    graph: GraphData | Drawing | Scene,
    *,
    styles: Mapping[int, NodeStyle] | None = None,
    collapse: bool = False,
    id_prefix: str = "",
    name: str | None = None,
) -> str:
    """The DOT text of a graph, a drawing of it, or a scene (see :mod:`._drawing`).

    ``styles`` (by node index) colours and annotates nodes and ``collapse`` draws repeated
    blocks once, when a graph or drawing is given; ``id_prefix`` goes in front of every SVG id
    (several drawings in one page); ``name`` is the DOT graph's name.
    """
    sc = graph if isinstance(graph, Scene) else scene(graph, styles=styles, collapse=collapse)
    out = [
        f"digraph {_quote(name or sc.name)} {{",
        f'  graph [rankdir=TB, fontname="{FONT}", fontsize=11, nodesep=0.3, ranksep=0.35, '
        'bgcolor="transparent"];',
        f'  node [fontname="{FONT}", fontsize=11, margin="0.12,0.05"];',
        f'  edge [fontname="{FONT}", fontsize=9, color="#555555", arrowsize=0.6, '
        f'fontcolor="{DIM}"];',
    ]
    for k, cluster in enumerate(sc.clusters):
        out.append(f"  subgraph cluster_{k} {{")
        out.append(
            "    graph"
            + _attrs(
                id=id_prefix + cluster.name,
                label=cluster.label,
                style="dashed,rounded",
                color="#888888",
                fontcolor="#444444",
                **{"class": "tl-block"},
            )
            + ";"
        )
        out += [f"    {_item_line(it, id_prefix)};" for it in sc.items if it.block == k]
        out += [_beside(it, "    ") for it in sc.items if it.block == k and it.beside]
        out.append("  }")
    out += [f"  {_item_line(it, id_prefix)};" for it in sc.items if it.block is None]
    out += [_beside(it, "  ") for it in sc.items if it.block is None and it.beside]
    for e in sc.edges:
        if e.kind == "index":
            attrs = _attrs(style="dashed", color=COLOURS["index"][1])
        elif e.kind == "repeat":
            attrs = _attrs(style="dashed", constraint="false", label=e.label, color="#888888")
        elif e.kind == "note":
            attrs = _attrs(style="dotted", arrowhead="none", color=COLOURS["note"][1])
        else:
            attrs = _attrs(label=e.label or None)
        out.append(f"  {e.src} -> {e.dst}{attrs};")
    out.append("}")
    return "\n".join(out) + "\n"


def find_dot(program: str = "dot") -> str | None:
    """The path of Graphviz's ``dot`` on ``PATH``, or ``None``."""
    return shutil.which(program)


def render_svg(dot_source: str, *, program: str = "dot", timeout: float = 120.0) -> str:
    """Run Graphviz (``dot -Tsvg``) on ``dot_source`` and return the SVG text.

    Raises :class:`GraphvizError` (one line) when the program is missing (``missing=True``),
    fails or takes longer than ``timeout`` seconds.
    """
    path = find_dot(program)
    if path is None:
        raise GraphvizError(
            f"the Graphviz program '{program}' is not installed (or not on PATH); it draws SVG "
            "(Debian: apt-get install graphviz)",
            missing=True,
        )
    try:
        proc = subprocess.run(
            [path, "-Tsvg"],
            input=dot_source.encode("utf-8"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise GraphvizError(
            f"Graphviz '{program}' did not finish within {timeout:g} s (draw repeated blocks "
            "once with collapsing, or write DOT)"
        ) from None
    except OSError as e:
        raise GraphvizError(f"cannot run Graphviz '{program}': {e.strerror or e}") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        first = err[0] if err else "no message"
        raise GraphvizError(f"Graphviz '{program}' failed (exit {proc.returncode}): {first}")
    return proc.stdout.decode("utf-8")
