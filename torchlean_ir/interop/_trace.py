"""Source tensors (with a batch axis) traced onto a per-sample graph.

Both importers read programs whose tensors carry a batch axis: a PyTorch model's input is
``(N, C, H, W)``, an ONNX model's ``(1, 3, 224, 224)``. Our ops are single-sample, so the graph
we build describes one sample and the batch becomes the compiler's batching
(``compile(g).batched(over=...)``). A :class:`T` is one source tensor: its full shape as the
source sees it, where the batch lives in that shape, and the per-sample graph value that holds
one sample of it (or its value, when it is known at import time).

Where the batch lives: the source may move the batch axis (``transpose``), or merge it with
other axes (PyTorch's multi-head attention views ``(S, N, E)`` as ``(S * N, E)`` for its
projections and ``(N * H, S, d)`` for its products). In row-major order the batch index is one
digit of each element's flat index: ``bdim`` is the full dim that holds it and ``inner`` the
product of the factors of that dim below it. One sample is the source tensor with that digit
fixed, so the per-sample value is the full shape with dim ``bdim`` divided by ``N`` (dropped
when only the batch is left in it), in the same element order. A reshape keeps the flat order,
so it keeps the digit: the per-sample value is reshaped likewise, provided the digit stays one
digit of the new shape (else the reshape mixes samples and is refused).

Every operation here is named by its full-shape (NumPy) semantics and refuses to mix samples:
reducing, slicing, concatenating or contracting along the batch, broadcasting an unbatched
tensor that varies along the batch. A refusal is a :class:`Refused` with a one-line reason; the
importer adds the source node to it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._builder import GraphBuilder, IndexVar, Var
from .._errors import TorchleanError

Shape = tuple[int, ...]


class Refused(Exception):
    """The source operation cannot be expressed (one-line reason, without the node), and
    ``hint``: what would make it import, where something would ("" where nothing would)."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.hint = hint


@dataclass(eq=False)
class T:
    """One source tensor. Exactly one of ``var`` (a graph value holding one sample, in the
    per-sample shape), ``value`` (a NumPy array known at import time, the full shape) and
    ``index`` (an index input: runtime naturals) is set."""

    full: Shape
    bdim: int | None = None
    inner: int = 1
    var: Var | None = None
    value: np.ndarray | None = None
    index: IndexVar | None = None
    #: a known float value that is a parameter (a leaf is made for it on first use)
    param: str | None = None
    #: index tensors: clamped to at most ``clamp`` (ONNX ``Min``), or the boolean ``index <
    #: inrange`` (ONNX ``Less``); a float tensor gathered at ``index`` along a dim of size n
    #: has ``gathered = (index, n)``: our gathers read 0 out of range by themselves
    clamp: int | None = None
    inrange: int | None = None
    gathered: tuple[IndexVar, int] | None = None
    #: index tensors computed from an index input at import time (views, pads, masks): the
    #: :class:`~torchlean_ir.interop._indexmap.IndexMap` of every element (None: the input)
    imap: Any = None
    #: a loss reduced over the batch (``"mean"`` or ``"sum"``): ``var`` holds this sample's
    #: part, which the compiler's ``batched(grads=reduced)`` reduces
    reduced: str | None = None
    #: an additive attention mask of an index input (ONNX ``Where(mask, 0, -inf)`` added to
    #: the scores): the runtime 0 / 1 weights ``w`` (a float :class:`T`) of the keys allowed;
    #: the value is this one plus ``log(w)``, which only the softmax reading it applies (as
    #: renormalised weights, exact where ``w`` is 0)
    logmask: T | None = None
    #: an unbatched value that is ``expanded_from`` broadcast (``expand``): constant along
    #: the axes it grew, so it may meet the batch on one of them (a class token expanded
    #: to the batch size, then concatenated with the batched patches, as ViT does)
    expanded_from: T | None = None
    #: a tensor of uninitialised memory (``aten.empty``): ``value`` is a stand-in of zeros that
    #: only shape readers (``full_like``) may use
    uninitialised: bool = False

    def spread_along(self, axis: int) -> bool:
        """Whether this value is a broadcast that is constant along ``axis``."""
        src = self.expanded_from
        if src is None:
            return False
        k = axis - (self.rank - src.rank)
        return k < 0 or src.full[k] == 1

    @property
    def batched(self) -> bool:
        return self.bdim is not None

    @property
    def rank(self) -> int:
        return len(self.full)

    @property
    def known(self) -> bool:
        """The value is known at import time (a constant or a shape computation)."""
        return self.value is not None and self.param is None


def _prod(xs: Sequence[int]) -> int:
    return math.prod(xs)


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise Refused(f"{what} {axis} out of range for rank {rank}")
    return axis % rank if rank else 0


