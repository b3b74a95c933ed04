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


def _gelu_forward(B: Any, x: Any) -> Any:
    return x * (1 + B.tanh(GELU_C * (x + GELU_A * x * x * x))) / 2


def _gelu_deriv(B: Any, x: Any, y: Any) -> Any:
    t = B.tanh(GELU_C * (x + GELU_A * x * x * x))
    return (1 + t) / 2 + x * (1 - t * t) * GELU_C * (1 + GELU_A * x * x * 3) / 2


gelu = defunary(
    "gelu",
    _gelu_forward,
    _gelu_deriv,
    doc="0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): GELU, tanh approximation.",
)


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
