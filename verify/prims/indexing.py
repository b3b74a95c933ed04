"""Indexing: ``slice``, ``dynamic_slice``, ``dynamic_update_slice``, ``gather`` and the
``scatter`` family.

Element level: concrete start indices (a symbolic one is :class:`verify._primitives.Unsupported`),
clamped as XLA clamps them; gathers and scatters position by position. Tensor level: reads and
accumulations at index terms, with brackets for their bounds (a runtime index input stays a
symbol over every natural).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import exact

from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import Interpreter, _concrete, _int_value, _same_kind, out_kind, to_float_array
from .._primitives import Unsupported, element, tensor
from .._tensor import TArray
from .._tjaxpr import TInterpreter, concrete, out_tkind


def _mode_name(mode: Any) -> str:
    return str(getattr(mode, "name", mode)).upper()


@element("slice")
def _slice_e(it: Interpreter, eqn: Any, invals: list, *, start_indices: Any, limit_indices: Any,
             strides: Any) -> np.ndarray:  # fmt: skip
    strides = strides or (1,) * len(start_indices)
    sl = tuple(
        slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides, strict=True)
    )
    return invals[0][sl].copy()


@tensor("slice")
def _slice_t(it: TInterpreter, eqn: Any, invals: list, *, start_indices: Any, limit_indices: Any,
             strides: Any) -> TArray:  # fmt: skip
    strides = strides or (1,) * len(start_indices)
    key = tuple(slice(s, e, st) for s, e, st in zip(start_indices, limit_indices, strides,
                                                     strict=True))  # fmt: skip
    return TT.getitem(invals[0], key)


def _starts(invals: Sequence[np.ndarray], shape: Sequence[int], sizes: Sequence[int]) -> list[int]:
    out = []
    for s, n, k in zip(invals, shape, sizes, strict=True):
        v = _int_value(s[()]) if s.dtype == object else int(s)
        out.append(int(np.clip(v, 0, n - k)))
    return out


def _clamped_start(s: Any, n: int, k: int) -> Any:
    return T.simplify_index(se.Min(se.Max(s, 0), n - k))


@element("dynamic_slice")
def _dynamic_slice_e(it: Interpreter, eqn: Any, invals: list, *, slice_sizes: Any) -> np.ndarray:
    a, *idx = invals
    starts = _starts(idx, a.shape, slice_sizes)
    sl = tuple(slice(s, s + k) for s, k in zip(starts, slice_sizes, strict=True))
    return a[sl].copy()


@tensor("dynamic_slice")
def _dynamic_slice_t(it: TInterpreter, eqn: Any, invals: list, *, slice_sizes: Any) -> TArray:
    a, *idx = invals
    starts = [_clamped_start(s.at(()), n, k) for s, n, k in zip(idx, a.shape, slice_sizes,
                                                                strict=True)]  # fmt: skip
    return TArray(tuple(slice_sizes),
                  lambda o: a.at(tuple(se.expand(s + i) for s, i in zip(starts, o, strict=True))),
                  a.kind)  # fmt: skip


@element("dynamic_update_slice")
def _dynamic_update_slice_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    a, upd, *idx = invals
    a, upd = _same_kind([a, upd], out_kind(eqn))
    starts = _starts(idx, a.shape, upd.shape)
    out = a.copy()
    sl = tuple(slice(s, s + k) for s, k in zip(starts, upd.shape, strict=True))
    out[sl] = upd
    return out


@tensor("dynamic_update_slice")
def _dynamic_update_slice_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    a, upd, *idx = invals
    starts = [_clamped_start(s.at(()), n, k) for s, n, k in zip(idx, a.shape, upd.shape,
                                                                strict=True)]  # fmt: skip

    def fn(o: tuple) -> Any:
        inside = T.ONE
        src = []
        for i, s, k in zip(o, starts, upd.shape, strict=True):
            inside = inside * T.range_brackets(se.expand(i - s), 0, k)
            src.append(se.expand(i - s))
        return inside * upd.at(tuple(src)) + (1 - inside) * a.at(o)

    return TArray(a.shape, fn, a.kind)


@element("gather")
def _gather_e(it: Interpreter, eqn: Any, invals: list, *, dimension_numbers: Any, slice_sizes: Any,
              mode: Any, fill_value: Any = None, **_: Any) -> np.ndarray:  # fmt: skip
    operand, indices = invals
    dn = dimension_numbers
    if getattr(dn, "operand_batching_dims", ()):
        raise Unsupported("gather with batching dims")
    if not _concrete(indices):
        raise Unsupported("gather at symbolic indices")
    k = out_kind(eqn)
    if k == "f":
        operand = to_float_array(operand)
    fill_mode = "FILL" in _mode_name(mode)
    if fill_mode:
        if k == "f":
            if fill_value is None:
                raise Unsupported("gather filling with NaN")
            fill: Any = exact(float(fill_value))
        else:
            fill = 0 if fill_value is None else fill_value
    out_shape = tuple(eqn.outvars[0].aval.shape)
    offset_dims = tuple(dn.offset_dims)
    window = [d for d in range(operand.ndim) if d not in dn.collapsed_slice_dims]
    batch_pos = [i for i in range(len(out_shape)) if i not in offset_dims]
    out = np.empty(out_shape, dtype=operand.dtype)
    for oix in np.ndindex(out_shape):
        G = tuple(oix[i] for i in batch_pos)
        start = indices[G]
        S = [0] * operand.ndim
        oob = False
        for kk, d in enumerate(dn.start_index_map):
            s = int(start[kk])
            hi = operand.shape[d] - slice_sizes[d]
            if fill_mode and (s < 0 or s > hi):
                oob = True
            S[d] = min(max(s, 0), hi)
        if oob:
            out[oix] = fill
            continue
        for kk, d in enumerate(window):
            S[d] += oix[offset_dims[kk]]
        out[oix] = operand[tuple(S)]
    return out


@tensor("gather")
def _gather_t(it: TInterpreter, eqn: Any, invals: list, *, dimension_numbers: Any,
              slice_sizes: Any, mode: Any, fill_value: Any = None, **_: Any) -> TArray:  # fmt: skip
    operand, indices = invals
    dn = dimension_numbers
    # batching dims (``take_along_axis``): operand axis ``operand_batching_dims[k]`` is read at
    # the position of the indices' batch axis ``start_indices_batching_dims[k]``
    op_batch = tuple(getattr(dn, "operand_batching_dims", ()) or ())
    ix_batch = tuple(getattr(dn, "start_indices_batching_dims", ()) or ())
    out_shape = tuple(eqn.outvars[0].aval.shape)
    offset_dims = tuple(dn.offset_dims)
    window = [d for d in range(operand.ndim) if d not in dn.collapsed_slice_dims
              and d not in op_batch]  # fmt: skip
    batch_pos = [i for i in range(len(out_shape)) if i not in offset_dims]
    fill_mode = "FILL" in _mode_name(mode)
    fill: Any = None
    if fill_mode:
        nan_fill = fill_value is None if out_tkind(eqn) == "f" else False
        if fill_value is not None and np.isnan(float(fill_value)):
            nan_fill = True
        # an out-of-bounds start would read NaN: refused where it can happen (below)
        fill = None if nan_fill else T.exact_scalar(0 if fill_value is None else fill_value)
    clip = "CLIP" in _mode_name(mode)
    ci = concrete(indices) if indices.kind in "ic" else None
    in_bounds = False  # every start known and in bounds: no fill, no clamp
    if ci is not None and ci.size:
        his = np.array([operand.shape[d] - slice_sizes[d] for d in dn.start_index_map])
        starts = ci.reshape(-1, ci.shape[-1]) if ci.ndim else ci.reshape(1, 1)
        in_bounds = bool(np.all(starts >= 0) and np.all(starts <= his))
        fill_mode = fill_mode and not in_bounds

    def fn(o: tuple) -> Any:
        G = tuple(o[i] for i in batch_pos)
        S: list[Any] = [T.ZERO] * operand.ndim
        ok = T.ONE
        for kk, d in enumerate(dn.start_index_map):
            s = indices.at((*G, se.Integer(kk)))
            hi = operand.shape[d] - slice_sizes[d]
            if in_bounds:
                S[d] = s
            elif fill_mode:
                ok = ok * T.ge(s) * T.ge(hi - s)
                S[d] = s
            elif clip:
                S[d] = _clamped_start(s, operand.shape[d], slice_sizes[d])
            else:  # promise_in_bounds: XLA clamps
                S[d] = _clamped_start(s, operand.shape[d], slice_sizes[d])
        for kk, d in enumerate(window):
            S[d] = se.expand(S[d] + o[offset_dims[kk]])
        for d, g in zip(op_batch, ix_batch, strict=True):
            S[d] = G[g]
        val = operand.at(tuple(S))
        if not fill_mode or ok == 1:
            return val
        if fill is None:
            raise T.TermError("gather that may read out of bounds, filling with NaN")
        return ok * val + (1 - ok) * fill

    return TArray(out_shape, fn, operand.kind)


def _scatter_e(combine: Callable[[Any, Any], Any] | None) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, *, dimension_numbers: Any, mode: Any,
             **_: Any) -> np.ndarray:  # fmt: skip
        operand, indices, updates = invals
        dn = dimension_numbers
        if getattr(dn, "operand_batching_dims", ()):
            raise Unsupported("scatter with batching dims")
        if not _concrete(indices):
            raise Unsupported("scatter at symbolic indices")
        k = out_kind(eqn)
        if k == "f":
            operand, updates = to_float_array(operand), to_float_array(updates)
        clip = "CLIP" in _mode_name(mode)
        out = operand.copy()
        uwd = tuple(dn.update_window_dims)
        scatter_pos = [i for i in range(updates.ndim) if i not in uwd]
        window = [d for d in range(operand.ndim) if d not in dn.inserted_window_dims]
        wsize = [1] * operand.ndim
        for kk, d in enumerate(window):
            wsize[d] = updates.shape[uwd[kk]]
        for uix in np.ndindex(updates.shape):
            G = tuple(uix[i] for i in scatter_pos)
            start = indices[G]
            S = [0] * operand.ndim
            skip = False
            for kk, d in enumerate(dn.scatter_dims_to_operand_dims):
                s = int(start[kk])
                hi = operand.shape[d] - wsize[d]
                if clip:
                    s = min(max(s, 0), hi)
                elif s < 0 or s > hi:
                    skip = True  # XLA drops out-of-bounds update windows
                S[d] = s
            if skip:
                continue
            for kk, d in enumerate(window):
                S[d] += uix[uwd[kk]]
            t = tuple(S)
            out[t] = updates[uix] if combine is None else combine(out[t], updates[uix])
        return out

    return impl


element("scatter-add", "scatter_add")(_scatter_e(lambda a, b: a + b))
element("scatter-mul")(_scatter_e(lambda a, b: a * b))
element("scatter")(_scatter_e(None))


@tensor("scatter-add", "scatter_add")
def _scatter_add_t(it: TInterpreter, eqn: Any, invals: list, *, dimension_numbers: Any,
                   mode: Any, **_: Any) -> TArray:  # fmt: skip
    operand, indices, updates = invals
    dn = dimension_numbers
    # batching dims (the transpose of ``take_along_axis``'s gather): operand axis
    # ``operand_batching_dims[k]`` receives only at the indices' batch position
    # ``scatter_indices_batching_dims[k]``
    op_batch = tuple(getattr(dn, "operand_batching_dims", ()) or ())
    ix_batch = tuple(getattr(dn, "scatter_indices_batching_dims", ()) or ())
    clip = "CLIP" in _mode_name(mode)
    uwd = tuple(dn.update_window_dims)
    scatter_pos = [i for i in range(updates.ndim) if i not in uwd]
    window = [d for d in range(operand.ndim) if d not in dn.inserted_window_dims
              and d not in op_batch]  # fmt: skip
    wsize = [1] * operand.ndim
    for kk, d in enumerate(window):
        wsize[d] = updates.shape[uwd[kk]]

    def fn(p: tuple) -> Any:
        def body(k: int, G: list[Any]) -> Any:
            if k < len(scatter_pos):
                return T.ssum(lambda v: body(k + 1, [*G, v]), 0, updates.shape[scatter_pos[k]])
            starts: list[Any] = [T.ZERO] * operand.ndim
            ok = T.ONE
            for kk, d in enumerate(dn.scatter_dims_to_operand_dims):
                s = indices.at((*G, se.Integer(kk)))
                hi = operand.shape[d] - wsize[d]
                if clip:
                    s = _clamped_start(s, operand.shape[d], wsize[d])
                else:
                    ok = ok * T.ge(s) * T.ge(hi - s)
                starts[d] = s
            uidx: list[Any] = [None] * updates.ndim
            for i, g in zip(scatter_pos, G, strict=True):
                uidx[i] = g
            for kk, d in enumerate(window):
                w = se.expand(p[d] - starts[d])
                ok = ok * T.range_brackets(w, 0, wsize[d])
                uidx[uwd[kk]] = w
            for d in dn.inserted_window_dims:
                ok = ok * T.eq(p[d] - starts[d])
            for d, g in zip(op_batch, ix_batch, strict=True):
                ok = ok * T.eq(p[d] - G[g])
            return ok * updates.at(tuple(uidx))

        return operand.at(p) + body(0, [])

    return TArray(operand.shape, fn, operand.kind)
