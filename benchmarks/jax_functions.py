"""JAX itself as the thing under test: ``jax.vjp`` and ``jax.jvp`` of ``jax.numpy`` / ``jax.nn``
functions, proved against the derivative of their forward at 2-D, 3-D and 4-D shapes.

Each row runs :func:`verify.verify_function` on one function (both modes) at three shapes and
records the verdict and seconds; a function the tensor level does not read is "not verified"
with its reason (the primitive), which the table shows. Writes the table into
``docs/functions.md`` (between its markers) and a summary into ``docs/benchmarks.md``.

    python3 benchmarks/jax_functions.py [--no-write] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import load_average, load_note, table, write_section

from verify import verify_function

SHAPES = [(8, 16), (4, 8, 16), (2, 3, 4, 6)]
PAGE = Path(__file__).resolve().parent.parent / "docs" / "functions.md"
BEGIN, END = "<!-- BEGIN jax_functions -->", "<!-- END jax_functions -->"


def _unary(fn: Callable[[Any], Any]) -> Callable[[tuple[int, ...]], tuple[Callable, list]]:
    return lambda shape: (fn, [jax.ShapeDtypeStruct(shape, jnp.float32)])


def _binary(fn: Callable[[Any, Any], Any]) -> Callable[[tuple[int, ...]], tuple[Callable, list]]:
    s = jax.ShapeDtypeStruct
    return lambda shape: (fn, [s(shape, jnp.float32), s(shape, jnp.float32)])


def _matmul(shape: tuple[int, ...]) -> tuple[Callable, list]:
    s = jax.ShapeDtypeStruct
    return jnp.matmul, [s(shape, jnp.float32), s((*shape[:-2], shape[-1], 3), jnp.float32)]


def _take_along(shape: tuple[int, ...]) -> tuple[Callable, list, dict]:
    s = jax.ShapeDtypeStruct
    f = lambda x, i: jnp.take_along_axis(x, i, -1)  # noqa: E731
    return f, [s(shape, jnp.float32), s((*shape[:-1], 2), jnp.int32)], {"i": shape[-1]}


#: name -> builder(shape) -> (function, example arguments[, index ranges])
FUNCTIONS: dict[str, Callable[[tuple[int, ...]], tuple]] = {
    "jnp.exp": _unary(jnp.exp),
    "jnp.log": _unary(jnp.log),
    "jnp.log1p": _unary(jnp.log1p),
    "jnp.expm1": _unary(jnp.expm1),
    "jnp.sin": _unary(jnp.sin),
    "jnp.cos": _unary(jnp.cos),
    "jnp.tanh": _unary(jnp.tanh),
    "jnp.sqrt": _unary(jnp.sqrt),
    "jax.lax.rsqrt": _unary(jax.lax.rsqrt),
    "jnp.abs": _unary(jnp.abs),
    "jnp.square": _unary(jnp.square),
    "jnp.reciprocal": _unary(jnp.reciprocal),
    "x ** 3": _unary(lambda x: x**3),
    "jnp.power(x, 2.5)": _unary(lambda x: jnp.power(x, 2.5)),
    "jnp.sign * x": _unary(lambda x: jnp.sign(x) * x),
    "jnp.clip": _unary(lambda x: jnp.clip(x, -0.5, 0.5)),
    "jnp.maximum": _binary(jnp.maximum),
    "jnp.minimum": _binary(jnp.minimum),
    "jnp.where": _binary(lambda x, y: jnp.where(x > y, x * y, x - y)),
    "jnp.arctan2": _binary(jnp.arctan2),
    "jnp.logaddexp": _binary(jnp.logaddexp),
    "jnp.sum": _unary(lambda x: jnp.sum(x, -1)),
    "jnp.mean": _unary(lambda x: jnp.mean(x, -1)),
    "jnp.max": _unary(lambda x: jnp.max(x, -1)),
    "jnp.min": _unary(lambda x: jnp.min(x, 0)),
    "jnp.var": _unary(lambda x: jnp.var(x, -1)),
    "jnp.std": _unary(lambda x: jnp.std(x, -1)),
    "jnp.prod": _unary(lambda x: jnp.prod(x, -1)),
    "jnp.cumsum": _unary(lambda x: jnp.cumsum(x, -1)),
    "jnp.cumprod": _unary(lambda x: jnp.cumprod(x, -1)),
    "jax.lax.cummax": _unary(lambda x: jax.lax.cummax(x, x.ndim - 1)),
    "jnp.sort": _unary(lambda x: jnp.sort(x, -1)),
    "jax.lax.top_k": _unary(lambda x: jax.lax.top_k(x, 3)[0]),
    "jnp.median": _unary(lambda x: jnp.median(x, -1)),
    "jnp.quantile": _unary(lambda x: jnp.quantile(x, 0.3, -1)),
    "jnp.matmul": _matmul,
    "jnp.einsum": _unary(lambda x: jnp.einsum("...ij,...kj->...ik", x, x)),
    "jnp.transpose": _unary(lambda x: jnp.transpose(x) * 2),
    "jnp.reshape": _unary(lambda x: jnp.reshape(x, (-1,)) ** 2),
    "jnp.concatenate": _binary(lambda x, y: jnp.concatenate([x, y * 2], -1)),
    "jnp.stack": _binary(lambda x, y: jnp.stack([x, y * y], 0)),
    "jnp.pad": _unary(lambda x: jnp.pad(x, 1) ** 2),
    "jnp.flip": _unary(lambda x: jnp.flip(x, -1) * x),
    "jnp.take_along_axis": _take_along,
    "x[..., ::2]": _unary(lambda x: x[..., ::2] * 3),
    "jax.nn.relu": _unary(jax.nn.relu),
    "jax.nn.relu6": _unary(jax.nn.relu6),
    "jax.nn.sigmoid": _unary(jax.nn.sigmoid),
    "jax.nn.log_sigmoid": _unary(jax.nn.log_sigmoid),
    "jax.nn.softplus": _unary(jax.nn.softplus),
    "jax.nn.silu": _unary(jax.nn.silu),
    "jax.nn.gelu (tanh)": _unary(lambda x: jax.nn.gelu(x, approximate=True)),
    "jax.nn.gelu (erf)": _unary(lambda x: jax.nn.gelu(x, approximate=False)),
    "jax.nn.elu": _unary(jax.nn.elu),
    "jax.nn.leaky_relu": _unary(jax.nn.leaky_relu),
    "jax.nn.hard_tanh": _unary(jax.nn.hard_tanh),
    "jax.nn.softmax": _unary(lambda x: jax.nn.softmax(x, -1)),
    "jax.nn.log_softmax": _unary(lambda x: jax.nn.log_softmax(x, -1)),
    "jax.nn.logsumexp": _unary(lambda x: jax.nn.logsumexp(x, -1)),
    "jax.nn.standardize": _unary(lambda x: jax.nn.standardize(x, -1)),
    "jax.nn.glu": _unary(lambda x: jax.nn.glu(x, -1)),
    "jax.scipy.special.erf": _unary(jax.scipy.special.erf),
}


def run(name: str, budget_s: float) -> list[tuple[str, float, str]]:
    """(verdict, seconds, reason when not verified) per shape of :data:`SHAPES`."""
    out = []
    for shape in SHAPES:
        built = FUNCTIONS[name](shape)
        fn, args = built[0], built[1]
        ranges = built[2] if len(built) > 2 else None
        t0 = time.perf_counter()
        r = verify_function(fn, *args, name=name, index_ranges=ranges, budget_s=budget_s)
        secs = time.perf_counter() - t0
        why = ""
        if r.verdict != "verified":
            bad = [c for c in r.all_checks if c.result != "pass"]
            why = bad[0].how if bad else ""
            if r.verdict == "mismatch" and r.counterexamples:
                why = r.counterexamples[0].describe()
        out.append((r.verdict, secs, why))
    return out


def _reason(text: str) -> str:
    m = re.search(r"primitive '([^']+)'", text)
    if m:
        return f"primitive `{m.group(1)}` not read"
    return text.split(";")[0][:90]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--only", nargs="*", default=None, metavar="NAME", help="these rows only")
    ap.add_argument("--budget", type=float, default=30.0, help="CPU seconds per check")
    args = ap.parse_args()
    load0 = load_average()
    rows = []
    counts = {"verified": 0, "mismatch": 0, "undecided": 0}
    for name in args.only or FUNCTIONS:
        res = run(name, args.budget)
        for verdict, _, _ in res:
            counts[verdict] += 1
        why = next((_reason(w) for v, _, w in res if v != "verified"), "")
        cells = [f"{v.upper() if v != 'undecided' else 'not verified'} ({s:.1f} s)"
                 for v, s, _ in res]  # fmt: skip
        rows.append([f"`{name}`", *cells, why])
        print(name, *cells, why, flush=True)
    headers = ["function", *(f"{list(s)}" for s in SHAPES), "why not verified"]
    body = table(headers, rows)
    print(body)
    if args.no_write or args.only:
        return
    stamp = time.strftime("%Y-%m-%d")
    text = PAGE.read_text()
    section = (f"{BEGIN}\n_Generated by `benchmarks/jax_functions.py` on {stamp} (both modes, "
               f"float32, {args.budget:g} s budget per check)._\n\n{body}\n{END}")  # fmt: skip
    pre, _, rest = text.partition(BEGIN)
    _, _, post = rest.partition(END)
    PAGE.write_text(pre + section + post)
    summary = (f"{len(rows)} functions at {len(SHAPES)} shapes each: {counts['verified']} "
               f"verified, {counts['mismatch']} mismatches, {counts['undecided']} not verified. "
               "A mismatch's counterexample says where: at a kink or a tie it is a derivative "
               "that none of the choices tried there gives (docs/functions.md, Kinks), "
               "elsewhere a bug in JAX. Table in "
               "`docs/functions.md`.\n\n" + load_note(load0))  # fmt: skip
    write_section("jax_functions", "JAX's own derivatives, proved", summary)


if __name__ == "__main__":
    main()
