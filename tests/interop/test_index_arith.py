"""Integer arithmetic on index inputs, through ``torch.export`` and ``torch.onnx.export``.

What language models do to their integer inputs beyond views: OPT reads its position embedding
at ``position_ids + 2`` (an index plus a number: the table's rows moved, ``shifted_rows``);
RoBERTa gathers its token types from a buffer of zeros at the position ids (a gather from a
table of one value: that value, for every sample) and, when no ``position_ids`` are given,
computes them from ``input_ids`` at run time (``cumsum`` of a padding test), which our graphs
do not: the import refuses in one line that names the op, the source line, and what would make
it import (passing ``position_ids``). The modules here are those computations, small; the real
models (``RobertaForSequenceClassification`` and ``OPTForCausalLM`` exported with
``position_ids``) run behind the ``heavy`` marker (``pytest -m heavy``: 10 to 40 s each on 2
loaded cores, beyond CI's budget), their figures in ``docs/interop.md``. Forward within 1e-5
and gradients within 1e-4 of PyTorch (float32, relative to the largest magnitude), verified
with every check exact.
"""

from __future__ import annotations

import contextlib
import inspect
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import compiler  # noqa: E402
from torchlean_ir import interop  # noqa: E402

N, L, V, P, D = 3, 5, 20, 12, 6
PAD = 1  # RoBERTa's padding token, and the first position after it


class _Offsets(nn.Module):
    """OPT's learned positions read at ``position_ids + 2``; a second table at ``position_ids
    - 1`` (ids from 1); a padding test of the shifted ids as a float mask."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(P, D)
        self.back = nn.Embedding(P, D)
        self.head = nn.Linear(D, 3)

    def forward(self, input_ids: Any, position_ids: Any) -> Any:
        shifted = position_ids + 2
        keep = shifted.ne(3).float().unsqueeze(-1)  # position 1 masked
        h = self.tok(input_ids) + self.pos(shifted) * keep + self.back(position_ids - 1)
        return self.head(h).sum(1)


class _RobertaPositions(nn.Module):
    """RoBERTa's embeddings: token types gathered from a buffer of zeros at the positions, and
    the positions computed from ``input_ids`` when not given."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(P, D)
        self.typ = nn.Embedding(2, D)
        self.register_buffer("token_type_ids", torch.zeros(1, P, dtype=torch.long), False)

    def forward(self, input_ids: Any, position_ids: Any = None) -> Any:
        if position_ids is None:  # modeling_roberta's create_position_ids_from_input_ids
            mask = input_ids.ne(PAD).int()
            position_ids = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + PAD
        types = self.token_type_ids.expand(position_ids.shape[0], -1)
        types = torch.gather(types, dim=1, index=position_ids)
        return (self.tok(input_ids) + self.pos(position_ids) + self.typ(types)).sum(1)


def _inputs() -> dict[str, Any]:
    torch.manual_seed(0)
    ids = torch.randint(2, V, (N, L))
    pos = torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 1, 2, 3, 4]])
    return {"input_ids": ids, "position_ids": pos}


def _import(model: Any, kwargs: dict[str, Any], route: str, tmp_path: Path) -> Any:
    args = tuple(kwargs.values())
    if route == "pt2":
        return interop.from_torch(torch.export.export(model, args))
    pytest.importorskip("onnxscript")
    path = tmp_path / "m.onnx"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model, args, str(path), dynamo=True, input_names=list(kwargs))
    return interop.from_onnx(path)


def _by_source(grads: dict[str, Any], route: str, tmp_path: Path) -> dict[str, Any]:
    """Gradients under PyTorch's names: the ONNX exporter folds a linear layer's weight into its
    transpose, an initializer of its own whose metadata names the weight."""
    if route == "pt2":
        return grads
    import onnx

    folded = interop._onnx_import.folded_from(onnx.load(str(tmp_path / "m.onnx")).graph)
    return {folded[k][0] if k in folded else k: g if k not in folded else g.T
            for k, g in grads.items()}  # fmt: skip


def _rel(ours: Any, theirs: Any) -> float:
    theirs = np.asarray(theirs, np.float64)
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / np.abs(theirs).max())


