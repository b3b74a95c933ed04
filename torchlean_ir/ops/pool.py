"""Pooling, N-D and 2-D, channels-first, one sample: max, average, smooth max, global average.

Windows: ``kernel`` cells, ``stride`` apart, over the input padded by ``padding`` on each side;
out = floor((in + 2p - k) / s) + 1 per spatial dim. The conventions (``docs/ops.md``):

* ``max_pool``: padded cells never win (padding is -inf); at a tie the first maximum in row-major
  window order takes the whole cotangent. Needs padding < kernel (no window of padding only).
* ``avg_pool``: padded cells count as zeros and the divisor is the full window size.
* ``smooth_max_pool(beta)``: ``(1/beta) log sum exp(beta x)`` over the window's input cells
  (padded cells take no part, as in max_pool); beta finite and nonzero; needs padding < kernel.

The 2-D forms follow TorchLean's signatures: ``max_pool2d`` / ``avg_pool2d`` /
``smooth_max_pool2d`` take a kernel (kH, kW) and one stride and no padding; ``max_pool2d_pad`` /
``avg_pool2d_pad`` add one padding for both dims. ``global_avg_pool2d`` averages each channel of
(C, H, W) to (C,).

The reference rules stack the windows on a trailing axis (``_windows``). Max pooling's symbolic
forward is ``sum(first_max_onehot(window) * window)``: a flat sum of Piecewise indicators whose
branch-wise derivative is exactly the tie convention. The JAX lowering of the max and average
forwards is ``lax.reduce_window``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op, deflinear
from .._types import Shape, TensorType
from ._windows import (
    Ints,
    crop_spatial,
    pad_spatial,
    per_dim,
    unwindows,
    valid_mask,
    windows,
)


def _positive(v: int | tuple[int, ...]) -> str | None:
    vals = (v,) if isinstance(v, int) else v
    return None if all(s >= 1 for s in vals) else "must be at least 1"


def _beta_ok(b: float) -> str | None:
    return None if b != 0 and math.isfinite(b) else "must be finite and nonzero"


class _Geometry:
    """Kernel, stride, padding (per spatial dim) and output sizes of one pooling node."""

    __slots__ = ("K", "O", "P", "S", "size")

    def __init__(self, size: Ints, K: Ints, S: Ints, P: Ints) -> None:
        self.size, self.K, self.S, self.P = size, K, S, P
        self.O = tuple((n + 2 * p - k) // s + 1 for n, k, s, p in zip(size, K, S, P, strict=True))

    @property
    def padded(self) -> Ints:
        return tuple(n + 2 * p for n, p in zip(self.size, self.P, strict=True))

    def valid(self, B: Any) -> Any:
        """Static mask of the window cells inside the input (None without padding), built by
        the backend's :meth:`~torchlean_ir.backends.NumpyBackend.static_arrays`."""
        if not any(self.P):
            return None
        xp = B.static_arrays(*self.size, *self.O)
        return valid_mask(self.size, self.K, self.S, self.P, self.O, xp)

    def windows(self, B: Any, x: Any) -> Any:
        """``(C, O..., prod(K))``: every window, padded cells 0."""
        return windows(B, pad_spatial(B, x, self.P), self.K, self.S, self.O)

    def unwindows(self, B: Any, w: Any) -> Any:
        """The transpose of :meth:`windows`, back to ``(C, size...)``."""
        return crop_spatial(unwindows(B, w, self.K, self.S, self.padded), self.P, self.size)


def _params(d: int, attrs: dict[str, Any]) -> tuple[Ints, Ints, Ints]:
    """Kernel, stride and padding per spatial dim (the 2-D forms give one stride / padding)."""
    return tuple(attrs["kernel"]), per_dim(attrs["stride"], d), per_dim(attrs.get("padding", 0), d)


def _geometry(shape: Shape, attrs: dict[str, Any]) -> _Geometry:
    return _Geometry(tuple(shape[1:]), *_params(len(shape) - 1, attrs))


def _check(x: TensorType, attrs: dict[str, Any], *, two_d: bool, strict_pad: bool) -> Shape:
    if two_d and x.rank != 3:
        raise ShapeError(f"needs x (C, H, W) of rank 3, got {x}")
    if x.rank < 2:
        raise ShapeError(f"needs x (C, spatial...) of rank >= 2, got {x}")
    d = x.rank - 1
    for name, v in zip(("kernel", "stride", "padding"), _params(d, attrs), strict=True):
        if len(v) != d:
            raise ShapeError(f"{name} {v} needs one entry per spatial dim of x {x} ({d})")
    g = _geometry(x.shape, attrs)
    for n, k, p in zip(g.size, g.K, g.P, strict=True):
        if n + 2 * p < k:
            raise ShapeError(f"kernel {g.K} exceeds the padded input {x} (padding {g.P})")
        if strict_pad and p >= k:
            raise ShapeError(f"padding {g.P} must be smaller than the kernel {g.K}")
    return (x.shape[0], *g.O)


