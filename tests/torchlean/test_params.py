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
    np.savez(pickled, a=np.array([object()], dtype=object))
    with pytest.raises(tl.TorchleanError, match=r"not a readable \.npz"):
        load_params(pl, pickled)
    ints = tmp_path / "ints.npz"
    np.savez(ints, a=np.array([1, 2]))
    with pytest.raises(tl.TorchleanError, match="'a' has dtype int64, expected a float"):
        load_params(pl, ints)
