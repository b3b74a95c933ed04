"""Typed, hashable op attributes.

An op declares an attribute schema (name -> :class:`AttrSpec`); a node stores its attributes as
an :class:`Attrs` record (a frozen, sorted mapping) whose values are plain hashable Python data:
``int``, ``float``, ``bool``, ``str``, tuples of those, or a :class:`ConstArray` for tensor-valued
attributes (the literal of ``const``, the mask of attention).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._errors import AttrError
from ._types import DType, Shape, as_shape, format_shape, shape_size

AttrValue = Any  # int | float | bool | str | tuple[...] | ConstArray


@dataclass(frozen=True, slots=True)
class ConstArray:
    """An immutable, hashable tensor literal stored as little-endian bytes."""

    dtype: DType
    shape: Shape
    data: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, DType):
            raise AttrError(f"tensor literal dtype must be a DType, got {self.dtype!r}")
        try:
            object.__setattr__(self, "shape", as_shape(self.shape, "tensor literal shape"))
        except ValueError as e:
            raise AttrError(str(e)) from None
        if not isinstance(self.data, bytes):
            if not isinstance(self.data, bytearray | memoryview):
                raise AttrError(
                    f"tensor literal data must be bytes, got {type(self.data).__name__}"
                )
            object.__setattr__(self, "data", bytes(self.data))
        itemsize = np.dtype(self.dtype.numpy_name).itemsize
        if self.dtype == DType.BOOL and self.data.strip(b"\x00\x01"):
            raise AttrError("a bool tensor literal has one byte 0 or 1 per element")
        if len(self.data) != shape_size(self.shape) * itemsize:
            raise AttrError(
                f"tensor literal {self.dtype}{format_shape(self.shape)} needs "
                f"{shape_size(self.shape) * itemsize} bytes, got {len(self.data)}"
            )

    @staticmethod
    def from_numpy(value: object, dtype: DType | None = None) -> ConstArray:
        arr = np.asarray(value)
        if dtype is None:
            if arr.dtype == np.bool_:
                dtype = DType.BOOL
            elif arr.dtype == np.float32:
                dtype = DType.F32
            else:
                dtype = DType.F64
        np_dtype = np.dtype(dtype.numpy_name).newbyteorder("<")
        arr = np.ascontiguousarray(arr, dtype=np_dtype).reshape(arr.shape)  # keeps 0-d as 0-d
        return ConstArray(dtype, tuple(int(d) for d in arr.shape), arr.tobytes())

    def to_numpy(self) -> np.ndarray:
        np_dtype = np.dtype(self.dtype.numpy_name).newbyteorder("<")
        arr = np.frombuffer(self.data, dtype=np_dtype).reshape(self.shape)
        return arr.astype(np.dtype(self.dtype.numpy_name))

    def __str__(self) -> str:
        return f"<{self.dtype}{format_shape(self.shape)}>"


class Attrs(Mapping[str, AttrValue]):
    """A frozen, hashable mapping of attribute names to values, kept sorted by name."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, AttrValue] | None = None) -> None:
        self._items: tuple[tuple[str, AttrValue], ...] = tuple(sorted((items or {}).items()))
        self._hash: int | None = None

    def __getitem__(self, key: str) -> AttrValue:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self._items)
        return self._hash

    def __repr__(self) -> str:
        return "Attrs(" + ", ".join(f"{k}={v!r}" for k, v in self._items) + ")"


REQUIRED = object()


def _is_int(v: object) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _coerce_float(v: object) -> float:
    if isinstance(v, bool | np.bool_) or not isinstance(v, int | float | np.integer | np.floating):
        raise TypeError
    f = float(v)
    if math.isnan(f):
        raise ValueError("NaN is not a valid attribute value")
    return f + 0.0  # -0.0 becomes 0.0: equal attributes must encode (and hash) equally


def _coerce(kind: str, v: object) -> AttrValue:
    """Coerce ``v`` to the canonical Python value of attribute kind ``kind``."""
    if kind in ("int", "nat"):
        if not _is_int(v) or (kind == "nat" and int(v) < 0):  # type: ignore[arg-type]
            raise TypeError
        return int(v)  # type: ignore[arg-type]
    if kind == "float":
        return _coerce_float(v)
    if kind == "bool":
        if not isinstance(v, bool | np.bool_):
            raise TypeError
        return bool(v)
    if kind == "str":
        if not isinstance(v, str):
            raise TypeError
        return v
    if kind in ("ints", "nats"):
        if not isinstance(v, tuple | list):
            raise TypeError
        out = tuple(_coerce("int" if kind == "ints" else "nat", x) for x in v)
        return out
    if kind == "shape":
        try:
            return as_shape(v)
        except ValueError:
            raise TypeError from None
    if kind == "floats":
        if not isinstance(v, tuple | list):
            raise TypeError
        return tuple(_coerce_float(x) for x in v)
    if kind in ("array", "bool_array"):
        want_bool = kind == "bool_array"
        if isinstance(v, ConstArray):
            arr = v
        else:
            if not isinstance(v, np.ndarray | list | tuple | int | float | bool | np.generic):
                raise TypeError
            np_v = np.asarray(v)
            if want_bool and np_v.dtype != np.bool_:
                raise TypeError
            if not want_bool and not np.issubdtype(np_v.dtype, np.number):
                raise TypeError
            arr = ConstArray.from_numpy(np_v, DType.BOOL if want_bool else None)
        if want_bool != (arr.dtype == DType.BOOL):
            raise TypeError
        if not want_bool and not arr.dtype.is_float:
            raise TypeError
        if not want_bool and not np.all(np.isfinite(arr.to_numpy())):
            raise ValueError("tensor literal has a non-finite element")
        return arr
    raise AssertionError(f"unknown attribute kind {kind!r}")


