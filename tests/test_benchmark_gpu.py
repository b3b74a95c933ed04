"""Smoke test of ``benchmarks/gpu.py`` (issue 29's GPU benchmark): its precision section runs end
to end at the ``--quick`` sizes on whatever device there is, and writes its markdown and its raw
numbers (finite) to ``--out``, leaving ``docs/benchmarks.md`` alone with ``--no-write``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("optax")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu.py"


def test_gpu_benchmark_quick_precision(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "benchmarks.md"
    before = doc.read_text() if doc.exists() else None
    cmd = [sys.executable, str(SCRIPT), "--quick", "--no-write", "--sections", "precision",
           "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "precision: done" in proc.stdout  # progress lines, flushed
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["meta"]["quick"] is True
    assert result["meta"]["pending"] == []
    raw = result["sections"]["precision"]
    assert "error" not in raw
    for label in ("ours, matmul_precision='float32' (default)", "hand-written jax.jit, default"):
        err = raw[label]["max_rel_err"]
        assert math.isfinite(err) and 0 <= err < 1e-3, (label, err)
    # ours at float32 is float32 on every platform: float32 rounding, not TF32
    assert raw["ours, matmul_precision='float32' (default)"]["max_rel_err"] < 1e-5
    torch_rows = [k for k in raw if k.startswith("PyTorch")]
    assert torch_rows and all(math.isfinite(raw[k]["max_rel_err"]) for k in torch_rows)
    assert math.isfinite(raw["reference_loss_f64"])
    md = (tmp_path / "gpu.md").read_text()
    assert md.startswith("<!-- BEGIN gpu -->") and md.rstrip().endswith("<!-- END gpu -->")
    assert "Precision of float32 gradients" in md and "| ours, matmul_precision" in md
    assert (doc.read_text() if doc.exists() else None) == before
