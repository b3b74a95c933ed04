"""The front end's host overhead per training step (issue 29): ``torchlean.ScalarTrainer``
(compiled) against ``compiler.TrainStep`` and a hand-written ``jax.jit`` Adam step, on a model
so small (MLP 12-16-4, batch 8, float32) that the device's work is a few microseconds and the
host's Python and dispatch time is what is measured.

1. Per step, timed side by side (interleaved repeats of chunks of steps, each chunk ending
   with one wait on the parameters): a constant learning rate, and a learning rate that
   changes at every step (``trainer.adam_step(x, y, lr=sched(i))``; ``TrainStep`` with a
   hyperparameter vector, uploaded with ``jax.device_put`` or given as a NumPy vector with
   ``host_hyperparams``; the hand-written step with the rate as a NumPy scalar argument).
2. A long run of each trainer (and of ``TrainStep``) timed in windows, to show whether the
   per-step time grows with the number of steps taken.

It runs on the GPU where JAX has one, else on the CPU (one thread: XLA's and BLAS's pools
off), and says which.

    python benchmarks/frontend_host_overhead.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import interleaved, load_average, load_note, one_thread, table, write_section

one_thread()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import compiler  # noqa: E402
from torchlean import NatInput, Options, ScalarTrainer, nn  # noqa: E402

DIMS = (12, 16, 4)
BATCH = 8
LR = 1e-3
ADAM = {"learning_rate": LR, "b1": 0.9, "b2": 0.999, "eps": 1e-8}

Side = tuple[Callable[[int], Any], Callable[[], Any]]  # (step i, wait for the parameters)


def sched(i: int) -> float:
    """A learning rate that differs at every step."""
    return LR / (1.0 + 1e-4 * i)


class Sides:
    """The model, the batch (on the device) and the device of every side."""

    def __init__(self) -> None:
        self.device = "gpu" if compiler.gpu_available() else "cpu"
        self.jax_device = compiler.resolve_device(self.device)
        rng = np.random.default_rng(0)
        x = rng.normal(size=(BATCH, DIMS[0])).astype(np.float32)
        y = rng.integers(0, DIMS[-1], size=BATCH).astype(np.int32)
        self.x, self.y = jax.device_put((x, y), self.jax_device)

    def trainer(self) -> tuple[ScalarTrainer, Any]:
        opts = Options(backend="compiled", device=self.device, dtype="f32")
        rng = opts.rng("init")
        model = nn.Sequential(
            nn.Linear(DIMS[0], DIMS[1], rng=rng), nn.ReLU(), nn.Linear(DIMS[1], DIMS[2], rng=rng)
        )

        def loss(ops: Any, image: Any, label: Any) -> Any:
            return ops.cross_entropy(model(ops, image), label)

        return ScalarTrainer(loss, model.parameters(), [(DIMS[0],), NatInput()], opts), model

    def scalar_trainer(self, varying: bool) -> Side:
        trainer, model = self.trainer()
        x, y = self.x, self.y

        def run(i: int) -> None:
            trainer.adam_step(x, y, lr=sched(i) if varying else LR, batched=True)

        return run, lambda: jax.block_until_ready([p._device for p in model.parameters()])

    def train_step(self, hyper: str) -> Side:
        """``compiler.TrainStep`` on the trainer's graph: constants (``hyper="const"``), or a
        hyperparameter vector given per step on the device (``"device"``) or host (``"host"``)."""
        trainer, model = self.trainer()
        g = trainer.graph
        (xname,) = [leaf.name for leaf in g.leaves if leaf.kind == "input"]
        (yname,) = [ix.name for ix in g.index_inputs]
        bg = compiler.compile(g, device=self.device).batched(over=(xname, yname), grads="mean")
        if hyper == "const":
            step = compiler.TrainStep(bg, optax.adam(LR))
        else:
            step = compiler.TrainStep(bg, optax.adam, hyperparams=ADAM)
        box = [step.init({p.name: np.asarray(p.value, np.float32) for p in model.parameters()})]
        data, index = {xname: self.x}, {yname: self.y}
        vector = step.hyperparams if hyper == "device" else step.host_hyperparams

        def run(i: int) -> None:
            state = box[0]
            if hyper != "const":
                state = state.replace(hyper=vector(learning_rate=sched(i)))
            box[0], _ = step(state, data, index)

        return run, lambda: jax.block_until_ready(box[0].params)

    def hand(self, varying: bool) -> Side:
        """A hand-written ``jax.jit`` Adam step (parameters and state donated); with
        ``varying``, the learning rate is a NumPy scalar argument."""
        _, model = self.trainer()
        params = {
            p.name: jax.device_put(np.asarray(p.value, np.float32), self.jax_device)
            for p in model.parameters()
        }
        w0, b0, w1, b1 = (p.name for p in model.parameters())

        def loss_fn(p: Any, x: Any, y: Any) -> Any:
            h = jax.nn.relu(x @ p[w0].T + p[b0])
            logp = jax.nn.log_softmax(h @ p[w1].T + p[b1])
            return -jnp.mean(jnp.take_along_axis(logp, y[:, None], 1))

        def step(p: Any, s: Any, lr: Any, x: Any, y: Any) -> Any:
            with jax.default_matmul_precision("float32"):
                loss, g = jax.value_and_grad(loss_fn)(p, x, y)
                u, s = optax.adam(lr).update(g, s, p)
            return optax.apply_updates(p, u), s, loss

        if varying:
            jitted = jax.jit(step, donate_argnums=(0, 1))
        else:
            jitted = jax.jit(lambda p, s, x, y: step(p, s, LR, x, y), donate_argnums=(0, 1))
        box = [params, jax.jit(optax.adam(LR).init)(params)]
        x, y = self.x, self.y

        def run(i: int) -> None:
            if varying:
                box[0], box[1], _ = jitted(box[0], box[1], np.float32(sched(i)), x, y)
            else:
                box[0], box[1], _ = jitted(box[0], box[1], x, y)

        return run, lambda: jax.block_until_ready(box[0])


def per_step(sides: Sides, quick: bool) -> tuple[str, dict[str, float]]:
    made: dict[str, Side] = {
        "hand-written `jax.jit`, constant lr": sides.hand(False),
        "`compiler.TrainStep`, constant lr": sides.train_step("const"),
        "`ScalarTrainer`, constant lr": sides.scalar_trainer(False),
        "hand-written `jax.jit`, lr a NumPy scalar argument": sides.hand(True),
        "`compiler.TrainStep`, lr vector by `hyperparams` (`jax.device_put`)": sides.train_step(
            "device"
        ),
        "`compiler.TrainStep`, lr vector by `host_hyperparams` (NumPy)": sides.train_step("host"),
        "`ScalarTrainer`, lr changed every step": sides.scalar_trainer(True),
    }
    n = 50 if quick else 200
    counters = dict.fromkeys(made, 0)
    chunks = {}
    for key, (run, wait) in made.items():
        for i in range(3):  # compile (the trainer: its constant step, then its vector step)
            run(i)
        wait()
        counters[key] = 3

        def chunk(key: str = key, run: Callable[[int], Any] = run, wait: Any = wait) -> None:
            i = counters[key]
            for k in range(i, i + n):
                run(k)
            wait()
            counters[key] = i + n

        chunks[key] = chunk
    res = interleaved(chunks, repeats=5 if quick else 15, warmup=1)
    us = {k: res[k][0] / n * 1e6 for k in made}
    cpu = {k: res[k][1] / n * 1e6 for k in made}
    hand, step = us["hand-written `jax.jit`, constant lr"], us["`compiler.TrainStep`, constant lr"]
    rows = [
        [k, f"{us[k]:.1f}", f"{cpu[k]:.1f}", f"{us[k] / hand:.2f}", f"{us[k] / step:.2f}"]
        for k in made
    ]
    text = table(
        [
            "step (MLP 12-16-4, batch 8, Adam)",
            "µs / step",
            "CPU µs / step",
            "/ hand",
            "/ TrainStep",
        ],
        rows,
    )
    return text, us


def long_run(sides: Sides, quick: bool) -> str:
    steps, windows = (800, 4) if quick else (4000, 8)
    made = {
        "`compiler.TrainStep`, constant lr": sides.train_step("const"),
        "`ScalarTrainer`, constant lr": sides.scalar_trainer(False),
        "`ScalarTrainer`, lr changed every step": sides.scalar_trainer(True),
    }
    rows = []
    size = steps // windows
    for key, (run, wait) in made.items():
        for i in range(3):
            run(i)
        wait()
        times = []
        i = 3
        for _ in range(windows):
            t0 = time.perf_counter()
            for _ in range(size):
                run(i)
                i += 1
            wait()
            times.append((time.perf_counter() - t0) / size * 1e6)
        half = windows // 2
        growth = float(np.median(times[half:]) / np.median(times[:half]))
        rows.append([key, *(f"{t:.1f}" for t in times), f"{growth:.2f}"])
    heads = [f"steps {k * size}-{(k + 1) * size}" for k in range(windows)]
    return table(["µs / step over a long run", *heads, "second half / first half"], rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and repeats")
    p.add_argument("--no-write", action="store_true", help="print only")
    a = p.parse_args(argv)
    load = load_average()
    sides = Sides()
    where = f"{sides.jax_device.platform} ({getattr(sides.jax_device, 'device_kind', '')})"
    steps_text, _ = per_step(sides, a.quick)
    print(steps_text, flush=True)
    long_text = long_run(sides, a.quick)
    print(long_text, flush=True)
    body = (
        f"JAX {jax.__version__} on {where}"
        + (" (`--quick`: few repeats; not the figures of record)" if a.quick else "")
        + ". An Adam step of the MLP 12-16-4 (ReLU, cross-entropy), batch 8, float32, inputs "
        "and labels on the device: the device's work is a few microseconds, so the figures "
        "are the host's time per step (Python, argument checks, dispatch). *µs / step*: median "
        "of interleaved repeats of chunks of steps (wall clock, each chunk ending with one wait "
        "on the parameters; *CPU*: process time, the work itself on a loaded machine). The "
        "rows with a changing learning rate pass a new value at every step.\n\n"
        + steps_text
        + "\n\nThe same steps over a long run, timed in windows (wall clock; one run each, so "
        "a loaded machine's slow phases show here as single slow windows; the last column is "
        "the median window of the second half over that of the first, 1 where nothing "
        "grows):\n\n" + long_text + "\n\n" + load_note(load)
    )
    print(load_note(load))
    if not a.no_write:
        write_section("frontend_host_overhead", "Front end: host overhead per training step", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
