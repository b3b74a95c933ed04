"""Training stays on the device: a step of ``ScalarTrainer`` (compiled, or eager on the JAX
path a GPU uses) makes no implicit host-to-device or device-to-host transfer once warm, returns
its loss without waiting for it, and keeps parameters and moments on the device until read.
Run on the CPU with ``jax.transfer_guard("disallow")``, which refuses implicit transfers there
as it would on a GPU."""

from __future__ import annotations

import gc
from typing import Any

import jax
import numpy as np
import pytest

from torchlean import EagerSession, NatInput, Options, ScalarTrainer, nn


def _trainer(backend: str) -> tuple[ScalarTrainer, Any]:
    opts = Options(backend=backend, dtype="f32")
    rng = opts.rng("init")
    model = nn.Sequential(nn.Linear(12, 16, rng=rng), nn.ReLU(), nn.Linear(16, 4, rng=rng))

    def loss(ops: Any, image: Any, label: Any) -> Any:
        return ops.cross_entropy(model(ops, image), label)

    trainer = ScalarTrainer(loss, model.parameters(), [(12,), NatInput()], opts)
    if backend == "eager":
        trainer.session = EagerSession(opts, array_backend="jax")  # the GPU's path, on the CPU
    return trainer, model


def _data() -> tuple[Any, np.ndarray]:
    rng = np.random.default_rng(0)
    x = jax.device_put(rng.normal(size=(8, 12)).astype(np.float32))
    return x, rng.integers(0, 4, size=8)


@pytest.mark.parametrize("backend", ["compiled", "eager"])
def test_a_warm_step_makes_no_implicit_transfer(backend: str) -> None:
    trainer, model = _trainer(backend)
    x, y = _data()
    labels = jax.device_put(y.astype(np.int32)) if backend == "compiled" else y
    for _ in range(2):
        trainer.adam_step(x, labels, lr=1e-2, batched=True)
        trainer.adamw_step(x, labels, lr=2e-2, batched=True)
    with jax.transfer_guard("disallow"):
        loss = trainer.adam_step(x, labels, lr=1e-2, batched=True)
        loss = trainer.adamw_step(x, labels, lr=1e-2, batched=True)
    assert isinstance(loss, jax.Array) and loss.shape == ()
    assert all(not p.synced for p in model.parameters())  # the host copies are stale
    losses = trainer.losses  # read here, all at once
    assert len(losses) == 6 and all(type(v) is float for v in losses)
    assert losses[-1] == float(loss)
    values = trainer.get_params()  # synchronised on read
    assert all(p.synced for p in model.parameters())
    assert all(np.all(np.isfinite(v)) for v in values.values())


def test_losses_follow_the_numpy_path() -> None:
    """The device path computes what the NumPy path computes, step by step."""
    x, y = _data()
    ref, _ = _trainer("eager")
    ref.session = EagerSession(ref.options)  # NumPy kernels: float losses
    dev, _ = _trainer("eager")
    for _ in range(3):
        a = ref.adam_step(np.asarray(x), y, lr=1e-2, batched=True)
        dev.adam_step(x, y, lr=1e-2, batched=True)
        assert type(a) is float
    np.testing.assert_allclose(dev.losses, ref.losses, rtol=1e-5)
    dev.losses = [1.0]
    assert dev.losses == [1.0]


class _Compiles:
    """Counts XLA compilations (``jax_log_compiles``) while installed."""

    def __init__(self) -> None:
        import logging

        self.n = 0
        counter = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if "Finished XLA compilation" in record.getMessage():
                    counter.n += 1

        self.handler = Handler()

    def __enter__(self) -> _Compiles:
        import logging

        self._old = jax.config.jax_log_compiles
        jax.config.update("jax_log_compiles", True)
        logging.getLogger("jax").addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import logging

        logging.getLogger("jax").removeHandler(self.handler)
        jax.config.update("jax_log_compiles", self._old)


