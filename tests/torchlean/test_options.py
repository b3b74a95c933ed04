"""Options, the seeded streams, and the unified Session."""

from __future__ import annotations

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import EagerSession, LinkedSession, Options, Session


def test_defaults_and_validation() -> None:
    o = Options()
    assert (o.backend, o.device, o.requires_grad, o.seed, o.fast_kernels, o.dtype) == (
        "eager",
        "cpu",
        True,
        0,
        True,
        "f32",
    )
    assert Options(dtype="float64").dtype == "f64"
    for bad, msg in (
        ({"backend": "lazy"}, "backend must be one of eager, compiled"),
        ({"device": "tpu"}, "device must be one of cpu, gpu"),
        ({"seed": -1}, "seed must be in"),
        ({"seed": 1.5}, "seed must be an int"),
        ({"dtype": "nat"}, "dtype must be 'f32' or 'f64'"),
    ):
        with pytest.raises(tl.TorchleanError, match=msg):
            Options(**bad)


def test_rng_streams_are_deterministic_and_independent() -> None:
    a, b = Options(seed=7), Options(seed=7)
    np.testing.assert_array_equal(a.rng("init").normal(size=4), b.rng("init").normal(size=4))
    assert not np.array_equal(a.rng("init").normal(size=4), a.rng("shuffle").normal(size=4))
    assert not np.array_equal(a.rng().normal(size=4), Options(seed=8).rng().normal(size=4))


def test_session_picks_the_backend() -> None:
    assert type(Session()) is EagerSession
    assert type(Session(Options(backend="compiled"))) is LinkedSession
    s = Session(Options(backend="compiled", dtype="f64"))
    assert isinstance(s, Session) and s.dtype == tl.DType.F64
    p = s.param(np.ones(2))
    assert p.requires_grad
    assert not Session(Options(requires_grad=False)).param(np.ones(2)).requires_grad
    assert Session(Options(requires_grad=False)).param(np.ones(2), requires_grad=True).requires_grad


def test_replace() -> None:
    o = Options(seed=3).replace(backend="compiled")
    assert o.backend == "compiled" and o.seed == 3
