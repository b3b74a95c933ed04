"""Every op of the registry verifies exactly at tensor level at large shapes (issue 11).

One graph per op (and a few variants of the pooling ops), float64: the op applied to params of
large shape (dims of 512 to 4096 where the op has free dims; convolutions and pools with 64
channels on 32x32, 64 x 1024 in 1-D, 16 channels on 16x16x16 in 3-D; attention n 128, d 768,
12 heads, causal), then the loss ``sum(y * y)`` so the compiled VJP runs too. Each graph is
verified with ``method="tensor"`` (no element-level fallback) and the end-to-end check off (it
expands elements), and every rule and compiled check must pass exactly at tensor level.

Rows the tensor level does not decide at these shapes are pinned in :data:`LARGE_UNDECIDED`
with why (strict xfail: the test fails when the gap closes). :data:`SAMPLE` runs in every run;
every other row is ``slow`` (CI runs them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import torchlean_ir as tl
import verify


@dataclass(frozen=True)
class Large:
    """One op applied to params of large shapes; ``index`` gives the size of each runtime index
    input (``None``: a nat scalar), symbolic at tensor level (every value)."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    index: tuple[int | None, ...] = ()
    label: str = ""

    @property
    def id(self) -> str:
        shapes = "_".join("x".join(map(str, s)) or "s" for s in self.shapes)
        return f"{self.op}[{shapes}{'-' + self.label if self.label else ''}]"

    def graph(self) -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        xs = [b.param(f"a{i}", s) for i, s in enumerate(self.shapes)]
        ixs = [b.index(f"i{k}", size) for k, size in enumerate(self.index)]
        y = b.apply(self.op, *xs, *ixs, **self.attrs)
        if not any(s for s in self.shapes):  # no tensor argument of any size: weigh the output
            y = y * b.param("w", y.shape)
        return b.build(b.sum(y * y))


_CAUSAL = np.tril(np.ones((128, 128), dtype=bool))
_RNG = np.random.default_rng(0)
_M, _N = 512, 4096  # an elementwise operand: 2M elements

