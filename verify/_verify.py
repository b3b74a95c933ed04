"""``verify_graph``: the three links of the chain for one graph, with caching and processes.

1. Rule soundness per distinct op signature (:mod:`verify._rules`).
2. The compiled tape's nested rule calls against the reference rules, per distinct call
   (:mod:`verify._tape`); the whole compiled functions end to end when the graph is small.
3. The wiring of the compiled functions against the reference data flow.

Results of links 1 and 2 are cached in the process by everything they depend on (signature,
rule functions, jaxpr text), so a graph's cost grows with its number of distinct signatures plus
a linear pass for the wiring.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

import torchlean_ir as tl
from torchlean_ir import eval_all
from torchlean_ir.backends import SYM

from . import _sizecert
from . import terms as T
from ._compile import CompilerUnavailable, compile_graph, outer_jaxprs, trace_entry
from ._decide import tree_size
from ._f32 import NOTE, reduced_note
from ._lowering import check_op_lowering
from ._methods import METHODS, Method, call_check, rule_checks
from ._plugins import load_plugin
from ._report import Check, NodeReport, Report
from ._rules import MAX_ELEMENTS
from ._sig import Signature, named_symbols, rule_names
from ._tape import ContractError, call_key, check_end_to_end, check_wiring, match_calls

Progress = Callable[[str, int, int], None]
EndToEnd = Literal["auto", "always", "never"]

#: ``end_to_end="auto"`` runs the whole-graph symbolic check up to this many nodes ...
E2E_MAX_NODES = 48
#: ... and this many elements over all values of the graph ...
E2E_MAX_ELEMENTS = 3000
#: ... and this many operations in an element of the symbolic forward (as a tree).
E2E_MAX_TREE = 20000

_RULE_CACHE: dict[tuple, list[Check]] = {}
_CALL_CACHE: dict[tuple, Check] = {}
_LOWER_CACHE: dict[tuple, list[Check]] = {}


def clear_caches() -> None:
    """Forget every cached check result (rule certificates included)."""
    _sizecert.clear()
    _RULE_CACHE.clear()
    _CALL_CACHE.clear()
    _LOWER_CACHE.clear()


def _rule_key(sig: Signature, max_elements: int, kinks: bool, method: str) -> tuple:
    op = tl.get_op(sig.op)
    rules = (op.shape_rule, op.forward_rule, op.sym_rule, op.jvp_rule, op.vjp_rule, op.kinks_rule)
    return (sig, rules, max_elements, kinks, method)


@dataclass(frozen=True)
class Options:
    """What :func:`verify_graph` checks and how hard."""

    dtype: str = "float64"
    compiled: bool = True
    end_to_end: EndToEnd = "auto"
    kinks: bool = True
    max_elements: int = MAX_ELEMENTS
    jobs: int = 1
    plugins: tuple[str, ...] = ()
    method: Method = "auto"
    #: ``time.time()`` past which nothing more is checked (``verify_graph(timeout=...)``)
    deadline: float | None = None
    timeout: float | None = None
    #: the compiled artifact's matmul / convolution precision (``compiler._precision``)
    matmul_precision: str = "float32"


#: The reason of a check the timeout left out, and of one it interrupted.
NOT_REACHED = "not reached before the timeout"
STOPPED = "stopped by the timeout"


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.time() >= deadline


def _timed(deadline: float | None, names: Sequence[tuple[Any, str]], fn: Callable[..., Any],
           *args: Any) -> tuple[list[Check], bool]:  # fmt: skip
    """``fn(*args)`` (a list of checks, named ``names`` as ``(link, name)``) under the deadline:
    the checks and whether they are complete (only complete results are cached).

    Past the deadline nothing starts: each check is ``not verified``, not reached. A check the
    deadline interrupts (the budget of :mod:`verify.terms` stops the symbolic work inside, in
    both levels) is ``not verified``, stopped; of a check that ended after the deadline only
    a proof (an exact pass) or a refutation (a failure) is kept, since the work the deadline
    cut short may have settled for less."""
    if deadline is None:
        return fn(*args), True
    left = deadline - time.time()
    if left <= 0:
        return [_not_verified(link, n, NOT_REACHED) for link, n in names], False
    try:
        with T.budget(left):
            out = fn(*args)
    except T.OutOfTime:
        return [_not_verified(link, n, STOPPED) for link, n in names], False
    if not _past(deadline):
        return out, True
    return [c if c.result == "fail" or (c.result, c.method) == ("pass", "exact") else
            replace(c, method="not verified", result="undecided", how=f"{STOPPED} ({c.how})")
            for c in out], False  # fmt: skip


def graph_dtype(graph: tl.GraphData) -> str:
    """The dtype ``compiler.compile(graph)`` runs: the graph's own float dtype (its first
    leaf's, else its first node's; f32 for an empty graph)."""
    if graph.leaves:
        d = graph.leaves[0].type.dtype
    elif graph.nodes:
        d = graph.nodes[0].type.dtype
    else:
        return "f32"
    return "f64" if d.value == "f64" else "f32"


def _precision(value: str) -> str:
    names = ("float32", "tf32", "bf16")  # compiler._precision
    if value not in names:
        raise ValueError(f"matmul_precision must be one of {', '.join(names)}, got {value!r}")
    return value


def _float_dtype(dtype: str) -> str:
    d = {"f64": "float64", "float64": "float64", "f32": "float32", "float32": "float32"}.get(dtype)
    if d is None:
        raise ValueError(f"dtype must be f32 or f64, got {dtype!r}")
    return d


# -- worker processes ------------------------------------------------------------------------


def _init_worker(plugins: Sequence[str]) -> None:
    for m in plugins:
        load_plugin(m)


def _work_rule(
    sig: Signature, max_elements: int, kinks: bool, method: Method, deadline: float | None
) -> tuple[list[Check], bool]:
    names = [("rule", n) for n in rule_names(sig, kinks)]

    def run() -> list[Check]:
        return rule_checks(sig, method=method, max_elements=max_elements, kinks=kinks)

    return _timed(deadline, names, run)


def _work_call(
    graph_json: str,
    dtype: str,
    precision: str,
    node: int,
    kind: str,
    text: str,
    max_elements: int,
    method: Method,
    deadline: float | None,
) -> tuple[list[Check], bool]:
    name = [("compiled", f"compiled {kind} = reference")]
    if _past(deadline):
        return _timed(deadline, name, list)
    graph = tl.loads(graph_json)
    cg = compile_graph(graph, dtype, precision)
    entry = next(e for e in cg.tape if e.node == node)
    inner = trace_entry(cg, entry, kind)
    if str(inner) != text:
        return [Check("compiled", f"compiled {kind} = reference", "not verified", "undecided",
                      "", "the worker traced a different jaxpr for this call")], True  # fmt: skip
    return _work_call_traced(graph, kind, entry, inner, dtype, max_elements, method, deadline)


def _work_call_traced(
    graph: tl.GraphData,
    kind: str,
    entry: Any,
    inner: Any,
    dtype: str,
    max_elements: int,
    method: Method,
    deadline: float | None,
) -> tuple[list[Check], bool]:
    name = [("compiled", f"compiled {kind} = reference")]

    def run() -> list[Check]:
        return [call_check(graph, kind, entry, inner, dtype, method=method,
                           max_elements=max_elements)]  # fmt: skip

    return _timed(deadline, name, run)


#: Why a pool of worker processes fails at start (``jobs > 1``), told to the caller.
MAIN_GUARD = (
    "a script that calls verify_graph(jobs > 1) must do so under `if __name__ == "
    '"__main__":` (each worker process imports the main module; docs/verification.md)'
)


class WorkerError(RuntimeError):
    """The worker processes of ``verify_graph(jobs > 1)`` could not run."""


def _refuse_in_a_worker() -> None:
    """A worker process that is still importing the main module (a script without the
    ``__main__`` guard) must not start a pool of its own: say why, in the worker's stderr."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise WorkerError(f"verify_graph(jobs > 1) called while a worker process starts: "
                          f"{MAIN_GUARD}")  # fmt: skip


