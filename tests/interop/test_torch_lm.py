"""What language models need of ``from_torch``, one feature at a time, on small modules written
here: integer computations known at import time fold to constants; views of an integer input
stay index inputs; booleans of one become float masks, and its integers float data;
cross-entropy over (N, T, V) with
(N, T) targets and ``ignore_index``; a loss reduced over the batch. Each compares with PyTorch
(float32: forward within 1e-5, gradients within 1e-4, relative to the largest magnitude). The
transformers models themselves are in ``test_transformers.py``."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import compiler  # noqa: E402
from torchlean_ir import interop  # noqa: E402
from torchlean_ir.interop._files import load_pt2  # noqa: E402

N, L, V, D = 3, 6, 11, 8


def _rel(ours: Any, theirs: Any) -> float:
    theirs = np.asarray(theirs, np.float64)
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / np.abs(theirs).max())


def _index(kwargs: dict[str, Any], flat: bool = False) -> dict[str, np.ndarray]:
    return {k: (v.numpy().reshape(-1) if flat else v.numpy()) for k, v in kwargs.items()}


class _Folded(nn.Module):
    """Position ids, a causal mask, a rotary-style table: integers and booleans computed from
    shapes, which the program records op by op."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(D, D)
        self.register_buffer("freq", torch.linspace(0.1, 1.0, D), persistent=False)

    def forward(self, x: Any) -> Any:
        pos = torch.arange(x.shape[1])
        steps = torch.cumsum(torch.ones_like(pos), 0) - 1  # = pos
        causal = (steps[None, :] <= pos[:, None]) & x.new_ones((), dtype=torch.bool)
        angle = pos.float()[:, None] * self.freq
        h = self.proj(x) * torch.cos(angle) + x * torch.sin(angle)
        q = h.unsqueeze(1)
        return F.scaled_dot_product_attention(q, q, q, attn_mask=causal[None, None]).squeeze(1)


def test_integer_computations_known_at_import_time_fold_to_constants() -> None:
    torch.manual_seed(0)
    model = _Folded().eval()
    x = torch.randn(N, L, D)
    imported = interop.from_torch(torch.export.export(model, (x,)))
    graph, params = imported
    assert sorted(params) == ["proj.bias", "proj.weight"]  # the frequencies are a constant
    ops = {node.op for node in graph.nodes}
    assert ops.isdisjoint({"gather_vec_nat", "gather_rows_nat"}) and "const" in ops
    cg = compiler.compile(graph).batched(over=imported.batched, grads="sum")
    seed = np.random.default_rng(0).normal(size=(N, L, D)).astype(np.float32)
    out, grads = cg.value_and_vjp({**params, "x": x.numpy()}, seed)
    y = model(x)
    assert _rel(out, y.detach().numpy()) < 1e-5
    (gw,) = torch.autograd.grad(y, model.proj.weight, torch.from_numpy(seed))
    assert _rel(grads["proj.weight"], gw.numpy()) < 1e-4


class _Huge(nn.Module):
    def forward(self, x: Any) -> Any:
        return x + torch.arange(10**12).sum().float()  # traced with fake tensors: no memory


def test_a_fold_too_large_is_refused_before_it_runs() -> None:
    """Folding evaluates ops at import time; the size of their results is computed on the
    meta device first, so a program (hostile or not) cannot make the importer allocate it."""
    ep = torch.export.export(_Huge(), (torch.randn(N, D),))
    with pytest.raises(
        interop.InteropError, match=r"arange.* would compute 1000000000000 elements at import time"
    ):
        interop.from_torch(ep)


