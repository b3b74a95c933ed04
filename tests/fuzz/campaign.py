"""A fuzz campaign: N corrupted files and argument sets through every entry point, counted.

::

    PYTHONPATH=. python3 -m tests.fuzz.campaign --n 10000 [--seed 0] [--markdown FILE]

Each case is drawn from one entry point's generator (the same mutations as the hypothesis targets
in ``tests/fuzz/``) and classified:

* ``accepted``: the call returned, and the result passed its checks (a loaded or parsed graph
  checks, round-trips, evaluates, and its float64 compilation gives the reference's values; a
  compiled call gives the reference's values on the same arguments; loaded parameters are the
  file's; a command line exits 0 with an empty stderr);
* ``refused``: the library's error in one line (or, for a command line, a documented exit code
  and one line on stderr), nothing written or changed;
* ``traceback``: any other exception, or a message of several lines;
* ``hang``: the time bound (``TORCHLEAN_FUZZ_TIME_BOUND``, 120 s) ran out;
* ``wrong``: accepted, but a check of the result failed (a silent wrong result).

The campaign passes when the last three are all 0; the exit status says so (0 or 1).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import platform
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

import torchlean_ir as tl

from ._harness import (
    GOOD_FILE,
    Hang,
    exercise,
    mutate_bytes,
    mutate_dict,
    random_json,
    seed_graphs,
    time_bound,
)


class Wrong(Exception):
    """An accepted input whose result failed its check."""


class Refused(Exception):
    """The library's one-line refusal."""


def _one_line_or_traceback(e: BaseException) -> None:
    message = str(e)
    if not message or "\n" in message or len(message) > 2000:
        raise AssertionError(f"not one line: {message!r}") from e
    raise Refused(message) from e


