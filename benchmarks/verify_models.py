"""The shipped models at training size, verified by ``torchlean-verify`` in a fresh process.

Each model of ``examples/models`` (MNIST MLP 784-256-256-10, LeNet-5 on 28x28, a GPT-2-small
block n=128 d=768 12 heads causal, a ResNet basic block 64 channels on 32x32) is verified by
``python3 -m verify GRAPH --json ... --timeout T`` (the default: tensor level first, the graph's
own dtype) in a new process; the wall time includes starting Python and importing JAX. Target
(issue 11): every check exact, at most 60 s each on a 2-core machine.

    python3 benchmarks/verify_models.py [--repeats N] [--timeout S] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _report import load_average, load_note, table, write_section

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "mnist_mlp": "MNIST MLP 784-256-256-10 (log_softmax, label index)",
    "lenet5": "LeNet-5 (28x28, conv 5x5, max_pool 2x2, 3 linear)",
    "gpt2_block": "GPT-2-small block (n 128, d 768, 12 heads, causal, GELU MLP 3072)",
    "resnet_block": "ResNet basic block (64 ch, 32x32, conv3x3 + batchnorm + residual, head)",
}
TARGET_S = 60.0


def run(name: str, timeout: float) -> dict:
    """One fresh-process verification: wall time, verdict, the checks by method and level."""
    graph = os.path.join(ROOT, "examples", "models", f"{name}.json")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [sys.executable, "-m", "verify", graph, "--json", out, "-q",
               "--timeout", str(timeout)]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout + 300)  # fmt: skip
        wall = time.perf_counter() - t0
        if not os.path.exists(out):
            return {"wall": wall, "verdict": f"exit {proc.returncode}", "checks": Counter(),
                    "undecided": proc.stderr.strip().splitlines()[-1:]}  # fmt: skip
        with open(out) as f:
            report = json.load(f)
    checks: Counter = Counter()
    undecided = []
    for node in report["nodes"]:
        for c in node["checks"]:
            checks[(c["method"], c.get("level") or "-")] += 1
            if c["method"] != "exact":
                undecided.append(f"node {node['node']} ({node['op']}): {c['name']}")
    for c in report["graph_checks"]:
        checks[(c["method"], c.get("level") or "-")] += 1
    return {"wall": wall, "verdict": report["verdict"], "checks": checks, "undecided": undecided}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1, help="runs per model (median wall time)")
    p.add_argument("--timeout", type=float, default=600.0, help="--timeout of each run")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args()
    load0 = load_average()
    rows, notes = [], []
    for name, title in MODELS.items():
        runs = [run(name, args.timeout) for _ in range(args.repeats)]
        r = runs[-1]
        wall = statistics.median(x["wall"] for x in runs)
        c = r["checks"]
        total = sum(c.values())
        exact_t = c[("exact", "tensor")]
        exact_e = c[("exact", "elements")]
        exact_other = sum(v for (m, lvl), v in c.items() if m == "exact") - exact_t - exact_e
        other = total - exact_t - exact_e - exact_other
        ok = r["verdict"] == "verified" and wall <= TARGET_S
        rows.append([title, r["verdict"].upper(), f"{wall:.1f} s", "yes" if ok else "**no**",
                     total, exact_t, exact_e, exact_other, other])  # fmt: skip
        print(rows[-1], flush=True)
        if r["undecided"]:
            shown = "; ".join(r["undecided"][:6])
            notes.append(f"- {title}: not exact: {shown}")
    body = (
        "Each model verified by `python3 -m verify examples/models/NAME.json` in a fresh "
        "process (wall time includes the interpreter's start and JAX's import), default "
        f"options (tensor level first, the graph's own dtype float32), `--timeout "
        f"{args.timeout:g}`; median of {args.repeats} run(s). *exact (tensor)*: decided with one "
        "symbolic element for the whole tensor; *exact (elements)*: small signatures the element "
        "method decided after the tensor level did not; *exact (graph)*: the wiring checks.\n\n"
        + table(["model", "verdict", "wall", f"<= {TARGET_S:g} s and verified", "checks",
                 "exact (tensor)", "exact (elements)", "exact (graph)", "not exact"], rows)
        + "\n\n" + "\n".join([*notes, load_note(load0)])
    )  # fmt: skip
    print(body)
    if not args.no_write:
        write_section("verify_models", "Verifier: the shipped models at training size", body)


if __name__ == "__main__":
    main()