# -- the three pooling kinds, written once for the N-D and 2-D forms -------------------------


def _max_forward(B: Any, x: Any, g: _Geometry) -> Any:
    w = g.windows(B, x)
    valid = g.valid(B)
    return B.max(w if valid is None else B.where(valid, w, -np.inf), axis=-1)


def _max_sym(B: Any, x: Any, g: _Geometry) -> Any:
    w = g.windows(B, x)
    return B.sum(B.first_max_onehot(w, axis=-1, valid=g.valid(B)) * w, axis=-1)


def _max_jvp(B: Any, x: Any, t: Any, g: _Geometry) -> Any:
    onehot = B.first_max_onehot(g.windows(B, x), axis=-1, valid=g.valid(B))
    return B.sum(onehot * g.windows(B, t), axis=-1)


def _max_vjp(B: Any, x: Any, ct: Any, g: _Geometry) -> Any:
    onehot = B.first_max_onehot(g.windows(B, x), axis=-1, valid=g.valid(B))
    return g.unwindows(B, onehot * B.expand_dims(ct, -1))


def _max_lower(B: Any, x: Any, g: _Geometry) -> Any:
    from jax import lax

    init = np.array(-np.inf, dtype=x.dtype)
    pads = ((0, 0), *((p, p) for p in g.P))
    return lax.reduce_window(x, init, lax.max, (1, *g.K), (1, *g.S), pads)


def _avg_forward(B: Any, x: Any, g: _Geometry) -> Any:
    return B.sum(g.windows(B, x), axis=-1) / math.prod(g.K)


def _avg_vjp(B: Any, x: Any, ct: Any, g: _Geometry) -> Any:
    n = math.prod(g.K)
    return g.unwindows(B, B.broadcast_to(B.expand_dims(ct / n, -1), (*ct.shape, n)))


def _avg_lower(B: Any, x: Any, g: _Geometry) -> Any:
    from jax import lax

    init = np.array(0, dtype=x.dtype)
    pads = ((0, 0), *((p, p) for p in g.P))
    return lax.reduce_window(x, init, lax.add, (1, *g.K), (1, *g.S), pads) / math.prod(g.K)


def _smooth_forward(B: Any, x: Any, g: _Geometry, beta: float) -> Any:
    return B.logsumexp(g.windows(B, x) * beta, axis=-1, valid=g.valid(B)) / beta


def _smooth_weights(B: Any, x: Any, g: _Geometry, beta: float) -> Any:
    """d out / d window cell: the softmax of beta x over the window's input cells."""
    return B.softmax(g.windows(B, x) * beta, axis=-1, valid=g.valid(B))


def _smooth_jvp(B: Any, x: Any, t: Any, g: _Geometry, beta: float) -> Any:
    return B.sum(_smooth_weights(B, x, g, beta) * g.windows(B, t), axis=-1)


def _smooth_vjp(B: Any, x: Any, ct: Any, g: _Geometry, beta: float) -> Any:
    return g.unwindows(B, _smooth_weights(B, x, g, beta) * B.expand_dims(ct, -1))


def _max_kinks(rng: np.random.Generator, x: TensorType) -> list:
    """Ties everywhere: values on a coarse grid (many equal cells per window), and all equal."""
    ties = rng.integers(-2, 3, size=x.shape).astype(np.float64) / 2
    return [(ties,), (np.zeros(x.shape),)]


# -- declarations ----------------------------------------------------------------------------

_DOCS = {
    "max": "Max pooling: padded cells never win; at a tie the first maximum (row-major window "
    "order) takes the whole cotangent.",
    "avg": "Average pooling: padded cells count as zeros; the divisor is the full window size.",
    "smooth": "Smooth max pooling (1/beta) log sum exp(beta x) over each window's input cells "
    "(padded cells take no part); beta finite and nonzero.",
}


def _attrs(two_d: bool, padding: bool, smooth: bool) -> dict[str, AttrSpec]:
    if two_d:
        attrs = {
            "kernel": AttrSpec("nats", check=_positive, doc="(kH, kW)"),
            "stride": AttrSpec("nat", check=_positive, doc="both spatial dims"),
        }
        if padding:
            attrs["padding"] = AttrSpec("nat", doc="both spatial dims")
    else:
        attrs = {
            "kernel": AttrSpec("nats", check=_positive, doc="one per spatial dim"),
            "stride": AttrSpec("nats", check=_positive, doc="one per spatial dim"),
            "padding": AttrSpec("nats", doc="one per spatial dim"),
        }
    if smooth:
        attrs["beta"] = AttrSpec("float", check=_beta_ok, doc="sharpness; finite, nonzero")
    return attrs


