"""Verifying hand-written gradients: torchlean's verifier against finite differences.

For each shipped example of ``examples/functions/`` (a custom rule and its buggy twin): the
verifier's verdict and seconds on the correct rule and on the twin, and whether the framework's
own finite-difference checker flags the twin and passes the correct one, in float32 as the
example is written and in float64: ``jax.test_util.check_grads`` (reverse mode, order 1, at
seeded random normal inputs) for the JAX rules (``verify_function``), and
``torch.autograd.gradcheck`` (its default tolerances, at the example's seeded inputs) for the
PyTorch ``autograd.Function`` (``verify_autograd``). Writes its section of
``docs/benchmarks.md``.

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
NAMES = ["layer_norm", "softmax_xent", "logsumexp", "blockwise_attention"]
#: The function of an example, where it is not named as the example.
FUNCTION = {"blockwise_attention": "attention"}
#: The correct rules at three or four sizes each (the shipped one first or in the middle):
#: verify time against size. Index ranges: every label of the row's width. Blockwise
#: attention's size is its arguments and its block (the module's ``BLOCK``, set before tracing).
SIZES = {
    "layer_norm": ["f32[8,32] f32[32] f32[32]", "f32[32,128] f32[128] f32[128]",
                   "f32[128,512] f32[512] f32[512]"],
    "softmax_xent": ["f32[8,128] i32[8]", "f32[32,512] i32[32]", "f32[128,2048] i32[128]"],
    "logsumexp": ["f32[64,64]", "f32[512,512]", "f32[2048,2048]"],
    "blockwise_attention": [f"f32[{n},{d}] f32[{n},{d}] f32[{n},{d}], blocks of {b}"
                            for n, d, b in ((4, 2, 2), (64, 8, 32), (24, 2, 4), (32, 2, 4),
                                            (512, 64, 128), (1024, 64, 128))],
}  # fmt: skip


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


def gradcheck_flags(fn: Any, inputs: tuple[Any, ...], dtype: Any) -> tuple[bool, float]:
    """Whether ``torch.autograd.gradcheck`` fails on ``fn`` at ``inputs`` cast to ``dtype``."""
    import warnings

    import torch

    xs = tuple(x.detach().to(dtype).requires_grad_() for x in inputs)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not a double precision" for float32, by design
        ok = torch.autograd.gradcheck(fn, xs, raise_exception=False)
    return not ok, time.perf_counter() - t0


def torch_row() -> list[Any]:
    """The PyTorch example's row: ``BiasGelu`` and its twin (``examples/functions/
    bias_gelu_torch.py``), verified through AOTAutograd's joint graph and run through
    ``gradcheck``."""
    import torch

    from verify import verify_autograd

    mod = _load("bias_gelu_torch")
    inputs = mod.example_inputs()
    good, bad = mod.BiasGelu.apply, mod.BiasGeluWrong.apply
    shapes = " ".join(f"f32{list(x.shape)}".replace(" ", "") for x in inputs)
    row: list[Any] = [f"`bias_gelu_torch` ({shapes}, `autograd.Function`)"]
    for fn in (good, bad):
        t0 = time.perf_counter()
        r = verify_autograd(fn, *inputs)
        row.append(f"{r.verdict.upper()} ({time.perf_counter() - t0:.1f} s)")
    for dtype in (torch.float32, torch.float64):
        false_alarm, _ = gradcheck_flags(good, inputs, dtype)
        flagged, secs = gradcheck_flags(bad, inputs, dtype)
        row.append(("flagged" if flagged else "missed")
                   + (", false alarm on the correct rule" if false_alarm else "")
                   + f" ({secs:.1f} s)")  # fmt: skip
    return row


def size_rows() -> list[list[Any]]:
    """Each correct rule of :data:`SIZES` verified at each size: verdict, seconds."""
    rows = []
    for name, sizes in SIZES.items():
        mod = _load(name)
        fn = getattr(mod, FUNCTION.get(name, name))
        for spec in sizes:
            arg_text, _, block = spec.partition(", blocks of ")
            if block:
                mod.BLOCK = int(block)
            specs = parse_arg_specs(arg_text)
            ranges = {"labels": specs[0].shape[-1]} if name == "softmax_xent" else None
            t0 = time.perf_counter()
            r = verify_function(fn, *specs, index_ranges=ranges)
            secs = time.perf_counter() - t0
            rows.append([f"`{name}`", spec, r.verdict.upper(), f"{secs:.1f}"])
            print(" | ".join(rows[-1]), flush=True)
    return rows


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
        fname = FUNCTION.get(name, name)
        good, bad = getattr(mod, fname), getattr(mod, f"{fname}_wrong")
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
    rows.append(torch_row())
    print(" | ".join(map(str, rows[-1])), flush=True)
    body = table(["example", "verify: correct rule", "verify: buggy twin",
                  "finite differences float32: twin", "finite differences float64: twin"],
                 rows)  # fmt: skip
    note = ("Each example at its shipped size (`ARGS`). Finite differences: JAX's `check_grads` "
            "(reverse mode, order 1, its default tolerances) at seeded random normal inputs, "
            "labels drawn in range, for the JAX rules; `torch.autograd.gradcheck` (its default "
            "tolerances) at the example's seeded inputs for the PyTorch `autograd.Function`. "
            + load_note(load0))  # fmt: skip
    sizes = table(["example", "arguments", "verdict", "seconds"], size_rows())
    body += ("\n\nVerify time of the correct rules against their size (both modes, every "
             "check exact where VERIFIED):\n\n" + sizes)  # fmt: skip
    print(body)
    if not args.no_write:
        write_section("verify_functions", "Verifying hand-written gradients",
                      note + "\n\n" + body)  # fmt: skip


if __name__ == "__main__":
    main()
