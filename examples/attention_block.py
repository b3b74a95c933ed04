"""A pre-norm single-head self-attention block with a residual connection, and a loss.

    h = layer_norm(x; gamma, beta)            (used three times: fan-out)
    A = softmax((h Wq) (h Wk)^T / sqrt(d))    (row-wise, over the keys)
    y = x + (A (h Wv)) Wo                     (x used twice: the residual)
    loss = mean((y - target)^2)

Built from core ops only (matmul, transpose2d, scale, softmax, layer_norm). Writes
``examples/graphs/attention_block.json``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from _write import write_example  # examples/_write.py (the script's directory is on sys.path)

import torchlean_ir as tl

SEQ, DIM = 4, 8


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (SEQ, DIM))
    target = b.input("target", (SEQ, DIM))
    gamma = b.param("norm.gamma", (DIM,))
    beta = b.param("norm.beta", (DIM,))
    Wq = b.param("attn.wq", (DIM, DIM))
    Wk = b.param("attn.wk", (DIM, DIM))
    Wv = b.param("attn.wv", (DIM, DIM))
    Wo = b.param("attn.wo", (DIM, DIM))
    h = b.layer_norm(x, gamma, beta, eps=1e-5)
    q, k, v = h @ Wq, h @ Wk, h @ Wv
    scores = (q @ b.transpose2d(k)) * (1 / math.sqrt(DIM))
    attn = b.softmax(scores)
    y = x + (attn @ v) @ Wo
    return b.build(b.mse_loss(y, target))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("attention_block", build, __doc__ or "", argv)


if __name__ == "__main__":
    main()
