"""PyTorch joint forward/backward graphs in: ``joint_from_torch(model_or_fn, *inputs)``.

AOTAutograd (``torch._functorch.aot_autograd.aot_export_module(..., trace_joint=True,
output_loss_index=0)``, what ``torch.compile`` runs for training) traces the forward *and* the
backward of a model into one FX graph of ATen ops: its outputs are the loss, then the gradients
of the parameters and of the inputs that require grad. A ``torch.autograd.Function``'s
hand-written ``backward`` is traced into it as the ATen ops it calls (``torch.export``'s
``_export_forward_backward`` would differentiate the Function's forward instead). The graph is
decomposed to core ATen with PyTorch's own decompositions
(``torch._decomp.core_aten_decompositions()``, as ``torch.compile`` does), then read node by
node through the ATen importer (:data:`~torchlean_ir.interop.ATEN_IMPORTS`) into one graph whose
outputs are the loss and the gradients, and whose leaves are the parameters and the inputs.

A callable whose outputs are not one scalar (a ``Function``'s ``apply``, a module returning a
tensor) is made a loss by contracting every floating-point output with a cotangent input
``grad_out`` (``grad_out0``, ``grad_out1``, ... for several): ``loss = sum_k sum(grad_out_k *
out_k)``. Its gradients
are then the vector-Jacobian product for every cotangent, so proving them proves the backward
for every incoming gradient, not one.

``torch`` is imported only when this module's function runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._builder import GraphBuilder
from .._graph import GraphData
from ._common import Names, Refusals, float_dtype, prune
from ._torch_import import _Ctx, _index_input, run_nodes
from ._trace import InteropError, Refused, T, Tracer, one_line

_WHERE = "joint_from_torch"


@dataclass(frozen=True)
class Joint:
    """A joint forward/backward program as one graph.

    ``graph``'s outputs are the loss (position :attr:`loss`, a scalar) and the gradients:
    :attr:`grads` maps an output position to the name of the leaf it claims to be the gradient
    of. Every float tensor the program reads is an ``input`` leaf (parameters too; nothing is
    differentiated by the compiler here), every integer one an index input. :attr:`values`:
    the example value of every leaf and index input, by name; :attr:`source_names`: our name ->
    PyTorch's (``l1.weight``, the argument ``x``, ``grad_out`` for a cotangent we added);
    :attr:`cotangents`: the names of the cotangent inputs added (empty when the program returns
    its own scalar loss)."""

    graph: GraphData
    values: dict[str, np.ndarray]
    loss: int
    grads: dict[int, str]
    source_names: dict[str, str] = field(default_factory=dict)
    cotangents: tuple[str, ...] = ()

    @property
    def leaf_names(self) -> tuple[str, ...]:
        """The graph's leaves (float inputs), in context order."""
        return tuple(e.name for e in self.graph.leaves)


