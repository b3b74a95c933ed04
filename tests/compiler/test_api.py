"""The compiled API: argument checking, compile-once caching, output conventions, the tape and
the traced jaxprs (the contract the verifier relies on), StableHLO, dtypes and devices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compiler
import compiler._compiled as _compiled
import compiler._slices
import torchlean_ir as tl
from compiler import ArgumentError, CompileError, DeviceError

from .models import MODELS, assert_close, attention_build, classifier_build, mlp_build


def _mlp_leaves(dtype: type = np.float32) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    x, _ = MODELS[0].sample(rng)
    return {k: v.astype(dtype) for k, v in x.items()}


def _classifier() -> tuple[compiler.CompiledGraph, dict, dict]:
    rng = np.random.default_rng(0)
    x, idx = MODELS[1].sample(rng)
    return compiler.compile(classifier_build("f64")), x, idx


# -- argument checking ---------------------------------------------------------------------


def _refused(fn, *args, match: str) -> str:
    with pytest.raises(ArgumentError, match=match) as info:
        fn(*args)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


def test_bad_leaves_are_refused_before_tracing() -> None:
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves()
    before = cg.trace_counts
    missing = {k: v for k, v in x.items() if k != "y"}
    _refused(cg.forward, missing, match=r"^leaves: missing 'y'$")
    _refused(cg.forward, {**x, "z": x["y"]}, match=r"leaves: unknown name 'z'")
    _refused(cg.forward, {**missing, "z": x["y"]}, match=r"leaves: unknown name 'z'")
    _refused(
        cg.forward, {**x, "layer1.weight": x["layer1.weight"].T}, match=r"leaves\['layer1.weight'\]"
    )
    msg = _refused(cg.forward, {**x, "x": np.zeros(5, np.float32)}, match=r"leaves\['x'\]")
    assert "expected shape [4], got [5]" in msg
    _refused(
        cg.forward,
        {**x, "x": jnp.zeros(4, jnp.float64)},
        match=r"leaves\['x'\]: expected dtype f32, got a jax array of f64",
    )
    _refused(
        cg.forward, {**x, "x": np.zeros(4, np.int64)}, match=r"leaves\['x'\]: expected a float"
    )
    _refused(cg.forward, {**x, "x": "abc"}, match=r"leaves\['x'\]: expected a float array")
    _refused(cg.forward, list(x.values())[:3], match=r"leaves: expected 6 values in context order")
    _refused(cg.forward, 3.0, match=r"leaves: expected a mapping")
    # found by tests/fuzz: an int beyond float range was an OverflowError; a string, a list of
    # strings or of bools was converted silently
    for junk in (10**400, [10**400] * 4, "1.5", ["1", "2", "3", "4"], [True] * 4, [[1.0], [2, 3]]):
        _refused(cg.forward, {**x, "x": junk}, match=r"^leaves\['x'\]: expected a float array")
    assert cg.trace_counts == before


def test_bad_export_and_batching_options() -> None:
    """Found by tests/fuzz: platforms="cpu" exported for the platforms c, p and u (an artifact
    that runs nowhere); platforms=3, over=None were raw TypeErrors."""
    cg = compiler.compile(mlp_build())
    for platforms in ("cpu", 3, (), ("nosuch",)):
        with pytest.raises(CompileError, match=r"^platforms must be a non-empty sequence of cpu"):
            cg.export("forward", platforms=platforms)
    for batch_size in (-1, 2.5, "x", True):
        with pytest.raises(CompileError, match=r"^batch_size must be a non-negative int"):
            cg.export("forward", batch_size=batch_size)
    for over in (None, [1], 3):
        with pytest.raises(CompileError, match=r"^batched\(\): over must be names"):
            cg.batched(over)
    assert len(cg.export("forward", platforms=["cpu"]).serialize()) > 0


def test_leaves_in_context_order_and_host_data() -> None:
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves(np.float64)  # NumPy float64 is cast to the compiled float32
    by_name = cg.forward(x)
    in_order = cg.forward([x[n] for n in cg.leaf_names])
    as_lists = cg.forward({k: v.tolist() for k, v in x.items()})
    as_jax = cg.forward({k: jnp.asarray(v, jnp.float32) for k, v in x.items()})
    for other in (in_order, as_lists, as_jax):
        np.testing.assert_array_equal(np.asarray(other), np.asarray(by_name))
    assert by_name.dtype == jnp.float32


def test_bad_index_values_are_refused() -> None:
    cg, x, _ = _classifier()
    _refused(cg.forward, x, match=r"^index: missing 'label'$")
    _refused(cg.forward, x, {"label": -1}, match=r"index\['label'\]: expected non-negative")
    _refused(cg.forward, x, {"label": 1.0}, match=r"index\['label'\]: expected non-negative")
    _refused(cg.forward, x, {"label": True}, match=r"index\['label'\]: expected non-negative")
    _refused(cg.forward, x, {"label": [1, 2]}, match=r"index\['label'\]: expected shape \[\]")
    _refused(cg.forward, x, {"lbl": 1}, match=r"index: unknown name 'lbl'")
    _refused(cg.forward, x, [1, 2], match=r"index: expected 1 values")
    assert cg.trace_counts["forward"] == 0


def test_device_index_arrays_are_checked_and_passed_as_they_are() -> None:
    cg, x, _ = _classifier()
    good = jnp.asarray(2, jnp.int32)
    want = cg.forward(x, {"label": 2})
    for _ in range(2):  # the second call finds the same (immutable) array already checked
        np.testing.assert_array_equal(np.asarray(cg.forward(x, {"label": good})), want)
    bad = jnp.asarray(-1, jnp.int32)
    for _ in range(2):  # a refused array is never taken as checked
        _refused(cg.forward, x, {"label": bad}, match=r"index\['label'\]: expected non-negative")
    bg = cg.batched(over=("label",))
    labels = jnp.asarray([0, 4, 1], jnp.int32)
    out = bg.forward(x, {"label": labels})
    np.testing.assert_array_equal(np.asarray(bg.forward(x, {"label": labels})), out)
    assert out.shape == (3,)


def test_jitted_functions_check_argument_types_when_traced() -> None:
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves()
    f = cg.jitted("forward")
    before = cg.trace_counts["forward"]
    args = [x[n] for n in cg.leaf_names]
    args[cg.leaf_names.index("x")] = np.zeros(5, np.float32)
    with pytest.raises(ArgumentError, match=r"^leaves\['x'\]: expected f32\[4\], got f32\[5\]"):
        f(*args)
    with pytest.raises(ArgumentError, match=r"^forward: expected 6 arguments, got 5"):
        f(*args[:5])
    assert cg.trace_counts["forward"] == before  # refused before the program is traced


@pytest.mark.parametrize("sliced", [False, True])
def test_device_array_calls_mixed_with_host_data_or_wrong_types(
    sliced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path (a dict of device arrays) looks at the first value's type only and lets the
    compiled function's trace-time check vouch for the rest: a dict whose later values are
    NumPy or Python data, or device arrays of a wrong type, gives the checked path's result or
    its one-line error, and traces nothing new; so does a function run in slices."""
    if sliced:
        monkeypatch.setattr(compiler._slices, "SLICE_ABOVE", 2)
        monkeypatch.setattr(compiler._slices, "SLICE_CALLS", 2)

    def fresh() -> compiler.CompiledGraph:  # meets its first call as compiled
        compiler.clear_cache()
        cg = compiler.compile(mlp_build())
        assert all(cg.sliced.values()) == sliced
        return cg

    host = _mlp_leaves()
    cg = fresh()
    first, last = cg.leaf_names[0], cg.leaf_names[-1]
    want = np.asarray(cg.forward(host))
    want_value, want_grads = cg.value_and_grad(host)
    dev = {k: jnp.asarray(v) for k, v in host.items()}
    assert type(dev[first]) is not np.ndarray  # the hot path is taken: a device array first
    others = [
        host[last].astype(np.float64),  # refused when traced, then converted
        host[last],  # NumPy float32: what the checked path passes on
        host[last].tolist(),
    ]
    for other in others:
        cg = fresh()
        for leaves in ({**dev, last: other}, dev, {**dev, last: other}):
            np.testing.assert_array_equal(np.asarray(cg.forward(leaves)), want)
            value, grads = cg.value_and_grad(leaves)
            np.testing.assert_array_equal(np.asarray(value), np.asarray(want_value))
            assert sorted(grads) == sorted(want_grads)
            for k in grads:
                np.testing.assert_array_equal(np.asarray(grads[k]), np.asarray(want_grads[k]))
        assert cg.trace_counts == {"forward": 1, "jvp": 0, "vjp": 1}
    shape = cg._leaves.shapes[-1]
    bad = [
        (jnp.zeros((*shape, 2), jnp.float32), "expected shape"),
        (jnp.zeros(shape, jnp.float64), "expected dtype f32, got a jax array of f64"),
        (None, "missing value$"),
        ("abc", "expected a float"),
    ]
    for value, match in bad:
        for kind in ("forward", "value_and_grad"):
            cg = fresh()
            fn = getattr(cg, kind)
            for _ in range(2):
                _refused(fn, {**dev, last: value}, match=rf"^leaves\[{last!r}\]: {match}")
            assert cg.trace_counts == {"forward": 0, "jvp": 0, "vjp": 0}
    compiler.clear_cache()


