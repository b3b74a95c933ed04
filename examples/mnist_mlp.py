"""An MNIST-size classifier: 784-256-256-10 MLP, ReLU, log_softmax and the label's
negative log-likelihood.

    h1 = relu(W1 x + b1)      (784 -> 256)
    h2 = relu(W2 h1 + b2)     (256 -> 256)
    loss = -log_softmax(W3 h2 + b3)[label]

One sample (the compiler vmaps it over a batch); ``label`` is a runtime index input, which the
verifier quantifies over every natural number. Writes ``examples/models/mnist_mlp.json``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from _write import MODELS, write_example  # examples/_write.py (on sys.path)

import torchlean_ir as tl

SIZES = (784, 256, 256, 10)


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    h = b.input("x", (SIZES[0],))
    label = b.index("label")
    layers = list(pairwise(SIZES))
    for k, (i, o) in enumerate(layers):
        h = b.linear(b.param(f"fc{k + 1}.W", (o, i)), b.param(f"fc{k + 1}.b", (o,)), h)
        if k < len(layers) - 1:
            h = h.relu()
    return b.build(-b.gather_scalar_nat(b.log_softmax(h), label))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("mnist_mlp", build, __doc__ or "", argv, out=MODELS)


if __name__ == "__main__":
    main()
