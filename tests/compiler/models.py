"""The example models of the compiler tests, each three times: as a torchlean-ir graph, as an
independently hand-written ``jax.numpy`` function, and as a PyTorch function (the oracle).

They mirror ``examples/graphs/*.json`` (MLP regression, softmax classifier with an index label,
layer-norm + attention block with fan-out); the tests also iterate those files when present.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

import torchlean_ir as tl

Leaves = dict[str, np.ndarray]
Index = dict[str, Any]


@dataclass(frozen=True)
class Model:
    name: str
    build: Callable[[str], tl.GraphData]
    sample: Callable[[np.random.Generator], tuple[Leaves, Index]]
    jnp_loss: Callable[[Leaves, Index], Any]  # leaves by name -> scalar
    torch_loss: Callable[[dict[str, Any], Index], Any]  # torch tensors by name -> scalar


# -- MLP regression --------------------------------------------------------------------------

MLP_IN, MLP_HIDDEN, MLP_OUT = 4, 16, 2


def mlp_build(dtype: str = "f32") -> tl.GraphData:
    b = tl.GraphBuilder(dtype)
    x = b.input("x", (MLP_IN,))
    y = b.input("y", (MLP_OUT,))
    W1 = b.param("layer1.weight", (MLP_HIDDEN, MLP_IN))
    b1 = b.param("layer1.bias", (MLP_HIDDEN,))
    W2 = b.param("layer2.weight", (MLP_OUT, MLP_HIDDEN))
    b2 = b.param("layer2.bias", (MLP_OUT,))
    h = b.linear(W1, b1, x).tanh()
    return b.build(b.mse_loss(b.linear(W2, b2, h), y))


def mlp_params(rng: np.random.Generator) -> Leaves:
    return {
        "layer1.weight": rng.normal(size=(MLP_HIDDEN, MLP_IN)) / math.sqrt(MLP_IN),
        "layer1.bias": 0.1 * rng.normal(size=MLP_HIDDEN),
        "layer2.weight": rng.normal(size=(MLP_OUT, MLP_HIDDEN)) / math.sqrt(MLP_HIDDEN),
        "layer2.bias": 0.1 * rng.normal(size=MLP_OUT),
    }


def mlp_sample(rng: np.random.Generator) -> tuple[Leaves, Index]:
    return {
        **mlp_params(rng),
        "x": rng.normal(size=MLP_IN),
        "y": rng.normal(size=MLP_OUT),
    }, {}


def mlp_jnp(p: Leaves, index: Index) -> Any:
    h = jnp.tanh(p["layer1.weight"] @ p["x"] + p["layer1.bias"])
    pred = p["layer2.weight"] @ h + p["layer2.bias"]
    return jnp.mean((pred - p["y"]) ** 2)


def mlp_torch(p: dict[str, Any], index: Index) -> Any:
    import torch

    h = torch.tanh(p["layer1.weight"] @ p["x"] + p["layer1.bias"])
    pred = p["layer2.weight"] @ h + p["layer2.bias"]
    return torch.nn.functional.mse_loss(pred, p["y"])


# -- softmax classifier ----------------------------------------------------------------------

CLS_FEATURES, CLS_HIDDEN, CLS_CLASSES = 8, 12, 5


def classifier_build(dtype: str = "f32") -> tl.GraphData:
    b = tl.GraphBuilder(dtype)
    x = b.input("x", (CLS_FEATURES,))
    label = b.index("label")
    W1 = b.param("hidden.weight", (CLS_HIDDEN, CLS_FEATURES))
    b1 = b.param("hidden.bias", (CLS_HIDDEN,))
    W2 = b.param("out.weight", (CLS_CLASSES, CLS_HIDDEN))
    b2 = b.param("out.bias", (CLS_CLASSES,))
    logits = b.linear(W2, b2, b.linear(W1, b1, x).relu())
    return b.build(-b.gather_scalar_nat(b.log_softmax(logits), label))


def classifier_sample(rng: np.random.Generator) -> tuple[Leaves, Index]:
    return {
        "x": rng.normal(size=CLS_FEATURES),
        "hidden.weight": rng.normal(size=(CLS_HIDDEN, CLS_FEATURES)) / math.sqrt(CLS_FEATURES),
        "hidden.bias": 0.1 * rng.normal(size=CLS_HIDDEN),
        "out.weight": rng.normal(size=(CLS_CLASSES, CLS_HIDDEN)) / math.sqrt(CLS_HIDDEN),
        "out.bias": 0.1 * rng.normal(size=CLS_CLASSES),
    }, {"label": int(rng.integers(0, CLS_CLASSES))}


def classifier_jnp(p: Leaves, index: Index) -> Any:
    h = jnp.maximum(p["hidden.weight"] @ p["x"] + p["hidden.bias"], 0)
    logits = p["out.weight"] @ h + p["out.bias"]
    log_probs = logits - jnp.log(jnp.sum(jnp.exp(logits - jnp.max(logits)))) - jnp.max(logits)
    return -log_probs[index["label"]]


def classifier_torch(p: dict[str, Any], index: Index) -> Any:
    import torch

    h = torch.relu(p["hidden.weight"] @ p["x"] + p["hidden.bias"])
    logits = p["out.weight"] @ h + p["out.bias"]
    return torch.nn.functional.cross_entropy(logits[None], torch.tensor([index["label"]]))


# -- layer norm + attention with fan-out -----------------------------------------------------

ATT_SEQ, ATT_DIM = 4, 8


def attention_build(dtype: str = "f32") -> tl.GraphData:
    b = tl.GraphBuilder(dtype)
    x = b.input("x", (ATT_SEQ, ATT_DIM))
    target = b.input("target", (ATT_SEQ, ATT_DIM))
    gamma = b.param("norm.gamma", (ATT_DIM,))
    beta = b.param("norm.beta", (ATT_DIM,))
    Wq = b.param("attn.wq", (ATT_DIM, ATT_DIM))
    Wk = b.param("attn.wk", (ATT_DIM, ATT_DIM))
    Wv = b.param("attn.wv", (ATT_DIM, ATT_DIM))
    Wo = b.param("attn.wo", (ATT_DIM, ATT_DIM))
    h = b.layer_norm(x, gamma, beta, eps=1e-5)
    q, k, v = h @ Wq, h @ Wk, h @ Wv
    attn = b.softmax((q @ b.transpose2d(k)) * (1 / math.sqrt(ATT_DIM)))
    y = x + (attn @ v) @ Wo
    return b.build(b.mse_loss(y, target))


def attention_sample(rng: np.random.Generator) -> tuple[Leaves, Index]:
    d = ATT_DIM
    return {
        "x": rng.normal(size=(ATT_SEQ, d)),
        "target": rng.normal(size=(ATT_SEQ, d)),
        "norm.gamma": 1 + 0.1 * rng.normal(size=d),
        "norm.beta": 0.1 * rng.normal(size=d),
        "attn.wq": rng.normal(size=(d, d)) / math.sqrt(d),
        "attn.wk": rng.normal(size=(d, d)) / math.sqrt(d),
        "attn.wv": rng.normal(size=(d, d)) / math.sqrt(d),
        "attn.wo": rng.normal(size=(d, d)) / math.sqrt(d),
    }, {}


def attention_jnp(p: Leaves, index: Index) -> Any:
    x = p["x"]
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    h = (x - mu) / jnp.sqrt(var + 1e-5) * p["norm.gamma"] + p["norm.beta"]
    q, k, v = h @ p["attn.wq"], h @ p["attn.wk"], h @ p["attn.wv"]
    s = q @ k.T / math.sqrt(ATT_DIM)
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    a = e / jnp.sum(e, axis=-1, keepdims=True)
    y = x + (a @ v) @ p["attn.wo"]
    return jnp.mean((y - p["target"]) ** 2)


def attention_torch(p: dict[str, Any], index: Index) -> Any:
    import torch

    F = torch.nn.functional
    x = p["x"]
    h = F.layer_norm(x, (ATT_DIM,), p["norm.gamma"], p["norm.beta"], eps=1e-5)
    q, k, v = h @ p["attn.wq"], h @ p["attn.wk"], h @ p["attn.wv"]
    a = torch.softmax(q @ k.T / math.sqrt(ATT_DIM), dim=-1)
    y = x + (a @ v) @ p["attn.wo"]
    return F.mse_loss(y, p["target"])


MODELS = [
    Model("mlp_regression", mlp_build, mlp_sample, mlp_jnp, mlp_torch),
    Model(
        "softmax_classifier", classifier_build, classifier_sample, classifier_jnp, classifier_torch
    ),
    Model("attention_block", attention_build, attention_sample, attention_jnp, attention_torch),
]


def assert_close(got: Any, ref: Any, rel: float, what: str = "") -> None:
    """``|got - ref|_max <= rel * |ref|_max`` (``rel`` absolute where ``ref`` is all zeros);
    NaNs must match."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaNs differ"
    g, r = got[~nan], ref[~nan]
    if g.size == 0:
        return
    err = float(np.max(np.abs(g - r)))
    scale = float(np.max(np.abs(r))) or 1.0
    assert err <= rel * scale, f"{what}: max error {err:.3e} > {rel:.0e} x {scale:.3e}"
