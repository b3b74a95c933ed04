"""Shared pieces of the fuzz targets (``tests/fuzz/test_*.py``) and of the campaign
(``tests/fuzz/campaign.py``).

The property every target checks, at every entry point: an input is either accepted (and then
the result is right: a loaded graph checks, round-trips, compiles and evaluates to the
reference's values) or refused with the library's error (a ``TorchleanError`` whose message is
one line) or, for a command line, a documented exit code and one line on stderr; always within
a time bound, and nothing is written when a call fails.

Sizes: each target runs ``examples(n)`` hypothesis examples, ``n`` by default (a few minutes for
all targets together in CI), or ``TORCHLEAN_FUZZ_EXAMPLES`` when set (longer campaigns).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, settings

import torchlean_ir as tl

ENV = "TORCHLEAN_FUZZ_EXAMPLES"
#: Seconds any one call may take (a hang is a failure, not a slow test): generous, for a loaded
#: CI machine; the inputs are small.
TIME_BOUND = float(os.environ.get("TORCHLEAN_FUZZ_TIME_BOUND", "120"))
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_FILES = sorted((ROOT / "examples" / "graphs").glob("*.json"))
GOOD_FILE = ROOT / "examples" / "graphs" / "mlp_regression.json"


def examples(default: int) -> int:
    """How many examples a target runs: ``default``, or ``$TORCHLEAN_FUZZ_EXAMPLES``."""
    return int(os.environ.get(ENV, default))


def fuzz(default: int) -> Any:
    """Hypothesis settings of a fuzz target with ``default`` examples."""
    return settings(
        max_examples=examples(default),
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


class Hang(AssertionError):
    """A call ran past the time bound."""


@contextlib.contextmanager
def time_bound(what: str, seconds: float = TIME_BOUND) -> Iterator[None]:
    """Fail with :class:`Hang` if the block runs longer than ``seconds`` (SIGALRM; the main
    thread of a process, as pytest and its xdist workers run tests)."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang(f"{what}: still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def assert_one_line(message: str, what: str = "") -> None:
    assert message and "\n" not in message and "\r" not in message, (what, message)
    assert len(message) <= 2000, (what, len(message))


def assert_library_error(e: BaseException, cls: type[BaseException] = tl.TorchleanError) -> None:
    """``e`` is the library's error (``cls``), with a one-line message."""
    assert isinstance(e, cls), f"{type(e).__name__}: {e}"
    assert_one_line(str(e), type(e).__name__)


def attempt(fn: Callable[[], Any], what: str, cls: type[BaseException] = tl.TorchleanError) -> Any:
    """``fn()`` within the time bound: its result, or ``None`` when it raised the library's
    one-line error (anything else fails the test)."""
    with time_bound(what):
        try:
            return fn()
        except cls as e:
            assert_library_error(e, cls)
            return None


# -- a corpus of valid inputs and their mutations ---------------------------------------------


def seed_graphs() -> list[tl.GraphData]:
    """The example graphs and a few small ones touching every encoding."""
    out = [tl.load(p) for p in EXAMPLE_FILES]
    b = tl.GraphBuilder()
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,), requires_grad=False)
    label = b.index("label")
    rows = b.index("rows", 2, value=[0, 2])
    h = b.clamp(b.linear(W, bias, x), lo=float("-inf"), hi=1.0)
    small = b.const(np.array([0.1, -0.0, 2.5]))
    big = b.const(np.arange(70, dtype=np.float32) / 8)
    picked = b.gather_rows_nat(b.reshape(h + small, shape=(3, 1)), rows)
    loss = b.gather_scalar_nat(h, label) * 0.5 + b.sum(big) + b.sum(picked)
    out.append(b.build(loss, h))
    b = tl.GraphBuilder("f64")
    x = b.input("x", (2, 3), requires_grad=True)
    g = b.param("g", (3,))
    y = b.layer_norm(x, g, b.param("beta", (3,)), eps=1e-5)
    out.append(b.build(b.sum(b.gelu(y) * b.softmax(y))))
    return out


