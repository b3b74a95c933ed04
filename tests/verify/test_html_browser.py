"""The HTML report as a person sees it: opened in headless Chromium (driven by Playwright, with
the system's Chromium), screenshotted, and checked on the rendered page: every node drawn and
visible, the failing nodes marked and red on screen, each counterexample's text beside its node
and in full below, no request leaving the file, no script error.

Needs Graphviz, Chromium and the playwright package: skipped without them, except where
``TORCHLEAN_REQUIRE_TOOLS=1`` (CI), where their absence fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from verify._html import CATEGORIES, render_html

from ..programs import CHROMIUM_FLAGS, need_chromium, need_dot, need_playwright
from .html_cases import Case, passing, wrong_rule

# Every drawn item and counterexample box of section ``gid``: class, box (page pixels), text.
_FACTS = """gid => {
  const sec = document.getElementById(gid);
  const box = el => { const r = el.getBoundingClientRect();
    return {x: r.x + scrollX, y: r.y + scrollY, w: r.width, h: r.height}; };
  const items = {};
  for (const el of sec.querySelectorAll("g.tl-node, g.tl-leaf, g.tl-index, g.tl-output, g.tl-note"))
    items[el.id] = {cls: el.getAttribute("class"), text: el.textContent, ...box(el)};
  const ces = [...sec.querySelectorAll(".tl-counterexample")].map(
    el => ({id: el.id, node: el.dataset.node, text: el.innerText, ...box(el)}));
  return {items, ces, width: document.documentElement.scrollWidth,
          scripts: document.scripts.length, verdict: sec.dataset.verdict};
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_dot()
    chromium = need_chromium()
    need_playwright()
    from playwright.sync_api import sync_playwright

    flags = [f for f in CHROMIUM_FLAGS if f != "--headless"]  # Playwright adds its own
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=flags)
        try:
            yield b
        finally:
            b.close()


def _open(browser: Any, html: str, tmp_path: Path, name: str) -> tuple[Any, Path, list[str]]:
    """Load the page from a file; return the page, its full-page screenshot and every request
    that is not for the file itself (there must be none)."""
    path = tmp_path / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
    elsewhere: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: r.url != path.as_uri() and elsewhere.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(path.as_uri(), wait_until="load")
    shot = tmp_path / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    assert errors == []
    return page, shot, elsewhere


def _pixel(shot: Path, x: float, y: float) -> tuple[int, int, int]:
    from PIL import Image

    with Image.open(shot) as im:
        return im.convert("RGB").getpixel((int(x), int(y)))  # type: ignore[return-value]


def _colour(name: str) -> tuple[int, int, int]:
    fill = CATEGORIES[name][1]
    return int(fill[1:3], 16), int(fill[3:5], 16), int(fill[5:7], 16)


def _near(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return max(abs(p - q) for p, q in zip(a, b, strict=True)) <= 12


def _check_section(page: Any, shot: Path, gid: str, case: Case) -> dict[str, Any]:
    doc, g = case
    facts = page.evaluate(_FACTS, gid)
    assert facts["scripts"] == 0 and facts["verdict"] == doc["verdict"]
    items, L = facts["items"], g.num_leaves
    failing = {n["node"] for n in doc["nodes"] if n["result"] == "fail"}
    for v in range(L):
        assert f"{gid}-v{v}" in items, f"leaf {v} not drawn"
    for n in doc["nodes"]:
        item = items[f"{gid}-v{L + n['node']}"]
        # drawn, visible, inside the page, labelled with its op
        assert item["w"] > 20 and item["h"] > 10, item
        assert item["x"] >= 0 and item["x"] + item["w"] <= facts["width"], item
        assert n["op"] in item["text"]
        want = "mismatch" if n["node"] in failing else "exact"
        assert f"tl-{want}" in item["cls"].split()
        # and coloured so on screen: the fill just inside the box's left edge
        rgb = _pixel(shot, item["x"] + 6, item["y"] + item["h"] / 2)
        assert _near(rgb, _colour(want)), (n["node"], want, rgb)
    for ce in doc["counterexamples"]:
        node = items[f"{gid}-v{L + ce['node']}"]
        note = items[f"{gid}-note{L + ce['node']}"]
        # the note is beside its node: to its right, level with it
        assert note["x"] >= node["x"] + node["w"], (note, node)
        assert abs((note["y"] + note["h"] / 2) - (node["y"] + node["h"] / 2)) < max(
            note["h"], node["h"]
        )
        for key in ("element", "expected", "got"):
            assert ce[key] in note["text"], key
    assert [c["node"] for c in facts["ces"]] == [str(ce["node"]) for ce in doc["counterexamples"]]
    for shown, ce in zip(facts["ces"], doc["counterexamples"], strict=True):
        assert shown["h"] > 0  # rendered, and its text is what a person reads
        for key in ("check", "element", "expected", "got"):
            assert ce[key] in shown["text"], key
        for name, value in ce["inputs"].items():
            assert name in shown["text"] and value in shown["text"]
    return facts


def test_passing_graphs_in_the_browser(browser: Any, tmp_path: Path) -> None:
    cases = [passing("mlp_regression"), passing("softmax_classifier")]
    page, shot, elsewhere = _open(browser, render_html(cases), tmp_path, "passing")
    assert elsewhere == []
    for i, case in enumerate(cases):
        facts = _check_section(page, shot, f"g{i}", case)
        assert facts["ces"] == [] and not any(
            "tl-mismatch" in it["cls"] for it in facts["items"].values()
        )
    assert "tl-index" in page.evaluate("document.getElementById('g1-ix0').getAttribute('class')")
    page.close()


@pytest.mark.parametrize("graphviz", [True, False], ids=["graphviz", "builtin-layout"])
def test_failing_graph_in_the_browser(browser: Any, tmp_path: Path, graphviz: bool) -> None:
    case = wrong_rule()
    html = render_html([case], graphviz=graphviz)
    page, shot, elsewhere = _open(browser, html, tmp_path, "failing")
    assert elsewhere == []
    facts = _check_section(page, shot, "g0", case)
    assert len(facts["ces"]) == 2  # both linear nodes
    # clicking the failing node goes to its counterexample
    L = case[1].num_leaves
    page.click(f"#g0-v{L}")
    assert page.evaluate("location.hash") == "#g0-ce-0"
    page.close()
