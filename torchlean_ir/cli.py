"""The ``torchlean`` command line.

::

    torchlean check GRAPH.json      validate a graph file; print a one-line summary
    torchlean show GRAPH.json       print the graph's text form
    torchlean import MODEL.pt2|MODEL.onnx -o GRAPH.json [--params PARAMS.safetensors]
                                    import a PyTorch or ONNX model (torchlean_ir.interop)
    torchlean export GRAPH.json -o MODEL.onnx (--params PARAMS | --zero-params)
                                    export a graph as an ONNX model
    torchlean verify ...            the verifier (``verify.cli``), when installed

Exit codes: 0 success; 2 bad input or usage (a malformed, ill-typed or oversized graph file, an
unreadable path, a bad option, a model with an op that cannot be imported or exported), with one
line ``torchlean: error: ...`` on stderr and never a traceback; 130 interrupted. A subcommand
provided by another package (``verify``) returns its own documented codes. Anything else (a
traceback, exit 1) is a bug.

Subcommands provided by other packages are listed in :data:`PLUGINS`: ``torchlean NAME ARGS...``
imports the module and calls its ``main(argv)`` with ``ARGS`` (a list of strings); the return
value (an int, or None for 0) is the exit code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from ._errors import GraphFormatError, TorchleanError
from ._format import DEFAULT_LIMITS, Limits, load
from ._graph import GraphData
from ._printer import format_graph

PROG = "torchlean"

#: Exit codes (see the module docstring and docs/index.md).
EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

#: Subcommands that live in other packages: name -> (module exposing ``main(argv)``, help).
PLUGINS: dict[str, tuple[str, str]] = {
    "verify": ("verify.cli", "prove a graph's compiled backward equal to the reference"),
}


class _Fail(Exception):
    """A user error: printed as one line, exit code 2."""


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
    print(f"{args.graph}: ok: {summary(graph)}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    graph = _load(args)
    print(format_graph(graph, short=args.short))
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the built-in subcommands (plugins are listed, not parsed)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="torchlean-ir: typed IR graphs with proof-checked backprop.",
        epilog="Exit codes: 0 ok; 2 bad input or usage (one line on stderr); 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("check", help="validate a graph file and print a one-line summary")
    p.add_argument("graph", metavar="GRAPH.json", help="a graph file (docs/ir-format.md)")
    _add_limits(p)
    p.set_defaults(run=cmd_check)

    p = sub.add_parser("show", help="print a graph file's text form")
    p.add_argument("graph", metavar="GRAPH.json", help="a graph file (docs/ir-format.md)")
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
    try:
        if args_list and args_list[0] in PLUGINS:
            return run_plugin(args_list[0], args_list[1:])
        args = build_parser().parse_args(args_list)
        if args.run is None:  # a plugin reached through argparse (options before its name)
            return run_plugin(args.plugin, list(args.rest))
        return int(args.run(args))
    except _Fail as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`torchlean show g.json | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
