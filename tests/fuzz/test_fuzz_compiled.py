"""Fuzz target: the compiled functions' arguments (forward, value_and_grad, value_and_vjp, jvp,
batched, exported).

Every call returns its results or raises ``compiler.ArgumentError`` (or another
``TorchleanError``) in one line, before JAX sees the arguments; a call that succeeds gives the
reference's values on the same (converted) arguments: no silent wrong result.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl

from ._harness import attempt, fuzz

compiler = pytest.importorskip("compiler")
jnp = pytest.importorskip("jax.numpy")


@cache
def _graphs() -> list[tl.GraphData]:
    b = tl.GraphBuilder()
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,))
    label = b.index("label")
    h = b.tanh(b.linear(W, bias, x))
    one = b.build(b.gather_scalar_nat(b.log_softmax(h), label) * -1.0)
    b = tl.GraphBuilder("f64")
    x = b.input("x", (2, 3), requires_grad=True)
    rows = b.index("rows", 2)
    y = b.gelu(x)
    two = b.build(b.gather_rows_nat(y, rows), b.sum(y))
    return [one, two]


@cache
def _compiled(i: int) -> Any:
    return compiler.compile(_graphs()[i])


def _value(shape: tuple[int, ...], rng: np.random.Generator, kind: int) -> Any:
    """A value for an argument of ``shape``: right, or wrong in one of many ways."""
    good = rng.normal(size=shape)
    options: list[Any] = [
        good,
        good.astype(np.float32),
        good.tolist(),
        jnp.asarray(good, jnp.float32),
        jnp.asarray(good, jnp.float64),
        np.full(shape, np.nan),
        np.full(shape, np.inf),
        np.full(shape, 1e30),
        good.astype(np.float16),
        rng.normal(size=(*shape, 1)),
        rng.normal(size=(2, *shape)),
        np.ones(shape, dtype=np.int64),
        np.ones(shape, dtype=bool),
        np.ones(shape, dtype=np.complex128),
        np.array([object()] * max(1, int(np.prod(shape)))),
        "1.0",
        None,
        [[1.0], [2.0, 3.0]],
        10**400,
        1.5,
        {"x": 1},
    ]
    return options[kind % len(options)]


def _index(shape: tuple[int, ...], rng: np.random.Generator, kind: int) -> Any:
    n = int(np.prod(shape))
    options: list[Any] = [
        rng.integers(0, 5, size=shape),
        np.zeros(shape, np.int32),
        np.full(shape, 2**63 - 1),
        np.full(shape, np.uint64(2**64 - 1)) if shape else np.uint64(2**64 - 1),
        (2**70 if not shape else [2**70] * n),
        (-1 if not shape else [-1] * n),
        np.full(shape, 1.5),
        np.ones(shape, bool),
        "0",
        None,
        [0] * (n + 1),
        np.zeros((*shape, 1), np.int64),
    ]
    return options[kind % len(options)]


def _reference(g: tl.GraphData, leaves: dict[str, Any], index: dict[str, Any], dtype: Any) -> Any:
    """The reference on the arguments as the compiled call saw them (rounded to its dtype)."""
    conv = {k: np.asarray(np.asarray(v, dtype=np.float64), dtype=dtype) for k, v in leaves.items()}
    with np.errstate(all="ignore"):
        return tl.eval_graph(g, conv, index)


def _same(got: Any, ref: tuple[Any, ...], dtype: Any) -> None:
    got = got if isinstance(got, tuple) else (got,)
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    for v, r in zip(got, ref, strict=True):
        v, r = np.asarray(v, np.float64), np.asarray(r, np.float64)
        scale = np.max(np.abs(r[np.isfinite(r)]), initial=1.0)
        np.testing.assert_allclose(v, r, rtol=rtol, atol=rtol * scale, equal_nan=True)


@fuzz(150)
@given(st.integers(0, 1), st.integers(0, 2**32 - 1), st.data())
def test_compiled_call_arguments(which: int, seed: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(seed)
    g, c = _graphs()[which], _compiled(which)
    dtype = np.float32 if g.leaves[0].type.dtype == tl.DType.F32 else np.float64
    # mostly right values (so that results get checked against the reference), or anything
    kinds = data.draw(st.lists(st.integers(0, 3) | st.integers(0, 40), min_size=4, max_size=4))
    leaves = {
        leaf.name: _value(leaf.type.shape, rng, k) for leaf, k in zip(g.leaves, kinds, strict=False)
    }
    runtime = [ix for ix in g.index_inputs if ix.value is None]
    index = {ix.name: _index(ix.type.shape, rng, kinds[-1]) for ix in runtime}
    form = data.draw(st.integers(0, 5))
    if form == 1:
        leaves_arg: Any = [leaves[n] for n in c.leaf_names]  # in context order
    elif form == 2:
        leaves_arg = {**leaves, "nosuch": np.ones(1)}
    elif form == 3:
        leaves_arg = dict(list(leaves.items())[:-1])
    elif form == 4:
        leaves_arg = data.draw(st.sampled_from([None, 3, "x", [1.0], (), {1: 2}]))
    else:
        leaves_arg = leaves
    index_arg: Any = (
        index
        if data.draw(st.booleans())
        else data.draw(st.sampled_from([None, [], [0], {"nosuch": 1}, 5, "x"]))
    )
    kind = data.draw(st.sampled_from(["forward", "value_and_grad", "value_and_vjp", "jvp"]))
    outs = g.output_types
    if kind == "forward":
        got = attempt(lambda: c.forward(leaves_arg, index_arg), "forward")
    elif kind == "value_and_grad":
        got = attempt(lambda: c.value_and_grad(leaves_arg, index_arg), "value_and_grad")
        got = None if got is None else got[0]
    elif kind == "value_and_vjp":
        seed_arg = tuple(_value(t.shape, rng, kinds[0]) for t in outs)
        seed_arg = seed_arg[0] if len(outs) == 1 else seed_arg
        got = attempt(lambda: c.value_and_vjp(leaves_arg, seed_arg, index_arg), "value_and_vjp")
        got = None if got is None else got[0]
    else:
        tangents = {
            leaf.name: _value(leaf.type.shape, rng, kinds[1])
            for leaf in g.leaves
            if leaf.requires_grad
        }
        got = attempt(lambda: c.jvp(leaves_arg, tangents, index_arg), "jvp")
        got = None if got is None else got[0]
    if got is not None:  # accepted: the reference's values on the same arguments
        assert isinstance(leaves_arg, dict | list)
        named = (
            leaves_arg
            if isinstance(leaves_arg, dict)
            else dict(zip(c.leaf_names, leaves_arg, strict=True))
        )
        if isinstance(index_arg, dict) or index_arg is None:
            ref_index = index_arg
        else:  # a sequence in context order
            ref_index = dict(zip((ix.name for ix in runtime), index_arg, strict=True))
        _same(got, _reference(g, named, ref_index, dtype), dtype)


@fuzz(40)
@given(st.integers(0, 1), st.integers(0, 2**32 - 1), st.data())
def test_batched_and_exported(which: int, seed: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(seed)
    g, c = _graphs()[which], _compiled(which)
    names = [*c.leaf_names, *(ix.name for ix in g.index_inputs), "nosuch"]
    over = data.draw(st.lists(st.sampled_from(names), max_size=3))
    grads = data.draw(st.sampled_from(["sum", "mean", "per_sample", "max", None]))
    cb = attempt(lambda: c.batched(over, grads=grads), "batched")
    if cb is not None and data.draw(st.booleans()):
        n = data.draw(st.sampled_from([0, 1, 3]))
        leaves = {
            leaf.name: rng.normal(size=((n,) if leaf.name in over else ()) + leaf.type.shape)
            for leaf in g.leaves
        }
        index = {
            ix.name: rng.integers(0, 5, size=((n,) if ix.name in over else ()) + ix.type.shape)
            for ix in g.index_inputs
            if ix.value is None
        }
        if data.draw(st.booleans()) and leaves:  # one wrong batch size
            k = data.draw(st.sampled_from(sorted(leaves)))
            leaves[k] = np.concatenate([leaves[k], leaves[k]]) if leaves[k].ndim else leaves[k]
        attempt(lambda: cb.forward(leaves, index), "batched forward")
    kind = data.draw(st.sampled_from(["forward", "vjp", "jvp", "grad", 3]))
    batch_size = data.draw(st.sampled_from([None, 2, 0, -1, "x", 2.5]))
    platforms = data.draw(st.sampled_from([None, ("cpu",), "cpu", ("nosuch",), 3]))
    blob = attempt(
        lambda: c.export_bytes(kind, batch_size=batch_size, platforms=platforms), "export"
    )
    if blob is not None and kind == "forward" and batch_size is None:
        import jax

        exported = jax.export.deserialize(blob)
        leaves = {leaf.name: rng.normal(size=leaf.type.shape) for leaf in g.leaves}
        index = {ix.name: rng.integers(0, 5, size=ix.type.shape) for ix in g.index_inputs}
        dtype = np.float32 if g.leaves[0].type.dtype == tl.DType.F32 else np.float64
        args = [np.asarray(leaves[n], dtype) for n in c.leaf_names]
        args += [np.asarray(index[ix.name], np.int32) for ix in g.index_inputs]
        (out,) = exported.call(*args)[:1] if len(g.outputs) == 1 else (exported.call(*args),)
        _same(
            out,
            tl.eval_graph(g, {k: np.asarray(v, dtype) for k, v in leaves.items()}, index),
            dtype,
        )
