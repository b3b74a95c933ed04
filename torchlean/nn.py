"""Layers in the style PyTorch users know, built on :class:`~torchlean.Ops`.

A :class:`Module` holds :class:`~torchlean.Param` s and child modules as attributes
(registered in assignment order, like ``torch.nn.Module``); ``module(ops, x)`` runs its
``forward`` on any backend, so one model trains eagerly or compiled. ``model.parameters()``
returns a :class:`~torchlean.ParamList` and names every param by its attribute path
(``fc1.weight``, ``layers.0.bias``), the names used in graphs and parameter files.

Initialisation is seeded: every layer takes ``rng`` (a ``numpy.random.Generator`` or an int
seed); without one it draws from a module-level generator that :func:`manual_seed` resets. Pass
``rng=options.rng("init")`` to thread :attr:`Options.seed <torchlean.Options.seed>`
through a whole model.

Layers are single-sample, like the ops: ``Linear`` maps ``(in,)`` to ``(out,)`` (and a sequence
``(n, in)`` to ``(n, out)``); ``Conv2d`` maps ``(C, H, W)``; batching is the trainer's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from torchlean_ir import TorchleanError, has_op

from ._ops import Ops
from ._options import as_generator
from ._param import Param, ParamList
from ._tensor import NatRef, Tensor

_DEFAULT_RNG = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reset the generator that layers created without ``rng`` draw from (PyTorch's
    ``torch.manual_seed`` for initialisation)."""
    global _DEFAULT_RNG
    _DEFAULT_RNG = as_generator(int(seed))


def _rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    return _DEFAULT_RNG if rng is None else as_generator(rng)


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], bound: float) -> np.ndarray:
    return rng.uniform(-bound, bound, size=shape)


def _need_op(name: str, layer: str) -> None:
    if not has_op(name):
        raise TorchleanError(f"{layer} needs the registry op {name!r}, which is not registered")


class Module:
    """Base class of layers and models: subclass it, assign params and child modules in
    ``__init__``, and write ``forward(self, ops, x)``."""

    def __init__(self) -> None:
        object.__setattr__(self, "_params", {})
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_params" not in self.__dict__:
            raise TorchleanError(f"{type(self).__name__}: call super().__init__() first")
        if isinstance(value, Param):
            self._params[name] = value
        elif isinstance(value, Module):
            self._children[name] = value
        object.__setattr__(self, name, value)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Param]]:
        """``(path, param)`` for every param of this module and its children, in order."""
        for name, p in self._params.items():
            yield prefix + name, p
        for name, child in self._children.items():
            yield from child.named_parameters(f"{prefix}{name}.")

    def parameters(self) -> ParamList:
        """Every param, named by its attribute path (a param shared by two paths keeps the
        first)."""
        seen: dict[int, Param] = {}
        for path, p in self.named_parameters():
            if id(p) not in seen:
                p.name = path
                seen[id(p)] = p
        return ParamList(list(seen.values()))

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``Dropout`` drops) here and in every child; returns ``self``."""
        object.__setattr__(self, "training", mode)
        for child in self._children.values():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode (``Dropout`` is the identity)."""
        return self.train(False)

    def forward(self, ops: Ops, x: Any) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, ops: Ops, x: Any) -> Tensor:
        return self.forward(ops, x)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not self._children:
            return head + ")"
        body = "\n".join(
            f"  ({k}): " + repr(c).replace("\n", "\n  ") for k, c in self._children.items()
        )
        return f"{head}\n{body}\n)"


class Sequential(Module):
    """Layers applied in order; the children are named ``layers.0``, ``layers.1``, ..."""

    def __init__(self, *layers: Module) -> None:
        super().__init__()
        self.layers = _ModuleList(layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def forward(self, ops: Ops, x: Any) -> Tensor:
        for layer in self.layers:
            x = layer(ops, x)
        return x

    def __repr__(self) -> str:
        body = "\n".join(f"  ({i}): " + repr(m).replace("\n", "\n  ") for i, m in enumerate(self))
        return f"Sequential(\n{body}\n)"


class _ModuleList(Module):
    def __init__(self, modules: Any) -> None:
        super().__init__()
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TorchleanError(f"Sequential: item {i} is {type(m).__name__}, not a Module")
            self._children[str(i)] = m
            object.__setattr__(self, f"_{i}", m)

    def __len__(self) -> int:
        return len(self._children)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._children.values())

    def __getitem__(self, i: int) -> Module:
        return list(self._children.values())[i]


