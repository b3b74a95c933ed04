"""Gathers and scatter-adds with a static index (TorchLean's ``Fin n``: an attribute checked
against the shape) and the runtime vector gather ``gather_vec_nat``. All are linear; no index
ever receives gradient."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import IndexArg, Op, deflinear
from .._types import IndexType, Shape, TensorType


def _in_range(index: int, n: int, x: TensorType) -> None:
    if index >= n:
        raise ShapeError(f"index {index} out of range for dim 0 of {x} (size {n})")


def _one_hot_rows(B: Any, v: Any, index: int, n: int) -> Any:
    """A zero array of ``n`` rows with ``v`` (one row, shape ``v.shape``) at row ``index``."""
    row = B.reshape(v, (1, *v.shape))
    return B.pad(row, [(index, n - index - 1)] + [(0, 0)] * v.ndim)


_INDEX = AttrSpec("nat", doc="the static row index (TorchLean's Fin n)")

# -- gather_scalar, gather_row ---------------------------------------------------------------

gather_scalar = Op(
    "gather_scalar",
    args=("x",),
    attrs={"index": _INDEX},
    family="index",
    doc="x[index] for a vector x and a static in-range index.",
)


@gather_scalar.def_shape
def gather_scalar_shape(x: TensorType, *, index: int) -> Shape:
    if x.rank != 1:
        raise ShapeError(f"needs a vector, got {x}")
    _in_range(index, x.shape[0], x)
    return ()


@gather_scalar.def_forward
def gather_scalar_forward(B: Any, x: Any, *, index: int) -> Any:
    return x[index]


@gather_scalar.def_vjp
def gather_scalar_vjp(B: Any, args: tuple, out: Any, ct: Any, *, index: int) -> tuple:
    return (_one_hot_rows(B, ct, index, args[0].shape[0]),)


deflinear(gather_scalar)

gather_row = Op(
    "gather_row",
    args=("x",),
    attrs={"index": _INDEX},
    family="index",
    doc="Row x[index] of a matrix for a static in-range index.",
)


@gather_row.def_shape
def gather_row_shape(x: TensorType, *, index: int) -> Shape:
    if x.rank != 2:
        raise ShapeError(f"needs a matrix, got {x}")
    _in_range(index, x.shape[0], x)
    return (x.shape[1],)


@gather_row.def_forward
def gather_row_forward(B: Any, x: Any, *, index: int) -> Any:
    return x[index]


@gather_row.def_vjp
def gather_row_vjp(B: Any, args: tuple, out: Any, ct: Any, *, index: int) -> tuple:
    return (_one_hot_rows(B, ct, index, args[0].shape[0]),)


deflinear(gather_row)

# -- gather_vec_nat (runtime indices) --------------------------------------------------------

gather_vec_nat = Op(
    "gather_vec_nat",
    args=("x",),
    index_args=(IndexArg("idx", "vector"),),
    family="index",
    doc="x[idx[j]] for a vector x and a runtime nat vector idx (k,); 0 where out of range.",
)


@gather_vec_nat.def_shape
def gather_vec_nat_shape(x: TensorType, *, idx: IndexType) -> Shape:
    if x.rank != 1:
        raise ShapeError(f"needs a vector, got {x}")
    return (idx.shape[0],)


@gather_vec_nat.def_forward
def gather_vec_nat_forward(B: Any, x: Any, *, idx: Any) -> Any:
    return B.gather(x, idx, axis=0)


@gather_vec_nat.def_vjp
def gather_vec_nat_vjp(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
    return (B.scatter_add(B.zeros_like(args[0]), idx, ct, axis=0),)


deflinear(gather_vec_nat)

# -- scatter_add_vec, scatter_add_row --------------------------------------------------------

scatter_add_vec = Op(
    "scatter_add_vec",
    args=("x", "v"),
    attrs={"index": _INDEX},
    family="index",
    doc="A copy of the vector x with x[index] += v (v a scalar, index static and in range).",
)


@scatter_add_vec.def_shape
def scatter_add_vec_shape(x: TensorType, v: TensorType, *, index: int) -> Shape:
    if x.rank != 1 or v.rank != 0:
        raise ShapeError(f"needs a vector x and a scalar v, got {x} and {v}")
    _in_range(index, x.shape[0], x)
    return x.shape


@scatter_add_vec.def_forward
def scatter_add_vec_forward(B: Any, x: Any, v: Any, *, index: int) -> Any:
    return x + _one_hot_rows(B, v, index, x.shape[0])


@scatter_add_vec.def_vjp
def scatter_add_vec_vjp(B: Any, args: tuple, out: Any, ct: Any, *, index: int) -> tuple:
    return (ct, ct[index])


deflinear(scatter_add_vec)

scatter_add_row = Op(
    "scatter_add_row",
    args=("x", "v"),
    attrs={"index": _INDEX},
    family="index",
    doc="A copy of the matrix x with row x[index] += v (v (cols,), index static and in range).",
)


@scatter_add_row.def_shape
def scatter_add_row_shape(x: TensorType, v: TensorType, *, index: int) -> Shape:
    if x.rank != 2 or v.rank != 1 or v.shape[0] != x.shape[1]:
        raise ShapeError(f"needs a matrix x (rows, cols) and a row v (cols,), got {x} and {v}")
    _in_range(index, x.shape[0], x)
    return x.shape


@scatter_add_row.def_forward
def scatter_add_row_forward(B: Any, x: Any, v: Any, *, index: int) -> Any:
    return x + _one_hot_rows(B, v, index, x.shape[0])


@scatter_add_row.def_vjp
def scatter_add_row_vjp(B: Any, args: tuple, out: Any, ct: Any, *, index: int) -> tuple:
    return (ct, ct[index])


deflinear(scatter_add_row)

__all__ = [
    "gather_row",
    "gather_scalar",
    "gather_vec_nat",
    "scatter_add_row",
    "scatter_add_vec",
]