@pytest.mark.parametrize("n", range(6))
def test_gradients_by_name_for_any_number_of_names(n: int) -> None:
    names = tuple(f"p{k}" for k in range(n))
    values = [np.full(2, k) for k in range(n)]
    got = _compiled._by_name(names)(values)
    assert list(got) == list(names)
    assert all(got[k] is v for k, v in zip(names, values, strict=True))


@pytest.mark.parametrize("big", [2**31, 2**40, 2**63 - 1, 2**64 + 5, np.uint64(2**64 - 1)])
def test_index_values_beyond_int32_are_out_of_range_not_wrapped(big: int) -> None:
    cg, x, _ = _classifier()
    g = classifier_build("f64")
    want = tl.eval_graph(g, x, {"label": 10**6})[0]  # out of range: the gather reads 0
    assert float(want) == 0.0
    val, grads = cg.value_and_grad(x, {"label": big})
    assert float(val) == 0.0
    assert all(not np.any(np.asarray(v)) for v in grads.values())


def test_static_index_input_cannot_be_overridden() -> None:
    b = tl.GraphBuilder("f64")
    v = b.input("v", (4,), requires_grad=True)
    i = b.index("i", value=2)
    cg = compiler.compile(b.build(b.gather_scalar_nat(v, i)))
    assert cg.index_names == ()
    assert float(cg.forward({"v": np.arange(4.0)})) == 2.0
    _refused(cg.forward, {"v": np.arange(4.0)}, {"i": 1}, match=r"index\['i'\]: static index")


