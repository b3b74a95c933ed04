"""verify_function: JAX's VJP / JVP of user functions and their custom rules, proved against the
derivative of the forward; buggy twins refuted with the element named; anything not followed is
"not verified", never a pass."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import verify
from verify import FunctionSpecError, parse_arg_specs, verify_function, verify_gradient_outputs
from verify.cli import main as cli_main
from verify.testing import VerificationError, assert_vjp_correct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "functions")


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"fn_example_{name}", os.path.join(
        EXAMPLES, f"{name}.py"))  # fmt: skip
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _failed(report):
    return [c for c in report.all_checks if c.result == "fail"]


# -- the shipped examples, at their shipped sizes ----------------------------------------------


@pytest.mark.parametrize("name", ["layer_norm", "softmax_xent", "logsumexp"])
def test_example_verifies_and_its_twin_is_refuted(name):
    mod = _example(name)
    good = getattr(mod, name)
    bad = getattr(mod, f"{name}_wrong")
    opts = {"index_ranges": getattr(mod, "INDEX_RANGES", None)}
    specs = parse_arg_specs(mod.ARGS)
    r = verify_function(good, *specs, **opts)
    assert r.verdict == "verified", str(r)
    assert r.nodes, "the custom rule is checked on its own"
    assert all(c.method == "exact" for c in r.all_checks)
    w = verify_function(bad, *specs, **opts)
    assert w.verdict == "mismatch", str(w)
    ce = w.counterexamples
    assert ce and ce[0].element and ce[0].inputs, "the element and the inputs are named"
    # the custom rule itself is refuted, not only f as a whole
    assert any(c.result == "fail" for n in w.nodes for c in n.checks)


def test_blockwise_attention_verifies_and_its_twin_is_refuted():
    """The online softmax across two query blocks, its running maximum rescaled across two key
    blocks, at a head dimension of 2 (the scores a sum over it, scaled by 1/sqrt(2)): JAX's
    VJP through the custom rule and the rule itself proved exactly; the twin (no
    rowsum(dO * O) term) refuted with the element named."""
    mod = _example("blockwise_attention")
    assert mod.D == 2
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(mod.N, mod.D)), jnp.float32) for _ in range(3))
    np.testing.assert_allclose(mod.attention(q, k, v), mod.reference(q, k, v), atol=1e-6)
    r = verify_function(mod.attention, *parse_arg_specs(mod.ARGS))  # the default budget
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks), str(r)
    assert len(r.nodes) == 1  # the custom rule, checked on its own
    bad = verify_function(mod.attention_wrong, *parse_arg_specs(mod.ARGS))
    assert bad.verdict == "mismatch", str(bad)
    ce = [c.counterexample for c in bad.all_checks if c.result == "fail"]
    assert ce and all(c is not None and c.element.startswith("grad ") for c in ce)


def _blockwise_attention_verifies(n: int, d: int, block: int, budget_s: float) -> None:
    """``n x d`` in blocks of ``block`` matches plain attention and VERIFIES, every check
    exact, within ``budget_s`` CPU seconds per check."""
    mod = _example("blockwise_attention")
    mod.BLOCK = block
    rng = np.random.default_rng(1)
    q, k, v = (jnp.asarray(rng.normal(size=(n, d)), jnp.float32) for _ in range(3))
    np.testing.assert_allclose(mod.attention(q, k, v), mod.reference(q, k, v), atol=1e-5)
    specs = parse_arg_specs(" ".join([f"f32[{n},{d}]"] * 3))
    r = verify_function(mod.attention, *specs, budget_s=budget_s)
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks), str(r)


def test_blockwise_attention_at_four_query_blocks_of_128_verifies():
    """512 x 64 in blocks of 128: four query blocks (20 held running maxima, proved not to matter
    all at once), each a block of 128 keys whose sums stay one symbolic summand (the rescaled
    running sums cancel once the summands over a query block are added,
    ``verify/_tsummands.py``), the scores a sum over a head dimension of 64. About 5 CPU s in
    all: the products of the saved log-sum-exp's pieces over the query blocks,
    ``prod (1 - [c_i])``, are ``n + 1`` monomials, not ``2^n`` (a product of brackets that are
    never all 1 is dropped)."""
    _blockwise_attention_verifies(512, 64, 128, budget_s=20)


@pytest.mark.heavy
def test_blockwise_attention_at_the_issues_size_verifies():
    """The issue's size, 1024 x 64 in blocks of 128: eight query blocks (72 held running
    maxima), about 32 CPU s alone, within the issue's 60 s as each check's budget (heavy: 53 s
    of wall time in a CI run beside the other worker; ``benchmarks/verify_functions.py`` times
    it in every run of the benchmark)."""
    _blockwise_attention_verifies(1024, 64, 128, budget_s=60)


def test_layer_norm_twin_is_below_float32_tolerances():
    """The eps typo changes the gradient by about 1e-6 relative: a float32 finite-difference
    check with the usual tolerances passes it; the verifier refutes it (above)."""
    mod = _example("layer_norm")
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(8, 16)), jnp.float32)
    g = jnp.ones(16, jnp.float32)
    b = jnp.zeros(16, jnp.float32)
    good = jax.grad(lambda x: (mod.layer_norm(x, g, b) ** 3).sum())(x)
    bad = jax.grad(lambda x: (mod.layer_norm_wrong(x, g, b) ** 3).sum())(x)
    rel = float(jnp.max(jnp.abs(good - bad)) / jnp.max(jnp.abs(good)))
    assert 0 < rel < 1e-4


# -- what the reference is -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_float_literals_of_jax_rules(dtype):
    """JAX's erfc rule holds 2/sqrt(pi) as a literal of the float type: proved with the
    reference's constant rounded alike, and the check says so."""
    r = verify_function(lambda x: jax.nn.gelu(x, approximate=False),
                        jax.ShapeDtypeStruct((4, 6), dtype))  # fmt: skip
    assert r.verdict == "verified", str(r)
    assert all("constants not representable at the dtype's precision" in c.how
               for c in r.graph_checks)  # fmt: skip
    assert any("literals of the float type" in n for n in r.notes)
    # a real error stays an error with the constants rounded
    w = verify_function(lambda x: jax.nn.gelu(x, approximate=False) * 1.0001,
                        jax.ShapeDtypeStruct((4, 6), dtype))  # fmt: skip
    assert w.verdict == "verified"  # the factor is in the forward: still its derivative
    bad = jax.custom_jvp(lambda x: jax.nn.gelu(x, approximate=False))
    bad.defjvp(lambda p, t: (bad(p[0]), t[0] * jax.nn.sigmoid(1.702 * p[0])))
    assert verify_function(bad, jax.ShapeDtypeStruct((4, 6), dtype)).verdict == "mismatch"


