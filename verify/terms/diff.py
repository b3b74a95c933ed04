"""Differentiation of terms: :func:`jvp_term` (the directional derivative of an element term)
and :func:`coefficient` (the coefficient of a tangent's element, the VJP's reference)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import symengine as se

from .core import (
    _SPECIAL,
    DERIVED,
    LEAF_SHAPES,
    ONE,
    SUM,
    ZERO,
    TermError,
    atoms_of,
    fn_atoms,
    fresh,
    is_sum,
    name_of,
)
from .index import flat_index
from .signs import _in_range, eq, range_brackets

# -- derivative and transpose ------------------------------------------------------------------


def jvp_term(e: Any, tangent: Mapping[str, str], conventional: Callable[[Any], Any],
             even: Callable[[Any], bool] | None = None) -> Any:  # fmt: skip
    """The directional derivative of ``e``: every read of a leaf named in ``tangent`` moves in
    the direction of the read of its tangent leaf at the same indices; sums differentiate
    under the sum; ``Max`` / ``Min`` are read with the tie conventions (``conventional``)
    first (``_KINK(u)`` there: ``du``, and 0 where it is left as a value), a maximum over a
    range (``_MAXR``) with the first maximum's derivative, or, where
    ``even(maximum)``, the even split among the tied values (:func:`_maxr_even_jvp`). Tables,
    index symbols and reads of other leaves are constants."""
    e = conventional(e)
    memo: dict[Any, Any] = {}
    out = _jvp(e, tangent, conventional, memo, even)
    kinks = {f: ZERO for f in fn_atoms(out) if name_of(f) == "_KINK"}  # values: 0
    return out.xreplace(kinks) if kinks else out


def _jvp(e: Any, tangent: Mapping[str, str], conv: Callable[[Any], Any], memo: dict,
         even: Callable[[Any], bool] | None = None) -> Any:  # fmt: skip
    if not isinstance(e, se.Basic):
        return ZERO
    hit = memo.get(e)
    if hit is not None:
        return hit
    atoms = _moving_atoms(e, tangent)
    if not atoms:
        memo[e] = ZERO
        return ZERO
    # a bracket [e >= 0] / [e == 0] of moving reads is a step: constant where it is
    # differentiable (the branch-wise derivative; at its boundary, the branch the bracket takes)
    steps = {b: se.Symbol(f"_s{i}") for i, b in enumerate(sorted(
        (f for f in fn_atoms(e) if name_of(f) in ("_GE", "_EQ") and _mentions(f, tangent)),
        key=str))}  # fmt: skip
    temps = {a: se.Symbol(f"_d{i}") for i, a in enumerate(atoms)}
    flat = (e.xreplace(steps) if steps else e).xreplace(temps)
    unstep = {t: b for b, t in steps.items()}
    out = ZERO
    for a, t in temps.items():
        d = _without_zero_branches(flat.diff(t))
        if d == 0:
            continue
        n = name_of(a)
        if n == "_SUM":
            body, k = a.args
            da = SUM(_jvp(conv(body), tangent, conv, memo, even), k)
        elif n == "_KINK":
            da = _jvp(conv(a.args[0]), tangent, conv, memo, even)
        elif n == "_MAXR":
            rule = _maxr_even_jvp if even is not None and even(a) else _maxr_jvp
            da = rule(a, lambda v: _jvp(conv(v), tangent, conv, memo, even))
        elif n in DERIVED:
            da = DERIVED[n].jvp(a.args, lambda v: _jvp(conv(v), tangent, conv, memo, even))
        else:
            tname = tangent[n]  # type: ignore[index]
            if n in LEAF_SHAPES:
                LEAF_SHAPES[tname] = LEAF_SHAPES[n]  # type: ignore[index]
            da = se.Function(tname)(*a.args)
        back = {t2: a2 for a2, t2 in temps.items()}
        d = d.xreplace(back)
        out = out + (d.xreplace(unstep) if unstep else d) * da
    memo[e] = out
    return out


def _without_zero_branches(d: Any) -> Any:
    """``d`` with every Piecewise whose branches are all 0 written as 0. symengine
    differentiates a Piecewise branch by branch without asking whether it moves at all, and its
    chain rule through a sum (an opaque function) keeps a ``Subs(Derivative(_SUM(...)))``
    factor beside such a zero: with the zero written as 0, the product is 0."""
    zeros = {p: ZERO for p in atoms_of(d, se.Piecewise) if all(v == 0 for v in p.args[0::2])}
    return d.xreplace(zeros) if zeros else d


#: The derivative of a maximum over at most this many values is written out (one first-max
#: indicator per value).
MAXR_JVP_MAX = 64


def _maxr_jvp(m: Any, d: Callable[[Any], Any]) -> Any:
    """The derivative of ``_MAXR(body, k, lo, hi)`` with the convention of ``max_pool`` (ops.md:
    at a tie the first maximum, in index order, takes the whole derivative): the sum over
    ``k`` of ``d body(k)`` times the indicator that ``body(k)`` is the first maximum (greater
    than every value before it, at least every value after it). Only over a concrete range of
    at most :data:`MAXR_JVP_MAX` finite values."""
    body, k, lo, hi = m.args
    if not (isinstance(lo, se.Integer) and isinstance(hi, se.Integer)) or not (
            0 < int(hi) - int(lo) <= MAXR_JVP_MAX):  # fmt: skip
        raise TermError("the derivative of a maximum over a long or symbolic axis is not "
                        "written out")  # fmt: skip
    values = [body.xreplace({k: se.Integer(v)}) for v in range(int(lo), int(hi))]
    if any(v.has(se.oo, -se.oo, se.zoo, se.nan) for v in values):
        raise TermError("the derivative of a maximum over masked values is not written out")
    out = ZERO
    for i, v in enumerate(values):
        conds = [se.Lt(u, v) for u in values[:i]] + [se.Le(u, v) for u in values[i + 1 :]]
        first = se.And(*conds) if conds else se.true
        out = out + d(v) * se.Piecewise((ONE, first), (ZERO, True))
    return out


def _maxr_even_jvp(m: Any, d: Callable[[Any], Any]) -> Any:
    """The derivative of ``_MAXR(body, k, lo, hi)`` with a tie split evenly among the tied
    values (JAX's and PyTorch's ``amax``): ``sum_k d body(k) [body(k) == m] / sum_k
    [body(k) == m]``, the sums over the range, written as JAX's rule computes it."""
    body, k, lo, hi = m.args
    if not (isinstance(lo, se.Integer) and isinstance(hi, se.Integer)):
        raise TermError("the even split of a maximum over a symbolic axis is not written out")

    def tied_sum(derivative: bool) -> Any:
        j = fresh("_k", int(lo), int(hi))
        at = body.xreplace({k: j})
        tied = se.Piecewise((ONE, se.Eq(m, at)), (ZERO, True))
        return SUM((d(at) if derivative else ONE) * tied * range_brackets(j, lo, hi), j)

    return tied_sum(True) / tied_sum(False)


