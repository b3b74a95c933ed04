"""The mutation suite: every injected bug (rules, lowerings, tape wiring) is detected, with a
concrete counterexample, by the link it lives in; the CLI exits 1 on a few of them. The
large-size mutants (past the element method's limit) are decided at tensor level, exactly, with
the wrong element named."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import torchlean_ir as tl
import verify

from .mutants import LARGE_MUTANTS, MUTANTS, LargeMutant, Mutant, applied

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


#: Large mutants the tensor level does not decide yet, with why: pinned (strict xfail), so the
#: test fails once the gap closes. Run under auto's small-signature budget (3 s per attempt; about
#: 100 s in all on the loaded 2-core machine) rather than the default 60 s (about 400 s, the
#: same verdict): a gap pinned, not a cost paid. A fix that decides it only with more than 3 s
#: per attempt still xfails here: take the entry off when the attention work lands.
LARGE_GAPS = {
    "attention lowered causal mask off by one in one row": (
        "multi_head_attention (n 128, d 768, 12 heads) is undecided at tensor level: compiled fwd "
        "'not proved at tensor level; no counterexample among 24 concrete elements' although row "
        "77 differs, jvp and vjp out of budget; the unmutated graph is undecided too"
    ),
}
GAP_BUDGET_S = 3.0


def _large_params() -> list:
    out = []
    for m in LARGE_MUTANTS:
        marks = []
        if m.name in LARGE_GAPS:
            marks = [pytest.mark.slow, pytest.mark.xfail(strict=True, reason=LARGE_GAPS[m.name])]
        out.append(pytest.param(m, id=m.name, marks=marks))
    return out


def test_large_mutants_are_past_the_element_method() -> None:
    from verify._rules import MAX_SYMBOLS
    from verify._sig import Signature

    for m in LARGE_MUTANTS:
        graph = m.graph()
        sizes = [
            sum(t.size for t in Signature.of(graph, j).arg_types) for j in range(len(graph.nodes))
        ]
        assert max(sizes) > MAX_SYMBOLS, m.name


@pytest.mark.parametrize("mutant", _large_params())
def test_large_mutant_is_caught_at_tensor_level_with_the_element_named(
    mutant: LargeMutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    if mutant.name in LARGE_GAPS:
        monkeypatch.setattr("verify._methods.TENSOR_BUDGET_S", GAP_BUDGET_S)
    graph = mutant.graph()
    with applied(mutant):
        report = verify.verify_graph(graph)
        twin = verify.verify_graph(mutant.twin()) if mutant.twin is not None else None
    assert report.verdict == "mismatch", report.summary()
    assert report.exit_code == 1
    failed = [c for _, c in report.failures() if c.result == "fail"]
    assert {c.link for c in failed} & LINK[mutant.where], [c.link for c in failed]
    for c in failed:  # decided at tensor level, exactly, at a named element
        assert (c.level, c.method) == ("tensor", "exact"), (c.name, c.label, c.how)
        assert c.counterexample is not None, c.name
        assert re.fullmatch(mutant.element, c.counterexample.element), c.counterexample.element
        assert c.counterexample.expected != c.counterexample.got
    if twin is not None:  # where the bug does not show, the same bug verifies
        assert twin.verdict == "verified", twin.summary()
    # restored: the same graph verifies again (no false alarm at this size)
    clean = verify.verify_graph(graph)
    assert clean.verdict == "verified", clean.summary()


CLI_MUTANTS = [
    "tanh vjp 0.05% scale error",
    "max tie sent all to one side",
    "gather lowered vjp clips indices",
    "tape overwrites on fan-out",
    "matmul lowered vjp drops the last row",
]


@pytest.mark.parametrize("name", CLI_MUTANTS)
def test_cli_exits_1_with_a_counterexample(name: str, tmp_path: object) -> None:
    mutant = next(m for m in [*MUTANTS, *LARGE_MUTANTS] if m.name == name)
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