def test_kinks_take_a_one_sided_derivative_named_in_the_check():
    """At a kink JAX takes a one-sided derivative (|x|' = +1 at 0): accepted by default, the
    choice named in the check; with kinks="convention" the reference holds ops.md's (0 at 0)
    and the mismatch names the kink point."""
    r = verify_function(jnp.abs, jax.ShapeDtypeStruct((3, 4), jnp.float32))
    assert r.verdict == "verified", str(r)
    for c in r.graph_checks:
        assert c.method == "exact" and "abs(x(_, _)) at 0: +1 (from the right)" in c.how, c.how
    r = verify_function(jnp.abs, jax.ShapeDtypeStruct((3, 4), jnp.float32), kinks="convention")
    assert r.verdict == "mismatch"
    ce = r.counterexamples[0]
    assert ce.inputs["x[0,0]"] == "0" and ce.expected == "0"


def _relu_with_jvp(at_zero: float, above: float) -> Any:
    """``max(x, 0)`` with a custom JVP: derivative 1 where ``x > above``, ``at_zero`` at 0."""

    @jax.custom_jvp
    def relu(x):
        return jnp.maximum(x, 0.0)

    @relu.defjvp
    def _(p, t):
        (x,), (dx,) = p, t
        return relu(x), dx * jnp.where(x > above, 1.0, jnp.where(x == 0, at_zero, 0.0))

    return relu


