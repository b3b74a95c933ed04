"""ONNX models in: ``from_onnx(path or ModelProto)``.

Each ONNX op maps through :data:`ONNX_IMPORTS` onto the tracer (``_trace``), which builds the
per-sample graph. Models below opset 13 are first converted to opset 18 by ONNX's own version
converter, so the converters read opset-13-and-later semantics (``axes`` as inputs, single-axis
``Softmax``), whether an attribute or an input carries a value.
"""

from __future__ import annotations

import ast
import os
from collections import abc
from collections.abc import Callable, Sequence
from dataclasses import replace
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
    index_arg,
    index_t,
    log_probs_pick,
    renormalised,
    shifted_rows,
)
from ._trace import InteropError, Refused, T, Tracer, one_line

#: The opset models are read at (older ones are converted to it first).
IMPORT_OPSET = 18
#: Models with an older default-domain opset are converted to IMPORT_OPSET before import.
MIN_NATIVE_OPSET = 13

Converter = Callable[["_Ctx", Any, list[T | None]], list[T]]

#: ONNX op type -> how it is imported (filled in below by ``@_imports``).
ONNX_IMPORTS: dict[str, Mapping] = {}

#: ONNX op types refused on purpose, with the reason (``docs/interop.md`` lists them).
ONNX_REFUSED: dict[str, str] = {
    "ReduceMax": "no max-reduction op (max pooling covers windows)",
    "Equal": "comparisons produce booleans, which graphs do not hold",
    "RandomUniform": "ONNX random ops are implementation-defined, not our SplitMix64",
    "Loop": "graphs have no control flow",
    "If": "graphs have no control flow",
}


class _Ctx:
    """One import: the tracer and the current node's attributes."""

    def __init__(self, tracer: Tracer, opset: int, names: Names) -> None:
        self.tr = tracer
        self.opset = opset
        self.names = names
        self.attrs: dict[str, Any] = {}
        #: value name -> the op type of the node that computes it
        self.producer: dict[str, str] = {}
        #: value name -> the nodes that read it
        self.readers: dict[str, list[Any]] = {}

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def ints(self, t: T | None, what: str) -> list[int] | None:
        """An input that must be known at import time (shape, axes, pads), as ints."""
        if t is None:
            return None
        if not t.known or t.value is None:
            raise Refused(f"{what} must be known at import time (a constant)")
        return [int(v) for v in np.asarray(t.value).reshape(-1)]

    def scalar(self, t: T | None, what: str) -> float | None:
        if t is None:
            return None
        if not t.known or t.value is None or t.value.size != 1:
            raise Refused(f"{what} must be a constant scalar")
        return float(t.value.reshape(()))


def _imports(*names: str, ours: str, note: str = "") -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for n in names:
            ONNX_IMPORTS[n] = Mapping(fn, note, ours)
        return fn

    return deco


def _need(x: T | None, what: str) -> T:
    if x is None:
        raise Refused(f"missing input {what}")
    return x


# -- elementwise ------------------------------------------------------------------------------

_UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Log": "log",
    "Abs": "abs",
    "Sqrt": "sqrt",
    "Reciprocal": "inv",
    "Softplus": "softplus",
    "Erf": "erf",
}


@_imports(*_UNARY, ours="the op of the same name (Reciprocal: inv)")
def _unary(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.unary(_UNARY[node.op_type], _need(ins[0], "X"))]


@_imports("Neg", ours="scale", note="scale by -1")
def _neg(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.scale(_need(ins[0], "X"), -1.0)]


