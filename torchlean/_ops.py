"""The backend-generic model interface (TorchLean's ``Ops`` class).

Model and loss code is written once against :class:`Ops`::

    def loss(ops, x, y):
        h = ops.tanh(ops.linear(ops.use(W), ops.use(b), x))
        return ops.mse_loss(h, y)

and runs on any backend: an :class:`~torchlean.EagerSession` executes each op at once
on a hidden tape, a :class:`~torchlean.GraphOps` (and the proof-linked
:class:`~torchlean.LinkedSession`) records a :class:`~torchlean_ir.GraphData` node
instead, which the compiler runs. Every op of the registry is a method (generated from the
registry, so a newly registered op appears without touching this file); the *derived* ops below
(``gelu``, ``silu``, ``global_avg_pool``, ...) are built from registry ops, so they work in every
backend, the compiler and the verifier included, without rules of their own.
"""

from __future__ import annotations

import functools
import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from torchlean_ir import ConstArray, DType, Op, TorchleanError, all_ops, get_op, has_op
from torchlean_ir.extend import REQUIRED, as_shape

from ._options import Options
from ._tensor import NatRef, Tensor

if TYPE_CHECKING:
    from ._param import Param

F = TypeVar("F", bound=Callable[..., Any])
_DERIVED: set[str] = set()


def derived(fn: F) -> F:
    """Mark an :class:`Ops` method as a derived op (built from registry ops only)."""
    _DERIVED.add(fn.__name__)
    return fn


@functools.lru_cache(maxsize=256)
def _scalar_literal(value: float, dtype: DType) -> ConstArray:
    """The literal of a Python number (``x + 1.0``), made once per value and dtype."""
    return ConstArray.from_numpy(np.asarray(value), dtype)


# -- methods generated from the registry ----------------------------------------------------

_OP_FUNCTIONS: dict[str, tuple[Op, Callable[..., Tensor]]] = {}


def _op_doc(op: Op) -> str:
    lines = [op.doc or f"The registry op ``{op.name}``.", ""]
    args = ", ".join(f"*{op.arg_names[0]}" if op.variadic else a for a in op.arg_names) + "".join(
        f", {ix.name}: NatRef ({ix.kind})" for ix in op.index_args
    )
    lines.append(f"Registry op ``{op.name}`` ({op.family}); arguments: {args or 'none'}.")
    if op.attrs:
        attrs = ", ".join(
            f"{k}: {s.words}" + ("" if s.default in (REQUIRED, None) else f" = {s.default!r}")
            for k, s in op.attrs.items()
        )
        lines.append(f"Attributes (by keyword): {attrs}.")
    return "\n".join(lines)


def _op_signature(op: Op) -> inspect.Signature:
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_ONLY)]
    if op.variadic:
        params.append(P(op.arg_names[0], P.VAR_POSITIONAL, annotation="Tensor"))
    else:
        params += [P(a, P.POSITIONAL_ONLY, annotation="Tensor") for a in op.arg_names]
    if not op.variadic:
        params += [P(ix.name, P.POSITIONAL_ONLY, annotation="NatRef") for ix in op.index_args]
    for k, spec in op.attrs.items():
        default = P.empty if spec.default is REQUIRED else spec.default
        params.append(P(k, P.KEYWORD_ONLY, default=default))
    return inspect.Signature(params, return_annotation="Tensor")


def op_function(name: str) -> Callable[..., Tensor]:
    """The :class:`Ops` method for registry op ``name`` (with its signature and docstring)."""
    op = get_op(name)
    cached = _OP_FUNCTIONS.get(name)
    if cached is not None and cached[0] is op:
        return cached[1]

    def method(self: Ops, *args: Any, **attrs: Any) -> Tensor:
        return self.apply(name, *args, **attrs)

    method.__name__ = name
    method.__qualname__ = f"Ops.{name}"
    method.__doc__ = _op_doc(op)
    method.__signature__ = _op_signature(op)  # type: ignore[attr-defined]
    _OP_FUNCTIONS[name] = (op, method)
    return method


