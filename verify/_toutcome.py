"""The outcome of a tensor comparison, :class:`TDecision`: proved, a counterexample at an
element, or undecided at tensor level, with how and by which method; what the decision
(:mod:`verify._tdecide`) and the counterexample search (:mod:`verify._tcounterexample`) return.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._decide import Decision


@dataclass(frozen=True)
class TDecision:
    """The outcome of a tensor comparison: ``equal`` True (proved), False (a counterexample at
    ``element``), None (undecided at tensor level); ``how`` says how."""

    equal: bool | None
    how: str
    element: tuple[int, ...] | None = None
    decision: Decision | None = None  # the element-level decision of a counterexample
    nat: dict[str, Any] | None = None
    method: str = "exact"
    #: How the inputs of a counterexample are shown when they are not in ``decision.point``
    #: (a certified numeric one: every leaf element drawn by ``verify._tnumeric.leaf_values``).
    inputs: dict[str, str] | None = None


__all__ = ["TDecision"]
