"""Links 2 and 3 on a compiled graph: every nested rule call, then the wiring between them.

The compiled functions' jaxprs (``CompiledGraph.traceable(kind)``) contain one nested ``jit``
equation per rule call (``tl_fwd_<op>``, ``tl_jvp_<op>``, ``tl_vjp_<op>``), in tape order, plus
cotangent accumulation, zeros and dtype conversions (the compiler contract in
``docs/architecture.md``). The calling convention of a call for node ``j`` with flags
``receives`` is:

* ``tl_fwd_<op>(*args, *index) -> out``
* ``tl_jvp_<op>(*args, out, *tangents of flagged args, *index) -> tangent``
* ``tl_vjp_<op>(*args, out, ct, *index) -> (cotangent of each flagged arg,)``

**Link 2** (:func:`check_call`): each call's nested jaxpr, interpreted symbolically, equals the
op's reference rule on ``SYM`` (unflagged tangents zero), at every index assignment of the plan.
Results are cached by (call kind, signature, flags, jaxpr text).

**Link 3** (:func:`check_wiring`): the outer jaxpr is read abstractly: each call becomes an
opaque term of its inputs, ``add`` a formal sum (a multiset: fan-out contributions must all be
there, once each). The reference algorithms (``eval``, ``jvp``, ``backprop_ctx``) are run in the
same term algebra, and the terms of every output, output tangent and gradient must be equal:
which call receives which value, which cotangent flows to which parent, summed on fan-out,
nothing through detach, non-differentiable arguments or index inputs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import torchlean_ir as tl
from torchlean_ir.backends import NUMPY, SYM, SymArray
from torchlean_ir.extend import node_params

from . import (
    prims,  # noqa: F401  (registers every primitive's rules)
)
from ._f32 import constants
from ._jaxpr import Interpreter
from ._lowering import Lowered, abstract_first, compare_over_plan
from ._primitives import Unsupported
from ._report import Check, Counterexample
from ._rules import MAX_ELEMENTS, Collector, _seed, choose_elements, compare_arrays
from ._sig import Signature, index_plan, named_symbols
from ._tbackend import TENSOR

INT32_MAX = 2**31 - 1


class ContractError(Exception):
    """The compiled jaxpr does not have the shape the compiler contract promises."""


# -- calls -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One nested rule call of an outer jaxpr, matched to its tape entry."""

    kind: str  # "fwd" | "jvp" | "vjp"
    entry: Any  # compiler.TapeEntry
    eqn: Any  # the jit equation

    @property
    def inner(self) -> Any:
        return self.eqn.params["jaxpr"]


def expected_calls(tape: Sequence[Any], kind: str) -> list[tuple[str, Any]]:
    """The rule calls the contract promises for one compiled function, in order."""
    if kind == "forward":
        return [("fwd", e) for e in tape]
    if kind == "jvp":
        out: list[tuple[str, Any]] = []
        for e in tape:
            out.append(("fwd", e))
            if e.jvp is not None:
                out.append(("jvp", e))
        return out
    return [("fwd", e) for e in tape] + [("vjp", e) for e in reversed(tape) if e.vjp is not None]


