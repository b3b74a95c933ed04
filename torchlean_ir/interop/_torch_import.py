"""PyTorch models in: ``from_torch(torch.export.export(model, (example,)))``.

The program's ATen ops map through :data:`ATEN_IMPORTS` onto the tracer (``_trace``), which
builds the per-sample graph. ``torch`` is imported here only, when this module's functions run
(``torchlean_ir`` imports without it). Both the ops ``torch.export`` records (``aten.linear``,
``aten.conv2d``, ``aten.scaled_dot_product_attention``) and their core-ATen decompositions
(``aten.addmm``, ``aten.convolution``, ``aten._native_batch_norm_legit_no_training``, after
``ExportedProgram.run_decompositions()``) are mapped.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._builder import GraphBuilder
from .._errors import TorchleanError
from ._common import (
    Blocked,
    Imported,
    Mapping,
    Names,
    Refusals,
    Unsupported,
    float_dtype,
    prune,
)
from ._indexmap import (
    IndexMap,
    as_float,
    batch_free,
    index_arg,
    index_t,
    log_probs_pick,
    renormalised,
    shifted_rows,
)
from ._trace import InteropError, Refused, T, Tracer, one_line

Converter = Callable[["_Ctx", list[Any], dict[str, Any]], Any]

#: ATen op (``aten.<name>``, any overload) -> how it is imported (filled in by ``@_aten``).
ATEN_IMPORTS: dict[str, Mapping] = {}

#: ATen ops refused on purpose, with the reason (``docs/interop.md`` lists them).
ATEN_REFUSED: dict[str, str] = {
    "aten.max": "no max-reduction op (max pooling covers windows)",
    "aten.amax": "no max-reduction op (max pooling covers windows)",
    "aten.rand": "torch's generators are not our SplitMix64",
    "aten.bernoulli": "torch's generators are not our SplitMix64",
    "aten.native_dropout": "dropout in training mode draws torch's random numbers",
}

#: Why a comparison of runtime floats is refused where its booleans are read other than as a
#: 0/1 number (``_compare``).
RUNTIME_COMPARISON = (
    "comparisons of runtime floats give booleans, which graphs do not hold (only as the "
    "condition of aten.where, or as 0/1 multiplying a float tensor, do they become a step; "
    "comparisons of values known at import time fold; an index input compared with a "
    "constant becomes a 0/1 mask)"
)


class _Ctx:
    """One import: the tracer, and the current op's name (without ``aten.``)."""

    def __init__(self, tracer: Tracer, batched_program: bool) -> None:
        self.tr = tracer
        self.batched_program = batched_program
        self.op = ""
        #: id(transposed T) -> the unbatched matrix it transposes (addmm reads it as linear);
        #: ``keep`` holds the transposed Ts so that their ids stay theirs
        self.transposed: dict[int, T] = {}
        self.keep: list[T] = []
        #: id(padded T) -> (the unpadded T, begin, end, fill) of a constant pad: a zero pad
        #: that only a convolution reads becomes that convolution's padding (``_conv_padding``)
        self.padded: dict[int, tuple[T, list[int], list[int], float]] = {}
        #: a joint forward/backward graph (``joint_from_torch``): there ``aten.alias`` is how
        #: AOTAutograd's functionalization records ``detach``, so it imports as detach
        self.joint = False
        #: the FX node being imported (a comparison reads its users)
        self.node: Any = None
        #: id(0/1 mask T of a comparison) -> (s, negated): the mask is ``step`` value ``s``, or
        #: ``1 - s`` where ``negated`` (``aten.where`` selects with ``s`` itself)
        self.masks: dict[int, tuple[T, bool]] = {}
        #: id(detached T) -> the T it detaches: a comparison reads the value itself (a 0/1 step
        #: has derivative 0 either way; ReLU's backward compares the saved, detached output)
        self.undetached: dict[int, T] = {}


def _aten(*names: str, ours: str, note: str = "") -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for n in names:
            ATEN_IMPORTS[f"aten.{n}"] = Mapping(fn, note, ours)
        return fn

    return deco


def _t(x: Any, what: str = "tensor") -> T:
    if not isinstance(x, T):
        raise Refused(f"expected a tensor for {what}, got {type(x).__name__}")
    return x


def _num(x: Any) -> float | None:
    if isinstance(x, bool):
        return float(x)
    if isinstance(x, int | float):
        return float(x)
    return None


def _arg(args: list[Any], kw: dict[str, Any], i: int, name: str, default: Any = None) -> Any:
    if name in kw:
        return kw[name]
    return args[i] if i < len(args) else default


def _ints(v: Any, d: int) -> list[int]:
    if isinstance(v, int):
        return [v] * d
    v = list(v)
    return v * d if len(v) == 1 else v


def _operand(c: _Ctx, x: Any) -> T:
    """A tensor, or a Python number as a scalar constant."""
    if isinstance(x, T):
        return x
    n = _num(x)
    if n is None:
        raise Refused(f"expected a tensor or a number, got {type(x).__name__}")
    return c.tr.const(np.asarray(n))


# -- elementwise ------------------------------------------------------------------------------

_UNARY = {
    "relu": "relu",
    "relu_": "relu",
    "sigmoid": "sigmoid",
    "tanh": "tanh",
    "exp": "exp",
    "log": "log",
    "sqrt": "sqrt",
    "reciprocal": "inv",
    "abs": "abs",
    "silu": "silu",
    "erf": "erf",
    "rsqrt": "rsqrt",
}


