"""Indexing: ``slice``, ``dynamic_slice``, ``dynamic_update_slice``, ``gather`` and the
``scatter`` family.

Element level: concrete start indices (a symbolic one is :class:`verify._primitives.Unsupported`),
clamped as XLA clamps them; gathers and scatters position by position. Tensor level: reads and
accumulations at index terms, with brackets for their bounds (a runtime index input stays a
symbol over every natural); an index chosen by conditions on values (``sort``'s permutation, a
``where`` on data) read case by case (:func:`_at_chosen`).
"""

from __future__ import annotations

import itertools
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
    raw = [s.at(()) for s in idx]

    def clamped(given: list[Any]) -> list[Any]:
        return [_clamped_start(s, n, k) for s, n, k in zip(given, a.shape, slice_sizes,
                                                           strict=True)]  # fmt: skip

    plain = clamped(raw) if not any(T.has_atom(s, se.Piecewise) for s in raw) else None

    def value(o: tuple, starts: list[Any]) -> Any:
        return a.at(tuple(se.expand(s + i) for s, i in zip(starts, o, strict=True)))

    def fn(o: tuple) -> Any:
        if plain is not None:
            return value(o, plain)
        return _at_chosen(raw, lambda ss: value(o, clamped(ss)))

    return TArray(tuple(slice_sizes), fn, a.kind)


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
    raw = [s.at(()) for s in idx]

    def clamped(given: list[Any]) -> list[Any]:
        return [_clamped_start(s, n, k) for s, n, k in zip(given, a.shape, upd.shape,
                                                           strict=True)]  # fmt: skip

    plain = clamped(raw) if not any(T.has_atom(s, se.Piecewise) for s in raw) else None

    def fn(o: tuple) -> Any:
        if plain is not None:
            return value(o, plain)
        return _at_chosen(raw, lambda ss: value(o, clamped(ss)))

    def value(o: tuple, starts: list[Any]) -> Any:
        inside = T.ONE
        src = []
        for i, s, k in zip(o, starts, upd.shape, strict=True):
            inside = inside * T.range_brackets(se.expand(i - s), 0, k)
            src.append(se.expand(i - s))
        return inside * upd.at(tuple(src)) + (1 - inside) * a.at(o)

    return TArray(a.shape, fn, a.kind)


#: An index chosen by conditions on values (``sort``'s permutation, ``argmax``) under brackets
#: of at most this many combinations of index values is read case by case.
CHOSEN_MAX = 64


def _at_chosen(starts: list[Any], read: Callable[[list[Any]], Any]) -> Any:
    """``read(starts)``, where one start may be an index chosen by conditions on values (it
    holds a ``Piecewise``: ``sort``'s permutation, an ``argmax``, at a symbolic position
    ``sum_m [i == m] Piecewise(...)``, perhaps wrapped as a negative index is). It is read case
    by case (:func:`_chosen_cases`), ``sum_c [x == c] sum_j read(s_cj) [branch j taken]``; a
    start holding a ``Piecewise`` in another form is refused (read as it stands, the read of
    a leaf at a ``Piecewise`` would mean nothing)."""
    chosen = [kk for kk, s in enumerate(starts) if T.has_atom(s, se.Piecewise)]
    if not chosen:
        return read(starts)
    if len(chosen) > 1:
        raise T.TermError("an index chosen by conditions on values in more than one axis")
    (kk,) = chosen
    out = []
    for guard, v, branch in _chosen_cases(starts[kk]):
        out.append(guard * read([*starts[:kk], v, *starts[kk + 1 :]]) * branch)
    return se.Add(*out)


