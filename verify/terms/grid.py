"""Integer facts about index brackets decided by evaluating every point of a small box.

The decision procedure asks z3 two kinds of questions about index expressions: which 0/1
assignments of a set of brackets are feasible (:func:`verify._tregions._regions_of`) and
whether an expression with floors has a fixed sign (:func:`verify.terms._sign_facts`), and
nested floors (a padded pooling window read through a reshape: ``floor((3 + 2 floor((q + 1) /
2) + q + ...) / 68)``) can take z3 seconds. (z3 runs under a deterministic resource limit,
:func:`verify.terms.smt.solver`, never a wall-clock timeout, whose answer depended on the load
of the machine; but z3's state is global to the process, the terms earlier checks created.)

When every symbol involved has a finite registered range and the box of their values is small
(at most :data:`GRID_MAX` points), the question is decided here instead by evaluating every
expression at every point of the box, with exact integer arithmetic (NumPy ``int64``, every
intermediate value bounded well inside it, else the evaluation declines). That is a proof by
exhaustion over exactly the domain z3 is given (:class:`verify.terms.smt.Z3` constrains each
symbol to its range and nothing else), and it takes the same time in every process.
Anything else (a read of an index tensor, an unbounded or bound symbol where only facts count,
a larger box) returns ``None`` and the caller asks z3 as before.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from .core import BOUND, RANGES, is_bracket, name_of
from .index import linear

#: Boxes of at most this many points are evaluated point by point.
GRID_MAX = 1 << 18
#: Operands of a sum or product are kept below this magnitude, so no int64 result overflows.
_SAFE = 1 << 30


class NotGridded(Exception):
    """The question is not one this module decides (the caller asks z3)."""


def box(exprs: Iterable[Any], *, facts_only: bool = False) -> dict[Any, np.ndarray]:
    """Every point of the ranges of the symbols of ``exprs``, as broadcastable arrays (one axis
    per symbol). With ``facts_only``, a bound variable has no range (as in z3's encoding), so
    a question about one is declined."""
    syms: set = set()
    for e in exprs:
        syms |= e.free_symbols
    order = sorted(syms, key=str)  # any order: the set of points is the same
    sizes = []
    for s in order:
        r = RANGES.get(s)
        if r is None or r[1] is None or (facts_only and s in BOUND):
            raise NotGridded(f"{s} has no finite range")
        sizes.append(max(r[1] - r[0], 0))
    if math.prod(sizes) > GRID_MAX:
        raise NotGridded("too many points")
    axes = [np.arange(RANGES[s][0], RANGES[s][1], dtype=np.int64) for s in order]
    grids = np.meshgrid(*axes, indexing="ij", sparse=True) if axes else []
    return dict(zip(order, grids, strict=True))


def _bounded(a: Any) -> Any:
    if np.abs(np.asarray(a, dtype=np.int64)).max(initial=0) >= _SAFE:
        raise NotGridded("values too large for exact int64 arithmetic")
    return a


def evaluate(e: Any, env: Mapping[Any, np.ndarray]) -> Any:
    """An integer index expression at every point of ``env``, exactly (the operations of
    :meth:`verify.terms.smt.Z3.term`: integers, symbols, sums, integer multiples, floors of
    rational-linear expressions, maxima and minima, brackets)."""
    if isinstance(e, se.Integer):
        return _bounded(int(e))
    if isinstance(e, se.Symbol):
        if e not in env:
            raise NotGridded(f"{e} is not in the box")
        return env[e]
    if isinstance(e, se.Add):
        if len(e.args) > 16:
            raise NotGridded("too many terms")
        return sum((_bounded(evaluate(a, env)) for a in e.args), start=np.int64(0))
    if isinstance(e, se.Mul):
        out: Any = np.int64(1)
        for a in e.args:
            if isinstance(a, se.Number) and not isinstance(a, se.Integer):
                raise NotGridded(f"a non-integer coefficient in {e}")
            out = _bounded(out) * _bounded(evaluate(a, env))
        return out
    if isinstance(e, se.floor):
        return _floor(e.args[0], env)
    if isinstance(e, se.Max | se.Min):
        vals = np.broadcast_arrays(*[np.asarray(evaluate(a, env)) for a in e.args])
        pick = np.maximum if isinstance(e, se.Max) else np.minimum
        return pick.reduce(vals)
    if is_bracket(e):
        return bracket(e, env).astype(np.int64)
    raise NotGridded(f"cannot evaluate {e}")


def _floor(inner: Any, env: Mapping[Any, np.ndarray]) -> Any:
    """``floor(inner)`` for ``inner`` linear with rational coefficients: ``floor(n / d)`` of
    the integer ``n = d * inner`` (``d`` the common denominator, positive)."""
    lin = linear(inner)
    if lin is None:
        raise NotGridded(f"cannot evaluate floor({inner})")
    coeffs, const = lin
    d = math.lcm(*[Fraction(str(c)).denominator for c in [*coeffs.values(), const]])
    return np.floor_divide(evaluate(se.expand(inner * d), env), d)


def bracket(b: Any, env: Mapping[Any, np.ndarray]) -> np.ndarray:
    """A bracket ``[e >= 0]`` or ``[e == 0]`` at every point of ``env`` (booleans)."""
    v = np.asarray(evaluate(b.args[0], env))
    return v >= 0 if name_of(b) == "_GE" else v == 0


def _full(a: Any, env: Mapping[Any, np.ndarray]) -> np.ndarray:
    shape = np.broadcast_shapes(*[g.shape for g in env.values()]) if env else ()
    return np.broadcast_to(np.asarray(a), shape).reshape(-1)


def regions(brackets: Sequence[Any], facts: Sequence[tuple[Any, Any]],
            limit: int) -> list[dict] | None:  # fmt: skip
    """The feasible 0/1 assignments of ``brackets`` under ``facts`` (brackets with their
    values), in the order z3's enumeration gives them (each bracket 1 before 0); ``None``
    when more than ``limit``. Raises :class:`NotGridded` when this module does not decide it."""
    env = box([b.args[0] for b in brackets] + [b.args[0] for b, _ in facts])
    ok = _full(True, env)
    for b, v in facts:
        ok = ok & (_full(bracket(b, env), env) == (int(v) != 0))
    cols = [_full(bracket(b, env), env)[ok] for b in brackets]
    if not cols:
        return [{}] if ok.any() else []
    rows = np.unique(np.stack(cols, axis=1).astype(np.int8), axis=0)
    if len(rows) > limit:
        return None
    order = sorted((tuple(int(x) for x in r) for r in rows), key=lambda r: [-x for x in r])
    return [{b: se.Integer(x) for b, x in zip(brackets, r, strict=True)} for r in order]


def sign_facts(e: Any, facts: bool) -> tuple[bool, bool, bool]:
    """Whether ``e`` is always >= 0, always < 0, always == 0 over the box of its symbols'
    ranges (with ``facts``, a bound variable is declined: its range is not a fact). Raises
    :class:`NotGridded` when this module does not decide it."""
    env = box([e], facts_only=facts)
    v = _full(evaluate(e, env), env)
    if v.size == 0:  # an empty box: every statement holds, as z3 finds the negations unsat
        return True, True, True
    return bool((v >= 0).all()), bool((v < 0).all()), bool((v == 0).all())


__all__ = ["GRID_MAX", "NotGridded", "box", "bracket", "evaluate", "regions", "sign_facts"]
