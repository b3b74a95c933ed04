"""Blockwise causal attention with an online softmax (flash-attention style): a ``fori_loop``
forward over key blocks and a ``jax.custom_vjp`` backward that recomputes the probabilities
block by block from the saved log-sum-exp, and a buggy twin.

    O = softmax(Q K^T / sqrt(d) + causal mask) V

The forward keeps, per query block, a running maximum ``m``, a running sum ``l`` and an
accumulator, rescaled by ``exp(m_old - m_new)`` at each key block; it saves ``L = m + log l``.
The backward recomputes ``P = exp(S - L)`` per block and accumulates ``dQ``, ``dK``, ``dV`` with
``dS = P (dP - rowsum(dO * O))``. ``attention_wrong`` forgets the ``rowsum(dO * O)`` term.

    N, D, BLOCK set the size (the issue's target is N = 1024, D = 64, blocks of 128).

Status: verified exactly at the shipped size, N = 4, D = 2, blocks of 2 (two query blocks; the
second one's running maximum and sum rescaled across two key blocks; the scores a sum over the
head dimension scaled by 1/sqrt(2)), in about 1 CPU s, and the twin refuted with the element
named. Each running maximum is held as a free leaf; the normal form takes it out of the
exponentials as a factor, splits the saved log-sum-exp (a concatenation over query blocks) by
block, and the rescalings cancel; the held maxima are proved not to matter all at once (the
last one, on the side of JAX's VJP, over denominators ``l``, ``l^2``, ``l^4`` compared as powers
of one sum), and the rule, which is ``attention`` itself, by ``attention``'s check. A block's
sums stay one symbolic summand (sums over one range compared by their summands), so the block
size costs nothing: with two query blocks, 8 x 2 in blocks of 4 verifies in about 1 s, 64 x 8
in blocks of 32 in about 0.5 s. The number of query blocks is what grows, about as a power of
it, not exponentially (the products of the saved log-sum-exp's pieces, ``prod (1 - [c_i])``,
are ``n + 1`` monomials: a product of brackets that are never all 1 is dropped): three (12 x 2
in blocks of 4) about 2 s, four about 4 s, five about 8 s, six (24 x 2 in blocks of 4) about
12.5 s, eight (32 x 2 in blocks of 4) about 33 s; the issue's N = 1024, D = 64 in blocks of 128
(eight query blocks) verifies in about 32 s and its twin is refuted in about 36 s (CPU seconds,
2 cores). ``tests/verify/test_functions.py`` checks the shipped size and 512 x 64 in blocks of
128 (four query blocks, about 5 s) in every run, and the issue's size within a budget of 60 s
per check under ``pytest -m heavy``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

N, D, BLOCK = 4, 2, 2
ARGS = f"f32[{N},{D}] f32[{N},{D}] f32[{N},{D}]"


def _scores(qi: jax.Array, kj: jax.Array, i: int, j: jax.Array) -> jax.Array:
    s = qi @ kj.T / jnp.sqrt(jnp.asarray(qi.shape[-1], qi.dtype))
    rows = i * BLOCK + jnp.arange(BLOCK)[:, None]
    cols = j * BLOCK + jnp.arange(BLOCK)[None, :]
    return jnp.where(cols <= rows, s, -jnp.inf)


def _forward(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    outs, lses = [], []
    for i in range(q.shape[0] // BLOCK):
        qi = q[i * BLOCK : (i + 1) * BLOCK]

        def body(j: jax.Array, c: tuple, qi: jax.Array = qi, i: int = i) -> tuple:
            m, l, acc = c
            kj = jax.lax.dynamic_slice_in_dim(k, j * BLOCK, BLOCK)
            vj = jax.lax.dynamic_slice_in_dim(v, j * BLOCK, BLOCK)
            s = _scores(qi, kj, i, j)
            m_new = jnp.maximum(m, s.max(-1))
            p = jnp.exp(s - m_new[:, None])
            scale = jnp.exp(m - m_new)
            return m_new, l * scale + p.sum(-1), acc * scale[:, None] + p @ vj

        init = (
            jnp.full((BLOCK,), -jnp.inf, q.dtype),
            jnp.zeros((BLOCK,), q.dtype),
            jnp.zeros((BLOCK, q.shape[1]), q.dtype),
        )
        m, l, acc = jax.lax.fori_loop(0, i + 1, body, init)
        outs.append(acc / l[:, None])
        lses.append(m + jnp.log(l))
    return jnp.concatenate(outs, 0), jnp.concatenate(lses, 0)


def _primal(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return _forward(q, k, v)[0]


def _fwd(q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, tuple]:
    o, lse = _forward(q, k, v)
    return o, (q, k, v, o, lse)


def _backward(res: tuple, do: jax.Array, wrong: bool) -> tuple[jax.Array, ...]:
    q, k, v, o, lse = res
    delta = (do * o).sum(-1)
    dqs, dk, dv = [], jnp.zeros_like(k), jnp.zeros_like(v)
    for i in range(q.shape[0] // BLOCK):
        rows = slice(i * BLOCK, (i + 1) * BLOCK)
        qi, doi, li, di = q[rows], do[rows], lse[rows], delta[rows]

        def body(j: jax.Array, c: tuple, qi=qi, doi=doi, li=li, di=di, i=i) -> tuple:
            dqi, dk, dv = c
            kj = jax.lax.dynamic_slice_in_dim(k, j * BLOCK, BLOCK)
            vj = jax.lax.dynamic_slice_in_dim(v, j * BLOCK, BLOCK)
            p = jnp.exp(_scores(qi, kj, i, j) - li[:, None])
            dp = doi @ vj.T
            ds = (
                p
                * (dp if wrong else dp - di[:, None])
                / jnp.sqrt(jnp.asarray(qi.shape[-1], qi.dtype))
            )
            dk_j = jax.lax.dynamic_slice_in_dim(dk, j * BLOCK, BLOCK) + ds.T @ qi
            dv_j = jax.lax.dynamic_slice_in_dim(dv, j * BLOCK, BLOCK) + p.T @ doi
            dk = jax.lax.dynamic_update_slice_in_dim(dk, dk_j, j * BLOCK, 0)
            dv = jax.lax.dynamic_update_slice_in_dim(dv, dv_j, j * BLOCK, 0)
            return dqi + ds @ kj, dk, dv

        dqi, dk, dv = jax.lax.fori_loop(0, i + 1, body, (jnp.zeros_like(qi), dk, dv))
        dqs.append(dqi)
    return jnp.concatenate(dqs, 0), dk, dv


attention = jax.custom_vjp(_primal)
attention.defvjp(_fwd, lambda res, do: _backward(res, do, False))

attention_wrong = jax.custom_vjp(_primal)
attention_wrong.defvjp(_fwd, lambda res, do: _backward(res, do, True))


def reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """Plain causal attention, for comparing values."""
    s = q @ k.T / jnp.sqrt(jnp.asarray(q.shape[-1], q.dtype))
    s = jnp.where(jnp.tril(jnp.ones((q.shape[0],) * 2, bool)), s, -jnp.inf)
    return jax.nn.softmax(s, -1) @ v


if __name__ == "__main__":
    from verify import parse_arg_specs, verify_function

    for fn in (attention, attention_wrong):
        print(verify_function(fn, *parse_arg_specs(ARGS), name="attention"))