def _checked(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` (an accepted input's checks): any failure is a wrong result."""
    try:
        return fn()
    except Hang:
        raise
    except Exception as e:
        raise Wrong(f"{type(e).__name__}: {e}") from e


def _call(fn: Callable[[], Any], cls: type[BaseException] = tl.TorchleanError) -> Any:
    try:
        return fn()
    except cls as e:
        _one_line_or_traceback(e)


# -- generators: one case of an entry point, from a seed ----------------------------------------


class Cases:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.graphs = seed_graphs()
        self.texts = [tl.dumps(g).encode() for g in self.graphs]
        self.dicts = [tl.graph_to_dict(g) for g in self.graphs]
        self.forms = [tl.format_graph(g) for g in self.graphs]

    def loads_bytes(self, rng: np.random.Generator) -> None:
        data = mutate_bytes(
            self.texts[int(rng.integers(0, len(self.texts)))], rng, int(rng.integers(1, 5))
        )
        g = _call(lambda: tl.loads(data), tl.GraphFormatError)
        _checked(lambda: exercise(g, rng))

    def loads_str(self, rng: np.random.Generator) -> None:
        raw = mutate_bytes(
            self.texts[int(rng.integers(0, len(self.texts)))], rng, int(rng.integers(1, 4))
        )
        text = raw.decode("utf-8", "surrogateescape")
        g = _call(lambda: tl.loads(text), tl.GraphFormatError)
        _checked(lambda: exercise(g, rng))

    def loads_edited(self, rng: np.random.Generator) -> None:
        d = self.dicts[int(rng.integers(0, len(self.dicts)))]
        for _ in range(int(rng.integers(1, 4))):
            d = mutate_dict(d, rng)
        text = json.dumps(d)
        g = _call(lambda: tl.loads(text), tl.GraphFormatError)
        _checked(lambda: exercise(g, rng))

    def load_file(self, rng: np.random.Generator) -> None:
        path = self.tmp / "g.json"
        path.write_bytes(mutate_bytes(self.texts[int(rng.integers(0, len(self.texts)))], rng, 2))
        limits = tl.Limits(max_bytes=int(rng.choice([1 << 12, 1 << 28, 10**23])))
        g = _call(lambda: tl.load(path, limits=limits), tl.GraphFormatError)
        _checked(lambda: exercise(g, rng))

    def parse_text(self, rng: np.random.Generator) -> None:
        raw = mutate_bytes(
            self.forms[int(rng.integers(0, len(self.forms)))].encode(), rng, int(rng.integers(1, 5))
        )
        text = raw.decode("utf-8", "replace")
        g = _call(lambda: tl.parse_graph(text), tl.GraphParseError)
        _checked(lambda: exercise(g, rng))

    def builder(self, rng: np.random.Generator) -> None:
        from . import test_fuzz_builder as fb

        pick = lambda pool: pool[int(rng.integers(0, len(pool)))]  # noqa: E731
        b = _call(lambda: tl.GraphBuilder(pick(["f32", "f64", "nat", 3])))
        vars_: list[Any] = []
        indices: list[Any] = []
        for _ in range(int(rng.integers(1, 20))):
            action = int(rng.integers(0, 6))
            try:
                if action == 0:
                    kind = pick(["input", "param"])
                    v = getattr(b, kind)(
                        pick(fb.NAMES), pick(fb.SHAPES), requires_grad=pick(fb.FLAGS)
                    )
                elif action == 1:
                    indices.append(
                        b.index(pick(fb.NAMES), pick(fb.INDEX_SIZES), value=pick(fb.INDEX_VALUES))
                    )
                    continue
                elif action == 2:
                    v = b.const(pick(fb.CONSTS))
                elif action == 3:
                    v = b.full(pick(fb.SHAPES), pick(fb.SCALARS))
                else:
                    op = pick([*fb.OPS, "nosuch"])
                    keys = list(tl.get_op(op).attrs) if tl.has_op(op) else ["c"]
                    pool = [*vars_, *indices, 3, None]
                    args = [pick(pool) for _ in range(int(rng.integers(0, 4)))]
                    attrs = {
                        pick([*keys, "bogus"]): pick(fb.ATTR_VALUES)
                        for _ in range(int(rng.integers(0, 3)))
                    }
                    v = b.apply(op, *args, **attrs)
                vars_.append(v)
            except tl.TorchleanError as e:
                if ", at " not in str(e):
                    raise AssertionError(f"no call site: {e}") from e
                with contextlib.suppress(Refused):
                    _one_line_or_traceback(e)
        if not vars_:
            raise Refused("nothing built")
        g = _call(lambda: b.build(*vars_[-int(rng.integers(1, 3)) :]))

        def check() -> None:
            try:
                text = tl.dumps(g, limits=tl.DEFAULT_LIMITS)
            except tl.GraphFormatError as e:  # must be exactly what the reader says
                try:
                    tl.loads(tl.dumps(g))
                except tl.GraphFormatError as reader:
                    assert str(reader) == str(e)
                    return
                raise
            assert tl.loads(text) == g
            exercise(g, rng)

        _checked(check)

    def compiled_args(self, rng: np.random.Generator) -> None:
        from . import test_fuzz_compiled as fc

        which = int(rng.integers(0, 2))
        g, c = fc._graphs()[which], fc._compiled(which)
        dtype = np.float32 if g.leaves[0].type.dtype == tl.DType.F32 else np.float64
        # mostly right values (so that results get checked), sometimes anything
        kinds = [int(rng.integers(0, 4 if rng.random() < 0.8 else 40)) for _ in range(4)]
        leaves = {
            leaf.name: fc._value(leaf.type.shape, rng, k)
            for leaf, k in zip(g.leaves, kinds, strict=False)
        }
        runtime = [ix for ix in g.index_inputs if ix.value is None]
        index = {ix.name: fc._index(ix.type.shape, rng, kinds[-1]) for ix in runtime}
        kind = str(rng.choice(["forward", "value_and_grad", "value_and_vjp"]))
        if kind == "forward":
            got = _call(lambda: c.forward(leaves, index))
        elif kind == "value_and_grad":
            got = _call(lambda: c.value_and_grad(leaves, index))[0]
        else:
            seed = tuple(fc._value(t.shape, rng, kinds[0]) for t in g.output_types)
            seed = seed[0] if len(seed) == 1 else seed
            got = _call(lambda: c.value_and_vjp(leaves, seed, index))[0]
        _checked(lambda: fc._same(got, fc._reference(g, leaves, index, dtype), dtype))

    def params(self, rng: np.random.Generator) -> None:
        from torchlean import load_params, read_params_file, save_params

        from . import test_fuzz_params as fp

        suffix = str(rng.choice([".npz", ".safetensors"]))
        pl = fp._params(rng)
        good = self.tmp / f"good{suffix}"
        save_params(fp._params(np.random.default_rng(int(rng.integers(0, 2**31)))), good)
        path = self.tmp / f"bad{suffix}"
        path.write_bytes(fp._hostile_file(rng, suffix, good.read_bytes()))
        before = {k: v.copy() for k, v in pl.values().items()}
        try:
            load_params(pl, path)
        except tl.TorchleanError as e:
            after = pl.values()
            if any(not np.array_equal(after[k], v) for k, v in before.items()):
                raise Wrong("a refused file changed a parameter") from e
            _one_line_or_traceback(e)
        arrays = _call(lambda: read_params_file(path))
        _checked(
            lambda: [
                np.testing.assert_array_equal(v, np.asarray(arrays[k], np.float64))
                for k, v in pl.values().items()
            ]
        )

    def cli(self, rng: np.random.Generator) -> None:
        from torchlean_ir import cli

        from . import test_fuzz_cli as fcli

        # argv from the target's vocabulary, drawn with this rng
        t = self.tmp
        paths = [str(GOOD_FILE), str(t / "bad.json"), str(t / "missing.json"), str(t),
                 "/dev/null", str(t / "a\nb.json"), "x" * 5000, "-", "", "\udcff.json"]  # fmt: skip
        (self.tmp / "bad.json").write_bytes(mutate_bytes(GOOD_FILE.read_bytes(), rng, 2))
        words = [
            "--max-nodes",
            "--max-bytes",
            "--short",
            "0",
            "-3",
            "1",
            "99999999999999999999999",
            "x",
            "9" * 5000,
        ]
        argv = [str(rng.choice(["check", "show", "frobnicate", "--help", "--version"]))]
        argv += [str(rng.choice(paths + words)) for _ in range(int(rng.integers(0, 4)))]
        kind = str(rng.choice(["ok", "ok", "full", "pipe", "closed"]))
        code, _, err = fcli._run_main(cli.main, argv, kind)
        if code not in (0, 2):
            raise AssertionError(f"exit code {code}: {err!r}")
        try:
            fcli._check_stderr("torchlean", code, err, kind)
        except AssertionError as e:
            raise AssertionError(f"stderr {err!r}") from e
        if code:
            raise Refused(err.splitlines()[-1])

    def junk_json(self, rng: np.random.Generator) -> None:
        d = random_json(rng)
        g = _call(lambda: tl.graph_from_dict(d), tl.GraphFormatError)
        _checked(lambda: exercise(g, rng))


ENTRY_POINTS = [
    "loads_bytes",
    "loads_str",
    "loads_edited",
    "load_file",
    "parse_text",
    "junk_json",
    "builder",
    "compiled_args",
    "params",
    "cli",
]


def run(
    n: int, seed: int, log: Callable[[str], None] = print
) -> dict[str, collections.Counter[str]]:
    counts: dict[str, collections.Counter[str]] = {e: collections.Counter() for e in ENTRY_POINTS}
    examples: dict[str, list[str]] = collections.defaultdict(list)
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        cases = Cases(Path(tmp))
        for i in range(n):
            entry = ENTRY_POINTS[i % len(ENTRY_POINTS)]
            rng = np.random.default_rng([seed, i])
            sink = io.StringIO()
            try:
                with (
                    time_bound(f"{entry} #{i}"),
                    contextlib.redirect_stderr(sink),
                    np.errstate(all="ignore"),
                ):
                    getattr(cases, entry)(rng)
                outcome = "accepted"
            except Refused:
                outcome = "refused"
            except Hang:
                outcome = "hang"
            except Wrong as e:
                outcome = "wrong"
                examples[outcome].append(f"{entry} #{i}: {e}")
            except BaseException as e:  # the campaign counts everything
                if isinstance(e, KeyboardInterrupt):
                    raise
                outcome = "traceback"
                examples[outcome].append(
                    f"{entry} #{i}: {''.join(traceback.format_exception_only(e)).strip()}"
                )
            counts[entry][outcome] += 1
            if (i + 1) % 500 == 0:
                log(f"{i + 1}/{n} cases, {time.monotonic() - start:.0f} s")
    for kind, lines in examples.items():
        for line in lines[:20]:
            log(f"{kind}: {line}")
    return counts


def table(counts: dict[str, collections.Counter[str]]) -> str:
    cols = ["accepted", "refused", "traceback", "hang", "wrong"]
    rows = ["| entry point | cases | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"]
    total: collections.Counter[str] = collections.Counter()
    for entry, c in counts.items():
        total.update(c)
        rows.append(
            f"| {entry} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |"
        )
    rows.append(
        f"| **all** | {sum(total.values())} | " + " | ".join(str(total[k]) for k in cols) + " |"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--markdown", help="also write the table, machine and date to this file")
    args = p.parse_args(argv)
    start = time.monotonic()
    counts = run(args.n, args.seed)
    text = table(counts)
    print(text)
    bad = sum(c[k] for c in counts.values() for k in ("traceback", "hang", "wrong"))
    summary = (
        f"{args.n} cases, seed {args.seed}, {time.monotonic() - start:.0f} s on "
        f"{platform.machine()} {platform.system()}, Python {platform.python_version()}, "
        f"{date.today().isoformat()}: {'PASS' if bad == 0 else 'FAIL'}"
    )
    print(summary)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n\n" + summary + "\n")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
