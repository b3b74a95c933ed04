"""docs/interop.md is true: its op tables are the library's (generated), and its worked example
runs and prints what the page shows."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "interop.md"


def test_interop_tables_are_generated_from_the_library() -> None:
    spec = importlib.util.spec_from_file_location("gen_interop", ROOT / "docs" / "gen_interop.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = DOC.read_text(encoding="utf-8")
    assert text == gen.generate(text), "docs/interop.md is stale: run docs/gen_interop.py"


def test_worked_example_runs_and_prints_what_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = DOC.read_text(encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__doc__"}
    blocks = re.findall(r"(<!-- no-run:[^\n]*-->\n)?```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    for k, (no_run, code) in enumerate(blocks):
        if not no_run:  # a block marked no-run is listed in tests/test_docs_run.py's NO_RUN
            exec(compile(code, f"<interop.md block {k}>", "exec"), namespace)
    shown = text.split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert capsys.readouterr().out.startswith(shown)
