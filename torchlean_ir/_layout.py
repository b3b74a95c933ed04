"""A simple layered SVG drawing of a scene, for when Graphviz is not installed.

Items go in rows, top to bottom: an item's row is one below the lowest of its arguments (leaves
and index inputs one above their first consumer), and one pass of barycentre ordering keeps
edges short. Edges are curves from the bottom of the source to the top of the consumer; a note
sits at the right end of its node's row. Ids and classes are those of the DOT drawing
(:mod:`._dot`), so a page finds the same items either way. The picture is plainer than
Graphviz's (edges may cross boxes); it is a fallback, not a replacement.
"""

from __future__ import annotations

from html import escape

from ._dot import CLASSES, COLOURS
from ._drawing import Item, Scene

_FONT = "Helvetica, Arial, sans-serif"
_CHAR = 6.6  # average width of a character at 11px
_SMALL = 5.4  # at 9px
_ROW_GAP = 46
_COL_GAP = 26
_MARGIN = 16


def _size(item: Item) -> tuple[float, float]:
    if item.kind == "note":
        w = max((len(line) for line in item.lines), default=0) * _SMALL + 16
        return w, 12 * len(item.lines) + 12
    if item.kind == "output":
        return len(item.title) * _SMALL + 28, 26
    first = len(item.title) + 3 + len(item.type)
    small = max(len(item.sub), len(item.badge))
    w = max(first * _CHAR, small * _SMALL) + (40 if item.kind in ("input", "index") else 22)
    return w, 20 + 12 * bool(item.sub) + 12 * bool(item.badge)


def _ranks(scene: Scene) -> dict[str, int]:
    """Rows: longest path from the sources; a source one row above its first consumer."""
    preds: dict[str, list[str]] = {it.name: [] for it in scene.items}
    succs: dict[str, list[str]] = {it.name: [] for it in scene.items}
    for e in scene.edges:
        if e.kind in ("data", "index", "output"):
            preds[e.dst].append(e.src)
            succs[e.src].append(e.dst)
    rank: dict[str, int] = {}
    for it in scene.items:  # items come in topological order (leaves, index inputs, nodes, ...)
        if it.kind == "note":
            continue
        inner = [rank[p] for p in preds[it.name] if p in rank and preds[p]]  # sources move later
        rank[it.name] = 1 + max(inner, default=0) if preds[it.name] else 0
    for it in scene.items:
        if it.kind != "note" and not preds[it.name] and succs[it.name]:
            rank[it.name] = max(0, min(rank[s] for s in succs[it.name]) - 1)
    for it in scene.items:
        if it.kind == "note" and it.beside is not None:
            rank[it.name] = rank[it.beside]
    return rank


