"""The graph file format: versioned JSON (``"format": "torchlean_ir.graph"``, ``"version": 1``).

See ``docs/ir-format.md`` for the specification and ``schema/graph-v1.schema.json`` for the JSON
Schema. Loading never evaluates or unpickles anything: it parses JSON (with size and count
limits), builds the records, and runs :func:`~torchlean_ir.check`. Every error is a one-line
:class:`GraphFormatError` naming the JSON path (``$.nodes[3].attrs.axis``) or the node.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._attrs import AttrSpec, ConstArray, make_attrs
from ._check import check
from ._errors import AttrError, GraphCheckError, GraphFormatError, UnknownOpError
from ._graph import Context, GraphData, IndexInput, Leaf, Node
from ._registry import get_op
from ._types import DType, IndexType, TensorType

FORMAT = "torchlean_ir.graph"
VERSION = 1
#: Tensor literals with more elements than this are stored as base64 little-endian bytes.
INLINE_LIMIT = 64


@dataclass(frozen=True)
class Limits:
    """Limits applied when loading a file (override any of them per call)."""

    max_bytes: int = 256 * 1024 * 1024
    max_nodes: int = 1_000_000
    max_leaves: int = 100_000
    max_rank: int = 8
    max_elements: int = 1 << 28  # elements of any one value or literal


DEFAULT_LIMITS = Limits()

# -- encoding --------------------------------------------------------------------------------


def _enc_float(f: float) -> float | str:
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def _enc_array(a: ConstArray) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": a.dtype.value, "shape": list(a.shape)}
    arr = a.to_numpy()
    if arr.size <= INLINE_LIMIT:
        flat = arr.reshape(-1).tolist()
        out["data"] = flat if a.dtype == DType.BOOL else [_enc_float(float(x)) for x in flat]
    else:
        out["base64"] = base64.b64encode(a.data).decode("ascii")
    return out


def _enc_attr(spec: AttrSpec, v: Any) -> Any:
    if spec.kind in ("array", "bool_array"):
        return _enc_array(v)
    if spec.kind == "float":
        return _enc_float(v)
    if spec.kind == "floats":
        return [_enc_float(x) for x in v]
    if isinstance(v, tuple):
        return list(v)
    return v


def graph_to_dict(graph: GraphData) -> dict[str, Any]:
    """The JSON-ready dict of a graph (the canonical encoding; its hash is the content hash)."""
    nodes = []
    for node in graph.nodes:
        op = get_op(node.op)
        entry: dict[str, Any] = {"op": node.op, "args": list(node.args)}
        if node.index_args:
            entry["index_args"] = list(node.index_args)
        if node.attrs:
            entry["attrs"] = {k: _enc_attr(op.attrs[k], v) for k, v in node.attrs.items()}
        entry["shape"] = list(node.type.shape)
        entry["dtype"] = node.type.dtype.value
        nodes.append(entry)
    return {
        "format": FORMAT,
        "version": VERSION,
        "leaves": [
            {
                "name": leaf.name,
                "kind": leaf.kind,
                "shape": list(leaf.type.shape),
                "dtype": leaf.type.dtype.value,
                "requires_grad": leaf.requires_grad,
            }
            for leaf in graph.leaves
        ],
        "index_inputs": [
            {"name": ix.name, "shape": list(ix.type.shape)}
            | ({} if ix.value is None else {"value": list(ix.value)})
            for ix in graph.index_inputs
        ],
        "nodes": nodes,
        "outputs": list(graph.outputs),
    }


def dumps(graph: GraphData, *, indent: int | None = None) -> str:
    """The JSON text of a graph (one node per line when ``indent`` is None)."""
    d = graph_to_dict(graph)
    if indent is not None:
        return json.dumps(d, indent=indent, allow_nan=False)
    head = {k: v for k, v in d.items() if k != "nodes"}
    lines = ",\n".join(
        "    " + json.dumps(n, allow_nan=False, separators=(", ", ": ")) for n in d["nodes"]
    )
    text = json.dumps(head, allow_nan=False)
    return text[:-1] + ', "nodes": [\n' + lines + "\n]}\n"


def save(graph: GraphData, path: str | os.PathLike[str]) -> None:
    """Write a graph file (checks the graph first)."""
    check(graph)
    text = dumps(graph)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def content_hash(graph: GraphData) -> str:
    """SHA-256 of the canonical (sorted-key, compact) JSON encoding."""
    text = json.dumps(graph_to_dict(graph), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# -- decoding --------------------------------------------------------------------------------


class _Path:
    """A JSON path being walked, for error messages (``$.nodes[3].attrs.axis``)."""

    def __init__(self, text: str = "$") -> None:
        self.text = text

    def key(self, k: str) -> _Path:
        return _Path(f"{self.text}.{k}")

    def item(self, i: int) -> _Path:
        return _Path(f"{self.text}[{i}]")

    def fail(self, message: str) -> GraphFormatError:
        return GraphFormatError(f"{self.text}: {message}", path=self.text)


def _typename(v: Any) -> str:
    return {
        dict: "an object",
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
    for k in required:
        if k not in v:
            raise p.fail(f"missing key {k!r}")
    extra = sorted(set(v) - set(required) - set(optional))
    if extra:
        raise p.fail(f"unknown key {extra[0]!r}")
    return v


def _list(v: Any, p: _Path) -> list[Any]:
    if not isinstance(v, list):
        raise p.fail(f"expected an array, got {_typename(v)}")
    return v


def _int(v: Any, p: _Path, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise p.fail(f"expected an integer, got {_typename(v)}")
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise p.fail(f"expected an integer {rng}, got {v}")
    return v


def _str(v: Any, p: _Path) -> str:
    if not isinstance(v, str):
        raise p.fail(f"expected a string, got {_typename(v)}")
    return v


def _shape(v: Any, p: _Path, lim: Limits) -> tuple[int, ...]:
    items = _list(v, p)
    if len(items) > lim.max_rank:
        raise p.fail(f"rank {len(items)} exceeds the limit {lim.max_rank}")
    shape = tuple(_int(d, p.item(i)) for i, d in enumerate(items))
    if math.prod(shape) > lim.max_elements:
        raise p.fail(f"{math.prod(shape)} elements exceed the limit {lim.max_elements}")
    return shape


def _float_dtype(v: Any, p: _Path) -> DType:
    s = _str(v, p)
    if s not in ("f32", "f64"):
        raise p.fail(f"expected dtype 'f32' or 'f64', got {s!r}")
    return DType(s)


def _dec_float(v: Any, p: _Path) -> float:
    if isinstance(v, str):
        if v in ("inf", "-inf"):
            return float(v)
        raise p.fail(f"expected a number, 'inf' or '-inf', got {v!r}")
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise p.fail(f"expected a number, got {_typename(v)}")
    return float(v)


def _dec_array(v: Any, p: _Path, lim: Limits, want_bool: bool) -> ConstArray:
    d = _obj(v, p, ("dtype", "shape"), ("data", "base64"))
    dt = _str(d["dtype"], p.key("dtype"))
    allowed = ("bool",) if want_bool else ("f32", "f64")
    if dt not in allowed:
        raise p.key("dtype").fail(f"expected {' or '.join(map(repr, allowed))}, got {dt!r}")
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
            arr = np.asarray([_dec_float(x, p.key("data").item(i)) for i, x in enumerate(data)])
        return ConstArray.from_numpy(arr.reshape(shape), dtype)
    text = _str(d["base64"], p.key("base64"))
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise p.key("base64").fail("invalid base64") from None
    itemsize = np.dtype(dtype.numpy_name).itemsize
    if len(raw) != n * itemsize:
        raise p.key("base64").fail(
            f"expected {n * itemsize} bytes for {dt}{list(shape)}, got {len(raw)}"
        )
    return ConstArray(dtype, shape, raw)


def _dec_attr(spec: AttrSpec, v: Any, p: _Path, lim: Limits) -> Any:
    if spec.kind in ("array", "bool_array"):
        return _dec_array(v, p, lim, spec.kind == "bool_array")
    if spec.kind == "float":
        return _dec_float(v, p)
    if spec.kind == "floats":
        return [_dec_float(x, p.item(i)) for i, x in enumerate(_list(v, p))]
    if spec.kind in ("ints", "nats", "shape"):
        items = _list(v, p)
        if len(items) > max(lim.max_rank, 64):
            raise p.fail(f"{len(items)} entries exceed the limit")
        return items
    return v


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads(text: str | bytes, *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Parse and validate a graph from JSON text."""
    if isinstance(text, bytes):
        if len(text) > limits.max_bytes:
            raise GraphFormatError(
                f"$: file of {len(text)} bytes exceeds the limit {limits.max_bytes}", path="$"
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GraphFormatError(f"$: not UTF-8 text (byte {e.start})", path="$") from None
    if len(text) > limits.max_bytes:
        raise GraphFormatError(
            f"$: text of {len(text)} characters exceeds the limit {limits.max_bytes}", path="$"
        )
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise GraphFormatError(
            f"$: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}", path="$"
        ) from None
    except (ValueError, RecursionError) as e:
        raise GraphFormatError(f"$: invalid JSON: {e}", path="$") from None
    return graph_from_dict(raw, limits=limits)


def load(path: str | os.PathLike[str], *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Read, parse and validate a graph file."""
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise GraphFormatError(f"cannot read {os.fspath(path)!r}: {e.strerror}") from None
    if size > limits.max_bytes:
        raise GraphFormatError(
            f"$: file of {size} bytes exceeds the limit {limits.max_bytes}", path="$"
        )
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise GraphFormatError(f"cannot read {os.fspath(path)!r}: {e.strerror}") from None
    return loads(data, limits=limits)


def graph_from_dict(raw: Any, *, limits: Limits = DEFAULT_LIMITS) -> GraphData:
    """Build and check a graph from its decoded JSON value."""
    root = _Path()
    d = _obj(raw, root, ("format", "version", "leaves", "nodes", "outputs"), ("index_inputs",))
    if d["format"] != FORMAT:
        raise root.key("format").fail(f"expected {FORMAT!r}, got {d['format']!r}")
    version = d["version"]
    if version != VERSION or isinstance(version, bool):
        raise root.key("version").fail(
            f"unsupported version {version!r} (this reader knows {VERSION})"
        )

    leaves_raw = _list(d["leaves"], root.key("leaves"))
    if len(leaves_raw) > limits.max_leaves:
        raise root.key("leaves").fail(
            f"{len(leaves_raw)} leaves exceed the limit {limits.max_leaves}"
        )
    leaves = []
    for i, lv in enumerate(leaves_raw):
        p = root.key("leaves").item(i)
        e = _obj(lv, p, ("name", "kind", "shape", "dtype"), ("requires_grad",))
        kind = _str(e["kind"], p.key("kind"))
        if kind not in ("param", "input"):
            raise p.key("kind").fail(f"expected 'param' or 'input', got {kind!r}")
        rg = e.get("requires_grad", kind == "param")
        if not isinstance(rg, bool):
            raise p.key("requires_grad").fail(f"expected a boolean, got {_typename(rg)}")
        shape = _shape(e["shape"], p.key("shape"), limits)
        leaves.append(
            Leaf(
                _str(e["name"], p.key("name")),
                TensorType(shape, _float_dtype(e["dtype"], p.key("dtype"))),
                kind,
                rg,
            )  # type: ignore[arg-type]
        )

    index_inputs = []
    for i, ixr in enumerate(_list(d.get("index_inputs", []), root.key("index_inputs"))):
        p = root.key("index_inputs").item(i)
        e = _obj(ixr, p, ("name", "shape"), ("value",))
        shape = _shape(e["shape"], p.key("shape"), limits)
        if len(shape) > 1:
            raise p.key("shape").fail(
                f"an index input is a nat scalar or vector, got rank {len(shape)}"
            )
        value = None
        if "value" in e and e["value"] is not None:
            vals = _list(e["value"], p.key("value"))
            if len(vals) != math.prod(shape):
                raise p.key("value").fail(f"expected {math.prod(shape)} naturals, got {len(vals)}")
            value = tuple(_int(x, p.key("value").item(k)) for k, x in enumerate(vals))
        index_inputs.append(IndexInput(_str(e["name"], p.key("name")), IndexType(shape), value))

    nodes_raw = _list(d["nodes"], root.key("nodes"))
    if len(nodes_raw) > limits.max_nodes:
        raise root.key("nodes").fail(f"{len(nodes_raw)} nodes exceed the limit {limits.max_nodes}")
    n_leaves = len(leaves)
    nodes = []
    for j, nr in enumerate(nodes_raw):
        p = root.key("nodes").item(j)
        e = _obj(nr, p, ("op", "args", "shape", "dtype"), ("index_args", "attrs"))
        name = _str(e["op"], p.key("op"))
        try:
            op = get_op(name)
        except UnknownOpError as err:
            raise p.key("op").fail(str(err)) from None
        args = tuple(
            _int(a, p.key("args").item(k), 0, n_leaves + j - 1)
            for k, a in enumerate(_list(e["args"], p.key("args")))
        )
        index_args = tuple(
            _int(a, p.key("index_args").item(k), 0, max(len(index_inputs) - 1, -1))
            if index_inputs
            else _fail_no_index(p.key("index_args").item(k))
            for k, a in enumerate(_list(e.get("index_args", []), p.key("index_args")))
        )
        attrs_raw = e.get("attrs", {})
        if not isinstance(attrs_raw, dict):
            raise p.key("attrs").fail(f"expected an object, got {_typename(attrs_raw)}")
        decoded: dict[str, Any] = {}
        for k, v in attrs_raw.items():
            if k not in op.attrs:
                allowed = ", ".join(sorted(op.attrs)) or "none"
                raise (
                    p.key("attrs").key(k).fail(f"unknown attribute of {name} (allowed: {allowed})")
                )
            decoded[k] = _dec_attr(op.attrs[k], v, p.key("attrs").key(k), limits)
        try:
            attrs = make_attrs(name, op.attrs, decoded)
        except AttrError as err:
            raise p.key("attrs").fail(str(err)) from None
        shape = _shape(e["shape"], p.key("shape"), limits)
        nodes.append(
            Node(
                name,
                args,
                TensorType(shape, _float_dtype(e["dtype"], p.key("dtype"))),
                attrs,
                index_args,
            )
        )

    n_values = n_leaves + len(nodes)
    outs_raw = _list(d["outputs"], root.key("outputs"))
    if not outs_raw:
        raise root.key("outputs").fail("a graph needs at least one output")
    outputs = tuple(
        _int(o, root.key("outputs").item(k), 0, n_values - 1) for k, o in enumerate(outs_raw)
    )
    graph = GraphData(Context(tuple(leaves), tuple(index_inputs)), tuple(nodes), outputs)
    try:
        check(graph)
    except GraphCheckError as err:
        where = f"$.nodes[{err.node}]" if err.node is not None else "$"
        raise GraphFormatError(f"{where}: {err}", path=where) from None
    return graph


def _fail_no_index(p: _Path) -> int:
    raise p.fail("refers to an index input, but the graph declares none")