def match_calls(jaxpr: Any, tape: Sequence[Any], kind: str) -> list[Call]:
    """The outer jaxpr's ``jit`` equations, matched in order to the promised calls."""
    eqns = [e for e in jaxpr.jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
    want = expected_calls(tape, kind)
    if len(eqns) != len(want):
        raise ContractError(
            f"the {kind} jaxpr has {len(eqns)} nested calls, the tape promises {len(want)}"
        )
    calls = []
    for eqn, (ck, entry) in zip(eqns, want, strict=True):
        name = str(eqn.params.get("name", ""))
        expect = f"tl_{ck}_{entry.op}"
        if name != expect:
            raise ContractError(
                f"the {kind} jaxpr calls {name!r} where the tape promises {expect!r} "
                f"(node {entry.node})"
            )
        calls.append(Call(ck, entry, eqn))
    return calls


def call_layout(
    kind: str, entry: Any, n_index: int
) -> tuple[tuple[tuple, ...], tuple[tuple, ...], tuple[bool, ...] | None]:
    """(inputs, outputs, flags) of a call in the convention above."""
    n = len(entry.parents)
    args = tuple(("arg", p) for p in range(n))
    index = tuple(("index", k) for k in range(n_index))
    if kind == "fwd":
        return (*args, *index), (("out",),), None
    flags = tuple(entry.receives)
    if kind == "jvp":
        tans = tuple(("tan", p) for p in range(n) if flags[p])
        return (*args, ("out",), *tans, *index), (("tan_out",),), flags
    grads = tuple(("grad", p) for p in range(n) if flags[p])
    return (*args, ("out",), ("ct",), *index), grads, flags


def check_call(
    graph: tl.GraphData,
    kind: str,
    entry: Any,
    inner: Any,
    dtype: str,
    *,
    max_elements: int = MAX_ELEMENTS,
) -> Check:
    """Link 2 for one call: its nested jaxpr against the op's reference rule."""
    sig = Signature.of(graph, entry.node)
    inputs, outputs, flags = call_layout(kind, entry, len(sig.index_types))
    low = Lowered({"fwd": "forward", "jvp": "jvp", "vjp": "vjp"}[kind], inner, inputs, outputs,
                  flags)  # fmt: skip
    col = Collector("compiled", f"compiled {kind} = reference")
    n_in = len(inner.jaxpr.invars)
    if n_in != len(inputs):
        col.fail(f"tl_{kind}_{sig.op} takes {n_in} inputs; the convention says {len(inputs)}")
        return col.check("")
    plan = index_plan(sig, seed=_seed(sig.label()), far=(INT32_MAX,))
    cov = compare_over_plan(col, sig, plan, low.kind, lambda _: low, max_elements, dtype)
    return col.check(f"{dtype} nested jaxpr; {cov}")


def call_key(graph: tl.GraphData, kind: str, entry: Any, inner: Any, dtype: str) -> tuple:
    """What a call check depends on (the jaxpr text and the reference rules included)."""
    sig = Signature.of(graph, entry.node)
    op = tl.get_op(sig.op)
    rules = (op.forward_rule, op.jvp_rule, op.vjp_rule)
    flags = tuple(entry.receives) if kind != "fwd" else ()
    return (kind, sig, flags, dtype, str(inner), rules)


# -- the term algebra of the wiring check ----------------------------------------------------


#: The inputs of each kind of call term, by position in its key (blank: not an input).
_FIELDS: dict[str, tuple[str, ...]] = {
    "fwd": ("", "", "args", "index"),
    "jvp": ("", "", "args", "out", "tangents", "index"),
    "vjp": ("", "", "", "args", "out", "ct", "index"),
}


class Terms:
    """Hash-consed terms: each distinct term is an int. Sums are sorted multisets."""

    def __init__(self) -> None:
        self._ids: dict[tuple, int] = {}
        self.node: list[tuple] = []
        self.zero = self.make("zero")

    def make(self, *key: Any) -> int:
        i = self._ids.get(key)
        if i is None:
            i = self._ids[key] = len(self.node)
            self.node.append(key)
        return i

    def add(self, *ts: int) -> int:
        parts: list[int] = []
        for t in ts:
            k = self.node[t]
            if k[0] == "zero":
                continue
            if k[0] == "sum":
                parts.extend(k[1])
            else:
                parts.append(t)
        if not parts:
            return self.zero
        if len(parts) == 1:
            return parts[0]
        return self.make("sum", tuple(sorted(parts)))

    def summands(self, t: int) -> list[int]:
        k = self.node[t]
        if k[0] == "zero":
            return []
        return list(k[1]) if k[0] == "sum" else [t]

    def show(self, t: int, graph: tl.GraphData) -> str:
        k = self.node[t]
        tag = k[0]
        if tag == "zero":
            return "0"
        if tag == "sum":
            return " + ".join(self.show(s, graph) for s in k[1])
        if tag == "leaf":
            return graph.leaves[k[1]].name
        if tag == "tan":
            return f"tangent of {graph.leaves[k[1]].name}"
        if tag == "seed":
            return f"seed {k[1]}"
        if tag == "index":
            return f"index {graph.index_inputs[k[1]].name}"
        if tag == "static":
            return f"static index {list(k[1])}"
        if tag in ("fwd", "jvp"):
            return f"{tag}(node {k[1]} {graph.nodes[k[1]].op})"
        if tag == "vjp":
            return f"vjp(node {k[1]} {graph.nodes[k[1]].op} -> arg {k[2]})"
        return str(k[:2])

    def explain(self, a: int, b: int, graph: tl.GraphData, depth: int = 0) -> tuple[str, str]:
        """How terms ``a`` (expected) and ``b`` (got) differ: the outermost place where they do,
        as (expected, got) descriptions."""
        sa, sb = self.summands(a), self.summands(b)
        la = sorted(self.show_shallow(s, graph) for s in sa)
        lb = sorted(self.show_shallow(s, graph) for s in sb)
        if la != lb or depth > 20:
            return (self._count(sa, graph), self._count(sb, graph))
        pa = sorted(sa, key=lambda s: self.show_shallow(s, graph))
        pb = sorted(sb, key=lambda s: self.show_shallow(s, graph))
        for x, y in zip(pa, pb, strict=True):
            if x == y:
                continue
            kx, ky = self.node[x], self.node[y]
            fields = _FIELDS.get(kx[0], ())
            for f, cx, cy in zip(fields, kx, ky, strict=False):
                if not f or cx == cy:
                    continue
                where = f"{self.show_shallow(x, graph)} receives {f}"
                if isinstance(cx, tuple):
                    for k, (u, v) in enumerate(zip(cx, cy, strict=False)):
                        if u != v:
                            e, g = self.explain(u, v, graph, depth + 1)
                            return f"{where}[{k}] = {e}", f"{where}[{k}] = {g}"
                    continue
                e, g = self.explain(cx, cy, graph, depth + 1)
                return f"{where} = {e}", f"{where} = {g}"
        return self.show(a, graph), self.show(b, graph)

    def show_shallow(self, t: int, graph: tl.GraphData) -> str:
        return self.show(t, graph) if self.node[t][0] != "sum" else "sum"

    def _count(self, parts: list[int], graph: tl.GraphData) -> str:
        if not parts:
            return "0 (no contribution)"
        shown = ", ".join(self.show_shallow(s, graph) for s in parts[:6])
        more = f", ... ({len(parts)} in all)" if len(parts) > 6 else ""
        word = "contribution" if len(parts) == 1 else "contributions"
        return f"{len(parts)} {word}: {shown}{more}"


def _vjp_none(graph: tl.GraphData, j: int) -> tuple[bool, ...]:
    """Per argument of node ``j``: does its reference VJP rule return ``None`` there?"""
    node = graph.nodes[j]
    op = tl.get_op(node.op)
    idx = [np.zeros(ix.type.shape, np.int64) if ix.value is None
           else np.asarray(ix.value, np.int64).reshape(ix.type.shape)
           for ix in graph.index_inputs]  # fmt: skip
    params = node_params(op, node, idx, j)

    try:  # on the tensor backend: lazy arrays, a cost that does not grow with the shapes
        lazy = tuple(TENSOR.zeros(graph.value_type(a).shape) for a in node.args)
        zero = TENSOR.zeros(node.type.shape)
        gs = op.vjp_rule(TENSOR, lazy, zero, zero, **params)  # type: ignore[misc]
    except Exception:  # a rule the tensor backend does not run: NumPy on zeros
        args = tuple(np.zeros(graph.value_type(a).shape) for a in node.args)
        out = np.zeros(node.type.shape)
        with np.errstate(all="ignore"):
            gs = op.vjp_rule(NUMPY, args, out, np.zeros(node.type.shape), **params)  # type: ignore[misc]
    gs = tuple(gs) if isinstance(gs, tuple | list) else (gs,)
    return tuple(g is None for g in gs)


class _Reference:
    """The reference interpreters' data flow in the term algebra."""

    def __init__(self, graph: tl.GraphData, T: Terms) -> None:
        self.g, self.T = graph, T
        L = graph.num_leaves
        self.index = [
            T.make("index", i) if ix.value is None else _static_term(T, ix.value, ix.type.shape)
            for i, ix in enumerate(graph.index_inputs)
        ]
        self.vals = [T.make("leaf", i) for i in range(L)]
        for j, node in enumerate(graph.nodes):
            self.vals.append(
                T.make("fwd", j, tuple(self.vals[a] for a in node.args),
                       tuple(self.index[i] for i in node.index_args))
            )  # fmt: skip
        self._none: dict[int, tuple[bool, ...]] = {}

    def vjp_none(self, j: int) -> tuple[bool, ...]:
        if j not in self._none:
            self._none[j] = _vjp_none(self.g, j)
        return self._none[j]

    def outputs(self) -> list[int]:
        return [self.vals[o] for o in self.g.outputs]

    def tangents(self) -> list[int]:
        g, T = self.g, self.T
        tans = [
            T.make("tan", i) if leaf.requires_grad else T.zero for i, leaf in enumerate(g.leaves)
        ]
        for j, node in enumerate(g.nodes):
            op = tl.get_op(node.op)
            ts = tuple(tans[a] if op.is_diff_arg(p) else T.zero for p, a in enumerate(node.args))
            if all(t == T.zero for t in ts):
                tans.append(T.zero)
                continue
            v = g.num_leaves + j
            tans.append(T.make("jvp", j, tuple(self.vals[a] for a in node.args), self.vals[v], ts,
                               tuple(self.index[i] for i in node.index_args)))  # fmt: skip
        return [tans[o] for o in g.outputs]

    def gradients(self) -> list[int]:
        g, T = self.g, self.T
        cts = [T.zero] * g.num_values
        for k, o in enumerate(g.outputs):
            cts[o] = T.add(cts[o], T.make("seed", k))
        for j in range(len(g.nodes) - 1, -1, -1):
            v = g.num_leaves + j
            if cts[v] == T.zero:
                continue
            node = g.nodes[j]
            op = tl.get_op(node.op)
            none = self.vjp_none(j)
            args = tuple(self.vals[a] for a in node.args)
            idx = tuple(self.index[i] for i in node.index_args)
            for p, a in enumerate(node.args):
                if not op.is_diff_arg(p) or none[p]:
                    continue
                cts[a] = T.add(cts[a], T.make("vjp", j, p, args, self.vals[v], cts[v], idx))
        return [cts[i] for i, leaf in enumerate(g.leaves) if leaf.requires_grad]


def _static_term(T: Terms, value: Any, shape: tuple[int, ...]) -> int:
    arr = np.minimum(np.asarray(value, dtype=np.int64), INT32_MAX).reshape(shape)
    return T.make("static", tuple(arr.reshape(-1).tolist()), tuple(shape))


def _outer_terms(
    graph: tl.GraphData, jaxpr: Any, calls: list[Call], kind: str, ref: _Reference, T: Terms,
    runtime_index: Sequence[int],
) -> list[int]:  # fmt: skip
    """Read the outer jaxpr abstractly: calls become terms, ``add`` sums."""
    j = jaxpr.jaxpr
    env: dict[Any, int] = {}
    L = graph.num_leaves
    grad_leaves = [i for i, leaf in enumerate(graph.leaves) if leaf.requires_grad]
    invars = list(j.invars)
    names: list[int] = [T.make("leaf", i) for i in range(L)]
    if kind == "jvp":
        names += [T.make("tan", i) for i in grad_leaves]
    elif kind == "vjp":
        names += [T.make("seed", k) for k in range(len(graph.outputs))]
    names += [T.make("index", i) for i in runtime_index]
    if len(names) != len(invars):
        raise ContractError(f"the {kind} jaxpr takes {len(invars)} inputs, expected {len(names)}")
    env.update(zip(invars, names, strict=True))
    for v, c in zip(j.constvars, jaxpr.consts, strict=True):
        env[v] = _const_term(T, c)
    call_iter = iter(calls)

    def read(v: Any) -> int:
        if type(v).__name__ == "Literal":
            return _const_term(T, v.val)
        return env[v]

    for eqn in j.eqns:
        prim = eqn.primitive.name
        ins = [read(v) for v in eqn.invars]
        if prim in ("jit", "pjit"):
            call = next(call_iter)
            outs = _call_terms(graph, call, ins, ref, T)
        elif prim in ("add", "add_any"):
            outs = [T.add(*ins)]
        elif prim == "broadcast_in_dim" and ins[0] == T.zero:
            outs = [T.zero]  # zeros of a value no contribution reached
        elif prim in ("convert_element_type", "copy", "copy_p"):
            (x,) = ins
            src, dst = eqn.invars[0].aval.dtype, eqn.outvars[0].aval.dtype
            outs = [T.make("convert", str(dst), x) if src != dst and x != T.zero else x]
        else:
            raise ContractError(f"primitive {prim!r} in the outer {kind} jaxpr")
        for var, t in zip(eqn.outvars, outs, strict=True):
            env[var] = t
    return [read(v) for v in j.outvars]


def _const_term(T: Terms, c: Any) -> int:
    arr = np.asarray(c)
    if arr.dtype.kind == "f" and not np.any(arr):
        return T.zero
    if arr.dtype.kind in "iu":
        return T.make("static", tuple(np.minimum(arr, INT32_MAX).reshape(-1).tolist()),
                      tuple(arr.shape))  # fmt: skip
    return T.make("const", arr.dtype.str, tuple(arr.shape), arr.tobytes())


def _call_terms(graph: tl.GraphData, call: Call, ins: list[int], ref: _Reference,
                T: Terms) -> list[int]:  # fmt: skip
    e = call.entry
    n = len(e.parents)
    n_idx = len(e.index_args)
    args = tuple(ins[:n])
    idx = tuple(ins[len(ins) - n_idx :]) if n_idx else ()
    if call.kind == "fwd":
        return [T.make("fwd", e.node, args, idx)]
    out = ins[n]
    if call.kind == "jvp":
        given = iter(ins[n + 1 : len(ins) - n_idx])
        tans = tuple(next(given) if f else T.zero for f in e.receives)
        return [T.make("jvp", e.node, args, out, tans, idx)]
    ct = ins[n + 1]
    none = ref.vjp_none(e.node)
    op = tl.get_op(e.op)
    # A reference rule's None for a differentiable argument is the compiled rule's zeros (link 2
    # checks them); a non-differentiable argument gets nothing in the reference, so anything
    # the compiled tape sends it stays a (mismatching) term.
    return [T.zero if none[p] and op.is_diff_arg(p)
            else T.make("vjp", e.node, p, args, out, ct, idx)
            for p in range(n) if e.receives[p]]  # fmt: skip


def check_wiring(
    graph: tl.GraphData,
    jaxprs: dict[str, Any],
    calls: dict[str, list[Call]],
    runtime_index: Sequence[int],
) -> list[Check]:
    """Link 3: the data flow of each compiled function equals the reference's."""
    T = Terms()
    ref = _Reference(graph, T)
    checks = []
    grad_names = [leaf.name for leaf in graph.leaves if leaf.requires_grad]
    for kind in ("forward", "jvp", "vjp"):
        t0 = time.perf_counter()
        name = f"{kind} wiring = reference"
        try:
            got = _outer_terms(graph, jaxprs[kind], calls[kind], kind, ref, T, runtime_index)
        except ContractError as e:
            checks.append(Check("wiring", name, "not verified", "undecided", "", str(e), None,
                                time.perf_counter() - t0))  # fmt: skip
            continue
        outs = ref.outputs()
        labels = [f"output {k}" for k in range(len(outs))]
        want = list(outs)
        if kind == "jvp":
            want += ref.tangents()
            labels += [f"tangent of output {k}" for k in range(len(outs))]
        elif kind == "vjp":
            want += ref.gradients()
            labels += [f"gradient of {n}" for n in grad_names]
        ce = None
        if len(got) != len(want):
            ce = Counterexample(name, "outputs", {}, f"{len(want)} results", f"{len(got)}",
                                "the compiled function's result count")  # fmt: skip
        else:
            for label, w, g in zip(labels, want, got, strict=True):
                if w != g:
                    exp, gv = T.explain(w, g, graph)
                    ce = Counterexample(name, label, {"inputs": "any (symbolic wiring)"}, exp, gv,
                                        "term comparison (exact)")  # fmt: skip
                    break
        n_terms = sum(len(T.summands(w)) for w in want)
        cov = f"{len(want)} results, {len(calls[kind])} calls, {n_terms} top-level contributions"
        checks.append(Check("wiring", name, "exact", "fail" if ce else "pass", cov,
                            "abstract interpretation of the outer jaxpr", ce,
                            time.perf_counter() - t0))  # fmt: skip
    return checks


# -- end to end ------------------------------------------------------------------------------


def check_end_to_end(
    graph: tl.GraphData,
    jaxprs: dict[str, Any],
    runtime_index: Sequence[int],
    *,
    index_sets: Sequence[dict[str, np.ndarray]],
    max_elements: int = MAX_ELEMENTS,
    dtype: str = "float64",
) -> list[Check]:
    """The whole compiled forward, JVP and tape VJP interpreted symbolically (nested calls
    included) against ``eval_graph`` / ``jvp`` / ``backprop_ctx`` on ``SYM`` (with the
    constants of a compilation in ``dtype``, :mod:`verify._f32`)."""
    leaves = {leaf.name: named_symbols(leaf.name, leaf.type.shape) for leaf in graph.leaves}
    grad_leaves = [leaf for leaf in graph.leaves if leaf.requires_grad]
    tans = {leaf.name: named_symbols("d" + leaf.name, leaf.type.shape) for leaf in grad_leaves}
    seeds = [named_symbols(f"seed{k}", t.shape) for k, t in enumerate(graph.output_types)]
    domains: dict[str, str] = {}
    checks = []

    def reference(kind: str, idx: dict[str, np.ndarray], K: int) -> tuple[list, list[str]]:
        if kind == "forward":
            want = list(tl.eval_graph(graph, leaves, idx or None, B=SYM))
            return want, [f"output {k}" for k in range(K)]
        if kind == "jvp":
            outs, touts = tl.jvp(graph, leaves, tans, idx or None, B=SYM)
            labels = [f"output {k}" for k in range(K)] + [f"tangent {k}" for k in range(K)]
            return [*outs, *touts], labels
        seed = tuple(seeds) if K > 1 else seeds[0]
        cts = tl.backprop_ctx(graph, leaves, seed, idx or None, B=SYM)
        outs = tl.eval_graph(graph, leaves, idx or None, B=SYM)
        want = [*outs, *[cts[leaf.name] for leaf in grad_leaves]]
        labels = [f"output {k}" for k in range(K)] + [
            f"gradient of {leaf.name}" for leaf in grad_leaves
        ]
        return want, labels

    def run(col: Collector, kind: str) -> list[str]:
        covs: list[str] = []
        for idx in index_sets:
            fixed = {f"index {k}": str(np.asarray(v).tolist()) for k, v in idx.items()}
            flat_idx = [np.asarray(idx[graph.index_inputs[i].name], dtype=np.int64)
                        for i in runtime_index]  # fmt: skip
            args: list[Any] = [leaves[leaf.name] for leaf in graph.leaves]
            if kind == "jvp":
                args += [tans[leaf.name] for leaf in grad_leaves]
            elif kind == "vjp":
                args += seeds
            try:
                got = Interpreter().run(jaxprs[kind], *args, *flat_idx)
            except Unsupported as e:
                col.undecided = col.undecided or f"{e} (not interpreted)"
                break
            except Exception as e:
                col.undecided = col.undecided or f"interpreter error {type(e).__name__}: {e}"
                break
            K = len(graph.outputs)
            with constants(dtype):
                want, labels = reference(kind, idx, K)
            if len(got) != len(want):
                col.fail(f"{len(got)} results, expected {len(want)}")
                break
            for label, w, g in zip(labels, want, got, strict=True):
                ws = w if hasattr(w, "a") else SYM.asarray(w)
                elems, cov = choose_elements(ws.shape, max_elements, 0)
                if "all" not in cov:
                    covs.append(f"{label}: {cov}")
                compare_arrays(col, label, SymArray(g), ws, domains, elements=elems,
                               fixed_inputs=fixed)  # fmt: skip
                if col.failed:
                    break
            if col.failed:
                break
        return covs

    for kind in ("forward", "jvp", "vjp"):
        col = Collector("end-to-end", f"compiled {kind} = reference {kind}")
        covs = abstract_first(col, lambda c, kind=kind: run(c, kind))
        n_idx = len(index_sets) if runtime_index else 0
        cov = ("sampled: " + "; ".join(covs) if covs else "all outputs and gradients") + (
            ", symbolic leaves" + (f", {n_idx} index assignments" if n_idx else "")
        )
        checks.append(col.check(cov))
    return checks
