"""The symbolic jaxpr interpreter against JAX itself, primitive by primitive.

Each function is traced with ``jax.make_jaxpr``, interpreted exactly at concrete inputs (exact
rationals of the float64 inputs) and compared with what JAX computes. Then the symbolic forms
of the non-smooth primitives are checked to match the symbolic backend's, and an unknown
primitive to be refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import symengine as se
from jax import lax

import verify
from torchlean_ir.backends import SYM
from verify import Interpreter, Unsupported
from verify._jaxpr import Choice

jax.config.update("jax_enable_x64", True)

R = np.random.default_rng(0)
V = R.normal(size=(3, 4))
W = R.normal(size=(4, 2))
P = np.abs(R.normal(size=(3, 4))) + 0.1
I3 = np.array([2, 0, 5])


def _unstack(x: Any) -> Any:
    """``unstack`` (the transpose of ``stack``, which JAX writes in the VJP of ``jnp.stack``)."""
    _, pull = jax.vjp(lambda a, b: jnp.stack([a, b], 1), x, x)
    return pull(jnp.stack([x, 2 * x], 1))


def _conv(x: Any, w: Any) -> Any:
    return lax.conv_general_dilated(x, w, (2,), [(1, 2)], lhs_dilation=(1,), rhs_dilation=(2,))


def _conv_groups(x: Any, w: Any) -> Any:
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2)


def _conv_transposed(x: Any, w: Any) -> Any:
    return lax.conv_general_dilated(x, w, (1,), [(2, 2)], lhs_dilation=(2,))


def _fori(x: Any) -> Any:
    return lax.fori_loop(0, 3, lambda i, c: c * 2 + i, x)


def _scan(x: Any) -> Any:
    return lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(x.shape[1]), x)


@jax.custom_jvp
def _cj(x: Any) -> Any:
    return jnp.sin(x) * 2


_cj.defjvp(lambda p, t: (_cj(p[0]), 2 * jnp.cos(p[0]) * t[0]))


@jax.custom_vjp
def _cv(x: Any) -> Any:
    return x * x


_cv.defvjp(lambda x: (x * x, x), lambda r, g: (2 * r * g,))


def _splitmix(x: Any) -> Any:
    z = x.astype(jnp.uint64) + jnp.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> 30)) * jnp.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> 27)) * jnp.uint64(0x94D049BB133111EB)
    return (z ^ (z >> 31)).astype(jnp.float64) / 2.0**64


CASES: list[tuple[str, Callable[..., Any], tuple[Any, ...]]] = [
    ("arith", lambda x: (x + 1.5) * x - x / 3 - (-x), (V,)),
    ("unary", lambda x: jnp.exp(x) + jnp.tanh(x) + jnp.expm1(x) + jnp.sin(x) + jnp.cos(x), (V,)),
    ("positive", lambda x: jnp.log(x) + jnp.sqrt(x) + lax.rsqrt(x) + jnp.log1p(x), (P,)),
    ("logistic", lambda x: jax.nn.sigmoid(x) + lax.integer_pow(x, 3) + jnp.square(x), (V,)),
    ("pow", lambda x, y: x**y, (P, V)),
    (
        "abs_sign",
        lambda x: jnp.abs(x) * jnp.sign(x) + jnp.maximum(x, 0.2) - jnp.minimum(x, 0.1),
        (V,),
    ),
    ("where", lambda x: jnp.where((x > 0) & ~(x > 1) | (x < -1), x, -x), (V,)),
    ("clip", lambda x: jnp.clip(x, -0.5, 0.5) + lax.clamp(-0.2, x, 0.3), (V,)),
    ("compare", lambda x: (x >= 0.1) ^ (x <= -0.1) | (x == x) & (x != 0.5), (V,)),
    ("select_n3", lambda x: lax.select_n(jnp.array([0, 2, 1, 2]), x[0], x[1], x[2]), (V,)),
    ("dot", lambda x, w: x @ w, (V, W)),
    ("dot_batch", lambda a: jnp.einsum("bij,bkj->bik", a, a), (R.normal(size=(2, 3, 2)),)),
    ("reduce", lambda x: (x.sum(0), x.max(1), x.min(), jnp.prod(x, 1)), (V,)),
    ("argmax", lambda x: (jnp.argmax(x, 1), jnp.argmin(x, 0)), (V,)),
    ("shape", lambda x: (x.T.reshape(2, 6)[None], jnp.squeeze(x[:1]), x[::2, 1:3], x[::-1]), (V,)),
    ("bcast", lambda x: jnp.broadcast_to(x[:, :1], (2, 3, 5)) + 1, (V,)),
    ("concat_split", lambda x: jnp.split(jnp.concatenate([x, 2 * x], 1), [3, 5], 1), (V,)),
    ("pad", lambda x: lax.pad(x, 0.5, [(1, -1, 1), (-1, 2, 0)]), (V,)),
    ("dyn_slice", lambda x, i: lax.dynamic_slice(x, (i, i), (2, 2)), (V, 2)),
    ("dyn_update", lambda x, i: lax.dynamic_update_slice(x, jnp.ones((2, 2)), (i, 1)), (V, 5)),
    ("take_fill", lambda x, i: jnp.take(x, i, axis=1, mode="fill", fill_value=0), (V, I3)),
    ("take_clip", lambda x, i: jnp.take(x, i, axis=0, mode="clip"), (V, I3)),
    ("index", lambda x, i: x[i[:2], 1], (V, np.array([2, 0, 1]))),
    ("scatter_add", lambda x, i: x.at[i].add(1.25, mode="drop"), (V, I3)),
    ("scatter_set", lambda x, i: x.at[i, 1].set(-2.0, mode="drop"), (V, I3)),
    (
        "convert",
        lambda x: ((x > 0).astype(jnp.float64), jnp.round(x * 3).astype(jnp.int32) * 2),
        (V,),
    ),
    (
        "iota",
        lambda x: lax.iota(jnp.float64, 4) * x[0] + lax.broadcasted_iota(jnp.int32, (3, 4), 1),
        (V,),
    ),
    (
        "cumsum",
        lambda x: (jnp.cumsum(x, 1), lax.cumsum(x, 0, reverse=True), lax.cummax(x, 1)),
        (V,),
    ),
    ("prod", lambda x: (jnp.prod(x, 1), jnp.prod(x[:2, :3], (0, 1))), (V,)),
    ("unstack", _unstack, (V,)),
    ("conv", _conv, (R.normal(size=(1, 2, 7)), R.normal(size=(3, 2, 2)))),
    ("conv_groups", _conv_groups, (R.normal(size=(1, 4, 3, 3)), R.normal(size=(2, 2, 2, 2)))),
    ("conv_transposed", _conv_transposed, (R.normal(size=(1, 1, 3)), R.normal(size=(2, 1, 3)))),
    (
        "pool",
        lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (2, 2), (1, 2), [(0, 1), (1, 0)]),
        (V,),
    ),
    ("avg", lambda x: lax.reduce_window(x, 0.0, lax.add, (2, 3), (1, 1), "VALID"), (V,)),
    ("cond", lambda x: lax.cond(x.shape[0] > 2, lambda v: v * 2, lambda v: v, x), (V,)),
    (
        "cond_traced",
        lambda x, i: lax.switch(i, [lambda v: v, lambda v: -v, lambda v: v * v], x),
        (V, 1),
    ),
    ("fori", _fori, (V,)),
    ("scan", _scan, (V,)),
    ("custom_jvp", lambda x: _cj(x) + jax.nn.relu(x), (V,)),
    ("custom_vjp", _cv, (V,)),
    ("nested_jit", lambda x: jax.jit(lambda y: jax.jit(jnp.tanh)(y) * 2)(x), (V,)),
    ("stop_gradient", lambda x: lax.stop_gradient(x) + x, (V,)),
    ("erf", lambda x: jax.scipy.special.erf(x), (V,)),
    ("int_bits", _splitmix, (np.array([1, 2, 99], dtype=np.int64),)),
    (
        "int_div",
        lambda i: (i // 3, i % 3, lax.div(i, 3), lax.rem(i, -2), i << 2, i >> 1),
        (np.array([-7, 5, 9]),),
    ),
]


def _as_numpy(v: Any) -> np.ndarray:
    if v.dtype != object:
        return np.asarray(v)
    return np.vectorize(lambda e: float(se.sympify(e)), otypes=[np.float64])(v)


@pytest.mark.parametrize("name,fn,args", CASES, ids=[c[0] for c in CASES])
def test_interpreter_matches_jax(name: str, fn: Callable[..., Any], args: tuple) -> None:
    closed = jax.make_jaxpr(fn)(*args)
    got = Interpreter().run(closed, *[np.asarray(a) for a in args])
    want = jax.tree_util.tree_leaves(fn(*[jnp.asarray(a) for a in args]))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = np.asarray(w)
        g = _as_numpy(g)
        assert g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)
        else:
            np.testing.assert_array_equal(g.astype(w.dtype), w, err_msg=name)


def _tensor_values(fn: Callable[..., Any], x: np.ndarray) -> list[np.ndarray]:
    """The tensor-level terms of ``fn`` on a leaf of ``x``'s shape, every element concretized
    and evaluated at ``x`` (exact rationals of its values)."""
    from verify import terms as T
    from verify._tensor import leaf
    from verify._tjaxpr import TInterpreter
    from verify.terms.core import element_symbol

    closed = jax.make_jaxpr(fn)(x)
    outs = TInterpreter().run(closed, leaf("x", x.shape))
    env = {element_symbol("x", ix): T.exact_scalar(x[ix]) for ix in np.ndindex(x.shape)}
    got = []
    for o in outs:
        vals = np.empty(o.shape)
        for ix in np.ndindex(*o.shape):
            e = T.concretize(o.at(tuple(se.Integer(i) for i in ix)), {})
            vals[ix] = float(e.xreplace(env))
        got.append(vals)
    return got


K = np.array([[3, 1, 2, 1], [1, 1, 0, 2]], np.int32)


def _sort_with_positions(v: Any) -> Any:
    iota = lax.broadcasted_iota(jnp.int32, v.shape, 1)
    return lax.sort((v, iota, 2 * v), dimension=1, num_keys=1)


def test_tensor_cumulative_and_sort_rules_match_jax() -> None:
    """``cumprod`` / ``cummax`` / ``cummin`` (each position's prefix written out) and ``sort``
    (order statistics; the sorted iota, the permutation, a choice of integers) at tensor
    level, both directions, on a middle axis, with ties, against JAX."""
    x = np.round(R.normal(size=(2, 5, 3)) * 2) / 2  # halves: ties in every row
    fns = [
        lambda v: (lax.cumprod(v, 1), lax.cumprod(v, 1, reverse=True), lax.cumprod(v, 2)),
        lambda v: (lax.cummax(v, 1), lax.cummax(v, 1, reverse=True), lax.cummin(v, 1),
                   lax.cummin(v, 0, reverse=True)),
        lambda v: (jnp.sort(v, 1), jnp.sort(v, 0), jnp.argsort(v, 2), *_sort_with_positions(v)),
        lambda v: jnp.take_along_axis(v, jnp.argsort(v, 1), 1) * 2,  # a gather at the choice
        lambda v: (lax.cumprod(K, 1, reverse=True), lax.cummax(K, 1), lax.cummin(K, 0),
                   jnp.sort(K, 1), jnp.argsort(K, 1)),  # concrete integers, by NumPy
    ]  # fmt: skip
    for fn in fns:
        want = jax.tree_util.tree_leaves(fn(jnp.asarray(x)))
        for g, w in zip(_tensor_values(fn, x), want, strict=True):
            np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-12)


def test_where_is_the_symbolic_backends_piecewise() -> None:
    x = verify.named_symbols("x", (3,))
    closed = jax.make_jaxpr(lambda v: jnp.where(v > 0, v, 0.0))(np.zeros(3))
    (got,) = Interpreter().run(closed, x)
    want = SYM.where(x > 0, x, 0.0)
    assert all(a == b for a, b in zip(got.reshape(-1), want.a.reshape(-1), strict=True))


def test_argmax_onehot_is_the_first_max_form() -> None:
    x = verify.named_symbols("x", (2, 3))

    def onehot(v: Any) -> Any:
        return (jnp.argmax(v, axis=1)[:, None] == jnp.arange(3)[None, :]).astype(jnp.float64)

    closed = jax.make_jaxpr(onehot)(np.zeros((2, 3)))
    (got,) = Interpreter().run(closed, x)
    want = SYM.first_max_onehot(x, axis=-1)
    assert all(a == b for a, b in zip(got.reshape(-1), want.a.reshape(-1), strict=True))


def test_argmax_of_symbols_is_a_choice() -> None:
    closed = jax.make_jaxpr(lambda v: jnp.argmax(v))(np.zeros(3))
    (got,) = Interpreter().run(closed, verify.named_symbols("x", (3,)))
    assert isinstance(got[()], Choice) and got[()].values == (0, 1, 2)


def test_float_literals_are_exact_rationals_of_their_dtype() -> None:
    closed32 = jax.make_jaxpr(lambda v: v * 0.1)(np.zeros((), np.float32))
    closed64 = jax.make_jaxpr(lambda v: v * 0.1)(np.zeros((), np.float64))
    x = se.Symbol("x")
    (a,) = Interpreter().run(closed32, np.array(x, dtype=object))
    (b,) = Interpreter().run(closed64, np.array(x, dtype=object))
    assert a[()] == x * se.Rational(13421773, 134217728)  # float32(0.1), exactly
    assert b[()] == x * se.Rational(3602879701896397, 36028797018963968)  # float64(0.1)


@pytest.mark.parametrize(
    "fn",
    [
        lambda v: -jnp.inf + (v - v) * jnp.inf,
        lambda v: jnp.inf + (v - v) * jnp.inf,
        lambda v: (v - v) * jnp.inf - jnp.inf,
        lambda v: jnp.full(3, -jnp.inf) - (v - v) * jnp.inf,
    ],
)
def test_an_infinity_plus_nan_is_nan_as_in_ieee(fn: Callable[..., Any]) -> None:
    # symengine alone reads -oo + nan as -oo: a NaN the compiled program computes would vanish
    x = verify.named_symbols("x", (3,))
    closed = jax.make_jaxpr(fn)(np.ones(3))
    assert np.all(np.isnan(np.asarray(jax.jit(fn)(np.ones(3)))))
    (got,) = Interpreter().run(closed, x)
    assert all(e == se.nan for e in np.asarray(got).reshape(-1)), got
    # and at tensor level
    from verify._tensor import leaf
    from verify._tjaxpr import TInterpreter

    (term,) = TInterpreter().run(closed, leaf("x", (3,)))
    assert term.at((se.Integer(1),)) == se.nan


def test_unknown_primitive_is_refused_not_passed() -> None:
    closed = jax.make_jaxpr(lambda v: jnp.sort(v))(np.zeros(3))
    with pytest.raises(Unsupported, match="sort"):
        Interpreter().run(closed, np.zeros(3))


def test_symbolic_gather_index_is_refused() -> None:
    closed = jax.make_jaxpr(lambda v, i: v[i])(np.zeros(3), 1)
    it = Interpreter()
    with pytest.raises(Unsupported):
        it.run(closed, np.zeros(3), np.array(se.Symbol("i"), dtype=object))


def test_every_primitive_here_is_one_the_interpreter_names() -> None:
    seen: set[str] = set()
    for _, fn, args in CASES:
        it = Interpreter()
        it.run(jax.make_jaxpr(fn)(*args), *[np.asarray(a) for a in args])
        seen |= it.primitives
    assert seen <= set(verify.supported_primitives())
    # the table above exercises most of what the interpreter knows
    assert len(seen) >= 60, sorted(set(verify.supported_primitives()) - seen)
