"""Gathers at runtime index vectors of more positions than a range is unrolled for
(``verify.terms.UNROLL_MAX``): the compiled VJP (JAX's scatter-add of the cotangent at the
indices, behind its own clamping of out-of-range values) and the reference rule meet as one sum
over a bound position ``p`` with the bracket ``[idx(p) == j]``, whatever the number of
positions (``verify/terms/``: a bracket nested in an index that a nat read's range decides is
substituted, not split; brackets stay 0/1 after a split). A wrong scatter (a position dropped,
the cotangent shifted by one position, rows sent to ``j + 1``) is refuted at tensor level with
an element and the index vector named (``verify/_tnatvec.py``)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

import torchlean_ir as tl
import verify

from .mutants import Mutant, _rule, applied

#: Past the unrolled ranges: the positions stay one symbolic sum.
POSITIONS = 9


def _graph(op: str, shape: tuple[int, ...], positions: int = POSITIONS) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", shape)
    y = b.apply(op, x, b.index("idx", positions))
    return b.build(b.sum(y * y))


GRAPHS = {
    "gather_rows_nat": lambda: _graph("gather_rows_nat", (3, 2)),
    "gather_vec_nat": lambda: _graph("gather_vec_nat", (5,)),
}


@pytest.mark.parametrize("op", sorted(GRAPHS))
def test_a_gather_past_the_unrolled_positions_verifies_exactly_at_tensor_level(op: str) -> None:
    report = verify.verify_graph(GRAPHS[op](), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    node = report.nodes[0]
    assert node.op == op
    for c in node.checks:
        assert (c.result, c.method, c.level) == ("pass", "exact", "tensor"), (c.name, c.how)
    assert any(c.name == "compiled vjp = reference" for c in node.checks)


def _scatter(kind: str) -> Callable[..., tuple]:
    """A wrong lowered VJP of a gather (as JAX's ``at[].add``, out-of-range values dropped)."""

    def vjp(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
        import jax.numpy as jnp

        x = args[0]
        n = x.shape[0]
        i = jnp.asarray(idx)
        i = jnp.where(i < n, i, n)
        zero = jnp.zeros_like(x)
        if kind == "drops the last position":
            return (zero.at[i[:-1]].add(ct[:-1], mode="drop"),)
        if kind == "shifts the cotangent by one position":
            return (zero.at[i].add(jnp.roll(ct, 1, axis=0), mode="drop"),)
        assert kind == "scatters into j + 1"
        return (zero.at[i + 1].add(ct, mode="drop"),)

    return vjp


KINDS = ["drops the last position", "shifts the cotangent by one position", "scatters into j + 1"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", sorted(GRAPHS))
def test_a_wrong_scatter_is_refuted_at_tensor_level_with_an_element_named(
    op: str, kind: str
) -> None:
    m = Mutant(f"{op} lowered vjp {kind}", "lowering", GRAPHS[op],
               _rule(op, "lower_vjp_rule", _scatter(kind)))  # fmt: skip
    with applied(m):
        report = verify.verify_graph(m.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    failed = [c for _, c in report.failures() if c.result == "fail"]
    assert failed and {c.name for c in failed} == {"compiled vjp = reference"}
    element = r"grad x\[\d+,\d+\]" if op == "gather_rows_nat" else r"grad x\[\d+\]"
    for c in failed:
        assert (c.level, c.method) == ("tensor", "exact"), c.how
        ce = c.counterexample
        assert ce is not None and re.fullmatch(element, ce.element), ce
        assert ce.expected != ce.got
        values = ce.inputs["index idx"]  # the concrete index vector of the counterexample
        assert len(re.findall(r"\d+", values)) == POSITIONS


def test_proposed_index_vectors_stay_in_their_range(monkeypatch: pytest.MonkeyPatch) -> None:
    """A counterexample's index vector is an input the program can receive: every proposed
    value is within the vector's range (int32 values for a compiled call), whatever the
    element's indices (here past the range too)."""
    import random

    import symengine as se

    from verify import _tnatvec
    from verify import terms as T

    monkeypatch.setitem(T.NAT_RANGES, "v__test", (0, 5))
    monkeypatch.setitem(T.LEAF_SHAPES, "v__test", (7,))
    k = T.fresh("_k", 0, 7)
    (vec,) = _tnatvec.nat_vectors(T.eq(T.read("v__test", [k]) - 3) * se.Symbol("z"))
    assert (vec.length, vec.lo, vec.hi, vec.shown) == (7, 0, 5, "index v")
    q = se.Symbol("_q_test")
    points = [{q: 4}, {q: 9}, {q: 0}, {q: 2}]
    assert [p[q] for p in _tnatvec.elements(points)] == [4, 9, 0][: _tnatvec.MAX_ELEMENTS]
    rng = random.Random(0)
    for p in points:
        tried = list(_tnatvec.assignments(p, [vec], rng))
        assert len(tried) == _tnatvec.PER_POINT
        for values in tried:
            arr = values["v__test"]
            assert arr.shape == (7,) and ((arr >= 0) & (arr < 5)).all(), arr
