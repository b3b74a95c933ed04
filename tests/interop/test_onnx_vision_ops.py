"""What ONNX vision models need from ``from_onnx``: LRN, unequal (asymmetric) pooling and
convolution padding, grouped convolution, ``IsNaN`` / ``Where`` guards an exporter emits, and
initializers read in their role (a parameter, a frozen statistic, a constant: a mask, a scalar).

Forward values against ONNX's reference evaluator (``onnx.reference.ReferenceEvaluator``); its
``LRN`` kernel loops over the batch instead of the channels (``for c in range(x.shape[0])``, onnx
1.23), so it computes the channels below the batch size only: :class:`SpecLRN` replaces it with
the operator's definition for these comparisons.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.op_run import OpRun  # noqa: E402

import compiler  # noqa: E402
import verify  # noqa: E402
from torchlean_ir import interop  # noqa: E402


class SpecLRN(OpRun):
    """ONNX ``LRN`` as its definition says: the sum of squares over channels
    ``c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2)``."""

    op_domain = ""

    def _run(self, x: Any, alpha: Any = None, beta: Any = None, bias: Any = None,
             size: Any = None) -> tuple[np.ndarray]:  # fmt: skip
        lo, hi = math.floor((size - 1) / 2), math.ceil((size - 1) / 2) + 1
        sq = np.zeros(x.shape, dtype=np.float64)
        c = x.shape[1]
        for i in range(c):
            sq[:, i] = np.sum(x[:, max(0, i - lo) : min(c, i + hi)].astype(np.float64) ** 2, axis=1)
        return ((x / (bias + alpha / size * sq) ** beta).astype(x.dtype),)


SpecLRN.__name__ = "LRN"


def _model(nodes: list[Any], inputs: list[tuple[str, list[int]]], out: tuple[str, list[int]],
           inits: dict[str, np.ndarray] | None = None) -> Any:  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(out[0], TensorProto.FLOAT, out[1])],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _ours(imp: interop.Imported, x: np.ndarray) -> np.ndarray:
    cg = compiler.compile(imp.graph).batched(over=imp.batched)
    return np.asarray(cg.forward({**imp.params, imp.batched[0]: x}))


@pytest.mark.parametrize(
    ("size", "shape"), [(5, (2, 7, 3, 4)), (4, (2, 6, 5, 1)), (1, (3, 2, 2, 2))]
)
def test_lrn_matches_its_definition_and_verifies(size: int, shape: tuple[int, ...]) -> None:
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=0.3, beta=0.75, bias=2.0)
    m = _model([node], [("x", list(shape))], ("y", list(shape)))
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    (want,) = ReferenceEvaluator(m, new_ops=[SpecLRN]).run(None, {"x": x})
    imp = interop.from_onnx(m)
    assert "pow" in [n.op for n in imp.graph.nodes]
    np.testing.assert_allclose(_ours(imp, x), want, atol=1e-6, rtol=0)
    if size == 5:  # the verifier's time: one size
        report = verify.verify_graph(imp.graph)
        assert report.verdict == "verified", report.summary()


def test_onnx_reference_lrn_computes_only_the_channels_below_the_batch_size() -> None:
    """Why the comparisons above use :class:`SpecLRN` (fails once onnx fixes its kernel)."""
    node = helper.make_node("LRN", ["x"], ["y"], size=3, alpha=1.0, beta=1.0, bias=1.0)
    m = _model([node], [("x", [1, 3, 1, 1])], ("y", [1, 3, 1, 1]))
    x = np.ones((1, 3, 1, 1), np.float32)
    (shipped,) = ReferenceEvaluator(m).run(None, {"x": x})
    (spec,) = ReferenceEvaluator(m, new_ops=[SpecLRN]).run(None, {"x": x})
    assert shipped[0, 1, 0, 0] == 1.0  # channel 1: no normalisation at all
    assert spec[0, 1, 0, 0] == pytest.approx(0.5)  # 1 / (1 + 1/3 * 3)


@pytest.mark.parametrize(
    ("op", "pads", "n"),
    [
        ("MaxPool", [0, 0, 1, 1], 8),  # Inception v2: no symmetric padding and crop fits
        ("MaxPool", [1, 0, 0, 1], 7),
        ("AveragePool", [0, 1, 1, 0], 8),
        ("Conv", [0, 0, 1, 1], 8),
    ],
)
def test_unequal_padding(op: str, pads: list[int], n: int) -> None:
    rng = np.random.default_rng(1)
    inits = {"w": rng.normal(size=(4, 2, 3, 3)).astype(np.float32)} if op == "Conv" else {}
    ins = ["x", "w"] if op == "Conv" else ["x"]
    attrs = {"kernel_shape": [3, 3]} if op != "Conv" else {}
    node = helper.make_node(op, ins, ["y"], pads=pads, strides=[2, 2], **attrs)
    m = _model([node], [("x", [2, 2, n, n])], ("y", [2, 4 if op == "Conv" else 2, None, None]),
               inits)  # fmt: skip
    x = rng.normal(size=(2, 2, n, n)).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    imp = interop.from_onnx(m)
    np.testing.assert_allclose(_ours(imp, x), want, atol=1e-5, rtol=0)
    if pads == [0, 0, 1, 1] and op == "MaxPool":  # edge copies, concat, max pool: verified
        report = verify.verify_graph(imp.graph)
        assert report.verdict == "verified", report.summary()


def test_grouped_convolution_is_one_op_and_exports_back() -> None:
    rng = np.random.default_rng(2)
    w = rng.normal(size=(6, 2, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])
    m = _model([node], [("x", [2, 4, 5, 5])], ("y", [2, 6, 5, 5]), {"w": w})
    x = rng.normal(size=(2, 4, 5, 5)).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    imp = interop.from_onnx(m)
    assert [(n.op, n.attrs["groups"]) for n in imp.graph.nodes if n.op == "conv2d"] == [
        ("conv2d", 2)
    ]
    np.testing.assert_allclose(_ours(imp, x), want, atol=1e-5, rtol=0)
    back = interop.to_onnx(imp.graph, imp.params)
    assert [a.i for n in back.graph.node if n.op_type == "Conv" for a in n.attribute
            if a.name == "group"] == [2]  # fmt: skip
    (again,) = ReferenceEvaluator(back).run(None, {imp.batched[0]: x})
    np.testing.assert_allclose(again, want, atol=1e-5, rtol=0)


def _softmax_guard(extra: list[Any] | None = None, guarded: str = "s") -> Any:
    """torch.onnx's ``_safe_softmax``: ``Where(IsNaN(Softmax(x)), 0, Softmax(x))``."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        *(extra or []),
        helper.make_node("IsNaN", [guarded], ["nan"]),
        helper.make_node("Where", ["nan", "zero", guarded], ["y"]),
    ]
    return _model(nodes, [("x", [2, 3, 4])], ("y", [2, 3, 4]),
                  {"zero": np.zeros((), np.float32)})  # fmt: skip


