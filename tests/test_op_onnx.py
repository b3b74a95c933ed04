"""Each op's forward against ONNX's reference evaluator, wherever ONNX has the same op.

``ONNX_OPS`` maps our op to a function that builds the equivalent ONNX node(s) for one row of the
op table; ``test_onnx_mapping_is_documented`` keeps ``ONNX_OPS`` and the rows honest: every op
either has a mapping or is listed in ``NO_ONNX_EQUIVALENT`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import torchlean_ir as tl  # noqa: E402

from .op_cases import CASES, OpCase  # noqa: E402

Builder = Callable[[OpCase, list[str], dict[str, Any]], tuple[list[Any], list[Any]]]


def _const(name: str, value: Any, dtype: Any = np.int64) -> Any:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def _simple(onnx_op: str, **kw: Any) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        return [helper.make_node(onnx_op, ins, ["y"], **kw)], []

    return build


def _reduce(onnx_op: str) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        axes = [attrs["axis"]] if "axis" in attrs else list(range(len(case.shapes[0])))
        node = helper.make_node(onnx_op, [ins[0], "axes"], ["y"], keepdims=0)
        return [node], [_const("axes", axes)]

    return build


def _clip(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    node = helper.make_node("Clip", [ins[0], "lo", "hi"], ["y"])
    return [node], [_const("lo", attrs["lo"], np.float64), _const("hi", attrs["hi"], np.float64)]


def _shape_input(onnx_op: str, key: str | None) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        shape = attrs[key] if key else (int(np.prod(case.shapes[0])),)
        return [helper.make_node(onnx_op, [ins[0], "shape"], ["y"])], [_const("shape", shape)]

    return build


def _transpose(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    rank = len(case.shapes[0])
    perm = list(range(rank))
    d = attrs.get("depth", 0)
    perm[d], perm[d + 1] = perm[d + 1], perm[d]
    return [helper.make_node("Transpose", ins, ["y"], perm=perm)], []


def _scale(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    return [helper.make_node("Mul", [ins[0], "c"], ["y"])], [_const("c", attrs["c"], np.float64)]


def _linear(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    # Gemm(x[None, :], W^T, b) = (W x + b)[None, :]
    nodes = [
        helper.make_node("Unsqueeze", [ins[2], "ax0"], ["x2"]),
        helper.make_node("Gemm", ["x2", ins[0], ins[1]], ["y2"], transB=1),
        helper.make_node("Squeeze", ["y2", "ax0"], ["y"]),
    ]
    return nodes, [_const("ax0", [0])]


def _slice(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    s, n = attrs["start"], attrs["length"]
    node = helper.make_node("Slice", [ins[0], "starts", "ends", "axes"], ["y"])
    return [node], [_const("starts", [s]), _const("ends", [s + n]), _const("axes", [0])]


def _layer_norm(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    return [helper.make_node("LayerNormalization", ins, ["y"], axis=-1, epsilon=attrs["eps"])], []


def _const_op(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    value = numpy_helper.from_array(np.asarray(attrs["value"], dtype=np.float64), "v")
    return [helper.make_node("Constant", [], ["y"], value=value)], []


def _gather(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    ((_, value),) = case.index
    return [helper.make_node("Gather", [ins[0], "idx"], ["y"], axis=0)], [_const("idx", value)]


# -- the parity ops (issue 6) -----------------------------------------------------------------


def _perm(perm: list[int]) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        return [helper.make_node("Transpose", ins, ["y"], perm=perm)], []

    return build


def _gather_static(
    case: OpCase, ins: list[str], attrs: dict[str, Any]
) -> tuple[list[Any], list[Any]]:
    node = helper.make_node("Gather", [ins[0], "idx"], ["y"], axis=0)
    return [node], [_const("idx", attrs["index"])]


def _scatter_add(
    case: OpCase, ins: list[str], attrs: dict[str, Any]
) -> tuple[list[Any], list[Any]]:
    # x[index] += v as ScatterElements(reduction="add") with v as one row of updates
    row_shape = (1, *case.shapes[0][1:])
    nodes = [
        helper.make_node("Unsqueeze", [ins[1], "ax0"], ["upd"]),
        helper.make_node("ScatterElements", [ins[0], "idx", "upd"], ["y"], axis=0, reduction="add"),
    ]
    return nodes, [_const("ax0", [0]), _const("idx", np.full(row_shape, attrs["index"]))]


def _batched(case: OpCase, inner: list[Any], x: str) -> list[Any]:
    """Wrap ONNX nodes that read ``xb`` (x with a batch axis) and write ``yb``."""
    return [
        helper.make_node("Unsqueeze", [x, "ax0"], ["xb"]),
        *inner,
        helper.make_node("Squeeze", ["yb", "ax0"], ["y"]),
    ]


def _spatial(attrs: dict[str, Any], d: int) -> tuple[list[int], list[int], list[int]]:
    def per(v: Any, default: int) -> list[int]:
        return [v] * d if isinstance(v, int) else list(v) if v is not None else [default] * d

    kernel = list(attrs.get("kernel", ()))
    stride = per(attrs.get("stride", 1), 1)
    pad = per(attrs.get("padding", 0), 0)
    return kernel, stride, pad + pad


def _conv(onnx_op: str) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        d = len(case.shapes[2]) - 1
        _, stride, pads = _spatial(attrs, d)
        node = helper.make_node(onnx_op, ["xb", ins[0], ins[1]], ["yb"], strides=stride, pads=pads)
        return _batched(case, [node], ins[2]), [_const("ax0", [0])]

    return build


def _pool(onnx_op: str, **kw: Any) -> Builder:
    def build(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        kernel, stride, pads = _spatial(attrs, len(case.shapes[0]) - 1)
        node = helper.make_node(
            onnx_op, ["xb"], ["yb"], kernel_shape=kernel, strides=stride, pads=pads, **kw
        )
        return _batched(case, [node], ins[0]), [_const("ax0", [0])]

    return build


def _smooth_max_pool(
    case: OpCase, ins: list[str], attrs: dict[str, Any]
) -> tuple[list[Any], list[Any]]:
    # (1/beta) log(K * AveragePool(exp(beta x))): zero padding adds exp(-inf) = 0 to the sum,
    # so padded cells take no part, as in our convention
    kernel, stride, pads = _spatial(attrs, len(case.shapes[0]) - 1)
    beta = attrs["beta"]
    inner = [
        helper.make_node("Mul", ["xb", "beta"], ["bx"]),
        helper.make_node("Exp", ["bx"], ["ex"]),
        helper.make_node(
            "AveragePool",
            ["ex"],
            ["mean"],
            kernel_shape=kernel,
            strides=stride,
            pads=pads,
            count_include_pad=1,
        ),
        helper.make_node("Mul", ["mean", "k"], ["total"]),
        helper.make_node("Log", ["total"], ["lse"]),
        helper.make_node("Mul", ["lse", "inv_beta"], ["yb"]),
    ]
    inits = [
        _const("ax0", [0]),
        _const("beta", beta, np.float64),
        _const("inv_beta", 1 / beta, np.float64),
        _const("k", float(np.prod(kernel)), np.float64),
    ]
    return _batched(case, inner, ins[0]), inits


def _global_avg_pool(
    case: OpCase, ins: list[str], attrs: dict[str, Any]
) -> tuple[list[Any], list[Any]]:
    nodes = [
        helper.make_node("Unsqueeze", [ins[0], "ax0"], ["xb"]),
        helper.make_node("GlobalAveragePool", ["xb"], ["yb"]),
        helper.make_node("Reshape", ["yb", "shape"], ["y"]),
    ]
    return nodes, [_const("ax0", [0]), _const("shape", [case.shapes[0][0]])]


def _batchnorm(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    # training mode: the statistics of the batch (here one sample) over N, H, W
    c = case.shapes[0][0]
    node = helper.make_node(
        "BatchNormalization",
        ["xb", ins[1], ins[2], "mean0", "var0"],
        ["yb", "running_mean", "running_var"],
        epsilon=attrs["eps"],
        training_mode=1,
    )
    inits = [_const("ax0", [0]), _const("mean0", np.zeros(c), np.float64)]
    return _batched(case, [node], ins[0]), [*inits, _const("var0", np.ones(c), np.float64)]


def _safe_log(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    nodes = [
        helper.make_node("Softplus", ins, ["sp"]),
        helper.make_node("Add", ["sp", "eps"], ["spe"]),
        helper.make_node("Log", ["spe"], ["y"]),
    ]
    return nodes, [_const("eps", attrs["eps"], np.float64)]


def _attention(case: OpCase, ins: list[str], attrs: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    # ONNX Attention (opset 23) on x Wq, x Wk, x Wv with a batch axis; bool mask, true = attend
    heads = attrs["heads"]
    nodes = []
    for w, name in zip(ins[:3], ("q", "k", "v"), strict=True):
        nodes.append(helper.make_node("MatMul", [ins[4], w], [name + "2"]))
        nodes.append(helper.make_node("Unsqueeze", [name + "2", "ax0"], [name]))
    inputs = ["q", "k", "v"] + (["mask"] if "mask" in attrs else [])
    nodes.append(
        helper.make_node("Attention", inputs, ["ob"], q_num_heads=heads, kv_num_heads=heads)
    )
    nodes.append(helper.make_node("Squeeze", ["ob", "ax0"], ["o"]))
    nodes.append(helper.make_node("MatMul", ["o", ins[3]], ["y"]))
    inits = [_const("ax0", [0])]
    if "mask" in attrs:
        inits.append(numpy_helper.from_array(np.asarray(attrs["mask"], dtype=bool), "mask"))
    return nodes, inits


ONNX_OPS: dict[str, Builder] = {
    "const": _const_op,
    "detach": _simple("Identity"),
    "add": _simple("Add"),
    "sub": _simple("Sub"),
    "mul": _simple("Mul"),
    "scale": _scale,
    "abs": _simple("Abs"),
    "sqrt": _simple("Sqrt"),
    "clamp": _clip,
    "max": _simple("Max"),
    "min": _simple("Min"),
    "broadcast_to": _shape_input("Expand", "shape"),
    "reshape": _shape_input("Reshape", "shape"),
    "flatten": _shape_input("Reshape", None),
    "transpose2d": _transpose,
    "swap_adjacent_at_depth": _transpose,
    "reduce_sum": _reduce("ReduceSum"),
    "reduce_mean": _reduce("ReduceMean"),
    "sum": _reduce("ReduceSum"),
    "matmul": _simple("MatMul"),
    "bmm": _simple("MatMul"),
    "linear": _linear,
    "relu": _simple("Relu"),
    "sigmoid": _simple("Sigmoid"),
    "tanh": _simple("Tanh"),
    "exp": _simple("Exp"),
    "log": _simple("Log"),
    "inv": _simple("Reciprocal"),
    "softplus": _simple("Softplus"),
    "softmax": _simple("Softmax", axis=-1),
    "log_softmax": _simple("LogSoftmax", axis=-1),
    "layer_norm": _layer_norm,
    "concat": _simple("Concat", axis=0),
    "slice": _slice,
    "gather_scalar_nat": _gather,
    "gather_rows_nat": _gather,
    # parity ops
    "transpose3d_first_to_last": _perm([1, 2, 0]),
    "transpose3d_last_to_first": _perm([2, 0, 1]),
    "transpose3d_last_two": _perm([0, 2, 1]),
    "concat_vectors": _simple("Concat", axis=0),
    "gather_scalar": _gather_static,
    "gather_row": _gather_static,
    "gather_vec_nat": _gather,
    "scatter_add_vec": _scatter_add,
    "scatter_add_row": _scatter_add,
    "safe_log": _safe_log,
    "gelu": _simple("Gelu", approximate="tanh"),
    "silu": _simple("Swish"),
    "conv": _conv("Conv"),
    "conv2d": _conv("Conv"),
    "conv_transpose": _conv("ConvTranspose"),
    "conv_transpose2d": _conv("ConvTranspose"),
    "max_pool": _pool("MaxPool"),
    "max_pool2d": _pool("MaxPool"),
    "max_pool2d_pad": _pool("MaxPool"),
    "avg_pool": _pool("AveragePool", count_include_pad=1),
    "avg_pool2d": _pool("AveragePool", count_include_pad=1),
    "avg_pool2d_pad": _pool("AveragePool", count_include_pad=1),
    "smooth_max_pool": _smooth_max_pool,
    "smooth_max_pool2d": _smooth_max_pool,
    "global_avg_pool2d": _global_avg_pool,
    "batchnorm_channel_first": _batchnorm,
    "multi_head_attention": _attention,
}

#: Opsets above the default 18 for ops that ONNX added later.
ONNX_OPSET: dict[str, int] = {"gelu": 20, "silu": 24, "multi_head_attention": 23}

#: Looser relative tolerances, each with its cause. ONNX's Gelu function body uses
#: sqrt(float32(2/pi)) and float32(0.044715); with those two constants the tanh formula matches
#: the ONNX result exactly, with ours (float64 constants) to about 1e-8 relative.
ONNX_RTOL: dict[str, float] = {"gelu": 1e-7}

#: Ops ONNX has no counterpart for, with the reason (kept next to the mapping on purpose).
NO_ONNX_EQUIVALENT: dict[str, str] = {
    "mse_loss": "ai.onnx has no mean-squared-error op (only the training domain)",
    "rand_uniform": "ONNX RandomUniform draws from an implementation-defined generator, not "
    "SplitMix64 (tests/test_op_parity.py checks the bits against the definition)",
    "bernoulli_mask": "ONNX Bernoulli draws from an implementation-defined generator, not "
    "SplitMix64 (tests/test_op_parity.py checks the mask against the definition)",
}


def _onnx_cases() -> list[OpCase]:
    out = []
    for c in CASES:
        if c.op not in ONNX_OPS:
            continue
        # ONNX Gather has no out-of-range convention (it is an error): in-range rows only.
        if c.index and any(np.any(np.asarray(v) >= c.shapes[0][0]) for _, v in c.index):
            continue
        out.append(c)
    return out


def test_onnx_mapping_is_documented() -> None:
    undocumented = sorted(set(tl.all_ops()) - set(ONNX_OPS) - set(NO_ONNX_EQUIVALENT))
    assert not undocumented, f"ops with neither an ONNX mapping nor a reason: {undocumented}"


@pytest.mark.parametrize("case", _onnx_cases(), ids=lambda c: c.id)
def test_forward_matches_onnx_reference(case: OpCase) -> None:
    rng = np.random.default_rng(7)
    g = case.graph()
    x = case.sample(rng)
    (ours,) = tl.eval_graph(g, x, case.index_values())
    ins = [f"a{i}" for i in range(len(case.shapes))]
    nodes, inits = ONNX_OPS[case.op](case, ins, case.attrs)
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.DOUBLE, list(s))
        for n, s in zip(ins, case.shapes, strict=True)
    ]
    output = helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, [output], initializer=inits),
        opset_imports=[helper.make_opsetid("", ONNX_OPSET.get(case.op, 18))],
    )
    (theirs,) = ReferenceEvaluator(model).run(None, x)
    rtol = ONNX_RTOL.get(case.op, 1e-12)
    np.testing.assert_allclose(ours, np.asarray(theirs, dtype=np.float64), rtol=rtol, atol=1e-13)
