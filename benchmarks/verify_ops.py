"""Verification time of one conv2d node, one attention node and one max-pool node (issue 6).

Each one-node graph is verified by ``verify.verify_graph`` at the node's own shapes: rule
soundness of the op's signature (link 1), the compiled tape's rule calls against the reference
rules (link 2) and the wiring (link 3), end to end when small. Every run starts in a fresh
process (the verifier's per-signature caches are empty) and has a time budget; a run past its
budget is reported as such, never as a time. The conv2d node is timed ``--repeats`` times
(median); the attention and max-pool nodes once.

    python3 benchmarks/verify_ops.py            # budget 600 s per run, 3 repeats
    python3 benchmarks/verify_ops.py --quick    # budget 60 s, 1 repeat, no docs/benchmarks.md

Nodes (float32 graphs, verified in float64): conv2d with W (8, 3, 3, 3), b (8,), x (3, 8, 8),
stride 1, no padding; attention with Wq, Wk, Wv (8, 8), Wo (8, 8), x (4, 8), 2 heads (hd = 4),
no mask; 3-D max pool of x (2, 3, 3, 3), kernel (3, 3, 3), stride 1, padding 1 (windows of 8 to
27 cells: the hard maximum against the first-maximum sum, by case splitting).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._report import in_fresh_process, table, write_section  # noqa: E402


def _graph(kind: str) -> Any:
    import torchlean_ir as tl

    b = tl.GraphBuilder("f32")
    if kind == "conv2d":
        W, bias = b.param("W", (8, 3, 3, 3)), b.param("b", (8,))
        return b.build(b.conv2d(W, bias, b.input("x", (3, 8, 8)), stride=1, padding=0))
    if kind == "max_pool":
        x = b.input("x", (2, 3, 3, 3), requires_grad=True)
        return b.build(b.max_pool(x, kernel=(3, 3, 3), stride=(1, 1, 1), padding=(1, 1, 1)))
    Ws = [b.param(n, (8, 8)) for n in ("Wq", "Wk", "Wv", "Wo")]
    return b.build(b.multi_head_attention(*Ws, b.input("x", (4, 8)), heads=2))


def _verify_node(kind: str, queue: Any) -> None:
    """Child process: verify the node's graph, put (label, verdict, checks, seconds) on
    ``queue``."""
    import verify

    g = _graph(kind)
    t0 = time.perf_counter()
    report = verify.verify_graph(g)
    seconds = time.perf_counter() - t0
    rows = [(c.link, c.name, c.method, c.result, round(c.seconds, 2)) for c in report.all_checks]
    queue.put((report.nodes[0].signature, report.verdict, rows, seconds))


def run_once(kind: str, budget: float) -> tuple[str, str, list, float] | None:
    """One verification in a fresh process; ``None`` when it does not finish within budget."""
    return in_fresh_process(_verify_node, (kind,), budget)


def _label(kind: str) -> str:
    """The node's signature as the verifier prints it."""
    from verify import Signature

    return Signature.of(_graph(kind), 0).label()


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _summary(rows: list) -> str:
    counts: dict[str, int] = {}
    for _, _, method, result, _ in rows:
        key = f"{result} ({method})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="budget 60 s, 1 repeat, no write")
    parser.add_argument("--budget", type=float, default=None, help="seconds per run")
    parser.add_argument("--repeats", type=int, default=None, help="conv2d runs (median)")
    parser.add_argument("--no-write", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args(argv)
    if not _importable("verify"):
        print("verify_ops: the verifier (package verify) is not available; nothing measured")
        return 2
    budget = args.budget or (60.0 if args.quick else 600.0)
    repeats = args.repeats or (1 if args.quick else 3)

    out_rows, details = [], []
    for kind, n in (("conv2d", repeats), ("attention", 1), ("max_pool", 1)):
        times, last = [], None
        for _ in range(n):
            res = run_once(kind, budget)
            if res is None:
                break
            last = res
            times.append(res[3])
        if last is None:
            label = _label(kind)
            print(f"{kind}: {label}: not finished within {budget:.0f} s")
            out_rows.append(
                [kind, f"`{label}`", "-", "-", f"not finished within {budget:.0f} s", "-"]
            )
            continue
        label, verdict, rows, _ = last
        med = statistics.median(times)
        print(f"{kind}: {label}: {verdict}, {med:.2f} s (median of {len(times)}); {_summary(rows)}")
        out_rows.append([kind, f"`{label}`", verdict, _summary(rows), f"{med:.2f} s", len(times)])
        details.append(f"**{kind}**\n\n" + table(
            ["link", "check", "method", "result", "seconds"], [list(r) for r in rows]
        ))  # fmt: skip

    body = (
        "`verify.verify_graph` on a one-node graph at the node's shapes, in a fresh process "
        f"(empty caches), budget {budget:.0f} s per run: rule soundness (link 1), compiled rule "
        "calls = reference (link 2), wiring (link 3). Time is the wall time of the whole "
        "verification; the verdict is `verified` only when every check passed exactly.\n\n"
        + table(["node", "signature", "verdict", "checks", "time", "runs"], out_rows)
        + "\n\n"
        + "\n\n".join(details)
    )
    if not (args.quick or args.no_write):
        write_section(
            "verify_ops", "Verification time of conv2d, attention and max-pool nodes", body
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
