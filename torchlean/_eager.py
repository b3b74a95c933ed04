"""The eager session (TorchLean's ``EagerSession``): ops run at once, a hidden tape remembers them.

Each op call runs the registry's rules; nothing here re-implements an op:

* the shape rule types the call (a mismatch is reported at the caller's line, as in the builder);
* the forward rule computes the value in the session's dtype, with NumPy on the CPU (the
  reference rules, fastest for small tensors), or lowered to jitted JAX per op signature on a
  GPU;
* ``backward`` walks the tape in reverse running each node's VJP rule, summing cotangents on
  fan-out, exactly as the reference ``backprop_ctx`` does over a graph.

**Batches.** An input declared ``batched=True`` (and a batched nat) carries a leading batch
axis; its tensor has the per-sample type. An op with a batched argument maps over the batch: it
runs the compiler's per-node rule for that signature, ``jax.vmap``-ed with the unbatched
arguments (parameters) shared and jitted once (the functions a batch-level compiled tape calls),
and its result is batched. The tape stores batched values; ``backward`` seeds every sample and
the vmapped VJP rules sum the cotangents of unbatched arguments over the batch, so a
parameter's gradient is the sum over the samples (or the mean, ``grads="mean"``), as
``CompiledGraph.batched(..., grads=...)`` gives it. Per sample, nothing changes: a batched tape
computes what a loop over the samples computes.

Typing results and kernels are cached per signature (op, attributes, argument types), so a
training loop pays the shape rule once per distinct call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import numpy as np

from torchlean_ir import (
    AttrError,
    Attrs,
    DType,
    EvalError,
    IndexType,
    Op,
    ShapeError,
    TensorType,
    TorchleanError,
    get_op,
    has_op,
)
from torchlean_ir.backends import numpy_backend
from torchlean_ir.extend import make_attrs, user_call_site

from ._options import Options
from ._param import Param
from ._session import Session
from ._tensor import NatRef, Tensor

Kernel = Callable[..., Any]
GradReduction = Literal["sum", "mean"]


def type_call(
    op_name: str,
    arg_types: tuple[TensorType, ...],
    index_types: tuple[IndexType, ...],
    attrs: dict[str, Any],
    dtype: DType,
) -> tuple[Op, Attrs, TensorType]:
    """Type one op call with the registry's attribute schema and shape rule; errors name the op,
    the argument types and the caller's ``file:line`` (as :meth:`GraphBuilder.apply` does)."""
    try:
        op = get_op(op_name)
    except TorchleanError as e:
        raise type(e)(f"{e}, at {user_call_site()}") from None
    if not arg_types and "dtype" in op.attrs and "dtype" not in attrs:
        attrs = {**attrs, "dtype": dtype.value}  # ops without tensor arguments (as the builder)
    try:
        node_attrs = make_attrs(op_name, op.attrs, attrs)
    except AttrError as e:
        raise AttrError(f"{e}, at {user_call_site()}") from None
    try:
        out = op.infer_type(arg_types, index_types, node_attrs)
    except ShapeError as e:
        shown = ", ".join([str(t) for t in arg_types] + [str(t) for t in index_types])
        raise ShapeError(f"{op_name}({shown}): {e}, at {user_call_site()}") from None
    if out.dtype != dtype:
        if arg_types:
            raise ShapeError(
                f"{op_name}: result dtype {out.dtype} differs from the session's {dtype}, "
                f"at {user_call_site()}"
            )
        out = TensorType(out.shape, dtype)
    return op, node_attrs, out


class _Sig(NamedTuple):
    """A typed op signature and its kernels."""

    op: Op
    attrs: dict[str, Any]
    out: TensorType
    diff: tuple[bool, ...]  # per argument: may receive a cotangent
    forward: Kernel  # (vals, idx, position) -> value
    vjp: Kernel  # (vals, out, ct, idx, position) -> tuple of cotangents (None = none)


class _Node(NamedTuple):
    sig: _Sig
    args: tuple[int, ...]
    idx: tuple[Any, ...]
    position: int
    diff: tuple[bool, ...]  # per argument: receives a cotangent (op allows it and it needs one)
    batch: _Batch | None  # the batched kernels, when an argument carries the batch


def _params(sig_attrs: dict[str, Any], op: Op, idx: tuple, position: int) -> dict[str, Any]:
    if not op.index_args and not op.needs_position:
        return sig_attrs
    params = dict(sig_attrs)
    for spec, v in zip(op.index_args, idx, strict=True):
        params[spec.name] = v
    if op.needs_position:
        params["_position"] = position
    return params