#: Tokens that hostile files are made of: numbers out of every range, non-JSON constants,
#: brackets, escapes, long runs.
TOKENS = [
    b"1e400",
    b"-1e400",
    b"NaN",
    b"Infinity",
    b"-1",
    b"0",
    b"-0.0",
    b"9223372036854775808",
    b"18446744073709551616",
    b"9" * 401,
    b"1" * 5000,
    b"[" * 40,
    b"{" * 40,
    b"]",
    b"}",
    b'"',
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b'"f64"',
    b'"nat"',
    b'"inf"',
    b"\xff\xfe",
    b"\x00",
    b",",
    b":",
    b'"args": [0, 0, 0]',
    b'"shape": [1048576, 1048576]',
    b'"shape": [1, 1, 1, 1, 1, 1, 1, 1, 1]',
]


def _some_bytes(rng: np.random.Generator, n: int) -> bytes:
    """Mostly printable ASCII (so that more corruptions get past UTF-8 decoding), sometimes
    anything."""
    if rng.random() < 0.15:
        return rng.bytes(n)
    return bytes(int(b) for b in rng.integers(32, 127, size=n))


def mutate_bytes(data: bytes, rng: np.random.Generator, rounds: int = 1) -> bytes:
    """``data`` with ``rounds`` random corruptions: truncation, byte flips, inserted tokens or
    random bytes, deleted or repeated ranges."""
    for _ in range(rounds):
        n = len(data)
        kind = int(rng.integers(0, 7))
        i = int(rng.integers(0, n + 1))
        j = int(rng.integers(i, min(n, i + 64) + 1))
        if kind == 0:
            data = data[:i]
        elif kind == 1 and n:
            k = int(rng.integers(0, n))
            data = data[:k] + _some_bytes(rng, 1) + data[k + 1 :]
        elif kind == 2:
            data = data[:i] + TOKENS[int(rng.integers(0, len(TOKENS)))] + data[i:]
        elif kind == 3:
            data = data[:i] + _some_bytes(rng, int(rng.integers(1, 16))) + data[i:]
        elif kind == 4:
            data = data[:i] + data[j:]
        elif kind == 5:
            data = data[:j] + data[i:j] * int(rng.integers(2, 5)) + data[j:]
        else:  # a number replaced by another
            digits = [k for k in range(n) if 48 <= data[k] <= 57]
            if digits:
                k = digits[int(rng.integers(0, len(digits)))]
                num = [b"0", b"1", b"7", b"-1", b"4294967296", b"1e30", b"0.5", b"99999"]
                data = data[:k] + num[int(rng.integers(0, len(num)))] + data[k + 1 :]
    return data


def random_json(rng: np.random.Generator, depth: int = 0) -> Any:
    """A random JSON value: numbers of every size, strings, lists, objects, a little nesting."""
    kind = int(rng.integers(0, 10 if depth < 3 else 7))
    if kind == 0:
        return int(rng.choice([0, 1, -1, 2, 7, 2**31, 2**63, 2**64, 10**30]))
    if kind == 1:
        return float(rng.choice([0.0, -0.0, 0.5, 1e-30, 1e30, 1e308, -2.5]))
    if kind == 2:
        return str(
            rng.choice(["", "x", "f32", "f64", "nat", "inf", "-inf", "param", "add", "\x00"])
        )
    if kind == 3:
        return bool(rng.integers(0, 2))
    if kind == 4:
        return None
    if kind == 5:
        return [int(v) for v in rng.integers(-2, 9, size=int(rng.integers(0, 5)))]
    if kind == 6:
        return "z" * int(rng.integers(100, 3000))
    if kind == 7:
        return [random_json(rng, depth + 1) for _ in range(int(rng.integers(0, 4)))]
    if kind == 8:
        keys = ["op", "args", "shape", "dtype", "attrs", "name", "kind", "value", "data", "q"]
        return {str(rng.choice(keys)): random_json(rng, depth + 1) for _ in range(3)}
    return list(range(int(rng.integers(0, 2000))))


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v[:50]):
            out += _paths(x, (*prefix, i))
    return out


