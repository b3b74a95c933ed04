"""Each op's forward against ONNX's reference evaluator, through the library's ONNX export.

The mapping is the library's (``torchlean_ir.interop.ONNX_EXPORTS``, one exporter per op;
``NOT_EXPORTED`` lists the ops without an ONNX form, with the reason). Every op-table row is
exported three ways and run by ``onnx.reference.ReferenceEvaluator``: without a batch axis, with
a batch of two samples on every argument ONNX takes batched, and imported back
(``from_onnx(to_onnx(g))``), which must compute the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import torchlean_ir as tl  # noqa: E402
from torchlean_ir import interop  # noqa: E402

from .op_cases import CASES, OpCase  # noqa: E402

#: The library's table, under the names docs/gen_ops.py reads.
ONNX_OPS = interop.ONNX_EXPORTS
NO_ONNX_EQUIVALENT = interop.NOT_EXPORTED

#: Looser relative tolerances, each with its cause. ONNX's Gelu function body uses
#: sqrt(float32(2/pi)) and float32(0.044715); with those two constants the tanh formula matches
#: the ONNX result exactly, with ours (float64 constants) to about 1e-8 relative. ONNX's Erf
#: computes math.erf into a float32 array (``np.vectorize(erf, otypes=["f"])``), whatever the
#: input's dtype: ours is float64 (math.erf), within 4e-8 relative of it.
ONNX_RTOL: dict[str, float] = {"gelu": 1e-7, "erf": 1e-7}


def _onnx_cases() -> list[OpCase]:
    # out-of-range gathers included: the export clamps the index and selects 0, as ours reads
    return [c for c in CASES if c.op in ONNX_OPS]


def test_onnx_mapping_is_documented() -> None:
    undocumented = sorted(set(tl.all_ops()) - set(ONNX_OPS) - set(NO_ONNX_EQUIVALENT))
    assert not undocumented, f"ops with neither an ONNX mapping nor a reason: {undocumented}"
    assert not set(ONNX_OPS) & set(NO_ONNX_EQUIVALENT)


def _check(model: Any) -> Any:
    onnx.checker.check_model(model, full_check=True)
    return ReferenceEvaluator(model)


def _close(ours: np.ndarray, theirs: Any, op: str) -> None:
    rtol = ONNX_RTOL.get(op, 1e-12)
    np.testing.assert_allclose(ours, np.asarray(theirs, dtype=np.float64), rtol=rtol, atol=1e-13)


@pytest.mark.parametrize("case", _onnx_cases(), ids=lambda c: c.id)
def test_forward_matches_onnx_reference(case: OpCase) -> None:
    """Exported without a batch axis (every leaf an input of its own shape)."""
    rng = np.random.default_rng(7)
    g = case.graph()
    x = case.sample(rng)
    idx = case.index_values()
    (ours,) = tl.eval_graph(g, x, idx)
    feeds = {**x, **{k: np.asarray(v, dtype=np.int64) for k, v in idx.items()}}
    (theirs,) = _check(interop.to_onnx(g, batched=[])).run(None, feeds)
    _close(ours, theirs, case.op)


def _batched_args(case: OpCase) -> list[str]:
    """Every leaf ONNX takes with a batch axis (weights of conv, norms, attention stay shared),
    and every index input."""
    op = tl.get_op(case.op)
    shared = interop.UNBATCHED_ARGS.get(case.op, ())
    leaves = [f"a{i}" for i in range(len(case.shapes)) if op.arg_name(i) not in shared]
    return leaves + [f"i{k}" for k in range(len(case.index))]


def _batch(
    case: OpCase, rng: np.random.Generator, batched: list[str]
) -> tuple[dict, dict, np.ndarray]:
    """Two samples: the feeds (batched leaves stacked, shared leaves once) and the expected
    outputs stacked (the reference interpreter per sample)."""
    samples = [case.sample(rng) for _ in range(2)]
    idx = case.index_values()
    feeds = {
        k: np.stack([s[k] for s in samples]) if k in batched else samples[0][k] for k in samples[0]
    }
    want = []
    for s in samples:
        leaves = {k: s[k] if k in batched else samples[0][k] for k in s}
        want.append(tl.eval_graph(case.graph(), leaves, idx)[0])
    index = {k: np.stack([np.asarray(v, dtype=np.int64)] * 2) for k, v in idx.items()}
    return feeds, index, np.stack(want)


@pytest.mark.parametrize("case", [c for c in _onnx_cases() if c.shapes], ids=lambda c: c.id)
def test_batched_export_matches_each_sample(case: OpCase) -> None:
    rng = np.random.default_rng(8)
    batched = _batched_args(case)
    feeds, index, want = _batch(case, rng, batched)
    (theirs,) = _check(interop.to_onnx(case.graph(), batched=batched)).run(None, {**feeds, **index})
    _close(want, theirs, case.op)


def _exportable() -> list[OpCase]:
    return [c for c in CASES if c.op not in NO_ONNX_EQUIVALENT and c.shapes]


@pytest.mark.parametrize("case", _exportable(), ids=lambda c: c.id)
def test_import_of_export_computes_the_same(case: OpCase) -> None:
    """from_onnx(to_onnx(g)): the imported per-sample graph gives each sample's values (out of
    range gathers included: the exported clamp-and-select reads back as our gather)."""
    rng = np.random.default_rng(9)
    batched = _batched_args(case)
    feeds, index, want = _batch(case, rng, batched)
    imp = interop.from_onnx(interop.to_onnx(case.graph(), batched=batched), batch_size=2)
    assert {imp.source_names[n] for n in imp.batched} == set(batched)
    rename = {imp.source_names[n]: n for n in imp.source_names}
    got = []
    for j in range(2):
        leaves = {rename[k]: (v[j] if k in batched else v) for k, v in feeds.items()}
        idx = {rename[k]: v[j] for k, v in index.items()}
        got.append(tl.eval_graph(imp.graph, {**leaves, **imp.params}, idx)[0])
    np.testing.assert_allclose(np.stack(got), want, rtol=1e-12, atol=1e-13)
