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
model.onnx`` (exported once per model, weights perturbed by 0.02 so that the exporter merges no
initializers), with a per-sample cross-entropy built on the imported logits
(``GraphBuilder.from_graph``). The exporter folds each eval-mode batch norm into the convolution
before it (a new weight and a new bias, ``NAME.weight_bias``), so only ViT's parameters are
PyTorch's one to one (each the parameter, its transpose or, the class token, its values
reshaped; 40 of 40); ResNet's and MobileNetV2's are PyTorch's classifier and, for the rest, the
parameters of the *twin*: the model with the folded weights and biases in its convolutions and
each batch norm the identity, the same function of the same parameters. Held to PyTorch:

- the forward within 1e-5 of the model's logits;
- the gradient (the compiled VJP of the logits at a random cotangent) within 1e-4 of
  ``torch.autograd.grad``, relative to the largest magnitude: with respect to the input image,
  and to each parameter that is PyTorch's, one to one; every parameter of ours against the twin's;
- the verifier: the loss graph VERIFIED, every check exact;
- 20 compiled Adam steps whose losses follow ``torch.optim.Adam`` on the twin within 1e-4 (for
  ViT the twin is the model itself; for the two others Adam on the folded parameters is another
  trajectory than Adam on the unfolded ones, so ours follows the twin, not the model with batch
  norm, which parts from it by 0.05 to 0.08 in 20 steps).