def _moving_atoms(e: Any, tangent: Mapping[str, str]) -> list[Any]:
    """The reads of moving leaves and the sums / maxima that contain one, outermost first."""
    out = []
    seen = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, se.Basic) or x in seen:
            continue
        seen.add(x)
        n = name_of(x)
        if n in ("_SUM", "_MAXR", "_KINK"):
            if _mentions(x, tangent):
                out.append(x)
            continue
        if n is not None and n not in _SPECIAL:
            if n in tangent or (n in DERIVED and DERIVED[n].mentions(tangent)):
                out.append(x)
            continue
        if n in ("_GE", "_EQ"):
            continue
        stack.extend(x.args)
    return sorted(out, key=str)


def _mentions(e: Any, names: Iterable[str]) -> bool:
    names = set(names)
    for f in fn_atoms(e):
        n = name_of(f)
        if n in names or (n in DERIVED and DERIVED[n].mentions(names)):
            return True
    return False


def coefficient(e: Any, name: str, q: Sequence[Any]) -> Any:
    """The coefficient of the read ``name(q)`` in ``e``, which is linear in the reads of
    ``name``: each read ``name(i)`` contributes ``[i == q]`` (a Kronecker delta, eliminated
    when the term is normalised)."""
    e = se.expand(e)
    if name_of(e) == name:
        shape = LEAF_SHAPES.get(name)
        args = tuple(e.args)
        if shape and any(a.atoms(se.floor) for a in args):
            flat = flat_index(args, shape)
            if not flat.atoms(se.floor) and _in_range(args, shape):
                # a reshaped read: equal multi-indices in range <=> equal flat indices
                return eq(flat - flat_index(q, shape))
        out = ONE
        for a, b in zip(args, q, strict=True):
            out = out * eq(a - b)
        return out
    if not _mentions(e, (name,)):
        return ZERO
    if isinstance(e, se.Add):
        return se.Add(*[coefficient(t, name, q) for t in e.args])
    if isinstance(e, se.Mul):
        factors = list(e.args)
        hits = [n for n, f in enumerate(factors) if _mentions(f, (name,))]
        if len(hits) != 1:
            raise TermError(f"{name} appears non-linearly in {e}")
        (h,) = hits
        rest = se.Mul(*[f for n, f in enumerate(factors) if n != h])
        return rest * coefficient(factors[h], name, q)
    if is_sum(e):
        body, k = e.args
        return SUM(coefficient(body, name, q), k)
    if isinstance(e, se.Piecewise):
        args = list(e.args)
        for i in range(0, len(args), 2):
            if _mentions(args[i + 1], (name,)):
                raise TermError(f"{name} appears in a condition of {e}")
            args[i] = coefficient(args[i], name, q)
        return se.Piecewise(*[(args[i], args[i + 1]) for i in range(0, len(args), 2)])
    if isinstance(e, se.Pow) and e.args[1] == 1:
        return coefficient(e.args[0], name, q)
    raise TermError(f"{name} appears non-linearly in {e}")
