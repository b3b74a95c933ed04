"""The mutation suite: every injected bug (rules, lowerings, tape wiring) is detected, with a
concrete counterexample, by the link it lives in; the CLI exits 1 on a few of them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import torchlean_ir as tl
import verify

from .mutants import MUTANTS, Mutant, applied

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LINK = {"rule": {"rule"}, "lowering": {"compiled"}, "tape": {"wiring", "compiled"}}


def test_there_are_at_least_twenty_mutants_of_each_kind_of_place() -> None:
    assert len(MUTANTS) >= 20
    assert {m.where for m in MUTANTS} == {"rule", "lowering", "tape"}


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_mutant_is_detected_with_a_counterexample(mutant: Mutant) -> None:
    graph = mutant.graph()
    with applied(mutant):
        report = verify.verify_graph(graph)
    assert report.verdict == "mismatch", str(report)
    assert report.exit_code == 1
    failed_links = {c.link for _, c in report.failures() if c.result == "fail"}
    assert failed_links & LINK[mutant.where], (mutant.where, failed_links)
    ce = report.counterexamples
    assert ce, "a mismatch must come with a counterexample"
    assert ce[0].expected != ce[0].got
    # restored: the same graph verifies again
    assert verify.verify_graph(graph).verdict == "verified"


CLI_MUTANTS = [
    "tanh vjp 0.05% scale error",
    "max tie sent all to one side",
    "gather lowered vjp clips indices",
    "tape overwrites on fan-out",
]


@pytest.mark.parametrize("name", CLI_MUTANTS)
def test_cli_exits_1_with_a_counterexample(name: str, tmp_path: object) -> None:
    mutant = next(m for m in MUTANTS if m.name == name)
    path = os.path.join(str(tmp_path), "g.json")
    tl.save(mutant.graph(), path)
    env = dict(os.environ, PYTHONPATH=ROOT, TORCHLEAN_MUTANT=name)
    plugin = os.path.join(ROOT, "tests", "verify", "mutant_plugin.py")
    proc = subprocess.run(
        [sys.executable, "-m", "verify.cli", path, "--plugin", plugin, "-q"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISMATCH" in proc.stdout and "counterexample:" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_dtype_only_slip_is_caught_in_that_dtype_only(dtype: str) -> None:
    """A lowering slip present only in one dtype's compilation: the default (the graph's own
    dtype, what ``compiler.compile`` runs) and ``dtype=`` that dtype catch it; the other
    dtype's compilation is right and verifies, so the default is what decides."""
    other = {"f32": "f64", "f64": "f32"}[dtype]
    m = next(m for m in MUTANTS if m.name.startswith(f"float{dtype[1:]}-only"))
    graph = m.graph()  # a graph in that dtype
    b = tl.GraphBuilder(other)
    in_other = b.build(b.sum(b.tanh(b.param("x", (3,))) * b.tanh(b.param("y", (3,)))))
    with applied(m):
        assert verify.verify_graph(graph).verdict == "mismatch"
        assert verify.verify_graph(in_other, dtype=dtype).verdict == "mismatch"
        assert verify.verify_graph(graph, dtype=other).verdict == "verified"
        assert verify.verify_graph(in_other).verdict == "verified"
