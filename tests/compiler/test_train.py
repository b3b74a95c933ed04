"""The jitted training step: one compiled function per step (forward, tape VJP, optax update),
donated buffers, and the example MLP trained end to end on CPU."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import compiler
from compiler import ArgumentError, CompileError

from .models import MLP_IN, MLP_OUT, classifier_build, mlp_build, mlp_params


def _regression_data(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.normal(size=(n, MLP_IN))
    y = np.stack([np.sin(x[:, 0]) + 0.5 * x[:, 1] * x[:, 2], np.cos(x[:, 3])], axis=1)
    return x.astype(np.float32), y.astype(np.float32)


def test_train_example_mlp_end_to_end() -> None:
    """Adam on the MLP regression example: the mean loss over the data set drops at least
    tenfold in 300 steps (batch 32)."""
    rng = np.random.default_rng(0)
    x, y = _regression_data(256, rng)
    bg = compiler.compile(mlp_build("f32")).batched(over=("x", "y"), grads="mean")
    step = compiler.TrainStep(bg, compiler.optimizer("adam", learning_rate=1e-2))
    assert step.param_names == ("layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias")
    assert step.data_names == ("x", "y")
    state = step.init(mlp_params(rng))

    def dataset_loss(state: compiler.TrainState) -> float:
        return float(jnp.mean(bg.forward({**state.params, "x": x, "y": y})))

    before = dataset_loss(state)
    batches = [{"x": x[k : k + 32], "y": y[k : k + 32]} for k in range(0, 256, 32)]
    state, losses = compiler.fit(step, state, batches, epochs=38)
    after = dataset_loss(state)
    assert losses.shape == (38 * 8,) and losses.dtype == np.float32
    assert state.step == 38 * 8
    assert after < before / 10, (before, after)
    assert step.trace_count == 1


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_one_step_equals_value_and_grad_plus_optax(name: str) -> None:
    """The fused step computes exactly what value_and_grad followed by the optax update does."""
    rng = np.random.default_rng(1)
    g = classifier_build("f64")
    bg = compiler.compile(g).batched(over=("x", "label"), grads="mean")
    tx = compiler.optimizer(name, learning_rate=0.1, **({"momentum": 0.9} if name == "sgd" else {}))
    step = compiler.TrainStep(bg, tx)
    params = {
        "hidden.weight": rng.normal(size=(12, 8)) / 3,
        "hidden.bias": np.zeros(12),
        "out.weight": rng.normal(size=(5, 12)) / 3,
        "out.bias": np.zeros(5),
    }
    data = [({"x": rng.normal(size=(16, 8))}, {"label": rng.integers(0, 5, 16)}) for _ in range(3)]
    state = step.init(params)
    p = {k: jnp.asarray(v) for k, v in params.items()}
    opt_state = tx.init(tuple(p[n] for n in step.param_names))
    for d, i in data:
        state, loss = step(state, d, i)
        vals, grads = bg.value_and_grad({**p, **d}, i)
        gt = tuple(grads[n] for n in step.param_names)
        pt = tuple(p[n] for n in step.param_names)
        updates, opt_state = tx.update(gt, opt_state, pt)
        p = dict(zip(step.param_names, optax.apply_updates(pt, updates), strict=True))
        np.testing.assert_allclose(float(loss), float(jnp.mean(vals)), rtol=1e-13)
        for n in step.param_names:
            np.testing.assert_allclose(state.params[n], p[n], rtol=1e-12, atol=1e-14)
    assert step.trace_count == 1


def test_step_donates_parameter_and_optimizer_buffers() -> None:
    rng = np.random.default_rng(2)
    bg = compiler.compile(mlp_build("f32")).batched(over=("x", "y"))
    step = compiler.TrainStep(bg, compiler.optimizer("adam", learning_rate=1e-3))
    given = {k: jnp.asarray(v, jnp.float32) for k, v in mlp_params(rng).items()}
    state = step.init(given)
    x, y = _regression_data(8, rng)
    new, _ = step(state, {"x": x, "y": y})
    assert all(v.is_deleted() for v in state.params.values())
    assert all(v.is_deleted() for v in jax.tree_util.tree_leaves(state.opt_state))
    assert not any(v.is_deleted() for v in given.values())  # init copies the caller's arrays
    assert not any(v.is_deleted() for v in new.params.values())
    lowered = step.lower(new, {"x": x, "y": y})
    assert "jax.buffer_donor" in lowered.as_text() or "tf.aliasing_output" in lowered.as_text()


def test_unbatched_step_and_errors() -> None:
    rng = np.random.default_rng(3)
    cg = compiler.compile(mlp_build("f64"))
    step = compiler.TrainStep(cg, optax.sgd(0.1), params=["layer2.weight", "layer2.bias"])
    params = mlp_params(rng)
    state = step.init({k: params[k] for k in step.param_names})
    data = {"x": rng.normal(size=MLP_IN), "y": rng.normal(size=MLP_OUT), **params}
    data = {k: data[k] for k in step.data_names}
    assert "layer1.weight" in step.data_names
    losses = []
    for _ in range(20):
        state, loss = step(state, data)
        losses.append(float(loss))
    assert losses[-1] < losses[0]
    with pytest.raises(ArgumentError, match=r"data: missing 'x'"):
        step(state, {k: v for k, v in data.items() if k != "x"})
    with pytest.raises(ArgumentError, match="state: expected a TrainState"):
        step(params, data)  # type: ignore[arg-type]
    with pytest.raises(CompileError, match="is not a leaf with requires_grad"):
        compiler.TrainStep(cg, optax.sgd(0.1), params=["x"])
    with pytest.raises(CompileError, match="per_sample"):
        compiler.TrainStep(cg.batched(over=("x",), grads="per_sample"), optax.sgd(0.1))
    with pytest.raises(CompileError, match="unknown name 'rmsprop'"):
        compiler.optimizer("rmsprop", learning_rate=0.1)


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw"])
def test_hyperparams_are_a_runtime_vector(name: str) -> None:
    """``hyperparams=``: the optimizer's hyperparameters are one vector argument of the jitted
    step, not optimizer state: each step equals the plain optax step with those values, a new
    learning rate at every step recompiles nothing, and the vector is neither donated nor
    copied into the state's optimizer leaves."""
    rng = np.random.default_rng(4)
    bg = compiler.compile(classifier_build("f64")).batched(over=("x", "label"), grads="mean")
    make = {"sgd": optax.sgd, "adam": optax.adam, "adamw": optax.adamw}[name]
    hyper = {"learning_rate": 0.1, **({"momentum": 0.9} if name == "sgd" else {"b1": 0.8})}
    step = compiler.TrainStep(bg, make, hyperparams=hyper)
    assert step.hyper_names == tuple(hyper)
    params = {
        "hidden.weight": rng.normal(size=(12, 8)) / 3,
        "hidden.bias": np.zeros(12),
        "out.weight": rng.normal(size=(5, 12)) / 3,
        "out.bias": np.zeros(5),
    }
    state = step.init(params)
    assert len(jax.tree_util.tree_leaves(state.opt_state)) == len(
        jax.tree_util.tree_leaves(make(**hyper).init(tuple(state.params.values())))
    )
    p = {k: jnp.asarray(v) for k, v in params.items()}
    opt_state = make(**hyper).init(tuple(p[n] for n in step.param_names))
    for k, lr in enumerate([0.1, 0.05, 0.025]):
        if k:
            state = state.replace(hyper=step.hyperparams(learning_rate=lr))
        vector = state.hyper
        d, i = {"x": rng.normal(size=(16, 8))}, {"label": rng.integers(0, 5, 16)}
        state, loss = step(state, d, i)
        assert not vector.is_deleted() and state.hyper is vector
        tx = make(**{**hyper, "learning_rate": lr})
        vals, grads = bg.value_and_grad({**p, **d}, i)
        pt = tuple(p[n] for n in step.param_names)
        updates, opt_state = tx.update(tuple(grads[n] for n in step.param_names), opt_state, pt)
        p = dict(zip(step.param_names, optax.apply_updates(pt, updates), strict=True))
        np.testing.assert_allclose(float(loss), float(jnp.mean(vals)), rtol=1e-13)
        for n in step.param_names:
            np.testing.assert_allclose(state.params[n], p[n], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(state.hyper)[0], 0.025)
    np.testing.assert_allclose(np.asarray(state.hyper)[1], list(hyper.values())[1])
    assert step.trace_count == 1


