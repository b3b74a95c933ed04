"""The HTML report (``verify/_html.py``, ``torchlean-verify --html``): generated from the JSON
report, self-contained, every node drawn and coloured by its result, counterexamples beside
their nodes; with Graphviz and with the built-in layout. (What a browser shows of it:
``test_html_browser.py``.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import verify
from verify._html import COLLAPSE_ABOVE, category, render_html

from ..programs import need_dot
from .html_cases import ROOT, Page, passing, wrong_rule, wrong_tape


@pytest.mark.parametrize(
    "result,method,expected",
    [
        ("pass", "exact", "exact"),
        ("pass", "exact (tensor)", "exact"),  # methods are open-ended: the prefix decides
        ("pass", "exact (elements)", "exact"),
        ("pass", "probabilistic", "probabilistic"),
        ("undecided", "probabilistic (sample of 4096)", "probabilistic"),
        ("undecided", "not verified", "not-verified"),
        ("undecided", "exact", "not-verified"),  # not passed: not called exact
        ("pass", "some new method", "not-verified"),
        ("fail", "exact", "mismatch"),
        ("fail", "probabilistic", "mismatch"),
        ("fail", "exact (tensor)", "mismatch"),
    ],
)
def test_category(result: str, method: str, expected: str) -> None:
    assert category(result, method) == expected


def _check_self_contained(html: str) -> None:
    page = Page(html)
    assert not [t for t in page.tags if t.tag in ("script", "link", "iframe", "img", "object")]
    for t in page.tags:  # no resource fetched from anywhere
        assert "src" not in t.attrs
        href = t.attrs.get("href", t.attrs.get("xlink:href", "#"))
        assert href.startswith("#"), href
    assert "@import" not in html and "@font-face" not in html
    assert not re.search(r"url\((?!#)", html)  # only url(#marker) references


@pytest.mark.parametrize("graphviz", [True, False], ids=["graphviz", "builtin"])
def test_failing_node_is_marked_with_its_counterexample_beside_it(graphviz: bool) -> None:
    if graphviz:
        need_dot()
    doc, g = wrong_rule()
    html = render_html([(doc, g)], graphviz=graphviz)
    _check_self_contained(html)
    page = Page(html)
    L = g.num_leaves
    assert page.by_id["g0"].attrs["data-verdict"] == "mismatch"
    failing = {n["node"] for n in doc["nodes"] if n["result"] == "fail"}
    assert failing == {0, 2}  # both linear nodes
    for v in range(L):
        assert "tl-leaf" in page.by_id[f"g0-v{v}"].classes
    for n in doc["nodes"]:
        el = page.by_id[f"g0-v{L + n['node']}"]
        assert "tl-node" in el.classes
        expected = "tl-mismatch" if n["node"] in failing else "tl-exact"
        assert expected in el.classes, (n["node"], el.classes)
        assert n["op"] in el.content
    for k, ce in enumerate(doc["counterexamples"]):
        node = ce["node"]
        note = page.by_id[f"g0-note{L + node}"]  # in the drawing, beside the node
        assert "tl-note" in note.classes
        for key in ("element", "expected", "got"):
            assert ce[key] in note.content
        full = page.by_id[f"g0-ce-{k}"]  # and in full below it
        assert full.attrs["data-node"] == str(node)
        for key in ("check", "element", "expected", "got", "evidence"):
            assert ce[key] in full.content
        for name, value in ce["inputs"].items():
            assert name in full.content and value in full.content
    # the failing node links to its counterexample; a passing one to its table row
    assert 'href="#g0-ce-0"' in html or 'xlink:href="#g0-ce-0"' in html
    assert page.by_id[f"g0-sig-{1}"].attrs["class"] == "tl-exact"
    assert page.by_id[f"g0-sig-{0}"].attrs["class"] == "tl-mismatch"
    drawn_by = "Drawn without Graphviz" in html
    assert drawn_by is (not graphviz)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "graphs").glob("*.json")), ids=lambda p: p.name
)
def test_every_example_graph_gets_a_page(path: Path) -> None:
    import torchlean_ir as tl

    g = tl.load(path)
    report = verify.verify_graph(g, end_to_end="never", name=path.name)
    assert report.verdict == "verified"
    for graphviz in (False, True):
        if graphviz:
            need_dot()
        page = Page(render_html([(report, g)], graphviz=graphviz))
        for j in range(len(g.nodes)):
            assert "tl-exact" in page.by_id[f"g0-v{g.num_leaves + j}"].classes
        assert ("Drawn without Graphviz" in page.by_id["g0"].content) is not graphviz


def test_several_graphs_share_one_page_with_unique_ids() -> None:
    cases = [passing("mlp_regression"), wrong_rule(), passing("softmax_classifier")]
    html = render_html(cases)
    page = Page(html)  # asserts that no id repeats
    for i, (doc, g) in enumerate(cases):
        section = page.by_id[f"g{i}"]
        assert section.attrs["data-verdict"] == doc["verdict"]
        for j in range(len(g.nodes)):
            assert f"g{i}-v{g.num_leaves + j}" in page.by_id
        assert doc["summary"] in section.content
    assert "3 graphs · exit code 1" in html
    # the index input of the classifier is drawn
    assert "tl-index" in page.by_id["g2-ix0"].classes


def test_graph_level_failure_is_shown_at_the_graph() -> None:
    doc, g = wrong_tape()
    page = Page(render_html([(doc, g)], graphviz=False))
    ce = doc["counterexamples"][0]
    assert ce["node"] is None
    box = page.by_id["g0-ce-0"]
    assert "data-node" not in box.attrs and box.content.startswith("graph:")
    assert ce["check"] in box.content and ce["got"] in box.content
    failed = [c for c in doc["graph_checks"] if c["result"] != "pass"]
    assert failed and all(n["result"] == "pass" for n in doc["nodes"])
    assert f"Checks that did not pass ({len(failed)})" in page.by_id["g0"].content


def test_page_is_made_from_the_json_alone() -> None:
    doc, g = wrong_rule()
    report_page = render_html([(doc, g)], graphviz=False)
    # a report object gives the same page as its JSON (modulo nothing)
    assert isinstance(doc, dict) and report_page == render_html([(dict(doc), g)], graphviz=False)
    # open-ended methods, an unknown extra key and a report without labels or levels (written
    # before they existed) do not break it: the bare method is shown
    doc2 = {
        **doc,
        "extra": 1,
        "nodes": [
            {
                **{k: v for k, v in n.items() if k != "label"},
                "method": n["method"] + " (new)",
                "checks": [{k: v for k, v in c.items() if k != "level"} for c in n["checks"]],
            }
            for n in doc["nodes"]
        ],
    }
    page = Page(render_html([(doc2, g)], graphviz=False))
    assert "tl-exact" in page.by_id[f"g0-v{g.num_leaves + 1}"].classes
    assert "exact (new)" in page.by_id[f"g0-v{g.num_leaves + 1}"].content
    assert "(tensor)" not in page.by_id["g0"].content
    assert "(elements)" not in page.by_id["g0"].content


def test_method_is_shown_with_its_level() -> None:
    """Where the page shows a method it shows the report's label: a node's ``label`` (e.g.
    ``exact (tensor)``), a check's method with its ``level``."""
    doc, g = passing("mlp_regression")
    assert all(n["label"] != n["method"] for n in doc["nodes"])  # every node rests on a level
    page = Page(render_html([(doc, g)], graphviz=False))
    L = g.num_leaves
    for n in doc["nodes"]:
        assert n["label"] in page.by_id[f"g0-v{L + n['node']}"].content  # badge in the drawing
        if n["shared_with"] is None:  # the method column of its row, then the result
            row = page.by_id[f"g0-sig-{n['node']}"]
            assert row.text[-2:] == [n["label"], n["result"]], row.text
            for c in n["checks"]:
                assert c["level"] in ("tensor", "elements")
                assert f"{c['method']} ({c['level']})" in row.content


