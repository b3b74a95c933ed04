"""The corpus of real models, built once for the tests and the benchmark.

Hugging Face ``transformers`` models built from config objects with random weights (nothing is
downloaded), small enough for CI; the same builders at full size take a full-size config. The
language models (GPT-2, BERT, LLaMA) are exported with their labels, so the program computes
the model's own loss; the vision models (ResNet, MobileNetV2, ViT) take 32x32 images, their
convolution weights and batch-norm statistics randomised so that eval-mode batch norm is not
the identity. Used by ``tests/interop/test_transformers.py``,
``tests/interop/test_vision_models.py`` and ``benchmarks/interop_models.py``.

Importing this module imports ``torch`` and ``transformers``: callers check for them first.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import transformers
from torch import nn
from torch.nn import functional as F

#: the language models' batch, sequence length and vocabulary
N, L, V = 3, 8, 100
#: the vision models' batch (differs from every other dimension of the models) and labels
BATCH = 3
LABELS = [1, 2, 3]


def gpt2() -> tuple[Any, dict[str, Any]]:
    """``GPT2LMHeadModel`` (2 layers, width 64, 4 heads) and its batch with labels."""
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=V, n_positions=32, use_cache=False
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, V, (N, L))
    return model, {"input_ids": ids, "labels": torch.randint(0, V, (N, L))}


def bert() -> tuple[Any, dict[str, Any]]:
    """``BertForSequenceClassification`` (default config otherwise: exact GELU) with
    ``attention_mask``, ``token_type_ids`` and labels."""
    config = transformers.BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=V,
        max_position_embeddings=32,
        num_labels=3,
    )
    model = transformers.BertForSequenceClassification(config).eval()
    ids = torch.randint(1, V, (N, L))
    ids[1, 2] = 0  # the padding token: its embedding row gets no gradient
    mask = torch.ones(N, L, dtype=torch.long)
    mask[0, 5:] = 0  # a padded sequence
    return model, {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": torch.randint(0, 2, (N, L)),
        "labels": torch.tensor([0, 2, 1]),
    }


def llama() -> tuple[Any, dict[str, Any]]:
    """``LlamaForCausalLM``: RMSNorm, rotary embeddings, SwiGLU, grouped-query attention."""
    config = transformers.LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention
        intermediate_size=128,
        vocab_size=V,
        max_position_embeddings=32,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, V, (N, L))
    return model, {"input_ids": ids, "labels": torch.randint(0, V, (N, L))}


#: name -> builder of (model in eval mode, the keyword arguments it is exported with)
LANGUAGE_MODELS = {"gpt2": gpt2, "bert": bert, "llama": llama}


def roberta() -> tuple[Any, dict[str, Any]]:
    """``RobertaForSequenceClassification`` with a padded sequence, ``attention_mask``, labels
    and ``position_ids`` computed as the model does (``create_position_ids_from_input_ids``):
    without them it computes them from ``input_ids`` at run time, which does not import."""
    config = transformers.RobertaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=V,
        max_position_embeddings=L + 2,
        num_labels=3,
    )
    model = transformers.RobertaForSequenceClassification(config).eval()
    pad = config.pad_token_id
    ids = torch.randint(pad + 2, V, (N, L))
    ids[0, 5:] = pad
    keep = ids.ne(pad).long()
    return model, {
        "input_ids": ids,
        "attention_mask": keep,
        "position_ids": torch.cumsum(keep, 1) * keep + pad,
        "labels": torch.tensor([0, 2, 1]),
    }


def opt() -> tuple[Any, dict[str, Any]]:
    """``OPTForCausalLM`` with a padded sequence, ``attention_mask``, labels and ``position_ids``
    computed as the model does from the mask (``cumsum(mask) * mask - 1``), clamped at 0 (the
    padded tokens' -1 is no index input's value)."""
    config = transformers.OPTConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        ffn_dim=128,
        vocab_size=V,
        max_position_embeddings=32,
        word_embed_proj_dim=64,
        use_cache=False,
    )
    model = transformers.OPTForCausalLM(config).eval()
    mask = torch.ones(N, L, dtype=torch.long)
    mask[0, 5:] = 0
    return model, {
        "input_ids": torch.randint(3, V, (N, L)),
        "attention_mask": mask,
        "position_ids": (torch.cumsum(mask, 1) * mask - 1).clamp(min=0),
        "labels": torch.randint(0, V, (N, L)),
    }


#: language models whose position ids are computed from their inputs at run time unless given
#: (``tests/interop/test_index_arith.py``): exported with ``position_ids``
POSITION_ID_MODELS = {"roberta": roberta, "opt": opt}


def randomize(model: Any, seed: int) -> Any:
    """He-scaled convolution weights and random batch-norm statistics, scales and shifts."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Conv2d):
                fan_in = mod.weight[0].numel()
                w = torch.randn(mod.weight.shape, generator=g) * math.sqrt(2.0 / fan_in)
                mod.weight.copy_(w)
            elif isinstance(mod, nn.BatchNorm2d):
                c = mod.num_features
                mod.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                mod.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                mod.weight.copy_(torch.rand(c, generator=g) + 0.5)
                mod.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return model


