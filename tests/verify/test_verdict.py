"""The verdict and the exit code guard the verifier's one promise: ``verified`` (exit 0) only
when every check passed exactly. Each part of that rule is pinned here, for every mix of methods
and results at both levels, on reports built by hand and on real runs; the ``--jobs`` workers
and the caches are checked by what they do (processes that ran, results read back), not by time.
Each test names the mutation of the verifier it catches (the final report of task h17 lists them).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import os
from typing import ClassVar

import pytest

import torchlean_ir as tl
import verify
from verify import _verify
from verify._report import Check, NodeReport, Report
from verify.cli import _exit_code

LEVELS = ("tensor", "elements", "")
OUTCOMES = [
    ("pass", "exact"),
    ("pass", "probabilistic"),
    ("undecided", "not verified"),
    ("fail", "exact"),
    ("fail", "probabilistic"),
]


def _check(result: str, method: str, level: str = "tensor", link: str = "rule") -> Check:
    return Check(link, f"{result} {method}", method, result, "", "", None, 0.0, level)  # type: ignore[arg-type]


def _report(node_checks: list[Check], graph_checks: list[Check] = ()) -> Report:  # type: ignore[assignment]
    nodes = (NodeReport(0, "tanh", "tanh(f64[3])", tuple(node_checks)),)
    return Report("g", "float64", nodes, tuple(graph_checks))


def _expected(outcomes: list[tuple[str, str]]) -> tuple[str, int]:
    if any(r == "fail" for r, _ in outcomes):
        return "mismatch", 1
    if all(o == ("pass", "exact") for o in outcomes):
        return "verified", 0
    return "undecided", 3


MIXES = [list(m) for n in (1, 2) for m in itertools.combinations_with_replacement(OUTCOMES, n)]


@pytest.mark.parametrize("mix", MIXES, ids=lambda m: "+".join(f"{r}/{k}" for r, k in m))
@pytest.mark.parametrize("level", LEVELS)
def test_verdict_and_exit_code_of_every_method_mix(mix: list, level: str) -> None:
    """Mutations caught: dropping ``combine_method(checks) != "exact"`` from ``Report.verdict``
    (a probabilistic or not-verified pass would be ``verified``), ``combine_result`` ignoring
    ``undecided`` (a node with a not-verified check shown as passed), a failure ranked below
    ``undecided``, any change to ``EXIT_CODES``."""
    want = _expected(mix)
    checks = [_check(r, m, level) for r, m in mix]
    for report in (_report(checks), _report([_check("pass", "exact")], checks)):
        assert (report.verdict, report.exit_code) == want, (mix, level)
        assert report.to_json()["verdict"] == want[0]
        assert report.to_json()["exit_code"] == want[1]
        assert report.summary().startswith(want[0].upper())
    # the node's own result (the table's column, the HTML colour) and the listed non-passes
    results = {r for r, _ in mix}
    node = _report(checks).nodes[0]
    assert node.result == ("fail" if "fail" in results else
                           "undecided" if "undecided" in results else "pass")  # fmt: skip
    assert len(_report(checks).failures()) == sum(r != "pass" for r, _ in mix)


def test_a_graph_level_check_counts_as_much_as_a_nodes() -> None:
    """Mutation caught: ``Report.all_checks`` without the graph-level checks (wiring, end to
    end), or with only the first node's checks."""
    ok = [_check("pass", "exact")]
    assert _report(ok, [_check("fail", "exact", "", "wiring")]).verdict == "mismatch"
    assert _report(ok, [_check("pass", "probabilistic", "", "end-to-end")]).verdict == "undecided"
    second = NodeReport(1, "exp", "exp(f64[3])", (_check("undecided", "not verified"),))
    report = Report("g", "float64", (_report(ok).nodes[0], second), ())
    assert report.verdict == "undecided"


def test_cli_exit_code_over_several_reports() -> None:
    """Mutation caught: the CLI's ``_exit_code`` letting ``verified`` win over ``undecided``, or
    ``undecided`` over ``mismatch``."""
    v, u, m = (_report([_check(r, k)]) for r, k in OUTCOMES[0:1] + OUTCOMES[2:4])
    assert [_exit_code(rs) for rs in ([v], [v, v], [v, u], [u, v], [u, m], [m, v], [v, u, m])] == [
        0, 0, 3, 3, 1, 1, 1,
    ]  # fmt: skip


def _sampled_graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (40, 40))
    return b.build(b.sum(x.tanh()))


def test_a_sampled_40x40_graph_is_undecided_with_exit_3() -> None:
    """Mutations caught: the report clause above; the element level calling a sampled check
    exact (``verify/_rules.py``: the ``probabilistic`` of a sample)."""
    report = verify.verify_graph(
        _sampled_graph(), method="elements", max_elements=64, end_to_end="never"
    )
    assert (report.verdict, report.exit_code) == ("undecided", 3), str(report)
    assert all(c.result == "pass" for c in report.all_checks)
    sampled = [c for c in report.all_checks if "of 1600 elements" in c.coverage]
    assert sampled and all(c.method == "probabilistic" for c in sampled)
    # the same graph, every element compared, is proved: the verdict above is the sample's
    full = verify.verify_graph(_sampled_graph(), method="tensor", end_to_end="never")
    assert (full.verdict, full.exit_code) == ("verified", 0), str(full)


