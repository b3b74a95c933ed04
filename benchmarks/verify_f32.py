"""Verification time of float32 compilations against float64 ones (issue 17, item 3).

Each graph is built in float32 and verified by ``verify.verify_graph`` once in its own dtype
(float32, under the float32 constants model of ``verify/_f32.py``) and once with
``dtype="f64"``, each run in a fresh process (empty caches) with a time budget; the two dtypes
alternate within each repeat, so a slow phase of a shared machine hits both. Reported: the
verdicts, the median wall time and the median CPU time of the verifying process (the work
itself, which waiting for a core on a loaded machine does not inflate), and the float32 / float64
ratio of the CPU times.

    python3 benchmarks/verify_f32.py            # budget 600 s per run, 3 repeats
    python3 benchmarks/verify_f32.py --quick    # budget 120 s, 1 repeat, no docs/benchmarks.md

Graphs: gelu of f32[6] and clamp (bounds -0.3, 0.7) of f32[6] (constants that are not float32
values); multi_head_attention with Wq, Wk, Wv, Wo (4, 4), x (3, 4), 2 heads, unmasked and
causal (the scale 1/sqrt(2) and the masked scores); a GPT-style pre-norm block (layer norm,
causal attention, residual, layer norm, GELU MLP of width 8, residual) of x (3, 4).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import in_fresh_process, load_average, load_note, table, write_section  # noqa: E402

GRAPHS = ("gelu", "clamp", "attention", "attention-causal", "gpt-block")


def _graph(kind: str) -> Any:
    import numpy as np

    import torchlean_ir as tl

    b = tl.GraphBuilder("f32")
    if kind == "gelu":
        return b.build(b.apply("gelu", b.input("x", (6,), requires_grad=True)))
    if kind == "clamp":
        return b.build(b.apply("clamp", b.input("x", (6,), requires_grad=True), lo=-0.3, hi=0.7))
    causal = {"mask": np.tril(np.ones((3, 3), dtype=bool))}
    if kind.startswith("attention"):
        ws = [b.param(n, (4, 4)) for n in ("wq", "wk", "wv", "wo")]
        mask = causal if kind == "attention-causal" else {}
        y = b.apply("multi_head_attention", *ws, b.input("x", (3, 4)), heads=2, **mask)
        return b.build(b.sum(y * y))
    d = 4
    shapes = {"g1": (d,), "b1": (d,), "g2": (d,), "b2": (d,), "wq": (d, d), "wk": (d, d),
              "wv": (d, d), "wo": (d, d), "w1": (d, 2 * d), "w2": (2 * d, d)}  # fmt: skip
    p = {n: b.param(n, s) for n, s in shapes.items()}
    x = b.input("x", (3, d))
    h = b.layer_norm(x, p["g1"], p["b1"], eps=1e-5)
    x = x + b.apply("multi_head_attention", p["wq"], p["wk"], p["wv"], p["wo"], h, heads=2,
                    **causal)  # fmt: skip
    h = b.layer_norm(x, p["g2"], p["b2"], eps=1e-5)
    x = x + b.apply("gelu", h @ p["w1"]) @ p["w2"]
    return b.build(b.sum(x * x))


def _verify(kind: str, dtype: str, queue: Any) -> None:
    """Child process: verify, put (verdict, summary, wall seconds, CPU seconds) on ``queue``."""
    import verify

    g = _graph(kind)
    t0, c0 = time.perf_counter(), time.process_time()
    report = verify.verify_graph(g, dtype=dtype)
    queue.put((report.verdict, report.summary(), time.perf_counter() - t0,
               time.process_time() - c0))  # fmt: skip


def run_once(kind: str, dtype: str, budget: float) -> tuple[str, str, float, float] | None:
    """One verification in a fresh process; ``None`` when it does not finish within budget."""
    return in_fresh_process(_verify, (kind, dtype), budget)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="budget 120 s, 1 repeat, no write")
    parser.add_argument("--budget", type=float, default=None, help="seconds per run")
    parser.add_argument("--repeats", type=int, default=None, help="runs per graph and dtype")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args(argv)
    budget = args.budget or (120.0 if args.quick else 600.0)
    repeats = args.repeats or (1 if args.quick else 3)
    load0 = load_average()

    rows = []
    for kind in GRAPHS:
        got: dict[str, list[tuple[str, str, float, float]]] = {"f64": [], "f32": []}
        late: set[str] = set()
        for _ in range(repeats):
            for dtype in ("f64", "f32"):
                if dtype in late:
                    continue
                res = run_once(kind, dtype, budget)
                if res is None:
                    late.add(dtype)
                else:
                    got[dtype].append(res)
        cells: list[object] = [kind]
        cpu: dict[str, float] = {}
        for dtype in ("f64", "f32"):
            runs = got[dtype]
            if dtype in late or not runs:
                cells += [f"not finished within {budget:.0f} s", "-", "-"]
                continue
            wall = statistics.median(r[2] for r in runs)
            cpu[dtype] = statistics.median(r[3] for r in runs)
            cells += [runs[-1][0], f"{wall:.2f} s", f"{cpu[dtype]:.2f} s"]
        ratio = f"{cpu['f32'] / cpu['f64']:.2f}" if len(cpu) == 2 else "-"
        cells.append(ratio)
        rows.append(cells)
        print(" | ".join(str(c) for c in cells), flush=True)

    headers = ["graph", "f64 verdict", "f64 wall", "f64 CPU", "f32 verdict", "f32 wall",
               "f32 CPU", "f32 / f64 CPU"]  # fmt: skip
    body = (
        "`verify.verify_graph` on float32 graphs, in their own dtype (float32, the default) and "
        'with `dtype="f64"`, each run in a fresh process (empty caches), the two dtypes '
        f"alternating, median of {repeats} run(s), budget {budget:.0f} s per run. CPU is the "
        "verifying process's CPU time; the ratio is float32 / float64 CPU time.\n\n"
        + table(headers, rows)
        + "\n\n"
        + load_note(load0)
    )
    if not (args.quick or args.no_write):
        write_section("verify_f32", "Verification time: float32 against float64", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