def test_seeds_and_tangents_are_checked() -> None:
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves()
    _refused(cg.vjp_with_seed, x, np.ones(2, np.float32), match=r"seed\['0'\]: expected shape \[\]")
    _refused(cg.jvp, x, {"x": np.ones(4, np.float32)}, match=r"tangents: unknown name 'x'")
    _refused(cg.jvp, x, {"layer1.bias": np.ones(3)}, match=r"tangents\['layer1.bias'\]")
    # missing tangents are zero
    _, t = cg.jvp(x, {})
    assert float(t) == 0.0


def test_backward_needs_a_scalar_output() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,), requires_grad=True)
    cg = compiler.compile(b.build(x.tanh()))
    msg = _refused(cg.backward, {"x": np.zeros(3)}, match=r"^backward: needs a single scalar")
    assert "shapes [[3]]" in msg
    _refused(cg.value_and_grad, {"x": np.zeros(3)}, match=r"^value_and_grad: needs a single")
    _refused(cg.backward_with_seed, {"x": np.zeros(3)}, 1.0, match=r"^backward_with_seed: needs")
    _refused(cg.vjp_with_seed, {"x": np.zeros(3)}, None, match=r"^seed: missing")


# -- compile once, run many ------------------------------------------------------------------


def test_new_values_never_retrace() -> None:
    g = classifier_build("f32")
    cg = compiler.compile(g)
    rng = np.random.default_rng(0)
    for k in range(6):
        x, idx = MODELS[1].sample(rng)
        x = {n: v.astype(np.float32) for n, v in x.items()}
        if k % 2:
            x = {n: jnp.asarray(v) for n, v in x.items()}
        cg.forward(x, idx)
        cg.value_and_grad(x, idx)
        cg.backward_with_seed(x, 2.0, idx)
        cg.jvp(x, {"out.bias": np.ones(5, np.float32)}, idx)
        cg.forward([x[n] for n in cg.leaf_names], [idx["label"]])
    assert cg.trace_counts == {"forward": 1, "jvp": 1, "vjp": 1}
    bg = cg.batched(over=("x", "label"), grads="mean")
    for _ in range(4):
        xs = {**x, "x": rng.normal(size=(8, 8)).astype(np.float32)}
        bg.value_and_grad(xs, {"label": rng.integers(0, 5, size=8)})
    assert bg.trace_counts["vjp"] == 1
    bg.value_and_grad({**x, "x": np.zeros((3, 8), np.float32)}, {"label": np.zeros(3, int)})
    assert bg.trace_counts["vjp"] == 2  # a new batch size is a new shape: one more trace