def test_relu_networks_verify_with_jax_relu_and_a_wrong_kink_is_refuted():
    """jax.nn.relu's derivative at 0 is 0, one of the one-sided derivatives of max(x, 0): a
    layer written with it verifies; a rule that gives 5 at 0 is refuted (no one-sided choice
    gives 5), the counterexample at the kink, and so is one wrong off the kink."""
    f32 = jax.ShapeDtypeStruct
    r = verify_function(jax.nn.relu, f32((8,), jnp.float32))
    assert r.verdict == "verified", str(r)
    assert all("max(0, x(_)) at a tie: the derivative of 0" in c.how for c in r.graph_checks)
    r = verify_function(lambda x, w: jnp.sum(jax.nn.relu(w @ x)), f32((4,), jnp.float32),
                        f32((3, 4), jnp.float32), rules=False, modes=("vjp",))  # fmt: skip
    assert r.verdict == "verified", str(r)  # (its JVP too, in 6 s: docs/functions.md)
    # three layers of jax.nn.relu: each layer's kink the derivative of 0, both modes
    relu = jax.nn.relu
    r = verify_function(lambda x, w1, w2: jnp.sum(relu(w2 @ relu(w1 @ relu(x)))),
                        f32((8,), jnp.float32), f32((8, 8), jnp.float32), f32((4, 8), jnp.float32),
                        rules=False, budget_s=10)  # fmt: skip
    assert r.verdict == "verified", str(r)
    for c in r.graph_checks:
        assert c.method == "exact" and c.how.count("at a tie: the derivative of 0") == 3, c.how

    with_jvp = _relu_with_jvp
    r = verify_function(with_jvp(5.0, 0.0), f32((8,), jnp.float32), rules=False)
    assert r.verdict == "mismatch", str(r)
    (ce,) = {c.counterexample.inputs["x[0]"] for c in r.graph_checks}
    assert ce == "0"
    assert all("each of 2 one-sided choices" in c.how for c in r.graph_checks)
    r = verify_function(with_jvp(0.0, 1.0), f32((8,), jnp.float32), rules=False)
    assert r.verdict == "mismatch", str(r)
    for c in r.graph_checks:  # the counterexample of a one-sided choice: off the kink
        assert c.counterexample.inputs["x[0]"] != "0", c.counterexample.describe()
        assert "the counterexample with max(0, x(_)) at a tie: the derivative of 0" in c.how
    # mean, then either side: 1/2 at 0 verifies under the conventions, no choice needed
    r = verify_function(with_jvp(0.5, 0.0), f32((8,), jnp.float32), rules=False)
    assert r.verdict == "verified" and not any("at the kinks" in c.how for c in r.graph_checks)


def test_a_wrong_kink_between_layers_is_refuted_at_a_zero_input():
    """relu'(0) = 5 inside a layer: no one-sided choice gives 5. The tie is of the layer's sum
    ``w @ x`` with 0, which random points never meet; the probe's zero point (every element of
    one input at 0) does, and the counterexample names it."""
    relu = _relu_with_jvp(5.0, 0.0)
    f32 = jax.ShapeDtypeStruct
    r = verify_function(lambda x, w: jnp.sum(relu(w @ relu(x))), f32((4,), jnp.float32),
                        f32((3, 4), jnp.float32), rules=False, budget_s=10)  # fmt: skip
    assert r.verdict == "mismatch", str(r)
    for c in r.graph_checks:
        xs = {k: v for k, v in c.counterexample.inputs.items() if k.startswith("x[")}
        assert xs and set(xs.values()) == {"0"}, c.counterexample.describe()


def test_kinks_argument_is_checked():
    with pytest.raises(FunctionSpecError, match="kinks must be"):
        verify_function(jnp.abs, jnp.zeros(3), kinks="left")


def _relu(v):
    return jnp.maximum(v, 0.0)


@pytest.mark.parametrize("shapes", [((4,), (3, 4)), ((16,), (8, 16))])
def test_two_layer_relu_network_verifies_exactly(shapes):
    """``sum(relu(w @ relu(x)))``: the outer maximum compares the sum ``w @ relu(x)`` with 0, a
    sum over the inner maximum. JAX writes the inner ReLU as ``max(0, x)`` and its mask as
    ``[0 <= x] / ([x <= 0] + [0 < x]/2)``; the reference writes both as Piecewise with the tie
    in halves. Both are one term in the normal form (the same atom on both sides), so the
    network verifies exactly, where the case split over the inner Piecewise inside the sum ran
    out of the budget (30 s per check)."""
    f32 = [jax.ShapeDtypeStruct(s, jnp.float32) for s in shapes]
    r = verify_function(lambda x, w: jnp.sum(_relu(w @ _relu(x))), *f32, rules=False,
                        budget_s=30)  # fmt: skip
    assert r.verdict == "verified", str(r)
    assert {c.name for c in r.graph_checks} == {"vjp = derivative", "jvp = derivative"}
    assert all(c.method == "exact" for c in r.all_checks), str(r)


