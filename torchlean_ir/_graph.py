"""The IR data model: an immutable, shape-indexed SSA graph.

Values are numbered: the context's differentiable leaves first (``0 .. L-1``), then the nodes
(``L .. L+N-1``), so every node refers only to earlier values (TorchLean's ``GraphData``
invariant: leaves first, then nodes). Index inputs (TorchLean's nat environment) live in a
separate numbering and are referred to by a node's ``index_args``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from ._attrs import Attrs
from ._encode import content_hash as _content_hash
from ._printer import format_graph
from ._types import IndexType, TensorType

LeafKind = Literal["param", "input"]
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def valid_name(name: object) -> bool:
    """Leaf and index-input names: an identifier, dots allowed (``layer1.weight``)."""
    return isinstance(name, str) and len(name) <= 256 and _NAME_RE.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Leaf:
    """A named differentiable leaf of the context: a parameter or an input."""

    name: str
    type: TensorType
    kind: LeafKind = "input"
    requires_grad: bool = True


@dataclass(frozen=True, slots=True)
class IndexInput:
    """A non-differentiable index input: a natural or a vector of naturals.

    ``value`` is ``None`` for a runtime input (supplied at each call, like a label) or a tuple
    of naturals for an index baked into the graph (a static gather index).
    """

    name: str
    type: IndexType
    value: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """The leaf context Γ and the nat environment."""

    leaves: tuple[Leaf, ...] = ()
    index_inputs: tuple[IndexInput, ...] = ()

    def leaf_index(self, name: str) -> int:
        for i, leaf in enumerate(self.leaves):
            if leaf.name == name:
                return i
        raise KeyError(name)

    def index_input_index(self, name: str) -> int:
        for i, ix in enumerate(self.index_inputs):
            if ix.name == name:
                return i
        raise KeyError(name)


@dataclass(frozen=True, slots=True)
class Node:
    """One SSA node: an op applied to earlier values (and index inputs), with attributes and
    the recorded output type."""

    op: str
    args: tuple[int, ...]
    type: TensorType
    attrs: Attrs = field(default_factory=Attrs)
    index_args: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class GraphData:
    """A complete graph: context, nodes and one or more outputs (value ids).

    Equality is structural; :attr:`content_hash` is a stable SHA-256 of the canonical JSON
    encoding (the compile cache keys on it).
    """

    context: Context
    nodes: tuple[Node, ...]
    outputs: tuple[int, ...]

    @property
    def leaves(self) -> tuple[Leaf, ...]:
        return self.context.leaves

    @property
    def index_inputs(self) -> tuple[IndexInput, ...]:
        return self.context.index_inputs

    @property
    def num_leaves(self) -> int:
        return len(self.context.leaves)

    @property
    def num_values(self) -> int:
        return len(self.context.leaves) + len(self.nodes)

    def value_type(self, v: int) -> TensorType:
        """The type of value ``v`` (a leaf or a node)."""
        n_leaves = len(self.context.leaves)
        if v < n_leaves:
            return self.context.leaves[v].type
        return self.nodes[v - n_leaves].type

    def node_of(self, v: int) -> Node | None:
        """The node that defines value ``v``, or ``None`` for a leaf."""
        n_leaves = len(self.context.leaves)
        return None if v < n_leaves else self.nodes[v - n_leaves]

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        return tuple(self.value_type(v) for v in self.outputs)

    @cached_property
    def content_hash(self) -> str:
        return _content_hash(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GraphData):
            return NotImplemented
        if self is other:
            return True
        return (
            self.outputs == other.outputs
            and self.context == other.context
            and self.nodes == other.nodes
        )

    def __hash__(self) -> int:
        return hash(self.content_hash)

    def __repr__(self) -> str:
        return (
            f"GraphData(<{len(self.context.leaves)} leaves, {len(self.context.index_inputs)} "
            f"index inputs, {len(self.nodes)} nodes, outputs={list(self.outputs)}>)"
        )

    def __str__(self) -> str:
        return format_graph(self)
