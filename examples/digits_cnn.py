"""Classification of scikit-learn's bundled 8x8 handwritten digits (1797 images) with a small
CNN, trained eagerly or compiled from the same model code.

    python examples/digits_cnn.py --backend compiled --plot digits.png

Documented result (seed 0, the defaults: 8 epochs of Adam, batch 32, 75/25 stratified split):
test accuracy at least 95% (about 97%). The compiled backend is the fast path; the eager one
runs every op of every sample on the tape (use --epochs 1 to watch it).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from torchlean import NatInput, Options, Predictor, ScalarTrainer, Tensor, nn, save_params

try:
    from . import _common as common
except ImportError:  # run as a script
    import _common as common  # type: ignore[no-redef]

TARGET_ACCURACY = 0.95


def load(seed: int) -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return tuple(train_test_split(X, y, test_size=0.25, random_state=seed, stratify=y))


def make_model(opts: Options) -> nn.Module:
    """(1, 8, 8) -> conv 8 -> pool -> conv 16 -> pool -> linear 10 (logits)."""
    rng = opts.rng("init")
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1, rng=rng), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, rng=rng), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 2 * 2, 10, rng=rng),
    )  # fmt: skip


def make_logits(model: nn.Module) -> Callable[..., Tensor]:
    """The model on one flattened 8x8 image: 10 logits."""

    def logits(ops, image):  # type: ignore[no-untyped-def]
        return model(ops, ops.reshape(image, shape=(1, 8, 8)))

    return logits


def make_loss(model: nn.Module) -> Callable[..., Tensor]:
    """The per-sample loss: cross-entropy of one image's logits against its label (a nat);
    ``ScalarTrainer(..., batched=True)`` averages it over a batch."""
    logits = make_logits(model)

    def loss(ops, image, label):  # type: ignore[no-untyped-def]
        return ops.cross_entropy(logits(ops, image), label)

    return loss


INPUTS = [(64,), NatInput()]


def train(
    *,
    backend: str = "compiled",
    device: str = "cpu",
    epochs: int = 8,
    batch_size: int = 32,
    lr: float = 1e-2,
    seed: int = 0,
    train_limit: int | None = None,
    test_limit: int | None = None,
    progress: bool = True,
    plot: str | None = None,
    save: str | None = None,
) -> dict[str, Any]:
    """Train and evaluate; returns the metrics and the curves. ``train_limit`` /
    ``test_limit`` keep only the first samples (for quick runs)."""
    opts = Options(backend=backend, device=device, seed=seed)
    Xtr, Xte, ytr, yte = load(seed)
    if train_limit is not None:
        Xtr, ytr = Xtr[:train_limit], ytr[:train_limit]
    if test_limit is not None:
        Xte, yte = Xte[:test_limit], yte[:test_limit]
    model = make_model(opts)
    params = model.parameters()
    trainer = ScalarTrainer(make_loss(model), params, inputs=INPUTS, options=opts)
    predict = Predictor(make_logits(model), params, INPUTS[:1], opts)
    shuffle = opts.rng("shuffle")
    curve, accs, t0 = [], [], time.perf_counter()
    n_batches = len(Xtr) // batch_size
    for epoch in range(epochs):
        bar = common.progress(
            common.batches([Xtr, ytr], batch_size, shuffle),
            desc=f"digits [{backend}] epoch {epoch + 1}/{epochs}",
            enabled=progress,
            total=n_batches,
        )
        losses = []
        for xb, yb in bar:
            losses.append(trainer.adam_step(xb, yb, lr=lr, batched=True))
            if progress:
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
        curve.append(float(np.mean(losses)))
        accs.append(float(np.mean(predict(Xte, batched=True).argmax(1) == yte)))
    seconds = time.perf_counter() - t0
    if plot:
        common.plot_curves(plot, {f"train loss ({backend})": curve, "test accuracy": accs},
                           title="digits CNN", ylabel="cross-entropy / accuracy")  # fmt: skip
    if save:
        save_params(params, save)
    return {"accuracy": accs[-1], "curve": curve, "accuracies": accs, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    p = common.parser(__doc__.splitlines()[0], epochs=8, batch_size=32, lr=1e-2)
    a = p.parse_args(argv)
    m = train(**common.train_kwargs(a))
    print(
        f"digits [{a.backend}]: test accuracy {m['accuracy']:.2%} "
        f"(target >= {TARGET_ACCURACY:.0%}), {m['seconds']:.1f} s"
    )
    return 0 if m["accuracy"] >= TARGET_ACCURACY else 1


if __name__ == "__main__":
    sys.exit(main())