def test_isnan_guard_of_a_softmax_is_dropped_and_of_other_values_refused() -> None:
    x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype(np.float32)
    m = _softmax_guard()
    imp = interop.from_onnx(m)
    assert [n.op for n in imp.graph.nodes] == ["softmax"]
    assert imp.params == {}  # the 0.0 of the guard is a constant, not a parameter
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(_ours(imp, x), want, atol=1e-6, rtol=0)
    log = helper.make_node("Log", ["s"], ["l"])
    with pytest.raises(interop.InteropError) as e:
        interop.from_onnx(_softmax_guard([log], guarded="l"))
    assert str(e.value) == (
        "from_onnx: node 2 (IsNaN 'nan'): IsNaN of runtime values (graph values are finite, so "
        "the check is dropped only after a softmax): export the model without the NaN check"
    )


def test_initializers_by_role() -> None:
    """A scalar and a mask at the float limit are constants, a uniform fill the exporter left
    undeclared (read by Add only) too; the declared weight, and an undeclared weight read by
    MatMul (a transpose an exporter folded), are parameters; an expanded class token is its
    first slice."""
    rng = np.random.default_rng(4)
    n, d = 3, 4
    w = rng.normal(size=(d, d)).astype(np.float32)
    folded = rng.normal(size=(d, d)).astype(np.float32)
    token = np.broadcast_to(rng.normal(size=(1, 1, d)), (n, 1, d)).astype(np.float32)
    mask = np.triu(np.full((3, 3), np.finfo(np.float32).min), 1).astype(np.float32)
    inits = {
        "w": w,
        "val_folded": folded,
        "cls": token,
        "half": np.float32(0.5).reshape(()),
        "mask": mask,
        "zeros": np.zeros((1, 3, 3), np.float32),
    }
    nodes = [
        helper.make_node("Concat", ["cls", "x"], ["t"], axis=1),  # (n, 3, d)
        helper.make_node("MatMul", ["t", "w"], ["a"]),
        helper.make_node("MatMul", ["a", "val_folded"], ["b"]),
        helper.make_node("Mul", ["b", "half"], ["c"]),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["c", "ct"], ["scores"]),  # (n, 3, 3)
        helper.make_node("Add", ["scores", "mask"], ["m1"]),
        helper.make_node("Add", ["m1", "zeros"], ["m2"]),
        helper.make_node("Softmax", ["m2"], ["y"], axis=-1),
    ]
    m = _model(nodes, [("x", [n, 2, d])], ("y", [n, 3, 3]), inits)
    vi = helper.make_tensor_value_info("w", TensorProto.FLOAT, [d, d])
    prop = vi.metadata_props.add()
    prop.key, prop.value = "pkg.torch.export.graph_signature.InputSpec.kind", "PARAMETER"
    m.graph.value_info.append(vi)
    roles = interop._onnx_import.initializer_roles(
        m.graph, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    )
    assert roles == {
        "w": "param",
        "val_folded": "param",
        "cls": "param",
        "half": "const",
        "mask": "const",
        "zeros": "const",
    }
    imp = interop.from_onnx(m)
    assert {k: v.shape for k, v in imp.params.items()} == {
        "cls": (1, 1, d),
        "w": (d, d),
        "val_folded": (d, d),
    }
    x = rng.normal(size=(n, 2, d)).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    np.testing.assert_allclose(_ours(imp, x), want, atol=1e-6, rtol=0)