def test_host_hyperparams_go_with_the_call() -> None:
    """``host_hyperparams``: a NumPy vector that the step's own call transfers (no
    ``jax.device_put``). Steps with it equal steps with device vectors, a new value at every
    step retraces nothing, and under ``jax.transfer_guard("disallow")`` it goes in while the
    data are on the device (NumPy data are still refused: the guard's verdict on them)."""
    rng = np.random.default_rng(6)
    bg = compiler.compile(classifier_build("f64")).batched(over=("x", "label"), grads="mean")
    hyper = {"learning_rate": 0.1, "b1": 0.8}
    host = compiler.TrainStep(bg, optax.adam, hyperparams=hyper)
    dev = compiler.TrainStep(bg, optax.adam, hyperparams=hyper)
    params = {
        "hidden.weight": rng.normal(size=(12, 8)) / 3,
        "hidden.bias": np.zeros(12),
        "out.weight": rng.normal(size=(5, 12)) / 3,
        "out.bias": np.zeros(5),
    }
    a, b = host.init(params), dev.init(params)
    vec = host.host_hyperparams(learning_rate=0.05)
    assert type(vec) is np.ndarray and vec.tolist() == [0.05, 0.8]
    for k, lr in enumerate([0.1, 0.05, 0.025, 0.0125]):
        d = jax.device_put({"x": rng.normal(size=(16, 8))})
        i = jax.device_put({"label": rng.integers(0, 5, 16).astype(np.int32)})
        a = a.replace(hyper=host.host_hyperparams(learning_rate=lr))
        b = b.replace(hyper=dev.hyperparams(learning_rate=lr))
        with jax.transfer_guard("disallow") if k >= 2 else contextlib.nullcontext():
            a, loss_a = host(a, d, i)
        b, loss_b = dev(b, d, i)
        assert float(loss_a) == float(loss_b)
        for n in host.param_names:
            np.testing.assert_array_equal(a.params[n], b.params[n])
    assert host.trace_count == 1
    with jax.transfer_guard("disallow"), pytest.raises(Exception, match="Disallowed host-to-dev"):
        host(a, {"x": np.zeros((16, 8))}, i)
    with pytest.raises(ArgumentError, match=r"state: hyper: expected a vector of 2 float64"):
        host(a.replace(hyper=np.zeros(3)), d, i)


