"""Reductions: reduce_sum / reduce_mean over one axis (dropped), sum over everything."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op, deflinear
from .._types import Shape, TensorType


def _axis_shape(x: TensorType, axis: int, *, nonempty: bool) -> Shape:
    if axis >= x.rank:
        raise ShapeError(f"axis {axis} out of range for {x} (rank {x.rank})")
    if nonempty and x.shape[axis] == 0:
        raise ShapeError(f"axis {axis} of {x} is empty; the mean is undefined")
    return x.shape[:axis] + x.shape[axis + 1 :]


def _unreduce(B: Any, ct: Any, shape: Shape, axis: int) -> Any:
    return B.broadcast_to(B.expand_dims(ct, axis), shape)


reduce_sum = Op(
    "reduce_sum",
    args=("x",),
    attrs={"axis": AttrSpec("nat")},
    family="reduce",
    doc="Sum over one axis; the axis is dropped (keepdim = False).",
)


@reduce_sum.def_shape
def reduce_sum_shape(x: TensorType, *, axis: int) -> Shape:
    return _axis_shape(x, axis, nonempty=False)


@reduce_sum.def_forward
def reduce_sum_forward(B: Any, x: Any, *, axis: int) -> Any:
    return B.sum(x, axis=axis)


@reduce_sum.def_vjp
def reduce_sum_vjp(B: Any, args: tuple, out: Any, ct: Any, *, axis: int) -> tuple:
    return (_unreduce(B, ct, args[0].shape, axis),)


deflinear(reduce_sum)

reduce_mean = Op(
    "reduce_mean",
    args=("x",),
    attrs={"axis": AttrSpec("nat")},
    family="reduce",
    doc="Mean over one non-empty axis; the axis is dropped.",
)


@reduce_mean.def_shape
def reduce_mean_shape(x: TensorType, *, axis: int) -> Shape:
    return _axis_shape(x, axis, nonempty=True)


@reduce_mean.def_forward
def reduce_mean_forward(B: Any, x: Any, *, axis: int) -> Any:
    return B.sum(x, axis=axis) / x.shape[axis]


@reduce_mean.def_vjp
def reduce_mean_vjp(B: Any, args: tuple, out: Any, ct: Any, *, axis: int) -> tuple:
    n = args[0].shape[axis]
    return (_unreduce(B, ct / n, args[0].shape, axis),)


deflinear(reduce_mean)

sum_ = Op("sum", args=("x",), family="reduce", doc="Sum of all elements, a scalar.")


@sum_.def_shape
def sum_shape(x: TensorType) -> Shape:
    return ()


@sum_.def_forward
def sum_forward(B: Any, x: Any) -> Any:
    return B.sum(x)


@sum_.def_vjp
def sum_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.broadcast_to(ct, args[0].shape),)


deflinear(sum_)

__all__ = ["reduce_mean", "reduce_sum", "sum_"]
