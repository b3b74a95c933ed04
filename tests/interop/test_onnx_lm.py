"""Hugging Face language models through ``torch.onnx.export(..., dynamo=True)`` and ``torchlean
import model.onnx``.

The models of ``test_transformers.py`` (GPT-2 with its loss, BERT for sequence classification
with a padding mask, token types and labels, LLaMA with grouped-query attention and rotary
embeddings), exported with their labels, so the ONNX model computes the model's own loss
(``SoftmaxCrossEntropyLoss`` at labels padded and shifted by one). On the same batch:

- the compiled forward (the loss, the batch mean of the per-sample losses, and the logits)
  within 1e-5 relative of PyTorch in float32 (measured: at most 4.1e-7);
- the gradient of the loss (``batched(grads="mean")``) within 1e-4 of autograd, relative to the
  largest gradient of the parameter (or 1e-3 of the model's largest) (measured: at most 4.7e-6).
  The exporter folds what it can: a weight's transpose (``val_47``), the rows of a position
  embedding the positions read (``embedding_1``), both initializers of their own whose metadata
  (``pkg.onnxscript.optimizer.folded_from``) names the parameter; their gradients are mapped back
  onto it before the comparison, one to one. What the file cannot say, the user says: GPT-2's
  output layer, folded into the transpose of the token embedding it is tied to, is that
  transpose of the one parameter (``--tie lm_head.weight``: the exporter keeps the tied tensor
  under that name); LLaMA's rotary sin and cos tables, folded from the buffer ``inv_freq``, are
  constants (``--constant model.rotary_emb.inv_freq``). So the import has exactly PyTorch's
  parameters (GPT-2: 28, LLaMA: 21), each of ours one of PyTorch's, its transpose or its
  leading rows, and for all three 20 compiled Adam steps follow ``torch.optim.Adam``'s losses
  within 1e-4 (BERT's too: its token ids avoid the padding token, below, so the padding row
  gets a zero gradient in both and Adam leaves it where it is);
- the verifier: VERIFIED, every check exact (GPT-2 through the ``torchlean-verify`` command line).

Two things are set up so that the comparison with PyTorch is one of the same function: the
weights are perturbed a little (the exporter merges initializers of equal values, the ones of
every LayerNorm at initialisation, into one parameter: a different, still correct, model to
train), and BERT's token ids avoid its padding token (``padding_idx`` is not in ONNX's
``Gather``: the exported model trains that row, PyTorch does not).
"""

from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
verify = pytest.importorskip("verify")

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
from torchlean_ir import cli  # noqa: E402
from torchlean_ir.interop._files import read_params  # noqa: E402

from .corpus import assert_adam_follows_torch, assert_verified_exactly  # noqa: E402
from .test_transformers import MODELS, N  # noqa: E402

_FOLDED = "pkg.onnxscript.optimizer.folded_from"

#: what the user says that the file cannot: GPT-2's output layer, which the exporter folds into
#: the transpose of the token embedding it is tied to (kept as ``lm_head.weight``), is that
#: transpose of the one parameter; LLaMA's rotary sin and cos tables, which the exporter folds
#: from the non-persistent buffer ``inv_freq`` into initializers of their own, are constants
#: (from ``.pt2`` both hold, the program keeping the tie and declaring the buffer)
SAYS = {
    "gpt2": ["--tie", "lm_head.weight"],
    "llama": ["--constant", "model.rotary_emb.inv_freq"],
}


def _export(tmp_path: Path, name: str) -> tuple[Any, dict[str, Any], Path]:
    torch.manual_seed(0)
    model, kwargs = MODELS[name]()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    if name == "bert":
        kwargs["input_ids"] = kwargs["input_ids"].clamp(min=1)
    path = tmp_path / "m.onnx"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model, args=(), kwargs=kwargs, f=str(path), dynamo=True)
    return model, kwargs, path


def _rel(ours: Any, theirs: Any, scale: float = 0.0) -> float:
    theirs = np.asarray(theirs, np.float64)
    top = max(float(np.abs(theirs).max()), scale, 1e-30)
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / top)