def test_two_layer_leaky_relu_network_verifies_exactly():
    """``max(v, v/100)`` between two layers: JAX adds the derivatives of the two arguments,
    ``[0 < v] + [v < 0]/100`` with the tie in halves on each, the reference writes one step
    with the values added; one term in the normal form (they were different atoms inside the
    next layer's sum, and the JVP ran out of its budget)."""
    f32 = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((4,), (3, 4))]

    def leaky(v):
        return jnp.maximum(v, 0.01 * v)

    r = verify_function(lambda x, w: jnp.sum(leaky(w @ leaky(x))), *f32, rules=False,
                        budget_s=30)  # fmt: skip
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks), str(r)


def test_two_layer_where_relu_network_verifies_exactly():
    """``jnp.where(v > 0, v, 0)`` between two layers: JAX's VJP selects the cotangent,
    ``where(v > 0, ct, 0)``, where the reference multiplies ``ct`` by the mask; a finite value
    selected by a condition is the value times a step in the normal form, so both sides' sums
    are one atom (the check ran out of its 30 s budget in both modes)."""
    f32 = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((4,), (3, 4))]

    def relu(v):
        return jnp.where(v > 0, v, 0.0)

    r = verify_function(lambda x, w: jnp.sum(relu(w @ relu(x))), *f32, rules=False,
                        budget_s=30)  # fmt: skip
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks), str(r)


def test_three_layer_relu_network_verifies_exactly_and_a_flipped_mask_is_refuted():
    """Three layers (16 -> 8 -> 4): every mask inside the next layer's sums, one term on both
    sides. A backward whose middle ReLU's mask is flipped is refuted with the element named."""
    f32 = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((16,), (8, 16), (4, 8))]
    r = verify_function(lambda x, w, v: jnp.sum(_relu(v @ _relu(w @ _relu(x)))), *f32,
                        rules=False, budget_s=30)  # fmt: skip
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks), str(r)

    @jax.custom_vjp
    def flipped(v):
        return jnp.maximum(v, 0.0)

    flipped.defvjp(lambda v: (flipped(v), v), lambda v, g: (g * (v < 0).astype(v.dtype),))
    w = verify_function(lambda x, w, v: jnp.sum(_relu(v @ flipped(w @ _relu(x)))), *f32,
                        rules=False, budget_s=30)  # fmt: skip
    assert w.verdict == "mismatch", str(w)
    assert w.counterexamples and w.counterexamples[0].inputs


def test_plain_function_both_modes():
    r = verify_function(lambda x, w: jnp.tanh(x @ w), jnp.zeros((4, 8)), jnp.zeros((8, 3)))
    assert r.verdict == "verified"
    assert {c.name for c in r.graph_checks} == {"vjp = derivative", "jvp = derivative"}


def test_stop_gradient_that_changes_the_derivative_is_refuted():
    """A straight-through estimator: JAX's gradient is not the derivative of f's value."""

    def ste(x):
        return x + jax.lax.stop_gradient(jnp.round(x * 0 + x * x) - x)  # value x*x, grad 1

    r = verify_function(lambda x: x + jax.lax.stop_gradient(x * x - x), jnp.zeros(4))
    assert r.verdict == "mismatch"
    assert any("stop_gradient" in c.name and c.result == "fail" for c in r.graph_checks)
    # held constant (JAX's documented meaning), the same function verifies
    c = verify_function(lambda x: x + jax.lax.stop_gradient(x * x - x), jnp.zeros(4),
                        stop_gradient="constant")  # fmt: skip
    assert c.verdict == "verified"
    del ste


def test_wrong_custom_jvp_refuted_in_both_modes():
    @jax.custom_jvp
    def f(x):
        return jnp.sin(x) * x

    @f.defjvp
    def f_jvp(p, t):
        (x,), (dx,) = p, t
        return f(x), (jnp.cos(x) * x) * dx  # sin(x) term missing

    r = verify_function(f, jnp.zeros((3, 5)))
    assert r.verdict == "mismatch"
    names = {c.name for c in _failed(r)}
    assert {"vjp = derivative", "jvp = derivative"} <= names


