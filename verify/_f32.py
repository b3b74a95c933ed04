"""The float32 constants model: what a float32 compilation's constants are, on both sides.

A float32 compilation and the reference are compared in exact real arithmetic (rounding of
operations is not modelled), but their *constants* are the float32 values the compiled program
really holds (docs/verification.md, "Float32"):

* **Reference side** (the op's rules on ``SYM`` or the tensor backend, and ``eval_graph`` /
  ``jvp`` / ``backprop_ctx`` end to end), under :func:`constants`: a Python ``float`` becomes
  the nearest float32 where it meets an array (JAX's weakly typed scalars take the array's
  dtype: ``GELU_C * x``, ``B.where(c, x, hi)``), and every float given to ``B.asarray``,
  ``B.full`` or ``B.pad`` (which the JAX backend casts to its dtype) is rounded likewise;
  ``B.rand_uniform`` draws are rounded toward zero in float32, as the float32 backend draws
  them (``torchlean_ir.backends.FLOAT_CONSTANTS``).
  Python arithmetic before that point stays float64 on both sides (``1 / (1 - p)`` is computed
  in float64, then rounded once), so attributes are not rounded up front. NumPy float64 scalars
  and arrays mixed into arithmetic are not rounded: JAX promotes them to float64.
* **Compiled side** (``verify/_jaxpr.py``, ``verify/_tjaxpr.py``): literals are the exact
  rationals of their float32 or float64 value; ``convert_element_type`` to float32 of a
  *constant* (a number, not an expression of the inputs) rounds it to the nearest float32, as
  the program does at run time (``jnp.where(c, x, 0.7)`` passes ``0.7`` as a float64 and
  converts it inside). Of an expression of the inputs it stays the identity.

Rounding is to nearest, ties to even, past the largest finite float32 to infinity, subnormals
included: :func:`round_f32` is exact for any rational.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import FLOAT_CONSTANTS

#: float32: 24 significant bits, smallest normal exponent -126, largest finite below 2^128
_BITS = 24
_EMIN = -126
_EMAX = 127


def round_f32(q: Fraction | int) -> Fraction | float:
    """The float32 nearest to the rational ``q`` (ties to even), as an exact fraction;
    ``+-inf`` (a float) past the float32 range."""
    q = Fraction(q)
    if q == 0:
        return Fraction(0)
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^(e-1) < a < 2^(e+1)
    if a < Fraction(2) ** e:
        e -= 1  # now 2^e <= a < 2^(e+1)
    spacing = Fraction(2) ** (max(e, _EMIN) - (_BITS - 1))
    r = round(a / spacing) * spacing  # round() on a Fraction: half to even
    if r >= Fraction(2) ** (_EMAX + 1):
        return float("inf") if q > 0 else float("-inf")
    return r if q > 0 else -r


def round_number(e: Any) -> Any:
    """A symengine *number* rounded to float32 (what converting a constant to float32 gives);
    any other expression unchanged (rounding of computed values is not modelled)."""
    if isinstance(e, se.Integer | se.Rational):
        r = round_f32(Fraction(int(e.p), int(e.q)) if isinstance(e, se.Rational) else int(e))
        if isinstance(r, float):
            return se.oo if r > 0 else -se.oo
        return se.Rational(r.numerator, r.denominator)
    return e


def is_float32(dtype: Any) -> bool:
    """Whether ``dtype`` (a name or a NumPy / JAX dtype) is float32."""
    try:
        return np.dtype(dtype) == np.float32
    except TypeError:
        return False


@contextlib.contextmanager
def constants(dtype: str) -> Iterator[None]:
    """Reference rules run inside see the constants of a compilation in ``dtype``
    (``"float32"``: rounded as described above; ``"float64"``: unchanged)."""
    if dtype != "float32":
        yield
        return
    token = FLOAT_CONSTANTS.set(np.dtype(np.float32))
    try:
        yield
    finally:
        FLOAT_CONSTANTS.reset(token)


#: The one-line description the report's note and the docs share.
NOTE = (
    "float32 compilation: its jaxprs are checked in exact arithmetic against the reference, "
    "every float constant on both sides rounded to float32 as the program holds it (a Python "
    "float where it meets a float32 array, a constant converted to float32); float32 rounding "
    "of each operation is not modelled"
)


def reduced_note(precision: str) -> str:
    """The note of a float32 compilation whose matrix products and convolutions run below
    float32 (``compiler.compile(..., matmul_precision="tf32" | "bf16")``): what is still
    proved, and that the float32 statement does not cover it."""
    return (
        f"reduced-precision compilation (matmul_precision={precision!r}): its jaxprs are checked "
        "in exact arithmetic against the reference, but its matrix products and convolutions "
        "round their inputs below float32 (TF32 or bfloat16) on the GPUs and TPUs that have "
        "them, so no float32 statement covers this program"
    )


__all__ = ["NOTE", "constants", "is_float32", "reduced_note", "round_f32", "round_number"]