def _defpool(name: str, kind: str, *, two_d: bool, padding: bool) -> Op:
    smooth = kind == "smooth"
    where = " (x (C, H, W); kernel (kH, kW), one stride" if two_d else " (x (C, spatial...)"
    where += ", one padding)" if two_d and padding else ")" if not two_d else ", no padding)"
    op = Op(
        name,
        args=("x",),
        attrs=_attrs(two_d, padding, smooth),
        family="pool",
        doc=_DOCS[kind] + where,
    )

    geo = _geometry

    def shape(x: TensorType, **attrs: Any) -> Shape:
        return _check(x, attrs, two_d=two_d, strict_pad=kind != "avg")

    rules: dict[str, Callable[..., Any]] = {"shape": shape}
    if kind == "max":

        def forward(B: Any, x: Any, **attrs: Any) -> Any:
            return _max_forward(B, x, geo(x.shape, attrs))

        def sym(B: Any, x: Any, **attrs: Any) -> Any:
            return _max_sym(B, x, geo(x.shape, attrs))

        def jvp(B: Any, args: tuple, tangents: tuple, out: Any, **attrs: Any) -> Any:
            return _max_jvp(B, args[0], tangents[0], geo(args[0].shape, attrs))

        def vjp(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
            return (_max_vjp(B, args[0], ct, geo(args[0].shape, attrs)),)

        def lower(B: Any, x: Any, **attrs: Any) -> Any:
            return _max_lower(B, x, geo(x.shape, attrs))

        def kinks(rng: np.random.Generator, x: TensorType, **attrs: Any) -> list:
            return _max_kinks(rng, x)

        rules.update(forward=forward, sym=sym, jvp=jvp, vjp=vjp, lower=lower, kinks=kinks)
    elif kind == "avg":

        def forward(B: Any, x: Any, **attrs: Any) -> Any:
            return _avg_forward(B, x, geo(x.shape, attrs))

        def vjp(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
            return (_avg_vjp(B, args[0], ct, geo(args[0].shape, attrs)),)

        def lower(B: Any, x: Any, **attrs: Any) -> Any:
            return _avg_lower(B, x, geo(x.shape, attrs))

        rules.update(forward=forward, vjp=vjp, lower=lower)
    else:

        def forward(B: Any, x: Any, **attrs: Any) -> Any:
            return _smooth_forward(B, x, geo(x.shape, attrs), attrs["beta"])

        def jvp(B: Any, args: tuple, tangents: tuple, out: Any, **attrs: Any) -> Any:
            return _smooth_jvp(B, args[0], tangents[0], geo(args[0].shape, attrs), attrs["beta"])

        def vjp(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
            return (_smooth_vjp(B, args[0], ct, geo(args[0].shape, attrs), attrs["beta"]),)

        rules.update(forward=forward, jvp=jvp, vjp=vjp)

    for rule, fn in rules.items():
        fn.__name__ = fn.__qualname__ = f"{name}_{rule}"
        getattr(op, f"def_{rule}")(fn)
    if kind == "avg":
        deflinear(op)
    return op


max_pool = _defpool("max_pool", "max", two_d=False, padding=True)
max_pool2d = _defpool("max_pool2d", "max", two_d=True, padding=False)
max_pool2d_pad = _defpool("max_pool2d_pad", "max", two_d=True, padding=True)
avg_pool = _defpool("avg_pool", "avg", two_d=False, padding=True)
avg_pool2d = _defpool("avg_pool2d", "avg", two_d=True, padding=False)
avg_pool2d_pad = _defpool("avg_pool2d_pad", "avg", two_d=True, padding=True)
smooth_max_pool = _defpool("smooth_max_pool", "smooth", two_d=False, padding=True)
smooth_max_pool2d = _defpool("smooth_max_pool2d", "smooth", two_d=True, padding=False)

# -- global average pooling ------------------------------------------------------------------

global_avg_pool2d = Op(
    "global_avg_pool2d",
    args=("x",),
    family="pool",
    doc="The mean of each channel of x (C, H, W) over H x W: (C,).",
)


@global_avg_pool2d.def_shape
def global_avg_pool2d_shape(x: TensorType) -> Shape:
    if x.rank != 3 or x.shape[1] * x.shape[2] == 0:
        raise ShapeError(f"needs x (C, H, W) with H, W > 0, got {x}")
    return (x.shape[0],)


@global_avg_pool2d.def_forward
def global_avg_pool2d_forward(B: Any, x: Any) -> Any:
    return B.sum(x, axis=(1, 2)) / (x.shape[1] * x.shape[2])


@global_avg_pool2d.def_vjp
def global_avg_pool2d_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    x = args[0]
    g = B.reshape(ct / (x.shape[1] * x.shape[2]), (-1, 1, 1))
    return (B.broadcast_to(g, x.shape),)


deflinear(global_avg_pool2d)

__all__ = [
    "avg_pool",
    "avg_pool2d",
    "avg_pool2d_pad",
    "global_avg_pool2d",
    "max_pool",
    "max_pool2d",
    "max_pool2d_pad",
    "smooth_max_pool",
    "smooth_max_pool2d",
]