Measured figures are in ``docs/interop.md`` ("Vision models through ONNX").
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
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
        self.name = name
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
    them). Through ``torch.export`` none is: the verification of the two convolutional networks
    and MobileNetV2's training step (its XLA compilation) take about two minutes of CPU in all,
    which CI runs. Through ONNX the same checks of ResNet and MobileNetV2 (their verification,
    27 to 46 s each, their training and MobileNetV2's gradient, 10 to 30 s each) are heavy: CI
    has no margin left for them, ResNet's gradient too; ViT's run in every run."""
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


class _Onnx:
    """The model through ``torch.onnx.export(..., dynamo=True)`` and ``torchlean import
    model.onnx`` (once per model), and its loss: a per-sample cross-entropy built on the imported
    logits. The weights are perturbed by 0.02 first (as in ``test_onnx_lm.py``): the exporter
    merges initializers of equal values (ViT's LayerNorm scales and zero biases at
    initialisation) into one parameter, a different model to train."""

    def __init__(self, case: _Case, folder: Path) -> None:
        torch.manual_seed(1)
        self.model = case.build().eval()
        self.model.load_state_dict(case.model.state_dict())
        with torch.no_grad():
            for p in self.model.parameters():
                p.add_(0.02 * torch.randn_like(p))
        self.path = folder / "model.onnx"
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(self.model, (case.x,), str(self.path), dynamo=True)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = torchlean(["import", str(self.path), "-o", str(folder / "g.json"),
                            "--params", str(folder / "p.safetensors")])  # fmt: skip
        assert rc in (0, None), out.getvalue()
        self.graph = tl.load(str(folder / "g.json"))
        self.params = read_params(str(folder / "p.safetensors"))
        (self.input,) = [leaf.name for leaf in self.graph.leaves if leaf.kind == "input"]
        b, (logits,) = tl.GraphBuilder.from_graph(self.graph)
        label = b.index("labels")
        self.loss = b.build(b.scale(b.gather_scalar_nat(b.log_softmax(logits), label), c=-1.0))
        self.twin = _twin(case.build().eval(), self.model.state_dict(), self.params)


def _twin(twin: Any, state: dict[str, Any], params: dict[str, np.ndarray]) -> Any:
    """A PyTorch model whose parameters are the imported ones, one to one: ``twin`` (a new
    instance of the model, given the model's ``state``), with each convolution the exporter
    folded an eval-mode batch norm into (``NAME.weight`` and ``NAME.weight_bias`` in the file)
    holding the folded weight and bias, and that batch norm the identity. ViT has no batch
    norm: its twin is the model."""
    twin.load_state_dict(state)
    modules = dict(twin.named_modules())
    for name in params:
        if not name.endswith(".convolution.weight_bias"):
            continue
        layer = modules[name.removesuffix(".convolution.weight_bias")]
        assert isinstance(layer.normalization, torch.nn.BatchNorm2d), name
        conv = layer.convolution
        assert conv.bias is None, name
        conv.weight = torch.nn.Parameter(torch.from_numpy(np.array(params[name[: -len("_bias")]])))
        conv.bias = torch.nn.Parameter(torch.from_numpy(np.array(params[name])))
        layer.normalization = torch.nn.Identity()
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in twin.modules())  # all folded
    return twin


def _as_pytorchs(
    params: dict[str, np.ndarray], named: dict[str, Any], path: Path
) -> dict[str, tuple[str, bool]]:
    """Which of our parameters are PyTorch's: ours -> (PyTorch's, transposed), for those the
    file names (as itself, or in the exporter's ``folded_from`` metadata) and that hold its
    values, or their transpose (a linear layer's weight), or its values reshaped (ViT's class
    token, expanded to the batch and imported as its first slice); no two of ours the same. The
    bias the exporter gives a convolution it folds a batch norm into, ``NAME.weight_bias``, is
    the twin's ``NAME.bias``."""
    g = onnx.load(str(path), load_external_data=False).graph
    folded = {
        vi.name: ast.literal_eval(p.value)
        for vi in g.value_info
        for p in vi.metadata_props
        if p.key == "pkg.onnxscript.optimizer.folded_from"
    }
    out: dict[str, tuple[str, bool]] = {}
    for k, v in params.items():
        bias = k.removesuffix(".weight_bias") + ".bias"  # if folded: the twin's bias
        for src in [k] if k in named else [bias] if bias in named else folded.get(k, []):
            p = named[src].detach().numpy() if src in named else None
            if p is None or p.size != v.size:
                continue
            if np.array_equal(v.reshape(p.shape), p):
                out[k] = (src, False)
            elif p.ndim == 2 and np.array_equal(v.reshape(p.T.shape), p.T):
                out[k] = (src, True)
    assert len({src for src, _ in out.values()}) == len(out)  # one to one
    return out


@pytest.fixture(scope="module")
def through_onnx(case: _Case, tmp_path_factory: Any) -> _Onnx:
    return _Onnx(case, tmp_path_factory.mktemp(f"{case.name}_onnx"))


def _rel(ours: Any, theirs: Any) -> float:
    theirs = np.asarray(theirs, np.float64)
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / np.abs(theirs).max())


@_models()
def test_through_onnx(case: _Case, through_onnx: _Onnx) -> None:
    """``torch.onnx.export(..., dynamo=True)`` (batch norm folded into the convolutions, the
    class token and an all-zero attention mask folded to initializers expanded to the batch,
    ``IsNaN`` guards after softmax), then ``torchlean import model.onnx``: the forward within
    1e-5 of PyTorch."""
    o = through_onnx
    assert all(np.asarray(v).size > 1 for v in o.params.values())  # no scalar became a parameter
    cg = compiler.compile(o.graph).batched(over=(o.input,))
    got = np.asarray(cg.forward({**o.params, o.input: case.x.numpy()}))
    want = o.model(case.x).logits.detach().numpy()
    assert np.abs(want).max() > 0.1
    assert _rel(got, want) <= 1e-5


@_models("resnet", "mobilenet")
def test_gradient_through_onnx(case: _Case, through_onnx: _Onnx) -> None:
    """The compiled VJP of the imported logits, at a random cotangent, against
    ``torch.autograd.grad``, within 1e-4 relative to the largest magnitude. The exporter folds
    each eval-mode batch norm into the convolution before it (weight and a new bias), so the
    convolutions' parameters are not PyTorch's: what is compared one to one with the model is
    the gradient with respect to the input image, and with respect to the parameters that are
    PyTorch's (the same values or their transpose, named by the file or by its ``folded_from``
    metadata: all 40 of ViT's, the classifier of ResNet and of MobileNetV2). Every parameter of
    ours, the folded ones too, is then held to the twin (:func:`_twin`: the model with the
    folded weights and biases and no batch norm)."""
    o = through_onnx
    g = dataclasses.replace(
        o.graph,
        context=dataclasses.replace(
            o.graph.context,
            leaves=tuple(
                dataclasses.replace(leaf, requires_grad=True) if leaf.name == o.input else leaf
                for leaf in o.graph.leaves
            ),
        ),
    )
    cg = compiler.compile(g).batched(over=(o.input,))
    seed = np.random.default_rng(0).normal(size=(BATCH, 10)).astype(np.float32)
    ours = cg.vjp_with_seed({**o.params, o.input: case.x.numpy()}, seed)
    for model in (o.model, o.twin):
        x = case.x.clone().requires_grad_(True)
        named = dict(model.named_parameters())
        theirs = torch.autograd.grad(
            model(x).logits, [x, *named.values()], grad_outputs=torch.from_numpy(seed)
        )
        assert _rel(ours[o.input], theirs[0].numpy()) <= 1e-4
        want = dict(zip(named, (t.numpy() for t in theirs[1:]), strict=True))
        top = max(float(np.abs(t).max()) for t in want.values())
        mine = _as_pytorchs(o.params, named, o.path)
        if model is o.twin:
            assert len(mine) == len(o.params) == len(named)  # every one of ours, one to one
        elif case.name == "vit":
            assert len(mine) == len(named) == 40  # all of PyTorch's
        else:
            assert sorted(v for v, _ in mine.values()) == sorted(
                n for n in named if n.startswith("classifier.")
            )
        for k, (src, transposed) in mine.items():
            got = ours[k].reshape(want[src].T.shape if transposed else want[src].shape)
            err = float(np.abs((got.T if transposed else got) - want[src]).max())
            assert err <= 1e-4 * top, (k, src, err, top)


@_models("resnet", "mobilenet")
def test_verifies_exactly_through_onnx(through_onnx: _Onnx) -> None:
    """The imported graph with its per-sample cross-entropy: VERIFIED, every check exact."""
    report = verify.verify_graph(through_onnx.loss)
    assert report.verdict == "verified", report.summary()
    assert "0 probabilistic, 0 not verified" in report.summary()


@_models("resnet", "mobilenet")
def test_twenty_adam_steps_through_onnx(case: _Case, through_onnx: _Onnx) -> None:
    """20 compiled Adam steps on the imported graph's mean cross-entropy (per-sample losses,
    ``batched(grads="mean")``) follow ``torch.optim.Adam`` on the twin (the model itself for
    ViT, the model with the folded convolutions and no batch norm for the others: the same
    function of the same parameters) within 1e-4."""
    o = through_onnx
    bg = compiler.compile(o.loss).batched(over=(o.input, "labels"), grads="mean")
    step = compiler.TrainStep(bg, compiler.optimizer("adam", learning_rate=case.lr))
    state = step.init({k: v for k, v in o.params.items() if k in step.param_names})
    assert set(step.param_names) == set(o.params)
    data = ({o.input: case.x.numpy()}, {"labels": case.labels.numpy()})
    _, ours = compiler.fit(step, state, [data] * 20)
    model = _twin(case.build().eval(), o.model.state_dict(), o.params)  # a fresh one
    opt = torch.optim.Adam(model.parameters(), lr=case.lr)
    theirs = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(case.x).logits, case.labels)
        loss.backward()
        opt.step()
        theirs.append(float(loss.detach()))
    assert theirs[-1] < 0.9 * theirs[0]  # it learns
    np.testing.assert_allclose(np.asarray(ours), theirs, atol=1e-4, rtol=0)


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
