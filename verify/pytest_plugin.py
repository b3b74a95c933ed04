"""A pytest plugin: fixtures and a marker for proving graphs in a test suite.

Enable it with ``-p verify.pytest_plugin`` (or ``pytest_plugins = ["verify.pytest_plugin"]`` in
a root ``conftest.py``); an installed torchlean-ir registers it automatically (entry point
``pytest11``). It provides:

* fixtures ``assert_verifies``, ``assert_op_verifies``, ``assert_vjp_correct`` and
  ``assert_compiled_matches_reference`` (the functions of :mod:`verify.testing`, with the
  command-line options below applied);
* the marker ``@pytest.mark.torchlean_graphs("examples/graphs/*.json", ...)``, which runs the
  test once per matching file (paths relative to the rootdir), with the loaded graph as the
  ``torchlean_graph`` argument;
* options ``--verify-jobs N`` and ``--verify-dtype f64|f32`` (default: each graph's own dtype,
  what ``compiler.compile(graph)`` runs).

Example, ready to copy::

    import pytest

    @pytest.mark.torchlean_graphs("examples/graphs/*.json")
    def test_graph_is_proved(torchlean_graph, assert_verifies):
        assert_verifies(torchlean_graph)
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("torchlean-verify")
    group.addoption("--verify-jobs", type=int, default=1, help="processes for verify checks")
    group.addoption("--verify-dtype", default=None, choices=("f64", "f32"),
                    help="compilation verified by the fixtures (default: the graph's own "
                         "dtype, what compiler.compile runs)")  # fmt: skip


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers",
        "torchlean_graphs(*patterns): run the test once per matching graph file, passed as "
        "the `torchlean_graph` argument",
    )


def pytest_generate_tests(metafunc: Any) -> None:
    marker = metafunc.definition.get_closest_marker("torchlean_graphs")
    if marker is None or "torchlean_graph" not in metafunc.fixturenames:
        return
    root = str(metafunc.config.rootpath)
    paths: list[str] = []
    for pattern in marker.args:
        full = pattern if os.path.isabs(pattern) else os.path.join(root, pattern)
        paths += sorted(glob.glob(full))
    if not paths:
        skip = pytest.mark.skip(reason=f"no graph file matches {list(marker.args)}")
        metafunc.parametrize("torchlean_graph", [pytest.param(None, marks=skip)], ids=["none"],
                             indirect=True)  # fmt: skip
        return
    ids = [os.path.basename(p) for p in paths]
    metafunc.parametrize("torchlean_graph", paths, ids=ids, indirect=True)


@pytest.fixture
def torchlean_graph(request: Any) -> Any:
    """The graph of the current ``torchlean_graphs`` file (a ``GraphData``)."""
    import torchlean_ir as tl

    path = getattr(request, "param", None)
    if path is None:
        pytest.skip("no graph file given (use the torchlean_graphs marker)")
    return tl.load(path)


def _options(config: Any) -> dict[str, Any]:
    return {"jobs": config.getoption("--verify-jobs"), "dtype": config.getoption("--verify-dtype")}


@pytest.fixture
def assert_verifies(request: Any) -> Callable[..., Any]:
    """:func:`verify.testing.assert_verifies` with the command-line options applied."""
    from .testing import assert_verifies as fn

    defaults = _options(request.config)

    def run(graph: Any, **options: Any) -> Any:
        return fn(graph, **{**defaults, **options})

    return run


@pytest.fixture
def assert_op_verifies(request: Any) -> Callable[..., Any]:
    """:func:`verify.testing.assert_op_verifies` with the command-line options applied."""
    from .testing import assert_op_verifies as fn

    jobs = request.config.getoption("--verify-jobs")

    def run(op: Any, arg_shapes: Any, attrs: Any = None, **options: Any) -> Any:
        return fn(op, arg_shapes, attrs, **{"jobs": jobs, **options})

    return run


@pytest.fixture
def assert_vjp_correct() -> Callable[..., Any]:
    """:func:`verify.testing.assert_vjp_correct`: ``assert_vjp_correct(f, *example_args)``."""
    from .testing import assert_vjp_correct as fn

    return fn


@pytest.fixture
def assert_compiled_matches_reference(request: Any) -> Callable[..., Any]:
    """:func:`verify.testing.assert_compiled_matches_reference` (dtype from the options)."""
    from .testing import assert_compiled_matches_reference as fn

    dtype = request.config.getoption("--verify-dtype")

    def run(graph: Any, **options: Any) -> Any:
        return fn(graph, **({"dtype": dtype} if dtype else {}), **options)

    return run
