"""The term-level steps a blockwise (online) softmax needs (``verify/terms/normal.py``,
``verify/terms/concrete.py``, ``verify/_decide.py``): a held running maximum split out of its
exponentials one read at a time, a concatenation's piece inside an exponent split by its
bracket, a bracket that is 0 selecting (not multiplying) a piece read outside its range, and
products of exponentials compared by monomial. Each is checked on a small term whose answer
is known, and the wrong variant is not proved."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import symengine as se

from verify import terms as T
from verify import verify_function
from verify._decide import decide_equal, exp_as_symbols, se_zero


def _m(i: int) -> se.Basic:
    T.SHIFT_LEAVES.add("_mxT")
    return T.fn("_mxT")(se.Integer(i))


def test_a_held_maximum_leaves_each_exponential_as_a_factor() -> None:
    a, b = se.symbols("a b")
    m = _m(0)
    e = T.split_shifts((se.exp(a - m) + se.exp(b - m)) ** -2)
    assert e == (se.exp(a) * T.XS(m) ** -1 + se.exp(b) * T.XS(m) ** -1) ** -2
    # exp(2 (a - m)) is split too (its exponent is a product before it is expanded)
    e2 = T.split_shifts(se.exp(2 * (a - m)))
    assert e2 == se.exp(2 * a) * T.XS(m) ** -2


def test_a_rescaled_running_sum_cancels_its_maxima() -> None:
    """``exp(m1 - m2) sum exp(s - m1) + exp(t - m2)`` over ``exp(-m2)`` is free of both."""
    s, t = se.symbols("s t")
    m1, m2 = _m(1), _m(2)
    lhs = T.normalize(T.split_shifts(se.exp(m1 - m2) * se.exp(s - m1) + se.exp(t - m2)))
    rhs = T.normalize(T.split_shifts((se.exp(s) + se.exp(t)) * se.exp(-m2)))
    assert se.expand(lhs - rhs) == 0


def test_a_log_of_a_shifted_sum_gives_its_shift_back() -> None:
    s, t = se.symbols("s t")
    m = _m(3)
    e = T.normalize(T.split_shifts(se.log(se.exp(s - m) + se.exp(t - m)) + m))
    assert e == T.normalize(se.log(se.exp(s) + se.exp(t)))


def test_a_zero_bracket_selects() -> None:
    """A piece read outside its table (0 there, so its log is -oo) under a bracket that is 0:
    the product is 0 (what the concatenation computes), at concrete indices and in the normal
    form; with an infinity literal in the other factor it stays IEEE's NaN."""
    k = se.Symbol("_kT")
    piece = se.log(T.fn("_T_test_sel")(k))
    T.TABLES["_T_test_sel"] = __import__("numpy").array([2.0, 3.0])
    term = T.ge(-1 - k) * piece  # [k <= -1] log(table[k]): k = 2 is outside both
    assert T.concretize(term, {k: 2}) == 0
    assert T.normalize(term.xreplace({k: se.Integer(2)}), unroll=T.UNROLL_SHORT) == 0
    inf = T.fn("_GE")(se.Integer(-1)) * (piece.xreplace({k: se.Integer(2)}) - se.oo)
    assert T.normalize(inf, unroll=T.UNROLL_SHORT) != 0


def test_exponentials_compared_by_monomial() -> None:
    a, b, c = se.symbols("a b c")
    assert se_zero(se.expand(se.exp(a) * se.exp(b) / (se.exp(a + b) + se.exp(c))
                             - 1 / (1 + se.exp(c - a - b))))  # fmt: skip
    assert not se_zero(se.expand(se.exp(a) * se.exp(b) - se.exp(a + 2 * b)))
    z = exp_as_symbols(se.exp(2 * a + b))
    assert not any(p.args[0] == se.E for p in z.atoms(se.Pow)) and len(z.free_symbols) == 2
    d = decide_equal(se.exp(a + b) / (se.exp(a) + 1), se.exp(b) / (1 + se.exp(-a)), sample=False)
    assert d.equal is True and d.method == "exact"


