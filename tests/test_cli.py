"""The ``torchlean`` command line (``torchlean_ir.cli``), run as a subprocess the way users run it
(``python -m torchlean_ir.cli``), with exact stdout, stderr and exit codes."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchlean_ir as tl
from torchlean_ir import cli

from .programs import need_dot
from .strategies import graphs

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))


def run(*args: str, first: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m torchlean_ir.cli ARGS`` from the repository root, or with ``first`` as the
    working directory (``-m`` puts it first on ``sys.path``, ahead of the checkout)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "torchlean_ir.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=first or ROOT,
        check=False,
    )


def summary_line(path: str, g: tl.GraphData) -> str:
    return f"{path}: ok: {cli.summary(g)}\n"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_check_examples(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    proc = run("check", rel)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == summary_line(rel, tl.load(path))


def test_check_summary_wording() -> None:
    g = tl.load(ROOT / "examples" / "graphs" / "softmax_classifier.json")
    assert cli.summary(g) == (f"6 nodes, 5 leaves, 1 index input, 1 output, hash {g.content_hash}")


def test_show_prints_the_exact_text_form() -> None:
    path = ROOT / "examples" / "graphs" / "attention_block.json"
    proc = run("show", str(path))
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == tl.format_graph(tl.load(path)) + "\n"
    assert tl.parse_graph(proc.stdout) == tl.load(path)


def test_show_short(tmp_path: Path) -> None:
    b = tl.GraphBuilder()
    g = b.build(b.sum(b.const(np.ones(100))))
    tl.save(g, tmp_path / "g.json")
    proc = run("show", "--short", str(tmp_path / "g.json"))
    assert proc.stdout == (
        "graph() {\n"
        "  %0: f32[100] = const(){value=f32[100] [...]}\n"
        "  %1: f32[] = sum(%0)\n"
        "  return %1\n"
        "}\n"
    )


def test_show_dot_to_stdout_and_by_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = ROOT / "examples" / "graphs" / "attention_block.json"
    g = tl.load(path)
    proc = run("show", str(path), "--format", "dot")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == tl.to_dot(g, name="attention_block")
    # -o FILE: the format follows the suffix; nothing on stdout
    for name, start in (("g.dot", "digraph "), ("g.gv", "digraph "), ("g.txt", "graph(")):
        assert cli.main(["show", str(path), "-o", str(tmp_path / name)]) == 0
        assert capsys.readouterr() == ("", "")
        assert (tmp_path / name).read_text().startswith(start)
    assert cli.main(["show", str(path), "--format", "dot", "--collapse"]) == 0
    collapsed = capsys.readouterr().out
    assert collapsed == tl.to_dot(g, name="attention_block", collapse=True)
    assert "repeated ×3" in collapsed  # the three projections matmul(%8, W)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_show_svg_of_every_example(path: Path, tmp_path: Path) -> None:
    need_dot()
    out = tmp_path / "g.svg"
    proc = run("show", str(path), "--format", "svg", "-o", str(out))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    svg = out.read_text()
    assert svg.startswith("<?xml") and svg.rstrip().endswith("</svg>")
    g = tl.load(path)
    for v in range(g.num_values):
        assert f'id="v{v}"' in svg


def test_show_svg_without_graphviz_exits_4_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(ROOT / "examples" / "graphs" / "mlp_regression.json")
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot there
    assert cli.main(["show", path, "--format", "svg"]) == 4
    assert capsys.readouterr() == (
        "",
        "torchlean: error: the Graphviz program 'dot' is not installed (or not on PATH); it "
        "draws SVG (Debian: apt-get install graphviz)\n",
    )
    assert cli.main(["show", path, "-o", str(tmp_path / "g.svg")]) == 4
    assert not (tmp_path / "g.svg").exists()
    # text and DOT need no Graphviz
    assert cli.main(["show", path, "--format", "dot"]) == 0
    assert capsys.readouterr().out.startswith('digraph "mlp_regression" {')


def test_show_output_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(ROOT / "examples" / "graphs" / "mlp_regression.json")
    target = tmp_path / "no" / "g.dot"
    assert cli.main(["show", path, "--format", "dot", "-o", str(target)]) == 2
    assert capsys.readouterr() == (
        "",
        f"torchlean: error: cannot write {target}: No such file or directory\n",
    )
    assert cli.main(["show", path, "--format", "png"]) == 2
    assert "argument --format: invalid choice: 'png'" in capsys.readouterr().err


def test_python_dash_m_package_works_too() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "torchlean_ir", "--version"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"torchlean {tl.__version__}\n", "")


def _good_text() -> str:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    return tl.dumps(b.build(b.sum(b.tanh(x))))


def test_bad_files_exit_2_with_one_line(tmp_path: Path) -> None:
    good = _good_text()
    cases = {
        "truncated.json": (
            good[:100],
            "$: invalid JSON at line 5 column 35: "
            "Expecting property name enclosed in double quotes",
        ),
        "typo.json": (
            good.replace('"op": "tanh"', '"op": "tahn"'),
            "$.nodes[0].op: unknown op 'tahn'",
        ),
        "shape.json": (
            good.replace('"args": [1], "shape": []', '"args": [1], "shape": [1]'),
            "$.nodes[1] (`%2: f32[1] = sum(%1)`): recorded type f32[1] but the shape rule of "
            "sum gives f32[]",
        ),
        "ref.json": (
            good.replace('"outputs": [2]', '"outputs": [7]'),
            "$.outputs[0]: refers to value 7, but ids 0..2 are available",
        ),
        "binary.json": ("\x00\x01garbage", "$: invalid JSON at line 1 column 1: Expecting value"),
    }
    for name, (text, message) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        for command in ("check", "show"):
            proc = run(command, str(path))
            assert (proc.returncode, proc.stdout) == (2, ""), (name, proc)
            assert proc.stderr == f"torchlean: error: {path}: {message}\n", name


def test_unreadable_file_and_limits(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    proc = run("check", str(missing))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"torchlean: error: cannot read {str(missing)!r}: No such file or directory\n"
    )
    path = tmp_path / "g.json"
    path.write_text(_good_text())
    proc = run("check", str(path), "--max-nodes", "1")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"torchlean: error: {path}: $.nodes: 2 nodes exceed the limit 1\n"
    size = path.stat().st_size
    proc = run("check", "--max-bytes", "64", str(path))
    assert proc.stderr == (
        f"torchlean: error: {path}: $: file of {size} bytes exceeds the limit 64\n"
    )
    proc = run("check", str(path), "--max-nodes", "2", "--max-bytes", str(size))
    assert (proc.returncode, proc.stderr) == (0, "")
    # A limit beyond sys.maxsize means no limit (it used to be a traceback: OverflowError).
    proc = run("check", str(path), "--max-bytes", "9" * 23, "--max-nodes", "9" * 23)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.startswith(f"{path}: ok: 2 nodes"), proc.stdout


def test_usage_errors_exit_2() -> None:
    proc = run()
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "usage: torchlean [-h] [--version] COMMAND ...\n"
        "torchlean: error: the following arguments are required: COMMAND\n"
    )
    proc = run("check")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "usage: torchlean check [-h] [--max-nodes N] [--max-bytes N] GRAPH.json\n"
        "torchlean check: error: the following arguments are required: GRAPH.json\n"
    )
    proc = run("check", "x.json", "--max-nodes", "-3")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.endswith(
        "torchlean check: error: argument --max-nodes: expected a positive integer, got '-3'\n"
    )
    proc = run("frobnicate")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert "torchlean: error: argument COMMAND: invalid choice: 'frobnicate'" in proc.stderr


def test_help_lists_every_command() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for name in ("check", "show", *cli.PLUGINS):
        assert f"    {name} " in proc.stdout
    assert "Exit codes: 0 ok; 2 bad input or usage" in proc.stdout


def _fake_verify(tmp_path: Path, cli_source: str) -> Path:
    pkg = tmp_path / "verify"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "cli.py").write_text(cli_source)
    return tmp_path


def test_verify_forwards_to_verify_cli(tmp_path: Path) -> None:
    fake = _fake_verify(
        tmp_path,
        "import sys\n"
        "def main(argv):\n"
        "    print('verify got', argv)\n"
        "    print('to stderr', file=sys.stderr)\n"
        "    return 3\n",
    )
    proc = run("verify", "g.json", "--all", "-x", first=fake)
    assert proc.returncode == 3
    assert proc.stdout == "verify got ['g.json', '--all', '-x']\n"
    assert proc.stderr == "to stderr\n"


def test_verify_says_so_when_it_is_missing() -> None:
    # ``None`` in ``sys.modules`` makes ``import verify.cli`` fail exactly as an absent module
    # does, whichever finder (a checkout, an editable install's mapping) would have found it.
    code = (
        "import sys; sys.modules['verify.cli'] = None\n"
        "from torchlean_ir.cli import main\n"
        "sys.exit(main(['verify', 'g.json']))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "torchlean: error: 'verify' is not available: module verify.cli cannot be found "
        "(is the package installed?)\n"
    )


def test_verify_reports_a_broken_verifier(tmp_path: Path) -> None:
    fake = _fake_verify(tmp_path, "import no_such_dependency_xyz\n")
    proc = run("verify", first=fake)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        "torchlean: error: 'verify' is not available: importing verify.cli failed: "
        "No module named 'no_such_dependency_xyz'\n"
    )


def test_main_returns_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "g.json"
    path.write_text(_good_text())
    assert cli.main(["check", str(path)]) == 0
    assert capsys.readouterr().out.startswith(f"{path}: ok: 2 nodes")
    path.write_text("{")
    assert cli.main(["show", str(path)]) == 2
    assert capsys.readouterr().err.startswith(f"torchlean: error: {path}: $: invalid JSON")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs(), st.data())
def test_random_corruptions_never_traceback(
    tmp_path_factory: pytest.TempPathFactory, g: tl.GraphData, data: st.DataObject
) -> None:
    text = bytearray(tl.dumps(g).encode())
    if data.draw(st.booleans()):
        text = text[: data.draw(st.integers(0, len(text) - 3))]
    else:
        text[data.draw(st.integers(0, len(text) - 1))] = data.draw(st.integers(0, 255))
    path = tmp_path_factory.mktemp("corrupt") / "g.json"
    path.write_bytes(bytes(text))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["check", str(path)])
    if code == 0:
        assert out.getvalue().startswith(f"{path}: ok: ") and err.getvalue() == ""
    else:
        assert code == 2 and out.getvalue() == ""
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"torchlean: error: {path}: $")


# -- start-up, interrupts and unwritable output (both command lines) -------------------------

ENTRIES = {
    # the installed scripts: (entry function of torchlean_cli, args that block reading stdin,
    # exit code and line when interrupted)
    "torchlean": ("torchlean", ["check", "/dev/stdin"], 130, "torchlean: interrupted\n"),
    "torchlean-verify": ("torchlean_verify", ["/dev/stdin"], 3, "torchlean-verify: interrupted\n"),
}


def _script(entry: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    """The installed script ``entry`` (``torchlean_cli``'s function, as the console script
    calls it), started after writing the file ``marker`` (when given)."""
    marker = kw.get("marker")
    # With a marker, SIGINT is held back from just before the marker is written until our
    # code's first statement unblocks it: an interrupt sent once the marker exists lands in our
    # code, not in these lines of the harness (a race the loaded CI machine lost).
    code = (
        "import signal, sys, torchlean_cli\n"
        + (
            "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
            f"open({str(marker)!r}, 'w').close()\n"
            if marker
            else ""
        )
        + f"sys.exit(torchlean_cli.{ENTRIES[entry][0]}())\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=subprocess.PIPE,
        stdout=kw.get("stdout", subprocess.PIPE),  # type: ignore[arg-type]
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3, 1.5])
def test_interrupt_at_any_time_gives_one_line(tmp_path: Path, entry: str, delay: float) -> None:
    """Ctrl-C from the moment our code runs: during the imports at start-up (the first second;
    it used to print a KeyboardInterrupt traceback and die by SIGINT), or later while the
    command waits for its input. Either way: one line and the command's exit code."""
    import signal
    import time

    _, args, code, line = ENTRIES[entry]
    marker = tmp_path / "started"
    proc = _script(entry, *args, marker=marker)
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.001)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (code, "", line)


