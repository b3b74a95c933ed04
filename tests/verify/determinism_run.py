"""One process's reports for :mod:`tests.verify.test_determinism` (run as a fresh subprocess).

``python -m tests.verify.determinism_run ORDER RENAME`` verifies the cases named in ``ORDER``
(comma-separated, in that order; a case may be a warm-up that is verified and not reported) with
every leaf renamed when ``RENAME`` is ``1``, and prints one JSON object: each reported case's
report, normalised (timings dropped, renamed leaves named back).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torchlean_ir as tl
import verify

from .mutants import MUTANTS, applied

ROOT = Path(__file__).resolve().parents[2]

#: The prefix of renamed leaves (it sorts after every name the cases use).
PREFIX = "z"


def _example(name: str) -> Callable[[], tl.GraphData]:
    return lambda: tl.load(str(ROOT / "examples" / "graphs" / f"{name}.json"))


def _mutant(name: str) -> tuple[Callable[[], tl.GraphData], Callable[[], Any]]:
    m = next(m for m in MUTANTS if m.name == name)
    return m.graph, lambda: applied(m)


#: name -> (graph, context the verification runs in)
CASES: dict[str, tuple[Callable[[], tl.GraphData], Callable[[], AbstractContextManager]]] = {
    "mlp": (_example("mlp_regression"), nullcontext),
    "softmax": (_example("softmax_classifier"), nullcontext),
    "attention": (_example("attention_block"), nullcontext),
    **{
        key: _mutant(name)
        for key, name in {
            "mutant-slice": "slice vjp off by one",
            "mutant-mse": "mse_loss vjp missing factor 2",
            "mutant-max-tie": "max tie sent all to one side",
            "mutant-gather": "gradient to an out-of-range gather index",
            "mutant-softmax": "softmax jvp over the wrong axis",
            "mutant-conv": "conv2d lowered vjp sums the bias gradient over channels",
        }.items()
    },
}


def renamed(graph: tl.GraphData) -> tuple[tl.GraphData, dict[str, str]]:
    """``graph`` with every leaf and index input renamed so that their order by name is
    reversed (the first name sorts last: ``x`` -> ``zz_x``, ``y`` -> ``zy_y``, ...), and the
    map back."""
    doc = json.loads(tl.dumps(graph))
    entries = [*doc["leaves"], *doc.get("index_inputs", [])]
    back = {}
    for rank, entry in enumerate(sorted(entries, key=lambda e: e["name"])):
        new = f"{PREFIX}{chr(ord('z') - rank)}_{entry['name'].replace('.', '_')}"
        back[new] = entry["name"]
        entry["name"] = new
    return tl.loads(json.dumps(doc)), back


def _named_back(value: Any, back: dict[str, str]) -> Any:
    if isinstance(value, str):
        for new in sorted(back, key=len, reverse=True):
            value = value.replace(new, back[new])
        return value
    if isinstance(value, list):
        return [_named_back(v, back) for v in value]
    if isinstance(value, dict):
        return {_named_back(k, back): _named_back(v, back) for k, v in value.items()}
    return value


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if k not in ("seconds", "elapsed", "time")}  # fmt: skip
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def run(order: list[str], rename: bool) -> Iterator[tuple[str, Any]]:
    for key in order:
        warmup = key.startswith("warmup:")
        graph_fn, context = CASES[key.removeprefix("warmup:")]
        graph, back = renamed(graph_fn()) if rename else (graph_fn(), {})
        with context():
            report = verify.verify_graph(graph)
        if not warmup:
            yield key, _named_back(_without_timings(report.to_json()), back)


if __name__ == "__main__":
    order, rename = sys.argv[1].split(","), sys.argv[2] == "1"
    print(json.dumps(dict(run(order, rename)), sort_keys=True))
