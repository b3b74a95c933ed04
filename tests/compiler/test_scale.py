"""Large graphs: fusion boundaries (``compiler._lower``) and sliced execution
(``compiler._slices``). Timings are the business of ``benchmarks/compiler_scale.py``; these tests
check that large programs complete, give the reference's numbers, and that the jaxpr the verifier
reads does not change."""

from __future__ import annotations

import re
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import compiler
import compiler._lower as lower
import compiler._slices as slices
import torchlean_ir as tl

from .models import MODELS

CHAIN_OPS = ("tanh", "relu", "sigmoid", "exp")
X = np.array([0.3, -0.2, 0.5, 1.0])


def chain(n: int, dtype: str = "f32") -> tl.GraphData:
    """The issue's chain: ``tanh, relu, sigmoid, exp`` repeated on a 4-vector, then a weight
    (so that some gradient survives the chain's contraction) and a sum."""
    b = tl.GraphBuilder(dtype)
    h = b.param("x", (4,))
    for k in range(n):
        h = b.apply(CHAIN_OPS[k % 4], h)
    return b.build(b.sum(h * b.param("w", (4,))))


def _leaves() -> dict[str, np.ndarray]:
    return {"x": X, "w": np.array([1.0, -2.0, 0.5, 3.0])}


@pytest.fixture
def fresh() -> Iterator[None]:
    """Compile afresh (the compile cache keys on the graph, not on the settings)."""
    compiler.clear_cache()
    yield
    compiler.clear_cache()


def _structure(closed: object) -> list[tuple[object, ...]]:
    """A jaxpr's equations up to variable names: primitive, parameters (a nested jaxpr by its
    own text), and which earlier values each reads. (The text of the whole jaxpr names the
    nested jaxpr of a boundary call apart, since it is traced apart, though it is the same.)"""
    jaxpr = closed.jaxpr  # type: ignore[attr-defined]
    ids = {v: k for k, v in enumerate(jaxpr.invars)}
    out = []
    for e in jaxpr.eqns:
        params = tuple(sorted((k, str(v)) for k, v in e.params.items()))
        reads = tuple(ids.get(v, str(v)) for v in e.invars)
        for v in e.outvars:
            ids[v] = len(ids)
        out.append((e.primitive.name, params, reads))
    out.append(("out", tuple(ids.get(v, str(v)) for v in jaxpr.outvars)))
    return out


def _non_inlined_calls(hlo: str) -> list[str]:
    return re.findall(r"call @(\w+)\(.*inlineable = \"false\"", hlo)


# -- the bounded large case CI runs -----------------------------------------------------------


