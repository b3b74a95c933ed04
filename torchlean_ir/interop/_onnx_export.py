"""ONNX out: ``to_onnx(graph, params)``.

Each of our ops maps through :data:`ONNX_EXPORTS` to ONNX nodes. The model takes the batch the
way ONNX models do: every input leaf and runtime index input named in ``batched`` (by default
all of them) gets a leading dimension ``N``; parameters are initializers without it. An
exporter sees, per argument, whether it carries the batch axis, and emits nodes that compute
the per-sample op on each sample (ONNX's NumPy broadcasting does most of it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._graph import GraphData, Node
from .._registry import get_op
from ._common import Mapping as Entry
from ._trace import InteropError, Refused

#: The opset exported models declare, unless an op needs a later one (``ONNX_EXPORTS`` notes).
EXPORT_OPSET = 18

Exporter = Callable[["_Ex", Node, list[str], list[bool]], str]

#: Our op -> its ONNX form (filled in below by ``@_exports``).
ONNX_EXPORTS: dict[str, Entry] = {}
#: Ops needing a later opset than EXPORT_OPSET.
OPSET_NEEDED: dict[str, int] = {}
#: Our ops with no ONNX form, and why.
NOT_EXPORTED: dict[str, str] = {
    "rand_uniform": "ONNX RandomUniform draws from an implementation-defined generator, not "
    "SplitMix64",
    "bernoulli_mask": "ONNX Bernoulli draws from an implementation-defined generator, not "
    "SplitMix64",
}


class _Ex:
    """One export: the ONNX nodes and initializers so far, and fresh names."""

    def __init__(self, np_dtype: Any, elem: int) -> None:
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.np_dtype = np_dtype
        self.elem = elem
        self._k = 0
        self.node: Node | None = None
        self.shapes: list[tuple[int, ...]] = []  # per-sample shapes of the current arguments
        self.out_shape: tuple[int, ...] = ()
        self.shapes_index: list[tuple[int, ...]] = []  # shapes of the current index arguments

    def fresh(self, hint: str = "t") -> str:
        self._k += 1
        return f"_{hint}{self._k}"

    def add(self, op: str, ins: Sequence[str], **attrs: Any) -> str:
        from onnx import helper

        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, list(ins), [out], **attrs))
        return out

    def ints(self, values: Sequence[int] | int, hint: str = "i") -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
        return name

    def floats(self, values: Any, hint: str = "c") -> str:
        """A float constant: a ``Constant`` node (initializers are parameters)."""
        from onnx import numpy_helper

        arr = np.asarray(values, dtype=self.np_dtype)
        return self.add("Constant", [], value=numpy_helper.from_array(arr, self.fresh(hint)))

    def bools(self, values: Any, hint: str = "m") -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(values, dtype=bool), name))
        return name

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        return self.add("Unsqueeze", [x, self.ints(list(axes))])

    def squeeze(self, x: str, axes: Sequence[int]) -> str:
        return self.add("Squeeze", [x, self.ints(list(axes))])

    def with_batch(self, x: str, b: bool, fn: Callable[[str], str]) -> str:
        """Run ``fn`` (ONNX ops that need a batch axis: Conv, pools) on x, adding and removing
        a batch of one when x has none."""
        if b:
            return fn(x)
        return self.squeeze(fn(self.unsqueeze(x, [0])), [0])

    def batch_like(self, x: str, ref: str, shape: Sequence[int]) -> str:
        """An unbatched x of per-sample ``shape`` repeated along the batch of ``ref``."""
        n = self.add("Slice", [self.add("Shape", [ref]), self.ints([0]), self.ints([1])])
        target = self.add("Concat", [n, self.ints(list(shape))], axis=0)
        return self.add("Expand", [self.unsqueeze(x, [0]), target])


#: Per op, the arguments ONNX needs without a batch axis (weights, statistics).
UNBATCHED_ARGS: dict[str, tuple[str, ...]] = {}


def _exports(
    *ops: str,
    onnx: str,
    note: str = "",
    opset: int | None = None,
    unbatched: tuple[str, ...] = (),
) -> Callable[[Exporter], Exporter]:
    def deco(fn: Exporter) -> Exporter:
        for op in ops:
            ONNX_EXPORTS[op] = Entry(fn, note, onnx)
            if opset is not None:
                OPSET_NEEDED[op] = opset
            if unbatched:
                UNBATCHED_ARGS[op] = unbatched
        return fn

    return deco


# -- elementwise ------------------------------------------------------------------------------

_SAME = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "max": "Max",
    "min": "Min",
    "abs": "Abs",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "exp": "Exp",
    "log": "Log",
    "inv": "Reciprocal",
    "softplus": "Softplus",
    "erf": "Erf",
    "matmul": "MatMul",
    "bmm": "MatMul",
    "detach": "Identity",
}


@_exports(
    *_SAME,
    onnx="the op of the same name (inv: Reciprocal, bmm: MatMul, detach: Identity)",
    note="NumPy broadcasting carries the batch; detach loses its no-gradient "
    "meaning (ONNX graphs carry no gradients)",
)
def _same(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add(_SAME[node.op], ins)


@_exports("sqrt", onnx="Relu, Sqrt", note="sqrt(max(x, 0)): ours is 0 for x <= 0")
def _sqrt(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Sqrt", [ctx.add("Relu", ins)])


def _power(ctx: _Ex, x: str, p: float) -> str:
    # the exponent as a float64 constant (Pow's exponent type is its own): read back exactly
    from onnx import numpy_helper

    value = numpy_helper.from_array(np.asarray(p, dtype=np.float64), ctx.fresh("p"))
    return ctx.add("Pow", [x, ctx.add("Constant", [], value=value)])


@_exports("step", onnx="Greater (than 0), Cast", note="1 where x > 0, else 0")
def _step(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Cast", [ctx.add("Greater", [ins[0], ctx.floats(0.0)])], to=ctx.elem)


@_exports("pow", "rsqrt", onnx="Pow", note="the exponent a float64 constant; rsqrt: -0.5")
def _pow(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return _power(ctx, ins[0], -0.5 if node.op == "rsqrt" else node.attrs["p"])


@_exports("scale", onnx="Mul")
def _scale(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Mul", [ins[0], ctx.floats(node.attrs["c"])])


@_exports("clamp", onnx="Clip")
def _clamp(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Clip", [ins[0], ctx.floats(node.attrs["lo"]), ctx.floats(node.attrs["hi"])])


@_exports("gelu", onnx="Gelu (approximate='tanh')", opset=20)
def _gelu(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Gelu", ins, approximate="tanh")


@_exports("silu", onnx="Sigmoid, Mul")
def _silu(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Mul", [ins[0], ctx.add("Sigmoid", ins)])


@_exports("safe_log", onnx="Softplus, Add, Log")
def _safe_log(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    sp = ctx.add("Softplus", ins)
    return ctx.add("Log", [ctx.add("Add", [sp, ctx.floats(node.attrs["eps"])])])


@_exports("softmax", "log_softmax", onnx="Softmax / LogSoftmax (axis -1)")
def _softmax(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    if not ctx.out_shape:  # the softmax of a scalar is 1, its log 0
        value = 1.0 if node.op == "softmax" else 0.0
        return ctx.add("Add", [ctx.add("Mul", [ins[0], ctx.floats(0.0)]), ctx.floats(value)])
    return ctx.add("Softmax" if node.op == "softmax" else "LogSoftmax", ins, axis=-1)


@_exports("const", onnx="Constant")
def _const(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    from onnx import numpy_helper

    value = numpy_helper.from_array(
        np.asarray(node.attrs["value"].to_numpy(), dtype=ctx.np_dtype), ctx.fresh("v")
    )
    return ctx.add("Constant", [], value=value)


# -- shapes -----------------------------------------------------------------------------------


def _reshape_to(ctx: _Ex, x: str, b: bool, shape: Sequence[int]) -> str:
    if b:
        if math.prod(shape) == 0:
            raise Refused("reshape of a batched tensor to a shape without elements")
        return ctx.add("Reshape", [x, ctx.ints([-1, *shape])])
    return ctx.add("Reshape", [x, ctx.ints(list(shape))])


@_exports("reshape", "flatten", onnx="Reshape")
def _reshape(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return _reshape_to(ctx, ins[0], bs[0], ctx.out_shape)


@_exports("broadcast_to", onnx="Expand (Unsqueeze first for new leading dims)")
def _broadcast(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    target = list(ctx.out_shape)
    lead = len(target) - len(ctx.shapes[0])
    x = ins[0]
    if bs[0]:
        if lead:
            x = ctx.unsqueeze(x, list(range(1, 1 + lead)))
        return ctx.add("Expand", [x, ctx.ints([1, *target])])
    return ctx.add("Expand", [x, ctx.ints(target)])


_PERMS = {
    "transpose2d": (1, 0),
    "transpose3d_first_to_last": (1, 2, 0),
    "transpose3d_last_to_first": (2, 0, 1),
    "transpose3d_last_two": (0, 2, 1),
}


@_exports(*_PERMS, "swap_adjacent_at_depth", onnx="Transpose")
def _transpose(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    if node.op in _PERMS:
        perm = list(_PERMS[node.op])
    else:
        perm = list(range(len(ctx.shapes[0])))
        d = node.attrs["depth"]
        perm[d], perm[d + 1] = perm[d + 1], perm[d]
    if bs[0]:
        perm = [0] + [p + 1 for p in perm]
    return ctx.add("Transpose", ins, perm=perm)


@_exports("reduce_sum", "reduce_mean", "sum", onnx="ReduceSum / ReduceMean (keepdims 0)")
def _reduce(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    r = len(ctx.shapes[0])
    axes = [node.attrs["axis"]] if "axis" in node.attrs else list(range(r))
    if not axes:
        return ctx.add("Identity", ins)
    axes = [a + int(bs[0]) for a in axes]
    op = "ReduceMean" if node.op == "reduce_mean" else "ReduceSum"
    return ctx.add(op, [ins[0], ctx.ints(axes)], keepdims=0)


def _concat_inputs(ctx: _Ex, ins: list[str], bs: list[bool]) -> tuple[list[str], bool]:
    if any(bs) and not all(bs):
        ref = ins[bs.index(True)]
        ins = [
            x if b else ctx.batch_like(x, ref, s)
            for x, b, s in zip(ins, bs, ctx.shapes, strict=True)
        ]
    return ins, any(bs)


@_exports("concat", "concat_vectors", onnx="Concat (Expand for unbatched operands)")
def _concat(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    ins, b = _concat_inputs(ctx, ins, bs)
    return ctx.add("Concat", ins, axis=int(b))


@_exports("slice", onnx="Slice")
def _slice(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    s, n = node.attrs["start"], node.attrs["length"]
    return ctx.add("Slice", [ins[0], ctx.ints([s]), ctx.ints([s + n]), ctx.ints([int(bs[0])])])


# -- indexing ---------------------------------------------------------------------------------


@_exports("gather_scalar", "gather_row", onnx="Gather (a constant index)")
def _gather_static(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Gather", [ins[0], ctx.ints(node.attrs["index"])], axis=int(bs[0]))


def _gather_runtime(ctx: _Ex, x: str, bx: bool, i: str, bi: bool, n: int, rows: bool) -> str:
    """x[i] along x's per-sample dim 0 (size n) for runtime indices i, zero where i >= n."""
    clamped = ctx.add("Min", [i, ctx.ints(n - 1)])
    if bx and bi:
        if rows:  # x (N, n, d), i (N, k): GatherND with one batch dim
            got = ctx.add("GatherND", [x, ctx.unsqueeze(clamped, [-1])], batch_dims=1)
        else:  # x (N, n), i (N,) or (N, k)
            scalar = not ctx.shapes_index[0]
            idx = ctx.unsqueeze(clamped, [1]) if scalar else clamped
            got = ctx.add("GatherElements", [x, idx], axis=1)
            if scalar:
                got = ctx.squeeze(got, [1])
    else:
        got = ctx.add("Gather", [x, clamped], axis=int(bx))
    ok = ctx.add("Less", [i, ctx.ints(n)])
    if rows:
        ok = ctx.unsqueeze(ok, [-1])
    return ctx.add("Where", [ok, got, ctx.floats(0.0)])


