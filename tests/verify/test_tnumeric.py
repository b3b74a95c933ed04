"""Certified interval arithmetic for tensor terms (``verify/_tnumeric.py``): every enclosure
contains the exact value (checked against exact rationals and 256-bit mpmath intervals), the
search never reports a mismatch where the sides are equal, and it finds the injected bugs when
writing an element out is too costly."""

from __future__ import annotations

import math
import random
import re
from fractions import Fraction
from typing import Any

import mpmath
import numpy as np
import pytest
import symengine as se
from hypothesis import given, settings
from hypothesis import strategies as st

import verify
import verify._tchecks as C
import verify.terms as T
from tests.op_cases import CASES
from verify import _tnumeric as N
from verify._interval import NoEnclosure, enclose

from .mutants import MUTANTS, applied


def _lohi(t: N.Tab) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = N._interval(t)
    return np.broadcast_arrays(np.asarray(lo, dtype=float), np.asarray(hi, dtype=float))


# -- the ball operations -----------------------------------------------------------------------


def test_exp_encloses_the_exact_value_over_the_whole_ball() -> None:
    rng = random.Random(1)
    mids = [0.0, 1e-300, -1e-300, 0.5, -0.5, 0.34657359, 1.0, -1.0, 10.0, -10.0, 100.25, -700.0,
            -740.0, -744.4, -745.2, -800.0, 700.0, 708.9, 2.0**-30]  # fmt: skip
    mids += [rng.uniform(-700, 700) for _ in range(300)]
    rads = [0.0, 2.0**-40, 1e-3]
    for r in rads:
        m = np.array(mids)
        out = N._exp(N.Tab(("x",), m, np.full_like(m, r) if r else None))
        lo, hi = _lohi(out)
        with mpmath.workprec(200):
            for x, a, b in zip(mids, lo, hi, strict=True):
                lo_exact = mpmath.iv.exp(mpmath.iv.mpf(x) - mpmath.iv.mpf(r))
                hi_exact = mpmath.iv.exp(mpmath.iv.mpf(x) + mpmath.iv.mpf(r))
                assert a <= lo_exact.a and hi_exact.b <= b, (x, r, a, b)
                if x > -600 and r == 0:  # tight: a few ulps, not a loose bound
                    assert b - a <= 1e-13 * b, (x, a, b)


def test_the_split_of_ln2_is_as_accurate_as_the_bound_says() -> None:
    with mpmath.workprec(300):
        err = mpmath.log(2) - mpmath.mpf(N._LN2_HI) - mpmath.mpf(N._LN2_LO)
        assert abs(err) < N._LN2_ERR
    # k * hi is exact for |k| < 2^21: hi, in [1/2, 1), has at most 32 significant bits
    assert 0.5 <= N._LN2_HI < 1 and Fraction(N._LN2_HI).denominator <= 2**32


def test_exp_of_minus_infinity_is_exactly_zero_and_overflow_gives_no_certificate() -> None:
    out = N._exp(N.Tab((), np.asarray(-math.inf)))
    assert float(out.mid) == 0.0 and float(out.rad) == 0.0
    with pytest.raises(N.NoCertificate):
        N._exp(N.Tab((), np.asarray(709.5)))


_dyadic = st.integers(-(2**20), 2**20).map(lambda k: k / 1024.0)
_radius = st.sampled_from([0.0, 2.0**-30, 1e-6, 0.25])