def test_a_masked_score_scaled_by_a_root_leaves_its_exponential() -> None:
    """Attention's scores at a head dimension of 2 are scaled by ``1/sqrt(2)``: a constant that
    is finite, real and positive, so ``exp(s/sqrt(2) if mask else -oo)`` is ``[mask]
    exp(s/sqrt(2))`` and ``exp(-log(l))`` over a sum of such exponentials is ``1/l``. A root of
    a negative number is none of these."""
    c = se.sqrt(2) / 2
    assert T.finite(c) and T.positive(c) and T.nonnegative(c)
    assert T.finite(se.pi) and T.finite(se.log(2))
    assert not T.finite(se.sqrt(-2)) and not T.positive(se.sqrt(-2))
    assert not T.finite(se.log(se.Integer(0)))
    y, k = T.fn("yy"), se.Symbol("_kR")
    T.TABLES["_T_test_root"] = __import__("numpy").array([[1, 0], [1, 1]])
    mask = T.fn("_T_test_root")(se.Integer(1), k)
    masked = se.Piecewise((c * y(k), se.Eq(mask, 1)), (-se.oo, True))
    assert T.normalize(se.exp(masked)) == mask * se.exp(c * y(k))
    total = se.exp(c * y(k)) + se.exp(c * y(k + 1))
    assert T.normalize(se.exp(c * y(k) - se.log(total))) == T.normalize(se.exp(c * y(k)) / total)


def test_a_shift_common_to_a_normaliser_leaves_its_power() -> None:
    """``(A/X + B/X)^-4`` with ``X`` a held maximum's factor is ``X^4 (A + B)^-4``: the shift
    cancels against the numerator's instead of being expanded into a multinomial."""
    a, b = se.symbols("a b")
    x = T.XS(_m(4))
    e = T.normalize(x**-4 * (a / x + b / x) ** -4)
    assert not any(T.name_of(f) == "_XS" for f in T.fn_atoms(e))
    assert se.expand(e - (a + b) ** -4) == 0


def test_denominators_that_are_powers_of_one_sum() -> None:
    """``1/l - (a^2 + 2 a b + b^2)/l^4 ... = 0`` with ``l = a + b`` written ``l``, ``l^2``,
    ``l^4`` expanded (as symengine writes them): proved group by group over ``l^4``; a
    difference that is not 0 is not."""
    from verify._decide import _zero_over_denominators

    a, b, c = se.symbols("a b c")
    lo = a + b
    e = se.expand(c / lo - c * lo**2 / se.expand(lo**3) + (a - b) / se.expand(lo**2)
                  - (a - b) * lo**2 / se.expand(lo**4))  # fmt: skip
    assert e != 0 and _zero_over_denominators(e)
    assert not _zero_over_denominators(se.expand(c / lo - c / se.expand(a**2 + b**2)))
    assert not _zero_over_denominators(se.expand(1 / se.expand(lo**2) - 1 / (a**2 + b**2)))
    assert not _zero_over_denominators(se.expand(c / se.expand(lo**2) - c * lo / se.expand(lo**4)
                                                 - 1))  # fmt: skip


# -- stop_gradient read by a comparison --------------------------------------------------------

sg = jax.lax.stop_gradient
X4 = jax.ShapeDtypeStruct((4,), jnp.float32)


def _relu_sg(x: jax.Array) -> jax.Array:
    return x * (sg(x) > 0)


@jax.custom_vjp
def _relu_wrong(x: jax.Array) -> jax.Array:
    return x * (sg(x) > 0)


_relu_wrong.defvjp(lambda x: (_relu_wrong(x), x), lambda x, ct: (ct * (sg(x) < 0),))


def test_a_stopped_mask_keeps_its_value() -> None:
    """ReLU written with a stopped mask: the derivative through the comparison is 0, so the
    stop_gradient does not change the derivative (a pass), but the mask still changes the
    value: it is not set to 0 (that made both sides 0 and a wrong rule VERIFIED)."""
    r = verify_function(_relu_sg, X4, budget_s=30)
    assert r.verdict == "verified", str(r)
    sgc = [c for c in r.all_checks if c.name.startswith("stop_gradient")]
    assert sgc and all(c.result == "pass" and c.method == "exact" for c in sgc)
    bad = verify_function(_relu_wrong, X4, budget_s=30)
    assert bad.verdict == "mismatch", str(bad)
    failed = [c for c in bad.all_checks if c.result == "fail"]
    assert failed and all(c.counterexample is not None for c in failed)