def _tweak(d: Any, rng: np.random.Generator) -> bool:
    """An edit that often keeps the file valid (so that the result gets checked): a literal's
    element, a float attribute, a static index value, a ``requires_grad`` flag or an output
    changed. False if the graph has nothing of the kind drawn."""
    kind = int(rng.integers(0, 5))
    nodes, leaves, index = d["nodes"], d["leaves"], d.get("index_inputs", [])
    n_values = len(leaves) + len(nodes)
    floats = [0.0, -1.5, 1e30, -1e30, 1e-38, 3.4e38, 1e300, 0.1, 2.0]
    if kind == 0:
        lits = [a for n in nodes for a in n.get("attrs", {}).values() if isinstance(a, dict)]
        lits = [a for a in lits if "data" in a and a["data"] and a["dtype"] != "bool"]
        if not lits:
            return False
        lit = lits[int(rng.integers(0, len(lits)))]
        lit["data"][int(rng.integers(0, len(lit["data"])))] = float(rng.choice(floats))
    elif kind == 1:
        attrs = [n["attrs"] for n in nodes if "attrs" in n]
        keys = [(a, k) for a in attrs for k, v in a.items() if isinstance(v, float)]
        if not keys:
            return False
        a, k = keys[int(rng.integers(0, len(keys)))]
        a[k] = float(rng.choice(floats))
    elif kind == 2:
        static = [ix for ix in index if "value" in ix]
        if not static:
            return False
        ix = static[int(rng.integers(0, len(static)))]
        ix["value"] = [int(rng.choice([0, 1, 2, 5, 2**31, 2**63 - 1])) for _ in ix["value"]]
    elif kind == 3 and leaves:
        leaf = leaves[int(rng.integers(0, len(leaves)))]
        leaf["requires_grad"] = not leaf.get("requires_grad", True)
    elif kind == 4 and n_values:
        d["outputs"] = [int(rng.integers(0, n_values)) for _ in range(int(rng.integers(1, 3)))]
    else:
        return False
    return True


def mutate_dict(d: Any, rng: np.random.Generator) -> Any:
    """A structure-aware corruption of a decoded graph file: a value replaced by a random one,
    a key deleted or added, a list entry repeated; or an edit that keeps it valid (``_tweak``)."""
    d = json.loads(json.dumps(d))
    if rng.random() < 0.4:
        try:
            if _tweak(d, rng):
                return d
        except (KeyError, TypeError, IndexError, AttributeError, ValueError):
            pass  # an earlier edit broke the structure the tweak expects: edit below instead
    paths = [p for p in _paths(d) if p]
    path = paths[int(rng.integers(0, len(paths)))]
    parent = d
    for k in path[:-1]:
        parent = parent[k]
    key = path[-1]
    kind = int(rng.integers(0, 4))
    if kind == 0 and isinstance(parent, dict):
        del parent[key]
    elif kind == 1 and isinstance(parent, dict):
        parent["extra_" + str(int(rng.integers(0, 9)))] = random_json(rng)
    elif kind == 2 and isinstance(parent, list):
        parent.insert(key, parent[key])
    else:
        parent[key] = random_json(rng)
    return d


# -- what an accepted graph must do --------------------------------------------------------


def leaf_values(g: tl.GraphData, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {leaf.name: rng.normal(size=leaf.type.shape) for leaf in g.leaves}


def index_values(g: tl.GraphData, rng: np.random.Generator) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ix in g.index_inputs:
        if ix.value is None:
            out[ix.name] = rng.integers(0, 5, size=ix.type.shape)
    return out


def small_enough(g: tl.GraphData, elements: int = 4096, nodes: int = 64) -> bool:
    sizes = [leaf.type.size for leaf in g.leaves] + [n.type.size for n in g.nodes]
    return len(g.nodes) <= nodes and max(sizes, default=0) <= elements


def exercise(g: tl.GraphData, rng: np.random.Generator, *, compile: bool = True) -> None:
    """An accepted graph: it checks, round-trips through JSON and the text form, and (when
    small) evaluates, and its float64 compilation gives the reference's values."""
    tl.check(g)
    assert tl.loads(tl.dumps(g)) == g
    assert tl.parse_graph(tl.format_graph(g)) == g
    if not small_enough(g):
        return
    leaves, index = leaf_values(g, rng), index_values(g, rng)
    with np.errstate(all="ignore"):
        ref = tl.eval_graph(g, leaves, index)
    if not compile:
        return
    import compiler

    got = compiler.compile(g, dtype="float64").forward(leaves, index)
    got = got if isinstance(got, tuple) else (got,)
    for r, v in zip(ref, got, strict=True):
        r, v = np.asarray(r, np.float64), np.asarray(v, np.float64)
        scale = np.max(np.abs(r[np.isfinite(r)]), initial=1.0)
        np.testing.assert_allclose(v, r, rtol=1e-9, atol=1e-12 * scale, equal_nan=True)
