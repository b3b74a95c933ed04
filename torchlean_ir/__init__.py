"""torchlean-ir: a typed IR for neural-network graphs with proof-checked backprop.

The IR (this package) is the Python counterpart of TorchLean's ``GraphData``: a shape-indexed
SSA graph of leaves (params, inputs), index inputs and nodes, built with :class:`GraphBuilder`,
validated by :func:`check`, saved as versioned JSON, and given meaning by the reference
interpreters (:func:`eval_graph`, :func:`jvp`, :func:`backprop_ctx`). The ``compiler`` package
lowers it to JAX; the ``verify`` package proves the compiled backward equal to the reference.
"""

from . import ops as _ops  # noqa: F401  (registers the built-in ops)
from ._attrs import Attrs, AttrSpec, ConstArray
from ._builder import GraphBuilder, IndexVar, Var
from ._check import check
from ._errors import (
    AttrError,
    EvalError,
    GraphCheckError,
    GraphFormatError,
    GraphParseError,
    ShapeError,
    TorchleanError,
    UnknownOpError,
)
from ._format import (
    DEFAULT_LIMITS,
    FORMAT,
    INLINE_LIMIT,
    VERSION,
    Limits,
    dumps,
    graph_from_dict,
    graph_schema,
    graph_to_dict,
    load,
    loads,
    save,
)
from ._graph import Context, GraphData, IndexInput, Leaf, Node
from ._interpret import backprop_all_ctx, backprop_ctx, eval_all, eval_graph, jvp
from ._parser import parse_graph
from ._printer import format_graph, format_node
from ._registry import (
    REQUIRED_RULES,
    IndexArg,
    Op,
    all_ops,
    deflinear,
    defunary,
    get_op,
    has_op,
    missing_rules,
    register_op,
    same_shape,
    unregister_op,
)
from ._types import DType, IndexType, Shape, TensorType

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "INLINE_LIMIT",
    "REQUIRED_RULES",
    "VERSION",
    "AttrError",
    "AttrSpec",
    "Attrs",
    "ConstArray",
    "Context",
    "DType",
    "EvalError",
    "GraphBuilder",
    "GraphCheckError",
    "GraphData",
    "GraphFormatError",
    "GraphParseError",
    "IndexArg",
    "IndexInput",
    "IndexType",
    "IndexVar",
    "Leaf",
    "Limits",
    "Node",
    "Op",
    "Shape",
    "ShapeError",
    "TensorType",
    "TorchleanError",
    "UnknownOpError",
    "Var",
    "all_ops",
    "backprop_all_ctx",
    "backprop_ctx",
    "check",
    "deflinear",
    "defunary",
    "dumps",
    "eval_all",
    "eval_graph",
    "format_graph",
    "format_node",
    "get_op",
    "graph_from_dict",
    "graph_schema",
    "graph_to_dict",
    "has_op",
    "jvp",
    "load",
    "loads",
    "missing_rules",
    "parse_graph",
    "register_op",
    "same_shape",
    "save",
    "unregister_op",
]
