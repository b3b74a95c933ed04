"""Linear algebra: matmul, bmm, linear."""

from __future__ import annotations

from typing import Any

from .._errors import ShapeError
from .._registry import Op
from .._types import Shape, TensorType

matmul = Op("matmul", args=("a", "b"), family="linalg", doc="Matrix product (m, n) @ (n, p).")


@matmul.def_shape
def matmul_shape(a: TensorType, b: TensorType) -> Shape:
    if a.rank != 2 or b.rank != 2:
        raise ShapeError(f"needs two matrices, got {a} and {b}")
    if a.shape[1] != b.shape[0]:
        raise ShapeError(f"inner dims differ: {a} @ {b} needs (m, n) @ (n, p)")
    return (a.shape[0], b.shape[1])


@matmul.def_forward
def matmul_forward(B: Any, a: Any, b: Any) -> Any:
    return B.matmul(a, b)


@matmul.def_jvp
def matmul_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    a, b = args
    ta, tb = tangents
    return B.matmul(ta, b) + B.matmul(a, tb)


@matmul.def_vjp
def matmul_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    return (B.matmul(ct, B.transpose(b, (1, 0))), B.matmul(B.transpose(a, (1, 0)), ct))


bmm = Op(
    "bmm",
    args=("a", "b"),
    family="linalg",
    doc="Batched matrix product (B, m, n) @ (B, n, p).",
)


@bmm.def_shape
def bmm_shape(a: TensorType, b: TensorType) -> Shape:
    if a.rank != 3 or b.rank != 3:
        raise ShapeError(f"needs two rank-3 tensors, got {a} and {b}")
    if a.shape[0] != b.shape[0]:
        raise ShapeError(f"batch dims differ: {a} and {b}")
    if a.shape[2] != b.shape[1]:
        raise ShapeError(f"inner dims differ: {a} @ {b} needs (B, m, n) @ (B, n, p)")
    return (a.shape[0], a.shape[1], b.shape[2])


@bmm.def_forward
def bmm_forward(B: Any, a: Any, b: Any) -> Any:
    return B.matmul(a, b)


@bmm.def_jvp
def bmm_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    a, b = args
    ta, tb = tangents
    return B.matmul(ta, b) + B.matmul(a, tb)


@bmm.def_vjp
def bmm_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    return (B.matmul(ct, B.swapaxes(b, 1, 2)), B.matmul(B.swapaxes(a, 1, 2), ct))


linear = Op(
    "linear",
    args=("W", "b", "x"),
    family="linalg",
    doc="W x + b with W (out, in), b (out,), x (in,).",
)


@linear.def_shape
def linear_shape(W: TensorType, b: TensorType, x: TensorType) -> Shape:
    if W.rank != 2 or b.rank != 1 or x.rank != 1:
        raise ShapeError(f"needs W (out, in), b (out,), x (in,), got {W}, {b}, {x}")
    if W.shape[0] != b.shape[0] or W.shape[1] != x.shape[0]:
        raise ShapeError(
            f"needs W (out, in), b (out,), x (in,) with matching dims, got {W}, {b}, {x}"
        )
    return (W.shape[0],)


@linear.def_forward
def linear_forward(B: Any, W: Any, b: Any, x: Any) -> Any:
    return B.matmul(W, x) + b


@linear.def_jvp
def linear_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    W, _, x = args
    tW, tb, tx = tangents
    return B.matmul(tW, x) + B.matmul(W, tx) + tb


@linear.def_vjp
def linear_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    W, _, x = args
    return (B.einsum("i,j->ij", ct, x), ct, B.matmul(B.transpose(W, (1, 0)), ct))


__all__ = ["bmm", "linear", "matmul"]