class Tracer:
    """Builds the per-sample graph for source tensors with a batch of size ``n``.

    ``make_param(name, value)`` is called the first time a parameter is used: it declares the
    leaf and returns its :class:`Var`."""

    def __init__(self, builder: GraphBuilder, n: int) -> None:
        self.b = builder
        self.n = n
        self._consts: dict[int, tuple[Any, Var]] = {}  # id -> (the T kept alive, its const)
        self._params: dict[str, Var] = {}
        self.param_values: dict[str, np.ndarray] = {}
        self.frozen: set[str] = set()
        # id(result of our reshape) -> (that result, kept alive; its source Var)
        self._reshaped: dict[int, tuple[Var, Var]] = {}

    # -- layout ------------------------------------------------------------------------------
    def sample_shape(self, full: Shape, bdim: int | None) -> Shape:
        """The per-sample shape: dim ``bdim`` divided by n, dropped when only the batch is left."""
        if bdim is None:
            return tuple(full)
        rest = full[bdim] // self.n
        return tuple(full[:bdim]) + (() if rest == 1 else (rest,)) + tuple(full[bdim + 1 :])

    def kept_shape(self, full: Shape, bdim: int | None) -> Shape:
        """The per-sample shape with dim ``bdim`` kept (size ``full[bdim] / n``, maybe 1): the
        source's axis numbers hold in it."""
        if bdim is None:
            return tuple(full)
        return tuple(full[:bdim]) + (full[bdim] // self.n,) + tuple(full[bdim + 1 :])

    def axes(self, full: Shape, bdim: int | None) -> list[int | None]:
        """Per full axis, its axis in the per-sample shape (None for a dropped batch axis)."""
        out: list[int | None] = []
        k = 0
        for i, d in enumerate(full):
            if i == bdim and d == self.n:
                out.append(None)
            else:
                out.append(k)
                k += 1
        return out

    def batched_input(self, full: Shape, axis: int) -> tuple[Shape, int]:
        """The per-sample shape of a source input whose batch is axis ``axis``."""
        axis = _norm_axis(axis, len(full), "batch axis")
        if full[axis] != self.n:
            raise Refused(f"batch axis {axis} of shape {list(full)} is not the batch size {self.n}")
        return self.sample_shape(full, axis), axis

    # -- values ------------------------------------------------------------------------------
    def reshape(self, v: Var, shape: Shape) -> Var:
        """``reshape`` that skips identities and folds a reshape of our own reshape."""
        shape = tuple(int(d) for d in shape)
        if v.shape == shape:
            return v
        src = self._reshaped.get(id(v), (v, v))[1]
        if src.shape == shape:
            return src
        if len(shape) == 1 and len(src.shape) > 1:
            out = self.b.flatten(src)
        else:
            out = self.b.reshape(src, shape=shape)
        self._reshaped[id(out)] = (out, src)
        return out

    def param_var(self, name: str) -> Var:
        v = self._params.get(name)
        if v is None:
            value = self.param_values[name]
            v = self.b.param(name, value.shape, requires_grad=name not in self.frozen)
            self._params[name] = v
        return v

    def var(self, t: T) -> Var:
        """The per-sample graph value of ``t`` (a leaf or ``const`` node for known values)."""
        if t.var is not None:
            return t.var
        if t.index is not None:
            raise Refused("an integer input (an index) used as a float tensor")
        assert t.value is not None
        if t.param is not None:
            return self.param_var(t.param)
        if not np.issubdtype(t.value.dtype, np.floating):
            raise Refused(f"an integer constant of shape {list(t.full)} used as a float tensor")
        hit = self._consts.get(id(t))
        if hit is None:
            hit = self._consts[id(t)] = (t, self.b.const(t.value))
        return hit[1]

    def kept(self, t: T) -> Var:
        return self.reshape(self.var(t), self.kept_shape(t.full, t.bdim))

    def make(self, v: Var, full: Shape, bdim: int | None, inner: int = 1) -> T:
        """A result from its per-sample value (in the kept or the per-sample shape)."""
        full = tuple(int(d) for d in full)
        if bdim is not None and (full[bdim] % (self.n * inner) or inner < 1):
            raise Refused(f"internal: batch digit ({inner}) does not divide dim {bdim} of {full}")
        want = self.sample_shape(full, bdim)
        if _prod(v.shape) != _prod(want):
            raise Refused(f"internal: per-sample {v.shape} for full {list(full)}")
        return T(full, bdim, inner if bdim is not None else 1, var=self.reshape(v, want))

    def zeros(self, n: int) -> Var:
        """A shared zero vector (the bias of a bias-free layer)."""
        key = -n - 1
        hit = self._consts.get(key)
        if hit is None:
            hit = self._consts[key] = (None, self.b.const(np.zeros(n)))
        return hit[1]

    def const(self, value: Any) -> T:
        a = np.asarray(value)
        return T(tuple(a.shape), value=a)

    def param(self, name: str, value: np.ndarray, *, frozen: bool = False) -> T:
        value = np.asarray(value)
        self.param_values[name] = value
        if frozen:
            self.frozen.add(name)
        return T(tuple(value.shape), value=value, param=name)

    # -- helpers -----------------------------------------------------------------------------
    def _float_value(self, t: T) -> float | None:
        """A scalar known at import time (any shape with one element), else None."""
        if t.known and t.value is not None and t.value.size == 1:
            return float(t.value.reshape(()))
        return None

    def _check_batch_free(self, t: T, axes: Sequence[int], what: str) -> None:
        if t.bdim is not None and t.bdim in axes:
            raise Refused(f"{what} along axis {t.bdim}, which holds the batch (mixes samples)")

    # -- elementwise -------------------------------------------------------------------------
    def unary(self, op: str, x: T, **attrs: Any) -> T:
        if x.known and x.value is not None and op in _NUMPY_UNARY:
            return self.const(_NUMPY_UNARY[op](x.value.astype(np.float64), **attrs))
        return T(x.full, x.bdim, x.inner, var=self.b.apply(op, self.var(x), **attrs))

    def scale(self, x: T, c: float) -> T:
        if c == 1.0:
            return x
        return self.unary("scale", x, c=float(c))

    def power(self, x: T, p: float) -> T:
        """``x ** p`` for a constant exponent: ``pow``, except the exponents that had their own
        form before ``pow`` existed (1: x, 2: mul, 0.5: sqrt, -1: inv), which keep it, and
        -0.5: ``rsqrt`` (the same function, domain and derivative)."""
        if not math.isfinite(p):
            raise Refused(f"pow with exponent {p!r} (the exponent must be finite)")
        if p == 1:
            return x
        if p == 2:
            return self.binary("mul", x, x)
        if p == 0.5:
            return self.unary("sqrt", x)
        if p == -1:
            return self.unary("inv", x)
        if p == -0.5:
            return self.unary("rsqrt", x)
        return self.unary("pow", x, p=float(p))

    def gelu_exact(self, x: T) -> T:
        """Exact GELU ``0.5 x (1 + erf(x / sqrt(2)))``, as ``h + h erf(x c)`` with ``h = x / 2``
        and ``c`` = 1 / sqrt(2) rounded (PyTorch's ``M_SQRT1_2``)."""
        h = self.scale(x, 0.5)
        e = self.unary("erf", self.scale(x, _SQRT1_2))
        return self.binary("add", h, self.binary("mul", h, e))

    def _broadcast(self, ts: Sequence[T]) -> tuple[Shape, int | None, int]:
        """NumPy broadcasting of full shapes, and where the batch goes in the result."""
        try:
            full = tuple(np.broadcast_shapes(*(t.full for t in ts)))
        except ValueError:
            raise Refused(
                "shapes do not broadcast: " + ", ".join(str(list(t.full)) for t in ts)
            ) from None
        r = len(full)
        where: set[tuple[int, int]] = set()
        for t in ts:
            if t.bdim is not None:
                where.add((t.bdim + r - t.rank, t.inner))
        if len(where) > 1:
            raise Refused("operands hold the batch on different axes")
        if not where:
            return full, None, 1
        ((bdim, inner),) = where
        for t in ts:
            if t.bdim is None:
                k = bdim - (r - t.rank)
                if k >= 0 and t.full[k] != 1 and not t.spread_along(k):
                    raise Refused(
                        f"an unbatched operand {list(t.full)} varies along axis {bdim}, which "
                        "holds the batch (mixes samples)"
                    )
        return full, bdim, inner

    def broadcast_kept(self, t: T, full: Shape, bdim: int | None) -> Var:
        """``t``'s per-sample value broadcast to the per-sample shape of (``full``, ``bdim``)."""
        r = len(full)
        lead = r - t.rank
        spread = t.bdim is None and bdim is not None and t.expanded_from is not None
        if spread and bdim >= lead and t.spread_along(bdim - lead):  # type: ignore[operator]
            return self.broadcast_kept(t.expanded_from, full, bdim)  # the value before the expand
        if t.bdim is None:
            shape = [1] * lead + list(t.full)
            if bdim is not None:
                shape[bdim] = 1
        else:
            shape = [1] * lead + list(self.kept_shape(t.full, t.bdim))
        keep = self.axes(full, bdim)
        shape = [d for d, k in zip(shape, keep, strict=True) if k is not None]
        target = self.sample_shape(full, bdim)
        v = self.var(t)
        if tuple(shape) != tuple(v.shape):
            # leading 1s stay implicit: broadcast_to adds new leading dims itself
            trimmed = list(shape)
            while len(trimmed) > len(v.shape) and trimmed[0] == 1:
                trimmed.pop(0)
            v = self.reshape(v, tuple(trimmed))
        if v.shape != target:
            v = self.b.broadcast_to(v, shape=target)
        return v

    def binary(self, op: str, a: T, b: T) -> T:
        """``add``, ``sub``, ``mul``, ``max``, ``min`` or ``div`` with NumPy broadcasting; a
        scalar known at import time becomes ``scale`` where exact (``mul``, and ``div`` by a
        power of two)."""
        if a.known and b.known and a.value is not None and b.value is not None:
            return self.const(_NUMPY_BINARY[op](a.value, b.value))
        full, bdim, inner = self._broadcast([a, b])
        cb, ca = self._float_value(b), self._float_value(a)
        if op == "mul" and cb is not None and full == a.full:
            return self.scale(a, cb)
        if op == "mul" and ca is not None and full == b.full:
            return self.scale(b, ca)
        if op == "div" and cb is not None and full == a.full and cb != 0:
            m, _ = math.frexp(cb)
            if abs(m) == 0.5:  # a power of two: x * (1/c) == x / c exactly
                return self.scale(a, 1.0 / cb)
        if op == "sub" and cb is not None and full == a.full and cb == 0:
            return a
        if op == "add" and cb is not None and full == a.full and cb == 0:
            return a
        va = self.broadcast_kept(a, full, bdim)
        vb = self.broadcast_kept(b, full, bdim)
        out = self.b.mul(va, self.b.inv(vb)) if op == "div" else self.b.apply(op, va, vb)
        return self.make(out, full, bdim, inner)

    def expand(self, x: T, shape: Sequence[int]) -> T:
        """NumPy ``broadcast_to`` (PyTorch ``expand`` with -1 meaning keep)."""
        shape = list(shape)
        lead = len(shape) - x.rank
        if lead < 0:
            raise Refused(f"cannot expand {list(x.full)} to {shape}")
        for i, d in enumerate(x.full):
            if shape[lead + i] == -1:
                shape[lead + i] = d
        probe = T(tuple(shape))
        if x.bdim is not None:  # the target keeps x's batch where it names the same size
            k = x.bdim + lead
            if shape[k] == x.full[x.bdim]:
                probe = T(tuple(shape), k, x.inner)
        full, bdim, inner = self._broadcast([x, probe])
        if x.known and x.value is not None:
            return self.const(np.broadcast_to(x.value, full).copy())
        if full == x.full:
            return x
        out = self.make(self.broadcast_kept(x, full, bdim), full, bdim, inner)
        if bdim is None:
            out.expanded_from = x
        return out

    # -- layout ------------------------------------------------------------------------------
    def reshape_to(self, x: T, shape: Sequence[int]) -> T:
        """A row-major reshape (one -1 allowed)."""
        shape = [int(d) for d in shape]
        size = _prod(x.full)
        if shape.count(-1) > 1:
            raise Refused(f"reshape to {shape}: more than one -1")
        if -1 in shape:
            rest = _prod(d for d in shape if d != -1)
            if rest == 0 or size % rest:
                raise Refused(f"cannot reshape {list(x.full)} to {shape}")
            shape[shape.index(-1)] = size // rest
        new = tuple(shape)
        if _prod(new) != size:
            raise Refused(f"cannot reshape {list(x.full)} to {list(new)}")
        if x.known and x.value is not None:
            return self.const(x.value.reshape(new))
        if x.bdim is None:
            return T(new, var=self.reshape(self.var(x), new))
        bdim, inner = self._digit(x, new)
        return self.make(self.var(x), new, bdim, inner)

    def _digit(self, x: T, new: Shape) -> tuple[int, int]:
        """Where the batch digit of ``x`` lands in the shape ``new`` (same size)."""
        assert x.bdim is not None
        below = x.inner * _prod(x.full[x.bdim + 1 :])
        n = self.n
        cands: list[tuple[int, int]] = []
        for k in range(len(new)):
            suffix = _prod(new[k + 1 :])
            if suffix == 0 or below % suffix:
                continue
            a = below // suffix
            if new[k] % (n * a) == 0:
                cands.append((k, a))
        if not cands:
            raise Refused(
                f"reshape {list(x.full)} -> {list(new)} splits the batch axis {x.bdim} "
                "(mixes samples)"
            )
        pure = [(k, a) for k, a in cands if new[k] == n]
        pick = pure or cands
        return min(pick, key=lambda ka: (abs(ka[0] - x.bdim), ka[0]))  # type: ignore[operator]

    def permute(self, x: T, perm: Sequence[int]) -> T:
        perm = [_norm_axis(p, x.rank) for p in perm]
        if sorted(perm) != list(range(x.rank)):
            raise Refused(f"bad permutation {list(perm)} for rank {x.rank}")
        full = tuple(x.full[p] for p in perm)
        if perm == list(range(x.rank)):
            return x
        if x.known and x.value is not None and x.param is None:
            return self.const(np.transpose(x.value, perm))
        m = self.axes(x.full, x.bdim)
        sperm = [m[p] for p in perm if m[p] is not None]
        v = permute_var(self.b, self.var(x), sperm)  # type: ignore[arg-type]
        bdim = None if x.bdim is None else perm.index(x.bdim)
        return self.make(v, full, bdim, x.inner)

    def transpose(self, x: T, a: int, b: int) -> T:
        perm = list(range(x.rank))
        a, b = _norm_axis(a, x.rank), _norm_axis(b, x.rank)
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(x, perm)

    def unsqueeze(self, x: T, axis: int) -> T:
        axis = _norm_axis(axis, x.rank + 1)
        new = x.full[:axis] + (1,) + x.full[axis:]
        if x.bdim is None:
            if x.known and x.value is not None and x.param is None:
                return self.const(x.value.reshape(new))
            return T(new, var=self.reshape(self.var(x), new))
        bdim = x.bdim + (1 if axis <= x.bdim else 0)
        out = self.make(self.var(x), new, bdim, x.inner)
        out.gathered = x.gathered
        return out

    def squeeze(self, x: T, axes: Sequence[int] | None) -> T:
        if axes is None:
            axes = [i for i, d in enumerate(x.full) if d == 1 and i != x.bdim]
        axes = sorted({_norm_axis(a, x.rank) for a in axes})
        axes = [a for a in axes if x.full[a] == 1]
        if x.bdim is not None and x.bdim in axes:
            # a batch of one: the axis is the batch, which stays
            axes = [a for a in axes if a != x.bdim]
        if not axes:
            return x
        new = tuple(d for i, d in enumerate(x.full) if i not in axes)
        if x.bdim is None:
            if x.known and x.value is not None and x.param is None:
                return self.const(x.value.reshape(new))
            return T(new, var=self.reshape(self.var(x), new))
        bdim = x.bdim - sum(1 for a in axes if a < x.bdim)
        out = self.make(self.var(x), new, bdim, x.inner)
        out.gathered = x.gathered
        return out

    def flatten(self, x: T, start: int, end: int) -> T:
        start, end = _norm_axis(start, max(x.rank, 1)), _norm_axis(end, max(x.rank, 1))
        if x.rank == 0:
            return self.reshape_to(x, [1])
        new = x.full[:start] + (_prod(x.full[start : end + 1]),) + x.full[end + 1 :]
        return self.reshape_to(x, new)

    # -- reductions --------------------------------------------------------------------------
    def reduce(self, x: T, axes: Sequence[int] | None, keepdims: bool, kind: str) -> T:
        """``sum`` or ``mean`` over ``axes`` (all when None)."""
        axes = list(range(x.rank)) if axes is None else [_norm_axis(a, x.rank) for a in axes]
        axes = sorted(set(axes))
        if x.known and x.value is not None and x.param is None:
            fn = np.sum if kind == "sum" else np.mean
            return self.const(fn(x.value, axis=tuple(axes), keepdims=keepdims))
        self._check_batch_free(x, axes, f"reduce_{kind}")
        m = self.axes(x.full, x.bdim)
        v = self.var(x)
        for a in sorted((m[a] for a in axes), reverse=True):  # type: ignore[type-var]
            v = self.b.apply(f"reduce_{kind}", v, axis=a)
        if keepdims:
            full = tuple(1 if i in axes else d for i, d in enumerate(x.full))
            bdim = x.bdim
        else:
            full = tuple(d for i, d in enumerate(x.full) if i not in axes)
            bdim = None if x.bdim is None else x.bdim - sum(1 for a in axes if a < x.bdim)
        return self.make(v, full, bdim, x.inner)

    # -- slicing and joining -----------------------------------------------------------------
    def slice(self, x: T, axis: int, start: int, stop: int, step: int = 1) -> T:
        axis = _norm_axis(axis, x.rank)
        n = x.full[axis]
        start, stop, step = slice(start, stop, step).indices(n)
        if step != 1:
            raise Refused(f"slice with step {step} (only step 1)")
        length = max(stop - start, 0)
        if x.known and x.value is not None and x.param is None:
            idx = [slice(None)] * x.rank
            idx[axis] = slice(start, start + length)
            return self.const(x.value[tuple(idx)])
        if start == 0 and length == n:
            return x
        self._check_batch_free(x, [axis], "slice")
        if length == 0:
            raise Refused("an empty slice")
        sa = self.axes(x.full, x.bdim)[axis]
        assert sa is not None
        v = self._along(self.var(x), sa, lambda u: self.b.slice(u, start=start, length=length))
        full = x.full[:axis] + (length,) + x.full[axis + 1 :]
        return self.make(v, full, x.bdim, x.inner)

    def select(self, x: T, axis: int, i: int) -> T:
        axis = _norm_axis(axis, x.rank)
        i = i % x.full[axis] if -x.full[axis] <= i < x.full[axis] else None  # type: ignore[assignment]
        if i is None:
            raise Refused("index out of range")
        return self.squeeze(self.slice(x, axis, i, i + 1), [axis])

    def _along(self, v: Var, axis: int, fn: Any) -> Var:
        """Apply ``fn`` (an op on dim 0) along ``axis`` by moving it to the front and back."""
        if axis == 0:
            return fn(v)
        perm = [axis] + [i for i in range(len(v.shape)) if i != axis]
        moved = permute_var(self.b, v, perm)
        out = fn(moved)
        inv = [perm.index(i) for i in range(len(perm))]
        return permute_var(self.b, out, inv)

    def concat(self, xs: Sequence[T], axis: int) -> T:
        rank = xs[0].rank
        axis = _norm_axis(axis, rank)
        if any(x.rank != rank for x in xs):
            raise Refused("concatenating tensors of different ranks")
        if all(x.known for x in xs):
            return self.const(np.concatenate([x.value for x in xs], axis=axis))  # type: ignore[misc]
        xs = [x for x in xs if x.full[axis] != 0]
        if len(xs) == 1:
            return xs[0]
        # the batch: every operand's layout must agree (unbatched operands are broadcast)
        sizes = [x.full[axis] for x in xs]
        probe = [
            T(
                x.full[:axis] + (1,) + x.full[axis + 1 :],
                x.bdim,
                x.inner,
                expanded_from=x.expanded_from,
            )
            for x in xs
        ]
        full1, bdim, inner = self._broadcast(probe)
        if bdim == axis:
            raise Refused(f"concatenation along axis {axis}, which holds the batch (mixes samples)")
        vs = []
        for x, s_ in zip(xs, sizes, strict=True):
            target = full1[:axis] + (s_,) + full1[axis + 1 :]
            vs.append(self.broadcast_kept(x, target, bdim))
        sa = self.axes(full1, bdim)[axis]
        assert sa is not None
        v = self._along_many(vs, sa)
        full = full1[:axis] + (sum(sizes),) + full1[axis + 1 :]
        return self.make(v, full, bdim, inner)

    def _along_many(self, vs: list[Var], axis: int) -> Var:
        if axis == 0:
            return self.b.concat(*vs)
        r = len(vs[0].shape)
        perm = [axis] + [i for i in range(r) if i != axis]
        moved = [permute_var(self.b, v, perm) for v in vs]
        out = self.b.concat(*moved)
        return permute_var(self.b, out, [perm.index(i) for i in range(r)])

    def pad(self, x: T, begin: Sequence[int], end: Sequence[int], value: float) -> T:
        """Constant padding (``begin`` / ``end`` per axis, non-negative): concatenation with
        constant blocks."""
        if any(p < 0 for p in [*begin, *end]):
            raise Refused("negative padding (cropping)")
        for axis, (b_, e) in enumerate(zip(begin, end, strict=True)):
            if not (b_ or e):
                continue
            self._check_batch_free(x, [axis], "padding")
            parts = []
            for size in (b_, e):
                shape = list(x.full)
                shape[axis] = size
                if x.bdim is not None and axis != x.bdim:
                    shape[x.bdim] = 1
                parts.append(self.const(np.full(shape, value, dtype=np.float64)) if size else None)
            xs = [p for p in (parts[0], x, parts[1]) if p is not None]
            x = self.concat(xs, axis)
        return x

    def split(self, x: T, axis: int, sizes: Sequence[int]) -> list[T]:
        out, start = [], 0
        for s in sizes:
            out.append(self.slice(x, axis, start, start + s))
            start += s
        return out

    # -- linear algebra ----------------------------------------------------------------------
    def matmul(self, a: T, b: T) -> T:
        """NumPy ``matmul`` (batched, broadcasting, 1-D operands promoted)."""
        if a.known and b.known:
            return self.const(np.matmul(a.value, b.value))
        if a.rank == 0 or b.rank == 0:
            raise Refused("matmul of a scalar")
        a1, b1 = a.rank == 1, b.rank == 1
        if a1:
            a = self.unsqueeze(a, 0)
        if b1:
            b = self.unsqueeze(b, 1)
        if a.bdim == a.rank - 1 or b.bdim == b.rank - 2:
            raise Refused("matmul contracts the axis that holds the batch (mixes samples)")
        m, n1 = a.full[-2:]
        n2, p = b.full[-2:]
        if n1 != n2:
            raise Refused(f"matmul of {list(a.full)} and {list(b.full)}: inner dims differ")
        # broadcast the leading dims; the batch may sit in a's rows, b's columns or the leads
        la, lb = a.full[:-2], b.full[:-2]
        try:
            lead = tuple(np.broadcast_shapes(la, lb))
        except ValueError:
            raise Refused(f"matmul of {list(a.full)} and {list(b.full)}: leads differ") from None
        L = len(lead)
        spots: set[tuple[int, int]] = set()
        if a.bdim is not None:
            spots.add((a.bdim + L - len(la), a.inner) if a.bdim < len(la) else (L, a.inner))
        if b.bdim is not None:
            spots.add((b.bdim + L - len(lb), b.inner) if b.bdim < len(lb) else (L + 1, b.inner))
        if len(spots) > 1:
            raise Refused("matmul operands hold the batch on different axes")
        full = (*lead, m, p)
        bdim, inner = spots.pop() if spots else (None, 1)
        for t, lt in ((a, la), (b, lb)):
            if t.bdim is None and bdim is not None and bdim < L:
                k = bdim - (L - len(lt))
                if k >= 0 and lt[k] != 1:
                    raise Refused("an unbatched matmul operand varies along the batch")
        ka = list(self.kept_shape(lead, bdim if bdim is not None and bdim < L else None))
        # per-sample operands: a (lead', m', n), b (lead', n, p')
        va = self._kept_operand(a, la, L, bdim, lead)
        vb = self._kept_operand(b, lb, L, bdim, lead)
        ms, ps = va.shape[-2], vb.shape[-1]
        if not ka:
            v = self.b.matmul(va, vb)
        elif len(vb.shape) == 2:
            rows = self.reshape(va, (_prod(ka) * ms, n1))
            v = self.reshape(self.b.matmul(rows, vb), (*ka, ms, ps))
        else:
            va = self._expand_lead(va, ka)
            vb = self._expand_lead(vb, ka)
            B3 = _prod(ka)
            v3 = self.b.bmm(self.reshape(va, (B3, ms, n1)), self.reshape(vb, (B3, n1, ps)))
            v = self.reshape(v3, (*ka, ms, ps))
        out = self.make(v, full, bdim, inner)
        if a1:
            out = self.squeeze(out, [out.rank - 2])
        if b1:
            out = self.squeeze(out, [out.rank - 1])
        return out

    def _kept_operand(self, t: T, lt: Shape, L: int, bdim: int | None, lead: Shape) -> Var:
        """``t`` (lt..., r, c) per-sample with its leads right-aligned to L (size 1 where it
        has none, and at the batch when it is unbatched); leads of size 1 stay 1 (expanded
        later only if the other operand needs it)."""
        v = self.kept(t)
        shape = list(v.shape)
        mat = shape[-2:]
        leads = [1] * (L - len(lt)) + shape[:-2]
        if t.bdim is None and bdim is not None and bdim < L:
            leads[bdim] = 1
        if not any(d != 1 for d in leads):
            return self.reshape(v, tuple(mat))
        return self.reshape(v, (*leads, *mat))

    def _expand_lead(self, v: Var, lead: list[int]) -> Var:
        shape = tuple(v.shape)
        if len(shape) == 2:
            return self.b.broadcast_to(v, shape=(*lead, *shape))
        if tuple(shape[:-2]) != tuple(lead):
            return self.b.broadcast_to(v, shape=(*lead, *shape[-2:]))
        return v

    def linear(self, x: T, W: T, bias: T | None) -> T:
        """``x @ W^T + bias`` (PyTorch ``linear``; ONNX ``Gemm`` with ``transB``)."""
        if W.rank != 2:
            raise Refused(f"linear needs a weight (out, in), got {list(W.full)}")
        if W.batched or (bias is not None and bias.batched):
            raise Refused("linear with a batched weight or bias")
        out_f, in_f = W.full
        if x.full[-1:] != (in_f,):
            raise Refused(f"linear of {list(x.full)} with a weight {list(W.full)}")
        if x.bdim == x.rank - 1:
            raise Refused("linear contracts the axis that holds the batch (mixes samples)")
        xs = self.sample_shape(x.full, x.bdim)
        vW = self.var(W)
        vb = self.var(bias) if bias is not None else None
        if bias is not None and bias.full != (out_f,):
            if _prod(bias.full) == out_f:
                vb = self.reshape(self.var(bias), (out_f,))
            else:
                raise Refused(f"linear bias {list(bias.full)} for a weight {list(W.full)}")
        full = x.full[:-1] + (out_f,)
        if len(xs) == 1:
            b_ = vb if vb is not None else self.zeros(out_f)
            return self.make(self.b.linear(vW, b_, self.var(x)), full, x.bdim, x.inner)
        rows = self.reshape(self.var(x), (_prod(xs[:-1]), in_f))
        y = self.b.matmul(rows, self.b.transpose2d(vW))
        if vb is not None:
            y = self.b.add(y, self.b.broadcast_to(vb, shape=y.shape))
        return self.make(y, full, x.bdim, x.inner)

    # -- nn ----------------------------------------------------------------------------------
    def softmax(self, x: T, axis: int, *, log: bool = False) -> T:
        axis = _norm_axis(axis, max(x.rank, 1))
        self._check_batch_free(x, [axis], "softmax")
        op = "log_softmax" if log else "softmax"
        if x.rank == 0:
            return T(x.full, x.bdim, x.inner, var=self.b.apply(op, self.var(x)))
        v = self.var(x)
        last = len(v.shape) - 1
        sa = self.axes(x.full, x.bdim)[axis]
        assert sa is not None
        if sa == last:
            return self.make(self.b.apply(op, v), x.full, x.bdim, x.inner)
        perm = [i for i in range(last + 1) if i != sa] + [sa]
        out = self.b.apply(op, permute_var(self.b, v, perm))
        return self.make(
            permute_var(self.b, out, [perm.index(i) for i in range(last + 1)]),
            x.full,
            x.bdim,
            x.inner,
        )

    def spatial_input(self, x: T, what: str) -> Var:
        """x (N, C, spatial...) with the batch as its leading axis: the per-sample (C, ...)."""
        if x.bdim is None:
            raise Refused(f"{what} of an unbatched tensor {list(x.full)}")
        if x.bdim != 0 or x.full[0] != self.n:
            raise Refused(f"{what} needs the batch as the leading axis, got {list(x.full)}")
        return self.var(x)

    def spatial_out(self, v: Var) -> T:
        return T((self.n, *v.shape), 0, 1, var=v)

    def _crop(self, v: Var, axis: int, start: int, length: int) -> Var:
        if start == 0 and length == v.shape[axis]:
            return v
        return self._along(v, axis, lambda u: self.b.slice(u, start=start, length=length))

    def _padding(
        self,
        sizes: Sequence[int],
        kernel: Sequence[int],
        begin: Sequence[int],
        end: Sequence[int],
        stride: Sequence[int],
    ) -> tuple[list[int], list[int]] | None:
        """Symmetric padding per spatial dim for (begin, end) padding, and the number of output
        cells to skip at the start (the output is then cropped to the asked size); ``None``
        where no symmetric padding and crop gives the same windows (the caller pads
        explicitly)."""
        sym, skip = [], []
        for n, k, b_, e, s in zip(sizes, kernel, begin, end, stride, strict=True):
            if b_ >= e:  # the windows of (b, b), cropped at the end
                sym.append(b_)
                skip.append(0)
            elif self._out_size(n, k, s, b_, b_) == self._out_size(n, k, s, b_, e):
                sym.append(b_)  # the extra end padding reaches no window
                skip.append(0)
            elif (e - b_) % s == 0:  # the windows of (e, e), the first (e - b) / s skipped
                sym.append(e)
                skip.append((e - b_) // s)
            else:
                return None
        return sym, skip

    def _pad_spatial(self, x: T, begin: Sequence[int], end: Sequence[int], edge: bool) -> T:
        """x (N, C, spatial...) padded on its spatial axes: with zeros, or (``edge``) with
        copies of its first and last cells (max pooling's padding, which no window takes
        unless the window's own cells are no larger: each window holds an input cell next to
        the copies it covers)."""
        if not edge:
            return self.pad(x, [0, 0, *begin], [0, 0, *end], 0.0)
        for i, (b_, e) in enumerate(zip(begin, end, strict=True)):
            axis, n = 2 + i, x.full[2 + i]
            first, last = self.slice(x, axis, 0, 1), self.slice(x, axis, n - 1, n)
            if b_ or e:
                x = self.concat([*([first] * b_), x, *([last] * e)], axis)
        return x

    def _crop_spatial(self, v: Var, skip: Sequence[int], out: Sequence[int]) -> Var:
        for i, (s0, n) in enumerate(zip(skip, out, strict=True)):
            v = self._crop(v, 1 + i, s0, n)
        return v

    @staticmethod
    def _out_size(n: int, k: int, s: int, b: int, e: int, ceil: bool = False) -> int:
        span = n + b + e - k
        return (-(-span // s) if ceil else span // s) + 1

    def conv(
        self,
        x: T,
        W: T,
        bias: T | None,
        stride: Sequence[int],
        begin: Sequence[int],
        end: Sequence[int],
        *,
        groups: int = 1,
        dilation: Sequence[int] | None = None,
    ) -> T:
        """Convolution of x (N, C, spatial...) with W (outC, C / groups, k...)."""
        vx = self.spatial_input(x, "convolution")
        d = len(vx.shape) - 1
        if W.batched or (bias is not None and bias.batched):
            raise Refused("convolution with a batched weight or bias")
        if dilation is not None and any(k != 1 for k in dilation):
            raise Refused(f"convolution with dilation {list(dilation)} (only 1)")
        if W.rank != d + 2:
            raise Refused(f"convolution weight {list(W.full)} for input {list(x.full)}")
        outc, K = W.full[0], W.full[2:]
        cin = vx.shape[0]
        if groups < 1 or cin % groups or outc % groups or W.full[1] * groups != cin:
            raise Refused(
                f"convolution groups {groups} for input {list(x.full)}, weight {list(W.full)}"
            )
        geometry = self._padding(vx.shape[1:], K, begin, end, stride)
        if geometry is None:  # unequal padding no crop reproduces: pad the input explicitly
            x = self._pad_spatial(x, begin, end, edge=False)
            vx = self.spatial_input(x, "convolution")
            begin = end = [0] * d
            geometry = ([0] * d, [0] * d)
        sym, skip = geometry
        out = [
            self._out_size(n, k, s, b_, e)
            for n, k, s, b_, e in zip(vx.shape[1:], K, stride, begin, end, strict=True)
        ]
        vW = self.var(W)
        vb = self.var(bias) if bias is not None else self.zeros(outc)
        if bias is not None and bias.full != (outc,):
            vb = self.reshape(vb, (outc,))

        if d == 2 and len(set(stride)) == 1 and len(set(sym)) == 1:
            y = self.b.conv2d(vW, vb, vx, stride=int(stride[0]), padding=int(sym[0]), groups=groups)
        else:
            y = self.b.conv(vW, vb, vx, stride=tuple(stride), padding=tuple(sym), groups=groups)
        return self.spatial_out(self._crop_spatial(y, skip, out))

    def conv_transpose(
        self,
        x: T,
        W: T,
        bias: T | None,
        stride: Sequence[int],
        begin: Sequence[int],
        end: Sequence[int],
        output_padding: Sequence[int],
    ) -> T:
        """Transpose convolution of x (N, C, spatial...) with W (C, outC, k...): the full
        output (in - 1) s + k, cropped by ``begin`` and ``end - output_padding``."""
        vx = self.spatial_input(x, "transpose convolution")
        d = len(vx.shape) - 1
        if W.batched or (bias is not None and bias.batched):
            raise Refused("transpose convolution with a batched weight or bias")
        if W.rank != d + 2 or W.full[0] != vx.shape[0]:
            raise Refused(f"transpose convolution weight {list(W.full)} for input {list(x.full)}")
        outc, K = W.full[1], W.full[2:]
        vW = self.var(W)
        vb = self.var(bias) if bias is not None else self.zeros(outc)
        if bias is not None and bias.full != (outc,):
            vb = self.reshape(vb, (outc,))
        full = [(n - 1) * s + k for n, s, k in zip(vx.shape[1:], stride, K, strict=True)]
        out = [
            f - b_ - e + op for f, b_, e, op in zip(full, begin, end, output_padding, strict=True)
        ]
        if any(o < 1 for o in out) or any(
            op >= s for op, s in zip(output_padding, stride, strict=True)
        ):
            raise Refused("transpose convolution: bad padding or output padding")
        if list(begin) == list(end) and not any(output_padding):
            y = (
                self.b.conv_transpose2d(vW, vb, vx, stride=int(stride[0]), padding=int(begin[0]))
                if d == 2 and len(set(stride)) == 1 and len(set(begin)) == 1
                else self.b.conv_transpose(vW, vb, vx, stride=tuple(stride), padding=tuple(begin))
            )
            return self.spatial_out(y)
        if any(o + b_ > f for o, b_, f in zip(out, begin, full, strict=True)):
            raise Refused("transpose convolution: output padding beyond the full output")
        y = self.b.conv_transpose(vW, vb, vx, stride=tuple(stride), padding=(0,) * d)
        return self.spatial_out(self._crop_spatial(y, begin, out))

    def pool(
        self,
        x: T,
        kind: str,
        kernel: Sequence[int],
        stride: Sequence[int],
        begin: Sequence[int],
        end: Sequence[int],
        *,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        dilation: Sequence[int] | None = None,
    ) -> T:
        """``max`` or ``avg`` pooling of x (N, C, spatial...)."""
        vx = self.spatial_input(x, f"{kind} pooling")
        d = len(vx.shape) - 1
        kernel, stride = [int(k) for k in kernel], [int(s) for s in stride]
        if len(kernel) != d:
            raise Refused(f"pooling kernel {kernel} for input {list(x.full)}")
        if dilation is not None and any(k != 1 for k in dilation):
            raise Refused(f"pooling with dilation {list(dilation)} (only 1)")
        n = vx.shape[1:]
        out = [
            self._out_size(a, k, s, b_, e)
            for a, k, s, b_, e in zip(n, kernel, stride, begin, end, strict=True)
        ]
        if ceil_mode and out != [
            self._out_size(a, k, s, b_, e, True)
            for a, k, s, b_, e in zip(n, kernel, stride, begin, end, strict=True)
        ]:
            raise Refused("pooling with ceil_mode where it changes the output size")
        if any(p >= k for p, k in zip([*begin, *end], kernel * 2, strict=True)):
            raise Refused(f"pooling padding {list(begin)}, {list(end)} not smaller than the kernel")
        geometry = self._padding(n, kernel, begin, end, stride)
        if geometry is None:  # unequal padding no crop reproduces: pad the input explicitly
            padded = self._pad_spatial(x, begin, end, edge=kind == "max")
            vx = self.spatial_input(padded, f"{kind} pooling")
            geometry = ([0] * d, [0] * d)
        sym, skip = geometry
        if any(p >= k for p, k in zip(sym, kernel, strict=True)):
            raise Refused(f"pooling padding {sym} not smaller than the kernel {kernel}")
        if d == 2 and len(set(stride)) == 1 and len(set(sym)) == 1:
            if sym[0] == 0:
                y = self.b.apply(f"{kind}_pool2d", vx, kernel=tuple(kernel), stride=stride[0])
            else:
                y = self.b.apply(
                    f"{kind}_pool2d_pad",
                    vx,
                    kernel=tuple(kernel),
                    stride=stride[0],
                    padding=sym[0],
                )
        else:
            y = self.b.apply(
                f"{kind}_pool", vx, kernel=tuple(kernel), stride=tuple(stride), padding=tuple(sym)
            )
        y = self._crop_spatial(y, skip, out)
        if kind == "avg" and not count_include_pad and any(begin) + any(end):
            counts = _window_counts(n, kernel, stride, begin, out)
            scale = np.prod(kernel) / counts
            c = self.b.const(np.broadcast_to(scale, y.shape).copy())
            y = self.b.mul(y, c)
        return self.spatial_out(y)

    def global_avg_pool(self, x: T, keepdims: bool) -> T:
        vx = self.spatial_input(x, "global average pooling")
        if len(vx.shape) == 3:
            y = self.b.global_avg_pool2d(vx)
        else:
            y = vx
            for a in reversed(range(1, len(vx.shape))):
                y = self.b.reduce_mean(y, axis=a)
        if keepdims:
            y = self.reshape(y, (y.shape[0],) + (1,) * (len(vx.shape) - 1))
        return self.spatial_out(y)

    def batchnorm_eval(self, x: T, gamma: T, beta: T, mean: T, var: T, eps: float) -> T:
        vx = self.spatial_input(x, "batch normalization")
        c = vx.shape[0]
        args = []
        for t in (gamma, beta, mean, var):
            if t.batched or _prod(t.full) != c:
                raise Refused(
                    f"batch normalization statistics {list(t.full)} for input {list(x.full)}"
                )
            args.append(self.reshape(self.var(t), (c,)))
        return self.spatial_out(self.b.batchnorm_eval(vx, *args, eps=float(eps)))

    def instance_norm(self, x: T, gamma: T, beta: T, eps: float) -> T:
        """Per-sample, per-channel normalisation over the spatial axes (the statistics of this
        sample): ``batchnorm_channel_first`` on (C, spatial, 1)."""
        vx = self.spatial_input(x, "instance normalization")
        c = vx.shape[0]
        if len(vx.shape) < 2:
            raise Refused(f"instance normalization of {list(x.full)} (needs spatial axes)")
        flat = self.reshape(vx, (c, _prod(vx.shape[1:]), 1))
        g = self.reshape(self.var(gamma), (c,))
        b_ = self.reshape(self.var(beta), (c,))
        y = self.b.batchnorm_channel_first(flat, g, b_, eps=float(eps))
        return self.spatial_out(self.reshape(y, vx.shape))

    def local_response_norm(self, x: T, size: int, alpha: float, beta: float, bias: float) -> T:
        """ONNX ``LRN`` of x (N, C, spatial...): ``x / (bias + alpha / size * s) ** beta``, s the
        sum of x^2 over channels c - floor((size - 1) / 2) .. c + ceil((size - 1) / 2) (those
        that exist). ``alpha / size * s`` is ``alpha`` times the average pool of x^2 along the
        channels with that window, zero-padded (count_include_pad): exact, in existing ops."""
        if x.rank < 2:
            raise Refused(f"LRN of {list(x.full)} (needs (N, C, ...))")
        if not bias > 0:
            raise Refused(f"LRN with bias {bias} (the base of the power must stay positive)")
        n, channels = x.full[0], x.full[1]
        cells = _prod(x.full[2:])
        sq = self.binary("mul", x, x)
        rows = self.reshape_to(sq, [n, 1, channels, cells])  # channels as a spatial axis
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        avg = self.pool(rows, "avg", [size, 1], [1, 1], [lo, 0], [hi, 0])
        den = self.binary("add", self.scale(avg, alpha), self.const(np.asarray(bias)))
        y = self.binary("mul", self.reshape_to(x, [n, 1, channels, cells]), self.power(den, -beta))
        return self.reshape_to(y, list(x.full))

    def layer_norm(self, x: T, k: int, gamma: T | None, beta: T | None, eps: float) -> T:
        """Normalise over the last ``k`` axes, with an elementwise affine of those axes."""
        if x.bdim is not None and x.bdim >= x.rank - k:
            raise Refused("layer norm over the axis that holds the batch (mixes samples)")
        norm = x.full[x.rank - k :]
        size = _prod(norm)
        xs = self.sample_shape(x.full, x.bdim)
        rows = self.reshape(self.var(x), (_prod(xs) // size, size))
        ones = np.ones(size, dtype=np.float64)
        g = self.reshape(self.var(gamma), (size,)) if gamma is not None else self.b.const(ones)
        b_ = (
            self.reshape(self.var(beta), (size,))
            if beta is not None
            else self.b.const(np.zeros(size))
        )
        y = self.b.layer_norm(rows, g, b_, eps=float(eps))
        return self.make(y, x.full, x.bdim, x.inner)


def _window_counts(
    n: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    begin: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """Per output cell, how many input cells (not padding) its window covers."""
    per_dim = []
    for a, k, s, b_, o in zip(n, kernel, stride, begin, out, strict=True):
        starts = np.arange(o) * s - b_
        lo, hi = np.maximum(starts, 0), np.minimum(starts + k, a)
        per_dim.append((hi - lo).astype(np.float64))
    counts = per_dim[0]
    for c in per_dim[1:]:
        counts = np.multiply.outer(counts, c)
    return counts


def permute_var(b: GraphBuilder, v: Var, perm: Sequence[int]) -> Var:
    """Permute the axes of ``v`` with our transposes (adjacent swaps; a 2-D or 3-D pattern in
    one op where there is one)."""
    perm = list(perm)
    r = len(perm)
    if perm == list(range(r)):
        return v
    if r == 2:
        return b.transpose2d(v)
    if r == 3:
        named = {
            (1, 2, 0): "transpose3d_first_to_last",
            (2, 0, 1): "transpose3d_last_to_first",
            (0, 2, 1): "transpose3d_last_two",
        }
        if tuple(perm) in named:
            return b.apply(named[tuple(perm)], v)
    # bubble sort: swap adjacent axes until the order is perm
    cur = list(range(r))
    for i in range(r):
        j = cur.index(perm[i])
        while j > i:
            v = b.swap_adjacent_at_depth(v, depth=j - 1)
            cur[j - 1], cur[j] = cur[j], cur[j - 1]
            j -= 1
    return v


#: 1 / sqrt(2) as a float64 (C's ``M_SQRT1_2``, what PyTorch's exact GELU multiplies by)
_SQRT1_2 = 0.7071067811865476

_NUMPY_UNARY: dict[str, Any] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "step": lambda x: (x > 0).astype(np.float64),
    "pow": lambda x, p: np.power(x, p),
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "exp": np.exp,
    "sqrt": lambda x: np.sqrt(np.maximum(x, 0.0)),
    "inv": lambda x: 1.0 / x,
    "abs": np.abs,
    "tanh": np.tanh,
    "scale": lambda x, c: x * c,
}

_NUMPY_BINARY: dict[str, Any] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: a // b if np.issubdtype(np.result_type(a, b), np.integer) else a / b,
    "max": np.maximum,
    "min": np.minimum,
}


_SITE = re.compile(r",? at [^,]*:\d+$")


def one_line(e: BaseException) -> str:
    """An exception's first line, without the builder's ``at file:line`` (the site is in our
    importer, not the user's code; the importer names the source node instead)."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return _SITE.sub("", text)


class InteropError(TorchleanError):
    """A model that cannot be imported or a graph that cannot be exported (one line naming the
    source op and node)."""


__all__ = ["InteropError", "Refused", "T", "Tracer", "one_line", "permute_var"]