CASES: list[Large] = [
    # -- leaves, elementwise -------------------------------------------------------------------
    Large("const", (), {"value": _RNG.uniform(-2.0, 2.0, size=(512, 1024))}),
    Large("detach", ((_M, _N),)),
    Large("add", ((_M, _N), (_M, _N))),
    Large("sub", ((_M, _N), (_M, _N))),
    Large("mul", ((_M, _N), (_M, _N))),
    Large("scale", ((_M, _N),), {"c": -0.75}),
    Large("abs", ((_M, _N),)),
    Large("sqrt", ((_M, _N),)),
    Large("clamp", ((_M, _N),), {"lo": -0.5, "hi": 0.7}),
    Large("max", ((_M, _N), (_M, _N))),
    Large("min", ((_M, _N), (_M, _N))),
    Large("relu", ((_M, _N),)),
    Large("sigmoid", ((_M, _N),)),
    Large("tanh", ((_M, _N),)),
    Large("exp", ((_M, _N),)),
    Large("log", ((_M, _N),)),
    Large("inv", ((_M, _N),)),
    Large("softplus", ((_M, _N),)),
    Large("safe_log", ((_M, _N),), {"eps": 1e-6}),
    Large("gelu", ((_M, _N),)),
    Large("silu", ((_M, _N),)),
    Large("erf", ((_M, _N),)),
    Large("step", ((_M, _N),)),
    Large("rsqrt", ((_M, _N),)),
    Large("pow", ((_M, _N),), {"p": 3.0}),
    Large("pow", ((_M, _N),), {"p": -1.5}, label="real"),
    Large("mse_loss", ((_M, _N), (_M, _N))),
    # -- layout --------------------------------------------------------------------------------
    Large("broadcast_to", ((512, 1),), {"shape": (4, 512, 1024)}),
    Large("reshape", ((_M, _N),), {"shape": (2048, 1024)}),
    Large("flatten", ((64, 32, 32),)),
    Large("transpose2d", ((_M, _N),)),
    Large("swap_adjacent_at_depth", ((8, 512, 768),), {"depth": 1}),
    Large("transpose3d_first_to_last", ((8, 512, 768),)),
    Large("transpose3d_last_to_first", ((8, 512, 768),)),
    Large("transpose3d_last_two", ((8, 512, 768),)),
    Large("concat", ((512, 768), (1024, 768))),
    Large("concat_vectors", ((4096,), (1024,))),
    Large("slice", ((4096, 512),), {"start": 1000, "length": 2048}),
    # -- reductions, products ------------------------------------------------------------------
    Large("reduce_sum", ((512, 768),), {"axis": 1}),
    Large("reduce_mean", ((512, 768),), {"axis": 0}),
    Large("sum", ((512, 768),)),
    Large("matmul", ((512, 1024), (1024, 768))),
    Large("bmm", ((12, 512, 64), (12, 64, 512))),
    Large("linear", ((768, 1024), (768,), (1024,))),
    Large("softmax", ((_M, _N),)),
    Large("log_softmax", ((_M, _N),)),
    Large("log_softmax", ((4096, 8),), label="rows-of-8"),
    Large("layer_norm", ((512, 768), (768,), (768,)), {"eps": 1e-5}),
    # -- gathers and scatter-adds --------------------------------------------------------------
    Large("gather_scalar_nat", ((4096,),), index=(None,)),
    Large("gather_rows_nat", ((1024, 768),), index=(512,)),
    Large("gather_rows_nat", ((1024, 768),), index=(8,), label="8-positions"),
    Large("gather_vec_nat", ((4096,),), index=(1024,)),
    Large("gather_vec_nat", ((4096,),), index=(8,), label="8-positions"),
    Large("gather_scalar", ((4096,),), {"index": 3000}),
    Large("gather_row", ((1024, 768),), {"index": 700}),
    Large("scatter_add_vec", ((4096,), ()), {"index": 1000}),
    Large("scatter_add_row", ((1024, 768), (768,)), {"index": 700}),
    Large("nat_vec_to_float", (), index=(4096,)),
    # -- convolutions --------------------------------------------------------------------------
    Large("conv2d", ((64, 64, 3, 3), (64,), (64, 32, 32)), {"stride": 1, "padding": 1}),
    Large("conv", ((64, 64, 3), (64,), (64, 1024)), {"stride": (2,), "padding": (1,)}, label="1d"),
    # AlexNet's second convolution: 2 groups of 48 input and 128 output channels, 5x5
    Large(
        "conv2d",
        ((256, 48, 5, 5), (256,), (96, 26, 26)),
        {"stride": 1, "padding": 2, "groups": 2},
        label="grouped",
    ),
    Large(
        "conv",
        ((16, 16, 3, 3, 3), (16,), (16, 16, 16, 16)),
        {"stride": (1, 2, 1), "padding": (1, 1, 0)},
        label="3d",
    ),
    Large("conv_transpose2d", ((64, 64, 3, 3), (64,), (64, 32, 32)), {"stride": 2, "padding": 1}),
    # (a 1-D conv_transpose of 64 x 1024 verifies too, in about 4 s; left out for CI time)
    Large(
        "conv_transpose",
        ((16, 16, 2, 2, 2), (16,), (16, 16, 16, 16)),
        {"stride": (1, 2, 1), "padding": (0, 0, 1)},
        label="3d",
    ),
    # -- pooling -------------------------------------------------------------------------------
    Large("max_pool2d", ((64, 32, 32),), {"kernel": (2, 2), "stride": 2}),
    Large("max_pool2d_pad", ((64, 32, 32),), {"kernel": (3, 3), "stride": 2, "padding": 1}),
    Large("max_pool", ((64, 1024),), {"kernel": (3,), "stride": (2,), "padding": (1,)}, label="1d"),
    Large(
        "max_pool", ((64, 1023),), {"kernel": (3,), "stride": (2,), "padding": (1,)}, label="1d-odd"
    ),
    Large(
        "max_pool",
        ((16, 16, 16, 16),),
        {"kernel": (2, 2, 2), "stride": (1, 2, 1), "padding": (0, 1, 1)},
        label="3d",
    ),
    Large(
        "max_pool",
        ((64, 33, 32),),
        {"kernel": (2, 3), "stride": (2, 3), "padding": (0, 0)},
        label="tiled",
    ),
    Large("avg_pool2d", ((64, 32, 32),), {"kernel": (2, 3), "stride": 1}),
    Large("avg_pool2d_pad", ((64, 32, 32),), {"kernel": (3, 3), "stride": 2, "padding": 1}),
    Large("avg_pool", ((64, 1024),), {"kernel": (3,), "stride": (2,), "padding": (1,)}, label="1d"),
    Large(
        "avg_pool",
        ((16, 16, 16, 16),),
        {"kernel": (2, 2, 2), "stride": (1, 2, 1), "padding": (0, 1, 1)},
        label="3d",
    ),
    Large(
        "smooth_max_pool",
        ((64, 1024),),
        {"kernel": (3,), "stride": (1,), "padding": (1,), "beta": 2.0},
        label="1d",
    ),
    Large(
        "smooth_max_pool",
        ((64, 32, 32),),
        {"kernel": (2, 2), "stride": (2, 2), "padding": (1, 1), "beta": -1.5},
        label="neg-beta",
    ),
    Large("smooth_max_pool2d", ((64, 32, 32),), {"kernel": (2, 2), "stride": 1, "beta": 3.0}),
    Large("global_avg_pool2d", ((64, 32, 32),)),
    # -- normalisation, attention --------------------------------------------------------------
    Large("batchnorm_channel_first", ((64, 32, 32), (64,), (64,)), {"eps": 2.0**-12}),
    Large("batchnorm_eval", ((64, 32, 32), (64,), (64,), (64,), (64,)), {"eps": 2.0**-10}),
    Large(
        "multi_head_attention",
        ((768, 768), (768, 768), (768, 768), (768, 768), (128, 768)),
        {"heads": 12, "mask": _CAUSAL},
        label="causal",
    ),
    # -- randomness ----------------------------------------------------------------------------
    Large("rand_uniform", (), {"shape": (_M, _N), "seed": 42}, label="2M"),
    Large("bernoulli_mask", ((),), {"shape": (_M, _N), "seed": 7}, label="2M"),
]

