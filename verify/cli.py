"""``torchlean-verify``: verify graph files from the command line.

::

    torchlean-verify GRAPH.json [GRAPH.json ...] [--json [FILE]] [--html FILE]
                     [--plugin MODULE] [--jobs N] [--dtype f64|f32|all]
                     [--method auto|tensor|elements] [--end-to-end auto|always|never]
                     [--max-elements N] [--no-kinks] [--timeout SECONDS] [--quiet]
    torchlean-verify --function MODULE:CALLABLE --args 'f32[1024,64] i32[8]'
                     [--index-range NAME=HI] [--modes vjp,jvp] [--kinks one-sided|convention]
                     [--json [FILE]] [--html FILE]

Exit codes: 0 verified, 1 mismatch found, 2 bad input or usage (one line on stderr, no
traceback; also standard output, the ``--json`` or the ``--html`` file that cannot be written),
3 some part could not be decided (or an interruption, or the ``--timeout`` ran out first), 5 an
internal error of the verifier or of the HTML page writer (a bug, one line on stderr). With
several graphs, a mismatch anywhere gives 1, else anything undecided gives 3.

The installed script starts in :mod:`torchlean_cli`, which answers an interrupt during the
imports at start-up in the same way (one line, exit code 3).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from . import _plugins
from ._report import EXIT_CODES, Report, worst

PROG = "torchlean-verify"


class UsageError(Exception):
    """Bad command-line usage or input: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description=(
            "Prove symbolically that a graph's compiled forward, JVP and tape VJP equal the "
            "reference semantics, and that every op's rules equal the derivative of its forward."
        ),
        epilog="exit codes: 0 verified, 1 mismatch, 2 bad input or usage, 3 undecided, "
        "5 internal error of the verifier",
    )
    p.add_argument("graphs", nargs="*", metavar="GRAPH.json", help="graph file(s) to verify")
    p.add_argument("--function", metavar="MODULE:CALLABLE",
                   help="verify a JAX function's derivatives instead of graphs: jax.vjp and "
                   "jax.jvp of CALLABLE (and its custom_vjp / custom_jvp rules) against the "
                   "derivative of its forward (MODULE may be a .py file)")  # fmt: skip
    p.add_argument("--args", metavar="SPECS",
                   help="with --function: its arguments' dtypes and shapes, e.g. 'f32[1024,64] "
                   "f32[64] i32[8]' (integer arguments: symbolic index inputs)")  # fmt: skip
    p.add_argument("--index-range", action="append", default=[], metavar="NAME=HI",
                   help="with --function: integer argument NAME takes every value 0..HI-1 "
                   "(default every non-negative int32); repeatable")  # fmt: skip
    p.add_argument(
        "--modes",
        default="vjp,jvp",
        metavar="vjp,jvp",
        help="with --function: which of JAX's derivatives to check (default both)",
    )
    p.add_argument(
        "--kinks",
        choices=("one-sided", "convention"),
        default="one-sided",
        help="with --function: at a kink (max/min of two values at a tie, abs at 0) accept "
        "either one-sided derivative or their mean, the choice named (one-sided, default), or "
        "only docs/ops.md's conventions (convention)",
    )
    p.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="FILE",
        help="write the machine-readable report (docs/verification.md) to FILE, or to stdout "
        "without FILE (the table is then not printed)",
    )
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write a self-contained HTML report to FILE: each graph drawn with its nodes "
        "coloured by result, the counterexamples beside their nodes, the tables",
    )
    p.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="MODULE",
        help="import MODULE (a module name or a .py file) first, e.g. to register custom ops; "
        "repeatable",
    )
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="check op signatures in N processes (default 1)")  # fmt: skip
    p.add_argument("--dtype", default=None, choices=("f64", "f32", "all"),
                   help="the compilation to verify (default: the graph's own dtype, what "
                   "compiler.compile(graph) runs; all: both)")  # fmt: skip
    p.add_argument("--matmul-precision", default="float32", choices=("float32", "tf32", "bf16"),
                   help="the precision of the compiled matrix products and convolutions to "
                   "verify (default float32; tf32 and bf16 are the compiler's opt-in fast "
                   "modes, which no float32 statement covers)")  # fmt: skip
    p.add_argument("--method", default="auto", choices=("auto", "tensor", "elements"),
                   help="how links 1 and 2 cover the elements: tensor level (one symbolic "
                   "element for all), element by element, or auto (tensor, then elements "
                   "for what it leaves undecided on small signatures; the default)")  # fmt: skip
    p.add_argument("--end-to-end", default="auto", choices=("auto", "always", "never"),
                   help="whole compiled functions symbolically (auto: small graphs)")  # fmt: skip
    p.add_argument("--max-elements", type=int, default=None, metavar="N",
                   help="elements compared per check before sampling (default 4096)")  # fmt: skip
    p.add_argument("--no-kinks", action="store_true", help="skip the kink-convention checks")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="stop after SECONDS (all graphs together): what was not decided by then "
                   "is 'not verified' (not reached, or stopped) and the verdict undecided "
                   "(exit 3) unless a mismatch was found")  # fmt: skip
    p.add_argument("--no-compiled", action="store_true",
                   help="check each op's lowered rules instead of compiling the graph")  # fmt: skip
    p.add_argument("-q", "--quiet", action="store_true", help="print only the verdict lines")
    return p


