"""How verification time grows with depth: MLPs of width 16 and 10, 100, 1000 layers.

Target (docs/benchmarks.md): 100 layers verify in at most 10 s on a 2-core machine, with
roughly constant cost per node. Each depth is measured from cold caches (the verifier's and
the compiler's), median over repeats, in one process; the import of JAX and the compiler is
excluded (a warm-up run pays it) and measured separately as the command line's start-up, with
the wall time of ``torchlean-verify`` on the 100-layer graph.

``--quick`` measures 10 and 100 layers with fewer repeats.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import median_time, table, write_section  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
import verify  # noqa: E402

WIDTH = 16
TARGET_S = 10.0


def mlp(layers: int, width: int = WIDTH) -> tl.GraphData:
    """``layers`` x (linear, tanh), then mse_loss against a target: 2 * layers + 1 nodes."""
    b = tl.GraphBuilder("f32")
    h = b.input("x", (width,))
    for i in range(layers):
        h = b.linear(b.param(f"W{i}", (width, width)), b.param(f"b{i}", (width,)), h).tanh()
    return b.build(b.mse_loss(h, b.input("target", (width,))))


def verify_cold(graph: tl.GraphData) -> verify.Report:
    verify.clear_caches()
    compiler.clear_cache()
    return verify.verify_graph(graph)


def cli_wall(graph: tl.GraphData) -> tuple[float, int]:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mlp.json")
        tl.save(graph, path)
        env = dict(os.environ, PYTHONPATH=ROOT)
        t = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "verify.cli", path, "-q"], env=env,
                              capture_output=True, text=True)  # fmt: skip
        return time.perf_counter() - t, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 and 100 layers, fewer repeats")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    depths = (10, 100) if args.quick else (10, 100, 1000)
    repeats = 2 if args.quick else 3
    verify_cold(mlp(2))  # warm-up: imports, JAX's own caches
    rows = []
    per_node = {}
    for L in depths:
        g = mlp(L)
        report = verify_cold(g)
        assert report.verdict == "verified", report.summary()
        secs = median_time(lambda g=g: verify_cold(g), repeats=1 if L >= 1000 else repeats,
                           warmup=0)  # fmt: skip
        n = len(g.nodes)
        per_node[L] = secs / n * 1000
        rows.append([L, n, len({x.signature for x in report.nodes}), len(report.all_checks),
                     report.verdict, f"{secs:.2f}", f"{per_node[L]:.2f}"])  # fmt: skip
        print(rows[-1], flush=True)
    wall, code = cli_wall(mlp(100))
    body = table(
        ["layers", "nodes", "signatures", "checks", "verdict", "seconds", "ms / node"], rows
    )
    base = per_node[depths[0]]
    ratio = ", ".join(f"{L} layers: {per_node[L] / base:.2f}x" for L in depths[1:])
    hundred = next(float(r[5]) for r in rows if r[0] == 100)
    body += (
        f"\n\nCost per node relative to {depths[0]} layers: {ratio}. "
        f"100 layers: {hundred:.2f} s in process (target <= {TARGET_S:.0f} s: "
        f"{'met' if hundred <= TARGET_S else 'NOT met'}); `torchlean-verify` on the 100-layer "
        f"graph, start-up included: {wall:.2f} s wall (exit {code}). Width {WIDTH}, float64 "
        f"compilation verified, cold caches; median of {repeats} runs (1 at 1000 layers)."
    )
    print(body)
    if not args.no_write:
        write_section("verify_scale", "Verification time vs depth (MLP, width 16)", body)


if __name__ == "__main__":
    main()
