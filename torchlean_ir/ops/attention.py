"""multi_head_attention: TorchLean's typed self-attention of one sequence.

``Wq, Wk, Wv (dModel, H*hd)``, ``Wo (H*hd, dModel)``, ``x (n, dModel)``; per head ``h`` the
columns ``h*hd : (h+1)*hd`` of ``x Wq`` / ``x Wk`` / ``x Wv`` are its queries, keys and values;
``P_h = softmax(Q_h K_h^T / sqrt(hd))`` row-wise, heads concatenated, then ``@ Wo``. The
optional boolean ``mask (n, n)`` (true = allowed) is static: a blocked entry gets exactly zero
weight, and a query row with no allowed key attends to nothing (its output row is zero).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._attrs import AttrSpec, ConstArray
from .._errors import ShapeError
from .._registry import Op
from .._types import Shape, TensorType

multi_head_attention = Op(
    "multi_head_attention",
    args=("Wq", "Wk", "Wv", "Wo", "x"),
    attrs={
        "heads": AttrSpec(
            "nat",
            check=lambda h: None if h >= 1 else "must be at least 1",
            doc="number of heads H",
        ),
        "mask": AttrSpec(
            "bool_array",
            default=None,
            doc="optional (n, n) booleans, true = query i may attend to key j",
        ),
    },
    family="nn",
    doc=(
        "Multi-head self-attention: per head softmax(Q K^T / sqrt(hd)) V with Q, K, V = x Wq, "
        "x Wk, x Wv split into H heads of hd columns; heads concatenated, then @ Wo. Optional "
        "static boolean mask (n, n), true = allowed; blocked entries get exactly zero weight."
    ),
)


@multi_head_attention.def_shape
def multi_head_attention_shape(
    Wq: TensorType,
    Wk: TensorType,
    Wv: TensorType,
    Wo: TensorType,
    x: TensorType,
    *,
    heads: int,
    mask: ConstArray | None = None,
) -> Shape:
    if x.rank != 2 or x.shape[0] == 0:
        raise ShapeError(f"needs x (n, dModel) with n > 0, got {x}")
    n, d_model = x.shape
    for name, W in (("Wq", Wq), ("Wk", Wk), ("Wv", Wv)):
        if W.rank != 2 or W.shape[0] != d_model or W.shape != Wq.shape:
            raise ShapeError(
                f"{name} must be (dModel, H*hd) like Wq {Wq}, dModel = {d_model}, got {W}"
            )
    inner = Wq.shape[1]
    if inner == 0 or inner % heads:
        raise ShapeError(
            f"H*hd = {inner} (columns of Wq) must be a positive multiple of {heads} heads"
        )
    if Wo.shape != (inner, d_model):
        raise ShapeError(f"Wo must be (H*hd, dModel) = [{inner},{d_model}], got {Wo}")
    if mask is not None and mask.shape != (n, n):
        raise ShapeError(f"mask must be (n, n) = ({n}, {n}) for x {x}, got {list(mask.shape)}")
    return (n, d_model)


def _split(B: Any, m: Any, heads: int) -> Any:
    """(n, H*hd) -> (H, n, hd)."""
    return B.transpose(B.reshape(m, (m.shape[0], heads, -1)), (1, 0, 2))


def _merge(B: Any, m: Any) -> Any:
    """(H, n, hd) -> (n, H*hd)."""
    return B.reshape(B.transpose(m, (1, 0, 2)), (m.shape[1], -1))


def _allowed(mask: ConstArray | None) -> np.ndarray | None:
    return None if mask is None else mask.to_numpy().astype(bool)


def _scale(Wq: Any, heads: int) -> float:
    return 1 / math.sqrt(Wq.shape[1] // heads)


def _attend(B: Any, Wq: Any, Wk: Any, Wv: Any, x: Any, heads: int, mask: Any) -> tuple:
    """Per-head Q, K, V (H, n, hd), the weights P (H, n, n) and the head outputs O (H, n, hd)."""
    Q, K, V = (_split(B, B.matmul(x, W), heads) for W in (Wq, Wk, Wv))
    scores = B.einsum("hid,hjd->hij", Q, K) * _scale(Wq, heads)
    P = B.softmax(scores, axis=-1, valid=_allowed(mask))
    return Q, K, V, P, B.einsum("hij,hjd->hid", P, V)


@multi_head_attention.def_forward
def multi_head_attention_forward(
    B: Any, Wq: Any, Wk: Any, Wv: Any, Wo: Any, x: Any, *, heads: int, mask: Any = None
) -> Any:
    *_, O = _attend(B, Wq, Wk, Wv, x, heads, mask)
    return B.matmul(_merge(B, O), Wo)


@multi_head_attention.def_jvp
def multi_head_attention_jvp(
    B: Any, args: tuple, tangents: tuple, out: Any, *, heads: int, mask: Any = None
) -> Any:
    Wq, Wk, Wv, Wo, x = args
    tWq, tWk, tWv, tWo, tx = tangents
    Q, K, V, P, O = _attend(B, Wq, Wk, Wv, x, heads, mask)
    tQ, tK, tV = (
        _split(B, B.matmul(tx, W) + B.matmul(x, tW), heads)
        for W, tW in ((Wq, tWq), (Wk, tWk), (Wv, tWv))
    )
    tS = (B.einsum("hid,hjd->hij", tQ, K) + B.einsum("hid,hjd->hij", Q, tK)) * _scale(Wq, heads)
    tP = P * (tS - B.sum(P * tS, axis=-1, keepdims=True))
    tO = B.einsum("hij,hjd->hid", tP, V) + B.einsum("hij,hjd->hid", P, tV)
    return B.matmul(_merge(B, tO), Wo) + B.matmul(_merge(B, O), tWo)


@multi_head_attention.def_vjp
def multi_head_attention_vjp(
    B: Any, args: tuple, out: Any, ct: Any, *, heads: int, mask: Any = None
) -> tuple:
    Wq, Wk, Wv, Wo, x = args
    Q, K, V, P, O = _attend(B, Wq, Wk, Wv, x, heads, mask)
    gWo = B.einsum("ia,ib->ab", _merge(B, O), ct)
    gO = _split(B, B.matmul(ct, B.transpose(Wo, (1, 0))), heads)
    gP = B.einsum("hid,hjd->hij", gO, V)
    gV = B.einsum("hij,hid->hjd", P, gO)
    gS = P * (gP - B.sum(P * gP, axis=-1, keepdims=True)) * _scale(Wq, heads)
    gQ = _merge(B, B.einsum("hij,hjd->hid", gS, K))
    gK = _merge(B, B.einsum("hij,hid->hjd", gS, Q))
    gVm = _merge(B, gV)
    gx = (
        B.matmul(gQ, B.transpose(Wq, (1, 0)))
        + B.matmul(gK, B.transpose(Wk, (1, 0)))
        + B.matmul(gVm, B.transpose(Wv, (1, 0)))
    )
    xT = B.transpose(x, (1, 0))
    return (B.matmul(xT, gQ), B.matmul(xT, gK), B.matmul(xT, gVm), gWo, gx)


__all__ = ["multi_head_attention"]
