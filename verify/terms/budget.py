"""The CPU-time budget of a tensor-level check: :class:`budget`, :func:`tick` and the
``SIGVTALRM`` timer that ticks inside work that does not tick itself."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any


class OutOfTime(BaseException):
    """The time budget of a tensor-level check ran out (see :func:`budget`).

    A ``BaseException``, as ``KeyboardInterrupt`` is: no ``except Exception`` on the way (ours
    around a cheap attempt, sympy's around a rewrite) can swallow it, so a check that runs out
    of time says so ("the time budget ran out"), never "not proved", and stops at once. Only
    the owners of a budget catch it, by name."""


_DEADLINE: list[float] = []
_TIMER: list[Any] = []  # the handler replaced while the outermost budget runs


def _on_timer(signum: int, frame: Any) -> None:
    # Only where the verifier's own algebra runs (ours, sympy's, mpmath's): a signal that lands
    # in a finaliser, a gc or weakref callback of another library would be printed and dropped
    # there. The timer fires again a quarter second of CPU later.
    if frame is None or not frame.f_globals.get("__name__", "").startswith(_TIMED_MODULES):
        return
    f, depth = frame, 0
    while f is not None and depth < 8:
        if f.f_code.co_name == "__del__":
            return
        f, depth = f.f_back, depth + 1
    tick()


_TIMED_MODULES = ("verify.", "sympy.", "mpmath.")


class budget:
    """``with budget(seconds):`` bounds the tensor-level work inside: :func:`tick` (called by
    normalisation, case splits and the interpreters) raises :class:`OutOfTime` past it. The
    seconds are the process's CPU time, so that a loaded machine (CI runners, parallel test
    workers) reaches the same verdicts as an idle one.

    Work that does not tick (sympy's case folding inside a scalar decision) is bounded too: in
    the main thread the outermost budget arms a CPU-time interval timer (``SIGVTALRM``, every
    0.25 s of CPU) whose handler ticks, unless the program already handles that signal. The
    exception then reaches the caller even through code that catches and retries, since the
    timer keeps firing until the budget is left."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def __enter__(self) -> budget:
        end = float("inf") if self.seconds is None else time.process_time() + self.seconds
        _DEADLINE.append(min(end, _DEADLINE[-1]) if _DEADLINE else end)
        if len(_DEADLINE) == 1 and end != float("inf"):
            _arm_timer()
        return self

    def __exit__(self, *exc: object) -> None:
        # the deadline first: a timer tick landing here then sees the enclosing budget (or
        # none), never this expired one left on the stack
        _DEADLINE.pop()
        if not _DEADLINE:
            _disarm_timer()


def _arm_timer() -> None:
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        return
    if signal.getsignal(signal.SIGVTALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return
    _TIMER.append(signal.signal(signal.SIGVTALRM, _on_timer))
    signal.setitimer(signal.ITIMER_VIRTUAL, 0.25, 0.25)


def _disarm_timer() -> None:
    if _TIMER:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0, 0)
        signal.signal(signal.SIGVTALRM, _TIMER.pop())


def remaining() -> float | None:
    """CPU seconds left to the innermost :class:`budget` (``None``: no budget bounds this)."""
    if not _DEADLINE or _DEADLINE[-1] == float("inf"):
        return None
    return max(0.0, _DEADLINE[-1] - time.process_time())


def tick() -> None:
    """Raise :class:`OutOfTime` when the innermost :class:`budget` has run out."""
    if _DEADLINE and time.process_time() > _DEADLINE[-1]:
        raise OutOfTime("the tensor-level time budget ran out")
