"""Eager vs compiled: the same model code gives the same loss and gradients (float64, 1e-10) on
every backend, and the eager tape's gradients equal the reference ``backprop_ctx`` of the traced
graph."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import (
    EagerSession,
    LinkedSession,
    NatInput,
    Options,
    ScalarTrainer,
    Session,
    trace,
)

from .models import CASES, Case

F64 = Options(dtype="f64")
TOL = {"rtol": 1e-10, "atol": 1e-12}


def _session_run(s: Session, case: Case, inputs: list) -> tuple[float, dict[str, np.ndarray]]:
    """The imperative API, identical for every session: leaves first, then the loss."""
    refs = [s.use(p) for p in case.params]
    args = [
        (s.nat(v) if spec.size is None else s.nat_vec(v))
        if isinstance(spec, NatInput)
        else s.input(v)
        for spec, v in zip(case.specs, inputs, strict=True)
    ]
    loss = case.loss(s, *args)
    s.backward(loss)
    return s.get_value(loss).item(), {
        p.name: s.grad(r) for p, r in zip(case.params, refs, strict=True)
    }


def _reference(case: Case, inputs: list) -> tuple[float, dict[str, np.ndarray]]:
    traced = trace(case.loss, case.specs, case.params, F64)
    leaves = {p.name: p.value for p in case.params}
    index = {}
    for spec, name, v in zip(traced.specs, traced.names, inputs, strict=True):
        (index if isinstance(spec, NatInput) else leaves)[name] = v
    (value,) = tl.eval_graph(traced.graph, leaves, index)
    ct = tl.backprop_ctx(traced.graph, leaves, None, index)
    return float(value), {p.name: ct[p.name] for p in case.params}


def _assert_same(a: tuple[float, dict], b: tuple[float, dict]) -> None:
    assert a[0] == pytest.approx(b[0], rel=1e-10, abs=1e-12)
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], **TOL, err_msg=k)


SESSIONS = {
    "eager-numpy": lambda: EagerSession(F64, array_backend="numpy"),
    "eager-jax": lambda: EagerSession(F64, array_backend="jax"),
    "linked": lambda: LinkedSession(F64),
    "Session(compiled)": lambda: Session(F64.replace(backend="compiled")),
}


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_every_session_equals_backprop_ctx(make) -> None:  # type: ignore[no-untyped-def]
    case = make()
    inputs = case.sample(0)
    ref = _reference(case, inputs)
    for name, new in SESSIONS.items():
        got = _session_run(new(), case, inputs)
        try:
            _assert_same(got, ref)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_trainer_eager_equals_compiled(make) -> None:  # type: ignore[no-untyped-def]
    case = make()
    results = {}
    for backend in ("eager", "compiled"):
        tr = ScalarTrainer(case.loss, case.params, case.specs, F64.replace(backend=backend))
        one = tr.forward(*case.sample(1)), tr.backward(*case.sample(1))
        batch = tr.forward(*case.batch, batched=True), tr.backward(*case.batch, batched=True)
        results[backend] = (one, batch)
    (e1, eb), (c1, cb) = results["eager"], results["compiled"]
    _assert_same(e1, c1)
    _assert_same(eb, cb)
    _assert_same(e1, _reference(case, case.sample(1)))
    # the batched loss is the mean of the per-sample losses
    per_sample = [_reference(case, case.sample(k))[0] for k in range(len(case.batch[0]))]
    assert eb[0] == pytest.approx(np.mean(per_sample), rel=1e-12)


def test_training_trajectories_agree() -> None:
    finals = {}
    for backend in ("eager", "compiled"):
        case = CASES[1]()  # same seed: same initial params
        tr = ScalarTrainer(case.loss, case.params, case.specs, F64.replace(backend=backend))
        losses = []
        for k in range(3):
            losses.append(tr.adam_step(*case.batch, lr=1e-2, batched=True))
            losses.append(tr.adamw_step(*case.sample(k), lr=1e-2, weight_decay=0.05))
            losses.append(tr.step(*case.batch, lr=0.05, batched=True))
        finals[backend] = (losses, tr.get_params())
    (le, pe), (lc, pc) = finals["eager"], finals["compiled"]
    np.testing.assert_allclose(le, lc, rtol=1e-10)
    for k in pe:
        np.testing.assert_allclose(pe[k], pc[k], **TOL, err_msg=k)