def _folded_from(path: Path) -> dict[str, list[str]]:
    g = onnx.load(str(path)).graph
    return {
        vi.name: ast.literal_eval(p.value)
        for vi in g.value_info
        for p in vi.metadata_props
        if p.key == _FOLDED
    }


def _onto_parameters(
    grads: dict[str, np.ndarray], params: dict[str, np.ndarray], named: dict[str, Any], path: Path
) -> dict[str, np.ndarray]:
    """Our gradients onto PyTorch's parameters, one to one: each parameter of ours is one of
    PyTorch's, its transpose, or its leading rows (folded by the exporter, which names the
    parameter), no two of ours are the same one of PyTorch's (GPT-2's and OPT's output layer is
    imported tied to the token embedding: ``--tie lm_head.weight``), and every one of PyTorch's
    has its counterpart. ``named`` lists PyTorch's tied parameters under each of their names
    (``remove_duplicate=False``; the file keeps one of them), and so does the result."""
    folded = _folded_from(path)
    first: dict[int, str] = {}
    canon = {k: first.setdefault(id(p), k) for k, p in named.items()}
    out: dict[str, np.ndarray] = {}
    for k, g in grads.items():
        (src,) = {canon[s] for s in ([k] if k in named else folded.get(k, [])) if s in named}
        assert src not in out, (k, src)  # one of ours for each of PyTorch's
        p = named[src].detach().numpy()
        v = params[k]
        if v.size == p.size and np.array_equal(v.reshape(p.shape), p):
            out[src] = g.reshape(p.shape)
        elif p.ndim == 2 and v.size == p.size and np.array_equal(v.reshape(p.T.shape), p.T):
            out[src] = g.reshape(p.T.shape).T
        else:
            rows = v.size // p.shape[1]
            assert np.array_equal(v.reshape(rows, -1), p[:rows]), k
            out[src] = np.zeros(p.shape)
            out[src][:rows] = g.reshape(rows, -1)
    assert sorted(out) == sorted(set(canon.values()))  # and one of PyTorch's for each of ours
    return {k: out[canon[k]] for k in named}


@pytest.mark.parametrize("name", list(MODELS))
def test_language_model_through_onnx(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, kwargs, path = _export(tmp_path, name)
    code = cli.main(["import", str(path), "-o", str(tmp_path / "g.json"),
                     "--params", str(tmp_path / "p.safetensors"),
                     *SAYS.get(name, [])])  # fmt: skip
    assert code in (0, None), capsys.readouterr()
    assert "output 0: the source's is the mean over the batch" in capsys.readouterr().out
    graph = tl.load(tmp_path / "g.json")
    params = read_params(str(tmp_path / "p.safetensors"))
    over = tuple(ix.name for ix in graph.index_inputs)
    assert sorted(over) == sorted(kwargs)
    assert all(leaf.kind == "param" for leaf in graph.leaves)  # no float input: ids only
    index = {k: v.numpy() for k, v in kwargs.items()}
    assert len(params) == len(list(model.parameters()))  # PyTorch's, no more

    # forward: the loss (this sample's mean; PyTorch's is their mean) and the logits
    out = model(**kwargs)
    cg = compiler.compile(graph).batched(over=over, grads="mean")
    loss, logits = cg.forward(params, index)
    assert loss.shape == (N,)
    assert _rel(loss.mean(), out.loss.item()) < 1e-5
    assert _rel(logits, out.logits.detach().numpy()) < 1e-5

    # the gradient of the loss, onto every parameter of PyTorch's (tied ones under each name)
    grads = cg.vjp_with_seed(params, (np.ones(N, np.float32), None), index)
    named = dict(model.named_parameters(remove_duplicate=False))
    theirs = dict(zip(named, torch.autograd.grad(out.loss, list(named.values())), strict=True))
    ours = _onto_parameters(grads, params, named, path)
    top = max(float(t.abs().max()) for t in theirs.values())
    for k, g in ours.items():
        assert _rel(g, theirs[k].numpy(), 1e-3 * top) < 1e-4, k

    # verified, every check exact (GPT-2's through the command line)
    assert_verified_exactly(graph, tmp_path / "g.json" if name == "gpt2" else None, capsys)
    # 20 compiled Adam steps on the loss follow torch.optim.Adam: each parameter of ours is one
    # of PyTorch's, its transpose or its leading rows, one to one (above; Adam is elementwise
    # and leaves rows of zero gradient where they are, so it trains them alike: BERT's padding
    # row, which no token id here reads), none a table PyTorch holds constant, none a copy of a
    # tied one
    assert_adam_follows_torch(graph, params, index, over, model, kwargs)


def test_an_index_input_as_float_data_through_onnx(tmp_path: Path) -> None:
    """``Cast`` of integer inputs to float (``1 - y.float()``, ``(1 - mask.float()) * min``) is
    ``nat_to_float`` / ``nat_vec_to_float``: forward and gradient match PyTorch, verified."""
    from torchlean_ir import interop

    from .test_torch_lm import _AsFloat, check_index_as_float

    torch.manual_seed(0)
    model = _AsFloat().eval()
    x = torch.randn(3, 6, 8)
    y = torch.tensor([0, 3, 1])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1] * 6, [1, 1, 0, 1, 1, 1]])
    path = tmp_path / "m.onnx"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(model, (x, y, mask), str(path), dynamo=True,
                          input_names=["x", "y", "mask"])  # fmt: skip
    check_index_as_float(interop.from_onnx(path), model, (x, y, mask), "bias")


