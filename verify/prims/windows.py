"""Windows: ``reduce_window_sum``, ``reduce_window_max``, ``reduce_window_min``.

Element level: the input padded with the reduction's identity (exact zeros, ``-oo`` / ``oo``) and
every window reduced (padding values dropped from a maximum). Tensor level: one output element is
a sum or maximum over the (short) window, each offset's read under brackets for padding and base
dilation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import symengine as se

from .. import terms as T
from .._jaxpr import Interpreter, to_float_array
from .._primitives import Unsupported, element, tensor
from .._tensor import TArray
from .._tjaxpr import TInterpreter


def _reduce_window_e(kind: str) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, *, window_dimensions: Any,
             window_strides: Any, padding: Any, base_dilation: Any, window_dilation: Any,
             **_: Any) -> np.ndarray:  # fmt: skip
        a = to_float_array(invals[0])
        if any(b != 1 for b in base_dilation):
            raise Unsupported("reduce_window with base dilation")
        pad_val = {"sum": se.Integer(0), "max": -se.oo, "min": se.oo}[kind]
        shape = [n + lo + hi for n, (lo, hi) in zip(a.shape, padding, strict=True)]
        x = np.full(shape, pad_val, dtype=object)
        x[tuple(slice(lo, lo + n) for n, (lo, _) in zip(a.shape, padding, strict=True))] = a
        eff = [(k - 1) * d + 1 for k, d in zip(window_dimensions, window_dilation, strict=True)]
        osp = [(s - e) // st + 1 for s, e, st in zip(shape, eff, window_strides, strict=True)]
        out = np.empty(osp, dtype=object)
        for pos in np.ndindex(*osp):
            vals = [
                x[tuple(p * st + k * wd for p, st, k, wd in
                        zip(pos, window_strides, kix, window_dilation, strict=True))]
                for kix in np.ndindex(*window_dimensions)
            ]  # fmt: skip
            if kind == "sum":
                out[pos] = se.Add(*vals)
            else:
                vals = [v for v in vals if v != pad_val] or [pad_val]
                fn = se.Max if kind == "max" else se.Min
                out[pos] = fn(*vals) if len(vals) > 1 else vals[0]
        return out

    return impl


def _reduce_window_t(kind: str) -> Callable[..., Any]:
    def impl(it: TInterpreter, eqn: Any, invals: list, *, window_dimensions: Any,
             window_strides: Any, padding: Any, base_dilation: Any, window_dilation: Any,
             **_: Any) -> TArray:  # fmt: skip
        a = invals[0]
        out_shape = tuple(eqn.outvars[0].aval.shape)
        dims = tuple(window_dimensions)
        init = {"sum": T.ZERO, "max": -se.oo, "min": se.oo}[kind]

        def fn(o: tuple) -> Any:
            vals = []
            for kix in np.ndindex(*dims):
                ok = T.ONE
                src = []
                for d in range(a.ndim):
                    p = se.expand(o[d] * window_strides[d] + int(kix[d]) * window_dilation[d]
                                  - padding[d][0])  # fmt: skip
                    bd = base_dilation[d]
                    if bd == 1:
                        ok = ok * T.range_brackets(p, 0, a.shape[d])
                        src.append(p)
                    else:
                        ok = ok * T.eq(T.mod(p, bd))
                        q = T.floor_div(p, bd)
                        ok = ok * T.range_brackets(q, 0, a.shape[d])
                        src.append(q)
                if ok == 0:
                    continue
                v = a.at(tuple(src)) if ok == 0 or ok == 1 else None
                if kind == "sum":
                    vals.append(ok * a.at(tuple(src)))
                elif v is not None:
                    vals.append(v)
                else:
                    vals.append(se.Piecewise((a.at(tuple(src)), se.Eq(ok, 1)), (init, True)))
            if kind == "sum":
                return se.Add(*vals) if vals else T.ZERO
            if not vals:
                return init
            fn_ = se.Max if kind == "max" else se.Min
            return fn_(*vals) if len(vals) > 1 else vals[0]

        return TArray(out_shape, fn, "f")

    return impl


for _kind in ("sum", "max", "min"):
    element(f"reduce_window_{_kind}")(_reduce_window_e(_kind))
    tensor(f"reduce_window_{_kind}")(_reduce_window_t(_kind))
