"""MLP regression loss: a two-layer tanh MLP and the mean squared error against a target.

    pred = W2 tanh(W1 x + b1) + b2,   loss = mean((pred - y)^2)

Writes ``examples/graphs/mlp_regression.json`` (``python3 examples/mlp_regression.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from _write import write_example  # examples/_write.py (the script's directory is on sys.path)

import torchlean_ir as tl

IN, HIDDEN, OUT = 4, 16, 2


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (IN,))
    y = b.input("y", (OUT,))
    W1 = b.param("layer1.weight", (HIDDEN, IN))
    b1 = b.param("layer1.bias", (HIDDEN,))
    W2 = b.param("layer2.weight", (OUT, HIDDEN))
    b2 = b.param("layer2.bias", (OUT,))
    h = b.linear(W1, b1, x).tanh()
    pred = b.linear(W2, b2, h)
    return b.build(b.mse_loss(pred, y))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("mlp_regression", build, __doc__ or "", argv)


if __name__ == "__main__":
    main()
