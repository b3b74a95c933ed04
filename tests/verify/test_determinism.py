"""Verdicts depend on nothing but the question: the same graph gives the same report (checks,
methods, how each was decided, counterexamples with their points) whatever ran before it in the
process and whatever its leaves are named.

Two fresh processes (``tests/verify/determinism_run.py``) verify the same graphs and mutants:
one in a fixed order, the other after warm-up runs of other cases, in a shuffled order, with
every leaf renamed so that the leaves' order by name is reversed. Their reports, timings aside
and names mapped back, must be identical. (Before the element decisions renumbered leaves by
their element sets, the conv mutant's counterexample took its sample point from the leaves'
order by name, and this test failed on it.)
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from .determinism_run import CASES

ROOT = Path(__file__).resolve().parents[2]


def _reports(order: list[str], rename: bool) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "tests.verify.determinism_run", ",".join(order), str(int(rename))],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    for report in out.values():
        report["summary"] = re.sub(r"; [\d.]+ s$", "", report["summary"])
        del report["graph"]  # the graph's content hash: renamed leaves are another graph
    return out


def test_reports_do_not_depend_on_what_ran_before_nor_on_leaf_names() -> None:
    cases = sorted(CASES)
    shuffled = cases[:]
    random.Random(27).shuffle(shuffled)
    assert shuffled != cases
    first = _reports(cases, rename=False)
    second = _reports(["warmup:attention", "warmup:mutant-conv", *shuffled], rename=True)
    assert set(first) == set(second) == set(CASES)
    verdicts = {key: report["verdict"] for key, report in first.items()}
    assert {v for k, v in verdicts.items() if k.startswith("mutant-")} == {"mismatch"}, verdicts
    assert {v for k, v in verdicts.items() if not k.startswith("mutant-")} == {"verified"}
    for key in cases:
        assert first[key] == second[key], key
        if key.startswith("mutant-"):
            assert first[key]["counterexamples"], key  # points are compared, not only verdicts
