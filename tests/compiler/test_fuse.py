"""Batch sums of matrix products and convolutions contracted into the product
(``compiler._fuse``): same values as summing after ``vmap``, and no batched outer product or
grouped convolution left in the jaxpr."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compiler
import torchlean_ir as tl
from compiler._fuse import vmap_summed
from compiler._rules import _raw_rule

from .models import assert_close, classifier_build


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


def _grouped_convs(eqns: list) -> list:
    return [
        e
        for e in eqns
        if e.primitive.name == "conv_general_dilated" and e.params["feature_group_count"] > 1
    ]


#: (op, W, x, attributes): convolutions whose weight cotangent vmap turns into a grouped
#: convolution (a transpose convolution's through a transpose and a reversal)
CONVS = [
    ("conv2d", (4, 3, 3, 3), (3, 9, 9), {"stride": 1, "padding": 1}),
    ("conv2d", (6, 1, 5, 5), (1, 12, 12), {"stride": 1, "padding": 2}),
    ("conv2d", (4, 3, 2, 3), (3, 9, 8), {"stride": 2, "padding": 0}),
    ("conv2d", (6, 2, 3, 3), (4, 7, 7), {"stride": 1, "padding": 1, "groups": 2}),
    ("conv2d", (4, 1, 3, 3), (4, 8, 8), {"stride": 2, "padding": 1, "groups": 4}),
    ("conv2d", (4, 3, 4, 4), (3, 8, 8), {"stride": 4, "padding": 0}),
    ("conv", (4, 3, 3), (3, 10), {"stride": (2,), "padding": (1,)}),
    ("conv", (2, 3, 2, 2, 2), (3, 5, 4, 5), {"stride": (1, 2, 1), "padding": (0, 1, 0)}),
    ("conv_transpose2d", (3, 4, 3, 3), (3, 5, 5), {"stride": 2, "padding": 1}),
    ("conv_transpose", (3, 4, 3), (3, 6), {"stride": (2,), "padding": (0,)}),
]


def _conv_vjp(name: str, w: tuple, x: tuple, attrs: dict) -> tuple[Any, tuple, tuple]:
    b = tl.GraphBuilder("f64")
    W, x_ = b.param("W", w), b.input("x", x)
    bias = b.param("b", (w[1] if name.startswith("conv_transpose") else w[0],))
    out = getattr(b, name)(W, bias, x_, **attrs).type.shape
    shapes = (w, bias.type.shape, x)
    rule = _raw_rule("vjp", tl.get_op(name), attrs, shapes, out, "float64", (True,) * 3, None)
    return rule, shapes, out


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}-{c[1]}-{c[3]}")
@pytest.mark.parametrize("batched", ["x", "W"])
def test_conv_sums_equal_vmap_then_sum(case: tuple, batched: str) -> None:
    """Summed after ``vmap`` or fused, the same cotangents. With ``x`` batched, the batch sum of
    the weight cotangent is one ungrouped convolution. With per-sample weights (``W``
    batched), the input cotangent's grouped convolution is summed after a reshape and a
    ``reduce_sum`` of the sample's own unit batch axis, a form the fusion does not match: it
    stays grouped (a known gap, pinned here; per-sample kernels and a shared input are rare)."""
    rule, (w, bshape, x), out = _conv_vjp(*case)
    rng = np.random.default_rng(0)
    n = 6
    on_x = batched == "x"
    args = [
        rng.normal(size=w if on_x else (n, *w)),
        rng.normal(size=bshape),
        rng.normal(size=(n, *x) if on_x else x),
        rng.normal(size=(n, *out)),
        rng.normal(size=(n, *out)),
    ]
    in_axes = (None, None, 0, 0, 0) if on_x else (0, None, None, 0, 0)
    summed = (True, True, False) if on_x else (False, True, True)
    got = jax.jit(vmap_summed(rule, in_axes, summed))(*args)
    want = jax.jit(_naive(rule, in_axes, summed))(*args)
    for k, (g, v) in enumerate(zip(got, want, strict=True)):
        assert_close(g, v, 1e-12, f"cotangent {k}")
    naive = _eqns(_naive(rule, in_axes, summed), *args)
    fused = _eqns(vmap_summed(rule, in_axes, summed), *args)
    groups = case[3].get("groups", 1)
    if groups > 1:
        # a grouped convolution (groups of its own): JAX's weight cotangent is a convolution
        # with batch groups, vmapped into one batch group per (sample, group) and then summed,
        # a form the fusion does not match (a known gap, pinned: the values above are right)
        batch_groups = [e.params["batch_group_count"] for e in fused if e.primitive.name
                        == "conv_general_dilated"]  # fmt: skip
        assert (n * groups in batch_groups) == on_x
        return
    assert len(_grouped_convs(naive)) == 1  # one group per sample
    assert len(_grouped_convs(fused)) == (0 if on_x else 1)


def test_batched_conv_tape_has_no_grouped_convolutions() -> None:
    """In the batch-level tape of a small LeNet-like classifier, every convolution weight
    cotangent is one convolution contracting the batch, and the gradients equal the
    per-sample loop."""
    b = tl.GraphBuilder("f64")
    x = b.input("x", (1, 10, 10))
    label = b.index("label")
    h = b.conv2d(b.param("c1.W", (3, 1, 3, 3)), b.param("c1.b", (3,)), x, padding=1).relu()
    h = b.max_pool2d(h, kernel=(2, 2), stride=2)
    h = b.conv2d(b.param("c2.W", (4, 3, 3, 3)), b.param("c2.b", (4,)), h).relu()
    h = b.linear(b.param("f.W", (5, 36)), b.param("f.b", (5,)), b.flatten(h))
    g = b.build(-b.gather_scalar_nat(b.log_softmax(h), label))
    rng = np.random.default_rng(1)
    params = {leaf.name: rng.normal(size=leaf.type.shape) / 3 for leaf in g.leaves}
    xs, labels = rng.normal(size=(7, 1, 10, 10)), rng.integers(0, 5, size=7)
    cg = compiler.compile(g)
    bg = cg.batched(over=("x", "label"), grads="sum")
    _, got = bg.value_and_grad({**params, "x": xs}, {"label": labels})
    loop = [cg.value_and_grad({**params, "x": xs[k]}, {"label": labels[k]})[1] for k in range(7)]
    for n in got:
        assert_close(got[n], sum(lg[n] for lg in loop), 1e-10, f"grad {n}")
    t = bg.traceable("vjp", batch_size=7)
    rules = [
        e
        for e in t.jaxpr().jaxpr.eqns
        if e.primitive.name in ("jit", "pjit") and e.params["name"] == "tl_vjp_conv2d"
    ]
    assert len(rules) == 2
    for e in rules:
        inner = _eqns(
            lambda *a, e=e: jax.core.eval_jaxpr(e.params["jaxpr"].jaxpr, (), *a),
            *[np.zeros(v.aval.shape, v.aval.dtype) for v in e.invars],
        )
        convs = [e2 for e2 in inner if e2.primitive.name == "conv_general_dilated"]
        assert convs and not _grouped_convs(inner)