def test_2000_node_chain_value_and_grad_completes() -> None:
    g = chain(2000)
    cg = compiler.compile(g)
    assert not any(cg.sliced.values())  # one executable: 2000 nodes are below the slicing size
    value, grads = cg.value_and_grad(_leaves())
    (ref,) = tl.eval_graph(g, _leaves())
    ref_grads = tl.backprop_ctx(g, _leaves())
    np.testing.assert_allclose(value, ref, rtol=1e-5)
    np.testing.assert_allclose(grads["w"], ref_grads["w"], rtol=1e-5)
    np.testing.assert_allclose(grads["x"], ref_grads["x"], rtol=1e-5, atol=1e-30)
    # every 128th of the 2002 tape entries is a real call in the forward and in the backward
    calls = _non_inlined_calls(cg.stablehlo("vjp"))
    assert len(calls) == 2 * (2002 // lower.BOUNDARY_EVERY)
    assert {c.split("_")[1] for c in calls} == {"fwd", "vjp"}


# -- fusion boundaries ------------------------------------------------------------------------


def test_boundaries_leave_the_jaxpr_unchanged(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    g = chain(300)
    cg = compiler.compile(g)
    assert sorted(cg._program.boundaries) == [127, 255]
    with_boundaries = {k: _structure(cg.traceable(k).jaxpr()) for k in ("forward", "jvp", "vjp")}
    hlo = cg.stablehlo("vjp")
    assert len(_non_inlined_calls(hlo)) == 4
    compiler.clear_cache()
    monkeypatch.setattr(lower, "BOUNDARY_EVERY", 10**9)
    plain = compiler.compile(g)
    assert plain._program.boundaries == frozenset()
    assert {k: _structure(plain.traceable(k).jaxpr()) for k in with_boundaries} == with_boundaries
    assert _non_inlined_calls(plain.stablehlo("vjp")) == []
    a, b = cg.value_and_grad(_leaves()), plain.value_and_grad(_leaves())
    np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
    for k in a[1]:
        np.testing.assert_allclose(a[1][k], b[1][k], rtol=1e-6, atol=1e-30)


def test_a_graph_with_boundaries_verifies() -> None:
    import verify

    g = chain(300)
    assert compiler.compile(g)._program.boundaries
    report = verify.verify_graph(g)
    assert report.verdict == "verified", str(report)


# -- sliced execution -------------------------------------------------------------------------


@pytest.fixture
def small_slices(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Slice every program of more than 2 rule calls into slices of 2 (and stack by 3)."""
    monkeypatch.setattr(slices, "SLICE_ABOVE", 2)
    monkeypatch.setattr(slices, "SLICE_CALLS", 2)
    monkeypatch.setattr(slices, "PACK_GROUP", 3)


def _whole(cg: compiler.CompiledGraph, kind: str, *args: object) -> object:
    return cg._whole[kind](*args)


def _assert_tree_close(a: object, b: object) -> None:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-6, atol=1e-7)


def _run_all(cg: compiler.CompiledGraph, leaves: dict, index: dict) -> list[object]:
    idx = index or None
    out = cg.forward(leaves, idx)
    tangents = {n: np.ones_like(leaves[n]) for n in cg.grad_names}
    seed = jax.tree_util.tree_map(lambda o: np.ones(np.shape(o)), out)
    return [out, cg.jvp(leaves, tangents, idx), cg.value_and_vjp(leaves, seed, idx)]


_BY_NAME = {m.name: m for m in MODELS}
_SLICED_CASES = [(m.name, None) for m in MODELS] + [
    ("softmax_classifier", "sum"),  # a batched runtime index input
    ("softmax_classifier", "per_sample"),
    ("attention_block", "mean"),
]


@pytest.mark.parametrize(("name", "batching"), _SLICED_CASES)
def test_sliced_functions_equal_the_whole_ones(
    small_slices: None, monkeypatch: pytest.MonkeyPatch, name: str, batching: str | None
) -> None:
    model = _BY_NAME[name]
    g = model.build("f32")
    leaves, index = model.sample(np.random.default_rng(0))
    data = [leaf.name for leaf in g.leaves if leaf.kind == "input"]
    if batching is not None:
        leaves = {k: np.stack([v, 2 * v, -v]) if k in data else v for k, v in leaves.items()}
        index = {k: np.array([v, 0, v]) for k, v in index.items()}

    def compiled() -> compiler.CompiledGraph:
        cg = compiler.compile(g)
        return cg if batching is None else cg.batched(over=(*data, *index), grads=batching)

    cg = compiled()
    assert all(cg.sliced.values())
    got = _run_all(cg, leaves, index)
    assert cg.trace_counts == {"forward": 1, "jvp": 1, "vjp": 1}
    for kind in ("forward", "jvp", "vjp"):
        (plan,) = cg.jitted(kind)._plans.values()  # type: ignore[attr-defined]
        assert len(plan.slices) >= 2
    compiler.clear_cache()
    monkeypatch.setattr(slices, "SLICE_ABOVE", 10**9)
    whole = compiled()
    assert not any(whole.sliced.values())
    _assert_tree_close(got, _run_all(whole, leaves, index))


def test_repeated_slices_are_compiled_once(small_slices: None) -> None:
    g = chain(64)
    cg = compiler.compile(g)
    f = cg.jitted("vjp")
    assert isinstance(f, slices.SlicedFunction)
    args = [jnp.asarray(_leaves()[n], jnp.float32) for n in cg.leaf_names]
    args.append(jnp.ones((), jnp.float32))
    n_slices = f.plan_slices(*args)
    assert n_slices >= 2 * 64 // slices.SLICE_CALLS
    # a forward slice and a backward slice that repeat, plus the ends and the turn
    assert f.executables <= 8 < n_slices
    _assert_tree_close(f(*args), _whole(cg, "vjp", *args))


def test_slices_call_the_rules_of_the_jaxpr_in_its_order(small_slices: None) -> None:
    """What XLA compiles, slice by slice, is the verified jaxpr cut into pieces: the nested rule
    calls of the slices, in order, are those of the whole jaxpr."""
    g = MODELS[-1].build("f32")
    cg = compiler.compile(g)
    kind = "vjp"
    f = cg.jitted(kind)
    assert isinstance(f, slices.SlicedFunction)
    args = [jnp.zeros(a.shape, a.dtype) for a in cg._avals(kind, 2)]
    f.plan_slices(*args)
    (plan,) = f._plans.values()

    def calls(jaxpr: object) -> list[str]:
        return [str(e.params["name"]) for e in jaxpr.jaxpr.eqns  # type: ignore[attr-defined]
                if e.primitive.name in ("jit", "pjit")]  # fmt: skip

    whole = calls(cg.traceable(kind).jaxpr())
    slots: list[object] = [None] * plan.n_slots
    for s, a in zip(plan.args, args, strict=True):
        slots[s] = a
    pieces: list[str] = []
    for sl in plan.slices:
        ins = [slots[s] for s in sl.reads]
        (call,) = jax.make_jaxpr(sl.fn)(*ins).jaxpr.eqns  # the slice's own jit
        pieces += calls(call.params["jaxpr"])
        for s, r in zip(sl.writes, sl.fn(*ins), strict=True):
            slots[s] = r
    assert pieces == whole
    assert len(plan.slices) > 2
