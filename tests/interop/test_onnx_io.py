"""``to_onnx`` and ``from_onnx`` as an API: models that pass the checker and the reference
evaluator, round trips that verify, and one-line errors naming the node or argument."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
verify = pytest.importorskip("verify")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
from torchlean_ir import interop  # noqa: E402

from ..op_cases import CASES, OpCase  # noqa: E402


def _cnn() -> tuple[tl.GraphData, dict[str, np.ndarray]]:
    """A small classifier built with our builder: conv, eval batch norm, pool, linear, a loss."""
    b = tl.GraphBuilder()
    x = b.input("x", (1, 6, 6))
    label = b.index("label")
    W = b.param("conv.W", (3, 1, 3, 3))
    c = b.param("conv.b", (3,))
    g, be = b.param("bn.g", (3,)), b.param("bn.b", (3,))
    m, v = b.param("bn.m", (3,), requires_grad=False), b.param("bn.v", (3,), requires_grad=False)
    h = b.relu(b.batchnorm_eval(b.conv2d(W, c, x, stride=1, padding=1), g, be, m, v, eps=1e-5))
    h = b.flatten(b.max_pool2d(h, kernel=(2, 2), stride=2))
    logits = b.linear(b.param("fc.W", (4, 27)), b.param("fc.b", (4,)), h)
    loss = b.scale(b.gather_scalar_nat(b.log_softmax(logits), label), c=-1.0)
    graph = b.build(loss)
    rng = np.random.default_rng(0)
    params = {
        leaf.name: rng.uniform(0.5, 1.5, leaf.type.shape).astype(np.float32)
        for leaf in graph.leaves
        if leaf.kind == "param"
    }
    return graph, params


def test_export_checks_runs_and_reads_back_the_same_graph() -> None:
    graph, params = _cnn()
    model = interop.to_onnx(graph, params)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == interop.EXPORT_OPSET
    assert [i.name for i in model.graph.input] == ["x", "label"]
    assert {t.name for t in model.graph.initializer} >= set(params)
    rng = np.random.default_rng(1)
    xs = rng.normal(size=(5, 1, 6, 6)).astype(np.float32)
    labels = np.array([0, 3, 1, 2, 7])  # 7 is out of range: reads 0, as ours
    (theirs,) = ReferenceEvaluator(model).run(None, {"x": xs, "label": labels})
    cg = compiler.compile(graph).batched(over=("x", "label"))
    ours = np.asarray(cg.forward({**params, "x": xs}, {"label": labels}))
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-6)
    assert theirs[4] == 0.0
    back = interop.from_onnx(model)
    assert back.graph == graph  # the same ops, names, frozen statistics and attributes
    assert set(back.batched) == {"x", "label"}
    report = verify.verify_graph(back.graph)
    assert report.verdict == "verified", report.summary()


#: Rows whose round trip through ONNX also verifies (a sample: one per kind of export).
ROUND_TRIP_VERIFIED = [
    "linear[3x4_3_4]",
    "conv2d[3x2x3x3_3_2x5x5]",
    "batchnorm_eval[2x3x3_2_2_2_2]",
    "batchnorm_channel_first[2x3x3_2_2]",
    "multi_head_attention[4x4_4x4_4x4_4x4_3x4-causal]",
    "gather_vec_nat[3-oob]",
    "layer_norm[2x4_4_4]",
    "scatter_add_row[3x2_2]",
]


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.id in ROUND_TRIP_VERIFIED], ids=lambda c: c.id
)
def test_round_trip_verifies(case: OpCase) -> None:
    op = tl.get_op(case.op)
    shared = interop.UNBATCHED_ARGS.get(case.op, ())
    batched = [f"a{i}" for i in range(len(case.shapes)) if op.arg_name(i) not in shared]
    model = interop.to_onnx(
        case.graph(), batched=batched + [f"i{k}" for k in range(len(case.index))]
    )
    imp = interop.from_onnx(model)
    report = verify.verify_graph(imp.graph)
    assert report.verdict == "verified", report.summary()


def test_round_trip_rows_exist() -> None:
    assert set(ROUND_TRIP_VERIFIED) <= {c.id for c in CASES}


def test_export_errors_name_what_and_where() -> None:
    graph, params = _cnn()
    cases = [
        (
            lambda: interop.to_onnx(graph, {k: v for k, v in params.items() if k != "fc.b"}),
            "to_onnx: params: missing a value for param leaf 'fc.b'",
        ),
        (
            lambda: interop.to_onnx(graph, {**params, "fc.b": np.zeros(5)}),
            "to_onnx: params['fc.b']: expected shape [4], got [5]",
        ),
        (
            lambda: interop.to_onnx(graph, {**params, "nope": np.zeros(1)}),
            "to_onnx: params: 'nope' is not a param leaf of the graph",
        ),
        (
            lambda: interop.to_onnx(graph, params, batched=["y"]),
            "to_onnx: batched: no leaf or index input named 'y'",
        ),
        (
            lambda: interop.to_onnx(graph, params, batched=["x", "conv.W"]),
            "to_onnx: node 0 (conv2d): argument 'W' carries the batch; ONNX takes it unbatched",
        ),
        (lambda: interop.to_onnx(graph, params, opset=17), None),
    ]
    for fn, want in cases[:-1]:
        with pytest.raises(interop.InteropError) as e:
            fn()
        assert str(e.value) == want
    b = tl.GraphBuilder()
    g = b.build(b.gelu(b.rand_uniform(shape=(3,), seed=1)))
    with pytest.raises(interop.InteropError, match=r"node 0 \(rand_uniform\): rand_uniform "):
        interop.to_onnx(g)
    b = tl.GraphBuilder()
    g = b.build(b.gelu(b.input("x", (3,))))
    with pytest.raises(interop.InteropError, match="opset 18 is below 20"):
        interop.to_onnx(g, opset=18)
    assert interop.to_onnx(g).opset_import[0].version == 20


def _model(nodes: list, inputs: list, outputs: list, inits: list | None = None) -> object:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_import_refusals_are_one_line_and_name_the_node() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    mixes = _model(
        [helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="total", keepdims=0)],
        [x],
        [y],
        [onnx.numpy_helper.from_array(np.array([0]), "axes")],
    )
    with pytest.raises(interop.InteropError) as e:
        interop.from_onnx(mixes)
    assert str(e.value) == (
        "from_onnx: node 0 (ReduceSum 'total'): reduce_sum along axis 0, which holds the batch "
        "(mixes samples)"
    )
    # the same model, taken whole (batch_axis=None), is one computation
    whole = interop.from_onnx(mixes, batch_axis=None, batch_size=3)
    assert whole.graph.leaves[0].type.shape == (3, 4)
    with pytest.raises(interop.InteropError, match="from_onnx: not an ONNX model"):
        interop.from_onnx(b"\x00\x01garbage")
    with pytest.raises(interop.InteropError, match="batched: no input named 'z'"):
        interop.from_onnx(mixes, batched=["z"])
    training = _model(
        [helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")],
        [x],
        [y],
        [
            onnx.numpy_helper.from_array(np.array(0.5, np.float32), "r"),
            onnx.numpy_helper.from_array(np.array(True), "t"),
        ],
    )
    with pytest.raises(interop.InteropError, match="Dropout in training mode"):
        interop.from_onnx(training)
