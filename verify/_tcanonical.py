"""Canonical forms of tensor terms (step 1 of :mod:`verify._tdecide`): every sum written as one
multi-variable sum ``_SUM(body, b_1, ..., b_n)`` whose bound variables are translated so that
their anchor reads have no constant offset and renamed ``_b<level>`` in a canonical order, so
that sums equal up to the names, the order and a shift of their variables are identical.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import symengine as se

from . import terms as T


def canonical(e: Any) -> Any:
    """``e`` with every sum written as one multi-variable sum ``_SUM(body, b_1, ..., b_n)`` whose
    variables are renamed ``_b<level>`` in a canonical order (bodies without nested sums as
    factors: a sum multiplied into another sum's body is merged into it)."""
    memo: dict[Any, Any] = {}
    return _canon(e, memo)


def _canon(e: Any, memo: dict[Any, Any]) -> Any:
    if not isinstance(e, se.Basic) or not e.args:
        return e
    hit = memo.get(e)
    if hit is not None:
        return hit
    if T.is_sum(e):
        out = _canon_sum(e, memo)
    else:
        args = [_canon(a, memo) for a in e.args]
        out = T.rebuild(e, args)
    memo[e] = out
    return out


def _flatten_sum(e: Any) -> tuple[list[Any], Any]:
    """``sum_{k} body`` with nested sums in the body's factors pulled out: (variables, body)."""
    body, k = e.args[0], e.args[1]
    variables = [k]
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    while True:
        inner = [f for f in factors if T.is_sum(f)]
        if not inner:
            break
        f = inner[0]
        rest = [g for g in factors if g != f] if factors.count(f) == 1 else _drop_one(factors, f)
        ivars, ibody = _flatten_sum(f)
        variables += ivars
        factors = rest + (list(ibody.args) if isinstance(ibody, se.Mul) else [ibody])
    return variables, se.Mul(*factors)


def _translated(variables: Sequence[Any], body: Any) -> tuple[list[Any], Any]:
    """The variables and body with each bound variable ``v`` translated, ``v = w - t`` for a
    fresh ``w`` (an integer ``t``), so that its *anchor* read has no constant term: a sum over
    every integer of ``body`` (its range is in its brackets) is the same sum after any
    translation of its variable, so this is exact; ``w``'s registered range is ``v``'s moved by
    ``t`` (ranges simplify floors). It makes two sums that differ by a shift of their variable
    (a transposed convolution's weight gradient read as ``x[k] ct[k + 1]`` by the rule and
    ``x[k - 1] ct[k]`` by the adjoint) the same sum.

    The anchor is chosen alike under every translation of the variables: among the reads in
    ``body``'s factors with an argument ``+-v + rest + c`` (``rest`` free of bound variables,
    ``c`` an integer), the smallest by (read name, argument position, sign, ``rest``), ties
    broken by the smallest ``c``. Translations change only the ``c``, each variable's own
    (its anchor does not hold the others), so both sides of a shift pick the same anchor. The
    reads and brackets moved are normalised again (both are translation-equivariant: gcd
    division and sign normalisation leave the variables' coefficients as they are)."""
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    reads = [f for f in factors if T.is_read(f)]
    if not reads:
        return list(variables), body
    shifts, out = {}, []
    for v in variables:
        best = None
        for f in reads:
            for pos, arg in enumerate(f.args):
                cand = _anchor(v, arg)
                if cand is not None:
                    key = (T.name_of(f) or "", pos, *cand)
                    best = key if best is None or key < best else best
        rng = T.RANGES.get(v)
        if best is None or best[-1] == 0 or rng is None:
            out.append(v)
            continue
        t = best[2] * best[-1]  # a v + c = a (v + a c)
        w = _SHIFTED.get((v, t))
        if w is None:
            w = T.fresh("_k", rng[0] + t, None if rng[1] is None else rng[1] + t)
            if len(_SHIFTED) > 200000:
                _SHIFTED.clear()
            _SHIFTED[(v, t)] = w
        shifts[v] = se.expand(w - t)
        out.append(w)
    if not shifts:
        return out, body
    moved = [f.xreplace(shifts) for f in factors]
    moved = [T.normalize(g) if g != f else g for f, g in zip(factors, moved, strict=True)]
    return out, se.Mul(*moved)


#: The translated variable ``w = v + t`` of each ``(v, t)`` (one per pair: canonical forms of
#: the same sum agree across calls).
_SHIFTED: dict[tuple[Any, int], Any] = {}


def _anchor(v: Any, arg: Any) -> tuple[int, str, int] | None:
    """``(a, rest, c)`` for an index argument ``a v + rest + c`` with ``a = +-1``, ``rest`` an
    integer combination of atoms free of ``v`` and of every bound variable (which another
    translation would move), ``c`` an integer; else ``None``."""
    if v not in arg.free_symbols:
        return None
    lin = T.linear(arg)
    if lin is None:
        return None
    coeffs, const = lin
    a = coeffs.get(v)
    if a not in (1, -1) or not isinstance(const, se.Integer):
        return None
    rest = {u: c for u, c in coeffs.items() if u != v}
    if not all(isinstance(c, se.Integer) and not _moves(u, v) for u, c in rest.items()):
        return None
    return int(a), str(se.Add(*[c * u for u, c in rest.items()])), int(const)


def _moves(u: Any, v: Any) -> bool:
    """Whether the atom ``u`` holds ``v`` or a bound variable (registered, or canonical)."""
    syms = u.free_symbols
    return v in syms or bool(syms & T.BOUND) or any(s.name.startswith("_b") for s in syms)


def _drop_one(factors: list[Any], f: Any) -> list[Any]:
    out, dropped = [], False
    for g in factors:
        if not dropped and g == f:
            dropped = True
            continue
        out.append(g)
    return out


def _level(e: Any) -> int:
    """1 + the largest ``_b<level>`` index used inside ``e`` (0 if none)."""
    best = 0
    for s in e.free_symbols:
        name = s.name
        if name.startswith("_b") and name[2:].isdigit():
            best = max(best, int(name[2:]) + 1)
    for f in e.atoms(se.FunctionSymbol):
        if T.is_sum(f):
            for v in f.args[1:]:
                name = v.name
                if name.startswith("_b") and name[2:].isdigit():
                    best = max(best, int(name[2:]) + 1)
    return best


def _canon_sum(e: Any, memo: dict[Any, Any]) -> Any:
    variables, body = _flatten_sum(e)
    variables, body = _translated(variables, se.expand(body))
    body = _canon(se.expand(body), memo)
    base = _level(body)
    sigs = {v: _signature(v, body, variables) for v in variables}
    order = sorted(variables, key=lambda v: sigs[v])
    # variables with the same signature: try their permutations, keep the smallest text
    groups = [list(g) for _, g in itertools.groupby(order, key=lambda v: sigs[v])]
    best = None
    perms = math.prod(math.factorial(len(g)) for g in groups)
    choices = itertools.product(*[itertools.permutations(g) for g in groups]) if perms <= 120 \
        else [tuple(tuple(g) for g in groups)]  # fmt: skip
    for choice in choices:
        seq = [v for g in choice for v in g]
        names = {v: se.Symbol(f"_b{base + i}") for i, v in enumerate(seq)}
        cand_body = body.xreplace(names)
        cand = T.SUM(cand_body, *[names[v] for v in seq])
        key = str(cand)
        if best is None or key < best[0]:
            best = (key, cand)
    assert best is not None
    return best[1]


def _signature(v: Any, body: Any, variables: Sequence[Any]) -> str:
    """Where ``v`` occurs in ``body``, with the other bound variables masked: reads and
    brackets by name and argument position, with ``v``'s coefficient."""
    mask = {u: se.Symbol("_v") for u in variables if u != v}
    occ = []
    for f in body.atoms(se.FunctionSymbol):
        if v not in f.free_symbols:
            continue
        n = T.name_of(f) or "?"
        for pos, a in enumerate(f.args):
            if v in getattr(a, "free_symbols", set()):
                lin = T.linear(a) if n not in ("_SUM", "_MAXR") else None
                c = lin[0].get(v) if lin else None
                occ.append(f"{n}:{pos}:{c}:{a.xreplace(mask).xreplace({v: se.Symbol('_u')})!s}")
    return "|".join(sorted(occ))


__all__ = ["canonical"]