# -- affine layers -----------------------------------------------------------------------


class Linear(Module):
    """``W x + b`` with ``W (out, in)``, ``b (out,)``; PyTorch's default initialisation
    ``U(-1/sqrt(in), 1/sqrt(in))``. A vector ``(in,)`` goes through the ``linear`` op; a sequence
    ``(n, in)`` through ``matmul`` with ``W^T`` plus the broadcast bias."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        bias: bool = True,
        rng: np.random.Generator | int | None = None,
    ) -> None:
        super().__init__()
        g = _rng(rng)
        bound = 1.0 / math.sqrt(max(1, in_features))
        self.in_features, self.out_features = in_features, out_features
        self.weight = Param(_uniform(g, (out_features, in_features), bound))
        self.bias = Param(_uniform(g, (out_features,), bound)) if bias else None

    def extra_repr(self) -> str:
        return f"{self.in_features}, {self.out_features}" + ("" if self.bias else ", bias=False")

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        W = ops.use(self.weight)
        if x.ndim == 1:
            b = ops.use(self.bias) if self.bias is not None else ops.zeros((self.out_features,))
            return ops.linear(W, b, x)
        if x.ndim != 2:
            raise TorchleanError(f"Linear: needs (in,) or (n, in), got {x.type}")
        y = ops.matmul(x, ops.transpose2d(W))
        if self.bias is None:
            return y
        return ops.add(y, ops.broadcast_to(ops.use(self.bias), shape=y.shape))


class Conv2d(Module):
    """2-D convolution of one ``(C, H, W)`` sample (the ``conv2d`` op): weight
    ``(out, in, k, k)``, bias ``(out,)``; PyTorch's default initialisation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        *,
        stride: int = 1,
        padding: int = 0,
        rng: np.random.Generator | int | None = None,
    ) -> None:
        super().__init__()
        _need_op("conv2d", "Conv2d")
        g = _rng(rng)
        k = kernel_size
        bound = 1.0 / math.sqrt(max(1, in_channels * k * k))
        self.args = (in_channels, out_channels, k, stride, padding)
        self.stride, self.padding = stride, padding
        self.weight = Param(_uniform(g, (out_channels, in_channels, k, k), bound))
        self.bias = Param(_uniform(g, (out_channels,), bound))

    def extra_repr(self) -> str:
        i, o, k, s, p = self.args
        return f"{i}, {o}, kernel_size={k}, stride={s}, padding={p}"

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        return ops.conv2d(
            ops.use(self.weight),
            ops.use(self.bias),
            x,
            stride=self.stride,
            padding=self.padding,
        )


class LayerNorm(Module):
    """Layer normalisation over the last axis (the ``layer_norm`` op), learnable
    ``gamma`` (ones) and ``beta`` (zeros). Accepts ``(n, d)`` or ``(d,)``."""

    def __init__(self, dim: int, *, eps: float = 1e-5) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = Param(np.ones(dim))
        self.bias = Param(np.zeros(dim))

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        g, b = ops.use(self.weight), ops.use(self.bias)
        if x.ndim == 1:
            x2 = ops.reshape(x, shape=(1, x.shape[0]))
            return ops.reshape(ops.layer_norm(x2, g, b, eps=self.eps), shape=x.shape)
        return ops.layer_norm(x, g, b, eps=self.eps)


