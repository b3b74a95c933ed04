"""The canonical encoding of a graph: the JSON-ready dict, the file's text and the content hash.

This is the writing half of the file format (``docs/ir-format.md``; reading is in
:mod:`torchlean_ir._format`). It reads the records of :mod:`torchlean_ir._graph` by their
fields and imports nothing that imports them, so ``GraphData.content_hash`` can use it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ._attrs import INLINE_LIMIT, AttrSpec, ConstArray, float_text
from ._registry import get_op
from ._types import DType
from ._util import gc_paused

if TYPE_CHECKING:
    from ._graph import GraphData

FORMAT = "torchlean_ir.graph"
VERSION = 1

__all__ = ["FORMAT", "VERSION", "content_hash", "dumps", "graph_to_dict"]


def _enc_float(f: float) -> float | str:
    """A float attribute value: a JSON number, or ``"inf"`` / ``"-inf"`` (JSON has none)."""
    f = float(f) + 0.0  # -0.0 -> 0.0, as make_attrs does
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f


def _enc_array(a: ConstArray) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": a.dtype.value, "shape": list(a.shape)}
    n = math.prod(a.shape)
    if n > INLINE_LIMIT:
        out["base64"] = base64.b64encode(a.data).decode("ascii")
    elif a.dtype == DType.BOOL:
        out["data"] = [bool(x) for x in a.to_numpy().reshape(-1)]
    else:
        # float(float_text(x)) is the shortest float64 that reads back as x (rounded to f32 for
        # f32 literals): exact and readable (0.1, not 0.10000000149011612).
        out["data"] = [float(float_text(x, a.dtype)) for x in a.to_numpy().reshape(-1).tolist()]
    return out


def _enc_attr(spec: AttrSpec | None, v: Any) -> Any:
    """The JSON value of attribute ``v`` of kind ``spec.kind`` (canonical: equal attributes
    encode equally, so equal graphs hash equally)."""
    kind = spec.kind if spec is not None else None
    if isinstance(v, ConstArray):
        return _enc_array(v)
    if kind == "float":
        return _enc_float(v)
    if kind == "floats":
        return [_enc_float(x) for x in v]
    if kind in ("int", "nat"):
        return int(v)
    if kind in ("ints", "nats", "shape"):
        return [int(x) for x in v]
    if isinstance(v, tuple | list):
        return [_enc_attr(None, x) for x in v]
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return _enc_float(v)
    return v


def graph_to_dict(graph: GraphData) -> dict[str, Any]:
    """The JSON-ready dict of a graph (the canonical encoding; its hash is the content hash)."""
    with gc_paused():
        return _graph_to_dict(graph)


def _graph_to_dict(graph: GraphData) -> dict[str, Any]:
    nodes = []
    for node in graph.nodes:
        op = get_op(node.op)
        entry: dict[str, Any] = {"op": node.op, "args": list(node.args)}
        if node.index_args:
            entry["index_args"] = list(node.index_args)
        if node.attrs:
            entry["attrs"] = {k: _enc_attr(op.attrs.get(k), v) for k, v in node.attrs.items()}
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


def _dump_items(items: list[Any]) -> str:
    if not items:
        return "[]"
    lines = ",\n".join(
        "    " + json.dumps(x, allow_nan=False, separators=(", ", ": ")) for x in items
    )
    return "[\n" + lines + "\n  ]"


def dumps(graph: GraphData, *, indent: int | None = None) -> str:
    """The JSON text of a graph.

    The default layout (``indent=None``) is the canonical file layout: one leaf, index input or
    node per line, keys in a fixed order, a final newline. ``indent=n`` pretty-prints fully.
    """
    d = graph_to_dict(graph)
    if indent is not None:
        return json.dumps(d, indent=indent, allow_nan=False) + "\n"
    return (
        "{\n"
        f'  "format": {json.dumps(d["format"])},\n'
        f'  "version": {d["version"]},\n'
        f'  "leaves": {_dump_items(d["leaves"])},\n'
        f'  "index_inputs": {_dump_items(d["index_inputs"])},\n'
        f'  "nodes": {_dump_items(d["nodes"])},\n'
        f'  "outputs": {json.dumps(d["outputs"])}\n'
        "}\n"
    )


def content_hash(graph: GraphData) -> str:
    """SHA-256 (hex) of the canonical encoding: :func:`graph_to_dict` as compact JSON with sorted
    keys (``json.dumps(d, sort_keys=True, separators=(",", ":"))``), UTF-8."""
    text = json.dumps(graph_to_dict(graph), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