@settings(max_examples=300, deadline=None)
@given(_dyadic, _radius, _dyadic, _radius, st.sampled_from(["add", "mul", "recip", "sqrt", "abs"]))
def test_arithmetic_balls_contain_every_exact_result(
    am: float, ar: float, bm: float, br: float, op: str
) -> None:
    a = N.Tab((), np.asarray(am), np.asarray(ar) if ar else None)
    b = N.Tab((), np.asarray(bm), np.asarray(br) if br else None)
    points = [(Fraction(am) + s * Fraction(ar), Fraction(bm) + t * Fraction(br))
              for s in (-1, 0, 1) for t in (-1, 0, 1)]  # fmt: skip
    try:
        if op == "add":
            out, exact = N._add([a, b]), [x + y for x, y in points]
        elif op == "mul":
            out, exact = N._mul2(a, b), [x * y for x, y in points]
        elif op == "recip":
            out, exact = N._recip(a), [1 / x for x, _ in points if x != 0]
        elif op == "sqrt":
            out, exact = N._sqrt(a), [None]
        else:
            out, exact = N._abs(a), [abs(x) for x, _ in points]
    except N.NoCertificate:
        assume_refused = op in ("recip", "sqrt")
        assert assume_refused, op  # only a ball containing 0 / reaching below 0 is refused
        return
    lo, hi = (Fraction(float(v)) for v in _lohi(out))
    if op == "sqrt":
        for x, _ in points:
            with mpmath.workprec(200):
                iv = mpmath.iv.sqrt(mpmath.iv.mpf(Fraction(x).numerator) / Fraction(x).denominator)
            assert float(lo) <= iv.a and iv.b <= float(hi)
        return
    for e in exact:
        assert lo <= e <= hi, (op, am, ar, bm, br, lo, hi, e)


def test_contraction_bounds_hold_for_long_sums_of_awkward_values() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 4096)) * 10.0 ** rng.integers(-8, 8, (7, 4096))
    b = rng.standard_normal(4096)
    k = se.Symbol("k")
    i = se.Symbol("i")
    out = N._contract([N.Tab((i, k), a), N.Tab((k,), b)], k, 4096, {i: (0, 7), k: (0, 4096)})
    lo, hi = _lohi(out)
    for row in range(7):
        exact = sum(Fraction(float(x)) * Fraction(float(y)) for x, y in zip(a[row], b, strict=True))
        assert Fraction(float(lo[row])) <= exact <= Fraction(float(hi[row]))


def test_leaf_values_are_reproducible_dyadic_and_in_their_domain() -> None:
    a = N.leaf_values("x", (3, 5), seed=2)
    assert np.array_equal(a, N.leaf_values("x", (3, 5), seed=2))
    assert not np.array_equal(a, N.leaf_values("x", (3, 5), seed=3))
    assert not np.array_equal(a, N.leaf_values("y", (3, 5), seed=2))
    assert np.all(a * 256 == np.round(a * 256)) and np.all(a != 0)
    assert np.all(N.leaf_values("p", (50,), domain="positive") > 0)
    u = N.leaf_values("u", (50,), domain="unit", scale=1.0)
    assert np.all((u > 0) & (u < 1))


# -- against exact values, on the terms the op table's checks compare ----------------------------

#: Rows whose checks' terms are evaluated both ways (every kind of term the backends build:
#: transcendental functions, Piecewise kinks, maxima, windows with padding, softmax atoms, ...).
ROWS = ["sqrt[2x3]", "clamp[6]", "max[5_5]", "tanh[2x3]", "log[4]", "softplus[6]",
        "log_softmax[2x4]", "layer_norm[2x4_4_4]", "gelu[6]", "conv2d[2x1x2x3_2_1x5x6-s2]",
        "max_pool2d[2x4x5]", "avg_pool2d_pad[1x5x5]", "smooth_max_pool2d[2x4x4]",
        "multi_head_attention[4x4_4x4_4x4_4x4_3x4-causal]", "linear[3x4_3_4]"]  # fmt: skip


def _exact_leaf(domains: dict[str, str], scale: float) -> Any:
    def value(name: str, idx: tuple[int, ...]) -> Any:
        v = N._draw(name, [np.asarray(i) for i in idx], 0, scale, domains.get(name, "real"), ())
        f = Fraction(float(v))
        return se.Rational(f.numerator, f.denominator)

    return value