def test_index_argument_quantified_over_its_range():
    def xent(logits, labels):
        lp = jax.nn.log_softmax(logits, -1)
        return -jnp.take_along_axis(lp, labels[:, None], 1).mean()

    r = verify_function(xent, jnp.zeros((4, 8)), np.zeros(4, np.int32), index_ranges={"labels": 8})
    assert r.verdict == "verified", str(r)
    assert "every value 0..7" in r.graph_checks[-1].coverage
    # without a range, an index may be out of bounds, where take_along_axis reads NaN: refused
    u = verify_function(xent, jnp.zeros((4, 8)), np.zeros(4, np.int32))
    assert u.verdict == "undecided"
    assert all(c.method == "not verified" for c in u.graph_checks if "vjp" in c.name)


# -- control flow ----------------------------------------------------------------------------


def test_fori_loop_with_dynamic_slices_and_cond():
    def f(x):
        def body(i, c):
            return c + jnp.sin(jax.lax.dynamic_slice_in_dim(x, i * 2, 2))

        acc = jax.lax.fori_loop(0, 4, body, jnp.zeros(2))
        return jax.lax.cond(x.sum() > 0, lambda a: a * 2, lambda a: a * a, acc)

    r = verify_function(f, jnp.zeros(8))
    assert r.verdict == "verified", str(r)


def test_wrong_loop_body_refuted():
    @jax.custom_vjp
    def square_sum(x):
        return jax.lax.fori_loop(0, 3, lambda i, c: c + x[i] ** 2, 0.0)

    square_sum.defvjp(lambda x: (square_sum(x), x),
                      lambda x, g: (g * 2 * x * (jnp.arange(3) < 2),))  # fmt: skip
    r = verify_function(square_sum, jnp.zeros(3))
    assert r.verdict == "mismatch"
    assert "grad" in r.counterexamples[0].element


def test_wrong_branch_rule_refuted():
    @jax.custom_vjp
    def f(x):
        return jax.lax.cond(x.sum() > 0, lambda a: a * 2, lambda a: a * a, x)

    def bwd(x, g):  # the second branch's derivative forgets its factor 2
        return (jax.lax.cond(x.sum() > 0, lambda a: 2 * g, lambda a: a * g, x),)

    f.defvjp(lambda x: (f(x), x), bwd)
    r = verify_function(f, jnp.zeros(3))
    assert r.verdict == "mismatch", str(r)


def test_data_dependent_while_is_not_verified_with_its_line():
    def f(x):
        return jax.lax.while_loop(lambda c: c.sum() < 10.0, lambda c: c * 2.0, x)

    r = verify_function(f, jnp.ones(3))
    assert r.verdict == "undecided"
    why = " ".join(c.how for c in r.graph_checks)
    assert "while loop" in why and "test_functions.py" in why


def test_unsupported_primitive_is_never_a_pass():
    r = verify_function(lambda x: jax.lax.erf_inv(x) * x, jnp.zeros(5))
    assert r.verdict == "undecided"
    assert all(c.method == "not verified" for c in r.graph_checks)
    assert "erf_inv" in " ".join(c.how for c in r.graph_checks)


# -- gradient outputs ------------------------------------------------------------------------


def test_gradient_outputs():
    def step(w, b, x):
        h = jnp.tanh(x @ w + b)
        g = 2 * h * (1 - h**2)
        return (h**2).sum(), x.T @ g, g.sum(0)

    args = (jnp.zeros((3, 2)), jnp.zeros(2), jnp.zeros((4, 3)))
    assert verify_gradient_outputs(step, *args, grads={1: "w", 2: "b"}).verdict == "verified"

    def bad(w, b, x):
        loss, gw, gb = step(w, b, x)
        return loss, gw, gb * 1.0001

    r = verify_gradient_outputs(bad, *args, grads={1: "w", 2: "b"})
    assert r.verdict == "mismatch"
    assert "output 2 = grad b" in r.counterexamples[0].element
    with pytest.raises(FunctionSpecError, match="grads names inputs"):
        verify_gradient_outputs(step, *args, grads={1: "nope"})


# -- API edges, report, CLI --------------------------------------------------------------------