#: Ops with no row here, and why (none: every op has a shape to scale).
EXCLUDED: dict[str, str] = {
    "nat_to_float": "one runtime index as a float scalar: it has no shape to make large",
}

#: Rows with a check the tensor level does not decide at their shape, and why (measured with
#: ``method="tensor"``, 60 s budget per attempt, on the 2-core machine, 2026-11-24). Pinned
#: (strict xfail): the test fails when the gap closes. They run under :data:`GAP_BUDGET_S`.
LARGE_UNDECIDED: dict[str, str] = {}

#: A pinned row that may also raise, besides failing the assertion (see its reason).
LARGE_RAISES: dict[str, tuple[type[BaseException], ...]] = {}

#: Checked in every run (a few seconds in all); every other row is ``slow`` (CI runs them).
SAMPLE = {
    "matmul[512x1024_1024x768]",
    "softmax[512x4096]",
    "layer_norm[512x768_768_768]",
    "conv2d[64x64x3x3_64_64x32x32]",
    "max_pool2d[64x32x32]",
    "multi_head_attention[768x768_768x768_768x768_768x768_128x768-causal]",
    "gather_scalar_nat[4096]",
    "scatter_add_row[1024x768_768]",
    "batchnorm_channel_first[64x32x32_64_64]",
}

#: Rows behind the ``heavy`` marker too (``pytest -m heavy``; CI's 20 minutes have no margin
#: for them): AlexNet's grouped 5x5 convolution, 13 s in CI. Its fix stays checked in every run
#: by the floor identity's unit tests (tests/verify/test_tterms.py) and the grouped-conv mutant
#: (tests/verify/test_mutations.py).
HEAVY_ROWS = {"conv2d[256x48x5x5_256_96x26x26-grouped]"}

