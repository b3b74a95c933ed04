"""``compile(graph)`` and :class:`CompiledGraph`: compile once, run many."""

from __future__ import annotations

import operator
import os
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import SingleDeviceSharding

from torchlean_ir import DType, GraphData, check
from torchlean_ir.extend import as_dtype

from . import _slices
from ._args import (
    INT32_MAX,
    ArrayImpl,
    Group,
    PendingCheck,
    _short,
    as_list,
    convert_float,
    convert_index,
    device_index,
    on_accelerator,
)
from ._devices import resolve_device
from ._errors import ArgumentError, CompileError
from ._lower import KINDS, Kind, Program, boundary_nodes, build
from ._precision import MatmulPrecision, resolve_precision
from ._tape import Batching, GradReduction, TapeEntry, analyse, build_tape

#: The platforms ``jax.export`` can target.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")

Leaves = Mapping[str, Any] | Sequence[Any]
Index = Mapping[str, Any] | Sequence[Any] | None

_CACHE: dict[tuple[Any, ...], CompiledGraph] = {}
#: index checks left on the device (CompiledGraph._read_checks) before a call waits for some
_MAX_PENDING = 16
_aval = operator.attrgetter("aval")
_ARRAY_TYPE = {ArrayImpl}
_LOCK = threading.Lock()


def _graph_dtype(graph: GraphData) -> DType:
    if graph.leaves:
        return graph.leaves[0].type.dtype
    if graph.nodes:
        return graph.nodes[0].type.dtype
    return DType.F32


def _resolve_dtype(graph: GraphData, dtype: Any) -> np.dtype:
    try:
        d = _graph_dtype(graph) if dtype is None else as_dtype(dtype)
    except ValueError as e:
        raise CompileError(f"dtype: {e}") from None
    if not d.is_float:
        raise CompileError(f"dtype: expected f32 or f64, got {d}")
    np_dtype = np.dtype(d.numpy_name)
    if np_dtype == np.float64 and not jax.config.read("jax_enable_x64"):
        raise CompileError(
            "dtype f64 needs JAX's x64 mode, which `import compiler` enables; it was turned off "
            "afterwards (jax.config.update('jax_enable_x64', True) turns it back on)"
        )
    return np_dtype


def compile(
    graph: GraphData,
    *,
    dtype: Any = None,
    device: Any = "cpu",
    mode: str = "tape",
    matmul_precision: MatmulPrecision | None = None,
) -> CompiledGraph:
    """Compile ``graph`` to jitted JAX functions; cached per (content hash, dtype, device, mode,
    matmul precision).

    ``dtype`` is ``"f32"`` / ``"f64"`` (``None``: the graph's own float dtype); ``device`` is
    ``"cpu"``, ``"gpu"`` (``"gpu:1"``) or a ``jax.Device``; ``mode`` is ``"tape"`` (our per-node
    rules, the checkable backward) or ``"jax"`` (JAX's own AD of the lowered forward, a
    cross-check). ``matmul_precision`` is ``"float32"`` (the default, ``None``: full float32
    matrix products and convolutions on every platform), or an opt-in fast mode, ``"tf32"`` or
    ``"bf16"`` (TF32 or bfloat16 on the GPUs and TPUs that have them; see
    ``docs/compiler.md``, "Precision"). Nothing is traced until the first call of each kind of
    function."""
    if not isinstance(graph, GraphData):
        raise CompileError(f"graph: expected a GraphData, got {type(graph).__name__}")
    if mode not in ("tape", "jax"):
        raise CompileError(f"mode must be 'tape' or 'jax', got {mode!r}")
    precision = resolve_precision(matmul_precision)
    return _compile(
        graph, _resolve_dtype(graph, dtype), resolve_device(device), mode, None, precision
    )


def _compile(
    graph: GraphData,
    dtype: np.dtype,
    device: jax.Device,
    mode: str,
    batching: Batching | None,
    precision: str,
) -> CompiledGraph:
    key = (
        graph.content_hash,
        dtype.name,
        device.platform,
        device.id,
        mode,
        None if batching is None else batching.key(),
        precision,
    )
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is None:
            check(graph)
            hit = _CACHE[key] = CompiledGraph(graph, dtype, device, mode, batching, precision)
        return hit


def clear_cache() -> None:
    """Forget every compiled graph and cached rule (their executables go with them)."""
    from ._rules import clear_rule_cache

    with _LOCK:
        _CACHE.clear()
    clear_rule_cache()


def cache_size() -> int:
    return len(_CACHE)


@contextmanager
def inlined_rules() -> Iterator[None]:
    """Benchmarks only: inside the block, compile with the per-node rules inlined (no nested
    ``jit`` equations), to measure what the nested structure costs. Such a build does not have
    the jaxpr shape of the compiler contract (the verifier cannot check it). The caches are
    cleared on entry and exit."""
    from . import _rules

    clear_cache()
    _rules._INLINE = True
    try:
        yield
    finally:
        _rules._INLINE = False
        clear_cache()


class _SignatureError(ArgumentError):
    """Arguments whose types the compiled function was not made for (raised when such a
    signature is first traced: before anything is compiled or run)."""


