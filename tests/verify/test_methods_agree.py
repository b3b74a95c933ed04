"""The two methods of links 1 and 2 agree: on every op-table row and every mutant, the tensor
level (``method="tensor"``) and the element method (``method="elements"``) give every check the
same result, and so the same verdict.

Where the tensor level leaves a check undecided (``not verified``), there is nothing to compare;
the rows and mutants where that happens are listed by name below, with why, and the test fails
when that list grows (a new gap) or shrinks (a gap closed: take it off the list). The element
method decides every check of these small graphs (an exact or, with runtime index inputs,
probabilistic pass, or a failure).

The large-size mutants of ``mutants.py`` are not here: they are past the element method's limit
(``test_mutations.py`` requires the tensor level to catch them).

Budgets: a row or mutant on the lists runs the tensor level under the budget ``auto`` gives small
signatures (``TENSOR_BUDGET_SMALL_S``, 3 s per attempt), so a listed gap costs seconds, not
minutes (a listed gap that the tensor level comes to decide within 3 s makes the test fail); the
others under :data:`DECIDED_BUDGET_S`, far above what they take (under a minute for the
slowest whole row, ``max_pool2d_pad[2x4x4-tiled]``, on a loaded 2-core machine), so that load
does not turn a slow decision into a gap (the default 60 s did, at a load average of 10).
"""

from __future__ import annotations

from typing import Any

import pytest

import verify
from verify import _attempt

from ..op_cases import CASES, OpCase
from .mutants import MUTANTS, Mutant, applied

#: The tensor-level budget of the rows and mutants not on the lists (seconds per attempt).
DECIDED_BUDGET_S = 600.0

#: Op-table rows with a check the tensor level does not decide, and why (measured with
#: ``method="tensor"``, 60 s budget, on the 2-core machine, 2026-11-24).
ROWS_UNDECIDED_AT_TENSOR: dict[str, str] = {}

#: Mutants with a check the tensor level does not decide, and why.
MUTANTS_UNDECIDED_AT_TENSOR: dict[str, str] = {
    "gradient to an out-of-range gather index": "the mutated vjp rule converts the index to "
    "NumPy, so it does not run on tensor terms",
}

#: Checked in every run (a few seconds); every other row and mutant is ``slow``.
SAMPLE_ROWS = {
    "matmul[2x3_3x4]",
    "conv[2x3x3_2_3x7-1d]",
    "gather_rows_nat[3x2]",
    "layer_norm[2x4_4_4]",
    "softmax[2x4]",
    "avg_pool2d_pad[1x5x5]",
    "max[5_5]",
}
SAMPLE_MUTANTS = {
    "matmul vjp transposed",
    "relu'(0) = 1",
    "softmax lowered over axis 0",
    "tanh lowered vjp 1 - y",
    "tape overwrites on fan-out",
    "mse_loss vjp missing factor 2",
}


def _results(report: Any) -> dict[tuple[int, str, str], str]:
    """Each check's result, by (node, link, name); a check no level decides (compiling the
    graph failed: the same for both methods) is left out."""
    return {
        (i, c.link, c.name): c.result
        for i, n in enumerate(report.nodes)
        for c in n.checks
        if c.level or c.result != "undecided"
    }


def _verdict(results: dict[Any, str]) -> str:
    return "mismatch" if "fail" in results.values() else "pass"


def _agree(run: Any, known: dict[str, str], key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    budget = _attempt.TENSOR_BUDGET_SMALL_S if key in known else DECIDED_BUDGET_S
    monkeypatch.setattr(_attempt, "TENSOR_BUDGET_S", budget)
    tensor = _results(run("tensor"))
    elements = _results(run("elements"))
    assert tensor.keys() == elements.keys()
    assert "undecided" not in elements.values(), elements
    undecided = sorted(k for k, r in tensor.items() if r == "undecided")
    decided = {k: r for k, r in tensor.items() if r != "undecided"}
    # every check the tensor level decides, it decides as the element method does
    assert decided == {k: elements[k] for k in decided}, (decided, elements)
    if undecided:
        assert key in known, f"{key}: newly undecided at tensor level: {undecided}"
        # what it decides must not contradict the elements' verdict
        assert _verdict(decided) in ("pass", _verdict(elements))
    else:
        assert key not in known, f"{key}: now decided at tensor level: take it off the list"
        assert _verdict(tensor) == _verdict(elements)


def _row_params(sample: bool) -> list:
    return [pytest.param(c, id=c.id) for c in CASES if (c.id in SAMPLE_ROWS) == sample]


def _mutant_params(sample: bool) -> list:
    return [pytest.param(m, id=m.name) for m in MUTANTS if (m.name in SAMPLE_MUTANTS) == sample]


def test_the_lists_name_existing_rows_and_mutants() -> None:
    rows = {c.id for c in CASES}
    names = {m.name for m in MUTANTS}
    assert set(ROWS_UNDECIDED_AT_TENSOR) | SAMPLE_ROWS <= rows
    assert set(MUTANTS_UNDECIDED_AT_TENSOR) | SAMPLE_MUTANTS <= names


def _row(case: OpCase, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = case.graph()

    def run(method: str) -> Any:
        return verify.verify_graph(graph, method=method, end_to_end="never")

    _agree(run, ROWS_UNDECIDED_AT_TENSOR, case.id, monkeypatch)


def _mutant(m: Mutant, monkeypatch: pytest.MonkeyPatch) -> None:
    graph = m.graph()

    def run(method: str) -> Any:
        with applied(m):
            return verify.verify_graph(graph, method=method, end_to_end="never")

    _agree(run, MUTANTS_UNDECIDED_AT_TENSOR, m.name, monkeypatch)


@pytest.mark.parametrize("case", _row_params(True))
def test_methods_agree_on_a_sample_of_rows(case: OpCase, monkeypatch: pytest.MonkeyPatch) -> None:
    _row(case, monkeypatch)


@pytest.mark.parametrize("mutant", _mutant_params(True))
def test_methods_agree_on_a_sample_of_mutants(
    mutant: Mutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mutant(mutant, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("case", _row_params(False))
def test_methods_agree_on_every_other_row(case: OpCase, monkeypatch: pytest.MonkeyPatch) -> None:
    _row(case, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("mutant", _mutant_params(False))
def test_methods_agree_on_every_other_mutant(
    mutant: Mutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    _mutant(mutant, monkeypatch)
