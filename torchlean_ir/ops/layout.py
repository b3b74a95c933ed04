"""TorchLean's fixed 3-D permutations and vector concatenation. All are linear."""

from __future__ import annotations

from typing import Any

from .._errors import ShapeError
from .._registry import Op, deflinear
from .._types import Shape, TensorType


def _deftranspose3d(name: str, perm: tuple[int, int, int], doc: str) -> Op:
    """A permutation of the axes of a rank-3 tensor; its VJP is the inverse permutation."""
    inverse = tuple(perm.index(i) for i in range(3))
    op = Op(name, args=("x",), family="shape", doc=doc)

    def shape(x: TensorType) -> Shape:
        if x.rank != 3:
            raise ShapeError(f"needs a rank-3 tensor (a, b, c), got {x}")
        return tuple(x.shape[i] for i in perm)

    def forward(B: Any, x: Any) -> Any:
        return B.transpose(x, perm)

    def vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
        return (B.transpose(ct, inverse),)

    for fn, rule in ((shape, "shape"), (forward, "forward"), (vjp, "vjp")):
        fn.__name__ = fn.__qualname__ = f"{name}_{rule}"
    op.def_shape(shape)
    op.def_forward(forward)
    op.def_vjp(vjp)
    return deflinear(op)


transpose3d_first_to_last = _deftranspose3d(
    "transpose3d_first_to_last", (1, 2, 0), "(a, b, c) -> (b, c, a) (PyTorch: x.permute(1, 2, 0))."
)
transpose3d_last_to_first = _deftranspose3d(
    "transpose3d_last_to_first", (2, 0, 1), "(a, b, c) -> (c, a, b) (PyTorch: x.permute(2, 0, 1))."
)
transpose3d_last_two = _deftranspose3d(
    "transpose3d_last_two", (0, 2, 1), "(a, b, c) -> (a, c, b) (PyTorch: x.transpose(1, 2))."
)

# -- concat_vectors --------------------------------------------------------------------------

concat_vectors = Op(
    "concat_vectors",
    args=("a", "b"),
    family="shape",
    doc="Concatenate two vectors (n,) and (m,) into (n + m,) (PyTorch: torch.cat([a, b])).",
)


@concat_vectors.def_shape
def concat_vectors_shape(a: TensorType, b: TensorType) -> Shape:
    if a.rank != 1 or b.rank != 1:
        raise ShapeError(f"needs two vectors, got {a} and {b}")
    return (a.shape[0] + b.shape[0],)


@concat_vectors.def_forward
def concat_vectors_forward(B: Any, a: Any, b: Any) -> Any:
    return B.concatenate([a, b], axis=0)


@concat_vectors.def_vjp
def concat_vectors_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    n = args[0].shape[0]
    return (ct[:n], ct[n:])


deflinear(concat_vectors)

__all__ = [
    "concat_vectors",
    "transpose3d_first_to_last",
    "transpose3d_last_to_first",
    "transpose3d_last_two",
]