@_imports("Identity", "Dropout", ours="(none)", note="Dropout is the identity in inference")
def _identity(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    mode = ins[2] if node.op_type == "Dropout" and len(ins) > 2 else None
    if mode is not None and (not mode.known or bool(np.asarray(mode.value).reshape(()))):
        raise Refused("Dropout in training mode (training_mode must be a constant false)")
    x = _need(ins[0], "input")
    return [x] + ([] if len(node.output) < 2 else [c.tr.const(np.ones(x.full, dtype=bool))])


@_imports(
    "Gelu",
    ours="gelu; approximate='none': scale, erf, mul, add",
    note="exact: h + h erf(x / sqrt(2)) with h = x / 2",
)
def _gelu(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    approx = c.attr("approximate", "none")
    x = _need(ins[0], "X")
    if approx == "tanh":
        return [c.tr.unary("gelu", x)]
    if approx == "none":
        return [c.tr.gelu_exact(x)]
    raise Refused(f"Gelu approximate={approx!r} (only 'none' or 'tanh')")


@_imports("LeakyRelu", ours="max / min, scale", note="max(x, alpha x) (min for alpha > 1)")
def _leaky(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    alpha = float(c.attr("alpha", 0.01))
    return [c.tr.binary("max" if alpha <= 1 else "min", x, c.tr.scale(x, alpha))]


@_imports("PRelu", ours="max, min, mul", note="max(x, 0) + slope min(x, 0)")
def _prelu(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x, slope = _need(ins[0], "X"), _need(ins[1], "slope")
    if slope.rank == 1 and x.rank > 2 and slope.full[0] == x.full[1] != x.full[-1]:
        # opset-6 files broadcast a (C,) slope per channel
        slope = c.tr.reshape_to(slope, [slope.full[0]] + [1] * (x.rank - 2))
    zero = c.tr.const(np.zeros(()))
    pos = c.tr.binary("max", x, zero)
    return [c.tr.binary("add", pos, c.tr.binary("mul", slope, c.tr.binary("min", x, zero)))]


@_imports("Elu", "Selu", ours="relu, min, exp, scale", note="relu(x) + alpha (exp(min(x, 0)) - 1)")
def _elu(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    selu = node.op_type == "Selu"
    alpha = float(c.attr("alpha", 1.6732632423543772 if selu else 1.0))
    gamma = float(c.attr("gamma", 1.0507009873554805)) if selu else 1.0
    neg = c.tr.unary("exp", c.tr.binary("min", x, c.tr.const(np.zeros(()))))
    neg = c.tr.scale(c.tr.binary("sub", neg, c.tr.const(np.ones(()))), alpha)
    return [c.tr.scale(c.tr.binary("add", c.tr.unary("relu", x), neg), gamma)]


@_imports("Pad", ours="concat with constant blocks", note="mode 'constant' only")
def _pad(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    if c.attr("mode", "constant") != "constant":
        raise Refused(f"Pad mode {c.attr('mode')!r} (only 'constant')")
    pads = c.ints(ins[1], "Pad pads") or []
    value = c.scalar(ins[2], "Pad constant_value") if len(ins) > 2 and ins[2] is not None else 0.0
    axes = c.ints(ins[3], "Pad axes") if len(ins) > 3 and ins[3] is not None else None
    axes = [a % x.rank for a in axes] if axes else list(range(x.rank))
    k = len(axes)
    begin, end = [0] * x.rank, [0] * x.rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[k + i]
    return [c.tr.pad(x, begin, end, value or 0.0)]


@_imports("Clip", ours="clamp (max / min when one-sided)")
def _clip(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "input")
    lo = c.scalar(ins[1] if len(ins) > 1 else None, "Clip min")
    hi = c.scalar(ins[2] if len(ins) > 2 else None, "Clip max")
    if lo is not None and hi is not None:
        return [c.tr.unary("clamp", x, lo=lo, hi=hi)]
    if lo is not None:
        return [c.tr.unary("relu", x) if lo == 0 else c.tr.binary("max", x, c.tr.const(lo))]
    if hi is not None:
        return [c.tr.binary("min", x, c.tr.const(hi))]
    return [x]


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}


@_imports(
    *_BINARY,
    ours="add / sub / mul; Div: mul by inv",
    note="NumPy broadcasting; by a constant power of two: scale",
)
def _binary(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    a, b = _need(ins[0], "A"), _need(ins[1], "B")
    if a.logmask is not None or b.logmask is not None:
        if node.op_type != "Add":
            raise Refused(f"{node.op_type} of an attention mask of an index input")
        return [_masked_add(c, a, b)]
    return [c.tr.binary(_BINARY[node.op_type], _need(ins[0], "A"), _need(ins[1], "B"))]


@_imports(
    "Sum",
    "Max",
    "Min",
    "Mean",
    ours="add / max / min (chained); Mean: scale",
    note="Min(index, n - 1) clamps runtime indices for a gather",
)
def _variadic(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    op = {"Sum": "add", "Mean": "add", "Max": "max", "Min": "min"}[node.op_type]
    xs = [_need(x, "data") for x in ins]
    if any(x.index is not None for x in xs):
        bound = c.scalar(xs[1], "Min bound") if len(xs) == 2 else None
        x = _in_order(c.tr, xs[0])
        if node.op_type != "Min" or bound is None or x.index is None or x.clamp is not None:
            raise Refused(f"{node.op_type} of runtime indices (only Min(index, constant))")
        return [T(x.full, x.bdim, x.inner, index=x.index, clamp=int(bound))]
    acc = xs[0]
    for x in xs[1:]:
        acc = c.tr.binary(op, acc, x)
    if node.op_type == "Mean" and len(xs) > 1:
        acc = c.tr.scale(acc, 1.0 / len(xs))
    return [acc]


@_imports(
    "Pow",
    ours="pow (exponents 2: mul, 0.5: sqrt, -1: inv, -0.5: rsqrt)",
    note="a constant scalar exponent (an initializer included): any finite value",
)
def _pow(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    e = _need(ins[1], "Y")
    # an exponent held in an initializer is read as the constant it is, not made a parameter
    if e.value is None or e.value.size != 1 or e.index is not None:
        raise Refused("Pow exponent must be a constant scalar (a number or a scalar initializer)")
    if x.known and x.value is not None:
        return [c.tr.const(np.power(x.value, e.value.reshape(())))]
    return [c.tr.power(x, float(e.value.reshape(())))]


# -- linear algebra ---------------------------------------------------------------------------


@_imports("MatMul", ours="matmul / bmm / linear", note="NumPy matmul semantics")
def _matmul(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.matmul(_need(ins[0], "A"), _need(ins[1], "B"))]


@_imports("Gemm", ours="linear (matmul for a matrix per sample)", note="alpha, beta as scale")
def _gemm(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    A, B = _need(ins[0], "A"), _need(ins[1], "B")
    C = ins[2] if len(ins) > 2 else None
    if c.attr("transA", 0):
        A = c.tr.transpose(A, 0, 1)
    W = B if c.attr("transB", 0) else c.tr.transpose(B, 0, 1)
    alpha, beta = float(c.attr("alpha", 1.0)), float(c.attr("beta", 1.0))
    if C is not None and beta != 1.0:
        C = c.tr.scale(C, beta)
    if W.batched:
        y = c.tr.matmul(A, c.tr.transpose(W, 0, 1))
        y = c.tr.scale(y, alpha)
        return [y if C is None else c.tr.binary("add", y, C)]
    if alpha == 1.0 and (C is None or (not C.batched and int(np.prod(C.full)) == W.full[0])):
        return [c.tr.linear(A, W, C)]
    y = c.tr.scale(c.tr.linear(A, W, None), alpha)
    return [y if C is None else c.tr.binary("add", y, C)]


# -- convolution and pooling ------------------------------------------------------------------


def _spatial_attrs(c: _Ctx, d: int) -> tuple[list[int], list[int], list[int]]:
    if c.attr("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise Refused(f"auto_pad={c.attr('auto_pad')!r} (give explicit pads)")
    stride = list(c.attr("strides", [1] * d))
    pads = list(c.attr("pads", [0] * (2 * d)))
    return stride, pads[:d], pads[d:]


@_imports(
    "Conv",
    ours="conv2d / conv (group: groups)",
    note="no dilation; unequal pads: cropped, or the input padded",
)
def _conv(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x, W = _need(ins[0], "X"), _need(ins[1], "W")
    d = W.rank - 2
    stride, begin, end = _spatial_attrs(c, d)
    return [
        c.tr.conv(
            x,
            W,
            ins[2] if len(ins) > 2 else None,
            stride,
            begin,
            end,
            groups=int(c.attr("group", 1)),
            dilation=c.attr("dilations"),
        )
    ]


@_imports(
    "ConvTranspose",
    ours="conv_transpose2d / conv_transpose",
    note="group 1, no dilation; output_padding by cropping",
)
def _conv_transpose(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x, W = _need(ins[0], "X"), _need(ins[1], "W")
    d = W.rank - 2
    if int(c.attr("group", 1)) != 1:
        raise Refused("ConvTranspose with group != 1")
    if any(k != 1 for k in c.attr("dilations", [1] * d)):
        raise Refused("ConvTranspose with dilation")
    if c.attr("output_shape") is not None:
        raise Refused("ConvTranspose with output_shape (give pads)")
    stride, begin, end = _spatial_attrs(c, d)
    op = list(c.attr("output_padding", [0] * d))
    return [c.tr.conv_transpose(x, W, ins[2] if len(ins) > 2 else None, stride, begin, end, op)]


@_imports(
    "MaxPool",
    "AveragePool",
    ours="max_pool* / avg_pool*",
    note="no dilation; ceil_mode only where it changes nothing",
)
def _pool(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    if len(node.output) > 1 and node.output[1]:
        raise Refused("MaxPool with an Indices output")
    kernel = list(c.attr("kernel_shape"))
    stride, begin, end = _spatial_attrs(c, len(kernel))
    kind = "max" if node.op_type == "MaxPool" else "avg"
    return [
        c.tr.pool(
            x,
            kind,
            kernel,
            stride,
            begin,
            end,
            ceil_mode=bool(c.attr("ceil_mode", 0)),
            count_include_pad=bool(c.attr("count_include_pad", 0)),
            dilation=c.attr("dilations"),
        )
    ]


@_imports("GlobalAveragePool", ours="global_avg_pool2d (reduce_mean for 1-D / 3-D)")
def _gap(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.global_avg_pool(_need(ins[0], "X"), keepdims=True)]


@_imports("GlobalMaxPool", ours="max_pool (one window)")
def _gmp(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    k = list(x.full[2:])
    return [c.tr.pool(x, "max", k, [1] * len(k), [0] * len(k), [0] * len(k))]


# -- normalisation ----------------------------------------------------------------------------


@_imports("BatchNormalization", ours="batchnorm_eval", note="inference mode (given statistics)")
def _batchnorm(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    if c.attr("training_mode", 0):
        raise Refused(
            "BatchNormalization in training mode: batch statistics mix the samples of a batch"
        )
    x, g, b, m, v = (_need(ins[i], n) for i, n in enumerate(("X", "scale", "B", "mean", "var")))
    return [c.tr.batchnorm_eval(x, g, b, m, v, float(c.attr("epsilon", 1e-5)))]


@_imports(
    "InstanceNormalization",
    ours="batchnorm_channel_first",
    note="this sample's statistics per channel",
)
def _instancenorm(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x, g, b = (_need(ins[i], n) for i, n in enumerate(("input", "scale", "B")))
    return [c.tr.instance_norm(x, g, b, float(c.attr("epsilon", 1e-5)))]


@_imports(
    "LRN",
    ours="mul, avg_pool (over channels), scale, add, pow, mul",
    note="exact: x (bias + alpha avg of x^2 over the size channels around)^-beta",
)
def _lrn(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    size = c.attr("size")
    if size is None or int(size) < 1:
        raise Refused("LRN without a positive size")
    return [
        c.tr.local_response_norm(
            _need(ins[0], "X"),
            int(size),
            float(c.attr("alpha", 1e-4)),
            float(c.attr("beta", 0.75)),
            float(c.attr("bias", 1.0)),
        )
    ]


@_imports("LayerNormalization", ours="layer_norm", note="over the axes from `axis` on")
def _layernorm(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    if len(node.output) > 1 and any(node.output[1:]):
        raise Refused("LayerNormalization with Mean / InvStdDev outputs")
    x = _need(ins[0], "X")
    axis = int(c.attr("axis", -1)) % max(x.rank, 1)
    return [
        c.tr.layer_norm(
            x,
            x.rank - axis,
            ins[1] if len(ins) > 1 else None,
            ins[2] if len(ins) > 2 else None,
            float(c.attr("epsilon", 1e-5)),
        )
    ]


@_imports("Softmax", "LogSoftmax", ours="softmax / log_softmax", note="along one axis (opset 13+)")
def _softmax(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "input")
    axis = int(c.attr("axis", -1))
    if x.logmask is not None:
        if node.op_type != "Softmax" or axis % max(x.rank, 1) != x.rank - 1:
            raise Refused(f"{node.op_type} along axis {axis} of scores with an index mask")
        p = c.tr.softmax(replace(x, logmask=None), -1)
        return [renormalised(c.tr, p, x.logmask)]
    return [c.tr.softmax(x, axis, log=node.op_type == "LogSoftmax")]


# -- shapes -----------------------------------------------------------------------------------


@_imports("Reshape", ours="reshape", note="a constant target shape")
def _reshape(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    shape = c.ints(ins[1], "Reshape shape") or []
    if not c.attr("allowzero", 0):
        shape = [x.full[i] if s == 0 else s for i, s in enumerate(shape)]
    return [c.tr.reshape_to(x, shape)]


@_imports("Flatten", ours="reshape")
def _flatten(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "input")
    axis = int(c.attr("axis", 1)) % (x.rank + 1) if x.rank else 0
    lead = int(np.prod(x.full[:axis]))
    return [c.tr.reshape_to(x, [lead, int(np.prod(x.full[axis:]))])]


@_imports("Transpose", ours="transposes (adjacent swaps)")
def _transpose(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    perm = c.attr("perm", list(reversed(range(x.rank))))
    return [c.tr.permute(x, list(perm))]


def _index_view(x: T, full: tuple[int, ...]) -> T:
    """An index tensor with a new full shape and the same per-sample elements."""
    return T(full, x.bdim, x.inner, index=x.index, clamp=x.clamp, inrange=x.inrange)


@_imports("Squeeze", ours="reshape")
def _squeeze(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    axes = c.ints(ins[1], "Squeeze axes") if len(ins) > 1 else c.attr("axes")
    if x.index is not None:
        ax = {a % x.rank for a in axes} if axes else {i for i, d in enumerate(x.full) if d == 1}
        ax.discard(x.bdim)  # type: ignore[arg-type]
        return [_index_view(x, tuple(d for i, d in enumerate(x.full) if i not in ax))]
    return [c.tr.squeeze(x, axes)]


@_imports("Unsqueeze", ours="reshape")
def _unsqueeze(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    axes = c.ints(ins[1], "Unsqueeze axes") if len(ins) > 1 else list(c.attr("axes"))
    r = x.rank + len(axes or [])
    for a in sorted(int(a) % r for a in axes or []):
        if x.index is not None:
            b = None if x.bdim is None else x.bdim + (1 if a <= x.bdim else 0)
            x = T(
                x.full[:a] + (1,) + x.full[a:],
                b,
                x.inner,
                index=x.index,
                clamp=x.clamp,
                inrange=x.inrange,
            )
        else:
            x = c.tr.unsqueeze(x, a)
    return [x]


@_imports("Concat", ours="concat (along dim 0, transposes around it)")
def _concat(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.concat([_need(x, "inputs") for x in ins], int(c.attr("axis")))]


@_imports("Slice", ours="slice (along dim 0, transposes around it)", note="constant, step 1")
def _slice(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    starts = c.ints(ins[1], "Slice starts") or []
    ends = c.ints(ins[2], "Slice ends") or []
    axes = c.ints(ins[3], "Slice axes") if len(ins) > 3 and ins[3] is not None else None
    steps = c.ints(ins[4], "Slice steps") if len(ins) > 4 and ins[4] is not None else None
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        x = c.tr.slice(x, a, s, e, st)
    return [x]


@_imports("Split", ours="slice", note="constant split sizes")
def _split(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "input")
    axis = int(c.attr("axis", 0)) % x.rank
    sizes = c.ints(ins[1], "Split sizes") if len(ins) > 1 and ins[1] is not None else None
    if sizes is None:
        k = int(c.attr("num_outputs", len(node.output)))
        n = x.full[axis]
        per = -(-n // k)
        sizes = [min(per, n - i * per) for i in range(k)]
    return c.tr.split(x, axis, sizes)


@_imports(
    "Gather",
    ours="slice / concat; gather_rows_nat for runtime indices (embedding)",
    note="at an integer input plus a number k, the table's rows moved by k; a negative i + k "
    "reads from the end of the table, as ONNX's negative indices",
)
def _gather(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    data, idx = _need(ins[0], "data"), _need(ins[1], "indices")
    axis = int(c.attr("axis", 0)) % data.rank
    if idx.imap is not None and idx.imap.shift:  # data[i + k]: rows of data from k on, at i
        if axis != 0 or data.batched:
            raise Refused(
                f"Gather at an integer input plus {idx.imap.shift} (only rows of a table)"
            )
        data = shifted_rows(c.tr, data, idx.imap.shift, wrap=True)
        idx = index_t(replace(idx.imap, shift=0))
    if idx.index is not None:
        return [_gather_nat(c.tr, data, idx, axis)]
    values = np.asarray(idx.value)
    if not idx.known:
        raise Refused("Gather with float indices")
    if data.known and data.value is not None and data.param is None:
        return [c.tr.const(np.take(data.value, values, axis=axis))]
    n = c.tr.n
    if (
        axis == 0
        and n > 1
        and values.ndim
        and values.shape[0] == n
        and (values == values[:1]).all()
    ):
        # the same indices for every sample (a uniform buffer gathered at the positions): one
        # sample's rows, broadcast to the batch they meet
        one = _gather(c, node, [data, c.tr.const(values[:1])])[0]
        return [c.tr.expand(one, [*values.shape, *data.full[1:]])]
    flat = [int(v) % data.full[axis] for v in values.reshape(-1)]
    parts = [c.tr.slice(data, axis, i, i + 1) for i in flat]
    out = parts[0] if len(parts) == 1 else c.tr.concat(parts, axis)
    shape = data.full[:axis] + values.shape + data.full[axis + 1 :]
    return [c.tr.reshape_to(out, list(shape)) if out.full != shape else out]


def _gather_nat(tr: Tracer, data: T, idx: T, axis: int) -> T:
    """``data`` along ``axis`` at runtime indices (an index input): gather_scalar_nat /
    gather_vec_nat (a vector per sample) or gather_rows_nat (a matrix per sample, axis 0 of the
    sample). Indices clamped by ``Min(i, n - 1)`` are accepted: out of range, ours read 0."""
    idx = _in_order(tr, idx)
    assert idx.index is not None
    n = data.full[axis]
    if idx.clamp is not None and idx.clamp != n - 1:
        raise Refused(f"indices clamped to {idx.clamp} for a dim of size {n}")
    if idx.inrange is not None:
        raise Refused("gathering at a boolean")
    if data.batched and (data.bdim != 0 or axis != 1 or data.full[0] != tr.n):
        raise Refused("runtime indices into a batched tensor: only along its axis 1")
    if not data.batched and axis != 0:
        raise Refused("runtime indices into an unbatched tensor: only along its axis 0")
    x = tr.var(data)
    if len(x.shape) not in (1, 2):
        raise Refused(f"runtime indices into a tensor of per-sample rank {len(x.shape)}")
    k = idx.index.type.shape
    if len(x.shape) == 1:
        v = tr.b.gather_vec_nat(x, idx.index) if k else tr.b.gather_scalar_nat(x, idx.index)
    elif k:
        v = tr.b.gather_rows_nat(x, idx.index)
    else:
        raise Refused("a scalar runtime index into a matrix (use a vector of indices)")
    if data.batched:
        if idx.batched:
            full, bdim = (tr.n, *idx.full[1:], *data.full[2:]), 0
        else:
            full, bdim = (tr.n, *idx.full, *data.full[2:]), 0
    else:
        full = idx.full + data.full[1:]
        bdim = idx.bdim
    out = tr.make(v, full, bdim, idx.inner if bdim == idx.bdim and bdim is not None else 1)
    out.gathered = (idx.index, n)
    return out


@_imports(
    "GatherElements",
    ours="gather_scalar_nat / gather_vec_nat",
    note="batched data and indices along axis 1 (as exported); from a constant of one value "
    "(RoBERTa's token types): that value",
)
def _gather_elements(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    data, idx = _need(ins[0], "data"), _need(ins[1], "indices")
    axis = int(c.attr("axis", 0)) % data.rank
    if data.known and data.value is not None and idx.imap is not None:
        table = np.asarray(data.value)
        if table.size and bool(np.all(table == table.reshape(-1)[0])):  # a uniform buffer
            return [T(idx.full, value=np.full(idx.full, table.reshape(-1)[0]))]
    if idx.index is None or not (data.batched and idx.batched) or data.rank != 2 or axis != 1:
        raise Refused("GatherElements: only batched (N, n) data at batched runtime indices")
    return [_gather_nat(c.tr, data, idx, 1)]


@_imports("GatherND", ours="gather_rows_nat", note="batch_dims=1, one index per row (as exported)")
def _gather_nd(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    data, idx = _need(ins[0], "data"), _need(ins[1], "indices")
    if (
        int(c.attr("batch_dims", 0)) != 1
        or idx.index is None
        or data.rank != 3
        or idx.full[-1:] != (1,)
    ):
        raise Refused("GatherND: only batch_dims=1 with indices (N, k, 1) into (N, n, d)")
    rows = T(idx.full[:-1], idx.bdim, idx.inner, index=idx.index, clamp=idx.clamp)
    return [_gather_nat(c.tr, data, rows, 1)]


@_imports("Less", ours="(absorbed)", note="`index < n` guarding a gather: ours read 0 beyond n")
def _less(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    a, b = _need(ins[0], "A"), _need(ins[1], "B")
    if a.known and b.known:
        return [c.tr.const(np.less(a.value, b.value))]
    bound = c.scalar(b, "Less bound")
    a = _in_order(c.tr, a)
    if a.index is None or bound is None or a.clamp is not None:
        raise Refused("Less: only `runtime index < constant` (the guard of a gather)")
    return [T(a.full, a.bdim, a.inner, index=a.index, inrange=int(bound))]


@_imports(
    "Greater",
    ours="step, sub",
    note="of runtime floats, read only by a Cast to float: the 0/1 step of `A - B` (how `step` "
    "exports)",
)
def _greater(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    from onnx import helper

    a, b = _need(ins[0], "A"), _need(ins[1], "B")
    if a.known and b.known:
        return [c.tr.const(np.greater(a.value, b.value))]

    def to_float(nd: Any) -> bool:
        to = next((int(at.i) for at in nd.attribute if at.name == "to"), None)
        dt = None if to is None else np.dtype(helper.tensor_dtype_to_np_dtype(to))
        return nd.op_type == "Cast" and dt is not None and np.issubdtype(dt, np.floating)

    readers = c.readers.get(node.output[0], [])
    if a.index is not None or b.index is not None or not readers or not all(map(to_float, readers)):
        raise Refused("Greater: only of runtime floats, read by a Cast to float (a 0/1 step)")
    return [c.tr.unary("step", c.tr.binary("sub", a, b))]


@_imports(
    "IsNaN",
    ours="(folded)",
    note="of constants; of a softmax's output: false (the exporter's guard for a row of -inf; "
    "ours never gives NaN)",
)
def _isnan(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "X")
    if x.known and x.value is not None:
        return [c.tr.const(np.isnan(x.value))]
    if c.producer.get(node.input[0]) in ("Softmax", "LogSoftmax") and x.index is None:
        shape = list(x.full)
        if x.bdim is not None:
            shape[x.bdim] = 1 if x.full[x.bdim] == c.tr.n else shape[x.bdim]
        return [c.tr.const(np.zeros(shape, dtype=bool))]
    raise Refused(
        "IsNaN of runtime values (graph values are finite, so the check is dropped only after "
        "a softmax): export the model without the NaN check"
    )


@_imports(
    "Where",
    ours="(folded) / mul, add; (absorbed)",
    note="a condition known at import time (a constant mask: c x + (1 - c) y); "
    "`where(index < n, gather(x, index), 0)`",
)
def _where(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    cond, y, z = (_need(ins[i], n) for i, n in enumerate(("condition", "X", "Y")))
    if cond.known and cond.value is not None:
        return [_known_where(c, np.asarray(cond.value, dtype=bool), y, z)]
    if cond.imap is not None:
        return [_index_where(c, cond, y, z)]
    zero = c.tr._float_value(z)
    if (
        cond.index is None
        or cond.inrange is None
        or zero != 0.0
        or y.gathered is None
        or y.gathered[0] is not cond.index
        or y.gathered[1] != cond.inrange
    ):
        raise Refused(
            "Where: only `where(index < n, gather(x, index), 0)` (no data-dependent selection)"
        )
    return [y]


def _known_where(c: _Ctx, cond: np.ndarray, y: T, z: T) -> T:
    """``where`` of a condition known at import time: one branch where it is uniform, else the
    exact blend ``cond * y + (1 - cond) * z`` (0 and 1 weights)."""
    shape = list(np.broadcast_shapes(cond.shape, y.full, z.full))
    if cond.all() or not cond.any():
        pick = y if cond.all() else z
        return pick if list(pick.full) == shape else c.tr.expand(pick, shape)
    m = c.tr.const(cond.astype(np.float64))
    keep = c.tr.binary("mul", y, m)
    return c.tr.binary("add", keep, c.tr.binary("mul", z, c.tr.const(1.0 - cond)))


#: A fill at or below this blocks an attention key (PyTorch fills with the float's minimum).
_BLOCKED = -float(np.finfo(np.float32).max) / 2


def _index_where(c: _Ctx, cond: T, y: T, z: T) -> T:
    """``where`` of a boolean of an index input (a padding mask) between known values:
    ``where(mask, 0, -inf)`` (or the float's minimum) is an additive attention mask, which the
    softmax reading it applies as renormalised weights (:data:`T.logmask`); between finite
    values it is the exact blend ``z + (y - z) w`` of the 0 / 1 floats ``w`` of the mask."""
    if not (y.known and z.known) or y.value is None or z.value is None:
        raise Refused("Where of a boolean of an index input between runtime values")
    if cond.imap.test is None:
        raise Refused("Where on the integers of an index input (compare them first)")
    w = as_float(c.tr, cond.imap, cond.imap.shape)
    yv, zv = np.asarray(y.value, np.float64), np.asarray(z.value, np.float64)
    shape = tuple(np.broadcast_shapes(cond.full, y.full, z.full))
    if shape != w.full:
        w = c.tr.expand(w, list(shape))
    if bool(np.all(yv == 0)) and bool(np.all(zv <= _BLOCKED)):
        return T(w.full, w.bdim, w.inner, logmask=w)
    if not (np.isfinite(yv).all() and np.isfinite(zv).all()):
        raise Refused("Where of a boolean of an index input between infinite values")
    diff = c.tr.binary("mul", w, c.tr.const(yv - zv))
    return c.tr.binary("add", diff, c.tr.const(zv))


def _masked_add(c: _Ctx, a: T, b: T) -> T:
    """``a + b`` where either carries an additive mask of an index input: the sum of the
    values, and the product of the masks' weights, left for the softmax."""
    ma, mb = a.logmask, b.logmask
    va = None if a.var is None and a.value is None and a.index is None else replace(a, logmask=None)
    vb = None if b.var is None and b.value is None and b.index is None else replace(b, logmask=None)
    if va is None and vb is None:
        raise Refused("Add of two attention masks without scores")
    if va is None or vb is None:
        out = va if va is not None else vb
        assert out is not None
    else:
        out = c.tr.binary("add", va, vb)
    masks = [m for m in (ma, mb) if m is not None]
    w = masks[0] if len(masks) == 1 else c.tr.binary("mul", masks[0], masks[1])
    shape = list(np.broadcast_shapes(out.full, w.full))
    if list(out.full) != shape:
        out = c.tr.expand(out, shape)
    return replace(out, logmask=w)


@_imports("Expand", ours="broadcast_to", note="a constant shape")
def _expand(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    return [c.tr.expand(_need(ins[0], "input"), c.ints(ins[1], "Expand shape") or [])]


@_imports("Shape", "Size", ours="(folded)", note="known at import time")
def _shape(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    if node.op_type == "Size":
        return [c.tr.const(np.asarray(int(np.prod(x.full)), dtype=np.int64))]
    start, end = c.attr("start", 0), c.attr("end", None)
    return [c.tr.const(np.asarray(x.full[start:end], dtype=np.int64))]


@_imports("Constant", ours="const")
def _constant(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    from onnx import numpy_helper

    if "value" in c.attrs:
        return [c.tr.const(numpy_helper.to_array(c.attrs["value"]))]
    for key, dt in (
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in c.attrs:
            return [c.tr.const(np.asarray(c.attrs[key], dtype=dt))]
    raise Refused("Constant without a tensor, float or int value")


@_imports(
    "ConstantOfShape",
    ours="param leaf (float) / folded (int)",
    note="a float fill makes a parameter: weights stripped to a filler (the `light` models)",
)
def _constant_of_shape(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    from onnx import numpy_helper

    shape = c.ints(ins[0], "ConstantOfShape shape") or []
    fill = c.attrs.get("value")
    value = numpy_helper.to_array(fill).reshape(()) if fill is not None else np.float32(0)
    arr = np.full(shape, value)
    if np.issubdtype(arr.dtype, np.floating):
        return [c.tr.param(c.names(node.output[0], "p"), arr)]
    return [c.tr.const(arr)]


@_imports(
    "Cast",
    ours="(folded / identity); an index input to float: nat_vec_to_float / nat_to_float, a "
    "boolean of one: gather_vec_nat",
    note="ints at import time; float to float; an index input to bool (i != 0), and to float "
    "(its naturals, or a boolean's 0 / 1; no gradient)",
)
def _cast(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    from onnx import helper

    x = _need(ins[0], "input")
    to = np.dtype(helper.tensor_dtype_to_np_dtype(int(c.attr("to"))))
    if x.imap is not None:
        if to == np.bool_:
            return [x if x.imap.test is not None else index_t(x.imap.compared("ne", 0))]
        if np.issubdtype(to, np.integer):
            return [x]
        if np.issubdtype(to, np.floating):
            return [as_float(c.tr, x.imap, x.imap.shape)]
    if x.index is not None and np.issubdtype(to, np.integer):
        return [x]
    if x.known and x.value is not None:
        return [c.tr.const(x.value.astype(to))]
    if np.issubdtype(to, np.floating) and x.index is None:
        return [x]
    raise Refused(f"Cast of a runtime tensor to {to}")


@_imports(
    "And",
    ours="(folded); (absorbed) into a boolean of an index input",
    note="booleans known at import time, or a boolean of an index input and known booleans "
    "(a padding mask and a causal one)",
)
def _and(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    a, b = _need(ins[0], "A"), _need(ins[1], "B")
    if a.known and b.known:
        return [c.tr.const(np.logical_and(a.value, b.value))]
    for x, y in ((a, b), (b, a)):
        if x.imap is not None and y.known and y.value is not None:
            return [index_t(x.imap.masked(np.asarray(y.value)))]
    raise Refused("And of runtime booleans (only of a boolean of an index input and constants)")


_LOSS_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


@_imports(
    "SoftmaxCrossEntropyLoss",
    ours="log_softmax; gather_scalar_nat, or gather_rows_nat, mul, reduce_sum; scale",
    note="as cross-entropy in the PyTorch importer: (N, C) or (N, C, d...) scores, targets an "
    "index input (any view or pad of one); ignore_index < 0; 'mean' / 'sum' over the batch: "
    "the sample's part (Imported.reductions)",
)
def _softmax_ce(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x, target = _need(ins[0], "scores"), _need(ins[1], "labels")
    weight = ins[2] if len(ins) > 2 else None
    if len(node.output) > 1 and node.output[1]:
        raise Refused("SoftmaxCrossEntropyLoss with its log_prob output")
    reduction = c.attr("reduction", "mean")
    if reduction not in _LOSS_REDUCTIONS:
        raise Refused(f"SoftmaxCrossEntropyLoss reduction={reduction!r}")
    # without ignore_index every target counts: a negative one no natural equals says as much
    ignore = c.attr("ignore_index")
    logp = c.tr.softmax(x, 1 if x.rank > 1 else 0, log=True)
    if x.rank > 2:  # (N, C, d...): classes along dim 1
        logp = c.tr.permute(logp, [0, *range(2, x.rank), 1])
    loss = log_probs_pick(
        c.tr, logp, target, _LOSS_REDUCTIONS[reduction], weight, -1 if ignore is None else ignore
    )
    return [loss]


@_imports("ReduceSum", "ReduceMean", ours="reduce_sum / reduce_mean / sum")
def _reduce(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    x = _need(ins[0], "data")
    axes = c.ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else c.attr("axes")
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return [x]
        axes = None
    kind = "sum" if node.op_type == "ReduceSum" else "mean"
    return [c.tr.reduce(x, axes, bool(c.attr("keepdims", 1)), kind)]


# -- index tensors: shape operations on positions --------------------------------------------

#: Ops that move the elements of their first input (data) by other inputs known at import time:
#: on an index tensor they are evaluated, by ONNX's reference implementation, on the positions
#: and the constants of its :class:`~torchlean_ir.interop._indexmap.IndexMap`, so any view, pad,
#: slice or constant gather of an index input stays an index tensor.
_INDEX_SHAPE_OPS = frozenset(
    {
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Transpose",
        "Expand",
        "Slice",
        "Pad",
        "Gather",
        "GatherND",
        "GatherElements",
        "Identity",
        "Split",
        "Tile",
    }
)


def _on_index(node: Any, ins: list[T | None]) -> bool:
    """Whether ``node`` is a shape operation of an index tensor (its data) by known values."""
    if node.op_type not in _INDEX_SHAPE_OPS or not ins or ins[0] is None or ins[0].imap is None:
        return False
    return all(x is None or (x.known and x.value is not None) for x in ins[1:])


def _index_shape_op(c: _Ctx, node: Any, ins: list[T | None]) -> list[T]:
    """A shape operation of an index tensor: the same node run on the positions (-1 where a pad
    puts a constant) and on the constants."""
    x = ins[0]
    assert x is not None and x.imap is not None
    imap: IndexMap = x.imap
    rest = [None if t is None else np.asarray(t.value) for t in ins[1:]]
    if node.op_type == "Pad" and len(rest) > 1 and rest[1] is not None:
        if c.attr("mode", "constant") != "constant":
            raise Refused(f"padding an index tensor in mode {c.attr('mode')!r}")
        pos_rest = [rest[0], np.asarray(-1, np.int64), *rest[2:]]
    elif node.op_type == "Pad":
        pos_rest = [rest[0] if rest else None, np.asarray(-1, np.int64), *rest[2:]]
        rest = [rest[0] if rest else None, np.asarray(0, imap.fill.dtype), *rest[2:]]
    else:
        pos_rest = rest
    pos = _run_node(node, [imap.pos, *pos_rest], c.opset)
    fill = _run_node(node, [np.asarray(imap.fill), *rest], c.opset)
    return [index_t(imap.moved(p, f)) for p, f in zip(pos, fill, strict=True)]


#: Integer arithmetic on an index tensor that stays one: adding or subtracting a number (a
#: position offset), comparing with a number, negating such a comparison.
_INDEX_ARITH = frozenset({"Add", "Sub", "Equal", "Not"})


def _index_arith(node: Any, ins: list[T | None]) -> list[T]:
    """``i + k``, ``i - k`` (an integer ``k`` known at import time: the same for every element),
    ``i == k`` and ``Not`` of a boolean of an index input; anything else computes integers at
    run time and is refused."""
    op = node.op_type
    a = ins[0]
    b = ins[1] if len(ins) > 1 else None
    if op == "Not" and a is not None and a.imap is not None and a.imap.test is not None:
        return [index_t(a.imap.compared("eq", 0))]
    if op in ("Add", "Equal") and (a is None or a.imap is None):
        a, b = b, a  # the number first: commutative
    if a is not None and a.imap is not None and b is not None and b.known and b.imap is None:
        k = np.asarray(b.value)
        if np.issubdtype(k.dtype, np.integer) and op in ("Add", "Sub"):
            return [index_t(a.imap.plus(k if op == "Add" else -k))]
        if op == "Equal" and k.size and bool(np.all(k == k.reshape(-1)[0])):
            return [index_t(a.imap.compared("eq", k.reshape(-1)[0].item()))]
    raise _runtime_integers(op)


def _runtime_integers(op: str) -> Refused:
    """The refusal of an op computing integers from an index input at run time."""
    return Refused(
        f"{op} of an index tensor (integers of an input) computes integers at run time, which "
        "our graphs do not (only views, comparisons with a number, known masks and adding a "
        "number apply to integer inputs)",
        "compute these integers before the model and pass them as an input (position ids "
        "from a mask: the model's position_ids=...)",
    )


def _run_node(node: Any, values: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    """One node evaluated by ``onnx.reference`` on values (None: an absent optional input)."""
    from onnx import TypeProto, helper
    from onnx.reference import ReferenceEvaluator

    names = ["" if v is None else f"in{k}" for k, v in enumerate(values)]
    outs = [f"out{k}" for k in range(len(node.output))]
    nd = helper.make_node(node.op_type, names, outs)
    nd.attribute.extend(node.attribute)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for n, v in zip(names, values, strict=True)
        if v is not None
    ]
    graph = helper.make_graph(
        [nd], "index", inputs, [helper.make_value_info(o, TypeProto()) for o in outs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 13))])
    try:
        got = ReferenceEvaluator(model).run(
            None, {n: v for n, v in zip(names, values, strict=True) if v is not None}
        )
    except Exception as e:
        raise Refused(f"{node.op_type} of an index tensor failed: {one_line(e)}") from None
    return [np.asarray(a) for a in got]


def _check_reads(node: Any, ins: list[T | None]) -> None:
    """Refuse a node that reads a loss reduced over the batch, or an attention mask of an index
    input anywhere but in an addition and the softmax after it."""
    for x in ins:
        if x is None:
            continue
        if x.reduced:
            raise Refused(
                "a loss reduced over the batch is used by another op (only a model output may "
                "be reduced over the batch)",
                "reduce it last, or use reduction='none'",
            )
        if x.logmask is not None and node.op_type not in ("Add", "Softmax"):
            raise Refused(
                f"an attention mask of an index input read by {node.op_type} (only added to "
                "scores, then read by a softmax)"
            )


def _in_order(tr: Tracer, t: T) -> T:
    """An index tensor as one sample's index input in order (a view of the input), with the
    batch where its layout says; refused for anything else."""
    if t.imap is None:
        return t
    if t.imap.test is not None:
        raise Refused("a boolean of an index input used as indices")
    var, lay = index_arg(tr, t, "runtime indices")
    return T(t.full, lay.bdim, lay.inner, index=var, clamp=t.clamp, inrange=t.inrange)


# -- the driver -------------------------------------------------------------------------------


def _need_onnx(where: str) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise InteropError(
            f"{where}: needs the onnx package, an optional extra: pip install 'torchlean-ir[onnx]'"
        ) from None


def _load(model: Any) -> Any:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes | bytearray):
        try:
            return onnx.load_from_string(bytes(model))
        except Exception as e:  # protobuf's DecodeError and friends
            raise InteropError(f"from_onnx: not an ONNX model: {type(e).__name__}: {e}") from None
    from ._files import load_onnx  # a regular file of bounded size, read without a warning

    return load_onnx(os.fspath(model))


def _default_opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def _tensor_type(vi: Any) -> tuple[np.dtype, list[int]]:
    from onnx import helper

    tt = vi.type.tensor_type
    dt = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    dims = [int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim]
    return dt, dims


def from_onnx(
    model: Any,
    *,
    batch_axis: int | None = 0,
    batched: Sequence[str] | None = None,
    batch_size: int | None = None,
    constants: Sequence[str] = (),
    tied: abc.Mapping[str, str] | Sequence[str] = (),
) -> Imported:
    """Import an ONNX model (a path, bytes or ``onnx.ModelProto``) as a per-sample graph.

    ``batch_axis`` is the batch axis of the model's inputs (0, the ONNX convention); it becomes
    the compiler's batching (``Imported.batched``). ``None`` imports the model as it stands,
    every dimension part of the graph. ``batched`` names the inputs (ONNX names) that carry
    the batch; by default, the inputs whose dimension ``batch_axis`` is symbolic if any input
    has a symbolic one (as :func:`to_onnx` writes them), else every input. A symbolic dimension
    reads as ``batch_size`` (default 1). Float initializers become ``param`` leaves
    (statistics that only feed
    ``BatchNormalization`` are frozen: ``requires_grad=False``); float inputs become ``input``
    leaves, integer inputs index inputs (labels, token ids). ``constants`` names float
    initializers to import as constants instead (see :func:`constant_initializers`): an
    initializer by its name, or every initializer the exporter folded from a named source (a
    buffer the file no longer declares, such as LLaMA's rotary ``inv_freq``). ``tied`` maps
    a name to a float initializer, the parameter it is tied to (a sequence of names maps each
    to itself): every initializer the name names (itself, or those folded from it) is that
    parameter, its transpose or its leading rows (reshaped), checked on the values, and imports
    as that op applied to the parameter's leaf, so its gradient flows to the one parameter (see
    :func:`tied_initializers`: GPT-2's and OPT's output layer, the transpose of the token
    embedding, ``tied=["lm_head.weight"]``). Raises :class:`InteropError` with one line naming
    the ONNX node for anything that cannot be expressed (or a name of ``constants`` or ``tied``
    that names nothing, a tie the values deny); never a partial graph.
    """
    imported = _import(
        model, batch_axis, batched, batch_size, Refusals("from_onnx", False), constants, tied
    )
    assert imported is not None  # a refusal raised
    return imported


def onnx_report(
    model: Any,
    *,
    batch_axis: int | None = 0,
    batched: Sequence[str] | None = None,
    batch_size: int | None = None,
    constants: Sequence[str] = (),
    tied: abc.Mapping[str, str] | Sequence[str] = (),
) -> tuple[tuple[Unsupported, ...], Imported | None]:
    """Every refusal of :func:`from_onnx` on ``model`` (not only the first), and the import
    when there is none."""
    refusals = Refusals("from_onnx", collect=True)
    imported = _import(model, batch_axis, batched, batch_size, refusals, constants, tied)
    return tuple(refusals.records), imported


def _import(
    model: Any,
    batch_axis: int | None,
    batched: Sequence[str] | None,
    batch_size: int | None,
    refusals: Refusals,
    constants: Sequence[str] = (),
    tied: abc.Mapping[str, str] | Sequence[str] = (),
) -> Imported | None:
    where = "from_onnx"
    _need_onnx(where)
    from onnx import numpy_helper, version_converter

    m = _load(model)
    opset = _default_opset(m)
    if any(o.domain not in ("", "ai.onnx") for o in m.opset_import if len(m.graph.node)):
        used = {n.domain for n in m.graph.node} - {"", "ai.onnx"}
        if used:
            raise InteropError(f"{where}: ops of another domain: {', '.join(sorted(used))}")
    if opset < MIN_NATIVE_OPSET:
        try:
            m = version_converter.convert_version(m, IMPORT_OPSET)
        except Exception as e:
            msg = str(e).splitlines()[0]
            raise InteropError(
                f"{where}: converting opset {opset} to {IMPORT_OPSET} failed: {msg}"
            ) from None
        opset = IMPORT_OPSET
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    inputs = [vi for vi in g.input if vi.name not in inits]
    dtypes = {a.dtype for a in inits.values()}
    for vi in inputs:
        dtypes.add(_tensor_type(vi)[0])
    dtype = float_dtype(dtypes, where)
    np_dtype = np.float32 if dtype == "f32" else np.float64

    # the batch size: the inputs' batch dimension (symbolic: batch_size, default 1)
    def symbolic(vi: Any) -> bool:
        dims = vi.type.tensor_type.shape.dim
        return bool(dims) and not dims[batch_axis % len(dims)].HasField("dim_value")

    if batch_axis is None:
        carry: set[str] = set()
    elif batched is not None:
        carry = set(batched)
        unknown = carry - {vi.name for vi in inputs}
        if unknown:
            raise InteropError(f"{where}: batched: no input named {sorted(unknown)[0]!r}")
    elif any(symbolic(vi) for vi in inputs):
        carry = {vi.name for vi in inputs if symbolic(vi)}
    else:
        carry = {vi.name for vi in inputs if _tensor_type(vi)[1]}
    n = batch_size
    if batch_axis is not None:
        for vi in inputs:
            _, dims = _tensor_type(vi)
            if not dims or vi.name not in carry:
                continue
            d = dims[batch_axis % len(dims)]
            if d > 0:
                if n is not None and batch_size is None and d != n:
                    raise InteropError(f"{where}: inputs disagree on the batch size ({n}, {d})")
                n = n if batch_size is not None else d
    n = n or 1
    b = GraphBuilder(dtype)
    tr = Tracer(b, n)
    names = Names()
    ctx = _Ctx(tr, opset, names)
    env: dict[str, T] = {}
    batched: list[str] = []
    for vi in inputs:
        dt, dims = _tensor_type(vi)
        b_axis = None if vi.name not in carry else batch_axis % len(dims)  # type: ignore[operator]
        dims = [d if d > 0 else (n if i == b_axis else batch_size or 1) for i, d in enumerate(dims)]
        name = names(vi.name, "x")
        try:
            if b_axis is None:
                per, bdim = tuple(dims), None
            else:
                per, bdim = tr.batched_input(tuple(dims), batch_axis)
        except Refused as e:
            raise InteropError(f"{where}: input {vi.name!r}: {e}") from None
        if np.issubdtype(dt, np.floating):
            v = b.input(name, per)
            env[vi.name] = T(tuple(dims), bdim, 1, var=v)
        elif np.issubdtype(dt, np.integer):
            if len(per) > 1:
                raise InteropError(
                    f"{where}: integer input {vi.name!r} of per-sample shape {list(per)}: "
                    "index inputs are scalars or vectors"
                )
            ix = b.index(name, per[0] if per else None)
            imap = IndexMap.of_input(ix, tuple(dims), bdim)
            env[vi.name] = T(tuple(dims), bdim, 1, index=ix, imap=imap)
        else:
            raise InteropError(f"{where}: input {vi.name!r} of type {dt}")
        if bdim is not None:
            batched.append(name)
    ctx.producer = {o: nd.op_type for nd in g.node for o in nd.output}
    for nd in g.node:
        for name in nd.input:
            ctx.readers.setdefault(name, []).append(nd)
    roles = initializer_roles(g, inits)
    ties = tied_initializers(g, inits, tied)
    for key in constant_initializers(g, inits, constants):
        if key in ties:
            raise InteropError(
                f"{where}: {key!r} is named by both constants and tied (a constant, or a fold "
                f"of the parameter {ties[key][0]!r}: one of them)"
            )
        roles[key] = "const"
    for key, arr in inits.items():
        if key not in ties:
            role = roles.get(key, "const")
            env[key] = _initializer(tr, names, key, arr, role, np_dtype, _uses(g, key))
    for key, (target, fold, rows) in ties.items():
        env[key] = _fold(tr, env[target], fold, rows, inits[key].shape)
    for i, node in enumerate(g.node):
        src = node.name or node.output[0]
        loc = f"node {i}"
        label = f"{loc} ({node.op_type} {src!r})"
        blocked = Blocked(src)
        mapping = ONNX_IMPORTS.get(node.op_type)
        try:
            ins = [env[x] if x else None for x in node.input]
        except KeyError as e:
            raise InteropError(f"{where}: {label}: unknown input {e.args[0]!r}") from None
        origins = [x.origin for x in ins if isinstance(x, Blocked)]
        on_index = any(isinstance(x, T) and x.imap is not None for x in ins)
        arith = on_index and node.op_type in _INDEX_ARITH and node.domain in ("", "ai.onnx")
        if (node.domain not in ("", "ai.onnx") or mapping is None) and not arith and on_index:
            refusals.refused(node.op_type, src, loc, label, _runtime_integers(node.op_type))
        elif (node.domain not in ("", "ai.onnx") or mapping is None) and not arith:
            why = ONNX_REFUSED.get(node.op_type, "no mapping to our ops")
            reason = f"ONNX op {node.op_type} is not supported: {why}"
            hint = "" if node.op_type in ONNX_REFUSED else "not supported yet"
            refusals.refuse(node.op_type, src, loc, label, reason, hint)
        elif origins:
            refusals.blocked(node.op_type, src, loc, origins[0])
            blocked = Blocked(origins[0])
        else:
            ctx.attrs = {a.name: _attr(a) for a in node.attribute}
            try:
                _check_reads(node, ins)
                if arith:
                    outs = _index_arith(node, ins)
                elif _on_index(node, ins):
                    outs = _index_shape_op(ctx, node, ins)
                else:
                    assert mapping is not None
                    outs = mapping.fn(ctx, node, ins)
            except Refused as e:
                refusals.refused(node.op_type, src, loc, label, e)
                outs = None
            except TorchleanError as e:  # a shape rule refusing the per-sample op
                refusals.refuse(node.op_type, src, loc, label, one_line(e))
                outs = None
            else:
                for name, t in zip(node.output, outs, strict=False):
                    if name:
                        env[name] = t
                continue
        for name in node.output:  # refused: what reads its outputs depends on it
            if name:
                env[name] = blocked  # type: ignore[assignment]
    outs = []
    reductions: list[str] = []
    for vi in g.output:
        t = env.get(vi.name)
        if isinstance(t, Blocked):
            continue
        if t is None:
            raise InteropError(f"{where}: output {vi.name!r} is not computed by any node")
        try:
            if t.imap is not None:
                raise Refused("an index tensor (integers) as a model output")
            if t.logmask is not None:
                raise Refused("an attention mask of an index input as a model output")
            outs.append(tr.var(t))
            reductions.append(t.reduced or "")
        except Refused as e:
            refusals.refused("output", vi.name, "output", f"output {vi.name!r}", e)
    if refusals.records:
        return None
    graph = prune(b.build(outs))
    params = {k: v.astype(np_dtype) for k, v in tr.param_values.items() if k in tr._params}
    return Imported(
        graph,
        params,
        tuple(batched),
        n,
        {k: v for k, v in names.source.items() if _is_leaf_or_index(graph, k)},
        tuple(vi.name for vi in g.output),
        tuple(reductions),
    )


#: Inputs whose values are never learned: bounds, exponents, fills, shapes and axes, the
#: condition and branches of a selection, the operands of a comparison (``None``: every input).
_CONSTANT_INPUTS: dict[str, tuple[int, ...] | None] = {
    "Clip": (1, 2),
    "Pow": (1,),
    "Pad": (1, 2, 3),
    "Where": None,
    "Reshape": (1,),
    "Expand": (1,),
    "Slice": (1, 2, 3, 4),
    "Unsqueeze": (1,),
    "Squeeze": (1,),
    "Split": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ConstantOfShape": None,
    "Less": None,
    "Equal": None,
    "IsNaN": None,
}

#: Inputs where a value is elementwise data (not a weight of a layer): an initializer there that
#: an exporter expanded to the batch (equal along its leading axis) is read as one sample's.
_DATA_INPUTS = {"Add", "Sub", "Mul", "Div", "Concat", "Where"}

_PARAM_KINDS = ("PARAMETER", "BUFFER")
_FOLDED = "pkg.onnxscript.optimizer.folded_from"


def _uses(g: Any, key: str) -> list[tuple[str, int]]:
    return [(nd.op_type, k) for nd in g.node for k, i in enumerate(nd.input) if i == key]


def _declared(g: Any) -> dict[str, str]:
    """What ``torch.onnx.export`` says each of its parameters and buffers is (the value's
    metadata ``pkg.torch.export.graph_signature.InputSpec.kind``)."""
    key = "pkg.torch.export.graph_signature.InputSpec.kind"
    out: dict[str, str] = {}
    for vi in [*g.value_info, *g.input]:
        for prop in getattr(vi, "metadata_props", ()):
            if prop.key == key and prop.value in _PARAM_KINDS:
                out[vi.name] = prop.value
    return out


def initializer_roles(g: Any, inits: dict[str, np.ndarray]) -> dict[str, str]:
    """Whether each float initializer is a trained parameter (``"param"``), a frozen one
    (``"frozen"``: batch-norm statistics, buffers) or a constant (``"const"``), decided by its
    values and its uses:

    * a scalar is a constant (exponents, clip bounds, the 0.5 of a GELU an exporter shares among
      nodes), unless the exporter declares it a parameter;
    * a mask is a constant: an array holding an infinity or a value at the float type's limit
      (``-3.4e38``, PyTorch's ``finfo.min`` fill for blocked attention);
    * an initializer read only where values are never learned (:data:`_CONSTANT_INPUTS`: bounds,
      shapes, the branches of ``Where``) is a constant;
    * where the exporter declares its parameters (``torch.onnx.export`` does, in each value's
      metadata), an undeclared initializer that only elementwise ops and concatenations read
      and whose elements are all one value is a constant (ViT's all-zero attention mask); an
      undeclared one elsewhere is a parameter still (the transposes of weights it folded);
    * batch-norm running statistics, and buffers the exporter declares, are frozen;
    * anything else (a weight, a bias, a position or class embedding, a transpose of a weight an
      exporter folded) is a parameter. One initializer several nodes read is one parameter:
      ONNX does not tell weights tied on purpose from identical ones an exporter merged.
    """
    declared = _declared(g)
    return {
        key: _role(arr, _uses(g, key), declared.get(key), bool(declared))
        for key, arr in inits.items()
        if np.issubdtype(arr.dtype, np.floating)
    }


def folded_from(g: Any) -> dict[str, tuple[str, ...]]:
    """The sources each initializer was folded from, as the exporter records them (the value's
    metadata ``pkg.onnxscript.optimizer.folded_from``, written by ``torch.onnx.export``'s
    optimizer: the parameters, buffers and intermediate values it evaluated into one)."""
    out: dict[str, tuple[str, ...]] = {}
    for vi in [*g.value_info, *g.input]:
        for prop in getattr(vi, "metadata_props", ()):
            if prop.key != _FOLDED:
                continue
            try:
                names = ast.literal_eval(prop.value)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue  # metadata we cannot read names nothing
            if isinstance(names, list | tuple):
                out[vi.name] = tuple(str(x) for x in names)
    return out


def constant_initializers(
    g: Any, inits: dict[str, np.ndarray], constants: Sequence[str]
) -> list[str]:
    """The float initializers that ``constants`` names: each name is an initializer, or a source
    that initializers were folded from (:func:`folded_from`), which names all of them. An ONNX
    file does not say whether a value the exporter folded from a non-persistent buffer (LLaMA's
    rotary ``inv_freq``, to its sin and cos tables) was a buffer or a parameter: the user says.
    Raises :class:`InteropError` for a name that names no float initializer."""
    if not constants:
        return []
    floats = [k for k, a in inits.items() if np.issubdtype(a.dtype, np.floating)]
    folded = folded_from(g)
    out: list[str] = []
    for name in constants:
        hits = [k for k in floats if k == name or name in folded.get(k, ())]
        if not hits:
            raise InteropError(
                f"from_onnx: constants: {name!r} is no float initializer of the model, nor a "
                "source one was folded from (pkg.onnxscript.optimizer.folded_from)"
            )
        out += [k for k in hits if k not in out]
    return out


#: How an initializer can be a parameter ``p`` tied to it (:func:`tied_initializers`), each
#: reshaped to the initializer's shape: ``p`` itself, its transpose (a matrix), its leading rows
_FOLDS = {"itself": "itself", "transpose": "its transpose", "rows": "its leading rows"}


def _folds(arr: np.ndarray, p: np.ndarray) -> tuple[list[str], dict[str, bool], int]:
    """The folds of ``p`` (:data:`_FOLDS`) that have ``arr``'s size, whether ``arr`` equals each
    exactly, and the number of leading rows."""
    shapes: dict[str, tuple[int, ...]] = {}
    rows = 0
    if arr.size == p.size:
        shapes["itself"] = p.shape
        if p.ndim == 2:
            shapes["transpose"] = p.shape[::-1]
    elif p.ndim >= 1 and p.size and arr.size and arr.size % (p.size // p.shape[0]) == 0:
        rows = arr.size // (p.size // p.shape[0])
        if rows < p.shape[0]:
            shapes["rows"] = (rows, *p.shape[1:])
    want = {"itself": lambda: p, "transpose": lambda: p.T, "rows": lambda: p[:rows]}
    agree = {k: bool(np.array_equal(arr.reshape(s), want[k]())) for k, s in shapes.items()}
    return list(shapes), agree, rows


def tied_initializers(
    g: Any, inits: dict[str, np.ndarray], tied: abc.Mapping[str, str] | Sequence[str]
) -> dict[str, tuple[str, str, int]]:
    """The float initializers that ``tied`` ties to a parameter: initializer -> (the parameter,
    the fold, the leading rows it holds for ``"rows"``).

    ``tied`` maps a name to a float initializer of the model, the parameter (a sequence of
    names maps each to itself). A name is an initializer, or a source that initializers were
    folded from (:func:`folded_from`), which names all of them but the parameter itself. Each is
    the parameter, its transpose or its leading rows, reshaped (:data:`_FOLDS`), and must equal
    it exactly. ``torch.onnx.export`` keeps a tensor that PyTorch ties (GPT-2's and OPT's token
    embedding and output layer) under one name (``lm_head.weight``) and folds the output
    layer's transpose into an initializer of its own whose metadata names that source: equal
    values alone do not say that two initializers are one parameter (a fresh model's zeros
    agree too), so the user says (``tied=["lm_head.weight"]``). Raises :class:`InteropError`,
    in one line naming the option and the names, for a name that names nothing, a parameter
    that is no float initializer, an initializer that is no fold of it or one whose values
    differ from it, or whose values cannot tell two folds apart."""
    if isinstance(tied, str):
        tied = [tied]
    if not isinstance(tied, abc.Mapping):
        tied = {name: name for name in tied}
    if not tied:
        return {}
    floats = [k for k, a in inits.items() if np.issubdtype(a.dtype, np.floating)]
    folded = folded_from(g)
    out: dict[str, tuple[str, str, int]] = {}
    for name, target in tied.items():
        what = f"from_onnx: tied: {name!r} to {target!r}"
        if target not in floats:
            held = name in floats and any(name in f for f in folded.values())
            raise InteropError(
                f"{what}: {target!r} is no float initializer of the model ("
                + (
                    f"the file holds the tied tensor as {name!r}: tie {name!r} to itself"
                    if held
                    else "a tensor PyTorch ties is in the file under one of its names: the "
                    "source that the folded initializers' pkg.onnxscript.optimizer.folded_from "
                    "names"
                )
                + ")"
            )
        hits = [k for k in floats if k != target and (k == name or name in folded.get(k, ()))]
        if not hits:
            raise InteropError(
                f"{what}: {name!r} is no float initializer of the model other than {target!r}, "
                "nor a source one was folded from (pkg.onnxscript.optimizer.folded_from)"
            )
        p = inits[target]
        for k in hits:
            arr = inits[k]
            here = f"{what}: {k!r} of shape {list(arr.shape)}"
            if k in tied.values():
                raise InteropError(f"{here} is itself a parameter others are tied to")
            shapes, agree, rows = _folds(arr, p)
            if not shapes:
                raise InteropError(
                    f"{here} is no fold of {target!r} of shape {list(p.shape)} (only the "
                    "parameter itself, its transpose or its leading rows, reshaped)"
                )
            hit = [f for f in shapes if agree[f]]
            if not hit:
                folds = " nor as ".join(_FOLDS[f] for f in shapes)
                raise InteropError(
                    f"{here} is not {target!r} of shape {list(p.shape)} as {folds}: the values "
                    "differ"
                )
            if len(hit) > 1:
                raise InteropError(
                    f"{here} equals {target!r} as {' and as '.join(_FOLDS[f] for f in hit)}: the "
                    "values do not tell which (perturb the weights before exporting)"
                )
            if k in out and out[k][0] != target:
                raise InteropError(f"{here} is tied to both {out[k][0]!r} and {target!r}")
            out[k] = (target, hit[0], rows)
    return out


def _fold(tr: Tracer, p: T, fold: str, rows: int, shape: tuple[int, ...]) -> T:
    """The fold of :func:`tied_initializers` applied to the parameter ``p``: a ``transpose``
    or ``slice`` of its leaf (so its gradient flows to ``p``), reshaped to ``shape``."""
    if fold == "transpose":
        p = tr.transpose(p, 0, 1)
    elif fold == "rows":
        p = tr.slice(p, 0, 0, rows)
    return tr.reshape_to(p, shape)


def _role(arr: np.ndarray, uses: list[tuple[str, int]], kind: str | None, declares: bool) -> str:
    """One initializer's role (see :func:`initializer_roles`); ``declares``: the exporter
    declares its parameters."""
    if arr.size == 1 and kind != "PARAMETER":
        return "const"
    if (
        declares
        and kind is None
        and uses
        and all(op in _DATA_INPUTS for op, _ in uses)
        and bool(np.all(arr == arr.reshape(-1)[:1]))
    ):
        return "const"  # a uniform fill the exporter made (a mask that blocks nothing)
    big = float(np.finfo(np.float32).max) / 2
    if arr.size and (not np.isfinite(arr).all() or float(np.abs(arr).max()) >= big):
        return "const"
    constant = [_CONSTANT_INPUTS.get(op, ()) is None or k in (_CONSTANT_INPUTS.get(op) or ())
                for op, k in uses]  # fmt: skip
    if uses and all(constant):
        return "const"
    if uses and all(op == "BatchNormalization" and k in (3, 4) for op, k in uses):
        return "frozen"
    return "frozen" if kind == "BUFFER" else "param"


def _initializer(
    tr: Tracer,
    names: Names,
    key: str,
    arr: np.ndarray,
    role: str,
    np_dtype: Any,
    uses: list[tuple[str, int]],
) -> T:
    """The traced value of an initializer in its role; one an exporter expanded to the batch
    (ViT's class token, a mask: the batch size along its leading axis, every slice equal) and
    that only elementwise ops and concatenations read is that slice, broadcast (so it meets the
    batched values it joins)."""
    if not np.issubdtype(arr.dtype, np.floating):
        return tr.const(arr)
    arr = arr.astype(np_dtype)
    spread = (
        tr.n > 1
        and arr.ndim >= 1
        and arr.shape[0] == tr.n
        and bool(uses)
        and all(op in _DATA_INPUTS for op, _ in uses)
        and bool(np.all(arr == arr[:1]))
    )
    if role == "const":
        t = tr.const(arr)
        if spread:
            t.expanded_from = tr.const(arr[:1])
        return t
    frozen = role == "frozen"
    if spread:
        return tr.expand(tr.param(names(key, "p"), arr[:1], frozen=frozen), arr.shape)
    return tr.param(names(key, "p"), arr, frozen=frozen)


def _is_leaf_or_index(graph: Any, name: str) -> bool:
    return any(leaf.name == name for leaf in graph.leaves) or any(
        ix.name == name for ix in graph.index_inputs
    )


def _decimal(v: float) -> float:
    """An ONNX float attribute (a float32): the shortest decimal that rounds to it when that has
    at most 6 significant digits (``epsilon=1e-5`` reads back as 1e-05, not
    9.999999747378752e-06), else its exact value (2^-12 stays 2^-12)."""
    text = str(np.float32(v))
    digits = text.lower().split("e")[0].replace("-", "").replace(".", "").lstrip("0")
    return float(text) if len(digits) <= 6 else float(v)


def _attr(a: Any) -> Any:
    """An attribute's value (see :func:`_decimal` for floats)."""
    from onnx import AttributeProto, helper

    v = helper.get_attribute_value(a)
    if a.type == AttributeProto.FLOAT:
        return _decimal(v)
    if a.type == AttributeProto.FLOATS:
        return [_decimal(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [x.decode("utf-8", "replace") for x in v]
    return v


__all__ = [
    "IMPORT_OPSET",
    "ONNX_IMPORTS",
    "ONNX_REFUSED",
    "constant_initializers",
    "folded_from",
    "from_onnx",
    "onnx_report",
    "tied_initializers",
]
