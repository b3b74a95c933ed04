"""A fused layer norm with a hand-written backward (``jax.custom_vjp``), and a buggy twin.

    y = (x - mean(x)) * rsqrt(var(x) + eps) * gamma + beta      (over the last axis)

The backward recomputes nothing: it keeps ``xhat`` and ``rstd`` from the forward and returns

    dbeta = sum_rows(g),  dgamma = sum_rows(g * xhat),
    dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = g * gamma.

``layer_norm_wrong`` is the same code with a typo a test with tolerances does not see: its
backward recomputes ``rstd`` with ``eps = 1e-6`` where the forward uses ``1e-5``.

    torchlean-verify --function examples/functions/layer_norm.py:layer_norm --args "$ARGS"
"""

from __future__ import annotations

import jax

#: The shapes the shipped checks use: a batch of 32 rows of width 128, gamma, beta.
ARGS = "f32[32,128] f32[128] f32[128]"
EPS = 1e-5


def _stats(x: jax.Array, eps: float) -> tuple[jax.Array, jax.Array]:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return mu, jax.lax.rsqrt(var + eps)


def _primal(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
    mu, rstd = _stats(x, EPS)
    return (x - mu) * rstd * gamma + beta


def _fwd(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> tuple[jax.Array, tuple]:
    mu, rstd = _stats(x, EPS)
    xhat = (x - mu) * rstd
    return xhat * gamma + beta, (xhat, rstd, gamma)


def _bwd(res: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    xhat, rstd, gamma = res
    dxhat = g * gamma
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))  # fmt: skip
    return dx, (g * xhat).sum(0), g.sum(0)


layer_norm = jax.custom_vjp(_primal)
layer_norm.defvjp(_fwd, _bwd)


def _fwd_wrong(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> tuple[jax.Array, tuple]:
    mu, rstd = _stats(x, EPS)
    xhat = (x - mu) * rstd
    return xhat * gamma + beta, (x, gamma)


def _bwd_wrong(res: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    x, gamma = res
    mu, rstd = _stats(x, 1e-6)  # the bug: not the forward's eps
    xhat = (x - mu) * rstd
    dxhat = g * gamma
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))  # fmt: skip
    return dx, (g * xhat).sum(0), g.sum(0)


layer_norm_wrong = jax.custom_vjp(_primal)
layer_norm_wrong.defvjp(_fwd_wrong, _bwd_wrong)


if __name__ == "__main__":
    from verify import parse_arg_specs, verify_function

    for fn in (layer_norm, layer_norm_wrong):
        print(verify_function(fn, *parse_arg_specs(ARGS), name=fn.__name__))
