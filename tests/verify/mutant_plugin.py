"""A ``--plugin`` for the CLI tests: applies the mutant named by ``TORCHLEAN_MUTANT`` for the
life of the process (the CLI then verifies a graph with that bug in place)."""

from __future__ import annotations

import atexit
import os
from contextlib import contextmanager

from tests.verify.mutants import LARGE_MUTANTS, MUTANTS

_name = os.environ.get("TORCHLEAN_MUTANT", "")
if _name:
    _patch = contextmanager(next(m for m in [*MUTANTS, *LARGE_MUTANTS] if m.name == _name).patch)()
    _patch.__enter__()
    atexit.register(_patch.__exit__, None, None, None)
