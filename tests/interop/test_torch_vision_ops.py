"""What vision models exported as written need from ``from_torch``: in-place ops, grouped and
depthwise convolution, a zero ``F.pad`` before a convolution, a broadcast parameter that meets the
batch (a class token), integer tables folded at import, batch-norm statistics outputs of a
decomposed program after a ``.pt2`` round trip, and an output container class the loading
process has not registered.

Each model is compared with PyTorch (forward within 1e-5, every parameter's gradient within 1e-4
of autograd: ``assert_matches_autograd``); the refusals are one line naming the node.
"""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import compiler  # noqa: E402
import verify  # noqa: E402
from torchlean_ir import interop  # noqa: E402
from torchlean_ir.interop._files import load_pt2  # noqa: E402

from .test_torch import assert_matches_autograd  # noqa: E402


def _ops(imp: interop.Imported) -> list[str]:
    return [n.op for n in imp.graph.nodes]


class _Residual(nn.Module):
    """``out += identity`` and in-place activations, as ResNets write them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.5, inplace=True)
        self.fc = nn.Linear(3 * 5 * 5, 4)

    def forward(self, x: Any) -> Any:
        out = self.conv(x)
        out += x
        out = self.act(out)
        return self.drop(torch.relu_(self.fc(torch.flatten(out, 1))))


def test_in_place_ops_import_as_their_out_of_place_forms() -> None:
    torch.manual_seed(0)
    model, x = _Residual().eval(), torch.randn(3, 3, 5, 5)
    program = torch.export.export(model, (x,))
    assert {"aten.add_", "aten.relu_", "aten.dropout_"} <= {
        f"aten.{n.target.overloadpacket.__name__}"
        for n in program.graph.nodes
        if n.op == "call_function"
    }
    imp = interop.from_torch(program)
    assert _ops(imp).count("add") >= 1 and "relu" in _ops(imp)
    assert_matches_autograd(imp, model, x)


class _WriteThroughView(nn.Module):
    def forward(self, x: Any) -> Any:
        y = x * 2
        flat = y.view(-1)
        flat.add_(1)  # writes y too: y is read below
        return y + 0.5


class _ReadTheWrittenView(nn.Module):
    def forward(self, x: Any) -> Any:
        flat = (x * 2).view(-1)
        flat.add_(1)
        return flat * 3  # only the written tensor is read after the write


def test_in_place_write_through_a_view_read_later_is_refused() -> None:
    program = torch.export.export(_WriteThroughView(), (torch.randn(2, 3),))
    with pytest.raises(interop.InteropError) as e:
        interop.from_torch(program)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("from_torch: node add_ (aten.add_) at "), msg
    assert "writes through to mul (a view or the tensor it views), read later" in msg
    x = torch.randn(2, 3)
    imp = interop.from_torch(torch.export.export(_ReadTheWrittenView(), (x,)))
    cg = compiler.compile(imp.graph).batched(over=imp.batched)
    want = _ReadTheWrittenView()(x).numpy()
    got = np.asarray(cg.forward({"x": x.numpy()})).reshape(want.shape)  # the batch merged
    assert np.abs(got - want).max() < 1e-6


class _Depthwise(nn.Module):
    """MobileNet's block: a zero ``F.pad`` (TensorFlow's 'SAME'), a depthwise convolution,
    ReLU6, a grouped and a pointwise convolution."""

    def __init__(self, pads: tuple[int, int, int, int]) -> None:
        super().__init__()
        self.pads = pads
        self.dw = nn.Conv2d(4, 4, 3, stride=2, groups=4)
        self.gc = nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False)
        self.pw = nn.Conv2d(6, 2, 1)

    def forward(self, x: Any) -> Any:
        h = F.relu6(self.dw(F.pad(x, self.pads)))
        return self.pw(F.hardtanh(self.gc(h), 0.0, 6.0))


@pytest.mark.parametrize(
    ("size", "pads", "explicit"),
    [(7, (0, 1, 0, 1), False), (8, (0, 1, 0, 1), True), (6, (1, 1, 1, 1), False)],
    ids=["same-unused-end", "same-explicit", "symmetric"],
)
def test_zero_pad_and_grouped_convolutions(
    size: int, pads: tuple[int, int, int, int], explicit: bool
) -> None:
    """The zero pad is the depthwise convolution's padding: symmetric (cropped where it
    reaches no window), or, where no symmetric padding and crop gives the same windows, the
    input padded explicitly (concat); grouped convolutions keep their groups."""
    torch.manual_seed(1)
    model, x = _Depthwise(pads).eval(), torch.randn(3, 4, size, size)
    imp = interop.from_torch(torch.export.export(model, (x,)))
    convs = [n for n in imp.graph.nodes if n.op == "conv2d"]
    assert [n.attrs["groups"] for n in convs] == [4, 2, 1]
    assert ("concat" in _ops(imp)) == explicit
    assert_matches_autograd(imp, model, x)


def test_grouped_convolution_verifies() -> None:
    torch.manual_seed(2)
    model, x = _Depthwise((0, 1, 0, 1)).eval(), torch.randn(2, 4, 5, 5)
    imp = interop.from_torch(torch.export.export(model, (x,)))
    report = verify.verify_graph(imp.graph)
    assert report.verdict == "verified", report.summary()


class _Pads(nn.Module):
    def __init__(self, **kw: Any) -> None:
        super().__init__()
        self.kw = kw

    def forward(self, x: Any) -> Any:
        return F.pad(x, (1, 2), **self.kw) * 2


def test_constant_pad_and_refused_modes() -> None:
    x = torch.randn(2, 3, 4)
    imp = interop.from_torch(torch.export.export(_Pads(value=1.5), (x,)))
    cg = compiler.compile(imp.graph).batched(over=imp.batched)
    want = _Pads(value=1.5)(x).numpy()
    assert np.abs(cg.forward({"x": x.numpy()}) - want).max() < 1e-6
    with pytest.raises(interop.InteropError, match=r"node pad \(aten\.pad\).*pad mode 'reflect'"):
        interop.from_torch(torch.export.export(_Pads(mode="reflect"), (x,)))


class _ClassToken(nn.Module):
    """ViT's embedding: a class token expanded to the batch, concatenated with the patches."""

    def __init__(self, d: int = 4) -> None:
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 4, d))
        self.fc = nn.Linear(d, 2)

    def forward(self, x: Any) -> Any:
        tokens = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)
        return self.fc(tokens + self.pos)


