"""Deep graphs: a 100,000-node chain builds, checks, hashes, prints, parses, saves and loads with
no recursion proportional to the graph (it all runs under a recursion limit of the current stack
depth plus 150). Timings are for ``benchmarks/ir_scale.py``, not for tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import torchlean_ir as tl

N = 100_000


def _depth() -> int:
    frame, depth = sys._getframe(), 0
    while frame is not None:
        frame, depth = frame.f_back, depth + 1  # type: ignore[assignment]
    return depth


@contextmanager
def shallow_stack(extra: int = 150) -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + extra)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def chain(n: int) -> tl.GraphData:
    b = tl.GraphBuilder()
    h = b.input("x", (4,))
    ops = ("tanh", "relu", "sigmoid", "exp")
    for k in range(n):
        h = b.apply(ops[k % 4], h)
    return b.build(b.sum(h))


@pytest.mark.slow  # about 10 s of CPU; CI runs it
def test_100k_node_chain(tmp_path: Path) -> None:
    with shallow_stack():
        g = chain(N)
        assert len(g.nodes) == N + 1
        tl.check(g)
        digest = g.content_hash
        text = tl.format_graph(g)
        assert text.count("\n") == N + 3
        assert tl.parse_graph(text) == g
        path = tmp_path / "chain.json"
        tl.save(g, path)
        back = tl.load(path)
        assert back == g
        assert back.content_hash == digest


def test_limits_refuse_a_large_graph_early() -> None:
    g = chain(2_000)
    text = tl.dumps(g)
    try:
        tl.loads(text, limits=tl.Limits(max_nodes=1_000))
    except tl.GraphFormatError as e:
        assert str(e) == "$.nodes: 2001 nodes exceed the limit 1000"
    else:
        raise AssertionError("the node limit was not enforced")