def load_plugin(spec: str) -> None:
    """Import a plugin (:func:`verify._plugins.load_plugin`); a failure is a usage error."""
    try:
        _plugins.load_plugin(spec)
    except _plugins.PluginError as e:
        raise UsageError(str(e)) from None


def _load(path: str) -> Any:
    import torchlean_ir as tl

    if not os.path.exists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory")
    try:
        graph = tl.load(path)
        tl.check(graph)
    except tl.TorchleanError as e:
        raise UsageError(f"{path}: {e}") from None
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror or e}") from None
    return graph


def _progress_ui(console: Any, enabled: bool) -> Any:
    """A rich progress bar (stderr, transient) or a no-op context."""
    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description:<16}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _print_report(console: Any, report: Report, quiet: bool) -> None:
    from rich.table import Table

    style = {"verified": "bold green", "mismatch": "bold red", "undecided": "bold yellow"}
    if not quiet:
        title = (f"function {report.graph} ({report.dtype})" if report.subject == "function"
                 else f"{report.graph} ({report.dtype}, matmul precision "
                 f"{report.matmul_precision})")  # fmt: skip
        table = Table(title=title, title_justify="left")
        for col in ("nodes", "signature", "checks passed", "method", "result"):
            table.add_column(col, overflow="fold")
        shared: dict[int, list[int]] = {}
        for n in report.nodes:
            if n.shared_with is not None:
                shared.setdefault(n.shared_with, []).append(n.node)
        for n in report.nodes:
            if n.shared_with is not None:
                continue
            same = shared.get(n.node, [])
            nodes = str(n.node) + (f" (+{len(same)} same)" if same else "")
            links: dict[str, list[int]] = {}
            for c in n.checks:
                ok = links.setdefault(c.link, [0, 0])
                ok[0] += c.result == "pass"
                ok[1] += 1
            checks = ", ".join(f"{k} {a}/{b}" for k, (a, b) in links.items())
            res = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]"}.get(n.result, "[yellow]?[/]")
            table.add_row(nodes, n.signature, checks, n.label, res)
        for c in report.graph_checks:
            res = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]"}.get(c.result, "[yellow]?[/]")
            table.add_row(c.link, c.name, "1/1" if c.result == "pass" else "0/1", c.label, res)
        console.print(table)
        for note in report.notes:
            console.print(f"note: {note}", style="dim", highlight=False, soft_wrap=True)
        for node, c in report.failures():
            console.print(f"{c.result.upper()} {report.where(node)}: {c.name} [{c.label}]: {c.how}",
                          highlight=False, soft_wrap=True, markup=False)  # fmt: skip
            if c.counterexample is not None:
                console.print("  counterexample: " + c.counterexample.describe(), highlight=False,
                              soft_wrap=True)  # fmt: skip
    from torchlean_ir.cli import one_line

    first = report.summary().splitlines()[0]
    shown = one_line(str(report.graph))
    console.print(f"{shown}: {first}", style=style[report.verdict], highlight=False,
                  soft_wrap=True)  # fmt: skip
    if quiet and report.verdict == "mismatch" and report.counterexamples:
        console.print("  counterexample: " + report.counterexamples[0].describe(),
                      highlight=False, soft_wrap=True)  # fmt: skip


