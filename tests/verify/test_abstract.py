"""The softmax / product abstraction (``verify._abstract``): it proves attention exactly, its
lemmas are real proofs, and it never hides a wrong rule (a mismatch is found in the explicit
form, with a counterexample)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax
import numpy as np
import pytest

import torchlean_ir as tl
import verify
from torchlean_ir.backends import SYM, jax_backend
from verify import _abstract, _jaxpr
from verify._rules import check_signature
from verify._sig import Signature, named_symbols


def _attention(n: int, d: int, heads: int, mask: np.ndarray | None = None) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    W = [b.param(k, (d, d)) for k in ("Wq", "Wk", "Wv", "Wo")]
    x = b.input("x", (n, d))
    return b.build(b.apply("multi_head_attention", *W, x, heads=heads, mask=mask))


@pytest.mark.parametrize("mask", [None, np.tril(np.ones((3, 3), bool))], ids=["full", "causal"])
def test_attention_rules_are_proved_exactly_under_the_abstraction(mask: Any) -> None:
    checks = check_signature(Signature.of(_attention(3, 4, 2, mask), 0))
    assert {c.name for c in checks} == {"jvp = derivative", "vjp = adjoint"}
    for c in checks:
        assert (c.result, c.method) == ("pass", "exact"), c
        assert "softmax abstracted" in c.how and "primal matmul / einsum values" in c.how


def test_attention_graph_verifies_end_to_end_exactly() -> None:
    g = _attention(2, 2, 1)
    report = verify.verify_graph(g, end_to_end="always")
    assert report.verdict == "verified", report.summary()
    e2e = [c for c in report.all_checks if c.link == "end-to-end"]
    assert len(e2e) == 3 and all(c.method == "exact" for c in e2e)


@contextmanager
def _wrong_attention_vjp() -> Iterator[None]:
    op = tl.get_op("multi_head_attention")
    right = op.vjp_rule

    def wrong(B: Any, args: tuple, out: Any, ct: Any, **kw: Any) -> tuple:
        g = list(right(B, args, out, ct, **kw))
        g[1] = g[1] * 1.0001  # Wk's gradient 0.01% too large
        return tuple(g)

    verify.clear_caches()
    op.vjp_rule = wrong
    try:
        yield
    finally:
        op.vjp_rule = right
        verify.clear_caches()


def test_a_wrong_attention_rule_is_caught_with_a_counterexample() -> None:
    with _wrong_attention_vjp():
        checks = check_signature(Signature.of(_attention(2, 2, 1), 0))
    vjp = next(c for c in checks if c.name == "vjp = adjoint")
    assert vjp.result == "fail", vjp
    assert vjp.counterexample is not None and "grad Wk" in vjp.counterexample.element


def test_row_lemma_and_compiled_softmax_call_are_proved() -> None:
    _abstract.row_lemma(3)
    assert 3 in _abstract._ROW_LEMMAS
    B = jax_backend("float64")
    mask = np.array([[True, False, True], [False, False, False]])
    with jax.enable_x64(True):
        jx = jax.make_jaxpr(lambda x: B.softmax(x, axis=-1, valid=mask))(np.zeros((2, 3)))
    (eqn,) = [e for e in jx.jaxpr.eqns if e.params.get("name") == "tl_softmax"]
    valid = _jaxpr.check_softmax_call(eqn.params["jaxpr"], (2, 3))
    np.testing.assert_array_equal(valid, mask)


def test_abstraction_scopes_and_rows() -> None:
    x = named_symbols("s", (2, 3))
    with _abstract.abstraction() as table:
        p = SYM.softmax(x, axis=-1)
        q = SYM.softmax(x * 1, axis=-1)  # the same rows: the same symbols
        assert table.used and len(table.rows) == 2
        assert all(str(v).startswith("softmax") for v in p.a.reshape(-1))
        np.testing.assert_array_equal(p.a, q.a)
        numeric = SYM.softmax(SYM.asarray(np.zeros((1, 2))), axis=-1)  # numbers: explicit
        assert [float(v) for v in numeric.a.reshape(-1)] == [0.5, 0.5]
    explicit = SYM.softmax(x, axis=-1)  # outside: the exponential form
    assert "exp" in str(explicit.a[0, 0])
