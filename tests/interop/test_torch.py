"""PyTorch models in: ``from_torch(torch.export.export(model, (batch,)))``.

Each model is defined here with ``torch.nn`` (nobody here wrote its numbers): an MLP, LeNet-5, a
small CNN with batch norm, and ``torch.nn.TransformerEncoderLayer`` in eval mode and in train
mode with dropout off. Each is exported as recorded and after ``run_decompositions()`` (core
ATen), imported, and compared with PyTorch on the same batch: the forward, and the gradients of
every parameter for a random output cotangent (torch.autograd against our compiled tape, the
batch summed). Float32 tolerances: forward within 1e-5, gradients within 1e-4, of the largest
magnitude of each compared tensor (measured 2026-11-23: at most 5e-7 and 3e-6). Then each
imported graph verifies (``verify.verify_graph``) on a small-shaped instance of the same
architecture (the verifier's cost grows with convolution and pooling windows; LeNet-5 at 12x12
with 1 and 2 channels verifies in about 16 s).
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
from torchlean_ir import interop  # noqa: E402

verify = pytest.importorskip("verify")


class MLP(nn.Module):
    def __init__(self, d_in: int = 6, hidden: int = 16, d_out: int = 3) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: Any) -> Any:
        return self.fc2(torch.tanh(self.fc1(x)))


class LeNet5(nn.Module):
    """LeNet-5 (padded 5x5 convs, 2x2 pools, three linear layers); the sizes are parameters so
    that the verification can run a small instance of the same architecture."""

    def __init__(self, side: int = 28, ch: tuple[int, int] = (6, 16), fc=(120, 84)) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, ch[0], 5, padding=2)
        self.conv2 = nn.Conv2d(ch[0], ch[1], 5)
        flat = ch[1] * ((side // 2 - 4) // 2) ** 2
        self.fc1 = nn.Linear(flat, fc[0])
        self.fc2 = nn.Linear(fc[0], fc[1])
        self.fc3 = nn.Linear(fc[1], 10)

    def forward(self, x: Any) -> Any:
        x = F.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = F.avg_pool2d(torch.tanh(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class SmallCNN(nn.Module):
    def __init__(self, c_in: int = 3, ch: int = 8, classes: int = 5) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, ch, 3, padding=1)
        self.bn = nn.BatchNorm2d(ch)
        self.fc = nn.Linear(ch, classes)
        with torch.no_grad():  # statistics that are not the identity
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)

    def forward(self, x: Any) -> Any:
        x = torch.relu(self.bn(self.conv(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _encoder(d: int, heads: int, ff: int, train: bool) -> Any:
    m = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, batch_first=True)
    return m.train() if train else m.eval()


def _models() -> dict[str, tuple[Any, Any]]:
    torch.manual_seed(0)
    return {
        "mlp": (MLP(), torch.randn(4, 6)),
        "lenet5": (LeNet5(), torch.randn(3, 1, 28, 28)),
        "cnn-bn": (SmallCNN().eval(), torch.randn(3, 3, 8, 8)),
        "encoder-eval": (_encoder(16, 4, 32, train=False), torch.randn(3, 5, 16)),
        "encoder-train": (_encoder(16, 4, 32, train=True), torch.randn(3, 5, 16)),
    }


#: Small-shaped instances of the same architectures, for the verifier.
def _small_models() -> dict[str, tuple[Any, Any]]:
    torch.manual_seed(1)
    return {
        "mlp": (MLP(4, 6, 3), torch.randn(2, 4)),
        "lenet5": (LeNet5(12, (1, 2), (4, 3)), torch.randn(2, 1, 12, 12)),
        "cnn-bn": (SmallCNN(2, 3, 2).eval(), torch.randn(2, 2, 4, 4)),
        "encoder-eval": (_encoder(4, 2, 6, train=False), torch.randn(2, 3, 4)),
        "encoder-train": (_encoder(4, 2, 6, train=True), torch.randn(2, 3, 4)),
    }


def _rel(a: Any, b: Any) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("decomposed", [False, True], ids=["as-exported", "core-aten"])
@pytest.mark.parametrize("name", list(_models()))
def test_forward_and_gradients_match_torch(name: str, decomposed: bool) -> None:
    model, x = _models()[name]
    program = torch.export.export(model, (x,))
    if decomposed:
        program = program.run_decompositions()
    imp = interop.from_torch(program)
    # leaves are named after the state dict; buffers (running statistics) are frozen
    names = dict(model.named_parameters())
    assert set(names) <= set(imp.params)
    for leaf in imp.graph.leaves:
        if leaf.kind == "param":
            assert leaf.requires_grad == (leaf.name in names), leaf
    assert_matches_autograd(imp, model, x)


def assert_matches_autograd(imp: Any, model: Any, x: Any) -> None:
    """The compiled forward of an imported module (one batched input ``x``) within 1e-5 of
    PyTorch's, and its VJP for a random cotangent within 1e-4 of autograd's for every
    parameter."""
    names = dict(model.named_parameters())
    (xname,) = imp.batched
    cg = compiler.compile(imp.graph).batched(over=imp.batched, grads="sum")
    out = model(x)
    ct = torch.randn_like(out)
    want = torch.autograd.grad(out, list(names.values()), ct)
    got, grads = cg.value_and_vjp({**imp.params, xname: x.numpy()}, ct.numpy())
    assert _rel(got, out.detach().numpy()) < 1e-5
    for pname, g in zip(names, want, strict=True):
        assert _rel(grads[pname], g.numpy()) < 1e-4, pname


@pytest.mark.parametrize("name", [n for n in _small_models() if n != "encoder-train"])
def test_imported_model_verifies(name: str) -> None:
    model, x = _small_models()[name]
    imp = interop.from_torch(torch.export.export(model, (x,)))
    report = verify.verify_graph(imp.graph)
    assert report.verdict == "verified", report.summary()


def test_encoder_in_train_mode_without_dropout_is_the_eval_graph() -> None:
    """So the eval-mode verification covers it (dropout p = 0 is the identity in both)."""
    model, x = _small_models()["encoder-train"]
    train = interop.from_torch(torch.export.export(model.train(), (x,)))
    evaluated = interop.from_torch(torch.export.export(model.eval(), (x,)))
    assert train.graph == evaluated.graph


class _TokenClassifier(nn.Module):
    """Embedding, causal attention and a per-sample cross-entropy with integer labels."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.qkv = nn.Linear(8, 24)
        self.head = nn.Linear(8, 4)

    def forward(self, tokens: Any, labels: Any) -> Any:
        h = self.emb(tokens)  # (N, S, 8)
        q, k, v = self.qkv(h).chunk(3, dim=-1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.head(a.mean(dim=1))  # (N, 4)
        return F.cross_entropy(logits, labels, reduction="none")


def test_embedding_causal_attention_and_cross_entropy() -> None:
    torch.manual_seed(2)
    model = _TokenClassifier()
    tokens = torch.randint(0, 11, (3, 5))
    labels = torch.randint(0, 4, (3,))
    imp = interop.from_torch(torch.export.export(model, (tokens, labels)))
    assert [ix.name for ix in imp.graph.index_inputs] == ["tokens", "labels"]
    cg = compiler.compile(imp.graph).batched(over=imp.batched, grads="sum")
    loss = model(tokens, labels)
    params = dict(model.named_parameters())
    want = torch.autograd.grad(loss.sum(), list(params.values()))
    got, grads = cg.value_and_vjp(
        imp.params, np.ones(3, np.float32), {"tokens": tokens.numpy(), "labels": labels.numpy()}
    )
    assert _rel(got, loss.detach().numpy()) < 1e-5
    for (pname, _), g in zip(params.items(), want, strict=True):
        assert _rel(grads[pname], g.numpy()) < 1e-4, pname


class _Cumsum(nn.Module):
    def forward(self, x: Any) -> Any:
        return torch.cumsum(x, dim=1)  # the line the error names


def test_unsupported_op_is_refused_with_op_node_and_source_line() -> None:
    program = torch.export.export(_Cumsum(), (torch.randn(2, 3),))
    with pytest.raises(interop.InteropError) as e:
        interop.from_torch(program)
    msg = str(e.value)
    line = _Cumsum.forward.__code__.co_firstlineno + 1
    assert msg == (
        f"from_torch: node cumsum (aten.cumsum) at test_torch.py:{line}: ATen op aten.cumsum "
        "is not supported: no mapping to our ops; hint: not supported yet (docs/interop.md "
        "lists the ATen ops that import)"
    )


@pytest.mark.parametrize("decomposed", [False, True], ids=["as-exported", "core-aten"])
def test_training_mode_batch_norm_is_refused(decomposed: bool) -> None:
    """Its running statistics are updated as a side effect (in place as exported, as buffer
    mutations in core ATen)."""
    program = torch.export.export(SmallCNN().train(), (torch.randn(2, 3, 8, 8),))
    if decomposed:
        program = program.run_decompositions()
    with pytest.raises(interop.InteropError) as e:
        interop.from_torch(program)
    want = (
        "updates 'bn.running_mean' (buffer_mutation)"
        if decomposed
        else "updates 'bn.num_batches_tracked' in place"
    )
    assert want in str(e.value) and "export the model in eval mode" in str(e.value)


class _BatchStats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(3, track_running_stats=False)

    def forward(self, x: Any) -> Any:
        return self.bn(x)


def test_training_mode_batch_norm_without_running_stats() -> None:
    """Batch statistics mix samples: refused per sample, imported with batch_axis=None (the
    whole batch one sample) and equal to PyTorch there."""
    torch.manual_seed(3)
    model = _BatchStats().train()
    x = torch.randn(4, 3, 5, 5)
    program = torch.export.export(model, (x,))
    with pytest.raises(interop.InteropError, match="batch statistics mix the samples"):
        interop.from_torch(program)
    imp = interop.from_torch(program, batch_axis=None)
    assert imp.batched == ()
    (got,) = tl.eval_graph(imp.graph, {**imp.params, "x": x.numpy()})
    assert _rel(got, model(x).detach().numpy()) < 1e-5


def test_not_a_program_and_bad_batched_name() -> None:
    with pytest.raises(interop.InteropError, match=r"expected a torch\.export\.ExportedProgram"):
        interop.from_torch(MLP())
    program = torch.export.export(MLP(), (torch.randn(2, 6),))
    with pytest.raises(interop.InteropError, match="batched: no user input named 'y'"):
        interop.from_torch(program, batched=["y"])


def test_torchlean_ir_imports_without_torch() -> None:
    """torch is an optional extra: the package, the interop module and the ONNX functions work
    without it, and from_torch says what to install."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import torchlean_ir, compiler, verify\n"
        "from torchlean_ir import interop\n"
        "b = torchlean_ir.GraphBuilder(); x = b.input('x', (2,))\n"
        "m = interop.to_onnx(b.build(b.relu(x)))\n"
        "assert interop.from_onnx(m).graph.nodes[0].op == 'relu'\n"
        "try:\n"
        "    interop.from_torch(object())\n"
        "except interop.InteropError as e:\n"
        "    print(e)\n"
        "assert 'torch' not in [k for k, v in sys.modules.items() if v is not None]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        "from_torch: needs PyTorch, an optional extra: pip install 'torchlean-ir[torch]'"
    )
