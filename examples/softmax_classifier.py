"""Softmax classifier with an index label: the negative log-likelihood of the true class.

    logits = W2 relu(W1 x + b1) + b2,   loss = -log_softmax(logits)[label]

``label`` is a runtime index input (a natural, never differentiated), read with
``gather_scalar_nat``. Writes ``examples/graphs/softmax_classifier.json``.
"""

from __future__ import annotations

from collections.abc import Sequence

from _write import write_example  # examples/_write.py (the script's directory is on sys.path)

import torchlean_ir as tl

FEATURES, HIDDEN, CLASSES = 8, 12, 5


def build() -> tl.GraphData:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (FEATURES,))
    label = b.index("label")
    W1 = b.param("hidden.weight", (HIDDEN, FEATURES))
    b1 = b.param("hidden.bias", (HIDDEN,))
    W2 = b.param("out.weight", (CLASSES, HIDDEN))
    b2 = b.param("out.bias", (CLASSES,))
    logits = b.linear(W2, b2, b.linear(W1, b1, x).relu())
    log_probs = b.log_softmax(logits)
    nll = -b.gather_scalar_nat(log_probs, label)
    return b.build(nll)


def main(argv: Sequence[str] | None = None) -> None:
    write_example("softmax_classifier", build, __doc__ or "", argv)


if __name__ == "__main__":
    main()
