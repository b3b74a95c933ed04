"""The eager session against PyTorch eager: per-op overhead on small tensors, and one training
step of an MLP on a batch.

1. For each op, a chain of ``N`` applications on small float64 tensors is run (a) forward only
   and (b) forward plus backward (tape / autograd), side by side in one process; the figure is
   the median time per op application. Our eager session runs the registry's NumPy rules on the
   CPU (the default) and, in the last column, the jitted JAX lowerings (the path a GPU uses).
2. One Adam training step of an MLP 784-256-256-10 (ReLU, cross-entropy) on a batch of 64,
   float32: the eager session with the batch declared (``input(..., batched=True)``: each op
   runs once on the whole batch), the same session looping over the samples (the eager path
   before batched tapes), the compiled trainer, and PyTorch eager, timed in alternation, with
   where the eager step's time goes.

Everything runs on one thread (PyTorch's ``set_num_threads(1)``, XLA's and BLAS's thread pools
off), on both sides.

    python benchmarks/frontend_eager_overhead.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import interleaved, one_thread, table, write_section

one_thread()

import numpy as np  # noqa: E402

from torchlean import EagerSession, NatInput, Options, ScalarTrainer, nn  # noqa: E402

N = 200  # op applications per timed chain

Op = tuple[Callable[..., Any], Callable[..., Any], tuple[int, ...]]


def ops_table() -> dict[str, Op]:
    """name -> (our op on (session, x, y, W, b), PyTorch's op on (x, y, W, b), shape of x).

    ``y`` is a fixed tensor of ones of x's shape (binary ops stay bounded, no denormals), ``W``
    an 8x8 matrix and ``b`` a bias (leaves made once per chain, like a model's params)."""
    import torch

    F = torch.nn.functional
    return {
        "add": (lambda s, x, y, W, b: s.add(x, y), lambda x, y, W, b: x + y, (8,)),
        "mul": (lambda s, x, y, W, b: s.mul(x, y), lambda x, y, W, b: x * y, (8,)),
        "tanh": (lambda s, x, y, W, b: s.tanh(x), lambda x, y, W, b: x.tanh(), (8,)),
        "relu": (lambda s, x, y, W, b: s.relu(x), lambda x, y, W, b: x.relu(), (8,)),
        "scale": (lambda s, x, y, W, b: s.scale(x, c=0.99), lambda x, y, W, b: x * 0.99, (8,)),
        "softmax": (lambda s, x, y, W, b: s.softmax(x), lambda x, y, W, b: x.softmax(-1), (8,)),
        "matmul 4x4": (lambda s, x, y, W, b: s.matmul(x, y), lambda x, y, W, b: x @ y, (4, 4)),
        "linear 8->8": (
            lambda s, x, y, W, b: s.linear(W, b, x),
            lambda x, y, W, b: F.linear(x, W, b),
            (8,),
        ),
    }


def _data(shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    x0 = np.linspace(-1, 1, int(np.prod(shape))).reshape(shape) / 4
    y = np.eye(shape[0]) if len(shape) == 2 else np.ones(shape)
    return x0, y, np.eye(8) * 0.9, np.full(8, 0.01)


def _ours(kind: str, shape: tuple[int, ...], op: Callable, backward: bool) -> Callable[[], None]:
    s = EagerSession(Options(dtype="f64"), array_backend=kind)
    x0, y0, w0, b0 = _data(shape)

    def run() -> None:
        s.reset_tape()
        x = s.input(x0, requires_grad=True)
        y, W, b = s.input(y0), s.input(w0, requires_grad=True), s.input(b0, requires_grad=True)
        for _ in range(N):
            x = op(s, x, y, W, b)
        if backward:
            s.backward(s.sum(x))

    return run


def _torch(shape: tuple[int, ...], op: Callable, backward: bool) -> Callable[[], None]:
    import torch

    x0, y0, w0, b0 = (torch.tensor(a) for a in _data(shape))

    def run() -> None:
        # autograd records in both columns, as our tape does; "fwd" skips only the backward
        x = x0.clone().requires_grad_(True)
        W, b = w0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
        h = x
        for _ in range(N):
            h = op(h, y0, W, b)
        if backward:
            h.sum().backward()

    return run


MLP_BATCH = 64
MLP_SIZES = (784, 256, 256, 10)


def _mlp(opts: Options) -> nn.Module:
    rng = opts.rng("init")
    a, b, c, d = MLP_SIZES
    return nn.Sequential(
        nn.Linear(a, b, rng=rng), nn.ReLU(), nn.Linear(b, c, rng=rng), nn.ReLU(),
        nn.Linear(c, d, rng=rng),
    )  # fmt: skip


def _mlp_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(MLP_BATCH, MLP_SIZES[0])).astype(np.float32)
    return x, rng.integers(0, MLP_SIZES[-1], size=MLP_BATCH)


def _block(model: nn.Module) -> None:
    """Wait for parameter updates still running on the device (JAX dispatches asynchronously)."""
    import jax

    jax.block_until_ready([p._device for p in model.parameters() if p._device is not None])


def _eager_mlp(kind: str, phases: dict[str, list[float]] | None = None) -> Callable[[], None]:
    """One step of the eager session with the batch declared. ``phases`` collects the CPU time
    of the forward (inputs and ops), the backward and the optimizer step (waiting for each
    phase's results before the next, which the plain step does not)."""
    import jax

    opts = Options(dtype="f32")
    model, (x, y) = _mlp(opts), _mlp_data()
    s = EagerSession(opts, array_backend=kind)

    def step() -> None:
        c0 = time.process_time()
        s.reset_tape()
        loss = s.cross_entropy(model(s, s.input(x, batched=True)), s.nat(y, batched=True))
        if phases is not None:
            jax.block_until_ready(s._vals[loss._key])
        c1 = time.process_time()
        s.backward(loss, grads="mean")
        if phases is not None:
            jax.block_until_ready([g for _, g in s._param_grads()])
        c2 = time.process_time()
        s.adam_step_all(1e-3)
        _block(model)
        if phases is not None:
            c3 = time.process_time()
            for k, v in (("forward", c1 - c0), ("backward", c2 - c1), ("optimizer", c3 - c2)):
                phases.setdefault(k, []).append(v)

    return step


def _torch_phases(phases: dict[str, list[float]]) -> Callable[[], None]:
    import torch

    step = _torch_mlp()
    model, opt, x, y = step.parts  # type: ignore[attr-defined]

    def timed() -> None:
        c0 = time.process_time()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        c1 = time.process_time()
        loss.backward()
        c2 = time.process_time()
        opt.step()
        c3 = time.process_time()
        for k, v in (("forward", c1 - c0), ("backward", c2 - c1), ("optimizer", c3 - c2)):
            phases.setdefault(k, []).append(v)

    return timed


def _eager_mlp_looped() -> Callable[[], None]:
    """The eager step as it was before batched tapes: one tape, the samples one by one, the
    mean loss built with ops (what ``ScalarTrainer`` did)."""
    opts = Options(dtype="f32")
    model, (x, y) = _mlp(opts), _mlp_data()
    s = EagerSession(opts)

    def step() -> None:
        s.reset_tape()
        total = None
        for k in range(MLP_BATCH):
            loss = s.cross_entropy(model(s, s.input(x[k])), s.nat(int(y[k])))
            total = loss if total is None else s.add(total, loss)
        s.backward(s.scale(total, c=1.0 / MLP_BATCH))
        s.adam_step_all(1e-3)

    return step


def _compiled_mlp() -> Callable[[], None]:
    opts = Options(backend="compiled", dtype="f32")
    model, (x, y) = _mlp(opts), _mlp_data()

    def loss(ops, image, label):  # type: ignore[no-untyped-def]
        return ops.cross_entropy(model(ops, image), label)

    trainer = ScalarTrainer(loss, model.parameters(), [(MLP_SIZES[0],), NatInput()], opts)

    def step() -> None:
        trainer.adam_step(x, y, lr=1e-3, batched=True)  # returns the loss: blocks

    return step


def _torch_mlp() -> Callable[[], None]:
    import torch

    torch.manual_seed(0)
    a, b, c, d = MLP_SIZES
    model = torch.nn.Sequential(
        torch.nn.Linear(a, b), torch.nn.ReLU(), torch.nn.Linear(b, c), torch.nn.ReLU(),
        torch.nn.Linear(c, d),
    )  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = (torch.tensor(v) for v in _mlp_data())

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    step.parts = (model, opt, x, y)  # type: ignore[attr-defined]
    return step


def mlp_step(quick: bool) -> str:
    """The MLP training-step comparison (section 2 of the module docstring)."""
    repeats = 9 if quick else 31
    fns = {
        "eager, batched tape (NumPy array backend, the default on CPU)": _eager_mlp("numpy"),
        "eager, batched tape (JAX array backend)": _eager_mlp("jax"),
        "compiled (ScalarTrainer, one fused jitted step)": _compiled_mlp(),
        "PyTorch eager": _torch_mlp(),
    }
    times = interleaved(fns, repeats=repeats)
    looped = "eager, one sample at a time (the eager step before batched tapes)"
    times.update(interleaved({looped: _eager_mlp_looped()}, repeats=3 if quick else 5, warmup=1))
    ref_wall, ref_cpu = times["PyTorch eager"]
    rows = [
        [k, f"{w * 1e3:.2f}", f"{w / ref_wall:.2f}", f"{c * 1e3:.2f}", f"{c / ref_cpu:.2f}"]
        for k, (w, c) in times.items()
    ]
    phase_rows = []
    makers = {
        "ours, NumPy array backend": lambda ph: _eager_mlp("numpy", ph),
        "ours, JAX array backend": lambda ph: _eager_mlp("jax", ph),
        "PyTorch eager": _torch_phases,
    }
    for label, make in makers.items():
        phases: dict[str, list[float]] = {}
        fn = make(phases)
        fn()
        phases.clear()
        for _ in range(repeats):
            fn()
        med = {k: statistics.median(v) for k, v in phases.items()}
        phase_rows.append(
            [label]
            + [f"{med[k] * 1e3:.2f}" for k in ("forward", "backward", "optimizer")]
            + [f"{sum(med.values()) * 1e3:.2f}"]
        )
    a, b, c, d = MLP_SIZES
    return (
        f"One Adam step of an MLP {a}-{b}-{c}-{d} (ReLU, cross-entropy) on a batch of "
        f"{MLP_BATCH}, float32, every library on one thread (PyTorch's `set_num_threads(1)`; "
        "XLA's and OpenBLAS's thread pools off). Medians over "
        f"{repeats} steps of the wall-clock time and of the process's CPU time, the four first "
        "rows timed in alternation (round-robin). On this shared 2-core machine (other jobs "
        "keep the load above the core count) the wall clock includes waiting for a core; the "
        "CPU time of a one-thread process is the work itself and is the steadier figure. "
        "Ratios are against PyTorch eager (goal: eager within 2x).\n\n"
        + table(["step", "wall ms", "wall vs PyTorch", "CPU ms", "CPU vs PyTorch"], rows)
        + "\n\nWhere the time goes (CPU ms, medians of each phase, waiting for its results): "
        "the forward (the inputs and the 9 ops, each one jitted, vmapped call on the whole "
        "batch), the backward (one vmapped VJP call per op; a parameter's cotangent is summed "
        "over the batch inside the call, as one matrix product) and the optimizer (one jitted "
        "optax Adam update of the 6 parameters, on their device mirrors, the moment estimates "
        "updated in place).\n\n"
        + table(["step", "forward", "backward", "optimizer", "total"], phase_rows)
        + "\n\nWaiting for each phase costs a synchronisation, so the phases add up to more "
        "than the step. The optimizer is at PyTorch's cost; the eager step spends its extra "
        "time in the forward and the backward: one jitted call per op and per VJP (dispatch, a "
        "fresh output buffer, no fusion across ops) where PyTorch calls its C++ kernels, and "
        "the compiled step fuses everything into one call."
    )


def per_op(quick: bool) -> str:
    """The per-op overhead table (section 1 of the module docstring)."""
    import torch

    torch.set_num_threads(1)
    repeats = 3 if quick else 9
    rows, ratios = [], {"fwd": [], "fwd+bwd": []}
    for name, (ours, theirs, shape) in ops_table().items():
        row: list[object] = [name]
        for backward, label in ((False, "fwd"), (True, "fwd+bwd")):
            fns = {"ours": _ours("numpy", shape, ours, backward)}
            fns["torch"] = _torch(shape, theirs, backward)
            if backward:
                fns["jax"] = _ours("jax", shape, ours, True)
            t = {k: cpu / N for k, (_, cpu) in interleaved(fns, repeats=repeats).items()}
            ratios[label].append(t["ours"] / t["torch"])
            row += [f"{t['ours'] * 1e6:.1f}", f"{t['torch'] * 1e6:.1f}"]
            row.append(f"{t['ours'] / t['torch']:.2f}")
        row.append(f"{t['jax'] * 1e6:.1f}")
        rows.append(row)
        print(" | ".join(map(str, row)), flush=True)
    geo = {k: float(np.exp(np.mean(np.log(v)))) for k, v in ratios.items()}
    headers = [
        "op",
        "ours fwd (µs)",
        "PyTorch fwd (µs)",
        "ratio",
        "ours fwd+bwd (µs)",
        "PyTorch fwd+bwd (µs)",
        "ratio",
        "ours, JAX path, fwd+bwd (µs)",
    ]
    return (
        f"CPU time per op application (one thread; see below), median of {repeats} runs of a "
        f"chain of {N} applications on float64 tensors of 8 elements (4x4 for matmul), ours and "
        "PyTorch's timed in alternation; ratio = ours / PyTorch eager (lower is better). Both "
        "sides record for autograd in every column (our tape, PyTorch's graph); *fwd+bwd* "
        "adds the backward pass. The last column runs the same session on its JAX path "
        "(jitted lowering per op, the GPU path) on the CPU.\n\n"
        + table(headers, rows)
        + f"\n\nGeometric mean ratio: forward {geo['fwd']:.2f}, forward+backward "
        f"{geo['fwd+bwd']:.2f}.\n\nWhy: an eager op here is a Python call that looks up the "
        "op's cached signature (typing ran once), runs the registry's NumPy rule and appends to "
        "the tape; PyTorch dispatches to C++ kernels. Small tensors measure that fixed cost; a "
        "batched tape pays it once per op for the whole batch (below), the compiled backend "
        "once per training step."
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--only", choices=("per-op", "mlp"), help="run one part only (prints it)")
    a = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    parts = []
    if a.only in (None, "per-op"):
        parts.append("### Per op, small tensors\n\n" + per_op(a.quick))
    if a.only in (None, "mlp"):
        mlp = mlp_step(a.quick)
        print(mlp, flush=True)
        parts.append("### One training step: MLP, batch 64\n\n" + mlp)
    body = "\n\n".join(parts)
    print(body)
    if not a.no_write and a.only is None:
        title = "Front end: eager overhead vs PyTorch (per op, and an MLP training step)"
        write_section("frontend_eager_overhead", title, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
