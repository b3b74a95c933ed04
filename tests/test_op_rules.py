"""Table-driven tests of every op's reference rules (one row per op in ``op_cases.py``).

For each row: the adjoint identity <jvp(dx), d> = <dx, vjp(d)>; agreement with central finite
differences in float64 away from kinks; the same results from the JAX backend (the lowering) and
from the symbolic backend at exact points. For each non-smooth op: the conventions of
``docs/ops.md`` at the kink, exactly, in the NumPy and the JAX backends.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import torchlean_ir as tl
from tests.seeds import rng_for
from torchlean_ir.backends import SYM, jax_backend

from .op_cases import CASES, KINKS, OpCase

jax.config.update("jax_enable_x64", True)


def _rng(case_id: str) -> np.random.Generator:
    return rng_for(case_id)


def test_every_op_has_every_rule() -> None:
    missing = {name: tl.missing_rules(op) for name, op in tl.all_ops().items()}
    missing = {k: v for k, v in missing.items() if v}
    assert not missing, f"ops lacking rules: {missing}"


def test_every_op_has_a_table_row() -> None:
    covered = {c.op for c in CASES}
    lacking = sorted(set(tl.all_ops()) - covered)
    assert not lacking, f"ops without a row in tests/op_cases.py: {lacking}"


def test_every_nonsmooth_op_has_a_kink_row() -> None:
    with_kinks = {name for name, op in tl.all_ops().items() if op.kinks_rule is not None}
    lacking = sorted(with_kinks - {k.op for k in KINKS})
    assert not lacking, f"ops with kinks but no KinkCase: {lacking}"


def _tangents(rng: np.random.Generator, leaves: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: rng.normal(size=v.shape) for k, v in leaves.items()}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_adjoint_identity(case: OpCase) -> None:
    rng = _rng(case.id)
    g = case.graph()
    x = case.sample(rng)
    dx = _tangents(rng, x)
    (out,), (tout,) = tl.jvp(g, x, dx, case.index_values())
    d = rng.normal(size=out.shape)
    ct = tl.backprop_ctx(g, x, d, case.index_values())
    lhs = float(np.sum(tout * d))
    rhs = sum(float(np.sum(dx[k] * ct[k])) for k in x)
    scale = max(1.0, abs(lhs), abs(rhs))
    assert abs(lhs - rhs) <= 1e-12 * scale, (lhs, rhs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_finite_differences(case: OpCase) -> None:
    rng = _rng(case.id)
    g = case.graph()
    x = case.sample(rng)
    dx = _tangents(rng, x)
    _, (tout,) = tl.jvp(g, x, dx, case.index_values())
    h = 1e-6
    plus = tl.eval_graph(g, {k: v + h * dx[k] for k, v in x.items()}, case.index_values())[0]
    minus = tl.eval_graph(g, {k: v - h * dx[k] for k, v in x.items()}, case.index_values())[0]
    fd = (plus - minus) / (2 * h)
    if case.op == "detach":  # forward is the identity, the derivative is zero by definition
        np.testing.assert_array_equal(tout, np.zeros_like(tout))
        return
    np.testing.assert_allclose(tout, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_jax_backend_matches_reference(case: OpCase) -> None:
    """The rules run on jax.numpy (float64, jitted) give the reference numbers."""
    B = jax_backend("float64")
    rng = _rng(case.id)
    g = case.graph()
    x = case.sample(rng)
    dx = _tangents(rng, x)
    idx = case.index_values()
    (out,), (tout,) = tl.jvp(g, x, dx, idx)
    d = rng.normal(size=out.shape)
    ct = tl.backprop_ctx(g, x, d, idx)

    @jax.jit
    def run(x, dx, d):
        (o,), (t,) = tl.jvp(g, x, dx, idx, B=B)
        return o, t, tl.backprop_ctx(g, x, d, idx, B=B)

    o, t, c = run(x, dx, d)
    np.testing.assert_allclose(np.asarray(o), out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(t), tout, rtol=1e-12, atol=1e-14)
    for k in ct:
        np.testing.assert_allclose(np.asarray(c[k]), ct[k], rtol=1e-12, atol=1e-14)


def _to_float(a: object) -> np.ndarray:
    arr = a.a if hasattr(a, "a") else np.asarray(a, dtype=object)
    return np.vectorize(lambda e: float(e), otypes=[np.float64])(arr)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_symbolic_backend_matches_reference(case: OpCase) -> None:
    """The rules run on exact symbolic numbers give the reference numbers (to float64 rounding)."""
    rng = _rng(case.id)
    g = case.graph()
    x = case.sample(rng)
    dx = _tangents(rng, x)
    idx = case.index_values()
    (out,), (tout,) = tl.jvp(g, x, dx, idx)
    d = rng.normal(size=out.shape)
    ct = tl.backprop_ctx(g, x, d, idx)
    sx = {k: SYM.asarray(v) for k, v in x.items()}
    sdx = {k: SYM.asarray(v) for k, v in dx.items()}
    (so,), (st,) = tl.jvp(g, sx, sdx, idx, B=SYM)
    sc = tl.backprop_ctx(g, sx, SYM.asarray(d), idx, B=SYM)
    np.testing.assert_allclose(_to_float(so), out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(_to_float(st), tout, rtol=1e-12, atol=1e-14)
    for k in ct:
        np.testing.assert_allclose(_to_float(sc[k]), ct[k], rtol=1e-12, atol=1e-14)


def _kink_graph(k: object) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    xs = [b.input(f"a{i}", a.shape, requires_grad=True) for i, a in enumerate(k.args)]
    return b.build(b.apply(k.op, *xs, **k.attrs))


@pytest.mark.parametrize("kink", KINKS, ids=lambda k: k.id)
@pytest.mark.parametrize("backend", ["numpy", "jax", "sym"])
def test_kink_conventions_exact(kink: object, backend: str) -> None:
    g = _kink_graph(kink)
    x = {f"a{i}": a for i, a in enumerate(kink.args)}
    dx = {f"a{i}": t for i, t in enumerate(kink.tangents)}
    if backend == "numpy":
        _, (tout,) = tl.jvp(g, x, dx)
        ct = tl.backprop_ctx(g, x, kink.ct)
    elif backend == "jax":
        B = jax_backend("float64")
        _, (tout,) = jax.jit(lambda x, dx: tl.jvp(g, x, dx, B=B))(x, dx)
        ct = jax.jit(lambda x, d: tl.backprop_ctx(g, x, d, B=B))(x, kink.ct)
    else:
        sx = {k: SYM.asarray(v) for k, v in x.items()}
        _, (st,) = tl.jvp(g, sx, {k: SYM.asarray(v) for k, v in dx.items()}, B=SYM)
        tout = _to_float(st)
        ct = {
            k: _to_float(v) for k, v in tl.backprop_ctx(g, sx, SYM.asarray(kink.ct), B=SYM).items()
        }
    np.testing.assert_array_equal(np.asarray(tout), kink.expected_jvp)
    for i, want in enumerate(kink.expected_vjp):
        np.testing.assert_array_equal(np.asarray(ct[f"a{i}"]), want)


@pytest.mark.parametrize(
    "name", sorted(n for n, op in tl.all_ops().items() if op.kinks_rule is not None)
)
def test_declared_kink_points_are_exact_and_well_typed(name: str) -> None:
    """The kink generator gives finite float64 points (exact rationals) of the right shapes."""
    case = next(c for c in CASES if c.op == name)
    op = tl.get_op(name)
    types = tuple(tl.TensorType(s, tl.DType.F64) for s in case.shapes)
    points = op.kinks_rule(np.random.default_rng(0), *types, **case.attrs)
    assert points
    for pt in points:
        assert tuple(a.shape for a in pt) == case.shapes
        for a in pt:
            assert a.dtype == np.float64 and np.all(np.isfinite(a))


BAD_SHAPES = [
    ("add", [(3,), (4,)], {}, "identical shapes"),
    ("matmul", [(2, 3), (4, 5)], {}, "inner dims differ"),
    ("matmul", [(2, 3), (3,)], {}, "needs two matrices"),
    ("bmm", [(2, 2, 3), (3, 3, 4)], {}, "batch dims differ"),
    ("linear", [(3, 4), (2,), (4,)], {}, "matching dims"),
    ("broadcast_to", [(3, 2)], {"shape": (3, 4)}, "only a dim of 1 stretches"),
    ("broadcast_to", [(3, 2)], {"shape": (2,)}, "lower-rank"),
    ("reshape", [(2, 3)], {"shape": (4,)}, "6 elements"),
    ("transpose2d", [(2, 3, 4)], {}, "rank 2"),
    ("swap_adjacent_at_depth", [(2, 3)], {"depth": 1}, "rank >= 3"),
    ("reduce_sum", [(2, 3)], {"axis": 2}, "axis 2 out of range"),
    ("reduce_mean", [(0, 3)], {"axis": 0}, "empty"),
    ("concat", [(2, 3), (2, 4)], {}, "every argument must be"),
    ("slice", [(4, 2)], {"start": 3, "length": 2}, "exceeds dim 0"),
    ("layer_norm", [(2, 4), (3,), (4,)], {}, "gamma and beta"),
    ("mse_loss", [(2,), (3,)], {}, "identical shapes"),
    ("clamp", [(2,)], {"lo": 1.0, "hi": 0.0}, "lo <= hi"),
    ("gather_rows_nat", [(4,)], {}, "needs a matrix"),
]


@pytest.mark.parametrize("op,shapes,attrs,expect", BAD_SHAPES, ids=lambda v: str(v))
def test_shape_errors_name_op_shapes_and_call_site(
    op: str, shapes: list, attrs: dict, expect: str
) -> None:
    b = tl.GraphBuilder()
    xs = [b.input(f"a{i}", s) for i, s in enumerate(shapes)]
    ixs = [b.index("i", 2)] if op == "gather_rows_nat" else []
    with pytest.raises(tl.ShapeError) as info:
        b.apply(op, *xs, *ixs, **attrs)
    msg = str(info.value)
    assert msg.startswith(f"{op}(")
    assert expect in msg
    assert "test_op_rules.py:" in msg  # the caller's own file:line
    assert "\n" not in msg


def test_sigmoid_keeps_relative_accuracy_on_both_tails() -> None:
    """sigmoid(-50) is about 2e-22, not 0 (a (1 + tanh(x/2)) / 2 form underflows below -37),
    in the reference and in the JAX lowering; large x gives exactly 1 with no overflow."""
    import compiler

    b = tl.GraphBuilder()
    x = b.input("x", (4,))
    g = b.build(x.sigmoid())
    xs = np.array([-50.0, -700.0, 0.0, 800.0])
    want = np.array([np.exp(-50.0) / (1 + np.exp(-50.0)), np.exp(-700.0), 0.5, 1.0])
    (ref,) = tl.eval_graph(g, {"x": xs})
    np.testing.assert_allclose(ref, want, rtol=1e-15, atol=0)
    got = compiler.compile(g, dtype="float64").forward({"x": xs})
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-14, atol=0)