@pytest.mark.parametrize("array_backend", ["numpy", "jax"])
def test_eager_training_compiles_only_in_its_first_step(array_backend: str) -> None:
    """The second step meets the kernels with the argument types of the first (params as
    committed device arrays from the start, fresh optimizer states placed where the params
    are), so nothing is compiled again."""
    trainer, _ = _trainer("eager")
    trainer.session = EagerSession(trainer.options, array_backend=array_backend)
    x, y = _data()
    x = np.asarray(x)
    trainer.adam_step(x, y, lr=1e-2, batched=True)
    with _Compiles() as compiles:
        for _ in range(2):
            trainer.adam_step(x, y, lr=1e-2, batched=True)
    assert compiles.n == 0


def test_gpu_kernel_options_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the eager kernels are compiled with Triton GEMM autotuning off (the first step
    of an MLP took 32 s in a fresh process on an H200 with it, 1.4 s without). The CPU accepts
    the option (and ignores it), so the GPU's code path runs here: same losses, no recompile."""
    import torchlean._eager as eager

    seen: list[object] = []

    def options(device: object) -> dict[str, object]:
        seen.append(device)
        return {"xla_gpu_enable_triton_gemm": False}

    assert eager.kernel_compiler_options(jax.devices("cpu")[0]) is None
    monkeypatch.setattr(eager, "kernel_compiler_options", options)
    monkeypatch.setattr(eager, "_JIT_CACHE", {})
    monkeypatch.setattr(eager, "_TOP_LEVEL", {})
    x, y = _data()
    ref, _ = _trainer("eager")
    got, _ = _trainer("eager")
    got.session = EagerSession(got.options, array_backend="jax")
    for _ in range(2):
        ref.adam_step(np.asarray(x), y, lr=1e-2, batched=True)
        got.adam_step(x, y, lr=1e-2, batched=True)
    assert seen and eager._TOP_LEVEL
    with _Compiles() as compiles:
        got.adam_step(x, y, lr=1e-2, batched=True)
    assert compiles.n == 0
    ref.adam_step(np.asarray(x), y, lr=1e-2, batched=True)
    np.testing.assert_allclose(got.losses, ref.losses, rtol=1e-5)


def test_a_learning_rate_schedule_compiles_the_step_twice_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Constant hyperparameters are constants of the compiled step (as in a hand-written
    one); the first change switches the trainer to a step taking them as a runtime vector, so a
    schedule compiles one more step and never again. From then on a learning rate that changes
    at every step goes in as a NumPy vector with the step's own call: no ``jax.device_put``,
    no implicit transfer the guard would refuse. The losses follow the eager path's."""
    x, y = _data()
    labels = jax.device_put(y.astype(np.int32))
    compiled, _ = _trainer("compiled")
    eager, _ = _trainer("eager")
    rates = [1e-2, 1e-2, 5e-3, 5e-3] + [4e-3 / (1 + k) for k in range(8)]
    compiled.adam_step(x, labels, lr=rates[0], batched=True)
    first = compiled._hot["adam"].step
    assert first.hyper_names == ()  # the constant step
    with _Compiles() as c:
        for lr in rates[1:4]:
            compiled.adam_step(x, labels, lr=lr, batched=True)
    assert c.n <= 1, c.n  # the vector step once, or nothing when it was already cached
    puts: list[object] = []
    put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.append(a) or put(*a, **k))
    with _Compiles() as c, jax.transfer_guard("disallow"):
        for lr in rates[4:]:
            compiled.adam_step(x, labels, lr=lr, batched=True)
    assert c.n == 0 and puts == []
    step = compiled._hot["adam"].step
    assert step.hyper_names == ("learning_rate", "b1", "b2", "eps") and step.trace_count == 1
    np.testing.assert_allclose(np.asarray(compiled._hot["adam"].hyper)[0], rates[-1])
    for lr in rates:
        eager.adam_step(x, y, lr=lr, batched=True)
    np.testing.assert_allclose(compiled.losses, eager.losses, rtol=1e-5)