@pytest.mark.parametrize("route", ["pt2", "onnx"])
@pytest.mark.parametrize("module", [_Offsets, _RobertaPositions])
def test_offsets_and_uniform_buffers_of_index_inputs(
    module: type, route: str, tmp_path: Path
) -> None:
    torch.manual_seed(1)
    model = module().eval()
    kwargs = _inputs()
    imported = _import(model, kwargs, route, tmp_path)
    names = [ix.name for ix in imported.graph.index_inputs]
    assert sorted(imported.source_names.get(k, k) for k in names) == sorted(kwargs)
    index = {k: kwargs[imported.source_names.get(k, k)].numpy() for k in names}
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="sum")
    ref = model(**kwargs)
    assert _rel(cg.forward(imported.params, index), ref.detach().numpy()) < 1e-5
    seed = np.ones(ref.shape, np.float32)
    grads = cg.vjp_with_seed(imported.params, seed, index)
    named = dict(model.named_parameters())
    theirs = torch.autograd.grad(ref, list(named.values()), torch.from_numpy(seed))
    ours = _by_source(grads, route, tmp_path)
    assert sorted(ours) == sorted(named)  # the buffer is no parameter
    for (k, p), g in zip(named.items(), theirs, strict=True):
        assert ours[k].shape == tuple(p.shape)
        assert _rel(ours[k], g.numpy()) < 1e-4, k

    verify = pytest.importorskip("verify")
    report = verify.verify_graph(imported.graph)
    assert report.verdict == "verified"
    assert all(c.method == "exact" for c in report.all_checks), report.summary()


@pytest.mark.parametrize("route", ["pt2", "onnx"])
def test_positions_computed_from_input_ids_are_refused_in_one_line(
    route: str, tmp_path: Path
) -> None:
    """RoBERTa's ``cumsum`` of a padding test of ``input_ids``: integers computed at run time.
    The line names the op, where it is, and that passing ``position_ids`` makes it import."""
    kwargs = {"input_ids": _inputs()["input_ids"]}
    with pytest.raises(interop.InteropError) as e:
        _import(_RobertaPositions().eval(), kwargs, route, tmp_path)
    msg = str(e.value)
    assert "\n" not in msg
    what = (
        "of an index tensor (integers of an input) computes integers at run time, which our "
        "graphs do not (only views, comparisons with a number, known masks and adding a number "
        "apply to integer inputs); hint: compute these integers before the model and pass them "
        "as an input (position ids from a mask: the model's position_ids=...)"
    )
    if route == "pt2":
        lines, first = inspect.getsourcelines(_RobertaPositions.forward)
        line = first + next(i for i, text in enumerate(lines) if "torch.cumsum" in text)
        where = f"at test_index_arith.py:{line}"
        assert msg == f"from_torch: node cumsum (aten.cumsum) {where}: aten.cumsum {what}", msg
    else:
        assert msg.startswith("from_onnx: node "), msg
        assert msg.endswith(f" (CumSum 'node_cumsum'): CumSum {what}"), msg


#: ``from_onnx``'s ``tied`` for the models whose output layer is tied to the token embedding
TIED = {"opt": ["lm_head.weight"]}


