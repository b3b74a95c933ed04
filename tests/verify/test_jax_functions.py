"""JAX's own functions (``benchmarks/jax_functions.py``'s rows) decided by verify_function: each
row that verifies is pinned here, with a wrong custom rule for the same function refuted."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from verify import verify_function

F32 = jnp.float32


def _arg(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


def _with_vjp(f, bwd):
    """``f`` with the custom VJP ``bwd(x, g)`` (residual: the input)."""
    c = jax.custom_vjp(f)
    c.defvjp(lambda x: (f(x), x), lambda x, g: (bwd(x, g),))
    return c


# -- var / std: a select on a known condition never reads the case it does not take ----------


def test_var_and_std_verify():
    for f in (lambda x: jnp.var(x, -1), lambda x: jnp.std(x, -1)):
        for shape in ((8, 16), (2, 3, 4, 6)):
            r = verify_function(f, _arg(*shape))
            assert r.verdict == "verified", str(r)


def test_var_with_a_wrong_rule_is_refuted():
    n = 6

    def var(x):
        return jnp.var(x, -1)

    def bwd(x, g):  # 2 (x - mean) / (n - 1): the unbiased estimator's factor
        return g[:, None] * 2 * (x - x.mean(-1, keepdims=True)) / (n - 1)

    assert verify_function(_with_vjp(var, lambda x, g: g[:, None] * 2 * (
        x - x.mean(-1, keepdims=True)) / n), _arg(3, n)).verdict == "verified"  # fmt: skip
    r = verify_function(_with_vjp(var, bwd), _arg(3, n))
    assert r.verdict == "mismatch", str(r)


def test_var_whose_known_condition_selects_nan_is_not_verified():
    """ddof = n: ``n - ddof > 0`` is known false, so the NaN case is selected: never a pass."""
    r = verify_function(lambda x: jnp.var(x, -1, ddof=4), _arg(3, 4))
    assert r.verdict == "undecided", str(r)
    assert "NaN" in " ".join(c.how for c in r.graph_checks)