class _Runner:
    """Runs independent checks in-process or in a pool of processes."""

    def __init__(self, jobs: int, plugins: Sequence[str]) -> None:
        self.pool: cf.ProcessPoolExecutor | None = None
        if jobs > 1:
            ctx = multiprocessing.get_context("spawn")
            self.pool = cf.ProcessPoolExecutor(jobs, ctx, _init_worker, (tuple(plugins),))

    def map(self, fn: Callable[..., Any], tasks: list[tuple], progress: Callable[[], None]) -> list:
        if self.pool is None:
            out = []
            for t in tasks:
                out.append(fn(*t))
                progress()
            return out
        try:
            futures = [self.pool.submit(fn, *t) for t in tasks]
            for _ in cf.as_completed(futures):
                progress()
            return [f.result() for f in futures]
        except cf.process.BrokenProcessPool as e:
            raise WorkerError(f"the worker processes stopped ({e}); {MAIN_GUARD}; otherwise a "
                              "worker was killed (e.g. out of memory)") from None  # fmt: skip

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)


# -- the driver ------------------------------------------------------------------------------


def verify_graph(
    graph: tl.GraphData,
    *,
    dtype: str | None = None,
    compiled: bool = True,
    end_to_end: EndToEnd = "auto",
    kinks: bool = True,
    max_elements: int = MAX_ELEMENTS,
    jobs: int = 1,
    plugins: Iterable[str] = (),
    progress: Progress | None = None,
    name: str | None = None,
    method: Method = "auto",
    timeout: float | None = None,
    matmul_precision: str = "float32",
    deadline: float | None = None,
) -> Report:
    """Verify ``graph``: rule soundness of every op signature, the compiled tape's rule calls
    and wiring (compiled in ``dtype``: by default the graph's own dtype, what
    ``compiler.compile(graph)`` runs), and the whole compiled functions end
    to end when small (``end_to_end``). Returns a :class:`~verify.Report`.

    ``method`` picks how links 1 and 2 cover the elements (:mod:`verify._methods`): ``"auto"``
    (tensor level, the element-wise method for what it leaves undecided on small signatures),
    ``"tensor"`` or ``"elements"``.

    ``jobs > 1`` runs the per-signature checks in that many processes (fresh interpreters that
    import ``plugins``; a script that calls this at import time needs an
    ``if __name__ == "__main__":`` guard, since each process imports the script's main module).

    ``timeout`` (seconds) bounds the run: past it nothing more is checked, work in progress
    stops, and each check not decided is ``not verified``, "not reached before the timeout" or
    "stopped by the timeout" (the verdict is then ``undecided`` unless a mismatch was found).
    ``deadline`` (a ``time.time()`` value) is the same bound shared by several calls (the
    command line's ``--timeout`` over several graphs): the earlier of the two ends the run, and
    the report's note names ``timeout``, the bound the caller was given.
    ``matmul_precision`` is the precision of the compiled artifact's matrix products and
    convolutions (``compiler.compile(..., matmul_precision=...)``): the report names it, and a
    reduced one (``"tf32"``, ``"bf16"``) drops the float32 statement (its note says so).

    Raises :class:`torchlean_ir.TorchleanError` for an invalid graph."""
    t0 = time.perf_counter()
    start = time.time()
    tl.check(graph)
    dtype = dtype or graph_dtype(graph)
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if timeout is not None and not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    if jobs > 1:
        _refuse_in_a_worker()
    if deadline is not None:
        deadline = deadline if timeout is None else min(deadline, start + timeout)
    elif timeout is not None:
        deadline = start + timeout
    opts = Options(_float_dtype(dtype), compiled, end_to_end, kinks, max_elements, jobs,
                   tuple(plugins), method, deadline, timeout,
                   _precision(matmul_precision))  # fmt: skip
    report_progress = progress or (lambda stage, done, total: None)
    runner = _Runner(jobs, opts.plugins)
    try:
        return _verify(graph, opts, runner, report_progress, name, t0)
    finally:
        runner.close()


