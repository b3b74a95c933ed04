"""Vision models of Hugging Face ``transformers``, exported as a user writes it, imported from the
command line, and held to PyTorch: ResNet (the ResNet-50 layout: bottleneck blocks, batch norm
with running statistics), MobileNetV2 (depthwise convolutions, ReLU6, TensorFlow 'SAME'
padding) and ViT (patch embedding, class token, attention, exact GELU), tiny (32x32 images, a
batch of 3), built from config objects with random weights (batch-norm statistics and scales
randomised too, so that eval-mode batch norm is not the identity).

For each: ``torch.export.export`` and ``torch.export.save``, then ``torchlean import m.pt2 -o
g.json --params p.safetensors`` (the command's ``main``, in process) and, from those files, the
compiled forward within 1e-5 of PyTorch (relative to the largest logit), the gradient of the
model's own loss (its mean cross-entropy: the exported per-sample cross-entropy averaged by
``batched(grads="mean")``) within 1e-4 of autograd (relative to the largest gradient), the
verifier's VERIFIED with every check exact, and 20 compiled Adam steps whose losses follow
``torch.optim.Adam``'s within 1e-4. The model's own ``labels=`` path is not exported here: its
loss is the batch mean (``CrossEntropyLoss()``), which the importer refuses per sample (see
``docs/interop.md``), so the per-sample loss is exported by a wrapper. The models are built in
``corpus.py`` (shared with ``benchmarks/interop_models.py``).

The same models through ``torch.onnx.export(..., dynamo=True)`` and ``torchlean import
model.onnx``: forward within 1e-5 of PyTorch.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("onnxscript")

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
import verify  # noqa: E402
from torchlean import read_params_file as read_params  # noqa: E402
from torchlean_ir import interop  # noqa: E402
from torchlean_ir.cli import main as torchlean  # noqa: E402

from .corpus import BATCH, LABELS, VISION_MODELS, PerSampleLoss, resnet  # noqa: E402

MODELS = VISION_MODELS


class _Case:
    """One model, exported, saved and imported through the command line (once per module)."""

    def __init__(self, name: str, folder: Path) -> None:
        torch.manual_seed(0)
        build, self.lr = MODELS[name]
        self.build = build
        self.model = build().eval()
        self.x = torch.randn(BATCH, 3, 32, 32)
        self.labels = torch.tensor(LABELS)
        self.forward = self._import(folder / "logits", self.model, (self.x,), {})
        self.loss = self._import(
            folder / "loss", PerSampleLoss(self.model).eval(), (self.x,), {"labels": self.labels}
        )

    @staticmethod
    def _import(stem: Path, model: Any, args: tuple, kwargs: dict) -> tuple[Any, dict]:
        program = torch.export.export(model, args=args, kwargs=kwargs)  # as a user writes it
        torch.export.save(program, str(stem.with_suffix(".pt2")))
        graph, params = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = torchlean(["import", str(stem.with_suffix(".pt2")), "-o", str(graph),
                            "--params", str(params)])  # fmt: skip
        assert rc in (0, None), out.getvalue()
        return tl.load(str(graph)), read_params(str(params))

    def torch_loss(self, model: Any) -> Any:
        return model(self.x, labels=self.labels).loss  # the model's own (mean) loss


@pytest.fixture(scope="module")
def case(request: Any, tmp_path_factory: Any) -> _Case:
    return _Case(request.param, tmp_path_factory.mktemp(request.param))


def _models(*heavy: str) -> Any:
    """The models, those named ``heavy`` behind the heavy marker (``pytest -m heavy`` runs
    them). None is today: the verification of the two convolutional networks and MobileNetV2's
    training step (its XLA compilation) take about two minutes of CPU in all, which CI runs."""
    return pytest.mark.parametrize(
        "case",
        [pytest.param(n, marks=pytest.mark.heavy) if n in heavy else n for n in MODELS],
        indirect=True,
    )


@_models()
def test_forward_matches_pytorch(case: _Case) -> None:
    graph, params = case.forward
    cg = compiler.compile(graph).batched(over=("pixel_values",))
    got = np.asarray(cg.forward({**params, "pixel_values": case.x.numpy()}))
    want = case.model(case.x).logits.detach().numpy()
    assert np.abs(want).max() > 0.1  # logits of some size: the comparison means something
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@_models()
def test_gradient_of_its_own_loss_matches_autograd(case: _Case) -> None:
    graph, params = case.loss
    cg = compiler.compile(graph).batched(over=("pixel_values", "labels"), grads="mean")
    values, grads = cg.value_and_grad(
        {**params, "pixel_values": case.x.numpy()}, {"labels": case.labels.numpy()}
    )
    own = case.torch_loss(case.model)
    assert abs(float(np.mean(values)) - float(own)) <= 1e-5 * abs(float(own))
    names = dict(case.model.named_parameters())
    want = dict(zip(names, torch.autograd.grad(own, list(names.values())), strict=True))
    scale = max(float(g.abs().max()) for g in want.values())
    assert set(grads) == {f"model.{n}" for n in names}
    for n, g in want.items():
        err = float(np.abs(grads[f"model.{n}"] - g.numpy()).max())
        assert err <= 1e-4 * scale, (n, err, scale)


@_models()
def test_verifies_exactly(case: _Case) -> None:
    graph, _ = case.loss
    report = verify.verify_graph(graph)
    assert report.verdict == "verified", report.summary()
    assert "0 probabilistic, 0 not verified" in report.summary()


@_models()
def test_twenty_adam_steps_follow_pytorch(case: _Case) -> None:
    graph, params = case.loss
    bg = compiler.compile(graph).batched(over=("pixel_values", "labels"), grads="mean")
    step = compiler.TrainStep(bg, compiler.optimizer("adam", learning_rate=case.lr))
    state = step.init({k: v for k, v in params.items() if k in step.param_names})
    frozen = {k: params[k] for k in step.data_names if k in params}  # batch-norm statistics
    data = {"pixel_values": case.x.numpy(), **frozen}
    _, ours = compiler.fit(step, state, [(data, {"labels": case.labels.numpy()})] * 20)
    model = case.build().eval()
    model.load_state_dict(case.model.state_dict())
    opt = torch.optim.Adam(model.parameters(), lr=case.lr)
    theirs = []
    for _ in range(20):
        opt.zero_grad()
        loss = case.torch_loss(model)
        loss.backward()
        opt.step()
        theirs.append(float(loss.detach()))
    assert theirs[-1] < 0.9 * theirs[0]  # it learns
    np.testing.assert_allclose(np.asarray(ours), theirs, atol=1e-4, rtol=0)


@_models()
def test_through_onnx(case: _Case, tmp_path: Path) -> None:
    """``torch.onnx.export(..., dynamo=True)`` (batch norm folded into the convolutions, the
    class token and an all-zero attention mask folded to initializers expanded to the batch,
    ``IsNaN`` guards after softmax), then ``torchlean import model.onnx``."""
    path = tmp_path / "model.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(case.model, (case.x,), str(path), dynamo=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = torchlean(["import", str(path), "-o", str(tmp_path / "g.json"),
                        "--params", str(tmp_path / "p.safetensors")])  # fmt: skip
    assert rc in (0, None), out.getvalue()
    graph = tl.load(str(tmp_path / "g.json"))
    params = read_params(str(tmp_path / "p.safetensors"))
    assert all(np.asarray(v).size > 1 for v in params.values())  # no scalar became a parameter
    (name,) = [leaf.name for leaf in graph.leaves if leaf.kind == "input"]
    cg = compiler.compile(graph).batched(over=(name,))
    got = np.asarray(cg.forward({**params, name: case.x.numpy()}))
    want = case.model(case.x).logits.detach().numpy()
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_resnet_in_train_mode_is_refused_as_a_side_effect() -> None:
    """Training-mode batch norm updates its running statistics in place: one line naming the
    buffer and the source line, with the hint (export in eval mode)."""
    torch.manual_seed(0)
    program = torch.export.export(resnet().train(), (torch.randn(BATCH, 3, 32, 32),))
    with pytest.raises(interop.InteropError) as e:
        interop.from_torch(program)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("from_torch: node add_ (aten.add_) at modeling_resnet.py:"), msg
    assert msg.endswith(
        "updates 'resnet.embedder.embedder.normalization.num_batches_tracked' in place: a "
        "training-mode side effect; hint: export the model in eval mode"
    ), msg
