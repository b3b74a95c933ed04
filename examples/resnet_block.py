"""A ResNet basic block on a 64-channel 32x32 feature map, then a classifier head.

    h = relu(bn1(conv3x3(x)))                 (64 -> 64 channels, padding 1)
    y = relu(bn2(conv3x3(h)) + x)             (the residual)
    loss = -log_softmax(W global_avg_pool(y) + b)[label]     (64 -> 10)

Batch normalisation in inference form (``batchnorm_eval``: per-channel scale, shift, running
mean and variance as parameters). Writes ``examples/models/resnet_block.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

from _write import MODELS, write_example  # examples/_write.py (on sys.path)

import torchlean_ir as tl

CH, SIDE, CLASSES = 64, 32, 10


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (CH, SIDE, SIDE))
    label = b.index("label")

    def conv_bn(h: tl.Var, k: int) -> tl.Var:
        W, bias = b.param(f"conv{k}.W", (CH, CH, 3, 3)), b.param(f"conv{k}.b", (CH,))
        h = b.conv2d(W, bias, h, padding=1)
        bn = {p: b.param(f"bn{k}.{p}", (CH,)) for p in ("gamma", "beta", "mean", "var")}
        return b.apply("batchnorm_eval", h, bn["gamma"], bn["beta"], bn["mean"], bn["var"])

    h = conv_bn(x, 1).relu()
    y = (conv_bn(h, 2) + x).relu()
    pooled = b.apply("global_avg_pool2d", y)
    logits = b.linear(b.param("fc.W", (CLASSES, CH)), b.param("fc.b", (CLASSES,)), pooled)
    return b.build(-b.gather_scalar_nat(b.log_softmax(logits), label))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("resnet_block", build, __doc__ or "", argv, out=MODELS)


if __name__ == "__main__":
    main()