#: The tensor-level budget of a decided row (seconds per attempt): far above what the slowest
#: takes (about 11 s, the 3-D convolution), so that load does not turn a slow decision into a
#: gap; a pinned row runs under :data:`GAP_BUDGET_S`, so a known gap costs seconds, not minutes.
DECIDED_BUDGET_S = 600.0
GAP_BUDGET_S = 3.0

#: A row is large: a dimension of at least 512, or at least 2^16 elements in one tensor (the
#: 64-channel 32x32 and 16-channel 16x16x16 convolutions and pools).
LARGE_DIM, LARGE_SIZE = 512, 1 << 16


def _exact_at_tensor_level(case: Large) -> None:
    """Verify the row's graph at tensor level: never a mismatch (a hard failure, pinned or
    not); then (an ``AssertionError``, what a pinned row's xfail expects) every check passes
    exactly, the rule and compiled checks at tensor level, and the op's own node has both."""
    report = verify.verify_graph(case.graph(), method="tensor", end_to_end="never")
    failed = [c for c in report.all_checks if c.result == "fail"]
    if failed:
        pytest.fail(f"{case.id}: mismatch: {report.summary()}: {failed[0].how}")
    assert report.verdict == "verified", report.summary()
    for c in report.all_checks:
        assert (c.result, c.method) == ("pass", "exact"), (c.link, c.name, c.how)
        if c.link in ("rule", "lowering", "compiled"):
            assert c.level == "tensor", (c.link, c.name, c.how)
    node = report.nodes[0]  # the op's node comes first, then the loss
    assert node.op == case.op
    assert {"rule", "compiled"} <= {c.link for c in node.checks}, node


def _params(sample: bool) -> list:
    out = []
    for c in CASES:
        if (c.id in SAMPLE) != sample:
            continue
        marks: list[Any] = [] if sample else [pytest.mark.slow]
        if c.id in HEAVY_ROWS:
            marks.append(pytest.mark.heavy)
        if c.id in LARGE_UNDECIDED:
            raises = LARGE_RAISES.get(c.id, AssertionError)
            marks.append(
                pytest.mark.xfail(strict=True, raises=raises, reason=LARGE_UNDECIDED[c.id])
            )
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def _budget(case: Large, monkeypatch: pytest.MonkeyPatch) -> None:
    seconds = GAP_BUDGET_S if case.id in LARGE_UNDECIDED else DECIDED_BUDGET_S
    monkeypatch.setattr("verify._attempt.TENSOR_BUDGET_S", seconds)


def test_the_sweep_covers_every_registered_op() -> None:
    covered = {c.op for c in CASES}
    assert covered == set(tl.all_ops()) - set(EXCLUDED), set(tl.all_ops()) ^ covered
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert set(LARGE_UNDECIDED) | SAMPLE | set(LARGE_RAISES) <= set(ids)
    assert set(LARGE_RAISES) <= set(LARGE_UNDECIDED)
    assert not SAMPLE & set(LARGE_UNDECIDED)  # every run checks rows that verify


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_row_is_large(case: Large) -> None:
    graph = case.graph()
    types = [leaf.type for leaf in graph.leaves] + [n.type for n in graph.nodes]
    assert any(max(t.shape, default=0) >= LARGE_DIM or t.size >= LARGE_SIZE for t in types)


@pytest.mark.parametrize("case", _params(True))
def test_a_sample_of_ops_verifies_exactly_at_tensor_level_at_large_shapes(
    case: Large, monkeypatch: pytest.MonkeyPatch
) -> None:
    _budget(case, monkeypatch)
    _exact_at_tensor_level(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(False))
def test_every_op_verifies_exactly_at_tensor_level_at_large_shapes(
    case: Large, monkeypatch: pytest.MonkeyPatch
) -> None:
    _budget(case, monkeypatch)
    _exact_at_tensor_level(case)