def kernel_compiler_options(device: Any) -> dict[str, Any] | None:
    """XLA options of the eager session's per-op kernels on ``device``. On a GPU, Triton GEMM
    autotuning is off: XLA otherwise tries Triton configurations for every new float32 matrix
    product shape, 7 to 12 s each on an H200 (an MLP's first eager step took 32 s in a fresh
    process, 1.4 s without it; docs/benchmarks.md, "GPU"); small per-op products run on
    cuBLAS."""
    if getattr(device, "platform", "cpu") != "gpu":
        return None
    return {"xla_gpu_enable_triton_gemm": False}


#: the batched rules of the compiler jitted again as top-level eager kernels (GPU options)
_TOP_LEVEL: dict[Any, Any] = {}

#: default batched seeds on a device, by (shape, mean scale, dtype, device)
_SEEDS: dict[tuple[Any, ...], Any] = {}
#: VJP kernels being compiled in the background (EagerSession._warm_vjp), by id of the kernel
_WARMING: dict[int, Any] = {}
_POOL: Any = None


def _warm_up(
    fn: Kernel, shapes: list[tuple[tuple[int, ...], Any]], device: Any, x64: Callable[[], Any]
) -> Any:
    """Run ``fn`` once on zeros of ``shapes`` on ``device`` in a background thread (its
    compilation lands in the jit cache); the future of that run."""
    global _POOL
    if _POOL is None:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1)), "torchlean-warm")

    def run() -> None:
        import jax

        try:
            with x64():
                args = [jax.device_put(np.zeros(s, d), device) for s, d in shapes]
                jax.block_until_ready(fn(*args))
        except Exception:
            pass

    return _POOL.submit(run)


class _NumpyKernels:
    """The registry's reference rules, run with NumPy in the session's dtype (optionally with
    the op's own jitted JAX lowering for the ops that declare one: ``fast_kernels``)."""

    on_device = False

    def __init__(self, dtype: DType, fast: bool) -> None:
        self.dtype = dtype
        self.np_dtype = np.dtype(dtype.numpy_name)
        self.B = numpy_backend(dtype.numpy_name)
        self.fast = fast
        self._jax: _JaxKernels | None = None

    def _jax_kernels(self) -> _JaxKernels:
        if self._jax is None:
            import jax

            self._jax = _JaxKernels(self.dtype, jax.devices("cpu")[0])
        return self._jax

    def make(self, op: Op, attrs: dict[str, Any]) -> tuple[Kernel, Kernel]:
        fwd_rule, vjp_rule = op.forward_rule, op.vjp_rule
        assert fwd_rule is not None and vjp_rule is not None
        B, dt = self.B, self.np_dtype

        def forward(vals: list, idx: tuple, position: int) -> Any:
            vals = [v if type(v) is np.ndarray else np.asarray(v) for v in vals]
            out = fwd_rule(B, *vals, **_params(attrs, op, idx, position))
            return out if type(out) is np.ndarray and out.dtype == dt else np.asarray(out, dt)

        def vjp(vals: list, out: Any, ct: Any, idx: tuple, position: int) -> tuple:
            vals = [v if type(v) is np.ndarray else np.asarray(v) for v in vals]
            ct = ct if type(ct) is np.ndarray else np.asarray(ct)
            cts = vjp_rule(B, tuple(vals), out, ct, **_params(attrs, op, idx, position))
            return tuple(
                g if g is None or (type(g) is np.ndarray and g.dtype == dt) else np.asarray(g, dt)
                for g in cts
            )

        if not self.fast or (op.lower_rule is None and op.lower_vjp_rule is None):
            return forward, vjp
        jax_fwd, jax_vjp = self._jax_kernels().make(op, attrs)

        def fast_forward(vals: list, idx: tuple, position: int) -> Any:
            return np.asarray(jax_fwd(vals, idx, position))

        def fast_vjp(vals: list, out: Any, ct: Any, idx: tuple, position: int) -> tuple:
            cts = jax_vjp(vals, out, ct, idx, position)
            return tuple(None if g is None else np.asarray(g) for g in cts)

        return (
            fast_forward if op.lower_rule is not None else forward,
            fast_vjp if op.lower_vjp_rule is not None else vjp,
        )

    def leaf(self, value: Any) -> Any:
        return np.array(value, dtype=self.np_dtype)

    def param_value(self, p: Param) -> Any:
        """The param's value in the session's dtype: its device mirror when it has one (a
        batched tape trained it on the CPU device: see ``EagerSession._on_device``), else the
        host value."""
        d = p._device
        if d is not None and d.dtype == self.np_dtype:
            return d
        v = p.value
        return v if v.dtype == self.np_dtype else v.astype(self.np_dtype)

    seed = leaf

    def zeros(self, shape: tuple[int, ...]) -> Any:
        return np.zeros(shape, self.np_dtype)

    def add(self, a: Any, b: Any) -> Any:
        return a + b

    def to_numpy(self, v: Any) -> np.ndarray:
        return np.array(v, dtype=self.np_dtype)


