"""Smooth activations beyond the core tier: safe_log, gelu (tanh approximation), silu.

gelu and silu are primitives here (TorchLean builds them from tanh / mul / add / scale): one node
each, an exact derivative rule, and direct oracles (ONNX ``Gelu(approximate="tanh")``,
``torch.nn.functional.gelu(approximate="tanh")`` / ``silu``). The forward is TorchLean's formula
term for term, so values agree with its decomposition; see ``docs/ops-notes.md``.
"""

from __future__ import annotations

import math
from typing import Any

from .._attrs import AttrSpec
from .._registry import Op, defunary, same_shape

# -- safe_log --------------------------------------------------------------------------------


def _eps_ok(e: float) -> str | None:
    return None if 0 <= e < math.inf else "must be finite and >= 0"


safe_log = Op(
    "safe_log",
    args=("x",),
    attrs={"eps": AttrSpec("float", check=_eps_ok, doc="added to softplus(x) before the log")},
    family="elementwise",
    doc="log(softplus(x) + eps): defined for every real x (not log(x + eps)).",
)
safe_log.def_shape(same_shape)


def _safe_log_deriv(B: Any, x: Any, eps: float) -> Any:
    return B.sigmoid(x) / (B.softplus(x) + eps)


@safe_log.def_forward
def safe_log_forward(B: Any, x: Any, *, eps: float) -> Any:
    return B.log(B.softplus(x) + eps)


@safe_log.def_jvp
def safe_log_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, eps: float) -> Any:
    return _safe_log_deriv(B, args[0], eps) * tangents[0]


@safe_log.def_vjp
def safe_log_vjp(B: Any, args: tuple, out: Any, ct: Any, *, eps: float) -> tuple:
    return (_safe_log_deriv(B, args[0], eps) * ct,)


# -- gelu (tanh approximation), silu ---------------------------------------------------------

#: The constants of the tanh approximation, as float64 (the symbolic backend reads them as the
#: exact rationals of these floats, in the forward and the derivative alike: write
#: ``GELU_A * x * 3``, never ``3 * GELU_A``, which would round the product in float64).
GELU_C = math.sqrt(2 / math.pi)
GELU_A = 0.044715


# The rules compute the documented formula through (1 + tanh(u)) / 2 = sigmoid(2u), exactly equal
# in real arithmetic and stable over the whole float range: no cancellation in 1 + tanh(u) for
# x < 0, and no 0 * inf in the derivative, whose x^3 overflows float32 beyond |x| ~ 7e12 (it
# was NaN at |x| = 1e30). The symbolic forward (what the verifier differentiates) is the
# documented tanh formula itself.


def _gelu_u(x: Any) -> Any:
    return GELU_C * (x + GELU_A * x * x * x)


def _gelu_forward(B: Any, x: Any) -> Any:
    return x * B.sigmoid(_gelu_u(x) * 2)


def _gelu_deriv(B: Any, x: Any, y: Any) -> Any:
    # d/dx x s(2u) = s(2u) + 2C w (1 + 3A x^2) with w = x s(2u) s(-2u), s(-2u) = 1 - s(2u);
    # w (1 + 3A x^2) is summed as w + 3A x (x w): w vanishes before x^2 would overflow
    u2 = _gelu_u(x) * 2
    s = B.sigmoid(u2)
    w = x * B.sigmoid(-u2) * s
    return s + GELU_C * (w + GELU_A * x * (x * w) * 3) * 2


gelu = defunary(
    "gelu",
    _gelu_forward,
    _gelu_deriv,
    doc="0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GELU, tanh approximation.",
)


@gelu.def_sym
def gelu_sym(B: Any, x: Any) -> Any:
    return x * (1 + B.tanh(_gelu_u(x))) / 2


def _silu_deriv(B: Any, x: Any, y: Any) -> Any:
    s = B.sigmoid(x)
    return s * (1 + x * (1 - s))


silu = defunary(
    "silu",
    lambda B, x: x * B.sigmoid(x),
    _silu_deriv,
    doc="x * sigmoid(x) (SiLU / swish).",
)

__all__ = ["GELU_A", "GELU_C", "gelu", "safe_log", "silu"]