class Embedding(Module):
    """A lookup table ``(num, dim)`` (initialised ``N(0, 1)``): a nat vector of ``k`` indices
    gives ``(k, dim)`` rows (the ``gather_rows_nat`` op; an out-of-range index gives a zero
    row)."""

    def __init__(
        self, num_embeddings: int, dim: int, *, rng: np.random.Generator | int | None = None
    ) -> None:
        super().__init__()
        self.num, self.dim = num_embeddings, dim
        self.weight = Param(_rng(rng).normal(size=(num_embeddings, dim)))

    def extra_repr(self) -> str:
        return f"{self.num}, {self.dim}"

    def forward(self, ops: Ops, idx: Any) -> Tensor:
        if not isinstance(idx, NatRef) or idx.size is None:
            raise TorchleanError("Embedding: needs a nat vector (ops.nat_vec / NatInput(k))")
        return ops.gather_rows_nat(ops.use(self.weight), idx)


class MultiHeadAttention(Module):
    """Multi-head self-attention of a sequence ``(n, d_model)``: ``Wq, Wk, Wv (d_model,
    heads*head_dim)`` and ``Wo (heads*head_dim, d_model)``, scaled dot product with
    ``1/sqrt(head_dim)`` per head, an optional causal mask (a blocked entry gets zero weight).

    Uses the registry's ``multi_head_attention`` op when it is registered, else the same
    function composed from core ops (reshape, bmm, softmax)."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        causal: bool = False,
        composite: bool = False,
        rng: np.random.Generator | int | None = None,
    ) -> None:
        super().__init__()
        if d_model % num_heads:
            raise TorchleanError(f"MultiHeadAttention: {num_heads} heads do not divide {d_model}")
        g = _rng(rng)
        self.d_model, self.num_heads, self.causal = d_model, num_heads, causal
        self.head_dim = d_model // num_heads
        self.composite = composite
        bound = 1.0 / math.sqrt(d_model)
        inner = num_heads * self.head_dim
        self.wq = Param(_uniform(g, (d_model, inner), bound))
        self.wk = Param(_uniform(g, (d_model, inner), bound))
        self.wv = Param(_uniform(g, (d_model, inner), bound))
        self.wo = Param(_uniform(g, (inner, d_model), bound))

    def extra_repr(self) -> str:
        return f"{self.d_model}, heads={self.num_heads}, causal={self.causal}"

    def _mask(self, n: int) -> np.ndarray:
        return np.tril(np.ones((n, n), dtype=bool)) if self.causal else np.ones((n, n), bool)

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        if x.ndim != 2 or x.shape[1] != self.d_model:
            raise TorchleanError(f"MultiHeadAttention: needs (n, {self.d_model}), got {x.type}")
        wq, wk, wv, wo = (ops.use(p) for p in (self.wq, self.wk, self.wv, self.wo))
        n = x.shape[0]
        if not self.composite and has_op("multi_head_attention"):
            mask = self._mask(n) if self.causal else None
            return ops.multi_head_attention(wq, wk, wv, wo, x, heads=self.num_heads, mask=mask)
        return self._composite(ops, wq, wk, wv, wo, x, n)

    def _composite(
        self, ops: Ops, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, x: Tensor, n: int
    ) -> Tensor:
        h, hd = self.num_heads, self.head_dim

        def heads(w: Tensor) -> Tensor:  # (n, h*hd) -> (h, n, hd)
            y = ops.reshape(ops.matmul(x, w), shape=(n, h, hd))
            return ops.swap_adjacent_at_depth(y, depth=0)

        q, k, v = heads(wq), heads(wk), heads(wv)
        scores = ops.scale(
            ops.bmm(q, ops.swap_adjacent_at_depth(k, depth=1)), c=1.0 / math.sqrt(hd)
        )
        if self.causal:
            blocked = np.where(self._mask(n), 0.0, -1e30)
            scores = ops.add(scores, ops.broadcast_to(ops.const(blocked), shape=(h, n, n)))
        ctx = ops.bmm(ops.softmax(scores), v)  # (h, n, hd)
        merged = ops.reshape(ops.swap_adjacent_at_depth(ctx, depth=0), shape=(n, h * hd))
        return ops.matmul(merged, wo)


class TransformerBlock(Module):
    """A pre-norm transformer block on ``(n, d_model)``:
    ``x + attn(ln1(x))`` then ``+ mlp(ln2(.))`` with a GELU MLP of width ``d_ff``."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        causal: bool = False,
        rng: np.random.Generator | int | None = None,
    ) -> None:
        super().__init__()
        g = _rng(rng)
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, causal=causal, rng=g)
        self.ln2 = LayerNorm(d_model)
        self.fc1 = Linear(d_model, d_ff, rng=g)
        self.fc2 = Linear(d_ff, d_model, rng=g)

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        x = ops.add(x, self.attn(ops, self.ln1(ops, x)))
        h = self.fc2(ops, ops.gelu(self.fc1(ops, self.ln2(ops, x))))
        return ops.add(x, h)


