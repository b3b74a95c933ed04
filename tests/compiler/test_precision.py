"""Float32 means float32: every matrix product and convolution the compiler emits carries an
explicit precision, full float32 (``HIGHEST``) unless the caller opts into a fast mode.

JAX's default precision for a float32 product is the platform's fastest (TF32 on an NVIDIA GPU,
gradients of an MLP 6% off a float64 reference). These tests run on the CPU and read the
lowered programs, so the choice is guarded without a GPU: a product or convolution emitted at
the platform's default precision fails them.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.extend.core
import numpy as np
import optax
import pytest

import compiler
import torchlean as tlf
import torchlean_ir as tl
from compiler import CompileError
from tests.op_cases import CASES

# A StableHLO dot_general or convolution, and the precision it carries.
_OP = re.compile(r"stablehlo\.(dot_general|convolution)\b[^\n]*")
_DOT_PRECISION = re.compile(r"precision = \[(\w+), (\w+)\]")
_CONV_PRECISION = re.compile(
    r"precision_config = \[#stablehlo<precision (\w+)>, #stablehlo<precision (\w+)>\]"
)


def _precisions(text: str) -> list[tuple[str, str]]:
    """``(op, precision)`` of every dot_general and convolution in a StableHLO module; the
    precision is ``"MISSING"`` where none is written (the platform's default)."""
    out = []
    for m in _OP.finditer(text):
        line = m.group(0)
        found = _DOT_PRECISION.search(line) or _CONV_PRECISION.search(line)
        if found is None:
            out.append((m.group(1), "MISSING"))
        else:
            a, b = found.groups()
            out.append((m.group(1), a if a == b else f"{a},{b}"))
        if "algorithm = " in line:
            out[-1] = (out[-1][0], out[-1][1] + "+algorithm")
    return out


def _has_products(case: Any) -> bool:
    text = compiler.compile(case.graph("f32")).stablehlo("vjp")
    return bool(_precisions(text))


PRODUCT_CASES = [c for c in CASES if _has_products(c)]


def test_the_scan_finds_products_in_the_ops_that_have_them() -> None:
    """The scan above is not vacuous: the matrix, convolution and attention ops are found."""
    ops = {c.op for c in PRODUCT_CASES}
    assert {"matmul", "linear", "conv2d", "multi_head_attention"} <= ops, sorted(ops)
    # and a default-precision product is recognised as such
    text = jax.jit(lambda a, b: a @ b).lower(
        np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)
    )
    assert _precisions(text.as_text()) == [("dot_general", "DEFAULT")]


@pytest.mark.parametrize("case", PRODUCT_CASES, ids=lambda c: c.id)
def test_float32_products_are_full_precision(case: Any) -> None:
    g = case.graph("f32")
    for mode in ("tape", "jax"):
        cg = compiler.compile(g, mode=mode)
        assert cg.matmul_precision == "float32"
        for kind in ("forward", "jvp", "vjp"):
            found = _precisions(cg.stablehlo(kind))
            assert found, f"{case.id} {mode} {kind}: no product found"
            bad = [p for p in found if p[1] != "HIGHEST"]
            assert not bad, f"{case.id} {mode} {kind}: {bad}"


@pytest.mark.parametrize(
    ("precision", "expected"), [("tf32", "HIGH"), ("bf16", "DEFAULT+algorithm")]
)
def test_fast_modes_are_opt_in(precision: str, expected: str) -> None:
    case = next(c for c in PRODUCT_CASES if c.op == "matmul")
    g = case.graph("f32")
    fast = compiler.compile(g, matmul_precision=precision)
    assert fast is not compiler.compile(g)  # cached apart
    assert fast.matmul_precision == precision and precision in repr(fast)
    found = _precisions(fast.stablehlo("vjp"))
    assert found and {p for _, p in found} == {expected}


def test_bf16_convolutions_take_the_platform_default() -> None:
    case = next(c for c in PRODUCT_CASES if c.op == "conv2d")
    found = _precisions(compiler.compile(case.graph("f32"), matmul_precision="bf16").stablehlo())
    assert {p for op, p in found if op == "convolution"} == {"DEFAULT"}


def test_batched_and_training_step_are_full_precision() -> None:
    from tests.compiler.models import CLS_FEATURES, classifier_build

    g = classifier_build("f32")
    cg = compiler.compile(g).batched(over=("x", "label"), grads="mean")
    assert cg.matmul_precision == "float32"
    step = compiler.TrainStep(cg, optax.adam(1e-3))
    params = {
        leaf.name: np.zeros(leaf.type.shape, np.float32)
        for leaf in g.leaves
        if leaf.kind == "param"
    }
    state = step.init(params)
    data = {"x": np.zeros((3, CLS_FEATURES), np.float32)}
    text = step.lower(state, data, {"label": np.zeros(3, np.int32)}).as_text()
    found = _precisions(text)
    assert found and all(p == "HIGHEST" for _, p in found), found


def test_a_bad_precision_is_one_line() -> None:
    g = CASES[0].graph("f32")
    with pytest.raises(
        CompileError, match=r"matmul_precision must be one of float32, tf32, bf16, got 'tf16'"
    ):
        compiler.compile(g, matmul_precision="tf16")
    with pytest.raises(tl.TorchleanError, match=r"Options\.matmul_precision"):
        tlf.Options(matmul_precision="fast")


def _jaxpr_precisions(jaxpr: Any) -> list[Any]:
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("dot_general", "conv_general_dilated"):
            out.append(eqn.params["precision"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out += _jaxpr_precisions(sub)
    return out


@pytest.mark.parametrize("precision", ["float32", "tf32"])
def test_eager_jax_kernels_follow_the_options(precision: str) -> None:
    """The eager session's jitted per-op kernels (its GPU path) and its batched kernels."""
    from torchlean._eager import _JaxKernels

    kernels = _JaxKernels(tl.DType.F32, jax.devices("cpu")[0], precision)
    op = tl.get_op("matmul")
    forward, vjp = kernels.make(op, {})
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 4), np.float32)
    fwd = _jaxpr_precisions(jax.make_jaxpr(lambda a, b: forward([a, b], (), 0))(a, b).jaxpr)
    ct = np.ones((2, 4), np.float32)
    bwd = _jaxpr_precisions(
        jax.make_jaxpr(lambda a, b, o, c: vjp([a, b], o, c, (), 0))(a, b, ct, ct).jaxpr
    )
    want = {"float32": jax.lax.Precision.HIGHEST, "tf32": jax.lax.Precision.HIGH}[precision]
    assert fwd and bwd
    assert all(p == (want, want) for p in fwd + bwd), (fwd, bwd)

    s = tlf.EagerSession(tlf.Options(matmul_precision=precision), array_backend="jax")
    W = s.input(np.ones((4, 3)), name="W", requires_grad=True)
    bias = s.input(np.zeros(4), name="b")
    x = s.input(np.ones((5, 3)), name="x", batched=True)
    out = s.apply("linear", W, bias, x)
    assert out.batched
    assert s._batched_kernels().precision == precision
    # the batched kernel the session ran: the compiler's vmapped rule at this precision
    from compiler._rules import _CACHE

    batched = [k for k in _CACHE if k.op == "linear" and k.batching is not None]
    assert batched and {k.precision for k in batched} >= {precision}
