"""The training examples, CI-sized: each reaches its documented target on the compiled backend
(the fast path), and the eager backend trains the same way (a short run, compared with the
compiled one step for step)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytest.importorskip("sklearn")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def _same_run(a: dict, b: dict, key: str) -> None:
    # both in float32 (eager: a batched tape of per-op jitted rules; compiled: one fused step),
    # so equal up to float32 rounding, accumulated over the run
    np.testing.assert_allclose(a["curve"], b["curve"], rtol=2e-3)
    np.testing.assert_allclose(a[key], b[key], rtol=2e-2)


def test_diabetes_regression_reaches_its_target_on_both_backends() -> None:
    ex = _example("regression_diabetes")
    compiled = ex.train(backend="compiled", progress=False)
    eager = ex.train(backend="eager", progress=False)
    assert compiled["test_mse"] < ex.TARGET_TEST_MSE < compiled["baseline_mse"]
    assert eager["test_mse"] < ex.TARGET_TEST_MSE
    _same_run(eager, compiled, "test_mse")
    assert compiled["curve"][-1] < 0.6 * compiled["curve"][0]


def test_digits_cnn_reaches_95_percent() -> None:
    ex = _example("digits_cnn")
    m = ex.train(backend="compiled", progress=False)
    assert m["accuracy"] >= ex.TARGET_ACCURACY, m["accuracies"]


def test_digits_cnn_eager_trains_like_compiled() -> None:
    ex = _example("digits_cnn")
    kw = {"epochs": 1, "train_limit": 128, "test_limit": 60, "progress": False}
    eager = ex.train(backend="eager", **kw)
    compiled = ex.train(backend="compiled", **kw)
    _same_run(eager, compiled, "accuracies")


def test_tiny_transformer_learns_to_sort() -> None:
    ex = _example("tiny_transformer")
    m = ex.train(backend="compiled", progress=False)
    assert m["accuracy"] >= ex.TARGET_ACCURACY, m["accuracies"]


def test_tiny_transformer_eager_trains_like_compiled() -> None:
    ex = _example("tiny_transformer")
    kw = {"epochs": 1, "n_train": 64, "n_test": 20, "progress": False}
    eager = ex.train(backend="eager", **kw)
    compiled = ex.train(backend="compiled", **kw)
    _same_run(eager, compiled, "accuracies")


def test_command_line_writes_the_plot_and_the_params(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    ex = _example("regression_diabetes")
    png, npz = tmp_path / "curve.png", tmp_path / "params.npz"
    code = ex.main(["--epochs", "2", "--plot", str(png), "--save", str(npz)])
    out = capsys.readouterr()
    assert "diabetes [compiled]: test MSE" in out.out
    assert code in (0, 1)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from torchlean import read_params_file

    assert set(read_params_file(npz)) == {
        "layers.0.weight",
        "layers.0.bias",
        "layers.2.weight",
        "layers.2.bias",
    }
