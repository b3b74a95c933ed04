"""Backends: the array namespaces op rules are written against.

* :data:`NUMPY` - NumPy float64, the reference semantics (:func:`numpy_backend` gives it in
  float32 too);
* :func:`jax_backend` - ``jax.numpy`` in a chosen float dtype, the compiler's lowering;
* :data:`SYM` - exact symengine arrays, the verifier's symbolic semantics.

The seeded generator of the random ops (SplitMix64, ``docs/ops-notes.md``) is every backend's
``rand_uniform(seed, counter, shape, dtype)``; its NumPy reference functions are re-exported here
(:func:`splitmix64`, :func:`random_bits`, :func:`uniform_from_bits`, :func:`uniform`,
:func:`narrowest`) for the eager session, the verifier and tests. The symbolic backend's hooks
and float-constant model (:data:`SOFTMAX_HOOK`, :data:`PRODUCT_HOOK`, :data:`FLOAT_CONSTANTS`,
:func:`weak_float`, :func:`cast_floats`, :func:`piecewise`) are what ``verify`` builds on.
"""

from typing import Any

from ._numpy import NUMPY, NumpyBackend, numpy_backend
from ._random import narrowest, random_bits, splitmix64, uniform, uniform_from_bits
from ._sym import (
    FLOAT_CONSTANTS,
    PRODUCT_HOOK,
    SOFTMAX_HOOK,
    SYM,
    SymArray,
    SymBackend,
    cast_floats,
    exact,
    piecewise,
    symbols,
    weak_float,
)

__all__ = [
    "FLOAT_CONSTANTS",
    "NUMPY",
    "PRODUCT_HOOK",
    "SOFTMAX_HOOK",
    "SYM",
    "JaxBackend",
    "NumpyBackend",
    "SymArray",
    "SymBackend",
    "cast_floats",
    "exact",
    "jax_backend",
    "narrowest",
    "numpy_backend",
    "piecewise",
    "random_bits",
    "splitmix64",
    "symbols",
    "uniform",
    "uniform_from_bits",
    "weak_float",
]


def __getattr__(name: str) -> Any:
    # JAX is imported only when the JAX backend is asked for (the CLI's check/show never is).
    if name in ("JaxBackend", "jax_backend"):
        from . import _jax

        return getattr(_jax, name)
    raise AttributeError(name)
