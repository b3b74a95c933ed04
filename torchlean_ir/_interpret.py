"""Reference semantics: the spec the compiler and the verifier are held to.

Four short interpreters over a graph, each a loop over nodes with an environment, in NumPy
float64 (any backend can be passed, which is how the verifier runs them over symbols):

* :func:`eval_graph` / :func:`eval_all` - forward values;
* :func:`jvp` - forward mode over the whole context;
* :func:`backprop_ctx` - reverse accumulation from a seed on the output(s), summing cotangents on
  fan-out, one cotangent per leaf (TorchLean's ``backpropCtx``);
* :func:`backprop_all_ctx` - a cotangent for every value (``backpropAllCtx``).

Errors raised inside the loop name the node: ``while evaluating node 7 (`%9: f32[3] = tanh(%8)`)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from ._errors import EvalError, TorchleanError
from ._graph import GraphData, Node
from ._printer import format_node
from ._registry import Op, get_op
from ._types import NAT_MAX
from ._util import clip, short_repr
from .backends import NUMPY

Leaves = Mapping[str, Any] | Sequence[Any]
IndexValues = Mapping[str, Any] | Sequence[Any] | None


@contextmanager
def at_node(
    graph: GraphData, j: int, what: str, error: type[TorchleanError] = EvalError
) -> Iterator[None]:
    """Re-raise any error inside the block with node ``j`` printed: a :class:`TorchleanError` as
    its own type, anything else as ``error`` (the compiler passes its ``CompileError``)."""
    try:
        yield
    except TorchleanError as e:
        raise type(e)(f"while {what} node {j} (`{clip(format_node(graph, j), 160)}`): {e}") from e
    except Exception as e:
        raise error(
            f"while {what} node {j} (`{clip(format_node(graph, j), 160)}`): {type(e).__name__}: {e}"
        ) from e


# -- argument normalisation ------------------------------------------------------------------


def _as_list(graph: GraphData, values: Leaves, what: str, partial: bool = False) -> list[Any]:
    names = [leaf.name for leaf in graph.leaves]
    if isinstance(values, Mapping):
        unknown = sorted(set(values) - set(names))
        if unknown:
            raise EvalError(f"{what}: unknown leaf {unknown[0]!r} (leaves: {', '.join(names)})")
        missing = [n for n in names if n not in values]
        if missing and not partial:
            raise EvalError(f"{what}: missing leaf {missing[0]!r}")
        return [values.get(n) for n in names]
    values = list(values)
    if len(values) != len(names):
        raise EvalError(f"{what}: expected {len(names)} values in context order, got {len(values)}")
    return values


def leaf_values(
    graph: GraphData, leaves: Leaves, B: Any = NUMPY, what: str = "leaves"
) -> list[Any]:
    """The leaf values in context order, converted and shape-checked."""
    out = []
    for leaf, v in zip(graph.leaves, _as_list(graph, leaves, what), strict=True):
        out.append(_convert(B, v, leaf.type.shape, f"{what}[{leaf.name!r}]"))
    return out


def _convert(B: Any, v: Any, shape: tuple[int, ...], where: str) -> Any:
    if B is NUMPY:
        try:
            arr = np.asarray(v, dtype=np.float64)
        except (TypeError, ValueError):
            raise EvalError(f"{where}: expected a float array, got {type(v).__name__}") from None
    else:
        arr = v if hasattr(v, "shape") else B.asarray(v)
    if tuple(arr.shape) != tuple(shape):
        raise EvalError(f"{where}: expected shape {list(shape)}, got {list(arr.shape)}")
    return arr


def index_values(graph: GraphData, index: IndexValues) -> list[np.ndarray]:
    """Index-input values in context order (static ones from the graph), validated as nats."""
    specs = graph.index_inputs
    runtime = [ix.name for ix in specs if ix.value is None]
    given: dict[str, Any]
    if index is None:
        given = {}
    elif isinstance(index, Mapping):
        given = dict(index)
    else:
        seq = list(index)
        if len(seq) != len(runtime):
            raise EvalError(f"index: expected {len(runtime)} runtime index values, got {len(seq)}")
        given = dict(zip(runtime, seq, strict=True))
    unknown = sorted(set(given) - {ix.name for ix in specs})
    if unknown:
        raise EvalError(f"index: unknown index input {unknown[0]!r}")
    out = []
    for ix in specs:
        if ix.value is not None:
            if ix.name in given:
                raise EvalError(f"index[{ix.name!r}]: static index input; it cannot be overridden")
            out.append(np.asarray(ix.value, dtype=np.int64).reshape(ix.type.shape))
            continue
        if ix.name not in given:
            raise EvalError(f"index: missing index input {ix.name!r}")
        out.append(_runtime_index(given[ix.name], ix.type.shape, f"index[{ix.name!r}]"))
    return out


def _runtime_index(v: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    """A runtime index value as int64: non-negative integers of ``shape``; values above
    ``NAT_MAX`` read as ``NAT_MAX`` (out of range either way, never wrapped)."""
    try:
        arr = np.asarray(v)
    except (ValueError, TypeError, OverflowError):
        raise EvalError(f"{where}: expected non-negative integers, got {short_repr(v)}") from None
    if arr.shape != shape:
        raise EvalError(f"{where}: expected shape {list(shape)}, got {list(arr.shape)}")
    if arr.size == 0:
        return np.zeros(shape, np.int64)
    if arr.dtype == object:  # Python ints beyond the int64 range
        flat = arr.reshape(-1).tolist()
        if not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in flat):
            raise EvalError(f"{where}: expected non-negative integers, got {short_repr(v)}")
        return np.array([min(x, NAT_MAX) for x in flat], np.int64).reshape(shape)
    if not np.issubdtype(arr.dtype, np.integer) or (arr.dtype.kind == "i" and np.any(arr < 0)):
        raise EvalError(f"{where}: expected non-negative integers, got {short_repr(v)}")
    if arr.dtype == np.uint64:  # the only integer dtype beyond int64
        arr = np.minimum(arr, np.uint64(NAT_MAX))
    return arr.astype(np.int64)


def node_params(op: Op, node: Node, idx: Sequence[Any], position: int) -> dict[str, Any]:
    """Keyword parameters of a node's rules: attributes, index values by name, and the node's
    position for ops that need it."""
    params: dict[str, Any] = dict(node.attrs)
    for spec, a in zip(op.index_args, node.index_args, strict=True):
        params[spec.name] = idx[a]
    if op.needs_position:
        params["_position"] = position
    return params


# -- the interpreters ------------------------------------------------------------------------


def _norm(B: Any, x: Any) -> Any:
    """NumPy results as float64 arrays (reductions return NumPy scalars)."""
    return np.asarray(x, dtype=np.float64) if B is NUMPY else x


def _forward(
    graph: GraphData, vals: list[Any], idx: list[Any], B: Any, rule: Callable[[Op], Any]
) -> list[Any]:
    n_leaves = graph.num_leaves
    for j, node in enumerate(graph.nodes):
        with at_node(graph, j, "evaluating"):
            op = get_op(node.op)
            args = [vals[a] for a in node.args]
            vals.append(_norm(B, rule(op)(B, *args, **node_params(op, node, idx, j))))
    assert len(vals) == n_leaves + len(graph.nodes)
    return vals


def eval_all(
    graph: GraphData, leaves: Leaves, index: IndexValues = None, *, B: Any = NUMPY
) -> list[Any]:
    """Every value of the graph (leaves, then nodes)."""
    vals = leaf_values(graph, leaves, B)
    idx = index_values(graph, index)
    with np.errstate(all="ignore"):
        return _forward(graph, vals, idx, B, lambda op: op.forward_rule)


def eval_graph(
    graph: GraphData, leaves: Leaves, index: IndexValues = None, *, B: Any = NUMPY
) -> tuple[Any, ...]:
    """The graph's outputs (always a tuple)."""
    vals = eval_all(graph, leaves, index, B=B)
    return tuple(vals[o] for o in graph.outputs)


