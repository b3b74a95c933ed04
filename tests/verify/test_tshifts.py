"""Sums equal up to a change of their variable, at tensor level (``verify/terms/``,
``verify/_tcanonical.py``, ``verify/_tsplit.py``): a translation ``k -> k + t`` made by the
canonical form, and a residue class ``k = m u + r`` split over the window of ``r`` on which its
floors are constant. These are what a transposed convolution's weight gradient needs once its
ranges are past ``UNROLL_MAX`` (the rule reads ``x[k] ct[s k + j]``, the adjoint
``ct[o] x[(o - j) / s]`` over the outputs ``o`` of one residue class). Each rule is checked
against brute force, and a wrong variant must not be proved."""

from __future__ import annotations

import math
from typing import Any

import pytest
import symengine as se

import torchlean_ir as tl
import verify
from verify import terms as T
from verify._tcanonical import canonical
from verify._tdecide import decide_tensor

from .mutants import Mutant, _rule, applied

N = 16  # past UNROLL_MAX: nothing here is written out term by term


def _x(i: Any, k: Any) -> Any:
    return T.leaf_read("x", (i, k), (2, N))


def _ct(i: Any, o: Any) -> Any:
    return T.leaf_read("ct", (i, o), (2, 2 * N))


def test_the_residue_window_is_where_the_floor_is_constant() -> None:
    """``_residue_window(a, c, d, m)`` against every window of ``m`` values, by brute force."""
    from verify.terms import _residue_window

    for d in range(2, 13):
        for a in range(-25, 26):
            m = d // math.gcd(a, d) if a else 0
            if m < 2:
                continue
            for c in range(-30, 30):
                ok = [r for r in range(m) if len({(a * v + c) // d for v in range(r, r + m)}) == 1]
                assert _residue_window(a, c, d, m) == (ok[0] if ok else None), (a, c, d)
                assert len(ok) <= 1


def test_sums_shifted_by_a_constant_are_one_sum() -> None:
    """``sum_k x[i, k] ct[j, k + 1]`` (``0 <= k < 15``) and ``sum_k x[i, k - 1] ct[j, k]``
    (``1 <= k < 16``) are the same sum: one canonical form, proved; shifted by 2 instead, or
    over one value fewer, they are not (a counterexample)."""
    i, j = T.free_vars((2, 2))
    got = T.ssum(lambda k: _x(i, k) * _ct(j, k + 1), 0, N - 1)
    want = T.ssum(lambda k: _x(i, k - 1) * _ct(j, k), 1, N)
    assert canonical(T.normalize(got)) == canonical(T.normalize(want))
    assert decide_tensor(got, want, [i, j]).equal is True
    for bad in (
        T.ssum(lambda k: _x(i, k) * _ct(j, k + 2), 0, N - 1),
        T.ssum(lambda k: _x(i, k - 1) * _ct(j, k), 1, N - 1),
    ):
        d = decide_tensor(bad, want, [i, j])
        assert d.equal is False, d.how


def _odd_outputs(i: Any, j: Any, residue: int) -> Any:
    """``sum_o [o = residue (mod 2)] ct[j, o] x[i, floor((o + 1) / 2)]`` over ``0 <= o < 31``,
    the class written as the adjoint writes it, ``2 floor((o + residue) / 2) - o - residue >= 0``
    (``o + residue`` even)."""

    def body(o: Any) -> Any:
        h = T.floor_div(o + residue, 2)
        return T.ge(2 * h - o - residue) * _ct(j, o) * _x(i, T.floor_div(o + 1, 2))

    return T.ssum(body, 0, 2 * N - 1)


def test_a_sum_over_one_residue_class_is_the_sum_over_its_quotient() -> None:
    """The odd outputs ``o = 2 u - 1`` of a stride-2 sum: the split ``o = 2 u + r`` over the
    window ``r in {1, 2}`` (where ``floor((o + 1) / 2)`` is ``u + 1``, not over ``{0, 1}``)
    leaves one residue and a sum over ``u`` equal to ``sum_u x[i, u] ct[j, 2 u - 1]``; the even
    outputs are another sum."""
    i, j = T.free_vars((2, 2))
    want = T.ssum(lambda u: _x(i, u) * _ct(j, 2 * u - 1), 1, N)
    assert decide_tensor(_odd_outputs(i, j, 1), want, [i, j]).equal is True
    d = decide_tensor(_odd_outputs(i, j, 0), want, [i, j])
    assert d.equal is False, d.how


def _leaked(e: Any) -> set:
    """The variables of sums found outside their sums in ``e``."""
    out: set = set()

    def walk(x: Any, scope: frozenset) -> None:
        if isinstance(x, se.Symbol):
            if x in T.BOUND and x not in scope:
                out.add(x)
        elif isinstance(x, se.Basic):
            if T.is_sum(x):
                walk(x.args[0], scope | set(x.args[1:]))
            else:
                for a in x.args:
                    walk(a, scope)

    walk(e, frozenset())
    return out


def test_a_bracket_on_a_sum_variable_is_not_lifted_out_of_the_sum() -> None:
    """``1 / (sum_k exp(2 [k >= 3]) x[i, k] + sum_k x[i, k] ct[i, k])``: the bracket of ``k``
    inside the first sum is not lifted over the whole power (``k`` would be free outside its
    sum)."""
    (i,) = T.free_vars((2,))
    s1 = T.ssum(lambda k: se.exp(2 * T.ge(k - 3)) * _x(i, k), 0, N)
    s2 = T.ssum(lambda k: _x(i, k) * _ct(i, k), 0, N)
    e = 1 / (s1 + s2)
    assert not _leaked(T.normalize(e, unroll=T.UNROLL_SHORT))


def _conv_transpose_graph(stride: int) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    W, bias, x = b.param("W", (2, 2, 3)), b.param("b", (2,)), b.param("x", (2, N))
    y = b.apply("conv_transpose", W, bias, x, stride=(stride,), padding=(1,))
    return b.build(b.sum(y * y))


@pytest.mark.parametrize("stride", [2, 1])
def test_conv_transpose_weight_gradient_verifies_past_the_unrolled_length(stride: int) -> None:
    """A 1-D transposed convolution on a length of 16 (the output 31 or 16 long): its weight
    gradient (rule and compiled) verifies exactly at tensor level (stride 1 needs the
    translation, stride 2 the residue window too)."""
    report = verify.verify_graph(_conv_transpose_graph(stride), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()


def _weight_gradient_undilated(
    B: Any, args: tuple, out: Any, ct: Any, *, stride: Any, padding: Any
) -> tuple:
    # the weight gradient read from the cotangent without the stride (right only at stride 1)
    from torchlean_ir.ops import _windows as w

    gW, gb, gx = _CONV_TRANSPOSE_VJP(B, args, out, ct, stride=stride, padding=padding)
    W, _, x = args
    d = x.ndim - 1
    ctf, sp = w.pad_spatial(B, ct, w.per_dim(padding, d)), w.spatial_letters(d)
    views = [w.window_view(ctf, off, (1,) * d, x.shape[1:]) for off in w.offsets(W.shape[2:])]
    gW = w.stack(B, [B.einsum(f"c{sp},f{sp}->cf", x, v) for v in views], -1)
    return (B.reshape(gW, W.shape), gb, gx)


_CONV_TRANSPOSE_VJP = tl.get_op("conv_transpose").vjp_rule
_UNDILATED = Mutant("conv_transpose vjp: grad W without the stride", "rule",
                    lambda: _conv_transpose_graph(2),
                    _rule("conv_transpose", "vjp_rule", _weight_gradient_undilated))  # fmt: skip


def test_a_wrong_conv_transpose_weight_gradient_is_caught_past_eight() -> None:
    """The weight gradient read from the cotangent at stride 1 where the op has stride 2
    (length 16): a mismatch at tensor level, exact, with the wrong element of grad W named
    (at stride 1 the same code is right: the stride-1 graph above verifies)."""
    with applied(_UNDILATED):
        report = verify.verify_graph(_UNDILATED.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    failed = [c for _, c in report.failures() if c.result == "fail"]
    assert failed and all((c.level, c.method) == ("tensor", "exact") for c in failed)
    for c in failed:
        ce = c.counterexample
        assert ce is not None and ce.element.startswith("grad W["), (c.name, ce)
        assert ce.expected != ce.got
