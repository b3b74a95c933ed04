"""Link 1 on every row of the op table: rules against the derivative, kinks, lowerings."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from verify import Signature, check_signature, index_plan
from verify._lowering import check_op_lowering

from ..op_cases import CASES, OpCase


def _sig(case: OpCase) -> Signature:
    g = case.graph()
    return Signature.of(g, len(g.nodes) - 1)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rules_are_proved_exactly(case: OpCase) -> None:
    checks = check_signature(_sig(case))
    names = {c.name for c in checks}
    assert {"jvp = derivative", "vjp = adjoint"} <= names
    op = tl.get_op(case.op)
    assert ("kinks" in names) == (op.kinks_rule is not None)
    assert ("forward = sym" in names) == (op.sym_rule is not None)
    for c in checks:
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how, c.counterexample)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_lowered_rules_equal_the_reference(case: OpCase) -> None:
    for c in check_op_lowering(_sig(case)):
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how, c.counterexample)


def test_runtime_index_plan_covers_every_value_and_out_of_range() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3, 2), requires_grad=True)
    i = b.index("i", 2)
    g = b.build(b.gather_rows_nat(x, i))
    plan = index_plan(Signature.of(g, 0))
    (first,) = plan.assignments[0]
    seen = {p: set() for p in range(2)}
    for (idx,) in plan.assignments:
        for p in range(2):
            seen[p].add(int(idx[p]))
    for p in range(2):
        assert {0, 1, 2, 3, 4} <= seen[p]  # every in-range value, and past the largest dim
        assert {2**31 - 1, 2**31, 2**32 + 1} <= seen[p]  # far out of range, int32 limits
    assert any(len(set(np.asarray(a).tolist())) == 1 for (a,) in plan.assignments)  # duplicates
    assert "every value 0..3" in plan.coverage
    assert first.shape == (2,)


def test_static_index_is_checked_at_its_value_only() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (4,), requires_grad=True)
    i = b.index("i", value=7)
    g = b.build(b.gather_scalar_nat(x, i))
    plan = index_plan(Signature.of(g, 0))
    assert [int(a[0]) for a in plan.assignments] == [7]


def test_large_tensors_are_sampled_and_say_so() -> None:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (40, 40))
    g = b.build(x.tanh())
    checks = check_signature(Signature.of(g, 0), max_elements=100)
    jvp = next(c for c in checks if c.name == "jvp = derivative")
    assert jvp.result == "pass"
    assert jvp.method == "probabilistic"  # not every element was compared
    assert "of 1600 elements" in jvp.coverage and "random" in jvp.coverage


def test_a_rule_that_raises_is_a_failure_with_the_reason() -> None:
    op = tl.get_op("tanh")
    old = op.vjp_rule

    def broken(B: object, args: tuple, out: object, ct: object) -> tuple:
        raise ValueError("boom")

    op.vjp_rule = broken
    try:
        b = tl.GraphBuilder("f64")
        g = b.build(b.param("x", (2,)).tanh())
        checks = check_signature(Signature.of(g, 0))
    finally:
        op.vjp_rule = old
    failed = [c for c in checks if c.result == "fail"]
    assert failed and "boom" in failed[0].how


def _erf_sig(dtype: str = "f64") -> Signature:
    b = tl.GraphBuilder(dtype)
    return Signature.of(b.build(b.apply("erf", b.param("x", (3,)))), 0)


def test_erf_derivative_with_a_float_constant_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """erf' = 2 / sqrt(pi) exp(-x^2) takes pi from the backend (exact symbolically): with the
    float64 value of 2 / sqrt(pi) instead, the rule is off by about 1e-17 relative, and the
    verifier says so exactly (an interval enclosure of the difference excludes 0)."""
    c = 2 / np.sqrt(np.pi)

    def vjp(B: object, args: tuple, out: object, ct: object) -> tuple:
        return (B.exp(-(args[0] * args[0])) * float(c) * ct,)  # type: ignore[attr-defined]

    monkeypatch.setattr(tl.get_op("erf"), "vjp_rule", vjp)
    checks = check_signature(_erf_sig())
    bad = [ch for ch in checks if ch.name == "vjp = adjoint"]
    assert bad and bad[0].result == "fail" and bad[0].method == "exact"


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_a_compiled_erf_derivative_with_a_literal_pi_is_refuted(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled program computes pi as atan2(0, -1), which the jaxpr interpreters read as
    pi; a literal (the float's rational) is not pi, in either dtype."""
    from torchlean_ir.backends._jax import JaxBackend

    for c in check_op_lowering(_erf_sig(dtype)):
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how)
    monkeypatch.setattr(JaxBackend, "pi", lambda self: self.asarray(np.pi))
    checks = check_op_lowering(_erf_sig(dtype))
    got = {c.name: (c.result, c.method) for c in checks}
    assert got == {"lowered forward = reference": ("pass", "exact"),
                   "lowered jvp = reference": ("fail", "exact"),
                   "lowered vjp = reference": ("fail", "exact")}, got  # fmt: skip
