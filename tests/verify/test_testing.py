"""``verify.testing`` (plain functions) and the pytest plugin (fixtures, marker, options)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import torchlean_ir as tl
from verify.testing import (
    VerificationError,
    assert_compiled_matches_reference,
    assert_op_verifies,
    assert_verifies,
)

from .mutants import MUTANTS, applied

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,))
    label = b.index("label")
    h = b.linear(b.param("W", (4, 3)), b.param("b", (4,)), x).relu()
    return b.build(b.scale(b.gather_scalar_nat(b.log_softmax(h), label), c=-1.0))


def test_assert_verifies_returns_the_report() -> None:
    report = assert_verifies(_graph())
    assert report.verdict == "verified"


def test_assert_verifies_raises_with_the_counterexample() -> None:
    mutant = next(m for m in MUTANTS if m.name == "tape overwrites on fan-out")
    with applied(mutant), pytest.raises(VerificationError, match="counterexample") as info:
        assert_verifies(mutant.graph())
    assert info.value.report is not None and info.value.report.verdict == "mismatch"


def test_assert_op_verifies_on_shapes() -> None:
    assert assert_op_verifies("clamp", [(5,)], {"lo": -0.5, "hi": 0.5}).verdict == "verified"
    report = assert_op_verifies("gather_rows_nat", [(3, 2)], index=[(2, None)])
    assert report.verdict == "verified"
    # dtype is the graph's and the compiled functions' (float64 unless said)
    assert report.dtype == "float64"
    assert assert_op_verifies("tanh", [(3,)], dtype="f32").dtype == "float32"


def test_assert_compiled_matches_reference_numeric() -> None:
    assert_compiled_matches_reference(_graph(), samples=2)
    assert_compiled_matches_reference(_graph(), samples=1, dtype="f32")


def test_assert_compiled_matches_reference_catches_a_lowering_bug() -> None:
    mutant = next(m for m in MUTANTS if m.name == "tanh lowered vjp 1 - y")
    with applied(mutant), pytest.raises(AssertionError, match="gradient of x"):
        assert_compiled_matches_reference(mutant.graph(), samples=1)


PLUGIN_TEST = """
import importlib.util, os, pytest

@pytest.mark.torchlean_graphs("graphs/*.json")
def test_graph_is_proved(torchlean_graph, assert_verifies):
    assert assert_verifies(torchlean_graph).verdict == "verified"

@pytest.mark.torchlean_graphs("graphs/*.json")
def test_graph_compiles_to_the_reference(torchlean_graph, assert_compiled_matches_reference):
    assert_compiled_matches_reference(torchlean_graph, samples=1)

def test_op(assert_op_verifies):
    assert_op_verifies("tanh", [(3,)])

def test_wrong_custom_rule_is_reported(assert_verifies):
    from verify.testing import VerificationError
    spec = importlib.util.spec_from_file_location("wrong", os.environ["WRONG_PLUGIN"])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(VerificationError, match="vjp = adjoint"):
        assert_verifies(module.plugin.example_graph())
"""


def test_pytest_plugin_marker_and_fixtures(tmp_path: object) -> None:
    d = str(tmp_path)
    os.makedirs(os.path.join(d, "graphs"))
    tl.save(_graph(), os.path.join(d, "graphs", "classifier.json"))
    with open(os.path.join(d, "test_user.py"), "w") as f:
        f.write(textwrap.dedent(PLUGIN_TEST))
    shutil.copy(os.path.join(ROOT, "examples", "custom_op_plugin.py"), d)
    wrong = os.path.join(ROOT, "examples", "custom_op_plugin_wrong.py")
    env = dict(os.environ, PYTHONPATH=ROOT, WRONG_PLUGIN=wrong)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:torchlean_verify", "-p",
         "verify.pytest_plugin", "-p", "no:cacheprovider", "--rootdir", d, d,
         "--verify-jobs", "1"],
        capture_output=True, text=True, cwd=d, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout, proc.stdout
