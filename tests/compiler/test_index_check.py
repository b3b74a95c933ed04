"""Index arrays on an accelerator are checked on the device, without a round trip per call.

Host data and CPU arrays are checked before the call (an immediate one-line error). A
``jax.Array`` on a GPU would have to be copied back to be checked on the host, which waits for
the device at every call; it is checked on the device instead, and the check's result is read
at the next call (or by ``CompiledGraph.check_index()``). These tests run the device path on the
CPU by declaring CPU arrays to be on an accelerator.
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
    cg.value_and_grad(_leaves(3), {"label": bad})  # dispatched; checked on the device
    good = jax.device_put(np.array([0, 1, 1], np.int32))
    with pytest.raises(ArgumentError) as e:
        cg.value_and_grad(_leaves(3), {"label": good})
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(
        "index['label'] (in the previous call): expected non-negative integers, got -3"
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
    state, _ = step(state, {"x": leaves["x"]}, {"label": bad})
    with pytest.raises(ArgumentError, match=r"index\['label'\] \(in the previous call\).*got -1"):
        step(state, {"x": leaves["x"]}, {"label": y})


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
