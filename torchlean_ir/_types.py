"""Shapes, dtypes and value types."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

Shape = tuple[int, ...]

#: The largest static index value a graph may hold (the int64 range the interpreters use).
#: Larger values would be out of range for any shape anyway; runtime index values above it are
#: accepted and read as this value (out of range: they read 0 and send no gradient).
NAT_MAX = (1 << 63) - 1


def is_nat(v: object) -> bool:
    """``v`` is a Python int (not a bool) in ``0 .. NAT_MAX``: a valid static index value."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= NAT_MAX


class DType(enum.Enum):
    """Element type of a value.

    ``F32`` and ``F64`` are the float types of differentiable values; ``NAT`` is the type of
    index inputs (non-negative integers, never differentiated); ``BOOL`` only appears inside
    attributes (attention masks).
    """

    F32 = "f32"
    F64 = "f64"
    NAT = "nat"
    BOOL = "bool"

    @property
    def is_float(self) -> bool:
        return self in (DType.F32, DType.F64)

    @property
    def numpy_name(self) -> str:
        return {"f32": "float32", "f64": "float64", "nat": "int64", "bool": "bool"}[self.value]

    def __str__(self) -> str:
        return self.value


_DTYPE_ALIASES = {
    "f32": DType.F32,
    "float32": DType.F32,
    "f64": DType.F64,
    "float64": DType.F64,
    "nat": DType.NAT,
    "bool": DType.BOOL,
}


def as_dtype(d: DType | str | object) -> DType:
    """Accept a :class:`DType`, a short name (``"f32"``), a numpy name (``"float32"``) or a
    numpy dtype."""
    if isinstance(d, DType):
        return d
    key = str(getattr(d, "name", d))
    try:
        return _DTYPE_ALIASES[key]
    except KeyError:
        raise ValueError(f"unknown dtype {d!r}; expected one of f32, f64") from None


def as_shape(shape: object, what: str = "shape") -> Shape:
    """Validate and normalise a shape: a tuple of non-negative Python ints."""
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, tuple | list):
        raise ValueError(f"{what} must be a tuple of non-negative ints, got {shape!r}")
    out = []
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"{what} must be a tuple of non-negative ints, got {tuple(shape)!r}")
        out.append(int(d))
    return tuple(out)


def shape_size(shape: Shape) -> int:
    return math.prod(shape)


def format_shape(shape: Shape) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


@dataclass(frozen=True, slots=True)
class TensorType:
    """The type of a value: a shape and a dtype. Prints short, like ``f32[3,4]``."""

    shape: Shape
    dtype: DType = DType.F32

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return shape_size(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype.value}{format_shape(self.shape)}"


@dataclass(frozen=True, slots=True)
class IndexType:
    """The type of an index input: a scalar (``nat[]``) or a vector (``nat[k]``) of naturals."""

    shape: Shape

    @property
    def size(self) -> int:
        return shape_size(self.shape)

    def __str__(self) -> str:
        return f"nat{format_shape(self.shape)}"
