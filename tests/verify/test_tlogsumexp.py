"""log_softmax at tensor level past the unrolled rows (``verify/terms/``): the log of a
max-shifted sum of exponentials meets the unshifted one (:func:`verify.terms.log_of_shift`),
the exponential of a log-softmax is the softmax's quotient (``_exp_of_logs``), and wrong
variants of both are not proved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import symengine as se

import torchlean_ir as tl
import verify
from verify import terms as T
from verify._tdecide import decide_tensor
from verify._tensor import leaf

from .mutants import Mutant, _rule, _unary, applied

#: A row longer than :data:`verify.terms.UNROLL_MAX`: its sums stay sums, never unrolled.
N = 16


def _row() -> tuple[Any, tuple[Any, ...]]:
    x = leaf("x", (2, N))
    return x, T.free_vars((2, N))


def _lse(x: Any, q: tuple[Any, ...], *, hi: int = N, shift: int = 1, back: int = 1) -> Any:
    """``log(sum_{k < hi} exp(x_k - shift M)) + back M``, ``M`` the row's maximum."""
    m = T.fresh("_mx", 0, N)
    M = T.MAXR(x.at((q[0], m)), m, 0, N)
    total = T.ssum(lambda k: se.exp(x.at((q[0], k)) - shift * M), 0, hi)
    return se.log(total) + back * M


def test_the_log_of_a_shifted_sum_is_the_log_of_the_sum_plus_the_shift() -> None:
    assert N > T.UNROLL_MAX
    p, s = se.Symbol("p"), T.MAXR(se.Symbol("z"), se.Symbol("k"), 0, 3)
    assert T.normalize(se.log(p * T.XS(s) ** 2)) == se.log(p) + 2 * s
    assert T.normalize(se.log(p / T.XS(s))) == se.log(p) - s
    x, q = _row()
    got = x.at(q) - _lse(x, q)
    want = x.at(q) - se.log(T.ssum(lambda k: se.exp(x.at((q[0], k))), 0, N))
    d = decide_tensor(got, want, q, counterexamples=False)
    assert (d.equal, d.method, d.how) == (True, "exact", "identical normal forms")


@pytest.mark.parametrize(
    "wrong",
    [
        {"back": -1},  # the shift subtracted again instead of added back
        {"back": 0},  # the shift not added back
        {"shift": 2},  # shifted twice inside, added back once
        {"hi": N - 1},  # the last entry left out of the normaliser
    ],
    ids=str,
)
def test_a_wrong_shift_or_range_is_not_proved(wrong: dict[str, int]) -> None:
    x, q = _row()
    want = x.at(q) - _lse(x, q)
    got = x.at(q) - _lse(x, q, **wrong)
    assert decide_tensor(got, want, q, counterexamples=False).equal is None
    if wrong == {"back": 0}:  # and refuted at a concrete element (one case: the search is slow)
        d = decide_tensor(got, want, q)
        assert (d.equal, d.method) == (False, "exact")


def test_the_exp_of_a_log_is_a_power_for_a_nonnegative_base() -> None:
    a, k = se.Symbol("a"), T.fresh("_kk", 0, 4)
    z = leaf("z", (4,))
    u = T.ssum(lambda j: se.exp(z.at((j,))), 0, 4)  # a sum of exponentials: positive
    assert T.nonnegative(u)
    assert T.normalize(se.exp(a - se.log(u))) == T.normalize(se.exp(a) / u)
    assert T.normalize(se.exp(a + 2 * se.log(u))) == T.normalize(se.exp(a) * u**2)
    kept = [
        se.exp(a + u * se.log(u)),  # not a rational power
        se.exp(a - se.log(z.at((k,)))),  # a read of any sign: log of a negative value is NaN
        se.exp(a - se.log(T.ssum(lambda j: se.exp(se.log(z.at((j,))) / 2), 0, 4))),  # not real
    ]
    for e in kept:
        assert "log(" in str(T.normalize(e)), e


def _softmax_sums(hi: int) -> tuple[Any, Any, Any]:
    """``sum_k exp(x_k - log S) dx_k`` (the log_softmax jvp rule's form, ``S`` over the
    first ``hi`` entries), ``sum_k exp(x_k) dx_k / sum_k exp(x_k)`` (its derivative) and the
    row index."""
    x, q = _row()
    dx = leaf("dx", (2, N))
    S = T.ssum(lambda k: se.exp(x.at((q[0], k))), 0, hi)
    out = T.ssum(lambda k: se.exp(x.at((q[0], k)) - se.log(S)) * dx.at((q[0], k)), 0, N)
    full = T.ssum(lambda k: se.exp(x.at((q[0], k))), 0, N)
    want = T.ssum(lambda k: se.exp(x.at((q[0], k))) * dx.at((q[0], k)), 0, N) / full
    return out, want, q[0]


def test_the_exp_of_a_log_softmax_is_the_softmax_quotient() -> None:
    got, want, q = _softmax_sums(N)
    d = decide_tensor(got, want, [q], counterexamples=False)
    assert (d.equal, d.method) == (True, "exact")
    got, want, q = _softmax_sums(N - 1)
    assert decide_tensor(got, want, [q], counterexamples=False).equal is None
    assert decide_tensor(got, want, [q]).equal is False


def _graph() -> tl.GraphData:
    return _unary("log_softmax", (2, N))()


def test_log_softmax_past_the_unrolled_rows_verifies_at_tensor_level() -> None:
    report = verify.verify_graph(_graph(), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    for c in report.all_checks:
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how)
        if c.link in ("rule", "compiled"):
            assert c.level == "tensor", (c.name, c.how)


def _forward_unshifted_normaliser(B: Any, x: Any) -> Any:
    return B.max_shift(x) - B.log(B.sum(B.exp(x), axis=-1, keepdims=True))


def _forward_shift_lost(B: Any, x: Any) -> Any:
    shifted = B.max_shift(x)
    return x - B.log(B.sum(B.exp(shifted), axis=-1, keepdims=True))


def _jvp_unnormalised(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    t = tangents[0]
    return t - B.sum(B.exp(args[0]) * t, axis=-1, keepdims=True)


WRONG: list[tuple[str, str, Callable[..., Any]]] = [
    ("forward normalised by the unshifted row", "forward_rule", _forward_unshifted_normaliser),
    ("forward with the shift lost", "forward_rule", _forward_shift_lost),
    ("jvp without the normaliser", "jvp_rule", _jvp_unnormalised),
]


@pytest.mark.parametrize(("name", "slot", "fn"), WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_log_softmax_rule_is_refuted_at_tensor_level(
    name: str, slot: str, fn: Callable[..., Any]
) -> None:
    mutant = Mutant(name, "rule", _graph, _rule("log_softmax", slot, fn))
    with applied(mutant):
        report = verify.verify_graph(_graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    failed = [c for _, c in report.failures() if c.result == "fail"]
    assert any(c.link == "rule" for c in failed), failed
    assert all((c.level, c.method) == ("tensor", "exact") for c in failed), failed