@pytest.mark.parametrize("case_id", ROWS)
def test_enclosures_contain_the_exact_values_and_equal_sides_are_never_refuted(
    case_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = next(c for c in CASES if c.id == case_id)
    seen: list[tuple] = []
    real = C.decide_tensor

    def record(g: Any, x: Any, free: Any, **kw: Any) -> Any:
        # leaf shapes are registered by name; another signature may reuse a name later
        seen.append((g, x, free, kw, dict(T.LEAF_SHAPES)))
        return real(g, x, free, **kw)

    monkeypatch.setattr(C, "decide_tensor", record)
    report = verify.verify_graph(case.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    checked = 0
    original = dict(T.LEAF_SHAPES)  # one registry, read by every layer of verify.terms
    try:
        checked = _check_enclosures(case_id, seen)
    finally:
        T.LEAF_SHAPES.clear()
        T.LEAF_SHAPES.update(original)
    assert checked >= 8, checked


def _check_enclosures(case_id: str, seen: list[tuple]) -> int:
    checked = 0
    for g, x, free, kw, shapes in seen:
        if kw.get("nat_symbols") or any(v in T.SIZES or v in T.UPPER for v in free):
            continue  # index inputs, or a proof with symbolic sizes (verify/_certify.py)
        T.LEAF_SHAPES.clear()
        T.LEAF_SHAPES.update(shapes)
        syms = [v for v in free if isinstance(v, se.Symbol)]
        rng = random.Random(0)
        points = [{v: rng.randrange(*T.RANGES[v]) for v in syms} for _ in range(2)]
        for pt in points:
            for side in (g, x):
                for scale in N.SCALES[:2]:
                    ev = N._Eval({v: (pt[v], 1) for v in syms}, kw["domains"], 0, scale)
                    try:
                        lo, hi = (float(np.asarray(v).reshape(-1)[0]) for v in _lohi(ev.ev(side)))
                    except N.NoCertificate:
                        continue
                    try:
                        iv = enclose(T.concretize(side, pt, leaf=_exact_leaf(kw["domains"], scale)))
                    except (NoEnclosure, T.TermError, ZeroDivisionError, ValueError):
                        continue
                    assert lo <= iv.a and iv.b <= hi, (case_id, pt, scale, lo, hi, iv)
                    checked += 1
        # the sides are equal (the row verifies): no element may be refuted
        assert N.find_mismatch(g, x, syms, kw["domains"]) is None, case_id
    return checked


# -- finding the bugs ------------------------------------------------------------------------------

#: Mutants whose wrong values are generic (no kink, no tie): the certified search alone must
#: refute them when writing elements out is switched off.
NUMERIC_MUTANTS = ["sub vjp sign flip", "mse_loss vjp missing factor 2", "matmul vjp transposed",
                   "tanh vjp 0.05% scale error", "log_softmax vjp missing exp",
                   "softmax lowered over axis 0", "conv2d lowered as a true convolution (kernel "
                   "flipped)", "attention lowered without its causal mask",
                   "avg_pool2d_pad lowered excludes padding from the divisor"]  # fmt: skip


@pytest.mark.parametrize("name", NUMERIC_MUTANTS)
def test_the_certified_search_alone_finds_generic_bugs(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import verify._tcounterexample as D

    monkeypatch.setattr(D, "EXPAND_MAX", 0)  # no element is written out
    mutant = next(m for m in MUTANTS if m.name == name)
    with applied(mutant):
        report = verify.verify_graph(mutant.graph(), method="tensor", end_to_end="never")
    assert report.verdict == "mismatch", report.summary()
    failed = [c for _, c in report.failures() if c.result == "fail"]
    assert failed
    for c in failed:
        ce = c.counterexample
        assert (c.level, c.method) == ("tensor", "exact")
        assert ce.evidence.startswith("interval (ball) arithmetic"), ce.evidence
        assert "leaf_values" in ce.inputs["every leaf element"]
        assert re.fullmatch(r".+\[[\d,]*\]", ce.element), ce.element
        assert ce.expected != ce.got
