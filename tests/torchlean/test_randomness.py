"""Same seed, same bits: the random ops give identical bits on every backend and path, in each
dtype, and a session's values have the session's dtype.

The reference is :func:`torchlean_ir.backends._random.uniform` in the graph's dtype (float32
draws are ``k / 2^32`` rounded toward zero). Each path runs the same program: a ``rand_uniform``
node, a ``bernoulli_mask`` node and ``sum(x * u)`` (whose gradient with respect to ``x`` is
``u`` exactly), and must reproduce the reference bit for bit: the reference interpreter, the
compiled function, the compiled tape (``value_and_vjp``), the batched compiled graph, the linked
session, and eager sessions on NumPy and on JAX, per sample and batched.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import compiler
import torchlean_ir as tl
from torchlean import EagerSession, GraphOps, LinkedSession, Options, Session
from torchlean_ir.backends import _random

SHAPE = (1000,)
KEEP = 0.3
SEEDS = [0, 1, 12345, 2**64 - 1]
DTYPES = ["f32", "f64"]


def _expected(seed: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The reference draws of the program's two random nodes (positions 0 and 2)."""
    dt = np.dtype({"f32": np.float32, "f64": np.float64}[dtype])
    u = _random.uniform(seed, 0, SHAPE, dt)
    mask = _random.bernoulli(dt.type(KEEP), seed, 2, SHAPE, dt)
    return u, mask


def _program(ops: Any, x: Any, seed: int) -> tuple[Any, Any, Any]:
    """u = rand_uniform (node 0), keep_prob (node 1), mask (node 2), sum(x * u)."""
    u = ops.rand_uniform(SHAPE, seed=seed)
    mask = ops.bernoulli_mask(ops.full((), KEEP), SHAPE, seed=seed)
    return u, mask, ops.sum(ops.mul(x, u))


def _same_bits(got: Any, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    same = got.tobytes() == want.tobytes()
    assert same, f"{what}: {int(np.sum(got != want))} of {want.size} values differ"


def _graph(seed: int, dtype: str) -> tl.GraphData:
    g = GraphOps(Options(dtype=dtype))
    x = g.input(name="x", shape=SHAPE, requires_grad=True)
    u, mask, loss = _program(g, x, seed)
    return g.build(u, mask, loss)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
def test_graph_paths_draw_the_reference_bits(seed: int, dtype: str) -> None:
    u_ref, mask_ref = _expected(seed, dtype)
    dt = u_ref.dtype
    g = _graph(seed, dtype)
    x = np.linspace(-1, 1, SHAPE[0])
    # the reference interpreter computes in float64: the draws are exact there
    u, mask, _ = tl.eval_graph(g, {"x": x})
    assert np.array_equal(u, u_ref.astype(np.float64)) and np.array_equal(mask, mask_ref)
    _same_bits(u.astype(dt), u_ref, "reference interpreter")
    cg = compiler.compile(g)
    xv = x.astype(dt)
    u, mask, _ = cg.forward({"x": xv})
    _same_bits(u, u_ref, "compiled forward")
    _same_bits(mask, mask_ref, "compiled forward (mask)")
    seeds = (np.zeros(SHAPE, dt), np.zeros(SHAPE, dt), np.ones((), dt))
    (u, mask, _), grads = cg.value_and_vjp({"x": xv}, seeds)
    _same_bits(u, u_ref, "compiled tape")
    _same_bits(mask, mask_ref, "compiled tape (mask)")
    _same_bits(grads["x"], u_ref, "compiled tape gradient")
    bg = cg.batched(over=["x"], grads="sum")
    xb = np.stack([xv, -xv])
    u, mask, _ = bg.forward({"x": xb})
    for k in range(2):  # vmap repeats one graph's draws for every sample
        _same_bits(np.asarray(u)[k], u_ref, "compiled batched")
        _same_bits(np.asarray(mask)[k], mask_ref, "compiled batched (mask)")
    bseeds = tuple(np.stack([s, s]) for s in seeds)
    _, grads = bg.value_and_vjp({"x": xb}, bseeds)
    _same_bits(np.asarray(grads["x"])[1], u_ref, "compiled batched gradient")


def _session_run(s: Session, seed: int, batched: bool) -> tuple[Any, Any, Any, Any]:
    x0 = np.linspace(-1, 1, SHAPE[0])
    x = s.input(np.stack([x0, -x0]) if batched else x0, requires_grad=True, batched=batched)
    u, mask, loss = _program(s, x, seed)
    s.backward(loss)
    return u, mask, loss, s.grad(x)


SESSIONS = {
    "eager-numpy": lambda opts: EagerSession(opts, array_backend="numpy"),
    "eager-numpy-no-fast-kernels": lambda opts: EagerSession(
        opts.replace(fast_kernels=False), array_backend="numpy"
    ),
    "eager-jax": lambda opts: EagerSession(opts, array_backend="jax"),
    "linked": lambda opts: LinkedSession(opts),
}


@pytest.mark.parametrize("batched", [False, True], ids=["per-sample", "batched"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("session", list(SESSIONS))
def test_sessions_draw_the_reference_bits(session: str, dtype: str, batched: bool) -> None:
    for seed in SEEDS:
        u_ref, mask_ref = _expected(seed, dtype)
        opts = Options(seed=seed, dtype=dtype)
        s = SESSIONS[session](opts)
        u, mask, loss, gx = _session_run(s, seed, batched)
        _same_bits(u.numpy(), u_ref, f"{session} seed {seed}")
        _same_bits(mask.numpy(), mask_ref, f"{session} seed {seed} (mask)")
        assert loss.numpy().dtype == u_ref.dtype
        for k in range(2 if batched else 1):
            g = gx[k] if batched else gx
            _same_bits(g, u_ref, f"{session} seed {seed}: gradient of sum(x * u)")
        # the seed defaults to options.seed
        s2 = SESSIONS[session](opts)
        _same_bits(s2.rand_uniform(SHAPE).numpy(), u_ref, f"{session}: default seed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("session", list(SESSIONS))
def test_a_sessions_values_have_its_dtype(session: str, dtype: str) -> None:
    dt = np.dtype({"f32": np.float32, "f64": np.float64}[dtype])
    s = SESSIONS[session](Options(dtype=dtype))
    W = s.param(np.ones((2, 3)), name="W")
    w = s.use(W)
    x = s.input(np.arange(3.0), requires_grad=True)
    y = s.tanh(s.matmul(w, s.reshape(x, shape=(3, 1))))
    loss = s.sum(y)
    s.backward(loss)
    for t in (x, loss) if session == "linked" else (x, y, loss):
        assert t.numpy().dtype == dt, t
    assert s.grad(x).dtype == dt and s.grad(w).dtype == dt
    assert {g.dtype for g in s.param_grads().values()} == {dt}
    assert W.value.dtype == np.float64  # params live on the host in float64 whatever the session
