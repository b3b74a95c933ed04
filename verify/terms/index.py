"""Integer index arithmetic: the one linearizer (:func:`linear`), intervals over the symbols'
ranges, floor division and modulo simplified by the ranges, residues and congruences."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import symengine as se

from .._dims import sign
from .core import (
    BOUND,
    ONE,
    RANGES,
    SIZES,
    UPPER,
    ZERO,
    fresh,
    has_floor,
    is_read,
    name_of,
    rebuild,  # fmt: skip
)


def read(name: str, idx: Sequence[Any]) -> Any:
    """The read ``name(idx...)`` (indices simplified)."""
    return se.Function(name)(*[simplify_index(i) for i in idx])


def flat_index(idx: Sequence[Any], shape: Sequence[int]) -> Any:
    """The row-major flat index of ``idx`` in an array of ``shape``."""
    flat = ZERO
    for i, d in zip(idx, shape, strict=True):
        flat = flat * int(d) + i
    return simplify_index(se.expand(flat))


def delinearize(flat: Any, shape: Sequence[int]) -> tuple[Any, ...]:
    """The multi-index of a flat index in an array of ``shape`` (row-major)."""
    out = []
    stride = math.prod(shape)
    for d in shape:
        stride //= d
        out.append(mod(floor_div(flat, stride), d) if stride else ZERO)
    return tuple(out)


def _symbolic_bound(e: Any) -> bool:
    """Whether ``e`` mentions a size symbol or an index bounded by one."""
    return bool(SIZES or UPPER) and any(v in SIZES or v in UPPER for v in e.free_symbols)


# -- integer index expressions -----------------------------------------------------------------


def linear(e: Any) -> tuple[dict[Any, Any], Any] | None:
    """``e`` as ``sum(c_v * v) + c`` over index symbols and opaque integer atoms (nat reads,
    floors), with rational coefficients; ``None`` if it is not of that form."""
    e = se.expand(e)
    coeffs: dict[Any, Any] = {}
    const = ZERO
    terms = e.args if isinstance(e, se.Add) else (e,)
    for t in terms:
        if isinstance(t, se.Number):
            const = const + t
            continue
        c, rest = ONE, []
        for f in t.args if isinstance(t, se.Mul) else (t,):
            if isinstance(f, se.Number):
                c = c * f
            else:
                rest.append(f)
        if len(rest) != 1:
            return None
        (v,) = rest
        if not (isinstance(v, se.Symbol | se.floor) or is_read(v)):
            return None
        coeffs[v] = coeffs.get(v, ZERO) + c
    return {v: c for v, c in coeffs.items() if c != 0}, const


def interval(e: Any, facts: bool = False) -> tuple[Fraction | None, Fraction | None]:
    """Inclusive bounds of an index expression over its symbols' ranges (``None``: unbounded).
    With ``facts``, only the ranges that are facts (free element indices, index inputs) count,
    not those of bound variables."""
    if isinstance(e, se.Number):
        v = Fraction(str(e))
        return v, v
    if isinstance(e, se.Symbol):
        r = _OVERRIDE.get(e)
        if r is None:
            r = RANGES.get(e)
            if r is None or (facts and e in BOUND):
                return None, None
        return Fraction(r[0]), None if r[1] is None else Fraction(r[1] - 1)
    if isinstance(e, se.floor):
        lo, hi = interval(e.args[0], facts)
        return (
            None if lo is None else Fraction(math.floor(lo)),
            None if hi is None else Fraction(math.floor(hi)),
        )
    if is_read(e):
        r = NAT_RANGES.get(name_of(e))
        if r is None:
            return None, None
        return Fraction(r[0]), None if r[1] is None else Fraction(r[1] - 1)
    if isinstance(e, se.Add):
        lo, hi = Fraction(0), Fraction(0)
        for a in e.args:
            alo, ahi = interval(a, facts)
            lo = None if lo is None or alo is None else lo + alo
            hi = None if hi is None or ahi is None else hi + ahi
        return lo, hi
    if isinstance(e, se.Mul):
        nums = [a for a in e.args if isinstance(a, se.Number)]
        rest = [a for a in e.args if not isinstance(a, se.Number)]
        if len(rest) == 1 and len(nums) == 1:
            c = Fraction(str(nums[0]))
            lo, hi = interval(rest[0], facts)
            if c >= 0:
                return (None if lo is None else c * lo, None if hi is None else c * hi)
            return (None if hi is None else c * hi, None if lo is None else c * lo)
        return None, None
    if isinstance(e, se.Max | se.Min):
        bounds = [interval(a, facts) for a in e.args]
        pick = max if isinstance(e, se.Max) else min
        los = [b[0] for b in bounds]
        his = [b[1] for b in bounds]
        lo = None if any(v is None for v in los) else pick(los)  # type: ignore[type-var]
        hi = None if any(v is None for v in his) else pick(his)  # type: ignore[type-var]
        if isinstance(e, se.Max):
            known = [v for v in los if v is not None]
            lo = max(known) if known else None
        else:
            known = [v for v in his if v is not None]
            hi = min(known) if known else None
        return lo, hi
    return None, None


#: Narrowed ranges that hold inside one product (from its brackets), see :func:`_refine`.
_OVERRIDE: dict[Any, tuple[int, int | None]] = {}
#: :data:`_OVERRIDE` as a hashable key (set with it), for the memo of :func:`simplify_index`.
_OVERRIDE_KEY: list[frozenset] = [frozenset()]

#: Ranges of nat tensors read inside index expressions (by the read's name).
NAT_RANGES: dict[str, tuple[int, int | None]] = {}


def floor_div(e: Any, d: int) -> Any:
    """``floor(e / d)`` for a positive integer ``d``, simplified."""
    return simplify_index(se.floor(e / d))


def mod(e: Any, d: int) -> Any:
    """``e mod d`` (in ``[0, d)``) for a positive integer ``d``."""
    return simplify_index(e - d * se.floor(e / d))


_SIMPLIFY: dict[Any, Any] = {}


def simplify_index(e: Any) -> Any:
    """Remove the floors of an index expression that the ranges of its symbols allow:
    ``floor((d * a + r) / d) = a + floor(r / d)`` and ``floor(r / d) = m`` when ``r`` stays in
    ``[m d, (m + 1) d)``; ``Max`` / ``Min`` decided by intervals likewise. Memoised (ranges of
    symbols never change); under the narrowed ranges of :func:`_refine`, keyed by them too
    (the result is a function of the term and the ranges it reads)."""
    if isinstance(e, se.Number | se.Symbol) or not isinstance(e, se.Basic):
        return e
    if not e.args:
        return e
    key = (e, _OVERRIDE_KEY[0]) if _OVERRIDE else e
    hit = _SIMPLIFY.get(key)
    if hit is None:
        hit = _simplify_index(e)
        if len(_SIMPLIFY) > 200000:
            _SIMPLIFY.clear()
        _SIMPLIFY[key] = hit
    return hit


def _simplify_index(e: Any) -> Any:
    if isinstance(e, se.floor):
        return _simplify_floor(simplify_index(e.args[0]))
    if isinstance(e, se.Max | se.Min):
        args = [simplify_index(a) for a in e.args]
        return _simplify_extremum(args, isinstance(e, se.Max))
    if is_read(e):
        return e
    args = [simplify_index(a) for a in e.args]
    return se.expand(rebuild(e, args))


def _simplify_floor(inner: Any) -> Any:
    if isinstance(inner, se.Number):
        return se.Integer(math.floor(Fraction(str(inner))))
    lin = linear(inner)
    if lin is None:
        return se.floor(inner)
    coeffs, const = lin
    if len(coeffs) == 1:
        ((f, c),) = coeffs.items()
        if isinstance(f, se.floor) and Fraction(str(c)).numerator == 1 and c > 0:
            # floor((floor(y / a) + m) / b) = floor((y + m a) / (a b)) for integers a, b > 0
            y_over_a = f.args[0]
            ylin = linear(y_over_a)
            b = Fraction(str(c)).denominator
            m = Fraction(str(const)) * b
            if ylin is not None and m.denominator == 1:
                ycoeffs, yconst = ylin
                a = math.lcm(*[Fraction(str(v)).denominator for v in [*ycoeffs.values(), yconst]])
                return _simplify_floor(se.expand((y_over_a * a + int(m) * a) / (a * b)))
    dens = [Fraction(str(c)).denominator for c in [*coeffs.values(), const]]
    d = math.lcm(*dens) if dens else 1
    if d == 1:
        return inner  # already an integer expression
    # inner = (sum(a_v v) + c) / d with integers a_v, c
    ints = {v: int(Fraction(str(c)) * d) for v, c in coeffs.items()}
    c0 = int(Fraction(str(const)) * d)
    whole = ZERO
    rest = ZERO
    for v, a in ints.items():
        q, r = divmod(a, d)
        whole = whole + q * v
        rest = rest + r * v
    qc, rc = divmod(c0, d)
    whole = whole + qc
    rest = rest + rc
    lo, hi = interval(rest)
    if lo is not None and hi is not None:
        m_lo, m_hi = math.floor(lo / d), math.floor(hi / d)
        if m_lo == m_hi:
            return se.expand(whole + m_lo)
    if rest == 0:
        return se.expand(whole)
    small = _floor_by_gcd({v: a % d for v, a in ints.items() if a % d}, rc, d)
    if small is not None:
        return se.expand(whole + small)
    return se.expand(whole + se.floor(rest / d))


#: The remainder ``v mod k`` of an index symbol as a symbol of range ``[0, k)``, by (v, k).
_MODS: dict[tuple[Any, int], Any] = {}


def _floor_by_gcd(ints: dict[Any, int], c0: int, d: int) -> Any:
    """``floor((sum(a_v v) + c0) / d)`` without the terms that cannot reach the next multiple:
    with ``g`` dividing ``d`` and the coefficients of some terms, and the other terms plus a
    share ``s`` of the constant (``s`` congruent to ``c0`` mod ``g``: the least at or above
    minus their lower bound) staying in ``[0, g)``, it is ``floor(P / (d / g))`` for ``P`` the
    first terms divided by ``g`` plus ``(c0 - s) / g``. A symbol ``v`` that occurs beside
    ``floor(v / k)`` is first written ``k floor(v / k) + (v mod k)``, so
    ``floor((v + 2 floor(v / 2)) / 4)`` is ``floor(v / 2)``. ``None`` when no such ``g``
    exists."""
    ints = dict(ints)
    back: dict[Any, Any] = {}
    for f in list(ints):
        if not isinstance(f, se.floor):
            continue
        lin = linear(f.args[0])
        if lin is None or len(lin[0]) != 1 or lin[1] != 0:
            continue
        ((v, c),) = lin[0].items()
        c = Fraction(str(c))
        if not isinstance(v, se.Symbol) or v not in ints or c.numerator != 1:
            continue
        k = c.denominator
        m = _MODS.get((v, k))
        if m is None:
            m = _MODS[(v, k)] = fresh("_mod", 0, k, bound=False)
        a = ints.pop(v)
        ints[f] = ints.get(f, 0) + a * k
        ints[m] = a
        back[m] = v - k * f
    for g in sorted({math.gcd(d, a) for a in ints.values()} - {1}, reverse=True):
        big = {v: a for v, a in ints.items() if a % g == 0}
        lo, hi = interval(se.Add(*[a * v for v, a in ints.items() if v not in big]))
        if lo is None or hi is None:
            continue
        # the constant's share s (s = c0 mod g) that keeps the other terms plus s in [0, g):
        # the least one at or above -lo, e.g. floor((5 a + b + 99) / 100) = floor((a + 20) / 20)
        # for b in [1, 5] (s = -1: a padded window's flat index, a reshape's block)
        s = -math.floor(lo) + (c0 + math.floor(lo)) % g
        if s > g - 1 - math.ceil(hi):
            continue
        p = se.Add(*[(a // g) * v for v, a in big.items()]) + (c0 - s) // g
        out = _simplify_floor(se.expand(p / (d // g)))
        return se.expand(out.xreplace(back)) if back else out
    return None


def _simplify_extremum(args: list[Any], greater: bool) -> Any:
    keep: list[Any] = []
    for i, a in enumerate(args):
        alo, ahi = interval(a)
        dominated = False
        for j, b in enumerate(args):
            if i == j:
                continue
            blo, bhi = interval(b)
            # a tie keeps the first of the two
            if (
                greater
                and ahi is not None
                and blo is not None
                and (ahi < blo or (ahi == blo and j < i))
            ):
                dominated = True
            if (
                not greater
                and alo is not None
                and bhi is not None
                and (alo > bhi or (alo == bhi and j < i))
            ):
                dominated = True
        if not dominated:
            keep.append(a)
    if not keep:
        keep = args[:1]
    if len(keep) == 1:
        return keep[0]
    return se.Max(*keep) if greater else se.Min(*keep)


# -- brackets ----------------------------------------------------------------------------------


def _integer_form(e: Any) -> tuple[dict[Any, int], int] | None:
    """``e`` scaled to integer coefficients (positive scale), if linear."""
    lin = linear(e)
    if lin is None:
        return None
    coeffs, const = lin
    dens = [Fraction(str(c)).denominator for c in [*coeffs.values(), const]]
    d = math.lcm(*dens) if dens else 1
    return {v: int(Fraction(str(c)) * d) for v, c in coeffs.items()}, int(Fraction(str(const)) * d)


def _assemble(coeffs: Mapping[Any, int], const: int) -> Any:
    return se.Add(*[c * v for v, c in coeffs.items()], se.Integer(const))


def _tightest(bounds: list[Any], pick: Callable[..., Any]) -> list[Any]:
    """The bounds with the integer ones reduced to the tightest (``pick``: max for lower
    bounds, min for upper ones); the others kept, but for a bound that another is tighter
    than for every size (``k <= 2 n`` beside ``k <= 2 n - 1``: their difference is a
    polynomial in size symbols of one sign, :mod:`verify._dims`)."""
    ints = [int(b) for b in bounds if isinstance(b, se.Integer)]
    rest = [b for b in bounds if not isinstance(b, se.Integer)]
    out = rest + ([se.Integer(pick(ints))] if ints else [])
    if not rest or not SIZES:
        return out
    looser = ("+", "0+", "0") if pick is min else ("-", "0-", "0")
    kept: list[Any] = []
    for b in out:
        if any(sign(se.expand(b - other)) in looser for other in kept):
            continue  # as loose as one kept already
        kept = [o for o in kept if sign(se.expand(o - b)) not in looser]
        kept.append(b)
    return kept


#: A bound variable inside ``floor(a k / d)`` is split into ``m = d / gcd(a, d)`` residue
#: classes when ``m`` is at most this (dilations and strided reshapes).
RESIDUE_MAX = 1 << 20


def _residue_of(k: Any, factors: Sequence[Any]) -> tuple[int, int] | None:
    """The split ``k = m u + r`` (``r0 <= r < r0 + m``) that removes a floor of ``k``, as
    ``(m, r0)``: for ``floor((a k + b v + c) / d)`` with ``d | b`` for every other variable,
    ``m = d / gcd(a, d)`` makes it ``(a / m) ... u + floor((a r + c) / d)``, and the last floor
    must be constant over the window of ``r`` (else splitting would not remove it): the window
    :func:`_residue_window` gives (``r0 = 0`` where that one works). Any window is sound, the
    substitution being a bijection of the integers; the window only makes it useful."""
    best = None
    for f in factors:
        if not has_floor(f):  # memoised: a factor's atoms walked only where a floor is
            continue
        for fl in f.atoms(se.floor):
            if k not in fl.free_symbols:
                continue
            lin = linear(fl.args[0])
            if lin is None:
                continue
            coeffs, const = lin
            d = math.lcm(*[Fraction(str(c)).denominator for c in [*coeffs.values(), const]])
            ints = {v: int(Fraction(str(c)) * d) for v, c in coeffs.items()}
            a = ints.get(k)
            if not a or any(c % d for v, c in ints.items() if v != k):
                continue
            if any(k in v.free_symbols for v in ints if v != k):
                continue
            m = d // math.gcd(a, d)
            if m < 2 or m > RESIDUE_MAX:
                continue
            r0 = _residue_window(a, int(Fraction(str(const)) * d), d, m)
            if r0 is not None and (best is None or (m, r0) < best):
                best = (m, r0)
    return best


def _residue_window(a: int, c: int, d: int, m: int) -> int | None:
    """The ``r0`` in ``[0, m)`` with ``floor((a r + c) / d)`` constant over ``r0 <= r < r0 + m``
    (``m = d / gcd(a, d)``), or ``None`` when no window of ``m`` values has one value.

    With ``g = gcd(a, d)`` and ``a = g a'``, the ``m`` values ``a r + c`` are ``g`` apart, and
    ``g (m - 1) = d - g``, so they lie in one block ``[j d, (j + 1) d)`` only if ``a' = +-1``
    and the block starts where they do: for ``a' = 1``, ``(a r0 + c) mod d < g``, i.e.
    ``c // g + r0 = 0 (mod m)``; for ``a' = -1`` the values fall, and the first must be in the
    block's last ``g``: ``c // g - r0 = -1 (mod m)``."""
    g = math.gcd(a, d)
    if abs(a) != g:
        return None
    r0 = (-(c // g)) % m if a > 0 else (c // g + 1) % m
    lo, hi = sorted((a * r0 + c, a * (r0 + m - 1) + c))
    return r0 if lo // d == hi // d else None  # the closed form above, checked


def _congruence_solution(e: Any, k: Any, factors: Sequence[Any]) -> Any:
    """The value of ``k`` for ``[e == 0]`` when ``e = n - m floor(n / m)`` (``n mod m``) with
    ``n = a k + r``, ``gcd(a, m) = 1``, and the range brackets of ``k`` in ``factors`` bound it
    to at most ``m`` values ``[L, U]``: the one ``k = L + (c - L) mod m`` with
    ``c = -r a^-1 (mod m)`` (the brackets, substituted, say whether it is in range); else
    ``None``."""
    form = _integer_form(e)
    if form is None:
        return None
    coeffs, _ = form
    floors = [v for v in coeffs if isinstance(v, se.floor) and k in v.free_symbols]
    if len(floors) != 1 or abs(coeffs[floors[0]]) < 2:
        return None
    (F,) = floors
    if coeffs[F] > 0:  # [e == 0] is [-e == 0]
        e = se.expand(-e)
        coeffs = {v: -c for v, c in coeffs.items()}
    m = -int(coeffs[F])
    n = se.expand(e + m * F)
    if se.expand(n - m * F.args[0]) != 0:
        return None
    lin = _integer_form(n)
    if lin is None or k not in lin[0]:
        return None
    a = int(lin[0][k])
    others = {v: c for v, c in lin[0].items() if v != k}
    if any(k in v.free_symbols for v in others) or math.gcd(a, m) != 1:
        return None
    c = se.expand(-_assemble(others, lin[1]) * (pow(a, -1, m)))
    lows, highs, _ = _bounds_of(k, factors)
    for L in lows:
        for U in highs:
            width = simplify_index(se.expand(U - L))
            if isinstance(width, se.Integer) and 0 <= int(width) < m:
                return simplify_index(se.expand(L + mod(se.expand(c - L), m)))
    return None


def _bounds_of(k: Any, factors: Sequence[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Lower and upper bounds of ``k`` from its ``_GE`` brackets (``a k + r >= 0`` gives
    ``k >= ceil(-r / a)`` or ``k <= floor(r / -a)``), and the other factors."""
    lows, highs, others = [], [], []
    for f in factors:
        if name_of(f) == "_GE":
            form = _integer_form(f.args[0])
            if form is not None:
                coeffs, const = form
                a = coeffs.get(k)
                if a and not any(k in getattr(v, "free_symbols", set()) for v in coeffs if v != k):
                    rest = _assemble({v: c for v, c in coeffs.items() if v != k}, const)
                    if a > 0:  # k >= ceil(-rest / a) = floor((a - 1 - rest) / a)
                        lows.append(floor_div(se.expand(a - 1 - rest), a) if a > 1
                                    else se.expand(-rest))  # fmt: skip
                    else:  # k <= floor(rest / -a)
                        highs.append(floor_div(rest, -a) if a < -1 else se.expand(rest))
                    continue
        others.append(f)
    return lows, highs, others


def _single_var_bracket(f: Any) -> bool:
    form = _integer_form(f.args[0])
    return form is not None and len(form[0]) == 1
