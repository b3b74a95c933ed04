"""The precision of matrix products and convolutions in compiled code.

JAX's default precision for a float32 ``dot_general`` or ``conv_general_dilated`` is the
platform's fastest: on an NVIDIA GPU since Ampere that is TF32 (a 10-bit mantissa, gradients of
an MLP about 6% off a float64 reference), on a TPU one bfloat16 pass. A float32 graph compiled
here means float32: every product and convolution the compiler emits carries an explicit
precision, ``float32`` (``lax.Precision.HIGHEST``) unless the caller opts into a faster one.

========== ================================================= ===================================
name       what runs                                         JAX's setting
========== ================================================= ===================================
``float32`` full float32 products on every platform (default) ``Precision.HIGHEST``
``tf32``    TF32 on NVIDIA GPUs (Ampere and later), three     ``Precision.HIGH``
            bfloat16 passes on TPUs, float32 on CPUs
``bf16``    matrix products with bfloat16 inputs and float32  ``DotAlgorithmPreset.BF16_BF16_F32``
            accumulation; convolutions at the platform's      (convolutions: ``Precision.DEFAULT``)
            default (TF32 on NVIDIA GPUs, bfloat16 on TPUs)
========== ================================================= ===================================

The setting is applied while a rule or a compiled function is traced
(``jax.default_matmul_precision``), so it reaches every product the lowering rules and JAX's own
differentiation emit, and it is part of every cache key (compiled graphs, per-node rules, eager
kernels). Float64 programs are unaffected by it (a float64 product is float64 on every
platform), but carry the same explicit setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import wraps
from typing import Any, Literal

import jax

from ._errors import CompileError

MatmulPrecision = Literal["float32", "tf32", "bf16"]

#: Our names -> the value given to ``jax.default_matmul_precision``.
JAX_SETTING: dict[str, str] = {
    "float32": "float32",
    "tf32": "tensorfloat32",
    "bf16": "BF16_BF16_F32",
}

#: What each setting means, as reports and errors print it.
DESCRIPTION: dict[str, str] = {
    "float32": "full float32 matrix products and convolutions",
    "tf32": "reduced precision: TF32 matrix products and convolutions on NVIDIA GPUs "
    "(bfloat16 x3 on TPUs)",
    "bf16": "reduced precision: bfloat16 matrix-product inputs with float32 accumulation, "
    "convolutions at the platform's default",
}

DEFAULT: MatmulPrecision = "float32"


def resolve_precision(value: Any, where: str = "matmul_precision") -> MatmulPrecision:
    """``value`` checked: one of ``"float32"`` (``None`` means it), ``"tf32"``, ``"bf16"``;
    a :class:`CompileError` naming ``where`` otherwise."""
    if value is None:
        return DEFAULT
    if isinstance(value, str):
        name = value.strip().lower()
        if name in JAX_SETTING:
            return name  # type: ignore[return-value]
    raise CompileError(f"{where} must be one of {', '.join(JAX_SETTING)}, got {value!r}")


def is_reduced(precision: str) -> bool:
    """Whether float32 programs compiled at ``precision`` compute below float32."""
    return precision != "float32"


def precision_scope(precision: str) -> contextlib.AbstractContextManager[Any]:
    """The context in which a function is traced at ``precision``."""
    return jax.default_matmul_precision(JAX_SETTING[precision])


def traced_at(precision: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` traced at ``precision`` whatever context calls it (name and signature kept)."""
    setting = JAX_SETTING[precision]

    @wraps(fn)
    def at_precision(*args: Any, **kwargs: Any) -> Any:
        with jax.default_matmul_precision(setting):
            return fn(*args, **kwargs)

    return at_precision


__all__ = [
    "DEFAULT",
    "DESCRIPTION",
    "JAX_SETTING",
    "MatmulPrecision",
    "is_reduced",
    "precision_scope",
    "resolve_precision",
    "traced_at",
]