class Ops(ABC):
    """The interface model code is written against; see the module docstring.

    Subclasses implement :meth:`apply` (run or record one registry op), :meth:`use`,
    :meth:`input`, :meth:`nat` and :meth:`nat_vec`; everything else is shared.
    """

    options: Options

    # -- what a backend provides ---------------------------------------------------------
    @property
    @abstractmethod
    def dtype(self) -> DType:
        """The float dtype of this backend's tensors."""

    @abstractmethod
    def apply(self, op_name: str, *args: Tensor | NatRef, **attrs: Any) -> Tensor:
        """Apply the registry op ``op_name`` to tensors (and nat refs); attributes by keyword.
        The op's shape rule runs at the call: a mismatch raises
        :class:`~torchlean_ir.ShapeError` naming the op, the argument types and the caller's
        ``file:line``."""

    @abstractmethod
    def use(self, param: Param) -> Tensor:
        """The tensor of a :class:`~torchlean.Param` in this computation (a leaf
        holding its current value; calling ``use`` again with the same param returns the same
        leaf until the tape is reset)."""

    @abstractmethod
    def input(
        self,
        value: Any = None,
        *,
        name: str | None = None,
        requires_grad: bool = False,
        shape: Any = None,
    ) -> Tensor:
        """A differentiable input leaf (no gradient unless ``requires_grad``)."""

    @abstractmethod
    def nat(self, value: int | None = None, *, name: str | None = None) -> NatRef:
        """A non-differentiable natural (a label, an index)."""

    @abstractmethod
    def nat_vec(
        self, values: Any = None, *, size: int | None = None, name: str | None = None
    ) -> NatRef:
        """A non-differentiable vector of naturals (gather indices)."""

    def get_value(self, t: Tensor) -> np.ndarray:
        """The value of ``t`` (sessions only; a graph being recorded has no values)."""
        raise TorchleanError(
            f"{type(self).__name__} records a graph; its tensors have no values "
            "(run the compiled graph, or use an EagerSession / LinkedSession)"
        )

    def grad(self, t: Tensor) -> np.ndarray | None:
        """The gradient of ``t`` from the last ``backward`` (sessions only)."""
        raise TorchleanError(f"{type(self).__name__} records a graph; it has no gradients")

    def _describe(self, t: Tensor) -> str:
        return type(self).__name__

    def _is_batched(self, t: Tensor) -> bool:
        """Whether ``t``'s value carries a batch axis (only sessions have batched values)."""
        return False

    @classmethod
    def derived_ops(cls) -> frozenset[str]:
        """Names of the derived ops (methods built from registry ops)."""
        return frozenset(_DERIVED)

    # -- registry ops as methods ---------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not has_op(name):
            raise AttributeError(
                f"{type(self).__name__!r} has no attribute {name!r} (and no op of that name exists)"
            )
        method = op_function(name).__get__(self, type(self))
        # Cache on the instance: later lookups skip __getattr__ (the method resolves the op by
        # name at each call, so a re-registered op is still picked up).
        self.__dict__[name] = method
        return method

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(all_ops()))

    # -- literals ------------------------------------------------------------------------
    def const(self, value: Any) -> Tensor:
        """A literal tensor (no gradient), cast to this backend's dtype."""
        arr = np.asarray(value, dtype=np.float64)
        return self.apply("const", value=ConstArray.from_numpy(arr, self.dtype))

    def full(self, shape: Any, value: float) -> Tensor:
        """A tensor filled with ``value``: a scalar literal broadcast to ``shape``."""
        shp = as_shape(shape)
        c = self.apply("const", value=_scalar_literal(float(value), self.dtype))
        return c if shp == () else self.apply("broadcast_to", c, shape=shp)

    def zeros(self, shape: Any) -> Tensor:
        return self.full(shape, 0.0)

    def ones(self, shape: Any) -> Tensor:
        return self.full(shape, 1.0)

    # -- seeded random ops: the seed defaults to ``options.seed`` ----------------------------
    def rand_uniform(self, shape: Any, *, seed: int | None = None) -> Tensor:
        """Uniform draws in ``[0, 1)`` of ``shape`` (the ``rand_uniform`` op, SplitMix64 of the
        seed and the node's position); ``seed`` defaults to ``options.seed``. No gradient."""
        s = self.options.seed if seed is None else seed
        return self.apply("rand_uniform", shape=as_shape(shape), seed=s)

    def bernoulli_mask(self, keep_prob: Tensor, shape: Any, *, seed: int | None = None) -> Tensor:
        """1 where ``keep_prob > u`` (``u`` uniform draws), else 0 (the ``bernoulli_mask`` op);
        ``keep_prob`` is a scalar tensor; ``seed`` defaults to ``options.seed``."""
        s = self.options.seed if seed is None else seed
        return self.apply("bernoulli_mask", keep_prob, shape=as_shape(shape), seed=s)

    @derived
    def dropout(self, x: Tensor, p: float, *, seed: int | None = None) -> Tensor:
        """Inverted dropout: zero each element with probability ``p`` (a ``bernoulli_mask``
        draw) and scale the rest by ``1 / (1 - p)``. Deterministic for a given seed and node
        position (``seed`` defaults to ``options.seed``)."""
        if not 0.0 <= p < 1.0:
            raise TorchleanError(f"dropout: p must be in [0, 1), got {p!r}")
        if p == 0.0:
            return x
        mask = self.bernoulli_mask(self.const(np.asarray(1.0 - p)), x.shape, seed=seed)
        return self.apply("scale", self.apply("mul", x, mask), c=1.0 / (1.0 - p))

    # -- derived ops (registry ops only; no rules of their own) ----------------------------
    # A derived op shadows a registry op of the same name (the parity tier registers gelu, silu
    # and global_avg_pool2d as primitives too): ``ops.apply("gelu", x)`` reaches the primitive.
    @derived
    def neg(self, x: Tensor) -> Tensor:
        """``-x``."""
        return self.apply("scale", x, c=-1.0)

    @derived
    def square(self, x: Tensor) -> Tensor:
        """``x * x``."""
        return self.apply("mul", x, x)

    @derived
    def div(self, a: Tensor, b: Tensor) -> Tensor:
        """``a / b`` as ``a * inv(b)`` (same shapes)."""
        return self.apply("mul", a, self.apply("inv", b))

    @derived
    def mean(self, x: Tensor) -> Tensor:
        """Mean of all elements, a scalar: ``sum(x) / size``."""
        if x.size == 0:
            raise TorchleanError(f"mean: needs at least one element, got {x.type}")
        return self.apply("scale", self.apply("sum", x), c=1.0 / x.size)

    @derived
    def silu(self, x: Tensor) -> Tensor:
        """SiLU / swish: ``x * sigmoid(x)``."""
        return self.apply("mul", x, self.apply("sigmoid", x))

    @derived
    def gelu(self, x: Tensor) -> Tensor:
        """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.

        Built as ``x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))``, the same function
        (``(1 + tanh(u)) / 2 = sigmoid(2u)``, and ``sigmoid`` is computed as
        ``(1 + tanh(z / 2)) / 2``), with no literal tensors."""
        cube = self.apply("mul", self.apply("mul", x, x), x)
        inner = self.apply("add", x, self.apply("scale", cube, c=0.044715))
        z = self.apply("scale", inner, c=2.0 * math.sqrt(2.0 / math.pi))
        return self.apply("mul", x, self.apply("sigmoid", z))

    @derived
    def global_avg_pool(self, x: Tensor) -> Tensor:
        """Mean over every spatial axis of a channels-first ``(C, spatial...)`` tensor: ``(C,)``."""
        if x.ndim < 2:
            raise TorchleanError(
                f"global_avg_pool: needs a channels-first tensor (C, spatial...), got {x.type}"
            )
        c = x.shape[0]
        flat = x if x.ndim == 2 else self.apply("reshape", x, shape=(c, x.size // max(c, 1)))
        return self.apply("reduce_mean", flat, axis=1)

    @derived
    def global_avg_pool2d(self, x: Tensor) -> Tensor:
        """Global average pooling of a ``(C, H, W)`` tensor to ``(C,)``."""
        if x.ndim != 3:
            raise TorchleanError(f"global_avg_pool2d: needs (C, H, W), got {x.type}")
        return self.global_avg_pool(x)

    @derived
    def cross_entropy(self, logits: Tensor, label: NatRef) -> Tensor:
        """``-log_softmax(logits)[label]`` for a vector of logits and a nat label (a scalar).
        An out-of-range label reads 0 (the convention of runtime gathers)."""
        logp = self.apply("log_softmax", logits)
        return self.apply("scale", self.apply("gather_scalar_nat", logp, label), c=-1.0)

    @derived
    def softmax_cross_entropy(self, logits: Tensor, target: Tensor) -> Tensor:
        """``-sum(target * log_softmax(logits)) / rows`` for target probabilities (one-hot
        rows, for instance) of the same shape as the logits (last axis = classes); a scalar."""
        rows = max(1, logits.size // max(1, logits.shape[-1])) if logits.ndim else 1
        nll = self.apply("sum", self.apply("mul", target, self.apply("log_softmax", logits)))
        return self.apply("scale", nll, c=-1.0 / rows)