def _check_signature(
    spec: Sequence[tuple[str, tuple[int, ...], Any, bool]], flat: Sequence[Any], kind: str
) -> None:
    """Check the types of a compiled function's flat arguments (at trace time: the jitted
    function's cache then vouches for every later call with the same types)."""
    if len(flat) != len(spec):
        raise _SignatureError(f"{kind}: expected {len(spec)} arguments, got {len(flat)}")
    batch = None
    for a, (label, shape, dtype, batched) in zip(flat, spec, strict=True):
        t = jax.typeof(a)
        got = tuple(t.shape)
        if batched:
            ok = len(got) == len(shape) + 1 and got[1:] == shape
            if ok and batch is None:
                batch = got[0]
            ok = ok and got[0] == batch
        else:
            ok = got == shape
        if not ok or t.dtype != dtype or getattr(t, "weak_type", False):
            want = _type_str(dtype, shape) + (" with a batch axis" if batched else "")
            weak = " (weakly typed)" if getattr(t, "weak_type", False) else ""
            raise _SignatureError(f"{label}: expected {want}, got {_type_str(t.dtype, got)}{weak}")


def _type_str(dtype: Any, shape: Sequence[Any]) -> str:
    """``f32[3,4]``, as the IR prints types."""
    name = np.dtype(dtype).name
    short = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}.get(name, name)
    return f"{short}[{','.join(map(str, shape))}]"


def _by_name(names: tuple[str, ...]) -> Callable[[Sequence[Any]], dict[str, Any]]:
    """``values -> dict(zip(names, values))``; for a few names a dict display, which costs a
    third of ``dict(zip(...))`` (a visible share of a call on a tiny graph)."""
    if len(names) == 1:
        (a,) = names
        return lambda v: {a: v[0]}
    if len(names) == 2:
        a, b = names
        return lambda v: {a: v[0], b: v[1]}
    if len(names) == 3:
        a, b, c = names
        return lambda v: {a: v[0], b: v[1], c: v[2]}
    return lambda v: dict(zip(names, v, strict=True))


def _rule_calls(tape: Sequence[TapeEntry], kind: Kind) -> int:
    """How many nested rule calls the function of ``kind`` makes."""
    if kind == "forward":
        return len(tape)
    other = sum(1 for e in tape if (e.jvp if kind == "jvp" else e.vjp) is not None)
    return len(tape) + other


@dataclass(frozen=True, slots=True)
class Traceable:
    """The exact function jitted for one kind, and example arguments for it:
    ``jax.make_jaxpr(t.fn)(*t.args)`` is the jaxpr XLA compiles."""

    kind: Kind
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def jaxpr(self) -> Any:
        """``jax.make_jaxpr(fn)(*args)`` (a ``ClosedJaxpr``)."""
        return jax.make_jaxpr(self.fn)(*self.args)


