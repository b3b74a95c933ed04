"""Full training step (forward, backward, Adam update) vs PyTorch eager and hand-written JAX.

Ours: ``compiler.TrainStep`` on the batched graph (tape VJP and optax's Adam fused in one
jitted function with donated parameter and optimizer-state buffers; one dispatch per step).
PyTorch: eager ``zero_grad`` / forward / ``backward`` / ``torch.optim.Adam.step`` on CPU.
Hand-written JAX: ``jax.jit`` of ``value_and_grad`` + ``optax.adam`` with donation. Same model,
same data, same initial parameters. Peak memory of the step: XLA's memory analysis of the
compiled step (arguments + outputs + temporaries - aliased, i.e. donated, buffers).

    python3 benchmarks/compiler_train.py [--quick] [--models mlp,cnn,attention]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from _compiler_models import MODELS, Bench, interleaved, mib, us
from _report import load_average, load_note, table, write_section

import compiler

LR = 1e-3


def _ours(bench: Bench) -> tuple[Any, Any]:
    bg = compiler.compile(bench.graph).batched(over=bench.over, grads="mean")
    step = compiler.TrainStep(bg, compiler.optimizer("adam", learning_rate=LR))
    data = {k: jnp.asarray(v) for k, v in bench.data.items()}
    index = {k: np.asarray(v) for k, v in bench.index.items()}
    box = [step.init(bench.params)]

    def run() -> Any:
        box[0], loss = step(box[0], data, index)
        return loss

    return run, lambda: step.lower(box[0], data, index)


def _hand(bench: Bench) -> tuple[Any, Any]:
    tx = optax.adam(LR)
    p = {k: jnp.array(v) for k, v in bench.params.items()}
    d = {k: jnp.asarray(v) for k, v in bench.data.items()}
    i = {k: jnp.asarray(v) for k, v in bench.index.items()}

    def step(params: Any, opt_state: Any, data: Any, index: Any) -> Any:
        loss, grads = jax.value_and_grad(bench.jax_loss)(params, data, index)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    box = [p, tx.init(p)]

    def run() -> Any:
        box[0], box[1], loss = jitted(box[0], box[1], d, i)
        return loss

    return run, lambda: jitted.lower(box[0], box[1], d, i)


def _torch(bench: Bench) -> Any:
    import torch

    params = {k: torch.tensor(v, requires_grad=True) for k, v in bench.params.items()}
    data = {k: torch.tensor(v) for k, v in bench.data.items()}
    index = {k: torch.tensor(v, dtype=torch.int64) for k, v in bench.index.items()}
    opt = torch.optim.Adam(params.values(), lr=LR)

    def run() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = bench.torch_loss(params, data, index)
        loss.backward()
        opt.step()
        return loss.detach()

    return run


def _peak(lowered: Any) -> float:
    m = lowered.compile().memory_analysis()
    return float(
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        + m.temp_size_in_bytes
        - m.alias_size_in_bytes
    )


def _torch_worker(key: str, repeats: int, number: int, threads: int) -> None:
    """In a process of its own (no JAX runtime, no thread pool but PyTorch's): time the eager
    step and report the loss after 5 steps from the initial parameters."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    bench = MODELS[key]()
    first = _torch(bench)
    losses = [float(first()) for _ in range(5)]
    t = interleaved({"torch": _torch(bench)}, repeats=repeats, number=number)["torch"]
    print(json.dumps({"time": t, "loss5": losses[-1], "threads": torch.get_num_threads()}))


def _torch_in_subprocess(
    key: str, repeats: int, number: int, threads: int = 0
) -> dict[str, float] | None:
    cmd = [sys.executable, __file__, "--torch-worker", key, "--repeats", str(repeats),
           "--number", str(number), "--threads", str(threads)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _loss_after_5(bench: Bench) -> float:
    ours, _ = _ours(bench)
    for _ in range(5):
        loss = float(ours())
    return loss


def run(models: list[str], quick: bool) -> str:
    load0 = load_average()
    try:
        import torch

        torch_version = torch.__version__
        threads = torch.get_num_threads()
    except ImportError:
        torch = None
    repeats, number = (5, 5) if quick else (15, 20)
    rows, notes = [], []
    for key in models:
        bench = MODELS[key]()
        if not bench.available:
            rows.append([bench.name, "pending", "", "", "", "", ""])
            notes.append(f"{bench.name}: pending ({bench.why_not}).")
            continue
        ours, ours_lower = _ours(bench)
        hand, hand_lower = _hand(bench)
        t = interleaved({"ours": ours, "hand": hand}, repeats=repeats, number=number)
        tr = _torch_in_subprocess(key, repeats, number) if torch is not None else None
        tr1 = _torch_in_subprocess(key, repeats, number, 1) if torch is not None else None
        if tr is not None and tr1 is not None:
            t["torch"] = min(tr["time"], tr1["time"])  # the faster configuration
            t["torch default"], t["torch 1"] = tr["time"], tr1["time"]
        vs_torch = f"**{t['ours'] / t['torch']:.3f}**" if "torch" in t else "n/a"
        rows.append([
            bench.name,
            us(t["ours"]),
            f"{us(t['torch default'])} / {us(t['torch 1'])}" if "torch" in t else "n/a",
            vs_torch,
            us(t["hand"]),
            f"{t['ours'] / t['hand']:.3f}",
            f"{mib(_peak(ours_lower()))} / {mib(_peak(hand_lower()))}",
        ])  # fmt: skip
        if "torch" in t and t["ours"] > t["torch"]:
            notes.append(f"{bench.name}: slower than PyTorch eager ({t['ours'] / t['torch']:.3f}).")
        if tr is not None:
            ours5 = _loss_after_5(bench)
            notes.append(
                f"{bench.name}: loss after 5 Adam steps, ours vs PyTorch: relative difference "
                f"{abs(ours5 - tr['loss5']) / max(abs(tr['loss5']), 1e-30):.1e} "
                "(same start, same data)."
            )
    headers = [
        "model",
        "compiled step",
        f"PyTorch eager ({threads} threads / 1 thread)",
        "ratio vs the faster PyTorch (< 1: faster)",
        "hand-written JAX step",
        "ratio vs JAX",
        "peak step memory compiled / hand JAX",
    ]
    torch_line = (
        f"PyTorch {torch_version} eager on CPU with {threads} threads"
        if torch is not None
        else "PyTorch not installed"
    )
    return (
        "One training step (forward, backward, Adam update) per call, on device-resident data;"
        f" {torch_line}, timed in a process of its own (its OpenMP workers and XLA's thread "
        "pool would otherwise compete), with its default thread count and with one thread "
        "(on a loaded machine its multi-threaded barriers can collapse); the ratio is against "
        f"the faster of the two. Median of {repeats} repeats of {number} steps "
        "(compiled and hand-written JAX interleaved). Peak "
        "memory: XLA's memory analysis of the compiled step (arguments + outputs + "
        "temporaries - donated buffers); PyTorch's eager allocations are not comparable this "
        "way and are not shown.\n\n"
        + table(headers, rows)
        + "\n\n"
        + "\n".join([*(f"- {n}" for n in notes), load_note(load0)])
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset")
    ap.add_argument("--no-write", action="store_true", help="print, do not update the docs")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=15, help=argparse.SUPPRESS)
    ap.add_argument("--number", type=int, default=20, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        _torch_worker(args.torch_worker, args.repeats, args.number, args.threads)
        return
    body = run(args.models.split(","), args.quick)
    print(body)
    if not args.no_write:
        write_section("compiler_train", "Compiler: training step vs PyTorch eager", body)


if __name__ == "__main__":
    main()
