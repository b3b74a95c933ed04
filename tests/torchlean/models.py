"""Small models written once against ``Ops`` (shared by the front-end tests): each gives its
params, a loss ``loss(ops, *inputs)``, the input specs and a batch of random inputs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchlean import NatInput, Ops, ParamList, Tensor, nn


@dataclass
class Case:
    name: str
    params: ParamList
    loss: Callable[..., Tensor]
    specs: list[Any]
    batch: list[np.ndarray]

    def sample(self, k: int) -> list[Any]:
        return [b[k] for b in self.batch]


def mlp_regression(seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    model = nn.Sequential(
        nn.Linear(5, 8, rng=rng), nn.Tanh(), nn.Linear(8, 8, rng=rng), nn.GELU(),
        nn.Linear(8, 1, rng=rng),
    )  # fmt: skip

    def loss(ops: Ops, x: Tensor, y: Tensor) -> Tensor:
        return ops.mse_loss(model(ops, x), y)

    batch = [rng.normal(size=(6, 5)), rng.normal(size=(6, 1))]
    return Case("mlp", model.parameters(), loss, [(5,), (1,)], batch)


def cnn_classifier(seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, rng=rng), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 6, 3, padding=1, rng=rng), nn.SiLU(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(6 * 2 * 2, 10, rng=rng),
    )  # fmt: skip

    def loss(ops: Ops, image: Tensor, label: Any) -> Tensor:
        x = ops.reshape(image, shape=(1, 8, 8))
        return ops.cross_entropy(model(ops, x), label)

    batch = [rng.normal(size=(4, 64)), rng.integers(0, 10, size=4)]
    return Case("cnn", model.parameters(), loss, [(64,), NatInput()], batch)


def transformer(seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    n, vocab, d = 5, 6, 8
    emb = nn.Embedding(vocab, d, rng=rng)
    pos = nn.Embedding(n, d, rng=rng)
    block = nn.TransformerBlock(d, 2, 16, causal=True, rng=rng)
    head = nn.Linear(d, vocab, rng=rng)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos, self.block, self.head = emb, pos, block, head

    net = Net()

    def loss(ops: Ops, tokens: Any, positions: Any, target: Tensor) -> Tensor:
        h = ops.add(emb(ops, tokens), pos(ops, positions))
        logits = head(ops, block(ops, h))
        return ops.softmax_cross_entropy(logits, target)

    toks = rng.integers(0, vocab, size=(3, n))
    onehot = np.eye(vocab)[np.flip(toks, axis=1)]
    batch = [toks, np.tile(np.arange(n), (3, 1)), onehot]
    return Case(
        "transformer", net.parameters(), loss, [NatInput(n), NatInput(n), (n, vocab)], batch
    )


CASES = [mlp_regression, cnn_classifier, transformer]
