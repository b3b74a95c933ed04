"""A numerically stable logsumexp along the last axis, with its JVP written by hand
(``jax.custom_jvp``), and a buggy twin.

    lse(x) = m + log sum_j exp(x_j - m),   m = max_j x_j   (held by stop_gradient)

    d lse = sum_j p_j dx_j,   p = softmax(x)

JAX transposes the JVP for reverse mode, so the verifier checks both ``jax.jvp`` and ``jax.vjp``
of it. ``logsumexp_wrong`` takes the softmax along the wrong axis (the batch axis), a slip
that shapes do not catch when the array is square.

    torchlean-verify --function examples/functions/logsumexp.py:logsumexp --args "$ARGS"
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: 512 rows of 512 scores (square, so that the twin's wrong axis still has the right shape).
ARGS = "f32[512,512]"


def _lse(x: jax.Array) -> jax.Array:
    m = jax.lax.stop_gradient(x.max(-1))
    return m + jnp.log(jnp.exp(x - m[:, None]).sum(-1))


logsumexp = jax.custom_jvp(_lse)


@logsumexp.defjvp
def _lse_jvp(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    (x,), (dx,) = primals, tangents
    return _lse(x), (jax.nn.softmax(x, -1) * dx).sum(-1)


logsumexp_wrong = jax.custom_jvp(_lse)


@logsumexp_wrong.defjvp
def _lse_jvp_wrong(primals: tuple, tangents: tuple) -> tuple[jax.Array, jax.Array]:
    (x,), (dx,) = primals, tangents
    return _lse(x), (jax.nn.softmax(x, 0) * dx).sum(-1)  # the bug: axis 0, not -1


if __name__ == "__main__":
    from verify import parse_arg_specs, verify_function

    for fn in (logsumexp, logsumexp_wrong):
        print(verify_function(fn, *parse_arg_specs(ARGS), name=fn.__name__))