def _function_job(args: Any) -> tuple[Any, list[Any], dict[str, int], list[str]]:
    """``--function``'s callable, argument specs, index ranges and modes (usage errors)."""
    from ._functions import FunctionSpecError, parse_arg_specs

    if args.args is None:
        raise UsageError("--function needs --args, e.g. --args 'f32[128,64] f32[64]'")
    try:
        fn = _plugins.load_callable(args.function)
        specs = parse_arg_specs(args.args)
    except (_plugins.PluginError, FunctionSpecError) as e:
        raise UsageError(f"{'--args: ' if isinstance(e, FunctionSpecError) else ''}{e}") from None
    ranges: dict[str, int] = {}
    for item in args.index_range:
        name, sep, hi = item.partition("=")
        if not sep or not name or not hi.strip().isdigit() or int(hi) < 1:
            raise UsageError(f"--index-range {item}: expected NAME=HI with HI a positive integer")
        ranges[name.strip()] = int(hi)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in ("vjp", "jvp") for m in modes):
        raise UsageError(f"--modes {args.modes}: expected vjp, jvp or vjp,jvp")
    return fn, specs, ranges, modes


def _run_function(job: tuple[Any, list[Any], dict[str, int], list[str]], args: Any, out: Any,
                  stdout: Any, reports: list[Report], json_stdout: bool) -> int:  # fmt: skip
    from torchlean_ir.cli import say

    from ._functions import FunctionSpecError, verify_function

    fn, specs, ranges, modes = job
    try:
        report = verify_function(fn, *specs, name=args.function, modes=modes,
                                 index_ranges=ranges, kinks=args.kinks)  # fmt: skip
    except FunctionSpecError as e:
        say(PROG, f"error: {args.function}: {e}")
        return 2
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a verifier bug, not the user's: say so in one line
        say(PROG, f"internal error: {type(e).__name__}: {e}")
        return INTERNAL_ERROR
    reports.append(report)
    _print_report(out, report, args.quiet or json_stdout)
    code = _write_outputs(args, reports, [None], stdout, json_stdout)
    return report.exit_code if code is None else code


def _check_json_target(path: str, option: str = "--json") -> None:
    """An output FILE must be writable before anything is verified (not after minutes of it)."""
    if os.path.isdir(path):
        raise UsageError(f"{option} {path}: is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: no such directory {parent}")
    if not os.access(path if os.path.exists(path) else parent, os.W_OK):
        raise UsageError(f"{option} {path}: permission denied")


#: Exit code of an internal error of the verifier (a bug, not an open question: not 3).
INTERNAL_ERROR = 5


def _exit_code(reports: Sequence[Report]) -> int:
    return EXIT_CODES[worst((r.verdict for r in reports), ("mismatch", "undecided", "verified"))]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    from torchlean_ir.cli import GuardedOutput, OutputError, say, silence_stdout

    stdout = GuardedOutput(sys.stdout)
    reports: list[Report] = []
    try:
        try:
            code = _main(argv, stdout, reports)
        except SystemExit as e:  # --help, printed by argparse
            code = 0 if e.code in (None, 0) else 2
        stdout.flush()  # a failure to write is reported here, not by the interpreter at exit
        return code
    except KeyboardInterrupt:
        say(PROG, "interrupted")
        return 3
    except OutputError as e:
        silence_stdout()
        if e.broken_pipe:  # the reader went away (`torchlean-verify g.json | head`)
            return _exit_code(reports) if reports else 3
        say(PROG, f"error: {e}")
        return 2


