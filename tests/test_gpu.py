"""The GPU path (``pytest -m gpu``): compiled and eager results on a GPU against the CPU at
float32 accuracy, the precision choice, index checks on the device, and training state that
stays on the device. Every test skips cleanly where JAX sees no GPU (CI has none; they run on a
GPU machine, see docs/benchmarks.md, "GPU")."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest

import compiler
import torchlean as tlf
from compiler import ArgumentError
from tests.compiler.models import (
    CLS_CLASSES,
    CLS_FEATURES,
    classifier_build,
    classifier_sample,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not compiler.gpu_available(), reason="no GPU (JAX sees none)"),
]


def _worst(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest over names of max|a - b| / max|b|."""
    out = 0.0
    for k in b:
        x, y = np.asarray(a[k], np.float64), np.asarray(b[k], np.float64)
        out = max(out, float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-30)))
    return out


def _wide_mlp() -> tuple[Any, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """An MLP 256-512-512-10 on a batch of 256: products long enough for TF32 to show."""
    import torchlean_ir as tl

    b = tl.GraphBuilder("f32")
    x = b.input("x", (256,))
    label = b.index("label")
    h = x
    dims = (256, 512, 512, 10)
    rng = np.random.default_rng(0)
    params = {}
    for k in range(3):
        W = b.param(f"W{k}", (dims[k + 1], dims[k]))
        bias = b.param(f"b{k}", (dims[k + 1],))
        params[f"W{k}"] = (rng.normal(size=(dims[k + 1], dims[k])) / np.sqrt(dims[k])).astype(
            np.float32
        )
        params[f"b{k}"] = np.zeros(dims[k + 1], np.float32)
        h = b.linear(W, bias, h)
        if k < 2:
            h = h.relu()
    g = b.build(-b.gather_scalar_nat(b.log_softmax(h), label))
    data = {"x": rng.normal(size=(256, 256)).astype(np.float32)}
    return g, {**params, **data}, {"label": rng.integers(0, 10, size=256)}


def test_float32_gradients_match_float64_on_the_gpu() -> None:
    g, leaves, index = _wide_mlp()
    ref_cg = compiler.compile(g, dtype="f64", device="cpu").batched(
        over=("x", "label"), grads="mean"
    )
    _, ref = ref_cg.value_and_grad({k: v.astype(np.float64) for k, v in leaves.items()}, index)
    gpu_cg = compiler.compile(g, device="gpu").batched(over=("x", "label"), grads="mean")
    _, got = gpu_cg.value_and_grad(leaves, index)
    assert next(iter(got.values())).devices() == {gpu_cg.device}
    err = _worst(got, ref)
    assert err < 1e-5, f"float32 on the GPU is {err:.2e} off float64 (TF32 would be ~1e-3)"
    # the opt-in fast mode is measurably less accurate on a GPU with TF32 (Ampere or later)
    fast = compiler.compile(g, device="gpu", matmul_precision="tf32")
    _, tf = fast.batched(over=("x", "label"), grads="mean").value_and_grad(leaves, index)
    if jax.devices("gpu")[0].device_kind.startswith(("NVIDIA A", "NVIDIA H", "NVIDIA L")):
        assert _worst(tf, ref) > 10 * err


def test_models_and_convolutions_match_the_cpu() -> None:
    from tests.compiler.models import MODELS
    from tests.op_cases import CASES

    for model in MODELS:
        leaves, index = model.sample(np.random.default_rng(1))
        leaves = {k: np.asarray(v, np.float32) for k, v in leaves.items()}
        g = model.build("f32")
        cpu = compiler.compile(g, device="cpu").value_and_grad(leaves, index)
        gpu = compiler.compile(g, device="gpu").value_and_grad(leaves, index)
        assert _worst(gpu[1], cpu[1]) < 1e-4, model.name
    for case in [c for c in CASES if c.op in ("conv2d", "conv_transpose2d", "conv")]:
        g = case.graph("f32")
        leaves = {k: v.astype(np.float32) for k, v in case.sample(np.random.default_rng(2)).items()}
        index = case.index_values() or None
        seed = np.ones(g.output_types[0].shape, np.float32)
        cpu = compiler.compile(g, device="cpu").value_and_vjp(leaves, seed, index)
        gpu = compiler.compile(g, device="gpu").value_and_vjp(leaves, seed, index)
        assert _worst({"y": gpu[0]}, {"y": cpu[0]}) < 1e-5, case.id
        assert _worst(gpu[1], cpu[1]) < 1e-5, case.id


def test_device_labels_are_checked_on_the_device() -> None:
    cg = compiler.compile(classifier_build("f32"), device="gpu").batched(
        over=("x", "label"), grads="mean"
    )
    leaves, _ = classifier_sample(np.random.default_rng(0))
    leaves = {k: np.asarray(v, np.float32) for k, v in leaves.items()}
    leaves["x"] = np.ones((3, CLS_FEATURES), np.float32)
    gpu = jax.devices("gpu")[0]
    good = jax.device_put(np.array([0, 1, CLS_CLASSES - 1], np.int32), gpu)
    bad = jax.device_put(np.array([0, -2, 1], np.int32), gpu)
    cg.value_and_grad(leaves, {"label": good})
    value, _ = cg.value_and_grad(leaves, {"label": bad})
    jax.block_until_ready(value)
    with pytest.raises(ArgumentError, match=r"\(in an earlier call\).*got -2"):
        cg.value_and_grad(leaves, {"label": good})


def test_training_steps_check_device_labels_in_the_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TrainStep on the GPU checks device labels inside its own program (no check program
    per call) and reports a negative one at a later call, its state trained as on the CPU."""
    import optax

    from compiler import _args

    def no_program(v: object) -> None:
        raise AssertionError("a separate check program ran")

    monkeypatch.setattr(_args, "_lowest", no_program)
    leaves, _ = classifier_sample(np.random.default_rng(0))
    leaves = {k: np.asarray(v, np.float32) for k, v in leaves.items()}
    x = np.random.default_rng(1).normal(size=(4, CLS_FEATURES)).astype(np.float32)
    gpu = jax.devices("gpu")[0]
    losses = {}
    for device in ("gpu", "cpu"):
        cg = compiler.compile(classifier_build("f32"), device=device).batched(
            over=("x", "label"), grads="mean"
        )
        step = compiler.TrainStep(cg, optax.adam(1e-2))
        state = step.init({k: v for k, v in leaves.items() if k != "x"})
        got = []
        for k in range(3):
            y = np.array([k % CLS_CLASSES, 1, 2, CLS_CLASSES - 1], np.int32)
            label = jax.device_put(y, gpu) if device == "gpu" else y
            state, loss = step(state, {"x": x}, {"label": label})
            got.append(loss)
        losses[device] = np.asarray(jax.device_get(got))
        if device == "gpu":
            bad = jax.device_put(np.array([0, 1, -7, 2], np.int32), gpu)
            state, loss = step(state, {"x": x}, {"label": bad})
            jax.block_until_ready(loss)
            with pytest.raises(ArgumentError, match=r"\(in an earlier call\).*got -7"):
                step.compiled.check_index()
    np.testing.assert_allclose(losses["gpu"], losses["cpu"], rtol=1e-5)


def _mlp_trainer(backend: str, device: str) -> tuple[Any, Any]:
    opts = tlf.Options(backend=backend, device=device, dtype="f32")
    rng = opts.rng("init")
    model = tlf.nn.Sequential(
        tlf.nn.Linear(32, 64, rng=rng), tlf.nn.ReLU(), tlf.nn.Linear(64, 10, rng=rng)
    )

    def loss(ops: Any, image: Any, label: Any) -> Any:
        return ops.cross_entropy(model(ops, image), label)

    return tlf.ScalarTrainer(loss, model.parameters(), [(32,), tlf.NatInput()], opts), model


@pytest.mark.parametrize("backend", ["compiled", "eager"])
def test_training_stays_on_the_device(backend: str) -> None:
    trainer, model = _mlp_trainer(backend, "gpu")
    cpu_trainer, cpu_model = _mlp_trainer(backend, "cpu")
    data = np.random.default_rng(2)
    x, y = data.normal(size=(16, 32)), data.integers(0, 10, size=16)
    for _ in range(3):
        loss = trainer.adam_step(x, y, lr=1e-2, batched=True)
        cpu_trainer.adam_step(x, y, lr=1e-2, batched=True)
    assert isinstance(loss, jax.Array)  # not read: the loop did not wait for it
    gpu = jax.devices("gpu")[0]
    for p in model.parameters():
        assert not p.synced and p._device.devices() == {gpu}
    np.testing.assert_allclose(trainer.losses, cpu_trainer.losses, rtol=1e-5)
    for a, b in zip(model.parameters(), cpu_model.parameters(), strict=True):
        np.testing.assert_allclose(a.value, b.value, rtol=1e-4, atol=1e-6)
