"""Fuzz target: the command lines (``torchlean``, ``torchlean-verify``) with random arguments, odd
paths, corrupted files, unwritable standard output, and interrupts at random times.

Property: a documented exit code (torchlean: 0, 2, 130; torchlean-verify: 0, 1, 2, 3) and, on
failure, one line on stderr (argparse's usage errors add their ``usage:`` line), never a
traceback; within the time bound.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl
from torchlean_ir import cli

from ._harness import ROOT, fuzz, mutate_bytes, time_bound

GOOD = ROOT / "examples" / "graphs" / "mlp_regression.json"


class _Stream(io.StringIO):
    """A standard output that fails: ``full`` (ENOSPC), ``pipe`` (the reader went away) or
    ``closed``; ``ok`` writes."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "closed":
            self.close()

    def _fail(self) -> None:
        if self.kind == "full":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.kind == "pipe":
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    def write(self, s: str) -> int:
        self._fail()
        return super().write(s)

    def flush(self) -> None:  # nothing is ever buffered: a failing write has already failed
        super().flush()


def _run_main(main: Any, argv: list[str], kind: str) -> tuple[int, str, str]:
    out, err = _Stream(kind), io.StringIO()
    redirect = contextlib.redirect_stdout(out), contextlib.redirect_stderr(err)
    with time_bound(f"main({argv!r})"), redirect[0], redirect[1]:
        code = main(argv)
    written = "" if kind == "closed" else out.getvalue()
    return code, written, err.getvalue()


def _check_stderr(prog: str, code: int, err: str, kind: str) -> None:
    lines = err.splitlines()
    assert "Traceback" not in err, err
    if code == 0:
        assert err == "" or (kind == "ok" and not lines), err
        return
    assert lines, (code, err)
    if lines[0].startswith("usage:"):  # argparse: its usage (maybe wrapped), then the error
        assert all(line.startswith(" ") for line in lines[1:-1]), err
    else:
        assert len(lines) == 1, err
    assert lines[-1].startswith(prog) and "error:" in lines[-1], err


def _argv(draw: Any, tmp: Path, rng: np.random.Generator, verify: bool) -> list[str]:
    bad = tmp / "bad.json"
    bad.write_bytes(mutate_bytes(GOOD.read_bytes(), rng, int(rng.integers(1, 4))))
    paths = [str(GOOD), str(bad), str(tmp / "missing.json"), str(tmp), "/dev/null",
             str(tmp / "a\nb.json"), "x" * 5000, "-", "", "\udcff.json"]  # fmt: skip
    options = ["--max-nodes", "--max-bytes", "--short", "-q", "--json", "--jobs", "--dtype",
               "--plugin", "--no-kinks", "--max-elements", "--end-to-end", "-h",
               "--version"]  # fmt: skip
    values = ["0", "-3", "1", "99999999999999999999999", "1e3", "x", "9" * 5000, "f16", "f32"]
    words = draw(st.lists(st.sampled_from(paths + options + values), max_size=5))
    if verify:
        # a valid graph would be verified (seconds): keep it to a few examples
        words = [w for w in words if w != str(GOOD) or rng.random() < 0.1]
        return words
    command = draw(st.sampled_from(["check", "show", "frobnicate", "--help", "--version", ""]))
    return [command, *words] if command else words


@fuzz(100)
@given(st.data(), st.sampled_from(["ok", "ok", "full", "pipe", "closed"]), st.integers(0, 2**32))
def test_torchlean_main(tmp_path_factory, data: st.DataObject, kind: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    argv = _argv(data.draw, tmp_path_factory.mktemp("cli"), rng, verify=False)
    code, _, err = _run_main(cli.main, argv, kind)
    assert code in (0, 2), (argv, code, err)
    if kind == "pipe":
        assert code == 0 or (err.splitlines()[-1:] and "error:" in err), (argv, err)
    _check_stderr("torchlean", code, err, kind)


@fuzz(30)
@given(st.data(), st.sampled_from(["ok", "full", "pipe", "closed"]), st.integers(0, 2**32))
def test_verify_main(tmp_path_factory, data: st.DataObject, kind: str, seed: int) -> None:  # type: ignore[no-untyped-def]
    from verify import cli as vcli

    rng = np.random.default_rng(seed)
    argv = _argv(data.draw, tmp_path_factory.mktemp("vcli"), rng, verify=True)
    code, _, err = _run_main(vcli.main, argv, kind)
    assert code in (0, 1, 2, 3), (argv, code, err)
    assert "internal error" not in err, err
    lines = [line for line in err.splitlines() if "error" in line]
    if code == 2:
        _check_stderr("torchlean-verify", code, "\n".join(lines), kind)


@fuzz(6)
@given(st.sampled_from(["torchlean", "torchlean_verify"]), st.floats(0.0, 2.0))
def test_interrupt_at_a_random_time(entry: str, delay: float) -> None:
    """SIGINT at a random moment after our code starts: one line, the interrupt's exit code."""
    args = ["check", "/dev/stdin"] if entry == "torchlean" else ["/dev/stdin"]
    # SIGINT held back from before "go" until our code's first statement (tests/test_cli.py)
    code = (
        "import signal, sys, torchlean_cli; "
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); print('go', flush=True); "
        f"sys.exit(torchlean_cli.{entry}())"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    with time_bound("start-up"):
        assert proc.stdout.readline() == "go\n"
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    with time_bound("interrupted command"):
        out, err = proc.communicate()
    expected = (
        (130, "torchlean: interrupted\n")
        if entry == "torchlean"
        else (3, "torchlean-verify: interrupted\n")
    )
    assert (proc.returncode, err) == expected, (delay, out, err)


def test_graph_files_the_cli_accepts_are_the_loader_s(tmp_path: Path) -> None:
    """The command line and the library agree (the exit code 0 iff ``load`` accepts)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "g.json"
    for _ in range(20):
        data = mutate_bytes(GOOD.read_bytes(), rng, 1)
        path.write_bytes(data)
        try:
            tl.load(path)
            accepted = True
        except tl.GraphFormatError:
            accepted = False
        code, _, _ = _run_main(cli.main, ["check", str(path)], "ok")
        assert (code == 0) == accepted
