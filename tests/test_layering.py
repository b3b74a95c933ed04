"""Imports flow one way: ``torchlean_ir`` <- ``compiler`` <- ``verify`` <- ``torchlean``.

Each package is imported in a fresh interpreter with the packages above it blocked (a meta-path
finder that raises), and every import statement of every module, those inside functions
included, is read statically: a lower package never names a higher one. Inside
``torchlean_ir`` and inside ``verify`` no two modules import each other, directly or around a
longer circle (imports inside functions count; imports under ``if TYPE_CHECKING:`` are for
annotations only and are not counted).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Bottom-up: each package may import only the ones before it.
LAYERS = ("torchlean_ir", "compiler", "verify", "torchlean")

_BLOCKED_IMPORT = """
import importlib, pkgutil, sys

BLOCKED = {blocked!r}

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"layering: {{name}} imported while importing {package}")
        return None

sys.meta_path.insert(0, Block())
package = importlib.import_module({package!r})
for info in pkgutil.walk_packages(package.__path__, {package!r} + "."):
    if not info.name.endswith(".__main__"):
        importlib.import_module(info.name)
{exercise}
print("imported", len([m for m in sys.modules if m.split(".")[0] == {package!r}]))
"""

#: A little real work per package, so that imports made at run time are exercised too.
_EXERCISE = {
    "torchlean_ir": """
import numpy as np
import torchlean_ir as tl
b = tl.GraphBuilder("f64")
W, x = b.param("W", (2, 3)), b.input("x", (3,))
g = b.build(b.sum(b.tanh(b.matmul(W, b.reshape(x, shape=(3, 1))))))
tl.check(tl.loads(tl.dumps(g)))
assert tl.parse_graph(tl.format_graph(g)) == g and len(g.content_hash) == 64
tl.backprop_ctx(g, {"W": np.ones((2, 3)), "x": np.arange(3.0)})
from torchlean_ir import cli
assert cli.main(["check", "/nonexistent.json"]) == 2
""",
    "compiler": """
import numpy as np
import compiler
import torchlean_ir as tl
b = tl.GraphBuilder("f64")
W, x = b.param("W", (2, 3)), b.input("x", (3,))
g = b.build(b.sum(b.tanh(b.matmul(W, b.reshape(x, shape=(3, 1))))))
cg = compiler.compile(g)
cg.value_and_grad({"W": np.ones((2, 3)), "x": np.arange(3.0)})
cg.batched(over=("x",), grads="mean").backward({"W": np.ones((2, 3)), "x": np.ones((4, 3))})
""",
    "verify": """
import torchlean_ir as tl
import verify
b = tl.GraphBuilder("f64")
x = b.param("x", (2,))
assert verify.verify_graph(b.build(b.sum(b.tanh(x)))).verdict == "verified"
""",
    "torchlean": "",
}


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_imports_without_the_layers_above(package: str) -> None:
    blocked = set(LAYERS[LAYERS.index(package) + 1 :])
    code = _BLOCKED_IMPORT.format(blocked=blocked, package=package, exercise=_EXERCISE[package])
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("imported "), r.stdout


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (``pkg.sub.__init__`` as ``pkg.sub``)."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    module: str, path: Path, *, type_checking: bool, known: frozenset[str] = frozenset()
) -> list[tuple[int, str, bool]]:
    """``(line, absolute module name, under TYPE_CHECKING)`` of every import statement anywhere
    in the file (function bodies included); ``from X import a`` also yields ``X.a``, which is a
    module when ``a`` is a submodule, and yields ``X`` itself unless ``X`` is a package and
    every ``X.a`` is one of the ``known`` modules (``from . import _random`` needs the
    submodule, not what the package's ``__init__`` imports)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    package_parts = module.split(".") if is_pkg else module.split(".")[:-1]
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, guarded)
            return
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name, guarded) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            subs = [f"{name}.{a.name}" for a in node.names]
            if node.module or not all(m in known for m in subs):
                found.append((node.lineno, name, guarded))
            found.extend((node.lineno, m, guarded) for m in subs)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    return [f for f in found if type_checking or not f[2]]


