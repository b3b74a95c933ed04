"""``docs/compiler.md`` is executed: its Python blocks run in order in one namespace, in a fresh
process (one block changes JAX's global configuration: the persistent compilation cache)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compiler.md"

RUNNER = """
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"```python\\n(.*?)```", text, flags=re.S)
assert len(blocks) >= 8, len(blocks)
namespace = {}
for k, code in enumerate(blocks):
    code = code.replace("/tmp/torchlean-jax-cache", sys.argv[2])
    exec(compile(code, f"compiler.md[block {k}]", "exec"), namespace)
print("ok", len(blocks))
"""


def test_compiler_doc_examples_run(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(DOC), str(tmp_path / "cache")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].startswith("ok ")
