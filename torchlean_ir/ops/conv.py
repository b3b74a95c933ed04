"""Convolution and transpose convolution, N-D and 2-D, channels-first, one sample.

``conv(W (outC, inC / groups, k...), b (outC,), x (inC, spatial...))`` with per-dim stride and
zero padding; out = floor((in + 2p - k) / s) + 1. With ``groups`` G > 1 the input and output
channels are split into G consecutive blocks and output block g sees input block g only (G =
inC: depthwise convolution; JAX's ``feature_group_count``). ``conv_transpose(W (inC, outC,
k...), b, x)`` is the adjoint of ``conv`` in ``x`` (plus bias); out = (in - 1) s - 2p + k. The
2-D forms take one stride and one padding for both spatial dims (TorchLean's ``conv2d`` /
``conv_transpose2d``).

The reference rules sum over kernel offsets (``_windows``): one ``einsum`` per offset on a
strided slice of the padded input, and ``place`` for the transposes; windows that tile the input
(stride = kernel) are one ``einsum`` over its patches. The JAX lowering uses
``lax.conv_general_dilated`` (forward, and its JAX JVP / VJP) instead.
"""

from __future__ import annotations

import math
from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op
from .._types import Shape, TensorType
from ._windows import (
    Ints,
    crop_spatial,
    offsets,
    pad_spatial,
    per_dim,
    place,
    spatial_letters,
    stack,
    tiles,
    unwindows,
    window_view,
    windows,
)


def _positive(v: int | tuple[int, ...]) -> str | None:
    vals = (v,) if isinstance(v, int) else v
    return None if all(s >= 1 for s in vals) else "must be at least 1"


def _geometry(
    x: TensorType, W: TensorType, stride: Any, padding: Any, *, two_d: bool
) -> tuple[int, Ints, Ints]:
    """Check the argument ranks and attribute lengths shared by conv and conv_transpose."""
    if two_d and x.rank != 3:
        raise ShapeError(f"needs x (C, H, W) of rank 3, got {x}")
    if x.rank < 2:
        raise ShapeError(f"needs x (C, spatial...) of rank >= 2, got {x}")
    d = x.rank - 1
    if W.rank != d + 2:
        raise ShapeError(f"needs a weight of rank {d + 2} for x {x}, got {W}")
    S, P = per_dim(stride, d), per_dim(padding, d)
    for name, v in (("stride", S), ("padding", P)):
        if len(v) != d:
            raise ShapeError(f"{name} {v} needs one entry per spatial dim of x {x} ({d})")
    if any(k == 0 for k in W.shape[2:]):
        raise ShapeError(f"needs a non-empty kernel, got {W}")
    if x.shape[0] == 0:
        raise ShapeError(f"needs at least one input channel, got {x}")
    return d, S, P


# == conv ==========================================================================================


