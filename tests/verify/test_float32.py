"""The float32 constants model (``verify/_f32.py``, docs/verification.md "Float32"): a float32
compilation verifies against the reference with both sides' constants rounded to float32 as the
program holds them; no false alarm on correct code, and no tolerance: a constant one float32
ulp off, or a float32-only slip in a rule, is still a mismatch with a counterexample."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean_ir as tl
import verify
from torchlean_ir.backends import SYM, symbols
from verify import _f32

from .mutants import MUTANTS, applied

# -- the rounding itself -------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_round_f32_is_numpys_cast_for_every_double(x: float) -> None:
    with np.errstate(over="ignore"):
        want = float(np.float32(x))
    got = _f32.round_f32(Fraction(x))
    assert (float(got) if isinstance(got, Fraction) else got) == want


def test_round_f32_ties_subnormals_and_overflow_exactly() -> None:
    one = Fraction(1)
    ulp = Fraction(1, 2**23)
    assert _f32.round_f32(one + ulp / 2) == one  # a tie goes to the even neighbour
    assert _f32.round_f32(one + ulp + ulp / 2) == one + 2 * ulp
    assert _f32.round_f32(one + ulp / 2 + Fraction(1, 10**40)) == one + ulp  # past the tie
    tiny = Fraction(1, 2**149)  # the smallest subnormal
    assert _f32.round_f32(tiny * Fraction(3, 5)) == tiny
    assert _f32.round_f32(tiny * Fraction(2, 5)) == 0
    biggest = (2 - Fraction(1, 2**23)) * Fraction(2**127)
    assert _f32.round_f32(biggest) == biggest
    assert _f32.round_f32(Fraction(2**128) - Fraction(2**103)) == math.inf  # tie: to even, inf
    assert _f32.round_f32(-Fraction(2**129)) == -math.inf
    assert _f32.round_f32(Fraction(1, 3)) == Fraction(float(np.float32(1 / 3)))


def test_the_reference_rounds_python_floats_only_under_the_model() -> None:
    x = symbols("x", (1,))
    c = 0.1
    plain = (x * c).item()
    with _f32.constants("float32"):
        rounded = (x * c).item()
        promoted = (x * np.float64(c)).item()  # JAX promotes a NumPy float64: not rounded
        full = SYM.full((1,), c).item()
        cast = SYM.asarray(np.array([c])).item()
    with _f32.constants("float64"):
        unchanged = (x * c).item()
    f32 = Fraction(float(np.float32(c)))
    assert rounded == x.item() * _rational(f32)
    assert plain == unchanged == promoted == x.item() * _rational(Fraction(c))
    assert full == cast == _rational(f32)


def _rational(q: Fraction) -> object:
    import symengine as se

    return se.Rational(q.numerator, q.denominator)


# -- no false alarms ---------------------------------------------------------------------------


def _unary_f32(op: str, shape: tuple[int, ...], **attrs: object) -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    return b.build(b.apply(op, b.input("x", shape, requires_grad=True), **attrs))


def _verified(report: verify.Report) -> None:
    assert report.verdict == "verified", str(report)
    assert report.dtype == "float32"
    assert all(c.method == "exact" for c in report.all_checks)


@pytest.mark.parametrize(
    "op,attrs",
    [
        ("gelu", {}),
        ("clamp", {"lo": -0.3, "hi": 0.7}),
        ("scale", {"c": 0.1}),
        ("safe_log", {"eps": 0.1}),
    ],
    ids=["gelu", "clamp", "scale", "safe_log"],
)
@pytest.mark.parametrize("method", ["auto", "elements"])
def test_float32_constants_are_no_false_alarm(
    op: str, attrs: dict[str, object], method: str
) -> None:
    """The reported false alarms (issue 17): literals (gelu's sqrt(2/pi), 0.044715) and
    attributes (-0.3, 0.7, 0.1) that are not float32 values, checked in float32 by default, at
    both levels, and the op's own lowering traced without x64 (``compiled=False``)."""
    graph = _unary_f32(op, (6,), **attrs)
    report = verify.verify_graph(graph, method=method)  # type: ignore[arg-type]
    _verified(report)
    assert any("rounded to float32" in n for n in report.notes)
    _verified(verify.verify_graph(graph, method=method, compiled=False))  # type: ignore[arg-type]


def test_the_interpreters_read_float32_constants_as_the_program_holds_them() -> None:
    """A weakly typed literal ``0.7:f32[]`` (x64 off) is the float32 0.7; a float64 0.7
    converted to float32 (``jnp.where`` with x64 on) is rounded; a converted input is not."""
    import jax
    import jax.numpy as jnp
    import symengine as se

    from verify._jaxpr import Interpreter
    from verify._tensor import leaf
    from verify._tjaxpr import TInterpreter

    want = _rational(Fraction(float(np.float32(0.7))))
    c = np.zeros(2, dtype=bool)
    x = np.zeros(2, dtype=np.float32)
    for x64 in (False, True):
        with jax.enable_x64(x64):
            jx = jax.make_jaxpr(lambda c, x: (jnp.where(c, x, 0.7), x * 0.7))(c, x)
        xs = symbols("x", (2,))
        picked, scaled = Interpreter().run(jx, np.zeros(2, dtype=bool), xs)
        assert picked[0] == want and scaled[0] == xs.a[0] * want, x64
        t_picked, _ = TInterpreter().run(jx, np.zeros(2, dtype=bool), leaf("x", (2,)))
        assert t_picked.at((se.Integer(0),)) == want, x64
    with jax.enable_x64(True):
        jx = jax.make_jaxpr(lambda x: x.astype(jnp.float32))(np.zeros(2))
    xs = symbols("y", (2,))
    assert Interpreter().run(jx, xs)[0][0] == xs.a[0]  # rounding of inputs: not modelled


def gpt_block(causal: bool = True) -> tl.GraphData:
    """A GPT-style pre-norm block in float32: layer norm, two-head (causal) attention and a
    residual, layer norm, a GELU MLP and a residual."""
    seq, d = 3, 4
    b = tl.GraphBuilder("f32")
    x = b.input("x", (seq, d))
    shapes = {"g1": (d,), "b1": (d,), "g2": (d,), "b2": (d,), "wq": (d, d), "wk": (d, d),
              "wv": (d, d), "wo": (d, d), "w1": (d, 2 * d), "w2": (2 * d, d)}  # fmt: skip
    p = {n: b.param(n, s) for n, s in shapes.items()}
    mask = {"mask": np.tril(np.ones((seq, seq), dtype=bool))} if causal else {}
    h = b.layer_norm(x, p["g1"], p["b1"], eps=1e-5)
    a = b.apply("multi_head_attention", p["wq"], p["wk"], p["wv"], p["wo"], h, heads=2, **mask)
    x = x + a
    h = b.layer_norm(x, p["g2"], p["b2"], eps=1e-5)
    x = x + b.apply("gelu", h @ p["w1"]) @ p["w2"]
    return b.build(b.sum(x * x))


@pytest.mark.slow
def test_gpt_style_block_with_gelu_verifies_in_float32() -> None:
    _verified(verify.verify_graph(gpt_block()))


@pytest.mark.parametrize(
    "causal",
    [True, pytest.param(False, marks=pytest.mark.slow)],  # the op table's rows cover both too
    ids=["causal", "unmasked"],
)
def test_attention_verifies_in_float32(causal: bool) -> None:
    """Once an AttributeError inside the decision procedure (causal) and 21 minutes before a
    false MISMATCH (unmasked); now as fast as float64 (``benchmarks/verify_f32.py``)."""
    b = tl.GraphBuilder("f32")
    ws = [b.param(n, (4, 4)) for n in ("wq", "wk", "wv", "wo")]
    mask = {"mask": np.tril(np.ones((3, 3), dtype=bool))} if causal else {}
    y = b.apply("multi_head_attention", *ws, b.input("x", (3, 4)), heads=2, **mask)
    _verified(verify.verify_graph(b.build(b.sum(y * y))))


# -- and no tolerance ----------------------------------------------------------------------------


def _mutant(name: str) -> object:
    return next(m for m in MUTANTS if m.name == name)


def test_a_float32_only_slip_is_caught_by_the_default_run() -> None:
    m = _mutant("gelu lowered vjp 0.1% off in float32 only")
    graph = m.graph()  # type: ignore[attr-defined]
    assert graph.leaves[0].type.dtype.value == "f32"
    with applied(m):  # type: ignore[arg-type]
        in_f64 = verify.verify_graph(graph, dtype="f64")
        default = verify.verify_graph(graph)
    assert in_f64.verdict == "verified", str(in_f64)  # the slip is in float32 only
    assert default.verdict == "mismatch" and default.exit_code == 1
    (ce, *_) = default.counterexamples
    assert "vjp" in ce.check and ce.expected != ce.got


def test_a_constant_one_float32_ulp_off_is_a_mismatch() -> None:
    with applied(_mutant("gelu lowered with a constant one float32 ulp off")):  # type: ignore[arg-type]
        report = verify.verify_graph(_unary_f32("gelu", (4,)))
    assert report.verdict == "mismatch", str(report)
    assert any(c.name == "compiled fwd = reference" for _, c in report.failures())