def _verify(
    graph: tl.GraphData,
    opts: Options,
    runner: _Runner,
    progress: Progress,
    name: str | None,
    t0: float,
) -> Report:
    sigs = [Signature.of(graph, j) for j in range(len(graph.nodes))]
    notes: list[str] = []
    # Link 1: rules, per distinct signature.
    rule_checks = _rule_checks(sigs, opts, runner, progress)
    # Links 2 and 3: the compiled functions.
    call_checks: dict[int, list[Check]] = {}
    graph_checks: list[Check] = []
    if opts.compiled:
        call_checks, graph_checks, more = _compiled_checks(graph, opts, runner, progress)
        notes += more
    else:
        lower = _lowering_checks(sigs, opts, progress)
        call_checks = {j: lower[j] for j in range(len(sigs))}
        notes.append("compiled functions not checked (compiled=False): each op's lowered rules "
                     "were checked instead")  # fmt: skip
    if opts.deadline is not None:
        every = [c for d in (rule_checks, call_checks) for cs in d.values() for c in cs]
        every = list({id(c): c for c in every + graph_checks}.values())
        cut = sum(c.how.startswith((NOT_REACHED, STOPPED)) for c in every)
        if cut:
            rest = "; the others were decided before it" if cut < len(every) else ""
            bound = ("the deadline" if opts.timeout is None
                     else f"the timeout ({opts.timeout:.3g} s)")  # fmt: skip
            notes.append(f"{bound} ran out: {cut} of {len(every)} "
                         f"checks not reached or stopped (not verified){rest}")  # fmt: skip
    nodes = []
    first: dict[tuple, int] = {}
    for j, sig in enumerate(sigs):
        checks = tuple(rule_checks[sig] + call_checks.get(j, []))
        key = (sig, tuple(id(c) for c in checks))
        shared = first.setdefault(key, j)
        nodes.append(NodeReport(j, sig.op, sig.label(), checks, None if shared == j else shared))
    return Report(
        name or f"<graph {graph.content_hash[:12]}>",
        opts.dtype,
        tuple(nodes),
        tuple(graph_checks),
        time.perf_counter() - t0,
        tuple(notes),
        opts.matmul_precision,
    )


