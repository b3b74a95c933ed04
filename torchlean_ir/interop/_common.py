"""What the importers return, and the naming and dtype helpers they share."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._graph import GraphData, Node, valid_name
from ._trace import InteropError


@dataclass(frozen=True)
class Imported:
    """An imported model: the per-sample graph, its parameter values, and how to batch it.

    ``graph`` describes one sample; the source's batch axis is the compiler's batching:
    ``compiler.compile(graph).batched(over=imported.batched)``. ``params`` holds the value of
    every ``param`` leaf by leaf name (NumPy arrays in the graph's dtype). ``source_names`` maps
    each leaf and index input to the source's name for it (ONNX value names may hold characters
    our names do not allow). ``batch_size`` is the source's batch size (an ONNX model with a
    symbolic batch dimension reads as 1). ``graph, params = imported`` unpacks the first two."""

    graph: GraphData
    params: dict[str, np.ndarray]
    batched: tuple[str, ...]
    batch_size: int
    source_names: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.params))


@dataclass(frozen=True)
class Mapping:
    """One entry of a mapping table: the converter and a note for ``docs/interop.md``."""

    fn: Callable[..., Any]
    note: str
    ours: str


_BAD = re.compile(r"[^A-Za-z0-9_.]")


class Names:
    """Source names made valid and unique as leaf / index-input names."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.source: dict[str, str] = {}

    def __call__(self, source: str, prefix: str = "v") -> str:
        """``source`` with characters outside ``[A-Za-z0-9_.]`` replaced by ``_``, and ``_``
        before a leading digit (``0.weight`` -> ``_0.weight``); ``_2``, ``_3``... on a clash."""
        name = _BAD.sub("_", source) or prefix
        if not name[0].isalpha() and name[0] != "_":
            name = f"_{name}"
        name = name[:200]
        base, k = name, 1
        while name in self.used or not valid_name(name):
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        self.source[name] = source
        return name


def float_dtype(dtypes: set[np.dtype], where: str) -> str:
    """``f32`` or ``f64`` for the source's float tensors (one dtype per graph)."""
    kinds = {np.dtype(d) for d in dtypes if np.issubdtype(d, np.floating)}
    if not kinds or kinds == {np.dtype(np.float32)}:
        return "f32"
    if kinds == {np.dtype(np.float64)}:
        return "f64"
    shown = ", ".join(sorted(str(k) for k in kinds))
    raise InteropError(f"{where}: float tensors must be all float32 or all float64, got {shown}")


def prune(graph: GraphData) -> GraphData:
    """``graph`` without the nodes no output depends on (an importer's intermediate views that
    a later step folded away). Leaves and index inputs stay: they are the model's interface."""
    n_leaves = graph.num_leaves
    live = set(graph.outputs)
    for j in range(len(graph.nodes) - 1, -1, -1):
        if n_leaves + j in live:
            live.update(graph.nodes[j].args)
    keep = [j for j in range(len(graph.nodes)) if n_leaves + j in live]
    if len(keep) == len(graph.nodes):
        return graph
    new_id = {v: v for v in range(n_leaves)}
    nodes = []
    for j in keep:
        node = graph.nodes[j]
        new_id[n_leaves + j] = n_leaves + len(nodes)
        args = tuple(new_id[a] for a in node.args)
        nodes.append(Node(node.op, args, node.type, node.attrs, node.index_args))
    return GraphData(graph.context, tuple(nodes), tuple(new_id[o] for o in graph.outputs))


__all__ = ["Imported", "Mapping", "Names", "float_dtype", "prune"]
