"""Batch normalisation of one sample, channels first.

``batchnorm_channel_first`` normalises a (C, H, W) sample with its own statistics per channel;
``batchnorm_eval`` is inference-mode batch normalisation (PyTorch's ``BatchNorm*d`` in ``eval()``,
ONNX ``BatchNormalization``): the statistics are given (running mean and variance), so each
sample is normalised independently of the others.
"""

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

# -- batchnorm_eval (inference: given statistics) --------------------------------------------

batchnorm_eval = Op(
    "batchnorm_eval",
    args=("x", "gamma", "beta", "mean", "var"),
    attrs={
        "eps": AttrSpec(
            "float",
            default=1e-5,
            check=lambda e: None if 0 < e < float("inf") else "must be positive and finite",
            doc="added to the variance (PyTorch's default; ONNX files store it as a float32)",
        )
    },
    domain={"var": "positive"},
    family="nn",
    doc=(
        "Inference-mode batch normalisation of x (C, spatial...) with given per-channel "
        "statistics mean, var (C,): (x - mean) / sqrt(var + eps) * gamma + beta. Every argument "
        "receives gradient (mean and var are usually frozen leaves)."
    ),
)


@batchnorm_eval.def_shape
def batchnorm_eval_shape(
    x: TensorType,
    gamma: TensorType,
    beta: TensorType,
    mean: TensorType,
    var: TensorType,
    *,
    eps: float,
) -> Shape:
    if x.rank < 1 or x.shape[0] == 0:
        raise ShapeError(f"needs x (C, spatial...) with C > 0, got {x}")
    c = x.shape[0]
    for name, t in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        if t.shape != (c,):
            raise ShapeError(f"{name} must be [{c}] for x {x}, got {t}")
    return x.shape


def _channels(B: Any, v: Any, ndim: int) -> Any:
    """A (C,) vector shaped (C, 1, ..., 1) against an x of rank ``ndim``."""
    return B.reshape(v, (-1,) + (1,) * (ndim - 1))


def _spatial_sum(B: Any, a: Any) -> Any:
    return B.sum(a, axis=tuple(range(1, a.ndim))) if a.ndim > 1 else a


def _bn_eval_parts(B: Any, x: Any, mean: Any, var: Any, eps: float) -> tuple[Any, Any]:
    """``(x - mean, 1 / sqrt(var + eps))``, both broadcast against x."""
    xc = x - _channels(B, mean, x.ndim)
    r = _channels(B, 1 / B.sqrt(var + eps), x.ndim)
    return xc, r


@batchnorm_eval.def_forward
def batchnorm_eval_forward(
    B: Any, x: Any, gamma: Any, beta: Any, mean: Any, var: Any, *, eps: float
) -> Any:
    xc, r = _bn_eval_parts(B, x, mean, var, eps)
    return xc * r * _channels(B, gamma, x.ndim) + _channels(B, beta, x.ndim)


@batchnorm_eval.def_jvp
def batchnorm_eval_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, eps: float) -> Any:
    x, gamma, _, mean, var = args
    tx, tgamma, tbeta, tmean, tvar = tangents
    d = x.ndim
    xc, r = _bn_eval_parts(B, x, mean, var, eps)
    g = _channels(B, gamma, d)
    # d r / d var = -r^3 / 2
    dr = -(r * r * r) * _channels(B, tvar, d) / 2
    txc = tx - _channels(B, tmean, d)
    return (txc * r + xc * dr) * g + xc * r * _channels(B, tgamma, d) + _channels(B, tbeta, d)


@batchnorm_eval.def_vjp
def batchnorm_eval_vjp(B: Any, args: tuple, out: Any, ct: Any, *, eps: float) -> tuple:
    x, gamma, _, mean, var = args
    xc, r = _bn_eval_parts(B, x, mean, var, eps)
    g = _channels(B, gamma, x.ndim)
    gx = ct * r * g
    r1 = 1 / B.sqrt(var + eps)
    gvar = -_spatial_sum(B, ct * xc * g) * (r1 * r1 * r1) / 2
    return (
        gx,
        _spatial_sum(B, ct * xc * r),
        _spatial_sum(B, ct),
        -_spatial_sum(B, gx),
        gvar,
    )


__all__ = ["batchnorm_channel_first", "batchnorm_eval"]
