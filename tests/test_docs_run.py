"""The code in the docs runs: every ```python and ```bash block of ``docs/*.md``, and every
transcript (a plain block whose first line is ``$ command``) prints what the page shows.

A block that is not meant to run is marked by an HTML comment on the line before its fence,
``<!-- no-run: why -->``; :data:`NO_RUN` names every such block, so a new one is a decision made
here, not a silent skip. A no-run block that says it is ``an excerpt of FILE`` must be one: each
of its lines is in ``FILE``.

Some pages have a test of their own that runs their Python blocks (:data:`RUN_ELSEWHERE`); the
others run here, each page's blocks in order in one namespace, in a fresh process (a page may
register ops). Transcripts run in one ``bash`` per block (``echo $?`` sees the previous command)
with ``torchlean-verify`` and ``torchlean`` standing for ``python3 -m verify.cli`` and
``python3 -m torchlean_ir``; times (``1.04 s``) may differ, and a ``...`` line stands for any
lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: Pages whose Python blocks a test of their own runs (in order, in one namespace).
RUN_ELSEWHERE = {
    "compiler.md": "tests/compiler/test_docs.py",
    "interop.md": "tests/interop/test_docs.py",
    "tutorial.md": "tests/torchlean/test_tutorial.py",
    "index.md": "tests/test_docs.py",
    "ir-format.md": "tests/test_docs.py",
}

#: Every block marked ``<!-- no-run: ... -->``, as (page, its first line).
NO_RUN = [
    ("index.md", "python3 -m pip install -e . && torchlean check "
                 "examples/graphs/mlp_regression.json"),
    ("verification.md", "$ torchlean-verify slow.json --timeout 4 -q"),
    ("verification.md", '@pytest.mark.torchlean_graphs("examples/graphs/*.json")  # relative to '
                        "the rootdir"),
    ("verification.md", "$ python3 -m pytest -q examples/test_verify_ci.py"),
    ("interop.md", "$ torchlean import model.pt2 --report"),
    ("interop.md", "config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, "
                   "vocab_size=100, use_cache=False)"),
    ("interop.md", "$ torchlean import gpt2.pt2 -o g.json --params p.safetensors"),
]  # fmt: skip


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    no_run: str | None  # the reason, when marked

    @property
    def first(self) -> str:
        return self.code.splitlines()[0] if self.code else ""

    @property
    def transcript(self) -> bool:
        return self.lang == "" and self.first.startswith("$ ")


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    k = 0
    while k < len(lines):
        m = re.fullmatch(r"```(\w*)\s*", lines[k])
        if not m:
            k += 1
            continue
        end = next(j for j in range(k + 1, len(lines)) if lines[j].startswith("```"))
        before = lines[k - 1].strip() if k else ""
        mark = re.fullmatch(r"<!--\s*no-run:\s*(.*?)\s*-->", before)
        code = "\n".join(lines[k + 1 : end]) + "\n"
        out.append(Block(page.name, k + 1, m.group(1), code, mark.group(1) if mark else None))
        k = end + 1
    return out


PAGES = sorted(DOCS.glob("*.md"))
ALL = [b for p in PAGES for b in blocks(p)]


def test_every_unrunnable_block_is_marked_and_named() -> None:
    marked = [b for b in ALL if b.no_run is not None]
    assert sorted((b.page, b.first) for b in marked) == sorted(NO_RUN), [
        (b.page, b.line, b.first, b.no_run) for b in marked
    ]
    for b in marked:
        assert b.lang in ("python", "bash") or b.transcript, (b.page, b.line)
        m = re.match(r"an excerpt of (\S+)", b.no_run or "")
        if m:
            source = (ROOT / m.group(1)).read_text(encoding="utf-8")
            missing = [ln for ln in b.code.splitlines() if ln.strip() and ln not in source]
            assert not missing, (b.page, b.line, missing)


def test_pages_with_their_own_runner_name_it() -> None:
    for page, test in RUN_ELSEWHERE.items():
        assert (DOCS / page).exists(), page
        assert page in (ROOT / test).read_text(encoding="utf-8"), (page, test)


def _runnable(lang: str) -> dict[str, list[Block]]:
    by_page: dict[str, list[Block]] = {}
    for b in ALL:
        if b.lang == lang and b.no_run is None:
            by_page.setdefault(b.page, []).append(b)
    return by_page


PY_PAGES = {p: bs for p, bs in _runnable("python").items() if p not in RUN_ELSEWHERE}

RUNNER = """
import json, sys
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for where, code in blocks:
    exec(compile(code, where, "exec"), namespace)
