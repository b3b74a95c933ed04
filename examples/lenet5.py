"""LeNet-5 on 28x28 digits: two 5x5 convolutions (the first padded by 2) each followed by ReLU
and 2x2 max pooling, then three linear layers and the label's negative log-likelihood.

    (1, 28, 28) -conv 5x5 pad 2-> (6, 28, 28) -relu, max_pool 2x2-> (6, 14, 14)
                -conv 5x5-> (16, 10, 10) -relu, max_pool 2x2-> (16, 5, 5) -flatten-> 400
                -linear-> 120 -relu-> -linear-> 84 -relu-> -linear-> 10
    loss = -log_softmax(logits)[label]

Writes ``examples/models/lenet5.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

from _write import MODELS, write_example  # examples/_write.py (on sys.path)

import torchlean_ir as tl


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (1, 28, 28))
    label = b.index("label")
    h = b.conv2d(b.param("conv1.W", (6, 1, 5, 5)), b.param("conv1.b", (6,)), x, padding=2).relu()
    h = b.max_pool2d(h, kernel=(2, 2), stride=2)
    h = b.conv2d(b.param("conv2.W", (16, 6, 5, 5)), b.param("conv2.b", (16,)), h).relu()
    h = b.flatten(b.max_pool2d(h, kernel=(2, 2), stride=2))
    dims = ((400, 120), (120, 84), (84, 10))
    for k, (i, o) in enumerate(dims):
        h = b.linear(b.param(f"fc{k + 1}.W", (o, i)), b.param(f"fc{k + 1}.b", (o,)), h)
        if k < len(dims) - 1:
            h = h.relu()
    return b.build(-b.gather_scalar_nat(b.log_softmax(h), label))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("lenet5", build, __doc__ or "", argv, out=MODELS)


if __name__ == "__main__":
    main()
