"""The eager session: every op of the table against the reference interpreters (forward and
``backprop_ctx``), kink conventions, the tape's bookkeeping and its errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import torchlean_ir as tl
from tests.seeds import rng_for
from torchlean import EagerSession, Options, Param, Tensor

from ..op_cases import CASES, KINKS, OpCase

F64 = Options(dtype="f64")  # float64 sessions: values compared at float64 tolerances

# numpy: the reference rules exactly; numpy-fast: JAX lowerings for ops that declare one
# (fast_kernels); jax: every op lowered and jitted (the GPU path, run on the CPU here).
BACKENDS = ["numpy", "numpy-fast", "jax"]


def _session(backend: str) -> EagerSession:
    fast = backend == "numpy-fast"
    return EagerSession(
        Options(dtype="f64", fast_kernels=fast), array_backend=backend.removesuffix("-fast")
    )


def _run_case(
    s: EagerSession, case: OpCase, x: dict[str, np.ndarray]
) -> tuple[list[Tensor], Tensor]:
    leaves = [s.input(x[f"a{i}"], requires_grad=True) for i in range(len(case.shapes))]
    nats = [s.nat(v) if size is None else s.nat_vec(np.asarray(v)) for size, v in case.index]
    return leaves, s.apply(case.op, *leaves, *nats, **case.attrs)


def _first_per_op(cases: list[OpCase]) -> list[OpCase]:
    seen: dict[str, OpCase] = {}
    for c in cases:
        seen.setdefault(c.op, c)
    return list(seen.values())


# Every row on the reference path; the fast-kernel path only where an op has a lowering of its
# own (elsewhere it is the reference path); the JAX path (a jit per signature, slow to compile)
# on one row per op.
TABLE = (
    [pytest.param(c, "numpy", id=f"{c.id}-numpy") for c in CASES]
    + [
        pytest.param(c, "numpy-fast", id=f"{c.id}-numpy-fast")
        for c in CASES
        if tl.get_op(c.op).lower_rule is not None or tl.get_op(c.op).lower_vjp_rule is not None
    ]
    + [pytest.param(c, "jax", id=f"{c.id}-jax") for c in _first_per_op(CASES)]
)


@pytest.mark.parametrize(("case", "backend"), TABLE)
def test_op_matches_reference(case: OpCase, backend: str) -> None:
    rng = rng_for(case.id)
    g = case.graph("f64")
    x = case.sample(rng)
    idx = case.index_values()
    s = _session(backend)
    leaves, out = _run_case(s, case, x)
    (want,) = tl.eval_graph(g, x, idx)
    tol = 0 if backend == "numpy" else 1e-12  # same rules: bit-identical forward
    np.testing.assert_allclose(out.numpy(), want, rtol=tol, atol=tol)
    seed = rng.normal(size=out.shape)
    s.backward(out, seed)
    ref = tl.backprop_ctx(g, x, seed, idx)
    for i, leaf in enumerate(leaves):
        got = s.grad(leaf)
        assert got is not None
        np.testing.assert_allclose(got, ref[f"a{i}"], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kink", KINKS, ids=lambda k: k.id)
def test_kink_conventions(kink, backend: str) -> None:  # type: ignore[no-untyped-def]
    s = _session(backend)
    leaves = [s.input(a, requires_grad=True) for a in kink.args]
    out = s.apply(kink.op, *leaves, **kink.attrs)
    s.backward(out, kink.ct)
    for leaf, want in zip(leaves, kink.expected_vjp, strict=True):
        np.testing.assert_array_equal(s.grad(leaf), want)


def _mlp_graph_and_session() -> tuple[tl.GraphData, dict[str, np.ndarray], EagerSession, list]:
    rng = np.random.default_rng(0)
    vals = {
        "W1": rng.normal(size=(5, 3)),
        "b1": rng.normal(size=5),
        "W2": rng.normal(size=(2, 5)),
        "b2": rng.normal(size=2),
        "x": rng.normal(size=3),
        "y": rng.normal(size=2),
    }
    b = tl.GraphBuilder("f64")
    W1, b1 = b.param("W1", (5, 3)), b.param("b1", (5,))
    W2, b2 = b.param("W2", (2, 5)), b.param("b2", (2,))
    x, y = b.input("x", (3,)), b.input("y", (2,))
    h = b.tanh(b.linear(W1, b1, x))
    h = h * h + b.relu(h)  # fan-out: h feeds three uses
    out = b.mse_loss(b.linear(W2, b2, h), y)
    graph = b.build(out)
    s = EagerSession(F64)
    params = [Param(vals[k], name=k) for k in ("W1", "b1", "W2", "b2")]
    return graph, vals, s, params


def test_fan_out_sums_like_backprop_ctx() -> None:
    graph, vals, s, params = _mlp_graph_and_session()
    W1, b1, W2, b2 = (s.use(p) for p in params)
    x, y = s.input(vals["x"]), s.input(vals["y"])
    h = s.tanh(s.linear(W1, b1, x))
    h = h * h + s.relu(h)
    loss = s.mse_loss(s.linear(W2, b2, h), y)
    s.backward(loss)
    ref = tl.backprop_ctx(graph, vals)
    for p, t in zip(params, (W1, b1, W2, b2), strict=True):
        np.testing.assert_allclose(s.grad(t), ref[p.name], rtol=1e-13, atol=1e-14)
    grads = s.param_grads()
    np.testing.assert_array_equal(grads[params[0]], s.grad(W1))


def test_values_and_intermediate_grads() -> None:
    s = EagerSession(F64)
    x = s.input(np.array([0.5, -1.0]), requires_grad=True)
    h = s.tanh(x)
    y = s.sum(h * h)
    assert y.item() == pytest.approx(float(np.sum(np.tanh([0.5, -1.0]) ** 2)))
    s.backward(y)
    np.testing.assert_allclose(s.grad(h), 2 * np.tanh([0.5, -1.0]))
    np.testing.assert_allclose(x.grad, 2 * np.tanh([0.5, -1.0]) * (1 - np.tanh([0.5, -1.0]) ** 2))


def test_no_grad_inputs_constants_and_detach() -> None:
    s = EagerSession(F64)
    x = s.input(np.ones(3))  # requires_grad=False by default
    w = s.input(np.full(3, 2.0), requires_grad=True)
    c = s.const(np.arange(3.0))
    d = s.detach(w)
    y = s.sum(x * w + c * d)
    s.backward(y)
    assert s.grad(x) is None and s.grad(c) is None and s.grad(d) is None
    np.testing.assert_array_equal(s.grad(w), np.ones(3))  # nothing through detach


def test_unreached_leaf_gets_zeros_and_optimizer_skips_nothing() -> None:
    s = EagerSession(F64)
    p, q = Param(np.ones(2), name="p"), Param(np.ones(2), name="q")
    a, b = s.use(p), s.use(q)
    s.backward(s.sum(a))
    np.testing.assert_array_equal(s.grad(b), np.zeros(2))
    s.sgd_step_all(0.5)
    np.testing.assert_array_equal(p.value, [0.5, 0.5])
    np.testing.assert_array_equal(q.value, [1.0, 1.0])


def test_explicit_seed() -> None:
    s = EagerSession(F64)
    x = s.input(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 3.0
    s.backward(y, np.array([1.0, -1.0]))
    np.testing.assert_array_equal(s.grad(x), [3.0, -3.0])
    s.backward(s.sum(y), 2.0)
    np.testing.assert_array_equal(s.grad(x), [6.0, 6.0])


def test_backward_errors_name_the_problem() -> None:
    s = EagerSession(F64)
    y = s.input(np.ones(2), requires_grad=True) * 2.0
    with pytest.raises(tl.TorchleanError, match=r"not a scalar; pass seed="):
        s.backward(y)
    with pytest.raises(tl.TorchleanError, match=r"seed has shape \[3\]"):
        s.backward(y, np.ones(3))
    with pytest.raises(tl.TorchleanError, match="no backward"):
        s.grad(y)


def test_shape_error_at_the_call_site() -> None:
    s = EagerSession(F64)
    a, b = s.input(np.ones((2, 3))), s.input(np.ones((2, 3)))
    with pytest.raises(tl.ShapeError) as e:
        s.matmul(a, b)
    msg = str(e.value)
    assert msg.startswith("matmul(f64[2,3], f64[2,3]): inner dims differ")
    assert "test_eager.py:" in msg and "\n" not in msg
    with pytest.raises(tl.ShapeError, match="no implicit broadcasting"):
        _ = a + s.input(np.ones(3))
    with pytest.raises(
        tl.AttrError, match=r"reduce_sum: missing required attribute 'axis'.*test_eager"
    ):
        s.reduce_sum(a)
    with pytest.raises(TypeError, match="attributes go by keyword"):
        s.apply("scale", a, 2.0)


def test_stale_and_foreign_handles() -> None:
    s, other = EagerSession(F64), EagerSession(F64)
    x = s.input(np.ones(2))
    s.reset_tape()
    with pytest.raises(tl.TorchleanError, match="before the last reset_tape"):
        s.tanh(x)
    y = other.input(np.ones(2))
    with pytest.raises(tl.TorchleanError, match="another session"):
        s.tanh(y)
    with pytest.raises(TypeError, match="no truth value"):
        bool(y)


def test_nat_inputs_read_and_overwrite() -> None:
    s = EagerSession(F64)
    v = s.input(np.array([10.0, 20.0, 30.0]), requires_grad=True)
    i = s.nat(2)
    assert s.read_nat(i) == 2
    first = s.gather_scalar_nat(v, i)
    s.set_nat(i, 0)
    second = s.gather_scalar_nat(v, i)
    assert first.item() == 30.0 and second.item() == 10.0  # eager: the value at call time
    s.backward(first + second)
    np.testing.assert_array_equal(s.grad(v), [1.0, 0.0, 1.0])
    iv = s.nat_vec([2, 0])
    np.testing.assert_array_equal(s.read_nat_vec(iv), [2, 0])
    s.set_nat_vec(iv, [1, 1])
    np.testing.assert_array_equal(s.read_nat_vec(iv), [1, 1])
    with pytest.raises(tl.TorchleanError, match="expected a vector of 2 non-negative ints"):
        s.set_nat_vec(iv, [1, -1])
    with pytest.raises(tl.TorchleanError, match="expected a non-negative int"):
        s.nat(-3)
    with pytest.raises(tl.TorchleanError, match="is a vector; use read_nat_vec"):
        s.read_nat(iv)
    s.reset_tape()
    with pytest.raises(tl.TorchleanError, match="before the last reset_tape"):
        s.read_nat(i)


def test_use_is_memoised_and_steps_update_used_params() -> None:
    s = EagerSession(F64)
    p = Param(np.array([1.0, -2.0]), name="p")
    unused = Param(np.array([5.0]), name="unused")
    a = s.use(p)
    assert s.use(p)._key == a._key
    s.backward(s.sum(a * a))
    s.sgd_step_all(0.25)
    np.testing.assert_allclose(p.value, [0.5, -1.0])
    assert s.used_params() == [p] and unused.value[0] == 5.0
    b = s.use(p)  # after a step, use records the new value
    assert b._key != a._key
    np.testing.assert_allclose(b.numpy(), [0.5, -1.0])


def test_frozen_params_are_not_updated() -> None:
    s = EagerSession(Options(requires_grad=False))
    p = s.param(np.ones(2), name="frozen")
    assert not p.requires_grad
    t = s.use(p)
    s.backward(s.sum(t))
    assert s.grad(t) is None
    s.adam_step_all(0.1)
    np.testing.assert_array_equal(p.value, np.ones(2))


def test_adam_and_adamw_match_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0, x = rng.normal(size=(3, 4)), rng.normal(size=4)
    for kind in ("adam", "adamw"):
        s = EagerSession(F64)
        p = Param(w0, name="w")
        tw = torch.tensor(w0, requires_grad=True)
        opt = (
            torch.optim.Adam([tw], lr=0.05, betas=(0.8, 0.99), eps=1e-6)
            if kind == "adam"
            else torch.optim.AdamW([tw], lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
        )
        for _ in range(4):
            s.reset_tape()
            y = s.sum(s.tanh(s.matmul(s.use(p), s.input(x.reshape(4, 1)))))
            s.backward(y)
            if kind == "adam":
                s.adam_step_all(0.05, b1=0.8, b2=0.99, eps=1e-6)
            else:
                s.adamw_step_all(0.05, b1=0.8, b2=0.99, eps=1e-6, weight_decay=0.1)
            opt.zero_grad()
            torch.tanh(tw @ torch.tensor(x.reshape(4, 1))).sum().backward()
            opt.step()
        np.testing.assert_allclose(p.value, tw.detach().numpy(), rtol=1e-12, atol=1e-13)


def test_optimizer_hyperparameters_are_checked() -> None:
    s = EagerSession(F64)
    p = Param(np.ones(1))
    s.backward(s.sum(s.use(p)))
    with pytest.raises(tl.TorchleanError, match=r"b1 must be in \[0, 1\)"):
        s.adam_step_all(0.1, b1=1.0)
    with pytest.raises(tl.TorchleanError, match="lr must be a finite non-negative"):
        s.sgd_step_all(float("nan"))


def test_jax_path_keeps_params_on_device_until_read() -> None:
    s = EagerSession(Options(dtype="f64"), array_backend="jax")
    p = Param(np.array([1.0, 2.0]), name="p")
    s.backward(s.sum(s.square(s.use(p))))
    s.sgd_step_all(0.5)
    assert not p.synced
    assert isinstance(p._device, jax.Array)
    np.testing.assert_allclose(p.value, [0.0, 0.0])  # reading synchronises
    assert p.synced


def test_gpu_device_without_gpu_is_a_clear_error() -> None:
    try:
        have_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        have_gpu = False
    if have_gpu:
        s = EagerSession(Options(device="gpu"))
        assert s.array_backend == "jax"
        y = s.sum(s.input(np.ones(3), requires_grad=True) * 2.0)
        assert y.item() == 6.0
    else:
        with pytest.raises(tl.TorchleanError, match="JAX sees no GPU"):
            EagerSession(Options(device="gpu"))


def test_tensor_and_var_share_one_arithmetic() -> None:
    """``+ - * / @`` and ``-x`` are written once (``torchlean_ir.extend.Operand``) for the
    builder's ``Var`` and the front end's ``Tensor``; a constant divisor of 0 is the same
    one-line error naming the user's line on both."""
    from torchlean_ir.extend import Operand

    operators = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                 "__truediv__", "__rtruediv__", "__neg__", "__matmul__")  # fmt: skip
    for cls in (Tensor, tl.Var):
        assert issubclass(cls, Operand)
        assert not set(operators) & set(vars(cls)), cls
    s = EagerSession()
    t = s.input(np.array([1.0, -2.0]))
    np.testing.assert_allclose(((2 * t - 1) / 4 + 1 / t).numpy(), [0.25 + 1.0, -1.25 - 0.5])
    b = tl.GraphBuilder("f32")
    v = b.input("x", (2,))
    for x in (t, v):
        with pytest.raises(tl.AttrError, match=r"division by the constant 0, at .*test_eager\.py"):
            x / 0
