"""Contractions: ``dot_general`` and ``conv_general_dilated``.

Element level: every output element its sum of products, the input of a convolution dilated and
padded with exact zeros. Tensor level: one output element a sum over the contracted axes (a
convolution's input features and kernel offsets) with brackets for padding and dilation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import symengine as se

from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import Interpreter, out_kind, to_float_array
from .._primitives import Unsupported, element, tensor
from .._tensor import TArray
from .._tjaxpr import TInterpreter, out_tkind


def _contract(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``out[b, m, n] = sum_k lhs[b, m, k] * rhs[b, n, k]``."""
    B, M, K = lhs.shape
    N = rhs.shape[1]
    out = np.empty((B, M, N), dtype=object)
    for b in range(B):
        for m in range(M):
            row = lhs[b, m]
            for n in range(N):
                col = rhs[b, n]
                terms = [row[k] * col[k] for k in range(K)]
                out[b, m, n] = se.Add(*terms) if terms else se.Integer(0)
    return out


@element("dot_general")
def _dot_general_e(it: Interpreter, eqn: Any, invals: list, *, dimension_numbers: Any,
                   **_: Any) -> np.ndarray:  # fmt: skip
    lhs, rhs = (to_float_array(x) for x in invals)
    if out_kind(eqn) != "f":
        raise Unsupported("integer dot_general")
    (lc, rc), (lb, rb) = dimension_numbers
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    bshape = [lhs.shape[d] for d in lb]
    mshape = [lhs.shape[d] for d in lfree]
    nshape = [rhs.shape[d] for d in rfree]
    K = math.prod(lhs.shape[d] for d in lc)
    L = np.transpose(lhs, [*lb, *lfree, *lc]).reshape(math.prod(bshape), math.prod(mshape), K)
    R = np.transpose(rhs, [*rb, *rfree, *rc]).reshape(math.prod(bshape), math.prod(nshape), K)
    return _contract(L, R).reshape(bshape + mshape + nshape)


@tensor("dot_general")
def _dot_general_t(it: TInterpreter, eqn: Any, invals: list, *, dimension_numbers: Any,
                   **_: Any) -> TArray:  # fmt: skip
    lhs, rhs = invals
    if out_tkind(eqn) != "f":
        raise Unsupported("integer dot_general")
    (lc, rc), (lb, rb) = dimension_numbers
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    out_shape = tuple(eqn.outvars[0].aval.shape)
    nb = len(lb)

    def fn(o: tuple) -> Any:
        bidx, lidx, ridx = o[:nb], o[nb : nb + len(lfree)], o[nb + len(lfree) :]

        def body(k: int, ks: list[Any]) -> Any:
            if k < len(lc):
                return T.ssum(lambda v: body(k + 1, [*ks, v]), 0, lhs.shape[lc[k]])
            li: list[Any] = [None] * lhs.ndim
            ri: list[Any] = [None] * rhs.ndim
            for d, v in zip(lb, bidx, strict=True):
                li[d] = v
            for d, v in zip(rb, bidx, strict=True):
                ri[d] = v
            for d, v in zip(lfree, lidx, strict=True):
                li[d] = v
            for d, v in zip(rfree, ridx, strict=True):
                ri[d] = v
            for d, v in zip(lc, ks, strict=True):
                li[d] = v
            for d, v in zip(rc, ks, strict=True):
                ri[d] = v
            return lhs.at(tuple(li)) * rhs.at(tuple(ri))

        return body(0, [])

    return TArray(out_shape, fn, "f")