def _rotary_like() -> Any:
    """``(x @ w) * cos + x * sin``, where ``cos`` and ``sin`` are tables the exporter folded from
    a buffer (their metadata ``folded_from`` names ``rotary.inv_freq`` and intermediate values)
    and ``w`` a weight's transpose it folded (``folded_from``: the weight)."""
    rng = np.random.default_rng(5)
    d = 4
    pos = np.arange(3)[:, None] * (1.0 / 10000 ** (np.arange(d) / d))[None, :]
    inits = {
        "val_w": rng.normal(size=(d, d)).astype(np.float32),
        "cos_t": np.cos(pos).astype(np.float32),
        "sin_t": np.sin(pos).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "val_w"], ["a"]),
        helper.make_node("Mul", ["a", "cos_t"], ["b"]),
        helper.make_node("Mul", ["x", "sin_t"], ["c"]),
        helper.make_node("Add", ["b", "c"], ["y"]),
    ]
    m = _model(nodes, [("x", [2, 3, d])], ("y", [2, 3, d]), inits)
    return _folded(m, inits, {"val_w": ["layer.weight"],
                              "cos_t": ["arange", "cos", "rotary.inv_freq", "val_3"],
                              "sin_t": ["arange", "rotary.inv_freq", "sin", "val_3"]})  # fmt: skip


def _folded(m: Any, inits: dict[str, np.ndarray], sources: dict[str, list[str]]) -> Any:
    """``m`` with the exporter's ``folded_from`` metadata on the initializers of ``sources``."""
    for name, names in sources.items():
        vi = helper.make_tensor_value_info(name, TensorProto.FLOAT, list(inits[name].shape))
        prop = vi.metadata_props.add()
        prop.key, prop.value = "pkg.onnxscript.optimizer.folded_from", repr(names)
        m.graph.value_info.append(vi)
    return m