def test_no_module_of_a_lower_package_imports_a_higher_one() -> None:
    bad = []
    for k, package in enumerate(LAYERS):
        above = set(LAYERS[k + 1 :])
        for module, path in _modules(package).items():
            for line, name, _ in _imports(module, path, type_checking=True):
                if name.split(".")[0] in above:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert not bad, "\n".join(bad)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1 on the stack, 2 done
    for start in sorted(edges):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(edges[start])))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                path = [n for n, _ in stack]
                return [*path[path.index(nxt) :], nxt]
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(sorted(edges[nxt]))))
    return None


def _edges(package: str) -> dict[str, set[str]]:
    modules = _modules(package)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for _, name, _ in _imports(module, path, type_checking=False, known=frozenset(modules)):
            if name in modules and name != module:
                edges[module].add(name)
    return edges


@pytest.mark.parametrize("package", ["torchlean_ir", "verify"])
def test_no_import_circle_inside_a_package(package: str) -> None:
    """Imports inside function bodies count: a circle hidden by a lazy import is a circle."""
    edges = _edges(package)
    assert _cycle(edges) is None, " -> ".join(_cycle(edges) or [])


def test_the_edges_are_read() -> None:
    """The checks above see real edges (function-level imports and subpackages included)."""
    assert _edges("torchlean_ir")["torchlean_ir._graph"] >= {
        "torchlean_ir._encode",
        "torchlean_ir._printer",
    }
    verify_edges = _edges("verify")
    assert "verify._verify" in verify_edges["verify.cli"]  # a function-level import
    assert verify_edges["verify.terms.signs"] >= {"verify.terms.grid", "verify.terms.smt"}
    assert "verify.terms" in verify_edges["verify._tdecide"]


#: The only modules of ``verify`` that import its own modules inside functions, each to keep a
#: start-up light: the command line (its ``--help`` and usage errors), the pytest plugin (loaded
#: by every pytest run) and the helpers it loads on first use.
LAZY_BY_DESIGN = {"verify.cli", "verify.pytest_plugin", "verify.testing"}


def test_verify_imports_its_modules_at_the_top() -> None:
    """An import inside a function is how the old circles were hidden; outside the start-up
    paths above, every module of ``verify`` names what it needs at the top."""
    modules = _modules("verify")
    bad = []
    for module, path in modules.items():
        if module in LAZY_BY_DESIGN:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and node.level:
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, "imports of verify's own modules inside functions: " + ", ".join(bad)


def test_the_circle_finder_finds_circles() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _private_names(source: str, package: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every import in ``source`` (a module of ``package``) of another of
    the project's packages' private modules or private names (``torchlean_ir._types``,
    ``from compiler import _rules``, ``from torchlean_ir import _REGISTRY``)."""
    others = set(LAYERS) - {package}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] in others and any(p.startswith("_") for p in parts[1:]):
                found.append((node.lineno, name))
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_a_package_uses_only_the_public_names_of_the_others(package: str) -> None:
    """The layers above take what they need from the public modules below (the user API,
    ``torchlean_ir.extend``, ``torchlean_ir.backends``, ``torchlean_ir.interop``,
    ``compiler.extend``), never from a private module, so that each package may reorganise its
    private modules freely."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in _modules(package).values()
        for line, name in _private_names(path.read_text(encoding="utf-8"), package)
    ]
    assert not bad, "\n".join(bad)


def test_the_private_name_finder_finds_them() -> None:
    def found(source: str) -> list[str]:
        return [name for _, name in _private_names(source, "torchlean")]

    assert found("from torchlean_ir._types import as_shape") == [
        "torchlean_ir._types",
        "torchlean_ir._types.as_shape",
    ]
    assert found("import compiler._rules") == ["compiler._rules"]
    assert found("def f():\n    from torchlean_ir import _REGISTRY") == ["torchlean_ir._REGISTRY"]
    assert found("from torchlean_ir.extend import as_shape") == []
    assert found("from torchlean import _ops") == []  # its own package