class CompiledGraph:
    """A graph compiled for one dtype, device, mode and batching (see :func:`compile`).

    Calls take ``leaves`` as a mapping by name or a sequence in context order, and the runtime
    index inputs (``index``) likewise; index values are never differentiated. Float leaves may
    be ``jax.Array`` s of the compiled dtype (the fast path: no conversion) or NumPy / Python
    data (cast on the host). Gradients come back as a dict by leaf name, for the leaves with
    ``requires_grad``. A graph with one output returns an array, with several a tuple (in
    ``graph.outputs`` order). Wrong names, shapes, dtypes or index values raise
    :class:`~compiler.ArgumentError` before JAX sees them.

    Use :meth:`batched` to map over a leading batch axis."""

    def __init__(
        self,
        graph: GraphData,
        dtype: np.dtype,
        device: jax.Device,
        mode: str,
        batching: Batching | None,
        precision: str = "float32",
    ) -> None:
        self.graph = graph
        self.dtype = dtype
        self.device = device
        self.mode = mode
        self.batching = batching
        #: The precision of matrix products and convolutions (``compiler._precision``).
        self.matmul_precision: str = precision
        analysis = analyse(graph, batching)
        batch_level = batching is not None and mode == "tape" and batching.grads != "per_sample"
        static = {
            i: np.minimum(np.asarray(ix.value, np.int64), INT32_MAX)
            .astype(np.int32)
            .reshape(ix.type.shape)
            for i, ix in enumerate(graph.index_inputs)
            if ix.value is not None
        }
        tape = build_tape(graph, dtype.name, analysis, batch_level, precision)
        self._program = Program(
            graph=graph,
            dtype=dtype,
            tape=tape,
            analysis=analysis,
            batching=batching,
            batch_level=batch_level,
            grad_leaves=tuple(i for i, leaf in enumerate(graph.leaves) if leaf.requires_grad),
            runtime_index=tuple(i for i, ix in enumerate(graph.index_inputs) if ix.value is None),
            static_index=static,
            # XLA's CPU fusion is what needs the boundaries (compiler._lower); a GPU fuses
            # differently, and non-inlined calls are not tested there.
            boundaries=boundary_nodes(tape) if device.platform == "cpu" else frozenset(),
            precision=precision,
        )
        p = self._program
        leaves = graph.leaves
        self.leaf_names: tuple[str, ...] = tuple(leaf.name for leaf in leaves)
        self.grad_names: tuple[str, ...] = tuple(leaves[i].name for i in p.grad_leaves)
        self.index_names: tuple[str, ...] = tuple(
            graph.index_inputs[i].name for i in p.runtime_index
        )
        self.output_shapes: tuple[tuple[int, ...], ...] = tuple(t.shape for t in graph.output_types)
        bat = analysis.batched
        self._leaves = Group(
            "leaves",
            self.leaf_names,
            tuple(leaf.type.shape for leaf in leaves),
            bat[: len(leaves)],
            dtype=dtype,
        )
        self._tangents = Group(
            "tangents",
            self.grad_names,
            tuple(leaves[i].type.shape for i in p.grad_leaves),
            tuple(bat[i] for i in p.grad_leaves),
            partial=True,
            dtype=dtype,
        )
        n_out = len(graph.outputs)
        self._seeds = Group(
            "seed",
            tuple(str(k) for k in range(n_out)),
            self.output_shapes,
            (batching is not None,) * n_out,
            dtype=dtype,
        )
        self._index = Group(
            "index",
            self.index_names,
            tuple(graph.index_inputs[i].type.shape for i in p.runtime_index),
            tuple(analysis.batched_index[i] for i in p.runtime_index),
            dtype=np.int32,
        )
        self._is_batched = batching is not None
        self._single = n_out == 1
        self._scalar = self._single and self.output_shapes[0] == ()
        self._sharding = SingleDeviceSharding(device)
        # On the default device, jit places inputs and outputs there by itself, and explicit
        # shardings would cost a few microseconds per call; elsewhere they pin the device.
        self._placement: dict[str, Any] = (
            {}
            if device == jax.devices()[0] and jax.config.jax_default_device is None
            else {"in_shardings": self._sharding, "out_shardings": self._sharding}
        )
        self._trace_counts = dict.fromkeys(KINDS, 0)
        self._traced = {kind: self._make_traced(kind) for kind in KINDS}
        # One jitted function per kind; above SLICE_ABOVE rule calls, the same function run in
        # slices (compiler._slices). `_whole` is always the single jitted function (lowering,
        # export).
        self._whole = {kind: jax.jit(fn, **self._placement) for kind, fn in self._traced.items()}
        self._jit: dict[Kind, Callable[..., Any]] = {
            kind: _slices.SlicedFunction(fn, jit_kwargs=self._placement)
            if _rule_calls(tape, kind) > _slices.SLICE_ABOVE
            else self._whole[kind]
            for kind, fn in self._traced.items()
        }
        self._fwd, self._jvp, self._vjp = (self._jit[k] for k in KINDS)
        self._ones: dict[int, Any] = {}
        self._has_index = bool(self.index_names)
        self._plain = batching is None and not self._has_index
        self._static_names = frozenset(ix.name for ix in graph.index_inputs if ix.value is not None)
        self._n_leaves = len(self.leaf_names)
        # The hot path (see forward): unbatched, no index inputs, at least one leaf; -1 never
        # matches a dict's length.
        self._n_hot = self._n_leaves if self._plain and self._n_leaves else -1
        self._all_arrays_seen = True
        self._by_name = _by_name(self.grad_names)
        names = self.leaf_names
        self._leaf_getter: Callable[[Any], tuple[Any, ...]] = (
            operator.itemgetter(*names) if len(names) > 1 else lambda d: tuple(d[n] for n in names)
        )
        # Batched: the first leaf with a batch axis (the hot path reads the batch size there).
        self._first_batched = next((k for k, b in enumerate(self._leaves.batched) if b), None)
        # On the default device, index inputs already on it as int32 go in as they are.
        self._index_as_is = not self._placement
        # The last index arguments that were checked (jax arrays only): the batch size before,
        # the arrays, what they became, the batch size after.
        self._last_index: tuple[Any, tuple[Any, ...], tuple[Any, ...], Any] | None = None
        # The device-side checks of the last call's index arrays on an accelerator, read at
        # a later call once computed (compiler._args.device_index): no round trip per call.
        self._pending: list[PendingCheck] = []
        # value_and_grad and backward: the VJP with the seed 1 made inside (one argument
        # fewer, the value unwrapped: see _make_value_and_grad); None where the function runs
        # in slices, or the output is not a single scalar (they are refused then).
        # forward: the output itself (one output) or the tuple of outputs, as the API returns it
        self._forward_out: Callable[..., Any] = (
            self._fwd if not self._single else self._make_single_output()
        )
        self._grads_named = list(self.grad_names) == sorted(self.grad_names)
        self._vag: Callable[..., Any] | None = (
            self._make_value_and_grad()
            if self._scalar and not isinstance(self._vjp, _slices.SlicedFunction)
            else None
        )
        # The value_and_grad hot path: unbatched, scalar output, no index inputs (-1: none).
        self._n_vag_hot = self._n_hot if self._vag is not None else -1

    def _make_single_output(self) -> Callable[..., Any]:
        """The forward of a one-output graph returning the output rather than a tuple of one:
        the checked forward (a nested ``jit``) inside an executable of its own, which spares
        the call on a tiny graph the tuple (in the sliced case, a Python unwrap)."""
        fwd = self._fwd
        if isinstance(fwd, _slices.SlicedFunction):
            return lambda *flat: fwd(*flat)[0]
        whole = self._whole["forward"]

        def forward(*flat: Any) -> Any:
            return whole(*flat)[0]

        forward.__name__ = forward.__qualname__ = "tl_graph_forward_output"
        return jax.jit(forward, **self._placement)

    def _make_value_and_grad(self) -> Callable[..., Any]:
        """``jit(leaves, index -> (value, gradients))``: one call of the checked VJP
        (``self._whole["vjp"]``, a nested ``jit`` in its jaxpr) with the output cotangent 1 (per
        sample when batched) created inside rather than passed in. One argument fewer and no
        tuple to unwrap make the call on a tiny graph cheaper; the numbers are the VJP's with
        the seed 1 (a multiplication by 1 is exact). Where the gradient names are in sorted
        order, the gradients come back as a dict built by JAX's C++ dispatch (which orders a
        dict's keys by sorting them: here the names' own order), else as a tuple that
        ``_by_name`` turns into a dict in Python."""
        vjp = self._whole["vjp"]
        n = self._n_leaves
        names = self.grad_names
        named = self._grads_named
        spec = [s for k, s in enumerate(self._arg_spec("vjp")) if k != n]  # without the seed
        first = next((k for k, s in enumerate(spec) if s[3]), None)
        batched = self._is_batched
        dtype = self.dtype

        def value_and_grad(*flat: Any) -> tuple[Any, tuple[Any, ...]]:
            if batched and first is None:
                raise CompileError("a batched graph without a batched argument")  # by design
            shape = (flat[first].shape[0],) if batched else ()
            (out,), grads = vjp(*flat[:n], jnp.ones(shape, dtype), *flat[n:])
            return out, (dict(zip(names, grads, strict=True)) if named else grads)

        value_and_grad.__name__ = value_and_grad.__qualname__ = "tl_graph_value_and_grad"
        return jax.jit(value_and_grad, **self._placement)

    @property
    def sliced(self) -> dict[str, bool]:
        """Per kind, whether its function runs in slices (more than
        ``compiler._slices.SLICE_ABOVE`` rule calls; see ``docs/compiler.md``)."""
        return {k: isinstance(f, _slices.SlicedFunction) for k, f in self._jit.items()}

    def _program_fn(self, kind: Kind) -> Callable[..., Any]:
        """The unjitted function of ``kind`` (to be traced inside another jitted function)."""
        return build(self._program, kind, self.mode)

    def _make_traced(self, kind: Kind) -> Callable[..., Any]:
        inner = self._program_fn(kind)
        counts = self._trace_counts
        spec = self._arg_spec(kind)

        def traced(*flat: Any) -> Any:
            _check_signature(spec, flat, kind)
            counts[kind] += 1
            return inner(*flat)

        traced.__name__ = traced.__qualname__ = f"tl_graph_{kind}"
        return traced

    def _arg_spec(self, kind: Kind) -> tuple[tuple[str, tuple[int, ...], Any, bool], ...]:
        """Per flat argument of ``kind``: its label, per-sample shape, dtype, and batch axis."""
        groups: list[Group] = [self._leaves]
        if kind == "jvp":
            groups.append(self._tangents)
        elif kind == "vjp":
            groups.append(self._seeds)
        groups.append(self._index)
        return tuple(
            (label, shape, np.dtype(g.dtype), b)
            for g in groups
            for label, shape, b in zip(g.labels, g.shapes, g.batched, strict=True)
        )

    # -- introspection -------------------------------------------------------------------
    @property
    def tape(self) -> tuple[TapeEntry, ...]:
        """One :class:`TapeEntry` per live node, in node order (the VJP walks it in reverse)."""
        return self._program.tape

    @property
    def trace_counts(self) -> dict[str, int]:
        """How many times each kind of function has been traced (by a call, an export, a
        lowering or :meth:`traceable`)."""
        return dict(self._trace_counts)

    @property
    def is_batched(self) -> bool:
        return self._is_batched

    def traceable(self, kind: Kind, *, batch_size: int = 2) -> Traceable:
        """The exact function jitted for ``kind`` (``"forward"``, ``"jvp"`` or ``"vjp"``) with
        example arguments (zeros; ``batch_size`` samples when batched)."""
        if kind not in KINDS:
            raise CompileError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return Traceable(kind, self._traced[kind], self._example_args(kind, batch_size))

    def jitted(self, kind: Kind) -> Callable[..., Any]:
        """The jitted function of ``kind`` itself: flat positional arguments as in
        :meth:`traceable`, no name lookup, no conversion (argument types are checked when a new
        combination of them is traced). The methods call it (``forward`` of a one-output graph
        and ``value_and_grad`` through a thin executable that unwraps the output or makes the
        seed 1 inside). For hot loops on tiny graphs, where the API's microseconds matter.
        Above the slicing size, the sliced function."""
        if kind not in KINDS:
            raise CompileError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return self._jit[kind]

    def _avals(self, kind: Kind, batch: Any) -> list[jax.ShapeDtypeStruct]:
        groups: list[Group] = [self._leaves]
        if kind == "jvp":
            groups.append(self._tangents)
        elif kind == "vjp":
            groups.append(self._seeds)
        out = []
        for g in groups:
            for s, b in zip(g.shapes, g.batched, strict=True):
                out.append(jax.ShapeDtypeStruct((batch, *s) if b else s, self.dtype))
        g = self._index
        for s, b in zip(g.shapes, g.batched, strict=True):
            out.append(jax.ShapeDtypeStruct((batch, *s) if b else s, np.int32))
        return out

    def _example_args(self, kind: Kind, batch_size: int) -> tuple[Any, ...]:
        return tuple(np.zeros(a.shape, a.dtype) for a in self._avals(kind, batch_size))

    def lower(self, kind: Kind, *, batch_size: int = 2) -> Any:
        """``jax.jit(...).lower`` of ``kind`` at example arguments (a ``jax.stages.Lowered``)."""
        return self._whole[kind].lower(*self._avals(kind, batch_size))

    def stablehlo(self, kind: Kind = "vjp", *, batch_size: int = 2) -> str:
        """The lowered StableHLO text of ``kind``."""
        return self.lower(kind, batch_size=batch_size).as_text()

    def memory_analysis(self, kind: Kind = "vjp", *, batch_size: int = 2) -> Any:
        """XLA's memory analysis of the compiled ``kind`` (argument, output, temp bytes)."""
        return self.lower(kind, batch_size=batch_size).compile().memory_analysis()

    # -- export --------------------------------------------------------------------------
    def export(
        self,
        kind: Kind = "forward",
        *,
        batch_size: int | None = None,
        platforms: Sequence[str] | None = None,
    ) -> jax.export.Exported:
        """``jax.export`` of ``kind``: a serializable artifact that runs without the graph or
        this package. Its arguments are flat and positional, as :meth:`traceable` shows: the
        leaves in context order, then (jvp) the tangents of the ``requires_grad`` leaves or
        (vjp) one seed per output, then the runtime index inputs as int32. It returns
        ``(outputs,)`` (forward), ``((outputs,), (tangents,))`` (jvp) or
        ``((outputs,), (gradients,))`` (vjp). A batched graph is exported with a symbolic batch
        size unless ``batch_size`` is given."""
        if kind not in KINDS:
            raise CompileError(f"kind must be one of {', '.join(KINDS)}, got {_short(kind)}")
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 0
        ):
            raise CompileError(f"batch_size must be a non-negative int, got {_short(batch_size)}")
        if platforms is not None:
            ok = not isinstance(platforms, str) and isinstance(platforms, Sequence)
            if not ok or not platforms or not all(p in PLATFORMS for p in platforms):
                raise CompileError(
                    f"platforms must be a non-empty sequence of {', '.join(PLATFORMS)}, "
                    f"got {_short(platforms)}"
                )
        batch: Any = batch_size
        if self._is_batched and batch_size is None:
            (batch,) = jax.export.symbolic_shape("batch")
        exp = jax.export.export(self._whole[kind], platforms=platforms)
        return exp(*self._avals(kind, batch if batch is not None else 1))

    def export_bytes(self, kind: Kind = "forward", **kwargs: Any) -> bytes:
        """:meth:`export` serialized (``jax.export.deserialize`` reads it back)."""
        return bytes(self.export(kind, **kwargs).serialize())

    def save_export(self, path: str | os.PathLike[str], kind: Kind = "forward", **kw: Any) -> None:
        """Write :meth:`export_bytes` to ``path``."""
        with open(path, "wb") as f:
            f.write(self.export_bytes(kind, **kw))

    # -- batching -------------------------------------------------------------------------
    def batched(self, over: Collection[str], *, grads: GradReduction = "sum") -> CompiledGraph:
        """This graph mapped over a leading batch axis of the leaves and runtime index inputs
        named in ``over`` (``jax.vmap`` semantics; cached like :func:`compile`).

        Outputs are per sample (a leading batch axis). A leaf in ``over`` gets per-sample
        gradients; the other leaves' gradients are summed over the batch (``grads="sum"``),
        averaged (``"mean"``) or kept per sample (``"per_sample"``). Seeds are per sample."""
        if self._is_batched:
            raise CompileError("batched(): this graph is already batched")
        if isinstance(over, str):
            over = (over,)
        if not isinstance(over, Collection) or not all(isinstance(n, str) for n in over):
            raise CompileError(
                f"batched(): over must be names of leaves or index inputs, got {_short(over)}"
            )
        if grads not in ("sum", "mean", "per_sample"):
            raise CompileError(f"grads must be 'sum', 'mean' or 'per_sample', got {_short(grads)}")
        names = set(over)
        static = {ix.name for ix in self.graph.index_inputs if ix.value is not None}
        for n in sorted(names):
            if n in static:
                raise CompileError(f"batched(): index input {n!r} is static (baked in the graph)")
            if n not in self.leaf_names and n not in self.index_names:
                known = ", ".join(self.leaf_names + self.index_names)
                raise CompileError(f"batched(): unknown input {n!r} (inputs: {known})")
        if not names:
            raise CompileError("batched(): name at least one leaf or index input in `over`")
        spec = Batching(
            frozenset(n for n in names if n in self.leaf_names),
            frozenset(n for n in names if n in self.index_names),
            grads,
        )
        return _compile(self.graph, self.dtype, self.device, self.mode, spec, self.matmul_precision)

    # -- argument handling ----------------------------------------------------------------
    def _floats(self, g: Group, values: Any, batch: list[int] | None) -> list[Any]:
        """The float arguments of group ``g`` in order, checked and converted. ``batch`` holds
        the batch size seen so far (-1: none yet) and is updated."""
        if type(values) is dict and len(values) == len(g.names):
            try:
                vals = list(g.getter(values))
            except KeyError:
                vals = as_list(g, values)
        else:
            vals = as_list(g, values)
        avals = g.avals
        if batch is None:
            try:
                if list(map(_aval, vals)) == avals:
                    return vals
            except AttributeError:
                pass
            for k, v in enumerate(vals):
                if type(v) is not ArrayImpl or v.aval != avals[k]:
                    vals[k] = self._float(v, g, k, None)
            return vals
        dt = self.dtype
        for k, v in enumerate(vals):
            if g.batched[k]:
                shape = v.shape if type(v) is ArrayImpl else None
                if (
                    shape is None
                    or v.dtype != dt
                    or shape[1:] != g.shapes[k]
                    or len(shape) != len(g.shapes[k]) + 1
                    or (batch[0] >= 0 and shape[0] != batch[0])
                    or v.aval.weak_type
                ):
                    v = self._float(v, g, k, batch[0])
                batch[0] = v.shape[0]
                vals[k] = v
            elif type(v) is not ArrayImpl or v.aval != avals[k]:
                vals[k] = self._float(v, g, k, None)
        return vals

    def _float(self, v: Any, g: Group, k: int, batch: int | None) -> Any:
        arr = convert_float(v, g.shapes[k], batch, self.dtype, g.labels[k])
        if isinstance(arr, jax.Array) and arr.aval.weak_type:
            arr = np.asarray(arr)  # a weakly typed array would be traced apart
        return arr

    def _tangent_args(self, tangents: Any, batch: list[int] | None) -> list[Any]:
        g = self._tangents
        vals = as_list(g, tangents)
        out = []
        for k, v in enumerate(vals):
            if v is None:
                b = batch[0] if batch is not None and g.batched[k] else None
                if b is not None and b < 0:
                    raise ArgumentError(f"{g.labels[k]}: missing (needed to know the batch size)")
                v = np.zeros(g.shapes[k] if b is None else (b, *g.shapes[k]), self.dtype)
            out.append(v)
        return self._floats(g, out, batch)

    def check_index(self) -> None:
        """Wait for the checks of the index arrays that earlier calls received on an
        accelerator, and raise the :class:`~compiler.ArgumentError` of a negative value among
        them. Such arrays are checked on the device; a call reads the results that are ready
        (never waiting for the device), so a bad value is reported by the first call after
        its check has run, or here. Host data (NumPy, Python) and arrays on the CPU are
        checked before the call."""
        self._read_checks(wait=True)

    def _defer_check(self, where: str, lowest: jax.Array) -> None:
        """Register the lowest value of an index array, computed by the caller's program (see
        ``deferred`` in :meth:`_index_args`), as a pending check read by a later call."""
        lowest.copy_to_host_async()
        self._pending.append(PendingCheck(where, lowest))

    def _forget_index(self) -> None:
        """The last index arrays are checked again next time (their deferred check was never
        registered: the call that deferred it failed)."""
        self._last_index = None

    def _read_checks(self, wait: bool) -> None:
        pending, self._pending = self._pending, []
        # a device far behind: wait for the oldest checks rather than keep a growing list
        waits = len(pending) - _MAX_PENDING if not wait else len(pending)
        try:
            for k, check in enumerate(pending):
                if k < waits or check.lowest.is_ready():
                    check.raise_if_bad()
                else:
                    self._pending.append(check)
        except ArgumentError:
            self._pending = []
            self._last_index = None  # the same arrays again are checked again
            raise

    def _index_args(
        self, index: Index, batch: list[int] | None, deferred: list[tuple[int, str]] | None = None
    ) -> list[Any]:
        """The index arguments, converted and checked. With ``deferred``, an index array on an
        accelerator is not checked by a program of its own: ``(position, label)`` is appended
        and the caller's program computes its lowest value (``jnp.min``), to be registered with
        :meth:`_defer_check`."""
        if self._pending:
            self._read_checks(wait=False)
        g = self._index
        if index is None:
            if g.names:
                raise ArgumentError(f"index: missing {g.names[0]!r}")
            return []
        if type(index) is dict and len(index) == len(g.names):
            try:
                vals = list(g.getter(index))
            except KeyError:
                vals = self._index_list(index)
        else:
            vals = self._index_list(index)
        # jax arrays are immutable: the same arrays as in the last call need no new check
        given = tuple(vals)
        b_in = batch[0] if batch is not None else None
        last = self._last_index
        if (
            last is not None
            and last[0] == b_in
            and len(last[1]) == len(given)
            and all(map(operator.is_, given, last[1]))
        ):
            if batch is not None:
                batch[0] = last[3]
            return list(last[2])
        checked = self._check_index(vals, batch, deferred)
        if set(map(type, given)) <= _ARRAY_TYPE:
            b_out = batch[0] if batch is not None else None
            self._last_index = (b_in, given, tuple(checked), b_out)
        return checked

    def _check_index(
        self, vals: list[Any], batch: list[int] | None, deferred: list[tuple[int, str]] | None
    ) -> list[Any]:
        g = self._index
        labels, shapes = g.labels, g.shapes
        for k, v in enumerate(vals):
            b = batch[0] if batch is not None and g.batched[k] else None
            if on_accelerator(v):
                in_program = deferred is not None and v.dtype.kind == "i" and v.size > 0
                a, pending = device_index(v, shapes[k], b, labels[k], check=not in_program)
                if pending is not None:
                    self._pending.append(pending)
                if in_program:
                    deferred.append((k, labels[k]))  # type: ignore[union-attr]
                if b is not None:
                    batch[0] = a.shape[0]  # type: ignore[index]
                vals[k] = a
                continue
            a = convert_index(v, shapes[k], b, labels[k])
            if b is not None:
                batch[0] = a.shape[0]  # type: ignore[index]
            # Checked on the host (for a jax array on the CPU, a view of it); a device array
            # that is already int32 then goes in itself, not a copy made on the host.
            if self._index_as_is and type(v) is ArrayImpl and v.dtype == np.int32:
                a = v
            vals[k] = a
        return vals

    def _index_list(self, index: Any) -> list[Any]:
        g = self._index
        if isinstance(index, Mapping):
            static = [k for k in index if k not in g.names and k in self._static_names]
            if static:
                raise ArgumentError(
                    f"index[{static[0]!r}]: static index input (baked in the graph); "
                    "it cannot be overridden"
                )
        return as_list(g, index)

    def _seed_args(self, seed: Any, batch: list[int] | None) -> list[Any]:
        g = self._seeds
        if len(g.names) == 1:
            if seed is None:
                raise ArgumentError("seed: missing (backward / value_and_grad use a seed of 1)")
            seeds = [seed]
        elif isinstance(seed, tuple | list):
            seeds = list(seed)
            if len(seeds) != len(g.names):
                raise ArgumentError(
                    f"seed: expected {len(g.names)} seeds (one per output), got {len(seeds)}"
                )
        else:
            raise ArgumentError(
                f"seed: expected a tuple of {len(g.names)} seeds (one per output), "
                f"got {type(seed).__name__}"
            )
        for k, s in enumerate(seeds):
            if s is None:
                b = batch[0] if batch is not None and g.batched[k] else None
                if b is not None and b < 0:
                    raise ArgumentError(f"seed[{k}]: missing (needed to know the batch size)")
                seeds[k] = np.zeros(g.shapes[k] if b is None else (b, *g.shapes[k]), self.dtype)
        return self._floats(g, seeds, batch)

    def _unit_seed(self, batch: list[int] | None, what: str) -> Any:
        if not self._scalar:
            raise ArgumentError(
                f"{what}: needs a single scalar output, got outputs of shapes "
                f"{[list(s) for s in self.output_shapes]} (use vjp_with_seed)"
            )
        b = -2 if batch is None else batch[0]
        one = self._ones.get(b)
        if one is None:
            shape = () if b == -2 else (b,)
            one = self._ones[b] = jax.device_put(np.ones(shape, self.dtype), self._sharding)
        return one

    def _out(self, outs: tuple[Any, ...]) -> Any:
        return outs[0] if self._single else outs

    # -- the compiled API ------------------------------------------------------------------
    def _batch(self) -> list[int] | None:
        return [-1] if self._is_batched else None

    def _leaf_args(self, leaves: Leaves, batch: list[int] | None, fast: bool = True) -> list[Any]:
        # The hot path, kept short: a dict of jax arrays. Their types are checked when a new
        # signature is traced (_check_signature), not at every call; a _SignatureError then
        # sends the caller back here with fast=False, where every argument is checked.
        if fast and type(leaves) is dict and len(leaves) == self._n_leaves:
            try:
                vals = list(self._leaf_getter(leaves))
            except KeyError:
                pass
            else:
                if set(map(type, vals)) == _ARRAY_TYPE:
                    if batch is not None and self._first_batched is not None:
                        batch[0] = vals[self._first_batched].shape[0]
                    return vals
        return self._floats(self._leaves, leaves, batch)

    # The hot path of forward and value_and_grad, inlined in both (a Python call costs a
    # visible share of a call on a tiny graph): unbatched, no index inputs, a dict of exactly
    # the leaf names whose values are device arrays goes straight to the compiled function,
    # whose cache vouches for the types it has seen (a new combination is checked when traced:
    # _check_signature). Only the first value's type is looked at while every hot call has held
    # device arrays only; one that held something else (NumPy data mixed in: refused when
    # traced, which takes milliseconds, then converted; a list or None: not a JAX type, a
    # TypeError) makes every later hot call check them all (_hot_refused). The checked path
    # then runs again and raises the one-line error or the original one.
    def _hot_refused(self, leaves: Any) -> None:
        if set(map(type, self._leaf_getter(leaves))) != _ARRAY_TYPE:
            self._all_arrays_seen = False

    def forward(self, leaves: Leaves, index: Index = None) -> Any:
        """The output (an array) or outputs (a tuple) at ``leaves``."""
        if index is None and type(leaves) is dict and len(leaves) == self._n_hot:
            try:
                vals = self._leaf_getter(leaves)
            except KeyError:
                vals = None
            if (
                vals is not None
                and type(vals[0]) is ArrayImpl
                and (self._all_arrays_seen or set(map(type, vals)) == _ARRAY_TYPE)
            ):
                try:
                    return self._forward_out(*vals)
                except (_SignatureError, TypeError):  # TypeError: not an array at all
                    self._hot_refused(leaves)
                    return self._forward_slow(leaves, index, False)
        return self._call_checked(self._forward_slow, leaves, index)

    def _forward_slow(self, leaves: Leaves, index: Index, fast: bool) -> Any:
        batch = [-1] if self._is_batched else None
        args = self._leaf_args(leaves, batch, fast)
        if self._has_index or index is not None:
            args += self._index_args(index, batch)
        return self._forward_out(*args)

    @staticmethod
    def _call_checked(fn: Callable[..., Any], leaves: Leaves, index: Index, *rest: Any) -> Any:
        """``fn`` on the fast path; if the compiled function refuses the argument types, again
        with every argument checked (which converts NumPy data or names what is wrong)."""
        try:
            return fn(leaves, index, *rest, True)
        except _SignatureError:
            return fn(leaves, index, *rest, False)

    def jvp(self, leaves: Leaves, tangents: Leaves, index: Index = None) -> tuple[Any, Any]:
        """``(output, output tangent)``; ``tangents`` by name (missing: zero) or in context
        order, for the leaves with ``requires_grad``."""
        batch = self._batch()
        args = self._floats(self._leaves, leaves, batch)
        idx = self._index_args(index, batch)
        outs, touts = self._jvp(*args, *self._tangent_args(tangents, batch), *idx)
        return self._out(outs), self._out(touts)

    def value_and_vjp(
        self, leaves: Leaves, seed: Any, index: Index = None
    ) -> tuple[Any, dict[str, Any]]:
        """``(output, gradients)`` with the output cotangent ``seed`` (a tuple of one seed per
        output for several outputs; ``None`` entries are zero), one forward and one backward."""
        batch = self._batch()
        args = self._floats(self._leaves, leaves, batch)
        idx = self._index_args(index, batch)
        outs, grads = self._vjp(*args, *self._seed_args(seed, batch), *idx)
        return self._out(outs), self._by_name(grads)

    def vjp_with_seed(self, leaves: Leaves, seed: Any, index: Index = None) -> dict[str, Any]:
        """Reverse mode with an explicit output cotangent: the gradients by leaf name."""
        return self.value_and_vjp(leaves, seed, index)[1]

    def value_and_grad(self, leaves: Leaves, index: Index = None) -> tuple[Any, dict[str, Any]]:
        """``(value, gradients)`` of a scalar output (seed 1), in one pass."""
        if (
            index is None and type(leaves) is dict and len(leaves) == self._n_vag_hot
        ):  # the hot path: see forward
            try:
                vals = self._leaf_getter(leaves)
            except KeyError:
                vals = None
            if (
                vals is not None
                and type(vals[0]) is ArrayImpl
                and (self._all_arrays_seen or set(map(type, vals)) == _ARRAY_TYPE)
            ):
                try:
                    out = self._vag(*vals)  # type: ignore[misc]
                except (_SignatureError, TypeError):  # TypeError: not an array at all
                    self._hot_refused(leaves)
                    return self._value_and_grad(leaves, index, "value_and_grad", False)
                return out if self._grads_named else (out[0], self._by_name(out[1]))
        return self._call_checked(self._value_and_grad, leaves, index, "value_and_grad")

    def _value_and_grad(
        self, leaves: Leaves, index: Index, what: str, fast: bool = False
    ) -> tuple[Any, Any]:
        batch = [-1] if self._is_batched else None
        args = self._leaf_args(leaves, batch, fast)
        if self._has_index or index is not None:
            args += self._index_args(index, batch)
        if self._vag is not None:
            out = self._vag(*args)
            return out if self._grads_named else (out[0], self._by_name(out[1]))
        one = self._unit_seed(batch, what)  # refuses an output that is not a single scalar
        outs, grads = self._vjp(*args[: self._n_leaves], one, *args[self._n_leaves :])
        return outs[0], self._by_name(grads)

    def backward(self, leaves: Leaves, index: Index = None) -> dict[str, Any]:
        """The gradients of a scalar output (seed 1), by leaf name."""
        return self._call_checked(self._value_and_grad, leaves, index, "backward")[1]

    def backward_with_seed(self, leaves: Leaves, seed: Any, index: Index = None) -> dict[str, Any]:
        """The gradients of a scalar output times ``seed`` (a scalar; per sample when
        batched)."""
        if not self._scalar:
            raise ArgumentError(
                "backward_with_seed: needs a single scalar output (use vjp_with_seed)"
            )
        return self.value_and_vjp(leaves, seed, index)[1]

    def __repr__(self) -> str:
        b = ""
        if self.batching is not None:
            over = sorted(self.batching.leaves | self.batching.index)
            b = f", batched over {over} ({self.batching.grads} grads)"
        prec = "" if self.matmul_precision == "float32" else f", {self.matmul_precision}"
        return (
            f"CompiledGraph(<{len(self.graph.nodes)} nodes>, {self.dtype.name}, "
            f"{self.device.platform}:{self.device.id}, mode={self.mode!r}{b}{prec})"
        )
