"""Whole graphs: every op's graph and the example graphs verify (no false alarm), the report
says what was checked, and the wiring and end-to-end checks run where they should."""

from __future__ import annotations

import glob
import json
import os
from typing import Any

import numpy as np
import pytest

import torchlean_ir as tl
import verify

from ..op_cases import CASES, OpCase

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "graphs", "*.json")))


def _assert_verified(report: verify.Report) -> None:
    assert report.verdict == "verified", str(report)
    assert report.exit_code == 0
    for c in report.all_checks:
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how)


#: Float32 rows checked on every run (about 5 s together): every kind of float32 constant (an
#: attribute that is not a float32 value, constants inside a rule, random draws, a widened
#: lowering, attention's scale); the other rows in float32 are ``slow`` (CI runs them).
F32_SAMPLE = {
    "clamp[6]",
    "gelu[6]",
    "safe_log[6]",
    "layer_norm[2x4_4_4]",
    "log_softmax[2x4]",
    "bernoulli_mask[s]",
    "rand_uniform[]",
    "gather_vec_nat[3-oob]",
}


def _dtype_rows() -> list[Any]:
    rows = [pytest.param(c, "f64", id=f"{c.id}-f64") for c in CASES]
    for c in CASES:
        marks = () if c.id in F32_SAMPLE else (pytest.mark.slow,)
        rows.append(pytest.param(c, "f32", id=f"{c.id}-f32", marks=marks))
    return rows


def test_float32_sample_rows_exist() -> None:
    assert not F32_SAMPLE - {c.id for c in CASES}


@pytest.mark.parametrize("case,dtype", _dtype_rows())
def test_every_op_graph_verifies(case: OpCase, dtype: str) -> None:
    """No false alarm in either dtype: each row's graph in float64 and in float32 (checked in
    its own dtype, the default) verifies exactly, every check."""
    report = verify.verify_graph(case.graph(dtype))
    assert report.dtype == {"f64": "float64", "f32": "float32"}[dtype]
    _assert_verified(report)
    links = {c.link for c in report.all_checks}
    assert {"rule", "compiled", "wiring"} <= links


@pytest.mark.skipif(not EXAMPLES, reason="no examples/graphs/*.json in this checkout")
@pytest.mark.parametrize("path", EXAMPLES, ids=os.path.basename)
def test_example_graphs_verify(path: str) -> None:
    _assert_verified(verify.verify_graph(tl.load(path), name=path))


def _rich_graph() -> tl.GraphData:
    """Fan-out, detach, a runtime gather, a static gather, a frozen input, a dead node and two
    outputs: the wiring cases in one small graph."""
    b = tl.GraphBuilder("f64")
    W = b.param("W", (3, 2))
    x = b.input("x", (2,))  # requires_grad=False
    label = b.index("label")
    fixed = b.index("fixed", value=1)
    h = b.linear(W, b.param("b", (3,)), x).tanh()
    _dead = h.exp()  # reaches no output
    y = h * h + h.detach()
    picked = b.gather_scalar_nat(y, label)
    other = b.gather_scalar_nat(h, fixed)
    return b.build(picked * other, b.sum(y))


def test_rich_graph_verifies_with_wiring_and_end_to_end() -> None:
    report = verify.verify_graph(_rich_graph())
    _assert_verified(report)
    names = {c.name for c in report.graph_checks}
    assert {
        "forward wiring = reference",
        "jvp wiring = reference",
        "vjp wiring = reference",
    } <= names
    assert {"compiled vjp = reference vjp"} <= names  # small enough: end to end
    assert any("do not reach an output" in n for n in report.notes)


def test_end_to_end_is_skipped_for_large_graphs_and_said() -> None:
    b = tl.GraphBuilder("f64")
    h = b.input("x", (8,))
    for i in range(60):
        h = b.linear(b.param(f"W{i}", (8, 8)), b.param(f"b{i}", (8,)), h).tanh()
    report = verify.verify_graph(b.build(b.sum(h)))
    _assert_verified(report)
    assert not any(c.link == "end-to-end" for c in report.graph_checks)
    assert any("end-to-end symbolic check skipped" in n for n in report.notes)
    # 121 nodes, 3 distinct signatures: each checked once, the result shared
    assert len({n.signature for n in report.nodes}) == 3
    assert sum(n.shared_with is None for n in report.nodes) <= 6


def test_end_to_end_never_is_said_without_the_auto_limits() -> None:
    report = verify.verify_graph(_rich_graph(), end_to_end="never")
    _assert_verified(report)
    assert not any(c.link == "end-to-end" for c in report.graph_checks)
    (note,) = [n for n in report.notes if "end-to-end" in n]
    assert "never" in note and "auto" not in note and str(verify._verify.E2E_MAX_NODES) not in note


def test_float32_compilation_verifies_with_rounded_attributes() -> None:
    b = tl.GraphBuilder("f32")
    x = b.param("x", (3,))
    g = b.build(b.sum(b.scale(x.tanh(), c=0.1)))
    report = verify.verify_graph(g, dtype="f32", end_to_end="always")
    _assert_verified(report)
    assert any("float32" in n for n in report.notes)


def test_without_the_compiler_each_lowering_is_checked() -> None:
    report = verify.verify_graph(CASES[3].graph(), compiled=False)
    _assert_verified(report)
    assert {c.link for c in report.all_checks} == {"rule", "lowering"}
    # the plain-text report says so too (notes are part of it, as in the CLI's table)
    assert report.notes and all(f"note: {n}" in str(report) for n in report.notes)


def test_report_json_follows_the_documented_shape() -> None:
    report = verify.verify_graph(_rich_graph(), name="rich")
    doc = json.loads(report.dumps())
    assert doc["schema"] == "torchlean-verify-report" and doc["version"] == verify.SCHEMA_VERSION
    assert doc["verdict"] == "verified" and doc["exit_code"] == 0 and doc["graph"] == "rich"
    node = doc["nodes"][0]
    assert set(node) == {"node", "op", "signature", "result", "method", "label", "shared_with",
                         "checks"}  # fmt: skip
    check = node["checks"][0]
    assert set(check) == {"link", "name", "method", "level", "result", "coverage", "how",
                          "seconds", "counterexample"}  # fmt: skip
    assert check["level"] in ("tensor", "elements", "")
    assert doc["counterexamples"] == []


def test_caches_make_a_second_run_cheap() -> None:
    g = _rich_graph()
    verify.verify_graph(g)
    again = verify.verify_graph(g)
    assert again.verdict == "verified"
    assert again.seconds < 5


def test_jobs_run_checks_in_processes() -> None:
    verify.clear_caches()
    report = verify.verify_graph(CASES[10].graph(), jobs=2)
    _assert_verified(report)


def test_invalid_graph_is_a_torchlean_error() -> None:
    g = CASES[3].graph()
    bad = tl.GraphData(g.context, g.nodes, (99,))
    with pytest.raises(tl.TorchleanError):
        verify.verify_graph(bad)


def test_numbers_of_the_report_match_the_graph() -> None:
    g = _rich_graph()
    report = verify.verify_graph(g)
    assert [n.node for n in report.nodes] == list(range(len(g.nodes)))
    assert [n.op for n in report.nodes] == [n.op for n in g.nodes]
    assert np.all([n.result == "pass" for n in report.nodes])
