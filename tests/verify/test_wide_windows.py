"""Wide kernels and tiling pools at tensor level: an 11-wide / stride 4 convolution (AlexNet's
first layer is 11x11, stride 4; its 2-D form at full size is in
``tests/interop/test_onnx_models.py``) and a 2x2 / stride 2 average pool (DenseNet's
transitions), whose compiled forward was not proved at tensor level (``verify/terms/normal.py``:
sums over up to :data:`verify.terms.UNROLL_WIDE_MAX` values unrolled in the decision's last
pass; a power of a bracket is the bracket). Each graph is verified with ``method="tensor"``, so
the element method cannot stand in for the tensor level, and a wrong lowering of the same node
is refuted there."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import symengine as se

import torchlean_ir as tl
import verify
from verify import terms as T

from .mutants import Mutant, _avg_pool2d_lower_one_side, _rule, applied


def _conv_graph() -> tl.GraphData:
    """conv with a kernel of 11, stride 4, 3 -> 2 channels on 63 cells (14 outputs), float32:
    the 1-D form of AlexNet's first layer (the 2-D one costs minutes, its rule checks mostly)."""
    b = tl.GraphBuilder("f32")
    W, bias = b.param("W", (2, 3, 11)), b.param("b", (2,))
    y = b.apply("conv", W, bias, b.param("x", (3, 63)), stride=(4,), padding=(0,))
    return b.build(b.sum(y * y))


def _pool_graph(c: int, n: int) -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    y = b.apply("avg_pool2d", b.param("x", (c, n, n)), kernel=(2, 2), stride=2)
    return b.build(b.sum(y * y))


def _checks(report: verify.Report, op: str) -> dict[str, verify.Check]:
    return {c.name: c for n in report.nodes if n.op == op for c in n.checks}


def test_an_11_wide_stride_4_convolution_is_proved_at_tensor_level() -> None:
    report = verify.verify_graph(_conv_graph(), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    checks = _checks(report, "conv")
    assert all(c.method == "exact" and c.level == "tensor" for c in checks.values()), checks
    for name in ("compiled fwd = reference", "compiled jvp = reference"):
        assert f"ranges of up to {T.UNROLL_WIDE_MAX} unrolled" in checks[name].how, checks[name]


def _conv_lower_last_cell_dropped(B: Any, W: Any, b: Any, x: Any, *, stride: Any,
                                  padding: Any, groups: int = 1) -> Any:  # fmt: skip
    # the kernel's last cell (offset 10) left out: only the wide pass meets that offset
    from torchlean_ir.ops import conv

    keep = np.ones(W.shape, dtype=W.dtype)
    keep[:, :, 10] = 0.0
    return conv._conv_lower(B, W * keep, b, x, stride, padding, groups)


CONV_LAST_CELL = Mutant(
    "conv lowered without the 11-wide kernel's last cell", "lowering", _conv_graph,
    _rule("conv", "lower_rule", _conv_lower_last_cell_dropped),
)  # fmt: skip


def test_an_11_wide_convolution_lowered_without_its_last_cell_is_refuted_at_tensor_level(
) -> None:  # fmt: skip
    with applied(CONV_LAST_CELL):
        report = verify.verify_graph(CONV_LAST_CELL.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    (fwd,) = [c for _, c in report.failures() if c.name == "compiled fwd = reference"]
    assert fwd.result == "fail" and fwd.method == "exact" and fwd.level == "tensor", fwd
    assert fwd.counterexample is not None
    assert fwd.counterexample.expected != fwd.counterexample.got


@pytest.mark.parametrize("c, n", [(1, 4), (128, 56)], ids=["1x4x4", "128x56x56"])
def test_a_2x2_stride_2_average_pool_is_proved_at_tensor_level(c: int, n: int) -> None:
    report = verify.verify_graph(_pool_graph(c, n), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    checks = _checks(report, "avg_pool2d")
    assert checks["compiled fwd = reference"].level == "tensor"
    assert all(c.method == "exact" for c in checks.values()), checks


POOL_ONE_SIDE = Mutant("avg_pool2d 128x56x56 lowered divides by one side of the window",
                       "lowering", lambda: _pool_graph(128, 56),
                       _rule("avg_pool2d", "lower_rule", _avg_pool2d_lower_one_side))  # fmt: skip


def test_a_2x2_average_pool_lowered_with_a_wrong_divisor_is_refuted_at_tensor_level() -> None:
    with applied(POOL_ONE_SIDE):
        report = verify.verify_graph(POOL_ONE_SIDE.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    (fwd,) = [c for _, c in report.failures() if c.name == "compiled fwd = reference"]
    assert fwd.result == "fail" and fwd.level == "tensor" and fwd.counterexample is not None


def test_a_power_of_a_bracket_in_a_sum_is_the_bracket() -> None:
    # [c]^2, made where an inner short range is unrolled (the tiling pool's window), states c
    # once: the outer sum reads its bounds from it (1 <= k <= 2) and is unrolled
    from verify.terms.normal import sum_over

    k = T.fresh("_k", 0, 4)
    x = se.Function("x")
    body = T.ge(k - 1) ** 2 * T.ge(2 - k) ** 2 * x(k) * T.range_brackets(k, 0, 4)
    assert sum_over(k, body, unroll=T.UNROLL_SHORT) == x(1) + x(2)
    assert sum_over(k, T.ge(k - 1) ** 2 * T.ge(k - 1) * T.range_brackets(k, 0, 2)) == 1


def test_wide_sums_are_unrolled_only_at_the_wide_level() -> None:
    x = se.Function("x")
    for n, wide in ((8, False), (11, True), (16, True), (17, False)):
        term = T.ssum(x, 0, n)
        assert T.wide_sums(term) is wide, n
        unrolled = T.normalize(term, unroll=T.UNROLL_WIDE)
        assert (T.name_of(unrolled) != "_SUM") == (n <= T.UNROLL_WIDE_MAX), (n, unrolled)
        assert (T.name_of(T.normalize(term, unroll=T.UNROLL_SHORT)) != "_SUM") == (
            n <= T.UNROLL_MAX
        )
        assert T.name_of(T.normalize(term)) == "_SUM"
