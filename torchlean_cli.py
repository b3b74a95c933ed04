"""Start-up of the command lines ``torchlean`` and ``torchlean-verify`` (their installed scripts).

This module imports nothing heavy: the script's ``from torchlean_cli import torchlean`` is
instant, and everything else (NumPy, JAX, the verifier) is imported inside :func:`run`, where an
interrupt (Ctrl-C in the first second, while those imports run) is answered like any other: one
line on standard error and the command's exit code for an interruption, never a
``KeyboardInterrupt`` traceback. The commands themselves (``torchlean_ir.cli.main``,
``verify.cli.main``) handle interrupts, bad input and unwritable output after start-up.

``python -m torchlean_ir`` and ``python -m verify`` import their package before any code of
ours runs; they behave the same once started.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
from collections.abc import Callable
from typing import Any


def _say(prog: str, message: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(f"{prog}: {message}", file=sys.stderr, flush=True)


def run(prog: str, target: str, interrupted: int) -> int:
    """Import ``target`` (``"module:function"``) and return ``function()``, its exit code.

    An interrupt during the import (or one the command let through) gives one line
    ``prog: interrupted`` and the exit code ``interrupted``; a broken installation (an import
    that fails) one line ``prog: error: cannot start: ...`` and exit code 2."""
    try:  # first: an interrupt from here on, even before the handler below, is answered
        if hasattr(signal, "pthread_sigmask"):  # a Ctrl-C held back by the caller lands here
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        seen: list[int] = []
        module_name, _, name = target.partition(":")

        def on_sigint(signum: int, frame: Any) -> None:
            seen.append(signum)
            raise KeyboardInterrupt

        # An interrupt in the middle of importing a C extension can come back as an ImportError
        # (a library that catches it and imports again: "cannot load module more than once"),
        # or be swallowed: the handler remembers that it came. Raised inside a callback (the
        # import system's weakref callbacks), Python prints it as "Exception ignored": not
        # here, where `seen` answers it once the import is over.
        hook = sys.unraisablehook

        def quiet(unraisable: Any) -> None:
            if not (seen and isinstance(unraisable.exc_value, KeyboardInterrupt)):
                hook(unraisable)

        sys.unraisablehook = quiet
        signal.signal(signal.SIGINT, on_sigint)
        try:
            main: Callable[[], int | None] = getattr(importlib.import_module(module_name), name)
        except ImportError as e:
            if seen:
                raise KeyboardInterrupt from None
            _say(prog, f"error: cannot start: {e}")
            return 2
        except Exception:  # the interrupt wrapped by what it hit (3.11: __set_name__'s error)
            if seen:
                raise KeyboardInterrupt from None
            raise
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            sys.unraisablehook = hook
        if seen:
            raise KeyboardInterrupt
        code = main()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a second Ctrl-C ends the process at once
        _say(prog, "interrupted")
        return interrupted
    # The command is done (its own handlers ran): a Ctrl-C while the interpreter shuts down
    # (JAX's thread pools, atexit handlers) ends the process by SIGINT, without a traceback.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    return 0 if code is None else int(code)


def torchlean() -> int:
    """The ``torchlean`` script (``torchlean_ir.cli.main``; 130 when interrupted)."""
    return run("torchlean", "torchlean_ir.cli:main", 130)


def torchlean_verify() -> int:
    """The ``torchlean-verify`` script (``verify.cli.main``; 3 when interrupted)."""
    return run("torchlean-verify", "verify.cli:main", 3)


if __name__ == "__main__":
    sys.exit(torchlean())
