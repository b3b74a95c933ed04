"""Sums over one range compared by their summands (a step of :mod:`verify._tdecide`).

The normal form splits a sum over its terms (``sum_k (a + b)`` is ``sum_k a + sum_k b``), so a
difference that is 0 only once the summands are added up (an online softmax's rescaled running
sums against the recomputed probabilities: terms over one query row whose rational functions of
the row's normalisers cancel only together) is a combination of many sums over one variable,
each an independent atom to the scalar procedure. Here the terms ``c * sum_k body`` of both
sides (``c`` free of ``k``) are grouped by the range of ``k`` (its registered range: a sum is
over every ``k`` in it, the body's brackets zero what it does not cover), and each group is
decided as one summand, ``sum_i c_i body_i``, at a fresh free index ``q`` over that range:

    sum_i c_i sum_{k in R} b_i(k)  =  sum_{q in R} sum_i c_i b_i(q)

so a summand proved 0 (equal on both sides) at every ``q`` of ``R`` proves the group. Sums whose
variable ranges differ are not merged; the terms that are no such sum (the rest) are decided
as they are. One symbolic element per group: the range is never unrolled here, so the cost does
not grow with it (a block of 128 keys is one summand, as a block of 2 is).
"""

from __future__ import annotations

from typing import Any

import symengine as se

from . import terms as T
from .terms.core import _add_terms, _factors

#: Nested merges (a sum over rows of sums over keys) followed at most this deep.
MAX_DEPTH = 3


def _one_sum(t: Any) -> tuple[Any, Any, Any] | None:
    """``t = c * sum_k body`` with ``c`` free of ``k`` and no sum in ``body`` binding ``k``
    again: ``(c, k, body)``; else ``None``."""
    factors = _factors(t)
    sums = [f for f in factors if T.is_sum(f) and len(f.args) == 2]
    if len(sums) != 1 or factors.count(sums[0]) != 1:
        return None
    f = sums[0]
    body, k = f.args
    if k not in T.RANGES or k not in T.BOUND:
        return None
    c = se.Mul(*[g for g in factors if g is not f and g != f])
    if k in c.free_symbols:
        return None
    if any(T.is_sum(a) and k in a.args[1:] for a in T.fn_atoms(body)):
        return None  # k bound again inside: renaming it would capture
    return c, k, body


def _range_key(k: Any) -> tuple[Any, ...] | None:
    lo, hi = T.RANGES[k]
    upper = T.UPPER.get(k)
    if hi is None and upper is None:
        return None
    return lo, hi, upper


def summands(g: Any, x: Any) -> tuple[list[tuple[Any, Any, Any]], Any, Any] | None:
    """The groups of ``g == x`` as ``(summand of g, summand of x, q)`` at a fresh free index
    ``q`` each, and the rest ``(g_rest, x_rest)`` (terms that are no single sum); ``None`` when
    no group has two terms or more (nothing merged: no progress)."""
    groups: dict[tuple[Any, ...], list[list[Any]]] = {}
    rest: list[list[Any]] = [[], []]
    for side, e in enumerate((g, x)):
        for t in _add_terms(se.expand(e)):
            one = _one_sum(t)
            key = None if one is None else _range_key(one[1])
            if one is None or key is None:
                rest[side].append(t)
                continue
            groups.setdefault(key, [[], []])[side].append(one)
    if not any(len(a) + len(b) > 1 for a, b in groups.values()):
        return None
    out = []
    for (lo, hi, upper), sides in groups.items():
        q = T.fresh("_q", lo, upper if upper is not None else hi, bound=False)
        parts = [se.Add(*[c * body.xreplace({k: q}) for c, k, body in terms])
                 for terms in sides]  # fmt: skip
        out.append((parts[0], parts[1], q))
    return out, se.Add(*rest[0]), se.Add(*rest[1])


__all__ = ["MAX_DEPTH", "summands"]
