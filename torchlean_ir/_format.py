"""The graph file format: versioned JSON (``"format": "torchlean_ir.graph"``, ``"version": 1``).

See ``docs/ir-format.md`` for the specification and ``schema/graph-v1.schema.json`` for the JSON
Schema. Loading never evaluates or unpickles anything: it parses JSON (within size, count and
nesting limits), builds the records, and runs :func:`~torchlean_ir.check`. Every error is a
one-line :class:`GraphFormatError` naming the JSON path (``$.nodes[3].attrs.axis``) or the node.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._attrs import INLINE_LIMIT, Attrs, AttrSpec, ConstArray, make_attrs
from ._check import check
from ._encode import FORMAT, VERSION, content_hash, graph_to_dict
from ._encode import dumps as _dumps
from ._errors import AttrError, GraphCheckError, GraphFormatError, UnknownOpError
from ._graph import Context, GraphData, IndexInput, Leaf, Node, valid_name
from ._printer import format_node
from ._registry import get_op
from ._types import NAT_MAX, DType, IndexType, TensorType
from ._util import clip, gc_paused, short_repr, write_atomic

#: The deepest nesting of arrays and objects in a file: $.nodes[j].attrs.k.data[i].
_MAX_FILE_DEPTH = 6
#: The JSON Schema of this version, relative to the package directory.
SCHEMA_FILE = "schema/graph-v1.schema.json"

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "INLINE_LIMIT",
    "VERSION",
    "Limits",
    "content_hash",
    "dumps",
    "graph_from_dict",
    "graph_schema",
    "graph_to_dict",
    "load",
    "loads",
    "save",
]


@dataclass(frozen=True)
class Limits:
    """Limits applied when reading a graph (from a file or text) and when writing one (a file
    the library writes, it reads back with the same limits); override any of them.

    ``Limits(max_nodes=10_000)`` or ``DEFAULT_LIMITS.replace(max_bytes=1 << 20)``. Each is a
    positive int; a value above ``sys.maxsize`` means no limit and is stored as ``sys.maxsize``.
    """

    #: Size of the file (bytes) or text (characters).
    max_bytes: int = 256 * 1024 * 1024
    #: Number of nodes.
    max_nodes: int = 1_000_000
    #: Number of leaves (params and inputs); index inputs count separately, with the same limit.
    max_leaves: int = 100_000
    #: Rank of any shape.
    max_rank: int = 8
    #: Elements of any one value or literal (the product of its shape).
    max_elements: int = 1 << 28
    #: Nesting depth of the JSON document (a valid graph file needs 6).
    max_depth: int = 32
    #: Entries of any other list: the outputs, a node's args, a node's index args.
    max_items: int = 100_000

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Limits.{f.name} must be a positive int, got {_short(v)}")
            object.__setattr__(self, f.name, min(int(v), sys.maxsize))

    def replace(self, **changes: int) -> Limits:
        """A copy with some limits changed."""
        return dataclasses.replace(self, **changes)


DEFAULT_LIMITS = Limits()

# -- writing (the encoding itself is in _encode; the limits, shared with reading, here) ------


def dumps(graph: GraphData, *, indent: int | None = None, limits: Limits | None = None) -> str:
    """The JSON text of a graph.

    The default layout (``indent=None``) is the canonical file layout: one leaf, index input or
    node per line, keys in a fixed order, a final newline. ``indent=n`` pretty-prints fully.

    With ``limits`` (``save`` passes :data:`DEFAULT_LIMITS`), a graph that :func:`loads` would
    refuse under these limits is refused here, with the reader's message (a
    :class:`GraphFormatError`): the library writes only what it reads back.
    """
    text = _dumps(graph, indent=indent)
    if limits is not None:
        if len(text) > limits.max_bytes:
            raise GraphFormatError(
                f"$: {len(text)} characters exceed the limit {limits.max_bytes}", path="$"
            )
        _check_limits(graph, limits, text)
    return text


def save(
    graph: GraphData, path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS
) -> None:
    """Write a graph file (UTF-8, ``\\n`` line ends) that :func:`load` reads back with the same
    ``limits``. The graph is checked first and a graph over a limit is refused with the message
    ``load`` would give (a :class:`GraphFormatError`); nothing is written then. The file is
    written all or nothing (an ``OSError``, a full disk say, leaves ``path`` as it was)."""
    check(graph)
    data = _dumps(graph).encode("utf-8")
    if len(data) > limits.max_bytes:
        raise GraphFormatError(
            f"$: file of {len(data)} bytes exceeds the limit {limits.max_bytes}", path="$"
        )
    _check_limits(graph, limits, data)
    write_atomic(path, data)


def _check_limits(graph: GraphData, limits: Limits, encoded: str | bytes | None = None) -> None:
    """Raise the :class:`GraphFormatError` that reading ``graph``'s file under ``limits``
    would raise for a limit (counts, ranks, elements, list lengths, integer sizes, and the
    nesting depth of ``encoded``, its JSON text); the reader's checks in the reader's order.
    The size of the text is the caller's to check (a file counts bytes, text characters)."""
    if encoded is not None and limits.max_depth < _MAX_FILE_DEPTH:
        _check_depth(encoded.encode("utf-8") if isinstance(encoded, str) else encoded, limits)
    root = _Path()

    def shape_over(shape: tuple[int, ...], p: _Path) -> None:
        msg = _rank_over(len(shape), limits) or _over(
            math.prod(shape), limits.max_elements, "elements"
        )
        if msg:
            raise p.fail(msg)

    p = root.key("leaves")
    msg = _over(len(graph.leaves), limits.max_leaves, "leaves")
    if msg:
        raise p.fail(msg)
    for i, leaf in enumerate(graph.leaves):
        shape_over(leaf.type.shape, p.item(i).key("shape"))
    p = root.key("index_inputs")
    msg = _over(len(graph.index_inputs), limits.max_leaves, "index inputs")
    if msg:
        raise p.fail(msg)
    for i, ix in enumerate(graph.index_inputs):
        shape_over(ix.type.shape, p.item(i).key("shape"))
    p = root.key("nodes")
    msg = _over(len(graph.nodes), limits.max_nodes, "nodes")
    if msg:
        raise p.fail(msg)
    for j, node in enumerate(graph.nodes):
        pn = p.item(j)
        for key, n in (("args", len(node.args)), ("index_args", len(node.index_args))):
            msg = _over(n, limits.max_items, "entries")
            if msg:
                raise pn.key(key).fail(msg)
        specs = get_op(node.op).attrs
        for k, v in node.attrs.items():
            _attr_over(specs[k].kind, v, pn.key("attrs").key(k), limits)
        shape_over(node.type.shape, pn.key("shape"))
    msg = _over(len(graph.outputs), limits.max_items, "entries")
    if msg:
        raise root.key("outputs").fail(msg)


