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
from ._dot import GraphvizError, render_svg, to_dot
from ._drawing import Block, Drawing, NodeStyle, Scene, drawing, find_blocks, scene
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
from ._layout import layered_svg
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
    lower_widened,
    missing_rules,
    register_op,
    same_shape,
    unregister_op,
)
from ._types import NAT_MAX, DType, IndexType, Shape, TensorType

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_LIMITS",
    "FORMAT",
    "INLINE_LIMIT",
    "NAT_MAX",
    "REQUIRED_RULES",
    "VERSION",
    "AttrError",
    "AttrSpec",
    "Attrs",
    "Block",
    "ConstArray",
    "Context",
    "DType",
    "Drawing",
    "EvalError",
    "GraphBuilder",
    "GraphCheckError",
    "GraphData",
    "GraphFormatError",
    "GraphParseError",
    "GraphvizError",
    "IndexArg",
    "IndexInput",
    "IndexType",
    "IndexVar",
    "Leaf",
    "Limits",
    "Node",
    "NodeStyle",
    "Op",
    "Scene",
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
    "drawing",
    "dumps",
    "eval_all",
    "eval_graph",
    "find_blocks",
    "format_graph",
    "format_node",
    "get_op",
    "graph_from_dict",
    "graph_schema",
    "graph_to_dict",
    "has_op",
    "jvp",
    "layered_svg",
    "load",
    "loads",
    "lower_widened",
    "missing_rules",
    "parse_graph",
    "register_op",
    "render_svg",
    "same_shape",
    "save",
    "scene",
    "to_dot",
    "unregister_op",
]
