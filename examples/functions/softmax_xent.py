"""A fused softmax cross-entropy with label smoothing (``jax.custom_vjp``), and a buggy twin.

    loss = mean_b( logsumexp(z_b) - sum_v q_bv z_bv ),   q = (1 - s) onehot(label) + s / V

computed stably (the row maximum shifted out, held by ``stop_gradient``); the backward is the
classic ``(softmax(z) - q) / B``, from the probabilities the forward saved. The labels are an
integer argument: the verifier quantifies over every label value in ``0..V-1``
(``index_ranges``), not over a sample.

``softmax_xent_wrong`` forgets the smoothing in its backward (``q = onehot(label)``).

    torchlean-verify --function examples/functions/softmax_xent.py:softmax_xent \\
        --args "$ARGS" --index-range labels=512
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

#: 32 rows of 512 classes, and their labels.
ARGS = "f32[32,512] i32[32]"
VOCAB = 512
SMOOTHING = 0.1
INDEX_RANGES = {"labels": VOCAB}


def _targets(labels: jax.Array, v: int, smoothing: float) -> jax.Array:
    return (1 - smoothing) * jax.nn.one_hot(labels, v) + smoothing / v


def _loss_and_probs(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    m = jax.lax.stop_gradient(logits.max(-1, keepdims=True))
    e = jnp.exp(logits - m)
    s = e.sum(-1, keepdims=True)
    lse = (m + jnp.log(s))[:, 0]
    q = _targets(labels, logits.shape[-1], SMOOTHING)
    return (lse - (q * logits).sum(-1)).mean(), e / s


def _primal(logits: jax.Array, labels: jax.Array) -> jax.Array:
    return _loss_and_probs(logits, labels)[0]


def _fwd(logits: jax.Array, labels: jax.Array) -> tuple[jax.Array, tuple]:
    loss, p = _loss_and_probs(logits, labels)
    return loss, (p, labels)


def _bwd(res: tuple, g: jax.Array) -> tuple[jax.Array, None]:
    p, labels = res
    q = _targets(labels, p.shape[-1], SMOOTHING)
    return g * (p - q) / p.shape[0], None


softmax_xent = jax.custom_vjp(_primal)
softmax_xent.defvjp(_fwd, _bwd)


def _bwd_wrong(res: tuple, g: jax.Array) -> tuple[jax.Array, None]:
    p, labels = res
    q = jax.nn.one_hot(labels, p.shape[-1])  # the bug: the smoothing forgotten
    return g * (p - q) / p.shape[0], None


softmax_xent_wrong = jax.custom_vjp(_primal)
softmax_xent_wrong.defvjp(_fwd, _bwd_wrong)


if __name__ == "__main__":
    from verify import parse_arg_specs, verify_function

    for fn in (softmax_xent, softmax_xent_wrong):
        print(verify_function(fn, *parse_arg_specs(ARGS), name=fn.__name__,
                              index_ranges=INDEX_RANGES))  # fmt: skip