def test_startup_module_imports_nothing_heavy() -> None:
    heavy = "{'numpy', 'jax', 'torchlean_ir', 'verify', 'rich'}"
    code = f"import sys, torchlean_cli; print(sorted(m for m in sys.modules if m in {heavy}))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (0, "[]\n")


def test_a_broken_installation_is_one_line() -> None:
    import torchlean_cli

    assert torchlean_cli.run("torchlean", "no_such_module_xyz:main", 130) == 2


@pytest.mark.parametrize(
    "args",
    [
        ["check", "examples/graphs/mlp_regression.json"],
        ["show", "examples/graphs/mlp_regression.json"],
        ["--help"],
        ["--version"],
    ],
    ids=lambda a: a[0],
)
def test_unwritable_stdout_is_one_line_exit_2(args: list[str]) -> None:
    """``> /dev/full``: used to print a traceback (``--help`` was lost silently)."""
    with open("/dev/full", "w") as full:
        proc = _script("torchlean", *args, stdout=full)
        _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err) == (
        2,
        "torchlean: error: cannot write to standard output: No space left on device\n",
    )


def test_closed_stdout_and_a_closed_pipe() -> None:
    path = "examples/graphs/attention_block.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torchlean_ir", "check", path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert (proc.returncode, proc.stderr) == (
        2,
        "torchlean: error: cannot write to standard output: Bad file descriptor\n",
    )
    # a reader that goes away (`torchlean show g.json | head -c 10`) is not an error
    proc2 = _script("torchlean", "show", path)
    assert proc2.stdout is not None
    proc2.stdout.read(10)
    proc2.stdout.close()
    assert proc2.wait(timeout=120) == 0
    assert proc2.stderr is not None and proc2.stderr.read() == ""


