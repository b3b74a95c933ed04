"""One tensor-level attempt: a check run under the tensor level's CPU-time budget, anything that
stops it early turned into :class:`verify._tchecks.NotTensor` (the verifier then falls back to
the element method or says "not verified"; it never crashes)."""

from __future__ import annotations

from typing import Any, Literal

import torchlean_ir as tl

from . import terms as T
from ._rules import MAX_ELEMENTS, MAX_SYMBOLS
from ._sig import Signature
from ._tchecks import NotTensor, Partial

Method = Literal["auto", "tensor", "elements"]
METHODS = ("auto", "tensor", "elements")

#: Seconds one tensor-level attempt (one signature's rule checks, or one compiled call) may take;
#: past it the attempt stops and the checks it did not decide go to the element method (when the
#: signature is small) or are reported ``not verified``. A bound on the work, never on soundness.
#: A small signature, which the element method decides anyway, gets the shorter budget.
TENSOR_BUDGET_S = 60.0
TENSOR_BUDGET_SMALL_S = 3.0


def tensor_attempt(sig: Signature, method: Method, fn: Any, *args: Any, **kw: Any) -> Any:
    """``fn`` under the tensor-level time budget; anything that stops it early becomes
    :class:`NotTensor` (the reason kept), so the verifier falls back and never crashes."""
    seconds = (
        TENSOR_BUDGET_SMALL_S if method == "auto" and _exact_fallback(sig) else TENSOR_BUDGET_S
    )
    try:
        with T.budget(seconds):
            return fn(*args, **kw)
    except (NotTensor, Partial):
        raise
    except T.OutOfTime:
        raise NotTensor(f"the tensor-level time budget ({seconds:g} s) ran out") from None
    except (T.TermError, ArithmeticError, TypeError, ValueError, IndexError, KeyError,
            AttributeError, NotImplementedError, RecursionError, RuntimeError,
            StopIteration) as e:  # fmt: skip
        raise NotTensor(f"the tensor level stopped: {type(e).__name__}: {e}") from None


def _exact_fallback(sig: Signature) -> bool:
    """Small, and its output within the element method's default sample size: the element
    method then decides every element (else it samples, and the tensor level gets the full
    budget)."""
    if not small(sig):
        return False
    try:
        out = tl.get_op(sig.op).infer_type(sig.arg_types, sig.index_types, sig.attrs)
    except Exception:
        return True
    return out.size <= MAX_ELEMENTS


def small(sig: Signature) -> bool:
    return sum(t.size for t in sig.arg_types) <= MAX_SYMBOLS


__all__ = [
    "METHODS",
    "TENSOR_BUDGET_S",
    "TENSOR_BUDGET_SMALL_S",
    "Method",
    "small",
    "tensor_attempt",
]
