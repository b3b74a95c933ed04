"""``torchlean-verify``: exit codes 0 / 1 / 2 / 3 / 5, one-line errors, the table and --json."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import NoReturn

import pytest

import torchlean_ir as tl
from verify.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = os.path.join(ROOT, "examples", "custom_op_plugin.py")
WRONG = os.path.join(ROOT, "examples", "custom_op_plugin_wrong.py")
CUSTOM_GRAPH = os.path.join(ROOT, "examples", "custom_op_graph.json")


def _graph(path: str) -> str:
    b = tl.GraphBuilder("f32")
    x = b.input("x", (3,))
    W, bias = b.param("W", (2, 3)), b.param("b", (2,))
    h = b.linear(W, bias, x).tanh()
    tl.save(b.build(b.sum(h * h)), path)
    return path


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verify.cli", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})),
    )  # fmt: skip


def test_verified_graph_exits_0_with_a_table(tmp_path: object, capsys: object) -> None:
    path = _graph(os.path.join(str(tmp_path), "g.json"))
    assert main([path]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "linear(f32[2,3], f32[2], f32[3])" in out
    assert "wiring" in out and "VERIFIED" in out


def test_json_to_stdout_and_to_a_file(tmp_path: object, capsys: object) -> None:
    path = _graph(os.path.join(str(tmp_path), "g.json"))
    assert main([path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert doc["schema"] == "torchlean-verify-report" and doc["verdict"] == "verified"
    out = os.path.join(str(tmp_path), "report.json")
    assert main([path, "--json", out, "-q"]) == 0
    with open(out) as f:
        assert json.load(f)["exit_code"] == 0


@pytest.mark.parametrize(
    "make,args,message",
    [
        (None, ["missing.json"], "missing.json: no such file"),
        ("{not json", [], "g.json"),
        ('{"format": "torchlean-ir", "version": 1}', [], "g.json"),
        ("GRAPH", ["--jobs", "0"], "--jobs must be at least 1"),
        ("GRAPH", ["--dtype", "f16"], "invalid choice"),
        ("GRAPH", ["--no-such-flag"], "unrecognized arguments"),
        ("GRAPH", ["--plugin", "no_such_plugin_module"], "--plugin no_such_plugin_module"),
        ("GRAPH", ["--plugin", "missing_plugin.py"], "no such file"),
        ("GRAPH", ["--json", "/no/such/dir/report.json"], "--json /no/such/dir/report.json"),
        ("GRAPH", ["--json", "DIR"], "is a directory"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    make: str | None,
    args: list[str],
    message: str,
    tmp_path: object,
    capsys: object,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Refused in one line before anything is verified (verify_graph is never called)."""
    import verify._verify

    def never(*a: object, **k: object) -> NoReturn:
        raise AssertionError("verify_graph called for bad input")

    monkeypatch.setattr(verify._verify, "verify_graph", never)
    path = os.path.join(str(tmp_path), "g.json")
    if make == "GRAPH":
        _graph(path)
    elif make is not None:
        with open(path, "w") as f:
            f.write(make)
    args = [str(tmp_path) if a == "DIR" else a for a in args]
    argv = ([path] if make is not None else []) + args
    assert main(argv) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchlean-verify: error:"), err
    assert message in lines[0]


def test_unknown_op_needs_its_plugin(capsys: object) -> None:
    assert main([CUSTOM_GRAPH]) == 2
    assert "unknown op" in capsys.readouterr().err  # type: ignore[attr-defined]


def test_custom_op_plugin_verifies_and_a_wrong_rule_is_caught() -> None:
    ok = _run(CUSTOM_GRAPH, "--plugin", PLUGIN, "-q")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = _run(CUSTOM_GRAPH, "--plugin", WRONG, "-q")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "vjp = adjoint" in bad.stdout and "counterexample: node 3" in bad.stdout
    # the verdict line counts the failed checks (one: the VJP rule of log_cosh)
    assert "MISMATCH: 5 nodes (5 signatures), 33 checks, 1 failed: 33 exact," in bad.stdout
    assert "Traceback" not in bad.stderr


def test_undecided_exits_3(tmp_path: object) -> None:
    """A lowering that uses a primitive the interpreter does not know: not verified, exit 3."""
    plugin = os.path.join(str(tmp_path), "sorted_sum.py")
    with open(plugin, "w") as f:
        f.write(
            textwrap.dedent("""
            import jax.numpy as jnp
            import torchlean_ir as tl

            op = tl.Op("sorted_sum", args=("x",), family="custom", doc="sum, via a sort")
            op.def_shape(lambda x: ())
            op.def_forward(lambda B, x: B.sum(x))
            op.def_jvp(lambda B, a, t, o: B.sum(t[0]))
            op.def_vjp(lambda B, a, o, ct: (B.broadcast_to(ct, a[0].shape),))
            op.def_lower(lambda B, x: jnp.sum(jnp.sort(x)))
        """)
        )
    sys.path.insert(0, str(tmp_path))
    try:
        import sorted_sum  # noqa: F401  (registers the op in this process, to build the graph)

        b = tl.GraphBuilder("f64")
        g = b.build(b.apply("sorted_sum", b.param("x", (3,))))
        path = os.path.join(str(tmp_path), "g.json")
        tl.save(g, path)
    finally:
        sys.path.remove(str(tmp_path))
        tl.unregister_op("sorted_sum")
    proc = _run(path, "--plugin", plugin)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "sort" in proc.stdout and "not verified" in proc.stdout


def test_jobs_with_a_plugin_in_worker_processes() -> None:
    proc = _run(CUSTOM_GRAPH, "--plugin", PLUGIN, "--jobs", "2", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_an_internal_error_exits_5_with_one_line(
    tmp_path: object, capsys: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug of the verifier (here, verify_graph raising) is not the user's and not an open
    question: one line on stderr, exit code 5 (INTERNAL_ERROR), not 3."""
    import verify._verify
    from verify.cli import INTERNAL_ERROR

    def broken(*args: object, **kwargs: object) -> NoReturn:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr(verify._verify, "verify_graph", broken)
    path = _graph(os.path.join(str(tmp_path), "g.json"))
    assert INTERNAL_ERROR == 5
    assert main([path, "-q"]) == 5
    err = capsys.readouterr().err.strip()  # type: ignore[attr-defined]
    assert err.startswith("torchlean-verify: internal error: RuntimeError: a bug"), err
    assert "\n" not in err and "Traceback" not in err, err
