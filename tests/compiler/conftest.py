"""Compiler tests: free compiled executables at the end of the session, while the worker is
still running normally (under pytest-xdist, a garbage collection during worker shutdown would
otherwise run JAX's collector callback at the moment the worker is interrupted)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import jax
import pytest

import compiler


@pytest.fixture(scope="session", autouse=True)
def _free_executables() -> Iterator[None]:
    yield
    compiler.clear_cache()
    jax.clear_caches()
    gc.collect()