def _rule_checks(
    sigs: list[Signature], opts: Options, runner: _Runner, progress: Progress
) -> dict[Signature, list[Check]]:
    unique = list(dict.fromkeys(sigs))

    def key(s: Signature) -> tuple:
        return _rule_key(s, opts.max_elements, opts.kinks, opts.method)

    todo = [s for s in unique if key(s) not in _RULE_CACHE]
    done = [len(unique) - len(todo)]

    def tick() -> None:
        done[0] += 1
        progress("rules", done[0], len(unique))

    progress("rules", done[0], len(unique))
    results = runner.map(_work_rule, [(s, opts.max_elements, opts.kinks, opts.method,
                                       opts.deadline) for s in todo], tick)  # fmt: skip
    out = {s: _RULE_CACHE[key(s)] for s in unique if key(s) in _RULE_CACHE}
    for s, (r, complete) in zip(todo, results, strict=True):
        if complete:
            _RULE_CACHE[key(s)] = r
        out[s] = r
    return out


def _lowering_checks(
    sigs: list[Signature], opts: Options, progress: Progress
) -> dict[int, list[Check]]:
    out = {}
    for j, s in enumerate(sigs):
        op = tl.get_op(s.op)
        key = (s, opts.dtype, opts.max_elements, op.lowering, op.lowering_jvp, op.lowering_vjp,
               op.forward_rule, op.jvp_rule, op.vjp_rule)  # fmt: skip
        if key not in _LOWER_CACHE:
            names = [("lowering", f"lowered {k} = reference") for k in ("forward", "jvp", "vjp")]
            checks, complete = _timed(opts.deadline, names, lambda s=s: check_op_lowering(
                s, dtype=opts.dtype, max_elements=opts.max_elements))  # fmt: skip
            if not complete:
                out[j] = checks
                continue
            _LOWER_CACHE[key] = checks
        out[j] = _LOWER_CACHE[key]
        progress("lowerings", j + 1, len(sigs))
    return out


