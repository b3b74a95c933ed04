"""Shared helpers for benchmark scripts: timing with medians, machine description, and writing
one script's section of ``docs/benchmarks.md`` (between its own markers, leaving the others)."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def in_fresh_process(target: Callable[..., None], args: tuple, budget: float) -> Any:
    """``target(*args, queue)`` in a fresh (spawned) process: what it puts on ``queue``, or
    ``None`` when nothing comes within ``budget`` seconds (the process is then stopped)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue), daemon=True)
    proc.start()
    try:
        result = queue.get(timeout=budget)
    except Exception:
        result = None
    proc.join(timeout=5)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    return result


def median_time(
    fn: Callable[[], object], *, repeats: int = 7, number: int = 1, warmup: int = 1
) -> float:
    """Median over ``repeats`` of the mean time of ``number`` calls of ``fn`` (seconds)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return statistics.median(samples)


def interleaved(
    fns: dict[str, Callable[[], object]], *, repeats: int, number: int = 1, warmup: int = 2
) -> dict[str, tuple[float, float]]:
    """Median seconds per call of each function, ``(wall clock, process CPU time)``, timed in
    alternation (round-robin over the functions within each repeat, so the slow phases of a
    shared machine hit all of them). The functions must return only when their work is done
    (block on asynchronous results). With every library on one thread (:func:`one_thread`),
    the CPU time is the work itself, which waiting for a core on a loaded machine does not
    inflate."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(number):
                fn()
            cpu[k].append((time.process_time() - c0) / number)
            wall[k].append((time.perf_counter() - t0) / number)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def one_thread() -> None:
    """Ask every numeric library for one thread (call before importing NumPy, JAX or PyTorch):
    the comparisons against PyTorch on one thread then run ours on one thread too."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ.setdefault("XLA_FLAGS", flags)


def machine() -> str:
    """One line describing where the figures were taken."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions = [f"Python {platform.python_version()}"]
    for mod in ("numpy", "jax", "sympy", "symengine", "torch"):
        with contextlib.suppress(Exception):
            versions.append(f"{mod} {__import__(mod).__version__}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} cores, {platform.system()} {platform.release()}; " + ", ".join(versions)


def load_average() -> float:
    """The 1-minute load average (0.0 where the system does not say)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def load_note(at_start: float) -> str:
    """A line saying how busy the machine was during the run (load at start and at the end),
    so that figures taken on a shared machine say so next to them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    now = load_average()
    busy = max(at_start, now) > (cores or 1)
    return (
        f"- Machine load during the run (1-minute load average): {at_start:.1f} at the start, "
        f"{now:.1f} at the end, on {cores} cores"
        + (": the machine was shared and loaded (more runnable processes than cores), so the "
           "absolute times are inflated; the ratios, taken side by side, are what to read."
           if busy else ".")
    )  # fmt: skip


def write_section(name: str, title: str, body: str) -> None:
    """Replace (or append) the section of ``docs/benchmarks.md`` owned by benchmark ``name``."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    stamp = datetime.date.today().isoformat()
    section = (
        f"{begin}\n## {title}\n\n"
        f"_Run by `benchmarks/{name}.py` on {stamp}; machine: {machine()}._\n\n"
        f"{body.strip()}\n{end}"
    )
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        text = pre + section + post
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(text)


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)
