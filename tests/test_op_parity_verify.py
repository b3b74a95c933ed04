"""The verifier (``verify``) on the parity ops: every link (rule soundness, compiled rule calls,
wiring, end to end) at the graphs' own shapes, every check exact.

A bounded sample of the table rows runs by default; the other rows are ``@pytest.mark.slow``
(CI runs them). Max pooling's ``forward = sym`` (the hard maximum against the first-maximum
Piecewise sum) is decided by case splitting, one case per window cell; ``BIG_POOLS`` checks it
on windows larger than the table's (16 cells, padded 4x4 windows, a 27-cell 3-D window), where
the cells' indices run past one digit. multi_head_attention verifies exactly (through the
softmax abstraction).
"""

from __future__ import annotations

from typing import Any

import pytest

verify = pytest.importorskip("verify")

import torchlean_ir as tl  # noqa: E402

from .op_cases import CASES  # noqa: E402, F401  (op_cases first: it appends the parity rows)
from .op_cases_parity import PARITY_CASES, OpCase  # noqa: E402

#: Rows cheap enough for every run (a few seconds together), one per kind of rule.
SAMPLE = {
    "gather_vec_nat[3-oob]",
    "scatter_add_row[3x2_2]",
    "gelu[6]",
    "conv2d[3x2x3x3_3_2x5x5]",
    "conv_transpose2d[2x3x3x3_3_2x3x3]",
    "max_pool[2x7-1d]",
    "avg_pool2d_pad[1x5x5]",
    "batchnorm_channel_first[2x3x3_2_2]",
    "batchnorm_eval[2x3x3_2_2_2_2]",
    "bernoulli_mask[s]",
    "multi_head_attention[4x4_4x4_4x4_4x4_3x4-causal]",
}

#: Max pools with windows of 16 and 27 cells (padded windows of 9 to 16 cells): a few seconds each.
BIG_POOLS: list[tuple[str, tuple[int, ...], dict[str, Any]]] = [
    ("max_pool2d", (1, 4, 4), {"kernel": (4, 4), "stride": 1}),
    ("max_pool2d_pad", (2, 5, 5), {"kernel": (4, 4), "stride": 2, "padding": 1}),
    ("max_pool", (1, 3, 3, 3), {"kernel": (3, 3, 3), "stride": (1, 1, 1), "padding": (0, 0, 0)}),
]


def _all_exact(report: Any) -> None:
    assert report.verdict == "verified", report.summary()


def test_named_rows_exist() -> None:
    assert not SAMPLE - {c.id for c in PARITY_CASES}


@pytest.mark.parametrize("case", [c for c in PARITY_CASES if c.id in SAMPLE], ids=lambda c: c.id)
def test_parity_rows_verify(case: OpCase) -> None:
    _all_exact(verify.verify_graph(case.graph()))


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [c for c in PARITY_CASES if c.id not in SAMPLE],
    ids=lambda c: c.id,
)
def test_every_other_parity_row_verifies(case: OpCase) -> None:
    _all_exact(verify.verify_graph(case.graph()))


@pytest.mark.slow
@pytest.mark.parametrize("op,shape,attrs", BIG_POOLS, ids=[p[0] for p in BIG_POOLS])
def test_max_pools_with_big_windows_verify_exactly(
    op: str, shape: tuple[int, ...], attrs: dict[str, Any]
) -> None:
    b = tl.GraphBuilder("f64")
    g = b.build(b.apply(op, b.input("x", shape, requires_grad=True), **attrs))
    report = verify.verify_graph(g)
    _all_exact(report)
    (fwd,) = [c for c in report.all_checks if c.name == "forward = sym"]
    # proved: at tensor level (the window maximum meets the sym rule's first-max one-hot sum)
    # or by the element method's case split, never by sampling
    assert fwd.method == "exact" and (fwd.level == "tensor" or "case split" in fwd.how), fwd
