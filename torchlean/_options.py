"""Session options (TorchLean's ``Options``) and the seeded random streams they hand out."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from torchlean_ir import DType, TorchleanError
from torchlean_ir.extend import as_dtype

Backend = Literal["eager", "compiled"]
Device = Literal["cpu", "gpu"]

_BACKENDS = ("eager", "compiled")
_DEVICES = ("cpu", "gpu")
# compiler._precision's names (not imported: the options load without JAX)
_PRECISIONS = ("float32", "tf32", "bf16")


@dataclass(frozen=True, slots=True)
class Options:
    """Settings of a front-end session or trainer (TorchLean's ``Options``).

    Parameters
    ----------
    backend:
        ``"eager"``: ops run immediately on a hidden tape (PyTorch-like). ``"compiled"``: ops
        record a :class:`~torchlean_ir.GraphData` that the ``compiler`` package runs (the
        proof-linked path; its backward can be verified).
    device:
        ``"cpu"`` (default) or ``"gpu"`` (needs JAX's CUDA plugin: ``pip install
        'torchlean-ir[cuda]'``). Eager on CPU runs the registry's rules with NumPy; eager on GPU
        runs the same rules lowered to jitted JAX; ops on a batch run the compiler's vmapped
        rules on either.
    requires_grad:
        Default ``requires_grad`` of new parameters when the caller omits it (TorchLean's
        ``requiresGradByDefault``). Inputs default to ``False`` whatever this says.
    seed:
        The global seed (PyTorch's ``manual_seed``), threaded explicitly: :meth:`rng` derives
        independent NumPy generators from it for initialisation and shuffling, and random ops
        (``rand_uniform``, ``bernoulli_mask``) use it when no seed is given.
    fast_kernels:
        Eager backend only: ops that declare a JAX lowering of their own (``def_lower``, e.g.
        convolution through ``lax.conv_general_dilated``) run that jitted lowering instead of
        the NumPy reference rule. The verifier proves each lowering equal to its reference
        rule, so this changes speed, not meaning. The compiled backend, and the ops of an
        eager tape that run on a batch, always use the lowerings; the flag has no effect there.
    dtype:
        Float dtype of a session's values (eager, on either array backend, and linked) and of
        compiled code: ``"f32"`` (default) or ``"f64"``. The eager CPU path runs the reference
        rules with NumPy in this dtype. Random ops draw the same bits on every path in each
        dtype.
    matmul_precision:
        Matrix products and convolutions of JAX code (compiled, eager on a GPU, batched ops):
        ``"float32"`` (default: full float32 on every platform) or an opt-in fast mode,
        ``"tf32"`` / ``"bf16"`` (TF32 or bfloat16 on the GPUs and TPUs that have them;
        TorchLean's ``fastGpuMatmulPrecision``). See ``docs/compiler.md``, "Precision". A
        verified float32 statement never covers a reduced-precision program.
    """

    backend: Backend = "eager"
    device: Device = "cpu"
    requires_grad: bool = True
    seed: int = 0
    fast_kernels: bool = True
    dtype: str = "f32"
    matmul_precision: str = "float32"

    def __post_init__(self) -> None:
        if self.backend not in _BACKENDS:
            raise TorchleanError(
                f"Options.backend must be one of {', '.join(_BACKENDS)}, got {self.backend!r}"
            )
        if self.device not in _DEVICES:
            raise TorchleanError(
                f"Options.device must be one of {', '.join(_DEVICES)}, got {self.device!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise TorchleanError(f"Options.seed must be an int, got {self.seed!r}")
        if not 0 <= int(self.seed) < 2**64:
            raise TorchleanError(f"Options.seed must be in [0, 2**64), got {self.seed!r}")
        try:
            d = as_dtype(self.dtype)
        except ValueError:
            d = None
        if d is None or not d.is_float:
            raise TorchleanError(f"Options.dtype must be 'f32' or 'f64', got {self.dtype!r}")
        if self.matmul_precision not in _PRECISIONS:
            raise TorchleanError(
                f"Options.matmul_precision must be one of {', '.join(_PRECISIONS)}, "
                f"got {self.matmul_precision!r}"
            )
        object.__setattr__(self, "dtype", d.value)
        object.__setattr__(self, "seed", int(self.seed))

    @property
    def float_dtype(self) -> DType:
        """:attr:`dtype` as a :class:`~torchlean_ir.DType`."""
        return DType(self.dtype)

    def replace(self, **changes: Any) -> Options:
        """A copy with some fields changed (``opts.replace(backend="compiled")``)."""
        return replace(self, **changes)

    def rng(self, purpose: str = "init") -> np.random.Generator:
        """A NumPy generator derived from :attr:`seed` and ``purpose``.

        The same ``(seed, purpose)`` always gives the same stream, and different purposes give
        independent streams (``opts.rng("init")`` for initialisation, ``opts.rng("shuffle")``
        for data order), so changing how many numbers one part draws never shifts another."""
        return np.random.default_rng(
            np.random.SeedSequence([self.seed, zlib.crc32(purpose.encode())])
        )


def as_options(options: Options | None, **overrides: Any) -> Options:
    """``options`` (default :class:`Options`) with keyword overrides applied."""
    opts = Options() if options is None else options
    if not isinstance(opts, Options):
        raise TorchleanError(f"options must be an Options, got {type(options).__name__}")
    return opts.replace(**overrides) if overrides else opts


def as_generator(
    rng: np.random.Generator | int | None, purpose: str = "init"
) -> np.random.Generator:
    """A generator from a generator (returned as is), a seed, or ``None`` (seed 0)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None:
        return Options().rng(purpose)
    if isinstance(rng, bool) or not isinstance(rng, int | np.integer):
        raise TorchleanError(f"rng must be a numpy Generator or an int seed, got {rng!r}")
    return Options(seed=int(rng)).rng(purpose)
