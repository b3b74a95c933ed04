"""Verifying PyTorch's backward: a ``torch.autograd.Function``'s hand-written ``backward`` and
the joint forward/backward graph ``torch.compile`` runs.

:func:`verify_autograd` builds the joint graph with AOTAutograd, decomposed to core ATen with
PyTorch's own decompositions (:func:`torchlean_ir.interop.joint_from_torch`), compiles it to a
JAX function returning ``(loss, grad, grad, ...)`` (:func:`compiler.compile`, the forward), and
proves every gradient output equal, for every element, to our own symbolic derivative of the
loss output (:func:`verify.verify_gradient_outputs`). Trusted: AOTAutograd's tracing of the
model into ATen ops and the meaning PyTorch gives each core ATen op (its decompositions
included), as our importer reads it. Checked: the backward those ops compute, the user's
``backward`` and PyTorch's derivative formulas alike, against the derivative of the forward.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

import compiler
from torchlean_ir.interop import joint_from_torch

from ._attempt import TENSOR_BUDGET_S
from ._functions import (
    F32_PROVISO,
    FunctionSpecError,
    Kinks,
    _flatten_args,
    verify_gradient_outputs,
)
from ._report import Check, Report


def _ident(text: str) -> str:
    s = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "x"
    return s if s[0].isalpha() else "x" + s


def verify_autograd(
    model: Any,
    *inputs: Any,
    name: str | None = None,
    argnames: Sequence[str] | None = None,
    seed: int = 0,
    budget_s: float = TENSOR_BUDGET_S,
    kinks: Kinks = "one-sided",
) -> Report:
    """Prove the backward PyTorch runs for ``model`` at the example ``inputs`` equal to the
    derivative of its forward.

    ``model``: a ``torch.nn.Module`` or a callable (a ``torch.autograd.Function``'s ``apply``,
    a function calling one). Differentiated: the parameters with ``requires_grad`` and the
    float inputs with ``requires_grad=True``. A model returning one scalar is its own loss;
    otherwise its float outputs are contracted with cotangent inputs (``grad_out``), so that the
    gradients checked are its vector-Jacobian product for every cotangent. ``argnames``: names
    for the inputs in the report (default: the forward's parameter names). ``budget_s``: CPU
    seconds for each check at tensor level (past it: "not verified"). ``kinks``: as
    :func:`verify.verify_function`'s (PyTorch's ``relu'(0) = 0`` is a one-sided choice).

    Returns a :class:`verify.Report` (its verdict ``verified`` only when every gradient output
    was proved exactly, element by element). Raises :class:`~torchlean_ir.interop.InteropError`
    (one line naming the ATen op, the node and the source line) when the joint graph does not
    import: an unsupported op is refused, never passed."""
    if argnames is not None and len(argnames) != len(inputs):
        raise FunctionSpecError(f"{len(argnames)} argument names for {len(inputs)} inputs")
    joint = joint_from_torch(model, *inputs, seed=seed, argnames=argnames)
    label = name or _label(model)
    cg = compiler.compile(joint.graph)
    leaves = [e.name for e in joint.graph.leaves]
    index = [e.name for e in joint.graph.index_inputs]
    forward = cg.traceable("forward").fn
    n_out = len(joint.graph.outputs)

    def joint_graph(*args: Any) -> tuple[Any, ...]:
        out = forward(*args)
        return tuple(out) if n_out > 1 else (out,)

    argn = [_ident(n) for n in [*leaves, *index]]
    args = [joint.values[n] for n in leaves] + [np.asarray(joint.values[n], np.int32)
                                                for n in index]  # fmt: skip
    # the names verify_gradient_outputs gives the float inputs (made unique, as in the report)
    flat = _flatten_args(joint_graph, args, argn)
    ours = dict(zip(leaves, flat.names, strict=True))
    grads = {pos: ours[leaf] for pos, leaf in joint.grads.items()}
    report = verify_gradient_outputs(joint_graph, *args, loss=joint.loss, grads=grads,
                                     name=label, argnames=argn, budget_s=budget_s,
                                     kinks=kinks)  # fmt: skip
    shown = {ours[leaf]: joint.source_names.get(leaf, leaf) for leaf in leaves}
    wrt = ", ".join(
        f"output {p} = grad {g}" + ("" if shown[g] == g else f" ({shown[g]})")
        for p, g in sorted(grads.items())
    )
    notes = [
        "joint graph: AOTAutograd (trace_joint=True), decomposed to core ATen with "
        "torch._decomp.core_aten_decompositions(); trusted: that tracing and the meaning of "
        "each core ATen op as imported",
        f"gradient outputs: {wrt}",
    ]
    if joint.cotangents:
        notes.append(
            f"the model's outputs are contracted with cotangent inputs "
            f"({', '.join(joint.cotangents)}): the loss is sum(grad_out * out), proved for "
            "every cotangent"
        )
    if any(F32_PROVISO in c.how for c in report.graph_checks):
        notes.append(
            "the joint graph holds constants of the float type (2/N of a mean's backward, "
            f"rounded); the checks that say '{F32_PROVISO}' are proved with the reference "
            "derivative's, or the forward's, rounded alike"
        )
    held = [c for c in report.graph_checks if _STOPPED.match(c.name)]
    if held:
        notes.append(
            "detach: AOTAutograd records a detach (the user's, or of a tensor saved for the "
            "backward) as aten.detach or aten.alias; each is read as a stopped value and proved "
            "not to change the loss's derivative (a detach that does, as in x * x.detach(), is "
            "reported: the gradient is then not the loss's derivative)"
        )
    checks = tuple(_renamed(c, held.index(c)) if c in held else c for c in report.graph_checks)
    return replace(report, graph_checks=checks, notes=(*report.notes, *notes))


#: verify_gradient_outputs' name for the check of one stopped value: its JAX source line is
#: our compiler's, so the joint graph's detaches are numbered instead
_STOPPED = re.compile(r"^stop_gradient( at \S+)? does not change the derivative$")


def _renamed(check: Check, k: int) -> Check:
    name = f"detach {k} of the joint graph does not change the derivative"
    cx = check.counterexample
    return replace(check, name=name, counterexample=cx and replace(cx, check=name))


def _label(model: Any) -> str:
    """``BiasGelu.apply`` for a Function's ``apply``, the function's name, or the module's
    class name."""
    owner = getattr(model, "__self__", None)
    if isinstance(owner, type):
        return f"{owner.__qualname__}.apply"
    qual = getattr(model, "__qualname__", None)
    return str(qual) if isinstance(qual, str) else type(model).__qualname__


__all__ = ["verify_autograd"]