def test_specs_and_errors():
    a, b = parse_arg_specs("f32[1024,64] i32[]")
    assert a.shape == (1024, 64) and b.shape == () and b.dtype == np.int32
    for bad in ("f32[2,", "q7[3]", ""):
        with pytest.raises(FunctionSpecError):
            parse_arg_specs(bad)
    with pytest.raises(FunctionSpecError, match="nothing to differentiate"):
        verify_function(lambda i: i * 2, np.zeros(3, np.int32))
    with pytest.raises(FunctionSpecError, match="index_ranges"):
        verify_function(lambda x: x * 2, jnp.zeros(3), index_ranges={"x": 3})


def test_pytree_arguments_are_named_by_path():
    params = {"w": jnp.zeros((3, 2)), "b": jnp.zeros(2)}
    r = verify_function(lambda p, x: jnp.tanh(x @ p["w"] + p["b"]), params, jnp.zeros((4, 3)))
    assert r.verdict == "verified"
    bad = verify_function(lambda p, x: jnp.tanh(x @ p["w"] + p["b"]) * (1 + 0 * p["b"][0])
                          + 1e-3 * jax.lax.stop_gradient(p["b"][0]) * p["w"][0, 0],
                          params, jnp.zeros((4, 3)), stop_gradient="constant")  # fmt: skip
    assert bad.verdict == "verified"  # held constant: still the derivative


def _scaled_tanh(wrong: bool):
    f = jax.custom_vjp(lambda x, s: s * jnp.tanh(x))

    def fwd(x, s):
        t = jnp.tanh(x)
        return s * t, (t, s)

    def bwd(res, g):
        t, s = res
        return g * s * (1 - (t if wrong else t * t)), (g * t).sum()

    f.defvjp(fwd, bwd)
    return f


def test_report_json_and_html_and_helper():
    args = (jnp.zeros((4, 3)), jnp.zeros(()))
    w = verify_function(_scaled_tanh(True), *args)
    doc = json.loads(w.dumps())
    assert doc["subject"] == "function" and doc["verdict"] == "mismatch"
    assert doc["counterexamples"][0]["check"].startswith("custom_vjp bwd at ")
    page = verify.render_html([(w, None)])
    assert "MISMATCH" in page and "grad" in page and "bwd at " in page
    with pytest.raises(VerificationError, match="mismatch"):
        assert_vjp_correct(_scaled_tanh(True), *args)
    assert assert_vjp_correct(_scaled_tanh(False), *args).verdict == "verified"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "verify", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)  # fmt: skip


def test_cli_function(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    mod = "examples/functions/softmax_xent.py"
    ok = _cli("--function", f"{mod}:softmax_xent", "--args", "f32[4,16] i32[4]",
              "--index-range", "labels=16", "--json", str(tmp_path / "r.json"))  # fmt: skip
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "verified"
    bad = _cli("--function", f"{mod}:softmax_xent_wrong", "--args", "f32[4,16] i32[4]",
               "--index-range", "labels=16", "-q")  # fmt: skip
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "counterexample" in bad.stdout
    for args, msg in [
        (["--function", f"{mod}:nope", "--args", "f32[2]"], "no attribute"),
        (["--function", f"{mod}:softmax_xent"], "needs --args"),
        (["--function", f"{mod}:softmax_xent", "--args", "f32[2"], "--args"),
        (["--args", "f32[2]"], "without --function"),
        (
            ["--function", f"{mod}:softmax_xent", "--args", "f32[2]", "--index-range", "x"],
            "NAME=HI",
        ),
    ]:
        code = cli_main(list(args))
        err = capsys.readouterr().err
        assert code == 2, (args, err)
        assert msg in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    # --kinks: JAX's relu'(0) = 0 is a one-sided derivative (default), not ops.md's 1/2
    assert cli_main(["--function", "jax.nn:relu", "--args", "f32[4]", "-q"]) == 0
    capsys.readouterr()
    assert cli_main(["--function", "jax.nn:relu", "--args", "f32[4]", "-q", "--kinks",
                     "convention"]) == 1  # fmt: skip
    capsys.readouterr()
    assert cli_main(["--function", "jax.nn:relu", "--args", "f32[4]", "--kinks", "left"]) == 2
    assert "--kinks" in capsys.readouterr().err
