"""Backends: the array namespaces op rules are written against.

* :data:`NUMPY` - NumPy float64, the reference semantics (:func:`numpy_backend` gives it in
  float32 too);
* :func:`jax_backend` - ``jax.numpy`` in a chosen float dtype, the compiler's lowering;
* :data:`SYM` - exact symengine arrays, the verifier's symbolic semantics.

The seeded generator of the random ops (SplitMix64, ``docs/ops-notes.md``) is every backend's
``rand_uniform(seed, counter, shape, dtype)``; its NumPy reference functions are re-exported here
(:func:`splitmix64`, :func:`random_bits`, :func:`uniform_from_bits`) for the eager session and
tests.
"""

from typing import Any

from ._numpy import NUMPY, NumpyBackend, numpy_backend
from ._random import random_bits, splitmix64, uniform_from_bits
from ._sym import SYM, SymArray, SymBackend, exact, symbols

__all__ = [
    "NUMPY",
    "SYM",
    "JaxBackend",
    "NumpyBackend",
    "SymArray",
    "SymBackend",
    "exact",
    "jax_backend",
    "numpy_backend",
    "random_bits",
    "splitmix64",
    "symbols",
    "uniform_from_bits",
]


def __getattr__(name: str) -> Any:
    # JAX is imported only when the JAX backend is asked for (the CLI's check/show never is).
    if name in ("JaxBackend", "jax_backend"):
        from . import _jax

        return getattr(_jax, name)
    raise AttributeError(name)