@_aten(*_UNARY, ours="the op of the same name (reciprocal: inv)")
def _unary(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    return c.tr.unary(_UNARY[c.op], _t(args[0]))


@_aten("neg", ours="scale")
def _neg(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    return c.tr.scale(_t(args[0]), -1.0)


@_aten(
    "gelu",
    ours="gelu; approximate='none': scale, erf, mul, add",
    note="exact: h + h erf(x / sqrt(2)) with h = x / 2",
)
def _gelu(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    approx = _arg(args, kw, 1, "approximate", "none")
    if approx == "tanh":
        return c.tr.unary("gelu", _t(args[0]))
    if approx == "none":
        return c.tr.gelu_exact(_t(args[0]))
    raise Refused(f"gelu approximate={approx!r} (only 'none' or 'tanh')")


@_aten(
    "softplus",
    ours="softplus",
    note="beta 1; torch's threshold (x for x > 20) differs from "
    "our exact softplus by under 1e-8 relative",
)
def _softplus(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    if _arg(args, kw, 1, "beta", 1) != 1:
        raise Refused("softplus with beta != 1")
    return c.tr.unary("softplus", _t(args[0]))


@_aten(
    "hardtanh",
    "relu6",
    "clamp",
    "clamp_min",
    "clamp_max",
    ours="clamp (max / min when one-sided)",
    note="hardtanh, relu6: clamp's gradient convention is theirs (0 at the bounds)",
)
def _clamp(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    name = c.op
    if name == "hardtanh":
        lo, hi = _arg(args, kw, 1, "min_val", -1.0), _arg(args, kw, 2, "max_val", 1.0)
    elif name == "relu6":
        lo, hi = 0.0, 6.0
    elif name == "clamp_min":
        lo, hi = _arg(args, kw, 1, "min"), None
    elif name == "clamp_max":
        lo, hi = None, _arg(args, kw, 1, "max")
    else:
        lo, hi = _arg(args, kw, 1, "min"), _arg(args, kw, 2, "max")
    if isinstance(lo, T) or isinstance(hi, T):
        raise Refused("clamp with tensor bounds (only numbers)")
    if lo is not None and hi is not None:
        return c.tr.unary("clamp", x, lo=float(lo), hi=float(hi))
    if lo is not None:
        return c.tr.unary("relu", x) if lo == 0 else c.tr.binary("max", x, c.tr.const(float(lo)))
    if hi is not None:
        return c.tr.binary("min", x, c.tr.const(float(hi)))
    return x


@_aten("leaky_relu", ours="max / min, scale", note="max(x, slope x)")
def _leaky(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    a = float(_arg(args, kw, 1, "negative_slope", 0.01))
    return c.tr.binary("max" if a <= 1 else "min", x, c.tr.scale(x, a))


@_aten(
    "add",
    "sub",
    "mul",
    "div",
    "rsub",
    ours="add / sub / mul (scale by a number); div: mul by inv",
    note="NumPy broadcasting; alpha as scale; div by a power of two: scale",
)
def _arith(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    name = c.op
    if name == "div" and kw.get("rounding_mode") is not None:
        raise Refused(f"div with rounding_mode={kw['rounding_mode']!r}")
    a, b = _operand(c, args[0]), _operand(c, args[1])
    alpha = kw.get("alpha", args[2] if len(args) > 2 else 1)
    if name == "rsub":
        a, b, name = b, a, "sub"
    if alpha != 1:
        b = c.tr.scale(b, float(alpha))
    return c.tr.binary(name, a, b)


@_aten(
    "pow",
    ours="pow (exponents 2: mul, 0.5: sqrt, -1: inv, -0.5: rsqrt)",
    note="a constant exponent (a number): any finite value",
)
def _pow(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, p = _t(args[0]), _num(args[1])
    if p is None:
        raise Refused("pow with a tensor exponent (only a constant number)")
    return c.tr.power(x, float(p))


@_aten("maximum", "minimum", ours="max / min")
def _maximum(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    op = "max" if c.op == "maximum" else "min"
    return c.tr.binary(op, _operand(c, args[0]), _operand(c, args[1]))


# -- linear algebra ---------------------------------------------------------------------------


@_aten("linear", ours="linear (matmul for a matrix per sample)")
def _linear(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    b = _arg(args, kw, 2, "bias")
    return c.tr.linear(_t(args[0]), _t(args[1]), b if isinstance(b, T) else None)


@_aten("addmm", ours="linear / matmul, add", note="beta, alpha as scale")
def _addmm(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    bias, x, m2 = _t(args[0]), _t(args[1]), _t(args[2])
    beta, alpha = float(kw.get("beta", 1)), float(kw.get("alpha", 1))
    src = c.transposed.get(id(m2))
    if src is not None and beta == 1 and alpha == 1 and not bias.batched and bias.rank == 1:
        return c.tr.linear(x, src, bias)
    y = c.tr.scale(c.tr.matmul(x, m2), alpha)
    return c.tr.binary("add", y, c.tr.scale(bias, beta))


@_aten("mm", "bmm", "matmul", ours="matmul / bmm")
def _mm(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    return c.tr.matmul(_t(args[0]), _t(args[1]))


# -- convolution and pooling ------------------------------------------------------------------


def _conv_common(
    c: _Ctx,
    x: T,
    W: T,
    b: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
) -> T:
    d = W.rank - 2
    stride = _ints(stride, d)
    dil = _ints(dilation, d)
    if isinstance(padding, str):
        if padding == "valid":
            pad = [0] * d
        else:
            raise Refused(f"convolution padding={padding!r} (give explicit padding)")
    else:
        pad = _ints(padding, d)
    bias = b if isinstance(b, T) else None
    if transposed:
        if groups != 1 or any(k != 1 for k in dil):
            raise Refused("transpose convolution with groups or dilation")
        return c.tr.conv_transpose(x, W, bias, stride, pad, pad, _ints(output_padding, d))
    x, begin, end = _conv_padding(c, x, pad)
    return c.tr.conv(x, W, bias, stride, begin, end, groups=groups, dilation=dil)


def _conv_padding(c: _Ctx, x: T, pad: list[int]) -> tuple[T, list[int], list[int]]:
    """The input and (begin, end) spatial padding of a convolution: a zero ``pad`` of the
    spatial axes just before it (TensorFlow's 'SAME' padding, as MobileNetV2 writes it:
    ``F.pad`` then an unpadded convolution) is folded into the convolution's own padding
    (the tracer keeps what no symmetric padding reproduces as an explicit pad)."""
    src = c.padded.get(id(x))
    if src is None:
        return x, list(pad), list(pad)
    inner, begin, end, fill = src
    if fill != 0 or any(begin[:2]) or any(end[:2]):
        return x, list(pad), list(pad)
    return (
        inner,
        [p + q for p, q in zip(pad, begin[2:], strict=True)],
        [p + q for p, q in zip(pad, end[2:], strict=True)],
    )


@_aten(
    "pad",
    "constant_pad_nd",
    ours="concat with constant blocks; a zero pad read by a convolution: its padding",
    note="mode 'constant'; no cropping (negative pads); of an index tensor: its positions "
    "padded with the constant",
)
def _pad(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    pads = [int(p) for p in args[1]]
    if c.op == "pad":
        mode = _arg(args, kw, 2, "mode", "constant")
        fill = _arg(args, kw, 3, "value", None)
    else:
        mode, fill = "constant", _arg(args, kw, 2, "value", 0)
    if mode != "constant":
        raise Refused(f"pad mode {mode!r} (only 'constant')")
    if len(pads) % 2 or len(pads) // 2 > x.rank:
        raise Refused(f"pad {pads} of a tensor of rank {x.rank}")
    value = 0.0 if fill is None else _num(fill)
    if value is None:
        raise Refused("pad with a tensor fill value")
    begin, end = [0] * x.rank, [0] * x.rank
    for i in range(len(pads) // 2):  # (begin, end) pairs from the last axis backwards
        begin[x.rank - 1 - i], end[x.rank - 1 - i] = pads[2 * i], pads[2 * i + 1]
    out = c.tr.pad(x, begin, end, value)
    c.padded[id(out)] = (x, begin, end, value)
    c.keep.append(out)
    return out


@_aten(
    "conv1d",
    "conv2d",
    "conv3d",
    ours="conv2d / conv (with groups)",
    note="no dilation",
)
def _conv(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, W = _t(args[0]), _t(args[1])
    return _conv_common(
        c,
        x,
        W,
        _arg(args, kw, 2, "bias"),
        _arg(args, kw, 3, "stride", 1),
        _arg(args, kw, 4, "padding", 0),
        _arg(args, kw, 5, "dilation", 1),
        False,
        0,
        int(_arg(args, kw, 6, "groups", 1)),
    )


@_aten(
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    ours="conv_transpose2d / conv_transpose",
    note="groups 1, no dilation",
)
def _conv_t(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, W = _t(args[0]), _t(args[1])
    return _conv_common(
        c,
        x,
        W,
        _arg(args, kw, 2, "bias"),
        _arg(args, kw, 3, "stride", 1),
        _arg(args, kw, 4, "padding", 0),
        _arg(args, kw, 7, "dilation", 1),
        True,
        _arg(args, kw, 5, "output_padding", 0),
        int(_arg(args, kw, 6, "groups", 1)),
    )


@_aten("convolution", ours="conv / conv_transpose")
def _convolution(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, W, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    return _conv_common(
        c, _t(x), _t(W), b, stride, padding, dilation, bool(transposed), output_padding, int(groups)
    )


def _pool_args(
    args: list[Any], kw: dict[str, Any], d: int
) -> tuple[list[int], list[int], list[int]]:
    kernel = _ints(args[1], d)
    stride = _arg(args, kw, 2, "stride", None) or kernel
    padding = _arg(args, kw, 3, "padding", 0)
    return kernel, _ints(stride, d), _ints(padding, d)


@_aten(
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool2d_with_indices",
    "max_pool1d_with_indices",
    "max_pool3d_with_indices",
    ours="max_pool*",
    note="no dilation; ceil_mode only where it changes nothing; indices refused",
)
def _max_pool(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x = _t(args[0])
    d = x.rank - 2
    kernel, stride, pad = _pool_args(args, kw, d)
    y = c.tr.pool(
        x,
        "max",
        kernel,
        stride,
        pad,
        pad,
        ceil_mode=bool(_arg(args, kw, 5, "ceil_mode", False)),
        dilation=_ints(_arg(args, kw, 4, "dilation", 1), d),
    )
    if c.op.endswith("_with_indices"):
        return (y, Refused("max pooling indices (integers) are not a graph value"))
    return y


@_aten(
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    ours="avg_pool*",
    note="ceil_mode only where it changes nothing; no divisor_override",
)
def _avg_pool(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    d = x.rank - 2
    kernel, stride, pad = _pool_args(args, kw, d)
    if _arg(args, kw, 6, "divisor_override") is not None:
        raise Refused("avg_pool with divisor_override")
    return c.tr.pool(
        x,
        "avg",
        kernel,
        stride,
        pad,
        pad,
        ceil_mode=bool(_arg(args, kw, 4, "ceil_mode", False)),
        count_include_pad=bool(_arg(args, kw, 5, "count_include_pad", True)),
    )


@_aten(
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "_adaptive_avg_pool2d",
    ours="global_avg_pool2d / avg_pool*",
    note="output 1 per dim, or sizes that divide the input",
)
def _adaptive(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    d = x.rank - 2
    out = _ints(args[1], d)
    sizes = list(x.full[2:])
    if all(o == 1 for o in out):
        return c.tr.global_avg_pool(x, keepdims=True)
    if any(o is None or n % o for n, o in zip(sizes, out, strict=True)):
        raise Refused(f"adaptive average pooling {sizes} -> {out} with unequal windows")
    k = [n // o for n, o in zip(sizes, out, strict=True)]
    return c.tr.pool(x, "avg", k, k, [0] * d, [0] * d)


# -- normalisation ----------------------------------------------------------------------------


def _batch_norm(c: _Ctx, x: T, w: Any, b: Any, rm: Any, rv: Any, training: bool, eps: float) -> T:
    C = x.full[1]
    gamma = w if isinstance(w, T) else c.tr.const(np.ones(C))
    beta = b if isinstance(b, T) else c.tr.const(np.zeros(C))
    if not training:
        if not isinstance(rm, T) or not isinstance(rv, T):
            raise Refused("batch norm in eval mode without running statistics")
        return c.tr.batchnorm_eval(x, gamma, beta, rm, rv, eps)
    if c.batched_program:
        raise Refused(
            "batch norm in training mode: batch statistics mix the samples of a batch (export "
            "in eval mode, or import with batch_axis=None to take the whole batch as one sample)"
        )
    return _batch_stats_norm(c.tr, x, gamma, beta, eps)


def _batch_stats_norm(tr: Tracer, x: T, gamma: T, beta: T, eps: float) -> T:
    """Training-mode batch norm of a whole batch (no batch axis): per channel over (N, spatial),
    as batchnorm_channel_first of the (C, N * spatial, 1) rearrangement."""
    if x.rank < 2:
        raise Refused(f"batch norm of {list(x.full)}")
    perm = [1, 0, *range(2, x.rank)]
    moved = tr.permute(x, perm)
    c = x.full[1]
    flat = tr.reshape_to(moved, [c, -1, 1])
    y = tr.b.batchnorm_channel_first(
        tr.var(flat), tr.reshape(tr.var(gamma), (c,)), tr.reshape(tr.var(beta), (c,)), eps=eps
    )
    back = tr.reshape_to(T(flat.full, var=y), list(moved.full))
    return tr.permute(back, perm)


@_aten(
    "batch_norm",
    ours="batchnorm_eval (eval); training: batchnorm_channel_first of the "
    "whole batch (batch_axis=None only)",
)
def _bn(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, w, b, rm, rv, training, _momentum, eps = args[:8]
    return _batch_norm(c, _t(x), w, b, rm, rv, bool(training), float(eps))


@_aten("_native_batch_norm_legit_no_training", ours="batchnorm_eval")
def _bn_eval(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x, w, b, rm, rv, _momentum, eps = args[:7]
    y = _batch_norm(c, _t(x), w, b, rm, rv, False, float(eps))
    return (y, Refused("batch norm statistics outputs"), Refused("batch norm statistics outputs"))


@_aten(
    "_native_batch_norm_legit_functional",
    "_native_batch_norm_legit",
    "native_batch_norm",
    ours="(training form) batchnorm_channel_first of the whole batch",
)
def _bn_train(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x, w, b, rm, rv, training = args[:6]
    eps = float(args[7])
    y = _batch_norm(c, _t(x), w, b, rm, rv, bool(training), eps)
    return (y, *(Refused("batch norm statistics outputs") for _ in range(4)))


@_aten(
    "layer_norm",
    "native_layer_norm",
    ours="layer_norm; native_layer_norm's statistics: reduce_mean, sub, mul, add, rsqrt",
    note="over the last len(shape) axes; the saved mean and 1 / sqrt(var + eps) (a joint "
    "graph's backward reads them) computed again from x",
)
def _ln(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x = _t(args[0])
    shape = list(args[1])
    w = _arg(args, kw, 2, "weight")
    b = _arg(args, kw, 3, "bias")
    eps = float(_arg(args, kw, 4, "eps", 1e-5))
    y = c.tr.layer_norm(
        x, len(shape), w if isinstance(w, T) else None, b if isinstance(b, T) else None, eps
    )
    if c.op == "native_layer_norm":
        axes = list(range(x.rank - len(shape), x.rank))
        mean = c.tr.reduce(x, axes, True, "mean")
        d = c.tr.binary("sub", x, mean)
        var = c.tr.reduce(c.tr.binary("mul", d, d), axes, True, "mean")
        rstd = c.tr.power(c.tr.binary("add", var, c.tr.const(np.asarray(eps))), -0.5)
        return (y, mean, rstd)
    return y


@_aten(
    "softmax",
    "_softmax",
    "_safe_softmax",
    "log_softmax",
    "_log_softmax",
    ours="softmax / log_softmax",
    note="_safe_softmax: ours, a row of -inf aside",
)
def _softmax(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    log = "log" in c.op
    return c.tr.softmax(_t(args[0]), int(args[1]), log=log)


@_aten(
    "dropout",
    "feature_dropout",
    "alpha_dropout",
    ours="(identity)",
    note="in eval mode or with p = 0",
)
def _dropout(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    p, train = float(_arg(args, kw, 1, "p", 0.5)), bool(_arg(args, kw, 2, "train", False))
    if train and p > 0:
        raise Refused(f"dropout in training mode with p = {p} draws torch's random numbers")
    return _t(args[0])


@_aten(
    "clone",
    "contiguous",
    "alias",
    "lift_fresh_copy",
    "_to_copy",
    "to",
    ours="(identity); an index input to float: nat_vec_to_float / nat_to_float; alias in a "
    "joint graph: detach",
    note="float to float; an integer input to bool (i != 0) or to float (its naturals, no "
    "gradient); other dtype changes refused",
)
def _identity(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = args[0]
    if c.joint and c.op == "alias":
        return _detach(c, args, kw)
    dt = _torch_dtype(args, kw)
    if dt is not None and isinstance(x, T) and x.index is None and not dt.is_floating_point:
        raise Refused(f"conversion of a float tensor to {dt}")
    return x


@_aten("detach", ours="detach")
def _detach(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    if x.known or x.index is not None:
        return x
    out = c.tr.unary("detach", x)
    c.undetached[id(out)] = c.undetached.get(id(x), x)
    c.keep.append(out)
    return out


# -- shapes -----------------------------------------------------------------------------------


@_aten("view", "reshape", "_unsafe_view", ours="reshape")
def _view(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    return c.tr.reshape_to(_t(args[0]), [int(d) for d in args[1]])


@_aten("flatten", ours="reshape")
def _flatten(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    return c.tr.flatten(
        x, int(_arg(args, kw, 1, "start_dim", 0)), int(_arg(args, kw, 2, "end_dim", -1))
    )


@_aten("unflatten", ours="reshape")
def _unflatten(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    dim = int(args[1]) % x.rank
    sizes = [int(s) for s in args[2]]
    if -1 in sizes:
        k = sizes.index(-1)
        sizes[k] = x.full[dim] // math.prod(s for s in sizes if s != -1)
    return c.tr.reshape_to(x, [*x.full[:dim], *sizes, *x.full[dim + 1 :]])


@_aten("permute", ours="transposes (adjacent swaps)")
def _permute(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    out = c.tr.permute(x, [int(p) for p in args[1]])
    if x.rank == 2 and not x.batched and list(args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0]):
        c.transposed[id(out)] = x
        c.keep.append(out)
    return out


@_aten("transpose", "t", "numpy_T", ours="transposes")
def _transpose(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    a, b = (int(args[1]), int(args[2])) if len(args) > 2 else (0, 1)
    if x.rank < 2:
        return x
    out = c.tr.transpose(x, a, b)
    if x.rank == 2 and not x.batched:
        c.transposed[id(out)] = x
        c.keep.append(out)
    return out


@_aten("unsqueeze", ours="reshape")
def _unsqueeze(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = args[0]
    if isinstance(x, T) and x.index is not None:
        a = int(args[1]) % (x.rank + 1)
        b = None if x.bdim is None else x.bdim + (1 if a <= x.bdim else 0)
        return T(x.full[:a] + (1,) + x.full[a:], b, x.inner, index=x.index)
    return c.tr.unsqueeze(_t(x), int(args[1]))


@_aten("squeeze", ours="reshape")
def _squeeze(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    dims = args[1] if len(args) > 1 else None
    if isinstance(dims, int):
        dims = [dims]
    if x.index is not None:
        ax = {d % x.rank for d in dims} if dims else {i for i, s in enumerate(x.full) if s == 1}
        ax = {a for a in ax if x.full[a] == 1 and a != x.bdim}
        b = None if x.bdim is None else x.bdim - sum(1 for a in ax if a < x.bdim)
        return T(tuple(s for i, s in enumerate(x.full) if i not in ax), b, x.inner, index=x.index)
    return c.tr.squeeze(x, dims)


@_aten("expand", "expand_as", "broadcast_to", ours="broadcast_to")
def _expand(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    shape = args[1].full if isinstance(args[1], T) else [int(d) for d in args[1]]
    return c.tr.expand(_t(args[0]), shape)


@_aten("select", ours="slice, reshape")
def _select(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    return c.tr.select(_t(args[0]), int(args[1]), int(args[2]))


@_aten("slice", ours="slice", note="step 1")
def _slice(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    dim = int(_arg(args, kw, 1, "dim", 0))
    start = _arg(args, kw, 2, "start", None)
    end = _arg(args, kw, 3, "end", None)
    step = int(_arg(args, kw, 4, "step", 1))
    n = x.full[dim]
    start = 0 if start is None else int(start)
    end = n if end is None else min(int(end), n)
    return c.tr.slice(x, dim, start, end, step)


@_aten("split", "split_with_sizes", "chunk", "unbind", ours="slice")
def _split(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x = _t(args[0])
    name = c.op
    if name == "unbind":
        dim = int(_arg(args, kw, 1, "dim", 0)) % x.rank
        return tuple(c.tr.select(x, dim, i) for i in range(x.full[dim]))
    dim = int(_arg(args, kw, 2, "dim", 0)) % x.rank
    n = x.full[dim]
    if name == "chunk":
        k = int(args[1])
        per = -(-n // k)
        sizes = [min(per, n - i * per) for i in range(-(-n // per))]
    elif isinstance(args[1], int):
        sizes = [min(args[1], n - i) for i in range(0, n, args[1])]
    else:
        sizes = [int(s) for s in args[1]]
    return tuple(c.tr.split(x, dim, sizes))


@_aten("cat", "concat", ours="concat (along dim 0, transposes around it)")
def _cat(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    xs = [_t(x) for x in args[0]]
    return c.tr.concat(xs, int(_arg(args, kw, 1, "dim", 0)))


@_aten("stack", ours="reshape, concat")
def _stack(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    dim = int(_arg(args, kw, 1, "dim", 0))
    xs = [_t(x) for x in args[0]]
    dim = dim % (xs[0].rank + 1)
    return c.tr.concat([c.tr.unsqueeze(x, dim) for x in xs], dim)


@_aten(
    "mean",
    "sum",
    ours="reduce_mean / reduce_sum / sum",
    note="of everything, the batch included: this sample's mean / sum, Imported.reductions",
)
def _reduce(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    dims = _arg(args, kw, 1, "dim", None)
    if isinstance(dims, int):
        dims = [dims]
    keep = bool(_arg(args, kw, 2, "keepdim", False))
    kind = "mean" if c.op == "mean" else "sum"
    every = not dims or {d % max(x.rank, 1) for d in dims} == set(range(x.rank))
    if x.bdim is not None and every and not keep:
        return _batch_reduced(c, x, kind)
    return c.tr.reduce(x, list(dims) if dims else None, keep, kind)


def _batch_reduced(c: _Ctx, x: T, kind: str) -> T:
    """A reduction of every element, the batch included (a loss's ``.mean()``): this sample's
    mean (or sum) of its elements, marked for the compiler's ``batched(grads=kind)``. Every
    sample has as many elements, so the mean over the batch of the samples' means is the mean
    of all of them."""
    per = c.tr.var(x)
    one = T(per.shape, var=per)
    y = c.tr.reduce(one, None, False, kind)
    return T((), var=c.tr.var(y), reduced=kind)


# -- indexing, attention and losses -----------------------------------------------------------


@_aten(
    "embedding",
    ours="gather_rows_nat; slice / concat for indices known at import time",
    note="integer indices are index inputs (any view of one, plus a number: the table's rows "
    "moved); padding_idx: that row gets no gradient (detach)",
)
def _embedding(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    W, idx = _t(args[0]), args[1]
    if W.batched or W.rank != 2:
        raise Refused("embedding of a batched or non-matrix weight")
    pad = _arg(args, kw, 2, "padding_idx", -1)
    if pad is not None and 0 <= int(pad) < W.full[0] and not W.known:
        W = _padding_row_detached(c, W, int(pad))
    if isinstance(idx, T) and idx.known:
        ids = np.asarray(idx.value)
        n = c.tr.n
        if n > 1 and ids.ndim and ids.shape[0] == n and bool(np.all(ids == ids[:1])):
            # the same indices for every sample (a uniform buffer gathered at the positions):
            # one sample's rows, broadcast to the batch they meet
            return c.tr.expand(_static_rows(c, W, ids[:1]), [*ids.shape, W.full[1]])
        return _static_rows(c, W, ids)
    var, lay = index_arg(c.tr, idx, "embedding indices", shifted=True)
    if not var.type.shape:
        raise Refused("embedding of one index per sample (use a sequence of indices)")
    if idx.imap.shift:  # W[i + k]: the rows of W from k on, at i
        W = shifted_rows(c.tr, W, idx.imap.shift)
    v = c.tr.b.gather_rows_nat(c.tr.var(W), var)
    return c.tr.make(v, idx.full + (W.full[1],), lay.bdim, lay.inner)


def _padding_row_detached(c: _Ctx, W: T, row: int) -> T:
    """``W`` with row ``row`` detached: ``F.embedding(padding_idx=row)`` sends it no gradient."""
    tr = c.tr
    n = W.full[0]
    parts = [tr.slice(W, 0, 0, row)] if row else []
    parts.append(tr.unary("detach", tr.slice(W, 0, row, row + 1)))
    if row + 1 < n:
        parts.append(tr.slice(W, 0, row + 1, n))
    return tr.concat(parts, 0) if len(parts) > 1 else parts[0]


def _static_rows(c: _Ctx, W: T, idx: np.ndarray) -> T:
    """Rows of ``W`` at indices known at import time (position ids): slices of runs of
    consecutive indices, concatenated."""
    flat = idx.astype(np.int64).reshape(-1)
    n = W.full[0]
    if flat.size == 0 or (flat < 0).any() or (flat >= n).any():
        raise Refused(f"embedding at indices outside 0..{n - 1} (or none)")
    runs: list[tuple[int, int]] = []
    for i in flat.tolist():
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    rows = c.tr.concat([c.tr.slice(W, 0, a, b) for a, b in runs], 0)
    return c.tr.reshape_to(rows, [*idx.shape, W.full[1]])


@_aten(
    "gather",
    ours="gather_scalar_nat / gather_vec_nat",
    note="along the last axis, at integer inputs (cross-entropy's pick); from a buffer of one "
    "value (RoBERTa's token types): that value",
)
def _gather(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, dim, idx = _t(args[0]), int(args[1]), args[2]
    if x.known and x.value is not None and isinstance(idx, T) and idx.imap is not None:
        table = np.asarray(x.value)
        if table.size and bool(np.all(table == table.reshape(-1)[0])):  # a uniform buffer
            return T(idx.full, value=np.full(idx.full, table.reshape(-1)[0]))
    var, lay = index_arg(c.tr, idx, "gather indices")
    v = c.tr.var(x)
    if len(v.shape) != 1 or dim % x.rank != x.rank - 1:
        raise Refused("gather: only along the last axis of one vector per sample")
    out = c.tr.b.gather_vec_nat(v, var) if var.type.shape else c.tr.b.gather_scalar_nat(v, var)
    return c.tr.make(out, idx.full, lay.bdim, lay.inner)


@_aten(
    "nll_loss",
    "nll_loss_forward",
    ours="gather_scalar_nat; gather_rows_nat, mul, reduce_sum for a target per row; scale",
    note="ignore_index < 0; 'mean' / 'sum' over the batch: the sample's part, Imported.reductions",
)
def _nll(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> Any:
    x, target = _t(args[0]), args[1]
    weight = _arg(args, kw, 2, "weight")
    reduction = int(_arg(args, kw, 3, "reduction", 1))
    ignore = int(_arg(args, kw, 4, "ignore_index", -100))
    y = log_probs_pick(c.tr, x, target, reduction, weight, ignore)
    if c.op == "nll_loss_forward":
        return (y, Refused("nll_loss total weight"))
    return y


@_aten(
    "cross_entropy_loss",
    ours="log_softmax, then as nll_loss",
    note="(N, C) or (N, C, d...) with (N, d...) targets; ignore_index < 0; no label smoothing",
)
def _ce(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, target = _t(args[0]), args[1]
    if float(_arg(args, kw, 5, "label_smoothing", 0.0)) != 0:
        raise Refused("cross-entropy with label smoothing")
    logp = c.tr.softmax(x, 1 if x.rank > 1 else 0, log=True)
    if x.rank > 2:  # (N, C, d...): classes along dim 1, as torch has them
        logp = c.tr.permute(logp, [0, *range(2, x.rank), 1])
    return log_probs_pick(
        c.tr,
        logp,
        target,
        int(_arg(args, kw, 3, "reduction", 1)),
        _arg(args, kw, 2, "weight"),
        int(_arg(args, kw, 4, "ignore_index", -100)),
    )


@_aten(
    "scaled_dot_product_attention",
    ours="matmul / bmm, softmax (mask: mul, reduce_sum, add, inv)",
    note="no dropout; boolean or causal masks: blocked entries weigh 0; a boolean mask of an "
    "index input (a padding mask): gather_vec_nat, min, sub",
)
def _sdpa(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    q, k, v = _t(args[0]), _t(args[1]), _t(args[2])
    mask = _arg(args, kw, 3, "attn_mask")
    if float(_arg(args, kw, 4, "dropout_p", 0.0)) != 0:
        raise Refused("attention with dropout_p > 0 draws torch's random numbers")
    causal = bool(_arg(args, kw, 5, "is_causal", False))
    scale = _arg(args, kw, 6, "scale")
    if _arg(args, kw, 7, "enable_gqa", False):
        raise Refused("attention with enable_gqa")
    d = q.full[-1]
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    s = c.tr.scale(c.tr.matmul(q, c.tr.transpose(k, -2, -1)), scale)
    allowed = None
    L, S = q.full[-2], k.full[-2]
    if causal:
        allowed = np.tril(np.ones((L, S), dtype=bool))
    runtime = None
    if isinstance(mask, T) and mask.imap is not None:
        if mask.imap.test is None:
            raise Refused("attention with an integer (not boolean) mask of an index input")
        runtime = as_float(c.tr, mask.imap, mask.imap.shape)
    elif isinstance(mask, T):
        if not mask.known:
            raise Refused("attention with a runtime float mask (only constant or index masks)")
        m = batch_free(c.tr, np.asarray(mask.value), q)
        if m.dtype == bool and m.all():
            pass  # nothing blocked (ViT's bidirectional mask, built under torch.export)
        elif m.dtype == bool:
            allowed = m if allowed is None else allowed & m
        elif np.all(np.isfinite(m)):
            s = c.tr.binary("add", s, mask)
        elif np.all((m == 0) | np.isneginf(m)):
            allowed = m == 0 if allowed is None else allowed & (m == 0)
        else:
            raise Refused("attention with a float mask mixing -inf and other values")
    p = c.tr.softmax(s, -1)
    if runtime is not None:
        w = runtime if allowed is None else c.tr.binary("mul", runtime, c.tr.const(allowed * 1.0))
        p = renormalised(c.tr, p, w)
    elif allowed is not None:
        allowed = np.broadcast_to(allowed, np.broadcast_shapes(allowed.shape, (L, S)))
        kept = c.tr.binary("mul", p, c.tr.const(allowed.astype(np.float64)))
        total = c.tr.reduce(kept, [-1], True, "sum")
        none = (~allowed.any(axis=-1)).astype(np.float64)[..., None]
        p = c.tr.binary("mul", kept, c.tr.unary("inv", c.tr.binary("add", total, c.tr.const(none))))
    return c.tr.matmul(p, v)


# -- booleans known at import time -----------------------------------------------------------


def _shape_of(c: _Ctx, x: T) -> list[int]:
    """x's shape with a (pure) batch axis of size 1: a known value broadcasts over the batch."""
    shape = list(x.full)
    if x.bdim is not None:
        shape[x.bdim] = 1 if x.full[x.bdim] == c.tr.n else shape[x.bdim]
    return shape


@_aten(
    "eq",
    "ne",
    ours="(folded)",
    note="only against ±inf: graph values are finite, so "
    "`x == inf` is false (how _safe_softmax decomposes)",
)
def _eq(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x, other = args[0], args[1]
    if (
        isinstance(x, T)
        and x.known
        and ((isinstance(other, T) and other.known) or _num(other) is not None)
    ):
        o = other.value if isinstance(other, T) else other
        fn = np.equal if c.op == "eq" else np.not_equal
        return c.tr.const(fn(x.value, o))
    v = _num(other)
    if not isinstance(x, T) or v is None or math.isfinite(v) or x.index is not None:
        raise Refused("comparisons of runtime values (only against ±inf, which is never equal)")
    return c.tr.const(np.full(_shape_of(c, x), c.op == "ne"))


@_aten("logical_not", "any", "all", ours="(folded)", note="of booleans known at import time")
def _logic(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    x = _t(args[0])
    if not x.known:
        raise Refused("boolean logic on runtime values")
    name = c.op
    if name == "logical_not":
        return c.tr.const(np.logical_not(x.value))
    dims = _arg(args, kw, 1, "dim", None)
    dims = (
        tuple(range(x.rank)) if dims is None else (dims,) if isinstance(dims, int) else tuple(dims)
    )
    fn = np.any if name == "any" else np.all
    return c.tr.const(fn(x.value, axis=dims, keepdims=bool(_arg(args, kw, 2, "keepdim", False))))


@_aten(
    "where",
    ours="(folded); a comparison's condition: mul, sub by its step",
    note="a condition known at import time and the same everywhere; or a runtime comparison "
    "(`aten.ge` ...): `s * p + (1 - s) * q` with its 0/1 step `s`, for p and q finite "
    "(a non-finite constant is refused)",
)
def _where(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    cond, a, b = _t(args[0]), _operand(c, args[1]), _operand(c, args[2])
    shape = tuple(np.broadcast_shapes(cond.full, a.full, b.full))
    if id(cond) in c.masks:
        return _select(c, *c.masks[id(cond)], a, b, shape)
    if not cond.known or not (np.all(cond.value) or not np.any(cond.value)):
        raise Refused("where with a runtime or mixed condition (no data-dependent selection)")
    pick = a if np.all(cond.value) else b
    return pick if pick.full == shape else c.tr.expand(pick, list(shape))


# -- comparisons of runtime floats: 0/1 steps --------------------------------------------------


def _is_zero(t: T) -> bool:
    return t.known and t.value is not None and not np.any(t.value)


def _select(c: _Ctx, s: T, negated: bool, a: T, b: T, shape: tuple[int, ...]) -> T:
    """``where(cond, a, b)`` for the condition ``s`` (a 0/1 step), or ``1 - s`` where
    ``negated``: ``s * on + (1 - s) * off``, a product with 0 or 1 and a sum with 0, exact in
    floats as in reals for finite values (``0 * inf`` would be NaN: non-finite constants are
    refused). A side that is the constant 0 drops out: ReLU's backward ``where(r <= 0, 0, g)``
    is ``s * g``."""
    for side in (a, b):
        if side.known and side.value is not None and not np.all(np.isfinite(side.value)):
            raise Refused(
                "where selecting a non-finite constant by a runtime comparison (it becomes "
                "s * p + (1 - s) * q with a 0/1 step s, and 0 * inf is NaN)"
            )
    on, off = (b, a) if negated else (a, b)
    terms = []
    if not _is_zero(on):
        terms.append(c.tr.binary("mul", s, on))
    if not _is_zero(off):
        rest = c.tr.binary("sub", c.tr.const(np.ones((), np.float64)), s)
        terms.append(c.tr.binary("mul", rest, off))
    if not terms:
        return c.tr.const(np.zeros(shape))
    out = terms[0] if len(terms) == 1 else c.tr.binary("add", terms[0], terms[1])
    return out if out.full == shape else c.tr.expand(out, list(shape))


def _mask_reader(node: Any, user: Any) -> bool:
    """Whether ``user`` reads the boolean ``node`` as a number: the condition (only) of
    ``aten.where``, a factor of a float ``aten.mul``, a conversion to a float dtype (or an
    assertion, which reads nothing)."""
    import torch

    name = _op_name(user.target)
    if name in _DROPPED:  # torch.export's assertions read nothing
        return True
    val = user.meta.get("val")
    floating = isinstance(val, torch.Tensor) and val.dtype.is_floating_point
    if name == "aten.where":
        return bool(user.args) and user.args[0] is node and node not in user.args[1:]
    if name == "aten.mul":
        return floating
    return name in ("aten._to_copy", "aten.to") and floating


@_aten(
    "ge",
    "gt",
    "le",
    "lt",
    ours="step, sub (a 0/1 mask: `gt(a, b)` = step(a - b), `le(a, b)` = 1 - step(a - b))",
    note="of runtime floats, read only as where's condition, a factor of a float mul, or "
    "converted to float; any other reader is refused",
)
def _compare(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    a, b = (c.undetached.get(id(x), x) for x in (_operand(c, args[0]), _operand(c, args[1])))
    node = c.node
    if node is None or not node.users or not all(_mask_reader(node, u) for u in node.users):
        raise Refused(f"ATen op aten.{c.op} is not supported: {RUNTIME_COMPARISON}")
    if a.index is not None or b.index is not None or a.imap is not None or b.imap is not None:
        raise Refused(f"aten.{c.op} of an index tensor with a runtime float")
    # gt: a > b  <=>  a - b > 0;  lt: b - a > 0;  le = not gt;  ge = not lt. In floats too:
    # a - b rounds to 0 only when a == b (subnormals), and keeps its sign
    lo, hi = (b, a) if c.op in ("gt", "le") else (a, b)
    if _is_zero(hi) and hi.value is not None and hi.value.size == 1 and lo.rank >= hi.rank:
        diff = c.tr.scale(lo, -1.0)  # 0 - x
    else:
        diff = c.tr.binary("sub", hi, lo)
    s = c.tr.unary("step", diff)
    negated = c.op in ("le", "ge")
    mask = c.tr.binary("sub", c.tr.const(np.ones((), np.float64)), s) if negated else s
    c.masks[id(mask)] = (s, negated)
    c.keep.append(mask)
    return mask


# -- constants --------------------------------------------------------------------------------


@_aten(
    "zeros_like",
    "ones_like",
    "full_like",
    "zeros",
    "ones",
    "full",
    "scalar_tensor",
    ours="const",
    note="a constant (the batch axis of a batched template is size 1)",
)
def _fill(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    name = c.op
    if name.endswith("_like"):
        x = _t(args[0])
        shape = list(x.full)
        if x.bdim is not None and x.full[x.bdim] == c.tr.n:
            shape[x.bdim] = 1
        elif x.bdim is not None:
            raise Refused(f"{name} of a tensor whose batch is merged with another axis")
        value = {"zeros_like": 0.0, "ones_like": 1.0}.get(
            name, _num(_arg(args, kw, 1, "fill_value"))
        )
    elif name == "scalar_tensor":
        shape, value = [], _num(args[0])
    else:
        shape = [int(d) for d in args[0]]
        value = {"zeros": 0.0, "ones": 1.0}.get(name, _num(_arg(args, kw, 1, "fill_value")))
    if value is None:
        raise Refused(f"{name} with a non-numeric fill")
    return c.tr.const(np.full(shape, value, dtype=np.float64))


@_aten(
    "empty",
    "empty_like",
    "empty_permuted",
    "empty_strided",
    "new_empty",
    ours="(shape only)",
    note="uninitialised memory: only ops that read the shape alone (full_like, zeros_like, "
    "ones_like) may use it; any other reader is refused",
)
def _empty(c: _Ctx, args: list[Any], kw: dict[str, Any]) -> T:
    name = c.op
    if name == "empty_like":
        shape = list(_t(args[0]).full)
    elif name == "new_empty":
        shape = [int(d) for d in args[1]]
    else:
        shape = [int(d) for d in args[0]]
    if name in ("empty_like", "new_empty") and _t(args[0]).bdim is not None:
        raise Refused(f"{name} of a batched tensor")
    return T(tuple(shape), value=np.zeros(shape), uninitialised=True)


#: Ops that read only the shape of their first argument: an uninitialised tensor may be it.
_SHAPE_READERS = frozenset({"aten.full_like", "aten.zeros_like", "aten.ones_like"})


# -- the driver -------------------------------------------------------------------------------

_TORCH_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _source_line(node: Any) -> str:
    """``file:line`` of the model code that made ``node`` (the innermost frame outside torch)."""
    trace = node.meta.get("stack_trace") or ""
    frames = _TORCH_FRAME.findall(trace)
    if not frames:
        return "no source line recorded"
    inside = os.sep + "torch" + os.sep
    mine = [f for f in frames if inside not in f[0]]
    path, line = (mine or frames)[-1]
    return f"{os.path.basename(path)}:{line}"


def _op_name(target: Any) -> str:
    try:
        return f"{target.namespace}.{target.overloadpacket.__name__}"
    except AttributeError:
        return getattr(target, "__name__", str(target))


def _hint(x: Any) -> Any:
    """A SymInt's example value (dynamic dims are specialised to the example's size)."""
    import torch

    if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
        node = x.node
        hint = getattr(node, "hint", None)
        if hint is None:
            from torch.fx.experimental.symbolic_shapes import hint_int

            return hint_int(x)
        return hint
    return x


def _shape(meta: Any) -> tuple[int, ...]:
    return tuple(int(_hint(d)) for d in meta.shape)


def from_torch(
    program: Any,
    *,
    batch_axis: int | None = 0,
    batched: Sequence[str] | None = None,
) -> Imported:
    """Import a ``torch.export.ExportedProgram`` as a per-sample graph and its parameters.

    Parameters and buffers become ``param`` leaves named after their state-dict names
    (``conv1.weight``; buffers such as batch-norm running statistics are frozen:
    ``requires_grad=False``; parameters keep their own ``requires_grad``); float user inputs
    become ``input`` leaves and integer ones index inputs (labels, token ids), named after the
    program's inputs. The user inputs named in ``batched`` (default: all) carry the batch on
    ``batch_axis`` (default 0); it becomes the compiler's batching (``Imported.batched``).
    ``batch_axis=None`` takes the example's whole batch as one sample. Dynamic dimensions are
    read at the example's size. Raises :class:`InteropError` with one line naming the ATen op,
    the node and the model's source line for anything that cannot be expressed; never a
    partial graph.
    """
    imported = _import(program, batch_axis, batched, Refusals("from_torch", collect=False))
    assert imported is not None  # a refusal raised
    return imported


def torch_report(
    program: Any, *, batch_axis: int | None = 0, batched: Sequence[str] | None = None
) -> tuple[tuple[Unsupported, ...], Imported | None]:
    """Every refusal of :func:`from_torch` on ``program`` (not only the first), and the import
    when there is none."""
    refusals = Refusals("from_torch", collect=True)
    imported = _import(program, batch_axis, batched, refusals)
    return tuple(refusals.records), imported


def _import(
    program: Any,
    batch_axis: int | None,
    batched: Sequence[str] | None,
    refusals: Refusals,
) -> Imported | None:
    where = "from_torch"
    try:
        import torch
    except ImportError:
        raise InteropError(
            f"{where}: needs PyTorch, an optional extra: pip install 'torchlean-ir[torch]'"
        ) from None
    if not isinstance(program, torch.export.ExportedProgram):
        raise InteropError(
            f"{where}: expected a torch.export.ExportedProgram, got {type(program).__name__}"
        )
    sig = program.graph_signature
    from torch.export.graph_signature import InputKind, OutputKind

    for spec in sig.output_specs:
        if spec.kind not in (OutputKind.USER_OUTPUT,):
            raise InteropError(
                f"{where}: the program updates {spec.target!r} ({spec.kind.name.lower()}): "
                "a training-mode side effect (export the model in eval mode)"
            )
    specs = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    state = dict(program.state_dict)
    consts = dict(program.constants)
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user = [n for n in placeholders if specs[n.name].kind == InputKind.USER_INPUT]
    want = set(batched) if batched is not None else {n.name for n in user}
    unknown = want - {n.name for n in user}
    if unknown:
        raise InteropError(f"{where}: batched: no user input named {sorted(unknown)[0]!r}")
    # dtype and batch size from the example values
    dtypes: set[np.dtype] = set()
    for n in placeholders:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype.is_floating_point:
            dtypes.add(np.dtype(str(val.dtype).removeprefix("torch.")))
    dtype = float_dtype(dtypes, where)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    n_batch = None
    if batch_axis is not None:
        for n in user:
            if n.name in want and isinstance(n.meta.get("val"), torch.Tensor):
                shp = _shape(n.meta["val"])
                if shp:
                    d = shp[batch_axis % len(shp)]
                    if n_batch is not None and d != n_batch:
                        raise InteropError(
                            f"{where}: inputs disagree on the batch size ({n_batch}, {d})"
                        )
                    n_batch = d
    n_batch = n_batch or 1
    b = GraphBuilder(dtype)
    tr = Tracer(b, n_batch)
    ctx = _Ctx(tr, batch_axis is not None)
    names = Names()
    env: dict[str, Any] = {}
    batched_names: list[str] = []
    for n in user:  # inputs first: they lead the leaves
        val = n.meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise InteropError(f"{where}: input {n.name!r} is not a tensor ({type(val).__name__})")
        full = _shape(val)
        name = names(n.name, "x")
        is_b = batch_axis is not None and n.name in want and bool(full)
        try:
            per, bdim = tr.batched_input(full, batch_axis) if is_b else (full, None)  # type: ignore[arg-type]
        except Refused as e:
            raise InteropError(f"{where}: input {n.name!r}: {e}") from None
        if val.dtype.is_floating_point:
            env[n.name] = T(full, bdim, 1, var=b.input(name, per))
        elif val.dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
            env[n.name] = _index_input(b, name, full, per, bdim)
        else:
            raise InteropError(f"{where}: input {n.name!r} of dtype {val.dtype}")
        if bdim is not None:
            batched_names.append(name)
    for n in placeholders:
        spec = specs[n.name]
        if spec.kind == InputKind.USER_INPUT:
            continue
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            value = state[spec.target] if spec.target in state else consts[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            value = consts[spec.target]
        else:
            raise InteropError(f"{where}: input {n.name!r} of kind {spec.kind.name}")
        arr = value.detach().cpu().numpy()
        if not np.issubdtype(arr.dtype, np.floating):
            env[n.name] = tr.const(arr)  # e.g. num_batches_tracked: used by nothing we map
            continue
        arr = arr.astype(np_dtype)
        if spec.kind == InputKind.CONSTANT_TENSOR or _derived_buffer(spec):
            env[n.name] = tr.const(arr)
        else:
            frozen = spec.kind == InputKind.BUFFER or not value.requires_grad
            env[n.name] = tr.param(names(spec.target, "p"), arr, frozen=frozen)
    targets = {k: str(getattr(v, "target", None) or k) for k, v in specs.items()}
    run = run_nodes(ctx, program.graph.nodes, env, targets, refusals)
    outs, reductions, outputs = run
    if refusals.records:
        return None
    graph = prune(b.build(outs))
    params = {k: v for k, v in tr.param_values.items() if k in tr._params}
    return Imported(
        graph,
        params,
        tuple(batched_names),
        n_batch,
        {k: v for k, v in names.source.items()},
        tuple(str(getattr(o, "name", o)) for o in outputs),
        tuple(reductions),
    )


def run_nodes(
    ctx: _Ctx,
    nodes: Any,
    env: dict[str, Any],
    targets: dict[str, str],
    refusals: Refusals,
) -> tuple[list[Any], list[str], list[Any]]:
    """Trace a program's op nodes (``nodes``: an FX graph's nodes, placeholders already in
    ``env`` by name) onto ``ctx``'s graph. ``targets``: placeholder name -> what it stands for
    (a parameter's name), for the messages. Returns the output values (graph values), their
    batch reductions and the FX output arguments; every refusal goes to ``refusals``."""
    where = refusals.where
    tr = ctx.tr
    outputs: list[Any] = []
    for node in nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outputs = list(node.args[0])
            break
        if node.op != "call_function":
            raise InteropError(f"{where}: node {node.name} ({node.op}) is not an op call")
        target = node.target
        name = _op_name(target)
        loc = _source_line(node)
        label = f"node {node.name} ({name}) at {loc}"
        first = node.args[0] if node.args else None
        if name.endswith("_") and getattr(first, "op", None) == "placeholder":
            what = targets.get(first.name, first.name)
            reason = f"updates {what!r} in place: a training-mode side effect"
            refusals.refuse(name, node.name, loc, label, reason, "export the model in eval mode")
            env[node.name] = Blocked(node.name)
            continue
        try:
            mutated = _inplace(node, name)
            env[node.name] = _call(ctx, target, name, node, env)
            if mutated is not None:  # later reads of the mutated tensor see the new value
                env[mutated] = env[node.name]
        except Blocked as e:
            refusals.blocked(name, node.name, loc, e.origin)
            env[node.name] = e
        except Refused as e:
            refusals.refused(name, node.name, loc, label, e)
            env[node.name] = Blocked(node.name)
        except TorchleanError as e:
            refusals.refuse(name, node.name, loc, label, one_line(e))
            env[node.name] = Blocked(node.name)
    outs = []
    reductions: list[str] = []
    for o in outputs:
        t = env.get(getattr(o, "name", None)) if o is not None else None
        if isinstance(t, Blocked):
            continue
        if isinstance(t, Refused):
            refusals.refused("output", str(o), "output", f"output {o}", t)
            continue
        if not isinstance(t, T):
            raise InteropError(f"{where}: output {o} is not a tensor we computed")
        try:
            if t.imap is not None:
                raise Refused("an index tensor (integers) as a model output")
            outs.append(tr.var(t))
            reductions.append(t.reduced or "")
        except Refused as e:
            refusals.refused("output", str(o), "output", f"output {o}", e)
    return outs, reductions, outputs


@functools.cache
def _decomposed() -> Any:
    import torch

    return torch.export.default_decompositions()


def _unmapped_hint(target: Any, name: str) -> str:
    """What would make an unmapped ATen op import: ``run_decompositions()`` where torch's
    default table rewrites it into other ATen ops, else nothing yet."""
    if name in ATEN_REFUSED:
        return ""
    try:
        decomposes = target in _decomposed()
    except Exception:  # an op torch's table cannot look up: no hint
        decomposes = False
    if decomposes:
        return "export with program.run_decompositions(), which rewrites it into core ATen ops"
    return "not supported yet (docs/interop.md lists the ATen ops that import)"


def _inplace(node: Any, name: str) -> str | None:
    """For an in-place op (``aten.add_``, ``relu_``, ``dropout_``: its first argument written, as
    ``out += identity`` in a residual block is recorded), the name of the node it mutates: the
    op imports as its out-of-place form and that node's later readers see the result. Refused
    where the write would reach a tensor read later through a view (the written tensor's base
    or another view of it), which a value-by-value import cannot follow. ``None`` for any
    other op."""
    schema = getattr(node.target, "_schema", None)
    if schema is None or not name.endswith("_") or not schema.is_mutable:
        return None
    import torch.fx

    written = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    first = node.args[0] if node.args else None
    if (
        len(written) != 1
        or written[0].name != schema.arguments[0].name
        or not isinstance(first, torch.fx.Node)
    ):
        raise Refused(f"in-place {name} that writes other than its first argument")

    def is_view(n: Any) -> bool:
        return isinstance(n, torch.fx.Node) and bool(getattr(n.target, "is_view", False))

    base = first
    while is_view(base) and isinstance(base.args[0], torch.fx.Node):
        base = base.args[0]
    family, todo = [], [base]  # the base and every view of it, transitively
    while todo:
        n = todo.pop()
        family.append(n)
        todo.extend(u for u in n.users if is_view(u))
    later, n = set(), node.next
    while n.op != "root":
        later.add(n)
        n = n.next
    for alias in family:
        if alias is not first and any(u in later for u in alias.users):
            raise Refused(
                f"in-place {name} of {first.name} writes through to {alias.name} (a view or "
                "the tensor it views), read later: export the model without the in-place op"
            )
    return str(first.name)


def _resolve(x: Any, env: dict[str, Any]) -> Any:
    import torch.fx

    if isinstance(x, torch.fx.Node):
        v = env.get(x.name)
        if isinstance(v, Refused):
            raise v
        if isinstance(v, Blocked):
            raise Blocked(v.origin)
        return v
    if isinstance(x, list | tuple):
        return type(x)(_resolve(a, env) for a in x)
    return _hint(x)


def _call(ctx: _Ctx, target: Any, name: str, node: Any, env: dict[str, Any]) -> Any:
    import operator

    special = (operator.getitem, operator.mul, operator.add, operator.sub, operator.floordiv)
    if name in _DROPPED:
        return None
    mapping = ATEN_IMPORTS.get(name)
    if mapping is None and name.endswith("_") and getattr(target, "_schema", None) is not None:
        mapping = ATEN_IMPORTS.get(name[:-1])  # an in-place op: its out-of-place form
        name = name[:-1] if mapping is not None else name
    unmapped = mapping is None and target not in special and name != "aten.sym_size"

    def refuse_unmapped() -> Refused:
        why = ATEN_REFUSED.get(name, "no mapping to our ops")
        return Refused(f"ATen op {name} is not supported: {why}", _unmapped_hint(target, name))

    try:
        args = [_resolve(a, env) for a in node.args]
        kw = {k: _resolve(v, env) for k, v in node.kwargs.items()}
    except Blocked:
        if unmapped:  # an unmapped op is counted as one, whatever its inputs
            raise refuse_unmapped() from None
        raise
    if target is operator.getitem:
        seq, i = args
        if not isinstance(seq, tuple | list):
            raise Refused("indexing a value that is not a tuple of results")
        return seq[i]  # a refused result (Refused) is refused where it is used
    if name == "aten.sym_size":
        return int(_hint(node.meta["val"]))
    if target in (operator.mul, operator.add, operator.sub, operator.floordiv):
        return target(*args)
    tensors = [a for a in _flat_args(args, kw) if isinstance(a, T)]
    if any(t.reduced for t in tensors):
        raise Refused(
            "a loss reduced over the batch is used by another op (only a model output may be "
            "reduced over the batch)",
            "reduce it last, or use reduction='none'",
        )
    ctx.op = name.removeprefix("aten.")
    if name not in _SHAPE_READERS and any(t.uninitialised for t in tensors):
        raise Refused(
            f"{name} reads an uninitialised tensor (aten.empty...): its values are undefined"
        )
    if name in _SIZE_ONLY and isinstance(args[0], T) and not args[0].known:
        args[0] = _placeholder(node.args[0], args[0])  # only its dtype is read
        tensors = [a for a in _flat_args(args, kw) if isinstance(a, T)]
    if any(t.imap is not None for t in tensors) and name not in _INDEX_USERS:
        return _index_op(ctx, target, args, kw)
    if all(t.known for t in tensors) and _foldable(target, name):
        _check_fold_size(name, target, args, kw)
        return _fold(ctx, target, name, args, kw)
    if unmapped:
        raise refuse_unmapped()
    assert mapping is not None
    ctx.node = node
    return mapping.fn(ctx, args, kw)


# -- values known at import time and index tensors ----------------------------------------------

#: Assertions torch.export records; they compute nothing (the graph's types are checked anyway).
_DROPPED = frozenset(
    {
        "aten._assert_tensor_metadata",
        "aten._assert_scalar",
        "aten._assert_async",
        "aten._functional_assert_async",
        "aten._functional_assert_scalar",
        "aten.sym_constrain_range",
        "aten.sym_constrain_range_for_size",
    }
)

#: Ops that take an index tensor as what it is (indices, targets, a mask): their converters
#: read its layout. Every other op with an index tensor argument goes through ``_index_op``.
_INDEX_USERS = frozenset(
    {
        "aten.embedding",
        "aten.gather",
        "aten.nll_loss",
        "aten.nll_loss_forward",
        "aten.cross_entropy_loss",
        "aten.scaled_dot_product_attention",
    }
)

#: Shape operations on an index tensor: PyTorch applies them to its positions and constants.
_INDEX_SHAPE_OPS = frozenset(
    {
        "view",
        "reshape",
        "_unsafe_view",
        "unsqueeze",
        "squeeze",
        "expand",
        "broadcast_to",
        "slice",
        "select",
        "permute",
        "transpose",
        "t",
        "contiguous",
        "clone",
        "alias",
        "lift_fresh_copy",
        "flatten",
        "unflatten",
        "index",
        "repeat",
        "split",
        "split_with_sizes",
        "chunk",
        "unbind",
        "narrow",
    }
)


#: Ops that read only the dtype of their tensor argument (and sizes given as arguments).
_SIZE_ONLY = frozenset({"aten.new_ones", "aten.new_zeros", "aten.new_full"})


def _placeholder(fx_arg: Any, t: T) -> T:
    """A known stand-in for a runtime tensor whose values an op does not read: zeros of its
    dtype (a scalar: the op reads the dtype, and the sizes it is given)."""
    import torch

    val = getattr(fx_arg, "meta", {}).get("val")
    dtype = val.dtype if isinstance(val, torch.Tensor) else torch.float32
    return T((), value=torch.zeros((), dtype=dtype).numpy())


def _flat_args(args: Sequence[Any], kw: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    todo: list[Any] = [*args, *kw.values()]
    while todo:
        a = todo.pop()
        if isinstance(a, list | tuple):
            todo.extend(a)
        else:
            out.append(a)
    return out


def _foldable(target: Any, name: str) -> bool:
    """A deterministic op without side effects: evaluating it at import time is exact."""
    import torch

    tags = getattr(target, "tags", ())
    op = name.removeprefix("aten.")
    return (
        name.startswith("aten.")
        and torch.Tag.nondeterministic_seeded not in tags
        and not (op.endswith("_") and not op.endswith("__"))  # in place (not __and__)
        and not op.startswith(("empty", "new_empty"))
        and name not in _DROPPED
        and name not in _NEVER_FOLDED
    )


#: The most elements an op evaluated at import time may produce (a hostile program's
#: ``arange(10**12)`` is refused before it runs, not after it has filled the memory).
FOLD_MAX_ELEMENTS = 1 << 26

#: Ops never evaluated at import time: they read outside the program.
_NEVER_FOLDED = frozenset({"aten.from_file"})


def _check_fold_size(name: str, target: Any, args: list[Any], kw: dict[str, Any]) -> None:
    """Refuse to evaluate an op whose results would hold more than :data:`FOLD_MAX_ELEMENTS`
    elements: their shapes are computed first on PyTorch's ``meta`` device, which allocates
    nothing (what a file records about the shapes is not trusted). An op whose result shape
    depends on its input values is bounded by those inputs, which are already known."""
    import torch

    def meta(a: Any) -> Any:
        if isinstance(a, T):
            return torch.empty(np.shape(a.value), dtype=_to_torch(a).dtype, device="meta")
        if isinstance(a, list | tuple):
            return type(a)(meta(x) for x in a)
        return a

    margs, mkw = meta(args), {k: meta(v) for k, v in kw.items()}
    schema = getattr(target, "_schema", None)
    if schema is not None and any(arg.name == "device" for arg in schema.arguments):
        mkw["device"] = torch.device("meta")
    try:
        out = target(*margs, **mkw)
    except Exception:  # a value-dependent shape (bounded by the known inputs), or an error
        return  # that the evaluation itself reports
    outs = out if isinstance(out, list | tuple) else [out]
    total = sum(int(o.numel()) for o in outs if isinstance(o, torch.Tensor))
    if total > FOLD_MAX_ELEMENTS:
        raise Refused(f"{name} would compute {total} elements at import time (at most "
                      f"{FOLD_MAX_ELEMENTS})")  # fmt: skip


def _to_torch(a: Any) -> Any:
    import torch

    if isinstance(a, T):
        assert a.value is not None
        return torch.from_numpy(np.array(a.value, copy=True))
    if isinstance(a, list | tuple):
        return type(a)(_to_torch(x) for x in a)
    return a


def _from_torch(c: _Ctx, out: Any) -> Any:
    import torch

    if isinstance(out, torch.Tensor):
        return c.tr.const(out.detach().cpu().numpy())
    if isinstance(out, list | tuple):
        return tuple(_from_torch(c, o) for o in out)
    return out


def _fold(c: _Ctx, target: Any, name: str, args: list[Any], kw: dict[str, Any]) -> Any:
    """The op evaluated by PyTorch on values known at import time (shapes, ``arange``, position
    ids, masks, rotary tables): the result is a constant of the graph."""
    import torch

    try:
        with torch.no_grad():
            out = target(*_to_torch(args), **{k: _to_torch(v) for k, v in kw.items()})
    except Exception as e:
        raise Refused(f"evaluating {name} on values known at import time failed: {e}") from None
    return _from_torch(c, out)


def _torch_dtype(args: Sequence[Any], kw: dict[str, Any]) -> Any:
    """The dtype a conversion (``to``, ``_to_copy``) asks for, or None."""
    import torch

    if isinstance(kw.get("dtype"), torch.dtype):
        return kw["dtype"]
    for a in args[1:]:
        if isinstance(a, torch.dtype):
            return a
    return None


def _index_op(c: _Ctx, target: Any, args: list[Any], kw: dict[str, Any]) -> Any:
    """An op on an index tensor (integers or booleans computed from an index input): shape
    operations, conversions, comparisons with a number, a logical and with a known mask, a
    constant pad. The positions and constants go through the op (PyTorch evaluates it)."""
    import torch

    op = c.op
    x = args[0]
    if not isinstance(x, T) or x.imap is None:
        other = next(a for a in _flat_args(args, kw) if isinstance(a, T) and a.imap is not None)
        if op in ("__and__", "bitwise_and", "logical_and", "mul") and isinstance(x, T) and x.known:
            return index_t(other.imap.masked(np.asarray(x.value)))
        if op == "add" and other is args[1] and _int_offset(x, kw) is not None:
            return index_t(other.imap.plus(_int_offset(x, kw)))
        raise _runtime_integers(op)
    imap: IndexMap = x.imap
    k = _int_offset(args[1], kw) if op in ("add", "sub") and len(args) > 1 else None
    if k is not None:  # position_ids + offset
        return index_t(imap.plus(k if op == "add" else -k))
    if op in ("to", "_to_copy", "type"):
        dt = _torch_dtype(args, kw)
        if dt is None or (not dt.is_floating_point and dt != torch.bool):
            return x
        if dt == torch.bool:
            return index_t(imap.compared("ne", 0))
        return as_float(c.tr, imap, imap.shape)
    if op in ("eq", "ne") and _num(args[1]) is not None and not isinstance(args[1], T):
        return index_t(imap.compared(op, args[1]))
    if op in ("__and__", "bitwise_and", "logical_and", "mul"):
        y = args[1]
        if isinstance(y, T) and y.known:
            return index_t(imap.masked(np.asarray(y.value)))
        raise Refused(f"aten.{op} of an index tensor with a runtime value")
    if op in ("pad", "constant_pad_nd"):
        pad = [int(p) for p in args[1]]
        mode = _arg(args, kw, 2, "mode", "constant") if op == "pad" else "constant"
        value = _arg(args, kw, 3 if op == "pad" else 2, "value", 0)
        if mode != "constant" or any(p < 0 for p in pad):
            raise Refused(f"padding an index tensor in mode {mode!r} or with negative sizes")
        fn = torch.nn.functional.pad
        pos = fn(torch.from_numpy(imap.pos), pad, value=-1)
        fill = fn(torch.from_numpy(np.asarray(imap.fill)), pad, value=value or 0)
        return index_t(imap.moved(pos.numpy(), fill.numpy()))
    if op in _INDEX_SHAPE_OPS:
        rest = _to_torch(args[1:])
        kwt = {k: _to_torch(v) for k, v in kw.items()}
        try:
            pos = target(torch.from_numpy(imap.pos), *rest, **kwt)
            fill = target(torch.from_numpy(np.array(imap.fill)), *rest, **kwt)
        except Exception as e:
            raise Refused(f"aten.{op} of an index tensor failed: {e}") from None
        if isinstance(pos, list | tuple):
            return tuple(
                index_t(imap.moved(p.numpy(), f.numpy())) for p, f in zip(pos, fill, strict=True)
            )
        return index_t(imap.moved(pos.numpy(), fill.numpy()))
    raise _runtime_integers(op)


def _int_offset(y: Any, kw: dict[str, Any]) -> Any:
    """The integer(s) ``y`` adds to an index tensor (``alpha`` applied), or None when ``y`` is
    not integers known at import time."""
    alpha = kw.get("alpha", 1)
    if _num(alpha) is None or not float(alpha).is_integer():
        return None
    if isinstance(y, T):
        if not y.known or y.value is None:
            return None
        v = np.asarray(y.value)
        if not np.issubdtype(v.dtype, np.integer):
            return None  # an index plus floats is float data
        return v.astype(np.int64) * int(alpha)
    if not isinstance(y, int) or isinstance(y, bool):
        return None
    return y * int(alpha)


def _runtime_integers(op: str) -> Refused:
    """The refusal of an op computing integers from an index input at run time."""
    return Refused(
        f"aten.{op} of an index tensor (integers of an input) computes integers at run time, "
        "which our graphs do not (only views, comparisons with a number, known masks and adding "
        "a number apply to integer inputs)",
        "compute these integers before the model and pass them as an input (position ids "
        "from a mask: the model's position_ids=...)",
    )


def _index_input(b: GraphBuilder, name: str, full: tuple[int, ...], per: Any, bdim: Any) -> T:
    """An integer input: a runtime index input (one sample's integers, a vector when they are
    more than one number: row-major for a per-sample matrix)."""
    per = tuple(per)
    var = b.index(name, math.prod(per) if per else None)
    return T(full, bdim, 1, index=var, imap=IndexMap.of_input(var, full, bdim))


def _derived_buffer(spec: Any) -> bool:
    """A buffer outside the state dict (``persistent=False``: rotary frequencies, position ids),
    which the model computes from its configuration: a constant, not a parameter."""
    from torch.export.graph_signature import InputKind

    return spec.kind == InputKind.BUFFER and spec.persistent is False


__all__ = ["ATEN_IMPORTS", "ATEN_REFUSED", "from_torch", "torch_report"]
