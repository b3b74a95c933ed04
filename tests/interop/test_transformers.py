"""Hugging Face ``transformers`` language models, exported exactly as a user writes it.

Each model is built from a config object with random weights (nothing is downloaded), put in
eval mode, exported with ``torch.export.export(model, args=(), kwargs={...})`` with its labels
(so the program computes the model's own loss), saved with ``torch.export.save`` and imported
by ``torchlean import`` (the command line's ``main``, in process). Then, on the same batch:

- the compiled forward (the loss, the batch mean of the per-sample losses, and the logits)
  within 1e-5 relative of PyTorch in float32 (measured: at most 4e-7);
- the gradient of the model's own loss (``batched(grads="mean")``) within 1e-4 of autograd
  for every parameter, relative to the largest gradient of that parameter, or of the model for
  a gradient that is zero in exact arithmetic (the key biases of attention: rounding noise of
  1e-12 on both sides) (measured: at most 8e-7);
- the verifier: VERIFIED, every check exact (GPT-2 through the ``torchlean-verify`` command
  line);
- 20 compiled Adam steps whose losses follow ``torch.optim.Adam``'s within 1e-4 (measured: at
  most 1e-6).

The models (``corpus.py``, shared with ``benchmarks/interop_models.py``) are small (2 layers,
width 64, 8 tokens, a vocabulary of 100); the same code path imports them at full size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
verify = pytest.importorskip("verify")

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
from torchlean_ir import cli  # noqa: E402
from torchlean_ir.interop._files import read_params  # noqa: E402

from .corpus import (  # noqa: E402  (the models, built from configs)
    LANGUAGE_MODELS,
    N,
    assert_adam_follows_torch,
    assert_verified_exactly,
)

MODELS = LANGUAGE_MODELS


def _import(tmp_path: Path, model: Any, kwargs: dict[str, Any]) -> tuple[tl.GraphData, Any]:
    """What a user does: export, save, ``torchlean import`` from the command line."""
    program = torch.export.export(model, args=(), kwargs=kwargs)
    torch.export.save(program, tmp_path / "m.pt2")
    code = cli.main(
        [
            "import",
            str(tmp_path / "m.pt2"),
            "-o",
            str(tmp_path / "g.json"),
            "--params",
            str(tmp_path / "p.safetensors"),
        ]
    )
    assert code == 0
    return tl.load(tmp_path / "g.json"), read_params(str(tmp_path / "p.safetensors"))


def _rel(ours: Any, theirs: Any, scale: float = 0.0) -> float:
    theirs = np.asarray(theirs, np.float64)
    top = max(float(np.abs(theirs).max()), scale, 1e-30)
    return float(np.abs(np.asarray(ours, np.float64) - theirs).max() / top)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_imports_matches_torch_verifies_and_trains(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.manual_seed(0)
    model, kwargs = MODELS[name]()
    graph, params = _import(tmp_path, model, kwargs)
    line = capsys.readouterr().out
    assert "output 0: the source's is the mean over the batch of its values" in line
    index = {k: v.numpy() for k, v in kwargs.items()}
    over = tuple(ix.name for ix in graph.index_inputs)
    assert sorted(over) == sorted(kwargs)
    assert all(leaf.kind == "param" for leaf in graph.leaves)  # no float input: ids only

    # forward: the loss (this sample's mean; PyTorch's is their mean) and the logits
    out = model(**kwargs)
    cg = compiler.compile(graph).batched(over=over, grads="mean")
    loss, logits = cg.forward(params, index)
    assert loss.shape == (N,)
    assert _rel(loss.mean(), out.loss.item()) < 1e-5
    assert _rel(logits, out.logits.detach().numpy()) < 1e-5

    # gradients of the model's own loss, every parameter (tied ones under each name)
    grads = cg.vjp_with_seed(params, (np.ones(N, np.float32), None), index)
    named = dict(model.named_parameters(remove_duplicate=False))
    assert set(grads) <= set(named) and len(grads) >= len(dict(model.named_parameters()))
    theirs = dict(zip(named, torch.autograd.grad(out.loss, list(named.values())), strict=True))
    top = max(float(t.abs().max()) for t in theirs.values())
    for k, g in grads.items():
        assert _rel(g, theirs[k].numpy(), 1e-3 * top) < 1e-4, k

    # verified, every check exact (GPT-2's through the command line)
    assert_verified_exactly(graph, tmp_path / "g.json" if name == "gpt2" else None, capsys)

    # 20 Adam steps on the loss alone, against torch.optim.Adam
    assert_adam_follows_torch(graph, params, index, over, model, kwargs)