def test_an_undecodable_path_is_shown_escaped(tmp_path: Path) -> None:
    odd = os.fsencode(tmp_path) + b"/\xff\n.json"
    with open(odd, "wb") as f:
        f.write(_good_text().encode())
    proc = subprocess.run(
        [sys.executable, "-m", "torchlean_ir", "check", odd],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout.startswith(os.fsencode(tmp_path) + b"/\\udcff\\n.json: ok: 2 nodes")
    bad = odd[:-5] + b"\n\x1b[31m.json"  # a newline and an escape sequence, no such file
    proc = subprocess.run(
        [sys.executable, "-m", "torchlean_ir", "check", bad],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert (proc.returncode, proc.stdout) == (2, b"")
    assert proc.stderr.count(b"\n") == 1 and b"\x1b" not in proc.stderr
    assert proc.stderr.endswith(b"\\n\\x1b[31m.json': No such file or directory\n")


@pytest.mark.parametrize(
    "args",
    [["examples/graphs/mlp_regression.json", "-q"], ["--help"]],
    ids=["report", "help"],
)
def test_verify_unwritable_stdout_is_one_line_exit_2(args: list[str]) -> None:
    """It used to be reported as an internal error (exit 3)."""
    with open("/dev/full", "w") as full:
        proc = _script("torchlean-verify", *args, stdout=full)
        _, err = proc.communicate(timeout=300)
    assert (proc.returncode, err) == (
        2,
        "torchlean-verify: error: cannot write to standard output: No space left on device\n",
    )


def test_verify_json_to_a_full_disk_writes_nothing(tmp_path: Path) -> None:
    proc = _script("torchlean-verify", "examples/graphs/mlp_regression.json", "--json", "/dev/full")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2
    assert err.endswith("torchlean-verify: error: --json /dev/full: No space left on device\n")


def test_argparse_errors_stay_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by tests/fuzz: an unrecognised argument holding a newline broke argparse's error
    line in two."""
    assert cli.main(["check", "a.json", "b\nc.json"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: torchlean ")
    assert err[-1] == "torchlean: error: unrecognized arguments: b\\nc.json"
