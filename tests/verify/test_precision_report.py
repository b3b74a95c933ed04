"""The report names the matmul precision of the artifact it checked, and a reduced one (the
compiler's opt-in fast modes) never carries the float32 statement."""

from __future__ import annotations

import json
import os

import pytest

import torchlean_ir as tl
import verify
from verify._f32 import NOTE
from verify.cli import main


def _graph() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (3,))
    W, bias = b.param("W", (2, 3)), b.param("b", (2,))
    return b.build(b.sum(b.linear(W, bias, x).tanh()))


def test_default_is_float32_with_the_float32_note() -> None:
    report = verify.verify_graph(_graph())
    assert report.verdict == "verified"
    assert report.matmul_precision == "float32"
    assert NOTE in report.notes
    assert report.to_json()["matmul_precision"] == "float32"
    assert "matmul precision float32" in str(report).splitlines()[0]


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_a_reduced_precision_drops_the_float32_statement(precision: str) -> None:
    report = verify.verify_graph(_graph(), matmul_precision=precision)
    assert report.verdict == "verified"  # the jaxprs are still equal in real arithmetic
    assert report.matmul_precision == precision
    assert NOTE not in report.notes
    (note,) = [n for n in report.notes if "reduced-precision" in n]
    assert f"matmul_precision={precision!r}" in note
    assert "no float32 statement covers this program" in note


def test_float64_has_no_float32_note_at_any_precision() -> None:
    report = verify.verify_graph(_graph(), dtype="f64", matmul_precision="tf32")
    assert not any("float32" in n for n in report.notes)


def test_a_bad_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="matmul_precision must be one of float32, tf32, bf16"):
        verify.verify_graph(_graph(), matmul_precision="tf16")


def test_command_line(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "g.json")
    tl.save(_graph(), path)
    out = os.path.join(str(tmp_path), "r.json")
    assert main([path, "--matmul-precision", "tf32", "--json", out, "-q"]) == 0
    with open(out) as f:
        assert json.load(f)["matmul_precision"] == "tf32"
    capsys.readouterr()
    assert main([path, "--matmul-precision", "fast"]) == 2  # usage error: exit 2, one line
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "invalid choice: 'fast'" in err[0]
