"""Loss-curve pictures: :func:`plot_losses` writes curves to a PNG with matplotlib (the
``examples`` extra; Agg backend, no display needed). ``ScalarTrainer.save_loss_curve`` uses it
for a trainer's per-step losses, optionally beside other trainers' (eager against compiled)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

from torchlean_ir import TorchleanError


def plot_losses(
    path: str | os.PathLike[str],
    curves: Mapping[str, Sequence[float]],
    *,
    title: str = "training loss",
    xlabel: str = "step",
    ylabel: str = "loss",
    log: bool = False,
) -> str:
    """Draw each curve (label -> values, x = 1, 2, ...) on one chart, the second and later
    dashed so that equal curves stay visible, and save it to ``path`` (PNG, or another format
    by suffix that matplotlib writes); ``log`` uses a log-scale y axis.
    Returns the path. Bad arguments raise :class:`~torchlean_ir.TorchleanError` (one line)."""
    path = os.fspath(path)
    if not curves or any(len(ys) == 0 for ys in curves.values()):
        raise TorchleanError(f"plot_losses({path!r}): nothing to draw (an empty curve)")
    if log and any(not (y > 0) for ys in curves.values() for y in ys if math.isfinite(y)):
        raise TorchleanError(f"plot_losses({path!r}): log scale needs positive values")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise TorchleanError(f"plot_losses({path!r}): no such directory {parent}")
    try:
        import matplotlib
    except ModuleNotFoundError:
        raise TorchleanError(
            "plot_losses needs matplotlib (pip install 'torchlean-ir[examples]')"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=100)
    try:
        for k, (label, ys) in enumerate(curves.items()):  # dashes show curves that coincide
            style = ("-", "--", ":", "-.")[k % 4]
            ax.plot(range(1, len(ys) + 1), list(ys), style, label=label, linewidth=1.2)
        ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
    except (OSError, ValueError) as e:
        raise TorchleanError(f"plot_losses({path!r}): {e}") from None
    finally:
        plt.close(fig)
    return path
