"""The softmax abstraction at tensor level (``verify/_tsoftmax.py``) and the term rewrites it
relies on: congruence deltas, finite max shifts, masked entries."""

from __future__ import annotations

import itertools
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import symengine as se

import torchlean_ir as tl
import verify
from torchlean_ir.backends._jax import _softmax_call
from verify import _tjaxpr, _tsoftmax
from verify import terms as T
from verify._decide import decide_equal
from verify._tbackend import TENSOR
from verify._tdecide import decide_tensor
from verify._tensor import leaf
from verify._tsoftmax import explicit_softmax


def _sub(fn, shape):  # the closed jaxpr of a jitted one-argument function
    closed = jax.make_jaxpr(fn)(jnp.zeros(shape))
    return closed.jaxpr.eqns[0].params["jaxpr"]


def _tl_softmax(shape, valid=None):
    key = None if valid is None else (np.ascontiguousarray(valid).tobytes(), valid.shape)
    return _sub(_softmax_call(key), shape)


# -- congruence deltas ---------------------------------------------------------------------------


def test_a_congruence_delta_is_solved_like_brute_force() -> None:
    """``sum_{L <= k < L + w} [a k + c q + r = 0 (mod m)] g(k)`` for random ``a, c, r, m`` and
    ``w <= m``: the normal form has no congruence left and equals the brute-force sum at every
    ``q``."""
    rng = random.Random(7)
    solved = 0
    for _ in range(60):
        m = rng.randint(2, 9)
        a = rng.choice([v for v in range(-7, 8) if v and np.gcd(v, m) == 1])
        c, r = rng.randint(-5, 5), rng.randint(-20, 20)
        lo, w = rng.randint(-3, 3), rng.randint(1, m)
        (q,) = T.free_vars((12,))

        def body(k, a=a, c=c, q=q, r=r, m=m):
            return T.eq(T.mod(a * k + c * q + r, m)) * T.read("g", (k,))

        term = T.ssum(body, lo, lo + w)
        norm = T.normalize(term)
        if not any(T.name_of(f) == "_SUM" for f in T.fn_atoms(norm)):
            solved += 1
        for v in range(12):
            got = T.concretize(norm, {q: v})
            want = se.Add(*[se.Symbol(f"g[{k}]") for k in range(lo, lo + w)
                            if (a * k + c * v + r) % m == 0])  # fmt: skip
            assert se.expand(got - want) == 0, (a, c, r, m, lo, w, v, norm)
    assert solved == 60  # every congruence was solved, not left as a sum


# -- finite shifts and masked entries ------------------------------------------------------------


def test_finite_max_shifts_and_masked_entries() -> None:
    (r, k) = T.free_vars((4,))[0], T.fresh("_m", 0, 4)
    z = se.Function("z")
    causal = np.tril(np.ones((4, 4), bool)).astype(np.int64)
    blocked = causal.copy()
    blocked[2] = 0  # row 2 has no valid entry

    def masked_max(table):
        cond = se.Eq(1, T.table_read(table, (r, k)))
        return T.MAXR(se.Piecewise((z(r, k), cond), (-se.oo, True)), k, 0, 4)

    assert T.finite(masked_max(causal))  # position 0 is valid in every row
    assert not T.finite(masked_max(blocked))  # exp(-oo - (-oo)) is not 0
    shift = -masked_max(causal)
    split = T.split_shifts(se.exp(z(r, 1) + shift))
    assert split == se.exp(z(r, 1)) * T.XS(shift)
    kept = se.exp(z(r, 1) - masked_max(blocked))
    assert T.split_shifts(kept) == kept


def test_tl_softmax_body_is_proved_at_tensor_level_for_long_masked_rows() -> None:
    valid = np.broadcast_to(np.tril(np.ones((128, 128), bool)), (3, 128, 128))
    x = leaf("s", (3, 128, 128))
    with T.budget(60):
        out = _tjaxpr.softmax_call(_tl_softmax((3, 128, 128), valid), x)
    assert out is not None
    name = T.name_of(out.at((0, 5, 7)))
    assert np.array_equal(_tsoftmax.DEFS[name].valid, valid)