print("ran", len(blocks))
"""


@pytest.mark.parametrize("page", sorted(PY_PAGES))
def test_python_blocks_run(page: str, tmp_path: Path) -> None:
    import json

    todo = [(f"docs/{b.page}:{b.line}", b.code) for b in PY_PAGES[page]]
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps(todo), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(spec)], cwd=ROOT, capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == f"ran {len(todo)}"


def test_verification_page_has_python_blocks_run_here() -> None:
    assert len(PY_PAGES.get("verification.md", [])) >= 3


SHIM = f"""
torchlean-verify() {{ {sys.executable} -m verify.cli "$@"; }}
torchlean() {{ {sys.executable} -m torchlean_ir "$@"; }}
"""


def _bash(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", SHIM + script], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="160"),
    )  # fmt: skip


BASH = [b for bs in _runnable("bash").values() for b in bs]


@pytest.mark.parametrize("block", BASH, ids=lambda b: f"{b.page}:{b.line}")
def test_bash_blocks_run(block: Block) -> None:
    proc = _bash("set -e\n" + block.code)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


TRANSCRIPTS = [b for b in ALL if b.transcript and b.no_run is None]
MARK = "\x1e--- next command ---"


def _normal(text: str) -> str:
    text = re.sub(r"\d+\.\d+ s\b", "<T> s", text)
    return "\n".join(ln.rstrip() for ln in text.strip("\n").splitlines())


def _matches(shown: str, got: str) -> bool:
    parts = [re.escape(ln) if ln != "..." else r"(?:[^\n]*\n)*?[^\n]*" for ln in shown.split("\n")]
    return re.fullmatch("\n".join(parts), got) is not None


@pytest.mark.parametrize("block", TRANSCRIPTS, ids=lambda b: f"{b.page}:{b.line}")
def test_transcripts_print_what_the_page_shows(block: Block) -> None:
    commands: list[str] = []
    shown: list[list[str]] = []
    for ln in block.code.splitlines():
        if ln.startswith("$ "):
            commands.append(ln[2:])
            shown.append([])
        else:
            shown[-1].append(ln)
    script = "".join(f"{c} 2>&1; __rc=$?; printf '%s\\n' '{MARK}'; (exit $__rc)\n"
                     for c in commands)  # fmt: skip
    proc = _bash(script)
    outputs = proc.stdout.split(MARK + "\n")[: len(commands)]
    assert len(outputs) == len(commands), proc.stdout + proc.stderr
    for cmd, want, got in zip(commands, shown, outputs, strict=True):
        w, g = _normal("\n".join(want)), _normal(got)
        assert _matches(w, g), f"$ {cmd}\n--- the page shows:\n{w}\n--- it prints:\n{g}"


def test_there_are_transcripts_to_check() -> None:
    assert sum(b.page == "verification.md" for b in TRANSCRIPTS) >= 4


def test_the_sampled_coverage_shown_is_the_element_levels() -> None:
    import torchlean_ir as tl
    import verify

    text = (DOCS / "verification.md").read_text(encoding="utf-8")
    shown = re.search(r'"coverage": "(W: 8 of 64 elements[^"]*)"', text)
    assert shown, "the large-tensors example is gone"
    g = tl.load(str(ROOT / "examples" / "graphs" / "mlp_regression.json"))
    report = verify.verify_graph(g, method="elements", max_elements=8)
    assert shown.group(1) in {c.coverage for c in report.all_checks}