@pytest.mark.heavy
@pytest.mark.parametrize("route", ["pt2", "onnx"])
@pytest.mark.parametrize("name", ["roberta", "opt"])
def test_real_models_with_position_ids(name: str, route: str, tmp_path: Path) -> None:
    """RoBERTa and OPT exported with ``position_ids`` (as the models compute them): forward
    (the loss and the logits) within 1e-5 and the gradient of the loss within 1e-4 of PyTorch
    (weights perturbed so that the ONNX exporter merges no initializers; gradients of the
    exporter's folded transposes mapped back onto their weights, one to one: OPT's output layer
    imported tied to its token embedding), verified, every check exact."""
    pytest.importorskip("transformers")
    verify = pytest.importorskip("verify")
    from .corpus import POSITION_ID_MODELS
    from .test_onnx_lm import _onto_parameters

    torch.manual_seed(0)
    model, kwargs = POSITION_ID_MODELS[name]()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    path = tmp_path / f"m.{route}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if route == "pt2":
            imported = interop.from_torch(torch.export.export(model, args=(), kwargs=kwargs))
        else:
            torch.onnx.export(model, args=(), kwargs=kwargs, f=str(path), dynamo=True)
            # OPT's output layer, the transpose of its token embedding: one parameter
            imported = interop.from_onnx(path, tied=TIED.get(name, ()))
    names = [ix.name for ix in imported.graph.index_inputs]
    assert sorted(imported.source_names.get(k, k) for k in names) == sorted(kwargs)
    assert len(imported.params) == len(list(model.parameters()))  # PyTorch's, no more
    index = {k: kwargs[imported.source_names.get(k, k)].numpy() for k in names}
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="mean")
    loss, logits = cg.forward(imported.params, index)
    out = model(**kwargs)
    assert _rel(loss.mean(), out.loss.item()) < 1e-5
    assert _rel(logits, out.logits.detach().numpy()) < 1e-5
    grads = cg.vjp_with_seed(imported.params, (np.ones(len(loss), np.float32), None), index)
    named = dict(model.named_parameters(remove_duplicate=False))
    theirs = torch.autograd.grad(out.loss, list(named.values()), allow_unused=True)
    theirs = {k: np.zeros(tuple(p.shape)) if g is None else g.numpy()
              for (k, p), g in zip(named.items(), theirs, strict=True)}  # fmt: skip
    if route == "onnx":
        grads = _onto_parameters(grads, imported.params, named, path)
    top = max(float(np.abs(t).max()) for t in theirs.values())
    for k, g in grads.items():
        scale = max(float(np.abs(theirs[k]).max()), 1e-3 * top)
        assert float(np.abs(np.asarray(g, np.float64) - theirs[k]).max()) / scale < 1e-4, k
    report = verify.verify_graph(imported.graph)
    assert report.verdict == "verified"
    assert all(c.method == "exact" for c in report.all_checks), report.summary()


@pytest.mark.parametrize("k", [-2, -6, 3])
def test_onnx_gather_at_an_index_input_plus_a_number_wraps_as_onnx(k: int) -> None:
    """ONNX's ``Gather`` reads an index ``j`` in ``[-n, 0)`` at row ``n + j``: a table of 6 rows
    at ``ids + k`` reads, where ``ids + k`` is negative, the table's last rows (as ONNX's
    reference evaluator does), not zeros (PyTorch's ``embedding`` refuses a negative index, so
    its import may read anything there). Forward, the gradient (each row gets the seeds of the
    positions that read it, wrapped ones included) and the verifier."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    verify = pytest.importorskip("verify")
    rng = np.random.default_rng(3)
    table = rng.normal(size=(6, 3)).astype(np.float32)
    nodes = [helper.make_node("Add", ["ids", "k"], ["j"]),
             helper.make_node("Gather", ["table", "j"], ["y"])]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "shifted",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 3])],
        initializer=[numpy_helper.from_array(table, "table"),
                     numpy_helper.from_array(np.array(k, np.int64), "k")],
    )  # fmt: skip
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    ids = np.array([[0, 1, 2, 5], [1, 0, 2, 2]], np.int64) % (6 - max(k, 0))
    j = ids + k  # in range for ONNX: [-6, 6)
    assert (j < 0).any() == (k < 0) and j.min() >= -6 and j.max() < 6
    (want,) = ReferenceEvaluator(m).run(None, {"ids": ids})
    imported = interop.from_onnx(m)
    cg = compiler.compile(imported.graph).batched(over=imported.batched, grads="sum")
    got = cg.forward(imported.params, {imported.batched[0]: ids})
    np.testing.assert_array_equal(np.asarray(got), want)
    seed = rng.normal(size=want.shape).astype(np.float32)
    grads = cg.vjp_with_seed(imported.params, seed, {imported.batched[0]: ids})
    expected = np.zeros_like(table)
    np.add.at(expected, j.reshape(-1) % 6, seed.reshape(-1, 3))
    np.testing.assert_allclose(np.asarray(grads["table"]), expected, atol=1e-6, rtol=0)
    report = verify.verify_graph(imported.graph)
    assert report.verdict == "verified", report.summary()
