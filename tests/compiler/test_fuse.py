"""Batch sums of matrix products contracted into the product (``compiler._fuse``): same values
as summing after ``vmap``, and no batched outer product left in the jaxpr."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import compiler
from compiler._fuse import vmap_summed

from .models import classifier_build


def _naive(fn: Any, in_axes: tuple, summed: tuple) -> Any:
    mapped = jax.vmap(fn, in_axes=in_axes)

    def run(*args: Any) -> tuple:
        return tuple(jnp.sum(o, 0) if s else o for o, s in zip(mapped(*args), summed, strict=True))

    return run


def _eqns(fn: Any, *args: Any) -> list:
    out = []

    def walk(jaxpr: Any) -> None:
        for e in jaxpr.eqns:
            out.append(e)
            inner = e.params.get("jaxpr")
            if inner is not None:
                walk(inner.jaxpr)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return out


def _batched_dots(eqns: list) -> list:
    return [
        e for e in eqns if e.primitive.name == "dot_general" and e.params["dimension_numbers"][1][0]
    ]


def _rule(W: Any, x: Any, ct: Any, A: Any) -> tuple:
    """Per-sample cotangents of a linear layer and of a matmul's right factor."""
    shared = jnp.einsum("i,j->ij", x, x)
    return (
        jnp.einsum("i,j->ij", ct, x),  # outer product: summed over the batch
        jnp.transpose(W) @ ct,  # per sample
        ct,  # summed, no dot
        jnp.transpose(A) @ jnp.outer(ct, ct),  # matmul through a transpose: summed
        jnp.einsum("i,j->ij", ct, ct) * 2.0,  # a product used by another op: not contracted
        shared,  # returned per sample ...
        shared,  # ... and summed: two uses, not contracted
    )


def test_contracted_sums_equal_vmap_then_sum() -> None:
    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 7))
    x = rng.normal(size=(9, 7))
    ct = rng.normal(size=(9, 5))
    A = rng.normal(size=(9, 5, 3))
    in_axes = (None, 0, 0, 0)
    summed = (True, False, True, True, True, False, True)
    got = jax.jit(vmap_summed(_rule, in_axes, summed))(W, x, ct, A)
    want = jax.jit(_naive(_rule, in_axes, summed))(W, x, ct, A)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    fused = _eqns(vmap_summed(_rule, in_axes, summed), W, x, ct, A)
    naive = _eqns(_naive(_rule, in_axes, summed), W, x, ct, A)
    # the naive form keeps batched dot_generals (outer products over the batch) and sums them
    assert len(_batched_dots(naive)) == 4
    assert len(_batched_dots(fused)) == 2  # the product scaled before the sum, the shared one
    contracting = [
        e.params["dimension_numbers"][0] for e in fused if e.primitive.name == "dot_general"
    ]
    assert ((0,), (0,)) in contracting  # the outer products' batch became a contraction


def test_nothing_summed_is_plain_vmap() -> None:
    fn = vmap_summed(lambda a, b: (a * b,), (0, None), (False,))
    a, b = np.ones((3, 2)), np.full(2, 2.0)
    np.testing.assert_array_equal(fn(a, b)[0], np.full((3, 2), 2.0))


def test_batched_tape_has_no_batched_outer_products() -> None:
    """In the batch-level tape of a classifier, every weight cotangent is one matrix product
    contracting the batch (as in a hand-written ``jax.grad``)."""
    cg = compiler.compile(classifier_build("f32")).batched(over=("x", "label"), grads="mean")
    t = cg.traceable("vjp", batch_size=16)
    vjps = [
        e
        for e in t.jaxpr().jaxpr.eqns
        if e.primitive.name in ("jit", "pjit") and e.params["name"] == "tl_vjp_linear"
    ]
    assert len(vjps) == 2
    for e in vjps:
        inner = _eqns(
            lambda *a, e=e: jax.core.eval_jaxpr(e.params["jaxpr"].jaxpr, (), *a),
            *[np.zeros(v.aval.shape, v.aval.dtype) for v in e.invars],
        )
        assert not _batched_dots(inner)
        assert any(
            e2.primitive.name == "dot_general" and 0 in e2.params["dimension_numbers"][0][0]
            for e2 in inner
        )
