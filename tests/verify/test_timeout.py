"""``verify_graph(timeout=...)`` and ``torchlean-verify --timeout``: a bounded run ends
``undecided`` (exit 3), listing what was proved before the timeout and what was not reached or
stopped; a result the timeout cut short is never cached; a mismatch found in time still counts."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

import torchlean_ir as tl
import verify
from verify import _verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: The padded 3-D max-pool node of benchmarks/verify_ops.py: a minute and more of exact work
#: (about 70 s on the 2-core machine), far past every timeout below.
SLOW = "max_pool(f64[2,3,3,3], kernel=(3,3,3), padding=(1,1,1), stride=(1,1,1))"


def _slow_graph() -> tl.GraphData:
    """A quick node (``tanh``) and the slow max-pool node, in this order."""
    b = tl.GraphBuilder("f64")
    y = b.param("y", (3,)).tanh()
    x = b.input("x", (2, 3, 3, 3), requires_grad=True)
    return b.build(y, b.max_pool(x, kernel=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1)))


def _quick_graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    return b.build(b.param("y", (3,)).tanh())


def test_timeout_ends_undecided_listing_what_was_proved_and_what_was_not() -> None:
    verify.clear_caches()
    verify.verify_graph(_quick_graph())  # the tanh signature proved (and cached) first
    t = time.monotonic()
    report = verify.verify_graph(_slow_graph(), timeout=3)
    took = time.monotonic() - t
    assert took < 30, took  # stopped in the middle of the max-pool's rule checks, not after them
    assert report.verdict == "undecided" and report.exit_code == 3
    tanh, pool = report.nodes
    assert pool.signature == SLOW
    # proved before the timeout: the tanh rules, exact
    assert [(c.link, c.result, c.method) for c in tanh.checks if c.link == "rule"] == [
        ("rule", "pass", "exact")
    ] * 2
    # the max-pool rule checks were under way: stopped, not verified, each named
    assert {c.name for c in pool.checks} == {"forward = sym", "jvp = derivative",
                                             "vjp = adjoint", "kinks"}  # fmt: skip
    for c in pool.checks:
        assert (c.result, c.method) == ("undecided", "not verified")
        assert c.how.startswith(_verify.STOPPED), c.how
    # the compiled functions were not reached
    (compiled,) = report.graph_checks
    assert (compiled.link, compiled.method) == ("compiled", "not verified")
    assert compiled.how == _verify.NOT_REACHED
    assert any("the timeout (3 s) ran out: 5 of 7 checks" in n for n in report.notes), report.notes
    # nothing the timeout cut short is cached: only the tanh signature is
    assert {k[0].op for k in _verify._RULE_CACHE} == {"tanh"}
    assert {k[1].op for k in _verify._CALL_CACHE} == {"tanh"}  # from the first run


def test_a_timeout_of_zero_reaches_nothing_and_a_generous_one_changes_nothing() -> None:
    verify.clear_caches()
    report = verify.verify_graph(_quick_graph(), timeout=0)
    assert report.verdict == "undecided" and report.exit_code == 3
    assert all(c.how == _verify.NOT_REACHED for c in report.all_checks)
    assert not _verify._RULE_CACHE
    full = verify.verify_graph(_quick_graph(), timeout=600)
    assert full.verdict == "verified" and not any("timeout" in n for n in full.notes)


def test_a_mismatch_found_before_the_timeout_is_still_a_mismatch() -> None:
    from .mutants import MUTANTS, applied

    m = next(m for m in MUTANTS if m.name == "sub vjp sign flip")
    b = tl.GraphBuilder("f64")
    d = b.sub(b.param("a", (3,)), b.param("b", (3,)))  # node 0: its rules are checked first
    x = b.input("x", (2, 3, 3, 3), requires_grad=True)
    g = b.build(b.sum(d * d), b.max_pool(x, kernel=(3, 3, 3), stride=(1, 1, 1),
                                         padding=(1, 1, 1)))  # fmt: skip
    with applied(m):
        report = verify.verify_graph(g, timeout=4)
    assert report.verdict == "mismatch" and report.exit_code == 1
    assert report.counterexamples and report.counterexamples[0].node == 0
    assert any(c.how.startswith(_verify.STOPPED) for c in report.all_checks)


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_cli_rejects_a_bad_timeout(value: str, capsys: pytest.CaptureFixture) -> None:
    from verify.cli import main

    assert main(["no-such.json", "--timeout", value]) == 2
    err = capsys.readouterr().err
    assert "--timeout" in err and len(err.strip().splitlines()) == 1


def test_python_rejects_a_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout"):
        verify.verify_graph(_quick_graph(), timeout=-1)


def test_a_shared_deadline_ends_the_run_and_the_note_names_the_timeout_given() -> None:
    """The command line bounds several graphs by one deadline: ``verify_graph(timeout=4,
    deadline=...)`` ends at the earlier of the two, and the note names the 4 s the user gave,
    not what was left of it when this graph began (the start-up took some of it: the note once
    said "3.4 s" under load)."""
    report = verify.verify_graph(_quick_graph(), timeout=4, deadline=time.time() - 1)
    assert report.verdict == "undecided"
    assert all(c.how == _verify.NOT_REACHED for n in report.nodes for c in n.checks)
    assert any(n.startswith("the timeout (4 s) ran out: ") for n in report.notes), report.notes
    alone = verify.verify_graph(_quick_graph(), deadline=time.time() - 1)
    assert any(n.startswith("the deadline ran out: ") for n in alone.notes), alone.notes


def test_cli_timeout_exits_3_with_the_listing_in_json(tmp_path: os.PathLike) -> None:
    path = os.path.join(str(tmp_path), "slow.json")
    out = os.path.join(str(tmp_path), "report.json")
    tl.save(_slow_graph(), path)
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "verify.cli", path, "--timeout", "4", "--json", out, "-q"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )  # fmt: skip
    took = time.monotonic() - t
    assert proc.returncode == 3, proc.stderr
    assert took < 60, took
    # what docs/verification.md ("A time bound") shows
    assert proc.stdout.startswith(f"{path}: UNDECIDED: 2 nodes (2 signatures), 7 checks: 2 exact, "
                                  "0 probabilistic, 5 not verified; "), proc.stdout  # fmt: skip
    with open(out) as f:
        doc = json.load(f)
    assert doc["verdict"] == "undecided" and doc["exit_code"] == 3
    hows = [c["how"] for n in doc["nodes"] for c in n["checks"]]
    hows += [c["how"] for c in doc["graph_checks"]]
    assert any(h.startswith("stopped by the timeout") for h in hows), hows
    assert doc["graph_checks"][0]["how"] == "not reached before the timeout"
    pool = doc["nodes"][1]
    assert pool["signature"] == SLOW and pool["method"] == "not verified"
    assert any("the timeout (4 s) ran out" in n for n in doc["notes"])


def test_a_check_that_ends_after_the_deadline_keeps_only_proofs_and_refutations() -> None:
    """Work the deadline cut short may have settled for less (a probabilistic pass where the
    exact step was interrupted): past the deadline only an exact pass or a failure is kept."""
    from verify._report import Check

    def slow() -> list[Check]:
        time.sleep(0.3)  # ends past the deadline without ticking
        return [Check("rule", "a", "exact", "pass"), Check("rule", "b", "probabilistic", "pass"),
                Check("rule", "c", "exact", "fail"),
                Check("rule", "d", "not verified", "undecided")]  # fmt: skip

    names = [("rule", n) for n in "abcd"]
    checks, complete = _verify._timed(time.time() + 0.1, names, slow)
    assert not complete
    assert [(c.name, c.method, c.result) for c in checks] == [
        ("a", "exact", "pass"), ("b", "not verified", "undecided"), ("c", "exact", "fail"),
        ("d", "not verified", "undecided"),
    ]  # fmt: skip
    assert checks[1].how.startswith(_verify.STOPPED)
    checks, complete = _verify._timed(time.time() + 60, names, slow)
    assert complete and [c.method for c in checks] == ["exact", "probabilistic", "exact",
                                                       "not verified"]  # fmt: skip


def test_no_broad_handler_swallows_the_budget() -> None:
    """The tensor level's budget (``terms.OutOfTime``) is a ``BaseException``: an ``except
    Exception`` around a step of the work (ours around a cheap attempt, sympy's around a
    rewrite) cannot swallow it, so a check that runs out of time stops there and says so
    instead of reporting "not proved". Before, this loop ran until its own 5 s guard."""
    from verify import terms as T

    assert not issubclass(T.OutOfTime, Exception)
    start = time.process_time()
    with pytest.raises(T.OutOfTime), T.budget(0.05):
        while time.process_time() - start < 5:
            with contextlib.suppress(Exception):  # a broad handler around each step
                T.tick()
    assert time.process_time() - start < 1
