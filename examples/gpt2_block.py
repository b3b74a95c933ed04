"""A GPT-2-small transformer block: sequence 128, width 768, 12 heads, causal mask, pre-norm
layer_norm, a GELU MLP of width 3072, two residual connections, and a regression loss.

    h  = layer_norm(x; ln1)
    x2 = x + multi_head_attention(Wq, Wk, Wv, Wo, h, heads=12, mask=causal)
    m  = gelu(layer_norm(x2; ln2) W1 + b1) W2 + b2         (768 -> 3072 -> 768)
    loss = mean((x2 + m - target)^2)

Writes ``examples/models/gpt2_block.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from _write import MODELS, write_example  # examples/_write.py (on sys.path)

import torchlean_ir as tl

SEQ, DIM, HEADS, FF = 128, 768, 12, 3072


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (SEQ, DIM))
    target = b.input("target", (SEQ, DIM))

    def dense(h: tl.Var, name: str, i: int, o: int) -> tl.Var:  # (n, i) @ (i, o) + bias
        W, bias = b.param(f"{name}.W", (i, o)), b.param(f"{name}.b", (o,))
        return h @ W + b.broadcast_to(bias, shape=(SEQ, o))

    causal = np.tril(np.ones((SEQ, SEQ), dtype=bool))
    h = b.layer_norm(x, b.param("ln1.g", (DIM,)), b.param("ln1.b", (DIM,)), eps=1e-5)
    Wq, Wk, Wv, Wo = (b.param(f"attn.{w}", (DIM, DIM)) for w in ("Wq", "Wk", "Wv", "Wo"))
    x2 = x + b.multi_head_attention(Wq, Wk, Wv, Wo, h, heads=HEADS, mask=causal)
    h = b.layer_norm(x2, b.param("ln2.g", (DIM,)), b.param("ln2.b", (DIM,)), eps=1e-5)
    m = dense(b.apply("gelu", dense(h, "mlp.fc", DIM, FF)), "mlp.proj", FF, DIM)
    return b.build(b.mse_loss(x2 + m, target))


def main(argv: Sequence[str] | None = None) -> None:
    write_example("gpt2_block", build, __doc__ or "", argv, out=MODELS)


if __name__ == "__main__":
    main()
