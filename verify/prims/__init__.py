"""JAX primitives, one module per family, each primitive's two rules side by side.

A family module writes, primitive by primitive, the ``element`` rule (every element its own
exact expression, :mod:`verify._jaxpr`) next to the ``tensor`` rule (one symbolic element for
all, :mod:`verify._tjaxpr`), registered with :func:`verify._primitives.element` /
:func:`verify._primitives.tensor` in the one table :data:`verify._primitives.PRIMITIVES` (rules
are named ``_<primitive>_e`` and ``_<primitive>_t``). The interpreters themselves (reading
inputs and literals, shapes, value helpers) stay in :mod:`verify._jaxpr` and
:mod:`verify._tjaxpr`, below this package. Importing this package registers every family: the
modules that run an interpreter import it.
"""

from . import contractions, control, elementwise, indexing, reductions, structure, windows

__all__ = [
    "contractions",
    "control",
    "elementwise",
    "indexing",
    "reductions",
    "structure",
    "windows",
]
