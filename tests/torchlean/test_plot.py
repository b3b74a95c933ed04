"""ScalarTrainer.losses and loss-curve PNGs (``save_loss_curve``, ``plot_losses``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import Options, Param, ScalarTrainer, plot_losses

pytest.importorskip("matplotlib")


def _trainer(backend: str) -> ScalarTrainer:
    w = Param(np.array([2.0, -1.0]), name="w")

    def loss(ops, x):  # type: ignore[no-untyped-def]
        d = ops.sub(ops.use(w), x)
        return ops.sum(ops.mul(d, d))

    return ScalarTrainer(loss, [w], [(2,)], Options(backend=backend, dtype="f64"))


def _colours(path: Path) -> set[tuple[int, int, int]]:
    from PIL import Image

    with Image.open(path) as im:
        assert im.size == (640, 400)
        return {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 20)}  # type: ignore[union-attr]


def test_losses_are_recorded_per_step_on_both_backends(tmp_path: Path) -> None:
    x = np.array([0.5, 0.5])
    runs = {}
    for backend in ("eager", "compiled"):
        tr = _trainer(backend)
        got = [tr.step(x, lr=0.1), tr.adam_step(x, lr=0.1), tr.adamw_step(x, lr=0.1)]
        got += [tr.adam_step(x, lr=0.1) for _ in range(5)]
        tr.forward(x)  # not a step: not recorded
        tr.backward(x)
        assert tr.losses == got
        runs[backend] = tr
    np.testing.assert_allclose(runs["eager"].losses, runs["compiled"].losses, rtol=1e-12)
    assert runs["eager"].losses[0] == pytest.approx(1.5**2 + 1.5**2)

    path = tmp_path / "curve.png"
    out = runs["eager"].save_loss_curve(str(path), compare={"compiled": runs["compiled"]})
    assert out == str(path) and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    colours = _colours(path)
    # matplotlib's first two line colours: both curves are drawn, the compiled one dashed over
    # the (equal) eager one
    assert (31, 119, 180) in colours and (255, 127, 14) in colours
    solo = tmp_path / "solo.png"
    runs["eager"].save_loss_curve(str(solo), label="eager run", log=True)
    assert (31, 119, 180) in _colours(solo) and (255, 127, 14) not in _colours(solo)


def test_plot_losses_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(tl.TorchleanError, match="nothing to draw"):
        _trainer("eager").save_loss_curve(str(tmp_path / "empty.png"))
    with pytest.raises(tl.TorchleanError, match="no such directory"):
        plot_losses(tmp_path / "no" / "c.png", {"a": [1.0]})
    with pytest.raises(tl.TorchleanError, match="log scale needs positive values"):
        plot_losses(tmp_path / "c.png", {"a": [1.0, 0.0]}, log=True)
    assert plot_losses(tmp_path / "c.png", {"a": [3.0, 2.0], "b": [1.0]}, xlabel="epoch")
