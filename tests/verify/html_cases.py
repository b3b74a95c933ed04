"""Reports the HTML tests render: passing example graphs, a wrong rule (a node fails, with a
counterexample) and a wrong tape (a graph-level wiring check fails), each as its JSON document
and graph; plus a small DOM reader for the pages (stdlib ``html.parser``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import torchlean_ir as tl
import verify

from .mutants import MUTANTS, applied

ROOT = Path(__file__).resolve().parents[2]
GRAPHS = ROOT / "examples" / "graphs"

Case = tuple[dict[str, Any], tl.GraphData]


def _doc(report: verify.Report) -> dict[str, Any]:
    return json.loads(report.dumps())  # exactly what --json writes


@cache
def passing(name: str) -> Case:
    g = tl.load(GRAPHS / f"{name}.json")
    report = verify.verify_graph(g, name=f"examples/graphs/{name}.json")
    assert report.verdict == "verified"
    return _doc(report), g


@cache
def wrong_rule() -> Case:
    """mlp_regression.json with linear's VJP doubling the bias gradient: both linear nodes
    fail ``vjp = adjoint``, each with a counterexample."""
    g = tl.load(GRAPHS / "mlp_regression.json")
    mutant = next(m for m in MUTANTS if m.name == "linear vjp bias gradient doubled")
    with applied(mutant):
        report = verify.verify_graph(g, name="mlp_regression.json (wrong linear vjp)")
    assert report.verdict == "mismatch"
    return _doc(report), g


@cache
def wrong_tape() -> Case:
    """A fan-out graph whose tape overwrites instead of summing: a wiring check fails."""
    mutant = next(m for m in MUTANTS if m.name == "tape overwrites on fan-out")
    g = mutant.graph()
    with applied(mutant):
        report = verify.verify_graph(g, name="fan-out (tape overwrites)")
    assert report.verdict == "mismatch"
    return _doc(report), g


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    @property
    def content(self) -> str:
        return " ".join("".join(self.text).split())


class Page(HTMLParser):
    """The elements of a page by id (each with its text content), and every tag seen."""

    VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "source", "col", "wbr"})

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.by_id: dict[str, Element] = {}
        self.tags: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self.tags.append(el)
        if "id" in el.attrs:
            assert el.attrs["id"] not in self.by_id, f"duplicate id {el.attrs['id']}"
            self.by_id[el.attrs["id"]] = el
        if tag not in self.VOID:
            self._open.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self._open.pop()

    def handle_endtag(self, tag: str) -> None:
        for k in range(len(self._open) - 1, -1, -1):
            if self._open[k].tag == tag:
                del self._open[k:]
                break

    def handle_data(self, data: str) -> None:
        for el in self._open:
            el.text.append(data)
