"""Random seeds that are the same in every process.

``hash(str)`` is salted per process (``PYTHONHASHSEED``), so a seed drawn from it changes from
run to run and a failing input cannot be reproduced; :func:`seed_of` is a stable hash."""

from __future__ import annotations

import hashlib

import numpy as np


def seed_of(key: str) -> int:
    """A 32-bit seed determined by ``key`` alone."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "little")


def rng_for(key: str) -> np.random.Generator:
    """A NumPy generator seeded by :func:`seed_of`."""
    return np.random.default_rng(seed_of(key))
