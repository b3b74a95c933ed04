"""The proof-linked session: leaves-first invariant, graph evaluation, compiled backward,
verification, and the imperative training loop."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import LinkedSession, Options, Param, nn

F64 = Options(dtype="f64")


def test_every_leaf_before_the_first_op() -> None:
    s = LinkedSession(F64)
    w = Param(np.ones((2, 3)), name="w")
    x = s.input(np.ones(3), name="x")
    y = s.linear(s.use(w), s.zeros((2,)), x)  # zeros records const + broadcast_to: ops
    assert s.use(w) is not None  # already a leaf: fine after ops
    with pytest.raises(tl.TorchleanError) as e:
        s.input(np.ones(2), name="late")
    msg = str(e.value)
    assert "records every leaf before the first op" in msg and "test_linked.py:" in msg
    with pytest.raises(tl.TorchleanError, match="before the first op"):
        s.use(Param(np.ones(1), name="late_param"))
    s.reset_tape()
    with pytest.raises(tl.TorchleanError, match="before the last reset_tape"):
        s.tanh(y)
    s.input(np.ones(2), name="late")  # a new graph: fine


def test_get_value_evaluates_the_recorded_graph() -> None:
    s = LinkedSession(F64)
    v = s.input(np.array([1.0, 2.0, 3.0]), name="v")
    i = s.nat(2, name="i")
    g = s.gather_scalar_nat(s.scale(v, c=10.0), i)
    assert s.get_value(g) == 30.0
    s.set_nat(i, 0)  # the graph reads the nat environment when evaluated
    assert s.get_value(g) == 10.0
    s.set_nat(i, 7)
    assert s.get_value(g) == 0.0  # out of range reads 0
    graph = s.graph(g)
    assert [ix.name for ix in graph.index_inputs] == ["i"] and graph.index_inputs[0].value is None


def test_backward_runs_the_compiled_tape_and_equals_backprop_ctx() -> None:
    s = LinkedSession(F64)
    model = nn.Sequential(nn.Linear(3, 4, rng=0), nn.Tanh(), nn.Linear(4, 2, rng=1))
    params = model.parameters()
    refs = [s.use(p) for p in params]
    x = s.input(np.array([0.3, -1.0, 2.0]), requires_grad=True)
    out = model(s, x)
    seed = np.array([1.5, -0.5])
    s.backward(out, seed)
    ref = tl.backprop_ctx(s.graph(out), s.leaf_values(), seed, s.index_values())
    for p, r in zip(params, refs, strict=True):
        np.testing.assert_allclose(s.grad(r), ref[p.name], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(s.grad(x), ref["input0"], rtol=1e-12)
    assert len(s.compiled(out).tape) == len(s.graph(out).nodes)
    with pytest.raises(tl.TorchleanError, match="gradients of leaves only"):
        s.grad(out)
    with pytest.raises(tl.TorchleanError, match="not a scalar; pass seed="):
        s.backward(out)


def test_no_grad_leaf_and_float32() -> None:
    s = LinkedSession()  # f32 by default
    w = s.use(Param(np.array([1.0, 2.0]), name="w"))
    x = s.input(np.array([3.0, 4.0]), name="x")
    loss = s.sum(s.mul(w, x))
    s.backward(loss)
    assert s.grad(x) is None
    np.testing.assert_allclose(s.grad(w), [3.0, 4.0])
    assert s.graph(loss).leaves[0].type.dtype == tl.DType.F32


def test_training_loop_and_stale_params() -> None:
    s = LinkedSession(F64)
    w = s.param(np.array([0.0, 0.0]), name="w")
    xs = np.array([[1.0, 2.0], [2.0, -1.0], [0.5, 0.5]])
    ys = xs @ np.array([2.0, -3.0])
    losses = []
    for epoch in range(30):
        s.reset_tape()
        wr = s.use(w)
        x = s.input(xs)
        y = s.input(ys)
        pred = s.reduce_sum(s.mul(x, s.broadcast_to(wr, shape=(3, 2))), axis=1)
        loss = s.mse_loss(pred, y)
        s.backward(loss)
        losses.append(s.get_value(loss).item())
        s.sgd_step_all(0.2)
        if epoch == 0:
            with pytest.raises(tl.TorchleanError, match="call reset_tape"):
                s.tanh(loss)
    assert losses[-1] < 1e-3 * losses[0]
    np.testing.assert_allclose(w.value, [2.0, -3.0], atol=1e-2)


def test_verify_proves_the_compiled_backward() -> None:
    pytest.importorskip("verify")
    s = LinkedSession(F64)
    model = nn.Sequential(nn.Linear(3, 4, rng=0), nn.ReLU(), nn.Linear(4, 3, rng=1))
    for p in model.parameters():
        s.use(p)
    loss = s.cross_entropy(model(s, s.input(np.ones(3))), s.nat(1))
    report = s.verify(loss)
    assert report.verdict == "verified", str(report)
