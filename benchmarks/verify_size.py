"""How verification time grows with tensor size: one node per op at a small and a large shape.

Target (issue 11): the time to verify one node is flat in its size; ``linear`` at 4096x4096
within 3x of 16x16. Each one-node graph (float32, verified in its own dtype, the default) is
verified with cold caches (the verifier's and the compiler's) in one process after a warm-up
that pays the imports; median over repeats, small and large timed in alternation. Every run
must be VERIFIED with every check exact at tensor level, or the script stops.

    python3 benchmarks/verify_size.py            # 3 repeats, writes docs/benchmarks.md
    python3 benchmarks/verify_size.py --quick    # 1 repeat, print only
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import load_average, load_note, table, write_section  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
import verify  # noqa: E402

Build = Callable[[], tl.GraphData]


def linear(n: int) -> Build:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f32")
        W, bias, x = b.param("W", (n, n)), b.param("b", (n,)), b.input("x", (n,))
        return b.build(b.linear(W, bias, x))

    return build


def conv(op: str, c: int, hw: int, stride: int) -> Build:
    """``op`` (``conv2d`` or ``conv_transpose2d``) 3x3, padding 1, ``c`` channels on
    ``hw x hw``."""

    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f32")
        W, bias = b.param("W", (c, c, 3, 3)), b.param("b", (c,))
        x = b.input("x", (c, hw, hw), requires_grad=True)
        return b.build(b.apply(op, W, bias, x, stride=stride, padding=1))

    return build


def attention(n: int, d: int, heads: int) -> Build:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f32")
        Ws = [b.param(w, (d, d)) for w in ("Wq", "Wk", "Wv", "Wo")]
        x = b.input("x", (n, d), requires_grad=True)
        mask = np.tril(np.ones((n, n), dtype=bool))
        return b.build(b.multi_head_attention(*Ws, x, heads=heads, mask=mask))

    return build


def unary(op: str, shape: tuple[int, ...], **attrs: object) -> Build:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f32")
        x = b.input("x", shape, requires_grad=True)
        return b.build(b.apply(op, x, **attrs))

    return build


def layer_norm(rows: int, d: int) -> Build:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f32")
        x = b.input("x", (rows, d), requires_grad=True)
        g, beta = b.param("g", (d,)), b.param("beta", (d,))
        return b.build(b.apply("layer_norm", x, g, beta, eps=1e-5))

    return build


CASES: list[tuple[str, str, Build, str, Build]] = [
    ("linear", "16x16", linear(16), "4096x4096", linear(4096)),
    ("conv2d 3x3, padding 1", "4 ch, 8x8", conv("conv2d", 4, 8, 1), "64 ch, 32x32",
     conv("conv2d", 64, 32, 1)),
    ("multi_head_attention, causal", "n 3, d 4, 2 heads", attention(3, 4, 2),
     "n 128, d 768, 12 heads", attention(128, 768, 12)),
    ("conv_transpose2d 3x3, stride 2, padding 1", "4 ch, 8x8", conv("conv_transpose2d", 4, 8, 2),
     "64 ch, 32x32", conv("conv_transpose2d", 64, 32, 2)),
    ("softmax", "2x4", unary("softmax", (2, 4)), "512x4096", unary("softmax", (512, 4096))),
    ("log_softmax", "2x4", unary("log_softmax", (2, 4)), "512x4096",
     unary("log_softmax", (512, 4096))),
    ("layer_norm", "2x4", layer_norm(2, 4), "512x768", layer_norm(512, 768)),
    ("max_pool2d 2x2", "1x4x4", unary("max_pool2d", (1, 4, 4), kernel=(2, 2), stride=2),
     "64x32x32", unary("max_pool2d", (64, 32, 32), kernel=(2, 2), stride=2)),
]  # fmt: skip


def verify_cold(graph: tl.GraphData) -> tuple[float, verify.Report]:
    verify.clear_caches()
    compiler.clear_cache()
    t0 = time.perf_counter()
    report = verify.verify_graph(graph, end_to_end="never")
    return time.perf_counter() - t0, report


def _checked(name: str, report: verify.Report) -> int:
    if report.verdict != "verified":
        raise SystemExit(f"{name}: {report.summary()}")
    node = [c for c in report.all_checks if c.link in ("rule", "compiled")]
    bad = [c for c in node if (c.method, c.level) != ("exact", "tensor")]
    if bad:
        raise SystemExit(f"{name}: not every check exact at tensor level: {bad[0].how}")
    return len(report.all_checks)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1 repeat, print only")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    repeats = 1 if args.quick else 3
    load0 = load_average()
    verify_cold(linear(4)())  # warm-up: imports, JAX's own caches
    rows = []
    ratios = {}
    for op, small_name, small, large_name, large in CASES:
        gs, gl = small(), large()
        times: dict[str, list[float]] = {"small": [], "large": []}
        checks = {}
        for _ in range(repeats):
            for key, g in (("small", gs), ("large", gl)):
                secs, report = verify_cold(g)
                checks[key] = _checked(f"{op} {key}", report)
                times[key].append(secs)
        ts, tlg = statistics.median(times["small"]), statistics.median(times["large"])
        ratios[op] = tlg / ts
        rows.append([op, small_name, f"{ts:.2f} s", large_name, f"{tlg:.2f} s",
                     f"**{tlg / ts:.2f}**", checks["large"]])  # fmt: skip
        print(rows[-1], flush=True)
    body = (
        "One node per op, float32, verified in its own dtype with cold caches (verifier and "
        "compiler) in one process after a warm-up; every run VERIFIED with every rule and "
        "compiled check exact at tensor level (the script stops otherwise); end-to-end check "
        f"off (it expands elements). The rule checks of an op with a certificate proved with "
        "symbolic sizes are that certificate, proved in each run (the caches are cold), the "
        "compiled checks are per shape. Median of "
        f"{repeats} runs, small and large alternating.\n\n"
    )
    body += table(["op", "small", "seconds", "large", "seconds", "large / small", "checks"],
                  rows)  # fmt: skip
    lin = ratios["linear"]
    body += (
        f"\n\n`linear` 4096x4096 against 16x16: {lin:.2f}x (target <= 3x: "
        f"{'met' if lin <= 3 else 'NOT met'}).\n\n{load_note(load0)}"
    )
    print(body)
    if not (args.no_write or args.quick):
        write_section("verify_size", "Verification time vs tensor size (one node)", body)


if __name__ == "__main__":
    main()