def test_a_runtime_index_at_element_level_is_undecided() -> None:
    """Mutation caught: ``verify/_methods.elements_level`` keeping an element-level check of a
    signature with runtime index inputs exact (its index values were a sample)."""
    b = tl.GraphBuilder("f64")
    x = b.param("x", (3, 2))
    g = b.build(b.sum(b.gather_rows_nat(x, b.index("idx", 2))))
    report = verify.verify_graph(g, method="elements")
    assert (report.verdict, report.exit_code) == ("undecided", 3), str(report)
    gather = report.nodes[0]
    assert gather.op == "gather_rows_nat" and gather.method == "probabilistic"
    assert all(c.result == "pass" for c in report.all_checks)
    assert verify.verify_graph(g, method="tensor").verdict == "verified"


def test_a_not_verified_check_is_undecided_not_a_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation caught: a check the interpreter could not read (a primitive it does not know)
    counted as passed. The interpreter is made to know no primitive at all."""
    from verify import _jaxpr

    def unknown(self: object, eqn: object, invals: object) -> object:
        raise _jaxpr.Unsupported(f"primitive {eqn.primitive} (unknown in this test)")  # type: ignore[attr-defined]

    verify.clear_caches()
    monkeypatch.setattr(_jaxpr.Interpreter, "eqn", unknown)
    b = tl.GraphBuilder("f64")
    report = verify.verify_graph(b.build(b.param("x", (3,)).tanh()), method="elements")
    verify.clear_caches()
    assert (report.verdict, report.exit_code) == ("undecided", 3), str(report)
    compiled = [c for c in report.all_checks if c.link in ("compiled", "end-to-end")]
    assert compiled and all(c.method == "not verified" for c in compiled)


class _CountingPool(cf.ProcessPoolExecutor):
    made: ClassVar[list[int]] = []
    submitted: ClassVar[list[str]] = []

    def __init__(self, jobs: int, *args: object, **kw: object) -> None:
        _CountingPool.made.append(jobs)
        super().__init__(jobs, *args, **kw)  # type: ignore[arg-type]

    def submit(self, fn, /, *args, **kw):  # type: ignore[no-untyped-def, override]
        _CountingPool.submitted.append(fn.__name__)
        return super().submit(_in_worker, fn, *args, **kw)


def _in_worker(fn, *args, **kw):  # type: ignore[no-untyped-def]
    """Runs ``fn`` in a worker and marks its checks with the worker's process id."""
    from dataclasses import replace

    checks, complete = fn(*args, **kw)
    return [replace(c, coverage=f"{c.coverage} [pid {os.getpid()}]") for c in checks], complete


def test_jobs_run_the_checks_in_other_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation caught: ``jobs`` ignored (``_Runner`` never making the pool, or running the
    tasks in-process anyway): every rule and compiled-call check must come back from a worker
    process, and the report be the one ``jobs=1`` gives."""
    monkeypatch.setattr(_verify.cf, "ProcessPoolExecutor", _CountingPool)
    _CountingPool.made.clear()
    _CountingPool.submitted.clear()
    b = tl.GraphBuilder("f64")
    g = b.build(b.sum(b.param("x", (3,)).tanh()))
    verify.clear_caches()
    report = verify.verify_graph(g, jobs=2)
    verify.clear_caches()
    assert _CountingPool.made == [2]
    assert sorted(set(_CountingPool.submitted)) == ["_work_call", "_work_rule"]
    pids = {c.coverage.rsplit("[pid ", 1)[1].rstrip("]") for n in report.nodes for c in n.checks}
    assert pids and str(os.getpid()) not in pids
    assert all("[pid " in c.coverage for n in report.nodes for c in n.checks)
    assert report.verdict == "verified"
    one = verify.verify_graph(g, jobs=1)
    assert [(c.name, c.result, c.method) for n in one.nodes for c in n.checks] == [
        (c.name, c.result, c.method) for n in report.nodes for c in n.checks
    ]


def test_the_caches_are_read_and_keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutations caught: results not stored, not read back (a second run recomputes), or read
    back under a key that ignores what they depend on (a changed rule must be checked anew)."""
    from verify import _methods

    calls: list[str] = []
    rule_checks, call_check = _methods.rule_checks, _methods.call_check

    def counted_rules(sig, **kw):  # type: ignore[no-untyped-def]
        calls.append(f"rule {sig.op}")
        return rule_checks(sig, **kw)

    def counted_call(graph, kind, *args, **kw):  # type: ignore[no-untyped-def]
        calls.append(f"call {kind}")
        return call_check(graph, kind, *args, **kw)

    monkeypatch.setattr(_verify, "rule_checks", counted_rules)
    monkeypatch.setattr(_verify, "call_check", counted_call)
    b = tl.GraphBuilder("f64")
    g = b.build(b.sum(b.param("x", (3,)).tanh()))
    verify.clear_caches()
    first = verify.verify_graph(g)
    n = len(calls)
    assert sorted(set(calls)) == ["call fwd", "call jvp", "call vjp", "rule sum", "rule tanh"]
    second = verify.verify_graph(g)
    assert len(calls) == n, calls[n:]  # nothing recomputed: every result read from the caches
    # the very results of the first run (the wiring pass is not cached: it is linear)
    pairs = [(a, b) for m, n in zip(first.nodes, second.nodes, strict=True)
             for a, b in zip(m.checks, n.checks, strict=True)]  # fmt: skip
    assert pairs and all(a is b for a, b in pairs)
    # a changed rule is a different key: its signature is checked again, the other is not
    op = tl.get_op("tanh")
    monkeypatch.setattr(op, "vjp_rule", lambda B, args, out, ct: ((1 - out * out) * ct,))
    third = verify.verify_graph(g)
    assert "rule tanh" in calls[n:] and "rule sum" not in calls[n:]
    assert third.verdict == "verified"
    verify.clear_caches()
    verify.verify_graph(g)
    assert "rule sum" in calls[n:]  # cleared: checked again
