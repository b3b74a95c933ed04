"""Concrete tables materialised: ``c * T(f(q))`` (a table read at index expressions of free
element indices, ``c`` a power of two) written as the plain read of a new table over the
indices' ranges, so that the same draws read through a reshape on one side and directly on
the other are the same table; done again inside a case whose brackets narrowed the ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from . import terms as T

#: A table read is materialised over at most this many index values (:func:`_tables`): 2^22
#: covers the 512x4096 draws of the large sweep (about 2.3 GB peak for the whole check there).
TABLE_CELLS_MAX = 1 << 22


def _tables(e: Any) -> Any:
    """``e`` with every ``c * T(f(q))`` (``T`` a concrete table read at index expressions of
    free element indices only, ``c`` a power of two: the product is exact in float64) written
    as the read ``U(q...)`` of the table ``U[q] = c T[f(q)]`` over the indices' ranges, so that
    the same draws read through a reshape on one side and directly on the other are the same
    table (tables are named by content)."""
    return T.rewrite(e, first=_materialised)


def _materialised(x: Any) -> Any:
    c, read = T.ONE, x
    if isinstance(x, se.Mul) and len(x.args) == 2 and isinstance(x.args[0], se.Number):
        c, read = x.args
    n = T.name_of(read)
    if n is None or not n.startswith("_T") or not read.args:
        return None
    num = Fraction(str(c))
    if num == 0 or any(v & (v - 1) for v in (abs(num.numerator), num.denominator)):
        return None  # not +-2^k: the product would round
    syms = sorted({s for a in read.args for s in a.free_symbols}, key=str)
    if c == 1 and list(read.args) == syms:
        return None  # already the plain read
    if any(s in T.BOUND or s not in T.RANGES or T.RANGES[s][1] is None or T.RANGES[s][0] < 0
           for s in syms):  # fmt: skip
        return None
    if any(not isinstance(f, se.floor) and T.is_read(f) for a in read.args
           for f in T.fn_atoms(a)):  # fmt: skip
        return None
    sizes = [T.RANGES[s][1] - T.RANGES[s][0] for s in syms]
    if int(np.prod(sizes)) > TABLE_CELLS_MAX:
        return None
    grids = np.meshgrid(*[np.arange(T.RANGES[s][0], T.RANGES[s][1]) for s in syms],
                        indexing="ij")  # fmt: skip
    env = dict(zip(syms, grids, strict=True))
    table = T.TABLES[n]
    try:
        idx = [np.broadcast_to(np.asarray(T.np_eval(a, env)), grids[0].shape if grids else ())
               for a in read.args]  # fmt: skip
    except T.TermError:
        return None
    if any(((i < 0) | (i >= d)).any() for i, d in zip(idx, table.shape, strict=True)):
        return None  # a read outside the table: it is under a bracket that is 0 there
    values = np.asarray(table[tuple(idx)])
    if values.dtype.kind not in "iuf" or (
        values.dtype.kind in "iu" and np.abs(values).max(initial=0) >= 2**53
    ):
        return None  # fmt: skip
    exact = values.astype(np.float64)
    scaled = exact * float(num)
    tiny = np.finfo(np.float64).tiny
    nonzero = exact != 0
    if not np.isfinite(scaled[np.isfinite(exact)]).all() or (
        np.abs(scaled[nonzero]) < tiny
    ).any():  # fmt: skip
        return None  # overflow or a subnormal: the scaling would round
    return T.table_read(_absolute(scaled, [T.RANGES[s][0] for s in syms]), syms)


def _absolute(values: np.ndarray, lows: Sequence[int]) -> np.ndarray:
    """``values`` (one cell per index value ``lo, lo + 1, ...`` of each axis) as a table read
    at the index itself: ``lo`` cells in front of each axis, copies of its first slice. The
    new table ``U`` is read as ``U(q)`` with ``q`` over ``[lo, hi)``, so ``U[q]`` must be the
    value at ``q``, not at ``q - lo`` (a later case that fixes ``q`` reads that cell); the
    cells in front are never read, and copying the first slice keeps a table that is uniform
    (or constant along an axis) over the range uniform (constant along it)."""
    if not any(lows):
        return values
    return np.pad(values, [(int(lo), 0) for lo in lows], mode="edge")


def _retabled(e: Any, unroll: int) -> Any:
    """``e`` (a normal form) with its table reads materialised (:func:`_tables`) again, after a
    case split narrowed the ranges of its free indices: a read at a shifted index (``T(q - 1)``
    beside the bracket ``[q >= 1]``) that ran off the table over the whole range is in it over
    the case's narrower one (and a table uniform there is a constant)."""
    t = _tables(e)
    return e if t == e else T.normalize(t, unroll=unroll)


__all__ = ["TABLE_CELLS_MAX"]