def _attr_over(kind: str, v: Any, p: _Path, limits: Limits) -> None:
    """The reader's limit checks of one attribute value (see :func:`_dec_attr`)."""
    if isinstance(v, ConstArray):
        msg = _rank_over(len(v.shape), limits) or _over(
            math.prod(v.shape), limits.max_elements, "elements"
        )
        if msg:
            raise p.key("shape").fail(msg)
    elif kind in ("floats", "ints", "nats", "shape"):
        msg = _over(len(v), _attr_list_limit(limits), "entries")
        if msg:
            raise p.fail(msg)
        if kind != "floats":
            for i, x in enumerate(v):
                msg = _too_long(x)
                if msg:
                    raise p.item(i).fail(msg)
    elif kind in ("int", "nat"):
        msg = _too_long(v)
        if msg:
            raise p.fail(msg)


def graph_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of version 1 of the file format, shipped with the package
    as ``torchlean_ir/schema/graph-v1.schema.json``. It checks structure only; :func:`loads`
    checks everything (references, attributes, shapes, names, limits)."""
    from importlib.resources import files

    return json.loads(files("torchlean_ir").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


# -- decoding --------------------------------------------------------------------------------


class _Path:
    """A JSON path being walked, for error messages (``$.nodes[3].attrs.axis``); its text is
    only built when an error needs it."""

    __slots__ = ("parent", "part")

    def __init__(self, parent: _Path | None = None, part: str | int = "$") -> None:
        self.parent = parent
        self.part = part

    def key(self, k: str) -> _Path:
        return _Path(self, k)

    def item(self, i: int) -> _Path:
        return _Path(self, i)

    @property
    def text(self) -> str:
        parts: list[str] = []
        p: _Path | None = self
        while p is not None:
            if p.parent is None:
                parts.append("$")
            elif isinstance(p.part, int):
                parts.append(f"[{p.part}]")
            elif _KEY_RE.fullmatch(p.part):
                parts.append(f".{p.part}")
            else:
                parts.append(f"[{_short(p.part)}]")
            p = p.parent
        return "".join(reversed(parts))

    def fail(self, message: str) -> GraphFormatError:
        text = self.text
        return GraphFormatError(f"{text}: {message}", path=text)


_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def _short(v: Any, limit: int = 60) -> str:
    """A one-line, bounded ``repr`` for messages."""
    return short_repr(v, limit)


def _clip(text: str, limit: int = 60) -> str:
    """``text`` on one line, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Obj(dict):  # type: ignore[type-arg]
    """A decoded JSON object that remembers its first duplicate key, if any."""

    __slots__ = ("duplicate",)


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Obj:
    obj = _Obj(pairs)
    obj.duplicate = None
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                obj.duplicate = k
                break
            seen.add(k)
    return obj