def test_compile_is_cached_per_graph_dtype_device_mode_and_batching() -> None:
    a, b = classifier_build("f32"), classifier_build("f32")
    assert a is not b and a == b
    cg = compiler.compile(a)
    assert compiler.compile(b) is cg
    assert compiler.compile(a, dtype="f32", device="cpu", mode="tape") is cg
    assert compiler.compile(a, dtype="f64") is not cg
    assert compiler.compile(a, mode="jax") is not cg
    bg = cg.batched(over=["x", "label"], grads="sum")
    assert cg.batched(over=("label", "x")) is bg
    assert cg.batched(over=("x", "label"), grads="mean") is not bg


def test_bad_compile_options() -> None:
    g = mlp_build()
    with pytest.raises(CompileError, match="mode must be"):
        compiler.compile(g, mode="torch")
    with pytest.raises(CompileError, match="dtype"):
        compiler.compile(g, dtype="f16")
    with pytest.raises(CompileError, match="expected a GraphData"):
        compiler.compile("graph.json")  # type: ignore[arg-type]
    cg = compiler.compile(g)
    with pytest.raises(CompileError, match="unknown input 'q'"):
        cg.batched(over=("q",))
    with pytest.raises(CompileError, match="name at least one"):
        cg.batched(over=())
    with pytest.raises(CompileError, match="grads must be"):
        cg.batched(over=("x",), grads="max")  # type: ignore[arg-type]


# -- outputs ---------------------------------------------------------------------------------


