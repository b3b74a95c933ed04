"""Real architectures from files: the ImageNet models the ``onnx`` wheel ships with
constant-filled weights and their reference outputs (``onnx/backend/test/data/light/``), and the
converted PyTorch node models (``onnx/backend/test/data/pytorch-converted/``).

Tolerances (float32 unless said): against the shipped outputs, 1e-6 absolute (the softmax of
equal logits is 0.001 everywhere); against ONNX's reference evaluator with random weights, the
logits within 1e-5 of their largest magnitude (up to 50-odd float32 layers summed in another
order);
the converted node models within 1e-5 of their largest output magnitude. Measured on this
machine (2026-11-23): largest logit differences 2e-7 (ResNet-50), 2e-6 (VGG-19), 1.4e-7 (SqueezeNet)
of the largest logit.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
import verify  # noqa: E402
from torchlean_ir import interop  # noqa: E402

from .test_onnx_vision_ops import SpecLRN  # noqa: E402  (the LRN operator's definition)

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
LIGHT = os.path.join(DATA, "light")
CONVERTED = os.path.join(DATA, "pytorch-converted")

#: The architectures issue 13 names, with the float dtype their shipped check runs in.
#: SqueezeNet's constant weights drive its logits to 9.5e9, where float32 spacing is 1024: XLA
#: on CPU computes the mean that feeds the softmax's max and the one that feeds its exponent in
#: two fusions whose results differ by far more than 1, so exp overflows to NaN (hand-written
#: ``jax.nn.softmax`` of the same mean does the same). In float64 the two agree.
ARCHITECTURES = {"resnet50": "f32", "vgg19": "f32", "squeezenet": "f64"}

#: The other light models (issue 26: all 9 import): local response normalization (AlexNet,
#: ZFNet-512, Inception v1), unequal max-pool padding (Inception v2), grouped convolutions
#: (ShuffleNet), 121 layers (DenseNet-121: its softmax of constant weights is 1.8e-6 off the
#: shipped output in float32, 9e-8 in float64, so its shipped check runs in float64).
MORE = {
    "bvlc_alexnet": "f32",
    "zfnet512": "f32",
    "inception_v1": "f32",
    "inception_v2": "f32",
    "shufflenet": "f32",
    "densenet121": "f64",
}
LIGHT_MODELS = {**ARCHITECTURES, **MORE}


def _read(path: str) -> np.ndarray:
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _dummy_input(shape: tuple[int, ...]) -> np.ndarray:
    """The input the ONNX backend tests feed the light models (runner.generate_dummy_data)."""
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _logits(imp: interop.Imported) -> tl.GraphData:
    """The imported graph cut at the input of its final softmax (DenseNet-121 has none: its
    output is the logits)."""
    g = imp.graph
    softmaxes = [i for i, n in enumerate(g.nodes) if n.op == "softmax"]
    if not softmaxes:
        return g
    return dataclasses.replace(g, outputs=(g.nodes[softmaxes[-1]].args[0],))


def test_every_shipped_light_model_is_here() -> None:
    shipped = [f[len("light_") : -len(".onnx")] for f in os.listdir(LIGHT) if f.endswith(".onnx")]
    assert sorted(shipped) == sorted(LIGHT_MODELS)


def _heavy(*names: str) -> list[Any]:
    return [pytest.param(n, marks=pytest.mark.heavy) if n in names else n for n in LIGHT_MODELS]


#: 5 to 15 s of CPU each: behind the heavy marker (ShuffleNet's grouped convolutions and
#: Inception v2's unequal pooling padding have small tests of their own in the default run)
@pytest.mark.parametrize("name", _heavy("inception_v2", "shufflenet", "densenet121"))
def test_light_model_matches_shipped_output(name: str) -> None:
    imp = interop.from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    assert imp.batch_size == 1 and len(imp.batched) == 1
    want = _read(os.path.join(LIGHT, f"light_{name}_output_0.pb"))
    cg = compiler.compile(imp.graph, dtype=LIGHT_MODELS[name]).batched(over=imp.batched)
    x = _dummy_input((1, 3, 224, 224))
    got = np.asarray(cg.forward({**imp.params, imp.batched[0]: x}))
    np.testing.assert_allclose(got.reshape(want.shape), want, atol=1e-6, rtol=0)


def _random_params(g: tl.GraphData, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """He-scaled random weights for the same architecture; batch-norm statistics and scales
    near 1, biases small (so the logits stay O(1))."""
    rng = np.random.default_rng(0)
    role: dict[str, str] = {}
    for node in g.nodes:
        if node.op == "batchnorm_eval":
            for k, r in zip(node.args[1:], ("scale", "bias", "mean", "var"), strict=True):
                role[g.leaves[k].name] = r
    out = {}
    for name, v in params.items():
        r = role.get(name)
        if r == "scale":
            out[name] = rng.uniform(0.2, 0.5, v.shape)
        elif r == "var":
            out[name] = rng.uniform(0.5, 1.5, v.shape)
        elif r in ("bias", "mean") or v.ndim == 1:
            out[name] = rng.normal(0, 0.05, v.shape)
        else:
            fan_in = int(np.prod(v.shape[1:]))
            out[name] = rng.normal(0, np.sqrt(2 / fan_in), v.shape)
    return {k: v.astype(np.float32) for k, v in out.items()}


def _with_weights(model: Any, imp: interop.Imported, out: str) -> Any:
    """The shipped model with its ConstantOfShape weight fillers removed (the weights become
    graph inputs) and ``out`` added as an output."""
    sources = set(imp.source_names.values())
    g = model.graph
    nodes = [n for n in g.node if not (n.op_type == "ConstantOfShape" and n.output[0] in sources)]
    inputs = list(g.input) + [
        helper.make_tensor_value_info(imp.source_names[k], onnx.TensorProto.FLOAT, list(v.shape))
        for k, v in imp.params.items()
    ]
    outputs = [helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, None)]
    graph = helper.make_graph(nodes, g.name, inputs, outputs, initializer=list(g.initializer))
    return helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)


#: VGG-19's row is heavy too (19 s in CI runs, which are near their 20 minutes): its import and
#: forward stay in every run (``test_light_model_matches_shipped_output``), its ops in ResNet-50's
#: and SqueezeNet's rows.
@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.heavy) if n in ("vgg19", *MORE) else n
        for n in (*ARCHITECTURES, *MORE)
    ],
)
def test_light_model_logits_and_gradients_with_random_weights(name: str) -> None:
    """Random weights: our logits against ONNX's reference evaluator on the original file, and
    value_and_grad of a cross-entropy on the logits (every parameter gets a finite gradient)."""
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    model = onnx.load(path)
    imp = interop.from_onnx(model)
    params = _random_params(imp.graph, imp.params)
    g = _logits(imp)
    b, (logits,) = tl.GraphBuilder.from_graph(g)
    flat = b.reshape(logits, shape=(int(np.prod(logits.shape)),))
    label = b.index("label")
    loss = b.build(logits, b.scale(b.gather_scalar_nat(b.log_softmax(flat), label), c=-1.0))
    cg = compiler.compile(loss).batched(over=(*imp.batched, "label"), grads="mean")
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)
    labels = np.array([7])
    (ours, value), grads = cg.value_and_vjp(
        {**params, imp.batched[0]: x}, (None, np.ones(1, np.float32)), {"label": labels}
    )
    # the logits' ONNX name: the softmax's input in the (converted) model, else its output
    converted = onnx.version_converter.convert_version(model, 18)
    softmaxes = [n.input[0] for n in converted.graph.node if n.op_type == "Softmax"]
    logits = softmaxes[-1] if softmaxes else converted.graph.output[0].name
    ref_model = _with_weights(converted, imp, logits)
    feeds = {imp.source_names[k]: v for k, v in params.items()}
    (theirs,) = ReferenceEvaluator(ref_model, new_ops=[SpecLRN]).run(
        None, {**feeds, imp.source_names[imp.batched[0]]: x}
    )
    ours = np.asarray(ours).reshape(theirs.shape)
    scale = float(np.abs(theirs).max())
    assert 0.1 < scale < 1e4, scale  # moderate logits: the comparison means something
    np.testing.assert_allclose(ours, theirs, atol=1e-5 * scale, rtol=0)
    assert np.isfinite(np.asarray(value)).all()
    assert set(grads) == {
        k for k in params if k in {lf.name for lf in g.leaves if lf.requires_grad}
    }
    assert all(np.isfinite(np.asarray(v)).all() for v in grads.values())
    assert any(np.abs(np.asarray(v)).max() > 0 for v in grads.values())


#: Adam's learning rate for ``test_light_model_trains``: 1e-3, but for Inception v2 and
#: DenseNet-121, whose loss falls by only 0.07 a step at 1e-3 (6.80 -> 6.53, 6.92 -> 6.62 in 5)
TRAIN_LR = {"inception_v2": 1e-2, "densenet121": 1e-2}


@pytest.mark.heavy  # 10 to 82 s each on 2 cores (docs/interop.md): none under ~5 s
@pytest.mark.parametrize("name", list(LIGHT_MODELS))
def test_light_model_trains(name: str) -> None:
    """Random weights (as above), a per-sample cross-entropy on the logits, and 5 compiled Adam
    steps (``compiler.TrainStep`` + ``compiler.fit``, ``TRAIN_LR``) on one fixed sample: every
    loss finite and the last more than 1 below the first (about ln 1000 = 6.9). There is no
    reference implementation to follow for these files (the PyTorch models they were converted
    from are not here), so this checks that the imported model trains, not that it trains as
    another framework would."""
    imp = interop.from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    params = _random_params(imp.graph, imp.params)
    b, (logits,) = tl.GraphBuilder.from_graph(_logits(imp))
    flat = b.reshape(logits, shape=(int(np.prod(logits.shape)),))
    loss = b.build(b.scale(b.gather_scalar_nat(b.log_softmax(flat), b.index("label")), c=-1.0))
    bg = compiler.compile(loss).batched(over=(*imp.batched, "label"), grads="mean")
    step = compiler.TrainStep(
        bg, compiler.optimizer("adam", learning_rate=TRAIN_LR.get(name, 1e-3))
    )
    state = step.init({k: v for k, v in params.items() if k in step.param_names})
    frozen = {k: params[k] for k in step.data_names if k in params}  # batch-norm statistics
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, 224, 224)).astype(np.float32)
    data = ({imp.batched[0]: x, **frozen}, {"label": np.array([7])})
    _, losses = compiler.fit(step, state, [data] * 5)
    losses = np.asarray(losses)
    assert np.isfinite(losses).all(), losses
    assert losses[-1] < losses[0] - 1.0, losses  # down by over a nat (from about 6.9)


#: Verification of the light models (``verify.verify_graph``, 2 cores, 2026-11-27): VGG-19 6 s,
#: SqueezeNet 11 s, ResNet-50 34 s, ZFNet-512 40 s, Inception v1 61 s, DenseNet-121 72 to 92 s (on a
#: loaded machine; its 2x2 / stride 2 average pools' compiled forward is proved at tensor level
#: since a power of a bracket inside a sum reads as the bracket), ShuffleNet 76 s, AlexNet 112 to
#: 123 s (2026-11-28: 254 checks; 73 to 84 s of CPU, load 3 to 6; its 11x11 / stride 4 conv of a
#: 224x224 image takes 55 s of it: the decision's last pass unrolls its 11-value kernel sums;
#: its grouped second convolution, 96 -> 256 channels in 2 groups, 5x5, on 26x26, 17 s: its VJP
#: meets the adjoint since a floor's gcd split takes the constant's share that keeps a padded
#: window in one channel block), Inception v2 275 s, every check exact. Light models the
#: verifier does not prove yet, with why (strict xfail: the test fails when the gap closes):
#: none.
VERIFY_GAPS: dict[str, str] = {}


@pytest.mark.heavy
@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=VERIFY_GAPS[n]))
        if n in VERIFY_GAPS
        else n
        for n in LIGHT_MODELS
    ],
)
def test_light_model_verifies(name: str) -> None:
    imp = interop.from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    report = verify.verify_graph(imp.graph)
    assert report.verdict == "verified", report.summary()


def _converted() -> list[str]:
    return sorted(os.listdir(CONVERTED))


#: Converted node models refused on purpose, with the reason the importer gives (a substring).
CONVERTED_REFUSED = {
    "test_Conv1d_dilated": "dilation",
    "test_Conv2d_dilated": "dilation",
    "test_Conv3d_dilated": "dilation",
    "test_Conv3d_dilated_strided": "dilation",
    "test_MaxPool1d_stride_padding_dilation": "dilation",
    "test_MaxPool2d_stride_padding_dilation": "dilation",
    "test_ReflectionPad2d": "Pad mode 'reflect'",
    "test_ReplicationPad2d": "Pad mode 'edge'",
    # the target is a (10, 10) constant: it varies along the batch axis, so it is not one
    # computation per sample (it imports with batch_axis=None, below)
    "test_PoissonNLLLLoss_no_reduce": "varies along axis 0, which holds the batch",
}


@pytest.mark.parametrize("name", _converted())
def test_converted_pytorch_node_model(name: str) -> None:
    path = os.path.join(CONVERTED, name, "model.onnx")
    if name in CONVERTED_REFUSED:
        with pytest.raises(interop.InteropError, match=CONVERTED_REFUSED[name]) as e:
            interop.from_onnx(path)
        msg = str(e.value)
        assert "\n" not in msg and msg.startswith("from_onnx: node "), msg
        return
    imp = interop.from_onnx(path)
    _check_data_sets(imp, os.path.join(CONVERTED, name))


def _check_data_sets(imp: interop.Imported, folder: str) -> None:
    cg = compiler.compile(imp.graph).batched(over=imp.batched) if imp.batched else None
    floats = [leaf.name for leaf in imp.graph.leaves if leaf.kind == "input"]
    for data_set in sorted(glob.glob(os.path.join(folder, "test_data_set_*"))):
        ins = [_read(p) for p in sorted(glob.glob(os.path.join(data_set, "input_*.pb")))]
        (want,) = [_read(p) for p in sorted(glob.glob(os.path.join(data_set, "output_*.pb")))]
        leaves, index = {}, {}
        names = floats + [ix.name for ix in imp.graph.index_inputs]
        for n, a in zip(names, ins, strict=True):
            (leaves if n in floats else index)[n] = a
        if cg is not None:
            got = np.asarray(cg.forward({**imp.params, **leaves}, index or None))
        else:
            got = np.asarray(compiler.compile(imp.graph).forward({**imp.params, **leaves}))
        np.testing.assert_allclose(got, want, atol=1e-5 * max(1.0, float(np.abs(want).max())))


def test_poisson_nll_imports_as_one_whole_batch() -> None:
    folder = os.path.join(CONVERTED, "test_PoissonNLLLLoss_no_reduce")
    imp = interop.from_onnx(os.path.join(folder, "model.onnx"), batch_axis=None)
    assert imp.batched == ()
    _check_data_sets(imp, folder)
