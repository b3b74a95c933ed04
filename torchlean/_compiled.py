"""torch.compile-style wrappers (TorchLean's ``CompiledScalar`` / ``CompiledOut``) and the bridge
from model code to the ``compiler`` and ``verify`` packages.

:func:`trace` runs backend-generic model code on a :class:`~torchlean.GraphOps` to
get a :class:`~torchlean_ir.GraphData`; :func:`compile_graph` compiles a graph once per
(content hash, dtype, device); :func:`compile_fn` does both and wraps the result with
``forward`` / ``jvp`` / ``vjp_with_seed`` / ``backward`` and ``verify``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchlean_ir import GraphData, TorchleanError
from torchlean_ir.extend import as_shape

from ._options import Options, as_options
from ._param import Param, ParamList, as_param_list
from ._tensor import NatRef, Tensor


@dataclass(frozen=True, slots=True)
class NatInput:
    """An input spec for a nat (``size=None``) or a vector of ``size`` nats: a label, gather
    indices. Float inputs are given by their shape."""

    size: int | None = None


InputSpec = tuple[int, ...] | NatInput


def as_specs(specs: Sequence[Any]) -> tuple[InputSpec, ...]:
    out: list[InputSpec] = []
    for i, s in enumerate(specs):
        if isinstance(s, NatInput):
            out.append(s)
        else:
            try:
                out.append(as_shape(s, f"input spec {i}"))
            except ValueError as e:
                raise TorchleanError(f"{e} (a shape, or NatInput() for a nat input)") from None
    return tuple(out)


def input_name(i: int) -> str:
    return f"x{i}"


def nat_name(i: int) -> str:
    return f"n{i}"


@dataclass(frozen=True)
class Traced:
    """Model code recorded as a graph: the graph, the params in leaf order, and the names of
    the leaves / index inputs that carry each input spec."""

    graph: GraphData
    params: ParamList
    specs: tuple[InputSpec, ...]
    names: tuple[str, ...]


def trace(
    fn: Callable[..., Tensor],
    specs: Sequence[Any],
    params: ParamList | Sequence[Param] = (),
    options: Options | None = None,
) -> Traced:
    """Record ``fn(ops, *inputs)`` as a graph. The leaves are ``params`` (in order, then any
    other param ``fn`` uses) followed by one input leaf per float spec (named ``x0``, ``x1``,
    ...); nat specs become runtime index inputs (``n0``, ...)."""
    from ._record import GraphOps

    opts = as_options(options)
    g = GraphOps(opts)
    plist = as_param_list(params)
    for p in plist:
        g.use(p)
    specs_t = as_specs(specs)
    refs: list[Tensor | NatRef] = []
    names: list[str] = []
    for i, s in enumerate(specs_t):
        if isinstance(s, NatInput):
            ref = (
                g.nat(name=nat_name(i))
                if s.size is None
                else g.nat_vec(size=s.size, name=nat_name(i))
            )
            refs.append(ref)
            names.append(ref.name)
        else:
            refs.append(g.input(name=input_name(i), shape=s))
            names.append(input_name(i))
    out = fn(g, *refs)
    if not isinstance(out, Tensor) or out.ops is not g:
        raise TorchleanError(
            f"the traced function must return a Tensor of the ops it was given, got "
            f"{type(out).__name__}"
        )
    used = g.used_params()
    extra = [p for p in used if p not in plist]
    all_params = ParamList(list(plist) + extra)
    return Traced(g.build(out), all_params, specs_t, tuple(names))


# -- the compiler and the verifier ---------------------------------------------------------


def compile_graph(graph: GraphData, options: Options | None = None) -> Any:
    """``compiler.compile(graph, device=options.device,
    matmul_precision=options.matmul_precision)`` in the graph's own dtype (the compiler caches
    per content hash, dtype, device, mode and precision)."""
    import compiler

    opts = as_options(options)
    return compiler.compile(graph, device=opts.device, matmul_precision=opts.matmul_precision)


def verify_graph(graph: GraphData, options: Options | None = None, **kwargs: Any) -> Any:
    """Ask the verifier to prove the compiled backward of ``graph`` equal to the reference
    ``backprop_ctx`` (and every op's rules sound); returns the verifier's report
    (``verify.verify_graph``; keyword arguments go to it, ``dtype`` defaulting to the graph's,
    the compiled code the session runs)."""
    import verify

    kwargs.setdefault("dtype", graph.output_types[0].dtype.value if graph.outputs else "f64")
    return verify.verify_graph(graph, **kwargs)


# -- torch.compile-style wrappers ------------------------------------------------------------


class CompiledOut:
    """Model code compiled once (TorchLean's ``CompiledOut``): call it many times with new
    inputs. Arguments are the param values (by name, defaulting to the params' current values)
    and the inputs in spec order."""

    def __init__(self, traced: Traced, options: Options) -> None:
        self.traced = traced
        self.options = options
        self.compiled = compile_graph(traced.graph, options)

    @property
    def graph(self) -> GraphData:
        return self.traced.graph

    def _leaves_index(
        self, inputs: Sequence[Any], params: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        t = self.traced
        if len(inputs) != len(t.specs):
            raise TorchleanError(f"expected {len(t.specs)} inputs, got {len(inputs)}")
        leaves: dict[str, Any] = {}
        given = dict(params or {})
        for p in t.params:
            leaves[p.name] = given.pop(p.name) if p.name in given else p.value  # type: ignore[index]
        if given:
            raise TorchleanError(f"unknown param {sorted(given)[0]!r}")
        index: dict[str, Any] = {}
        for s, name, v in zip(t.specs, t.names, inputs, strict=True):
            if isinstance(s, NatInput):
                index[name] = v
            else:
                leaves[name] = v
        return leaves, index

    def forward(self, *inputs: Any, params: Mapping[str, Any] | None = None) -> np.ndarray:
        """The output value."""
        leaves, index = self._leaves_index(inputs, params)
        return np.asarray(self.compiled.forward(leaves, index))

    def jvp(
        self, *inputs: Any, tangents: Mapping[str, Any], params: Mapping[str, Any] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(output, output tangent)`` for tangents by leaf name (params by name, inputs as
        ``x0``, ``x1``, ...), for leaves with ``requires_grad``; missing ones are zero."""
        leaves, index = self._leaves_index(inputs, params)
        out, tout = self.compiled.jvp(leaves, dict(tangents), index)
        return np.asarray(out), np.asarray(tout)

    def vjp_with_seed(
        self, *inputs: Any, seed: Any, params: Mapping[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        """Gradients (by leaf name, for leaves with ``requires_grad``) for the output
        cotangent ``seed``."""
        leaves, index = self._leaves_index(inputs, params)
        g = self.compiled.vjp_with_seed(leaves, np.asarray(seed), index)
        return {k: np.asarray(v) for k, v in dict(g).items()}

    def verify(self, **kwargs: Any) -> Any:
        """The verifier's report on this compiled graph (compiled backward = backprop_ctx)."""
        return verify_graph(self.traced.graph, self.options, **kwargs)


class CompiledScalar(CompiledOut):
    """:class:`CompiledOut` for a scalar output (TorchLean's ``CompiledScalar``): adds
    ``backward`` (seed 1) and ``backward_with_seed``."""

    def backward(
        self, *inputs: Any, params: Mapping[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        leaves, index = self._leaves_index(inputs, params)
        g = self.compiled.backward(leaves, index)
        return {k: np.asarray(v) for k, v in dict(g).items()}

    def backward_with_seed(
        self, *inputs: Any, seed: float, params: Mapping[str, Any] | None = None
    ) -> dict[str, np.ndarray]:
        return self.vjp_with_seed(*inputs, seed=seed, params=params)


def compile_fn(
    fn: Callable[..., Tensor],
    specs: Sequence[Any],
    params: ParamList | Sequence[Param] = (),
    options: Options | None = None,
) -> CompiledOut:
    """Trace ``fn(ops, *inputs)`` (inputs given by ``specs``: shapes, or
    :class:`NatInput`) and compile it: a :class:`CompiledScalar` for a scalar output, else a
    :class:`CompiledOut`."""
    opts = as_options(options)
    traced = trace(fn, specs, params, opts)
    scalar = traced.graph.output_types[0].shape == ()
    return (CompiledScalar if scalar else CompiledOut)(traced, opts)