def test_a_masked_sum_beside_a_moving_read_has_no_opaque_derivative() -> None:
    """``x(i) * sum_k exp([mask] y(k) or -oo)``: the sum does not move with ``x``, but symengine
    differentiates its Piecewise branch by branch (zeros it does not write as 0) and keeps a
    ``Subs(Derivative(_SUM ...))`` beside them; the derivative is ``dx(i)`` times the sum, with
    no opaque factor (this is what a head dimension of 2 in blockwise attention met)."""
    from verify._kinks import conventional

    k, i = se.symbols("_k0 _q0")
    body = se.exp(se.Piecewise((T.fn("yy")(k), se.Eq(T.fn("_Tab")(i, k), 1)), (-se.oo, True)))
    s = T.SUM(body * T.fn("_GE")(k) * T.fn("_GE")(3 - k), k)
    d = T.jvp_term(T.fn("xx")(i) * s, {"xx": "dxx"}, conventional)
    assert d == T.fn("dxx")(i) * s
    assert not d.atoms(se.Subs)


def test_sums_over_one_range_are_decided_by_their_summands() -> None:
    """``sum_k y x^2 / (1 + x^2) + sum_k y / (1 + x^2) = sum_k y``: three sums over one range of
    64 values (too long to unroll), 0 only once their summands are added; decided at one free
    index over the range (``verify/_tsummands.py``). A wrong summand is not proved."""
    from verify._tdecide import decide_tensor

    (i,) = T.free_vars((3,))
    n = 64

    def x(k: se.Basic) -> se.Basic:
        return T.leaf_read("x", (i, k), (3, n))

    def y(k: se.Basic) -> se.Basic:
        return T.leaf_read("y", (i, k), (3, n))

    want = T.ssum(y, 0, n)
    got = T.ssum(lambda k: y(k) * x(k) ** 2 / (1 + x(k) ** 2), 0, n) + T.ssum(
        lambda k: y(k) / (1 + x(k) ** 2), 0, n
    )
    d = decide_tensor(got, want, [i], counterexamples=False)
    assert d.equal is True and d.method == "exact" and "summands" in d.how, d
    bad = T.ssum(lambda k: y(k) * x(k) ** 2 / (1 + x(k) ** 2), 0, n) + T.ssum(
        lambda k: y(k) / (1 + x(k) ** 2) ** 2, 0, n
    )
    assert decide_tensor(bad, want, [i], counterexamples=False).equal is not True


def test_a_concatenation_over_many_blocks_gives_one_exponential_per_block() -> None:
    """``exp(r + sum_j [block j] log(l_j))`` over 8 blocks: a piece is split off where its
    bracket is 1 and the pieces whose brackets exclude it are dropped there: n + 1
    exponentials; the products ``prod (1 - [c_j])`` its levels leave are multiplied out with
    the monomials whose brackets are never all 1 together dropped (a block ``j`` and a block
    ``j'`` at once), so 17 monomials (``[c_j]`` with its piece, and the rest's
    ``1 - sum_j [c_j]``), where expanding them gave ``2^(n+1) - 1``; the same value at every
    index."""
    from verify.terms.normal import _split_by_bracket

    (q,) = T.free_vars((16,))
    r = se.Symbol("r")
    e = r
    for j in range(8):
        e += T.ge(q - 2 * j) * T.ge(2 * j + 1 - q) * se.log(1 + T.leaf_read("l", (q,), (16,)))
    out = _split_by_bracket(e)
    assert len(out.args) <= 2 * 8 + 1, len(out.args)
    assert len([p for p in out.atoms(se.Pow) if p.args[0] == se.E]) <= 9
    for v in range(16):
        at = {q: se.Integer(v)}
        assert se.expand(T.normalize(out.xreplace(at)) - T.normalize(se.exp(e.xreplace(at)))) == 0


def test_a_product_of_brackets_never_all_one_is_zero() -> None:
    """A monomial whose single-variable brackets admit no integer is 0 (the free index's range
    counted); kept where another factor holds an infinity literal (``0 * -oo`` is NaN), and a
    bound variable's registered range is not a fact (only its sum's brackets state it)."""
    (q,) = T.free_vars((16,))
    x = T.leaf_read("x", (q,), (16,))
    assert T.normalize(T.ge(q - 12) * T.ge(3 - q) * x) == 0
    assert T.normalize(T.ge(q - 17) * T.ge(20 - q) * x + x) == x  # past the range: 0
    assert T.normalize(T.ge(q - 12) * T.ge(3 - q) * x * -se.oo) != 0
    assert T.normalize(T.ge(q - 3) * T.ge(12 - q) * x) != 0  # 3 <= q <= 12: not empty
    k = T.fresh("_k", 0, 4)  # bound: its range [0, 4) is stated by its sum's brackets only
    assert T.normalize(T.ge(k - 5) * x) != 0
    assert T.normalize(T.ge(k - 5) * T.ge(3 - k) * x) == 0