class _Embed(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.emb = nn.Embedding(V, D, padding_idx=0)
        self.out = nn.Linear(D, 1)

    def forward(self, ids: Any) -> Any:
        if self.how == "views":
            ids = ids.view(-1, ids.shape[-1]).unsqueeze(1).contiguous().squeeze(1).to(torch.int64)
        elif self.how == "reordered":
            ids = ids[:, [1, 0, 2, 3, 4, 5]]
        return self.out(self.emb(ids)).squeeze(-1)


def test_views_of_an_integer_input_stay_index_inputs() -> None:
    torch.manual_seed(0)
    model = _Embed("views").eval()
    ids = torch.randint(0, V, (N, L))
    ids[0, 1] = 0  # padding_idx: no gradient to that row
    imported = interop.from_torch(torch.export.export(model, (ids,)))
    graph, params = imported
    assert [ix.name for ix in graph.index_inputs] == ["ids"] and imported.batched == ("ids",)
    cg = compiler.compile(graph).batched(over=("ids",), grads="sum")
    out, grads = cg.value_and_vjp(params, np.ones((N, L), np.float32), {"ids": ids.numpy()})
    y = model(ids)
    assert _rel(out, y.detach().numpy()) < 1e-5
    (gw,) = torch.autograd.grad(y.sum(), model.emb.weight)
    assert float(np.abs(grads["emb.weight"][0]).max()) == 0.0
    assert _rel(grads["emb.weight"], gw.numpy()) < 1e-4


def test_an_index_input_out_of_order_is_refused_with_the_op() -> None:
    ids = torch.randint(0, V, (N, L))
    program = torch.export.export(_Embed("reordered").eval(), (ids,))
    with pytest.raises(interop.InteropError, match=r"\(aten.embedding\) at test_torch_lm.py:\d+: "
                       "embedding indices: one sample does not hold its integer input in "
                       "order"):  # fmt: skip
        interop.from_torch(program)


class _TokenLM(nn.Module):
    """A next-token loss written as Hugging Face writes it: the labels padded with
    ``ignore_index`` and shifted by one, logits and labels flattened."""

    def __init__(self, reduction: str = "mean", ignore_index: int = -100) -> None:
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)
        self.reduction, self.ignore_index = reduction, ignore_index

    def forward(self, ids: Any, labels: Any) -> Any:
        logits = self.head(torch.tanh(self.emb(ids)))
        shifted = F.pad(labels, (0, 1), value=self.ignore_index)[..., 1:].contiguous()
        return F.cross_entropy(
            logits.view(-1, V),
            shifted.view(-1),
            ignore_index=self.ignore_index,
            reduction=self.reduction,
        )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_over_tokens_with_ignore_index(reduction: str) -> None:
    torch.manual_seed(0)
    model = _TokenLM(reduction).eval()
    kw = {"ids": torch.randint(0, V, (N, L)), "labels": torch.randint(0, V, (N, L))}
    imported = interop.from_torch(torch.export.export(model, (), kw))
    graph, params = imported
    loss = model(**kw)
    if reduction == "none":  # one loss per token, 0 where the target is ignored
        assert imported.reductions == ("",)
        cg = compiler.compile(graph).batched(over=imported.batched, grads="sum")
        seed = np.ones((N * L,), np.float32).reshape(N, L)
        out, grads = cg.value_and_vjp(params, seed, _index(kw))
        assert out.shape == (N, L) and np.all(out[:, -1] == 0)
        assert _rel(out.reshape(-1), loss.detach().numpy()) < 1e-5
        loss = loss.sum()
    else:  # the source's loss is the mean (sum) over the batch of the sample's part
        assert imported.reductions == (reduction,)
        cg = compiler.compile(graph).batched(over=imported.batched, grads=reduction)
        out, grads = cg.value_and_vjp(params, np.ones(N, np.float32), _index(kw))
        ours = out.mean() if reduction == "mean" else out.sum()
        assert _rel(ours, loss.item()) < 1e-5
    (gw,) = torch.autograd.grad(loss, model.head.weight)
    assert _rel(grads["head.weight"], gw.numpy()) < 1e-4


def test_cross_entropy_with_the_whole_batch_as_one_sample_is_a_plain_mean() -> None:
    torch.manual_seed(1)
    model = _TokenLM().eval()
    kw = {"ids": torch.randint(0, V, (N, L)), "labels": torch.randint(0, V, (N, L))}
    imported = interop.from_torch(torch.export.export(model, (), kw), batch_axis=None)
    graph, params = imported
    assert imported.reductions == ("",) and imported.batched == ()
    assert [ix.type.shape for ix in graph.index_inputs] == [(N * L,), (N * L,)]  # row-major
    value, grads = compiler.compile(graph).value_and_grad(params, _index(kw, flat=True))
    loss = model(**kw)
    assert _rel(value, loss.item()) < 1e-5
    (gw,) = torch.autograd.grad(loss, model.head.weight)
    assert _rel(grads["head.weight"], gw.numpy()) < 1e-4


