"""Param, ParamList and parameter files."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import Param, ParamList, load_params, read_params_file, save_params


def test_param_value_is_a_read_only_copy() -> None:
    src = np.array([1.0, 2.0])
    p = Param(src, name="w")
    src[0] = 99.0
    assert p.value[0] == 1.0
    with pytest.raises(ValueError):
        p.value[0] = 3.0
    p.value = [3.0, 4.0]
    np.testing.assert_array_equal(p.value, [3.0, 4.0])
    with pytest.raises(tl.TorchleanError, match=r"cannot assign a value of shape \[3\]"):
        p.value = np.ones(3)
    with pytest.raises(tl.TorchleanError, match="non-finite"):
        Param([np.nan])
    with pytest.raises(tl.TorchleanError, match="invalid name"):
        Param(1.0, name="1bad")


def test_device_mirror_syncs_explicitly() -> None:
    p = Param(np.array([1.0, 2.0]), name="w")
    dev = jax.devices("cpu")[0]
    d = p.device_value(dev, np.float32)
    assert d.dtype == np.float32 and p.device_value(dev, np.float32) is d  # the mirror is kept
    p._set_device(d * 2)
    assert not p.synced
    p.sync()
    assert p.synced
    np.testing.assert_array_equal(p.value, [2.0, 4.0])
    p.value = [0.0, 0.0]  # assigning drops the mirror
    assert p._device is None


def test_param_list_names_and_values() -> None:
    a, b = Param(np.ones(2)), Param(np.zeros((2, 2)), name="b")
    pl = ParamList([a, b])
    assert pl.names() == ["p0", "b"] and pl["b"] is b and pl[0] is a and b in pl
    assert pl.shapes() == {"p0": (2,), "b": (2, 2)} and pl.num_params() == 6
    with pytest.raises(tl.TorchleanError, match="two different params are named 'b'"):
        ParamList([b, Param(1.0, name="b")])
    pl2 = ParamList({"x": Param(np.ones(1))})
    assert pl2.names() == ["x"]


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_save_load_round_trip(tmp_path, suffix: str) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(0)
    pl = ParamList(
        [
            Param(rng.normal(size=(3, 2)), name="fc.weight"),
            Param(rng.normal(size=3), name="fc.bias"),
        ]
    )
    path = tmp_path / f"params{suffix}"
    save_params(pl, path)
    fresh = ParamList(
        [Param(np.zeros((3, 2)), name="fc.weight"), Param(np.zeros(3), name="fc.bias")]
    )
    load_params(fresh, path)
    for p, q in zip(pl, fresh, strict=True):
        np.testing.assert_array_equal(p.value, q.value)
    assert set(read_params_file(path)) == {"fc.weight", "fc.bias"}


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_0d_params_keep_their_shape(tmp_path, suffix: str) -> None:  # type: ignore[no-untyped-def]
    """A scalar parameter is written 0-d (it was written as shape [1] and then refused)."""
    path = tmp_path / f"scalar{suffix}"
    save_params(ParamList([Param(2.5, name="scale"), Param(np.ones(2), name="b")]), path)
    assert read_params_file(path)["scale"].shape == ()
    fresh = ParamList([Param(0.0, name="scale"), Param(np.zeros(2), name="b")])
    load_params(fresh, path)
    assert fresh["scale"].value.shape == () and float(fresh["scale"].value) == 2.5


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_load_mismatch_is_one_line_and_loads_nothing(tmp_path, suffix: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"p{suffix}"
    save_params(ParamList([Param(np.ones(2), name="a"), Param(np.ones((2, 2)), name="b")]), path)
    cases = [
        (
            [Param(np.zeros(2), name="a"), Param(np.zeros((2, 3)), name="b")],
            r"shape mismatch for 'b': got \[2,2\].*\[2,3\]|shape mismatch for 'b': got \[2, 2\]",
        ),
        ([Param(np.zeros(2), name="a")], "unexpected parameter 'b'"),
        (
            [
                Param(np.zeros(2), name="a"),
                Param(np.zeros((2, 2)), name="b"),
                Param(np.zeros(1), name="c"),
            ],
            "missing parameter 'c'",
        ),
    ]
    for params, msg in cases:
        pl = ParamList(params)
        with pytest.raises(tl.TorchleanError, match=msg) as e:
            load_params(pl, path)
        assert "\n" not in str(e.value) and str(path) in str(e.value)
        for p in pl:
            assert not np.any(p.value), "a failed load must change nothing"


def test_bad_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pl = ParamList([Param(np.ones(2), name="a")])
    with pytest.raises(tl.TorchleanError, match=r"unknown parameter file format '\.pt'"):
        save_params(pl, tmp_path / "x.pt")
    with pytest.raises(tl.TorchleanError, match="no such file"):
        load_params(pl, tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(tl.TorchleanError, match=r"not a readable \.npz parameter file") as e:
        load_params(pl, bad)
    assert "\n" not in str(e.value)
    pickled = tmp_path / "obj.npz"
    np.savez(pickled, a=np.array([object(), object()], dtype=object))
    with pytest.raises(tl.TorchleanError, match="'a' has dtype object, expected a float"):
        load_params(pl, pickled)  # refused from its header: nothing is unpickled
    with pytest.raises(tl.TorchleanError, match=r"not a readable \.npz"):
        read_params_file(pickled)
    ints = tmp_path / "ints.npz"
    np.savez(ints, a=np.array([1, 2]))
    with pytest.raises(tl.TorchleanError, match="'a' has dtype int64, expected a float"):
        load_params(pl, ints)


def _npz_member(
    path, name: str, shape: tuple[int, ...], payload: bytes, dtype: str = "<f8"
) -> None:  # type: ignore[no-untyped-def]
    """An .npz whose member ``name`` declares ``shape`` and holds ``payload`` (deflated)."""
    import io
    import zipfile

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name + ".npy", header.getvalue() + payload)


def test_huge_declared_arrays_and_zip_bombs_are_refused_from_the_headers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 32 GB array declared in a tiny file (or a zip bomb) is refused before any data is
    read or decompressed; the parameters are unchanged."""
    import tracemalloc

    pl = ParamList([Param(np.ones(2), name="a")])
    bomb = tmp_path / "bomb.npz"
    _npz_member(bomb, "a", (1 << 32,), b"\0" * (1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(tl.TorchleanError, match=r"shape mismatch for 'a': got \[4294967296\]"):
            load_params(pl, bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 24
    assert pl["a"].value.tolist() == [1.0, 1.0]


def test_truncated_and_mismatched_files_change_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pl = ParamList([Param(np.ones(2), name="a"), Param(np.zeros(3), name="b")])
    for suffix in (".npz", ".safetensors"):
        good = tmp_path / f"good{suffix}"
        other = ParamList([Param(np.full(2, 7.0), name="a"), Param(np.full(3, 8.0), name="b")])
        save_params(other, good)
        data = good.read_bytes()
        for cut in (0, 10, len(data) // 2, len(data) - 1):
            bad = tmp_path / f"cut{cut}{suffix}"
            bad.write_bytes(data[:cut])
            with pytest.raises(tl.TorchleanError) as e:
                load_params(pl, bad)
            assert "\n" not in str(e.value)
            assert pl["a"].value.tolist() == [1.0, 1.0] and pl["b"].value.tolist() == [0.0] * 3
        load_params(pl, good)
        assert pl["a"].value.tolist() == [7.0, 7.0]
        pl["a"].value, pl["b"].value = np.ones(2), np.zeros(3)
    short = tmp_path / "short.npz"
    _npz_member(short, "a", (2,), b"\0" * 8)  # declares 2 float64, holds 1
    with pytest.raises(tl.TorchleanError, match=r"not a readable \.npz parameter file"):
        load_params(ParamList([Param(np.ones(2), name="a")]), short)


def test_save_is_all_or_nothing(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import os

    pl = ParamList([Param(np.ones(2), name="a")])
    path = tmp_path / "p.npz"
    path.write_bytes(b"old")

    def fail(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        save_params(pl, path)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]


@pytest.mark.parametrize("kind", ["zero", "fifo"])
def test_devices_and_fifos_are_refused_before_they_are_opened(tmp_path, kind: str) -> None:  # type: ignore[no-untyped-def]
    """A .npz name linked to /dev/zero was read until memory ran out; opening a FIFO waited for
    a writer. Both are refused from os.stat, in one line naming the path."""
    import os
    import signal

    def hang(signum: int, frame: object) -> None:
        raise AssertionError("load_params still running after 60 s")

    signal.signal(signal.SIGALRM, hang)
    pl = ParamList([Param(np.ones(2), name="a")])
    for name in ("p.npz", "p.safetensors"):
        path = tmp_path / name
        if kind == "zero":
            path.symlink_to("/dev/zero")
            want = f"{path} (a link to /dev/zero): not a regular file but a character device"
        else:
            os.mkfifo(path)
            want = f"{path}: not a regular file but a FIFO"
        signal.alarm(60)  # a regression hangs: fail instead
        try:
            with pytest.raises(tl.TorchleanError) as e:
                load_params(pl, path)
            assert str(e.value) == f"{want}; refused"
            with pytest.raises(tl.TorchleanError, match="not a regular file"):
                read_params_file(path)
        finally:
            signal.alarm(0)
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    assert pl["a"].value.tolist() == [1.0, 1.0]


def test_files_over_max_bytes_are_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pl = ParamList([Param(np.ones(1000), name="a")])
    path = tmp_path / "p.npz"
    save_params(pl, path)
    size = path.stat().st_size
    with pytest.raises(tl.TorchleanError) as e:
        load_params(pl, path, max_bytes=size - 1)
    assert str(e.value) == f"{path}: file of {size} bytes exceeds the limit {size - 1}"
    with pytest.raises(tl.TorchleanError, match="exceeds the limit"):
        read_params_file(path, max_bytes=100)
    load_params(pl, path, max_bytes=size)