def _not_verified(link: Any, name: str, why: str) -> Check:
    return Check(link, name, "not verified", "undecided", "", why)


def _compiled_checks(
    graph: tl.GraphData, opts: Options, runner: _Runner, progress: Progress
) -> tuple[dict[int, list[Check]], list[Check], list[str]]:
    notes: list[str] = []
    if opts.dtype == "float32":
        notes.append(reduced_note(opts.matmul_precision) if opts.matmul_precision != "float32"
                     else NOTE)  # fmt: skip
    if _past(opts.deadline):
        return {}, [_not_verified("compiled", "compiled functions", NOT_REACHED)], notes
    try:
        cg = compile_graph(graph, opts.dtype, opts.matmul_precision)
        progress("tracing", 0, 3)
        jaxprs = outer_jaxprs(cg)
        progress("tracing", 3, 3)
    except CompilerUnavailable as e:
        return {}, [_not_verified("compiled", "compiled functions", str(e))], notes
    except Exception as e:
        why = f"compiling / tracing failed: {type(e).__name__}: {e}"
        return {}, [_not_verified("compiled", "compiled functions", why)], notes

    try:
        calls = {k: match_calls(jaxprs[k], cg.tape, k) for k in jaxprs}
    except ContractError as e:
        return (
            {},
            [_not_verified("wiring", "compiled functions follow the contract", str(e))],
            notes,
        )
    runtime_index = [i for i, ix in enumerate(graph.index_inputs) if ix.value is None]
    # Link 2: every distinct call.
    keyed: dict[tuple, Any] = {}
    per_node: dict[int, list[tuple]] = {}
    for k in ("forward", "jvp", "vjp"):
        for c in calls[k]:
            key = call_key(graph, c.kind, c.entry, c.inner, opts.dtype) + (
                opts.max_elements,
                opts.method,
            )
            keyed.setdefault(key, c)
            lst = per_node.setdefault(c.entry.node, [])
            if key not in lst:
                lst.append(key)
    todo = [k for k in keyed if k not in _CALL_CACHE]
    done = [len(keyed) - len(todo)]

    def tick() -> None:
        done[0] += 1
        progress("compiled calls", done[0], len(keyed))

    progress("compiled calls", done[0], len(keyed))
    if runner.pool is not None:
        gj = tl.dumps(graph)
        tasks = [(gj, opts.dtype, opts.matmul_precision, keyed[k].entry.node, keyed[k].kind,
                  k[4], opts.max_elements, opts.method, opts.deadline)
                 for k in todo]  # fmt: skip
        results = runner.map(_work_call, tasks, tick)
    else:
        tasks = [(graph, keyed[k].kind, keyed[k].entry, keyed[k].inner, opts.dtype,
                  opts.max_elements, opts.method, opts.deadline) for k in todo]  # fmt: skip
        results = runner.map(_work_call_traced, tasks, tick)
    found = {k: _CALL_CACHE[k] for k in keyed if k in _CALL_CACHE}
    for k, ((r,), complete) in zip(todo, results, strict=True):
        if complete:
            _CALL_CACHE[k] = r
        found[k] = r
    call_checks = {j: [found[k] for k in keys] for j, keys in per_node.items()}
    live = {e.node for e in cg.tape}
    dead = [j for j in range(len(graph.nodes)) if j not in live]
    if dead:
        notes.append(f"nodes {dead} do not reach an output: not in the compiled tape")
    # Link 3: wiring.
    progress("wiring", 0, 1)
    names = [("wiring", f"{k} wiring = reference") for k in ("forward", "jvp", "vjp")]
    graph_checks, _ = _timed(opts.deadline, names, check_wiring, graph, jaxprs, calls,
                             runtime_index)  # fmt: skip
    progress("wiring", 1, 1)
    # End to end, when small.
    total = sum(graph.value_type(v).size for v in range(graph.num_values))
    small = len(graph.nodes) <= E2E_MAX_NODES and total <= E2E_MAX_ELEMENTS
    if small and opts.end_to_end == "auto" and not _past(opts.deadline):
        size = _forward_tree_size(graph)
        if size > E2E_MAX_TREE:
            small = False
            notes.append(
                f"end-to-end symbolic check skipped: the symbolic forward grows past "
                f"{E2E_MAX_TREE} operations per element; per-call and wiring checks cover it"
            )
            total = -1
    if opts.end_to_end == "always" or (opts.end_to_end == "auto" and small):
        progress("end to end", 0, 1)
        names = [("end-to-end", f"compiled {k} = reference {k}") for k in ("forward", "jvp",
                                                                           "vjp")]  # fmt: skip
        e2e, _ = _timed(opts.deadline, names, lambda: check_end_to_end(
            graph, jaxprs, runtime_index, index_sets=_e2e_index_sets(graph),
            max_elements=opts.max_elements, dtype=opts.dtype))  # fmt: skip
        graph_checks += e2e
        progress("end to end", 1, 1)
    elif opts.end_to_end == "never":
        notes.append("end-to-end symbolic check not run (end to end: never): the per-call and "
                     "wiring checks cover the compiled functions")  # fmt: skip
    elif total >= 0:
        notes.append(
            f"end-to-end symbolic check skipped ({len(graph.nodes)} nodes, {total} elements; "
            f"auto runs it up to {E2E_MAX_NODES} nodes and {E2E_MAX_ELEMENTS} elements): the "
            "per-call and wiring checks cover the compiled functions"
        )
    return call_checks, graph_checks, notes


