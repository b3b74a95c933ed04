"""compiler: lower torchlean-ir graphs to jitted JAX, compile once and run many.

::

    import compiler

    cg = compiler.compile(graph)                 # f32 on CPU, our own tape for the backward
    loss, grads = cg.value_and_grad({"W": W, "b": b, "x": x}, {"label": 3})
    batched = cg.batched(over=("x", "label"), grads="mean")
    step = compiler.TrainStep(batched, compiler.optimizer("adam", learning_rate=1e-3))

Importing this package turns on JAX's x64 mode (``jax_enable_x64``) so that graphs can be
compiled in float64; float32 graphs stay float32 because every array the compiler makes has an
explicit dtype. See ``docs/compiler.md``.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from ._compiled import CompiledGraph, Traceable, cache_size, clear_cache, compile  # noqa: E402
from ._devices import gpu_available, resolve_device  # noqa: E402
from ._errors import ArgumentError, CompileError, DeviceError  # noqa: E402
from ._rules import RuleSignature  # noqa: E402
from ._tape import Batching, TapeEntry  # noqa: E402
from ._train import TrainState, TrainStep, fit, optimizer  # noqa: E402

__all__ = [
    "ArgumentError",
    "Batching",
    "CompileError",
    "CompiledGraph",
    "DeviceError",
    "RuleSignature",
    "TapeEntry",
    "Traceable",
    "TrainState",
    "TrainStep",
    "cache_size",
    "clear_cache",
    "compile",
    "fit",
    "gpu_available",
    "optimizer",
    "resolve_device",
]
