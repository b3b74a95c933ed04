"""Injected bugs: wrong rules, wrong lowerings and a wrong tape, each with a graph it shows in.

Shared by ``test_mutations.py`` (every mutant must be detected, with a counterexample) and
``benchmarks/verify_power.py`` (the same mutants against gradcheck and check_grads). A mutant is
applied by monkeypatching a rule, a lowering or the compiler's tape, and restored afterwards;
the compiler's caches and the verifier's are cleared on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import torchlean_ir as tl


@dataclass(frozen=True)
class Mutant:
    """One injected bug: where it is (``rule``, ``lowering`` or ``tape``), the graph and the
    index values it is exercised on, and the patch."""

    name: str
    where: str
    graph: Callable[[], tl.GraphData]
    patch: Callable[[], Iterator[None]]
    index: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _clear() -> None:
    import compiler
    import verify

    compiler.clear_cache()
    verify.clear_caches()


@contextmanager
def applied(m: Mutant) -> Iterator[None]:
    """Apply ``m`` for the duration of the block (caches cleared before and after)."""
    _clear()
    with contextmanager(m.patch)():
        try:
            yield
        finally:
            _clear()


@contextmanager
def _patched(obj: Any, attr: str, value: Any) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


def _set(obj: Any, attr: str, value: Any) -> Iterator[None]:
    old = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, old)


def _rule(op: str, slot: str, fn: Callable[..., Any]) -> Callable[[], Iterator[None]]:
    def patch() -> Iterator[None]:
        yield from _set(tl.get_op(op), slot, fn)

    return patch


def _rule_and_lowering(op: str, slot: str, fn: Callable[..., Any]) -> Callable[[], Iterator[None]]:
    """``fn`` as the op's rule and as its lowering (``lower_<slot>``): the bug is in the code
    that runs too, so the finite-difference checkers see it."""

    def patch() -> Iterator[None]:
        with _patched(tl.get_op(op), "lower_" + slot, fn):
            yield from _set(tl.get_op(op), slot, fn)

    return patch


# -- graphs ------------------------------------------------------------------------------------


def _unary(
    op: str, xs: tuple[int, ...] = (4,), dtype: str = "f64", **attrs: Any
) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder(dtype)
        x = b.param("x", xs)
        y = b.apply(op, x, **attrs)
        return b.build(b.sum(y * y))  # a non-uniform cotangent, so no bug is masked

    return build


def _binary(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        x, y = b.param("a", sa), b.param("b", sb)
        out = b.apply(op, x, y)
        return b.build(out if out.shape == () else b.sum(out * out))

    return build


def _mlp() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (3,))
    W, bias = b.param("W", (3, 3)), b.param("b", (3,))
    h = b.linear(W, bias, x).tanh()
    return b.build(b.sum(h * h))


def _fanout() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (3,))
    h = x.tanh()
    return b.build(b.sum(h * h + h))


def _detach() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (3,))
    h = x.tanh()
    return b.build(b.sum(h * h.detach()))


def _gather() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (3, 2))
    idx = b.index("idx", 3)
    g = b.gather_rows_nat(x, idx)
    return b.build(b.sum(g * g))


def _layer_norm() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (2, 3))
    gamma, beta = b.param("gamma", (3,)), b.param("beta", (3,))
    return b.build(b.sum(b.layer_norm(x, gamma, beta, eps=1e-5).tanh()))


def _matmul32() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x, y = b.param("a", (32, 32)), b.param("b", (32, 32))
    return b.build(b.sum(b.mul(x, y)))


# -- the mutants -------------------------------------------------------------------------------


def _sub_vjp_sign(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (ct, ct)


def _mse_vjp_no_2(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    d = args[0] - args[1]
    g = d * (ct / d.size)
    return (g, -g)


def _matmul_vjp_transposed(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    return (B.matmul(ct, b), B.matmul(B.transpose(a, (1, 0)), ct))


def _broadcast_vjp_wrong_axis(B: Any, args: tuple, out: Any, ct: Any, *, shape: Any) -> tuple:
    # (3, 1) -> (3, 3) stretches axis 1; this sums over axis 0 (the shapes still fit).
    return (B.reshape(B.sum(ct, axis=0, keepdims=True), args[0].shape),)


def _slice_vjp_off_by_one(
    B: Any, args: tuple, out: Any, ct: Any, *, start: int, length: int
) -> tuple:
    n = args[0].shape[0]
    widths = [(start + 1, n - start - length - 1)] + [(0, 0)] * (ct.ndim - 1)
    return (B.pad(ct, widths),)


def _softmax_jvp_axis0(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    t = tangents[0]
    return out * (t - B.sum(out * t, axis=0, keepdims=True))


def _relu_vjp_at_zero(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.to_float(args[0] >= 0) * ct,)


def _max_vjp_tie_to_a(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    zero = B.zeros_like(ct)
    return (B.where(a >= b, ct, zero), B.where(b > a, ct, zero))


def _tanh_vjp_scaled(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return ((1 - out * out) * ct * 1.0005,)


def _mul_vjp_one_element(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    bump = np.zeros(a.shape)
    bump[17, 5] = 1e-3
    return (ct * b + ct * b * B.asarray(bump), ct * a)


def _gather_vjp_clip(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
    n = args[0].shape[0]
    clipped = np.minimum(np.asarray(idx), n - 1)  # an out-of-range index sends to the last row
    return (B.scatter_add(B.zeros_like(args[0]), clipped, ct, axis=0),)


_LAYER_NORM_VJP = tl.get_op("layer_norm").vjp_rule


def _layer_norm_vjp_eps(B: Any, args: tuple, out: Any, ct: Any, *, eps: float) -> tuple:
    return _LAYER_NORM_VJP(B, args, out, ct, eps=1e-6)  # type: ignore[misc]


def _sigmoid_jvp_sign(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    return out * (1 + out) * tangents[0]


def _clamp_vjp_bounds(B: Any, args: tuple, out: Any, ct: Any, *, lo: float, hi: float) -> tuple:
    x = args[0]
    return (B.to_float(B.logical_and(x >= lo, x <= hi)) * ct,)


def _sqrt_vjp_at_zero(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    x = args[0]
    nonneg = x >= 0
    return (B.where(nonneg, 0.5 / B.where(x > 0, out, 1.0), 0.0) * ct,)


def _abs_vjp_jax(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.where(args[0] >= 0, B.ones_like(ct), -B.ones_like(ct)) * ct,)


def _log_softmax_vjp_no_exp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (ct - out * B.sum(ct, axis=-1, keepdims=True),)


def _reduce_mean_vjp_wrong_n(B: Any, args: tuple, out: Any, ct: Any, *, axis: int) -> tuple:
    shape = args[0].shape
    n = shape[1 - axis]
    return (B.broadcast_to(B.expand_dims(ct / n, axis), shape),)


def _concat_vjp_swapped(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    n0 = args[0].shape[0]
    n1 = args[1].shape[0]
    return (ct[n1 : n1 + n0], ct[:n1])


def _linear_vjp_bias_twice(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    W, _, x = args
    return (B.einsum("i,j->ij", ct, x), ct * 2, B.matmul(B.transpose(W, (1, 0)), ct))


def _scatter_vjp_drops_scalar(B: Any, args: tuple, out: Any, ct: Any, *, index: int) -> tuple:
    return (ct, ct[index] * 0)


def _scatter_scalar() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x, v = b.param("x", (4,)), b.param("v", ())
    y = b.apply("scatter_add_vec", x, v, index=1)
    return b.build(b.sum(y * y))


# lowering-only bugs: the reference rules stay right, what is compiled is wrong


def _tanh_lower_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return ((1 - out) * ct,)


def _relu_lower_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    import jax.numpy as jnp

    return jnp.where(args[0] >= 0, tangents[0], 0.0)


def _softmax_lower(B: Any, x: Any) -> Any:
    import jax

    return jax.nn.softmax(x, axis=0)


def _gather_lower_vjp(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
    import jax.numpy as jnp

    x = args[0]
    n = x.shape[0]
    return (jnp.zeros_like(x).at[jnp.minimum(idx, n - 1)].add(ct),)


def _gelu_lower_vjp_f32_only(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    (g,) = tl.get_op("gelu").vjp_rule(B, args, out, ct)
    if np.dtype(B.float_dtype) == np.float32:  # a slip in the float32 compilation only
        g = g * 1.001
    return (g,)


def _gelu_lower_one_ulp(B: Any, x: Any) -> Any:
    from torchlean_ir.ops.activations import GELU_A, GELU_C

    # the cubic coefficient one float32 ulp above the float32 nearest to 0.044715: the float32
    # constants model rounds both sides' constants, it does not compare within a tolerance
    a = float(np.nextafter(np.float32(GELU_A), np.float32(1)))
    return x * B.sigmoid(GELU_C * (x + a * x * x * x) * 2)


# lowering bugs in the lowerings that really exist: convolutions, every pool, the tiled windows


def _conv2d_graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    W, bias = b.param("W", (2, 1, 2, 2)), b.param("b", (2,))
    y = b.conv2d(W, bias, b.param("x", (1, 3, 3)), stride=1, padding=1)
    return b.build(b.sum(y * y))


def _conv_transpose2d_graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    W, bias = b.param("W", (1, 2, 2, 2)), b.param("b", (2,))
    y = b.conv_transpose2d(W, bias, b.param("x", (1, 2, 2)), stride=2, padding=0)
    return b.build(b.sum(y * y))


def _pool_graph(op: str, shape: tuple[int, ...], **attrs: Any) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        y = b.apply(op, b.param("x", shape), **attrs)
        return b.build(b.sum(y * y))

    return build


def _conv2d_lower_flipped(B: Any, W: Any, b: Any, x: Any, *, stride: Any, padding: Any,
                          groups: int = 1) -> Any:  # fmt: skip
    # a true convolution (the kernel flipped) where the op means cross-correlation
    from torchlean_ir.ops import conv

    return conv._conv_lower(B, W[:, :, ::-1, ::-1], b, x, (stride,) * 2, (padding,) * 2)


def _conv2d_lower_vjp_bias(
    B: Any, args: tuple, out: Any, ct: Any, *, stride: Any, padding: Any, groups: int = 1
) -> tuple:
    # the right pullback, but the bias gradient summed over the channels too
    import jax.numpy as jnp

    gW, gb, gx = _CONV2D_LOWER_VJP(B, args, out, ct, stride=stride, padding=padding,
                                   groups=groups)  # fmt: skip
    return (gW, jnp.full_like(gb, jnp.sum(ct)), gx)


_CONV2D_LOWER_VJP = tl.get_op("conv2d").lower_vjp_rule


def _conv_transpose2d_lower_unflipped(
    B: Any, W: Any, b: Any, x: Any, *, stride: Any, padding: Any
) -> Any:
    # the transpose convolution as a dilated convolution, without flipping the kernel
    from jax import lax

    from torchlean_ir.ops import conv

    y = lax.conv_general_dilated(
        x[None], B.swapaxes(W, 0, 1), window_strides=(1, 1),
        padding=[(k - 1 - padding, k - 1 - padding) for k in W.shape[2:]],
        lhs_dilation=(stride, stride), precision=lax.Precision.HIGHEST,
    )  # fmt: skip
    return y[0] + conv._bias(B, b, 2)


def _max_pool_lower_pad0(B: Any, x: Any, **attrs: Any) -> Any:
    # padded cells are 0, not -inf: they win over negative inputs
    from jax import lax

    from torchlean_ir.ops import pool

    g = pool._geometry(x.shape, attrs)
    padded = B.pad(x, [(0, 0), *((p, p) for p in g.P)])  # zeros
    init = np.array(-np.inf, x.dtype)
    return lax.reduce_window(padded, init, lax.max, (1, *g.K), (1, *g.S), "VALID")


def _max_pool_lower_vjp_last(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
    # at a tie the last maximum of the window takes the cotangent, not the first
    from torchlean_ir.ops import pool

    g = pool._geometry(args[0].shape, attrs)
    w = g.windows(B, args[0])
    valid = g.valid(B)
    valid = None if valid is None else valid[..., ::-1]
    onehot = B.first_max_onehot(w[..., ::-1], axis=-1, valid=valid)[..., ::-1]
    return (g.unwindows(B, onehot * B.expand_dims(ct, -1)),)


def _avg_pool_lower_exclude_pad(B: Any, x: Any, **attrs: Any) -> Any:
    # divides by the cells inside the input (PyTorch's count_include_pad=False), not the window
    import jax.numpy as jnp
    from jax import lax

    from torchlean_ir.ops import pool

    g = pool._geometry(x.shape, attrs)
    pads = ((0, 0), *((p, p) for p in g.P))
    total = lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, *g.K), (1, *g.S), pads)
    count = lax.reduce_window(jnp.ones_like(x), np.array(0, x.dtype), lax.add, (1, *g.K),
                              (1, *g.S), pads)  # fmt: skip
    return total / count


def _avg_pool2d_lower_one_side(B: Any, x: Any, **attrs: Any) -> Any:
    # divides by one side of the window (kH), not its size
    from jax import lax

    kh, kw = attrs["kernel"]
    s = attrs["stride"]
    total = lax.reduce_window(x, np.array(0, x.dtype), lax.add, (1, kh, kw), (1, s, s), "VALID")
    return total / kh


def _tiled_unwindows_transposed() -> Iterator[None]:
    # the compiled (JAX) pooling VJPs: tiling windows put back transposed within each window
    from torchlean_ir.ops import _windows, pool

    real = _windows.unwindows

    def unwindows(B: Any, w: Any, kernel: Any, stride: Any, full: Any) -> Any:
        if getattr(B, "name", "") != "jax" or tuple(kernel) != tuple(stride) or len(kernel) != 2:
            return real(B, w, kernel, stride, full)
        c, o1, o2 = w.shape[:3]
        k1, k2 = kernel
        split = B.reshape(w, (c, o1, o2, k1, k2))
        cells = B.reshape(B.transpose(split, (0, 1, 4, 2, 3)), (c, o1 * k2, o2 * k1))
        rest = [(0, 0), (0, full[0] - o1 * k1), (0, full[1] - o2 * k2)]
        return B.pad(cells, rest) if any(r for _, r in rest) else cells

    yield from _set(pool, "unwindows", unwindows)


# float32-only and float64-only lowering slips: what runs in the other dtype is right


def _tanh_lower_vjp_f32_slip(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    import jax.numpy as jnp

    scale = 1.001 if B.float_dtype == jnp.float32 else 1.0
    return ((1 - out * out) * ct * scale,)


def _tanh_lower_vjp_f64_slip(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    import jax.numpy as jnp

    scale = 1.001 if B.float_dtype == jnp.float64 else 1.0
    return ((1 - out * out) * ct * scale,)


def _unary_in(dtype: str, op: str, xs: tuple[int, ...]) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder(dtype)
        y = b.apply(op, b.param("x", xs))
        return b.build(b.sum(y * y))

    return build


# index bugs: a rule wrong at one index value (any natural: the tensor level quantifies)


def index_mutant(value: int, *, n: int = 3, static: bool = False) -> Mutant:
    """``gather_scalar_nat``'s VJP wrong at the index value ``value`` only: the cotangent of
    ``x[value]`` goes to ``x[0]`` (out of range, where none should go anywhere) or to ``x[0]``
    instead of ``x[value]`` (in range). The graph reads ``x (n,)`` at a runtime index ``i``, or
    at the static index ``value`` with ``static``."""
    real = tl.get_op("gather_scalar_nat").vjp_rule

    def vjp(B: Any, args: tuple, out: Any, ct: Any, *, i: Any) -> tuple:
        (g,) = real(B, args, out, ct, i=i)  # type: ignore[misc]
        hit = ct * B.to_float(i == value)
        first = B.asarray(np.eye(n)[0])
        moved = first * hit if value >= n else (first - B.asarray(np.eye(n)[value])) * hit
        return (g + moved,)

    def graph() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        x = b.param("x", (n,))
        i = b.index("i", value=value) if static else b.index("i")
        y = b.gather_scalar_nat(x.tanh(), i)
        return b.build(y * y)

    where = "in range" if value < n else "out of range"
    kind = "static" if static else "runtime"
    return Mutant(f"gather_scalar_nat vjp wrong at the {kind} index {value} ({where})", "rule",
                  graph, _rule("gather_scalar_nat", "vjp_rule", vjp),
                  note=f"only at index value {value}")  # fmt: skip


def index_vector_mutant(value: int) -> Mutant:
    """``gather_rows_nat``'s VJP wrong when a position of the runtime index vector holds
    ``value`` (past the 3 rows: nothing should be sent anywhere): that position's cotangent row
    goes to row 0. Only that one value of every natural shows the bug."""
    real = tl.get_op("gather_rows_nat").vjp_rule

    def vjp(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
        (g,) = real(B, args, out, ct, idx=idx)  # type: ignore[misc]
        hit = B.reshape(B.to_float(idx == value), (3, 1))
        row0 = B.reshape(B.asarray(np.eye(3)[0]), (3, 1))
        return (g + B.matmul(row0, B.reshape(B.sum(ct * hit, axis=0), (1, 2))),)

    return Mutant(f"gather_rows_nat vjp wrong at the runtime index value {value}", "rule",
                  _gather, _rule("gather_rows_nat", "vjp_rule", vjp),
                  note=f"only where a position holds {value}")  # fmt: skip


def _tanh_vjp_shifted(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    y = B.tanh(args[0] + 1e-300)  # off by far less than any float can show
    return ((1 - y * y) * ct,)


#: A VJP whose error is real but below every float: ``tanh`` evaluated at ``x + 1e-300``.
BELOW_FLOATS = Mutant("tanh vjp at x + 1e-300", "rule", _unary("tanh", (4,)),
                      _rule("tanh", "vjp_rule", _tanh_vjp_shifted),
                      note="a difference of about 1e-300")  # fmt: skip


_SOFTMAX_VJP = tl.get_op("softmax").vjp_rule


def _softmax_vjp_last_row(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    (g,) = _SOFTMAX_VJP(B, args, out, ct)  # type: ignore[misc]
    n = out.shape[0]
    last = B.asarray((np.arange(n) == n - 1).reshape(n, 1))
    return (B.where(last, out * ct, g),)  # the last row without the centering term


#: A 128x128 softmax whose VJP is wrong in its last row only.
SOFTMAX_LAST_ROW = Mutant("softmax vjp wrong in its last row (128x128)", "rule",
                          _unary("softmax", (128, 128)),
                          _rule("softmax", "vjp_rule", _softmax_vjp_last_row),
                          note="row 127 of 128")  # fmt: skip


# tape bugs: the per-node rules are right, the wiring between them is not


def _tape_overwrite() -> Iterator[None]:
    from compiler import _lower

    def acc(cts: list, v: int, g: Any) -> None:
        cts[v] = g

    yield from _set(_lower, "_acc", acc)


class _DiffDetach:
    """The detach op as the compiler would see it if it forgot that detach stops gradient."""

    def __init__(self, op: tl.Op) -> None:
        self._op = op

    def __getattr__(self, name: str) -> Any:
        return getattr(self._op, name)

    def is_diff_arg(self, i: int) -> bool:
        return True


def _tape_detach_leak() -> Iterator[None]:
    import jax.numpy as jnp

    from compiler import _tape

    real_get_op = _tape.get_op

    def get_op(name: str) -> Any:
        op = real_get_op(name)
        return _DiffDetach(op) if name == "detach" else op

    op = tl.get_op("detach")
    with ExitStack() as stack:
        stack.enter_context(_patched(_tape, "get_op", get_op))
        stack.enter_context(_patched(op, "lower_vjp_rule", lambda B, a, o, ct: (jnp.asarray(ct),)))
        stack.enter_context(_patched(op, "lower_jvp_rule", lambda B, a, t, o: t[0]))
        yield


def _tape_swap_parents() -> Iterator[None]:
    from compiler import _tape

    prop = _tape.TapeEntry.receiving_parents

    def swapped(self: Any) -> tuple[int, ...]:
        got = prop.fget(self)
        return tuple(reversed(got)) if self.op == "sub" else got

    yield from _set(_tape.TapeEntry, "receiving_parents", property(swapped))


def _tape_drop_vjp() -> Iterator[None]:
    import dataclasses

    from compiler import _compiled

    real = _compiled.build_tape

    def build(*args: Any, **kw: Any) -> Any:
        tape = real(*args, **kw)
        # the first node's VJP is skipped: its parents get nothing from it
        return (dataclasses.replace(tape[0], vjp=None), *tape[1:])

    yield from _set(_compiled, "build_tape", build)


def _tape_seed_twice() -> Iterator[None]:
    from compiler import _lower

    real = _lower._acc
    # per trace (each backward pass has its own cotangent list, kept alive here so that its id
    # is not reused): every trace is mutated, the verifier's and the numeric checkers' alike
    traces: dict[int, tuple[list, set[int]]] = {}

    def acc(cts: list, v: int, g: Any) -> None:
        real(cts, v, g)
        seen = traces.setdefault(id(cts), (cts, set()))[1]
        if v not in seen and cts[v] is g:  # the first contribution to each value counts twice
            seen.add(v)
            real(cts, v, g)

    yield from _set(_lower, "_acc", acc)


def _sub_graph() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x, y = b.param("a", (3,)), b.param("b", (3,))
    d = b.sub(x.tanh(), y)
    return b.build(b.sum(d * d))


def _small_attention() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    Ws = [b.param(name, (4, 4)) for name in ("Wq", "Wk", "Wv", "Wo")]
    x = b.param("x", (3, 4))
    causal = np.tril(np.ones((3, 3), dtype=bool))
    return b.build(b.apply("multi_head_attention", *Ws, x, heads=2, mask=causal))


def _attention_vjp_uncentered(B: Any, args: tuple, out: Any, ct: Any, *, heads: int,
                              mask: Any = None) -> tuple:  # fmt: skip
    """The attention vjp with ``gS = P gP`` (the softmax's ``- sum_k P_k gP_k`` dropped)."""
    from torchlean_ir.ops import attention as A

    Wq, Wk, Wv, Wo, x = args
    Q, K, V, P, O = A._attend(B, Wq, Wk, Wv, x, heads, mask)
    gWo = B.einsum("ia,ib->ab", A._merge(B, O), ct)
    gO = A._split(B, B.matmul(ct, B.transpose(Wo, (1, 0))), heads)
    gP = B.einsum("hid,hjd->hij", gO, V)
    gV = B.einsum("hij,hid->hjd", P, gO)
    gS = P * gP * A._scale(Wq, heads)
    gQ = A._merge(B, B.einsum("hij,hjd->hid", gS, K))
    gK = A._merge(B, B.einsum("hij,hid->hjd", gS, Q))
    gVm = A._merge(B, gV)
    gx = (B.matmul(gQ, B.transpose(Wq, (1, 0))) + B.matmul(gK, B.transpose(Wk, (1, 0)))
          + B.matmul(gVm, B.transpose(Wv, (1, 0))))  # fmt: skip
    xT = B.transpose(x, (1, 0))
    return (B.matmul(xT, gQ), B.matmul(xT, gK), B.matmul(xT, gVm), gWo, gx)


def _blocked_attention() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    Ws = [b.param(name, (4, 4)) for name in ("Wq", "Wk", "Wv", "Wo")]
    x = b.param("x", (3, 4))
    mask = np.tril(np.ones((3, 3), dtype=bool))
    mask[1] = False  # query 1 attends to nothing: its output row is 0
    return b.build(b.apply("multi_head_attention", *Ws, x, heads=2, mask=mask))


def _attention_lower_unguarded(B: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, x: Any, *,
                               heads: int, mask: Any = None) -> Any:  # fmt: skip
    """A masked softmax without ``where(any, max, 0)``: a row with no allowed key computes
    ``exp(-inf - -inf)`` = NaN where the op says 0."""
    import jax
    import jax.numpy as jnp

    from torchlean_ir.ops import attention as A

    valid = mask.to_numpy().astype(bool)
    Q, K, V = (A._split(B, x @ W, heads) for W in (Wq, Wk, Wv))
    s = jnp.where(valid, jnp.einsum("hid,hjd->hij", Q, K) * A._scale(Wq, heads), -jnp.inf)
    e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    total = jnp.where(valid.any(-1, keepdims=True), jnp.sum(e, axis=-1, keepdims=True), 1.0)
    return A._merge(B, jnp.einsum("hij,hjd->hid", e / total, V)) @ Wo


def _attention_lower_unmasked(B: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, x: Any, *,
                              heads: int, mask: Any = None) -> Any:  # fmt: skip
    """The compiled forward with the causal mask left out."""
    from torchlean_ir.ops import attention as A

    return A.multi_head_attention_forward(B, Wq, Wk, Wv, Wo, x, heads=heads, mask=None)


MUTANTS: list[Mutant] = [
    Mutant("sub vjp sign flip", "rule", _binary("sub", (3,), (3,)),
           _rule("sub", "vjp_rule", _sub_vjp_sign)),
    Mutant("mse_loss vjp missing factor 2", "rule", _binary("mse_loss", (2, 3), (2, 3)),
           _rule("mse_loss", "vjp_rule", _mse_vjp_no_2)),
    Mutant("matmul vjp transposed", "rule", _binary("matmul", (3, 3), (3, 3)),
           _rule("matmul", "vjp_rule", _matmul_vjp_transposed)),
    Mutant("broadcast_to vjp wrong axis", "rule", _unary("broadcast_to", (3, 1), shape=(3, 3)),
           _rule("broadcast_to", "vjp_rule", _broadcast_vjp_wrong_axis)),
    Mutant("slice vjp off by one", "rule", _unary("slice", (5, 2), start=1, length=2),
           _rule("slice", "vjp_rule", _slice_vjp_off_by_one)),
    Mutant("softmax jvp over the wrong axis", "rule", _unary("softmax", (2, 3)),
           _rule("softmax", "jvp_rule", _softmax_jvp_axis0)),
    Mutant("relu'(0) = 1", "rule", _unary("relu", (4,)),
           _rule("relu", "vjp_rule", _relu_vjp_at_zero), note="only at the kink x = 0"),
    Mutant("max tie sent all to one side", "rule", _binary("max", (3,), (3,)),
           _rule("max", "vjp_rule", _max_vjp_tie_to_a), note="only at ties a = b"),
    Mutant("tanh vjp 0.05% scale error", "rule", _unary("tanh", (4,)),
           _rule("tanh", "vjp_rule", _tanh_vjp_scaled)),
    Mutant("one wrong element in a 32x32 gradient", "rule", _matmul32,
           _rule("mul", "vjp_rule", _mul_vjp_one_element), note="element [17, 5], 0.1%"),
    Mutant("gradient to an out-of-range gather index", "rule", _gather,
           _rule("gather_rows_nat", "vjp_rule", _gather_vjp_clip), index={"idx": [0, 5, 1]},
           note="index values 3 and beyond"),
    Mutant("layer_norm vjp with eps 1e-6", "rule", _layer_norm,
           _rule("layer_norm", "vjp_rule", _layer_norm_vjp_eps)),
    Mutant("sigmoid jvp sign error", "rule", _unary("sigmoid", (3,)),
           _rule("sigmoid", "jvp_rule", _sigmoid_jvp_sign)),
    Mutant("clamp derivative 1 at the bounds", "rule", _unary("clamp", (4,), lo=-0.5, hi=0.5),
           _rule("clamp", "vjp_rule", _clamp_vjp_bounds), note="only at x = lo, hi"),
    Mutant("sqrt'(0) = 1/2", "rule", _unary("sqrt", (3,)),
           _rule("sqrt", "vjp_rule", _sqrt_vjp_at_zero), note="only at x = 0"),
    Mutant("abs'(0) = 1 (JAX convention)", "rule", _unary("abs", (3,)),
           _rule("abs", "vjp_rule", _abs_vjp_jax), note="only at x = 0"),
    Mutant("log_softmax vjp missing exp", "rule", _unary("log_softmax", (2, 3)),
           _rule("log_softmax", "vjp_rule", _log_softmax_vjp_no_exp)),
    Mutant("reduce_mean vjp divides by the wrong n", "rule", _unary("reduce_mean", (2, 3), axis=0),
           _rule("reduce_mean", "vjp_rule", _reduce_mean_vjp_wrong_n)),
    Mutant("concat vjp slices swapped", "rule", _binary("concat", (2,), (2,)),
           _rule("concat", "vjp_rule", _concat_vjp_swapped)),
    Mutant("linear vjp bias gradient doubled", "rule", _mlp,
           _rule("linear", "vjp_rule", _linear_vjp_bias_twice)),
    Mutant("scatter_add_vec vjp drops the 0-d argument's gradient", "rule", _scatter_scalar,
           _rule("scatter_add_vec", "vjp_rule", _scatter_vjp_drops_scalar),
           note="a 0-d leaf: its reads were once invisible to the tensor level"),
    Mutant("tanh lowered vjp 1 - y", "lowering", _unary("tanh", (3,)),
           _rule("tanh", "lower_vjp_rule", _tanh_lower_vjp)),
    Mutant("relu lowered jvp with x >= 0", "lowering", _unary("relu", (3,)),
           _rule("relu", "lower_jvp_rule", _relu_lower_jvp), note="only at x = 0"),
    Mutant("softmax lowered over axis 0", "lowering", _unary("softmax", (2, 3)),
           _rule("softmax", "lower_rule", _softmax_lower)),
    Mutant("attention vjp without the softmax centering", "rule", _small_attention,
           _rule("multi_head_attention", "vjp_rule", _attention_vjp_uncentered),
           note="softmax rows as atoms: refuted at a concrete element"),
    Mutant("attention lowered without its causal mask", "lowering", _small_attention,
           _rule("multi_head_attention", "lower_rule", _attention_lower_unmasked)),
    Mutant("attention lowered softmax without the empty-row guard", "lowering",
           _blocked_attention,
           _rule("multi_head_attention", "lower_rule", _attention_lower_unguarded),
           note="NaN in the row with no allowed key; was VERIFIED (max(-oo, ...) read as nan, "
           "then -oo - nan as -oo)"),
    Mutant("gather lowered vjp clips indices", "lowering", _gather,
           _rule("gather_rows_nat", "lower_vjp_rule", _gather_lower_vjp), index={"idx": [0, 5, 1]},
           note="index values 3 and beyond"),
    Mutant("gelu lowered vjp 0.1% off in float32 only", "lowering",
           _unary("gelu", (4,), dtype="f32"),
           _rule("gelu", "lower_vjp_rule", _gelu_lower_vjp_f32_only),
           note="a float32 graph: caught by the default run (the graph's own dtype)"),
    Mutant("gelu lowered with a constant one float32 ulp off", "lowering",
           _unary("gelu", (4,), dtype="f32"), _rule("gelu", "lower_rule", _gelu_lower_one_ulp),
           note="0.044715 one float32 ulp too large, in a float32 graph"),
    Mutant("conv2d lowered as a true convolution (kernel flipped)", "lowering", _conv2d_graph,
           _rule("conv2d", "lower_rule", _conv2d_lower_flipped)),
    Mutant("conv2d lowered vjp sums the bias gradient over channels", "lowering", _conv2d_graph,
           _rule("conv2d", "lower_vjp_rule", _conv2d_lower_vjp_bias)),
    Mutant("conv_transpose2d lowered without the kernel flip", "lowering",
           _conv_transpose2d_graph,
           _rule("conv_transpose2d", "lower_rule", _conv_transpose2d_lower_unflipped)),
    Mutant("max_pool lowered pads with 0, not -inf", "lowering",
           _pool_graph("max_pool", (1, 3, 3), kernel=(2, 2), stride=(1, 1), padding=(1, 1)),
           _rule("max_pool", "lower_rule", _max_pool_lower_pad0), note="negative inputs only"),
    Mutant("max_pool2d lowered vjp: a tie to the last maximum", "lowering",
           _pool_graph("max_pool2d", (1, 3, 3), kernel=(2, 2), stride=1),
           _rule("max_pool2d", "lower_vjp_rule", _max_pool_lower_vjp_last), note="only at ties"),
    Mutant("max_pool2d_pad lowered pads with 0, not -inf", "lowering",
           _pool_graph("max_pool2d_pad", (1, 2, 2), kernel=(2, 2), stride=1, padding=1),
           _rule("max_pool2d_pad", "lower_rule", _max_pool_lower_pad0),
           note="negative inputs only"),
    Mutant("avg_pool lowered excludes padding from the divisor", "lowering",
           _pool_graph("avg_pool", (1, 3), kernel=(2,), stride=(1,), padding=(1,)),
           _rule("avg_pool", "lower_rule", _avg_pool_lower_exclude_pad)),
    Mutant("avg_pool2d lowered divides by one side of the window", "lowering",
           _pool_graph("avg_pool2d", (1, 4, 4), kernel=(2, 2), stride=2),
           _rule("avg_pool2d", "lower_rule", _avg_pool2d_lower_one_side)),
    Mutant("avg_pool2d_pad lowered excludes padding from the divisor", "lowering",
           _pool_graph("avg_pool2d_pad", (1, 2, 2), kernel=(2, 2), stride=1, padding=1),
           _rule("avg_pool2d_pad", "lower_rule", _avg_pool_lower_exclude_pad)),
    Mutant("compiled tiled-window vjp transposes each window", "lowering",
           _pool_graph("max_pool2d", (1, 4, 4), kernel=(2, 2), stride=2),
           _tiled_unwindows_transposed, note="stride = kernel (the tiled path), JAX only"),
    Mutant("float32-only: tanh lowered vjp 0.1% off (h17)", "lowering",
           _unary_in("f32", "tanh", (3,)),
           _rule("tanh", "lower_vjp_rule", _tanh_lower_vjp_f32_slip),
           note="only in the float32 compilation"),
    Mutant("float64-only: tanh lowered vjp 0.1% off (h17)", "lowering",
           _unary_in("f64", "tanh", (3,)),
           _rule("tanh", "lower_vjp_rule", _tanh_lower_vjp_f64_slip),
           note="only in the float64 compilation"),
    Mutant("tape overwrites on fan-out", "tape", _fanout, _tape_overwrite),
    Mutant("tape leaks gradient through detach", "tape", _detach, _tape_detach_leak),
    Mutant("tape swaps the cotangents of sub", "tape", _sub_graph, _tape_swap_parents),
    Mutant("tape skips a node's vjp", "tape", _mlp, _tape_drop_vjp),
    Mutant("tape counts a contribution twice", "tape", _fanout, _tape_seed_twice),
]  # fmt: skip


# -- mutants that only show at scale -----------------------------------------------------------
# Past the element method's limit (60000 argument elements): the tensor level decides them, and
# the counterexample names the wrong element. ``element`` is the pattern it must match.

_BIG = 1024
_SCALE_ONE = np.ones((_BIG, _BIG))
_SCALE_ONE[517, 300] = 1.001  # one element of the gradient 0.1% off


def _matmul_vjp_one_element(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    a, b = args
    return (B.matmul(ct, B.transpose(b, (1, 0))) * B.asarray(_SCALE_ONE),
            B.matmul(B.transpose(a, (1, 0)), ct))  # fmt: skip


def _matmul_lower_vjp_last_row(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    import jax.numpy as jnp
    from jax import lax

    a, b = args
    ga = ct @ b.T
    row = lax.broadcasted_iota(jnp.int32, ga.shape, 0)
    # a loop bound off by one: the last row of the gradient is never written
    return (jnp.where(row < ga.shape[0] - 1, ga, 0.0), a.T @ ct)


def _conv2d_vjp_undilated(B: Any, args: tuple, out: Any, ct: Any, *, stride: Any,
                          padding: Any, groups: int = 1) -> tuple:  # fmt: skip
    from torchlean_ir.ops import _windows as w

    W, _, x = args
    d = x.ndim - 1
    S, P = w.per_dim(stride, d), w.per_dim(padding, d)
    sp = w.spatial_letters(d)
    xp = w.pad_spatial(B, x, P)
    O, K = ct.shape[1:], W.shape[2:]
    views = [w.window_view(xp, off, S, O) for off in w.offsets(K)]
    gW = w.stack(B, [B.einsum(f"f{sp},c{sp}->fc", ct, v) for v in views], -1)
    gxp = None
    for off in w.offsets(K):
        back = B.einsum(f"fc,f{sp}->c{sp}", W[(slice(None), slice(None), *off)], ct)
        # the cotangent is placed without dilating it by the stride: right only at stride 1
        term = w.place(B, back, off, (1,) * d, xp.shape[1:])
        gxp = term if gxp is None else gxp + term
    gx = w.crop_spatial(gxp, P, x.shape[1:])
    return (B.reshape(gW, W.shape), B.sum(ct, axis=tuple(range(1, d + 1))), gx)


def _conv2d_vjp_next_group(B: Any, args: tuple, out: Any, ct: Any, *, stride: Any,
                           padding: Any, groups: int = 1) -> tuple:  # fmt: skip
    from torchlean_ir.ops import _windows as w
    from torchlean_ir.ops import conv

    S, P = w.per_dim(stride, 2), w.per_dim(padding, 2)
    gW, gb, _ = conv._conv_vjp(B, args, ct, S, P, groups)
    # the input gradient of channel block g reads the output block g + 1 (mod groups): a group
    # offset off by one block, invisible with one group (the roll is then the identity)
    shift = (ct.shape[0] // groups) % ct.shape[0]
    rolled = B.concatenate([ct[shift:], ct[:shift]], 0) if shift else ct
    _, _, gx = conv._conv_vjp(B, args, rolled, S, P, groups)
    return (gW, gb, gx)


def _avg_pool_vjp_exclude_pad(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
    from torchlean_ir.ops.pool import _geometry

    g = _geometry(args[0].shape, attrs)
    n = int(np.prod(g.K))
    # divides by the window's cells inside the input (count_include_pad=False), while the
    # forward divides by the full window: wrong only for windows over the padding border
    counts = g.valid(B).sum(axis=-1).astype(np.float64)
    return (g.unwindows(B, B.broadcast_to(B.expand_dims(ct / B.asarray(counts), -1),
                                          (*ct.shape, n))),)  # fmt: skip


_ROW = 77  # the attention row whose causal mask is off by one


def _attention_lower_mask_row(B: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, x: Any, *,
                              heads: int, mask: Any = None) -> Any:  # fmt: skip
    import jax
    import jax.numpy as jnp
    from jax import lax

    n = x.shape[0]
    i = lax.broadcasted_iota(jnp.int32, (n, n), 0)
    j = lax.broadcasted_iota(jnp.int32, (n, n), 1)
    allowed = (j <= i) | ((i == _ROW) & (j == _ROW + 1))  # row 77 also sees key 78
    split = lambda m: m.reshape(n, heads, -1).transpose(1, 0, 2)  # noqa: E731
    Q, K, V = split(x @ Wq), split(x @ Wk), split(x @ Wv)
    s = jnp.einsum("hid,hjd->hij", Q, K) / np.sqrt(Q.shape[-1])
    P = jax.nn.softmax(jnp.where(allowed, s, -jnp.inf), axis=-1)
    O = jnp.einsum("hij,hjd->hid", P, V).transpose(1, 0, 2).reshape(n, -1)
    return O @ Wo


def _reduce_sum_vjp_wrong_axis(B: Any, args: tuple, out: Any, ct: Any, *, axis: int) -> tuple:
    m, n = args[0].shape  # (512, 768), axis 0: ct is (768,)
    # broadcast along the wrong axis, then reshaped to fit: the shapes agree, the values do not
    return (B.reshape(B.broadcast_to(B.expand_dims(ct, 1), (n, m)), (m, n)),)


def _big_matmul(m: int, k: int, n: int) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        x, y = b.param("a", (m, k)), b.param("b", (k, n))
        out = b.matmul(x, y)
        return b.build(b.sum(out * out))

    return build


def _big_conv(stride: int) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        W, bias = b.param("W", (64, 64, 3, 3)), b.param("b", (64,))
        x = b.param("x", (64, 32, 32))
        y = b.apply("conv2d", W, bias, x, stride=stride, padding=1)
        return b.build(b.sum(y * y))

    return build


def _big_grouped_conv(groups: int) -> Callable[[], tl.GraphData]:
    def build() -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        W, bias = b.param("W", (64, 64 // groups, 1, 1)), b.param("b", (64,))
        y = b.apply("conv2d", W, bias, b.param("x", (64, 32, 32)), padding=0, groups=groups)
        return b.build(b.sum(y * y))

    return build


def _big_avg_pool() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (64, 32, 32))
    y = b.apply("avg_pool2d_pad", x, kernel=(3, 3), stride=1, padding=1)
    return b.build(b.sum(y * y))


def _big_attention() -> tl.GraphData:
    n, d, heads = 128, 768, 12
    b = tl.GraphBuilder("f64")
    Ws = [b.param(name, (d, d)) for name in ("Wq", "Wk", "Wv", "Wo")]
    x = b.param("x", (n, d))
    causal = np.tril(np.ones((n, n), dtype=bool))
    y = b.apply("multi_head_attention", *Ws, x, heads=heads, mask=causal)
    return b.build(b.sum(y * y))


def _big_reduce_sum() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (512, 768))
    y = b.apply("reduce_sum", x, axis=0)
    return b.build(b.sum(y * y))


def _big_gather() -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (1024, 768))
    y = b.gather_rows_nat(x, b.index("idx", 512))
    return b.build(b.sum(y * y))


def _gather_lower_vjp_drops_last(B: Any, args: tuple, out: Any, ct: Any, *, idx: Any) -> tuple:
    import jax.numpy as jnp

    x = args[0]
    n = x.shape[0]
    i = jnp.asarray(idx)
    i = jnp.where(i < n, i, n)
    return (jnp.zeros_like(x).at[i[:-1]].add(ct[:-1], mode="drop"),)  # the last position lost


@dataclass(frozen=True)
class LargeMutant(Mutant):
    """A mutant on tensors past the element method's limit; ``element`` is a regular
    expression the counterexample's element must match (the wrong element named), ``twin`` a
    graph the same bug must not show in (it verifies with the bug in place)."""

    element: str = ""
    twin: Callable[[], tl.GraphData] | None = None


LARGE_MUTANTS: list[LargeMutant] = [
    LargeMutant("one element 0.1% off in a 1024x1024 gradient", "rule",
                _big_matmul(1024, 1024, 1024),
                _rule("matmul", "vjp_rule", _matmul_vjp_one_element),
                note="element [517, 300], 0.1%", element=r"grad a\[517,300\]"),
    LargeMutant("matmul lowered vjp drops the last row", "lowering", _big_matmul(1024, 512, 768),
                _rule("matmul", "lower_vjp_rule", _matmul_lower_vjp_last_row),
                note="last row of a 1024x512 gradient", element=r"grad a\[1023,\d+\]"),
    LargeMutant("conv2d vjp without stride dilation", "rule", _big_conv(2),
                _rule_and_lowering("conv2d", "vjp_rule", _conv2d_vjp_undilated),
                note="only at stride 2 (64 channels, 32x32); rule and lowering",
                element=r"grad x\[\d+,\d+,\d+\]",
                twin=_big_conv(1)),
    LargeMutant("grouped conv2d vjp reads the next group's cotangent", "rule",
                _big_grouped_conv(2), _rule("conv2d", "vjp_rule", _conv2d_vjp_next_group),
                note="1x1, 2 groups of 32 channels (ShuffleNet's pointwise convolutions), "
                "32x32; verifies with one group (a padded 3x3 costs 9 s more to refute)",
                element=r"grad x\[\d+,\d+,\d+\]", twin=_big_grouped_conv(1)),
    LargeMutant("avg_pool2d_pad vjp excludes the padding", "rule", _big_avg_pool,
                _rule("avg_pool2d_pad", "vjp_rule", _avg_pool_vjp_exclude_pad),
                note="only windows over the border (64x32x32, padding 1)",
                element=r"grad x\[\d+,(0|1|30|31),\d+\]|grad x\[\d+,\d+,(0|1|30|31)\]"),
    LargeMutant("attention lowered causal mask off by one in one row", "lowering", _big_attention,
                _rule("multi_head_attention", "lower_rule", _attention_lower_mask_row),
                note=f"only row {_ROW} (n 128, d 768, 12 heads)", element=rf"out\[{_ROW},\d+\]"),
    LargeMutant("gather lowered vjp drops the last of 512 positions", "lowering", _big_gather,
                _rule("gather_rows_nat", "lower_vjp_rule", _gather_lower_vjp_drops_last),
                index={"idx": [(7 * p) % 1100 for p in range(512)]},
                note="1024x768, 512 runtime positions: only rows the last position reads",
                element=r"grad x\[\d+,\d+\]"),
    LargeMutant("reduce_sum vjp broadcasts along the wrong axis", "rule", _big_reduce_sum,
                _rule("reduce_sum", "vjp_rule", _reduce_sum_vjp_wrong_axis),
                note="512x768, reshaped to fit", element=r"grad x\[\d+,\d+\]"),
]  # fmt: skip
