"""Errors raised by the compiler. Each derives from :class:`torchlean_ir.TorchleanError` and has
a one-line message naming the argument (``leaves['W']``, ``index['label']``, ``seed[0]``) or the
node at fault."""

from __future__ import annotations

from torchlean_ir import TorchleanError


class CompileError(TorchleanError):
    """The graph cannot be compiled as asked (unknown dtype, a lowering that returns the wrong
    shape, a batching spec that names no input, ...)."""


class ArgumentError(TorchleanError):
    """A call's arguments do not match the compiled signature: a missing, extra or unknown leaf,
    a wrong shape or dtype, a bad index value. Raised before JAX sees the arguments."""


class DeviceError(TorchleanError):
    """The requested device is not available (for example ``"gpu"`` without JAX's CUDA plugin)."""