def test_single_output_is_an_array_several_a_tuple() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,), requires_grad=True)
    w = b.param("w", (3,))
    y = x * w
    s = b.sum(y)
    g = b.build(y, s, y)  # the same value twice: its seeds add up
    cg = compiler.compile(g)
    vals = {"x": np.array([1.0, 2.0, 3.0]), "w": np.array([0.5, -1.0, 2.0])}
    outs = cg.forward(vals)
    assert isinstance(outs, tuple) and len(outs) == 3
    seeds = (np.ones(3), 2.0, np.array([1.0, 0.0, 0.0]))
    grads = cg.vjp_with_seed(vals, seeds)
    ref = tl.backprop_ctx(g, vals, seeds)
    for n in ("x", "w"):
        assert_close(grads[n], ref[n], 1e-12, n)
    grads = cg.vjp_with_seed(vals, (None, 1.0, None))
    assert_close(grads["x"], vals["w"], 1e-12, "x with None seeds")
    _refused(cg.vjp_with_seed, vals, (1.0, 2.0), match="expected 3 seeds")
    single = compiler.compile(b.build(s))
    assert not isinstance(single.forward(vals), tuple)


def test_leaves_as_outputs() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,), requires_grad=True)
    w = b.param("w", (3,))
    c = b.input("c", (3,))
    g = b.build(x, b.sum(x * w), c)
    cg = compiler.compile(g)
    vals = {"x": np.ones(3), "w": np.arange(3.0), "c": np.full(3, 2.0)}
    seeds = (np.array([1.0, 2.0, 3.0]), 2.0, np.ones(3))
    grads = cg.vjp_with_seed(vals, seeds)
    ref = tl.backprop_ctx(g, vals, seeds)
    assert sorted(grads) == ["w", "x"]
    for n in grads:
        assert_close(grads[n], ref[n], 1e-12, n)
    (_, _, _), (tx, ts, tc) = cg.jvp(vals, {"x": np.ones(3)})
    np.testing.assert_array_equal(np.asarray(tx), np.ones(3))
    assert float(ts) == 3.0 and not np.any(np.asarray(tc))


def test_gradients_only_for_requires_grad_leaves() -> None:
    cg, x, idx = _classifier()
    _, grads = cg.value_and_grad(x, idx)
    assert list(grads) == ["hidden.weight", "hidden.bias", "out.weight", "out.bias"]
    assert cg.grad_names == tuple(grads)


# -- the tape and the traced jaxprs ----------------------------------------------------------

ALLOWED_OUTER = {"jit", "pjit", "add", "add_any", "broadcast_in_dim", "convert_element_type"}


def _outer(kind: str, cg: compiler.CompiledGraph) -> list:
    return list(cg.traceable(kind).jaxpr().jaxpr.eqns)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_outer_jaxprs_contain_only_rule_calls_and_accumulation(model) -> None:
    g = model.build("f32")
    cg = compiler.compile(g)
    tape = cg.tape
    fwd_names = [f"tl_fwd_{e.op}" for e in tape]
    vjp_names = [f"tl_vjp_{e.op}" for e in reversed(tape) if e.vjp is not None]
    for kind in ("forward", "jvp", "vjp"):
        eqns = _outer(kind, cg)
        assert {e.primitive.name for e in eqns} <= ALLOWED_OUTER, kind
        names = [e.params["name"] for e in eqns if e.primitive.name in ("jit", "pjit")]
        if kind == "forward":
            assert names == fwd_names
        elif kind == "vjp":
            assert names == fwd_names + vjp_names
        else:
            want = []
            for e in tape:
                want.append(f"tl_fwd_{e.op}")
                if e.jvp is not None:
                    want.append(f"tl_jvp_{e.op}")
            assert names == want
    # fan-out sums with add: the attention block uses h three times (two adds); x is used
    # twice but is an input without gradient, so nothing accumulates there
    if model.name == "attention_block":
        assert sum(e.primitive.name == "add" for e in _outer("vjp", cg)) == 2


