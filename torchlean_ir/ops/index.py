"""Gathers with runtime nat indices (index inputs). An out-of-range index reads 0 (a zero row)
and sends no gradient anywhere; the index itself never receives gradient."""

from __future__ import annotations

from typing import Any

from .._errors import ShapeError
from .._registry import IndexArg, Op, deflinear
from .._types import IndexType, Shape, TensorType

gather_scalar_nat = Op(
    "gather_scalar_nat",
    args=("x",),
    index_args=(IndexArg("i", "scalar"),),
    family="index",
    doc="x[i] for a vector x and a runtime nat i; 0 when i is out of range.",
)


@gather_scalar_nat.def_shape
def gather_scalar_nat_shape(x: TensorType, *, i: IndexType) -> Shape:
    if x.rank != 1:
        raise ShapeError(f"needs a vector, got {x}")
    return ()


@gather_scalar_nat.def_forward
def gather_scalar_nat_forward(B: Any, x: Any, *, i: Any) -> Any:
    return B.gather(x, i, axis=0)


@gather_scalar_nat.def_vjp
def gather_scalar_nat_vjp(B: Any, args: tuple, out: Any, ct: Any, *, i: Any) -> tuple:
    return (B.scatter_add(B.zeros_like(args[0]), i, ct, axis=0),)


deflinear(gather_scalar_nat)

gather_rows_nat = Op(
    "gather_rows_nat",
    args=("x",),
    index_args=(IndexArg("idx", "vector"),),
    family="index",
    doc="Rows x[idx[j]] of a matrix for a runtime nat vector idx (k,); zero rows out of range.",
)


@gather_rows_nat.def_shape
def gather_rows_nat_shape(x: TensorType, *, idx: IndexType) -> Shape:
    if x.rank != 2:
        raise ShapeError(f"needs a matrix, got {x}")
    return (idx.shape[0], x.shape[1])


@gather_rows_nat.def_forward
def gather_rows_nat_forward(B: Any, x: Any, *, idx: Any) -> Any:
    return B.gather(x, idx, axis=0)


@gather_rows_nat.def_vjp
def gather_rows_nat_vjp(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
    return (B.scatter_add(B.zeros_like(args[0]), idx, ct, axis=0),)


deflinear(gather_rows_nat)

__all__ = ["gather_rows_nat", "gather_scalar_nat"]
