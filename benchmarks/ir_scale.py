"""IR scale: build, check, hash, print, parse and a JSON round trip (save + load) of 10,000-node
graphs, medians over repeats, written to ``docs/benchmarks.md`` (section ``ir_scale``).

    PYTHONPATH=. python3 benchmarks/ir_scale.py            # full run, rewrites the section
    PYTHONPATH=. python3 benchmarks/ir_scale.py --quick    # fewer repeats, prints only

Two graphs of the same size: a chain of elementwise ops (one leaf), and a residual MLP (blocks
``h = h + tanh(W h + b)``, two parameters and three nodes per block, every ``h`` used twice).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

from _report import median_time, table, write_section  # benchmarks/_report.py

import torchlean_ir as tl

NODES = 10_000


def chain(n: int = NODES) -> tl.GraphData:
    b = tl.GraphBuilder()
    h = b.input("x", (16,))
    ops = ("tanh", "relu", "sigmoid", "exp")
    for k in range(n - 1):
        h = b.apply(ops[k % 4], h)
    return b.build(b.sum(h))


def residual_mlp(n: int = NODES, width: int = 16) -> tl.GraphData:
    b = tl.GraphBuilder()
    h = b.input("x", (width,))
    for k in range((n - 1) // 3):
        W = b.param(f"block{k}.weight", (width, width))
        bias = b.param(f"block{k}.bias", (width,))
        h = h + b.linear(W, bias, h).tanh()
    return b.build(b.sum(h))


def measure(build: Callable[[], tl.GraphData], repeats: int) -> dict[str, float]:
    g = build()
    text = tl.format_graph(g)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.json"
        tl.save(g, path)
        size = path.stat().st_size

        def round_trip() -> None:
            tl.save(g, path)
            assert tl.load(path) == g

        def fresh_hash() -> None:
            tl.GraphData(g.context, g.nodes, g.outputs).content_hash  # noqa: B018

        times = {
            "build": median_time(build, repeats=repeats),
            "check": median_time(lambda: tl.check(g), repeats=repeats),
            "content_hash": median_time(fresh_hash, repeats=repeats),
            "save": median_time(lambda: tl.save(g, path), repeats=repeats),
            "load": median_time(lambda: tl.load(path), repeats=repeats),
            "save + load": median_time(round_trip, repeats=repeats),
            "format_graph": median_time(lambda: tl.format_graph(g), repeats=repeats),
            "parse_graph": median_time(lambda: tl.parse_graph(text), repeats=repeats),
        }
    times["_nodes"] = len(g.nodes)
    times["_leaves"] = g.num_leaves
    times["_bytes"] = size
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="2 repeats; print, do not write")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    graphs = {"chain": chain, "residual MLP": residual_mlp}
    results = {name: measure(fn, repeats) for name, fn in graphs.items()}
    double = measure(lambda: chain(2 * NODES), repeats)
    steps = [k for k in next(iter(results.values())) if not k.startswith("_")]
    rows = []
    for step in steps:
        row: list[object] = [step]
        for r in results.values():
            t = r[step]
            row += [f"{t * 1e3:.0f}", f"{t / r['_nodes'] * 1e6:.1f}", f"{t / r['build']:.2f}"]
        row.append(f"{double[step] / results['chain'][step]:.2f}")
        rows.append(row)
    headers = ["step"]
    for name in results:
        headers += [f"{name}: ms", f"{name}: µs/node", f"{name}: × build"]
    headers.append("chain 20k / 10k")
    shapes = "; ".join(
        f"{name}: {r['_nodes']:,.0f} nodes, {r['_leaves']:,.0f} "
        f"{'leaf' if r['_leaves'] == 1 else 'leaves'}, "
        f"{r['_bytes'] / 1e6:.1f} MB file"
        for name, r in results.items()
    )
    body = (
        f"Medians over {repeats} repeats. Graphs: {shapes}. `save + load` is the JSON round trip "
        "(write, then read, parse and check); `load` includes `check`; `save` checks first. "
        "The last column is the time of the same step on a 20,000-node chain over the "
        "10,000-node chain: about 2 means linear.\n\n" + table(headers, rows)
    )
    print(body)
    if not args.quick:
        write_section("ir_scale", "IR scale: 10,000-node graphs", body)


if __name__ == "__main__":
    main()