def _masked_softmax_model(reader: str) -> Any:
    """``softmax(x + where(bool(m), 0, -inf))`` and ``x * float(m)`` for an integer input ``m``;
    ``reader`` is the op that reads the additive mask (``Add``, or a ``Mul`` that is refused)."""
    from onnx import TensorProto, helper

    f, i = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Cast", ["m"], ["b"], to=TensorProto.BOOL),
        helper.make_node("Where", ["b", "zero", "neg"], ["w"]),
        helper.make_node(reader, ["x", "w"], ["s"]),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("Cast", ["m"], ["mf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "mf"], ["y"]),
    ]
    inits = [
        helper.make_tensor("zero", f, [], [0.0]),
        helper.make_tensor("neg", f, [], [float("-inf")]),
    ]
    graph = helper.make_graph(
        nodes,
        "masked",
        [
            helper.make_tensor_value_info("x", f, [3, 5]),
            helper.make_tensor_value_info("m", i, [3, 5]),
        ],
        [
            helper.make_tensor_value_info("p", f, [3, 5]),
            helper.make_tensor_value_info("y", f, [3, 5]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_index_masks_and_float_data_in_a_hand_written_onnx_model() -> None:
    """A padding mask of an integer input added to scores is applied by the softmax (blocked
    keys weigh 0), the integers themselves are float data (2 and 3 stay 2 and 3), both as ONNX's
    reference evaluator computes them; the mask read by anything but an addition and the softmax
    after it is refused with one line naming the node."""
    from onnx.reference import ReferenceEvaluator

    from torchlean_ir import interop

    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    m = np.array([[1, 1, 0, 2, 0], [3, 1, 1, 1, 1], [0, 0, 0, 0, 1]], np.int64)
    model = _masked_softmax_model("Add")
    want = ReferenceEvaluator(model).run(None, {"x": x, "m": m})
    imported = interop.from_onnx(model)
    cg = compiler.compile(imported.graph).batched(over=imported.batched)
    got = cg.forward({**imported.params, "x": x}, {"m": m})
    for g, w in zip(got, want, strict=True):
        assert _rel(g, w) < 1e-6
    report = verify.verify_graph(imported.graph)
    assert report.verdict == "verified"

    with pytest.raises(interop.InteropError) as e:
        interop.from_onnx(_masked_softmax_model("Mul"))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg == (
        "from_onnx: node 2 (Mul 's'): an attention mask of an index input read by Mul (only "
        "added to scores, then read by a softmax)"
    ), msg
