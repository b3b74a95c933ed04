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
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean_ir as tl
import verify

from .mutants import (
    BELOW_FLOATS,
    LARGE_MUTANTS,
    MUTANTS,
    SOFTMAX_LAST_ROW,
    LargeMutant,
    Mutant,
    applied,
    index_mutant,
    index_vector_mutant,
)

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
#: test fails once the gap closes. Run under auto's small-signature budget (3 s per attempt)
#: rather than the default 60 s: a gap pinned, not a cost paid. (Empty: the attention mask
#: mutant, the last entry, is refuted by certified interval arithmetic, verify/_tnumeric.py.)
LARGE_GAPS: dict[str, str] = {}
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
        monkeypatch.setattr("verify._attempt.TENSOR_BUDGET_S", GAP_BUDGET_S)
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


def test_the_search_writes_out_only_the_elements_it_looks_at(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The counterexample search writes an element out (a 1024-term sum at each) only when it
    comes to probe it: the first wrong element ends the search, rather than every one of the
    candidates written out first (once 48 here, seconds on large sums)."""
    import verify._tcounterexample as D
    import verify.terms as T

    written: list[int] = []
    concretize = T.concretize

    def counting(*args: object, **kwargs: object) -> object:
        written.append(1)
        return concretize(*args, **kwargs)

    monkeypatch.setattr(T, "concretize", counting)
    mutant = next(m for m in LARGE_MUTANTS if m.name == "matmul lowered vjp drops the last row")
    with applied(mutant):
        report = verify.verify_graph(mutant.graph())
    assert report.verdict == "mismatch", report.summary()
    assert [c.result for _, c in report.failures()] == ["fail"]
    assert 0 < len(written) // 2 < D.MAX_POINTS  # two terms per element written out


@settings(max_examples=3, deadline=None)
@given(st.integers(3, 2**31 - 1))
def test_a_rule_wrong_at_one_value_of_a_runtime_index_vector_is_caught(value: int) -> None:
    """The value is one the rule's own bracket ``[idx(p) == value]`` singles out: the search
    solves the bracket for it (:func:`verify._tnatvec.bracket_values`) rather than hoping to
    sample it (once undecided: "no counterexample among 3 concrete elements")."""
    m = index_vector_mutant(value)
    with applied(m):
        report = verify.verify_graph(m.graph(), method="tensor")
    assert (report.verdict, report.exit_code) == ("mismatch", 1), str(report)
    (ce,) = report.counterexamples
    assert str(value) in ce.inputs["index idx"], ce.describe()
    assert ce.expected != ce.got


@pytest.mark.parametrize("method", ["tensor", "elements"])
def test_an_error_below_every_float_is_refuted_exactly(method: str) -> None:
    """A difference of about 1e-300 at every point is no difference at 256 bits; enclosed again
    at 4096 bits it is certainly nonzero (once "probabilistic" / undecided)."""
    with applied(BELOW_FLOATS):
        report = verify.verify_graph(BELOW_FLOATS.graph(), method=method)
    assert (report.verdict, report.exit_code) == ("mismatch", 1), str(report)
    ((_, check),) = report.failures()
    assert (check.name, check.method, check.level) == ("vjp = adjoint", "exact", method)
    evidence = report.counterexamples[0].evidence
    assert "interval arithmetic at 4096 bits" in evidence, evidence
    assert re.search(r"difference in \[-?[0-9.]+e-30[0-9],", evidence), evidence


def test_a_large_softmax_wrong_in_its_last_row_is_refuted_within_a_minute() -> None:
    """Each candidate element is probed at random points before any is decided in full (a proof
    attempt on a true element of a 128-wide row once ran past 10 minutes), and a large
    difference is enclosed side by side, not expanded. ``timeout`` bounds the run: past it the
    verdict would be undecided."""
    with applied(SOFTMAX_LAST_ROW):
        report = verify.verify_graph(SOFTMAX_LAST_ROW.graph(), timeout=60)
    assert (report.verdict, report.exit_code) == ("mismatch", 1), str(report)
    ((_, check),) = report.failures()
    assert (check.name, check.method) == ("vjp = adjoint", "exact"), check
    assert re.fullmatch(r"grad x\[127,\d+\]", report.counterexamples[0].element)
    assert verify.verify_graph(SOFTMAX_LAST_ROW.graph()).verdict == "verified"


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


# -- a rule wrong at one index value, the value drawn by hypothesis ------------------------------

N = 6  # the gathered vector's length: values 0..5 are in range


def _caught_at(m: Mutant, value: int) -> None:
    with applied(m):
        report = verify.verify_graph(m.graph())
    assert (report.verdict, report.exit_code) == ("mismatch", 1), str(report)
    ce = report.counterexamples[0]
    assert ce.inputs.get("index i") == str(value), ce.describe()


@settings(max_examples=3, deadline=None)
@given(st.integers(1, N - 1))
def test_a_rule_wrong_at_one_in_range_runtime_index_is_caught(value: int) -> None:
    _caught_at(index_mutant(value, n=N), value)


@settings(max_examples=3, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_a_rule_wrong_at_its_static_index_value_is_caught(value: int) -> None:
    if value == 0:  # in range at 0 the mutant sends x[0]'s cotangent to x[0]: not a bug
        value = N
    _caught_at(index_mutant(value, n=N, static=True), value)


@settings(max_examples=3, deadline=None)
@given(st.integers(N + 1, 2**31 - 1))
def test_a_rule_wrong_at_one_far_runtime_index_is_caught(value: int) -> None:
    """A VJP wrong only at one runtime index value past ``N`` (it sends that value's cotangent
    to row 0; an out-of-range value should send nothing), drawn anywhere in the int32 range:
    the tensor level quantifies the index, splits on the equality ``i == value`` the rule tests
    and names the value in the counterexample (once a pinned gap: undecided)."""
    _caught_at(index_mutant(value, n=N), value)