def test_a_softmax_without_the_empty_row_guard_is_not_abstracted() -> None:
    """A row with no valid entry: without ``where(any, max, 0)`` the shift is -inf and the
    program computes NaN there; the call must not be read as the softmax (which is 0)."""
    valid = np.ones((3, 4), bool)
    valid[1] = False

    def unguarded(x):
        lg = jnp.where(valid, x, -jnp.inf)
        m = jax.lax.stop_gradient(jnp.max(lg, axis=-1, keepdims=True))
        e = jnp.exp(lg - m)
        s = jnp.sum(e, axis=-1, keepdims=True)
        return e / jnp.where(valid.any(-1, keepdims=True), s, 1.0)

    assert np.isnan(np.asarray(jax.jit(unguarded)(jnp.zeros((3, 4))))[1]).all()
    with T.budget(30):
        assert _tjaxpr.softmax_call(_sub(jax.jit(unguarded), (3, 4)), leaf("s2", (3, 4))) is None
        guarded = _tjaxpr.softmax_call(_tl_softmax((3, 4), valid), leaf("s2", (3, 4)))
    assert guarded is not None


# -- atoms ---------------------------------------------------------------------------------------


def test_atoms_meet_across_forms_and_keep_masks_apart() -> None:
    x, W = leaf("x", (3, 4)), leaf("W", (4, 3))
    with T.budget(30):
        a = TENSOR.softmax(TENSOR.matmul(x, W), axis=-1)
        b = TENSOR.softmax(
            TENSOR.transpose(
                TENSOR.matmul(TENSOR.transpose(W, (1, 0)), TENSOR.transpose(x, (1, 0))), (1, 0)
            )
        )
        masked = TENSOR.softmax(TENSOR.matmul(x, W), valid=np.tril(np.ones((3, 3), bool)))
    q = (se.Integer(1), se.Integer(2))
    assert T.name_of(a.at(q)) == T.name_of(b.at(q))
    assert T.name_of(masked.at(q)) != T.name_of(a.at(q))


def test_an_atom_is_its_softmax_at_concrete_elements_and_written_out() -> None:
    s = leaf("t", (2, 3))
    valid = np.array([[True, False, True], [True, True, True]])
    with T.budget(30):
        P = TENSOR.softmax(s * 2, valid=valid)
        want = explicit_softmax(s * 2, valid)
        for i, j in itertools.product(range(2), range(3)):
            idx = (se.Integer(i), se.Integer(j))
            got = T.concretize(P.at(idx), {})
            ref = T.concretize(want.at(idx), {})
            assert decide_equal(got, ref).equal is True, (i, j, got, ref)
            assert decide_equal(T.concretize(T.expand_derived(P.at(idx)), {}), ref).equal
    assert T.concretize(P.at((se.Integer(0), se.Integer(1))), {}) == 0


def test_the_derivative_identity_is_proved_per_row_length() -> None:
    with T.budget(30):
        _tsoftmax._row_lemma(5)
    assert "5" in _tsoftmax._LEMMAS


def test_the_derivative_identity_is_proved_for_a_symbolic_row_length() -> None:
    from verify._dims import Dim

    with T.budget(60):
        _tsoftmax._row_lemma(Dim(T.size_symbol("_Nrow")))
    assert "_Nrow" in _tsoftmax._LEMMAS


def test_a_wrong_softmax_derivative_is_refuted_through_the_atoms() -> None:
    """The jvp of a softmax atom against a jvp rule without its centering term: the decision
    under the atoms does not prove it and a concrete element refutes it exactly."""
    s, ds = leaf("u", (2, 3)), leaf("du", (2, 3))
    with T.budget(60):
        P = TENSOR.softmax(s)
        q = T.free_vars((2, 3))
        want = T.jvp_term(P.at(q), {"u": "du"}, lambda v: v)
        wrong = (P * ds).at(q)
        right = (P * (ds - TENSOR.sum(P * ds, axis=-1, keepdims=True))).at(q)
        assert decide_tensor(right, want, q).equal is True
        d = decide_tensor(wrong, want, q)
    assert d.equal is False and d.method == "exact"