# -- pooling, reshaping, activations -------------------------------------------------------


class MaxPool2d(Module):
    """2-D max pooling of a ``(C, H, W)`` sample (the ``max_pool2d`` op)."""

    def __init__(self, kernel_size: int, stride: int | None = None) -> None:
        super().__init__()
        _need_op("max_pool2d", "MaxPool2d")
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride

    def extra_repr(self) -> str:
        return f"{self.kernel_size}, stride={self.stride}"

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        k = self.kernel_size
        return ops.max_pool2d(x, kernel=(k, k), stride=self.stride)


class AvgPool2d(MaxPool2d):
    """2-D average pooling of a ``(C, H, W)`` sample (the ``avg_pool2d`` op)."""

    def __init__(self, kernel_size: int, stride: int | None = None) -> None:
        Module.__init__(self)
        _need_op("avg_pool2d", "AvgPool2d")
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        k = self.kernel_size
        return ops.avg_pool2d(x, kernel=(k, k), stride=self.stride)


class GlobalAvgPool(Module):
    """Mean over the spatial axes: ``(C, spatial...)`` to ``(C,)`` (a derived op)."""

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        return ops.global_avg_pool(x)


class Dropout(Module):
    """Inverted dropout with probability ``p`` in training mode (``ops.dropout``, seeded:
    ``seed`` defaults to the ops' ``options.seed``); the identity in evaluation mode."""

    def __init__(self, p: float = 0.5, *, seed: int | None = None) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise TorchleanError(f"Dropout: p must be in [0, 1), got {p!r}")
        self.p, self.seed = p, seed

    def extra_repr(self) -> str:
        return f"p={self.p}"

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        return ops.dropout(x, self.p, seed=self.seed) if self.training else x


class Flatten(Module):
    """Reshape to a vector."""

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        return ops.flatten(x)


def _activation(name: str, op: str, doc: str) -> type[Module]:
    def forward(self: Module, ops: Ops, x: Tensor) -> Tensor:
        return getattr(ops, op)(x)

    cls = type(name, (Module,), {"forward": forward, "__doc__": doc})
    cls.__module__ = __name__
    return cls


ReLU = _activation("ReLU", "relu", "``max(x, 0)``.")
Tanh = _activation("Tanh", "tanh", "Hyperbolic tangent.")
Sigmoid = _activation("Sigmoid", "sigmoid", "Logistic sigmoid.")
Softplus = _activation("Softplus", "softplus", "``log(1 + exp(x))``.")
GELU = _activation("GELU", "gelu", "GELU, tanh approximation (a derived op).")
SiLU = _activation("SiLU", "silu", "``x * sigmoid(x)`` (a derived op).")
Softmax = _activation("Softmax", "softmax", "Softmax over the last axis.")
LogSoftmax = _activation("LogSoftmax", "log_softmax", "Log-softmax over the last axis.")


class Identity(Module):
    """Returns its input."""

    def forward(self, ops: Ops, x: Tensor) -> Tensor:
        return x


__all__ = [
    "GELU",
    "AvgPool2d",
    "Conv2d",
    "Dropout",
    "Embedding",
    "Flatten",
    "GlobalAvgPool",
    "Identity",
    "LayerNorm",
    "Linear",
    "LogSoftmax",
    "MaxPool2d",
    "Module",
    "MultiHeadAttention",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Tanh",
    "TransformerBlock",
    "manual_seed",
]
