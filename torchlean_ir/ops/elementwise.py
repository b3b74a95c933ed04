"""Elementwise ops, literals and stop-gradient.

Non-smooth ops are written with ``where`` so that their symbolic forward is a ``Piecewise`` whose
branch-wise derivative is exactly the convention of ``docs/ops.md`` (relu'(0) = 0, sign(0) = 0,
sqrt' = 0 for x <= 0, clamp' = 0 at the bounds, max/min ties split the cotangent in half).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Domain, Op, deflinear, defunary, same_shape
from .._types import TensorType

# -- const -----------------------------------------------------------------------------------

const = Op(
    "const",
    attrs={"value": AttrSpec("array", doc="the literal tensor (f32 or f64)")},
    family="literal",
    doc="A literal tensor. No gradient.",
)


@const.def_shape
def const_shape(*, value: Any) -> TensorType:
    return TensorType(value.shape, value.dtype)


@const.def_forward
def const_forward(B: Any, *, value: Any) -> Any:
    return B.asarray(value)


@const.def_jvp
def const_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, value: Any) -> Any:
    return B.zeros(value.shape)


@const.def_vjp
def const_vjp(B: Any, args: tuple, out: Any, ct: Any, *, value: Any) -> tuple:
    return ()


# -- detach ----------------------------------------------------------------------------------

detach = Op(
    "detach",
    args=("x",),
    nondiff=("x",),
    family="literal",
    doc="Identity forward, zero gradient (stop-gradient).",
)
detach.def_shape(same_shape)


@detach.def_forward
def detach_forward(B: Any, x: Any) -> Any:
    return B.stop_gradient(x)


@detach.def_jvp
def detach_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    return B.zeros_like(out)


@detach.def_vjp
def detach_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (None,)


# -- add, sub, scale: linear -----------------------------------------------------------------

add = Op("add", args=("a", "b"), family="elementwise", doc="Elementwise a + b (same shapes).")
add.def_shape(same_shape)


@add.def_forward
def add_forward(B: Any, a: Any, b: Any) -> Any:
    return a + b


@add.def_vjp
def add_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (ct, ct)


deflinear(add)

sub = Op("sub", args=("a", "b"), family="elementwise", doc="Elementwise a - b (same shapes).")
sub.def_shape(same_shape)


@sub.def_forward
def sub_forward(B: Any, a: Any, b: Any) -> Any:
    return a - b


@sub.def_vjp
def sub_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (ct, -ct)


deflinear(sub)

scale = Op(
    "scale",
    args=("x",),
    attrs={"c": AttrSpec("float", check=lambda c: None if np.isfinite(c) else "must be finite")},
    family="elementwise",
    doc="x * c for a constant scalar c.",
)
scale.def_shape(same_shape)


@scale.def_forward
def scale_forward(B: Any, x: Any, *, c: float) -> Any:
    return x * c


@scale.def_vjp
def scale_vjp(B: Any, args: tuple, out: Any, ct: Any, *, c: float) -> tuple:
    return (ct * c,)


deflinear(scale)

# -- mul -------------------------------------------------------------------------------------

mul = Op("mul", args=("a", "b"), family="elementwise", doc="Elementwise a * b (same shapes).")
mul.def_shape(same_shape)


@mul.def_forward
def mul_forward(B: Any, a: Any, b: Any) -> Any:
    return a * b


@mul.def_jvp
def mul_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    a, b = args
    ta, tb = tangents
    return ta * b + a * tb


@mul.def_vjp
def mul_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    return (ct * b, ct * a)


# -- max, min: a tie sends half of the cotangent to each argument ---------------------------


def _defminmax(name: str, greater: bool) -> Op:
    word = "maximum" if greater else "minimum"
    op = Op(
        name,
        args=("a", "b"),
        family="elementwise",
        doc=f"Elementwise {word}; at a tie each argument receives half of the cotangent.",
    )
    op.def_shape(same_shape)

    def wins(a: Any, b: Any) -> tuple[Any, Any]:
        return (a > b, a < b) if greater else (a < b, a > b)

    def forward(B: Any, a: Any, b: Any) -> Any:
        return B.maximum(a, b) if greater else B.minimum(a, b)

    def sym(B: Any, a: Any, b: Any) -> Any:
        a_wins, b_wins = wins(a, b)
        return B.where(a_wins, a, B.where(b_wins, b, (a + b) / 2))

    def jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
        a_wins, b_wins = wins(*args)
        ta, tb = tangents
        return B.where(a_wins, ta, B.where(b_wins, tb, (ta + tb) / 2))

    def vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
        a_wins, b_wins = wins(*args)
        half = ct / 2
        zero = B.zeros_like(ct)
        return (
            B.where(a_wins, ct, B.where(b_wins, zero, half)),
            B.where(b_wins, ct, B.where(a_wins, zero, half)),
        )

    def kinks(rng: np.random.Generator, a: TensorType, b: TensorType) -> list:
        x = _dyadic(rng, a.shape)
        y = _dyadic(rng, a.shape)
        tie = rng.random(a.shape) < 0.5
        y = np.where(tie, x, y)
        return [(x, y), (x, x.copy())]

    for fn, rule in (
        (forward, "forward"),
        (sym, "sym"),
        (jvp, "jvp"),
        (vjp, "vjp"),
        (kinks, "kinks"),
    ):
        fn.__name__ = fn.__qualname__ = f"{name}_{rule}"
    op.def_forward(forward)
    op.def_sym(sym)
    op.def_jvp(jvp)
    op.def_vjp(vjp)
    op.def_kinks(kinks)
    return op


def _dyadic(rng: np.random.Generator, shape: tuple[int, ...], scale: int = 8) -> np.ndarray:
    """Random exact dyadic rationals (k / 16) in [-scale, scale]."""
    return rng.integers(-16 * scale, 16 * scale + 1, size=shape).astype(np.float64) / 16


def _with_zeros(rng: np.random.Generator, t: TensorType) -> list:
    x = _dyadic(rng, t.shape)
    x = np.where(rng.random(t.shape) < 0.5, 0.0, x)
    return [(x,), (np.zeros(t.shape),)]


max_ = _defminmax("max", greater=True)
min_ = _defminmax("min", greater=False)

# -- unary ops -------------------------------------------------------------------------------

relu = defunary(
    "relu",
    lambda B, x: B.where(x > 0, x, 0.0),
    lambda B, x, y: B.to_float(x > 0),
    doc="max(x, 0); derivative 0 at x = 0.",
)
relu.def_kinks(_with_zeros)

step = defunary(
    "step",
    lambda B, x: B.to_float(x > 0),
    lambda B, x, y: B.zeros_like(x),
    doc="The 0/1 step: 1 where x > 0, else 0 (step(0) = 0); derivative 0 everywhere (at x = 0 "
    "too). A comparison of floats as a number: PyTorch's `where(x <= 0, 0, g)` (ReLU's "
    "backward) is `g * step(x)`.",
)
step.def_kinks(_with_zeros)

abs_ = defunary(
    "abs",
    lambda B, x: B.abs(x),
    lambda B, x, y: B.sign(x),
    doc="|x|; derivative sign(x) with sign(0) = 0.",
)
abs_.def_kinks(_with_zeros)


@abs_.def_sym
def abs_sym(B: Any, x: Any) -> Any:
    return B.where(x > 0, x, B.where(x < 0, -x, 0.0))


def _sqrt_forward(B: Any, x: Any) -> Any:
    # sqrt of a positive stand-in where x <= 0, so that no branch produces NaN or inf (which
    # would leak through a JAX-mode derivative); the result there is 0.
    pos = x > 0
    return B.where(pos, B.sqrt(B.where(pos, x, 1.0)), 0.0)


def _sqrt_deriv(B: Any, x: Any, y: Any) -> Any:
    pos = x > 0
    return B.where(pos, 0.5 / B.where(pos, y, 1.0), 0.0)


sqrt = defunary(
    "sqrt",
    _sqrt_forward,
    _sqrt_deriv,
    domain="positive",
    doc="Square root, extended by 0 for x <= 0 (Lean's Real.sqrt); derivative 0 for x <= 0.",
)
sqrt.def_kinks(_with_zeros)


@sqrt.def_sym
def sqrt_sym(B: Any, x: Any) -> Any:
    return B.where(x > 0, B.sqrt(x), 0.0)


sigmoid = defunary(
    "sigmoid",
    lambda B, x: B.sigmoid(x),
    lambda B, x, y: y * (1 - y),
    doc="1 / (1 + exp(-x)), computed without overflow and with full relative accuracy on both "
    "tails (exp(-|x|) / (1 + exp(-|x|)) for x < 0).",
)

tanh = defunary(
    "tanh",
    lambda B, x: B.tanh(x),
    lambda B, x, y: 1 - y * y,
    doc="Hyperbolic tangent.",
)

exp = defunary(
    "exp",
    lambda B, x: B.exp(x),
    lambda B, x, y: y,
    doc="Exponential.",
)

log = defunary(
    "log",
    lambda B, x: B.log(x),
    lambda B, x, y: 1 / x,
    domain="positive",
    doc="Natural logarithm (no guard: log(0) = -inf, log(x < 0) = NaN).",
)

inv = defunary(
    "inv",
    lambda B, x: 1 / x,
    lambda B, x, y: -(y * y),
    domain="nonzero",
    doc="Reciprocal 1 / x.",
)


def _rsqrt_deriv(B: Any, x: Any, y: Any) -> Any:
    return -(y * y * y) / 2  # d/dx x^(-1/2) = -x^(-3/2) / 2


rsqrt = defunary(
    "rsqrt",
    lambda B, x: 1 / B.sqrt(x),
    _rsqrt_deriv,
    domain="positive",
    doc="1 / sqrt(x) for x > 0 (no guard, as torch.rsqrt: inf at 0, NaN below).",
)


def _erf_deriv(B: Any, x: Any, y: Any) -> Any:
    # 2 / sqrt(pi) exp(-x^2), with pi the backend's exact constant (B.pi(): atan2(0, -1) in a
    # compiled program): a float literal for 2 / sqrt(pi) would not be the exact derivative
    return B.exp(-(x * x)) * 2 / B.sqrt(B.pi())


erf = defunary(
    "erf",
    lambda B, x: B.erf(x),
    _erf_deriv,
    doc="The error function (2 / sqrt(pi)) integral_0^x exp(-t^2) dt; derivative "
    "(2 / sqrt(pi)) exp(-x^2). Exact GELU is 0.5 x (1 + erf(x / sqrt(2))).",
)

softplus = defunary(
    "softplus",
    lambda B, x: B.log1p(B.exp(-B.abs(x))) + B.where(x > 0, x, 0.0),
    lambda B, x, y: (1 + B.tanh(x / 2)) / 2,
    doc="log(1 + exp(x)), computed stably as log1p(exp(-|x|)) + max(x, 0).",
)


@softplus.def_sym
def softplus_sym(B: Any, x: Any) -> Any:
    return B.log(1 + B.exp(x))


# -- pow: a constant exponent ----------------------------------------------------------------

#: Integer exponents are at most this in magnitude (JAX's integer_pow takes an int32).
POW_MAX_INT = 2**31 - 1


def _pow_exponent_ok(p: float) -> str | None:
    if not math.isfinite(p):
        return "must be finite"
    if p.is_integer() and abs(p) > POW_MAX_INT:
        return f"must be at most {POW_MAX_INT} in magnitude"
    return None


def _pow_int(p: float) -> int | None:
    return int(p) if float(p).is_integer() else None


def _pow_domain(*, p: float) -> Domain:
    """real for an integer p >= 0; nonzero for a negative integer p; positive otherwise"""
    n = _pow_int(p)
    if n is None:
        return "positive"
    return "real" if n >= 0 else "nonzero"


pow_ = Op(
    "pow",
    args=("x",),
    attrs={"p": AttrSpec("float", check=_pow_exponent_ok, doc="the constant exponent")},
    domain={"x": _pow_domain},
    family="elementwise",
    doc="x ** p for a constant exponent p, derivative p x^(p - 1). Domain: every x for an "
    "integer p >= 0 (x^0 = 1), x != 0 for a negative integer p, x > 0 for a non-integer p "
    "(outside it, as torch.pow: inf at x = 0 for p < 0, NaN for x < 0).",
)
pow_.def_shape(same_shape)


@pow_.def_forward
def pow_forward(B: Any, x: Any, *, p: float) -> Any:
    n = _pow_int(p)
    return x**n if n is not None else x**p


def _pow_deriv(B: Any, x: Any, y: Any, p: float) -> Any:
    n = _pow_int(p)
    if n == 0:
        return B.zeros_like(x)
    if n is not None:
        return x ** (n - 1) * n
    if Fraction(p - 1) == Fraction(p) - 1:  # p - 1 exact (p >= 1/2)
        return x ** (p - 1) * p
    return y / x * p  # x > 0 on the domain; p - 1 would round


@pow_.def_jvp
def pow_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, p: float) -> Any:
    return _pow_deriv(B, args[0], out, p) * tangents[0]


@pow_.def_vjp
def pow_vjp(B: Any, args: tuple, out: Any, ct: Any, *, p: float) -> tuple:
    return (_pow_deriv(B, args[0], out, p) * ct,)


# -- clamp -----------------------------------------------------------------------------------

clamp = Op(
    "clamp",
    args=("x",),
    attrs={"lo": AttrSpec("float"), "hi": AttrSpec("float")},
    family="elementwise",
    doc="min(max(x, lo), hi); derivative 1 strictly inside (lo, hi), 0 at or outside the bounds.",
)


@clamp.def_shape
def clamp_shape(x: TensorType, *, lo: float, hi: float) -> tuple[int, ...]:
    if lo > hi:
        raise ShapeError(f"needs lo <= hi, got lo={lo!r}, hi={hi!r}")
    return x.shape


@clamp.def_forward
def clamp_forward(B: Any, x: Any, *, lo: float, hi: float) -> Any:
    return B.where(x <= lo, lo, B.where(x >= hi, hi, x))


def _clamp_inside(B: Any, x: Any, lo: float, hi: float) -> Any:
    return B.to_float(B.logical_and(x > lo, x < hi))


@clamp.def_jvp
def clamp_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, lo: float, hi: float) -> Any:
    return _clamp_inside(B, args[0], lo, hi) * tangents[0]


@clamp.def_vjp
def clamp_vjp(B: Any, args: tuple, out: Any, ct: Any, *, lo: float, hi: float) -> tuple:
    return (_clamp_inside(B, args[0], lo, hi) * ct,)


@clamp.def_kinks
def clamp_kinks(rng: np.random.Generator, x: TensorType, *, lo: float, hi: float) -> list:
    pick = rng.integers(0, 3, size=x.shape)
    v = np.where(pick == 0, lo, np.where(pick == 1, hi, _dyadic(rng, x.shape)))
    v = np.where(np.isfinite(v), v, 0.0)
    return [(v,), (np.full(x.shape, lo if np.isfinite(lo) else 0.0),)]


__all__ = [
    "abs_",
    "add",
    "clamp",
    "const",
    "detach",
    "erf",
    "exp",
    "inv",
    "log",
    "max_",
    "min_",
    "mul",
    "pow_",
    "relu",
    "rsqrt",
    "scale",
    "sigmoid",
    "softplus",
    "sqrt",
    "step",
    "sub",
    "tanh",
]