def test_gpt2_size_attention_verifies_exactly_at_tensor_level() -> None:
    n, d, heads = 128, 768, 12
    b = tl.GraphBuilder("f32")
    Ws = [b.param(name, (d, d)) for name in ("Wq", "Wk", "Wv", "Wo")]
    x = b.input("x", (n, d), requires_grad=True)
    causal = np.tril(np.ones((n, n), dtype=bool))
    g = b.build(b.multi_head_attention(*Ws, x, heads=heads, mask=causal))
    report = verify.verify_graph(g, end_to_end="never")
    assert report.verdict == "verified", report.summary()
    att = [c for c in report.all_checks if c.link in ("rule", "compiled")]
    assert att and all((c.level, c.method) == ("tensor", "exact") for c in att)
    assert any("softmax rows as atoms" in c.how for c in att)


@pytest.mark.parametrize("mask", [None, "causal", "blocked-row"])
def test_small_attention_verifies_by_atoms(mask: str | None) -> None:
    b = tl.GraphBuilder("f64")
    Ws = [b.param(name, (4, 4)) for name in ("Wq", "Wk", "Wv", "Wo")]
    x = b.input("x", (3, 4), requires_grad=True)
    m = None
    if mask is not None:
        m = np.tril(np.ones((3, 3), dtype=bool))
        if mask == "blocked-row":
            m[1] = False
    g = b.build(b.multi_head_attention(*Ws, x, heads=2, mask=m))
    report = verify.verify_graph(g, method="tensor", end_to_end="never")
    assert report.verdict == "verified", report.summary()
    assert all(c.method == "exact" for c in report.all_checks)


# -- tables and infinities -----------------------------------------------------------------------


def test_draws_read_through_a_reshape_are_the_same_table() -> None:
    from verify._ttables import _tables

    bits = np.arange(6, dtype=np.uint32) * 7919 + 13
    q5, q6 = T.free_vars((2, 3))
    flat = se.Rational(1, 2**32) * T.table_read(bits, (3 * q5 + q6,))
    direct = T.table_read(bits.reshape(2, 3).astype(np.float64) / 2**32, (q5, q6))
    assert flat != direct
    assert _tables(flat) == direct
    third = se.Rational(1, 3) * T.table_read(bits, (3 * q5 + q6,))
    # 1/3 * bits would round in float64: the read is materialised, the factor kept apart
    assert _tables(third) == se.Rational(1, 3) * T.table_read(
        bits.reshape(2, 3).astype(np.float64), (q5, q6)
    )
    with T.budget(30):
        assert decide_tensor(flat, direct, [q5, q6]).equal is True
        off = se.Rational(1, 2**32) * T.table_read(bits, (3 * q5 + q6 + 0,)) + se.Rational(1, 2**40)
        assert decide_tensor(off, direct, [q5, q6]).equal is False


def test_an_infinite_cell_is_selected_not_multiplied_by_a_bracket() -> None:
    """A padded cell of -oo outside a second padding is 0, not ``0 * -oo = nan``: ``pad``
    selects (a Piecewise) where the value can be infinite. A bracket that *multiplies* an
    infinite value stays a product (NaN where the bracket is 0, as IEEE says)."""
    (q,) = T.free_vars((6,))
    x = se.Function("x")
    cell = se.Piecewise((x(q), se.Eq(1, T.ge(q - 1))), (-se.oo, True))
    product = T.normalize(cell * T.ge(q - 1), True)
    assert product == se.Piecewise((x(q), se.Eq(1, T.ge(q - 1))), (se.nan, True))
    padded = TENSOR.pad(TENSOR.pad(leaf("v", (4,)), [(1, 1)], -float("inf")), [(2, 2)], 0.0)
    for i in range(padded.shape[0]):
        value = T.concretize(T.normalize(padded.at((se.Integer(i),)), True), {})
        assert value != se.nan, i
    assert T.concretize(padded.at((se.Integer(0),)), {}) == 0
    assert T.concretize(padded.at((se.Integer(2),)), {}) == -se.oo