def layered_svg(scene: Scene, *, id_prefix: str = "") -> str:
    """An SVG drawing of ``scene`` without Graphviz (see the module docstring)."""
    rank = _ranks(scene)
    items = {it.name: it for it in scene.items}
    rows: dict[int, list[str]] = {}
    for it in scene.items:
        if it.kind != "note":
            rows.setdefault(rank[it.name], []).append(it.name)
    size = {name: _size(it) for name, it in items.items()}
    preds: dict[str, list[str]] = {name: [] for name in items}
    for e in scene.edges:
        if e.kind in ("data", "index", "output"):
            preds[e.dst].append(e.src)

    x: dict[str, float] = {}  # centre
    y: dict[str, float] = {}  # top
    top = _MARGIN + (18 if scene.clusters else 0)
    width = 0.0
    row_width: dict[int, float] = {}
    for r in sorted(rows):
        names = rows[r]
        if r > 0:  # barycentre of the arguments already placed
            names.sort(
                key=lambda n: (
                    sum(x[p] for p in preds[n] if p in x) / max(1, sum(p in x for p in preds[n]))
                    if any(p in x for p in preds[n])
                    else 0.0
                )
            )
        names += [it.name for it in scene.items if it.kind == "note" and rank[it.name] == r]
        left = _MARGIN
        for n in names:
            w, _ = size[n]
            x[n] = left + w / 2
            left += w + _COL_GAP
        row_h = max(size[n][1] for n in names)
        for n in names:
            y[n] = top + (row_h - size[n][1]) / 2
        top += row_h + _ROW_GAP
        row_width[r] = left - _COL_GAP + _MARGIN
        width = max(width, row_width[r])
    height = top - _ROW_GAP + _MARGIN
    for r, names in rows.items():  # centre each row
        shift = (width - row_width[r]) / 2
        for n in names:
            x[n] += shift

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}pt" height="{height:.0f}pt" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{_FONT}" font-size="11" '
        'class="tl-layered">',
        f'<defs><marker id="{id_prefix}arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#555555"/></marker></defs>',
    ]
    for k, cluster in enumerate(scene.clusters):
        members = [n for n, it in items.items() if it.block == k and n in x]
        if not members:
            continue
        x0 = min(x[n] - size[n][0] / 2 for n in members) - 10
        x1 = max(x[n] + size[n][0] / 2 for n in members) + 10
        y0 = min(y[n] for n in members) - 24
        y1 = max(y[n] + size[n][1] for n in members) + 10
        out.append(
            f'<g id="{escape(id_prefix + cluster.name)}" class="cluster tl-block">'
            f'<rect x="{x0:.1f}" y="{y0:.1f}" width="{x1 - x0:.1f}" height="{y1 - y0:.1f}" '
            'rx="8" fill="none" stroke="#888888" stroke-dasharray="5,3"/>'
            f'<text x="{x0 + 8:.1f}" y="{y0 + 14:.1f}" fill="#444444">{escape(cluster.label)}'
            "</text></g>"
        )
    for e in scene.edges:
        if e.src not in x or e.dst not in x:
            continue
        stroke = {"index": COLOURS["index"][1], "note": COLOURS["note"][1]}.get(e.kind, "#555555")
        if e.kind == "note":
            x1, y1 = x[e.src] + size[e.src][0] / 2, y[e.src] + size[e.src][1] / 2
            x2, y2 = x[e.dst] - size[e.dst][0] / 2, y[e.dst] + size[e.dst][1] / 2
            out.append(
                f'<path class="edge" d="M{x1:.1f},{y1:.1f} L{x2:.1f},{y2:.1f}" stroke="{stroke}" '
                'stroke-dasharray="2,3" fill="none"/>'
            )
            continue
        x1, y1 = x[e.src], y[e.src] + size[e.src][1]
        x2, y2 = x[e.dst], y[e.dst]
        if e.kind == "repeat":  # back up, beside the block
            x1, y1 = x[e.src] + size[e.src][0] / 2, y[e.src] + size[e.src][1] / 2
            x2, y2 = x[e.dst] + size[e.dst][0] / 2, y[e.dst] + size[e.dst][1] / 2
            c = max(x1, x2) + 40
            d = f"M{x1:.1f},{y1:.1f} C{c:.1f},{y1:.1f} {c:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
        else:
            mid = (y1 + y2) / 2
            d = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}"
        dash = ' stroke-dasharray="5,3"' if e.kind in ("index", "repeat") else ""
        out.append(
            f'<path class="edge" d="{d}" stroke="{stroke}" fill="none"{dash} '
            f'marker-end="url(#{id_prefix}arrow)"/>'
        )
        if e.label:
            lx, ly = (x1 + x2) / 2 + 4, (y1 + y2) / 2
            out.append(
                f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="9" fill="#666666">'
                f"{escape(e.label)}</text>"
            )
    for name, it in items.items():
        if name in x:
            out.append(_item_svg(it, x[name], y[name], size[name], id_prefix))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _item_svg(it: Item, cx: float, top: float, wh: tuple[float, float], id_prefix: str) -> str:
    w, h = wh
    fill, border = COLOURS[it.kind]
    fill, border = it.fill or fill, it.border or border
    stroke = f'fill="{fill}" stroke="{border}" stroke-width="{2.5 if it.border else 1}"'
    x0 = cx - w / 2
    if it.kind == "input":
        shape = (
            f'<ellipse cx="{cx:.1f}" cy="{top + h / 2:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}" '
            f"{stroke}/>"
        )
    elif it.kind == "index":
        pts = [(x0, top + h / 2), (x0 + 10, top), (x0 + w - 10, top), (x0 + w, top + h / 2),
               (x0 + w - 10, top + h), (x0 + 10, top + h)]  # fmt: skip
        shape = f'<polygon points="{_pts(pts)}" {stroke} stroke-dasharray="4,2"/>'
    elif it.kind == "output":
        pts = [
            (x0, top),
            (x0 + w, top),
            (x0 + w, top + h * 0.6),
            (cx, top + h),
            (x0, top + h * 0.6),
        ]
        shape = f'<polygon points="{_pts(pts)}" {stroke}/>'
    else:
        rx = 8 if it.kind == "node" else 0
        shape = (
            f'<rect x="{x0:.1f}" y="{top:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{rx}" '
            f"{stroke}/>"
        )
    texts: list[str] = []
    if it.kind == "note":
        for i, line in enumerate(it.lines):
            texts.append(
                f'<text x="{x0 + 8:.1f}" y="{top + 15 + 12 * i:.1f}" font-size="9">'
                f"{escape(line)}</text>"
            )
    elif it.kind == "output":
        texts.append(
            f'<text x="{cx:.1f}" y="{top + 13:.1f}" font-size="9" text-anchor="middle">'
            f"{escape(it.title)}</text>"
        )
    else:
        texts.append(
            f'<text x="{cx:.1f}" y="{top + 15:.1f}" text-anchor="middle">'
            f'<tspan font-weight="bold">{escape(it.title)}</tspan> : {escape(it.type)}</text>'
        )
        line_y = top + 15
        for small, colour in ((it.sub, "#666666"), (it.badge, "#000000")):
            if small:
                line_y += 12
                texts.append(
                    f'<text x="{cx:.1f}" y="{line_y:.1f}" font-size="9" text-anchor="middle" '
                    f'fill="{colour}">{escape(small)}</text>'
                )
    body = f"<title>{escape(it.tooltip or it.title)}</title>{shape}{''.join(texts)}"
    if it.url:
        body = f'<a href="{escape(it.url)}">{body}</a>'
    css = ("node " + CLASSES[it.kind] + " " + it.css_class).strip()
    return f'<g id="{escape(id_prefix + it.name)}" class="{escape(css)}">{body}</g>'


def _pts(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