@element("conv_general_dilated")
def _conv_e(it: Interpreter, eqn: Any, invals: list, *, window_strides: Any, padding: Any,
            lhs_dilation: Any, rhs_dilation: Any, dimension_numbers: Any, feature_group_count: int,
            batch_group_count: int, **_: Any) -> np.ndarray:  # fmt: skip
    lhs, rhs = (to_float_array(x) for x in invals)
    lspec, rspec, ospec = dimension_numbers
    x = np.transpose(lhs, lspec)  # (N, C, spatial...)
    w = np.transpose(rhs, rspec)  # (O, I, spatial...)
    nsp = x.ndim - 2
    lhs_dilation = lhs_dilation or (1,) * nsp
    rhs_dilation = rhs_dilation or (1,) * nsp
    # dilate and pad the input with exact zeros
    zero = se.Integer(0)
    for d in range(nsp):
        ld = lhs_dilation[d]
        if ld > 1:
            n = x.shape[2 + d]
            shape = list(x.shape)
            shape[2 + d] = (n - 1) * ld + 1 if n else 0
            y = np.full(shape, zero, dtype=object)
            sl = [slice(None)] * x.ndim
            sl[2 + d] = slice(0, None, ld)
            y[tuple(sl)] = x
            x = y
    for d, (lo, hi) in enumerate(padding):
        n = x.shape[2 + d]
        sl = [slice(None)] * x.ndim
        sl[2 + d] = slice(max(0, -lo), n - max(0, -hi))
        x = x[tuple(sl)]
        shape = list(x.shape)
        shape[2 + d] += max(0, lo) + max(0, hi)
        y = np.full(shape, zero, dtype=object)
        sl[2 + d] = slice(max(0, lo), max(0, lo) + x.shape[2 + d])
        y[tuple(sl)] = x
        x = y
    N, _C = x.shape[:2]
    O, Ig = w.shape[:2]
    G = feature_group_count
    Og = O // G
    # batch groups (JAX's weight gradient of a grouped convolution): output feature o reads
    # the input batch block o // (O / batch_group_count), of N / batch_group_count samples
    Nb = N // batch_group_count
    Ob = O // batch_group_count
    ksz = w.shape[2:]
    eff = [(k - 1) * rd + 1 for k, rd in zip(ksz, rhs_dilation, strict=True)]
    osp = [(x.shape[2 + d] - eff[d]) // window_strides[d] + 1 for d in range(nsp)]
    # taps[p, t]: where in one group's input block (Ig, *spatial), flattened, output position p
    # reads its t-th term (input feature c, kernel offset kix, in that order)
    block = (Ig, *x.shape[2:])
    pos = np.indices(osp).reshape(nsp, -1)  # (nsp, P)
    kix = np.indices(ksz).reshape(nsp, -1)  # (nsp, K)
    src = [pos[d][:, None] * window_strides[d] + kix[d][None, :] * rhs_dilation[d]
           for d in range(nsp)]  # fmt: skip
    P, K = pos.shape[1], kix.shape[1]
    chan = np.broadcast_to(np.arange(Ig)[:, None], (Ig, K)).reshape(-1)
    taps = np.ravel_multi_index(
        (np.broadcast_to(chan, (P, Ig * K)),
         *[np.broadcast_to(np.tile(sd, (1, Ig)), (P, Ig * K)) for sd in src]), block,
    ) if P and Ig * K else np.zeros((P, Ig * K), dtype=np.intp)  # fmt: skip
    out = np.empty([Nb, O, P], dtype=object)
    for n in range(Nb):
        for o in range(O):
            g = o // Og
            nb = (o // Ob) * Nb + n
            products = x[nb, g * Ig : (g + 1) * Ig].reshape(-1)[taps] * w[o].reshape(-1)
            for p in range(P):
                out[n, o, p] = se.Add(*products[p]) if Ig * K else zero
    return np.transpose(out.reshape(Nb, O, *osp), np.argsort(ospec))


@tensor("conv_general_dilated")
def _conv_t(it: TInterpreter, eqn: Any, invals: list, *, window_strides: Any, padding: Any,
            lhs_dilation: Any, rhs_dilation: Any, dimension_numbers: Any, feature_group_count: int,
            batch_group_count: int, **_: Any) -> TArray:  # fmt: skip
    lhs, rhs = invals
    lspec, rspec, ospec = dimension_numbers
    x = TT.transpose(lhs, tuple(lspec))  # (N, C, spatial...)
    w = TT.transpose(rhs, tuple(rspec))  # (O, I, spatial...)
    nsp = x.ndim - 2
    ld = tuple(lhs_dilation or (1,) * nsp)
    rd = tuple(rhs_dilation or (1,) * nsp)
    O, Ig = w.shape[:2]
    Og = O // feature_group_count
    # batch groups (JAX's weight gradient of a grouped convolution): output feature f reads
    # the input batch block f // (O / batch_group_count), of N / batch_group_count samples
    Nb = x.shape[0] // batch_group_count
    Ob = O // batch_group_count
    ksz = w.shape[2:]
    out_phys = tuple(eqn.outvars[0].aval.shape)
    logical = tuple(out_phys[d] for d in ospec)

    def fn(o: tuple) -> Any:
        n, f, *pos = o
        g = T.floor_div(f, Og) if feature_group_count > 1 else T.ZERO
        if batch_group_count > 1:
            n = se.expand(T.floor_div(f, Ob) * Nb + n)

        def body(k: int, ks: list[Any]) -> Any:
            if k == 0:
                return T.ssum(lambda c: body(1, [c]), 0, Ig)
            if k <= nsp:
                return T.ssum(lambda v: body(k + 1, [*ks, v]), 0, ksz[k - 1])
            c, *kk = ks
            ok = T.ONE
            src = []
            for d in range(nsp):
                p = se.expand(pos[d] * window_strides[d] + kk[d] * rd[d] - padding[d][0])
                if ld[d] == 1:
                    ok = ok * T.range_brackets(p, 0, x.shape[2 + d])
                    src.append(p)
                else:
                    ok = ok * T.eq(T.mod(p, ld[d]))
                    q = T.floor_div(p, ld[d])
                    ok = ok * T.range_brackets(q, 0, x.shape[2 + d])
                    src.append(q)
            if ok == 0:
                return T.ZERO
            return ok * x.at((n, se.expand(g * Ig + c), *src)) * w.at((f, c, *kk))

        return body(0, [])

    out = TArray(logical, fn, "f")
    return TT.transpose(out, tuple(int(i) for i in np.argsort(ospec)))
