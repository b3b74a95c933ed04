"""``torchlean import`` and ``torchlean export`` (the parsers live in ``torchlean_ir.cli``).

::

    torchlean import MODEL.pt2|MODEL.onnx -o GRAPH.json [--params PARAMS.safetensors]
                     [--constant NAME ...]  (.onnx: initializers that are not parameters)
                     [--tie NAME[=PARAM] ...]  (.onnx: initializers that are folds of one)
    torchlean import MODEL.pt2|MODEL.onnx --report
    torchlean export GRAPH.json -o MODEL.onnx (--params PARAMS.safetensors | --zero-params)

Every failure is an :class:`InteropError` (one line; exit 2 through the command line).
``--report`` lists every unsupported op at once and writes nothing (exit 2 when any is
unsupported, 0 when the model would import).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import numpy as np

from .._format import save
from .._graph import GraphData
from ._common import Imported
from ._files import (
    MAX_FILE_BYTES,
    load_onnx,
    load_pt2,
    quiet_loaders,
    read_params,
    save_params,
)
from ._trace import InteropError


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _batch_axis(text: str) -> int | None:
    return None if text == "none" else int(text)


def cmd_import(args: argparse.Namespace) -> int:
    """Import a model file; write the graph (and its parameters with ``--params``)."""
    from ._onnx_import import from_onnx
    from ._torch_import import from_torch

    path = args.model
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".pt2", ".onnx"):
        raise InteropError(f"{path}: expected a .pt2 (torch.export.save) or .onnx file")
    if args.constant and ext != ".onnx":
        raise InteropError(
            f"{path}: --constant is for .onnx models (a .pt2 program declares its buffers, "
            "which import as constants or frozen parameters)"
        )
    if args.tie and ext != ".onnx":
        raise InteropError(
            f"{path}: --tie is for .onnx models (a .pt2 program keeps a tensor PyTorch ties as "
            "one parameter, which imports as one)"
        )
    if args.report:
        return _report(args)
    if args.output is None:
        raise InteropError("import: give -o GRAPH.json (or --report)")
    if args.params is not None:
        from ._files import _format

        _format(args.params, "--params")  # a bad name fails before the import runs
    # one line, or the summary: no warning or log record of torch or onnx in between
    with quiet_loaders("onnx" if ext == ".onnx" else "torch.export"):
        if ext == ".onnx":
            model = load_onnx(path, max_bytes=args.max_bytes)
            imported = from_onnx(
                model,
                batch_axis=args.batch_axis,
                constants=args.constant or (),
                tied=_ties(args.tie),
            )
        else:
            program = load_pt2(path, max_bytes=args.max_bytes)
            imported = from_torch(program, batch_axis=args.batch_axis)
    try:
        save(imported.graph, args.output)
    except OSError as e:
        raise InteropError(f"cannot write {args.output}: {e.strerror or e}") from None
    if args.params is not None:
        try:
            save_params(args.params, imported.params)
        except OSError as e:
            raise InteropError(f"cannot write {args.params}: {e.strerror or e}") from None
    line = f"{args.output}: {', '.join(_summary(imported))}"
    if args.params is not None:
        line += f"; {len(imported.params)} parameters in {args.params}"
    elif imported.params:
        line += f"; {len(imported.params)} parameter values not written (no --params)"
    print(line, file=args.out)
    return 0


def _ties(specs: list[str] | None) -> dict[str, str]:
    """``--tie NAME[=PARAM]`` as :func:`from_onnx`'s ``tied`` (PARAM defaults to NAME)."""
    out: dict[str, str] = {}
    for spec in specs or ():
        name, eq, param = spec.partition("=")
        if not name or (eq and not param):
            raise InteropError(f"--tie: expected NAME or NAME=PARAM, got {spec!r}")
        if out.get(name, param or name) != (param or name):
            raise InteropError(f"--tie: {name!r} tied to both {out[name]!r} and {param or name!r}")
        out[name] = param or name
    return out


def _summary(imported: Imported) -> list[str]:
    g = imported.graph
    parts = [f"{len(g.nodes)} nodes", f"{g.num_leaves} leaves"]
    parts.append(f"batched over {', '.join(imported.batched)}" if imported.batched else "unbatched")
    for i, kind in enumerate(imported.reductions):
        if kind:
            parts.append(
                f"output {i}: the source's is the {kind} over the batch of its values "
                f"(batched(grads={kind!r}))"
            )
    return parts


def _report(args: argparse.Namespace) -> int:
    """``--report``: every unsupported op, one line per (op, reason), then a summary line; no
    file written. Exit 2 when anything is unsupported, 0 when the model would import."""
    from ._report import report, report_lines

    records, imported = report(
        args.model,
        batch_axis=args.batch_axis,
        max_bytes=args.max_bytes,
        constants=args.constant or (),
        tied=_ties(args.tie),
    )
    if imported is not None:
        print(f"{args.model}: would import: {', '.join(_summary(imported))}", file=args.out)
        return 0
    lines = report_lines(records)
    for line in lines:
        print(line, file=args.out)
    refused = sum(1 for r in records if not r.blocked_by)
    blocked = len(records) - refused
    line = f"{args.model}: {refused} unsupported nodes ({len(lines)} distinct op and reason)"
    if blocked:
        line += f"; {blocked} more depend on them"
    print(line, file=args.out)
    return 2


