"""docs/tutorial.md runs: every ```python block, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", TUTORIAL.read_text(), flags=re.S | re.M)


def test_tutorial_has_code() -> None:
    assert len(_blocks()) >= 5


def test_tutorial_runs(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("verify")
    namespace: dict[str, object] = {"__name__": "tutorial"}
    for k, block in enumerate(_blocks()):
        try:
            exec(compile(block, f"{TUTORIAL}:block{k}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"tutorial block {k} failed: {type(e).__name__}: {e}") from e
    out = capsys.readouterr().out
    assert "needs two matrices" in out and "VERIFIED" in out
    assert "missing parameter" in out and "before the first op" in out