class _Classifier(nn.Module):
    def __init__(self, loss: str) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 4)
        self.loss = loss

    def forward(self, x: Any, y: Any) -> Any:
        logits = self.fc(x)
        return F.cross_entropy(logits, y, reduction=self.loss)


@pytest.mark.parametrize("loss", ["mean", "sum"])
def test_a_loss_reduced_over_the_batch_is_the_compilers_batch_reduction(loss: str) -> None:
    torch.manual_seed(0)
    model = _Classifier(loss).eval()
    x, y = torch.randn(5, D), torch.tensor([0, 3, 1, 2, 3])
    imported = interop.from_torch(torch.export.export(model, (x, y)))
    assert imported.reductions == (loss,) and imported.batched == ("x", "y")
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads=loss)
    values, grads = cg.value_and_grad({**imported.params, "x": x.numpy()}, {"y": y.numpy()})
    ref = model(x, y)
    assert _rel(values.mean() if loss == "mean" else values.sum(), ref.item()) < 1e-5
    (gw,) = torch.autograd.grad(ref, model.fc.weight)
    assert _rel(grads["fc.weight"], gw.numpy()) < 1e-4


def test_loss_in_a_batch_of_one_sample_per_model() -> None:
    """``--batch-axis none``: the same loss is a plain reduction of the whole batch."""
    model = _Classifier("mean").eval()
    x, y = torch.randn(5, D), torch.tensor([0, 3, 1, 2, 3])
    imported = interop.from_torch(torch.export.export(model, (x, y)), batch_axis=None)
    assert imported.reductions == ("",)
    value = compiler.compile(imported.graph).forward(
        {**imported.params, "x": x.numpy()}, {"y": y.numpy()}
    )
    assert _rel(value, model(x, y).item()) < 1e-5


class _Regression(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 4)

    def forward(self, x: Any, t: Any) -> Any:
        return ((torch.tanh(self.fc(x)) - t) ** 2).mean()  # of everything, the batch included


def test_a_mean_of_everything_is_the_batch_mean_of_each_samples_mean() -> None:
    torch.manual_seed(0)
    model = _Regression().eval()
    x, t = torch.randn(5, D), torch.randn(5, 4)
    imported = interop.from_torch(torch.export.export(model, (x, t)))
    assert imported.reductions == ("mean",)
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="mean")
    values, grads = cg.value_and_grad({**imported.params, "x": x.numpy(), "t": t.numpy()})
    ref = model(x, t)
    assert values.shape == (5,) and _rel(values.mean(), ref.item()) < 1e-5
    (gw,) = torch.autograd.grad(ref, model.fc.weight)
    assert _rel(grads["fc.weight"], gw.numpy()) < 1e-4


class _Refused(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 4)
        self.how = how

    def forward(self, x: Any, y: Any) -> Any:
        if self.how == "ignore0":
            return F.cross_entropy(self.fc(x), y, ignore_index=0)
        if self.how == "reused":
            loss = F.cross_entropy(self.fc(x), y)
            return loss * loss
        raise AssertionError(self.how)


@pytest.mark.parametrize(
    ("how", "message"),
    [
        (
            "ignore0",
            "a loss with ignore_index=0, which a runtime target can equal (which targets count "
            "would depend on the data); hint: use a negative ignore_index (PyTorch's default "
            "-100)",
        ),
        (
            "reused",
            "a loss reduced over the batch is used by another op (only a model output may be "
            "reduced over the batch); hint: reduce it last, or use reduction='none'",
        ),
    ],
)
def test_refusals_name_the_op_and_what_would_import(how: str, message: str) -> None:
    x, y = torch.randn(5, D), torch.tensor([0, 3, 1, 2, 3])
    program = torch.export.export(_Refused(how).eval(), (x, y))
    with pytest.raises(interop.InteropError) as e:
        interop.from_torch(program)
    assert str(e.value).endswith(message), str(e.value)
    assert "test_torch_lm.py:" in str(e.value)


