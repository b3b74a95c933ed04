"""``benchmarks/interop_models.py`` (issue 26's corpus benchmark): its smoke run on the smallest
model (ViT, ``--quick``: one import, 3 Adam steps, the verifier in a fresh process) writes its
raw figures to ``--out`` and leaves the documents alone with ``--no-write``; its table writer
replaces only the part of ``docs/interop.md`` between its markers, and the committed page has
the table of all six models."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "interop_models.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("interop_models", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["interop_models"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_quick_run_on_the_smallest_model(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    docs = [ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "interop.md"]
    before = [p.read_text() for p in docs]
    cmd = [sys.executable, str(SCRIPT), "--models", "vit", "--quick", "--no-write",
           "--out", str(tmp_path)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    raw = json.loads((tmp_path / "interop_models.json").read_text())
    assert raw["quick"] is True and raw["machine"]
    (vit,) = raw["models"]
    assert vit["name"] == "vit" and vit["error"] == ""
    assert vit["nodes"] > 50 and vit["params"] > 10_000 and vit["import_s"] > 0
    assert vit["forward_err"] < 1e-5 and vit["grad_err"] < 1e-4
    assert vit["verdict"] == "verified" and vit["checks"] == vit["exact"] > 0
    assert vit["steps"] == 3 and vit["train_err"] < 1e-4
    assert "| `ViTForImageClassification`" in proc.stdout  # the table, printed
    assert [p.read_text() for p in docs] == before


def test_table_writer_replaces_only_its_section() -> None:
    m = _script()
    r = m.Result("vit", m.TITLES["vit"], params=81226, nodes=106, import_s=0.25,
                 import_runs=[0.25], forward_err=3e-7, grad_err=6e-7, verdict="verified",
                 checks=185, exact=185, verify_s=4.7, lr=1e-3, steps=20, train_err=2e-7,
                 loss_first=2.39, loss_last=0.5)  # fmt: skip
    refused = m.Result("bert", m.TITLES["bert"], error="InteropError: from_torch: node x")
    text = f"intro\n{m.BEGIN}\nold table\n{m.END}\noutro\n"
    out = m.write_interop(text, [r, refused], "2026-11-27")
    assert out.startswith(f"intro\n{m.BEGIN}\n") and out.endswith(f"{m.END}\noutro\n")
    assert "old table" not in out and "2026-11-27" in out
    assert (
        "| `ViTForImageClassification` (2 x 64, 8x8 patches) | 0.2 s, 106 nodes, 81.2k "
        "parameters | 3e-07 | 6e-07 | VERIFIED: 185 / 185 exact, 5 s | 20 steps (lr 0.001), "
        "loss 2.39 to 0.5, within 2e-07 |" in out
    )
    assert "**refused**: InteropError: from_torch: node x" in out
    assert m.write_interop(out, [r], "2026-11-27").count(m.BEGIN) == 1  # idempotent markers
    with pytest.raises(ValueError, match="no"):
        m.write_interop("no markers", [r], "2026-11-27")


def test_interop_page_has_the_corpus_table() -> None:
    m = _script()
    text = (ROOT / "docs" / "interop.md").read_text(encoding="utf-8")
    section = text.split(m.BEGIN, 1)[1].split(m.END, 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| `")]
    assert [ln.split(" |", 1)[0] for ln in rows] == [f"| {t}" for t in m.TITLES.values()]
    assert all("VERIFIED" in ln for ln in rows), rows
