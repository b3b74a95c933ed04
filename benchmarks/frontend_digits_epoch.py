"""One training epoch of the digits CNN (examples/digits_cnn.py): eager vs compiled vs PyTorch.

Same architecture (conv 1->8, pool, conv 8->16, pool, linear 64->10), same data (scikit-learn's
8x8 digits, 1347 training images, batch 32, Adam), side by side in one process. Rows:

* compiled - ``ScalarTrainer`` on the compiled backend: one fused jitted step per batch
  (forward, tape VJP, optax update), float32; the epoch after the first (compiled already);
* compiled, first epoch - the same, including tracing and XLA compilation;
* eager (NumPy rules + fast kernels) - every op of every sample on the tape, float64, convolution
  and pooling through their jitted JAX lowerings;
* eager (NumPy reference rules only) - ``fast_kernels=False``;
* PyTorch eager - ``torch.nn`` on (32, 1, 8, 8) batches, float32, CPU.

    python benchmarks/frontend_digits_epoch.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

import digits_cnn  # noqa: E402
from _report import table, write_section  # noqa: E402

from torchlean import NatInput, Options, ScalarTrainer  # noqa: E402

BATCH = 32


def _batches(X: np.ndarray, y: np.ndarray, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    order = np.random.default_rng(seed).permutation(len(X))
    n = len(X) - len(X) % BATCH
    return [(X[order[i : i + BATCH]], y[order[i : i + BATCH]]) for i in range(0, n, BATCH)]


def ours(opts: Options, X: np.ndarray, y: np.ndarray) -> Callable[[int], float]:
    model = digits_cnn.make_model(opts)

    def loss(ops, image, label):  # type: ignore[no-untyped-def]
        return ops.cross_entropy(model(ops, ops.reshape(image, shape=(1, 8, 8))), label)

    trainer = ScalarTrainer(loss, model.parameters(), [(64,), NatInput()], opts)

    def epoch(seed: int) -> float:
        t0 = time.perf_counter()
        last = 0.0
        for xb, yb in _batches(X, y, seed):
            last = trainer.adam_step(xb, yb, lr=1e-2, batched=True)
        assert np.isfinite(last)
        return time.perf_counter() - t0

    return epoch


def pytorch(X: np.ndarray, y: np.ndarray) -> Callable[[int], float]:
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

    def epoch(seed: int) -> float:
        t0 = time.perf_counter()
        order = np.random.default_rng(seed).permutation(len(X))
        n = len(X) - len(X) % BATCH
        for i in range(0, n, BATCH):
            idx = torch.tensor(order[i : i + BATCH])
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(Xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    return epoch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer epochs (eager: part of one)")
    p.add_argument("--no-write", action="store_true", help="print only")
    a = p.parse_args(argv)
    X, _, y, _ = digits_cnn.load(0)
    repeats = 2 if a.quick else 5
    results: dict[str, float] = {}

    compiled = ours(Options(backend="compiled"), X, y)
    results["compiled, first epoch (trace + compile)"] = compiled(0)
    results["compiled"] = statistics.median(compiled(k + 1) for k in range(repeats))
    fraction = 0.25 if a.quick else 1.0  # eager is slow: --quick times a quarter epoch
    n_eager = int(len(X) * fraction)
    for label, fast in (("NumPy rules + fast kernels", True), ("NumPy reference rules", False)):
        eager = ours(Options(backend="eager", fast_kernels=fast), X[:n_eager], y[:n_eager])
        eager(0)  # warm up (jitted fast kernels compile once)
        t = statistics.median(eager(k + 1) for k in range(1 if a.quick else 2))
        results[f"eager ({label})"] = t / fraction
    try:
        import torch

        torch.set_num_threads(1)
        pt = pytorch(X, y)
        pt(0)
        results["PyTorch eager"] = statistics.median(pt(k + 1) for k in range(repeats))
    except ImportError:
        pass
    ref = results.get("PyTorch eager")
    rows = [
        [k, f"{v:.3f}", f"{v / ref:.2f}" if ref else "-", f"{v / results['compiled']:.1f}"]
        for k, v in results.items()
    ]
    body = (
        f"Seconds per epoch ({len(X) - len(X) % BATCH} images, batch {BATCH}, Adam), medians "
        f"over {repeats} epochs (eager: {'a quarter epoch, scaled' if a.quick else '2 epochs'}); "
        "PyTorch on one thread (fastest for these small kernels; on a shared machine more "
        "threads contend).\n\n"
        + table(["backend", "s / epoch", "vs PyTorch", "vs compiled"], rows)
        + "\n\nOps are single-sample: the compiled backend maps the per-sample graph over the "
        "batch (`jax.vmap`) inside one fused step; the eager backend runs each sample's ops "
        "one by one (that is what eager means here), so its cost is per-op Python overhead "
        "times ops times samples."
    )
    print(body)
    if not a.no_write:
        write_section("frontend_digits_epoch", "Front end: digits CNN epoch", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
