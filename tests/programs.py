"""External programs some tests need: Graphviz's ``dot``, Chromium and the Playwright package
that drives it. A missing one skips the test, or fails it when ``TORCHLEAN_REQUIRE_TOOLS=1``
(``.ci/run`` sets it in CI, where it installs them, so there the tests must really run)."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

REQUIRE = os.environ.get("TORCHLEAN_REQUIRE_TOOLS") == "1"

#: The Chromium executables tried, in order.
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")

#: The flags the browser tests run Chromium with (headless, no network services, no profile).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _missing(message: str) -> None:
    if REQUIRE:
        pytest.fail(f"{message} (TORCHLEAN_REQUIRE_TOOLS=1: required here)", pytrace=False)
    pytest.skip(message)


def need_dot() -> str:
    """The path of Graphviz's ``dot``."""
    path = shutil.which("dot")
    if path is None:
        _missing("Graphviz's dot is not installed (apt-get install graphviz)")
    assert path is not None
    return path


def need_chromium() -> str:
    """The path of a Chromium executable."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path is not None:
            return path
    _missing("Chromium is not installed (apt-get install chromium)")
    raise AssertionError("unreachable")


def need_playwright() -> None:
    """The ``playwright`` package (the ``test`` extra; it drives the system Chromium)."""
    if importlib.util.find_spec("playwright") is None:
        _missing("the playwright package is not installed (pip install playwright)")
