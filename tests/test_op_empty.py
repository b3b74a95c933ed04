"""Every op on empty tensors: a graph that checks evaluates, back-propagates and compiles.

Each op-table row is re-run with one dimension of one argument set to 0 (and the same dimension
of its same-shaped partners); where the shape rule accepts it, the reference forward, backprop
and the compiled value-and-VJP must run (they used to fail for softmax and log_softmax over an
empty last axis and the gathers from an empty axis: a graph that loads but cannot evaluate).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchlean_ir as tl

from .op_cases import CASES, OpCase

compiler = pytest.importorskip("compiler")


def _empty_variants() -> list[tuple[OpCase, list[tuple[int, ...]]]]:
    out: dict[tuple[Any, ...], tuple[OpCase, list[tuple[int, ...]]]] = {}
    for case in CASES:
        for ai, s in enumerate(case.shapes):
            for di in range(len(s)):
                zero = tuple(0 if k == di else d for k, d in enumerate(s))
                for shapes in (
                    [zero if k == ai else t for k, t in enumerate(case.shapes)],
                    [zero if t == s else t for t in case.shapes],
                ):
                    key = (case.op, tuple(shapes), repr(case.attrs), repr(case.index))
                    out.setdefault(key, (case, shapes))
    return list(out.values())


def _graph(case: OpCase, shapes: list[tuple[int, ...]]) -> tuple[tl.GraphData, tl.Var] | None:
    b = tl.GraphBuilder("f64")
    xs = [b.input(f"a{i}", s, requires_grad=True) for i, s in enumerate(shapes)]
    ixs = [b.index(f"i{k}", size) for k, (size, _) in enumerate(case.index)]
    try:
        y = b.apply(case.op, *xs, *ixs, **case.attrs)
    except tl.TorchleanError:
        return None  # the shape rule refuses it: fine
    return b.build(y), y


VARIANTS = [(c, s) for c, s in _empty_variants() if _graph(c, s) is not None]


@pytest.mark.parametrize(("case", "shapes"), VARIANTS, ids=[f"{c.id}-{s}" for c, s in VARIANTS])
def test_empty_tensors_evaluate_and_compile(case: OpCase, shapes: list[tuple[int, ...]]) -> None:
    built = _graph(case, shapes)
    assert built is not None
    g, y = built
    leaves = {f"a{i}": np.ones(s) for i, s in enumerate(shapes)}
    index = case.index_values()
    ct = np.ones(y.shape)
    out = tl.eval_graph(g, leaves, index)
    grads = tl.backprop_ctx(g, leaves, ct, index)
    got, cgrads = compiler.compile(g).value_and_vjp(leaves, ct, index)
    np.testing.assert_allclose(np.asarray(got), out[0], rtol=1e-12, atol=1e-12)
    for name, v in grads.items():
        np.testing.assert_allclose(np.asarray(cgrads[name]), v, rtol=1e-12, atol=1e-12)
