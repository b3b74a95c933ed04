"""The two methods of links 1 and 2, and how the verifier chooses between them.

* **tensor** (:mod:`verify._tchecks`): one symbolic element stands for every element; the cost
  does not grow with the tensors' sizes, and runtime index inputs are quantified over every
  value. The default.
* **elements** (:mod:`verify._rules`, :mod:`verify._tape`): every element its own expression,
  index inputs at a plan of values. An independent second method: for small signatures it
  decides what the tensor level leaves undecided, and the tests run both on every op-table row
  and every mutant and require the same outcome.

``method="auto"`` (the default) runs the tensor level and, for the checks it does not decide,
the element method when the signature is small enough (at most
:data:`verify._rules.MAX_SYMBOLS` argument elements); a check that neither decides is ``not
verified``. ``"tensor"`` and ``"elements"`` run one method only.

Every check carries its level (``exact (tensor)``, ``exact (elements)``). Element-wise checks of
a signature with runtime index inputs are ``probabilistic``: the index values are a sample.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torchlean_ir as tl

from . import _sizecert
from ._attempt import METHODS, Method, small, tensor_attempt
from ._report import Check
from ._rules import check_signature
from ._sig import Signature, rule_names
from ._tape import call_layout, check_call
from ._tchecks import NotTensor, Partial, check_call_tensor, check_signature_tensor


def _runtime_index(sig: Signature) -> bool:
    return any(v is None for v in sig.static_index)


def elements_level(checks: list[Check], sig: Signature) -> list[Check]:
    """Element-wise checks labelled with their level; exact passes of a signature with runtime
    index inputs become probabilistic (its index values were a sample, not all of them)."""
    out = []
    for c in checks:
        c = replace(c, level="elements")
        if _runtime_index(sig) and c.result == "pass" and c.method == "exact":
            c = replace(c, method="probabilistic",
                        how=f"{c.how}; index inputs at a sample of values only")  # fmt: skip
        out.append(c)
    return out


def _not_verified(link: Any, name: str, why: str, level: str = "tensor") -> Check:
    return Check(link, name, "not verified", "undecided", "", why, None, 0.0, level)


def rule_checks(sig: Signature, *, method: Method, max_elements: int, kinks: bool) -> list[Check]:
    """Link 1 for one signature by ``method``."""
    if method == "elements":
        return elements_level(check_signature(sig, max_elements=max_elements, kinks=kinks), sig)
    reused = _sizecert.reuse(sig, kinks=kinks)
    if reused is not None:
        return reused
    try:
        return tensor_attempt(sig, method, check_signature_tensor, sig, kinks=kinks)
    except Partial as p:
        decided, undecided = p.checks, p.undecided
        why = "; ".join(f"{n}: {w}" for n, w in undecided)
    except NotTensor as e:
        decided, undecided = [], []
        why = str(e)
        names = rule_names(sig, kinks)
        undecided = [(n, why) for n in names]
    if method == "tensor" or not small(sig):
        reason = "undecided at tensor level" + (
            "" if small(sig) else " and too large for the element method"
        )
        return decided + [_not_verified("rule", n, f"{reason}: {w}") for n, w in undecided]
    names = {n for n, _ in undecided}
    elems = elements_level(check_signature(sig, max_elements=max_elements, kinks=kinks), sig)
    fallback = [replace(c, how=f"{c.how}; tensor level: {why}") for c in elems if c.name in names]
    return decided + fallback


def call_check(graph: tl.GraphData, kind: str, entry: Any, inner: Any, dtype: str, *,
               method: Method, max_elements: int) -> Check:  # fmt: skip
    """Link 2 for one compiled call by ``method``."""
    sig = Signature.of(graph, entry.node)
    if method != "elements":
        inputs, outputs, flags = call_layout(kind, entry, len(sig.index_types))
        try:
            return tensor_attempt(
                sig, method, check_call_tensor, sig, kind, inputs, outputs, flags, inner, dtype
            )
        except NotTensor as e:
            why = str(e)
        if method == "tensor" or not small(sig):
            return _not_verified("compiled", f"compiled {kind} = reference",
                                 f"undecided at tensor level: {why}")  # fmt: skip
    c = check_call(graph, kind, entry, inner, dtype, max_elements=max_elements)
    (c,) = elements_level([c], sig)
    if method != "elements":
        c = replace(c, how=f"{c.how}; tensor level: {why}")
    return c


__all__ = ["METHODS", "Method", "call_check", "elements_level", "rule_checks"]
