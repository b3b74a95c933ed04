"""Certified numeric counterexamples for tensor terms: ball arithmetic over whole tables.

Where a tensor comparison is neither proved nor refuted symbolically and one element is too
large to write out (an element of an attention output at n 128, d 768 is a sum of about 10^7
products), :func:`find_mismatch` evaluates both terms at concrete inputs, every element at once,
and reports an element where they certainly differ.

* **Inputs.** Every leaf element is a small dyadic number drawn from a hash of the leaf's name,
  the element's index and a seed (:func:`leaf_values` regenerates them), scaled by a power of 2;
  a leaf's domain is respected (``positive``, ``unit``, ``nonzero``).
* **Tables.** A term is evaluated to a table over the index variables it mentions: free element
  indices (every element at once, or one fixed element) and bound summation variables. A sum of
  a product is one ``numpy.einsum`` over the factors' tables, so a matmul chain costs what
  NumPy's contraction costs, never the product of all ranges.
* **Balls.** Every real value is a float64 midpoint and a radius that encloses the exact value
  of the term at those inputs. Each IEEE operation's rounding is bounded (``+ - * /`` and
  ``sqrt`` are correctly rounded; a sum or contraction of ``K`` roundings deep is within
  ``gamma_K = K u / (1 - K u)`` of its exact value relative to the sum of absolute values), and
  the radius is computed rounding upwards. ``exp`` is evaluated by range reduction and a Taylor
  polynomial in ball arithmetic with its remainder bounded, so no libm accuracy is trusted;
  other functions go through mpmath's interval arithmetic, one call per distinct argument.
  Index arithmetic (reads' indices, brackets, floors) is exact integer arithmetic.
* **Verdict.** A mismatch is reported only where the two balls are disjoint: the element then
  differs for those inputs, whatever the rounding. Anything this evaluator cannot enclose (a
  NaN, an overflow, a condition a ball does not decide, an unknown function) gives no
  certificate, so it never refutes what it cannot show. It never proves equality.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import symengine as se

from . import terms as T
from ._interval import NoEnclosure, enclose

#: The unit roundoff of float64.
U = 2.0**-53
#: Added to every radius: covers underflow (each at most 2^-1075 below the smallest normal
#: number), however many of them are summed (fewer than 2^70).
TINY = 2.0**-1000
#: No intermediate table may have more cells than this (else: no certificate).
CELLS_MAX = 1 << 24
#: Distinct arguments mpmath may be asked to enclose in one call (functions other than exp).
MP_MAX = 20000
#: Scales tried for the inputs, in order (powers of 2: the inputs stay exact).
SCALES = (2.0**-4, 1.0, 2.0**-8)


_DOMAINS = ("real", "positive", "unit", "nonzero")


class NoCertificate(Exception):
    """The evaluator cannot enclose a value (NaN, overflow, an undecided condition, ...)."""


class Unsupported(NoCertificate):
    """The term has something this evaluator does not evaluate at all (an unknown function, an
    index input, a derived atom of another kind): no input or element would help."""


# -- inputs ------------------------------------------------------------------------------------

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # multiplication modulo 2^64 is the point
        h = (h ^ (h >> np.uint64(30))) * _M1
        h = (h ^ (h >> np.uint64(27))) * _M2
    return h ^ (h >> np.uint64(31))


def _draw(
    name: str,
    idx: Sequence[np.ndarray],
    seed: int,
    scale: float,
    domain: str,
    shape: tuple[int, ...],
) -> np.ndarray:
    h0 = int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")
    h = np.full(shape, h0, dtype=np.uint64)
    for a in idx:
        h = _mix(h ^ np.broadcast_to(a, shape).astype(np.int64).view(np.uint64))
    k = ((h >> np.uint64(11)) % np.uint64(16)).astype(np.float64) + 1.0  # 1 .. 16
    if domain == "positive":
        v = k / 16.0
    elif domain == "unit":
        v = (2.0 * k - 1.0) / 32.0  # in (0, 1)
    else:
        sign = np.where((h >> np.uint64(7)) & np.uint64(1), -1.0, 1.0)
        v = sign * k / 16.0
    return v * scale


def leaf_values(
    name: str,
    shape: Sequence[int],
    *,
    seed: int = 0,
    scale: float = SCALES[0],
    domain: str = "real",
) -> np.ndarray:
    """The inputs a certified counterexample was found at: the value of every element of leaf
    ``name`` of ``shape`` (as named in the counterexample's evidence)."""
    shape = tuple(int(n) for n in shape)
    grids = np.indices(shape) if shape else []
    return _draw(name, list(grids), seed, scale, domain, shape)


# -- tables ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Tab:
    """Values over the index variables ``vars`` (sorted by name; one axis each, of the
    variable's length or 1): ``mid`` int64 (exact integers) or float64; ``rad`` None when
    exact, else the radius (float64) of each value's ball."""

    vars: tuple[Any, ...]
    mid: np.ndarray
    rad: np.ndarray | None = None

    @property
    def is_int(self) -> bool:
        return self.mid.dtype.kind in "iub"


def _const(v: float | int) -> Tab:
    if isinstance(v, int):
        return Tab((), np.asarray(v, dtype=np.int64))
    return Tab((), np.asarray(v, dtype=np.float64))


def _union(tabs: Sequence[Tab]) -> tuple[Any, ...]:
    out: set = set()
    for t in tabs:
        out.update(t.vars)
    return tuple(sorted(out, key=str))


def _guard(tabs: Sequence[Tab], vars: tuple) -> None:
    """No certificate (rather than a huge allocation) when ``tabs`` broadcast over ``vars``
    would have more than :data:`CELLS_MAX` cells."""
    sizes: dict[Any, int] = {}
    for t in tabs:
        for v, n in zip(t.vars, np.shape(t.mid), strict=False):
            sizes[v] = max(sizes.get(v, 1), n)
    if math.prod(sizes.get(v, 1) for v in vars) > CELLS_MAX:
        raise NoCertificate(f"a table of more than {CELLS_MAX} cells")


def _aligned(a: np.ndarray | None, have: tuple, want: tuple) -> np.ndarray | None:
    if a is None or have == want:
        return a
    shape = [a.shape[have.index(v)] if v in have else 1 for v in want]
    return a.reshape(shape)


def _up(x: np.ndarray) -> np.ndarray:
    """An upper bound of the exact value of a nonnegative expression computed in ``x`` with a
    few roundings (a relative 4u plus the underflow allowance)."""
    return x * (1.0 + 4 * U) + TINY


def _gamma(k: int) -> float:
    ku = (k + 1) * U
    return ku / (1.0 - ku) * (1.0 + 4 * U)


def _fl(t: Tab) -> tuple[np.ndarray, np.ndarray]:
    m = t.mid.astype(np.float64) if t.is_int else t.mid
    if t.is_int and np.any(np.abs(t.mid) >= 2**53):
        raise NoCertificate("an integer too large for float64")
    return m, (np.zeros(()) if t.rad is None else t.rad)


def _cells(vars: tuple, scope: Mapping[Any, tuple[int, int]]) -> int:
    return math.prod(scope[v][1] for v in vars)


def _check_size(vars: tuple, scope: Mapping[Any, tuple[int, int]]) -> None:
    if _cells(vars, scope) > CELLS_MAX:
        raise NoCertificate(f"a table of more than {CELLS_MAX} cells")


def _finish(vars: tuple, m: np.ndarray, r: np.ndarray, inf_in: np.ndarray | bool) -> Tab:
    """A ball result: NaN or an overflow (an infinity no input had) gives no certificate; an
    infinity carried from an input is exact."""
    if np.any(np.isnan(m)):
        raise NoCertificate("NaN")
    inf = ~np.isfinite(m)
    if np.any(inf):
        if np.any(inf & ~np.asarray(inf_in)):
            raise NoCertificate("overflow")
        r = np.where(inf, 0.0, r)
    if np.any(~np.isfinite(r)):
        raise NoCertificate("an unbounded radius")
    return Tab(vars, m, np.asarray(r, dtype=np.float64))


def _add(tabs: Sequence[Tab]) -> Tab:
    vars = _union(tabs)
    _guard(tabs, vars)
    if all(t.is_int for t in tabs):
        out = np.asarray(0, dtype=np.int64)
        for t in tabs:
            out = out + _aligned(t.mid, t.vars, vars)
        return Tab(vars, out)
    m = np.asarray(0.0)
    absum = np.asarray(0.0)
    rad = np.asarray(0.0)
    inf_in = np.asarray(False)
    for t in tabs:
        tm, tr = _fl(t)
        tm = _aligned(tm, t.vars, vars)
        m = m + tm
        with np.errstate(invalid="ignore"):
            absum = absum + np.abs(tm)
        if t.rad is not None:
            rad = rad + _aligned(tr, t.vars, vars)
        inf_in = inf_in | ~np.isfinite(tm)
    with np.errstate(invalid="ignore", over="ignore"):
        r = _up(rad + _gamma(len(tabs)) * absum)
    return _finish(vars, m, r, inf_in)


def _mul2(a: Tab, b: Tab) -> Tab:
    vars = _union((a, b))
    _guard((a, b), vars)
    if a.is_int and b.is_int:
        return Tab(vars, _aligned(a.mid, a.vars, vars) * _aligned(b.mid, b.vars, vars))
    am, ar = _fl(a)
    bm, br = _fl(b)
    am, bm = _aligned(am, a.vars, vars), _aligned(bm, b.vars, vars)
    ar = _aligned(ar, a.vars, vars) if a.rad is not None else ar
    br = _aligned(br, b.vars, vars) if b.rad is not None else br
    a_inf, b_inf = ~np.isfinite(am), ~np.isfinite(bm)
    if np.any(a_inf & (np.abs(bm) <= br)) or np.any(b_inf & (np.abs(am) <= ar)):
        raise NoCertificate("infinity times a ball containing 0")
    with np.errstate(invalid="ignore", over="ignore"):
        m = am * bm
        r = _up(np.abs(am) * br + ar * np.abs(bm) + ar * br + U * np.abs(m))
    return _finish(vars, m, r, a_inf | b_inf)


def _contract(tabs: Sequence[Tab], k: Any, n_k: int, scope: Mapping[Any, tuple[int, int]]) -> Tab:
    """``sum_k prod(tabs)`` (``k`` None: the product only), by ``einsum``."""
    if (k is None and len(tabs) <= 2) or any(not np.all(np.isfinite(_fl(t)[0])) for t in tabs):
        if k is not None:
            raise NoCertificate("an infinity inside a sum")
        out = tabs[0]
        for t in tabs[1:]:
            out = _mul2(out, t)
        return out
    vars = _union(tabs)
    _check_size(tuple(v for v in vars if v != k), scope)
    letters = {v: chr(97 + i) if i < 26 else chr(65 + i - 26) for i, v in enumerate(vars)}
    if len(vars) > 52:
        raise NoCertificate("more than 52 index variables in one product")
    out_vars = tuple(v for v in vars if v != k)
    spec = ",".join("".join(letters[v] for v in t.vars) for t in tabs)
    spec += "->" + "".join(letters[v] for v in out_vars)
    mids = [_fl(t)[0] for t in tabs]
    if all(t.is_int for t in tabs) and k is None:
        return Tab(out_vars, np.einsum(spec, *[t.mid for t in tabs]))
    m = np.einsum(spec, *mids, optimize="greedy")
    absm = [np.abs(x) for x in mids]
    a = np.einsum(spec, *absm, optimize="greedy")
    g = _gamma(len(tabs) + (n_k if k is not None else 0))
    if any(t.rad is not None for t in tabs):
        ups = [x + t.rad if t.rad is not None else x for x, t in zip(absm, tabs, strict=True)]
        u_ = np.einsum(spec, *ups, optimize="greedy")
        with np.errstate(over="ignore"):
            r = _up(u_ * (1.0 + 3 * g) - a * (1.0 - 4 * g))
    else:
        r = _up(a * (7 * g))
    # a sum over k of values that do not depend on k (size-1 axis) was summed once: scale
    if k is not None and k not in vars:
        m, r = m * n_k, _up(r * n_k + U * np.abs(m * n_k))
    return _finish(out_vars, m, np.maximum(r, 0.0), False)


def _recip(t: Tab) -> Tab:
    m, r = _fl(t)
    if np.any(np.abs(m) <= r) or np.any(m == 0):
        raise NoCertificate("division by a ball containing 0")
    inf = ~np.isfinite(m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        q = 1.0 / m
        low = (np.abs(m) - r) * (1.0 - 4 * U)  # a lower bound of |1/m|'s denominator
        rr = _up(r / np.abs(m) / low + U * np.abs(q))
    rr = np.where(inf, 0.0, rr)  # 1/inf = 0 exactly
    if np.any(~np.isfinite(q)):
        raise NoCertificate("overflow in a division")
    return Tab(t.vars, q, rr)


# -- intervals -----------------------------------------------------------------------------------


def _interval(t: Tab) -> tuple[np.ndarray, np.ndarray]:
    m, r = _fl(t)
    if t.rad is None:
        return m, m
    with np.errstate(invalid="ignore"):
        lo = np.where(r > 0, np.nextafter(m - r, -np.inf), m)
        hi = np.where(r > 0, np.nextafter(m + r, np.inf), m)
    return lo, hi


def _from_interval(vars: tuple, lo: np.ndarray, hi: np.ndarray) -> Tab:
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise NoCertificate("NaN")
    same = lo == hi
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.where(same, lo, 0.5 * lo + 0.5 * hi)
        r = np.where(same, 0.0, _up(np.maximum(hi - m, m - lo)))
    if np.any(~np.isfinite(r)):
        raise NoCertificate("an unbounded interval")
    return Tab(vars, m, r)


#: ln 2 = _LN2_HI + _LN2_LO + e, |e| < _LN2_ERR (fdlibm's split: k * _LN2_HI is exact for
#: |k| < 2^21, the hi part having 32 significant bits; tests/verify/test_tnumeric.py checks e).
_LN2_HI = float.fromhex("0x1.62e42fee00000p-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_LN2_ERR = 2e-26


def _exp(t: Tab) -> Tab:
    """``exp`` in ball arithmetic: ``x = k ln2 + s``, ``exp(s)`` by a Taylor polynomial in
    balls plus its remainder, times ``2^k`` (exact)."""
    m, r = _fl(t)
    m, r = np.broadcast_arrays(m, r)
    if np.any(m + r > 709.0):
        raise NoCertificate("exp overflows")
    neg_inf = m == -np.inf
    with np.errstate(invalid="ignore"):
        tiny = (m + r < -740.0) | neg_inf
    ms = np.where(tiny, 0.0, m)
    rs = np.where(tiny, 0.0, r)
    k = np.rint(ms / (_LN2_HI + _LN2_LO))
    # s = x - k ln2 as a ball: x - k hi (one rounding), k lo (one), their difference (one)
    t1 = ms - k * _LN2_HI
    kl = k * _LN2_LO
    sm = t1 - kl
    sr = _up(rs + U * (np.abs(t1) + np.abs(kl) + np.abs(sm)) + np.abs(k) * _LN2_ERR)
    smax = np.abs(sm) + sr  # |s| <= smax <= about 0.35
    if np.any(smax > 0.5):
        raise NoCertificate("exp range reduction")
    # Horner: p = 1 + s/1 (1 + s/2 (1 + ... (1 + s/N)))
    n_terms = 22
    pm, pr = np.ones_like(sm), np.zeros_like(sm)
    for n in range(n_terms, 0, -1):
        # q = s * p / n
        qm = sm * pm
        qr = _up(np.abs(sm) * pr + sr * np.abs(pm) + sr * pr + U * np.abs(qm))
        qm, qr = qm / n, _up(qr / n + U * np.abs(qm / n))
        pm = 1.0 + qm
        pr = _up(qr + U * np.abs(pm))
    # remainder of the series after degree N: <= smax^(N+1) / (N+1)! * e^smax, e^0.5 < 2
    rem = 2.0 * smax ** (n_terms + 1) / math.factorial(n_terms + 1)
    pr = _up(pr + rem)
    ki = k.astype(np.int64)
    em = np.ldexp(pm, ki)
    er = _up(np.ldexp(pr, ki) + U * np.abs(em))
    em = np.where(tiny, 0.0, em)
    er = np.where(neg_inf, 0.0, np.where(tiny, TINY, er))
    return Tab(t.vars, em, er)


def _mono(t: Tab, name: str) -> Tab:
    """A monotone increasing function of a ball, enclosed by mpmath at its endpoints."""
    lo, hi = _interval(t)
    lo, hi = np.broadcast_arrays(lo, hi)
    if name == "log" and np.any(lo <= 0):
        raise NoCertificate("log of a ball not inside (0, oo)")
    ends = np.unique(np.concatenate([lo.reshape(-1), hi.reshape(-1)]))
    if ends.size > MP_MAX:
        raise NoCertificate(f"more than {MP_MAX} distinct arguments of {name}")
    lows, highs = {}, {}
    with mpmath.workprec(80):
        for v in ends.tolist():
            if name == "log":
                iv = mpmath.iv.log(mpmath.iv.mpf(v))
                a, b = iv.a, iv.b
            else:  # erf: mpmath is correct to its working precision; widen by 2^-70
                f = mpmath.erf(mpmath.mpf(v))
                a, b = f - abs(f) * mpmath.mpf(2) ** -70, f + abs(f) * mpmath.mpf(2) ** -70
            lows[v] = np.nextafter(float(a), -np.inf)
            highs[v] = np.nextafter(float(b), np.inf)
    flo = np.vectorize(lows.__getitem__, otypes=[np.float64])(lo) if lo.size else lo
    fhi = np.vectorize(highs.__getitem__, otypes=[np.float64])(hi) if hi.size else hi
    return _from_interval(t.vars, flo, fhi)


def _sqrt(t: Tab) -> Tab:
    lo, hi = _interval(t)
    if np.any(lo < 0):
        raise NoCertificate("sqrt of a ball reaching below 0")
    # sqrt is correctly rounded (IEEE 754): one step outwards encloses it
    return _from_interval(
        t.vars, np.nextafter(np.sqrt(lo), -np.inf).clip(0), np.nextafter(np.sqrt(hi), np.inf)
    )


def _abs(t: Tab) -> Tab:
    if t.rad is None:
        return Tab(t.vars, np.abs(t.mid))
    lo, hi = _interval(t)
    a = np.where(lo >= 0, lo, np.where(hi <= 0, -hi, 0.0))
    b = np.maximum(np.abs(lo), np.abs(hi))
    return _from_interval(t.vars, a, b)


def _extremum(tabs: Sequence[Tab], greater: bool) -> Tab:
    vars = _union(tabs)
    _guard(tabs, vars)
    f = np.maximum if greater else np.minimum
    if all(t.rad is None for t in tabs):
        out = None
        for t in tabs:
            m = _aligned(t.mid, t.vars, vars)
            out = m if out is None else f(out, m)
        return Tab(vars, np.asarray(out))
    lo = hi = None
    for t in tabs:
        a, b = _interval(t)
        a, b = _aligned(a, t.vars, vars), _aligned(b, t.vars, vars)
        lo = a if lo is None else f(lo, a)
        hi = b if hi is None else f(hi, b)
    return _from_interval(vars, np.asarray(lo), np.asarray(hi))


# -- conditions --------------------------------------------------------------------------------


def _compare(name: str, a: Tab, b: Tab) -> Tab:
    vars = _union((a, b))
    _guard((a, b), vars)
    if a.rad is None and b.rad is None:
        x, y = _aligned(a.mid, a.vars, vars), _aligned(b.mid, b.vars, vars)
        out = {"StrictLessThan": np.less, "LessThan": np.less_equal, "Equality": np.equal,
               "Unequality": np.not_equal}[name](x, y)  # fmt: skip
        return Tab(vars, np.asarray(out, dtype=np.int64))
    alo, ahi = (_aligned(v, a.vars, vars) for v in _interval(a))
    blo, bhi = (_aligned(v, b.vars, vars) for v in _interval(b))
    if name in ("StrictLessThan", "LessThan"):
        yes, no = ahi < blo, alo >= bhi
        if name == "LessThan":
            yes, no = ahi <= blo, alo > bhi
    else:
        apart = (ahi < blo) | (bhi < alo)
        yes, no = np.zeros_like(apart), apart
        if name == "Unequality":
            yes, no = no, yes
    if np.any(~(yes | no)):
        raise NoCertificate("a condition the balls do not decide")
    return Tab(vars, np.asarray(yes, dtype=np.int64))


# -- the evaluator -------------------------------------------------------------------------------


class _Eval:
    """Evaluates terms over ``scope`` (variable -> (first value, count)) at the inputs of
    ``seed`` and ``scale``; memoised per subterm and the ranges of its variables."""

    def __init__(
        self,
        scope: Mapping[Any, tuple[int, int]],
        domains: Mapping[str, str],
        seed: int,
        scale: float,
    ) -> None:
        self.scope = dict(scope)
        self.domains = domains
        self.seed = seed
        self.scale = scale
        self.memo: dict[Any, Tab] = {}
        self.fs: dict[Any, frozenset] = {}
        self.softmax: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
        self.alpha: dict[Any, Any] = {}

    def free(self, e: Any) -> frozenset:
        hit = self.fs.get(e)
        if hit is None:
            hit = frozenset(e.free_symbols)
            self.fs[e] = hit
        return hit

    def ev(self, e: Any) -> Tab:
        T.tick()
        if isinstance(e, se.Integer):
            v = int(e)
            if abs(v) >= 2**53:
                raise NoCertificate("an integer constant too large")
            return _const(v)
        if isinstance(e, se.Symbol):
            if e not in self.scope:
                raise Unsupported(f"the symbol {e} has no value")
            lo, n = self.scope[e]
            return Tab((e,), np.arange(lo, lo + n, dtype=np.int64))
        form = _alpha(e, 0, self.alpha) if T.name_of(e) in ("_SUM", "_MAXR") else e
        key = (form, tuple(sorted((str(v), self.scope.get(v)) for v in self.free(e))))
        hit = self.memo.get(key)
        if hit is None:
            hit = self._ev(e)
            _check_size(hit.vars, self.scope)
            self.memo[key] = hit
        return hit

    def _ev(self, e: Any) -> Tab:
        name = type(e).__name__
        if isinstance(e, se.Rational):
            p, q = int(e.p), int(e.q)
            v = p / q
            exact = q & (q - 1) == 0 and abs(p) < 2**53
            return Tab((), np.asarray(v), None if exact else np.asarray(_up(U * abs(v))))
        if name == "NegativeInfinity":
            return _const(-math.inf)
        if name == "Infinity":
            return _const(math.inf)
        if name in ("RealDouble", "RealMPFR", "Exp1", "Pi", "NaN"):
            return self._closed(e)
        f = T.name_of(e)
        if f is not None:
            return self._function(e, f)
        args = e.args
        if name == "Add":
            return _add([self.ev(a) for a in args])
        if name == "Mul":
            return _contract([self.ev(a) for a in args], None, 1, self.scope)
        if name == "Pow":
            return self._pow(*args)
        if name == "floor":
            num, den = args[0].as_numer_denom()
            if not isinstance(den, se.Integer) or int(den) <= 0:
                raise Unsupported(f"floor of {args[0]}")
            n = self.ev(num)
            if not n.is_int:
                raise Unsupported("floor of a real value")
            return Tab(n.vars, np.floor_divide(n.mid, int(den)))
        if name == "Piecewise":
            return self._piecewise(args)
        if name in ("Max", "Min"):
            return _extremum([self.ev(a) for a in args], name == "Max")
        if name == "Abs":
            return _abs(self.ev(args[0]))
        if name == "log":
            return _mono(self.ev(args[0]), "log")
        if name == "erf":
            return _mono(self.ev(args[0]), "erf")
        if name == "tanh":  # 1 - 2 / (exp(2x) + 1)
            x = self.ev(args[0])
            e2 = _exp(_contract([_const(2.0), x], None, 1, self.scope))
            d = _recip(_add([e2, _const(1.0)]))
            return _add([_const(1.0), _contract([_const(-2.0), d], None, 1, self.scope)])
        if name in ("StrictLessThan", "LessThan", "Equality", "Unequality"):
            return _compare(name, self.ev(args[0]), self.ev(args[1]))
        if name in ("And", "Or"):
            vals = [self.ev(a) for a in args]
            vars = _union(vals)
            _guard(vals, vars)
            out = None
            for v in vals:
                m = _aligned(v.mid, v.vars, vars) != 0
                out = m if out is None else (out & m if name == "And" else out | m)
            return Tab(vars, np.asarray(out, dtype=np.int64))
        if name == "Not":
            v = self.ev(args[0])
            return Tab(v.vars, (v.mid == 0).astype(np.int64))
        if name in ("BooleanTrue", "BooleanFalse"):
            return _const(int(name == "BooleanTrue"))
        raise Unsupported(f"no enclosure for {name}")

    def _closed(self, e: Any) -> Tab:
        try:
            iv = enclose(e)
        except (NoEnclosure, ValueError, TypeError) as err:
            raise NoCertificate(str(err)) from None
        lo = np.nextafter(float(iv.a), -np.inf)
        hi = np.nextafter(float(iv.b), np.inf)
        return _from_interval((), np.asarray(lo), np.asarray(hi))

    def _pow(self, base: Any, ex: Any) -> Tab:
        if base == se.E:
            return _exp(self.ev(ex))
        b = self.ev(base)
        if isinstance(ex, se.Integer):
            n = int(ex)
            if abs(n) > 64:
                raise NoCertificate("a large power")
            out = _const(1) if b.is_int else _const(1.0)
            for _ in range(abs(n)):
                out = _mul2(out, b)
            return out if n >= 0 else _recip(out)
        if ex == se.Rational(1, 2):
            return _sqrt(b)
        if ex == se.Rational(-1, 2):
            return _recip(_sqrt(b))
        raise Unsupported(f"the power {ex}")

    def _piecewise(self, args: Sequence[Any]) -> Tab:
        vals, conds = [], []
        for k in range(0, len(args), 2):
            vals.append(self.ev(args[k]))
            conds.append(self.ev(args[k + 1]))
        vars = _union(vals + conds)
        _guard(vals + conds, vars)
        shape = np.broadcast_shapes(*[_aligned(t.mid, t.vars, vars).shape for t in vals + conds])
        taken = np.zeros(shape, dtype=bool)
        ints = all(v.is_int for v in vals)
        m = np.zeros(shape, dtype=np.int64 if ints else np.float64)
        r = np.zeros(shape)
        for v, c in zip(vals, conds, strict=True):
            pick = np.broadcast_to(_aligned(c.mid, c.vars, vars) != 0, shape) & ~taken
            vm, vr = (v.mid, None) if ints else _fl(v)
            m = np.where(pick, _aligned(vm, v.vars, vars), m)
            if v.rad is not None:
                r = np.where(pick, _aligned(vr, v.vars, vars), r)
            taken |= pick
        if not np.all(taken):
            raise NoCertificate("no branch of a Piecewise applies")
        if ints or not np.any(r):
            return Tab(vars, m)
        return Tab(vars, m, r)

    def _sum_range(self, body: Any, k: Any) -> tuple[int, int]:
        try:
            lo, hi = T._concrete_range(k, body, {}, {})
        except T.TermError as e:
            raise Unsupported(str(e)) from None
        return lo, max(hi - lo + 1, 0)

    def _function(self, e: Any, f: str) -> Tab:
        args = e.args
        if f == "_SUM":
            body, k = args
            lo, n = self._sum_range(body, k)
            if n == 0:
                return _const(0)
            outer = self.scope.get(k)
            self.scope[k] = (lo, n)
            try:
                terms = body.args if isinstance(body, se.Add) else (body,)
                parts = []
                for t in terms:
                    fs = list(t.args) if isinstance(t, se.Mul) else [t]
                    parts.append(_contract([self.ev(x) for x in fs], k, n, self.scope))
            finally:
                if outer is None:
                    del self.scope[k]
                else:
                    self.scope[k] = outer
            return _add(parts) if len(parts) > 1 else parts[0]
        if f == "_MAXR":
            body, k, lo, hi = args
            lo, n = int(lo), int(hi) - int(lo)
            if n <= 0:
                raise NoCertificate("an empty maximum")
            outer = self.scope.get(k)
            self.scope[k] = (lo, n)
            try:
                v = self.ev(body)
            finally:
                if outer is None:
                    del self.scope[k]
                else:
                    self.scope[k] = outer
            if k not in v.vars:
                return v
            ax = v.vars.index(k)
            rest = v.vars[:ax] + v.vars[ax + 1 :]
            if v.rad is None:
                return Tab(rest, np.max(v.mid, axis=ax))
            a, b = _interval(v)
            a, b = np.broadcast_arrays(a, b)
            return _from_interval(rest, np.max(a, axis=ax), np.max(b, axis=ax))
        if f in ("_GE", "_EQ"):
            v = self.ev(args[0])
            if not v.is_int:
                raise Unsupported("a bracket of a real value")
            out = v.mid >= 0 if f == "_GE" else v.mid == 0
            return Tab(v.vars, out.astype(np.int64))
        if f in T._SPECIAL:
            raise Unsupported(f"the atom {f}")
        idx = [self.ev(a) for a in args]
        if any(not t.is_int for t in idx):
            raise Unsupported(f"{f} read at a non-integer index")
        vars = _union(idx)
        _check_size(vars, self.scope)
        shape = tuple(self.scope[v][1] for v in vars)
        arrays = [np.broadcast_to(_aligned(t.mid, t.vars, vars), shape) for t in idx]
        if f in T.DERIVED:
            return self._derived(f, vars, arrays)
        if f.startswith("_T"):
            return self._table(T.TABLES[f], vars, arrays)
        if f in T.NAT_RANGES or self.domains.get(f, "real") not in _DOMAINS:
            raise Unsupported(f"the leaf {f} is not real-valued")
        vals = _draw(f, arrays, self.seed, self.scale, self.domains.get(f, "real"), shape)
        lshape = T.LEAF_SHAPES.get(f)
        if lshape is not None and len(lshape) == len(arrays):
            vals = np.where(_inside(arrays, lshape, shape), vals, 0.0)
        return Tab(vars, vals)

    def _table(self, table: np.ndarray, vars: tuple, arrays: list[np.ndarray]) -> Tab:
        shape = arrays[0].shape if arrays else ()
        inside = _inside(arrays, table.shape, shape)
        safe = tuple(np.where(inside, a, 0) for a in arrays)
        vals = table[safe] if arrays else table[()]
        if table.dtype.kind == "b" or table.dtype.kind in "iu":
            return Tab(vars, np.where(inside, vals, 0).astype(np.int64))
        vals = np.where(inside, vals, 0.0).astype(np.float64)
        if np.any(np.isnan(vals)):
            raise NoCertificate("a NaN in a table")
        return Tab(vars, vals)

    def _derived(self, f: str, vars: tuple, arrays: list[np.ndarray]) -> Tab:
        """A softmax atom's values, from its score term over the rows that are read."""
        d = T.DERIVED[f]
        if not hasattr(d, "valid") or not hasattr(d, "rows"):
            raise Unsupported(f"the derived atom {f}")
        shape = tuple(d.shape)
        out_shape = arrays[0].shape if arrays else ()
        inside = _inside(arrays, shape, out_shape)
        row_syms = [*d.rows, d.pos]
        box = []
        for s, a, n in zip(row_syms, arrays, shape, strict=True):
            vals = a[inside] if a.size else a
            lo = int(vals.min()) if vals.size else 0
            hi = int(vals.max()) if vals.size else 0
            if s is d.pos:
                lo, hi = 0, n - 1
            box.append((max(lo, 0), min(hi, n - 1) - max(lo, 0) + 1))
        key = (f, tuple(box))
        hit = self.softmax.get(key)
        if hit is None:
            hit = self._softmax_table(d, row_syms, box)
            self.softmax[key] = hit
        pm, pr = hit
        local = tuple(np.where(inside, a - b[0], 0) for a, b in zip(arrays, box, strict=True))
        m = np.where(inside, pm[local], 0.0)
        r = np.where(inside, pr[local], 0.0)
        return Tab(vars, m, r)

    def _softmax_table(self, d: Any, row_syms: list, box: list) -> tuple[np.ndarray, np.ndarray]:
        saved = dict(self.scope)
        try:
            for s, b in zip(row_syms, box, strict=True):
                if isinstance(s, se.Symbol):
                    self.scope[s] = b
            score = self.ev(d.body)
        finally:
            self.scope = saved
        full = tuple(b[1] for b in box)
        sm, sr = _fl(score)
        # in the atom's axis order (rows..., position)
        sm_full = _to_axes(sm, score.vars, row_syms, full)
        sr_full = _to_axes(sr, score.vars, row_syms, full)
        if d.valid is None:
            ok = np.ones(full, dtype=bool)
        elif not isinstance(d.valid, np.ndarray):  # a mask of symbolic sizes (a term)
            raise NoCertificate("a softmax mask of symbolic shape")
        else:
            sl = tuple(slice(b[0], b[0] + b[1]) for b in box)
            ok = np.broadcast_to(np.asarray(d.valid, dtype=bool)[sl], full)
        if np.any(ok & ~np.isfinite(sm_full)):
            raise NoCertificate("an infinite softmax score")
        shift = np.max(np.where(ok, sm_full, -np.inf), axis=-1, keepdims=True)
        shift = np.where(np.isfinite(shift), shift, 0.0)
        with np.errstate(invalid="ignore"):  # masked entries: exp(-oo) = 0 exactly
            zm = np.where(ok, sm_full - shift, -np.inf)
            zr = np.where(ok, _up(sr_full + U * np.abs(zm)), 0.0)
        ex = _exp(Tab((), zm, zr))
        em = np.where(ok, ex.mid, 0.0)
        er = np.where(ok, ex.rad, 0.0)
        den_m = np.sum(em, axis=-1, keepdims=True)
        den_r = _up(np.sum(er, axis=-1, keepdims=True) + _gamma(full[-1]) * den_m)
        empty = ~np.any(ok, axis=-1, keepdims=True)
        den_m = np.where(empty, 1.0, den_m)
        den_r = np.where(empty, 0.0, den_r)
        q = _contract([Tab((), em, er), _recip(Tab((), den_m, den_r))], None, 1, {})
        return np.where(ok, q.mid, 0.0), np.where(ok, q.rad, 0.0)


def _alpha(e: Any, depth: int, memo: dict[Any, Any]) -> Any:
    """``e`` with its bound variables renamed by depth (a memo key: alpha-equivalent subterms,
    e.g. the same score written twice with different summation variables, are evaluated once)."""
    if not isinstance(e, se.Basic) or not e.args:
        return e
    hit = memo.get((e, depth))
    if hit is not None:
        return hit
    f = T.name_of(e)
    if f in ("_SUM", "_MAXR"):
        body, k, *rest = e.args
        a = se.Symbol(f"_alpha{depth}")
        out = T.rebuild(e, [_alpha(body.xreplace({k: a}), depth + 1, memo), a, *rest])
    else:
        out = T.rebuild(e, [_alpha(x, depth, memo) for x in e.args])
    memo[(e, depth)] = out
    return out


def _to_axes(a: np.ndarray, have: tuple, lay: list, full: tuple) -> np.ndarray:
    """``a`` (axes ``have``, sorted) as a full array over ``lay`` (symbols or 0 for size-1
    axes) of shape ``full``."""
    a = np.asarray(a)
    if a.ndim == 0:
        return np.broadcast_to(a, full)
    perm = [have.index(s) for s in lay if isinstance(s, se.Symbol) and s in have]
    moved = np.transpose(a, perm)
    shape = [a.shape[have.index(s)] if isinstance(s, se.Symbol) and s in have else 1 for s in lay]
    return np.broadcast_to(moved.reshape(shape), full)


def _inside(arrays: Sequence[np.ndarray], shape: Sequence[int], out: tuple) -> np.ndarray:
    ok = np.ones(out, dtype=bool)
    for a, n in zip(arrays, shape, strict=True):
        ok &= (a >= 0) & (a < n)
    return ok


# -- the search ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """An element where the two terms certainly differ, with both enclosures."""

    element: tuple[int, ...]
    expected: tuple[float, float]
    got: tuple[float, float]
    seed: int
    scale: float

    def show(self, lohi: tuple[float, float]) -> str:
        lo, hi = lohi
        if lo == hi:
            return f"{lo:.17g}"
        return f"in [{lo:.17g}, {hi:.17g}]"

    @property
    def inputs(self) -> dict[str, str]:
        return {"every leaf element": f"verify._tnumeric.leaf_values(name, shape, seed={self.seed}"
                f", scale={self.scale!r}, domain=<the leaf's domain>)"}  # fmt: skip

    @property
    def evidence(self) -> str:
        return (f"interval (ball) arithmetic in float64 at input scale {self.scale!r}, every "
                "rounding bounded: the two enclosures are disjoint")  # fmt: skip


def find_mismatch(
    got: Any,
    expected: Any,
    free: Sequence[Any],
    domains: Mapping[str, str],
    points: Sequence[Mapping[Any, int]] = (),
    seed: int = 0,
) -> Mismatch | None:
    """An element (values of the ``free`` index symbols) where ``got`` and ``expected``
    certainly differ at the inputs of :func:`leaf_values`, or None. Every element at once
    where the tables fit, else at the given ``points``."""
    free = [v for v in free if isinstance(v, se.Symbol)]
    whole = {v: (T.RANGES[v][0], T.RANGES[v][1] - T.RANGES[v][0]) for v in free}
    singles = [{v: (int(p[v]), 1) for v in free} for p in points if all(v in p for v in free)]
    for scale in SCALES:
        for scope in [whole, *singles[:POINTS_MAX]]:
            try:
                found = _compare_at(got, expected, free, scope, domains, seed, scale)
            except Unsupported:
                return None
            except NoCertificate:
                continue  # too large, or undecided somewhere: single elements may do
            except (ValueError, IndexError, MemoryError):
                continue
            if found is not None:
                return found
            if scope is whole:
                break  # every element enclosed at this scale, none differs
    return None


#: Single elements tried (per scale) when the whole table cannot be enclosed.
POINTS_MAX = 8


def _compare_at(
    got: Any,
    expected: Any,
    free: list,
    scope: Mapping[Any, tuple[int, int]],
    domains: Mapping[str, str],
    seed: int,
    scale: float,
) -> Mismatch | None:
    ev = _Eval(scope, domains, seed, scale)
    g, x = ev.ev(got), ev.ev(expected)
    vars = tuple(sorted(free, key=str))
    full = tuple(scope[v][1] for v in vars)
    glo, ghi = (np.broadcast_to(_aligned(a, g.vars, vars), full) for a in _interval(g))
    xlo, xhi = (np.broadcast_to(_aligned(a, x.vars, vars), full) for a in _interval(x))
    apart = (ghi < xlo) | (xhi < glo)
    hits = np.argwhere(apart)
    if not hits.size:
        return None
    pos = tuple(int(i) for i in hits[0])
    at = {v: scope[v][0] + p for v, p in zip(vars, pos, strict=True)}
    element = tuple(at[v] for v in free)
    return Mismatch(element, (float(xlo[pos]), float(xhi[pos])), (float(glo[pos]),
                    float(ghi[pos])), seed, scale)  # fmt: skip


__all__ = ["Mismatch", "NoCertificate", "Unsupported", "find_mismatch", "leaf_values"]