def _conv_out(x: TensorType, W: TensorType, b: TensorType, S: Ints, P: Ints, G: int) -> Shape:
    if W.shape[1] * G != x.shape[0]:
        per = "inC" if G == 1 else f"inC / groups = {x.shape[0]} / {G}"
        raise ShapeError(f"weight {W} is (outC, {per}, k...) with inC = {x.shape[0]} for x {x}")
    if W.shape[0] % G:
        raise ShapeError(f"weight {W}: outC = {W.shape[0]} is not a multiple of groups = {G}")
    if b.shape != (W.shape[0],):
        raise ShapeError(f"bias must be [{W.shape[0]}] for weight {W}, got {b}")
    out = []
    for n, k, s, p in zip(x.shape[1:], W.shape[2:], S, P, strict=True):
        if n + 2 * p < k:
            raise ShapeError(f"kernel {W.shape[2:]} exceeds the padded input {x} (padding {P})")
        out.append((n + 2 * p - k) // s + 1)
    return (W.shape[0], *out)


def _grouped(B: Any, a: Any, G: int) -> Any:
    """(C, rest...) -> (G, C / G, rest...): the channel blocks of a grouped convolution."""
    return B.reshape(a, (G, a.shape[0] // G, *a.shape[1:]))


def _ungrouped(B: Any, a: Any) -> Any:
    """The inverse of :func:`_grouped`."""
    return B.reshape(a, (a.shape[0] * a.shape[1], *a.shape[2:]))


def _flat_kernel(B: Any, W: Any) -> Any:
    """W (outC, inC, k...) as (outC, inC, prod(k)), the kernel cells in row-major order."""
    return B.reshape(W, (W.shape[0], W.shape[1], math.prod(W.shape[2:])))


def _conv_core(B: Any, W: Any, xp: Any, S: Ints, O: Ints, G: int = 1) -> Any:
    """sum_{c,k} W[f, c, k] xp[g(f) Ig + c, o s + k]: the bias-free convolution of the padded
    input (g(f) = f // (outC / G), Ig = inC / G; g = 0 for G = 1). Windows that tile the input
    (stride = kernel: a vision transformer's patch embedding) are one contraction over the
    relayout of the input into its patches, instead of one per kernel offset."""
    sp = spatial_letters(len(S))
    if G == 1 and tiles(W.shape[2:], S):
        patches = windows(B, xp, W.shape[2:], S, O)  # (inC, O..., prod(k))
        return B.einsum(f"fck,c{sp}k->f{sp}", _flat_kernel(B, W), patches)
    acc = None
    for off in offsets(W.shape[2:]):
        w, view = W[(slice(None), slice(None), *off)], window_view(xp, off, S, O)
        if G == 1:
            term = B.einsum(f"fc,c{sp}->f{sp}", w, view)
        else:
            term = _ungrouped(
                B, B.einsum(f"gfc,gc{sp}->gf{sp}", _grouped(B, w, G), _grouped(B, view, G))
            )
        acc = term if acc is None else acc + term
    return acc


def _bias(B: Any, b: Any, d: int) -> Any:
    return B.reshape(b, (-1,) + (1,) * d)


def _conv_forward(B: Any, W: Any, b: Any, x: Any, S: Ints, P: Ints, G: int = 1) -> Any:
    xp = pad_spatial(B, x, P)
    O = tuple((n - k) // s + 1 for n, k, s in zip(xp.shape[1:], W.shape[2:], S, strict=True))
    return _conv_core(B, W, xp, S, O, G) + _bias(B, b, len(S))


def _conv_jvp(B: Any, args: tuple, tangents: tuple, S: Ints, P: Ints, G: int = 1) -> Any:
    W, _, x = args
    tW, tb, tx = tangents
    return _conv_forward(B, tW, tb, x, S, P, G) + _conv_forward(B, W, B.zeros_like(tb), tx, S, P, G)


def _conv_vjp(B: Any, args: tuple, ct: Any, S: Ints, P: Ints, G: int = 1) -> tuple:
    W, _, x = args
    d, sp = len(S), spatial_letters(len(S))
    xp = pad_spatial(B, x, P)
    O = ct.shape[1:]
    K = W.shape[2:]
    if G == 1 and tiles(K, S):  # as in _conv_core: the input's patches
        patches = windows(B, xp, K, S, O)
        gW_flat = B.einsum(f"f{sp},c{sp}k->fck", ct, patches)
        back = B.einsum(f"fck,f{sp}->c{sp}k", _flat_kernel(B, W), ct)
        gx = crop_spatial(unwindows(B, back, K, S, xp.shape[1:]), P, x.shape[1:])
        return (B.reshape(gW_flat, W.shape), B.sum(ct, axis=tuple(range(1, d + 1))), gx)
    if G == 1:
        gW = stack(
            B,
            [B.einsum(f"f{sp},c{sp}->fc", ct, window_view(xp, off, S, O)) for off in offsets(K)],
            -1,
        )
    else:
        ctg = _grouped(B, ct, G)
        gW = stack(
            B,
            [
                _ungrouped(
                    B,
                    B.einsum(
                        f"gf{sp},gc{sp}->gfc", ctg, _grouped(B, window_view(xp, off, S, O), G)
                    ),
                )
                for off in offsets(K)
            ],
            -1,
        )
    gxp = None
    for off in offsets(K):
        w = W[(slice(None), slice(None), *off)]
        if G == 1:
            back = B.einsum(f"fc,f{sp}->c{sp}", w, ct)
        else:
            back = _ungrouped(
                B, B.einsum(f"gfc,gf{sp}->gc{sp}", _grouped(B, w, G), _grouped(B, ct, G))
            )
        term = place(B, back, off, S, xp.shape[1:])
        gxp = term if gxp is None else gxp + term
    gx = crop_spatial(gxp, P, x.shape[1:])
    return (B.reshape(gW, W.shape), B.sum(ct, axis=tuple(range(1, d + 1))), gx)


def _conv_lower(B: Any, W: Any, b: Any, x: Any, S: Ints, P: Ints, G: int = 1) -> Any:
    from jax import lax

    y = lax.conv_general_dilated(
        x[None],
        W,
        window_strides=S,
        padding=[(p, p) for p in P],
        feature_group_count=G,
        # no precision of its own: the compiler traces every rule at the caller's matmul
        # precision (float32 unless a fast mode is asked for: compiler._precision)
        precision=None,
    )
    return y[0] + _bias(B, b, len(S))


# == conv_transpose ================================================================================


def _conv_transpose_out(x: TensorType, W: TensorType, b: TensorType, S: Ints, P: Ints) -> Shape:
    if W.shape[0] != x.shape[0]:
        raise ShapeError(f"weight {W} is (inC, outC, k...) with inC = {x.shape[0]} for x {x}")
    if b.shape != (W.shape[1],):
        raise ShapeError(f"bias must be [{W.shape[1]}] for weight {W}, got {b}")
    out = []
    for n, k, s, p in zip(x.shape[1:], W.shape[2:], S, P, strict=True):
        size = (n - 1) * s - 2 * p + k
        if n == 0 or size < 1:
            raise ShapeError(
                f"output size (in - 1) * stride - 2 * padding + k = {size} < 1 for x {x}, "
                f"weight {W}, stride {S}, padding {P}"
            )
        out.append(size)
    return (W.shape[1], *out)


def _full(x: Any, W: Any, S: Ints) -> Ints:
    """The uncropped output size (in - 1) s + k per spatial dim."""
    return tuple((n - 1) * s + k for n, s, k in zip(x.shape[1:], S, W.shape[2:], strict=True))


def _conv_transpose_core(B: Any, W: Any, x: Any, S: Ints, P: Ints) -> Any:
    """sum_{c,k} W[c, f, k] x[c, i] placed at i s + k, then cropped by the padding."""
    sp = spatial_letters(len(S))
    full = _full(x, W, S)
    acc = None
    for off in offsets(W.shape[2:]):
        spread = B.einsum(f"cf,c{sp}->f{sp}", W[(slice(None), slice(None), *off)], x)
        term = place(B, spread, off, S, full)
        acc = term if acc is None else acc + term
    size = tuple(f - 2 * p for f, p in zip(full, P, strict=True))
    return crop_spatial(acc, P, size)


def _conv_transpose_forward(B: Any, W: Any, b: Any, x: Any, S: Ints, P: Ints) -> Any:
    return _conv_transpose_core(B, W, x, S, P) + _bias(B, b, len(S))


def _conv_transpose_jvp(B: Any, args: tuple, tangents: tuple, S: Ints, P: Ints) -> Any:
    W, _, x = args
    tW, tb, tx = tangents
    core = _conv_transpose_core(B, tW, x, S, P) + _conv_transpose_core(B, W, tx, S, P)
    return core + _bias(B, tb, len(S))


def _conv_transpose_vjp(B: Any, args: tuple, ct: Any, S: Ints, P: Ints) -> tuple:
    W, _, x = args
    d, sp = len(S), spatial_letters(len(S))
    ctf = pad_spatial(B, ct, P)  # back to the uncropped output
    I = x.shape[1:]
    gx, gW = None, []
    for off in offsets(W.shape[2:]):
        view = window_view(ctf, off, S, I)
        term = B.einsum(f"cf,f{sp}->c{sp}", W[(slice(None), slice(None), *off)], view)
        gx = term if gx is None else gx + term
        gW.append(B.einsum(f"c{sp},f{sp}->cf", x, view))
    gW_ = B.reshape(stack(B, gW, -1), W.shape)
    return (gW_, B.sum(ct, axis=tuple(range(1, d + 1))), gx)


def _conv_transpose_lower(B: Any, W: Any, b: Any, x: Any, S: Ints, P: Ints) -> Any:
    from jax import lax

    d = len(S)
    flipped = W[(slice(None), slice(None)) + (slice(None, None, -1),) * d]
    y = lax.conv_general_dilated(
        x[None],
        B.swapaxes(flipped, 0, 1),
        window_strides=(1,) * d,
        padding=[(k - 1 - p, k - 1 - p) for k, p in zip(W.shape[2:], P, strict=True)],
        lhs_dilation=S,
        precision=None,  # the caller's matmul precision (see _conv_lower)
    )
    return y[0] + _bias(B, b, d)


# == declarations ==================================================================================

_FAMILY = {
    "conv": (_conv_out, _conv_forward, _conv_jvp, _conv_vjp, _conv_lower),
    "conv_transpose": (
        _conv_transpose_out,
        _conv_transpose_forward,
        _conv_transpose_jvp,
        _conv_transpose_vjp,
        _conv_transpose_lower,
    ),
}

_DOCS = {
    "conv": (
        "Convolution of x (inC, spatial...) with W (outC, inC / groups, k...) plus b (outC,): "
        "per-dim stride and zero padding, out = floor((in + 2p - k) / s) + 1; with groups G, "
        "output channel block g (of outC / G) sees input channel block g (of inC / G) only."
    ),
    "conv_transpose": (
        "Transpose convolution of x (inC, spatial...) with W (inC, outC, k...) plus b (outC,): "
        "the adjoint of conv in x; out = (in - 1) s - 2p + k."
    ),
}


def _defconv(name: str, kind: str, *, two_d: bool) -> Op:
    """Declare ``kind`` (conv or conv_transpose), N-D (tuple stride/padding) or 2-D (one each);
    conv takes ``groups`` too."""
    out_rule, forward, jvp, vjp, lower = _FAMILY[kind]
    if two_d:
        attrs = {
            "stride": AttrSpec("nat", default=1, check=_positive, doc="both spatial dims"),
            "padding": AttrSpec("nat", default=0, doc="zero padding, both spatial dims"),
        }
        doc = _DOCS[kind].replace("(inC, spatial...)", "(inC, H, W)") + " One stride, one padding."
    else:
        attrs = {
            "stride": AttrSpec("nats", check=_positive, doc="one per spatial dim"),
            "padding": AttrSpec("nats", doc="zero padding, one per spatial dim"),
        }
        doc = _DOCS[kind]
    grouped = kind == "conv"
    if grouped:
        attrs["groups"] = AttrSpec(
            "nat",
            default=1,
            check=_positive,
            doc="channel blocks: output block g sees input block g only (inC: depthwise)",
        )
    op = Op(name, args=("W", "b", "x"), attrs=attrs, family="conv", doc=doc)

    def geo(x: Any, at: dict[str, Any]) -> tuple[Any, ...]:
        """The rules' geometry arguments: per-dim stride and padding (and conv's groups)."""
        d = x.ndim - 1
        S, P = per_dim(at["stride"], d), per_dim(at["padding"], d)
        return (S, P, int(at.get("groups", 1))) if grouped else (S, P)

    def shape(W: TensorType, b: TensorType, x: TensorType, **at: Any) -> Shape:
        _, S, P = _geometry(x, W, at["stride"], at["padding"], two_d=two_d)
        return (
            out_rule(x, W, b, S, P, int(at.get("groups", 1)))
            if grouped
            else out_rule(x, W, b, S, P)
        )

    def fwd(B: Any, W: Any, b: Any, x: Any, **at: Any) -> Any:
        return forward(B, W, b, x, *geo(x, at))

    def jvp_(B: Any, args: tuple, tangents: tuple, out: Any, **at: Any) -> Any:
        return jvp(B, args, tangents, *geo(args[2], at))

    def vjp_(B: Any, args: tuple, out: Any, ct: Any, **at: Any) -> tuple:
        return vjp(B, args, ct, *geo(args[2], at))

    def lower_(B: Any, W: Any, b: Any, x: Any, **at: Any) -> Any:
        return lower(B, W, b, x, *geo(x, at))

    def lower_jvp(B: Any, args: tuple, tangents: tuple, out: Any, **at: Any) -> Any:
        import jax

        return jax.jvp(lambda *a: lower_(B, *a, **at), args, tangents)[1]

    def lower_vjp(B: Any, args: tuple, out: Any, ct: Any, **at: Any) -> tuple:
        import jax

        _, pullback = jax.vjp(lambda *a: lower_(B, *a, **at), *args)
        return tuple(pullback(ct))

    for fn, rule in (
        (shape, "shape"),
        (fwd, "forward"),
        (jvp_, "jvp"),
        (vjp_, "vjp"),
        (lower_, "lower"),
        (lower_jvp, "lower_jvp"),
        (lower_vjp, "lower_vjp"),
    ):
        fn.__name__ = fn.__qualname__ = f"{name}_{rule}"
    op.def_shape(shape)
    op.def_forward(fwd)
    op.def_jvp(jvp_)
    op.def_vjp(vjp_)
    op.def_lower(lower_)
    op.def_lower_jvp(lower_jvp)
    op.def_lower_vjp(lower_vjp)
    return op


conv = _defconv("conv", "conv", two_d=False)
conv2d = _defconv("conv2d", "conv", two_d=True)
conv_transpose = _defconv("conv_transpose", "conv_transpose", two_d=False)
conv_transpose2d = _defconv("conv_transpose2d", "conv_transpose", two_d=True)

__all__ = ["conv", "conv2d", "conv_transpose", "conv_transpose2d"]
