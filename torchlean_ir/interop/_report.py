"""``import_report``: every op of a model that the importers refuse, in one run.

The importers walk the whole program in report mode (:class:`~._common.Refusals` with
``collect=True``) instead of stopping at the first refusal; a node that reads a refused node's
value is recorded as depending on it (``Unsupported.blocked_by``), not as an unsupported op of
its own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ._common import Imported, Unsupported
from ._files import MAX_FILE_BYTES, load_onnx, load_pt2, quiet_loaders
from ._trace import InteropError


def import_report(
    model: Any,
    *,
    batch_axis: int | None = 0,
    batched: Sequence[str] | None = None,
    max_bytes: int = MAX_FILE_BYTES,
) -> tuple[Unsupported, ...]:
    """Every refusal importing ``model`` meets, one :class:`Unsupported` per source node, in
    program order; ``()`` when it imports.

    ``model`` is a ``.pt2`` (``torch.export.save``) or ``.onnx`` path, a
    ``torch.export.ExportedProgram``, or an ONNX model (``onnx.ModelProto`` or bytes).
    ``batch_axis`` and ``batched`` are those of :func:`from_torch` / :func:`from_onnx`.
    Records with ``blocked_by`` set are nodes that read a refused node's value: they are not
    unsupported ops themselves. What is not about one op (an unreadable file, an input of an
    unsupported dtype) still raises :class:`InteropError`.
    """
    return report(model, batch_axis=batch_axis, batched=batched, max_bytes=max_bytes)[0]


def report(
    model: Any,
    *,
    batch_axis: int | None = 0,
    batched: Sequence[str] | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    constants: Sequence[str] = (),
    tied: Mapping[str, str] | Sequence[str] = (),
) -> tuple[tuple[Unsupported, ...], Imported | None]:
    """:func:`import_report`'s records, and the import itself when there are none
    (``constants`` and ``tied``: those of :func:`from_onnx`, for an ONNX model)."""
    from ._onnx_import import onnx_report
    from ._torch_import import torch_report

    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        ext = os.path.splitext(path)[1].lower()
        if ext not in (".pt2", ".onnx"):
            raise InteropError(f"{path}: expected a .pt2 (torch.export.save) or .onnx file")
        with quiet_loaders("onnx" if ext == ".onnx" else "torch.export"):
            if ext == ".onnx":
                return onnx_report(
                    load_onnx(path, max_bytes=max_bytes),
                    batch_axis=batch_axis,
                    batched=batched,
                    constants=constants,
                    tied=tied,
                )
            program = load_pt2(path, max_bytes=max_bytes)
            return torch_report(program, batch_axis=batch_axis, batched=batched)
    if hasattr(model, "graph_signature"):  # a torch.export.ExportedProgram
        return torch_report(model, batch_axis=batch_axis, batched=batched)
    return onnx_report(
        model, batch_axis=batch_axis, batched=batched, constants=constants, tied=tied
    )


def report_lines(records: Sequence[Unsupported]) -> list[str]:
    """One line per distinct unsupported (op, reason): the count, the first node and its
    location, the reason and the hint; nodes that only depend on them are not listed."""
    first: dict[tuple[str, str], Unsupported] = {}
    count: dict[tuple[str, str], int] = {}
    for r in records:
        if r.blocked_by:
            continue
        key = (r.op, r.reason)
        first.setdefault(key, r)
        count[key] = count.get(key, 0) + 1
    lines = []
    for key, r in first.items():
        onnx_node = r.location.startswith("node ")
        where = f"{r.location} {r.node!r}" if onnx_node else f"node {r.node} at {r.location}"
        line = f"{r.op}: {count[key]}x, first {where}: {r.reason}"
        lines.append(line + (f"; hint: {r.hint}" if r.hint else ""))
    return lines


__all__ = ["import_report", "report", "report_lines"]