class _BadNumber(str):
    """A JSON number Python cannot hold as a finite float (``1e400``), or one of the non-JSON
    constants ``NaN``, ``Infinity`` that Python's parser would accept. (Integers are parsed as
    Python ints, without a hook per number, and checked where they are read.)"""

    __slots__ = ("why",)


def _bad_number(text: str, why: str) -> _BadNumber:
    b = _BadNumber(text)
    b.why = why
    return b


def _parse_float(text: str) -> float | _BadNumber:
    f = float(text)
    return _bad_number(text, "out of range") if math.isinf(f) else f


def _parse_constant(text: str) -> _BadNumber:
    return _bad_number(text, "not valid JSON")


def _typename(v: Any) -> str:
    if isinstance(v, _BadNumber):
        return f"{_clip(str(v), 30)} ({v.why})"
    if isinstance(v, dict):
        return "an object"
    return {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }.get(type(v), type(v).__name__)


def _obj(
    v: Any, p: _Path, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise p.fail(f"expected an object, got {_typename(v)}")
    dup = getattr(v, "duplicate", None)
    if dup is not None:
        raise p.fail(f"duplicate key {_short(dup)}")
    for k in required:
        if k not in v:
            raise p.fail(f"missing key {k!r}")
    extra = set(v).difference(required, optional)
    if extra:
        raise p.fail(f"unknown key {_short(min(extra))}")
    return v


def _list(v: Any, p: _Path) -> list[Any]:
    if not isinstance(v, list):
        raise p.fail(f"expected an array, got {_typename(v)}")
    return v


#: Integers of more than 400 digits are refused as too long (JSON integers are exact, of any
#: size, but nothing in a graph needs more; Python's parser refuses more than 4300 digits).
_INT_TOO_LONG = 10**400


# The limit checks, shared by the reader and the writer (which refuses, with the reader's message,
# to write what the reader would refuse): each returns the message, or None within the limit.


def _over(n: int, limit: int, what: str) -> str | None:
    return f"{n} {what} exceed the limit {limit}" if n > limit else None


def _rank_over(rank: int, lim: Limits) -> str | None:
    return f"rank {rank} exceeds the limit {lim.max_rank}" if rank > lim.max_rank else None


def _too_long(v: int) -> str | None:
    if -_INT_TOO_LONG < v < _INT_TOO_LONG:
        return None
    return f"an integer of {len(str(abs(v)))} digits is too long (at most 400)"


def _attr_list_limit(lim: Limits) -> int:
    """Entries of a list-valued attribute (``ints``, ``nats``, ``shape``, ``floats``)."""
    return max(lim.max_rank, 64)


def _items(v: Any, p: _Path, lim: Limits) -> list[Any]:
    """A list bounded by ``max_items`` (outputs, args, index args)."""
    items = _list(v, p)
    msg = _over(len(items), lim.max_items, "entries")
    if msg:
        raise p.fail(msg)
    return items


def _int(v: Any, p: _Path, lo: int | None = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise p.fail(f"expected an integer, got {_typename(v)}")
    msg = _too_long(v)
    if msg:
        raise p.fail(msg)
    if lo is not None and v < lo:
        raise p.fail(f"expected an integer >= {lo}, got {_short(v)}")
    if hi is not None and v > hi:
        raise p.fail(f"expected an integer <= {hi}, got {_short(v)}")
    return v


def _ref(v: Any, p: _Path, n: int, what: str) -> int:
    """A reference to one of the ``n`` values (or index inputs) available at ``p``."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise p.fail(f"expected an integer (a {what} id), got {_typename(v)}")
    if not 0 <= v < n:
        avail = f"ids 0..{n - 1} are available" if n else f"there is no {what} to refer to"
        raise p.fail(f"refers to {what} {_short(v)}, but {avail}")
    return v


def _str(v: Any, p: _Path) -> str:
    if not isinstance(v, str) or isinstance(v, _BadNumber):
        raise p.fail(f"expected a string, got {_typename(v)}")
    return v


def _name(v: Any, p: _Path, seen: dict[str, _Path]) -> str:
    name = _str(v, p)
    if not valid_name(name):
        raise p.fail(f"invalid name {_short(name)} (an identifier; dots allowed; 256 chars max)")
    if name in seen:
        raise p.fail(f"name {name!r} is already used by {seen[name].text}")
    seen[name] = p.parent or p
    return name


def _shape(v: Any, p: _Path, lim: Limits) -> tuple[int, ...]:
    items = _list(v, p)
    msg = _rank_over(len(items), lim)
    if msg:
        raise p.fail(msg)
    shape = tuple(_int(d, p.item(i)) for i, d in enumerate(items))
    msg = _over(math.prod(shape), lim.max_elements, "elements")
    if msg:
        raise p.fail(msg)
    for i, d in enumerate(shape):  # beside a 0: the product passes, the axis is still too long
        if d > lim.max_elements:
            raise p.item(i).fail(f"an axis of {d} exceeds the limit {lim.max_elements} elements")
    return shape


def _float_dtype(v: Any, p: _Path) -> DType:
    s = _str(v, p)
    if s not in ("f32", "f64"):
        raise p.fail(f"expected dtype 'f32' or 'f64', got {_short(s)}")
    return DType(s)


def _dec_float(v: Any, p: _Path) -> float:
    if isinstance(v, str) and not isinstance(v, _BadNumber):
        if v in ("inf", "-inf"):
            return float(v)
        raise p.fail(f"expected a number, 'inf' or '-inf', got {_short(v)}")
    if isinstance(v, bool) or not isinstance(v, int | float) or isinstance(v, _BadNumber):
        raise p.fail(f"expected a number, got {_typename(v)}")
    try:
        return float(v)
    except OverflowError:
        raise p.fail(f"number {_short(v)} is out of range") from None


def _dec_array(v: Any, p: _Path, lim: Limits, want_bool: bool) -> ConstArray:
    d = _obj(v, p, ("dtype", "shape"), ("data", "base64"))
    dt = _str(d["dtype"], p.key("dtype"))
    allowed = ("bool",) if want_bool else ("f32", "f64")
    if dt not in allowed:
        raise p.key("dtype").fail(f"expected {' or '.join(map(repr, allowed))}, got {_short(dt)}")
    dtype = DType(dt)
    shape = _shape(d["shape"], p.key("shape"), lim)
    n = math.prod(shape)
    if ("data" in d) == ("base64" in d):
        raise p.fail("needs exactly one of 'data' and 'base64'")
    if "data" in d:
        data = _list(d["data"], p.key("data"))
        if len(data) != n:
            raise p.key("data").fail(
                f"expected {n} elements for shape {list(shape)}, got {len(data)}"
            )
        if want_bool:
            for i, x in enumerate(data):
                if not isinstance(x, bool):
                    raise p.key("data").item(i).fail(f"expected a boolean, got {_typename(x)}")
            arr = np.asarray(data, dtype=bool)
        else:
            vals = [_dec_float(x, p.key("data").item(i)) for i, x in enumerate(data)]
            with np.errstate(over="ignore"):
                arr = np.asarray(vals, dtype=dtype.numpy_name)
            bad = np.flatnonzero(~np.isfinite(arr))
            if bad.size:
                i = int(bad[0])
                raise (
                    p.key("data")
                    .item(i)
                    .fail(f"element {_short(data[i])} is not a finite {dt} (literals are finite)")
                )
        return ConstArray.from_numpy(arr.reshape(shape), dtype)
    text = _str(d["base64"], p.key("base64"))
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError):
        raise p.key("base64").fail("invalid base64") from None
    itemsize = np.dtype(dtype.numpy_name).itemsize
    if len(raw) != n * itemsize:
        raise p.key("base64").fail(
            f"expected {n * itemsize} bytes for {dt}{list(shape)}, got {len(raw)}"
        )
    try:
        return ConstArray(dtype, shape, raw)
    except AttrError as e:
        raise p.key("base64").fail(str(e)) from None


def _dec_attr(spec: AttrSpec, v: Any, p: _Path, lim: Limits) -> Any:
    """The raw value of one attribute (``make_attrs`` validates and canonicalises it)."""
    if spec.kind in ("array", "bool_array"):
        return _dec_array(v, p, lim, spec.kind == "bool_array")
    if spec.kind == "float":
        return _dec_float(v, p)
    if spec.kind in ("floats", "ints", "nats", "shape"):
        items = _list(v, p)
        msg = _over(len(items), _attr_list_limit(lim), "entries")
        if msg:
            raise p.fail(msg)
        if spec.kind == "floats":
            return [_dec_float(x, p.item(i)) for i, x in enumerate(items)]
        return [_int(x, p.item(i), lo=None) for i, x in enumerate(items)]
    if spec.kind in ("int", "nat"):
        return _int(v, p, lo=None)
    if isinstance(v, _BadNumber):
        raise p.fail(f"expected {spec.words}, got {_typename(v)}")
    return v


_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = np.zeros(256, dtype=np.int8)
_BRACKET[[ord("["), ord("{")]] = 1
_BRACKET[[ord("]"), ord("}")]] = -1
_CHUNK = 1 << 22


def _first_too_deep(data: bytes, limit: int) -> int | None:
    """The byte offset where the nesting of arrays/objects first exceeds ``limit``, or None
    (``data`` with its strings blanked out)."""
    depth = 0
    for start in range(0, len(data), _CHUNK):
        count = min(_CHUNK, len(data) - start)
        steps = _BRACKET[np.frombuffer(data, dtype=np.uint8, count=count, offset=start)]
        running = np.cumsum(steps, dtype=np.int64) + depth
        over = np.flatnonzero(running > limit)
        if over.size:
            return start + int(over[0])
        depth = int(running[-1])
    return None


def _too_deep(data: bytes, limit: int) -> int | None:
    """The byte offset where the JSON text ``data`` first nests deeper than ``limit``, or None.
    Brackets inside strings do not count."""
    if _first_too_deep(_STRING_RE.sub(b'""', data), limit) is None:  # fast; offsets shift
        return None
    return _first_too_deep(_STRING_RE.sub(lambda m: b" " * (m.end() - m.start()), data), limit)


def _line_col(data: bytes, offset: int) -> str:
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return f"line {line} column {col}"


def _check_depth(data: bytes, limits: Limits) -> None:
    at = _too_deep(data, limits.max_depth)
    if at is not None:
        raise GraphFormatError(
            f"$: JSON nested deeper than {limits.max_depth} levels (at {_line_col(data, at)})",
            path="$",
        )


def loads(text: str | bytes, *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Parse and validate a graph from JSON text (``str`` or UTF-8 ``bytes``)."""
    if isinstance(text, bytes | bytearray | memoryview):
        data = bytes(text)
        if len(data) > limits.max_bytes:
            raise GraphFormatError(
                f"$: {len(data)} bytes exceed the limit {limits.max_bytes}", path="$"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GraphFormatError(
                f"$: not UTF-8 text (bad byte at {_line_col(data, e.start)})", path="$"
            ) from None
    elif isinstance(text, str):
        if len(text) > limits.max_bytes:
            raise GraphFormatError(
                f"$: {len(text)} characters exceed the limit {limits.max_bytes}", path="$"
            )
        data = text.encode("utf-8", "surrogatepass")
    else:
        raise TypeError(f"loads expects str or bytes, got {type(text).__name__}")
    _check_depth(data, limits)
    try:
        with gc_paused():
            raw = json.loads(
                text,
                object_pairs_hook=_object_pairs,
                parse_float=_parse_float,
                parse_constant=_parse_constant,
            )
    except json.JSONDecodeError as e:
        raise GraphFormatError(
            f"$: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", path="$"
        ) from None
    except (ValueError, RecursionError) as e:
        raise GraphFormatError(f"$: invalid JSON: {_clip(str(e), 120)}", path="$") from None
    return graph_from_dict(raw, limits=limits)


def _read_at_most(f: Any, limit: int) -> bytes:
    """The file's bytes, or its first ``limit + 1`` (a pipe or a device has no size to check
    first; ``loads`` then refuses what is over the limit)."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = f.read(min(limit + 1 - total, 1 << 24))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def load(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Read, parse and validate a graph file."""
    shown = _short(os.fspath(path), 200)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.max_bytes:
                raise GraphFormatError(
                    f"$: file of {size} bytes exceeds the limit {limits.max_bytes}", path="$"
                )
            data = _read_at_most(f, limits.max_bytes)
    except OSError as e:
        raise GraphFormatError(f"cannot read {shown}: {e.strerror or e}") from None
    return loads(data, limits=limits)


def graph_from_dict(raw: Any, *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Build and check a graph from its decoded JSON value (as :func:`json.loads` returns it)."""
    with gc_paused():
        return _graph_from_dict(raw, limits)


def _graph_from_dict(raw: Any, limits: Limits) -> GraphData:
    root = _Path()
    d = _obj(raw, root, ("format", "version", "leaves", "nodes", "outputs"), ("index_inputs",))
    fmt = d["format"]
    if not isinstance(fmt, str) or isinstance(fmt, _BadNumber) or fmt != FORMAT:
        got = _short(fmt) if isinstance(fmt, str) and not isinstance(fmt, _BadNumber) else None
        raise root.key("format").fail(f"expected {FORMAT!r}, got {got or _typename(fmt)}")
    version = d["version"]
    if isinstance(version, bool) or not isinstance(version, int) or version != VERSION:
        got = _typename(version) if isinstance(version, _BadNumber) else _short(version)
        raise root.key("version").fail(f"unsupported version {got} (this reader knows {VERSION})")
    seen: dict[str, _Path] = {}

    leaves_raw = _list(d["leaves"], root.key("leaves"))
    msg = _over(len(leaves_raw), limits.max_leaves, "leaves")
    if msg:
        raise root.key("leaves").fail(msg)
    leaves = []
    for i, lv in enumerate(leaves_raw):
        p = root.key("leaves").item(i)
        e = _obj(lv, p, ("name", "kind", "shape", "dtype"), ("requires_grad",))
        name = _name(e["name"], p.key("name"), seen)
        kind = _str(e["kind"], p.key("kind"))
        if kind not in ("param", "input"):
            raise p.key("kind").fail(f"expected 'param' or 'input', got {_short(kind)}")
        rg = e.get("requires_grad", kind == "param")
        if not isinstance(rg, bool):
            raise p.key("requires_grad").fail(f"expected a boolean, got {_typename(rg)}")
        shape = _shape(e["shape"], p.key("shape"), limits)
        dtype = _float_dtype(e["dtype"], p.key("dtype"))
        leaves.append(Leaf(name, TensorType(shape, dtype), kind, rg))  # type: ignore[arg-type]

    index_raw = _list(d.get("index_inputs", []), root.key("index_inputs"))
    msg = _over(len(index_raw), limits.max_leaves, "index inputs")
    if msg:
        raise root.key("index_inputs").fail(msg)
    index_inputs = []
    for i, ixr in enumerate(index_raw):
        p = root.key("index_inputs").item(i)
        e = _obj(ixr, p, ("name", "shape"), ("value",))
        name = _name(e["name"], p.key("name"), seen)
        shape = _shape(e["shape"], p.key("shape"), limits)
        if len(shape) > 1:
            raise p.key("shape").fail(
                f"an index input is a nat scalar or vector, got rank {len(shape)}"
            )
        value = None
        if "value" in e:
            vals = _list(e["value"], p.key("value"))
            if len(vals) != math.prod(shape):
                raise p.key("value").fail(f"expected {math.prod(shape)} naturals, got {len(vals)}")
            value = tuple(_int(x, p.key("value").item(k), hi=NAT_MAX) for k, x in enumerate(vals))
        index_inputs.append(IndexInput(name, IndexType(shape), value))

    nodes_raw = _list(d["nodes"], root.key("nodes"))
    msg = _over(len(nodes_raw), limits.max_nodes, "nodes")
    if msg:
        raise root.key("nodes").fail(msg)
    n_leaves, n_index = len(leaves), len(index_inputs)
    nodes_path = root.key("nodes")
    nodes = []
    no_attrs: dict[str, Attrs] = {}  # op -> its default attributes (nodes without "attrs")
    types: dict[tuple[tuple[int, ...], DType], TensorType] = {}  # shared, equal types
    for j, nr in enumerate(nodes_raw):
        p = nodes_path.item(j)
        e = _obj(nr, p, ("op", "args", "shape", "dtype"), ("index_args", "attrs"))
        name = _str(e["op"], p.key("op"))
        try:
            op = get_op(name)
        except UnknownOpError:
            raise p.key("op").fail(f"unknown op {_short(name)}") from None
        pa = p.key("args")
        args = tuple(
            _ref(a, pa.item(k), n_leaves + j, "value")
            for k, a in enumerate(_items(e["args"], pa, limits))
        )
        pi = p.key("index_args")
        index_args = tuple(
            _ref(a, pi.item(k), n_index, "index input")
            for k, a in enumerate(_items(e.get("index_args", []), pi, limits))
        )
        if "attrs" in e or name not in no_attrs:
            attrs = _dec_attrs(op.name, op.attrs, e.get("attrs", {}), p.key("attrs"), limits)
            if "attrs" not in e:
                no_attrs[name] = attrs  # the defaults: the same for every node of this op
        else:
            attrs = no_attrs[name]
        shape = _shape(e["shape"], p.key("shape"), limits)
        dtype = _float_dtype(e["dtype"], p.key("dtype"))
        typ = types.get((shape, dtype))
        if typ is None:
            typ = types[(shape, dtype)] = TensorType(shape, dtype)
        nodes.append(Node(name, args, typ, attrs, index_args))

    n_values = n_leaves + len(nodes)
    po = root.key("outputs")
    outs_raw = _items(d["outputs"], po, limits)
    if not outs_raw:
        raise po.fail("a graph needs at least one output")
    outputs = tuple(_ref(o, po.item(k), n_values, "value") for k, o in enumerate(outs_raw))
    graph = GraphData(Context(tuple(leaves), tuple(index_inputs)), tuple(nodes), outputs)
    try:
        check(graph)
    except GraphCheckError as err:
        if err.node is None:
            raise GraphFormatError(f"$: {err}", path="$") from None
        where = f"$.nodes[{err.node}]"
        shown = clip(format_node(graph, err.node), 160)
        raise GraphFormatError(f"{where} (`{shown}`): {err.detail}", path=where) from None
    return graph


def _dec_attrs(op: str, schema: dict[str, AttrSpec], raw: Any, p: _Path, limits: Limits) -> Any:
    if not isinstance(raw, dict):
        raise p.fail(f"expected an object, got {_typename(raw)}")
    _obj(raw, p, (), tuple(raw))  # duplicate keys
    decoded: dict[str, Any] = {}
    for k, v in raw.items():
        pk = p.key(k)
        if k not in schema:
            allowed = ", ".join(sorted(schema)) or "none"
            raise pk.fail(f"unknown attribute of {op} (allowed: {allowed})")
        decoded[k] = _dec_attr(schema[k], v, pk, limits)
        try:
            make_attrs(op, {k: schema[k]}, {k: decoded[k]})
        except AttrError as err:
            raise pk.fail(str(err)) from None
    try:
        return make_attrs(op, schema, decoded)
    except AttrError as err:
        raise p.fail(str(err)) from None
