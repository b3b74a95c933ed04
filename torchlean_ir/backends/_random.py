"""The seeded generator of the random ops (``docs/ops.md``, "Randomness"), in NumPy.

SplitMix64 as a stateless hash (Steele, Lea and Flood 2014; the finaliser of Java's
``SplittableRandom``)::

    splitmix64(x) = mix(x + 0x9E3779B97F4A7C15 mod 2^64)
    mix(z): z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB;
            z ^= z >> 31                                                      (all mod 2^64)

A random node at position ``counter`` of a graph, with attribute ``seed``, draws element
``i`` (row-major linear index) as::

    key  = splitmix64(seed + counter mod 2^64)
    k[i] = splitmix64(key + i mod 2^64) mod 2^32          (a 32-bit integer)
    u[i] = k[i] / 2^32                                    (in [0, 1), exact in float64)

In float32, ``u`` is ``k / 2^32`` rounded toward zero (``k`` keeps its 24 leading significant
bits), so ``u < 1`` in every dtype and ``p > u`` has the same truth value as ``p > k / 2^32``
for every float32 ``p`` (the largest float32 not above ``k / 2^32`` separates the same floats).
The precision is the node's own dtype (``rand_uniform``'s ``dtype`` attribute) or the
backend's, whichever is narrower, so a float32 graph draws the same bits in the float64
reference interpreter as in float32 compiled code.

This module is the reference; the JAX backend computes the same bits on device with pairs of
uint32 words (no ``jax_enable_x64`` needed) and the symbolic backend returns ``k / 2^32`` as
exact rationals. Everything here is a plain function of Python ints, so the eager session and
tests can call it directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
#: The exponent of the 32-bit draws: ``u = k * 2**-32``.
UNIT = 2.0**-32


def splitmix64(x: int) -> int:
    """SplitMix64 of a 64-bit value (Python ints, taken mod 2^64)."""
    z = (x + GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, counter: int) -> int:
    """The key of the random node at position ``counter``: ``splitmix64(seed + counter)``."""
    return splitmix64((seed + counter) & MASK64)


def random_bits(seed: int, counter: int, shape: Sequence[int]) -> np.ndarray:
    """The 32-bit draws ``k`` (``uint32``, of ``shape``) of the node at position ``counter``."""
    shape = tuple(int(d) for d in shape)
    base = (stream_key(seed, counter) + GAMMA) & MASK64
    with np.errstate(over="ignore"):
        z = np.arange(math.prod(shape), dtype=np.uint64) + np.uint64(base)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MIX2)
        z = z ^ (z >> np.uint64(31))
    return (z & np.uint64(MASK32)).astype(np.uint32).reshape(shape)


def significant_bits(dtype: Any) -> int:
    """Significand precision of a float dtype (24 for float32, 53 for float64)."""
    dt = float_dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"random values are defined in float32 and float64, not {dt}")
    return int(np.finfo(dt).nmant) + 1


def float_dtype(dtype: Any) -> np.dtype:
    """A float dtype from a NumPy dtype (or its name) or a graph dtype name (``"f32"``)."""
    return np.dtype({"f32": "float32", "f64": "float64"}.get(dtype, dtype))


def narrowest(*dtypes: Any) -> np.dtype:
    """Of the float dtypes given (``None`` skipped), the one with the fewest significant bits:
    the precision in which draws are rounded when a backend in one dtype computes a node of
    another (an f32 graph compiled in f64, an f64 one in f32)."""
    given = [float_dtype(d) for d in dtypes if d is not None]
    return min(given, key=significant_bits)


def truncated_bits(bits: np.ndarray, dtype: Any) -> np.ndarray:
    """The draws ``k`` (``uint64``) with only the leading significant bits ``dtype`` holds:
    ``k / 2^32`` rounded toward zero in ``dtype`` is ``truncated_bits(k) / 2^32``, exactly."""
    p = significant_bits(dtype)
    k = np.asarray(bits, dtype=np.uint64)
    if p < 32:
        _, exponent = np.frexp(k.astype(np.float64))  # bit length of k (0 for k = 0)
        drop = np.maximum(exponent - p, 0).astype(np.uint64)
        k = (k >> drop) << drop
    return k


def uniform_from_bits(bits: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``bits / 2^32`` in ``dtype``, rounded toward zero where the dtype is narrower."""
    dt = float_dtype(dtype)
    return truncated_bits(bits, dt).astype(dt) * np.asarray(UNIT, dtype=dt)


def uniform(seed: int, counter: int, shape: Sequence[int], dtype: Any = np.float64) -> np.ndarray:
    """The uniform draws ``u`` of the node at position ``counter`` (``rand_uniform``)."""
    return uniform_from_bits(random_bits(seed, counter, shape), dtype)


def bernoulli(
    keep_prob: float, seed: int, counter: int, shape: Sequence[int], dtype: Any = np.float64
) -> np.ndarray:
    """The mask of ``bernoulli_mask``: 1 where ``keep_prob > u``, else 0."""
    u = uniform(seed, counter, shape, dtype)
    return (np.asarray(keep_prob, dtype=dtype) > u).astype(dtype)


__all__ = [
    "GAMMA",
    "MIX1",
    "MIX2",
    "UNIT",
    "bernoulli",
    "float_dtype",
    "narrowest",
    "random_bits",
    "significant_bits",
    "splitmix64",
    "stream_key",
    "truncated_bits",
    "uniform",
    "uniform_from_bits",
]
