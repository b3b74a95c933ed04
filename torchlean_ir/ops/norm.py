"""batchnorm_channel_first: normalisation of one (C, H, W) sample per channel."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op, lower_widened
from .._types import Shape, TensorType

batchnorm_channel_first = Op(
    "batchnorm_channel_first",
    args=("x", "gamma", "beta"),
    attrs={
        "eps": AttrSpec(
            "float",
            default=1e-5,
            check=lambda e: None if 0 < e < float("inf") else "must be positive and finite",
            doc="added to the variance (PyTorch's BatchNorm2d default)",
        )
    },
    family="nn",
    doc=(
        "x (C, H, W) normalised per channel with the statistics of this sample over H x W "
        "(population variance): (x - mean) / sqrt(var + eps) * gamma + beta."
    ),
)


@batchnorm_channel_first.def_shape
def batchnorm_channel_first_shape(
    x: TensorType, gamma: TensorType, beta: TensorType, *, eps: float
) -> Shape:
    if x.rank != 3 or 0 in x.shape:
        raise ShapeError(f"needs x (C, H, W) with C, H, W > 0, got {x}")
    if gamma.shape != (x.shape[0],) or beta.shape != (x.shape[0],):
        raise ShapeError(f"gamma and beta must be [{x.shape[0]}] for x {x}, got {gamma}, {beta}")
    return x.shape


def _mean_hw(B: Any, a: Any) -> Any:
    return B.sum(a, axis=(1, 2), keepdims=True) / (a.shape[1] * a.shape[2])


def _per_channel(B: Any, v: Any) -> Any:
    return B.reshape(v, (-1, 1, 1))


def _bn_stats(B: Any, x: Any, eps: float) -> tuple[Any, Any]:
    """``(1 / sqrt(var + eps), xhat)`` per channel."""
    xc = x - _mean_hw(B, x)
    r = 1 / B.sqrt(_mean_hw(B, xc * xc) + eps)
    return r, xc * r


@batchnorm_channel_first.def_forward
def batchnorm_channel_first_forward(B: Any, x: Any, gamma: Any, beta: Any, *, eps: float) -> Any:
    _, xhat = _bn_stats(B, x, eps)
    return xhat * _per_channel(B, gamma) + _per_channel(B, beta)


@batchnorm_channel_first.def_jvp
def batchnorm_channel_first_jvp(
    B: Any, args: tuple, tangents: tuple, out: Any, *, eps: float
) -> Any:
    x, gamma, _ = args
    tx, tgamma, tbeta = tangents
    r, xhat = _bn_stats(B, x, eps)
    txc = tx - _mean_hw(B, tx)
    txhat = r * (txc - xhat * _mean_hw(B, xhat * txc))
    return txhat * _per_channel(B, gamma) + xhat * _per_channel(B, tgamma) + _per_channel(B, tbeta)


@batchnorm_channel_first.def_vjp
def batchnorm_channel_first_vjp(B: Any, args: tuple, out: Any, ct: Any, *, eps: float) -> tuple:
    x, gamma, _ = args
    r, xhat = _bn_stats(B, x, eps)
    g = ct * _per_channel(B, gamma)
    gx = r * (g - _mean_hw(B, g) - xhat * _mean_hw(B, g * xhat))
    return (gx, B.sum(ct * xhat, axis=(1, 2)), B.sum(ct, axis=(1, 2)))


# float32: the statistics in float64, as layer_norm (docs/ops-notes.md)
lower_widened(batchnorm_channel_first)

__all__ = ["batchnorm_channel_first"]