def test_report_and_graph_must_match() -> None:
    doc, _ = wrong_rule()
    _, other = passing("softmax_classifier")
    with pytest.raises(ValueError, match="does not match the graph given with it"):
        render_html([(doc, other)])
    _, g = wrong_rule()
    shifted = {**doc, "nodes": [{**n, "node": n["node"] + 9} for n in doc["nodes"]]}
    for bad in ({**doc, "nodes": doc["nodes"][:-1]}, shifted):
        with pytest.raises(ValueError, match="does not match the graph given with it"):
            render_html([(bad, g)])


def test_large_graphs_draw_repeated_blocks_once() -> None:
    import torchlean_ir as tl

    b = tl.GraphBuilder("f64")
    h = b.input("x", (2,))
    for i in range(COLLAPSE_ABOVE // 2 + 5):
        h = b.linear(b.param(f"l{i}.W", (2, 2)), b.param(f"l{i}.b", (2,)), h).tanh()
    g = b.build(b.sum(h * h))
    report = verify.verify_graph(g, end_to_end="never", name="deep")
    page = Page(render_html([(report, g)], graphviz=False))
    assert "g0-block0" in page.by_id
    assert "each run of repeated blocks is drawn once" in page.by_id["g0"].content
    drawn = [k for k in page.by_id if re.fullmatch(r"g0-v\d+", k) and int(k[4:]) >= g.num_leaves]
    assert len(drawn) < 10
    # the table still lists every signature
    rows = [k for k in page.by_id if k.startswith("g0-sig-")]
    assert rows == [f"g0-sig-{n.node}" for n in report.nodes if n.shared_with is None]
    assert "g0-block0" not in Page(render_html([(report, g)], graphviz=False, collapse=False)).by_id


def test_missing_graphviz_is_said_on_the_page(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    doc, g = passing("mlp_regression")
    html = render_html([(doc, g)])
    assert "Drawn without Graphviz: Graphviz&#x27;s dot program is not installed" in html
    assert "g0-v6" in Page(html).by_id
    import torchlean_ir as tl

    with pytest.raises(tl.GraphvizError):
        render_html([(doc, g)], graphviz=True)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "verify.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip


def test_cli_html_for_several_graphs_with_a_wrong_plugin(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    proc = _cli(
        "examples/custom_op_graph.json", "examples/graphs/mlp_regression.json",
        "--plugin", "examples/custom_op_plugin_wrong.py", "--html", str(out), "-q",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    page = Page(out.read_text())
    assert page.by_id["g0"].attrs["data-verdict"] == "mismatch"
    assert page.by_id["g1"].attrs["data-verdict"] == "verified"
    assert "tl-mismatch" in page.by_id["g0-v7"].classes  # log_cosh, node 3
    assert "tl-note" in page.by_id["g0-note7"].classes
    assert page.by_id["g0-ce-0"].attrs["data-node"] == "3"


def test_cli_html_target_is_checked_before_verifying(tmp_path: Path) -> None:
    proc = _cli("examples/graphs/mlp_regression.json", "--html", str(tmp_path / "no" / "r.html"))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"torchlean-verify: error: --html {tmp_path / 'no' / 'r.html'}: no such directory "
        f"{tmp_path / 'no'}\n"
    )
    proc = _cli("examples/graphs/mlp_regression.json", "--html", str(tmp_path))
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_cli_html_with_both_dtypes_has_a_section_per_compilation(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    proc = _cli("examples/graphs/mlp_regression.json", "--dtype", "all", "--html", str(out), "-q")
    assert proc.returncode == 0, proc.stderr
    page = Page(out.read_text())
    assert [page.by_id[f"g{i}"].attrs["data-verdict"] for i in (0, 1)] == ["verified"] * 2
    assert "compiled float64" in page.by_id["g0"].content
    assert "compiled float32" in page.by_id["g1"].content
    assert "g2" not in page.by_id
