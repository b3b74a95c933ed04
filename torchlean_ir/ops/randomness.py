"""Seeded randomness: rand_uniform and bernoulli_mask (SplitMix64, ``docs/ops.md``).

The draws depend only on the ``seed`` attribute, the node's position in the graph (the counter)
and the output shape, through the backend function ``B.rand_uniform(seed, counter, shape, dtype)``
(reference: :mod:`torchlean_ir.backends._random`), so the reference interpreter, the compiled
function and the eager session produce the same bits. Nothing here receives gradient.
"""

from __future__ import annotations

from typing import Any

from .._attrs import AttrSpec
from .._errors import ShapeError
from .._registry import Op
from .._types import DType, Shape, TensorType

_SEED = AttrSpec(
    "nat",
    check=lambda s: None if s < 1 << 64 else "must be below 2^64",
    doc="the seed (a 64-bit natural); the node's position is added to it modulo 2^64",
)

rand_uniform = Op(
    "rand_uniform",
    attrs={
        "shape": AttrSpec("shape", doc="the output shape"),
        "seed": _SEED,
        "dtype": AttrSpec(
            "str",
            default="f32",
            check=lambda d: None if d in ("f32", "f64") else "must be 'f32' or 'f64'",
            doc="the float dtype (the builder sets its own)",
        ),
    },
    needs_position=True,
    family="random",
    doc=(
        "Uniform draws in [0, 1): u = (splitmix64(key + i) mod 2^32) / 2^32 with "
        "key = splitmix64(seed + position) and i the row-major index. No gradient."
    ),
)


@rand_uniform.def_shape
def rand_uniform_shape(*, shape: Shape, seed: int, dtype: str) -> TensorType:
    return TensorType(shape, DType(dtype))


@rand_uniform.def_forward
def rand_uniform_forward(B: Any, *, shape: Shape, seed: int, dtype: str, _position: int) -> Any:
    # rounded in the node's dtype: an f32 graph draws the same bits on every backend
    return B.rand_uniform(seed, _position, shape, dtype)


@rand_uniform.def_jvp
def rand_uniform_jvp(B: Any, args: tuple, tangents: tuple, out: Any, **params: Any) -> Any:
    return B.zeros(params["shape"])


@rand_uniform.def_vjp
def rand_uniform_vjp(B: Any, args: tuple, out: Any, ct: Any, **params: Any) -> tuple:
    return ()


bernoulli_mask = Op(
    "bernoulli_mask",
    args=("keep_prob",),
    attrs={"shape": AttrSpec("shape", doc="the output shape"), "seed": _SEED},
    nondiff=("keep_prob",),
    domain={"keep_prob": "unit"},
    needs_position=True,
    family="random",
    doc=(
        "1 where keep_prob > u, else 0, with u the rand_uniform draws of this node (no "
        "rescaling by 1/keep_prob). keep_prob is a scalar; no gradient to anything."
    ),
)


@bernoulli_mask.def_shape
def bernoulli_mask_shape(keep_prob: TensorType, *, shape: Shape, seed: int) -> Shape:
    if keep_prob.rank != 0:
        raise ShapeError(f"keep_prob must be a scalar, got {keep_prob}")
    return shape


@bernoulli_mask.def_forward
def bernoulli_mask_forward(
    B: Any, keep_prob: Any, *, shape: Shape, seed: int, _position: int
) -> Any:
    u = B.rand_uniform(seed, _position, shape)
    return B.to_float(B.broadcast_to(keep_prob, shape) > u)


@bernoulli_mask.def_jvp
def bernoulli_mask_jvp(
    B: Any, args: tuple, tangents: tuple, out: Any, *, shape: Shape, seed: int, _position: int
) -> Any:
    return B.zeros(shape)


@bernoulli_mask.def_vjp
def bernoulli_mask_vjp(
    B: Any, args: tuple, out: Any, ct: Any, *, shape: Shape, seed: int, _position: int
) -> tuple:
    return (None,)


__all__ = ["bernoulli_mask", "rand_uniform"]
