"""One training epoch of the digits CNN (examples/digits_cnn.py): eager vs compiled vs PyTorch.

Same architecture (conv 1->8, pool, conv 8->16, pool, linear 64->10), same data (scikit-learn's
8x8 digits, 1344 training images in batches of 32, Adam), float32, side by side in one process,
every library on one thread. Rows:

* compiled - ``ScalarTrainer`` on the compiled backend: one fused jitted step per batch
  (forward, tape VJP, optax update); the epoch after the first (compiled already);
* compiled, first epoch - the same, including tracing and XLA compilation;
* eager, batched tape - ``ScalarTrainer`` on the eager backend, ``batched=True``: each op runs
  once on the whole batch (the compiler's per-node rule, vmapped and jitted), parameters'
  gradients averaged over the batch; the NumPy array backend (the default on CPU) and the JAX
  one (the GPU's);
* eager, one sample at a time - the eager step before batched tapes (each sample's ops one by
  one on one tape, the mean loss built with ops), timed on a quarter epoch and scaled;
* PyTorch eager - ``torch.nn`` on (32, 1, 8, 8) batches.

The epochs of the compiled, batched eager and PyTorch rows are timed in alternation; the figures
are medians of the wall-clock time and of the process's CPU time.

    python benchmarks/frontend_digits_epoch.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

from _report import one_thread, table, write_section  # noqa: E402

one_thread()

import digits_cnn  # noqa: E402
import numpy as np  # noqa: E402

from torchlean import EagerSession, Options, ScalarTrainer  # noqa: E402

BATCH = 32
Epoch = Callable[[int], None]


def _batches(X: np.ndarray, y: np.ndarray, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    order = np.random.default_rng(seed).permutation(len(X))
    n = len(X) - len(X) % BATCH
    return [(X[order[i : i + BATCH]], y[order[i : i + BATCH]]) for i in range(0, n, BATCH)]


def ours(opts: Options, X: np.ndarray, y: np.ndarray, array_backend: str = "numpy") -> Epoch:
    """An epoch of ``ScalarTrainer.adam_step(..., batched=True)`` (eager: on ``array_backend``)."""
    model = digits_cnn.make_model(opts)
    trainer = ScalarTrainer(
        digits_cnn.make_loss(model), model.parameters(), digits_cnn.INPUTS, opts
    )
    if opts.backend == "eager" and array_backend != "numpy":
        trainer.session = EagerSession(opts, array_backend=array_backend)

    def epoch(seed: int) -> None:
        last = 0.0
        for xb, yb in _batches(X, y, seed):
            last = trainer.adam_step(xb, yb, lr=1e-2, batched=True)
        assert np.isfinite(last)

    return epoch


def ours_looped(opts: Options, X: np.ndarray, y: np.ndarray) -> Epoch:
    """The eager epoch before batched tapes: one tape per batch, its samples one by one."""
    model = digits_cnn.make_model(opts)
    loss_fn = digits_cnn.make_loss(model)
    s = EagerSession(opts)

    def epoch(seed: int) -> None:
        for xb, yb in _batches(X, y, seed):
            s.reset_tape()
            total = None
            for image, label in zip(xb, yb, strict=True):
                loss = loss_fn(s, s.input(image), s.nat(int(label)))
                total = loss if total is None else s.add(total, loss)
            s.backward(s.scale(total, c=1.0 / len(xb)))
            s.adam_step_all(1e-2)

    return epoch


def pytorch(X: np.ndarray, y: np.ndarray) -> Epoch:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64, 10),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    Xt = torch.tensor(X, dtype=torch.float32).reshape(-1, 1, 8, 8)
    yt = torch.tensor(y)

    def epoch(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(len(X))
        n = len(X) - len(X) % BATCH
        for i in range(0, n, BATCH):
            idx = torch.tensor(order[i : i + BATCH])
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(Xt[idx]), yt[idx])
            loss.backward()
            opt.step()

    return epoch


def _timed(fn: Epoch, seed: int) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    fn(seed)
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer epochs")
    p.add_argument("--no-write", action="store_true", help="print only")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    X, _, y, _ = digits_cnn.load(0)
    repeats = 3 if a.quick else 7
    compiled = ours(Options(backend="compiled"), X, y)
    first = _timed(compiled, 0)
    fns = {
        "compiled": compiled,
        "eager, batched tape (NumPy array backend, the default on CPU)": ours(
            Options(backend="eager"), X, y
        ),
        "eager, batched tape (JAX array backend)": ours(Options(backend="eager"), X, y, "jax"),
        "PyTorch eager": pytorch(X, y),
    }
    for fn in fns.values():
        fn(0)  # warm up: compile the jitted rules once
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in fns}
    for k in range(repeats):
        for name, fn in fns.items():
            samples[name].append(_timed(fn, k + 1))
    results = {
        name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
        for name, v in samples.items()
    }
    results["compiled, first epoch (trace + compile)"] = first
    n_loop = len(X) // 4
    looped = ours_looped(Options(backend="eager"), X[:n_loop], y[:n_loop])
    looped(0)
    w, c = _timed(looped, 1)
    results["eager, one sample at a time (before batched tapes; a quarter epoch, x4)"] = (
        4 * w,
        4 * c,
    )
    ref_w, ref_c = results["PyTorch eager"]
    rows = [
        [k, f"{w:.3f}", f"{w / ref_w:.2f}", f"{c:.3f}", f"{c / ref_c:.2f}"]
        for k, (w, c) in results.items()
    ]
    body = (
        f"Seconds per epoch ({len(X) - len(X) % BATCH} images, batch {BATCH}, Adam, float32), "
        f"medians over {repeats} epochs timed in alternation (compiled, the two batched eager "
        "rows and PyTorch, round-robin), every library on one thread (PyTorch's "
        "`set_num_threads(1)`; XLA's and OpenBLAS's thread pools off). Wall clock and process "
        "CPU time: on this shared 2-core machine (other jobs keep the load above the core "
        "count) the wall clock includes waiting for a core; the CPU time of a one-thread "
        "process is the work itself and is the steadier figure. Ratios are against PyTorch "
        "eager (goal for eager: within 2x).\n\n"
        + table(["backend", "wall s", "wall vs PyTorch", "CPU s", "CPU vs PyTorch"], rows)
        + "\n\nModel code is per sample. The compiled backend maps the graph over the batch "
        "(`jax.vmap`) inside one fused step; the batched eager tape runs each op once on the "
        "whole batch (the op's compiler rule, vmapped and jitted per signature), so an eager "
        "step costs about 20 jitted calls (forward and VJP of each op) and one optax update, "
        "however large the batch; before batched tapes it cost those per sample."
    )
    print(body)
    if not a.no_write:
        write_section("frontend_digits_epoch", "Front end: digits CNN epoch", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
