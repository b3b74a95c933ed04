"""Per-call overhead of a compiled graph vs a bare jitted function, on a tiny graph.

The graph is ``tanh(W x + b)`` (W 3x4): the work is negligible, so the time is dispatch. Ours:
``compiled.forward(dict)`` / ``compiled.value_and_grad(dict)`` on device arrays (the fast path:
name lookup, no conversion; argument types are checked when a signature is first traced).
Bare: ``jax.jit`` of the same function called with positional device arrays. Also shown: the
same with NumPy inputs (converted and checked on the host each call) for both, and the compiled
function alone (``cg.jitted("forward")``; for value_and_grad the executable the API calls, the
checked VJP with the seed 1 made inside), which splits our time between the executable and the
API's Python. Medians of interleaved repeats, wall and CPU time.

    python3 benchmarks/compiler_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import operator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _compiler_models import interleaved_wall_cpu, us
from _report import load_average, load_note, table, write_section

import compiler
import torchlean_ir as tl

TARGET = 1.1


def run(quick: bool) -> str:
    repeats, number = (5, 2000) if quick else (21, 10000)
    load0 = load_average()
    b = tl.GraphBuilder("f32")
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,))
    y = b.linear(W, bias, x).tanh()
    fwd = compiler.compile(b.build(y))
    vag = compiler.compile(b.build(b.sum(y)))
    rng = np.random.default_rng(0)
    host = {
        "x": rng.normal(size=4).astype(np.float32),
        "W": rng.normal(size=(3, 4)).astype(np.float32),
        "b": rng.normal(size=3).astype(np.float32),
    }
    dev = {k: jnp.asarray(v) for k, v in host.items()}

    def f(W: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.tanh(W @ x + b)

    def f_vag_seed(W: jax.Array, b: jax.Array, x: jax.Array, s: jax.Array) -> Any:
        value, pull = jax.vjp(lambda W, b: jnp.sum(f(W, b, x)), W, b)
        return value, pull(s)

    bare = jax.jit(f)
    bare_vag = jax.jit(jax.value_and_grad(lambda W, b, x: jnp.sum(f(W, b, x)), argnums=(0, 1)))
    bare_vag_seed = jax.jit(f_vag_seed)
    Wd, bd, xd = dev["W"], dev["b"], dev["x"]
    Wh, bh, xh = host["W"], host["b"], host["x"]
    flat = [dev[n] for n in vag.leaf_names]
    one = jnp.ones((), jnp.float32)
    fwd_fn, vjp_fn = fwd.jitted("forward"), vag.jitted("vjp")
    # what forward calls on a one-output graph: the forward, the output unwrapped inside
    out_fn = fwd._forward_out
    # what value_and_grad calls: the VJP with the seed 1 made inside, (value, gradients) out
    vag_fn = vag._vag
    assert vag_fn is not None and vag._grads_named  # W, b: JAX's dispatch builds the dict
    # The least any by-name API does: look the leaves up, call, unwrap / name the results
    # (no type check, no fallback).
    by_name = operator.itemgetter(*vag.leaf_names)
    g0, g1 = vag.grad_names

    def tuple_names() -> Any:
        return fwd_fn(*by_name(dev))[0]

    def fwd_names() -> Any:
        return out_fn(*by_name(dev))

    def vjp_names() -> Any:
        outs, grads = vjp_fn(*by_name(dev), one)
        return outs[0], {g0: grads[0], g1: grads[1]}

    def vag_names() -> Any:
        return vag_fn(*by_name(dev))

    def python() -> int:  # a fixed bit of Python work, for the note on CPU time
        total = 0
        for k in range(8):
            total += k
        return total

    wall, cpu = interleaved_wall_cpu(
        {
            "python": python,
            "bare forward + python": lambda: (python(), bare(Wd, bd, xd))[1],
            "forward": lambda: fwd.forward(dev),
            "tuple alone": lambda: fwd_fn(*flat),
            "tuple names": tuple_names,
            "forward alone": lambda: out_fn(*flat),
            "forward names": fwd_names,
            "bare forward": lambda: bare(Wd, bd, xd),
            "vag": lambda: vag.value_and_grad(dev),
            "vjp alone": lambda: vjp_fn(*flat, one),
            "vjp names": vjp_names,
            "vag alone": lambda: vag_fn(*flat),
            "vag names": vag_names,
            "bare vag": lambda: bare_vag(Wd, bd, xd),
            "bare vag seed": lambda: bare_vag_seed(Wd, bd, xd, one),
            "forward numpy": lambda: fwd.forward(host),
            "bare numpy": lambda: bare(Wh, bh, xh),
        },
        repeats=repeats,
        number=number,
    )

    def row(label: str, ours: str, alone: str | None, base: str, bold: bool) -> list[str]:
        r = wall[ours] / wall[base]
        rc = cpu[ours] / cpu[base]
        cells = [
            label,
            us(wall[ours]),
            us(wall[alone]) if alone else "",
            us(wall[base]),
            f"**{r:.3f}**" if bold else f"{r:.3f}",
            f"**{rc:.3f}**" if bold else f"{rc:.3f}",
        ]
        if alone:
            cells.append(f"{wall[alone] / wall[base]:.3f} / {cpu[alone] / cpu[base]:.3f}")
        else:
            cells.append("")
        return cells  # fmt: skip

    rows = [
        row("forward, device arrays", "forward", "forward alone", "bare forward", True),
        row("value_and_grad, device arrays", "vag", "vag alone", "bare vag", True),
        row("forward, NumPy inputs", "forward numpy", None, "bare numpy", False),
    ]

    def c(key: str) -> str:
        return us(cpu[key])

    def d(a: str, b: str) -> str:
        return f"{(cpu[a] - cpu[b]) * 1e6:+.1f} µs"

    notes = [
        f"- Where the time of forward goes (CPU time per call): the bare jitted call "
        f"{c('bare forward')}; our compiled forward alone (`cg.jitted('forward')`: it returns "
        f"a tuple of outputs) {c('tuple alone')}, and with the leaves looked up by name and "
        f"the output unwrapped in Python {c('tuple names')} "
        f"({d('tuple names', 'tuple alone')}): the API's path before the thin executable "
        "below. It now calls that forward inside an executable that returns the output "
        "itself: alone "
        f"{c('forward alone')}, with the leaves looked up by name, nothing else (the least a "
        f"by-name API does) {c('forward names')} ({d('forward names', 'forward alone')}); the "
        f"API {c('forward')} ({d('forward', 'forward names')} more: the method call, the "
        "dict's type and size, the first leaf's type).",
        f"- Where the time of value_and_grad goes (CPU time per call): the bare jitted "
        f"value-and-gradient {c('bare vag')}; the same with the output cotangent as an "
        f"argument {c('bare vag seed')} ({d('bare vag seed', 'bare vag')}); our compiled VJP "
        f"alone, which takes the seed as an argument (the function the verifier checks), "
        f"{c('vjp alone')}, and with the leaves looked up by name and the gradients put in a "
        f"dict in Python {c('vjp names')} ({d('vjp names', 'vjp alone')}): the API's path "
        "before the thin executable below. It now calls that VJP inside an executable that "
        "makes the "
        f"seed 1 itself and returns the gradients as a dict (built by JAX's C++ dispatch when "
        f"the names are in sorted order, as here): alone {c('vag alone')}, with the leaves "
        f"looked up by name {c('vag names')} ({d('vag names', 'vag alone')}), the API "
        f"{c('vag')} ({d('vag', 'vag names')} more: the method call, the dict's type and "
        "size, the first leaf's type). Argument types are checked when a new signature is "
        "traced, not at every call.",
        f"- Python work between calls costs more CPU time than its own: a fixed bit of Python "
        f"({c('python')} alone) added to the bare forward call adds "
        f"{d('bare forward + python', 'bare forward')} of this process's CPU time (which counts "
        "all its threads, XLA's included: the executable runs on another thread than the "
        "caller's).",
    ]
    for label, key in (("forward", "forward"), ("value_and_grad", "vag")):
        ratio = min(wall[key] / wall[f"bare {key}"], cpu[key] / cpu[f"bare {key}"])
        if ratio > TARGET:
            r_wall, r_cpu = wall[key] / wall[f"bare {key}"], cpu[key] / cpu[f"bare {key}"]
            names = cpu[f"{key} names"] / cpu[f"bare {key}"]
            notes.append(
                f"- {label}: **above the {TARGET} target** (wall {r_wall:.3f}, CPU {r_cpu:.3f}); "
                f"the by-name floor alone is {names:.3f} of the bare call (CPU). The call does "
                "almost nothing, so each microsecond of Python shows; on a real step (the "
                "value-and-gradient benchmark) it vanishes. Calling the jitted function "
                "positionally (`cg.jitted(kind)`) removes the API's part."
            )
    headers = [
        "call",
        "compiled (API)",
        "compiled function alone",
        "bare jit",
        f"API / bare, wall (target <= {TARGET})",
        "API / bare, CPU",
        "alone / bare, wall / CPU",
    ]
    return (
        "A call on a tiny graph (`tanh(W x + b)`, W 3x4): the compiled graph's API (leaves by "
        "name, then the jitted function), the compiled function alone (`cg.jitted(kind)`, "
        "positional device arrays: what the API calls), and a bare `jax.jit` function of the "
        "same math called with positional arrays. The NumPy row converts and checks inputs on "
        "the host each call (both sides). Wall time and this process's CPU time per call, "
        f"medians of {repeats} interleaved repeats of {number} calls; on a shared machine the "
        "CPU time is the steadier of the two.\n\n"
        + table(headers, rows)
        + "\n\n"
        + "\n".join([*notes, load_note(load0)])
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--no-write", action="store_true", help="print, do not update the docs")
    args = ap.parse_args()
    body = run(args.quick)
    print(body)
    if not args.no_write:
        write_section("compiler_overhead", "Compiler: per-call overhead on a tiny graph", body)


if __name__ == "__main__":
    main()