_JIT_CACHE: dict[tuple[Any, ...], Any] = {}
#: Literals up to this many elements share a cached signature (the scalars of ``x + 1.0``);
#: larger ones are typed at each call, so data passed as literals cannot grow the cache.
_CONST_CACHE_SIZE = 16


class _JaxKernels:
    """The registry's JAX lowerings (``op.lowering`` / ``op.lowering_vjp``), jitted once per
    signature and run on one device in one float dtype."""

    on_device = True

    def __init__(self, dtype: DType, device: Any, precision: str = "float32") -> None:
        from torchlean_ir.backends import jax_backend

        self.dtype = dtype
        self.device = device
        self.precision = precision
        self.np_dtype = np.dtype(dtype.numpy_name)
        self.B = jax_backend(dtype.numpy_name)

    def x64(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype == DType.F64:
            import jax

            return jax.enable_x64(True)
        return contextlib.nullcontext()

    def make(self, op: Op, attrs: dict[str, Any]) -> tuple[Kernel, Kernel]:
        import jax

        from compiler.extend import traced_at

        B, n_idx = self.B, len(op.index_args)
        lower, lower_vjp = op.lowering, op.lowering_vjp
        assert lower is not None and lower_vjp is not None
        # Jitted functions are shared by every session (keyed by op, attributes, dtype and,
        # for seeded ops, the position), so a new session does not recompile.
        attrs_key = tuple(sorted(attrs.items()))

        def jitted(kind: str, position: int, body: Callable[..., Any]) -> Any:
            pos = position if op.needs_position else 0
            key = (op, kind, attrs_key, self.dtype, pos, self.precision)
            fn = _JIT_CACHE.get(key)
            if fn is None:
                fn = _JIT_CACHE[key] = jax.jit(
                    traced_at(self.precision, body(pos)),
                    compiler_options=kernel_compiler_options(self.device),
                )
            return fn

        def fwd_body(position: int) -> Callable[..., Any]:
            def f(*a: Any) -> Any:
                vals, idx = a[: len(a) - n_idx], a[len(a) - n_idx :]
                return lower(B, *vals, **_params(attrs, op, tuple(idx), position))

            return f

        def vjp_body(position: int) -> Callable[..., Any]:
            def f(vals: tuple, out: Any, ct: Any, idx: tuple) -> Any:
                return tuple(lower_vjp(B, vals, out, ct, **_params(attrs, op, idx, position)))

            return f

        def forward(vals: list, idx: tuple, position: int) -> Any:
            with self.x64():
                return jitted("forward", position, fwd_body)(*vals, *idx)

        def vjp(vals: list, out: Any, ct: Any, idx: tuple, position: int) -> tuple:
            with self.x64():
                return jitted("vjp", position, vjp_body)(tuple(vals), out, ct, tuple(idx))

        return forward, vjp

    def leaf(self, value: Any) -> Any:
        import jax

        with self.x64():
            if isinstance(value, jax.Array):
                # already on a device: converted and moved there, never through the host
                if value.dtype != self.np_dtype:
                    if value.dtype.kind not in "fiu":
                        raise TypeError(f"not a real array: {value.dtype}")
                    value = value.astype(self.np_dtype)
                return (
                    value
                    if value.devices() == {self.device}
                    else jax.device_put(value, self.device)
                )
            return jax.device_put(np.asarray(value, dtype=self.np_dtype), self.device)

    def param_value(self, p: Param) -> Any:
        with self.x64():
            return p.device_value(self.device, self.np_dtype)

    seed = leaf

    def index(self, value: np.ndarray) -> Any:
        import jax

        with self.x64():
            return jax.device_put(value, self.device)

    def zeros(self, shape: tuple[int, ...]) -> Any:
        return self.leaf(np.zeros(shape))

    def add(self, a: Any, b: Any) -> Any:
        with self.x64():
            return a + b

    def to_numpy(self, v: Any) -> np.ndarray:
        return np.array(v, dtype=self.np_dtype)


class _Batched:
    """The kernels of ops with a batched argument: the compiler's per-node rules
    (``tl_fwd_<op>`` / ``tl_vjp_<op>``) vmapped over the batch axis of the batched arguments
    and jitted once per signature. A VJP sums the cotangents of its unbatched arguments over
    the batch (contracting the batch into the matrix product where there is one)."""

    def __init__(self, dtype: DType, device: Any, precision: str = "float32") -> None:
        self.dtype_name = dtype.numpy_name
        self.device = device  # where a CPU session's params get their mirrors
        self.precision = precision

    def rule(
        self,
        kind: Literal["fwd", "vjp"],
        sig: _Sig,
        arg_shapes: tuple[tuple[int, ...], ...],
        index_shapes: tuple[tuple[int, ...], ...],
        arg_b: tuple[bool, ...],
        idx_b: tuple[bool, ...],
        position: int,
        flags: tuple[bool, ...] = (),
    ) -> Kernel:
        import jax

        from compiler.extend import RuleBatching, node_rule

        summed = tuple(not b for b, f in zip(arg_b, flags, strict=True) if f) if flags else ()
        fn = node_rule(
            kind,
            sig.op,
            sig.attrs,
            arg_shapes,
            index_shapes,
            sig.out.shape,
            self.dtype_name,
            flags,
            position,
            RuleBatching(arg_b, idx_b, summed),
            self.precision,
        )
        options = kernel_compiler_options(self.device)
        if options is None:
            return fn  # type: ignore[no-any-return]
        top = _TOP_LEVEL.get(fn)
        if top is None:
            # the shared rule (nested inside compiled graphs, where the graph's own options
            # apply) called on its own here: jitted once more with the eager kernels' options
            top = _TOP_LEVEL[fn] = jax.jit(fn, compiler_options=options)
        return top


class _Batch(NamedTuple):
    """A batched op signature: which arguments carry the batch axis, and its kernels."""

    arg_b: tuple[bool, ...]
    idx_b: tuple[bool, ...]
    arg_shapes: tuple[tuple[int, ...], ...]  # per sample
    index_shapes: tuple[tuple[int, ...], ...]
    forward: Kernel
    vjps: dict[tuple[bool, ...], Kernel]  # by the flags of the receiving arguments


def _gpu_device() -> Any:
    import jax

    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        raise TorchleanError(
            "device='gpu' but JAX sees no GPU; install the CUDA plugin "
            "(pip install 'torchlean-ir[cuda]') or use device='cpu'"
        )
    return gpus[0]


class EagerSession(Session):
    """Ops execute immediately; a hidden tape records them for :meth:`backward`.

    Parameters
    ----------
    options:
        :class:`~torchlean.Options` (``backend`` is ignored: this is the eager one). Values have
        ``options.dtype``.
    array_backend:
        ``"numpy"`` (default on CPU: the registry's reference rules, with NumPy) or ``"jax"``
        (default on GPU: the jitted JAX lowerings; on CPU it is there for testing that path).
        Ops with a batched argument run the vmapped, jitted per-node rules of the compiler on
        either (see the module docstring).
    """

    _BATCH_SCOPE = "tape"
    _BATCH_HINT = " (one batch per tape; reset_tape() starts another)"

    def __init__(self, options: Options | None = None, *, array_backend: str | None = None) -> None:
        super().__init__(options)
        opts = self.options
        if array_backend is None:
            array_backend = "jax" if opts.device == "gpu" else "numpy"
        if array_backend == "numpy":
            if opts.device == "gpu":
                raise TorchleanError("array_backend='numpy' runs on the CPU; use device='cpu'")
            self._k: Any = _NumpyKernels(opts.float_dtype, opts.fast_kernels)
        elif array_backend == "jax":
            import jax

            device = _gpu_device() if opts.device == "gpu" else jax.devices("cpu")[0]
            self._k = _JaxKernels(opts.float_dtype, device, opts.matmul_precision)
        else:
            raise TorchleanError(f"array_backend must be 'numpy' or 'jax', got {array_backend!r}")
        self.array_backend = array_backend
        self._sigs: dict[Any, _Sig] = {}
        self._batches: dict[Any, _Batch] = {}
        self._bk: _Batched | None = None
        self._clear()

    def _clear(self) -> None:
        self._vals: list[Any] = []
        self._types: list[TensorType] = []
        self._rg: list[bool] = []
        self._nodes: list[_Node | None] = []
        self._names: dict[int, str] = {}
        self._leaf_param: dict[int, Param] = {}
        self._used: dict[int, int] = {}  # id(param) -> leaf id
        self._n_ops = 0
        self._grads: dict[int, Any] | None = None
        self._grad_scale: int | None = None  # the batch size after backward(grads="mean")
        self._nat_values = []
        self._nat_device: dict[int, Any] = {}  # nat values uploaded once (the JAX path)
        self._nat_refs = []
        self._nat_batched = []
        self._batch: int | None = None  # the batch size, once a batched input is given
        self._bat: list[bool] = []  # per value: carries the batch axis

    @property
    def dtype(self) -> DType:
        return self._k.dtype  # type: ignore[no-any-return]

    @property
    def _on_device(self) -> bool:
        # A batched tape runs on JAX whatever the array backend: its optimizer steps update the
        # params' device mirrors in place of converting every step to and from the host.
        return self._k.on_device or self._batch is not None  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        batch = "" if self._batch is None else f", batch {self._batch}"
        return (
            f"EagerSession({self.array_backend}, {self.dtype}, {len(self._vals)} values, "
            f"{self._n_ops} ops{batch})"
        )

    def _describe(self, t: Tensor) -> str:
        name = self._names.get(t._key)
        return f"eager %{t._key}" + (f" {name}" if name else "")

    # -- handles -----------------------------------------------------------------------------
    def _id(self, t: Any, what: str) -> int:
        if type(t) is not Tensor or t._ops is not self:
            if isinstance(t, Tensor):
                raise TorchleanError(f"{what}: tensor belongs to another session or graph")
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t._gen != self._gen:
            raise TorchleanError(
                f"{what}: tensor %{t._key} is from before the last reset_tape(), at "
                f"{user_call_site()}"
            )
        return t._key  # type: ignore[no-any-return]

    def _is_batched(self, t: Tensor) -> bool:
        return self._bat[self._id(t, "batched")]

    def _push(
        self, value: Any, type_: TensorType, rg: bool, node: _Node | None, batched: bool = False
    ) -> Tensor:
        i = len(self._vals)
        self._vals.append(value)
        self._types.append(type_)
        self._rg.append(rg)
        self._nodes.append(node)
        self._bat.append(batched)
        return Tensor(self, i, type_, self._gen)

    def _leaf(
        self, value: Any, name: str | None, rg: bool, what: str, batched: bool, expected: Any = None
    ) -> Tensor:
        arr = np.asarray(value) if not hasattr(value, "shape") else value
        try:
            v = self._k.leaf(arr)
        except (TypeError, ValueError):
            raise TorchleanError(
                f"{what}: expected a float array, got {type(value).__name__}, at {user_call_site()}"
            ) from None
        shape = self._input_shape(tuple(v.shape), expected, batched, what)
        t = self._push(v, TensorType(shape, self.dtype), rg, None, batched)
        if name is not None:
            self._names[t._key] = name
        return t

    # -- leaves ----------------------------------------------------------------------------
    def use(self, param: Param) -> Tensor:
        if not isinstance(param, Param):
            raise TypeError(f"use: expected a Param, got {type(param).__name__}")
        i = self._used.get(id(param))
        if i is not None and self._leaf_param.get(i) is param:
            return Tensor(self, i, self._types[i], self._gen)
        t = self._push(
            self._k.param_value(param),
            TensorType(param.shape, self.dtype),
            param.requires_grad,
            None,
        )
        self._used[id(param)] = t._key
        self._leaf_param[t._key] = param
        if param.name:
            self._names[t._key] = param.name
        return t

    def input(
        self,
        value: Any = None,
        *,
        name: str | None = None,
        requires_grad: bool = False,
        shape: Any = None,
        batched: bool = False,
    ) -> Tensor:
        """An input leaf holding ``value``. With ``batched=True`` the value's leading axis is
        the batch (the tensor has the per-sample type; ``shape`` is the per-sample shape)."""
        if value is None:
            raise TorchleanError(f"input: an eager session needs a value, at {user_call_site()}")
        return self._leaf(value, name, bool(requires_grad), "input", bool(batched), shape)

    def _nat_arg(self, k: int) -> Any:
        """Nat ``k`` as the kernels take it: on the JAX path uploaded once (not at every op
        that reads it), on the NumPy path the array itself."""
        if not self._k.on_device:
            return self._nat_values[k]
        v = self._nat_device.get(k)
        if v is None:
            v = self._nat_device[k] = self._k.index(self._nat_values[k])
        return v

    def _nats_changed(self) -> None:
        self._nat_device.clear()

    def _add_nat(
        self, value: Any, size: int | None, name: str | None, what: str, batched: bool = False
    ) -> NatRef:
        ref = super()._add_nat(value, size, name, what, batched)
        if batched:
            self._set_batch(int(self._nat_values[-1].shape[0]), what)
        return ref

    # -- ops -------------------------------------------------------------------------------
    def _sig(
        self,
        key: Any,
        op_name: str,
        arg_types: tuple[TensorType, ...],
        index_types: tuple[IndexType, ...],
        attrs: dict[str, Any],
    ) -> _Sig:
        """Type the call and build its kernels (cached under ``key`` unless it is ``None``)."""
        op, node_attrs, out = type_call(op_name, arg_types, index_types, attrs, self.dtype)
        plain = dict(node_attrs)
        fwd, vjp = self._k.make(op, plain)
        diff = tuple(op.is_diff_arg(p) for p in range(len(arg_types)))
        sig = _Sig(op, plain, out, diff, fwd, vjp)
        if key is not None and (op_name != "const" or out.size <= _CONST_CACHE_SIZE):
            self._sigs[key] = sig
        return sig

    def _bad_arg(self, op_name: str, p: int, a: Any) -> NatRef:
        if isinstance(a, NatRef):
            self._check_nat(a, f"{op_name}: argument {p}")
            return a
        if isinstance(a, Tensor):
            self._id(a, f"{op_name}: argument {p}")
        raise TypeError(
            f"{op_name}: argument {p} must be a Tensor or NatRef, got "
            f"{type(a).__name__} (attributes go by keyword), at {user_call_site()}"
        )

    def _batched_kernels(self) -> _Batched:
        if self._bk is None:
            device = getattr(self._k, "device", None)
            if device is None:
                import jax

                device = jax.devices("cpu")[0]
            self._bk = _Batched(self.dtype, device, self.options.matmul_precision)
        return self._bk

    def _batch_of(
        self,
        key: Any,
        sig: _Sig,
        ids: list[int],
        nats: list[NatRef],
        arg_b: tuple[bool, ...],
        idx_b: tuple[bool, ...],
        position: int,
    ) -> _Batch:
        """The batched kernels of a signature (cached, except for seeded ops, whose rules
        depend on the position: the compiler's rule cache keeps those)."""
        bkey = None if key is None or sig.op.needs_position else (key, arg_b, idx_b)
        b = None if bkey is None else self._batches.get(bkey)
        if b is None:
            arg_shapes = tuple([self._types[i].shape for i in ids])
            index_shapes = tuple([n.type.shape for n in nats])
            fwd = self._batched_kernels().rule(
                "fwd", sig, arg_shapes, index_shapes, arg_b, idx_b, position
            )
            b = _Batch(arg_b, idx_b, arg_shapes, index_shapes, fwd, {})
            if bkey is not None:
                self._batches[bkey] = b
        return b

    def apply(self, op_name: str, *args: Tensor | NatRef, **attrs: Any) -> Tensor:
        gen, types = self._gen, self._types
        ids: list[int] = []
        nats: list[NatRef] = []
        for p, a in enumerate(args):
            if type(a) is Tensor and a._ops is self and a._gen == gen:
                ids.append(a._key)
            else:
                nats.append(self._bad_arg(op_name, p, a))
        # Every tensor of a session has its dtype, so shapes identify the argument types; the
        # key hashes in C (tuples of ints and strings), the typing runs on a miss only.
        key: Any = (op_name, *[types[i].shape for i in ids])
        if nats:
            key = (*key, None, *[n.type.shape for n in nats])
        if attrs:
            key = (*key, *attrs.items(), *map(type, attrs.values()))
            try:
                sig = self._sigs.get(key)
            except TypeError:  # an unhashable attribute (a list, an array): no caching
                key = sig = None
        else:
            sig = self._sigs.get(key)
        if sig is None or not (has_op(op_name) and get_op(op_name) is sig.op):
            arg_types = tuple([types[i] for i in ids])
            sig = self._sig(key, op_name, arg_types, tuple([n.type for n in nats]), attrs)
        vals = self._vals
        idx = tuple([self._nat_arg(n._key) for n in nats]) if nats else ()
        position = self._n_ops
        batch: _Batch | None = None
        if self._batch is not None:
            bat = self._bat
            arg_b = tuple([bat[i] for i in ids])
            idx_b = tuple([self._nat_batched[n._key] for n in nats])
            if True in arg_b or True in idx_b:
                batch = self._batch_of(key, sig, ids, nats, arg_b, idx_b, position)
        if batch is not None and not self._k.on_device:
            self._to_batch_device(ids)
        try:
            if batch is None:
                out = sig.forward([vals[i] for i in ids], idx, position)
            else:
                out = batch.forward(*[vals[i] for i in ids], *idx)
        except Exception as e:
            raise EvalError(
                f"while evaluating {op_name}: {type(e).__name__}: {e}, at {user_call_site()}"
            ) from e
        self._n_ops = position + 1
        rg = self._rg
        diff = tuple([d and rg[i] for d, i in zip(sig.diff, ids, strict=True)])
        i = len(vals)
        vals.append(out)
        types.append(sig.out)
        self._bat.append(batch is not None)
        if True in diff:
            rg.append(True)
            node = _Node(sig, tuple(ids), idx, position, diff, batch)
            self._nodes.append(node)
            if batch is not None and self._k.on_device:
                self._warm_vjp(node, out)
        else:
            rg.append(False)
            self._nodes.append(None)
        return Tensor(self, i, sig.out, gen)

    # -- values and gradients ----------------------------------------------------------------
    def _device_value(self, t: Tensor) -> Any:
        """The value of ``t`` as the JAX array it is, where the session computes with JAX (its
        ``array_backend="jax"``, the GPU path), without waiting for it; ``None`` on the NumPy
        path."""
        if not self._k.on_device:
            return None
        return self._vals[self._id(t, "value")]

    def get_value(self, t: Tensor) -> np.ndarray:
        """The value of ``t`` as a NumPy array in the session's dtype (a copy); a batched
        value has the batch as its leading axis."""
        return self._k.to_numpy(self._vals[self._id(t, "get_value")])  # type: ignore[no-any-return]

    def _node_vjp(self, j: int, node: _Node, ct: Any) -> tuple:
        """The cotangents of node ``j``'s arguments (``None`` where none flows)."""
        vals, sig = self._vals, node.sig
        args = [vals[a] for a in node.args]
        b = node.batch
        if b is None:
            return sig.vjp(args, vals[j], ct, node.idx, node.position)  # type: ignore[no-any-return]
        fn = self._batched_vjp(node)
        warming = _WARMING.pop(id(fn), None)
        if warming is not None:
            warming.result()  # compiled in the background since the forward: wait, once
        gs = iter(fn(*args, vals[j], ct, *node.idx))
        return tuple(next(gs) if d else None for d in node.diff)

    def _to_batch_device(self, ids: list[int]) -> None:
        """NumPy values an op on a batch reads (a param's host value on the first step, an
        unbatched input) moved to the batch kernels' device, in the tape too (the VJP reads
        them): committed arrays, as the params' device mirrors are from the second step on, so
        the kernels see the same argument types at every step and compile once."""
        vals = self._vals
        device = None
        for i in ids:
            v = vals[i]
            if isinstance(v, np.ndarray | np.generic):
                if device is None:
                    import jax

                    device = self._batched_kernels().device
                vals[i] = jax.device_put(v, device)

    def _batched_vjp(self, node: _Node) -> Kernel:
        """The vmapped VJP kernel of a batched node (made once per signature and flags)."""
        b = node.batch
        assert b is not None
        fn = b.vjps.get(node.diff)
        if fn is None:
            arg_shapes = tuple([self._types[a].shape for a in node.args])
            index_shapes = tuple(
                [
                    np.shape(v)[1:] if f else np.shape(v)
                    for v, f in zip(node.idx, b.idx_b, strict=True)
                ]
            )
            fn = self._batched_kernels().rule(
                "vjp", node.sig, arg_shapes, index_shapes, b.arg_b, b.idx_b, node.position,
                node.diff,
            )  # fmt: skip
            if not node.sig.op.needs_position:
                b.vjps[node.diff] = fn
        return fn

    def _warm_vjp(self, node: _Node, out: Any) -> None:
        """On a device, the first time a batched signature runs forward: compile its VJP
        kernel in a background thread (XLA compiles off the GIL), so the first backward
        finds it ready or nearly (the first step's compilations overlap instead of adding up).
        The kernel runs once there on zeros of the real shapes, on the same device."""
        if node.sig.op.needs_position or node.diff in node.batch.vjps:  # type: ignore[union-attr]
            return
        fn = self._batched_vjp(node)
        vals = self._vals
        shapes = [(np.shape(vals[a]), vals[a].dtype) for a in node.args]
        shapes += [(np.shape(out), out.dtype)] * 2
        shapes += [(np.shape(v), np.asarray(v).dtype if not hasattr(v, "dtype") else v.dtype)
                   for v in node.idx]  # fmt: skip
        _WARMING[id(fn)] = _warm_up(fn, shapes, self._k.device, self._k.x64)

    def backward(self, t: Tensor, seed: Any = None, *, grads: GradReduction = "sum") -> None:
        """Reverse mode from ``t``: seed 1 for a scalar, or an explicit cotangent ``seed`` of
        ``t``'s shape. For a batched ``t`` every sample is seeded (1, or ``seed`` with the batch
        as its leading axis) and the gradients of unbatched values (parameters) are summed over
        the batch (``grads="sum"``) or averaged (``grads="mean"``), as
        ``CompiledGraph.batched(..., grads=...)`` does; a batched value's gradient is per
        sample."""
        i = self._id(t, "backward")
        if grads not in ("sum", "mean"):
            raise TorchleanError(f"backward: grads must be 'sum' or 'mean', got {grads!r}")
        shape, batched = self._types[i].shape, self._bat[i]
        full = (self._batch, *shape) if batched else shape
        default = seed is None
        if seed is None:
            if shape != ():
                raise TorchleanError(
                    f"backward: the output is {self._types[i]}, not a scalar; pass seed= "
                    f"(a cotangent of that shape), at {user_call_site()}"
                )
            seed = np.ones(full) if batched else 1.0
        if tuple(np.shape(seed)) != full:
            want = f"{list(full)} (the batch, then {self._types[i]})" if batched else None
            raise TorchleanError(
                f"backward: seed has shape {list(np.shape(seed))}, the output is "
                f"{want or self._types[i]}, at {user_call_site()}"
            )
        scale = self._batch if batched and grads == "mean" else None
        if scale is not None:
            # the mean over the batch, as the compiled batched backward takes it: on the seeds
            seed = np.asarray(seed, self._k.np_dtype) / np.asarray(scale, self._k.np_dtype)
        if batched and default and self._k.on_device:
            # the default seed of a training loop: uploaded once per batch size and reduction
            ct0 = _SEEDS.get((full, scale, self._k.np_dtype, self._k.device))
            if ct0 is None:
                ct0 = _SEEDS[(full, scale, self._k.np_dtype, self._k.device)] = self._k.seed(seed)
        elif batched:
            # a batched seed goes to the first VJP call as it is (the call moves it there)
            ct0 = np.asarray(seed, self._k.np_dtype)
        else:
            ct0 = self._k.seed(seed)
        cts: dict[int, Any] = {i: ct0}
        nodes, add = self._nodes, self._k.add
        for j in range(i, -1, -1):
            node = nodes[j]
            if node is None:
                continue
            ct = cts.get(j)
            if ct is None:
                continue
            try:
                arg_cts = self._node_vjp(j, node, ct)
            except Exception as e:
                raise EvalError(
                    f"while back-propagating through {node.sig.op.name} (%{j}): "
                    f"{type(e).__name__}: {e}"
                ) from e
            for a, g, d in zip(node.args, arg_cts, node.diff, strict=True):
                if g is None or not d:
                    continue
                prev = cts.get(a)
                cts[a] = g if prev is None else add(prev, g)
        self._grads = cts
        self._grad_scale = scale

    def grad(self, t: Tensor) -> np.ndarray | None:
        """The gradient of the last :meth:`backward` output with respect to ``t`` (a leaf or an
        intermediate value), in the session's dtype: zeros where no gradient reached it; per
        sample (the batch leading) for a batched ``t``; ``None`` when ``t`` does not require
        grad (an input without ``requires_grad``, a constant, a detached value)."""
        i = self._id(t, "grad")
        if self._grads is None:
            raise TorchleanError(f"grad: no backward() since the last reset, at {user_call_site()}")
        if not self._rg[i]:
            return None
        batched = self._bat[i]
        shape = (self._batch, *self._types[i].shape) if batched else self._types[i].shape
        g = self._grads.get(i)
        if g is None:
            return np.zeros(shape, self._k.np_dtype)  # type: ignore[no-any-return]
        g = self._k.to_numpy(g)
        if batched and self._grad_scale is not None:
            g = g * np.asarray(self._grad_scale, g.dtype)  # per sample, as the seed was divided
        return g  # type: ignore[no-any-return]

    def used_params(self) -> list[Param]:
        return list({id(p): p for p in self._leaf_param.values()}.values())

    def _param_grads(self) -> list[tuple[Param, Any]]:
        if self._grads is None:
            raise TorchleanError("optimizer step: no backward() since the last reset_tape()")
        if self._batch is not None and not self._k.on_device:
            # on the device from now on (see _on_device): give every param its mirror
            device = self._batched_kernels().device
            for p in self._leaf_param.values():
                p.device_value(device, self._k.np_dtype)
        # A param used again after an optimizer step has a second leaf: sum its gradients.
        out: dict[int, tuple[Param, Any]] = {}
        for i, p in self._leaf_param.items():
            if not p.requires_grad:
                continue
            g = self._grads.get(i)
            prev = out.get(id(p))
            if prev is None:
                out[id(p)] = (p, self._k.zeros(p.shape) if g is None else g)
            elif g is not None:
                out[id(p)] = (p, self._k.add(prev[1], g))
        return list(out.values())

    def _after_step(self) -> None:
        self._used = {}

    def reset_tape(self) -> None:
        self._gen += 1
        self._clear()

    # -- convenience -------------------------------------------------------------------------
    @property
    def num_values(self) -> int:
        """Values on the tape (leaves and op results)."""
        return len(self._vals)
