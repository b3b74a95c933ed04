"""Fuzz targets: the JSON loader (bytes, str, decoded dicts, files) and the text parser.

A corrupted file either loads to a graph that checks, round-trips, evaluates and compiles to the
reference's values, or is refused with one ``GraphFormatError`` line; within the time bound.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl

from ..strategies import graphs
from ._harness import (
    attempt,
    exercise,
    fuzz,
    mutate_bytes,
    mutate_dict,
    random_json,
    seed_graphs,
)

SEEDS = seed_graphs()
SEED_TEXT = [tl.dumps(g).encode() for g in SEEDS]
SEED_DICTS = [tl.graph_to_dict(g) for g in SEEDS]
SEED_FORMS = [tl.format_graph(g) for g in SEEDS]
seeds = st.integers(0, 2**32 - 1)


def _load_bytes(data: bytes, rng: np.random.Generator) -> None:
    g = attempt(lambda: tl.loads(data), "loads(bytes)", tl.GraphFormatError)
    if g is not None:
        exercise(g, rng)


@fuzz(400)
@given(st.integers(0, len(SEED_TEXT) - 1), st.integers(1, 4), seeds)
def test_loads_bytes_corrupted(which: int, rounds: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    _load_bytes(mutate_bytes(SEED_TEXT[which], rng, rounds), rng)


@fuzz(200)
@given(st.binary(max_size=400), seeds)
def test_loads_arbitrary_bytes(data: bytes, seed: int) -> None:
    _load_bytes(data, np.random.default_rng(seed))


@fuzz(200)
@given(st.integers(0, len(SEED_TEXT) - 1), st.integers(1, 3), seeds)
def test_loads_str_corrupted(which: int, rounds: int, seed: int) -> None:
    """The str path (no UTF-8 decoding; lone surrogates possible)."""
    rng = np.random.default_rng(seed)
    text = mutate_bytes(SEED_TEXT[which], rng, rounds).decode("utf-8", "surrogateescape")
    g = attempt(lambda: tl.loads(text), "loads(str)", tl.GraphFormatError)
    if g is not None:
        exercise(g, rng)


@fuzz(400)
@given(st.integers(0, len(SEED_DICTS) - 1), st.integers(1, 3), seeds)
def test_loads_structure_aware_edits(which: int, rounds: int, seed: int) -> None:
    """Well-formed JSON with wrong contents: a value replaced by a random one (huge numbers,
    long lists and strings, wrong types), a key deleted or added, a list entry repeated."""
    rng = np.random.default_rng(seed)
    d = SEED_DICTS[which]
    for _ in range(rounds):
        d = mutate_dict(d, rng)
    text = json.dumps(d)
    g = attempt(lambda: tl.loads(text), "loads(edited)", tl.GraphFormatError)
    if g is not None:
        exercise(g, rng)
    g = attempt(lambda: tl.graph_from_dict(d), "graph_from_dict", tl.GraphFormatError)
    if g is not None:
        tl.check(g)


@fuzz(40)
@given(graphs(), seeds)
def test_random_graphs_round_trip_and_compile(g: tl.GraphData, seed: int) -> None:
    exercise(g, np.random.default_rng(seed))


@fuzz(300)
@given(st.integers(0, len(SEED_FORMS) - 1), st.integers(1, 4), seeds)
def test_parse_graph_corrupted(which: int, rounds: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    text = mutate_bytes(SEED_FORMS[which].encode(), rng, rounds).decode("utf-8", "replace")
    g = attempt(lambda: tl.parse_graph(text), "parse_graph", tl.GraphParseError)
    if g is not None:
        exercise(g, rng)


@fuzz(200)
@given(st.text(max_size=300))
def test_parse_graph_arbitrary_text(text: str) -> None:
    g = attempt(lambda: tl.parse_graph(text), "parse_graph", tl.GraphParseError)
    assert g is None or tl.check(g) is g


@fuzz(40)
@given(seeds)
def test_load_from_files_and_odd_paths(tmp_path_factory, seed: int) -> None:  # type: ignore[no-untyped-def]
    """``load`` of corrupted files, directories, devices, missing and overlong paths."""
    rng = np.random.default_rng(seed)
    tmp: Path = tmp_path_factory.mktemp("load")
    data = mutate_bytes(SEED_TEXT[int(rng.integers(0, len(SEED_TEXT)))], rng, 2)
    name = rng.choice(["g.json", "\n.json", "\udcff.json", "x" * 300, "-", " "])
    path = tmp / str(name)
    with contextlib.suppress(OSError):  # a name refused (too long): load says it cannot read
        path.write_bytes(data)
    limits = tl.Limits(max_bytes=int(rng.choice([1 << 28, 1 << 12, 10**23])))
    for p in (path, tmp, tmp / "missing.json", "/dev/null"):
        g = attempt(lambda p=p: tl.load(p, limits=limits), f"load({p})", tl.GraphFormatError)
        if g is not None:
            exercise(g, rng, compile=False)
    # an endless device is read up to the limit (without one, as asked, it is read forever)
    attempt(lambda: tl.load("/dev/zero", limits=tl.Limits(max_bytes=1 << 12)), "/dev/zero")


@fuzz(30)
@given(seeds)
def test_limits_random(seed: int) -> None:
    """Any positive limits: a graph loads under them or is refused in one line, and what
    ``save`` writes under them, ``load`` reads back under them."""
    rng = np.random.default_rng(seed)
    fields = list(tl.Limits.__dataclass_fields__)
    limits = tl.Limits(
        **{f: int(rng.choice([1, 2, 5, 64, 10**4, 10**23])) for f in fields if rng.random() < 0.4}
    )
    g = SEEDS[int(rng.integers(0, len(SEEDS)))]
    text = attempt(lambda: tl.dumps(g, limits=limits), "dumps(limits)", tl.GraphFormatError)
    back = attempt(lambda: tl.loads(tl.dumps(g), limits=limits), "loads", tl.GraphFormatError)
    assert (text is None) == (back is None)
    if back is not None:
        assert back == g
    junk = random_json(rng)
    attempt(lambda: tl.graph_from_dict(junk, limits=limits), "graph_from_dict", tl.GraphFormatError)
