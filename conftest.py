# Makes the repository root importable (``torchlean_ir``, ``compiler``, ``verify``, ``tests``)
# when running pytest from a checkout without installing it.
"""Test-session setup shared by every test directory.

One JAX persistent compilation cache per test run: many tests compile the same programs (the
same small models through the compiler, the front end and the command lines, in the pytest-xdist
workers and in the fresh interpreters that the command-line and example tests start), and XLA
compiles each of them again in every process. A cache directory made for the run, shared by the
workers and the processes they start (through the environment) and removed at its end, compiles
each program once per run. It changes no result: JAX keys an entry by the program, the compile
options, the platform and JAX's version. Eviction is on (a size bound far above what a run
writes) because that is what makes JAX lock the directory around each read and write, so that a
worker never reads an entry another one is still writing. A cache set by the caller
(``JAX_COMPILATION_CACHE_DIR``) is used as it is.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from typing import Any

#: The environment that points JAX at the run's cache (read by JAX when it is imported).
_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
_SETTINGS = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}
if importlib.util.find_spec("filelock") is not None:  # JAX's eviction (and locking) needs it
    _SETTINGS["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(8 << 30)
_made: list[str] = []


def pytest_configure(config: Any) -> None:
    if _CACHE_ENV not in os.environ:  # the controller (or a run without workers): make it
        path = tempfile.mkdtemp(prefix="torchlean-test-jax-cache-")
        _made.append(path)
        os.environ[_CACHE_ENV] = path
        for key, value in _SETTINGS.items():
            os.environ.setdefault(key, value)
    if "jax" in sys.modules:  # imported before this hook (a plugin): tell it now
        import jax

        jax.config.update("jax_compilation_cache_dir", os.environ[_CACHE_ENV])
        for key in _SETTINGS:
            if key in os.environ:
                jax.config.update(key.lower(), int(os.environ[key]))


def pytest_unconfigure(config: Any) -> None:
    for path in _made:
        shutil.rmtree(path, ignore_errors=True)
