"""CI equivalence helpers: plain assertion functions (the pytest plugin wraps them).

::

    from verify.testing import assert_verifies, assert_compiled_matches_reference

    def test_my_model_backprop_is_proved():
        assert_verifies(build_my_graph())            # symbolic proof, all three links

    def test_my_model_compiles_to_the_reference():
        assert_compiled_matches_reference(build_my_graph(), samples=3)   # numeric, float64

:func:`assert_verifies` is a proof (or fails with the report and a counterexample);
:func:`assert_compiled_matches_reference` is a numeric cross-check on random inputs (what the
compiled functions return against the reference interpreters, float64, tight tolerances).
:func:`assert_op_verifies` checks a (custom) op's rules at given argument shapes;
:func:`assert_vjp_correct` proves a JAX function's derivatives (and its custom rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import torchlean_ir as tl

from ._report import Report


class VerificationError(AssertionError):
    """A graph or op did not verify; the message is the report's table and counterexample."""

    def __init__(self, message: str, report: Report | None = None) -> None:
        super().__init__(message)
        self.report = report


def _as_graph(graph: tl.GraphData | str) -> tl.GraphData:
    return tl.load(graph) if isinstance(graph, str) else graph


def assert_verifies(
    graph: tl.GraphData | str,
    *,
    allow_probabilistic: bool = False,
    **options: Any,
) -> Report:
    """Verify ``graph`` (a :class:`GraphData` or a file path) with
    :func:`verify.verify_graph` (``options`` are its keyword arguments) and return the report;
    raise :class:`VerificationError` unless the verdict is ``verified`` (or, with
    ``allow_probabilistic``, every check passed, some only probabilistically)."""
    from ._verify import verify_graph

    g = _as_graph(graph)
    report = verify_graph(g, name=graph if isinstance(graph, str) else None, **options)
    ok = report.verdict == "verified" or (
        allow_probabilistic
        and report.verdict == "undecided"
        and all(c.result == "pass" for c in report.all_checks)
    )
    if not ok:
        raise VerificationError(f"graph did not verify ({report.verdict}):\n{report}", report)
    return report


def assert_op_verifies(
    op: str | tl.Op,
    arg_shapes: Sequence[Sequence[int]],
    attrs: Mapping[str, Any] | None = None,
    *,
    index: Sequence[tuple[int | None, Any]] = (),
    dtype: str = "f64",
    **options: Any,
) -> Report:
    """Verify one op on arguments of ``arg_shapes``: its rules against the derivative of its
    forward and its lowered (compiled) rules against the reference, through a one-node graph.
    ``index`` gives, per index argument, ``(size or None for a scalar, value or None for a
    runtime input)``. ``dtype`` is the graph's dtype and the one the compiled functions are
    checked in (``float64`` by default)."""
    name = op if isinstance(op, str) else op.name
    b = tl.GraphBuilder(dtype)
    xs = [b.input(f"a{i}", tuple(s), requires_grad=True) for i, s in enumerate(arg_shapes)]
    ixs = [b.index(f"i{k}", size, value=value) for k, (size, value) in enumerate(index)]
    graph = b.build(b.apply(name, *xs, *ixs, **dict(attrs or {})))
    return assert_verifies(graph, dtype=dtype, **options)


def assert_vjp_correct(f: Any, *example_args: Any, **options: Any) -> Report:
    """Prove JAX's derivatives of ``f`` (``jax.vjp``, ``jax.jvp``, and every ``custom_vjp`` /
    ``custom_jvp`` rule it calls) equal to the derivative of its forward, with
    :func:`verify.verify_function` (``options`` are its keyword arguments: ``modes``,
    ``index_ranges``, ``stop_gradient``, ``budget_s``...); return the report, raise
    :class:`VerificationError` unless the verdict is ``verified``."""
    from ._functions import verify_function

    report = verify_function(f, *example_args, **options)
    if report.verdict != "verified":
        raise VerificationError(f"function did not verify ({report.verdict}):\n{report}", report)
    return report


def _random_inputs(
    graph: tl.GraphData, rng: np.random.Generator
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[np.ndarray]]:
    leaves = {leaf.name: rng.normal(size=leaf.type.shape) for leaf in graph.leaves}
    tangents = {
        leaf.name: rng.normal(size=leaf.type.shape) for leaf in graph.leaves if leaf.requires_grad
    }
    seeds = [rng.normal(size=t.shape) for t in graph.output_types]
    return leaves, tangents, seeds


def _random_index(graph: tl.GraphData, rng: np.random.Generator) -> dict[str, np.ndarray]:
    dims = [d for v in range(graph.num_values) for d in graph.value_type(v).shape] or [1]
    top = max(dims) + 1
    return {
        ix.name: rng.integers(0, top + 1, size=ix.type.shape)
        for ix in graph.index_inputs
        if ix.value is None
    }


def assert_compiled_matches_reference(
    graph: tl.GraphData | str,
    *,
    samples: int = 3,
    seed: int = 0,
    dtype: str = "f64",
    rtol: float | None = None,
    atol: float | None = None,
    index: Mapping[str, Any] | None = None,
    leaves: Mapping[str, Any] | None = None,
) -> None:
    """Compile ``graph`` and compare its forward, JVP and tape VJP with the reference
    interpreters (``eval_graph``, ``jvp``, ``backprop_ctx``) on ``samples`` random inputs
    (normal leaves, tangents and seeds; random index values, some out of range, unless
    ``index`` is given). Tolerances default to 1e-10 / 1e-12 for f64 and 1e-4 / 1e-5 for f32.
    Numeric, not a proof: :func:`assert_verifies` is the proof."""
    import compiler

    g = _as_graph(graph)
    cg = compiler.compile(g, dtype=dtype)
    f64 = dtype in ("f64", "float64")
    rtol = rtol if rtol is not None else (1e-10 if f64 else 1e-4)
    atol = atol if atol is not None else (1e-12 if f64 else 1e-5)
    rng = np.random.default_rng(seed)
    grad_names = [leaf.name for leaf in g.leaves if leaf.requires_grad]

    def close(got: Any, want: Any, what: str, k: int) -> None:
        np.testing.assert_allclose(
            np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
            rtol=rtol, atol=atol, err_msg=f"sample {k}: {what}",
        )  # fmt: skip

    for k in range(samples):
        x, dx, seeds = _random_inputs(g, rng)
        if leaves is not None:
            x.update({n: np.asarray(v, dtype=np.float64) for n, v in leaves.items()})
        idx = dict(index) if index is not None else _random_index(g, rng)
        ix = idx or None
        outs = tl.eval_graph(g, x, ix)
        got = cg.forward(x, ix)
        got = got if isinstance(got, tuple) else (got,)
        for o, (a, b) in enumerate(zip(got, outs, strict=True)):
            close(a, b, f"forward output {o}", k)
        _, touts = tl.jvp(g, x, dx, ix)
        _, gt = cg.jvp(x, dx, ix)
        gt = gt if isinstance(gt, tuple) else (gt,)
        for o, (a, b) in enumerate(zip(gt, touts, strict=True)):
            close(a, b, f"jvp output tangent {o}", k)
        seed_arg: Any = tuple(seeds) if len(seeds) > 1 else seeds[0]
        want = tl.backprop_ctx(g, x, seed_arg, ix)
        grads = cg.vjp_with_seed(x, seed_arg, ix)
        for n in grad_names:
            close(grads[n], want[n], f"gradient of {n}", k)


__all__ = [
    "VerificationError",
    "assert_compiled_matches_reference",
    "assert_op_verifies",
    "assert_verifies",
]