def jvp(
    graph: GraphData,
    leaves: Leaves,
    tangents: Leaves,
    index: IndexValues = None,
    *,
    B: Any = NUMPY,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Forward mode: ``(outputs, output tangents)`` for one tangent per leaf.

    ``tangents`` is a mapping by leaf name (a missing leaf has a zero tangent) or a sequence in
    context order."""
    vals = leaf_values(graph, leaves, B)
    idx = index_values(graph, index)
    given = _as_list(graph, tangents, "tangents", partial=True)
    tans = [
        B.zeros(leaf.type.shape)
        if t is None
        else _convert(B, t, leaf.type.shape, f"tangents[{leaf.name!r}]")
        for leaf, t in zip(graph.leaves, given, strict=True)
    ]
    with np.errstate(all="ignore"):
        for j, node in enumerate(graph.nodes):
            with at_node(graph, j, "differentiating (jvp)"):
                op = get_op(node.op)
                params = node_params(op, node, idx, j)
                args = [vals[a] for a in node.args]
                out = op.forward_rule(B, *args, **params)  # type: ignore[misc]
                targs = tuple(
                    tans[a] if op.is_diff_arg(p) else B.zeros_like(tans[a])
                    for p, a in enumerate(node.args)
                )
                tans.append(_norm(B, op.jvp_rule(B, tuple(args), targs, out, **params)))  # type: ignore[misc]
                vals.append(out)
    return tuple(vals[o] for o in graph.outputs), tuple(tans[o] for o in graph.outputs)


def _seeds(graph: GraphData, seed: Any, B: Any) -> list[Any]:
    outs = graph.outputs
    if seed is None:
        if len(outs) != 1 or graph.value_type(outs[0]).shape != ():
            raise EvalError("seed: required unless the graph has a single scalar output")
        return [B.ones(())]
    seeds = list(seed) if len(outs) > 1 and isinstance(seed, tuple | list) else [seed]
    if len(seeds) != len(outs):
        raise EvalError(f"seed: expected {len(outs)} seeds (one per output), got {len(seeds)}")
    return [
        None if s is None else _convert(B, s, graph.value_type(o).shape, f"seed[{k}]")
        for k, (o, s) in enumerate(zip(outs, seeds, strict=True))
    ]


def backprop_all_ctx(
    graph: GraphData,
    leaves: Leaves,
    seed: Any = None,
    index: IndexValues = None,
    *,
    B: Any = NUMPY,
) -> list[Any]:
    """Reverse accumulation: a cotangent for every value (leaves, then nodes).

    ``seed`` is the cotangent of the output (of each output, as a tuple, for several outputs;
    ``None`` entries are zero); it defaults to 1 for a single scalar output. A value that no
    cotangent reaches gets zeros."""
    vals = eval_all(graph, leaves, index, B=B)
    idx = index_values(graph, index)
    cts: list[Any] = [None] * len(vals)
    for o, s in zip(graph.outputs, _seeds(graph, seed, B), strict=True):
        if s is not None:
            cts[o] = s if cts[o] is None else cts[o] + s
    n_leaves = graph.num_leaves
    with np.errstate(all="ignore"):
        for j in range(len(graph.nodes) - 1, -1, -1):
            ct = cts[n_leaves + j]
            if ct is None:
                continue
            node = graph.nodes[j]
            with at_node(graph, j, "back-propagating through"):
                op = get_op(node.op)
                args = tuple(vals[a] for a in node.args)
                arg_cts = op.vjp_rule(
                    B, args, vals[n_leaves + j], ct, **node_params(op, node, idx, j)
                )  # type: ignore[misc]
                for p, (a, g) in enumerate(zip(node.args, arg_cts, strict=True)):
                    if g is None or not op.is_diff_arg(p):
                        continue
                    g = _norm(B, g)
                    cts[a] = g if cts[a] is None else cts[a] + g
    return [B.zeros(graph.value_type(v).shape) if c is None else c for v, c in enumerate(cts)]


def backprop_ctx(
    graph: GraphData,
    leaves: Leaves,
    seed: Any = None,
    index: IndexValues = None,
    *,
    B: Any = NUMPY,
) -> dict[str, Any]:
    """Reverse accumulation: one cotangent per leaf, by name, in context order (every leaf,
    whatever its ``requires_grad``)."""
    cts = backprop_all_ctx(graph, leaves, seed, index, B=B)
    return {leaf.name: cts[i] for i, leaf in enumerate(graph.leaves)}
