"""The backend-generic ``Ops`` interface: generated from the registry, derived ops, one model
on every backend."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import EagerSession, GraphOps, LinkedSession, Ops, Options, Tensor

F64 = Options(dtype="f64")  # the tests below compare values at float64 tolerances
BACKENDS = {
    "eager": lambda: EagerSession(F64),
    "eager-jax": lambda: EagerSession(Options(dtype="f64"), array_backend="jax"),
    "linked": lambda: LinkedSession(Options(dtype="f64")),
}


def test_every_registry_op_is_a_method() -> None:
    s = EagerSession()
    for name, op in tl.all_ops().items():
        method = getattr(s, name)
        assert callable(method)
        if hasattr(Ops, name):  # an explicit method (const takes its literal positionally)
            continue
        sig = inspect.signature(method)
        for attr in op.attrs:
            assert sig.parameters[attr].kind is inspect.Parameter.KEYWORD_ONLY
        assert (op.doc or name) in (method.__doc__ or "")
        assert name in dir(s)


def test_a_new_op_appears_without_touching_the_front_end() -> None:
    op = tl.Op("test_cube_frontend", args=("x",), family="test", doc="x^3")
    op.def_shape(tl.same_shape)
    op.def_forward(lambda B, x: x * x * x)
    op.def_jvp(lambda B, args, tans, out: 3 * args[0] * args[0] * tans[0])
    op.def_vjp(lambda B, args, out, ct: (3 * args[0] * args[0] * ct,))
    try:
        s = EagerSession()
        x = s.input(np.array([1.0, 2.0]), requires_grad=True)
        y = s.test_cube_frontend(x)
        np.testing.assert_array_equal(y.numpy(), [1.0, 8.0])
        s.backward(s.sum(x.test_cube_frontend()))
        np.testing.assert_array_equal(s.grad(x), [3.0, 12.0])
        g = GraphOps()
        assert "test_cube_frontend" in str(g.build(g.test_cube_frontend(g.input(shape=(2,)))))
    finally:
        tl.unregister_op("test_cube_frontend")
    with pytest.raises(AttributeError, match="no op of that name"):
        EagerSession().test_cube_frontend  # noqa: B018


def _derived_model(ops: Ops, x: Tensor) -> list[Tensor]:
    img = ops.reshape(x, shape=(2, 2, 3))
    return [
        ops.gelu(x),
        ops.silu(x),
        ops.global_avg_pool(img),
        ops.global_avg_pool2d(img),
        ops.neg(x),
        ops.square(x),
        ops.div(x, ops.add(ops.square(x), ops.ones(x.shape))),
        ops.mean(x),
        x.gelu(),
        (2.0 - x) / 4.0 + 1.0 * x - (-x),
    ]


def test_derived_ops_values() -> None:
    torch = pytest.importorskip("torch")
    xv = np.linspace(-3, 3, 12)
    s = EagerSession(F64)
    outs = [o.numpy() for o in _derived_model(s, s.input(xv))]
    tx = torch.tensor(xv)
    np.testing.assert_allclose(
        outs[0], torch.nn.functional.gelu(tx, approximate="tanh").numpy(), rtol=1e-14, atol=1e-15
    )
    np.testing.assert_allclose(outs[1], torch.nn.functional.silu(tx).numpy(), rtol=1e-14)
    np.testing.assert_allclose(outs[2], xv.reshape(2, 2, 3).mean(axis=(1, 2)), rtol=1e-14)
    np.testing.assert_array_equal(outs[2], outs[3])
    np.testing.assert_array_equal(outs[4], -xv)
    np.testing.assert_allclose(outs[6], xv / (xv * xv + 1), rtol=1e-14)
    assert outs[7] == pytest.approx(xv.mean(), abs=1e-15)
    np.testing.assert_array_equal(outs[8], outs[0])
    np.testing.assert_allclose(outs[9], (2 - xv) / 4 + 2 * xv, rtol=1e-14)


def test_gelu_gradient_matches_torch() -> None:
    torch = pytest.importorskip("torch")
    xv = np.linspace(-3, 3, 7)
    s = EagerSession(F64)
    x = s.input(xv, requires_grad=True)
    s.backward(s.sum(s.gelu(x)))
    tx = torch.tensor(xv, requires_grad=True)
    torch.nn.functional.gelu(tx, approximate="tanh").sum().backward()
    np.testing.assert_allclose(s.grad(x), tx.grad.numpy(), rtol=1e-13, atol=1e-14)
    assert math.isclose(float(s.cross_entropy(x, s.nat(2)).item()), 0.0) is False


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_one_model_every_backend(backend: str) -> None:
    xv = np.linspace(-2, 2, 12)
    ref_s = EagerSession(F64)
    ref = [o.numpy() for o in _derived_model(ref_s, ref_s.input(xv))]
    s = BACKENDS[backend]()
    got = [s.get_value(o) for o in _derived_model(s, s.input(xv))]
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_graph_ops_records_derived_ops_from_core_ops() -> None:
    g = GraphOps(Options(dtype="f64"))
    x = g.input(name="x", shape=(4,))
    graph = g.build(g.gelu(x))
    assert {n.op for n in graph.nodes} <= {"mul", "add", "scale", "sigmoid"}
    (val,) = tl.eval_graph(graph, {"x": np.array([-1.0, 0.0, 0.5, 2.0])})
    s = EagerSession(F64)
    np.testing.assert_array_equal(val, s.gelu(s.input(np.array([-1.0, 0.0, 0.5, 2.0]))).numpy())


def test_graph_ops_has_no_values() -> None:
    g = GraphOps()
    x = g.input(name="x", shape=(2,))
    with pytest.raises(tl.TorchleanError, match="records a graph"):
        x.numpy()
    with pytest.raises(tl.ShapeError, match=r"matmul\(f32\[2\], f32\[2\]\).*test_ops_interface"):
        g.matmul(x, x)


def test_cross_entropy_and_softmax_cross_entropy() -> None:
    logits = np.array([1.0, -0.5, 2.0])
    s = EagerSession(F64)
    x = s.input(logits, requires_grad=True)
    ce = s.cross_entropy(x, s.nat(0))
    want = -(logits[0] - np.log(np.sum(np.exp(logits))))
    assert ce.item() == pytest.approx(want, rel=1e-14)
    sce = s.softmax_cross_entropy(x, s.input(np.array([1.0, 0.0, 0.0])))
    assert sce.item() == pytest.approx(want, rel=1e-14)
    s.backward(ce)
    p = np.exp(logits) / np.exp(logits).sum()
    np.testing.assert_allclose(s.grad(x), p - np.array([1.0, 0.0, 0.0]), rtol=1e-13)


@pytest.mark.parametrize(
    ("name", "shape"), [("gelu", (7,)), ("silu", (7,)), ("global_avg_pool2d", (2, 3, 4))]
)
def test_derived_op_equals_the_primitive_it_shadows(name: str, shape: tuple[int, ...]) -> None:
    if not tl.has_op(name):
        pytest.skip(f"no primitive {name!r} registered")
    xv = np.linspace(-3, 3, int(np.prod(shape))).reshape(shape)
    s = EagerSession(F64)
    x = s.input(xv, requires_grad=True)
    derived, primitive = getattr(s, name)(x), s.apply(name, x)
    np.testing.assert_allclose(derived.numpy(), primitive.numpy(), rtol=1e-14, atol=1e-15)
    seed = np.cos(np.arange(derived.size)).reshape(derived.shape)
    s.backward(derived, seed)
    g_derived = s.grad(x)
    s.backward(primitive, seed)
    np.testing.assert_allclose(g_derived, s.grad(x), rtol=1e-13, atol=1e-14)


def test_random_ops_eager_equals_graph_and_seed_defaults_to_options() -> None:
    s = EagerSession(Options(seed=42, dtype="f64"))
    x = s.input(np.ones((3, 4)), requires_grad=True)
    u = s.rand_uniform((3, 4))
    y = s.dropout(x, 0.5)
    g = GraphOps(Options(seed=42, dtype="f64"))
    gx = g.input(name="x", shape=(3, 4))
    graph = g.build(g.rand_uniform((3, 4)), g.dropout(gx, 0.5))
    ref_u, ref_y = tl.eval_graph(graph, {"x": np.ones((3, 4))})
    np.testing.assert_array_equal(u.numpy(), ref_u)
    np.testing.assert_array_equal(y.numpy(), ref_y)
    assert set(np.unique(y.numpy())) <= {0.0, 2.0} and u.numpy().min() > 0.0
    assert {n.attrs["seed"] for n in graph.nodes if "seed" in n.attrs} == {42}
    other = EagerSession(Options(seed=7, dtype="f64")).rand_uniform((3, 4)).numpy()
    assert not np.array_equal(other, u.numpy())
    s.backward(s.sum(y))
    np.testing.assert_array_equal(s.grad(x), y.numpy())  # mask / keep_prob, no gradient to it
