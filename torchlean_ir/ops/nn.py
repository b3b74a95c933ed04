"""Neural-network ops: softmax, log_softmax, mse_loss, layer_norm."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op, lower_widened, same_shape
from .._types import Shape, TensorType

# -- softmax / log_softmax (last axis, max-shifted) ------------------------------------------

softmax = Op(
    "softmax",
    args=("x",),
    family="nn",
    doc="Softmax over the last axis, max-shifted for stability; the softmax of a scalar is 1.",
)
softmax.def_shape(same_shape)


@softmax.def_forward
def softmax_forward(B: Any, x: Any) -> Any:
    if x.ndim == 0:
        return B.ones_like(x)
    if x.shape[-1] == 0:  # empty rows: nothing to normalise (and no maximum to shift by)
        return B.zeros_like(x)
    e = B.exp(B.max_shift(x))
    return e / B.sum(e, axis=-1, keepdims=True)


@softmax.def_sym
def softmax_sym(B: Any, x: Any) -> Any:
    if x.ndim == 0:
        return B.ones_like(x)
    e = B.exp(x)
    return e / B.sum(e, axis=-1, keepdims=True)


@softmax.def_jvp
def softmax_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    t = tangents[0]
    if out.ndim == 0:
        return B.zeros_like(out)
    return out * (t - B.sum(out * t, axis=-1, keepdims=True))


@softmax.def_vjp
def softmax_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    if out.ndim == 0:
        return (B.zeros_like(ct),)
    return (out * (ct - B.sum(out * ct, axis=-1, keepdims=True)),)


log_softmax = Op(
    "log_softmax",
    args=("x",),
    family="nn",
    doc="log(softmax(x)) over the last axis: x - max - log(sum(exp(x - max))).",
)
log_softmax.def_shape(same_shape)


@log_softmax.def_forward
def log_softmax_forward(B: Any, x: Any) -> Any:
    if x.ndim == 0 or x.shape[-1] == 0:  # a scalar's log softmax is 0; empty rows are empty
        return B.zeros_like(x)
    shifted = B.max_shift(x)
    return shifted - B.log(B.sum(B.exp(shifted), axis=-1, keepdims=True))


@log_softmax.def_sym
def log_softmax_sym(B: Any, x: Any) -> Any:
    if x.ndim == 0:
        return B.zeros_like(x)
    return x - B.log(B.sum(B.exp(x), axis=-1, keepdims=True))


@log_softmax.def_jvp
def log_softmax_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    t = tangents[0]
    if out.ndim == 0:
        return B.zeros_like(out)
    return t - B.sum(B.exp(out) * t, axis=-1, keepdims=True)


@log_softmax.def_vjp
def log_softmax_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    if out.ndim == 0:
        return (B.zeros_like(ct),)
    return (ct - B.exp(out) * B.sum(ct, axis=-1, keepdims=True),)


# -- mse_loss --------------------------------------------------------------------------------

mse_loss = Op(
    "mse_loss",
    args=("a", "b"),
    family="nn",
    doc="mean((a - b)^2) over all elements, a scalar; both arguments receive gradient.",
)


@mse_loss.def_shape
def mse_loss_shape(a: TensorType, b: TensorType) -> Shape:
    same_shape(a, b)
    if a.size == 0:
        raise ShapeError(f"needs at least one element, got {a}")
    return ()


@mse_loss.def_forward
def mse_loss_forward(B: Any, a: Any, b: Any) -> Any:
    d = a - b
    return B.sum(d * d) / d.size


@mse_loss.def_jvp
def mse_loss_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    a, b = args
    ta, tb = tangents
    d = a - b
    return 2 * B.sum(d * (ta - tb)) / d.size


@mse_loss.def_vjp
def mse_loss_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    d = a - b
    g = d * (2 * ct / d.size)
    return (g, -g)


# -- layer_norm ------------------------------------------------------------------------------

layer_norm = Op(
    "layer_norm",
    args=("x", "gamma", "beta"),
    attrs={
        "eps": AttrSpec(
            "float",
            default=1e-5,
            check=lambda e: None if e > 0 and e != float("inf") else "must be positive and finite",
            doc="added to the variance (TorchLean uses 1e-6; PyTorch's default is 1e-5)",
        )
    },
    family="nn",
    doc=(
        "Per row of x (seq, embed): (x - mean) / sqrt(var + eps) * gamma + beta, with the "
        "population variance over the last axis."
    ),
)


@layer_norm.def_shape
def layer_norm_shape(x: TensorType, gamma: TensorType, beta: TensorType, *, eps: float) -> Shape:
    if x.rank != 2 or gamma.rank != 1 or beta.rank != 1:
        raise ShapeError(
            f"needs x (seq, embed), gamma (embed,), beta (embed,), got {x}, {gamma}, {beta}"
        )
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ShapeError(f"needs seq > 0 and embed > 0, got {x}")
    if gamma.shape != (x.shape[1],) or beta.shape != (x.shape[1],):
        raise ShapeError(f"gamma and beta must be [{x.shape[1]}] for x {x}, got {gamma}, {beta}")
    return x.shape


def _ln_stats(B: Any, x: Any, eps: float) -> tuple[Any, Any, Any]:
    n = x.shape[-1]
    xc = x - B.sum(x, axis=-1, keepdims=True) / n
    var = B.sum(xc * xc, axis=-1, keepdims=True) / n
    r = 1 / B.sqrt(var + eps)
    return xc, r, xc * r


@layer_norm.def_forward
def layer_norm_forward(B: Any, x: Any, gamma: Any, beta: Any, *, eps: float) -> Any:
    _, _, xhat = _ln_stats(B, x, eps)
    return xhat * gamma + beta


@layer_norm.def_jvp
def layer_norm_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, eps: float) -> Any:
    x, gamma, _ = args
    tx, tgamma, tbeta = tangents
    n = x.shape[-1]
    _, r, xhat = _ln_stats(B, x, eps)
    txc = tx - B.sum(tx, axis=-1, keepdims=True) / n
    txhat = r * (txc - xhat * (B.sum(xhat * txc, axis=-1, keepdims=True) / n))
    return txhat * gamma + xhat * tgamma + tbeta


@layer_norm.def_vjp
def layer_norm_vjp(B: Any, args: tuple, out: Any, ct: Any, *, eps: float) -> tuple:
    x, gamma, _ = args
    n = x.shape[-1]
    _, r, xhat = _ln_stats(B, x, eps)
    g = ct * gamma
    gx = r * (
        g
        - B.sum(g, axis=-1, keepdims=True) / n
        - xhat * (B.sum(g * xhat, axis=-1, keepdims=True) / n)
    )
    return (gx, B.sum(ct * xhat, axis=0), B.sum(ct, axis=0))


# float32: the statistics in float64 (squares of 1e30 overflow, a mean of smallest normals is
# subnormal and flushed); see docs/ops-notes.md
lower_widened(layer_norm)

__all__ = ["layer_norm", "log_softmax", "mse_loss", "softmax"]
