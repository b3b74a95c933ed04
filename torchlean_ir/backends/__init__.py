"""Backends: the array namespaces op rules are written against.

* :data:`NUMPY` - NumPy float64, the reference semantics;
* :func:`jax_backend` - ``jax.numpy`` in a chosen float dtype, the compiler's lowering;
* :data:`SYM` - exact symengine arrays, the verifier's symbolic semantics.
"""

from typing import Any

from ._numpy import NUMPY, NumpyBackend
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
    "symbols",
]


def __getattr__(name: str) -> Any:
    # JAX is imported only when the JAX backend is asked for (the CLI's check/show never is).
    if name in ("JaxBackend", "jax_backend"):
        from . import _jax

        return getattr(_jax, name)
    raise AttributeError(name)