def test_parameter_expanded_to_the_batch_and_concatenated() -> None:
    torch.manual_seed(3)
    model, x = _ClassToken(), torch.randn(3, 3, 4)
    imp = interop.from_torch(torch.export.export(model, (x,)))
    assert_matches_autograd(imp, model, x)


class _MaskFromArange(nn.Module):
    def forward(self, x: Any) -> Any:
        keep = torch.arange(x.shape[-1]) >= 0  # all true: folded at import
        return torch.where(keep, x, torch.zeros_like(x)) * 2


class _RuntimeCompare(nn.Module):
    def forward(self, x: Any) -> Any:
        return x * (x > 0) + torch.where(x <= 0.5, x * x, x)


class _RuntimeAnd(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.where((x > 0) & (x < 1), x, x * 2)


def test_comparisons_fold_when_known_step_or_refuse_runtime_values() -> None:
    """Known comparisons fold; a runtime one read as a 0/1 factor or as where's condition is a
    step (the values and gradients PyTorch gives, per sample); read otherwise (``&``), it is
    refused with the op named."""
    x = torch.randn(2, 3)
    imp = interop.from_torch(torch.export.export(_MaskFromArange(), (x,)))
    assert _ops(imp) == ["scale"]
    model = _RuntimeCompare()
    imp = interop.from_torch(torch.export.export(model, (x,)))
    assert "step" in _ops(imp)
    cg = compiler.compile(imp.graph).batched(over=imp.batched)
    x[0, :2] = torch.tensor([0.0, 0.5])  # the ties
    (xname,) = imp.batched
    got = np.asarray(cg.forward({**imp.params, xname: x.numpy()}))
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
    with pytest.raises(interop.InteropError, match=r"aten.gt .*: comparisons of runtime floats"):
        interop.from_torch(torch.export.export(_RuntimeAnd(), (x,)))


class _ConvBN(nn.Module):
    """The Conv + BN model of docs/interop.md."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 3)

    def forward(self, x: Any) -> Any:
        return self.fc(torch.flatten(torch.relu(self.bn(self.conv(x))), 1))


def _round_trip(program: Any) -> Any:
    buf = io.BytesIO()
    torch.export.save(program, buf)
    buf.seek(0)
    return torch.export.load(buf)


def test_decomposed_batch_norm_after_a_pt2_round_trip() -> None:
    """A loaded core-ATen program reads the unused statistics outputs of
    ``_native_batch_norm_legit_no_training`` (getitem nodes): only a use of one is refused."""
    torch.manual_seed(0)
    model, x = _ConvBN().eval(), torch.randn(8, 1, 6, 6)
    program = torch.export.export(model, (x,)).run_decompositions()
    loaded = _round_trip(program)
    assert sum(n.target.__name__ == "getitem" for n in loaded.graph.nodes
               if n.op == "call_function" and hasattr(n.target, "__name__")) == 3  # fmt: skip
    imp = interop.from_torch(loaded)
    assert imp.graph == interop.from_torch(program).graph
    assert_matches_autograd(imp, model, x)


@dataclasses.dataclass
class _Output:
    logits: Any
    hidden: Any


class _WithContainer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: Any) -> Any:
        return _Output(self.fc(x), x)


def test_pt2_whose_output_class_this_process_has_not_registered(tmp_path: Any) -> None:
    """A library's output class (``transformers``' ``ImageClassifierOutput``) is registered
    with torch's pytree only where that library is imported: the archive is read with the
    container as a plain dict, and the graph's outputs are the same."""
    import torch.utils._pytree as pytree

    pytree.register_dataclass(_Output, serialized_type_name="tests.vision._Output")
    try:
        x = torch.randn(2, 3)
        program = torch.export.export(_WithContainer(), (x,))
        path = tmp_path / "m.pt2"
        torch.export.save(program, str(path))
    finally:
        pytree._deregister_pytree_node(_Output)
    with pytest.raises(RuntimeError, match="error when deserializing"):
        torch.export.load(str(path))  # torch alone: the class is not registered here
    loaded = load_pt2(str(path))
    imp = interop.from_torch(loaded)
    assert imp.outputs == ("linear", "x")
    assert imp.graph == interop.from_torch(program).graph
