"""The softmax abstraction at tensor level: a softmax as one opaque read.

A softmax of symbolic scores written out (``exp(s_j) / sum_k exp(s_k)``) makes attention's
terms explode: the scores are sums of products of leaf reads, and the derivative of the
quotient repeats them. The tensor backend and the compiled ``tl_softmax`` calls instead return
the read ``_P<hash>(r..., j)`` of a *derived* atom: the softmax along the last axis of a score
term, defined once in :data:`DEFS` by

* ``body``: the score at the row index symbols ``rows`` and the position symbol ``pos``;
* ``valid``: the static mask (true = allowed): a NumPy array, or, over a shape with symbolic
  sizes, its 0/1 term at ``rows`` and ``pos`` (index brackets, as a pooling rule's padding mask
  built by ``TensorBackend.static_arrays``); ``None`` for no mask.

Its value is ``valid[r, j] exp(s(r, j)) / sum_k valid[r, k] exp(s(r, k))``, and 0 on a row with
no valid entry. Everything that reads leaves reads it as a read (normal forms, canonical
renaming, identification of reads, the scalar procedure with reads as atoms), and:

- its derivative follows ``dP_j = P_j (ds_j - sum_k P_k ds_k)``, proved once per row length at
  tensor level by differentiating the explicit form (:func:`_row_lemma`; the mask as a free
  0/1 table ``c``, so it holds for every mask);
- a compiled ``tl_softmax`` call (the JAX backend's softmax: the max shift, twice, and the mask
  baked in) is proved equal, at tensor level and exactly, to the explicit softmax of a leaf of
  its shape over the valid entries, once per body and shape (:func:`verify._tjaxpr.softmax_call`);
  its output is then the atom of its input;
- two atoms whose score terms have different normal forms are one atom when their bodies are
  proved equal for every row and position (:func:`atom_name`), so the reference's softmax and
  the compiled one meet;
- a concrete element evaluates the explicit form (:meth:`SoftmaxDef.concrete`), so
  counterexamples are values of the real softmax, and :func:`verify.terms.expand_derived` writes
  every atom out for the comparisons the abstraction does not prove.

An identity proved with the atoms as opaque reads holds for any values they could take, so for
the softmax values: the abstraction proves, never refutes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import symengine as se

from . import terms as T
from ._dims import SizeDependent, is_one, is_symbolic, size_expr
from ._tcanonical import canonical
from ._tdecide import decide_tensor
from ._tensor import (
    TArray,
    _any,
    _mask,
    asarray,
    broadcast_to,
    moveaxis,
    reduce,
    valid_exp,
    where,
)


class SoftmaxError(T.TermError):
    """A softmax identity the abstraction relies on was not proved."""


@dataclass(frozen=True, eq=False)
class SoftmaxDef:
    """One softmax: ``body`` at ``rows`` (symbols, 0 for an axis of size 1) and ``pos``."""

    name: str
    body: Any
    rows: tuple[Any, ...]
    pos: Any
    shape: tuple[Any, ...]
    valid: Any  # np.ndarray | a 0/1 term at (rows, pos) | None
    leaves: frozenset[str]

    @property
    def length(self) -> Any:
        """The row length (a :class:`verify._dims.Dim` for a symbolic size)."""
        return self.shape[-1]

    def score(self, args: Sequence[Any], at: Any, rename: bool = True) -> Any:
        """The score of row ``args[:-1]`` at position ``at`` (bound variables renamed apart
        from every other copy with ``rename``)."""
        out = self._at(self.body, args, at)
        return T.rename_bound(out) if rename else out

    def _at(self, term: Any, args: Sequence[Any], at: Any) -> Any:
        env = {s: a for s, a in zip(self.rows, args[:-1], strict=True) if isinstance(s, se.Symbol)}
        if isinstance(self.pos, se.Symbol):
            env[self.pos] = at
        return term.xreplace(env) if env else term

    def mask(self) -> Any:
        """The mask as the backends take it: ``None``, a NumPy array, or (a symbolic one) an
        array of index conditions."""
        if self.valid is None or isinstance(self.valid, np.ndarray):
            return self.valid
        return TArray(self.shape, lambda idx: self._at(self.valid, idx, idx[-1]), "c")

    def mentions(self, names: Any) -> bool:
        return not self.leaves.isdisjoint(names)

    def jvp(self, args: Sequence[Any], d: Callable[[Any], Any]) -> Any:
        """``dP(r, j) = P(r, j) (ds(r, j) - sum_k P(r, k) ds(r, k))`` (:func:`_row_lemma`)."""
        _row_lemma(self.length)
        r, j = tuple(args[:-1]), args[-1]
        inner = T.ssum(lambda k: T.read(self.name, (*r, k)) * d(self.score(args, k)),
                       0, self.length)  # fmt: skip
        return T.read(self.name, tuple(args)) * (d(self.score(args, j)) - inner)

    def explicit(self, args: Sequence[Any]) -> Any:
        """The element at ``args`` written out (the tensor backend's explicit softmax)."""
        scores = TArray(self.shape, lambda idx: self.score(idx, idx[-1]))
        return explicit_softmax(scores, self.mask()).at(tuple(args))

    def concrete(self, idx: tuple[int, ...], value: Callable[[Any], Any]) -> Any:
        """The element at integer ``idx``, ``value`` evaluating a term at concrete indices."""
        if not isinstance(self.valid, np.ndarray | None):
            raise T.TermError(f"a concrete element of the softmax {self.name} of symbolic shape")
        if not all(0 <= i < d for i, d in zip(idx, self.shape, strict=True)):
            return T.ZERO  # outside the array: only under a bracket that is 0 there
        r, j = idx[:-1], idx[-1]
        ok = (np.ones(self.length, bool) if self.valid is None
              else np.asarray(self.valid[r], bool))  # fmt: skip
        if not ok[j]:
            return T.ZERO
        exps = [se.exp(value(self.score(idx, se.Integer(k), rename=False)))
                for k in range(self.length) if ok[k]]  # fmt: skip
        return exps[int(np.count_nonzero(ok[:j]))] / se.Add(*exps)


#: The atoms by name (the term layer's registry of derived reads).
DEFS: dict[str, SoftmaxDef] = T.DERIVED
_BY_KEY: dict[tuple, str] = {}


def _shape_key(shape: Sequence[Any]) -> tuple[str, ...]:
    """A shape as text: sizes compared structurally (a symbolic size only equals itself; a
    :class:`verify._dims.Dim` compared by value would refuse ``n == 4``)."""
    return tuple(str(size_expr(d)).replace(" ", "") for d in shape)


def _row_symbols(shape: Sequence[Any]) -> tuple[tuple[Any, ...], Any]:
    """Deterministic symbols for a row index and a position (free, with their ranges; over an
    axis of symbolic length, the bound is a fact through :data:`verify.terms.UPPER`)."""
    syms = []
    for i, (n, key) in enumerate(zip(shape, _shape_key(shape), strict=True)):
        if is_one(n):
            syms.append(T.ZERO)
            continue
        s = se.Symbol(f"_smx{i}n{key}" if i < len(shape) - 1 else f"_smxp{key}")
        if is_symbolic((n,)):
            T.RANGES[s] = (0, None)
            T.UPPER[s] = size_expr(n)
        else:
            T.RANGES[s] = (0, int(n))
        syms.append(s)
    return tuple(syms[:-1]), syms[-1]


def _leaves(e: Any) -> frozenset[str]:
    out = set()
    for f in T.fn_atoms(e):
        n = T.name_of(f)
        if n is None or n in T._SPECIAL or n.startswith("_T"):
            continue
        d = DEFS.get(n)
        out |= d.leaves if d is not None else {n}
    return frozenset(out)


#: A new score term is compared with at most this many earlier atoms of its shape and mask.
IDENTIFY_MAX = 16


def atom_name(scores: Any, valid: Any) -> str | None:
    """The atom of the softmax along the last axis of ``scores`` (a tensor value) with the
    mask ``valid`` (a NumPy array broadcast to its shape, or an array of index conditions of
    its shape), or ``None`` when the scores read no leaf (a softmax of constants stays
    explicit)."""
    shape = tuple(scores.shape)
    rows, pos = _row_symbols(shape)
    body = T.normalize(scores.at((*rows, pos)))
    leaves = _leaves(body)
    if not leaves:
        return None
    mask: Any = None
    if isinstance(valid, np.ndarray):
        mask = np.ascontiguousarray(np.broadcast_to(valid, shape), bool)
        mask = None if mask.all() else mask
    elif valid is not None:  # index conditions at the row and position symbols
        mask = T.normalize(valid.at((*rows, pos)))
        mask = None if mask == 1 else mask
    key = (str(canonical(body)), _shape_key(shape), _mask_key(mask))
    hit = _BY_KEY.get(key)
    if hit is not None:
        return hit
    # another atom of this shape and mask whose body is the same function of the indices
    free = [s for s in (*rows, pos) if isinstance(s, se.Symbol)]
    candidates = [
        d
        for d in DEFS.values()
        if _shape_key(d.shape) == key[1] and d.leaves == leaves and _same_mask(d.valid, mask)
    ]
    for other in candidates[-IDENTIFY_MAX:]:  # the most recent: those of the graph at hand
        d = decide_tensor(body, other.body, free, counterexamples=False)
        if d.equal is True and d.method == "exact":
            _BY_KEY[key] = other.name
            return other.name
    h = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
    name = f"_P{h}"
    while name in DEFS:  # a prefix collision: lengthen
        h = hashlib.sha1((h + repr(key)).encode()).hexdigest()[:16]
        name = f"_P{h}"
    DEFS[name] = SoftmaxDef(name, body, rows, pos, shape, mask, leaves)
    _BY_KEY[key] = name
    return name


def _mask_key(mask: Any) -> Any:
    if mask is None:
        return None
    return mask.tobytes() if isinstance(mask, np.ndarray) else str(mask)


def _same_mask(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.array_equal(a, b))
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return False
    return _mask_key(a) == _mask_key(b)


def softmax(x: Any, axis: int, valid: Any) -> Any:
    """The softmax of tensor value ``x`` along ``axis`` over ``valid`` (broadcast), as atoms;
    ``None`` when the abstraction does not apply (explicit form)."""
    X = asarray(x)
    if X.ndim == 0:
        return None
    ax = axis % X.ndim
    last = moveaxis(X, ax, -1)
    mask: Any = None
    if isinstance(valid, TArray):  # a mask built with symbolic sizes
        mask = moveaxis(broadcast_to(valid, X.shape), ax, -1)
    elif valid is not None:
        if is_symbolic(X.shape):
            raise SizeDependent(f"a NumPy softmax mask over the symbolic shape {X.shape}",
                                *X.shape)  # fmt: skip
        mask = np.moveaxis(np.broadcast_to(np.asarray(valid, bool), X.shape), ax, -1)
    name = atom_name(last, mask)
    if name is None:
        return None
    out = TArray(last.shape, lambda idx: T.read(name, idx), "f")
    return moveaxis(out, -1, ax)


def explicit_softmax(x: Any, valid: Any = None, axis: int = -1) -> TArray:
    """``exp(x_j) / sum_k exp(x_k)`` along ``axis`` over the entries ``valid`` (broadcast;
    ``None``: all), 0 on the others and on a row with none."""
    X = asarray(x)
    e = valid_exp(X, valid)
    s = reduce(e, axis, True, "sum")
    if isinstance(valid, TArray):
        return e / where(_any(_mask(valid, X.shape), axis), s, 1)
    if valid is not None:
        allowed = np.any(np.broadcast_to(np.asarray(valid, bool), X.shape), axis, keepdims=True)
        s = where(asarray(allowed), s, 1)
    return e / s


# -- the lemma ------------------------------------------------------------------------------

_LEMMAS: set[str] = set()


def _row_lemma(m: Any) -> None:
    """Prove ``d(c_j e^{s_j} / sum_k c_k e^{s_k}) = P_j (ds_j - sum_k P_k ds_k)`` for a row of
    length ``m`` at tensor level, ``c`` a free table (every mask). Raises :class:`SoftmaxError`
    when it is not proved exactly. ``m`` may be a symbolic size: the lemma then holds for
    every row length."""
    (mkey,) = _shape_key((m,))
    if mkey in _LEMMAS:
        return
    (j,) = T.free_vars((m,), "_lj")
    s, c, ds = "_lemma_s", "_lemma_c", "_lemma_ds"

    def e(k: Any) -> Any:
        return T.leaf_read(c, (k,), (m,)) * se.exp(T.leaf_read(s, (k,), (m,)))

    den = T.ssum(e, 0, m)

    def P(k: Any) -> Any:
        return e(k) / den

    lhs = T.jvp_term(P(j), {s: ds}, lambda v: v)
    rhs = P(j) * (T.leaf_read(ds, (j,), (m,)) - T.ssum(lambda k: P(k) * T.leaf_read(
        ds, (k,), (m,)), 0, m))  # fmt: skip
    d = decide_tensor(lhs, rhs, [j], counterexamples=False)
    if not (d.equal is True and d.method == "exact"):
        raise SoftmaxError(f"softmax derivative identity at row length {m}: {d.how}")
    _LEMMAS.add(mkey)


__all__ = ["DEFS", "SoftmaxDef", "SoftmaxError", "atom_name", "explicit_softmax", "softmax"]