def _main(argv: Sequence[str] | None, stdout: Any, reports: list[Report]) -> int:
    from rich.console import Console

    from torchlean_ir.cli import OutputError, say

    err = Console(stderr=True, highlight=False)
    try:
        with contextlib.redirect_stdout(stdout):  # argparse ignores a failed write of --help
            args = _parser().parse_args(argv)
        if args.jobs < 1:
            raise UsageError(f"--jobs must be at least 1, got {args.jobs}")
        if args.max_elements is not None and args.max_elements < 1:
            raise UsageError(f"--max-elements must be at least 1, got {args.max_elements}")
        if args.timeout is not None and not (0 < args.timeout < float("inf")):
            raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
        if args.json not in (None, "-"):
            _check_json_target(args.json)
        if args.html is not None:
            _check_json_target(args.html, "--html")
        for spec in args.plugin:
            load_plugin(spec)
        function = _function_job(args) if args.function is not None else None
        if function is None and args.args is not None:
            raise UsageError("--args is given without --function")
        if function is None and not args.graphs:
            raise UsageError("no graph file given (or --function MODULE:CALLABLE)")
        if function is not None and args.graphs:
            raise UsageError("give graph files or --function, not both")
        graphs = [(path, _load(path)) for path in args.graphs]
    except UsageError as e:
        say(PROG, f"error: {e}")
        return 2
    json_stdout = args.json == "-"
    out = Console(file=sys.stderr if json_stdout else stdout, highlight=False)
    if not out.is_terminal:  # a log or a pipe: wide enough that signatures do not wrap
        out = Console(file=out.file, highlight=False, width=160)
    if function is not None:
        return _run_function(function, args, out, stdout, reports, json_stdout)
    from ._rules import MAX_ELEMENTS
    from ._verify import graph_dtype, verify_graph

    deadline = None if args.timeout is None else time.time() + args.timeout
    try:
        runs = [(path, graph, dt) for path, graph in graphs
                for dt in (("f64", "f32") if args.dtype == "all" else (args.dtype,))]  # fmt: skip
        for path, graph, dt in runs:
            dt = dt or graph_dtype(graph)
            show = err.is_terminal and not args.quiet
            with _progress_ui(err, show) as bar:
                tasks: dict[str, Any] = {}

                def progress(stage: str, done: int, total: int, bar: Any = bar,
                             tasks: dict = tasks) -> None:  # fmt: skip
                    if bar is None:
                        return
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(stage, total=total)
                    bar.update(tasks[stage], completed=done, total=total)

                report = verify_graph(
                    graph,
                    dtype=dt,
                    matmul_precision=args.matmul_precision,
                    method=args.method,
                    compiled=not args.no_compiled,
                    end_to_end=args.end_to_end,
                    kinks=not args.no_kinks,
                    max_elements=args.max_elements or MAX_ELEMENTS,
                    jobs=args.jobs,
                    plugins=args.plugin,
                    progress=progress,
                    name=path,
                    timeout=args.timeout,
                    deadline=deadline,
                )
            reports.append(report)
            _print_report(out, report, args.quiet or json_stdout)
    except (KeyboardInterrupt, OutputError):
        raise
    except Exception as e:  # a verifier bug, not the user's: say so in one line
        say(PROG, f"internal error: {type(e).__name__}: {e}")
        return INTERNAL_ERROR
    code = _write_outputs(args, reports, [graph for _, graph, _ in runs], stdout, json_stdout)
    return _exit_code(reports) if code is None else code


def _write_outputs(args: Any, reports: list[Report], graphs: list[Any], stdout: Any,
                   json_stdout: bool) -> int | None:  # fmt: skip
    """Write ``--html`` (each report beside its graph) and ``--json``; the exit code when one
    of them cannot be written, else ``None``."""
    from torchlean_ir.cli import say
    from torchlean_ir.extend import write_atomic

    if args.html is not None:
        from ._html import render_html

        try:
            page = render_html(list(zip(reports, graphs, strict=True)))
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(page)
        except OSError as e:
            say(PROG, f"error: --html {args.html}: {e.strerror or e}")
            return 2
        except Exception as e:  # a bug of the page writer, not the user's
            say(PROG, f"internal error: --html: {type(e).__name__}: {e}")
            return INTERNAL_ERROR
    if args.json is not None:
        doc = reports[0].to_json() if len(reports) == 1 else {
            "schema": "torchlean-verify-reports",
            "reports": [r.to_json() for r in reports],
            "exit_code": _exit_code(reports),
        }  # fmt: skip
        text = json.dumps(doc, indent=2)
        if json_stdout:
            print(text, file=stdout)
        else:
            try:  # all or nothing: a full disk leaves no truncated report
                write_atomic(args.json, (text + "\n").encode("utf-8"))
            except OSError as e:
                say(PROG, f"error: --json {args.json}: {e.strerror or e}")
                return 2
    return None


if __name__ == "__main__":
    sys.exit(main())