def _chosen_cases(s: Any) -> list[tuple[Any, Any, Any]]:
    """``[(guard, v, branch)]`` with ``s = v`` wherever ``guard * branch`` is 1, exactly one of
    them 1 at any point: ``guard`` the brackets ``[x == c]`` of one combination of values of
    the index symbols in ``s``'s brackets (exact: they range over those values); in that
    case the one ``Piecewise`` of integers ``P`` left in ``s`` takes its branch ``j``
    (``branch``, :func:`_branch`; its last condition ``True``, so one branch is taken) and
    ``v`` is ``s`` with ``P`` at its value there, free of ``Piecewise``. Raises
    :class:`verify.terms.TermError` where ``s`` is not of that form."""

    def refuse(why: str) -> T.TermError:
        return T.TermError(f"an index chosen by conditions on values, {why}")

    syms = sorted({x for f in T.fn_atoms(s) if T.is_bracket(f) and not T.has_atom(f, se.Piecewise)
                   for x in f.free_symbols}, key=str)  # fmt: skip
    ranges = []
    for x in syms:
        lo, hi = T.RANGES.get(x, (0, None))
        if hi is None:
            raise refuse("under a bracket of unknown range")
        ranges.append(range(lo, hi))
    if int(np.prod([len(r) for r in ranges], dtype=np.int64)) > CHOSEN_MAX:
        raise refuse(f"over more than {CHOSEN_MAX} cases")
    out = []
    for combo in itertools.product(*ranges):
        env = {x: se.Integer(c) for x, c in zip(syms, combo, strict=True)}
        sc = T.normalize(_brackets_evaluated(s.xreplace(env) if env else s))
        guard = T.ONE
        for x, c in env.items():
            guard = guard * T.eq(x - c)
        every = T.atoms_of(sc, se.Piecewise)
        inner = set().union(*[T.atoms_of(a, se.Piecewise) for o in every for a in o.args])
        pws = every - inner  # the outermost
        if not pws:
            out.append((guard, sc, T.ONE))
            continue
        if len(pws) > 1:
            raise refuse(f"more than one choice in {sc}")
        (pw,) = pws
        values, conds = pw.args[0::2], pw.args[1::2]
        # rational values: the normal form takes a rational factor out of a Piecewise's
        # values (a choice of 2 or 1 is 2 Piecewise((1, c), (1/2, True))); the index read in
        # each branch must still be an integer expression
        if not all(isinstance(v, se.Rational) for v in values) or conds[-1] != se.true:
            raise refuse(f"not a choice among integers: {pw}")
        if any(c.free_symbols & set(syms) for c in conds):
            raise refuse("on index symbols")
        for j, v in enumerate(values):
            vj = T.normalize(_brackets_evaluated(sc.xreplace({pw: v})))
            if T.has_atom(vj, se.Piecewise):
                raise refuse(f"not read: {vj}")
            if not _integer_coefficients(vj):
                raise refuse(f"not a choice among integers: {pw} in {sc}")
            out.append((guard, vj, _branch(conds, j)))
    return out


def _integer_coefficients(e: Any) -> bool:
    """Whether every monomial of the expanded ``e`` has an integer coefficient (an index)."""
    e = se.expand(e)
    for t in e.args if isinstance(e, se.Add) else (e,):
        if isinstance(t, se.Mul):
            t = next((a for a in t.args if isinstance(a, se.Number)), T.ONE)
        if isinstance(t, se.Number) and not isinstance(t, se.Integer):
            return False
    return True


def _brackets_evaluated(e: Any) -> Any:
    """``e`` with every bracket of a number (``[-3 == 0]``, nested ones too) at its value, every
    read of a constant table at integer indices at its entry (a table of positions read at a
    position: ``[T(0) - 1 == 0]`` is a bracket of a number) and every ``Piecewise`` whose values
    are all one number at it (a comparison of a choice among ``0..n-1`` with 0:
    ``Piecewise((0, c_0), ..., (0, True))``)."""

    def node(x: Any, args: list[Any]) -> Any:
        n = T.name_of(x)
        if T.is_table(x) and all(isinstance(a, se.Integer) for a in args):
            return T.normalize(T.rebuild(x, args))
        if n in ("_GE", "_EQ") and isinstance(args[0], se.Number):
            return T.ge(args[0]) if n == "_GE" else T.eq(args[0])
        if isinstance(x, se.Piecewise) and args[-1] == se.true:  # some branch is taken
            values = set(args[0::2])
            if len(values) == 1 and isinstance(args[0], se.Number):
                return args[0]
        return T.rebuild(x, args)

    return T.rewrite(e, node)


def _branch(conds: Sequence[Any], j: int) -> Any:
    """The indicator that a ``Piecewise`` with conditions ``conds`` takes its branch ``j``
    (the first condition that holds is ``j``'s), written as symengine writes the derivative of
    that ``Piecewise`` in branch ``j``'s value: ``Piecewise((0, c_0), ..., (1, c_j), (0, True))``
    (the reference's derivative of a choice meets it term by term)."""
    pieces = [(T.ZERO, c) for c in conds[:j]]
    if conds[j] == se.true:
        return se.Piecewise(*pieces, (T.ONE, se.true)) if pieces else T.ONE
    return se.Piecewise(*pieces, (T.ONE, conds[j]), (T.ZERO, se.true))


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
        starts = [indices.at((*G, se.Integer(kk))) for kk in range(len(dn.start_index_map))]
        return _at_chosen(starts, lambda ss: value(o, G, ss))

    def value(o: tuple, G: tuple, starts: list[Any]) -> Any:
        S: list[Any] = [T.ZERO] * operand.ndim
        ok = T.ONE
        for kk, d in enumerate(dn.start_index_map):
            s = starts[kk]
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
            given = [indices.at((*G, se.Integer(kk)))
                     for kk in range(len(dn.scatter_dims_to_operand_dims))]  # fmt: skip
            return _at_chosen(given, lambda ss: update(G, ss))

        def update(G: list[Any], given: list[Any]) -> Any:
            starts: list[Any] = [T.ZERO] * operand.ndim
            ok = T.ONE
            for kk, d in enumerate(dn.scatter_dims_to_operand_dims):
                s = given[kk]
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