ATTR_KINDS = (
    "int",
    "nat",
    "float",
    "bool",
    "str",
    "ints",
    "nats",
    "shape",
    "floats",
    "array",
    "bool_array",
)

_KIND_WORDS = {
    "int": "an int",
    "nat": "a non-negative int",
    "float": "a finite or infinite float (not NaN)",
    "bool": "a bool",
    "str": "a string",
    "ints": "a tuple of ints",
    "nats": "a tuple of non-negative ints",
    "shape": "a shape (tuple of non-negative ints)",
    "floats": "a tuple of floats",
    "array": "a float tensor literal",
    "bool_array": "a bool tensor literal",
}


@dataclass(frozen=True, slots=True)
class AttrSpec:
    """One entry of an op's attribute schema.

    ``kind`` is one of :data:`ATTR_KINDS`; ``default`` is used when the attribute is omitted
    (``REQUIRED`` means it must be given; ``None`` means optional and absent); ``check`` is an
    optional extra validator returning an error message or ``None``.
    """

    kind: str
    default: AttrValue = REQUIRED
    check: Callable[[AttrValue], str | None] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ATTR_KINDS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    @property
    def words(self) -> str:
        return _KIND_WORDS[self.kind]


def make_attrs(op: str, schema: Mapping[str, AttrSpec], given: Mapping[str, object]) -> Attrs:
    """Validate ``given`` against ``schema`` and return the canonical :class:`Attrs`.

    Defaults are filled in, so two nodes that mean the same thing have equal attributes.
    """
    unknown = sorted(set(given) - set(schema))
    if unknown:
        allowed = ", ".join(sorted(schema)) or "none"
        raise AttrError(f"{op}: unknown attribute {unknown[0]!r} (allowed: {allowed})")
    out: dict[str, AttrValue] = {}
    for name, spec in schema.items():
        if name in given and given[name] is not None:
            raw = given[name]
        elif spec.default is REQUIRED:
            raise AttrError(f"{op}: missing required attribute {name!r} ({spec.words})")
        elif spec.default is None:
            continue
        else:
            raw = spec.default
        try:
            value = _coerce(spec.kind, raw)
        except (TypeError, ValueError) as e:
            detail = f": {e}" if str(e) else ""
            raise AttrError(
                f"{op}: attribute {name!r} must be {spec.words}, got {_short(raw)}{detail}"
            ) from None
        if spec.check is not None:
            msg = spec.check(value)
            if msg:
                raise AttrError(f"{op}: attribute {name!r} {msg}, got {_short(value)}")
        out[name] = value
    return Attrs(out)


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def float_text(x: float, dtype: DType = DType.F64) -> str:
    """The shortest decimal text that reads back (``float(text)``, then rounding to ``dtype``)
    as exactly ``x``: ``0.1``, ``1e-05``, ``inf``. A float32 value gets its shortest float32
    form when that provably reads back (checked here), else its exact float64 form."""
    x = float(x)
    if dtype == DType.F32 and math.isfinite(x):
        text = str(np.float32(x))
        with np.errstate(over="ignore"):
            back = np.float32(float(text))
        if back.tobytes() == np.float32(x).tobytes():
            return text
    return repr(x)


#: Literals with more elements than this are written as base64 little-endian bytes (in files and
#: in the text form); smaller ones as lists of numbers.
INLINE_LIMIT = 64
#: In the short display form (error messages), literals with more elements than this print as
#: ``f32[3,4] [...]``.
SHORT_LIMIT = 8


def literal_values(a: ConstArray) -> list[str]:
    """The elements of a literal as exact text (``True``/``False`` for booleans)."""
    flat = a.to_numpy().reshape(-1).tolist()
    if a.dtype == DType.BOOL:
        return ["True" if x else "False" for x in flat]
    return [float_text(x, a.dtype) for x in flat]


def format_literal(a: ConstArray, *, short: bool = False) -> str:
    """A tensor literal in the text form: ``f32[2] [1.5, -2.0]`` (exact), ``f32[100] b64"..."``
    (exact, above :data:`INLINE_LIMIT` elements), or ``f32[100] [...]`` (``short``, above
    :data:`SHORT_LIMIT` elements; not parseable)."""
    head = f"{a.dtype}{format_shape(a.shape)}"
    n = shape_size(a.shape)
    if short and n > SHORT_LIMIT:
        return f"{head} [...]"
    if n > INLINE_LIMIT:
        return f'{head} b64"{base64.b64encode(a.data).decode("ascii")}"'
    return f"{head} [{', '.join(literal_values(a))}]"


def format_attr_value(v: AttrValue, *, short: bool = False) -> str:
    """An attribute value in the text form (exact unless ``short``; see :func:`format_literal`)."""
    if isinstance(v, ConstArray):
        return format_literal(v, short=short)
    if isinstance(v, bool | np.bool_):
        return repr(bool(v))
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        return float_text(float(v))
    if isinstance(v, tuple):
        inner = ",".join(format_attr_value(x, short=short) for x in v)
        return "(" + inner + ("," if len(v) == 1 else "") + ")"
    return repr(v)