def _arg_names(fn: Callable[..., Any], n: int) -> list[str]:
    """The forward's parameter names (a Function's ``apply``: its ``forward``'s, without
    ``ctx``), ``x0``, ``x1``, ... where there are none."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and hasattr(owner, "forward"):
        fn = owner.forward
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    except (TypeError, ValueError):
        params = []
    params = [p for p in params if p not in ("self", "ctx")]
    return [params[k] if k < len(params) else f"x{k}" for k in range(n)]


def _wrapper(torch: Any, model: Any, n_inputs: int, scalar: bool) -> Any:
    """``model`` as a module whose output is the tuple ``(loss,)``: its own scalar output, or
    ``sum_k sum(ct_k * out_k)`` with the cotangents as the trailing inputs."""

    class Joint(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if isinstance(model, torch.nn.Module):
                self.inner = model
            else:
                self.fn = model

        def forward(self, *args: Any) -> Any:
            f = self.inner if hasattr(self, "inner") else self.fn
            outs = _float_outputs(torch, f(*args[:n_inputs]))
            if scalar:
                return (outs[0],)
            cts = args[n_inputs:]
            loss = (outs[0] * cts[0]).sum()
            for o, ct in zip(outs[1:], cts[1:], strict=True):
                loss = loss + (o * ct).sum()
            return (loss,)

    return Joint()


def _float_outputs(torch: Any, out: Any) -> list[Any]:
    leaves = torch.utils._pytree.tree_leaves(out)
    return [o for o in leaves if isinstance(o, torch.Tensor) and o.dtype.is_floating_point]


def joint_from_torch(
    model: Any, *inputs: Any, seed: int = 0, argnames: Sequence[str] | None = None
) -> Joint:
    """Import the joint forward/backward graph of ``model`` (a ``torch.nn.Module``, or any
    callable such as a ``torch.autograd.Function``'s ``apply``) at the example ``inputs``.

    Differentiated: the module's parameters with ``requires_grad`` and the float ``inputs`` with
    ``requires_grad=True``. When ``model`` returns one scalar it is the loss; otherwise every
    float output is contracted with a cotangent input (random example values from ``seed``; the
    verifier reads them as symbols). ``argnames``: the inputs' names (default: the forward's
    parameter names). Raises :class:`InteropError` with one line naming what is
    refused: AOTAutograd's own refusal, or the ATen op, its node and the model's source line
    (every refused op, not only the first)."""
    try:
        import torch
        from torch._decomp import core_aten_decompositions
        from torch._functorch.aot_autograd import aot_export_module
    except ImportError:
        raise InteropError(
            f"{_WHERE}: needs PyTorch, an optional extra: pip install 'torchlean-ir[torch]'"
        ) from None
    if not callable(model):
        raise InteropError(f"{_WHERE}: expected a torch.nn.Module or a callable, got "
                           f"{type(model).__name__}")  # fmt: skip
    for k, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            raise InteropError(f"{_WHERE}: input {k} is a {type(x).__name__}, not a tensor")
    wants = (
        [p.requires_grad for p in model.parameters()] if isinstance(model, torch.nn.Module) else []
    )
    wants += [x.requires_grad for x in inputs if x.dtype.is_floating_point]
    if not any(wants):
        raise InteropError(
            f"{_WHERE}: nothing is differentiated: no parameter or input requires grad (set "
            "requires_grad=True on the inputs to check)"
        )
    fn = model.forward if isinstance(model, torch.nn.Module) else model
    if argnames is not None and len(argnames) != len(inputs):
        raise InteropError(f"{_WHERE}: {len(argnames)} argument names for {len(inputs)} inputs")
    arg_names = list(argnames) if argnames is not None else _arg_names(fn, len(inputs))
    try:
        with torch.no_grad():
            outs = _float_outputs(torch, model(*[x.detach() for x in inputs]))
    except Exception as e:
        raise InteropError(f"{_WHERE}: running the model failed: {one_line(e)}") from None
    if not outs:
        raise InteropError(f"{_WHERE}: the model has no floating-point output")
    scalar = len(outs) == 1 and outs[0].dim() == 0
    gen = torch.Generator().manual_seed(seed)
    cts = [] if scalar else [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    ct_names = [] if scalar else (["grad_out"] if len(cts) == 1 else
                                  [f"grad_out{k}" for k in range(len(cts))])  # fmt: skip
    wrapped = _wrapper(torch, model, len(inputs), scalar)
    try:
        gm, sig = aot_export_module(
            wrapped,
            (*inputs, *cts),
            trace_joint=True,
            output_loss_index=0,
            decompositions=core_aten_decompositions(),
        )
    except Exception as e:
        if "FakeTensor" in str(e):  # a parameter reached from outside the module tree
            raise InteropError(
                f"{_WHERE}: the model reads a tensor that is neither an input nor a parameter of "
                "the module (a function closing over a module or a tensor): pass the module, "
                "or the tensor as an input"
            ) from None
        raise InteropError(f"{_WHERE}: AOTAutograd refused the model: {one_line(e)}") from None
    return _read(torch, gm, sig, wrapped, [*inputs, *cts], [*arg_names, *ct_names],
                 tuple(ct_names))  # fmt: skip


def _read(torch: Any, gm: Any, sig: Any, wrapped: Any, example: list[Any], arg_names: list[str],
          ct_names: tuple[str, ...]) -> Joint:  # fmt: skip
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    params = dict(wrapped.named_parameters(remove_duplicate=False))
    buffers = dict(wrapped.named_buffers(remove_duplicate=False))
    if len(sig.user_inputs) != len(example):
        raise InteropError(f"{_WHERE}: AOTAutograd's graph has {len(sig.user_inputs)} user "
                           f"inputs for {len(example)} given")  # fmt: skip
    user_index = {name: k for k, name in enumerate(sig.user_inputs)}

    def source(name: str) -> str:
        for prefix in ("inner.", "fn."):
            if name.startswith(prefix):
                return name[len(prefix) :]
        return name

    dtypes = {np.dtype(str(v.dtype).removeprefix("torch."))
              for v in [*params.values(), *example] if v.dtype.is_floating_point}  # fmt: skip
    dtype = float_dtype(dtypes, _WHERE)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    b = GraphBuilder(dtype)
    tr = Tracer(b, 1)
    ctx = _Ctx(tr, False)
    ctx.joint = True
    names = Names()
    env: dict[str, Any] = {}
    values: dict[str, np.ndarray] = {}
    targets: dict[str, str] = {}
    leaf_of: dict[str, str] = {}  # placeholder -> our leaf name
    for n in placeholders:
        if n.name in sig.inputs_to_parameters:
            src = source(sig.inputs_to_parameters[n.name])
            value = params[sig.inputs_to_parameters[n.name]]
        elif n.name in sig.inputs_to_buffers:
            src = source(sig.inputs_to_buffers[n.name])
            value = buffers[sig.inputs_to_buffers[n.name]]
        elif n.name in user_index:
            src = arg_names[user_index[n.name]]
            value = example[user_index[n.name]]
        else:
            raise InteropError(f"{_WHERE}: graph input {n.name!r} is neither a parameter, a "
                               "buffer nor an input")  # fmt: skip
        targets[n.name] = src
        arr = value.detach().cpu().numpy()
        full = tuple(arr.shape)
        name = names(src, "x")
        if n.name in sig.inputs_to_buffers and np.issubdtype(arr.dtype, np.floating):
            env[n.name] = tr.const(arr.astype(np_dtype))  # a buffer: not differentiated
            continue
        if np.issubdtype(arr.dtype, np.floating):
            env[n.name] = T(full, None, 1, var=b.input(name, full))
            values[name] = arr.astype(np_dtype)
        elif np.issubdtype(arr.dtype, np.integer):
            env[n.name] = _index_input(b, name, full, full, None)
            values[name] = arr
        else:
            raise InteropError(f"{_WHERE}: input {src!r} of dtype {value.dtype}")
        leaf_of[n.name] = name
    refusals = Refusals(_WHERE, collect=True)
    outs, _reductions, outputs = run_nodes(ctx, gm.graph.nodes, env, targets, refusals)
    if refusals.records:
        # AOTAutograd's nodes record its own generated code as their stack: no source line
        shown = "; ".join(r.reason if r.op == "output" else f"{r.op} (node {r.node}): {r.reason}"
                          for r in refusals.records if not r.blocked_by)  # fmt: skip
        raise InteropError(f"{_WHERE}: the joint graph does not import: {shown}")
    bw = sig.backward_signature
    if bw is None:
        raise InteropError(f"{_WHERE}: AOTAutograd recorded no backward")
    out_names = [getattr(o, "name", None) for o in outputs]
    by_target = {**{k: v for k, v in bw.gradients_to_parameters.items()},
                 **{k: v for k, v in bw.gradients_to_user_inputs.items()}}  # fmt: skip
    param_leaf = {sig.inputs_to_parameters[p]: leaf_of[p] for p in sig.inputs_to_parameters
                  if p in leaf_of}  # fmt: skip
    if bw.loss_output not in out_names:
        raise InteropError(f"{_WHERE}: the loss {bw.loss_output!r} is not a graph output")
    keep = [out_names.index(bw.loss_output)]
    grads: dict[int, str] = {}
    for pos, name in enumerate(out_names):
        wrt = by_target.get(name) if name is not None else None
        if wrt is None:
            continue
        leaf = param_leaf.get(wrt) or leaf_of.get(wrt)
        if leaf is None:
            raise InteropError(f"{_WHERE}: gradient output {name!r} is for {wrt!r}, which is "
                               "not an input of the graph")  # fmt: skip
        grads[len(keep)] = leaf
        keep.append(pos)
    if not grads:
        raise InteropError(f"{_WHERE}: nothing is differentiated: no parameter or input "
                           "requires grad")  # fmt: skip
    try:
        graph = prune(b.build([outs[p] for p in keep]))
    except Refused as e:
        raise InteropError(f"{_WHERE}: {e}") from None
    return Joint(graph, values, 0, grads,
                 {k: v for k, v in names.source.items()}, ct_names)  # fmt: skip


__all__ = ["Joint", "joint_from_torch"]
