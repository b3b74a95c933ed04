"""The verifier's use of the compiler: compile, and trace exactly what XLA compiles."""

from __future__ import annotations

from typing import Any

import numpy as np

import torchlean_ir as tl


class CompilerUnavailable(Exception):
    """The ``compiler`` package cannot be imported."""


def compile_graph(graph: tl.GraphData, dtype: str, precision: str = "float32") -> Any:
    """``compiler.compile(graph, dtype=..., matmul_precision=...)`` (a cached
    ``CompiledGraph``)."""
    try:
        import compiler
    except ImportError as e:  # pragma: no cover - the package ships with the compiler
        raise CompilerUnavailable(f"the compiler package is not importable: {e}") from None
    return compiler.compile(
        graph, dtype={"float64": "f64", "float32": "f32"}[dtype], matmul_precision=precision
    )


def outer_jaxprs(cg: Any) -> dict[str, Any]:
    """The jaxpr of each compiled function: ``jax.make_jaxpr`` of the exact traced function."""
    return {kind: cg.traceable(kind).jaxpr() for kind in ("forward", "jvp", "vjp")}


def trace_entry(cg: Any, entry: Any, kind: str) -> Any:
    """The nested jaxpr of one tape entry's rule function, traced alone at the avals it is
    called with (the same jaxpr the outer trace nests)."""
    import jax

    graph = cg.graph
    dt = cg.dtype
    fn = {"fwd": entry.forward, "jvp": entry.jvp, "vjp": entry.vjp}[kind]
    args = [np.zeros(graph.value_type(a).shape, dt) for a in entry.parents]
    node = graph.nodes[entry.node]
    out = np.zeros(node.type.shape, dt)
    idx = [np.zeros(graph.index_inputs[i].type.shape, np.int32) for i in entry.index_args]
    if kind == "fwd":
        ex = [*args, *idx]
    elif kind == "jvp":
        tans = [a for a, f in zip(args, entry.receives, strict=True) if f]
        ex = [*args, out, *tans, *idx]
    else:
        ex = [*args, out, out, *idx]
    jx = jax.make_jaxpr(fn)(*ex)
    (eqn,) = jx.jaxpr.eqns
    return eqn.params["jaxpr"]