@_exports(
    "gather_scalar_nat",
    "gather_vec_nat",
    "gather_rows_nat",
    onnx="Gather / GatherElements / GatherND, Less, Where",
    note="indices clamped, out-of-range reads 0 as ours",
)
def _gather_nat(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    n = ctx.shapes[0][0]
    return _gather_runtime(ctx, ins[0], bs[0], ins[1], bs[1], n, rows=node.op == "gather_rows_nat")


@_exports("nat_to_float", "nat_vec_to_float", onnx="Cast",
          note="the index input's values as floats")  # fmt: skip
def _nat_to_float(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("Cast", [ins[0]], to=ctx.elem)


@_exports("scatter_add_vec", "scatter_add_row", onnx="Mul (one-hot), Add")
def _scatter_add(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    shape = ctx.shapes[0]
    onehot = np.zeros(shape[:1] + (1,) * (len(shape) - 1))
    onehot[node.attrs["index"]] = 1.0
    v = ctx.unsqueeze(ins[1], [-1 if node.op == "scatter_add_vec" else -2])
    return ctx.add("Add", [ins[0], ctx.add("Mul", [ctx.floats(onehot), v])])


# -- linear algebra and losses ----------------------------------------------------------------


@_exports("linear", onnx="Gemm (transB) / MatMul, Add")
def _linear(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    W, b, x = ins
    if not bs[0] and not bs[1]:
        if bs[2]:
            return ctx.add("Gemm", [x, W, b], transB=1)
        y = ctx.add("Gemm", [ctx.unsqueeze(x, [0]), W, b], transB=1)
        return ctx.squeeze(y, [0])
    y = ctx.squeeze(ctx.add("MatMul", [W, ctx.unsqueeze(x, [-1])]), [-1])
    return ctx.add("Add", [y, b])


@_exports("mse_loss", onnx="Sub, Mul, ReduceMean")
def _mse(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    d = ctx.add("Sub", ins)
    b = any(bs)
    axes = [a + int(b) for a in range(len(ctx.shapes[0]))]
    sq = ctx.add("Mul", [d, d])
    if not axes:
        return sq
    return ctx.add("ReduceMean", [sq, ctx.ints(axes)], keepdims=0)


@_exports("layer_norm", onnx="LayerNormalization (axis -1)", unbatched=("gamma", "beta"))
def _layer_norm(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    return ctx.add("LayerNormalization", ins, axis=-1, epsilon=float(node.attrs["eps"]))


@_exports(
    "batchnorm_eval",
    onnx="BatchNormalization (inference)",
    unbatched=("gamma", "beta", "mean", "var"),
)
def _bn_eval(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    x, g, b, m, v = ins
    return ctx.with_batch(
        x,
        bs[0],
        lambda xb: ctx.add(
            "BatchNormalization", [xb, g, b, m, v], epsilon=float(node.attrs["eps"])
        ),
    )


@_exports(
    "batchnorm_channel_first",
    onnx="InstanceNormalization",
    note="the statistics of each sample, as ours",
    unbatched=("gamma", "beta"),
)
def _instance_norm(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    x, g, b = ins
    return ctx.with_batch(
        x,
        bs[0],
        lambda xb: ctx.add("InstanceNormalization", [xb, g, b], epsilon=float(node.attrs["eps"])),
    )


@_exports(
    "multi_head_attention",
    onnx="MatMul, Reshape, Transpose, Softmax (mask: Mul, ReduceSum, Add, Div)",
    note="a blocked entry gets weight 0; a row with none allowed gives 0, as ours",
    unbatched=("Wq", "Wk", "Wv", "Wo"),
)
def _attention(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    Wq, Wk, Wv, Wo, x = ins
    b = bs[4]
    n, _ = ctx.shapes[4]
    heads = int(node.attrs["heads"])
    inner = ctx.shapes[0][1]
    hd = inner // heads
    lead = [-1] if b else []
    off = 1 if b else 0

    def split(W: str, perm: list[int]) -> str:
        m = ctx.add("Reshape", [ctx.add("MatMul", [x, W]), ctx.ints([*lead, n, heads, hd])])
        return ctx.add("Transpose", [m], perm=[*range(off), *(p + off for p in perm)])

    q = split(Wq, [1, 0, 2])  # (H, n, hd)
    k = split(Wk, [1, 2, 0])  # (H, hd, n)
    v = split(Wv, [1, 0, 2])
    s = ctx.add("Mul", [ctx.add("MatMul", [q, k]), ctx.floats(1 / math.sqrt(hd))])
    p = ctx.add("Softmax", [s], axis=-1)
    mask = node.attrs.get("mask")
    if mask is not None:
        allowed = np.asarray(mask.to_numpy(), dtype=bool)
        kept = ctx.add("Mul", [p, ctx.floats(allowed.astype(np.float64))])
        total = ctx.add("ReduceSum", [kept, ctx.ints([-1])], keepdims=1)
        none = (~allowed.any(axis=-1)).astype(np.float64)[:, None]
        p = ctx.add("Div", [kept, ctx.add("Add", [total, ctx.floats(none)])])
    back = [*range(off), *(a + off for a in (1, 0, 2))]
    o = ctx.add("Transpose", [ctx.add("MatMul", [p, v])], perm=back)
    merged = ctx.add("Reshape", [o, ctx.ints([*lead, n, inner])])
    return ctx.add("MatMul", [merged, Wo])


# -- convolution and pooling ------------------------------------------------------------------


def _per_dim(v: Any, d: int) -> list[int]:
    return [int(v)] * d if isinstance(v, int) else [int(a) for a in v]


@_exports(
    "conv",
    "conv2d",
    "conv_transpose",
    "conv_transpose2d",
    onnx="Conv / ConvTranspose",
    unbatched=("W", "b"),
)
def _conv(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    W, b, x = ins
    d = len(ctx.shapes[2]) - 1
    stride = _per_dim(node.attrs["stride"], d)
    pad = _per_dim(node.attrs["padding"], d)
    op = "ConvTranspose" if node.op.startswith("conv_transpose") else "Conv"
    group = {"group": int(node.attrs["groups"])} if op == "Conv" else {}
    return ctx.with_batch(
        x, bs[2], lambda xb: ctx.add(op, [xb, W, b], strides=stride, pads=pad + pad, **group)
    )


@_exports(
    "max_pool",
    "max_pool2d",
    "max_pool2d_pad",
    "avg_pool",
    "avg_pool2d",
    "avg_pool2d_pad",
    onnx="MaxPool / AveragePool (count_include_pad 1)",
)
def _pool(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    d = len(ctx.shapes[0]) - 1
    kernel = [int(k) for k in node.attrs["kernel"]]
    stride = _per_dim(node.attrs["stride"], d)
    pad = _per_dim(node.attrs.get("padding", 0), d)
    kw: dict[str, Any] = {"kernel_shape": kernel, "strides": stride, "pads": pad + pad}
    if node.op.startswith("avg"):
        kw["count_include_pad"] = 1
    op = "MaxPool" if node.op.startswith("max") else "AveragePool"
    return ctx.with_batch(ins[0], bs[0], lambda xb: ctx.add(op, [xb], **kw))


@_exports("smooth_max_pool", "smooth_max_pool2d", onnx="Mul, Exp, AveragePool, Log")
def _smooth_pool(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    d = len(ctx.shapes[0]) - 1
    kernel = [int(k) for k in node.attrs["kernel"]]
    stride = _per_dim(node.attrs["stride"], d)
    pad = _per_dim(node.attrs.get("padding", 0), d)
    beta = float(node.attrs["beta"])

    def body(xb: str) -> str:
        e = ctx.add("Exp", [ctx.add("Mul", [xb, ctx.floats(beta)])])
        mean = ctx.add(
            "AveragePool",
            [e],
            kernel_shape=kernel,
            strides=stride,
            pads=pad + pad,
            count_include_pad=1,
        )
        total = ctx.add("Mul", [mean, ctx.floats(float(math.prod(kernel)))])
        return ctx.add("Mul", [ctx.add("Log", [total]), ctx.floats(1 / beta)])

    return ctx.with_batch(ins[0], bs[0], body)


@_exports("global_avg_pool2d", onnx="GlobalAveragePool, Reshape")
def _gap(ctx: _Ex, node: Node, ins: list[str], bs: list[bool]) -> str:
    y = ctx.with_batch(ins[0], bs[0], lambda xb: ctx.add("GlobalAveragePool", [xb]))
    return _reshape_to(ctx, y, bs[0], ctx.out_shape)


# -- the driver -------------------------------------------------------------------------------


def to_onnx(
    graph: GraphData,
    params: Mapping[str, Any] | None = None,
    *,
    batched: Sequence[str] | None = None,
    opset: int | None = None,
    name: str = "torchlean",
) -> Any:
    """Export ``graph`` as an ``onnx.ModelProto`` (opset :data:`EXPORT_OPSET`, or later where
    an op needs it).

    ``params`` gives the value of every ``param`` leaf (by name): they become initializers.
    The leaves and runtime index inputs named in ``batched`` (default: every ``input`` leaf and
    every runtime index input) become graph inputs with a leading batch dimension ``N``; other
    input leaves are inputs without one. Index inputs are int64; static index inputs become
    initializers. Raises :class:`InteropError` naming the node for an op with no ONNX form
    (:data:`NOT_EXPORTED`) or an argument ONNX cannot take batched (a batched conv weight).
    """
    from ._onnx_import import _need_onnx

    _need_onnx("to_onnx")
    from onnx import TensorProto, helper, numpy_helper

    params = dict(params or {})
    dtypes = {t.dtype for t in [leaf.type for leaf in graph.leaves] + [n.type for n in graph.nodes]}
    f64 = any(d.value == "f64" for d in dtypes)
    np_dtype = np.float64 if f64 else np.float32
    elem = TensorProto.DOUBLE if f64 else TensorProto.FLOAT
    where = "to_onnx"
    if batched is None:
        batched = [leaf.name for leaf in graph.leaves if leaf.kind == "input"] + [
            ix.name for ix in graph.index_inputs if ix.value is None
        ]
    known = {leaf.name for leaf in graph.leaves} | {ix.name for ix in graph.index_inputs}
    for nm in batched:
        if nm not in known:
            raise InteropError(f"{where}: batched: no leaf or index input named {nm!r}")
    bset = set(batched)
    extra = sorted(set(params) - {leaf.name for leaf in graph.leaves if leaf.kind == "param"})
    if extra:
        raise InteropError(f"{where}: params: {extra[0]!r} is not a param leaf of the graph")
    ex = _Ex(np_dtype, elem)
    inputs, inits = [], []
    names: dict[int, str] = {}
    batch: dict[int, bool] = {}
    for v, leaf in enumerate(graph.leaves):
        names[v] = leaf.name
        shape = list(leaf.type.shape)
        if leaf.kind == "param" and leaf.name not in bset:
            if leaf.name not in params:
                raise InteropError(f"{where}: params: missing a value for param leaf {leaf.name!r}")
            arr = np.asarray(params[leaf.name], dtype=np_dtype)
            if tuple(arr.shape) != tuple(shape):
                raise InteropError(
                    f"{where}: params[{leaf.name!r}]: expected shape {shape}, got {list(arr.shape)}"
                )
            inits.append(numpy_helper.from_array(arr, leaf.name))
            batch[v] = False
        else:
            b = leaf.name in bset
            dims: list[Any] = (["N"] if b else []) + shape
            inputs.append(helper.make_tensor_value_info(leaf.name, elem, dims))
            batch[v] = b
    index_names: list[str] = []
    index_batch: list[bool] = []
    for ix in graph.index_inputs:
        index_names.append(ix.name)
        if ix.value is not None:
            inits.append(
                numpy_helper.from_array(
                    np.asarray(ix.value, dtype=np.int64).reshape(ix.type.shape), ix.name
                )
            )
            index_batch.append(False)
        else:
            b = ix.name in bset
            dims = (["N"] if b else []) + list(ix.type.shape)
            inputs.append(helper.make_tensor_value_info(ix.name, TensorProto.INT64, dims))
            index_batch.append(b)
    need = EXPORT_OPSET
    n_leaves = len(graph.leaves)
    for j, node in enumerate(graph.nodes):
        v = n_leaves + j
        entry = ONNX_EXPORTS.get(node.op)
        label = f"node {j} ({node.op})"
        if entry is None:
            why = NOT_EXPORTED.get(node.op, "no ONNX form")
            raise InteropError(f"{where}: {label}: {node.op} cannot be exported: {why}")
        need = max(need, OPSET_NEEDED.get(node.op, EXPORT_OPSET))
        ins = [names[a] for a in node.args] + [index_names[i] for i in node.index_args]
        bs = [batch[a] for a in node.args] + [index_batch[i] for i in node.index_args]
        op = get_op(node.op)
        for i, a in enumerate(node.args):
            if batch[a] and op.arg_name(i) in UNBATCHED_ARGS.get(node.op, ()):
                raise InteropError(
                    f"{where}: {label}: argument {op.arg_name(i)!r} carries the batch; ONNX "
                    f"takes it unbatched"
                )
        ex.node = node
        ex.shapes = [graph.value_type(a).shape for a in node.args]
        ex.shapes_index = [graph.index_inputs[i].type.shape for i in node.index_args]
        ex.out_shape = node.type.shape
        try:
            names[v] = entry.fn(ex, node, ins, bs)
        except Refused as e:
            raise InteropError(f"{where}: {label}: {e}") from None
        batch[v] = any(bs)
    outputs = []
    for k, o in enumerate(graph.outputs):
        out_name = f"output_{k}" if len(graph.outputs) > 1 else "output"
        ex.nodes.append(helper.make_node("Identity", [names[o]], [out_name]))
        dims = (["N"] if batch[o] else []) + list(graph.value_type(o).shape)
        outputs.append(helper.make_tensor_value_info(out_name, elem, dims))
    if opset is not None and opset < need:
        raise InteropError(f"{where}: opset {opset} is below {need}, which the graph's ops need")
    model = helper.make_model(
        helper.make_graph(ex.nodes, name, inputs, outputs, initializer=inits + ex.inits),
        opset_imports=[helper.make_opsetid("", opset or need)],
        producer_name="torchlean-ir",
    )
    return model


__all__ = [
    "EXPORT_OPSET",
    "NOT_EXPORTED",
    "ONNX_EXPORTS",
    "OPSET_NEEDED",
    "UNBATCHED_ARGS",
    "to_onnx",
]
