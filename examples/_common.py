"""Helpers shared by the training examples: command line, mini-batches, progress bars, loss
curves. (Needs the ``examples`` extra: scikit-learn and matplotlib; rich is a dependency of the
package already.)"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def parser(description: str, *, epochs: int, batch_size: int, lr: float) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--backend", choices=("eager", "compiled"), default="compiled",
                   help="compiled (the fast path, default) or eager")  # fmt: skip
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="write the loss curve to this PNG")
    p.add_argument("--save", default=None, help="write the trained params (.npz/.safetensors)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p


def train_kwargs(a: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of an example's ``train`` from its parsed command line."""
    return {
        "backend": a.backend,
        "device": a.device,
        "epochs": a.epochs,
        "batch_size": a.batch_size,
        "lr": a.lr,
        "seed": a.seed,
        "progress": not a.no_progress,
        "plot": a.plot,
        "save": a.save,
    }


def batches(
    arrays: Sequence[np.ndarray],
    batch_size: int,
    rng: np.random.Generator,
    *,
    drop_last: bool = True,
) -> Iterator[list[np.ndarray]]:
    """Shuffled mini-batches. The incomplete last batch is dropped by default: every batch then
    has one shape, so the compiled step is traced once (the order changes every epoch, so no
    sample is left out for good)."""
    n = len(arrays[0])
    order = rng.permutation(n)
    stop = n - n % batch_size if drop_last and n >= batch_size else n
    for start in range(0, stop, batch_size):
        idx = order[start : start + batch_size]
        yield [a[idx] for a in arrays]


class Progress:
    """A progress bar over an iterable (rich's, the one the verifier's CLI uses too), with a
    ``set_postfix(loss=...)`` for live figures; a plain iterable when disabled."""

    def __init__(self, iterable: Any, *, desc: str, enabled: bool, total: int | None) -> None:
        self.iterable, self.desc, self.enabled = iterable, desc, enabled
        self.total = total if total is not None else _len(iterable)
        self._bar: Any = None
        self._task: Any = None

    def __iter__(self) -> Iterator[Any]:
        if not self.enabled:
            yield from self.iterable
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = (
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}", markup=False),
        )
        with Progress(*columns, transient=True) as bar:
            self._bar, self._task = bar, bar.add_task(self.desc, total=self.total, info="")
            for item in self.iterable:
                yield item
                bar.advance(self._task)

    def set_postfix(self, **figures: str) -> None:
        if self._bar is not None:
            info = " ".join(f"{k}={v}" for k, v in figures.items())
            self._bar.update(self._task, info=info)


def _len(iterable: Any) -> int | None:
    try:
        return len(iterable)
    except TypeError:
        return None


def progress(iterable: Any, *, desc: str, enabled: bool, total: int | None = None) -> Progress:
    """A progress bar over ``iterable`` (see :class:`Progress`)."""
    return Progress(iterable, desc=desc, enabled=enabled, total=total)


def plot_curves(path: str, curves: dict[str, Sequence[float]], *, title: str, ylabel: str) -> str:
    """Save training curves (one line per entry, x = epoch) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    for label, ys in curves.items():
        ax.plot(np.arange(1, len(ys) + 1), ys, label=label)
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