def _forward_tree_size(graph: tl.GraphData) -> int:
    """The largest tree size (operations, shared subterms counted each time they occur) of an
    output element of any node of the reference forward on symbols, stopping past the limit."""

    leaves = {leaf.name: named_symbols(leaf.name, leaf.type.shape) for leaf in graph.leaves}
    idx = {ix.name: np.zeros(ix.type.shape, np.int64) for ix in graph.index_inputs
           if ix.value is None}  # fmt: skip
    try:
        vals = eval_all(graph, leaves, idx or None, B=SYM)
    except Exception:
        return E2E_MAX_TREE + 1
    memo: dict[Any, int] = {}
    worst = 0
    for v in vals[graph.num_leaves :]:
        a = v.a if hasattr(v, "a") else np.asarray(v, dtype=object)
        for e in a.reshape(-1)[:4]:
            worst = max(worst, tree_size(e, memo))
            if worst > E2E_MAX_TREE:
                return worst
    return worst


def _e2e_index_sets(graph: tl.GraphData) -> list[dict[str, np.ndarray]]:
    """Index values for the end-to-end check: random in range, then all out of range."""
    runtime = [ix for ix in graph.index_inputs if ix.value is None]
    if not runtime:
        return [{}]
    dims = [d for v in range(graph.num_values) for d in graph.value_type(v).shape] or [1]
    top = max(dims)
    rng = np.random.default_rng(0)
    inside = {ix.name: rng.integers(0, top, size=ix.type.shape) for ix in runtime}
    outside = {ix.name: np.full(ix.type.shape, top + 1) for ix in runtime}
    return [inside, outside]
