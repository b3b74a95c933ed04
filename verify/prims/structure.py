"""Structure: shapes and layouts (``broadcast_in_dim``, ``reshape``, ``transpose``,
``squeeze``, ``expand_dims``, ``rev``, ``concatenate``, ``stack``, ``unstack``, ``split``,
``pad``).

Element level: NumPy's own operations on the object arrays (values of different kinds brought
to one kind first, :func:`_same_kind`; padding with exact zeros, interior padding first).
Tensor level: index maps composed (:mod:`verify._tensor`), padding and concatenation as
brackets on the index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import symengine as se

from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import Interpreter, _same_kind, out_kind
from .._primitives import element, tensor
from .._tensor import TArray
from .._tjaxpr import TInterpreter


@element("broadcast_in_dim")
def _broadcast_in_dim_e(it: Interpreter, eqn: Any, invals: list, *, shape: Any,
                        broadcast_dimensions: Any, **_: Any) -> np.ndarray:  # fmt: skip
    a = invals[0]
    new = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        new[d] = a.shape[i]
    return np.broadcast_to(a.reshape(new), tuple(shape)).copy()


@tensor("broadcast_in_dim")
def _broadcast_in_dim_t(it: TInterpreter, eqn: Any, invals: list, *, shape: Any,
                        broadcast_dimensions: Any, **_: Any) -> TArray:  # fmt: skip
    a = invals[0]
    shape = tuple(shape)
    dims = tuple(broadcast_dimensions)

    def fn(idx: tuple) -> Any:
        src = tuple(T.ZERO if a.shape[i] == 1 and shape[d] != 1 else idx[d]
                    for i, d in enumerate(dims))  # fmt: skip
        return a.at(src)

    return TArray(shape, fn, a.kind)


@element("reshape")
def _reshape_e(it: Interpreter, eqn: Any, invals: list, *, new_sizes: Any, dimensions: Any,
               **_: Any) -> np.ndarray:  # fmt: skip
    a = invals[0]
    if dimensions is not None:
        a = np.transpose(a, dimensions)
    return a.reshape(tuple(new_sizes))


@tensor("reshape")
def _reshape_t(it: TInterpreter, eqn: Any, invals: list, *, new_sizes: Any, dimensions: Any,
               **_: Any) -> TArray:  # fmt: skip
    a = invals[0]
    if dimensions is not None:
        a = TT.transpose(a, dimensions)
    return TT.reshape(a, tuple(new_sizes))


@element("transpose")
def _transpose_e(it: Interpreter, eqn: Any, invals: list, *, permutation: Any) -> np.ndarray:
    return np.transpose(invals[0], permutation).copy()


@tensor("transpose")
def _transpose_t(it: TInterpreter, eqn: Any, invals: list, *, permutation: Any) -> TArray:
    return TT.transpose(invals[0], tuple(permutation))


@element("squeeze")
def _squeeze_e(it: Interpreter, eqn: Any, invals: list, *, dimensions: Any) -> np.ndarray:
    return np.squeeze(invals[0], axis=tuple(dimensions))


@tensor("squeeze")
def _squeeze_t(it: TInterpreter, eqn: Any, invals: list, *, dimensions: Any) -> TArray:
    return TT.reshape(invals[0], tuple(eqn.outvars[0].aval.shape))


@element("expand_dims")
def _expand_dims_e(it: Interpreter, eqn: Any, invals: list, *, dimensions: Any) -> np.ndarray:
    a = invals[0]
    for d in sorted(dimensions):
        a = np.expand_dims(a, d)
    return a


@tensor("expand_dims")
def _expand_dims_t(it: TInterpreter, eqn: Any, invals: list, *, dimensions: Any) -> TArray:
    return TT.reshape(invals[0], tuple(eqn.outvars[0].aval.shape))


@element("rev")
def _rev_e(it: Interpreter, eqn: Any, invals: list, *, dimensions: Any) -> np.ndarray:
    return np.flip(invals[0], axis=tuple(dimensions)).copy()


@tensor("rev")
def _rev_t(it: TInterpreter, eqn: Any, invals: list, *, dimensions: Any) -> TArray:
    a = invals[0]
    dims = set(dimensions)

    def fn(idx: tuple) -> Any:
        return a.at(tuple(se.expand(a.shape[d] - 1 - i) if d in dims else i
                          for d, i in enumerate(idx)))  # fmt: skip

    return TArray(a.shape, fn, a.kind)


@element("concatenate")
def _concatenate_e(it: Interpreter, eqn: Any, invals: list, *, dimension: int) -> np.ndarray:
    return np.concatenate(_same_kind(invals, out_kind(eqn)), axis=dimension)


@tensor("concatenate")
def _concatenate_t(it: TInterpreter, eqn: Any, invals: list, *, dimension: int) -> TArray:
    return TT.concatenate(invals, dimension)


@element("stack")
def _stack_e(it: Interpreter, eqn: Any, invals: list, *, axis: int, **_: Any) -> np.ndarray:
    return np.stack(_same_kind(invals, out_kind(eqn)), axis=axis)


@tensor("stack")
def _stack_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, **_: Any) -> TArray:
    return TT.stack(invals, axis)


@element("unstack")
def _unstack_e(it: Interpreter, eqn: Any, invals: list, *, axis: int, **_: Any) -> list:
    a = invals[0]
    return [np.take(a, k, axis=axis) for k in range(a.shape[axis])]


@tensor("unstack")
def _unstack_t(it: TInterpreter, eqn: Any, invals: list, *, axis: int, **_: Any) -> list:
    a = invals[0]
    out = []
    for k in range(a.shape[axis]):
        key: list[Any] = [slice(None)] * a.ndim
        key[axis] = k
        out.append(TT.getitem(a, tuple(key)))
    return out


@element("split")
def _split_e(it: Interpreter, eqn: Any, invals: list, *, sizes: Any, axis: int) -> list:
    cuts = np.cumsum(sizes)[:-1]
    return [p.copy() for p in np.split(invals[0], cuts, axis=axis)]


@tensor("split")
def _split_t(it: TInterpreter, eqn: Any, invals: list, *, sizes: Any, axis: int) -> list:
    a = invals[0]
    out = []
    start = 0
    for n in sizes:
        key = [slice(None)] * a.ndim
        key[axis] = slice(start, start + n)
        out.append(TT.getitem(a, tuple(key)))
        start += n
    return out


@element("pad")
def _pad_e(it: Interpreter, eqn: Any, invals: list, *, padding_config: Any) -> np.ndarray:
    a, pv = _same_kind(invals, out_kind(eqn))
    fill = pv[()]
    # interior padding first, then (possibly negative) edge padding
    for d, (_, _, interior) in enumerate(padding_config):
        if interior > 0 and a.shape[d] > 1:
            n = a.shape[d]
            shape = list(a.shape)
            shape[d] = n + (n - 1) * interior
            out = np.empty(shape, dtype=a.dtype)
            out[...] = fill
            sl = [slice(None)] * a.ndim
            sl[d] = slice(0, None, interior + 1)
            out[tuple(sl)] = a
            a = out
    for d, (lo, hi, _) in enumerate(padding_config):
        n = a.shape[d]
        start, stop = max(0, -lo), n - max(0, -hi)
        sl = [slice(None)] * a.ndim
        sl[d] = slice(start, max(start, stop))
        a = a[tuple(sl)]
        shape = list(a.shape)
        shape[d] += max(0, lo) + max(0, hi)
        out = np.empty(shape, dtype=a.dtype)
        out[...] = fill
        sl[d] = slice(max(0, lo), max(0, lo) + a.shape[d])
        out[tuple(sl)] = a
        a = out
    return a


@tensor("pad")
def _pad_t(it: TInterpreter, eqn: Any, invals: list, *, padding_config: Any) -> TArray:
    a, pv = invals
    fill = pv.at(())
    cfg = [tuple(int(v) for v in c) for c in padding_config]
    shape = tuple(eqn.outvars[0].aval.shape)

    def fn(idx: tuple) -> Any:
        inside = T.ONE
        src = []
        for i, n, (lo, _, interior) in zip(idx, a.shape, cfg, strict=True):
            step = interior + 1
            pos = se.expand(i - lo)
            if step == 1:
                inside = inside * T.range_brackets(pos, 0, n)
                src.append(pos)
            else:
                inside = inside * T.range_brackets(pos, 0, (n - 1) * step + 1)
                inside = inside * T.eq(T.mod(pos, step))
                src.append(T.floor_div(pos, step))
        if inside == 0:
            return fill
        if inside == 1:
            return a.at(tuple(src))
        if fill == 0:
            return inside * a.at(tuple(src))
        if fill in (se.oo, -se.oo):
            return se.Piecewise((a.at(tuple(src)), se.Eq(inside, 1)), (fill, True))
        return inside * a.at(tuple(src)) + (1 - inside) * fill

    return TArray(shape, fn, a.kind)
