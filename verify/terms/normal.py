"""Sums and the normal form: sums split over their terms and solved against their brackets
(residues, congruences, ranges), maxima, and :func:`normalize`, the form both sides of an
equation are compared in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import symengine as se

from .._dims import Dim, SizeDependent, floordiv, size_expr
from .budget import tick
from .core import (
    BOUND,
    MAXR,
    ONE,
    RANGES,
    SHIFT_LEAVES,
    SUM,
    TABLES,
    UNROLL_MAX,
    UNROLL_NONE,
    UNROLL_SHORT,
    UNROLL_WIDE,
    UNROLL_WIDE_MAX,
    UPPER,
    XS,
    ZERO,
    TermError,
    _add_terms,
    _factors,
    _subterms,
    exact_scalar,
    fn_atoms,
    fold_extrema,
    fresh,
    has_atom,
    has_floor,
    has_infinity,
    is_bracket,
    is_table,
    name_of,
    rebuild,
    rewrite,
)
from .index import (
    _OVERRIDE,
    _OVERRIDE_KEY,
    _assemble,
    _bounds_of,
    _congruence_solution,
    _integer_form,
    _residue_of,
    _single_var_bracket,
    _tightest,
    floor_div,
    mod,
    simplify_index,
)
from .signs import _table_brackets, eq, ge, range_brackets

# -- sums --------------------------------------------------------------------------------------


def ssum(body: Callable[[Any], Any], lo: int, hi: Any, prefix: str = "_k") -> Any:
    """``sum_{lo <= k < hi} body(k)``, normalised (``hi`` may be a symbolic size, which is
    at least 1)."""
    if isinstance(hi, Dim):
        if lo != 0:
            raise SizeDependent(f"a sum over [{lo}, {hi})", hi)
        hi = hi.expr
    elif hi <= lo:
        return ZERO
    k = fresh(prefix, lo, hi)
    return sum_over(k, normalize(body(k) * range_brackets(k, lo, hi)))


def smax(body: Callable[[Any], Any], lo: int, hi: int) -> Any:
    """``max_{lo <= k < hi} body(k)`` (unrolled when short). Terms added to every value are
    taken out, ``max_k (a_k + c) = max_k a_k + c``: the maximum of values already shifted by
    their maximum (the JAX backend's second shift) is then exactly 0 (short ranges) or a plain
    maximum (long ones), and the shifts stay common factors."""
    if isinstance(hi, Dim):
        if lo != 0:
            raise SizeDependent(f"a maximum over [{lo}, {hi})", hi)
        hi = hi.expr  # at least 1 value, never unrolled
    elif hi - lo <= UNROLL_MAX:
        values = [body(se.Integer(v)) for v in range(lo, hi)]
        common = {t for t in set(_add_terms(values[0])).intersection(*map(_add_terms, values[1:]))
                  if t not in (se.oo, -se.oo, se.zoo, se.nan)}  # fmt: skip
        c = se.Add(*common) if common else ZERO
        return se.Max(*[v - c for v in values]) + c
    k = fresh("_m", lo, hi)
    b = body(k)
    c = se.Add(*[t for t in _add_terms(b) if k not in t.free_symbols])
    return MAXR(b - c, k, se.Integer(lo), size_expr(hi) if isinstance(hi, se.Basic | Dim)
                else se.Integer(hi)) + c  # fmt: skip


def sum_over(k: Any, body: Any, unroll: int = UNROLL_NONE) -> Any:
    """The normal form of ``sum_k body`` (``body`` carries ``k``'s range as brackets); with
    ``unroll``, a range of at most :data:`UNROLL_MAX` values is written term by term (at most
    :data:`UNROLL_WIDE_MAX` at level :data:`UNROLL_WIDE`). Brackets are 0/1, so a power of one
    is the bracket (``[c] [c]``, made where a short range is unrolled, states ``c`` once)."""
    body = _idempotent_brackets(se.expand(body))
    terms = body.args if isinstance(body, se.Add) else (body,)
    out = [_sum_term(k, t, unroll) for t in terms]
    return se.Add(*out) if out else ZERO


def _unroll_limit(unroll: int) -> int:
    """The longest range :func:`normalize` writes term by term at level ``unroll``."""
    return {UNROLL_NONE: 1, UNROLL_SHORT: UNROLL_MAX, UNROLL_WIDE: UNROLL_WIDE_MAX}[unroll]


def wide_sums(e: Any) -> bool:
    """Whether ``e`` holds a sum whose variable ranges over more than :data:`UNROLL_MAX` and at
    most :data:`UNROLL_WIDE_MAX` values (its registered range): the sums that only the level
    :data:`UNROLL_WIDE` writes term by term."""
    for f in fn_atoms(e):
        if name_of(f) == "_SUM":
            lo, hi = RANGES.get(f.args[1], (None, None))
            if lo is not None and hi is not None and UNROLL_MAX < hi - lo <= UNROLL_WIDE_MAX:
                return True
    return False


def _sum_term(k: Any, t: Any, unroll: int) -> Any:
    """``sum_k t`` for one monomial ``t``."""
    if t == 0:
        return ZERO
    dep, indep = [], []
    for f in _factors(t):
        (dep if k in f.free_symbols else indep).append(f)
    outside = se.Mul(*indep) if indep else ONE
    if not dep:
        raise TermError(f"sum over {k} of a term without its range: {t}")
    # a delta: solve [a k + r == 0] for k
    for n, f in enumerate(dep):
        if name_of(f) == "_EQ":
            sol = _solve(f.args[0], k)
            if sol is not None:
                value, cond = sol
                rest = [g for m, g in enumerate(dep) if m != n]
                inner = se.Mul(*[_subs_one(g, k, value, unroll) for g in rest]) if rest else ONE
                return se.expand(outside * cond * inner)
    # a congruence [a k + r = 0 (mod m)] over a range of at most m values: one solution
    for n, f in enumerate(dep):
        if name_of(f) == "_EQ":
            rest = [g for m, g in enumerate(dep) if m != n]
            value = _congruence_solution(f.args[0], k, rest)
            if value is not None:
                inner = se.Mul(*[_subs_one(g, k, value, unroll) for g in rest]) if rest else ONE
                return se.expand(outside * inner)
    # a floor of k: split k by its residue, which makes the floor affine in the quotient
    split = _residue_of(k, dep)
    if split is not None:
        return se.expand(outside * _split_residues(k, dep, split, unroll))
    lows, highs, others = _bounds_of(k, dep)
    # a range of one value is a delta; unroll a short constant-width range
    for L in lows:
        for U in highs:
            width = simplify_index(se.expand(U - L))
            if isinstance(width, se.Integer):
                n = int(width) + 1
                if n <= 0:
                    return ZERO
                if n <= _unroll_limit(unroll):
                    terms = []
                    for c in range(n):
                        val = se.expand(L + c)
                        parts = [_subs_one(g, k, val, unroll) for g in dep]
                        terms.append(se.Mul(*parts))
                    return se.expand(outside * se.Add(*terms))
    # no summand but the range: count the integers in it
    if not others and len(lows) == 1 and len(highs) == 1:
        (L,), (U,) = lows, highs
        return se.expand(outside * (U - L + 1) * ge(U - L))
    tight_lows, tight_highs = _tightest(lows, max), _tightest(highs, min)
    if len(tight_lows) < len(lows) or len(tight_highs) < len(highs):
        # constant bounds implied by a tighter one dropped: both sides' sums read alike
        dep = [*others, *(ge(se.expand(k - L)) for L in tight_lows),
               *(ge(se.expand(U - k)) for U in tight_highs)]  # fmt: skip
    return outside * SUM(se.Mul(*dep), k)


def _split_residues(k: Any, dep: Sequence[Any], split: tuple[int, int], unroll: int) -> Any:
    """``sum_k prod(dep)`` as ``sum_r sum_u prod(dep)[k := m u + r]`` with ``r0 <= r < r0 + m``
    (``split = (m, r0)``): every ``k`` is ``m u + r`` for exactly one such pair, so the sum is
    the same; every ``floor((a k + c) / d)`` with ``m | d / gcd(a, d)`` becomes affine in ``u``
    (and a floor of the short-ranged ``r``). ``u = floor((k - r0) / m)`` ranges over the
    values it takes on ``k``'s range."""
    m, r0 = split
    lo, hi = RANGES.get(k, (None, None))
    if hi is None and k in UPPER and lo is not None:
        # a symbolic bound: u < floor((hi - 1 - r0) / m) + 1, a polynomial in the sizes where
        # it is one for every size (else the sizes are made less general, verify/_certify.py)
        hi_u: Any = size_expr(floordiv(se.expand(UPPER[k] - 1 - r0), se.Integer(m))) + 1
    elif lo is None or hi is None:
        raise TermError(f"cannot split {k} without a range")
    else:
        hi_u = (hi - 1 - r0) // m + 1
    r = fresh("_k", r0, r0 + m)
    u = fresh("_k", (lo - r0) // m, hi_u)
    value = se.expand(m * u + r)
    parts = [normalize(g.xreplace({k: value}), unroll) for g in dep]
    inner = sum_over(u, se.Mul(*parts) * range_brackets(r, r0, r0 + m), unroll)
    return sum_over(r, inner, unroll)


def _subs_one(e: Any, k: Any, v: Any, unroll: int) -> Any:
    return normalize(e.xreplace({k: v}), unroll)


def _solve(e: Any, k: Any) -> tuple[Any, Any] | None:
    """``e == 0`` solved for ``k`` when ``e`` is linear in it: ``(value, condition)`` with the
    condition the divisibility that makes ``value`` an integer (1 for a unit coefficient)."""
    form = _integer_form(e)
    if form is None:
        return None
    coeffs, const = form
    a = coeffs.get(k)
    if a is None:
        return None
    others = {v: c for v, c in coeffs.items() if v != k}
    if any(k in v.free_symbols for v in others):
        return None  # k also inside a floor or a nat read: not a linear equation in k
    rest = _assemble(others, const)
    # a k + rest = 0  ->  k = -rest / a
    if a in (1, -1):
        return se.expand(-rest * a), ONE
    n = se.expand(-rest if a > 0 else rest)
    m = abs(a)
    return floor_div(n, m), eq(mod(n, m))


# -- normal form -------------------------------------------------------------------------------


_NORM: tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]] = ({}, {}, {})


_RELATIONAL = (se.Equality, se.Unequality, se.LessThan, se.StrictLessThan)


def normalize(e: Any, unroll: int = UNROLL_NONE) -> Any:
    """The normal form of a term (see the module doc); memoised. ``unroll`` also writes the
    sums over short constant ranges term by term (the form compared by the decision
    procedure; building terms keeps them as sums, so that Kronecker deltas are eliminated
    first)."""
    if not isinstance(e, se.Basic) or not e.args:
        return e
    memo = _NORM[unroll]
    hit = memo.get(e)
    if hit is not None:
        return hit
    tick()
    out = _normalize(e, unroll)
    if len(memo) > 200000:
        memo.clear()
    memo[e] = out
    memo[out] = out
    return out


def _normalize(e: Any, unroll: int) -> Any:
    n = name_of(e)
    if n == "_SUM":
        body, k = e.args
        return sum_over(k, normalize(body, unroll), unroll)
    if n == "_GE":
        return ge(e.args[0])
    if n == "_EQ":
        return eq(e.args[0])
    if n == "_MAXR":
        body, k, lo, hi = e.args
        return MAXR(normalize(body, unroll), k, lo, hi)
    if n == "_XS":
        return XS(normalize(e.args[0], unroll))
    if n is not None:  # a read: simplify its indices
        args = [simplify_index(a) for a in e.args]
        if n.startswith("_T") and all(isinstance(a, se.Integer) for a in args):
            table = TABLES[n]
            inside = all(0 <= int(a) < d for a, d in zip(args, table.shape, strict=True))
            return exact_scalar(table[tuple(int(a) for a in args)]) if inside else ZERO
        if unroll and n.startswith("_T"):
            br = _table_brackets(n, args)
            if br is not None:
                return br
        return se.Function(n)(*args)
    if isinstance(e, se.Piecewise):
        args = [normalize(a, unroll) for a in e.args]
        return _piecewise_args(args)
    if isinstance(e, se.Mul) and _selected_off(e.args, unroll):
        return ZERO
    args = [normalize(a, unroll) for a in e.args]
    if type(e) in _RELATIONS_INF:
        folded = _infinite_relation(type(e), args)
        if folded is not None:
            return folded
    out = rebuild(e, args)
    if isinstance(out, _RELATIONAL):  # its indices simplified: x(0) == max(x(0), x(1))
        out = fold_extrema(out)
    if isinstance(out, se.Pow) and out.args[0] == se.E:
        out = _exp_of_logs(out.args[1])
    if isinstance(out, se.log):
        out = log_of_shift(out)
    if isinstance(out, se.Pow) and isinstance(out.args[0], se.Add):
        out = _shift_out_of_power(out)
    if isinstance(out, se.Add | se.Mul | se.Pow):
        out = se.expand(out)
        out = _idempotent_brackets(out)
        if _piecewise_factors(out):
            out = _sign_tables_added(_sign_tables_merged(out))
        if has_floor(out):
            terms = out.args if isinstance(out, se.Add) else (out,)
            out = se.Add(*[_refine(t) for t in terms])
        if unroll:
            terms = out.args if isinstance(out, se.Add) else (out,)
            out = se.Add(*[_lift(t, unroll) for t in terms])
    return out


def _selected_off(factors: Sequence[Any], unroll: int) -> bool:
    """Whether a product is 0 because one of its brackets is: a bracket 0 here while no other
    factor holds an infinity literal. A bracket there is a selection (a concatenation's piece,
    a slice's range, an index mask): the other factors may read a table or leaf outside its
    range (read as 0 under a bracket that is 0 there), whose log or reciprocal is not a number,
    and which the program never computes. Where another factor holds an infinity (a masked
    entry ``-oo``) the product keeps its arithmetic (``0 * -oo`` is NaN)."""
    brackets = [f for f in factors if name_of(f) in ("_GE", "_EQ")]
    if not brackets or not any(normalize(b, unroll) == ZERO for b in brackets):
        return False
    return not any(has_infinity(f) for f in factors if name_of(f) not in ("_GE", "_EQ"))


def split_shifts(e: Any) -> Any:
    """``e`` with every ``exp(r + s)`` written ``exp(r) _XS(s)`` for the terms ``s`` that hold
    a maximum (the shift of a softmax-like form: a common factor that sums then pull out and
    quotients cancel), when ``s`` is proved finite (:func:`finite`; ``exp(+oo - oo)`` is not
    ``0 * oo``). For the decision only: ``_XS`` has no derivative and no concrete value.

    A read ``m`` of a held maximum (:data:`SHIFT_LEAVES`, a finite real) comes out one read at a
    time, ``exp(r + c m) = exp(r) _XS(m)^c`` (also where ``r`` is 0), so that shifts by
    different maxima (an online softmax rescaling by ``exp(m_old - m_new)``) cancel factor by
    factor."""
    return rewrite(e, lambda x, args: _shift_split(rebuild(x, args)))


def _shift_split(out: Any) -> Any:
    """One rebuilt subterm of :func:`split_shifts`: an exponential's held and maximum shifts
    taken out as factors."""
    if not (isinstance(out, se.Pow) and out.args[0] == se.E):
        return out
    a = out.args[1]
    terms = list(a.args) if isinstance(a, se.Add) else [a]
    if SHIFT_LEAVES and isinstance(a, se.Mul):  # 2 (a - m): its terms
        expanded = se.expand(a)
        if isinstance(expanded, se.Add):
            terms = list(expanded.args)
    held = [t for t in terms if _held_shift(t) is not None]
    if held:
        terms = [t for t in terms if _held_shift(t) is None]
        factors = [XS(r) ** c for c, r in map(_held_shift, held)]  # type: ignore[misc]
        out = se.Mul(se.exp(se.Add(*terms)), *factors)
    shift = [t for t in terms if _has_max(t)]
    if shift and len(shift) < len(terms) and finite(se.Add(*shift)):
        rest = se.Add(*[t for t in terms if not _has_max(t)])
        out = se.Mul(se.exp(rest), XS(se.Add(*shift)), *([] if not held else factors))
    return out


def _held_shift(t: Any) -> tuple[Any, Any] | None:
    """``(c, m)`` for a term ``c m`` with ``c`` rational and ``m`` a read of a held maximum
    (:data:`SHIFT_LEAVES`), else ``None``."""
    if not SHIFT_LEAVES:
        return None
    parts = _factors(t)
    reads = [p for p in parts if name_of(p) in SHIFT_LEAVES]
    coeff = [p for p in parts if name_of(p) not in SHIFT_LEAVES]
    if len(reads) != 1 or not all(isinstance(c, se.Rational | se.Integer) for c in coeff):
        return None
    return se.Mul(*coeff), reads[0]


def log_of_shift(e: Any) -> Any:
    """``log(P _XS(s1)^c1 ...)`` as ``log(P) + c1 s1 + ...``: the log of a max-shifted sum of
    exponentials (``log(sum_k exp(x_k - m))`` once :func:`split_shifts` pulled the shift out of
    the sum) meets the unshifted ``log(sum_k exp(x_k))`` plus its shift.

    Sound because ``_XS(s)`` is ``exp(s)`` for a finite real ``s`` (only :func:`split_shifts`
    builds it, after proving ``s`` finite) and a rational power ``c`` of it is the positive real
    ``exp(c s)``: multiplying by a positive real leaves the argument of ``P`` alone, so for
    every ``P != 0`` (real, or complex with the principal branch) ``log(P exp(c s)) = log(P) +
    c s``, and for ``P = 0`` both sides are ``log(0)`` plus a finite shift."""
    arg = _common_shifts(e.args[0])
    shifts, rest = [], []
    for f in _factors(arg):
        base, power = (f.args[0], f.args[1]) if isinstance(f, se.Pow) else (f, ONE)
        if name_of(base) == "_XS" and isinstance(power, se.Rational | se.Integer):
            shifts.append(power * base.args[0])
        else:
            rest.append(f)
    if not shifts:
        return e
    return se.expand(se.log(se.Mul(*rest)) + se.Add(*shifts))


def _shift_out_of_power(p: Any) -> Any:
    """``(A _XS(s)^c + B _XS(s)^c)^n`` as ``_XS(s)^(c n) (A + B)^n``: the normaliser of an
    online softmax, every block's sum rescaled by the same running maximum, keeps the shift
    as one factor that cancels against the numerator's (expanded, ``(A/X + B/X)^4`` is a
    multinomial with the shift in every term).

    Sound because ``_XS(s)`` is ``exp(s)`` for a finite real ``s`` (:func:`log_of_shift`), so
    its rational powers are positive reals, and ``(f u)^n = f^n u^n`` for a positive real ``f``
    and any real ``u``."""
    base, n = p.args
    if not isinstance(n, se.Rational | se.Integer) or not any(
            name_of(f) == "_XS" for f in fn_atoms(base)):  # fmt: skip
        return p
    split = _common_shift_factor(base)
    if split is None:
        return p
    f, rest = split
    return se.Pow(f, n) * se.Pow(rest, n)


def _xs_powers(t: Any) -> dict[Any, Any]:
    out = {}
    for f in _factors(t):
        base, power = (f.args[0], f.args[1]) if isinstance(f, se.Pow) else (f, ONE)
        if name_of(base) == "_XS" and isinstance(power, se.Rational | se.Integer):
            out[base] = power
    return out


def _common_shifts(arg: Any) -> Any:
    """A sum whose every term holds the same shift factor ``_XS(s)^c``, with it taken out."""
    split = _common_shift_factor(arg)
    return arg if split is None else split[0] * split[1]


def _common_shift_factor(arg: Any) -> tuple[Any, Any] | None:
    """``(f, u)`` with ``arg = f u``, ``f`` the product of the shift factors ``_XS(s)^c`` that
    every term of the sum ``arg`` holds; ``None`` when there are none."""
    if not isinstance(arg, se.Add):
        return None
    terms = list(arg.args)
    common = _xs_powers(terms[0])
    for t in terms[1:]:
        if not common:
            return None
        have = _xs_powers(t)
        common = {b: c for b, c in common.items() if have.get(b) == c}
    if not common:
        return None
    f = se.Mul(*[b**c for b, c in common.items()])
    return f, se.expand(se.Add(*[t / f for t in terms]))


def _exp_of_logs(a: Any) -> Any:
    """``exp(r + c1 log(u1) + ...)`` as ``exp(r) u1^c1 ...`` for rational ``c`` and ``u``
    proved nonnegative (:func:`nonnegative`): the exponential of a log-softmax
    (``exp(x_j - log(sum_k exp(x_k)))``) is the quotient the softmax's form has, and a sum
    pulls the normaliser out of it.

    Sound because for ``u > 0`` the log is real and ``exp(c log(u)) = u^c``, and
    ``exp(a + b) = exp(a) exp(b)``; at ``u = 0`` (``log(u) = -oo``) both sides are 0 for
    ``c > 0`` and ``+oo`` for ``c < 0`` (``exp(r)`` is positive). A ``u`` of unknown sign is
    left alone: ``log`` of a negative value is NaN in floating point, its power is not."""
    split = _split_by_bracket(a)
    if split is not None:
        return split
    terms = list(a.args) if isinstance(a, se.Add) else [a]
    factors, rest = [], []
    for t in terms:
        coeff, u = _log_term(t)
        if u is None or not nonnegative(u):
            rest.append(t)
        else:
            factors.append(se.Pow(u, coeff))
    if not factors:
        return _exp_parts(a)
    return se.expand(se.Mul(_exp_parts(se.Add(*rest)), *factors))


def _split_by_bracket(a: Any) -> Any:
    """``exp(r + [c] t)`` as ``[c] exp(r + t) + (1 - [c]) exp(r)`` for a term whose other
    factor ``t`` holds a log or a held maximum (:data:`SHIFT_LEAVES`) and no infinity literal:
    a piece of a concatenation in an exponent (the log-sum-exp of one block among several),
    so that the log and the shift meet the terms they cancel with. ``None`` when no term
    qualifies.

    Sound for a 0/1 bracket ``[c]`` that selects (as :func:`_selected_off` reads it): where it
    is 1 both sides are ``exp(r + t)``, where it is 0 both are ``exp(r)``."""
    terms = list(a.args) if isinstance(a, se.Add) else [a]
    for t in terms:
        parts = _factors(t)
        brackets = [f for f in parts if name_of(f) in ("_GE", "_EQ")]
        if not brackets:
            continue
        inner = se.Mul(*[f for f in parts if name_of(f) not in ("_GE", "_EQ")])
        if has_infinity(inner) or not (has_atom(inner, se.log) or any(
                name_of(f) in SHIFT_LEAVES for f in fn_atoms(inner))):  # fmt: skip
            continue
        c = se.Mul(*brackets)
        rest = [u for u in terms if u is not t]
        others = se.Add(*rest)
        # where [c] is 1, a term whose brackets exclude c's is 0 (unless it holds an infinity:
        # IEEE's 0 * -oo is NaN): dropped there, so that the pieces of a concatenation over n
        # blocks give n + 1 exponentials, not 2^n (their (1 - [c]) factors still expand)
        kept = se.Add(*[u for u in rest if has_infinity(u) or not _exclusive(c, u, facts=True)])
        # the empty products of brackets dropped at each level, not after the last one
        return _idempotent_brackets(se.expand(c * _exp_of_logs(se.expand(kept + inner))
                                              + (1 - c) * _exp_of_logs(others)))  # fmt: skip
    return None


_ONE_VARIABLE: dict[Any, tuple[str, Any, Any, Any] | None] = {}


def _one_variable(f: Any) -> tuple[str, Any, Any, Any] | None:
    """A bracket ``[a v + b >= 0]`` / ``[a v + b == 0]`` of one index symbol ``v`` as
    ``(name, v, a, b)`` (``a != 0``); ``None`` for any other factor. Memoised (a function of
    the bracket alone)."""
    n = name_of(f)
    if n not in ("_GE", "_EQ"):
        return None
    if f in _ONE_VARIABLE:
        return _ONE_VARIABLE[f]
    form = _integer_form(f.args[0])
    out = None
    if form is not None and len(form[0]) == 1:
        ((v, a),) = form[0].items()
        if isinstance(v, se.Symbol) and a != 0:
            out = n, v, a, form[1]
    if len(_ONE_VARIABLE) > 200000:
        _ONE_VARIABLE.clear()
    _ONE_VARIABLE[f] = out
    return out


def _exclusive(c: Any, u: Any, facts: bool = False) -> bool:
    """Whether the brackets of ``c`` and those of the term ``u`` are never all 1 together: the
    single-variable ones (``[a v + b >= 0]``, ``[a v + b == 0]``) bound some index ``v``, with
    its range, to no integer. A sufficient test (``False`` when unsure). ``facts``: only the
    ranges that are facts (not a bound variable's, which its sum's brackets state)."""
    bounds: dict[Any, list[Any]] = {}
    for f in [*_factors(c), *_factors(u)]:
        one = _one_variable(f)
        if one is None:
            continue
        n, v, a, b = one
        if v not in bounds:
            lo, hi = (None, None) if facts and v in BOUND else RANGES.get(v, (None, None))
            bounds[v] = [lo, None if hi is None else hi - 1]
        lohi = bounds[v]
        if n == "_EQ":
            if b % a:
                return True  # a v + b == 0 has no integer solution
            lohi[0] = -b // a if lohi[0] is None else max(lohi[0], -b // a)
            lohi[1] = -b // a if lohi[1] is None else min(lohi[1], -b // a)
        elif a > 0:  # v >= ceil(-b / a)
            low = -(b // a)
            lohi[0] = low if lohi[0] is None else max(lohi[0], low)
        else:  # v <= floor(b / -a)
            high = b // -a
            lohi[1] = high if lohi[1] is None else min(lohi[1], high)
        if lohi[0] is not None and lohi[1] is not None and lohi[0] > lohi[1]:
            return True
    return False


def nonnegative(e: Any) -> bool:
    """Whether ``e`` is ``>= 0`` (or ``+oo``) for every real value of the leaves and every
    index value: a sufficient syntactic test. Nonnegative numbers, brackets, tables of
    nonnegative values, ``exp`` of a real term (:func:`_real`), and sums, products and sums
    over a range of nonnegative terms."""
    if isinstance(e, se.Number):
        return e == se.oo or (bool(e.is_real) and e >= 0)
    n = name_of(e)
    if n is not None:
        if n in ("_GE", "_EQ"):
            return True
        if n == "_SUM":
            return nonnegative(e.args[0])
        if n.startswith("_T"):
            return bool((np.asarray(TABLES[n], dtype=float) >= 0).all())
        return False  # a leaf read: any real
    if isinstance(e, se.Add | se.Mul):
        return all(nonnegative(a) for a in e.args)
    if isinstance(e, se.Pow) and e.args[0] == se.E:
        return _real(e.args[1])
    return _positive_power(e)


def positive(e: Any) -> bool:
    """Whether ``e`` is ``> 0`` (or ``+oo``) for every real value of the leaves and every index
    value: a sufficient syntactic test. Positive numbers, ``exp`` of a real term, products of
    positive terms, sums of nonnegative terms one of which is positive, and a sum over a
    nonempty range of a positive body (:func:`_positive_sum`)."""
    if isinstance(e, se.Number):
        return e == se.oo or (bool(e.is_real) and e > 0)
    if name_of(e) == "_SUM":
        return _positive_sum(*e.args)
    if isinstance(e, se.Mul):
        return all(positive(a) for a in e.args)
    if isinstance(e, se.Add):
        return all(nonnegative(a) for a in e.args) and any(positive(a) for a in e.args)
    if isinstance(e, se.Pow) and e.args[0] == se.E:  # exp(-oo) is 0
        return _real(e.args[1]) and not has_infinity(e.args[1])
    return _positive_power(e)


def _positive_power(e: Any) -> bool:
    """Whether ``e`` is ``b^r`` for a positive rational ``b`` and a rational ``r``
    (``sqrt(2)``, the ``1/sqrt(d)`` that scales attention's scores): a positive real."""
    if not isinstance(e, se.Pow):
        return False
    b, r = e.args
    rational = se.Rational | se.Integer
    return isinstance(b, rational) and b > 0 and isinstance(r, rational)


def _positive_sum(body: Any, k: Any) -> bool:
    """Whether ``sum_k body`` is positive: ``body`` a positive term times brackets that bound
    ``k`` alone (``[k - lo >= 0] [hi - k >= 0]``, its range) and that range holds a value."""
    lo, hi = RANGES.get(k, (None, None))
    rest = []
    for f in _factors(body):
        if name_of(f) != "_GE":
            rest.append(f)
            continue
        form = _integer_form(f.args[0])
        if form is None or set(form[0]) != {k} or form[0][k] not in (1, -1):
            return False  # a bracket on anything but k alone: maybe 0 for some element
        c = form[1]
        if form[0][k] == 1:  # k + c >= 0
            lo = -c if lo is None else max(lo, -c)
        else:  # -k + c >= 0
            hi = c + 1 if hi is None else min(hi, c + 1)
    if lo is None or hi is None or lo >= hi:
        return False
    return all(positive(f) for f in rest)


def known_relation(r: Any) -> Any:
    """A relation ``a < b`` / ``a <= b`` (``==``, ``!=`` against 0) decided by the sign of
    ``b - a`` where :func:`positive` / :func:`nonnegative` know it (``0 < sum_k exp(x_k)``:
    ``logsumexp``'s ``abs`` and ``sign`` of its sum), else ``r``."""
    if isinstance(r, se.StrictLessThan | se.LessThan):
        a, b = r.args
        d = se.expand(b - a)
        strict = isinstance(r, se.StrictLessThan)
        if positive(d) or (not strict and nonnegative(d)):
            return se.true
        if positive(-d) or (strict and nonnegative(-d)):
            return se.false
    elif isinstance(r, se.Equality | se.Unequality):
        a, b = r.args
        d = se.expand(b - a)
        if positive(d) or positive(-d):
            return se.false if isinstance(r, se.Equality) else se.true
    return r


def _real(e: Any) -> bool:
    """Whether ``e`` is real (or an infinity) for real leaves: no ``log``, no power with an
    exponent other than an integer (a root, a log of a negative value is not real), no
    imaginary number."""
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, se.Basic):
            continue
        if not isinstance(x, se.Number):  # -oo has args (-1,)
            stack.extend(x.args)  # into sums, maxima and reads too
        if isinstance(x, se.log):
            return False
        if isinstance(x, se.Pow) and x.args[0] != se.E and not isinstance(x.args[1], se.Integer) \
                and not _positive_power(x):  # fmt: skip
            return False
        if isinstance(x, se.Number) and not x.is_real and x not in (se.oo, -se.oo):
            return False
    return True


def _log_term(t: Any) -> tuple[Any, Any]:
    """``(c, u)`` for a term ``c log(u)`` with ``c`` rational, else ``(None, None)``."""
    parts = _factors(t)
    logs = [p for p in parts if isinstance(p, se.log)]
    coeff = [p for p in parts if not isinstance(p, se.log)]
    if len(logs) != 1 or not all(isinstance(c, se.Rational | se.Integer) for c in coeff):
        return None, None
    return se.Mul(*coeff), logs[0].args[0]


def _exp_parts(a: Any) -> Any:
    """``exp(a)`` with a masked entry taken out of the exponential,
    ``exp(r + (v if c else -oo)) = [c] exp(r + v)``, when ``r`` is proved finite
    (:func:`finite`): ``exp(+oo - oo)`` is not 0."""
    terms = list(a.args) if isinstance(a, se.Add) else [a]
    if -se.oo in terms:  # exp(-oo + r) = 0 for a finite r
        others = se.Add(*[u for u in terms if u != -se.oo])
        if finite(others):
            return ZERO
    masked = [t for t in terms if _masked_entry(t) is not None]
    if len(masked) == 1:
        (t,) = masked
        others = se.Add(*[u for u in terms if u is not t])
        if finite(others):
            v, c = _masked_entry(t)
            cond = _zero_one(c)
            if cond is not None:
                return cond * _exp_parts(others + v)
            return se.Piecewise((se.exp(others + v), c), (ZERO, True))
    return se.exp(a)


def _has_max(t: Any) -> bool:
    return any(isinstance(f, se.Max | se.Min) for f in _subterms(t)) or any(
        name_of(f) == "_MAXR" for f in fn_atoms(t)
    )


def _masked_entry(t: Any) -> tuple[Any, Any] | None:
    """``(v, c)`` for a term ``(v if c else -oo)`` with ``v`` finite."""
    if isinstance(t, se.Piecewise) and len(t.args) == 4 and t.args[2] == -se.oo \
            and t.args[3] == se.true and finite(t.args[0]):  # fmt: skip
        return t.args[0], t.args[1]
    return None


def _zero_one(c: Any) -> Any:
    """The 0/1 value of a condition ``1 == b`` on a bracket or a 0/1 table read, else None."""
    if not isinstance(c, se.Equality):
        return None
    a, b = c.args
    if b == 1:
        a, b = b, a
    if a != 1:
        return None
    if is_bracket(b):
        return b
    n = name_of(b)
    if n is not None and n.startswith("_T") and np.isin(TABLES[n], (0, 1)).all():
        return b
    return None


def finite(e: Any) -> bool:
    """Whether ``e`` is finite for every value of the leaves (finite reals) and indices: a
    sufficient syntactic test. A maximum is finite when one of its arguments is; a masked
    entry ``(v if c else -oo)`` counts when ``c`` holds at the first position of its range
    for every row (:func:`_holds_first`)."""
    if isinstance(e, se.Number):
        return e.is_finite if hasattr(e, "is_finite") else e not in (se.oo, -se.oo, se.zoo)
    if isinstance(e, se.Symbol):
        return True
    n = name_of(e)
    if n is not None:
        if n in ("_GE", "_EQ"):
            return True
        if n == "_SUM":
            return finite(e.args[0])
        if n == "_MAXR":
            body, k, lo, hi = e.args
            if ge(se.expand(hi - lo - 1)) != ONE:  # empty (or a symbolic size not known > 0)
                return False
            if finite(body):
                return True
            m = _masked_entry(body)
            return m is not None and _holds_first(m[1], k, lo)
        if n.startswith("_T"):
            return bool(np.isfinite(np.asarray(TABLES[n], dtype=float)).all())
        return True  # a leaf read, a derived read (a softmax value)
    if isinstance(e, se.Add | se.Mul):
        return all(finite(a) for a in e.args)
    if isinstance(e, se.Pow):
        base, ex = e.args
        if base == se.E:
            return finite(ex)
        if finite(base) and isinstance(ex, se.Integer) and int(ex) >= 0:
            return True
        return _finite_constant(e)  # sqrt(2): the 1/sqrt(d) of attention's scores at d = 2
    if isinstance(e, se.Max | se.Min):
        ok = [finite(a) for a in e.args]
        if all(ok):
            return True
        # a maximum of masked entries: finite when one argument is finite for every row
        return (
            isinstance(e, se.Max)
            and any(ok)
            and all(ok[i] or _masked_entry(a) is not None for i, a in enumerate(e.args))
        )
    if isinstance(e, se.Piecewise):
        return all(finite(e.args[i]) for i in range(0, len(e.args), 2))
    if isinstance(e, se.floor):
        return finite(e.args[0])
    return _finite_constant(e)


def _finite_constant(e: Any) -> bool:
    """Whether ``e`` is a constant (no symbol, no read, no infinity) whose value is a finite
    real number: ``sqrt(2)``, ``pi``, ``log(2)``. Its value is the same for every value of the
    leaves, so one evaluation decides it; anything that does not evaluate to a finite real
    (``sqrt(-1)``, an overflow) counts as not known finite."""
    if not isinstance(e, se.Basic) or e.free_symbols or fn_atoms(e) or has_infinity(e):
        return False
    if e.atoms(se.Piecewise):
        return False
    try:
        v = e.evalf()
    except (RuntimeError, TypeError, ValueError, ArithmeticError):
        return False
    if not isinstance(v, se.Number) or not v.is_real:
        return False
    return bool(np.isfinite(float(v)))


def _holds_first(c: Any, k: Any, lo: Any) -> bool:
    """Whether the condition ``c`` (``1 == b``, ``b`` a bracket or a 0/1 table read) holds at
    ``k = lo`` for every value of the other indices."""
    b = _zero_one(c)
    if b is None:
        return False
    b = b.xreplace({k: lo})
    n = name_of(b)
    if n in ("_GE", "_EQ"):
        return normalize(b) == 1
    table = TABLES[n]  # type: ignore[index]
    sl: list[Any] = []
    for arg, size in zip(b.args, table.shape, strict=True):
        if isinstance(arg, se.Integer):
            sl.append(int(arg))
        elif isinstance(arg, se.Symbol) and arg in RANGES:
            lo_, hi_ = RANGES[arg]
            sl.append(slice(max(lo_, 0), size if hi_ is None else min(hi_, size)))
        else:
            return False
    return bool(np.all(table[tuple(sl)] == 1))


def _nested_bracket(t: Any) -> Any:
    """A bracket that occurs inside the arguments of a read, a bracket or a floor of ``t``
    (not inside a sum: that is the sum's own business), innermost first; else ``None``.

    A bracket that mentions the variable of a sum or maximum inside ``t`` (a sum under a
    power or a sum of sums: ``1 / (sum_k ... [k >= 1] ...)``) is never one: its value changes
    with that variable, so ``t = [c] t[c := 1] + (1 - [c]) t[c := 0]`` does not hold, and
    lifting it would leave the variable outside its sum."""
    found = None
    inner_bound = _bound_inside(t)
    for f in _factors(t):
        base = f.args[0] if isinstance(f, se.Pow) else f
        n = name_of(base)
        if n in ("_SUM", "_MAXR") or not isinstance(base, se.Basic):
            continue
        inner = [a for a in fn_atoms(base) if is_bracket(a) and a != base
                 and not (a.free_symbols & inner_bound)]  # fmt: skip
        for b in inner:
            if not any(is_bracket(c) for c in fn_atoms(b.args[0])):
                return b
        if inner and found is None:
            found = inner[0]
    return found


def _bound_inside(t: Any) -> set:
    """The variables of the sums and maxima inside ``t``."""
    out: set = set()
    for f in fn_atoms(t):
        n = name_of(f)
        if n == "_SUM":
            out.update(f.args[1:])
        elif n == "_MAXR":
            out.add(f.args[1])
    return out


def _lift(t: Any, unroll: int = UNROLL_SHORT) -> Any:
    """A monomial with brackets nested inside index expressions (a clamped or selected index)
    split on them: ``t = [c] t[c := 1] + (1 - [c]) t[c := 0]``. A nested bracket that the
    ranges decide is replaced by its value instead: a split made inside another one leaves
    brackets like ``[-1 - idx(p) >= 0]`` built by substitution, not by :func:`ge`, which is 0
    for a nat read (``idx(p) >= 0``, its registered range); splitting on it would keep a
    product with a bracket that is always 0 as a term of its own. The split's result keeps its
    brackets 0/1 (``[c] [c] = [c]``: ``t[c := 1]`` may hold ``[c]`` again), so both are exact
    rewrites."""
    b = _nested_bracket(t)
    if b is None:
        return t
    nb = normalize(b)
    if isinstance(nb, se.Integer):  # decided by the ranges: the same value wherever it occurs
        return normalize(t.xreplace({b: nb}), unroll)
    on = normalize(t.xreplace({b: ONE}), unroll)
    off = normalize(t.xreplace({b: ZERO}), unroll)
    if _may_be_infinite(on) or _may_be_infinite(off):
        # 0 * -oo is nan, not 0: keep the choice a Piecewise
        return se.Piecewise((on, se.Eq(b, 1)), (off, True))
    return _idempotent_brackets(se.expand(b * on + (1 - b) * off))


def _may_be_infinite(e: Any) -> bool:
    """Whether ``e`` holds an infinity, or divides by an expression with a bracket or a table
    read (``1 / [c]``, ``1 / (a [c] + b [d])``): that is infinite where the brackets are 0, and
    a case split substitutes their values later, so a bracket multiplied into it
    (``[b] on + (1 - [b]) off``) would turn into ``0 * zoo``, NaN, where it should be 0."""
    if has_infinity(e):
        return True
    for p in e.atoms(se.Pow) if isinstance(e, se.Basic) else ():
        base, ex = p.args
        if base == se.E or not (isinstance(ex, se.Number) and ex < 0):
            continue
        if any(is_bracket(f) or is_table(f) for f in fn_atoms(base)):
            return True
    return False


def _refine(t: Any) -> Any:
    """A monomial with its index expressions re-simplified under the single-variable bounds
    its own brackets state (``[q >= 1] x(floor((q + 7) / 8))`` is ``[q >= 1] x(1)`` when
    ``q < 9``). The brackets that state the bounds are kept."""
    factors = _factors(t)
    narrowed: dict[Any, tuple[int, int | None]] = {}
    for f in factors:
        one = _one_variable(f)
        if one is None:
            continue
        n, v, a, c = one
        if v not in RANGES or a not in (1, -1):
            continue
        lo, hi = narrowed.get(v, RANGES[v])
        if n == "_EQ":
            val = -c * a
            lo, hi = max(lo, val), val + 1 if hi is None else min(hi, val + 1)
        elif a == 1:  # v + c >= 0
            lo = max(lo, -c)
        else:  # -v + c >= 0
            hi = c + 1 if hi is None else min(hi, c + 1)
        narrowed[v] = (lo, hi)
    if not narrowed:
        return t
    saved, saved_key = dict(_OVERRIDE), _OVERRIDE_KEY[0]
    _OVERRIDE.update(narrowed)
    _OVERRIDE_KEY[0] = frozenset(_OVERRIDE.items())
    try:
        memo: dict[Any, Any] = {}
        out = [f if is_bracket(f) and _single_var_bracket(f) else _resimplify(f, memo)
               for f in factors]  # fmt: skip
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(saved)
        _OVERRIDE_KEY[0] = saved_key
    return se.Mul(*out)


def _resimplify(e: Any, memo: dict[Any, Any] | None = None) -> Any:
    """Index expressions inside ``e`` simplified again (under the current narrowed ranges)."""
    if not isinstance(e, se.Basic) or not e.args or not has_floor(e):
        return e
    memo = {} if memo is None else memo
    hit = memo.get(e)
    if hit is not None:
        return hit
    n = name_of(e)
    if n == "_GE":
        out = ge(e.args[0])
    elif n == "_EQ":
        out = eq(e.args[0])
    elif n in ("_SUM", "_MAXR"):
        out = rebuild(e, [_resimplify(e.args[0], memo), *e.args[1:]])
    elif n is not None:
        out = se.Function(n)(*[simplify_index(a) for a in e.args])
    else:
        out = rebuild(e, [_resimplify(a, memo) for a in e.args])
    memo[e] = out
    return out


_RELATIONS_INF = (se.StrictLessThan, se.LessThan, se.Equality, se.Unequality)


def _infinite_relation(cls: type, args: list[Any]) -> Any:
    """A relation between a finite value (every symbolic value is a finite real) and an
    infinity, decided; ``None`` when neither side is infinite."""
    a, b = args
    inf = (se.oo, -se.oo)
    if a not in inf and b not in inf:
        return None
    if a in inf and b in inf:
        return None

    def rank(v: Any) -> int:
        return 1 if v == se.oo else (-1 if v == -se.oo else 0)

    ra, rb = rank(a), rank(b)
    if cls is se.StrictLessThan:
        return se.true if ra < rb else se.false
    if cls is se.LessThan:
        return se.true if ra <= rb else se.false
    if cls is se.Equality:
        return se.false
    return se.true


_BOOLEAN = type(se.true).__mro__[2]  # symengine's Boolean (not exported by name)


def _piecewise_args(args: list[Any]) -> Any:
    pairs = []
    for i in range(0, len(args), 2):
        v, c = args[i], args[i + 1]
        if not isinstance(c, _BOOLEAN):  # a condition normalised to a 0/1 bracket term
            c = se.false if c == 0 else se.true if c.is_Number else se.Ne(c, 0)
        if c == se.false:
            continue
        pairs.append((v, c))
        if c == se.true:
            break
    pairs = _drop_default_branches(pairs)
    if len(pairs) == 1 and pairs[0][1] == se.true:
        return pairs[0][0]
    extremum = _tie_halved_extremum(pairs)
    if extremum is not None:
        return extremum
    table = _sign_table(pairs)
    if table is not None and len(set(table[1])) == 3:
        pairs = _sign_pairs(*table)  # a three-valued step: one form for every way of writing it
    pulled = _finite_factor_out(pairs)
    if pulled is not None:
        return pulled
    if not pairs:
        return ZERO
    factor = _common_factor([v for v, _ in pairs])
    if factor == 1:
        return se.Piecewise(*pairs)
    return factor * se.Piecewise(*[(_scaled(v, 1 / factor), c) for v, c in pairs])


def _finite_factor_out(pairs: list[tuple[Any, Any]]) -> Any:
    """``f Piecewise((r_i, c_i), ...)`` for a ``Piecewise((r_i f, c_i), ...)`` whose values are
    0 or rational multiples ``r_i f`` of one term ``f`` (not a number) that is finite for every
    value of the leaves (:func:`finite`): where ``r_i = 0``, ``0 f = 0``. A value selected by a
    condition (``jnp.where(v > 0, v, 0)``, JAX's cotangent ``where(c, ct, 0)``) is then the
    value times a step, as the reference's derivative writes it; so is a finite sum ``f``
    selected whole (``Piecewise((f, c), (0, True))``, a ReLU's JVP of a layer's sum). ``None``
    when the values are not of that form."""
    values = [v for v, _ in pairs]
    nonzero = [v for v in values if v != 0]
    if not nonzero or any(isinstance(v, _BOOLEAN) for v in nonzero):
        return None
    if isinstance(nonzero[0], se.Add):  # a sum selected whole (a JVP's where(c, t, 0))
        f = nonzero[0]
        if any(v != f for v in nonzero[1:]) or not finite(f):
            return None
        step = _piecewise_args([x for v, c in pairs for x in (ZERO if v == 0 else ONE, c)])
        return se.expand(f * step)
    if any(isinstance(v, se.Add) for v in nonzero):
        return None
    f = _monomial_rest(nonzero[0])
    if f is None or any(_monomial_rest(v) != f for v in nonzero[1:]) or not finite(f):
        return None
    flat = []
    for v, c in pairs:
        flat += [ZERO if v == 0 else _coefficient(v), c]
    return f * _piecewise_args(flat)


def _monomial_rest(v: Any) -> Any:
    """A monomial without its rational coefficient (``None`` for a number, or a coefficient
    that is not rational)."""
    if isinstance(v, se.Number):
        return None
    c = _coefficient(v)
    if not isinstance(c, se.Rational):
        return None
    return v if c == 1 else se.Mul(*v.args[1:])


def _tie_halved_extremum(pairs: list[tuple[Any, Any]]) -> Any:
    """``max(a, b)`` (``min(a, b)``) for the value of a maximum (minimum) of two values written
    with the tie split in halves, ``Piecewise((a, b < a), (b, a < b), ((a + b)/2, True))`` (how
    :func:`verify._rules.conventional` writes a ``Max`` before differentiating; swapped
    conditions for a ``Min``), else ``None``. The same value everywhere: at the tie ``a = b``,
    ``(a + b)/2 = a``. So a maximum read inside a sum (a ReLU layer's output summed by the next
    layer) is one atom whether it was written as JAX's ``max`` or as the reference's
    Piecewise. (``conventional`` writes such a Piecewise back as it was, so a term
    differentiated after this form is differentiated as before.)"""
    if len(pairs) != 3 or pairs[2][1] != se.true:
        return None
    (a, c_a), (b, c_b), (tie, _) = pairs
    if any(isinstance(v, _BOOLEAN) or has_infinity(v) for v in (a, b)):
        return None
    if se.expand(2 * tie - a - b) != 0:
        return None
    wins_a, wins_b = _lt_difference(c_a), _lt_difference(c_b)
    if wins_a is None or wins_b is None:
        return None
    d = se.expand(a - b)
    if d == 0:
        return None
    if se.expand(wins_a - d) == 0 and se.expand(wins_b + d) == 0:
        return se.Max(a, b)  # a wins where a - b > 0, b where b - a > 0
    if se.expand(wins_a + d) == 0 and se.expand(wins_b - d) == 0:
        return se.Min(a, b)
    return None


def _scaled_difference(e: Any) -> tuple[Any, Any] | None:
    """``(d, c)`` with ``e = c d``, ``c`` a nonzero rational and ``d`` the same for every
    rational multiple of ``e``: its non-constant monomial of least text (without coefficient)
    has coefficient 1. ``None`` for a constant ``e`` or a coefficient that is not rational."""
    e = se.expand(e)
    if isinstance(e, se.Number) or not isinstance(e, se.Basic):
        return None
    terms = e.args if isinstance(e, se.Add) else (e,)
    c = _coefficient(min(terms, key=lambda t: (isinstance(t, se.Number), _rest_text(t), str(t))))
    if not isinstance(c, se.Rational) or c == 0:
        return None
    return (e if c == 1 else se.expand(e / c)), c


def _condition_at(cond: Any, d: Any, sign: int) -> bool | None:
    """The truth of ``cond`` where ``d`` has the sign ``sign`` (-1, 0 or 1): a relation whose
    difference is a rational multiple of ``d``, or ``And`` / ``Or`` / ``Not`` of such; ``None``
    when it compares anything else."""
    if cond == se.true or cond == se.false:
        return cond == se.true
    if isinstance(cond, _SIGN_RELATIONS):
        scaled = _scaled_difference(cond.args[1] - cond.args[0])
        if scaled is None or scaled[0] != d:
            return None
        v = sign * (1 if scaled[1] > 0 else -1)  # the sign of rhs - lhs
        if isinstance(cond, se.StrictLessThan):
            return v > 0
        if isinstance(cond, se.LessThan):
            return v >= 0
        return (v == 0) == isinstance(cond, se.Equality)
    parts = [_condition_at(a, d, sign) for a in cond.args] if cond.args else [None]
    if None in parts:
        return None
    kind = type(cond).__name__
    if kind == "And":
        return all(parts)
    if kind == "Or":
        return any(parts)
    if kind == "Not" and len(parts) == 1:
        return not parts[0]
    return None


_SIGN_RELATIONS = (se.StrictLessThan, se.LessThan, se.Equality, se.Unequality)


def _first_relation(cond: Any) -> Any:
    """A relation of ``cond`` (a relation, or ``And`` / ``Or`` / ``Not`` of relations), else
    ``None``."""
    if isinstance(cond, _SIGN_RELATIONS):
        return cond
    if isinstance(cond, _BOOLEAN) and cond.args:
        for a in cond.args:
            r = _first_relation(a)
            if r is not None:
                return r
    return None


def _sign_table(pairs: list[tuple[Any, Any]]) -> tuple[Any, tuple[Any, Any, Any]] | None:
    """A ``Piecewise`` (as its branches) that is a step in one difference ``d``: rational values
    whose conditions compare rational multiples of ``d`` with 0 (``0 <= x``, ``x <= 0``,
    ``2 x < 0``), as ``(d, (value where d < 0, where d = 0, where d > 0))`` (``d`` as
    :func:`_scaled_difference` writes it); else ``None``."""
    if not any(c != se.true for _, c in pairs) or \
            not all(isinstance(v, se.Rational) for v, _ in pairs):  # fmt: skip
        return None
    first = next((r for _, c in pairs if (r := _first_relation(c)) is not None), None)
    scaled = None if first is None else _scaled_difference(first.args[1] - first.args[0])
    if scaled is None:
        return None
    d = scaled[0]
    values = []
    for sign in (-1, 0, 1):
        for v, c in pairs:
            holds = _condition_at(c, d, sign)
            if holds is None:
                return None
            if holds:
                values.append(v)
                break
        else:
            return None  # no branch there (not a Piecewise symengine builds)
    return d, (values[0], values[1], values[2])


_STEPS: dict[Any, Any] = {}


def _step_of(p: Any) -> tuple[Any, tuple[Any, Any, Any]] | None:
    """:func:`_sign_table` of the ``Piecewise`` ``p``, memoised."""
    hit = _STEPS.get(p, _STEPS)
    if hit is _STEPS:
        a = p.args
        hit = _sign_table([(a[k], a[k + 1]) for k in range(0, len(a), 2)])
        if len(_STEPS) > 100000:
            _STEPS.clear()
        _STEPS[p] = hit
    return hit  # type: ignore[return-value]


def _sign_pairs(d: Any, values: tuple[Any, Any, Any]) -> list[tuple[Any, Any]]:
    """The branches of the one form of a step in ``d`` with ``values`` (where ``d < 0``,
    ``d = 0``, ``d > 0``): three values as the tie conventions write them (``d < 0``, then
    ``0 < d``, then the tie), two with the condition of the value that differs (``0 <= d``
    where the tie takes the positive side's)."""
    neg, zero, pos = values
    if neg == zero == pos:
        return [(neg, se.true)]
    if neg == zero:
        return [(pos, se.StrictLessThan(ZERO, d)), (neg, se.true)]
    if pos == zero:
        return [(pos, se.LessThan(ZERO, d)), (neg, se.true)]
    if neg == pos:
        return [(zero, se.Eq(d, ZERO)), (neg, se.true)]
    return [(neg, se.StrictLessThan(d, ZERO)), (pos, se.StrictLessThan(ZERO, d)), (zero, se.true)]


def _piecewise_factors(e: Any) -> bool:
    """Whether a monomial of the expanded ``e`` has a ``Piecewise`` factor (or a power of one):
    a look at the top of ``e`` only (where :func:`_sign_tables_merged` looks)."""
    for t in e.args if isinstance(e, se.Add) else (e,):
        for f in t.args if isinstance(t, se.Mul) else (t,):
            base = f.args[0] if isinstance(f, se.Pow) else f
            if isinstance(base, se.Piecewise):
                return True
    return False


def _sign_tables_merged(e: Any) -> Any:
    """``e`` (expanded) with, in every monomial, the steps in one difference ``d``
    (:func:`_sign_table`; their integer powers too) multiplied into one step in the form of
    :func:`_sign_pairs`: JAX's derivative of a ``max`` at a tie, ``[0 <= d] / ([d <= 0] +
    [0 < d]/2)``, and the reference's ``Piecewise((0, d < 0), (1, 0 < d), (1/2, True))`` are
    then one term (a ReLU's mask inside the next layer's sum, one atom on both sides). A
    negative power of a step that is 0 somewhere is left as it is."""
    terms = e.args if isinstance(e, se.Add) else (e,)
    out = [_merged_monomial(t) for t in terms]
    return e if all(a is b for a, b in zip(out, terms, strict=True)) else se.Add(*out)


def _merged_monomial(t: Any) -> Any:
    """:func:`_sign_tables_merged` for one monomial."""
    if not isinstance(t, se.Mul | se.Pow):
        return t
    factors = t.args if isinstance(t, se.Mul) else (t,)
    groups: dict[Any, list[tuple[Any, int]]] = {}
    tables: dict[Any, tuple[Any, Any, Any]] = {}
    rest = []
    for f in factors:
        base, n = (f.args[0], f.args[1]) if isinstance(f, se.Pow) else (f, ONE)
        table = None
        if isinstance(base, se.Piecewise) and isinstance(n, se.Integer):
            table = _step_of(base)
        if table is None or (n < 0 and any(v == 0 for v in table[1])):
            rest.append(f)
            continue
        groups.setdefault(table[0], []).append((f, int(n)))
        tables[f] = table[1]
    changed = False
    for d, items in groups.items():
        if len(items) == 1 and items[0][1] > 0:
            rest.append(items[0][0])
            continue
        values = [ONE, ONE, ONE]
        for f, n in items:
            values = [v * w**n for v, w in zip(values, tables[f], strict=True)]
        flat = [x for pair in _sign_pairs(d, tuple(values)) for x in pair]  # type: ignore[arg-type]
        rest.append(_piecewise_args(flat))
        changed = True
    return se.Mul(*rest) if changed else t


#: Rounds of :func:`_sign_tables_added` (one difference each), at most.
MAX_STEP_ROUNDS = 64


def _sign_tables_added(e: Any) -> Any:
    """``e`` (an expanded sum, steps in one difference multiplied, :func:`_sign_tables_merged`)
    with the monomials ``c_i r s_i`` that differ only in a rational ``c_i`` and a step ``s_i``
    in one difference ``d`` added into one, ``r s`` with ``s`` the step of the values
    ``sum_i c_i s_i`` where ``d`` is negative, zero and positive (in the form of
    :func:`_sign_pairs`): JAX's derivative of a leaky ReLU ``max(v, a v)``, ``[0 < v] + a [v <
    0] + ...``, and the reference's one step with those values are then one term. One
    difference per round, until no two monomials add up."""
    for _ in range(MAX_STEP_ROUNDS):
        terms = e.args if isinstance(e, se.Add) else (e,)
        if len(terms) < 2:
            return e
        groups: dict[tuple[Any, Any], list[tuple[int, Any]]] = {}
        for i, t in enumerate(terms):
            for key, values in _steps_of(t):
                groups.setdefault(key, []).append((i, values))
        first = next((k for k, v in groups.items() if len(v) > 1), None)
        if first is None:
            return e
        # every group of that difference (a monomial has one step in it: they are disjoint)
        merged, used = [], set()
        for (d, rest), members in groups.items():
            if d != first[0] or len(members) < 2:
                continue
            total = [ZERO, ZERO, ZERO]
            for _, values in members:
                total = [a + b for a, b in zip(total, values, strict=True)]
            flat = [x for pair in _sign_pairs(d, tuple(total)) for x in pair]  # type: ignore[arg-type]
            merged.append(se.expand(rest * _piecewise_args(flat)))
            used |= {i for i, _ in members}
        e = se.Add(*merged, *[t for i, t in enumerate(terms) if i not in used])
    return e


def _steps_of(t: Any) -> list[tuple[tuple[Any, Any], tuple[Any, Any, Any]]]:
    """For a monomial ``t``, each of its steps (a ``Piecewise`` factor, :func:`_sign_table`) as
    ``((d, the other factors but the rational coefficient), the step's values times that
    coefficient)``."""
    factors = t.args if isinstance(t, se.Mul) else (t,)
    coeff = se.Mul(*[f for f in factors if isinstance(f, se.Number)])
    if not isinstance(coeff, se.Rational) or coeff == 0:
        return []
    others = [f for f in factors if not isinstance(f, se.Number)]
    out = []
    for n, f in enumerate(others):
        if not isinstance(f, se.Piecewise):
            continue
        table = _step_of(f)
        if table is None:
            continue
        d, values = table
        rest = se.Mul(*[g for m, g in enumerate(others) if m != n])
        out.append(((d, rest), (values[0] * coeff, values[1] * coeff, values[2] * coeff)))
    return out


def _lt_difference(c: Any) -> Any:
    """``q - p`` for a strict relation ``p < q`` (it holds exactly where that is positive),
    else ``None``."""
    if isinstance(c, se.StrictLessThan):
        return se.expand(c.args[1] - c.args[0])
    return None


def _coefficient(t: Any) -> Any:
    """A monomial's numeric coefficient."""
    if isinstance(t, se.Number):
        return t
    if isinstance(t, se.Mul) and isinstance(t.args[0], se.Number):
        return t.args[0]
    return ONE


def _rest_text(t: Any) -> str:
    """The text of a monomial without its numeric coefficient (``""`` for a number)."""
    if isinstance(t, se.Number):
        return ""
    if isinstance(t, se.Mul) and isinstance(t.args[0], se.Number):
        return str(se.Mul(*t.args[1:]))
    return str(t)


def _common_factor(values: Sequence[Any]) -> Any:
    """The rational factor taken out of a ``Piecewise``'s values, so that a term has one normal
    form (``-dx Piecewise((-1, c), (0, True))`` is ``dx Piecewise((1, c), (0, True))``): the
    coefficient of the first nonzero value's monomial of least text (without its coefficient),
    which is 1 after it is taken out. ``f Piecewise((v_i / f, c_i))`` is the same function for
    any rational ``f != 0`` (the conditions and their order are kept), and ``r P`` gets the
    same values as ``P`` for a rational ``r``. 1 where that coefficient is not rational or a
    value holds an infinity (a masked entry ``-oo`` stays as it is)."""
    if any(isinstance(v, _BOOLEAN) or has_infinity(v) for v in values):
        return ONE
    first = next((v for v in values if v != 0), None)
    if first is None:
        return ONE
    terms = first.args if isinstance(first, se.Add) else (first,)
    lead = terms[0] if len(terms) == 1 else min(terms, key=_rest_text)
    c = _coefficient(lead)
    return c if isinstance(c, se.Rational) else ONE  # se.Integer is one too


def _scaled(v: Any, r: Any) -> Any:
    """``r v`` with ``r`` a rational, distributed over the monomials of ``v``."""
    if isinstance(v, se.Add):
        return se.Add(*[r * t for t in v.args])
    return r * v


def _literals(c: Any) -> tuple[Any, ...]:
    """The conjuncts of a condition."""
    return tuple(c.args) if isinstance(c, se.And) else (c,)


def _negated(lit: Any) -> Any:
    """The negation of an order literal as an order literal (``not a <= b`` is ``b < a`` for
    reals), or ``None``."""
    if isinstance(lit, se.LessThan):
        return se.StrictLessThan(lit.args[1], lit.args[0])
    if isinstance(lit, se.StrictLessThan):
        return se.LessThan(lit.args[1], lit.args[0])
    return None


def disjoint(a: Any, b: Any) -> bool:
    """Whether the conditions ``a`` and ``b`` (conjunctions) cannot hold together, seen
    syntactically: one has a conjunct whose negation is a conjunct of the other."""
    lb = set(_literals(b))
    return any(_negated(x) in lb for x in _literals(a))


def _drop_default_branches(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Branches of a ``Piecewise`` (ending in a ``True`` branch, the default) that give the
    default's value and whose condition is disjoint from every later branch of another value
    are dropped: where such a condition holds, the rest of the chain gives the default anyway.
    (The first-max one-hot of a window written as a chain of argmax conditions,
    ``Piecewise((0, c_0), (1, c_1), (0, c_2), ..., (0, True))``, becomes
    ``Piecewise((1, c_1), (0, True))``.)"""
    if len(pairs) < 2 or pairs[-1][1] != se.true:
        return pairs
    default = pairs[-1][0]
    out: list[tuple[Any, Any]] = []
    for i, (v, c) in enumerate(pairs[:-1]):
        if v == default and all(w == default or disjoint(c, d) for w, d in pairs[i + 1 : -1]):
            continue
        out.append((v, c))
    out.append(pairs[-1])
    return out


def _idempotent_brackets(e: Any) -> Any:
    """``[c]^n = [c]`` in every monomial of an expanded sum, and a monomial whose brackets are
    never all 1 together (:func:`_empty_brackets`) dropped: the pieces of a concatenation over
    ``n`` blocks multiplied out, ``prod_i (1 - [c_i])``, are ``n + 1`` monomials, not ``2^n``."""
    terms = e.args if isinstance(e, se.Add) else (e,)
    changed = False
    out = []
    for t in terms:
        factors = _factors(t)
        if _empty_brackets(factors):
            changed = True
            continue
        new = [f.args[0] if isinstance(f, se.Pow) and is_bracket(f.args[0])
               and isinstance(f.args[1], se.Integer) and int(f.args[1]) > 0 else f
               for f in factors]  # fmt: skip
        if any(a is not b for a, b in zip(new, factors, strict=True)):
            changed = True
            out.append(se.Mul(*new))
        else:
            out.append(t)
    return se.Add(*out) if changed else e


def _empty_brackets(factors: Sequence[Any]) -> bool:
    """Whether a monomial (its ``factors``) is 0 because its single-variable brackets are
    never all 1 together (:func:`_exclusive`: they bound an index, with its range, to no
    integer), while no other factor holds an infinity literal: the brackets select
    (:func:`_selected_off`), and IEEE's ``0 * -oo`` is NaN. Memoised on the brackets."""
    brackets, others = [], []
    for f in factors:
        b = f.args[0] if isinstance(f, se.Pow) and isinstance(f.args[1], se.Integer) and int(
            f.args[1]) > 0 else f  # fmt: skip
        if name_of(b) in ("_GE", "_EQ"):
            brackets.append(b)
        else:
            others.append(f)
    if len(brackets) < 2:
        return False  # one bracket alone is decided by the ranges where it is made (ge, eq)
    key = se.Mul(*dict.fromkeys(brackets))
    empty = _EMPTY.get(key)
    if empty is None:
        empty = _exclusive(ONE, key, facts=True)
        if len(_EMPTY) > 200000:
            _EMPTY.clear()
        _EMPTY[key] = empty
    return empty and not any(has_infinity(f) for f in others)


_EMPTY: dict[Any, bool] = {}