def resnet() -> Any:
    """``ResNetForImageClassification``, the ResNet-50 layout (bottleneck blocks), 16 and 32
    channels."""
    cfg = transformers.ResNetConfig(
        num_channels=3,
        embedding_size=16,
        hidden_sizes=[16, 32],
        depths=[1, 1],
        layer_type="bottleneck",
        num_labels=10,
    )
    return randomize(transformers.ResNetForImageClassification(cfg), 0)


def mobilenet() -> Any:
    """``MobileNetV2ForImageClassification``: depthwise convolutions, ReLU6, 'SAME' padding,
    depth multiplier 0.25."""
    cfg = transformers.MobileNetV2Config(
        num_channels=3,
        image_size=32,
        depth_multiplier=0.25,
        finegrained_output=False,
        num_labels=10,
    )
    return randomize(transformers.MobileNetV2ForImageClassification(cfg), 1)


def vit() -> Any:
    """``ViTForImageClassification`` (2 layers, width 64, 4 heads, 8x8 patches)."""
    cfg = transformers.ViTConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
        num_channels=3,
        num_labels=10,
    )
    return transformers.ViTForImageClassification(cfg)


#: name -> (builder, Adam's learning rate). MobileNetV2 trains at 3e-4: at 1e-3 its loss falls
#: from 2.35 to 0.02 in 20 steps and PyTorch's own float32 and float64 runs part by 6e-3 (ReLU6
#: kinks crossed on different steps), so no float32 implementation could follow within 1e-4.
VISION_MODELS = {"resnet": (resnet, 1e-3), "mobilenet": (mobilenet, 3e-4), "vit": (vit, 1e-3)}


class PerSampleLoss(nn.Module):
    """The model's own loss per sample: its logits' cross-entropy with ``reduction='none'``
    (the model's ``labels=`` path reduces over the batch with ``CrossEntropyLoss()``)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Any, labels: Any) -> Any:
        return F.cross_entropy(self.model(pixel_values).logits, labels, reduction="none")


def assert_verified_exactly(graph: Any, saved: Any = None, capsys: Any = None) -> None:
    """``graph`` verified, every check exact: through the command line when it was saved as
    ``saved`` (exit code 0 and the summary line, read with pytest's ``capsys``), else through
    :func:`verify.verify_graph`."""
    if saved is not None:
        from verify import cli as verify_cli

        assert verify_cli.main([str(saved), "-q"]) == 0
        out = capsys.readouterr().out
        assert "VERIFIED" in out and "0 probabilistic, 0 not verified" in out
        return
    import verify

    report = verify.verify_graph(graph)
    assert report.verdict == "verified"
    assert all(c.method == "exact" for c in report.all_checks), report.summary()


def assert_adam_follows_torch(
    graph: Any, params: dict[str, Any], index: Any, over: tuple[str, ...], model: Any, kwargs: Any
) -> None:
    """20 compiled Adam steps (lr 1e-3, gradients averaged over the batch of index inputs
    ``over``) on ``graph``'s first output, the loss, follow ``torch.optim.Adam`` on ``model``
    called with ``kwargs`` within 1e-4."""
    import numpy as np

    import compiler
    import torchlean_ir as tl

    b, outs = tl.GraphBuilder.from_graph(graph)
    step = compiler.TrainStep(
        compiler.compile(b.build(outs[0])).batched(over=over, grads="mean"),
        compiler.optimizer("adam", learning_rate=1e-3),
    )
    state = step.init({k: params[k] for k in step.param_names})
    state, losses = compiler.fit(step, state, [({}, index)] * 20)
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)
    expected = []
    for _ in range(20):
        adam.zero_grad()
        step_loss = model(**kwargs).loss
        step_loss.backward()
        adam.step()
        expected.append(step_loss.item())
    assert np.abs(np.asarray(losses) - expected).max() < 1e-4
