"""The models of the compiler benchmarks, each three ways on the same parameters and data:

* a torchlean-ir graph of one sample, compiled and batched by ``compiler`` (``batched(over=
  inputs, grads="mean")``);
* a hand-written batched ``jax.numpy`` loss (the way one writes it in JAX directly);
* a PyTorch (eager) loss, for the training-step comparison.

MLP: 784-256-256-10 with ReLU and a softmax cross-entropy on an index label, batch 64.
CNN: conv 3x3 (1->8, pad 1), ReLU, 2x2 max pool, conv 3x3 (8->16, pad 1), ReLU, 2x2 max pool,
linear 784->10, softmax cross-entropy; 28x28 inputs, batch 64 (needs the ``conv2d`` op).
Attention: the example pre-norm single-head attention block (layer norm, Q/K/V/O projections,
softmax, residual, mean squared error), sequence 32, width 64, batch 32.
LeNet-5: conv 5x5 (1->6, pad 2), ReLU, 2x2 max pool, conv 5x5 (6->16), ReLU, 2x2 max pool,
linear 400->120, ReLU, 84, ReLU, 10, softmax cross-entropy; 28x28 inputs, batch 64.
Transformer block: pre-norm, ``x + MHA(LN(x))`` (4 heads, the ``multi_head_attention`` op) then
``+ fc2(GELU(fc1(LN(.))))`` (width 64, MLP 256, tanh-approximated GELU), mean squared error
against a target; sequence 32, batch 32.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import torchlean_ir as tl  # noqa: E402


@dataclass(frozen=True)
class Bench:
    """One model: its graph, the names batched over, parameters and a batch of data (NumPy
    float32 / int), the hand-written JAX loss and the PyTorch loss."""

    name: str
    graph: tl.GraphData
    over: tuple[str, ...]
    params: dict[str, np.ndarray]
    data: dict[str, np.ndarray]  # batched float leaves
    index: dict[str, np.ndarray]  # batched index inputs
    jax_loss: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], Any]
    torch_loss: Callable[[dict[str, Any], dict[str, Any], dict[str, Any]], Any]
    available: bool = True
    why_not: str = ""


def _ln_jax(x: Any, g: Any, bias: Any) -> Any:
    """Layer norm over the last axis (eps 1e-5), as the hand-written JAX losses write it."""
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + bias


def _nll_jax(logits: Any, labels: Any) -> Any:
    lp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))


# -- MLP -------------------------------------------------------------------------------------

MLP_DIMS = (784, 256, 256, 10)


def mlp(batch: int = 64, seed: int = 0, dims: tuple[int, ...] | None = None) -> Bench:
    dims = MLP_DIMS if dims is None else tuple(dims)
    layers = len(dims) - 1
    b = tl.GraphBuilder("f32")
    x = b.input("x", (dims[0],))
    label = b.index("label")
    h = x
    for k, (i, o) in enumerate(itertools.pairwise(dims)):
        h = b.linear(b.param(f"W{k}", (o, i)), b.param(f"b{k}", (o,)), h)
        if k < layers - 1:
            h = h.relu()
    g = b.build(-b.gather_scalar_nat(b.log_softmax(h), label))
    rng = np.random.default_rng(seed)
    params: dict[str, np.ndarray] = {}
    for k, (i, o) in enumerate(itertools.pairwise(dims)):
        params[f"W{k}"] = (rng.normal(size=(o, i)) / math.sqrt(i)).astype(np.float32)
        params[f"b{k}"] = np.zeros(o, np.float32)
    data = {"x": rng.normal(size=(batch, dims[0])).astype(np.float32)}
    index = {"label": rng.integers(0, dims[-1], size=batch).astype(np.int32)}

    def jax_loss(p: dict, d: dict, i: dict) -> Any:
        h = d["x"]
        for k in range(layers):
            h = h @ p[f"W{k}"].T + p[f"b{k}"]
            if k < layers - 1:
                h = jax.nn.relu(h)
        return _nll_jax(h, i["label"])

    def torch_loss(p: dict, d: dict, i: dict) -> Any:
        import torch

        h = d["x"]
        for k in range(layers):
            h = torch.nn.functional.linear(h, p[f"W{k}"], p[f"b{k}"])
            if k < layers - 1:
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, i["label"])

    return Bench(f"MLP {'-'.join(map(str, dims))}", g, ("x", "label"), params, data, index,
                 jax_loss, torch_loss)  # fmt: skip


# -- CNN -------------------------------------------------------------------------------------


def cnn(batch: int = 64, seed: int = 0) -> Bench:
    name = "CNN (2 conv + pool, 28x28)"
    if not tl.has_op("conv2d") or not tl.has_op("max_pool2d"):
        return Bench(name, None, (), {}, {}, {}, None, None, False,  # type: ignore[arg-type]
                     "the conv2d / max_pool2d ops are not in this checkout")  # fmt: skip
    b = tl.GraphBuilder("f32")
    x = b.input("x", (1, 28, 28))
    label = b.index("label")
    h = b.conv2d(b.param("c1.W", (8, 1, 3, 3)), b.param("c1.b", (8,)), x, padding=1).relu()
    h = b.max_pool2d(h, kernel=(2, 2), stride=2)
    h = b.conv2d(b.param("c2.W", (16, 8, 3, 3)), b.param("c2.b", (16,)), h, padding=1).relu()
    h = b.max_pool2d(h, kernel=(2, 2), stride=2)
    logits = b.linear(b.param("fc.W", (10, 16 * 7 * 7)), b.param("fc.b", (10,)), b.flatten(h))
    g = b.build(-b.gather_scalar_nat(b.log_softmax(logits), label))
    rng = np.random.default_rng(seed)
    params = {
        "c1.W": (rng.normal(size=(8, 1, 3, 3)) / 3).astype(np.float32),
        "c1.b": np.zeros(8, np.float32),
        "c2.W": (rng.normal(size=(16, 8, 3, 3)) / math.sqrt(72)).astype(np.float32),
        "c2.b": np.zeros(16, np.float32),
        "fc.W": (rng.normal(size=(10, 784)) / 28).astype(np.float32),
        "fc.b": np.zeros(10, np.float32),
    }
    data = {"x": rng.normal(size=(batch, 1, 28, 28)).astype(np.float32)}
    index = {"label": rng.integers(0, 10, size=batch).astype(np.int32)}
    dn = ("NCHW", "OIHW", "NCHW")

    def jax_loss(p: dict, d: dict, i: dict) -> Any:
        def conv(h: Any, W: Any, bias: Any) -> Any:
            out = jax.lax.conv_general_dilated(h, W, (1, 1), ((1, 1), (1, 1)),
                                               dimension_numbers=dn)  # fmt: skip
            return jax.nn.relu(out + bias[None, :, None, None])

        def pool(h: Any) -> Any:
            return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                         "VALID")  # fmt: skip

        h = pool(conv(d["x"], p["c1.W"], p["c1.b"]))
        h = pool(conv(h, p["c2.W"], p["c2.b"]))
        logits = h.reshape(h.shape[0], -1) @ p["fc.W"].T + p["fc.b"]
        return _nll_jax(logits, i["label"])

    def torch_loss(p: dict, d: dict, i: dict) -> Any:
        import torch

        F = torch.nn.functional
        h = F.max_pool2d(F.relu(F.conv2d(d["x"], p["c1.W"], p["c1.b"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["c2.W"], p["c2.b"], padding=1)), 2)
        return F.cross_entropy(F.linear(h.flatten(1), p["fc.W"], p["fc.b"]), i["label"])

    return Bench(name, g, ("x", "label"), params, data, index, jax_loss, torch_loss)


# -- attention block -------------------------------------------------------------------------

ATT_SEQ, ATT_DIM = 32, 64


def attention(batch: int = 32, seed: int = 0) -> Bench:
    n, d = ATT_SEQ, ATT_DIM
    b = tl.GraphBuilder("f32")
    x = b.input("x", (n, d))
    target = b.input("target", (n, d))
    gamma, beta = b.param("gamma", (d,)), b.param("beta", (d,))
    Wq, Wk, Wv, Wo = (b.param(f"W{c}", (d, d)) for c in "qkvo")
    h = b.layer_norm(x, gamma, beta, eps=1e-5)
    q, k, v = h @ Wq, h @ Wk, h @ Wv
    a = b.softmax((q @ b.transpose2d(k)) * (1 / math.sqrt(d)))
    g = b.build(b.mse_loss(x + (a @ v) @ Wo, target))
    rng = np.random.default_rng(seed)
    params = {"gamma": np.ones(d, np.float32), "beta": np.zeros(d, np.float32)}
    for c in "qkvo":
        params[f"W{c}"] = (rng.normal(size=(d, d)) / math.sqrt(d)).astype(np.float32)
    data = {
        "x": rng.normal(size=(batch, n, d)).astype(np.float32),
        "target": rng.normal(size=(batch, n, d)).astype(np.float32),
    }

    def jax_loss(p: dict, dd: dict, i: dict) -> Any:
        x = dd["x"]
        mu = jnp.mean(x, -1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
        h = (x - mu) * jax.lax.rsqrt(var + 1e-5) * p["gamma"] + p["beta"]
        q, k, v = h @ p["Wq"], h @ p["Wk"], h @ p["Wv"]
        a = jax.nn.softmax(q @ jnp.swapaxes(k, 1, 2) / math.sqrt(d), axis=-1)
        y = x + (a @ v) @ p["Wo"]
        return jnp.mean((y - dd["target"]) ** 2)

    def torch_loss(p: dict, dd: dict, i: dict) -> Any:
        import torch

        F = torch.nn.functional
        x = dd["x"]
        h = F.layer_norm(x, (d,), p["gamma"], p["beta"], eps=1e-5)
        q, k, v = h @ p["Wq"], h @ p["Wk"], h @ p["Wv"]
        a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)
        return F.mse_loss(x + (a @ v) @ p["Wo"], dd["target"])

    return Bench(f"Attention block (seq {n}, width {d})", g, ("x", "target"), params, data, {},
                 jax_loss, torch_loss)  # fmt: skip


# -- LeNet-5 ---------------------------------------------------------------------------------


def lenet5(batch: int = 64, seed: int = 0) -> Bench:
    name = "LeNet-5 (28x28)"
    if not tl.has_op("conv2d") or not tl.has_op("max_pool2d"):
        return Bench(name, None, (), {}, {}, {}, None, None, False,  # type: ignore[arg-type]
                     "the conv2d / max_pool2d ops are not in this checkout")  # fmt: skip
    b = tl.GraphBuilder("f32")
    x = b.input("x", (1, 28, 28))
    label = b.index("label")
    h = b.conv2d(b.param("c1.W", (6, 1, 5, 5)), b.param("c1.b", (6,)), x, padding=2).relu()
    h = b.max_pool2d(h, kernel=(2, 2), stride=2)
    h = b.conv2d(b.param("c2.W", (16, 6, 5, 5)), b.param("c2.b", (16,)), h).relu()
    h = b.flatten(b.max_pool2d(h, kernel=(2, 2), stride=2))
    dims = ((400, 120), (120, 84), (84, 10))
    for k, (i, o) in enumerate(dims):
        h = b.linear(b.param(f"f{k}.W", (o, i)), b.param(f"f{k}.b", (o,)), h)
        if k < 2:
            h = h.relu()
    g = b.build(-b.gather_scalar_nat(b.log_softmax(h), label))
    rng = np.random.default_rng(seed)
    params = {
        "c1.W": (rng.normal(size=(6, 1, 5, 5)) / 5).astype(np.float32),
        "c1.b": np.zeros(6, np.float32),
        "c2.W": (rng.normal(size=(16, 6, 5, 5)) / math.sqrt(150)).astype(np.float32),
        "c2.b": np.zeros(16, np.float32),
    }
    for k, (i, o) in enumerate(dims):
        params[f"f{k}.W"] = (rng.normal(size=(o, i)) / math.sqrt(i)).astype(np.float32)
        params[f"f{k}.b"] = np.zeros(o, np.float32)
    data = {"x": rng.normal(size=(batch, 1, 28, 28)).astype(np.float32)}
    index = {"label": rng.integers(0, 10, size=batch).astype(np.int32)}
    dn = ("NCHW", "OIHW", "NCHW")

    def jax_loss(p: dict, d: dict, i: dict) -> Any:
        def conv(h: Any, W: Any, bias: Any, pad: int) -> Any:
            out = jax.lax.conv_general_dilated(h, W, (1, 1), ((pad, pad), (pad, pad)),
                                               dimension_numbers=dn)  # fmt: skip
            return jax.nn.relu(out + bias[None, :, None, None])

        def pool(h: Any) -> Any:
            return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2),
                                         "VALID")  # fmt: skip

        h = pool(conv(d["x"], p["c1.W"], p["c1.b"], 2))
        h = pool(conv(h, p["c2.W"], p["c2.b"], 0)).reshape(d["x"].shape[0], -1)
        for k in range(3):
            h = h @ p[f"f{k}.W"].T + p[f"f{k}.b"]
            if k < 2:
                h = jax.nn.relu(h)
        return _nll_jax(h, i["label"])

    def torch_loss(p: dict, d: dict, i: dict) -> Any:
        import torch

        F = torch.nn.functional
        h = F.max_pool2d(F.relu(F.conv2d(d["x"], p["c1.W"], p["c1.b"], padding=2)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["c2.W"], p["c2.b"])), 2).flatten(1)
        for k in range(3):
            h = F.linear(h, p[f"f{k}.W"], p[f"f{k}.b"])
            if k < 2:
                h = F.relu(h)
        return F.cross_entropy(h, i["label"])

    return Bench(name, g, ("x", "label"), params, data, index, jax_loss, torch_loss)


# -- transformer block -----------------------------------------------------------------------

TF_SEQ, TF_DIM, TF_HEADS, TF_FF = 32, 64, 4, 256


def transformer(
    batch: int = 32,
    seed: int = 0,
    *,
    seq: int | None = None,
    dim: int | None = None,
    heads: int | None = None,
    ff: int | None = None,
) -> Bench:
    """The transformer block; ``seq``, ``dim``, ``heads``, ``ff`` default to the ``TF_*``
    constants."""
    n = TF_SEQ if seq is None else seq
    d = TF_DIM if dim is None else dim
    H = TF_HEADS if heads is None else heads
    ff = TF_FF if ff is None else ff
    shapes = _transformer_shapes(d, ff)
    b = tl.GraphBuilder("f32")
    x = b.input("x", (n, d))
    target = b.input("target", (n, d))
    P = {k: b.param(k, s) for k, s in shapes.items()}

    def dense(h: Any, W: str, bias: str) -> Any:  # (n, in) @ (in, out) + bias
        return h @ P[W] + b.broadcast_to(P[bias], shape=(n, P[W].type.shape[1]))

    h = b.layer_norm(x, P["ln1.g"], P["ln1.b"], eps=1e-5)
    x2 = x + b.multi_head_attention(P["Wq"], P["Wk"], P["Wv"], P["Wo"], h, heads=H)
    h = dense(b.layer_norm(x2, P["ln2.g"], P["ln2.b"], eps=1e-5), "W1", "b1")
    cube = h * h * h
    h = h * b.sigmoid(b.scale(h + b.scale(cube, c=0.044715), c=2.0 * math.sqrt(2.0 / math.pi)))
    g = b.build(b.mse_loss(x2 + dense(h, "W2", "b2"), target))
    rng = np.random.default_rng(seed)
    params = {}
    for k, s in shapes.items():
        if k.endswith(".g"):
            params[k] = np.ones(s, np.float32)
        elif len(s) == 1:
            params[k] = np.zeros(s, np.float32)
        else:
            params[k] = (rng.normal(size=s) / math.sqrt(s[0])).astype(np.float32)
    data = {
        "x": rng.normal(size=(batch, n, d)).astype(np.float32),
        "target": rng.normal(size=(batch, n, d)).astype(np.float32),
    }

    def jax_loss(p: dict, dd: dict, i: dict) -> Any:
        x = dd["x"]
        B = x.shape[0]
        h = _ln_jax(x, p["ln1.g"], p["ln1.b"])

        def heads(m: Any) -> Any:  # (B, n, d) -> (B, H, n, d / H)
            return m.reshape(B, n, H, d // H).transpose(0, 2, 1, 3)

        q, k, v = heads(h @ p["Wq"]), heads(h @ p["Wk"]), heads(h @ p["Wv"])
        att = jax.nn.softmax(q @ jnp.swapaxes(k, -1, -2) / math.sqrt(d // H), axis=-1)
        o = (att @ v).transpose(0, 2, 1, 3).reshape(B, n, d)
        x2 = x + o @ p["Wo"]
        m = jax.nn.gelu(_ln_jax(x2, p["ln2.g"], p["ln2.b"]) @ p["W1"] + p["b1"], approximate=True)
        return jnp.mean((x2 + m @ p["W2"] + p["b2"] - dd["target"]) ** 2)

    def torch_loss(p: dict, dd: dict, i: dict) -> Any:
        import torch

        F = torch.nn.functional
        x = dd["x"]
        B = x.shape[0]
        h = F.layer_norm(x, (d,), p["ln1.g"], p["ln1.b"], eps=1e-5)

        def heads(m: Any) -> Any:
            return m.reshape(B, n, H, d // H).transpose(1, 2)

        q, k, v = heads(h @ p["Wq"]), heads(h @ p["Wk"]), heads(h @ p["Wv"])
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // H), dim=-1)
        x2 = x + (att @ v).transpose(1, 2).reshape(B, n, d) @ p["Wo"]
        m = F.gelu(F.layer_norm(x2, (d,), p["ln2.g"], p["ln2.b"], eps=1e-5) @ p["W1"] + p["b1"],
                   approximate="tanh")  # fmt: skip
        return F.mse_loss(x2 + m @ p["W2"] + p["b2"], dd["target"])

    return Bench(f"Transformer block (seq {n}, width {d}, {H} heads, MLP {ff})", g,
                 ("x", "target"), params, data, {}, jax_loss, torch_loss)  # fmt: skip


def _transformer_shapes(d: int | None = None, ff: int | None = None) -> dict[str, tuple[int, ...]]:
    d = TF_DIM if d is None else d
    ff = TF_FF if ff is None else ff
    return {
        "ln1.g": (d,), "ln1.b": (d,), "Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d),
        "ln2.g": (d,), "ln2.b": (d,), "W1": (d, ff), "b1": (ff,), "W2": (ff, d), "b2": (d,),
    }  # fmt: skip


# -- GPT-2 (full model) ----------------------------------------------------------------------

#: GPT-2 small: 12 layers, width 768, 12 heads, MLP 3072, vocabulary 50257 (sequence 256 here).
GPT2_SMALL = {"layers": 12, "dim": 768, "heads": 12, "seq": 256, "vocab": 50257}


def _gpt2_shapes(d: int, ff: int) -> dict[str, tuple[int, ...]]:
    return {
        "ln1.g": (d,), "ln1.b": (d,), "Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d),
        "bo": (d,), "ln2.g": (d,), "ln2.b": (d,), "W1": (d, ff), "b1": (ff,), "W2": (ff, d),
        "b2": (d,),
    }  # fmt: skip


def gpt2(
    batch: int = 8,
    seed: int = 0,
    *,
    layers: int = 12,
    dim: int = 768,
    heads: int = 12,
    seq: int = 256,
    vocab: int = 50257,
) -> Bench:
    """A GPT-2 language model's training loss, the same math on all three sides: token
    embeddings (rows of ``wte`` gathered by the token ids, an index input vector) plus learned
    position embeddings ``wpe`` (``seq`` rows); ``layers`` pre-LN blocks ``x + MHA(LN(x)) + bo``
    (causal mask; the ``multi_head_attention`` op has no query/key/value biases, so no side has
    them; the output projection's bias is added after it) and ``x + W2 GELU_tanh(W1 LN(x) + b1)
    + b2`` (MLP ``4 dim``); a final layer norm; the LM head tied to ``wte`` (logits ``h
    wte^T``); the mean cross-entropy of the next token over the sequence.

    Our graph describes one sequence. Its loss picks each position's label log-probability out
    of the flattened ``(seq * vocab,)`` log-softmax with ``gather_vec_nat`` at the index input
    ``target`` = ``t * vocab + label[t]`` (the IR has no per-row gather by a runtime index);
    the hand-written sides take ``labels`` directly. ``index`` holds ``tokens``, ``target`` and
    ``labels`` (each ``(batch, seq)``, int32)."""
    n, d, H, V, ff = seq, dim, heads, vocab, 4 * dim
    shapes = _gpt2_shapes(d, ff)
    causal = np.tril(np.ones((n, n), dtype=bool))
    b = tl.GraphBuilder("f32")
    tokens = b.index("tokens", n)
    target = b.index("target", n)
    wte, wpe = b.param("wte", (V, d)), b.param("wpe", (n, d))
    lnf_g, lnf_b = b.param("lnf.g", (d,)), b.param("lnf.b", (d,))

    def rows(v: Any, cols: int) -> Any:  # a bias broadcast over the sequence
        return b.broadcast_to(v, shape=(n, cols))

    x = b.gather_rows_nat(wte, tokens) + wpe
    for layer in range(layers):
        P = {k: b.param(f"h{layer}.{k}", s) for k, s in shapes.items()}
        h = b.layer_norm(x, P["ln1.g"], P["ln1.b"], eps=1e-5)
        att = b.multi_head_attention(P["Wq"], P["Wk"], P["Wv"], P["Wo"], h, heads=H, mask=causal)
        x = x + att + rows(P["bo"], d)
        h = b.layer_norm(x, P["ln2.g"], P["ln2.b"], eps=1e-5)
        h = b.gelu(h @ P["W1"] + rows(P["b1"], ff))
        x = x + h @ P["W2"] + rows(P["b2"], d)
    logits = b.layer_norm(x, lnf_g, lnf_b, eps=1e-5) @ b.transpose2d(wte)
    lp = b.flatten(b.log_softmax(logits))
    g = b.build(-b.reduce_mean(b.gather_vec_nat(lp, target), axis=0))

    rng = np.random.default_rng(seed)
    params = {
        "wte": (rng.normal(size=(V, d)) * 0.02).astype(np.float32),
        "wpe": (rng.normal(size=(n, d)) * 0.01).astype(np.float32),
        "lnf.g": np.ones(d, np.float32),
        "lnf.b": np.zeros(d, np.float32),
    }
    for layer in range(layers):
        for k, s in shapes.items():
            if k.endswith(".g"):
                v = np.ones(s, np.float32)
            elif len(s) == 1:
                v = np.zeros(s, np.float32)
            else:  # GPT-2's init: 0.02, the residual projections scaled by 1/sqrt(2 layers)
                std = 0.02 / math.sqrt(2 * layers) if k in ("Wo", "W2") else 0.02
                v = (rng.normal(size=s) * std).astype(np.float32)
            params[f"h{layer}.{k}"] = v
    text = rng.integers(0, V, size=(batch, n + 1))
    labels = text[:, 1:].astype(np.int32)
    index = {
        "tokens": text[:, :-1].astype(np.int32),
        "target": (np.arange(n, dtype=np.int64) * V + labels).astype(np.int32),
        "labels": labels,
    }
    hd = d // H

    def jax_loss(p: dict, dd: dict, i: dict) -> Any:
        tok = i["tokens"]
        B = tok.shape[0]
        x = jnp.take(p["wte"], tok, axis=0) + p["wpe"]

        def split(m: Any) -> Any:  # (B, n, d) -> (B, H, n, hd)
            return m.reshape(B, n, H, hd).transpose(0, 2, 1, 3)

        for layer in range(layers):
            q = {k: p[f"h{layer}.{k}"] for k in shapes}
            h = _ln_jax(x, q["ln1.g"], q["ln1.b"])
            Q, K, Vv = split(h @ q["Wq"]), split(h @ q["Wk"]), split(h @ q["Wv"])
            s = Q @ jnp.swapaxes(K, -1, -2) / math.sqrt(hd)
            a = jax.nn.softmax(jnp.where(causal, s, -jnp.inf), axis=-1)
            o = (a @ Vv).transpose(0, 2, 1, 3).reshape(B, n, d)
            x = x + o @ q["Wo"] + q["bo"]
            h = _ln_jax(x, q["ln2.g"], q["ln2.b"])
            x = x + jax.nn.gelu(h @ q["W1"] + q["b1"], approximate=True) @ q["W2"] + q["b2"]
        logits = _ln_jax(x, p["lnf.g"], p["lnf.b"]) @ p["wte"].T
        lp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.mean(jnp.take_along_axis(lp, i["labels"][..., None], axis=-1))

    def torch_loss(p: dict, dd: dict, i: dict) -> Any:
        import torch

        F = torch.nn.functional
        tok = i["tokens"]
        B = tok.shape[0]
        mask = torch.ones((n, n), dtype=torch.bool, device=tok.device).tril()
        x = F.embedding(tok, p["wte"]) + p["wpe"]

        def split(m: Any) -> Any:
            return m.reshape(B, n, H, hd).transpose(1, 2)

        for layer in range(layers):
            q = {k: p[f"h{layer}.{k}"] for k in shapes}
            h = F.layer_norm(x, (d,), q["ln1.g"], q["ln1.b"], eps=1e-5)
            Q, K, Vv = split(h @ q["Wq"]), split(h @ q["Wk"]), split(h @ q["Wv"])
            s = (Q @ K.transpose(-1, -2) / math.sqrt(hd)).masked_fill(~mask, float("-inf"))
            o = (torch.softmax(s, dim=-1) @ Vv).transpose(1, 2).reshape(B, n, d)
            x = x + o @ q["Wo"] + q["bo"]
            h = F.layer_norm(x, (d,), q["ln2.g"], q["ln2.b"], eps=1e-5)
            x = x + F.gelu(h @ q["W1"] + q["b1"], approximate="tanh") @ q["W2"] + q["b2"]
        logits = F.layer_norm(x, (d,), p["lnf.g"], p["lnf.b"], eps=1e-5) @ p["wte"].T
        return F.cross_entropy(logits.reshape(-1, V), i["labels"].reshape(-1).long())

    name = f"GPT-2 ({layers} layers, d {d}, {H} heads, seq {n}, vocab {V})"
    return Bench(name, g, ("tokens", "target"), params, {}, index, jax_loss, torch_loss)


MODELS: dict[str, Callable[..., Bench]] = {
    "mlp": mlp,
    "cnn": cnn,
    "attention": attention,
    "lenet5": lenet5,
    "transformer": transformer,
}


def interleaved(
    fns: dict[str, Callable[[], Any]], *, repeats: int, number: int, warmup: int = 2
) -> dict[str, float]:
    """Median seconds per call of each function, timed in alternation (round-robin over the
    functions within each repeat, so slow phases of a shared machine hit all of them)."""
    return interleaved_wall_cpu(fns, repeats=repeats, number=number, warmup=warmup)[0]


def interleaved_wall_cpu(
    fns: dict[str, Callable[[], Any]], *, repeats: int, number: int, warmup: int = 2
) -> tuple[dict[str, float], dict[str, float]]:
    """As :func:`interleaved`, and also the median CPU time of this process per call (all its
    threads: XLA's included). On a machine shared with other work, CPU time is much steadier
    than wall time: it counts the work a call does, not the time it waited for a core."""
    for fn in fns.values():
        for _ in range(warmup):
            jax.block_until_ready(fn())
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(number):
                out = fn()
            jax.block_until_ready(out)
            wall[k].append((time.perf_counter() - t0) / number)
            cpu[k].append((time.process_time() - c0) / number)
    return (
        {k: statistics.median(v) for k, v in wall.items()},
        {k: statistics.median(v) for k, v in cpu.items()},
    )


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"


def mib(n: float) -> str:
    return f"{n / 2**20:,.2f} MiB"