def test_tape_records_parents_and_cotangent_flow() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,))  # no gradient
    w = b.param("w", (3,))
    i = b.index("i")
    h = x * w  # x gets no cotangent (not differentiable), w does
    d = b.detach(h)  # nothing flows through detach
    unused = b.exp(w)  # dead: not an ancestor of an output
    del unused
    y = b.sum(h * d) + b.gather_scalar_nat(h, i)
    g = b.build(y)
    cg = compiler.compile(g)
    by_op = {e.op: e for e in cg.tape}
    assert "exp" not in by_op
    assert [e.node for e in cg.tape] == sorted(e.node for e in cg.tape)
    for e in cg.tape:
        assert e.parents == g.nodes[e.node].args
        assert e.value == g.num_leaves + e.node
    mul0 = cg.tape[0]
    assert mul0.op == "mul" and mul0.receives == (False, True)
    assert by_op["detach"].receives == (False,) and by_op["detach"].vjp is None
    assert by_op["gather_scalar_nat"].index_args == (0,)
    assert by_op["gather_scalar_nat"].receives == (True,)
    vals = {"x": np.array([1.0, 2.0, 3.0]), "w": np.array([0.5, -1.0, 2.0])}
    grads = cg.backward(vals, {"i": 1})
    assert list(grads) == ["w"]
    assert_close(grads["w"], tl.backprop_ctx(g, vals, None, {"i": 1})["w"], 1e-12, "w")


def test_identical_nodes_share_one_rule_function() -> None:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (5,), requires_grad=True)
    y = b.sum(x.tanh().tanh().tanh())
    cg = compiler.compile(b.build(y))
    tanhs = [e for e in cg.tape if e.op == "tanh"]
    assert len({id(e.forward) for e in tanhs}) == 1
    assert len({id(e.vjp) for e in tanhs}) == 1


def test_traceable_is_the_jitted_function() -> None:
    cg = compiler.compile(attention_build("f32"))
    t = cg.traceable("vjp")
    assert t.fn is cg._traced["vjp"]
    leaves = {n: a for n, a in zip(cg.leaf_names, t.args, strict=False)}
    assert set(leaves) == set(cg.leaf_names)
    jaxpr = t.jaxpr()
    assert len(jaxpr.jaxpr.invars) == len(t.args)
    assert len(jaxpr.jaxpr.outvars) == 1 + len(cg.grad_names)


def test_jitted_is_the_function_the_methods_call() -> None:
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves()
    f = cg.jitted("vjp")
    (out,), grads = f(*(x[n] for n in cg.leaf_names), np.float32(1.0))
    value, by_name = cg.value_and_grad(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(value))
    for n, g in zip(cg.grad_names, grads, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(by_name[n]))
    assert cg.trace_counts["vjp"] == 1
    with pytest.raises(CompileError, match="kind must be one of"):
        cg.jitted("grad")  # type: ignore[arg-type]


