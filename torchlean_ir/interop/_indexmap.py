"""Index tensors computed at import time from an index input: views, pads, masks.

A language model's integer inputs go through shape operations before they are used: GPT-2 views
``input_ids`` as ``(-1, T)``; its loss pads the labels with ``ignore_index`` and shifts them by
one; BERT turns ``attention_mask`` into booleans and indexes them into a ``(N, 1, L, S)``
attention mask. Our graphs have no integer arithmetic: an op reads an index input as it is. So
the importer evaluates these operations on *positions*: an :class:`IndexMap` records, for every
element of the source tensor, which element of the index input it holds (its flat position in
the input's full shape, batch included) or, where it holds a constant (a pad), that constant.
A shape operation is the same operation applied to the positions and to the constants
(PyTorch evaluates it), so every view, slice, pad, expand or advanced index of an index input
stays an index tensor. Where the tensor is used (an embedding, a loss's targets, a mask), its
:meth:`~IndexMap.layout` says what one sample holds: per element of the per-sample tensor, the
element of the per-sample index input (``jmap``) or a constant, and where the batch sits. The
layout must be the same for every sample; a tensor that mixes the samples is refused.

A boolean index tensor (``attention_mask.bool()``, ``ids == c``) has a ``test``: ``("ne", c)`` or
``("eq", c)`` of the natural. Its float value is computed without integer ops, exactly: ``[i ==
c]`` is ``gather_vec_nat`` of the one-hot vector ``e_c`` (of length ``c + 1``) at ``i``, since an
index past the vector's end reads 0; ``[i != c]`` is one minus that. The naturals themselves as
floats (``(1 - attention_mask.float()) * min``) are ``nat_vec_to_float`` of the index input, a
conversion that, like every read of an index, has no gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._builder import GraphBuilder, IndexVar, Var
from ._trace import Refused, T, Tracer

Shape = tuple[int, ...]


@dataclass(frozen=True, eq=False)
class Layout:
    """What one sample of an index tensor holds: ``jmap`` (the per-sample shape) is, per
    element, the flat position in the per-sample index input, or -1 where the element is the
    constant ``fill`` there; ``bdim`` and ``inner`` place the batch as :class:`T` does."""

    jmap: np.ndarray
    fill: np.ndarray
    bdim: int | None
    inner: int

    @property
    def constants(self) -> np.ndarray:
        return self.jmap < 0


@dataclass(frozen=True, eq=False)
class IndexMap:
    """Per element of a source tensor: the index input element it holds (``pos``, its flat
    position in the input of full shape ``src`` whose batch is axis ``src_bdim``) or, where
    ``pos`` is -1, the constant ``fill``. ``test`` is ``None`` for the naturals themselves, or
    ``("eq", c)`` / ``("ne", c)`` for the booleans ``i == c`` / ``i != c``; ``fill`` holds
    values of the tensor (naturals or booleans). ``shift`` is a number added to every element
    that reads the input (``position_ids + offset``): the elements are ``i + shift``, which an
    embedding reads as rows of its table moved by ``shift``, and a comparison as ``i`` compared
    with the number less ``shift``; a use that cannot absorb it refuses."""

    var: IndexVar
    src: Shape
    src_bdim: int | None
    pos: np.ndarray
    fill: np.ndarray
    test: tuple[str, int] | None = None
    shift: int = 0

    @staticmethod
    def of_input(var: IndexVar, full: Shape, bdim: int | None) -> IndexMap:
        pos = np.arange(math.prod(full), dtype=np.int64).reshape(full)
        return IndexMap(var, tuple(full), bdim, pos, np.zeros(full, dtype=np.int64))

    @property
    def shape(self) -> Shape:
        return tuple(self.pos.shape)

    @property
    def constant(self) -> bool:
        """No element reads the input: the tensor is the constant ``fill``."""
        return not bool((self.pos >= 0).any())

    def moved(self, pos: np.ndarray, fill: np.ndarray) -> IndexMap:
        """The same input and test with new positions and constants (a shape operation)."""
        pos = np.asarray(pos, dtype=np.int64)
        fill = np.asarray(fill)
        if pos.shape != fill.shape:
            raise Refused(f"internal: positions {pos.shape} and constants {fill.shape} differ")
        return replace(self, pos=pos, fill=fill)

    def plus(self, c: Any) -> IndexMap:
        """``self + c`` for an integer ``c`` (a number, or an array of one value: PyTorch's
        ``position_ids + offset``)."""
        if self.test is not None:
            raise Refused("arithmetic on a boolean of an index input")
        vals = np.unique(np.asarray(c))
        if vals.size != 1 or not float(vals[0]).is_integer():
            raise Refused(
                "adding to an index tensor other than one integer (per-element or float "
                "offsets are integers computed at run time)"
            )
        k = int(vals[0])
        shape = np.broadcast_shapes(self.shape, np.shape(c))
        pos = np.broadcast_to(self.pos, shape)
        fill = np.broadcast_to(self.fill, shape) + k
        return replace(self, pos=np.array(pos), fill=np.array(fill), shift=self.shift + k)

    def compared(self, op: str, c: Any) -> IndexMap:
        """``self == c`` or ``self != c`` for a number ``c``: a boolean index tensor."""
        if self.test is not None:
            if isinstance(c, bool | np.bool_) or c in (0, 1):
                keep = (op == "eq") == bool(c)  # b == True, b != False: b itself
                if keep:
                    return self
                flipped = ("ne" if self.test[0] == "eq" else "eq", self.test[1])
                return replace(self, fill=~self.fill.astype(bool), test=flipped)
            raise Refused(f"comparing a boolean index tensor with {c!r}")
        if isinstance(c, float) and not c.is_integer():
            value = op == "ne"  # a natural is never equal to a non-integer
            return replace(self, pos=np.full_like(self.pos, -1), fill=np.full(self.shape, value))
        c = int(c)
        fill = (self.fill == c) if op == "eq" else (self.fill != c)
        c -= self.shift  # i + shift == c: i == c - shift
        if c < 0:  # a natural is never negative: the test is constant where the input is read
            value = op == "ne"
            return replace(self, pos=np.full_like(self.pos, -1), fill=np.where(
                self.pos >= 0, value, fill), shift=0)  # fmt: skip
        return replace(self, fill=fill, test=(op, c), shift=0)

    def masked(self, known: np.ndarray) -> IndexMap:
        """``self & known`` for a boolean index tensor and booleans known at import time."""
        if self.test is None:
            raise Refused("a logical and of an integer (not boolean) index tensor")
        shape = np.broadcast_shapes(self.shape, known.shape)
        k = np.broadcast_to(known.astype(bool), shape)
        pos = np.where(k, np.broadcast_to(self.pos, shape), -1)
        fill = np.where(k, np.broadcast_to(self.fill.astype(bool), shape), False)
        return replace(self, pos=pos, fill=fill)

    # -- what one sample holds --------------------------------------------------------------
    def layout(self, n: int) -> Layout:
        """The per-sample layout for a batch of ``n`` (refused when samples differ or mix)."""
        full = self.shape
        live = self.pos >= 0
        safe = np.where(live, self.pos, 0)
        coords = np.unravel_index(safe, self.src) if self.src else ()
        if self.src_bdim is None:
            jmap = np.where(live, self.pos, -1)
            return Layout(jmap, self.fill, None, 1)
        sample = coords[self.src_bdim]
        per_src = tuple(d for i, d in enumerate(self.src) if i != self.src_bdim)
        rest = [c for i, c in enumerate(coords) if i != self.src_bdim]
        j = np.ravel_multi_index(rest, per_src) if per_src else np.zeros(full, np.int64)
        j = np.where(live, j, -1)
        for axis, inner in self._digits(n, live, sample):
            out = self._sample_slices(j, axis, inner, n)
            fills = self._sample_slices(self.fill, axis, inner, n)
            if all(np.array_equal(o, out[0]) for o in out[1:]) and all(
                np.array_equal(f, fills[0]) for f in fills[1:]
            ):
                return Layout(out[0], fills[0], axis, inner)
        raise Refused(
            f"an index tensor of shape {list(full)} whose samples hold different elements of "
            "their inputs (mixes samples)"
        )

    def _digits(self, n: int, live: np.ndarray, sample: np.ndarray) -> list[tuple[int, int]]:
        """The (axis, inner) places of a batch digit that agree with the input's samples."""
        full = self.shape
        found = []
        for axis, d in enumerate(full):
            for inner in range(1, d // n + 1):
                if d % (n * inner):
                    continue
                idx = np.indices(full)[axis] if full else np.zeros((), np.int64)
                digit = (idx // inner) % n
                if np.array_equal(digit[live], sample[live]):
                    found.append((axis, inner))
        bdim = self.src_bdim or 0
        found.sort(key=lambda ai: (full[ai[0]] != n, abs(ai[0] - bdim), ai[0], ai[1]))
        return found

    @staticmethod
    def _sample_slices(a: np.ndarray, axis: int, inner: int, n: int) -> list[np.ndarray]:
        """Per sample, its elements (the per-sample shape: dim ``axis`` divided by ``n``,
        dropped when only the batch is left in it)."""
        full = a.shape
        outer = full[axis] // (n * inner)
        split = a.reshape(full[:axis] + (outer, n, inner) + full[axis + 1 :])
        rest = full[axis] // n
        shape = full[:axis] + (() if rest == 1 else (rest,)) + full[axis + 1 :]
        return [np.take(split, b, axis=axis + 1).reshape(shape) for b in range(n)]


def index_var(lay: Layout, var: IndexVar) -> IndexVar | None:
    """The index input itself when one sample of the tensor is exactly it, in order."""
    if lay.constants.any():
        return None
    k = math.prod(var.type.shape)
    if lay.jmap.size != k or not np.array_equal(lay.jmap.reshape(-1), np.arange(k)):
        return None
    return var


def as_float(tr: Tracer, imap: IndexMap, full: Shape) -> T:
    """An index tensor as floats (a graph value; no gradient reaches an index input): the
    naturals themselves are ``nat_vec_to_float(i)`` (``nat_to_float`` for a scalar input), a
    boolean ``[i == c]`` is ``gather_vec_nat(e_c, i)`` and ``[i != c]`` one minus it; then
    arranged into the tensor's per-sample shape with its constants."""
    lay = imap.layout(tr.n)
    ivar = imap.var
    b = tr.b
    scalar = not ivar.type.shape
    if imap.test is None:
        vals = b.nat_to_float(ivar) if scalar else b.nat_vec_to_float(ivar)
        if imap.shift:
            vals = b.add(vals, b.const(np.full(ivar.type.shape, float(imap.shift))))
    else:
        op, c = imap.test
        onehot = np.zeros(c + 1)
        onehot[c] = 1.0
        if scalar:
            eq = b.gather_scalar_nat(b.const(onehot), ivar)  # [i == c]
        else:
            eq = b.gather_vec_nat(b.const(onehot), ivar)  # [i[j] == c]
        vals = eq if op == "eq" else b.sub(b.const(np.ones(ivar.type.shape)), eq)
    if scalar:
        vals = b.reshape(vals, shape=(1,))
    per = _arranged(tr, vals, lay)
    return tr.make(per, full, lay.bdim, lay.inner)


def _arranged(tr: Tracer, vals: Var, lay: Layout) -> Var:
    """``out[e] = vals[jmap[e]]`` (``fill[e]`` where jmap is -1) for a per-sample layout,
    without index ops: the axes along which the layout does not change are broadcast; what is
    left is ``vals`` itself, or ``vals`` times a 0/1 selection matrix (exact) plus the
    constants."""
    b = tr.b
    jmap, fill = lay.jmap, lay.fill.astype(np.float64)
    shape = jmap.shape
    small_j, small_f = jmap, fill
    for axis in range(len(shape)):
        first_j = np.take(small_j, [0], axis=axis)
        first_f = np.take(small_f, [0], axis=axis)
        if np.array_equal(np.broadcast_to(first_j, small_j.shape), small_j) and np.array_equal(
            np.broadcast_to(first_f, small_f.shape), small_f
        ):
            small_j, small_f = first_j, first_f
    k = vals.shape[0]
    flat = small_j.reshape(-1)
    if np.array_equal(flat, np.arange(k)):
        v = vals
    else:
        sel = np.zeros((k, flat.size))
        live = flat >= 0
        sel[flat[live], np.nonzero(live)[0]] = 1.0
        v = b.reshape(b.matmul(b.reshape(vals, shape=(1, k)), b.const(sel)), shape=(flat.size,))
        if (~live).any():
            v = b.add(v, b.const(np.where(live, 0.0, small_f.reshape(-1))))
    v = tr.reshape(v, small_j.shape)
    if small_j.shape != shape:
        v = b.broadcast_to(v, shape=shape)
    return v


# -- index tensors in both importers: losses at class targets, runtime masks ----------------


#: PyTorch's reduction codes (``nll_loss``'s ``reduction`` argument).
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def log_probs_pick(
    tr: Tracer, logp: T, target: Any, reduction: int, weight: Any, ignore_index: int = -100
) -> T:
    """``nll_loss`` of log-probabilities ``logp`` (..., C) at class targets (...), as
    ``torch.nn.functional.nll_loss`` defines it: targets equal to ``ignore_index`` count for
    nothing, and the mean is over the targets that count. Per sample, the targets are the index
    input (any view, pad or shift of it); a target a pad made constant must be ``ignore_index``.
    A negative ``ignore_index`` (PyTorch's -100) never equals a runtime target (a natural), so
    which targets count is known at import time, the same for every sample: the mean over the
    batch's targets is the mean over samples of each sample's mean, exactly, and a loss reduced
    over the batch imports as this sample's mean (or sum), which ``batched(grads="mean")`` (or
    ``"sum"``) reduces."""
    if weight is not None:
        raise Refused("a loss with class weights")
    if reduction not in REDUCTIONS:
        raise Refused(f"a loss with reduction {reduction}")
    kind = REDUCTIONS[reduction]
    if not isinstance(target, T) or target.imap is None:
        raise Refused("loss targets must be an integer input of the program (class indices)")
    if target.imap.shift:
        raise Refused(f"loss targets moved by {target.imap.shift} (an integer input plus a number)")
    lay = target.imap.layout(tr.n)
    if lay.bdim != logp.bdim or (lay.bdim is not None and lay.inner != logp.inner):
        raise Refused("loss targets and log-probabilities hold the batch in different places")
    if ignore_index >= 0:
        raise Refused(
            f"a loss with ignore_index={ignore_index}, which a runtime target can equal (which "
            "targets count would depend on the data)",
            "use a negative ignore_index (PyTorch's default -100)",
        )
    const = lay.constants
    if (lay.fill[const] != ignore_index).any():
        raise Refused("a loss with constant targets other than ignore_index")
    b = tr.b
    v = tr.var(logp)
    if v.shape[:-1] != lay.jmap.shape:
        raise Refused(
            f"a loss over {list(logp.full)} log-probabilities with {list(target.full)} targets"
        )
    var = target.imap.var
    count = int((~const).sum())
    if kind == "mean" and count == 0:
        raise Refused("a mean loss whose targets are all ignore_index (0 / 0)")
    if not lay.jmap.shape and not const.any() and not var.type.shape:  # one class per sample
        picked = b.gather_scalar_nat(v, var)
        per = picked
    else:
        per = picked_rows(b, v, var, lay.jmap)
    if kind == "none":
        return tr.make(b.scale(per, c=-1.0), target.full, lay.bdim, lay.inner)
    total = per if not per.shape else b.sum(per)
    y = b.scale(total, c=-1.0 / count if kind == "mean" else -1.0)
    if lay.bdim is None:
        return T((), var=y)
    return T((), var=y, reduced=kind)


def picked_rows(b: GraphBuilder, v: Any, var: Any, jmap: np.ndarray) -> Any:
    """``out[r] = v[r, i[jmap[r]]]`` (0 where ``jmap[r]`` is -1) for one sample's log-probs
    ``v`` (rows..., C) and index vector ``i`` (k,): ``G = gather_rows_nat(v^T, i)`` holds
    ``G[j, r] = v[r, i[j]]`` (k, R); a 0/1 matrix keeps the pairs ``j = jmap[r]``, and a sum
    over ``j`` leaves one term per row (exact)."""
    rows = int(np.prod(jmap.shape)) if jmap.shape else 1
    C = v.shape[-1]
    flat = b.reshape(v, shape=(rows, C)) if v.shape != (rows, C) else v
    k = var.type.shape[0] if var.type.shape else None
    if k is None:
        raise Refused("loss targets from a scalar index input for several rows")
    g = b.gather_rows_nat(b.transpose2d(flat), var)  # (k, rows)
    keep = np.zeros((k, rows))
    j = jmap.reshape(-1)
    live = j >= 0
    keep[j[live], np.nonzero(live)[0]] = 1.0
    out = b.reduce_sum(b.mul(g, b.const(keep)), axis=0)  # (rows,)
    return b.reshape(out, shape=jmap.shape) if jmap.shape != (rows,) else out


def renormalised(tr: Tracer, p: T, w: T) -> T:
    """Softmax weights ``p`` restricted to the keys a runtime 0/1 mask ``w`` allows:
    ``p w / (sum(p w) + none)`` with ``none = 1 - min(sum(w), 1)`` (1 for a row that allows no
    key, whose weights are then 0, as PyTorch's safe softmax gives)."""
    kept = tr.binary("mul", p, w)
    total = tr.reduce(kept, [-1], True, "sum")
    count = tr.reduce(w, [-1], True, "sum")
    none = tr.binary("sub", tr.const(np.ones(())), tr.binary("min", count, tr.const(np.ones(()))))
    return tr.binary("mul", kept, tr.unary("inv", tr.binary("add", total, none)))


def batch_free(tr: Tracer, m: np.ndarray, like: T) -> np.ndarray:
    """A constant aligned (right) with ``like``, with its size-n axis at ``like``'s batch axis
    reduced to 1 where the constant is the same for every sample (a causal mask expanded over
    the batch): an unbatched constant may not vary along the batch."""
    if like.bdim is None or like.full[like.bdim] != tr.n:
        return m
    k = like.bdim - (like.rank - m.ndim)
    if k < 0 or m.shape[k] != tr.n or tr.n == 1:
        return m
    first = np.take(m, [0], axis=k)
    if np.array_equal(np.broadcast_to(first, m.shape), m):
        return first
    return m


def shifted_rows(tr: Tracer, table: T, shift: int, *, wrap: bool = False) -> T:
    """``table`` (rows along axis 0, ``n`` of them) as read at indices ``i + shift`` by reading
    it at ``i`` (a natural): its rows from ``shift`` on, or for a negative shift ``-shift`` rows
    then the table. Those rows are read where ``i + shift`` is negative: zeros for PyTorch's
    ``embedding``, which refuses a negative index; with ``wrap``, the table's last rows, as
    ONNX's ``Gather`` reads an index ``j`` in ``[-n, 0)`` at row ``n + j`` (below ``-n``, which
    ONNX refuses too, zeros). Indices the source accepts read the same rows."""
    n = table.full[0]
    if shift >= n:
        raise Refused(f"indices plus {shift} into a table of {n} rows (all out of range)")
    if shift > 0:
        return tr.slice(table, 0, shift, n)
    below = -shift - (min(n, -shift) if wrap else 0)
    parts = [tr.const(np.zeros((below, *table.full[1:])))] if below else []
    if wrap:
        parts.append(tr.slice(table, 0, max(n + shift, 0), n))  # the rows of -1, -2, ...
    return tr.concat([*parts, table], 0)


def index_t(imap: IndexMap) -> T:
    """The tensor an index map describes (a constant when it reads no input)."""
    if imap.constant:
        return T(imap.shape, value=np.array(imap.fill))
    return T(imap.shape, index=imap.var, imap=imap)


def index_arg(tr: Tracer, t: Any, what: str, shifted: bool = False) -> tuple[IndexVar, Layout]:
    """The index input one sample of ``t`` is, in order, and its layout (bdim, inner); with
    ``shifted``, the caller reads ``t.imap.shift`` (else a shifted tensor is refused)."""
    if not isinstance(t, T) or t.imap is None:
        raise Refused(f"{what} must be an integer input of the program")
    if t.imap.shift and not shifted:
        raise Refused(f"{what}: an integer input plus {t.imap.shift}")
    lay = t.imap.layout(tr.n)
    var = index_var(lay, t.imap.var)
    if var is None:
        raise Refused(f"{what}: one sample does not hold its integer input in order")
    return var, lay


__all__ = [
    "REDUCTIONS",
    "IndexMap",
    "Layout",
    "as_float",
    "batch_free",
    "index_arg",
    "index_t",
    "index_var",
    "log_probs_pick",
    "picked_rows",
    "renormalised",
    "shifted_rows",
]