def test_boolean_of_an_index_input_as_a_float_mask() -> None:
    """``mask.bool()`` of a 0/1/2 mask becomes 1 - gather_vec_nat([1], mask): exact for every
    natural (2 is True, as in PyTorch)."""

    class Masked(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(D, 1)

        def forward(self, x: Any, mask: Any) -> Any:
            return (self.fc(x).squeeze(-1) * mask.bool().float()).sum(-1)

    torch.manual_seed(0)
    model = Masked().eval()
    x, mask = torch.randn(N, L, D), torch.tensor([[1, 1, 0, 2, 0, 1]] * N)
    imported = interop.from_torch(torch.export.export(model, (x, mask)))
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="sum")
    out = cg.forward({**imported.params, "x": x.numpy()}, {"mask": mask.numpy()})
    assert _rel(out, model(x, mask).detach().numpy()) < 1e-5


class _AsFloat(nn.Module):
    """An index input used as float data: a per-sample scalar scaling a layer (``1 - y``), and
    the classic additive attention mask ``(1 - mask.float()) * finfo.min`` over a sequence."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, D)

    def forward(self, x: Any, y: Any, mask: Any) -> Any:
        h = self.fc(x) * (1 - y.float())[:, None, None]
        additive = (1.0 - mask[:, None, :].float()) * torch.finfo(torch.float32).min
        scores = h @ x.transpose(1, 2) / D**0.5 + additive
        return torch.softmax(scores, -1) @ x


def test_an_index_input_as_float_data() -> None:
    """``y.float()`` and ``mask.float()`` of integer inputs are ``nat_to_float`` /
    ``nat_vec_to_float`` (no gradient reaches an index); forward and gradients match PyTorch."""
    torch.manual_seed(0)
    model = _AsFloat().eval()
    x = torch.randn(N, L, D)
    y = torch.tensor([0, 3, 1])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * L, [1, 1, 0, 1, 1, 1]])
    imported = interop.from_torch(torch.export.export(model, (x, y, mask)))
    check_index_as_float(imported, model, (x, y, mask), "weight")


def check_index_as_float(imported: Any, model: Any, inputs: tuple, param: str) -> None:
    """``_AsFloat`` imported (from ``torch.export`` or ONNX): its integer inputs read as float
    data by ``nat_to_float`` / ``nat_vec_to_float``; forward and the gradient of ``fc.<param>``
    match PyTorch; verified, every check exact."""
    x, y, mask = inputs
    assert {"nat_to_float", "nat_vec_to_float"} <= {node.op for node in imported.graph.nodes}
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="sum")
    params = {**imported.params, "x": x.numpy()}
    index = {"y": y.numpy(), "mask": mask.numpy()}
    ref = model(x, y, mask)
    assert _rel(cg.forward(params, index), ref.detach().numpy()) < 1e-5
    ct = np.ones(ref.shape, np.float32)
    grads = cg.vjp_with_seed(params, ct, index)
    (g,) = torch.autograd.grad(ref, getattr(model.fc, param), torch.from_numpy(ct))
    assert _rel(grads[f"fc.{param}"], g.numpy()) < 1e-4
    verify = pytest.importorskip("verify")
    report = verify.verify_graph(imported.graph)
    assert report.verdict == "verified"
    assert all(c.method == "exact" for c in report.all_checks), report.summary()


@dataclasses.dataclass
class _Output:
    loss: Any
    logits: Any


class _WithOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(D, 4)

    def forward(self, x: Any) -> Any:
        logits = self.fc(x)
        return _Output(logits.sum(), logits)


def test_pt2_whose_output_type_this_process_does_not_know(tmp_path: Path) -> None:
    """transformers' output dataclasses are registered with pytree when transformers is
    imported; ``torchlean import`` does not import it: such a structure loads as a tuple."""
    import torch.utils._pytree as pytree

    torch.export.register_dataclass(_Output, serialized_type_name="tests.Output")
    try:
        program = torch.export.export(_WithOutput().eval(), (torch.randn(2, D),))
        buf = io.BytesIO()
        torch.export.save(program, buf)
    finally:
        pytree._deregister_pytree_node(_Output)
    (tmp_path / "m.pt2").write_bytes(buf.getvalue())
    imported = interop.from_torch(load_pt2(str(tmp_path / "m.pt2")))
    assert len(imported.graph.outputs) == 2 and imported.reductions == ("sum", "")
