"""Shape ops: broadcast, reshape, transposes, concatenation and slicing. All are linear."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op, deflinear
from .._types import Shape, TensorType, format_shape, shape_size

# -- broadcast_to ----------------------------------------------------------------------------

broadcast_to = Op(
    "broadcast_to",
    args=("x",),
    attrs={"shape": AttrSpec("shape", doc="the target shape")},
    family="shape",
    doc=(
        "The only way to broadcast. Allowed: scalar to any shape; new leading dims; a dim of 1 "
        "to n; equal dims. The VJP sums over the broadcast axes."
    ),
)


def broadcast_axes(src: Shape, dst: Shape) -> tuple[int, tuple[int, ...]]:
    """(number of new leading axes, axes of ``dst`` where a dim of 1 was stretched)."""
    lead = len(dst) - len(src)
    stretched = tuple(
        lead + i for i, (s, d) in enumerate(zip(src, dst[lead:], strict=True)) if s == 1 and d != 1
    )
    return lead, stretched


@broadcast_to.def_shape
def broadcast_to_shape(x: TensorType, *, shape: Shape) -> Shape:
    lead = len(shape) - len(x.shape)
    if lead < 0:
        raise ShapeError(f"cannot broadcast {x} to the lower-rank shape {format_shape(shape)}")
    for i, (s, d) in enumerate(zip(x.shape, shape[lead:], strict=True)):
        if s != d and s != 1:
            raise ShapeError(
                f"cannot broadcast {x} to {format_shape(shape)}: dim {i} is {s}, "
                f"target {d} (only a dim of 1 stretches)"
            )
    return shape


@broadcast_to.def_forward
def broadcast_to_forward(B: Any, x: Any, *, shape: Shape) -> Any:
    return B.broadcast_to(x, shape)


@broadcast_to.def_vjp
def broadcast_to_vjp(B: Any, args: tuple, out: Any, ct: Any, *, shape: Shape) -> tuple:
    src = args[0].shape
    lead, stretched = broadcast_axes(src, shape)
    g = B.sum(ct, axis=stretched, keepdims=True) if stretched else ct
    if lead:
        g = B.sum(g, axis=tuple(range(lead)))
    return (B.reshape(g, src),)


deflinear(broadcast_to)

# -- reshape, flatten ------------------------------------------------------------------------

reshape = Op(
    "reshape",
    args=("x",),
    attrs={"shape": AttrSpec("shape")},
    family="shape",
    doc="Row-major reshape to a shape with the same element count.",
)


@reshape.def_shape
def reshape_shape(x: TensorType, *, shape: Shape) -> Shape:
    if shape_size(shape) != x.size:
        raise ShapeError(
            f"cannot reshape {x} ({x.size} elements) to {format_shape(shape)} "
            f"({shape_size(shape)} elements)"
        )
    return shape


@reshape.def_forward
def reshape_forward(B: Any, x: Any, *, shape: Shape) -> Any:
    return B.reshape(x, shape)


@reshape.def_vjp
def reshape_vjp(B: Any, args: tuple, out: Any, ct: Any, *, shape: Shape) -> tuple:
    return (B.reshape(ct, args[0].shape),)


deflinear(reshape)

flatten = Op("flatten", args=("x",), family="shape", doc="Reshape to a vector (size,).")


@flatten.def_shape
def flatten_shape(x: TensorType) -> Shape:
    return (x.size,)


@flatten.def_forward
def flatten_forward(B: Any, x: Any) -> Any:
    return B.reshape(x, (-1,))


@flatten.def_vjp
def flatten_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.reshape(ct, args[0].shape),)


deflinear(flatten)

# -- transposes ------------------------------------------------------------------------------

transpose2d = Op(
    "transpose2d", args=("x",), family="shape", doc="Matrix transpose (m, n) -> (n, m)."
)


@transpose2d.def_shape
def transpose2d_shape(x: TensorType) -> Shape:
    if x.rank != 2:
        raise ShapeError(f"needs a matrix (rank 2), got {x}")
    return (x.shape[1], x.shape[0])


@transpose2d.def_forward
def transpose2d_forward(B: Any, x: Any) -> Any:
    return B.transpose(x, (1, 0))


@transpose2d.def_vjp
def transpose2d_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.transpose(ct, (1, 0)),)


deflinear(transpose2d)

swap_adjacent_at_depth = Op(
    "swap_adjacent_at_depth",
    args=("x",),
    attrs={"depth": AttrSpec("nat", doc="swap axes depth and depth + 1")},
    family="shape",
    doc="Swap axes d and d+1 (PyTorch: x.transpose(d, d+1)).",
)


@swap_adjacent_at_depth.def_shape
def swap_adjacent_at_depth_shape(x: TensorType, *, depth: int) -> Shape:
    if depth + 1 >= x.rank:
        raise ShapeError(f"depth {depth} needs rank >= {depth + 2}, got {x}")
    s = list(x.shape)
    s[depth], s[depth + 1] = s[depth + 1], s[depth]
    return tuple(s)


@swap_adjacent_at_depth.def_forward
def swap_adjacent_at_depth_forward(B: Any, x: Any, *, depth: int) -> Any:
    return B.swapaxes(x, depth, depth + 1)


@swap_adjacent_at_depth.def_vjp
def swap_adjacent_at_depth_vjp(B: Any, args: tuple, out: Any, ct: Any, *, depth: int) -> tuple:
    return (B.swapaxes(ct, depth, depth + 1),)


deflinear(swap_adjacent_at_depth)

# -- concat, slice (dim 0) -------------------------------------------------------------------

concat = Op(
    "concat",
    args=("xs",),
    variadic=True,
    min_args=2,
    family="shape",
    doc="Concatenate two or more tensors along dim 0 (trailing dims equal).",
)


@concat.def_shape
def concat_shape(*xs: TensorType) -> Shape:
    first = xs[0]
    if first.rank == 0:
        raise ShapeError(f"needs tensors of rank >= 1, got {first}")
    for i, t in enumerate(xs[1:], start=1):
        if t.rank == 0 or t.shape[1:] != first.shape[1:]:
            want = "[n," + ",".join(map(str, first.shape[1:])) + "]" if first.rank > 1 else "[n]"
            raise ShapeError(f"argument {i} is {t}; every argument must be {want}")
    return (sum(t.shape[0] for t in xs), *first.shape[1:])


@concat.def_forward
def concat_forward(B: Any, *xs: Any) -> Any:
    return B.concatenate(xs, axis=0)


@concat.def_vjp
def concat_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    cts, start = [], 0
    for x in args:
        n = x.shape[0]
        cts.append(ct[start : start + n])
        start += n
    return tuple(cts)


deflinear(concat)

slice_ = Op(
    "slice",
    args=("x",),
    attrs={"start": AttrSpec("nat"), "length": AttrSpec("nat")},
    family="shape",
    doc="x[start : start + length] along dim 0.",
)


@slice_.def_shape
def slice_shape(x: TensorType, *, start: int, length: int) -> Shape:
    if x.rank == 0:
        raise ShapeError(f"needs rank >= 1, got {x}")
    if start + length > x.shape[0]:
        raise ShapeError(f"start {start} + length {length} exceeds dim 0 of {x}")
    return (length, *x.shape[1:])


@slice_.def_forward
def slice_forward(B: Any, x: Any, *, start: int, length: int) -> Any:
    return x[start : start + length]


@slice_.def_vjp
def slice_vjp(B: Any, args: tuple, out: Any, ct: Any, *, start: int, length: int) -> tuple:
    n = args[0].shape[0]
    widths = [(start, n - start - length)] + [(0, 0)] * (ct.ndim - 1)
    return (B.pad(ct, widths),)


deflinear(slice_)

__all__ = [
    "broadcast_axes",
    "broadcast_to",
    "concat",
    "flatten",
    "reshape",
    "slice_",
    "swap_adjacent_at_depth",
    "transpose2d",
]