def test_initializers_named_constant_by_the_user(tmp_path: Any, capsys: Any) -> None:
    """The file cannot say that tables folded from a buffer are not parameters (the folded
    weight's transpose is one): without ``constants`` all three train; naming the buffer (a
    source of ``folded_from``) or the initializers makes the tables constants, the weight stays a
    parameter, the values are the same; an unknown name, and ``--constant`` for a ``.pt2``, are
    refused in one line."""
    m = _rotary_like()
    assert sorted(interop.from_onnx(m).params) == ["cos_t", "sin_t", "val_w"]
    x = np.random.default_rng(6).normal(size=(2, 3, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    for constants in (["rotary.inv_freq"], ["cos_t", "sin_t"]):
        imp = interop.from_onnx(m, constants=constants)
        assert sorted(imp.params) == ["val_w"], constants
        assert [leaf.name for leaf in imp.graph.leaves if leaf.kind == "param"] == ["val_w"]
        np.testing.assert_allclose(_ours(imp, x), want, atol=1e-6, rtol=0)
    with pytest.raises(interop.InteropError) as e:
        interop.from_onnx(m, constants=["rotary.inv_fre"])
    assert str(e.value) == (
        "from_onnx: constants: 'rotary.inv_fre' is no float initializer of the model, nor a "
        "source one was folded from (pkg.onnxscript.optimizer.folded_from)"
    )

    from torchlean_ir import cli

    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert cli.main(["import", str(path), "-o", str(tmp_path / "g.json"),
                     "--constant", "rotary.inv_freq"]) == 0  # fmt: skip
    assert "1 parameter values not written" in capsys.readouterr().out
    assert cli.main(["import", str(path), "--report", "--constant", "cos_t"]) == 0
    assert "would import" in capsys.readouterr().out
    assert cli.main(["import", str(path), "--report", "--constant", "nope"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("torchlean: error: from_onnx: constants: 'nope' is no ")
    assert cli.main(["import", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "g.json"),
                     "--constant", "rotary.inv_freq"]) == 2  # fmt: skip
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"torchlean: error: {tmp_path / 'm.pt2'}: --constant is for .onnx models (a .pt2 "
        "program declares its buffers, which import as constants or frozen parameters)\n"
    )


def _tied_like(emb: np.ndarray, t_from: np.ndarray | None = None) -> Any:
    """``(x @ emb_t) @ emb + rows`` as ``torch.onnx.export`` writes a tied output layer: the
    parameter ``emb`` (5 x 4), ``emb_t`` its transpose and ``rows`` its leading 3 rows (1 x 3 x
    4), both folded by the exporter into initializers of their own whose metadata
    (``folded_from``) names ``emb``; ``t_from``: the values of ``emb_t`` (default ``emb.T``)."""
    inits = {
        "emb": emb,
        "emb_t": emb.T.copy() if t_from is None else t_from,
        "rows": emb[:3].reshape(1, 3, 4).copy(),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "emb_t"], ["a"]),
        helper.make_node("MatMul", ["a", "emb"], ["b"]),
        helper.make_node("Add", ["b", "rows"], ["y"]),
    ]
    m = _model(nodes, [("x", [2, 3, 4])], ("y", [2, 3, 4]), inits)
    return _folded(m, inits, {"emb_t": ["emb"], "rows": ["add", "arange", "emb", "val_3"]})


