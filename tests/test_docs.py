"""The documentation matches the code: the generated op reference is current, the README opens
with the two commands CI runs, code in the docs runs, and every limit, attribute kind, example
and link the docs mention exists."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

import torchlean_ir as tl
from torchlean_ir import cli
from torchlean_ir._attrs import ATTR_KINDS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_ops_md_is_generated_from_the_registry() -> None:
    pytest.importorskip("onnx")
    if (ROOT / "tests" / "test_op_torch.py").exists():
        pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("gen_ops", DOCS / "gen_ops.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert _read("docs/ops.md") == gen.generate(), "docs/ops.md is stale: run docs/gen_ops.py"
    for name in tl.all_ops():
        assert f"### `{name}`" in _read("docs/ops.md")


def test_readme_opens_with_the_two_commands() -> None:
    first, second = _read("README.md").splitlines()[:2]
    assert first.strip() == (
        "python3 -m pip install -e . && torchlean-verify examples/graphs/mlp_regression.json"
    )
    assert second.strip() == "python3 -m pip install -e '.[test]' && python3 -m pytest -n auto -q"
    assert _read(".ci/run").rstrip().splitlines()[-1] == second.strip()
    assert (ROOT / "examples" / "graphs" / "mlp_regression.json").is_file()
    scripts = tomllib.loads(_read("pyproject.toml"))["project"]["scripts"]
    # the scripts start in torchlean_cli (nothing heavy imported before an interrupt is handled)
    assert scripts["torchlean"] == "torchlean_cli:torchlean"
    assert scripts["torchlean-verify"] == "torchlean_cli:torchlean_verify"


def _run_python_blocks(text: str, where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (where / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(where)
    namespace: dict[str, object] = {"__name__": "__doc__"}  # shared, like a tutorial
    for k, code in enumerate(_blocks(text, "python")):
        exec(compile(code, f"<doc block {k}>", "exec"), namespace)


def test_index_quick_start_runs_and_shows_what_it_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _read("docs/index.md")
    _run_python_blocks(text, tmp_path, monkeypatch)
    printed = capsys.readouterr().out
    shown = text.split("`print(g)` shows:\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed.startswith(shown)
    assert "matmul(f32[2,4], f32[4]): needs two matrices, got f32[2,4] and f32[4], at" in printed


def test_index_check_line_is_true() -> None:
    line = "examples/graphs/mlp_regression.json: ok: " + cli.summary(
        tl.load(ROOT / "examples" / "graphs" / "mlp_regression.json")
    )
    assert f"```\n{line}\n```" in _read("docs/index.md")


def test_ir_format_examples_are_true(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _read("docs/ir-format.md")
    _run_python_blocks(text, tmp_path, monkeypatch)
    (example_json,) = _blocks(text, "json")[:1]
    path = ROOT / "examples" / "graphs" / "softmax_classifier.json"
    assert example_json == path.read_text()
    shown = text.split("Its text form", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    assert shown == tl.format_graph(tl.load(path)) + "\n"


def test_ir_format_lists_every_limit_and_attribute_kind() -> None:
    text = _read("docs/ir-format.md")
    for f in dataclasses.fields(tl.Limits):
        default = getattr(tl.DEFAULT_LIMITS, f.name)
        assert re.search(rf"\| `{f.name}` \| {default}\b", text), f.name
    for kind in ATTR_KINDS:
        assert re.search(rf"^\| `{kind}`", text, re.M) or f"`{kind}`" in text, kind
    assert re.search(rf"at most {tl.INLINE_LIMIT}\s+elements", text)
    assert f'"version": {tl.VERSION}' in text and tl.FORMAT in text


def test_architecture_names_every_dependency_and_plugin() -> None:
    text = _read("docs/architecture.md")
    project = tomllib.loads(_read("pyproject.toml"))["project"]
    names = [re.split(r"[<>=\[ ]", d)[0] for d in project["dependencies"]]
    names += [re.split(r"[<>=\[ ]", d)[0] for d in project["optional-dependencies"]["test"]]
    for name in names:
        assert re.search(rf"^\| [^|]*\b{re.escape(name)}\b", text, re.M), name
    for name, (module, _) in cli.PLUGINS.items():
        assert f"`{name}` maps to `{module}`" in text


def test_architecture_names_every_module_of_the_verifier() -> None:
    """The verifier's module table and layer diagram name every module it has, and only those."""
    text = _read("docs/architecture.md")
    section = text[text.index("## Verifier (`verify`)") : text.index("## Front end (`torchlean`)")]
    verify_dir = ROOT / "verify"
    modules = {p.stem for p in verify_dir.glob("*.py")} - {"__init__", "__main__"}
    for name in sorted(modules):
        assert f"`{name}`" in section or f"`{name}`," in section, name
        assert re.search(rf"(?<![\w.]){re.escape(name)}\b", section.split("| module |")[0]), name
    terms = {p.stem for p in (verify_dir / "terms").glob("*.py")} - {"__init__"}
    row = next(line for line in section.splitlines() if line.startswith("| `terms/` |"))
    for name in sorted(terms):
        assert f"`{name}`" in row, name
    prims = {p.stem for p in (verify_dir / "prims").glob("*.py")} - {"__init__"}
    row = next(line for line in section.splitlines() if line.startswith("| `prims/` |"))
    for name in sorted(prims):
        assert f"`{name}`" in row, name
        assert re.search(rf"(?<![\w.]){re.escape(name)}\b", section.split("| module |")[0]), name
    named = set(re.findall(r"^\| `(_?[a-z_0-9]+)`", section, re.M)) - {"terms/"}
    assert named <= modules, named - modules


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))])
def test_relative_links_resolve(doc: str) -> None:
    path = ROOT / doc if doc == "README.md" else DOCS / doc
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc}: broken link {target}"


def test_python_dash_m_entry_point_exists() -> None:
    assert (ROOT / "torchlean_ir" / "__main__.py").is_file()
    assert os.access(ROOT / ".ci" / "run", os.X_OK) or sys.platform == "win32"
