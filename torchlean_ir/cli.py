"""The ``torchlean`` command line.

::

    torchlean check GRAPH.json      validate a graph file; print a one-line summary
    torchlean show GRAPH.json       print the graph's text form
        [--format text|dot|svg] [-o FILE] [--collapse]
                                    or draw it: Graphviz DOT, or SVG rendered by Graphviz
    torchlean import MODEL.pt2|MODEL.onnx -o GRAPH.json [--params PARAMS.safetensors]
                                    import a PyTorch or ONNX model (torchlean_ir.interop)
    torchlean import MODEL --report list every op that would be refused, one line per op and
                                    reason with its count and first source line; writes
                                    nothing; exit 2 if any, 0 if the model would import
    torchlean export GRAPH.json -o MODEL.onnx (--params PARAMS | --zero-params)
                                    export a graph as an ONNX model
    torchlean verify ...            the verifier (``verify.cli``), when installed

Exit codes: 0 success; 2 bad input or usage (a malformed, ill-typed or oversized graph file, an
unreadable path, an unwritable output, a bad option, standard output that cannot be written, a
model with an op that cannot be imported or exported), with one line ``torchlean: error: ...``
on stderr and never a traceback; 4 a program the command needs is missing or failed (Graphviz's
``dot`` for ``show --format svg``), one line naming it; 130 interrupted. A subcommand provided
by another package (``verify``) returns its own documented codes. Anything else (a traceback,
exit 1) is a bug.

The installed ``torchlean`` script starts in :mod:`torchlean_cli`, which handles an interrupt
while this module is still being imported.

Subcommands provided by other packages are listed in :data:`PLUGINS`: ``torchlean NAME ARGS...``
imports the module and calls its ``main(argv)`` with ``ARGS`` (a list of strings); the return
value (an int, or None for 0) is the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__
from ._dot import GraphvizError, render_svg, to_dot
from ._errors import GraphFormatError, TorchleanError
from ._format import DEFAULT_LIMITS, Limits, load
from ._graph import GraphData
from ._printer import format_graph

PROG = "torchlean"

#: Exit codes (see the module docstring and docs/index.md).
EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_MISSING_PROGRAM = 4
EXIT_INTERRUPTED = 130

#: ``show --format``; without it, the format follows ``-o FILE``'s suffix (else text).
SHOW_FORMATS = ("text", "dot", "svg")
_SUFFIX_FORMATS = {".dot": "dot", ".gv": "dot", ".svg": "svg"}

#: Subcommands that live in other packages: name -> (module exposing ``main(argv)``, help).
PLUGINS: dict[str, tuple[str, str]] = {
    "verify": ("verify.cli", "prove a graph's compiled backward equal to the reference"),
}


class _Fail(Exception):
    """A user error: printed as one line, exit code 2."""


# -- output that may fail ------------------------------------------------------------------
# Shared with the other command lines (verify.cli): standard output may be a full disk
# (`> /dev/full`), a closed pipe (`| head`) or a closed descriptor. A write that fails raises
# OutputError (never an OSError that could be mistaken for something else); the command answers
# with one line and its exit code, and silence_stdout() makes the interpreter's last flush at exit
# harmless.


class OutputError(Exception):
    """Standard output could not be written; ``broken_pipe`` when its reader went away."""

    def __init__(self, err: OSError) -> None:
        super().__init__(f"cannot write to standard output: {err.strerror or err}")
        self.broken_pipe = isinstance(err, BrokenPipeError)


class GuardedOutput:
    """A text stream whose ``write`` and ``flush`` raise :class:`OutputError` instead of
    ``OSError`` (and ``ValueError`` for a closed stream); text the stream's encoding cannot
    represent (an undecodable file name) is written with backslash escapes. Anything else is the
    wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:  # descriptor 1 was closed when the interpreter started
            raise OutputError(OSError(errno.EBADF, os.strerror(errno.EBADF)))
        try:
            try:
                return int(self._stream.write(text))
            except UnicodeEncodeError:
                enc = getattr(self._stream, "encoding", None) or "utf-8"
                safe = text.encode(enc, "backslashreplace").decode(enc, "replace")
                return int(self._stream.write(safe))
        except (OSError, ValueError) as e:
            raise OutputError(e if isinstance(e, OSError) else OSError(str(e))) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError) as e:
            raise OutputError(e if isinstance(e, OSError) else OSError(str(e))) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def silence_stdout() -> None:
    """Point standard output at the null device (after a failed write, so that the
    interpreter's final flush of what is still buffered cannot fail again)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def one_line(text: str) -> str:
    """``text`` with its control characters and undecodable bytes escaped (``\\n``,
    ``\\udcff``): a file name or a message that stays on one line, whatever it holds."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def say(prog: str, message: str) -> None:
    """``prog: message`` on standard error, on one line; nothing if standard error cannot be
    written."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print(one_line(f"{prog}: {message}"), file=sys.stderr, flush=True)


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def _add_limits(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-nodes",
        type=_positive_int,
        metavar="N",
        default=DEFAULT_LIMITS.max_nodes,
        help=f"refuse graphs with more than N nodes (default {DEFAULT_LIMITS.max_nodes})",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive_int,
        metavar="N",
        default=DEFAULT_LIMITS.max_bytes,
        help=f"refuse files larger than N bytes (default {DEFAULT_LIMITS.max_bytes})",
    )


def _load(args: argparse.Namespace) -> GraphData:
    limits = Limits().replace(max_nodes=args.max_nodes, max_bytes=args.max_bytes)
    try:
        return load(args.graph, limits=limits)
    except GraphFormatError as e:
        # a JSON path or node needs the file name; "cannot read <file>: ..." has it already
        raise _Fail(f"{args.graph}: {e}" if e.path else str(e)) from None


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def summary(graph: GraphData) -> str:
    """``7 nodes, 5 leaves, 1 index input, 1 output, hash <sha256>``."""
    return ", ".join(
        [
            _count(len(graph.nodes), "node", "nodes"),
            _count(graph.num_leaves, "leaf", "leaves"),
            _count(len(graph.index_inputs), "index input", "index inputs"),
            _count(len(graph.outputs), "output", "outputs"),
            f"hash {graph.content_hash}",
        ]
    )


def cmd_check(args: argparse.Namespace) -> int:
    graph = _load(args)
    print(f"{one_line(args.graph)}: ok: {summary(graph)}", file=args.out)
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    graph = _load(args)
    fmt = args.format
    if fmt is None:
        suffix = os.path.splitext(args.output or "")[1].lower()
        fmt = _SUFFIX_FORMATS.get(suffix, "text")
    if fmt == "text":
        text = format_graph(graph, short=args.short) + "\n"
    else:
        name = os.path.splitext(os.path.basename(args.graph))[0]
        text = to_dot(graph, collapse=args.collapse, name=name)
        if fmt == "svg":
            text = render_svg(text)  # GraphvizError: exit 4
    if args.output is None:
        args.out.write(text)
        return EXIT_OK
    try:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise _Fail(f"cannot write {args.output}: {e.strerror or e}") from None
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from .interop._cli import cmd_import as run

    try:
        return run(args)
    except TorchleanError as e:
        raise _Fail(str(e)) from None


def cmd_export(args: argparse.Namespace) -> int:
    from .interop._cli import cmd_export as run

    graph = _load(args)
    try:
        return run(args, graph)
    except TorchleanError as e:
        raise _Fail(str(e)) from None


class _Parser(argparse.ArgumentParser):
    """argparse, with its error on one line (an argument may hold a newline)."""

    def error(self, message: str) -> NoReturn:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self.print_usage(sys.stderr)
        say(self.prog, f"error: {message}")
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the built-in subcommands (plugins are listed, not parsed)."""
    parser = _Parser(
        prog=PROG,
        description="torchlean-ir: typed IR graphs with proof-checked backprop.",
        epilog="Exit codes: 0 ok; 2 bad input or usage (one line on stderr); 4 a program the "
        "command needs (Graphviz's dot) is missing or failed; 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("check", help="validate a graph file and print a one-line summary")
    p.add_argument("graph", metavar="GRAPH.json", help="a graph file (docs/ir-format.md)")
    _add_limits(p)
    p.set_defaults(run=cmd_check)

    p = sub.add_parser("show", help="print a graph file's text form, or draw it (DOT, SVG)")
    p.add_argument("graph", metavar="GRAPH.json", help="a graph file (docs/ir-format.md)")
    p.add_argument(
        "--format",
        choices=SHOW_FORMATS,
        default=None,
        help="text (the parseable text form), dot (Graphviz source) or svg (a drawing rendered "
        "by Graphviz's dot program); default: from the suffix of -o FILE (.dot, .gv, .svg), "
        "else text",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument(
        "--collapse",
        action="store_true",
        help="dot, svg: draw each run of repeated blocks (same ops, types and wiring) once, "
        "with its count",
    )
    p.add_argument(
        "--short", action="store_true", help="abbreviate tensor literals (not parseable back)"
    )
    _add_limits(p)
    p.set_defaults(run=cmd_show)

    from .interop._cli import add_parsers

    add_parsers(sub, _add_limits, cmd_import, cmd_export)

    for name, (module, help_text) in PLUGINS.items():
        p = sub.add_parser(name, help=f"{help_text} ({module})", add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(run=None, plugin=name)
    return parser


def run_plugin(name: str, argv: list[str]) -> int:
    """Run plugin subcommand ``name`` with ``argv``; exit 2 with one line if it is missing."""
    module_name = PLUGINS[name][0]
    try:
        module: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise _Fail(
                f"'{name}' is not available: module {module_name} cannot be found "
                "(is the package installed?)"
            ) from None
        raise _Fail(f"'{name}' is not available: importing {module_name} failed: {e}") from None
    except ImportError as e:
        raise _Fail(f"'{name}' is not available: importing {module_name} failed: {e}") from None
    main_fn = getattr(module, "main", None)
    if not callable(main_fn):
        raise _Fail(f"'{name}' is not available: {module_name} has no main(argv)")
    try:
        code = main_fn(argv)
    except TorchleanError as e:  # a user error the plugin did not report itself
        raise _Fail(str(e)) from None
    return EXIT_OK if code is None else int(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``torchlean`` command line; return the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    out = GuardedOutput(sys.stdout)
    try:
        code = _run(args_list, out)
        out.flush()  # a failure to write is reported here, not by the interpreter at exit
        return code
    except _Fail as e:
        say(PROG, f"error: {e}")
        return EXIT_BAD_INPUT
    except GraphvizError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_MISSING_PROGRAM
    except KeyboardInterrupt:
        say(PROG, "interrupted")
        return EXIT_INTERRUPTED
    except OutputError as e:
        silence_stdout()
        if e.broken_pipe:  # the reader went away (`torchlean show g.json | head`): not an error
            return EXIT_OK
        say(PROG, f"error: {e}")
        return EXIT_BAD_INPUT


def _run(args_list: list[str], out: GuardedOutput) -> int:
    if args_list and args_list[0] in PLUGINS:
        return run_plugin(args_list[0], args_list[1:])
    try:
        with contextlib.redirect_stdout(out):  # argparse ignores a failed write of --help
            args = build_parser().parse_args(args_list)
    except SystemExit as e:  # --help or --version (printed), or a usage error (printed)
        return EXIT_OK if e.code in (None, 0) else EXIT_BAD_INPUT
    if args.run is None:  # a plugin reached through argparse (options before its name)
        return run_plugin(args.plugin, list(args.rest))
    args.out = out
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
