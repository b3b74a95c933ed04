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
}

#: Ops ONNX has no counterpart for, with the reason (kept next to the mapping on purpose).
NO_ONNX_EQUIVALENT: dict[str, str] = {
    "mse_loss": "ai.onnx has no mean-squared-error op (only the training domain)",
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
        opset_imports=[helper.make_opsetid("", 18)],
    )
    (theirs,) = ReferenceEvaluator(model).run(None, x)
    np.testing.assert_allclose(ours, np.asarray(theirs, dtype=np.float64), rtol=1e-12, atol=1e-13)
