"""Gathers with runtime nat indices (index inputs), and index inputs read as floats. An
out-of-range index reads 0 (a zero row) and sends no gradient anywhere; the index itself never
receives gradient."""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import IndexArg, Op, deflinear
from .._types import DType, IndexType, Shape, TensorType

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

# -- nat_to_float, nat_vec_to_float (index inputs as data) ------------------------------------

_DTYPE = AttrSpec(
    "str",
    default="f32",
    check=lambda d: None if d in ("f32", "f64") else "must be 'f32' or 'f64'",
    doc="the float dtype (the builder sets its own)",
)


def _nat_float(name: str, kind: str, what: str) -> Op:
    """The conversion of a runtime nat ``kind`` (scalar or vector) to floats: the value itself,
    a constant as far as differentiation goes (the index has no tangent and gets no cotangent)."""
    op = Op(
        name,
        index_args=(IndexArg("i", kind),),  # type: ignore[arg-type]
        attrs={"dtype": _DTYPE},
        family="index",
        doc=f"{what} as a float (exact up to 2^24 in f32, 2^53 in f64). No gradient: "
        "an index input is not differentiable (an attention mask used as data: "
        "(1 - mask) * c).",
    )

    @op.def_shape
    def shape(*, i: IndexType, dtype: str) -> TensorType:
        return TensorType(i.shape, DType(dtype))

    @op.def_forward
    def forward(B: Any, *, i: Any, dtype: str) -> Any:
        return B.to_float(i)

    @op.def_jvp
    def jvp(B: Any, args: tuple, tangents: tuple, out: Any, **params: Any) -> Any:
        return B.zeros(params["i"].shape)

    @op.def_vjp
    def vjp(B: Any, args: tuple, out: Any, ct: Any, **params: Any) -> tuple:
        return ()

    return op


nat_to_float = _nat_float("nat_to_float", "scalar", "A runtime nat i")
nat_vec_to_float = _nat_float("nat_vec_to_float", "vector", "A runtime nat vector i (k,)")

__all__ = ["gather_rows_nat", "gather_scalar_nat", "nat_to_float", "nat_vec_to_float"]