def test_value_and_grad_is_the_vjp_with_seed_one() -> None:
    """``value_and_grad`` runs one executable: the checked VJP (one nested call of the
    function ``traceable("vjp")`` gives) with the seed 1 made inside; its numbers are
    ``value_and_vjp``'s with the seed 1, bit for bit, unbatched and batched."""
    for model in MODELS:
        g = model.build("f32")
        cg = compiler.compile(g)
        x, idx = model.sample(np.random.default_rng(0))
        x = {k: v.astype(np.float32) for k, v in x.items()}
        pairs = [(cg.value_and_grad(x, idx), cg.value_and_vjp(x, 1.0, idx))]
        over = ("x", *idx)
        xs = {k: (np.stack([v] * 3) if k in over else v) for k, v in x.items()}
        idxs = {k: np.stack([v] * 3) for k, v in idx.items()}
        bg = cg.batched(over=over, grads="mean")
        pairs.append((bg.value_and_grad(xs, idxs), bg.value_and_vjp(xs, np.ones(3), idxs)))
        for (v1, g1), (v2, g2) in pairs:
            np.testing.assert_array_equal(np.asarray(v1), np.asarray(v2))
            assert list(g1) == list(g2) == list(cg.grad_names)
            for n in g2:
                np.testing.assert_array_equal(np.asarray(g1[n]), np.asarray(g2[n]))
        t = cg.traceable("vjp")
        n = len(cg.leaf_names)
        (vag,) = jax.make_jaxpr(cg._vag)(*t.args[:n], *t.args[n + 1 :]).jaxpr.eqns
        assert vag.params["name"] == "tl_graph_value_and_grad"
        calls = [e for e in vag.params["jaxpr"].jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
        assert [e.params["name"] for e in calls] == ["tl_graph_vjp"]
        assert str(calls[0].params["jaxpr"]) == str(t.jaxpr())


def test_forward_of_one_output_is_the_checked_forward() -> None:
    """``forward`` of a one-output graph runs the checked forward (one nested call) in an
    executable that returns the output itself: the same bits as ``jitted("forward")``."""
    cg = compiler.compile(mlp_build())
    x = _mlp_leaves()
    flat = [jnp.asarray(x[n]) for n in cg.leaf_names]
    (want,) = cg.jitted("forward")(*flat)
    got = cg.forward({n: v for n, v in zip(cg.leaf_names, flat, strict=True)})
    assert isinstance(got, jax.Array)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    (outer,) = jax.make_jaxpr(cg._forward_out)(*flat).jaxpr.eqns
    assert outer.params["name"] == "tl_graph_forward_output"
    calls = [e for e in outer.params["jaxpr"].jaxpr.eqns if e.primitive.name in ("jit", "pjit")]
    assert [e.params["name"] for e in calls] == ["tl_graph_forward"]
    assert cg.trace_counts["forward"] == 1


@pytest.mark.parametrize("names", [("a", "b"), ("b", "a")])
def test_gradients_come_in_leaf_order(names: tuple[str, str]) -> None:
    """Gradient names in sorted order come back as a dict built by JAX, others as a tuple
    named in Python: either way in the graph's leaf order."""
    b = tl.GraphBuilder("f32")
    p = b.param(names[0], (2,))
    q = b.param(names[1], (2,))
    cg = compiler.compile(b.build(b.sum(p * q)))
    assert cg._grads_named == (list(names) == sorted(names))
    vals = {
        names[0]: jnp.array([1.0, 2.0], jnp.float32),
        names[1]: jnp.array([3.0, 4.0], jnp.float32),
    }
    for call in (cg.value_and_grad, cg.backward):
        out = call(vals)
        grads = out if call == cg.backward else out[1]
        assert type(grads) is dict and list(grads) == list(names)
        np.testing.assert_array_equal(np.asarray(grads[names[0]]), [3.0, 4.0])
        np.testing.assert_array_equal(np.asarray(grads[names[1]]), [1.0, 2.0])


def test_stablehlo_text() -> None:
    cg = compiler.compile(mlp_build())
    text = cg.stablehlo("vjp")
    assert "func.func public @main" in text
    assert "stablehlo.dot_general" in text
    assert "f64" not in text  # an f32 graph stays f32 under x64


#: Ops whose float32 rules compute in float64 on purpose (``lower_widened``, docs/ops-notes.md).
WIDENED = ("layer_norm", "batchnorm_channel_first")


def _f64_outside_widened(jaxpr: Any) -> list[str]:
    """Equations with a float64 value, outside the nested rule calls of the widened ops."""
    bad = []
    for eqn in jaxpr.eqns:
        name = str(eqn.params.get("name", ""))
        if any(name.endswith(f"_{op}") for op in WIDENED):
            continue
        avals = [v.aval for v in (*eqn.invars, *eqn.outvars) if hasattr(v, "aval")]
        if any(str(getattr(a, "dtype", "")) == "float64" for a in avals):
            bad.append(str(eqn))
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", None)
            if inner is not None:
                bad += _f64_outside_widened(getattr(inner, "jaxpr", inner))
    return bad


def test_float32_stays_float32_under_x64() -> None:
    assert jax.config.read("jax_enable_x64")
    cg = compiler.compile(attention_build("f32"))
    for kind in ("forward", "jvp", "vjp"):
        jaxpr = cg.traceable(kind).jaxpr()
        dtypes = {str(v.aval.dtype) for v in jaxpr.jaxpr.outvars}
        assert dtypes == {"float32"}
        assert _f64_outside_widened(jaxpr.jaxpr) == []
        assert "f64" in str(jaxpr)  # inside layer_norm's rules, which do use it


def test_compile_in_another_dtype_than_the_graph() -> None:
    g32 = mlp_build("f32")
    x = _mlp_leaves(np.float64)
    v64 = compiler.compile(g32, dtype="f64").forward(x)
    assert v64.dtype == np.float64
    assert_close(v64, tl.eval_graph(g32, x)[0], 1e-12, "f32 graph compiled in f64")


# -- devices ---------------------------------------------------------------------------------


def test_cpu_device_and_bad_devices() -> None:
    cg = compiler.compile(mlp_build(), device="cpu")
    assert cg.device.platform == "cpu"
    out = cg.forward(_mlp_leaves())
    assert out.devices() == {cg.device}
    with pytest.raises(DeviceError, match="device must be"):
        compiler.compile(mlp_build(), device="tpu0")
    with pytest.raises(DeviceError, match="cpu devices"):
        compiler.compile(mlp_build(), device="cpu:99")


@pytest.mark.skipif(compiler.gpu_available(), reason="a GPU is present")
def test_absent_gpu_is_a_clear_error() -> None:
    with pytest.raises(DeviceError, match=r"^device 'gpu' requested, but JAX has no gpu device"):
        compiler.compile(mlp_build(), device="gpu")


@pytest.mark.skipif(not compiler.gpu_available(), reason="no GPU (JAX's CUDA plugin not installed)")
def test_gpu_matches_cpu() -> None:
    x = _mlp_leaves()
    g = mlp_build()
    cpu = compiler.compile(g, device="cpu").value_and_grad(x)
    gpu_cg = compiler.compile(g, device="gpu")
    gpu = gpu_cg.value_and_grad(x)
    assert gpu[0].devices() == {gpu_cg.device}
    assert_close(gpu[0], cpu[0], 1e-5, "value")
    for n in cpu[1]:
        assert_close(gpu[1][n], cpu[1][n], 1e-5, n)


PLACEMENT = """
import numpy as np, jax, optax
import compiler
from tests.compiler.models import MODELS, mlp_build
assert len(jax.devices("cpu")) == 2
x, _ = MODELS[0].sample(np.random.default_rng(0))
x = {k: v.astype(np.float32) for k, v in x.items()}
g = mlp_build("f32")
on0 = compiler.compile(g, device="cpu:0")
on1 = compiler.compile(g, device="cpu:1")
assert on1 is not on0 and on1.device == jax.devices("cpu")[1]
v0, g0 = on0.value_and_grad(x)
v1, g1 = on1.value_and_grad(x)
assert v1.devices() == {on1.device} and g1["layer1.weight"].devices() == {on1.device}
assert v0.devices() == {on0.device}
np.testing.assert_array_equal(np.asarray(v0), np.asarray(v1))
bg = on1.batched(over=("x", "y"))
step = compiler.TrainStep(bg, optax.sgd(0.1))
state = step.init({k: x[k] for k in step.param_names})
xs = {"x": np.stack([x["x"]] * 4), "y": np.stack([x["y"]] * 4)}
state, loss = step(state, xs)
assert loss.devices() == {on1.device}
assert all(p.devices() == {on1.device} for p in state.params.values())
print("ok")
"""


def test_non_default_device_pins_inputs_and_outputs() -> None:
    """Two host devices (XLA's ``--xla_force_host_platform_device_count``) stand in for a
    second accelerator: a graph compiled for ``cpu:1`` computes there, training included."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    env["XLA_FLAGS"] = env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    proc = subprocess.run(
        [sys.executable, "-c", PLACEMENT], cwd=root, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
