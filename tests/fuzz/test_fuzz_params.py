"""Fuzz target: parameter files (``.npz``, ``.safetensors``) through the public API.

Truncated and corrupted files, mismatched names, shapes and dtypes, pickled (object) arrays,
huge declared arrays and zip bombs: ``load_params`` either loads exactly what the file holds or
raises a one-line ``TorchleanError`` and changes no parameter; ``read_params_file`` returns the
arrays or raises the same; within the time bound.
"""

from __future__ import annotations

import io
import json
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl
from torchlean import Param, ParamList, load_params, read_params_file, save_params

from ._harness import attempt, fuzz, mutate_bytes

pytest.importorskip("safetensors")

SHAPES = [(), (2,), (3,), (2, 3), (0,), (1 << 32,), (2**40, 2**40), (-1,), (1,) * 9]
DTYPES = ["<f8", "<f4", "<f2", "<i8", "|b1", "<c16", "|O", "<U3", ">f8"]


def _params(rng: np.random.Generator) -> ParamList:
    return ParamList(
        [
            Param(rng.normal(size=(2, 3)), name="w"),
            Param(rng.normal(size=(3,)), name="layer.b"),
        ]
    )


def _npz(members: list[tuple[str, Any, str, bytes | None]]) -> bytes:
    """An .npz of (name, declared shape, dtype, payload or None for the right number of zero
    bytes), written by hand so that headers can lie."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, shape, dtype, payload in members:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": dtype, "fortran_order": False, "shape": shape}
            )
            if payload is None:
                n = int(np.prod(shape)) if all(d >= 0 for d in shape) else 0
                size = min(n * np.dtype(dtype).itemsize, 1 << 16)
                payload = b"\0" * size
            z.writestr(name + ".npy", header.getvalue() + payload)
    return buf.getvalue()


def _safetensors(entries: list[tuple[str, str, list[int], list[int]]], data: bytes) -> bytes:
    """A .safetensors of (name, dtype, shape, offsets) over ``data``, header written by hand."""
    header = {n: {"dtype": d, "shape": s, "data_offsets": o} for n, d, s, o in entries}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def _hostile_file(rng: np.random.Generator, suffix: str, good: bytes) -> bytes:
    kind = int(rng.integers(0, 5))
    if kind == 0:
        return mutate_bytes(good, rng, int(rng.integers(1, 4)))
    if kind == 1:
        return good[: int(rng.integers(0, len(good)))]
    if suffix == ".npz":
        names = ["w", "layer.b", "x", "", "w" * 300]
        members = [
            (
                str(rng.choice(names)),
                SHAPES[int(rng.integers(0, len(SHAPES)))],
                str(rng.choice(DTYPES)),
                None if rng.random() < 0.7 else rng.bytes(int(rng.integers(0, 64))),
            )
            for _ in range(int(rng.integers(0, 4)))
        ]
        if kind == 4:  # the right names and shapes, possibly the wrong dtype
            members = [("w", (2, 3), str(rng.choice(DTYPES)), None), ("layer.b", (3,), "<f8", None)]
        return _npz(members)
    dtypes = ["F64", "F32", "F16", "I64", "BOOL", "U8", "BF16", "nonsense"]
    entries = []
    for name in rng.choice(["w", "layer.b", "x"], size=int(rng.integers(0, 3))):
        shape = [int(d) for d in SHAPES[int(rng.integers(0, len(SHAPES) - 2))]]
        lo = int(rng.integers(0, 64))
        hi = lo + int(rng.choice([0, 8, 24, 48, 10**12]))
        entries.append((str(name), str(rng.choice(dtypes)), shape, [lo, hi]))
    return _safetensors(entries, rng.bytes(int(rng.integers(0, 128))))


@fuzz(150)
@given(st.sampled_from([".npz", ".safetensors"]), st.integers(0, 2**32 - 1))
def test_load_params_hostile_files(tmp_path_factory, suffix: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    tmp: Path = tmp_path_factory.mktemp("params")
    pl = _params(rng)
    good = tmp / f"good{suffix}"
    save_params(_params(np.random.default_rng(seed + 1)), good)
    path = tmp / f"bad{suffix}"
    path.write_bytes(_hostile_file(rng, suffix, good.read_bytes()))
    before = {k: v.copy() for k, v in pl.values().items()}
    ok = attempt(lambda: load_params(pl, path) or True, "load_params")
    arrays = attempt(lambda: read_params_file(path), "read_params_file")
    after = pl.values()
    if ok is None:  # refused: nothing changed
        for k, v in before.items():
            np.testing.assert_array_equal(after[k], v)
    else:  # loaded: exactly what the file holds
        assert arrays is not None
        for k, v in after.items():
            np.testing.assert_array_equal(v, np.asarray(arrays[k], np.float64))


@fuzz(40)
@given(st.integers(0, 2**32 - 1))
def test_save_params_and_odd_paths(tmp_path_factory, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    tmp: Path = tmp_path_factory.mktemp("save")
    pl = _params(rng)
    name = str(rng.choice(["p.npz", "p.safetensors", "p.pt", "p", "x" * 300 + ".npz", ".npz"]))
    target = [tmp / name, tmp, tmp / "missing" / "p.npz", Path("/dev/full") / "p.npz"][
        int(rng.integers(0, 4))
    ]
    try:
        result = attempt(lambda: save_params(pl, target) or True, "save_params")
    except OSError:  # the file system's answer (a directory, too long a name): nothing written
        result = None
    leftovers = [p.name for p in tmp.iterdir() if p.name.startswith(".")]
    assert leftovers == [], leftovers  # no temporary file left behind
    if result is not None:
        back = _params(np.random.default_rng(seed + 7))
        load_params(back, target)
        for k, v in pl.values().items():
            np.testing.assert_array_equal(back[k].value, v)
    attempt(lambda: load_params(pl, target), "load_params", tl.TorchleanError)