def cmd_export(args: argparse.Namespace, graph: GraphData) -> int:
    """Export a graph file to ONNX with parameter values from ``--params`` (or zeros)."""
    import onnx

    from ._onnx_export import to_onnx

    if not args.output.lower().endswith(".onnx"):
        raise InteropError(f"-o {args.output}: expected a .onnx file name")
    names = [leaf.name for leaf in graph.leaves if leaf.kind == "param"]
    if args.params is not None:
        values = read_params(args.params)
        missing = [n for n in names if n not in values]
        if missing:
            raise InteropError(f"{args.params}: no value for param leaf {missing[0]!r}")
        params = {n: values[n] for n in names}
    elif args.zero_params:
        params = {
            leaf.name: np.zeros(leaf.type.shape) for leaf in graph.leaves if leaf.kind == "param"
        }
    elif names:
        raise InteropError(
            f"the graph has {len(names)} param leaves: give their values with --params FILE "
            "(or --zero-params for a model with zero weights)"
        )
    else:
        params = {}
    batched = None if args.batched is None else [b for b in args.batched.split(",") if b]
    model = to_onnx(graph, params, batched=batched, opset=args.opset)
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # our exporter wrote something ONNX refuses: a bug, said in one line
        raise InteropError(f"the exported model fails onnx.checker: {e}") from None
    try:
        onnx.save(model, args.output)
    except OSError as e:
        raise InteropError(f"cannot write {args.output}: {e.strerror or e}") from None
    opset = model.opset_import[0].version
    print(f"{args.output}: {len(model.graph.node)} ONNX nodes, opset {opset}", file=args.out)
    return 0


def add_parsers(
    sub: argparse._SubParsersAction,
    add_limits: Callable[..., None],
    run_import: Callable[..., int],
    run_export: Callable[..., int],
) -> None:
    """The ``import`` and ``export`` subcommands of ``torchlean`` (run by the given functions)."""
    p = sub.add_parser(
        "import",
        help="import a PyTorch (.pt2 from torch.export.save) or ONNX model as a graph file",
    )
    p.add_argument("model", metavar="MODEL", help="MODEL.pt2 or MODEL.onnx")
    p.add_argument("-o", "--output", metavar="GRAPH.json", help="graph to write")
    p.add_argument(
        "--report",
        action="store_true",
        help="list every unsupported op (count and first source location) instead of "
        "stopping at the first; writes nothing; exit 2 if any, 0 if the model would import",
    )
    p.add_argument(
        "--params",
        metavar="PARAMS",
        help="write the parameter values here (.safetensors or .npz)",
    )
    p.add_argument(
        "--batch-axis",
        type=_batch_axis,
        default=0,
        metavar="N|none",
        help="the inputs' batch axis, which becomes the compiler's batching (default 0); "
        "'none' imports the whole example batch as one sample",
    )
    p.add_argument(
        "--constant",
        action="append",
        metavar="NAME",
        help="(.onnx) import this float initializer as a constant, not a trained parameter; "
        "a source named in the exporter's folded_from metadata (a buffer such as "
        "model.rotary_emb.inv_freq) names every initializer folded from it; repeatable",
    )
    p.add_argument(
        "--tie",
        action="append",
        metavar="NAME[=PARAM]",
        help="(.onnx) the float initializers NAME names (itself, or every initializer the "
        "exporter folded from the source NAME) are the parameter PARAM (default NAME), its "
        "transpose or its leading rows, checked on the values: one parameter, not two "
        "(GPT-2's and OPT's output layer: --tie lm_head.weight); repeatable",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive_int,
        default=MAX_FILE_BYTES,
        metavar="N",
        help=f"refuse model files larger than N bytes (default {MAX_FILE_BYTES})",
    )
    p.set_defaults(run=run_import)

    p = sub.add_parser("export", help="export a graph file as an ONNX model")
    p.add_argument("graph", metavar="GRAPH.json", help="a graph file (docs/ir-format.md)")
    p.add_argument("-o", "--output", required=True, metavar="MODEL.onnx", help="model to write")
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--params", metavar="PARAMS", help="parameter values (.safetensors or .npz), by leaf name"
    )
    group.add_argument(
        "--zero-params",
        action="store_true",
        help="write every parameter as zeros (a model to inspect, not to run)",
    )
    p.add_argument(
        "--batched",
        metavar="NAMES",
        help="comma-separated leaves and index inputs with a leading batch axis N "
        "(default: every input leaf and runtime index input; '' for none)",
    )
    p.add_argument("--opset", type=int, metavar="N", help="the ONNX opset to declare")
    add_limits(p)
    p.set_defaults(run=run_export)


__all__ = ["add_parsers", "cmd_export", "cmd_import"]
