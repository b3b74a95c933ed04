"""Layers: naming, seeded initialisation, agreement with PyTorch's layers."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import EagerSession, GraphOps, Options, nn

F64 = Options(dtype="f64")  # float64 sessions: values compared at float64 tolerances


def _mlp(seed: int) -> nn.Module:
    g = Options(seed=seed).rng("init")
    return nn.Sequential(nn.Linear(3, 4, rng=g), nn.Tanh(), nn.Linear(4, 2, rng=g))


def test_parameters_are_named_by_path() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = _mlp(0)
            self.norm = nn.LayerNorm(2)

        def forward(self, ops, x):  # type: ignore[no-untyped-def]
            return self.norm(ops, self.body(ops, x))

    net = Net()
    assert net.parameters().names() == [
        "body.layers.0.weight",
        "body.layers.0.bias",
        "body.layers.2.weight",
        "body.layers.2.bias",
        "norm.weight",
        "norm.bias",
    ]
    g = GraphOps()
    graph = g.build(net(g, g.input(shape=(3,))))
    assert [leaf.name for leaf in graph.leaves][1:3] == [
        "body.layers.0.weight",
        "body.layers.0.bias",
    ]
    assert "Sequential" in repr(net) and "Linear(3, 4)" in repr(net)


def test_seeded_initialisation() -> None:
    a, b, c = _mlp(1).parameters(), _mlp(1).parameters(), _mlp(2).parameters()
    for p, q in zip(a, b, strict=True):
        np.testing.assert_array_equal(p.value, q.value)
    assert not np.array_equal(a[0].value, c[0].value)
    nn.manual_seed(5)
    x = nn.Linear(2, 2).weight.value
    nn.manual_seed(5)
    np.testing.assert_array_equal(x, nn.Linear(2, 2).weight.value)
    bound = 1 / np.sqrt(3)
    assert np.all(np.abs(a[0].value) <= bound)


def test_linear_layernorm_match_torch() -> None:
    torch = pytest.importorskip("torch")
    lin, ln = nn.Linear(3, 4, rng=0), nn.LayerNorm(4)
    ln.weight.value = np.arange(1.0, 5.0)
    xv = np.random.default_rng(0).normal(size=(5, 3))
    s = EagerSession(F64)
    seq = s.input(xv)
    y_seq = ln(s, lin(s, seq)).numpy()
    y_row = ln(s, lin(s, s.input(xv[1]))).numpy()
    tl_ = torch.nn.Linear(3, 4).double()
    tn = torch.nn.LayerNorm(4, eps=1e-5).double()
    with torch.no_grad():
        tl_.weight.copy_(torch.tensor(lin.weight.value))
        tl_.bias.copy_(torch.tensor(lin.bias.value))
        tn.weight.copy_(torch.tensor(ln.weight.value))
    want = tn(tl_(torch.tensor(xv))).detach().numpy()
    np.testing.assert_allclose(y_seq, want, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(y_row, want[1], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("causal", [False, True])
def test_composite_attention_matches_torch(causal: bool) -> None:
    torch = pytest.importorskip("torch")
    d, h, n = 8, 2, 5
    mha = nn.MultiHeadAttention(d, h, causal=causal, composite=True, rng=3)
    xv = np.random.default_rng(1).normal(size=(n, d))
    s = EagerSession(F64)
    y = mha(s, s.input(xv)).numpy()
    t = torch.nn.MultiheadAttention(d, h, bias=False, batch_first=True).double()
    with torch.no_grad():
        w_in = np.concatenate([mha.wq.value.T, mha.wk.value.T, mha.wv.value.T])
        t.in_proj_weight.copy_(torch.tensor(w_in))
        t.out_proj.weight.copy_(torch.tensor(mha.wo.value.T))
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), 1) if causal else None
    want, _ = t(*(torch.tensor(xv)[None],) * 3, attn_mask=mask, need_weights=False)
    np.testing.assert_allclose(y, want[0].detach().numpy(), rtol=1e-11, atol=1e-12)


def test_embedding_and_transformer_block_run_and_differentiate() -> None:
    emb = nn.Embedding(5, 8, rng=0)
    block = nn.TransformerBlock(8, 2, 16, causal=True, rng=1)
    params = emb.parameters().names() + block.parameters().names()
    assert len(params) == len(set(params))
    s = EagerSession(F64)
    tokens = s.nat_vec([1, 4, 0])
    y = block(s, emb(s, tokens))
    assert y.shape == (3, 8)
    s.backward(s.sum(s.square(y)))
    assert np.any(s.grad(s.use(emb.weight)))
    with pytest.raises(tl.TorchleanError, match="needs a nat vector"):
        emb(s, s.nat(1))


def test_activations() -> None:
    s = EagerSession(F64)
    x = s.input(np.array([-1.0, 0.5]))
    for layer, want in (
        (nn.ReLU(), [0.0, 0.5]),
        (nn.Tanh(), np.tanh([-1.0, 0.5])),
        (nn.Identity(), [-1.0, 0.5]),
        (nn.Flatten(), [-1.0, 0.5]),
    ):
        np.testing.assert_allclose(layer(s, x).numpy(), want)
    np.testing.assert_allclose(nn.SiLU()(s, x).numpy(), s.silu(x).numpy())


def test_cnn_layers_match_torch() -> None:
    torch = pytest.importorskip("torch")
    conv = nn.Conv2d(2, 3, 3, padding=1, rng=0)
    pool = nn.MaxPool2d(2)
    xv = np.random.default_rng(2).normal(size=(2, 6, 6))
    s = EagerSession(F64)
    y = nn.Flatten()(s, pool(s, nn.ReLU()(s, conv(s, s.input(xv))))).numpy()
    tc = torch.nn.Conv2d(2, 3, 3, padding=1).double()
    with torch.no_grad():
        tc.weight.copy_(torch.tensor(conv.weight.value))
        tc.bias.copy_(torch.tensor(conv.bias.value))
    want = torch.nn.functional.max_pool2d(torch.relu(tc(torch.tensor(xv)[None])), 2).flatten()
    np.testing.assert_allclose(y, want.detach().numpy(), rtol=1e-12, atol=1e-13)
    assert nn.AvgPool2d(2)(s, s.input(xv)).shape == (2, 3, 3)
    assert nn.GlobalAvgPool()(s, s.input(xv)).shape == (2,)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_op_equals_composite(causal: bool) -> None:
    if not tl.has_op("multi_head_attention"):
        pytest.skip("no multi_head_attention op")
    op_layer = nn.MultiHeadAttention(8, 2, causal=causal, rng=4)
    comp = nn.MultiHeadAttention(8, 2, causal=causal, composite=True, rng=4)
    xv = np.random.default_rng(3).normal(size=(4, 8))
    s = EagerSession(F64)
    x = s.input(xv, requires_grad=True)
    a, b = op_layer(s, x), comp(s, x)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-13)
    s.backward(s.sum(s.square(a)))
    ga = s.grad(x)
    s.backward(s.sum(s.square(b)))
    np.testing.assert_allclose(ga, s.grad(x), rtol=1e-11, atol=1e-12)


def test_dropout_layer_train_and_eval() -> None:
    model = nn.Sequential(nn.Linear(4, 4, rng=0), nn.Dropout(0.5, seed=3))
    s = EagerSession(F64)
    x = s.input(np.ones(4))
    dropped = model(s, x).numpy()
    model.eval()
    assert not model.layers[1].training
    kept = model(s, x).numpy()
    np.testing.assert_allclose(kept, nn.Linear(4, 4, rng=0)(s, x).numpy())
    assert np.all((dropped == 0) | np.isclose(dropped, 2 * kept))
    with pytest.raises(tl.TorchleanError, match=r"p must be in \[0, 1\)"):
        nn.Dropout(1.0)