def test_hyperparams_errors() -> None:
    bg = compiler.compile(classifier_build("f64")).batched(over=("x", "label"), grads="mean")
    with pytest.raises(CompileError, match=r"an optax factory such as optax\.adam"):
        compiler.TrainStep(bg, optax.adam(0.1), hyperparams={"learning_rate": 0.1})
    with pytest.raises(CompileError, match=r"hyperparams: .*unexpected keyword argument 'beta'"):
        compiler.TrainStep(bg, optax.adam, hyperparams={"learning_rate": 0.1, "beta": 0.9})
    step = compiler.TrainStep(bg, optax.adam, hyperparams={"learning_rate": 0.1})
    with pytest.raises(ArgumentError, match="hyperparams: unknown name 'lr'"):
        step.hyperparams(lr=0.1)
    with pytest.raises(ArgumentError, match="hyperparams: learning_rate must be finite"):
        step.hyperparams(learning_rate=float("nan"))
    with pytest.raises(ArgumentError, match="hyperparams: learning_rate must be a number"):
        step.hyperparams(learning_rate="0.1")  # type: ignore[arg-type]
    plain = compiler.TrainStep(bg, optax.adam(0.1))
    with pytest.raises(ArgumentError, match="built without hyperparams"):
        plain.hyperparams(learning_rate=0.1)
    rng = np.random.default_rng(5)
    params = {
        "hidden.weight": rng.normal(size=(12, 8)),
        "hidden.bias": np.zeros(12),
        "out.weight": rng.normal(size=(5, 12)),
        "out.bias": np.zeros(5),
    }
    no_vector = plain.init(params)
    with pytest.raises(ArgumentError, match="state: no hyperparameter vector"):
        step(no_vector, {"x": np.zeros((2, 8))}, {"label": np.zeros(2, np.int32)})