def test_initializers_tied_by_the_user(tmp_path: Any, capsys: Any) -> None:
    """An initializer folded from a parameter the file holds is, by the user's word
    (``tied``, ``--tie``), that parameter's transpose or leading rows: one parameter, the same
    values, its gradient the sum of the three untied ones, verified; refused in one line: a
    name that names nothing, a parameter that is not in the file, values that differ, a fold
    that is neither, values that cannot tell two folds apart (a fresh model's zeros), a name
    both constant and tied, ``--tie`` for a ``.pt2``."""
    rng = np.random.default_rng(7)
    emb = rng.normal(size=(5, 4)).astype(np.float32)
    m = _tied_like(emb)
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    (want,) = ReferenceEvaluator(m).run(None, {"x": x})
    untied = interop.from_onnx(m)
    assert sorted(untied.params) == ["emb", "emb_t", "rows"]
    for tied in (["emb"], {"emb": "emb"}, {"emb_t": "emb", "rows": "emb"}):
        imp = interop.from_onnx(m, tied=tied)
        assert sorted(imp.params) == ["emb"], tied
        assert sorted(leaf.name for leaf in imp.graph.leaves) == ["emb", "x"]
        assert {"transpose2d", "slice"} <= {n.op for n in imp.graph.nodes}
        np.testing.assert_allclose(_ours(imp, x), want, atol=1e-6, rtol=0)

    # the gradient flows to the one parameter: the untied ones' gradients, folded back, summed
    seed = rng.normal(size=(2, 3, 4)).astype(np.float32)

    def grads(imp: interop.Imported) -> dict[str, np.ndarray]:
        cg = compiler.compile(imp.graph).batched(over=imp.batched, grads="sum")
        return cg.vjp_with_seed({**imp.params, "x": x}, seed)

    g, apart = grads(imp), grads(untied)
    together = np.asarray(apart["emb"]) + np.asarray(apart["emb_t"]).T
    together[:3] += np.asarray(apart["rows"]).reshape(3, 4)
    np.testing.assert_allclose(g["emb"], together, atol=1e-5, rtol=1e-5)
    report = verify.verify_graph(imp.graph)
    assert report.verdict == "verified", report.summary()

    def refused(model: Any, **kw: Any) -> str:
        with pytest.raises(interop.InteropError) as e:
            interop.from_onnx(model, **kw)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert refused(m, tied={"embed": "emb"}) == (
        "from_onnx: tied: 'embed' to 'emb': 'embed' is no float initializer of the model other "
        "than 'emb', nor a source one was folded from (pkg.onnxscript.optimizer.folded_from)"
    )
    assert refused(m, tied={"emb": "model.embed.weight"}) == (
        "from_onnx: tied: 'emb' to 'model.embed.weight': 'model.embed.weight' is no float "
        "initializer of the model (the file holds the tied tensor as 'emb': tie 'emb' to itself)"
    )
    off = emb.T.copy()
    off[1, 2] += 1e-3
    assert refused(_tied_like(emb, off), tied=["emb"]) == (
        "from_onnx: tied: 'emb' to 'emb': 'emb_t' of shape [4, 5] is not 'emb' of shape [5, 4] "
        "as itself nor as its transpose: the values differ"
    )
    columns = _tied_like(emb, emb[:, :2].copy())  # a fold that is not ours: 2 columns
    assert refused(columns, tied=["emb"]) == (
        "from_onnx: tied: 'emb' to 'emb': 'emb_t' of shape [5, 2] is no fold of 'emb' of shape "
        "[5, 4] (only the parameter itself, its transpose or its leading rows, reshaped)"
    )
    zeros = np.zeros((5, 4), np.float32)
    assert refused(_tied_like(zeros), tied=["emb"]) == (
        "from_onnx: tied: 'emb' to 'emb': 'emb_t' of shape [4, 5] equals 'emb' as itself and as "
        "its transpose: the values do not tell which (perturb the weights before exporting)"
    )
    assert refused(m, tied=["emb"], constants=["rows"]) == (
        "from_onnx: 'rows' is named by both constants and tied (a constant, or a fold of the "
        "parameter 'emb': one of them)"
    )

    from torchlean_ir import cli

    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert cli.main(["import", str(path), "-o", str(tmp_path / "g.json"),
                     "--tie", "emb_t=emb", "--tie", "rows=emb"]) == 0  # fmt: skip
    assert "1 parameter values not written" in capsys.readouterr().out
    assert cli.main(["import", str(path), "--report", "--tie", "emb"]) == 0
    assert "would import" in capsys.readouterr().out
    assert cli.main(["import", str(path), "-o", str(tmp_path / "g.json"),
                     "--tie", "emb_t="]) == 2  # fmt: skip
    assert capsys.readouterr().err == (
        "torchlean: error: --tie: expected NAME or NAME=PARAM, got 'emb_t='\n"
    )
    assert cli.main(["import", str(tmp_path / "m.pt2"), "-o", str(tmp_path / "g.json"),
                     "--tie", "lm_head.weight"]) == 2  # fmt: skip
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"torchlean: error: {tmp_path / 'm.pt2'}: --tie is for .onnx models (a .pt2 program "
        "keeps a tensor PyTorch ties as one parameter, which imports as one)\n"
    )
