"""What the importers return, and the naming and dtype helpers they share."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._graph import GraphData, Node, valid_name
from ._trace import InteropError, Refused


@dataclass(frozen=True)
class Imported:
    """An imported model: the per-sample graph, its parameter values, and how to batch it.

    ``graph`` describes one sample; the source's batch axis is the compiler's batching:
    ``compiler.compile(graph).batched(over=imported.batched)``. ``params`` holds the value of
    every ``param`` leaf by leaf name (NumPy arrays in the graph's dtype). ``source_names`` maps
    each leaf and index input to the source's name for it (ONNX value names may hold characters
    our names do not allow). ``batch_size`` is the source's batch size (an ONNX model with a
    symbolic batch dimension reads as 1). ``reductions`` says, per output, how the source
    reduced it over the batch: ``""`` for an output per sample, ``"mean"`` or ``"sum"`` for a
    loss reduced over the batch, whose graph output is this sample's part (reduce it with
    ``batched(grads=...)`` of the same name). ``graph, params = imported`` unpacks the first
    two."""

    graph: GraphData
    params: dict[str, np.ndarray]
    batched: tuple[str, ...]
    batch_size: int
    source_names: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    reductions: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Any]:
        return iter((self.graph, self.params))


@dataclass(frozen=True)
class Mapping:
    """One entry of a mapping table: the converter and a note for ``docs/interop.md``."""

    fn: Callable[..., Any]
    note: str
    ours: str


@dataclass(frozen=True)
class Unsupported:
    """One source node an import refused (what :func:`import_report` returns).

    ``op`` is the source op (``aten.cumsum``, ONNX ``LRN``), ``node`` the source node's name,
    ``location`` where it is (the model's ``file:line`` for PyTorch, ``node 3`` for ONNX),
    ``reason`` why it is refused and ``hint`` what would make it import ("" where nothing
    would). A node whose inputs come from a refused node cannot be converted either: its
    record has ``blocked_by``, the refused node's name, and is not an unsupported op itself."""

    op: str
    node: str
    location: str
    reason: str
    hint: str = ""
    blocked_by: str = ""


class Blocked(Exception):
    """A value computed by a refused node (report mode): what reads it cannot be converted."""

    def __init__(self, origin: str) -> None:
        super().__init__(origin)
        self.origin = origin


def refusal_line(where: str, label: str, reason: str, hint: str = "") -> str:
    """The one-line refusal: ``where: label: reason; hint: hint``."""
    return f"{where}: {label}: {reason}" + (f"; hint: {hint}" if hint else "")


class Refusals:
    """An importer's refusals: raised at the first (``collect=False``, a normal import) or
    collected as :class:`Unsupported` records (``collect=True``, a report)."""

    def __init__(self, where: str, collect: bool) -> None:
        self.where = where
        self.collect = collect
        self.records: list[Unsupported] = []

    def refuse(
        self, op: str, node: str, location: str, label: str, reason: str, hint: str = ""
    ) -> None:
        """Record one refusal, or raise it as an :class:`InteropError` (one line)."""
        if not self.collect:
            raise InteropError(refusal_line(self.where, label, reason, hint)) from None
        self.records.append(Unsupported(op, node, location, reason, hint))

    def refused(self, op: str, node: str, location: str, label: str, e: Refused) -> None:
        """:meth:`refuse` with a :class:`Refused`'s reason and hint."""
        self.refuse(op, node, location, label, str(e), e.hint)

    def blocked(self, op: str, node: str, location: str, origin: str) -> None:
        """A node that reads a refused node's value (only reached in report mode)."""
        self.records.append(
            Unsupported(op, node, location, "depends on an unsupported node", "", origin)
        )


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


__all__ = [
    "Blocked",
    "Imported",
    "Mapping",
    "Names",
    "Refusals",
    "Unsupported",
    "float_dtype",
    "prune",
    "refusal_line",
]
