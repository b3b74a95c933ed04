"""ScalarTrainer, Predictor and the compiled wrappers: API and errors."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import (
    CompiledScalar,
    NatInput,
    Options,
    Param,
    Predictor,
    ScalarTrainer,
    compile_fn,
    nn,
)

from .models import mlp_regression

BACKENDS = ["eager", "compiled"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_are_clear(backend: str) -> None:
    opts = Options(backend=backend, dtype="f64")
    w, stray = Param(np.ones(2), name="w"), Param(np.ones(2), name="stray")

    def uses_stray(ops, x):  # type: ignore[no-untyped-def]
        return ops.sum(ops.mul(ops.mul(ops.use(w), ops.use(stray)), x))

    with pytest.raises(tl.TorchleanError, match="uses param 'stray', which is not in the params"):
        tr = ScalarTrainer(uses_stray, [w], [(2,)], opts)
        tr.forward(np.ones(2))
    vec = (
        ScalarTrainer(lambda ops, x: ops.mul(ops.use(w), x), [w], [(2,)], opts)
        if (backend == "eager")
        else None
    )
    if vec is not None:
        with pytest.raises(tl.TorchleanError, match="loss must be a scalar"):
            vec.forward(np.ones(2))
    else:
        with pytest.raises(tl.TorchleanError, match="loss must be a scalar"):
            ScalarTrainer(lambda ops, x: ops.mul(ops.use(w), x), [w], [(2,)], opts)
    tr = ScalarTrainer(lambda ops, x: ops.sum(ops.mul(ops.use(w), x)), [w], [(2,)], opts)
    with pytest.raises(tl.TorchleanError, match="expected 1 inputs, got 2"):
        tr.forward(np.ones(2), np.ones(2))
    with pytest.raises(tl.TorchleanError, match=r"\[3\]"):
        tr.forward(np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_frozen_params_and_get_params(backend: str) -> None:
    opts = Options(backend=backend, dtype="f64")
    w, frozen = Param(np.ones(2), name="w"), Param(np.full(2, 3.0), name="f", requires_grad=False)

    def loss(ops, x):  # type: ignore[no-untyped-def]
        return ops.sum(ops.mul(ops.mul(ops.use(w), ops.use(frozen)), x))

    tr = ScalarTrainer(loss, [w, frozen], [(2,)], opts)
    assert set(tr.backward(np.array([1.0, 2.0]))) == {"w"}
    tr.adam_step(np.array([1.0, 2.0]), lr=0.1)
    got = tr.get_params()
    np.testing.assert_array_equal(got["f"], [3.0, 3.0])
    np.testing.assert_allclose(got["w"], [0.9, 0.9], rtol=1e-7)  # Adam's first step is lr*sign
    assert w.synced


@pytest.mark.parametrize("backend", BACKENDS)
def test_predictor(backend: str) -> None:
    model = nn.Sequential(nn.Linear(3, 2, rng=0), nn.Softmax())
    pred = Predictor(lambda ops, x: model(ops, x), model.parameters(), [(3,)],
                     Options(backend=backend, dtype="f64"))  # fmt: skip
    xs = np.random.default_rng(0).normal(size=(5, 3))
    out = pred(xs, batched=True)
    assert out.shape == (5, 2)
    np.testing.assert_allclose(out[2], pred(xs[2]), rtol=1e-12)
    np.testing.assert_allclose(out.sum(axis=1), np.ones(5), rtol=1e-12)


def test_compile_fn_wrappers() -> None:
    case = mlp_regression()
    c = compile_fn(case.loss, case.specs, case.params, Options(dtype="f64"))
    assert isinstance(c, CompiledScalar)
    x, y = case.sample(0)
    leaves = {**{p.name: p.value for p in case.params}, "x0": x, "x1": y}
    (want,) = tl.eval_graph(c.graph, leaves)
    assert float(c.forward(x, y)) == pytest.approx(float(want), rel=1e-12)
    ref = tl.backprop_ctx(c.graph, leaves, 2.0)
    got = c.backward_with_seed(x, y, seed=2.0)
    for k, v in got.items():
        np.testing.assert_allclose(v, ref[k], rtol=1e-10, atol=1e-13)
    name = case.params[0].name
    t = np.ones(case.params[0].shape)
    _, tout = c.jvp(x, y, tangents={name: t})
    (_,), (ref_t,) = tl.jvp(c.graph, leaves, {name: t})
    assert float(tout) == pytest.approx(float(ref_t), rel=1e-10)
    new_w = {name: np.zeros(case.params[0].shape)}
    assert float(c.forward(x, y, params=new_w)) != float(c.forward(x, y))
    out = compile_fn(lambda ops, x: ops.tanh(x), [(3,)], options=Options(dtype="f64"))
    assert not isinstance(out, CompiledScalar)
    g = out.vjp_with_seed(np.zeros(3), seed=np.ones(3))
    assert g == {} or all(np.shape(v) == (3,) for v in g.values())


def test_nat_inputs_in_the_trainer() -> None:
    w = Param(np.arange(6.0).reshape(2, 3), name="w")

    def loss(ops, row, cols):  # type: ignore[no-untyped-def]
        picked = ops.gather_rows_nat(ops.transpose2d(ops.use(w)), cols)  # (k, 2)
        return ops.sum(ops.gather_scalar_nat(ops.reshape(picked, shape=(4,)), row))

    for backend in BACKENDS:
        tr = ScalarTrainer(
            loss, [w], [NatInput(), NatInput(2)], Options(backend=backend, dtype="f64")
        )
        assert tr.forward(1, np.array([2, 0])) == 5.0  # picked = [[2, 5], [0, 3]] -> flat[1] = 5
        assert tr.forward(np.array([1, 3]), np.array([[2, 0], [1, 1]]), batched=True) == 4.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_trainer_verify_proves_the_loss_graph(backend: str) -> None:
    pytest.importorskip("verify")
    case = mlp_regression()
    tr = ScalarTrainer(case.loss, case.params, case.specs, Options(backend=backend, dtype="f64"))
    report = tr.verify()
    assert report.verdict == "verified", str(report)
    assert len(tr.graph.nodes) == len(report.nodes)