@pytest.mark.parametrize("backend", ["compiled", "eager"])
def test_a_long_loop_keeps_its_losses_in_few_device_buffers(backend: str) -> None:
    """Every 64 device losses in a row are stacked into one device array (no transfer) whose
    copy to the host starts at once; at the next stacking the runs already computed become
    host floats (no wait). Reading them gives every step's loss in order."""
    from torchlean._trainer import _LOSS_RUN

    trainer, _ = _trainer(backend)
    x, y = _data()
    labels = jax.device_put(y.astype(np.int32)) if backend == "compiled" else y
    run = _LOSS_RUN
    each = []
    trainer.adam_step(x, labels, lr=1e-2, batched=True)
    with jax.transfer_guard("disallow"):
        for _ in range(2 * run + 2):
            each.append(trainer.adam_step(x, labels, lr=1e-2, batched=True))
    held = [np.shape(v) for v in trainer._losses]
    # the first run is on the host; the second still on the device, or on the host too
    assert held in ([(run,), (), (), ()], [(), (), ()]), held
    assert len(trainer._host_losses) == run * (2 - held.count((run,)))
    losses = trainer.losses
    assert len(losses) == 2 * run + 3 and all(type(v) is float for v in losses)
    assert losses[1:] == [float(v) for v in each]
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("backend", ["compiled", "eager"])
def test_a_long_loop_holds_a_bounded_number_of_device_buffers(backend: str) -> None:
    """What a training loop leaves on the device does not grow with its length: the live
    arrays after 6 runs of 64 steps are those after 2, give or take a run still on its way
    (the old record kept one stacked buffer per run: 4 more)."""
    from torchlean._trainer import _LOSS_RUN

    trainer, _ = _trainer(backend)
    x, y = _data()
    labels = jax.device_put(y.astype(np.int32)) if backend == "compiled" else y
    trainer.adam_step(x, labels, lr=1e-2, batched=True)
    for _ in range(2 * _LOSS_RUN):
        trainer.adam_step(x, labels, lr=1e-2, batched=True)
    jax.block_until_ready(trainer._losses)
    gc.collect()
    before = len(jax.live_arrays())
    for _ in range(4 * _LOSS_RUN):
        trainer.adam_step(x, labels, lr=1e-2, batched=True)
    jax.block_until_ready(trainer._losses)
    gc.collect()
    # a stacked run whose computation was not finished at the next stacking waits one more
    # run: one or two runs on the device at either count (one buffer each, + its result)
    assert len(jax.live_arrays()) <= before + 2
    assert sum(np.shape(v) == (_LOSS_RUN,) for v in trainer._losses) <= 2
    losses = trainer.losses
    assert len(losses) == 6 * _LOSS_RUN + 1 and losses[-1] < losses[0]


def test_a_step_after_the_params_changed_elsewhere_starts_from_them() -> None:
    """A compiled step runs from what the last one left only while the params still hold it:
    after a param is assigned, and after another trainer's step on the same params, the step
    starts from the params as they are (its own Adam moments carried on), as the eager path
    does (its NumPy rules here)."""
    x, y = _data()
    xs = np.asarray(x)
    losses = {}
    for backend in ("compiled", "eager"):
        trainer, model = _trainer(backend)
        other = ScalarTrainer(trainer.fn, model.parameters(), [(12,), NatInput()], trainer.options)
        if backend == "eager":  # the NumPy rules: the reference, no kernels to compile
            trainer.session = EagerSession(trainer.options)
        for _ in range(2):
            trainer.adam_step(xs, y, lr=1e-2, batched=True)
        first = model.parameters()[0]
        first.value = first.value * 0.5
        trainer.adam_step(xs, y, lr=1e-2, batched=True)
        other.adam_step(xs, y, lr=1e-2, batched=True)
        trainer.adam_step(xs, y, lr=1e-2, batched=True)
        losses[backend] = trainer.losses + other.losses
    assert len(losses["compiled"]) == 5
    np.testing.assert_allclose(losses["compiled"], losses["eager"], rtol=1e-5)
