"""The example models, compiled: reference equality (float64 to 1e-10, float32 to 1e-5), tape
mode = jax mode, batched = loop, and gradients equal to ``jax.grad`` of an independently
hand-written jnp function and to PyTorch autograd of the same model. The shipped example graphs
(``examples/graphs/*.json``) get the reference and tape-vs-jax checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import compiler
import torchlean_ir as tl

from .models import MODELS, Model, assert_close

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))


def _reference_check(g: tl.GraphData, x: dict, idx: dict, rng: np.random.Generator) -> None:
    (out,) = tl.eval_graph(g, x, idx)
    grad_names = [leaf.name for leaf in g.leaves if leaf.requires_grad]
    dx = {n: rng.normal(size=np.shape(x[n])) for n in grad_names}
    _, (tout,) = tl.jvp(g, x, dx, idx)
    seed = rng.normal(size=np.shape(out))
    ref = tl.backprop_ctx(g, x, seed, idx)
    for mode in ("tape", "jax"):
        cg = compiler.compile(g, dtype="f64", mode=mode)
        o, t = cg.jvp(x, dx, idx)
        assert_close(o, out, 1e-10, f"{mode} jvp output")
        assert_close(t, tout, 1e-10, f"{mode} jvp tangent")
        o, grads = cg.value_and_vjp(x, seed, idx)
        assert_close(o, out, 1e-10, f"{mode} vjp output")
        assert sorted(grads) == sorted(grad_names)
        for n in grad_names:
            assert_close(grads[n], ref[n], 1e-10, f"{mode} grad {n}")
    assert_close(compiler.compile(g, dtype="f64").forward(x, idx), out, 1e-10, "forward")
    # float32, against the reference at the rounded inputs
    x32 = {k: np.asarray(v, np.float32) for k, v in x.items()}
    ref32 = tl.backprop_ctx(g, {k: v.astype(np.float64) for k, v in x32.items()}, None, idx)
    cg32 = compiler.compile(g, dtype="f32")
    val, grads = cg32.value_and_grad(x32, idx)
    assert val.dtype == np.float32
    (out32,) = tl.eval_graph(g, {k: v.astype(np.float64) for k, v in x32.items()}, idx)
    assert_close(val, out32, 1e-5, "f32 value")
    for n in grad_names:
        assert grads[n].dtype == np.float32
        assert_close(grads[n], ref32[n], 1e-5, f"f32 grad {n}")


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_model_equals_reference(model: Model) -> None:
    rng = np.random.default_rng(1)
    x, idx = model.sample(rng)
    _reference_check(model.build("f64"), x, idx, rng)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_graph_equals_reference(path: Path) -> None:
    g = tl.load(path)
    rng = np.random.default_rng(2)
    x = {leaf.name: 0.5 * rng.normal(size=leaf.type.shape) for leaf in g.leaves}
    idx = {
        ix.name: np.zeros(ix.type.shape, np.int64) + 1 for ix in g.index_inputs if ix.value is None
    }
    _reference_check(g, x, idx, rng)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_model_grads_equal_hand_written_jax(model: Model) -> None:
    rng = np.random.default_rng(3)
    x, idx = model.sample(rng)
    g = model.build("f64")
    cg = compiler.compile(g)
    val, grads = cg.value_and_grad(x, idx)
    want_val, want = jax.value_and_grad(model.jnp_loss)(x, idx)
    assert_close(val, want_val, 1e-10, "value")
    for n in cg.grad_names:
        assert_close(grads[n], want[n], 1e-10, f"grad {n}")


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_model_grads_equal_torch_autograd(model: Model) -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x, idx = model.sample(rng)
    g = model.build("f64")
    cg = compiler.compile(g)
    val, grads = cg.value_and_grad(x, idx)
    tx = {
        leaf.name: torch.tensor(x[leaf.name], dtype=torch.float64, requires_grad=leaf.requires_grad)
        for leaf in g.leaves
    }
    loss = model.torch_loss(tx, idx)
    loss.backward()
    assert_close(val, loss.item(), 1e-10, "value")
    for n in cg.grad_names:
        assert_close(grads[n], tx[n].grad.numpy(), 1e-10, f"grad {n}")


def _batch_inputs(model: Model, g: tl.GraphData, n: int) -> tuple[list[str], list, dict, dict]:
    """``n`` samples of the model's inputs (leaves of kind input, and the index inputs) with
    shared parameters."""
    rng = np.random.default_rng(5)
    samples = [model.sample(rng) for _ in range(n)]
    shared = samples[0][0]
    inputs = [leaf.name for leaf in g.leaves if leaf.kind == "input"]
    over = inputs + [ix.name for ix in g.index_inputs if ix.value is None]
    per = [({**shared, **{k: s[k] for k in inputs}}, i) for s, i in samples]
    xs = {k: np.stack([s[k] for s, _ in samples]) if k in inputs else v for k, v in shared.items()}
    idxs = {k: np.stack([i[k] for _, i in samples]) for k in samples[0][1]}
    return over, per, xs, idxs


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_model_batched_equals_loop(model: Model) -> None:
    g = model.build("f64")
    cg = compiler.compile(g)
    over, per, xs, idxs = _batch_inputs(model, g, 5)
    loop = [cg.value_and_grad(p, i) for p, i in per]
    vals = np.stack([v for v, _ in loop])
    for mode in ("tape", "jax"):
        for grads in ("sum", "mean", "per_sample"):
            bg = compiler.compile(g, mode=mode).batched(over=over, grads=grads)
            v, got = bg.value_and_grad(xs, idxs)
            assert_close(v, vals, 1e-10, f"{mode}/{grads} values")
            for n in cg.grad_names:
                stacked = np.stack([gr[n] for _, gr in loop])
                want = {"sum": stacked.sum(0), "mean": stacked.mean(0)}.get(grads, stacked)
                assert_close(got[n], want, 1e-10, f"{mode}/{grads} grad {n}")


def test_batched_grads_equal_jax_grad_of_batched_loss() -> None:
    """The batch-level tape (summed cotangents contracted into matrix products) against
    ``jax.grad`` of the hand-written mean loss over the batch."""
    model = MODELS[1]  # the classifier: labels batched as index inputs
    g = model.build("f64")
    over, _, xs, idxs = _batch_inputs(model, g, 16)
    bg = compiler.compile(g).batched(over=over, grads="mean")
    _, grads = bg.value_and_grad(xs, idxs)

    def mean_loss(params: dict[str, Any]) -> Any:
        per = jax.vmap(lambda x, lab: model.jnp_loss({**params, "x": x}, {"label": lab}))
        return per(xs["x"], idxs["label"]).mean()

    params = {k: v for k, v in xs.items() if k != "x"}
    want = jax.grad(mean_loss)(params)
    for n in params:
        assert_close(grads[n], want[n], 1e-10, f"grad {n}")


@pytest.mark.parametrize("mode", ["tape", "jax"])
def test_mean_gradients_keep_per_sample_gradients_of_batched_leaves(mode: str) -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (4,), requires_grad=True)
    W = b.param("W", (3, 4))
    g = b.build(b.sum(b.matmul(W, b.reshape(x, shape=(4, 1))).tanh()))
    rng = np.random.default_rng(6)
    xs, W0 = rng.normal(size=(6, 4)), rng.normal(size=(3, 4))
    seeds = rng.normal(size=6)
    bg = compiler.compile(g, mode=mode).batched(over=("x",), grads="mean")
    got = bg.vjp_with_seed({"x": xs, "W": W0}, seeds)
    ref = [tl.backprop_ctx(g, {"x": x, "W": W0}, s) for x, s in zip(xs, seeds, strict=True)]
    assert_close(got["x"], np.stack([r["x"] for r in ref]), 1e-12, "per-sample x")
    assert_close(got["W"], np.mean([r["W"] for r in ref], axis=0), 1e-12, "mean W")
