"""Index arrays on an accelerator are checked on the device, without a round trip per call.

Host data and CPU arrays are checked before the call (an immediate one-line error). A
``jax.Array`` on a GPU would have to be copied back to be checked on the host, which waits for
the device at every call; it is checked on the device instead, and the check's result is read
by a later call once computed (or by ``CompiledGraph.check_index()``, which waits). These tests
run the device path on the CPU by declaring CPU arrays to be on an accelerator.
"""

from __future__ import annotations

import jax
import numpy as np
import optax
import pytest

import compiler
from compiler import ArgumentError, _args, _compiled
from tests.compiler.models import CLS_CLASSES, CLS_FEATURES, classifier_build, classifier_sample


@pytest.fixture
def on_device(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every jax array counts as on an accelerator; the list collects the arrays checked on
    the device."""
    seen: list[object] = []

    def fake(v: object) -> bool:
        if type(v) is _args.ArrayImpl:
            seen.append(v)
            return True
        return False

    monkeypatch.setattr(_compiled, "on_accelerator", fake)
    return seen


def _cg() -> compiler.CompiledGraph:
    return compiler.compile(classifier_build("f32")).batched(over=("x", "label"), grads="mean")


def _leaves(n: int) -> dict[str, np.ndarray]:
    leaves, _ = classifier_sample(np.random.default_rng(0))
    leaves = {k: np.asarray(v, np.float32) for k, v in leaves.items()}
    leaves["x"] = np.random.default_rng(1).normal(size=(n, CLS_FEATURES)).astype(np.float32)
    return leaves


def test_device_labels_are_not_read_on_the_host(
    on_device: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    cg = _cg()
    labels = jax.device_put(np.array([0, 1, 2], np.int64))

    def no_host_copy(*a: object, **k: object) -> None:
        raise AssertionError("an index array on the device was read on the host")

    monkeypatch.setattr(_compiled, "convert_index", no_host_copy)
    value, _ = cg.value_and_grad(_leaves(3), {"label": labels})
    assert any(v is labels for v in on_device)
    monkeypatch.undo()
    # the same result as the host path
    ref, _ = (
        compiler.compile(classifier_build("f32"))
        .batched(over=("x", "label"), grads="mean")
        .value_and_grad(_leaves(3), {"label": np.array([0, 1, 2])})
    )
    np.testing.assert_array_equal(np.asarray(value), np.asarray(ref))


def test_a_negative_device_label_is_reported_at_the_next_call(on_device: list) -> None:
    cg = _cg()
    bad = jax.device_put(np.array([0, -3, 1], np.int32))
    value, _ = cg.value_and_grad(_leaves(3), {"label": bad})  # checked on the device
    jax.block_until_ready(value)  # the check ran before the program
    good = jax.device_put(np.array([0, 1, 1], np.int32))
    with pytest.raises(ArgumentError) as e:
        cg.value_and_grad(_leaves(3), {"label": good})
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "index['label'] (in an earlier call): expected non-negative integers, got -3"
    )
    # reported once; the next call goes through
    cg.value_and_grad(_leaves(3), {"label": good})
    # the same bad array again is checked again, not taken from the last-call cache
    cg.value_and_grad(_leaves(3), {"label": bad})
    with pytest.raises(ArgumentError, match="got -3"):
        cg.check_index()
    cg.check_index()  # nothing pending any more


def test_training_steps_check_on_the_device(on_device: list) -> None:
    cg = _cg()
    step = compiler.TrainStep(cg, optax.sgd(0.1))
    leaves = _leaves(4)
    state = step.init({k: v for k, v in leaves.items() if k != "x"})
    y = jax.device_put(np.array([0, 1, 2, CLS_CLASSES - 1], np.uint8))
    state, loss = step(state, {"x": leaves["x"]}, {"label": y})
    assert np.isfinite(float(loss))
    bad = jax.device_put(np.array([0, 1, -1, 2], np.int64))
    state, loss = step(state, {"x": leaves["x"]}, {"label": bad})
    jax.block_until_ready(loss)
    with pytest.raises(ArgumentError, match=r"index\['label'\] \(in an earlier call\).*got -1"):
        step(state, {"x": leaves["x"]}, {"label": y})


def test_a_training_step_checks_in_its_own_program(
    on_device: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TrainStep computes the lowest label inside the step (an output of the same program):
    no check program of its own per call, the same one-line error at a later call."""

    def no_program(v: object) -> None:
        raise AssertionError("a separate check program ran")

    monkeypatch.setattr(_args, "_lowest", no_program)
    step = compiler.TrainStep(_cg(), optax.sgd(0.1))
    leaves = _leaves(4)
    state = step.init({k: v for k, v in leaves.items() if k != "x"})
    good = jax.device_put(np.array([0, 1, 2, CLS_CLASSES - 1], np.int32))
    state, _ = step(state, {"x": leaves["x"]}, {"label": good})
    assert not step.compiled._pending or step.compiled._pending[0].where == "index['label']"
    bad = jax.device_put(np.array([0, 1, -5, 2], np.int32))
    state, loss = step(state, {"x": leaves["x"]}, {"label": bad})
    jax.block_until_ready(loss)
    with pytest.raises(ArgumentError, match=r"index\['label'\] \(in an earlier call\).*got -5"):
        step(state, {"x": leaves["x"]}, {"label": good})
    step.compiled.check_index()  # nothing left pending


def test_a_failed_step_checks_its_labels_again(on_device: list) -> None:
    """A step that fails after its labels were taken (its deferred check never registered)
    leaves them to be checked again, not taken as checked."""
    step = compiler.TrainStep(_cg(), optax.sgd(0.1))
    leaves = _leaves(4)
    state = step.init({k: v for k, v in leaves.items() if k != "x"})
    bad = jax.device_put(np.array([0, 1, -5, 2], np.int32))
    stale = state
    state, _ = step(state, {"x": leaves["x"]}, {"label": jax.device_put(np.zeros(4, np.int32))})
    with pytest.raises((RuntimeError, ValueError)):  # the old state's buffers were donated
        step(stale, {"x": leaves["x"]}, {"label": bad})
    assert step.compiled._last_index is None
    state, loss = step(state, {"x": leaves["x"]}, {"label": bad})
    jax.block_until_ready(loss)
    with pytest.raises(ArgumentError, match="got -5"):
        step.compiled.check_index()


def test_shape_and_dtype_are_checked_at_once(on_device: list) -> None:
    cg = _cg()
    with pytest.raises(ArgumentError, match="expected non-negative integers, got dtype float32"):
        cg.value_and_grad(_leaves(3), {"label": jax.device_put(np.zeros(3, np.float32))})
    with pytest.raises(ArgumentError, match="batch size 2 differs"):
        cg.value_and_grad(_leaves(3), {"label": jax.device_put(np.zeros(2, np.int32))})


def test_host_labels_are_still_refused_at_once() -> None:
    cg = _cg()
    with pytest.raises(ArgumentError, match=r"index\['label'\]: expected non-negative integers"):
        cg.value_and_grad(_leaves(3), {"label": np.array([0, -1, 2])})
    # and a CPU jax array is checked on the host too (a view: no round trip on the CPU)
    with pytest.raises(ArgumentError, match=r"index\['label'\]: expected non-negative integers"):
        cg.value_and_grad(_leaves(3), {"label": jax.device_put(np.array([0, -1, 2]))})


def test_large_values_become_int32_max_on_the_device(on_device: list) -> None:
    v = jax.device_put(np.array([1, 2**40], np.int64))
    a, pending = _args.device_index(v, (), 2, "index['label']")
    assert a.dtype == np.int32
    assert np.asarray(a).tolist() == [1, np.iinfo(np.int32).max]
    assert pending is not None
    pending.raise_if_bad()
    u, none = _args.device_index(jax.device_put(np.array([3], np.uint32)), (), 1, "i")
    assert none is None and np.asarray(u).tolist() == [3]


def test_a_call_never_waits_for_a_check(on_device: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check the device has not computed yet stays pending (the call goes on); past
    ``_MAX_PENDING`` of them the oldest is waited for; ``check_index()`` waits for all."""
    cg = _cg()
    waited: list[int] = []

    class Slow(_args.PendingCheck):
        def raise_if_bad(self) -> None:
            waited.append(int(self.lowest))
            super().raise_if_bad()

    def slow_index(
        v: object, shape: object, batch: object, where: str, *, check: bool = True
    ) -> object:
        a, pending = _args.device_index(v, shape, batch, where)  # type: ignore[arg-type]
        assert pending is not None
        return a, Slow(pending.where, pending.lowest)

    monkeypatch.setattr(_compiled, "device_index", slow_index)
    monkeypatch.setattr(_args.ArrayImpl, "is_ready", lambda self: False)
    labels = [jax.device_put(np.array([0, 1, k % 3], np.int32)) for k in range(20)]
    for y in labels:
        cg.value_and_grad(_leaves(3), {"label": y})
    # read at the start of a call: the checks of _MAX_PENDING calls, then this call's own
    assert len(cg._pending) == _compiled._MAX_PENDING + 1
    assert len(waited) == len(labels) - 1 - _compiled._MAX_PENDING
    cg.check_index()
    assert not cg._pending and len(waited) == len(labels)
