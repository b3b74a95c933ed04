"""The example scripts (``examples/*.py``) and the graphs they write (``examples/graphs``).

Each script regenerates its committed JSON byte for byte; each graph checks, prints and parses
back, and the reference interpreters run it (forward, JVP, reverse mode, and the adjoint identity
between the two).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import torchlean_ir as tl

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["mlp_regression", "softmax_classifier", "attention_block"]
#: The models at training size, in ``examples/models``.
MODEL_SCRIPTS = ["mnist_mlp", "lenet5", "gpt2_block", "resnet_block"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.parametrize("name", SCRIPTS + MODEL_SCRIPTS)
def test_script_regenerates_its_graph_byte_for_byte(name: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / f"{name}.py"), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"wrote {tmp_path / (name + '.json')}\n"
    where = "models" if name in MODEL_SCRIPTS else "graphs"
    committed = ROOT / "examples" / where / f"{name}.json"
    assert (tmp_path / f"{name}.json").read_bytes() == committed.read_bytes(), (
        f"examples/{where}/{name}.json is stale: run python3 examples/{name}.py"
    )


def test_every_committed_graph_has_a_script() -> None:
    committed = {p.stem for p in (ROOT / "examples" / "graphs").glob("*.json")}
    models = {p.stem for p in (ROOT / "examples" / "models").glob("*.json")}
    assert committed >= set(SCRIPTS) and models == set(MODEL_SCRIPTS)
    for stem in committed | models:
        assert (ROOT / "examples" / f"{stem}.py").is_file(), f"no script writes {stem}.json"


def _sample(g: tl.GraphData, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {leaf.name: rng.normal(size=leaf.type.shape) for leaf in g.leaves}


@pytest.mark.parametrize("name", SCRIPTS)
def test_reference_interpreters_run_the_example(name: str) -> None:
    g = tl.load(ROOT / "examples" / "graphs" / f"{name}.json")
    assert tl.parse_graph(tl.format_graph(g)) == g
    rng = np.random.default_rng(0)
    x = _sample(g, rng)
    index = {ix.name: 2 for ix in g.index_inputs if ix.value is None}
    (loss,) = tl.eval_graph(g, x, index)
    assert loss.shape == () and np.isfinite(loss)
    grads = tl.backprop_ctx(g, x, None, index)
    assert set(grads) == {leaf.name for leaf in g.leaves}
    assert all(grads[k].shape == x[k].shape for k in x)
    params = [leaf.name for leaf in g.leaves if leaf.kind == "param"]
    assert any(np.any(grads[p] != 0) for p in params)
    # forward and reverse mode agree: <jvp(dx), 1> = <dx, backprop(1)>
    dx = _sample(g, rng)
    (out,), (tangent,) = tl.jvp(g, x, dx, index)
    assert out == loss
    lhs = float(tangent)
    rhs = sum(float(np.sum(dx[k] * grads[k])) for k in x)
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs))
    # and both agree with a central finite difference
    h = 1e-6
    plus = tl.eval_graph(g, {k: x[k] + h * dx[k] for k in x}, index)[0]
    minus = tl.eval_graph(g, {k: x[k] - h * dx[k] for k in x}, index)[0]
    assert abs((plus - minus) / (2 * h) - lhs) <= 1e-5 * max(1.0, abs(lhs))


def test_softmax_classifier_is_the_negative_log_likelihood() -> None:
    g = tl.load(ROOT / "examples" / "graphs" / "softmax_classifier.json")
    rng = np.random.default_rng(1)
    x = _sample(g, rng)
    vals = tl.eval_all(g, x, {"label": 3})
    logits = vals[g.num_leaves + 2]
    log_probs = logits - np.log(np.sum(np.exp(logits)))
    (loss,) = tl.eval_graph(g, x, {"label": 3})
    assert loss == pytest.approx(-log_probs[3], rel=1e-12)
    (oob,) = tl.eval_graph(g, x, {"label": 99})  # out of range reads 0
    assert oob == 0.0
