"""Verifying hand-written JAX gradients: torchlean's verify_function against check_grads.

For each shipped example of ``examples/functions/`` (a custom rule and its buggy twin): the
verifier's verdict and seconds on the correct rule and on the twin, and whether
``jax.test_util.check_grads`` (reverse mode, order 1, at seeded random normal inputs, in float32
as the example is written and in float64) flags the twin and passes the correct one. Writes its
section of ``docs/benchmarks.md``.

    python3 benchmarks/verify_functions.py [--no-write]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import load_average, load_note, table, write_section

from verify import parse_arg_specs, verify_function

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "functions"
NAMES = ["layer_norm", "softmax_xent", "logsumexp"]


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(specs: list[Any], ranges: dict[str, int] | None, dtype: Any) -> list[Any]:
    rng = np.random.default_rng(0)
    out = []
    for s in specs:
        if np.dtype(s.dtype).kind == "f":
            out.append(jax.numpy.asarray(rng.normal(size=s.shape), dtype))
        else:
            hi = max((ranges or {}).values(), default=2)
            out.append(jax.numpy.asarray(rng.integers(0, hi, size=s.shape), s.dtype))
    return out


def check_grads_flags(f: Any, args: list[Any]) -> tuple[bool, float]:
    """Whether ``check_grads`` raises on ``f`` (the float arguments differentiated)."""
    from jax.test_util import check_grads

    floats = [k for k, a in enumerate(args) if np.dtype(a.dtype).kind == "f"]

    def g(*xs: Any) -> Any:
        full = list(args)
        for k, x in zip(floats, xs, strict=True):
            full[k] = x
        return f(*full)

    t0 = time.perf_counter()
    try:
        check_grads(g, tuple(args[k] for k in floats), order=1, modes=["rev"])
        flagged = False
    except AssertionError:
        flagged = True
    return flagged, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    load0 = load_average()
    rows = []
    for name in NAMES:
        mod = _load(name)
        specs = parse_arg_specs(mod.ARGS)
        ranges = getattr(mod, "INDEX_RANGES", None)
        good, bad = getattr(mod, name), getattr(mod, f"{name}_wrong")
        row: list[Any] = [f"`{name}` ({mod.ARGS})"]
        for fn in (good, bad):
            t0 = time.perf_counter()
            r = verify_function(fn, *specs, index_ranges=ranges)
            row.append(f"{r.verdict.upper()} ({time.perf_counter() - t0:.1f} s)")
        for dtype in (np.float32, np.float64):
            with jax.enable_x64(dtype == np.float64):
                false_alarm, _ = check_grads_flags(good, _inputs(specs, ranges, dtype))
                flagged, secs = check_grads_flags(bad, _inputs(specs, ranges, dtype))
            row.append(("flagged" if flagged else "missed")
                       + (", false alarm on the correct rule" if false_alarm else "")
                       + f" ({secs:.1f} s)")  # fmt: skip
        print(" | ".join(map(str, row)), flush=True)
        rows.append(row)
    body = table(["example", "verify: correct rule", "verify: buggy twin",
                  "check_grads float32: twin", "check_grads float64: twin"], rows)  # fmt: skip
    note = ("Each example at its shipped size (`ARGS`). `check_grads` (reverse mode, order 1, "
            "its default tolerances) at seeded random normal inputs, labels drawn in range. "
            + load_note(load0))  # fmt: skip
    print(body)
    if not args.no_write:
        write_section("verify_functions", "Verifying hand-written JAX gradients",
                      note + "\n\n" + body)  # fmt: skip


if __name__ == "__main__":
    main()
