"""The HTML verification report: one self-contained page per run (``torchlean-verify --html``).

The page is generated from the JSON report (``Report.to_json()``, schema in
docs/verification.md) and the graph it is about, nothing else of the verifier, so it follows the
schema, not the verifier's internals. For each graph: the verdict, a drawing with every node
coloured by its result and method, each counterexample in a note beside its node, the
counterexamples in full, the checks that did not pass, the notes, the per-signature table (each
row opens to its checks) and the graph-level checks. Several graphs share one page, with a
table of contents.

Colours follow :func:`category`: a failed check is a *mismatch*; otherwise the method's first
word decides (``exact`` only with a pass; ``probabilistic``; anything else, ``not verified``
included, is *not verified*). Where a method is shown, the page shows its :func:`label`: the
method with the level its elements were covered at, e.g. ``exact (tensor)`` or
``exact (elements)``.

The page needs no network: inline CSS, no scripts, no web fonts, the SVG inline. The drawing is
Graphviz's (``dot``) when it is installed; without it (or if it fails) the page uses a simple
layered layout of its own (``torchlean_ir.layered_svg``) and says so above the drawing. Graphs of
more than ``collapse_above`` nodes draw repeated blocks once (``torchlean_ir.find_blocks``); a
collapsed node takes the worst colour of the nodes it stands for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

import torchlean_ir as tl

#: Category -> (legend text, fill, border).
CATEGORIES: dict[str, tuple[str, str, str]] = {
    "exact": ("exact", "#d5efd9", "#2e7d32"),
    "probabilistic": ("probabilistic", "#fff0bf", "#a67c00"),
    "not-verified": ("not verified", "#e3e3e8", "#6b6b76"),
    "mismatch": ("mismatch", "#f8d3d1", "#c0392b"),
}
_WORSE = ("exact", "probabilistic", "not-verified", "mismatch")  # later is worse

#: Graphs with more nodes than this draw repeated blocks once.
COLLAPSE_ABOVE = 150

_VERDICT = {"verified": "#2e7d32", "mismatch": "#c0392b", "undecided": "#a67c00"}


def category(result: str, method: str) -> str:
    """The colour class of a result: ``mismatch``, ``exact``, ``probabilistic`` or
    ``not-verified`` (by the method's prefix; open-ended method names are fine)."""
    if result == "fail":
        return "mismatch"
    m = method.strip().lower()
    if m.startswith("exact") and result == "pass":
        return "exact"
    if m.startswith("probabilistic"):
        return "probabilistic"
    return "not-verified"


def label(entry: Mapping[str, Any]) -> str:
    """How a node or check was decided, as shown: the report's ``label`` (a node's method with
    the levels its checks rest on, e.g. ``exact (tensor)``), else a check's method with its
    ``level``, else the bare method (reports written before levels existed)."""
    if entry.get("label"):
        return str(entry["label"])
    method, level = str(entry.get("method", "")), str(entry.get("level") or "")
    return f"{method} ({level})" if level else method


def _worst(cats: Sequence[str]) -> str:
    return max(cats, key=_WORSE.index)


def _e(x: object) -> str:
    return escape(str(x), quote=True)


def _inputs_text(inputs: Any, limit: int = 4) -> str:
    if not isinstance(inputs, Mapping):
        return str(inputs)
    items = [f"{k} = {v}" for k, v in inputs.items()]
    more = f", ... ({len(items)} inputs)" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more if items else "any input"


def _note_text(ce: Mapping[str, Any]) -> str:
    text = (
        f"{ce.get('check', '')}: {ce.get('element', '')} expected {ce.get('expected', '')}, "
        f"got {ce.get('got', '')} at {_inputs_text(ce.get('inputs', {}))}"
    )
    return text if len(text) <= 360 else text[:357] + "..."


def _link_counts(checks: Sequence[Mapping[str, Any]]) -> str:
    links: dict[str, list[int]] = {}
    for c in checks:
        ok = links.setdefault(str(c.get("link", "")), [0, 0])
        ok[0] += c.get("result") == "pass"
        ok[1] += 1
    return ", ".join(f"{k} {a}/{b}" for k, (a, b) in links.items())


def _inline_svg(svg: str, gid: str) -> str:
    """Graphviz's SVG without its XML prolog, with its generic ids made unique per graph."""
    start = svg.find("<svg")
    svg = svg[start:] if start >= 0 else svg
    return re.sub(r'id="((?:graph|node|edge|clust|a_node|a_edge)\d+)"', rf'id="{gid}-\1"', svg)


def _drawing_html(
    doc: Mapping[str, Any],
    graph: tl.GraphData,
    gid: str,
    *,
    graphviz: bool | None,
    collapse: bool | None,
) -> str:
    nodes = list(doc.get("nodes", []))
    by_node = {int(n["node"]): n for n in nodes}
    notes_by_node: dict[int, list[tuple[int, Mapping[str, Any]]]] = {}
    for k, ce in enumerate(doc.get("counterexamples", [])):
        if ce.get("node") is not None:
            notes_by_node.setdefault(int(ce["node"]), []).append((k, ce))
    big = len(graph.nodes) > COLLAPSE_ABOVE
    d = tl.drawing(graph, collapse=big if collapse is None else collapse)
    styles: dict[int, tl.NodeStyle] = {}
    L = graph.num_leaves
    for j in range(len(graph.nodes)):
        if not d.is_drawn(j):
            continue
        reports = [by_node[i] for i in d.represents(j) if i in by_node]
        if not reports:
            continue
        cats = [category(str(n["result"]), str(n["method"])) for n in reports]
        cat = _worst(cats)
        worst = reports[cats.index(cat)]
        first = worst["shared_with"] if worst.get("shared_with") is not None else worst["node"]
        fails = [c for c in worst.get("checks", []) if c.get("result") == "fail"]
        badge = f"FAIL: {fails[0]['name']}" if fails else label(worst)
        ces = [kce for i in d.represents(j) for kce in notes_by_node.get(i, [])]
        note = ""
        if ces:
            note = _note_text(ces[0][1]) + (f" (+{len(ces) - 1} more)" if len(ces) > 1 else "")
        url = f"#{gid}-ce-{ces[0][0]}" if ces else f"#{gid}-sig-{first}"
        tip = f"node {worst['node']} (%{L + int(worst['node'])}): {worst['signature']}: " + (
            f"{worst['result']}, {label(worst)}"
        )
        _, fill, border = CATEGORIES[cat]
        styles[j] = tl.NodeStyle(
            fill=fill,
            border=border if cat == "mismatch" else "",
            css_class=f"tl-{cat}",
            badge=badge,
            tooltip=tip,
            url=url,
            note=note,
        )
    sc = tl.scene(d, styles=styles, name=str(doc.get("graph", "graph")))
    info = []
    if d.blocks:
        info.append(
            f"{len(graph.nodes)} nodes: each run of repeated blocks is drawn once, with its count "
            "(the table below lists every signature)."
        )
    svg = None
    if graphviz is not False:
        try:
            svg = _inline_svg(tl.render_svg(tl.to_dot(sc, id_prefix=f"{gid}-")), gid)
        except tl.GraphvizError as e:
            if graphviz:
                raise
            why = (
                "Graphviz's dot program is not installed" if e.missing else f"Graphviz failed ({e})"
            )
            info.append(
                f"Drawn without Graphviz: {why}; this is a simple layout of the same graph "
                "(install the graphviz package for the full drawing)."
            )
    else:
        info.append("Drawn without Graphviz (a simple layout of the same graph).")
    if svg is None:
        svg = tl.layered_svg(sc, id_prefix=f"{gid}-")
    counts = {c: 0 for c in CATEGORIES}
    for n in nodes:
        counts[category(str(n["result"]), str(n["method"]))] += 1
    legend = " ".join(
        f'<span class="tl-key tl-{c}"><i style="background:{fill};border-color:{border}"></i>'
        f"{_e(text)} <b>{counts[c]}</b></span>"
        for c, (text, fill, border) in CATEGORIES.items()
    )
    infos = "".join(f'<p class="tl-drawing-info">{_e(t)}</p>' for t in info)
    return (
        f'<div class="tl-legend">nodes: {legend}</div>{infos}'
        f'<div class="tl-drawing" id="{gid}-drawing">{svg}</div>'
    )


def _counterexamples_html(doc: Mapping[str, Any], graph: tl.GraphData, gid: str) -> str:
    ces = list(doc.get("counterexamples", []))
    if not ces:
        return ""
    L = graph.num_leaves
    out = [f"<h3>Counterexamples ({len(ces)})</h3>"]
    for k, ce in enumerate(ces):
        node = ce.get("node")
        if node is None:
            where = "graph"
        else:
            op = graph.nodes[int(node)].op if 0 <= int(node) < len(graph.nodes) else "?"
            v = L + int(node)
            where = f'<a href="#{gid}-v{v}">node {int(node)} (%{v}, {_e(op)})</a>'
        inputs = ce.get("inputs", {})
        if isinstance(inputs, Mapping) and inputs:
            rows = "".join(f"<tr><td>{_e(a)}</td><td>{_e(b)}</td></tr>" for a, b in inputs.items())
            ins = f'<table class="tl-inputs">{rows}</table>'
        else:
            ins = _e(inputs if not isinstance(inputs, Mapping) else "any input")
        node_attr = "" if node is None else f' data-node="{int(node)}"'
        out.append(_ce_box(ce, f"{gid}-ce-{k}", f"{where}: ", ins, node_attr))
    return "".join(out)


def _ce_box(ce: Mapping[str, Any], box_id: str, head: str, ins: str, attrs: str = "") -> str:
    return (
        f'<div class="tl-counterexample" id="{box_id}"{attrs}>'
        f'<div class="tl-ce-head">{head}<b>{_e(ce.get("check", ""))}</b></div><dl>'
        f"<dt>element</dt><dd><code>{_e(ce.get('element', ''))}</code></dd>"
        f"<dt>expected</dt><dd><code>{_e(ce.get('expected', ''))}</code></dd>"
        f"<dt>got</dt><dd><code>{_e(ce.get('got', ''))}</code></dd>"
        f"<dt>at</dt><dd>{ins}</dd>"
        f"<dt>evidence</dt><dd>{_e(ce.get('evidence', ''))}</dd></dl></div>"
    )


def _problems_html(doc: Mapping[str, Any], graph: tl.GraphData, gid: str) -> str:
    """Every failed or undecided check once (shared signatures: at the first node)."""
    rows = []
    L = graph.num_leaves
    for n in doc.get("nodes", []):
        if n.get("shared_with") is not None:
            continue
        for c in n.get("checks", []):
            if c.get("result") != "pass":
                rows.append((f'<a href="#{gid}-sig-{n["node"]}">node {n["node"]} '
                             f'(%{L + int(n["node"])})</a>', c))  # fmt: skip
    rows += [("graph", c) for c in doc.get("graph_checks", []) if c.get("result") != "pass"]
    if not rows:
        return ""
    body = "".join(
        f'<tr class="tl-{category(str(c.get("result")), str(c.get("method")))}"><td>{where}</td>'
        f"<td>{_e(c.get('name', ''))}</td><td>{_e(label(c))}</td>"
        f"<td>{_e(str(c.get('result', '')).upper())}</td><td>{_e(c.get('how', ''))}</td></tr>"
        for where, c in rows
    )
    return (
        f'<h3>Checks that did not pass ({len(rows)})</h3><table class="tl-table"><thead><tr>'
        "<th>where</th><th>check</th><th>method</th><th>result</th><th>how</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _checks_table(checks: Sequence[Mapping[str, Any]]) -> str:
    body = "".join(
        f'<tr class="tl-{category(str(c.get("result")), str(c.get("method")))}">'
        f"<td>{_e(c.get('link', ''))}</td><td>{_e(c.get('name', ''))}</td>"
        f"<td>{_e(label(c))}</td><td>{_e(c.get('result', ''))}</td>"
        f"<td>{_e(c.get('coverage', ''))}</td><td>{_e(c.get('how', ''))}</td>"
        f"<td>{float(c.get('seconds', 0.0)):.3f}</td></tr>"
        for c in checks
    )
    return (
        '<table class="tl-checks"><thead><tr><th>link</th><th>check</th><th>method</th>'
        "<th>result</th><th>coverage</th><th>how</th><th>s</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _signature_table(doc: Mapping[str, Any], graph: tl.GraphData, gid: str) -> str:
    L = graph.num_leaves
    nodes = list(doc.get("nodes", []))
    same: dict[int, list[int]] = {}
    for n in nodes:
        if n.get("shared_with") is not None:
            same.setdefault(int(n["shared_with"]), []).append(int(n["node"]))
    rows = []
    for n in nodes:
        if n.get("shared_with") is not None:
            continue
        j = int(n["node"])
        others = same.get(j, [])
        where = f'<a href="#{gid}-v{L + j}">node {j} (%{L + j})</a>'
        if others:
            shown = ", ".join(str(o) for o in others[:12]) + (", ..." if len(others) > 12 else "")
            where += f'<div class="tl-same">+{len(others)} same: {_e(shown)}</div>'
        cat = category(str(n["result"]), str(n["method"]))
        rows.append(
            f'<tr id="{gid}-sig-{j}" class="tl-{cat}"><td>{where}</td>'
            f"<td><details><summary><code>{_e(n['signature'])}</code></summary>"
            f"{_checks_table(n.get('checks', []))}</details></td>"
            f"<td>{_e(_link_counts(n.get('checks', [])))}</td><td>{_e(label(n))}</td>"
            f'<td class="tl-result">{_e(n["result"])}</td></tr>'
        )
    graph_checks = list(doc.get("graph_checks", []))
    table = (
        f"<h3>Signatures ({len(rows)})</h3>"
        '<table class="tl-table tl-signatures"><thead><tr><th>nodes</th><th>signature (open for '
        "its checks)</th><th>checks passed</th><th>method</th><th>result</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    if graph_checks:
        table += f"<h3>Graph checks ({len(graph_checks)})</h3>" + _checks_table(graph_checks)
    return table


def _section(
    doc: Mapping[str, Any],
    graph: tl.GraphData,
    gid: str,
    *,
    graphviz: bool | None,
    collapse: bool | None,
) -> str:
    nodes = list(doc.get("nodes", []))
    if [(n.get("node"), n.get("op")) for n in nodes] != [
        (j, node.op) for j, node in enumerate(graph.nodes)
    ]:
        raise ValueError(
            f"report of {doc.get('graph')!r} does not match the graph given with it "
            f"({len(doc.get('nodes', []))} report nodes, {len(graph.nodes)} graph nodes)"
        )
    return (
        _open_section(doc, gid, "", "compiled ")
        + _drawing_html(doc, graph, gid, graphviz=graphviz, collapse=collapse)
        + _counterexamples_html(doc, graph, gid)
        + _problems_html(doc, graph, gid)
        + _notes_html(doc)
        + _signature_table(doc, graph, gid)
        + "</section>"
    )


def _open_section(doc: Mapping[str, Any], gid: str, subject: str, compiled: str) -> str:
    """A report's section up to its verdict, name, summary, dtype and exit code."""
    verdict = str(doc.get("verdict", "undecided"))
    return (
        f'<section class="tl-report" id="{gid}" data-verdict="{_e(verdict)}">'
        f'<h2><span class="tl-verdict" style="background:{_VERDICT.get(verdict, "#666")}">'
        f"{_e(verdict.upper())}</span> {subject}{_e(doc.get('graph', ''))}</h2>"
        f'<p class="tl-summary">{_e(doc.get("summary", ""))} · {compiled}'
        f"{_e(doc.get('dtype', ''))} · exit code {_e(doc.get('exit_code', ''))}</p>"
    )


def _notes_html(doc: Mapping[str, Any]) -> str:
    notes = list(doc.get("notes", []))
    if not notes:
        return ""
    items = "".join(f"<li>{_e(n)}</li>" for n in notes)
    return f'<h3>Notes ({len(notes)})</h3><ul class="tl-notes">{items}</ul>'


def _function_section(doc: Mapping[str, Any], gid: str) -> str:
    """A function's report (:func:`verify.verify_function`): no graph to draw; its checks, each
    custom rule's checks, the counterexamples."""
    parts = [_open_section(doc, gid, "function ", "")]
    for k, ce in enumerate(doc.get("counterexamples", [])):
        inputs = ce.get("inputs", {})
        rows = "".join(f"<tr><td>{_e(a)}</td><td>{_e(b)}</td></tr>" for a, b in inputs.items())
        ins = f'<table class="tl-inputs">{rows}</table>'
        parts.append(_ce_box(ce, f"{gid}-ce-{k}", "", ins))
    parts.append("<h3>The function</h3>" + _checks_table(list(doc.get("graph_checks", []))))
    for n in doc.get("nodes", []):
        parts.append(f"<h3>{_e(n.get('signature', ''))}</h3>"
                     + _checks_table(list(n.get("checks", []))))  # fmt: skip
    return "".join(parts) + _notes_html(doc) + "</section>"


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;
color:#1d1d1f;background:#fafafa}
h1{font-size:22px;margin:0 0 6px}h2{font-size:18px;margin:28px 0 4px}h3{font-size:15px;
margin:18px 0 6px}
code{font:12px/1.3 ui-monospace,Menlo,Consolas,monospace}
.tl-report{background:#fff;border:1px solid #ddd;border-radius:8px;padding:4px 18px 18px;
margin:18px 0}
.tl-verdict{color:#fff;border-radius:4px;padding:1px 8px;font-size:14px;vertical-align:2px}
.tl-summary{color:#444;margin:2px 0 8px}
.tl-legend{margin:8px 0}.tl-key{margin-right:14px;white-space:nowrap}
.tl-key i{display:inline-block;width:12px;height:12px;border:1.5px solid;border-radius:3px;
margin-right:4px;vertical-align:-1px}
.tl-drawing-info{color:#6b4e00;background:#fff8e1;border:1px solid #f0d78c;padding:4px 8px;
border-radius:4px;margin:6px 0}
.tl-drawing{overflow:auto;border:1px solid #eee;border-radius:6px;padding:8px;background:#fff}
.tl-drawing svg{max-width:none}
.tl-table,.tl-checks{border-collapse:collapse;width:100%}
.tl-table th,.tl-table td,.tl-checks th,.tl-checks td{border-bottom:1px solid #e6e6e6;
padding:4px 8px;text-align:left;vertical-align:top}
.tl-table th,.tl-checks th{background:#f3f3f5;font-weight:600}
.tl-checks{margin:6px 0;font-size:12px}
tr.tl-exact td.tl-result{color:#2e7d32}tr.tl-mismatch{background:#fdecea}
tr.tl-probabilistic{background:#fff9e0}tr.tl-not-verified{background:#f1f1f4}
tr.tl-mismatch td.tl-result{color:#c0392b;font-weight:700}
tr:target,.tl-counterexample:target{outline:3px solid #1a73e8;outline-offset:-3px}
.tl-same{color:#666;font-size:12px}
.tl-counterexample{border:1.5px solid #c0392b;background:#fff6f5;border-radius:6px;
padding:8px 12px;margin:8px 0}
.tl-counterexample dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;
margin:6px 0 0}
.tl-counterexample dt{color:#666}.tl-counterexample dd{margin:0}
.tl-inputs td{padding:0 12px 0 0;font:12px ui-monospace,Menlo,Consolas,monospace}
.tl-toc td{padding:2px 10px 2px 0}
"""


def render_html(
    reports: Sequence[tuple[Any, tl.GraphData]],
    *,
    title: str = "torchlean-verify report",
    graphviz: bool | None = None,
    collapse: bool | None = None,
) -> str:
    """One self-contained HTML page for the given (report, graph) pairs.

    A report is a :class:`verify.Report` or its ``to_json()`` dictionary; a function's report
    (:func:`verify.verify_function`) comes with ``None`` for its graph. ``graphviz``: ``None``
    draws with Graphviz when its ``dot`` is installed and with the built-in layout otherwise;
    ``False`` always uses the built-in layout; ``True`` requires Graphviz (``GraphvizError``
    otherwise). ``collapse``: ``None`` draws repeated blocks once in graphs of more than
    :data:`COLLAPSE_ABOVE` nodes; ``True`` / ``False`` always / never.
    """
    docs = [(r.to_json() if hasattr(r, "to_json") else r, g) for r, g in reports]
    sections = [
        _function_section(doc, f"g{i}") if doc.get("subject") == "function"
        else _section(doc, g, f"g{i}", graphviz=graphviz, collapse=collapse)
        for i, (doc, g) in enumerate(docs)
    ]  # fmt: skip
    head = f"<h1>{_e(title)}</h1>"
    if len(docs) > 1:
        verdicts = [str(doc.get("verdict")) for doc, _ in docs]
        code = 1 if "mismatch" in verdicts else 3 if "undecided" in verdicts else 0
        rows = "".join(
            f'<tr><td><span class="tl-verdict" style="background:{_VERDICT.get(v, "#666")}">'
            f'{_e(v.upper())}</span></td><td><a href="#g{i}">{_e(doc.get("graph", ""))}</a></td>'
            f"<td>{_e(doc.get('dtype', ''))}</td><td>{_e(doc.get('summary', ''))}</td></tr>"
            for i, ((doc, _), v) in enumerate(zip(docs, verdicts, strict=True))
        )
        head += (
            f'<p class="tl-summary">{len(docs)} graphs · exit code {code}</p>'
            f'<table class="tl-toc">{rows}</table>'
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_CSS}</style></head><body>"
        + head
        + "".join(sections)
        + "</body></html>\n"
    )
