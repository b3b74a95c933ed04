"""Every row of the op table (``tests/op_cases.py``), compiled: forward, JVP and VJP equal the
reference interpreter (float64 to 1e-10 relative, float32 to 1e-5); tape mode equals jax mode
(the table samples away from kinks); a batched call equals a loop over samples; the exported
artifact gives the same numbers. At the kink rows (``KINKS``) the tape follows the conventions
of ``docs/ops.md`` exactly."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import compiler
import torchlean_ir as tl
from tests.seeds import rng_for

from ..op_cases import CASES, KINKS, KinkCase, OpCase
from .models import assert_close

BATCH = 3


def _rng(case_id: str) -> np.random.Generator:
    return rng_for(case_id)


def _tangents(rng: np.random.Generator, x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: rng.normal(size=v.shape) for k, v in x.items()}


def _reference(g: tl.GraphData, x: dict, dx: dict, seed: np.ndarray, idx: dict) -> tuple:
    (out,) = tl.eval_graph(g, x, idx)
    _, (tout,) = tl.jvp(g, x, dx, idx)
    grads = tl.backprop_ctx(g, x, seed, idx)
    return out, tout, grads


def _check(
    cg: compiler.CompiledGraph,
    x: dict,
    dx: dict,
    seed: Any,
    idx: dict,
    ref: tuple,
    rel: float,
    forward: bool = True,
) -> None:
    out, tout, grads = ref
    if forward:  # the forward function is checked once, in float64 tape mode
        assert_close(cg.forward(x, idx), out, rel, "forward")
    o, t = cg.jvp(x, dx, idx)
    assert_close(o, out, rel, "jvp output")
    assert_close(t, tout, rel, "jvp tangent")
    o, g = cg.value_and_vjp(x, seed, idx)
    assert_close(o, out, rel, "vjp output")
    assert sorted(g) == sorted(grads)
    for k in grads:
        assert_close(g[k], grads[k], rel, f"vjp[{k}]")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_compiled_equals_reference(case: OpCase) -> None:
    rng = _rng(case.id)
    idx = case.index_values()
    x = case.sample(rng)
    dx = _tangents(rng, x)
    g64 = case.graph("f64")
    out = tl.eval_graph(g64, x, idx)[0]
    seed = rng.normal(size=out.shape)
    ref = _reference(g64, x, dx, seed, idx)
    # float64, tape and jax mode
    tape = compiler.compile(g64)
    _check(tape, x, dx, seed, idx, ref, 1e-10)
    _check(compiler.compile(g64, mode="jax"), x, dx, seed, idx, ref, 1e-10, forward=False)
    # float32: the reference at the same (rounded) inputs
    x32 = {k: v.astype(np.float32) for k, v in x.items()}
    dx32 = {k: v.astype(np.float32) for k, v in dx.items()}
    s32 = seed.astype(np.float32)
    r64 = {k: v.astype(np.float64) for k, v in x32.items()}
    ref32 = _reference(
        g64, r64, {k: v.astype(np.float64) for k, v in dx32.items()}, s32.astype(np.float64), idx
    )
    cg32 = compiler.compile(case.graph("f32"))
    assert cg32.dtype == np.float32
    _check(cg32, x32, dx32, s32, idx, ref32, 1e-5, forward=False)  # outputs come with jvp, vjp
    assert cg32.value_and_vjp(x32, s32, idx)[0].dtype == np.float32


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_batched_equals_loop(case: OpCase) -> None:
    """The first argument (and every index input) batched, the other arguments shared: the
    batch-level tape (summed gradients) and the whole-function vmap (per-sample gradients)
    equal the reference interpreter run on each sample in turn."""
    rng = _rng(case.id + "batch")
    g = case.graph("f64")
    cg = compiler.compile(g)
    samples = [case.sample(rng) for _ in range(BATCH)]
    names = [leaf.name for leaf in g.leaves]
    over = names[:1] + [ix.name for ix in g.index_inputs]
    if not over:
        pytest.skip("the op takes no inputs: nothing to batch")
    shared = samples[0]
    xs = {n: (np.stack([s[n] for s in samples]) if n in over else shared[n]) for n in names}
    idx1 = case.index_values()
    idxs = {k: np.stack([np.asarray(v)] * BATCH) for k, v in idx1.items()}
    per = [{n: (s[n] if n in over else shared[n]) for n in names} for s in samples]
    dxs = {n: rng.normal(size=np.shape(v)) for n, v in xs.items()}
    per_t = [{n: (dxs[n][k] if n in over else dxs[n]) for n in names} for k in range(BATCH)]
    outs = np.stack([tl.eval_graph(g, p, idx1)[0] for p in per])
    seeds = rng.normal(size=outs.shape)
    loop = [tl.backprop_ctx(g, p, s, idx1) for p, s in zip(per, seeds, strict=True)]
    touts = np.stack([tl.jvp(g, p, t, idx1)[1][0] for p, t in zip(per, per_t, strict=True)])
    bg = cg.batched(over=over, grads="sum")
    assert_close(bg.forward(xs, idxs), outs, 1e-10, "batched forward")
    assert_close(bg.jvp(xs, dxs, idxs)[1], touts, 1e-10, "batched jvp")
    for grads in ("sum", "per_sample"):
        got = cg.batched(over=over, grads=grads).vjp_with_seed(xs, seeds, idxs)
        for n in names:
            stacked = np.stack([lg[n] for lg in loop])
            want = stacked.sum(0) if (n not in over and grads == "sum") else stacked
            assert_close(got[n], want, 1e-10, f"batched ({grads}) grad {n}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_exported_artifact(case: OpCase) -> None:
    rng = _rng(case.id + "export")
    g = case.graph("f64")
    cg = compiler.compile(g)
    x, idx = case.sample(rng), case.index_values()
    seed = rng.normal(size=g.output_types[0].shape)
    out, grads = cg.value_and_vjp(x, seed, idx)
    exp = jax.export.deserialize(cg.export_bytes("vjp"))
    flat = [x[n] for n in cg.leaf_names] + [seed]
    flat += [np.asarray(idx[n], np.int32) for n in cg.index_names]
    (eo,), eg = exp.call(*flat)
    np.testing.assert_array_equal(np.asarray(eo), np.asarray(out))
    for n, v in zip(cg.grad_names, eg, strict=True):
        np.testing.assert_array_equal(np.asarray(v), np.asarray(grads[n]))


def _kink_graph(k: KinkCase, dtype: str) -> tl.GraphData:
    b = tl.GraphBuilder(dtype)
    xs = [b.input(f"a{i}", a.shape, requires_grad=True) for i, a in enumerate(k.args)]
    return b.build(b.apply(k.op, *xs, **k.attrs))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("k", KINKS, ids=lambda k: k.id)
def test_kink_conventions_in_tape_mode(k: KinkCase, dtype: str) -> None:
    """Exactly the derivative ``docs/ops.md`` prescribes at the non-smooth point, whatever JAX's
    own derivative of the lowered forward is there."""
    cg = compiler.compile(_kink_graph(k, dtype))
    np_dtype = np.float64 if dtype == "f64" else np.float32
    x = {f"a{i}": a.astype(np_dtype) for i, a in enumerate(k.args)}
    dx = {f"a{i}": t.astype(np_dtype) for i, t in enumerate(k.tangents)}
    _, tout = cg.jvp(x, dx)
    np.testing.assert_array_equal(np.asarray(tout), k.expected_jvp)
    grads = cg.vjp_with_seed(x, k.ct.astype(np_dtype))
    for i, want in enumerate(k.expected_vjp):
        np.testing.assert_array_equal(np.asarray(grads[f"a{i}"]), want)
    # batched, with the cotangent summed into a shared argument and per sample
    bg = cg.batched(over=("a0",), grads="sum")
    xs = dict(x, a0=np.stack([x["a0"], x["a0"]]))
    got = bg.vjp_with_seed(xs, np.stack([k.ct, k.ct]).astype(np_dtype))
    np.testing.assert_array_equal(np.asarray(got["a0"]), np.stack([k.expected_vjp[0]] * 2))
    for i in range(1, len(k.args)):
        np.testing.assert_array_equal(np.asarray(got[f"a{i}"]), 2 * k.expected_vjp[i])
