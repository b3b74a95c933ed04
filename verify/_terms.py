"""Tensor terms: one symbolic element stands for a whole tensor.

A tensor value is represented by the scalar term of a *symbolic* element: its indices are
integer symbols with known ranges, leaves are read at (quasi-)affine index expressions,
contractions are sums over bound index variables, and index conditions (padding, strides,
windows, masks, gather ranges) are Iverson brackets. Everything is a symengine expression:

* ``x(e1, ..., en)`` - a read of leaf ``x`` at integer index expressions (a ``FunctionSymbol``
  named after the leaf; ``x()`` for a scalar leaf);
* ``_SUM(body, k)`` - the sum over the integer ``k`` of ``body``; ``body`` carries ``k``'s range
  as brackets, so the sum is finite (:func:`ssum` builds it from a range);
* ``_GE(e)`` = ``[e >= 0]`` and ``_EQ(e)`` = ``[e == 0]`` for an integer expression ``e``
  (products of brackets are conjunctions);
* ``_MAXR(body, k, lo, hi)`` - the maximum of ``body`` over ``lo <= k < hi`` (kept opaque: it
  never needs a derivative, only a value, e.g. the shift of a max-shifted softmax);
* ``_T<hash>(e1, ...)`` - a read of a concrete table (a NumPy array met while building a term:
  a mask, random draws, a constant); tables are registered by content (:func:`table_read`);
* integer index symbols: free element indices, bound summation variables and the symbols of
  runtime index inputs, each with a range in :data:`RANGES`.

Index expressions are integer-valued: sums of integer multiples of index symbols and of
reads of index (nat) tensors, constants, and ``floor(e / d)`` of such expressions.
:func:`simplify_index` removes the floors the variables' ranges allow (reshape and flatten
compose to affine maps), and :func:`normalize` puts a term into the normal form the decision
procedure compares: sums split over their terms, factors that do not depend on the summation
variable taken out, Kronecker deltas eliminated by solving for a variable, short constant
ranges unrolled.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from ._dims import Dim, SizeDependent, floordiv, is_one, sign, size_expr
from ._dims import register as register_size

# -- atoms -----------------------------------------------------------------------------------

SUM = se.Function("_SUM")
GE = se.Function("_GE")
EQ = se.Function("_EQ")
MAXR = se.Function("_MAXR")

ZERO, ONE = se.Integer(0), se.Integer(1)
_SPECIAL = ("_SUM", "_GE", "_EQ", "_MAXR", "_XS")

#: Sums over at most this many values of their variable (a constant range, e.g. a kernel axis)
#: are unrolled by :func:`normalize`, so that a window written as a sum and the same window
#: written term by term get the same normal form.
UNROLL_MAX = 8


class TermError(Exception):
    """A term could not be built or transformed (e.g. a non-linear use of a tangent)."""


class OutOfTime(TermError):
    """The time budget of a tensor-level check ran out (see :func:`budget`)."""


_DEADLINE: list[float] = []
_TIMER: list[Any] = []  # the handler replaced while the outermost budget runs


def _on_timer(signum: int, frame: Any) -> None:
    # Only where the verifier's own algebra runs (ours, sympy's, mpmath's): a signal that lands
    # in a finaliser, a gc or weakref callback of another library would be printed and dropped
    # there. The timer fires again a quarter second of CPU later.
    if frame is None or not frame.f_globals.get("__name__", "").startswith(_TIMED_MODULES):
        return
    f, depth = frame, 0
    while f is not None and depth < 8:
        if f.f_code.co_name == "__del__":
            return
        f, depth = f.f_back, depth + 1
    tick()


_TIMED_MODULES = ("verify.", "sympy.", "mpmath.")


class budget:
    """``with budget(seconds):`` bounds the tensor-level work inside: :func:`tick` (called by
    normalisation, case splits and the interpreters) raises :class:`OutOfTime` past it. The
    seconds are the process's CPU time, so that a loaded machine (CI runners, parallel test
    workers) reaches the same verdicts as an idle one.

    Work that does not tick (sympy's case folding inside a scalar decision) is bounded too: in
    the main thread the outermost budget arms a CPU-time interval timer (``SIGVTALRM``, every
    0.25 s of CPU) whose handler ticks, unless the program already handles that signal. The
    exception then reaches the caller even through code that catches and retries, since the
    timer keeps firing until the budget is left."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def __enter__(self) -> budget:
        import time

        end = float("inf") if self.seconds is None else time.process_time() + self.seconds
        _DEADLINE.append(min(end, _DEADLINE[-1]) if _DEADLINE else end)
        if len(_DEADLINE) == 1 and end != float("inf"):
            _arm_timer()
        return self

    def __exit__(self, *exc: object) -> None:
        # the deadline first: a timer tick landing here then sees the enclosing budget (or
        # none), never this expired one left on the stack
        _DEADLINE.pop()
        if not _DEADLINE:
            _disarm_timer()


def _arm_timer() -> None:
    import signal
    import threading

    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        return
    if signal.getsignal(signal.SIGVTALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return
    _TIMER.append(signal.signal(signal.SIGVTALRM, _on_timer))
    signal.setitimer(signal.ITIMER_VIRTUAL, 0.25, 0.25)


def _disarm_timer() -> None:
    import signal

    if _TIMER:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0, 0)
        signal.signal(signal.SIGVTALRM, _TIMER.pop())


def tick() -> None:
    """Raise :class:`OutOfTime` when the innermost :class:`budget` has run out."""
    if _DEADLINE:
        import time

        if time.process_time() > _DEADLINE[-1]:
            raise OutOfTime("the tensor-level time budget ran out")


def name_of(e: Any) -> str | None:
    """The function name of a ``FunctionSymbol`` (a read, a sum, a bracket), else ``None``."""
    if isinstance(e, se.FunctionSymbol):
        return str(e.get_name())
    return None


_FLOOR_MEMO: dict[Any, bool] = {}
_FN_MEMO: dict[Any, frozenset] = {}


def has_floor(e: Any) -> bool:
    """Does ``e`` contain a ``floor``? (memoised over shared subterms)"""
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number):
        return False
    hit = _FLOOR_MEMO.get(e)
    if hit is None:
        hit = isinstance(e, se.floor) or any(has_floor(a) for a in e.args)
        if len(_FLOOR_MEMO) > 500000:
            _FLOOR_MEMO.clear()
        _FLOOR_MEMO[e] = hit
    return hit


def fn_atoms(e: Any) -> frozenset:
    """The ``FunctionSymbol`` atoms of ``e``, nested ones included (memoised)."""
    if isinstance(e, se.FunctionSymbol) and not e.args:  # the read of a 0-d leaf
        return frozenset((e,))
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number):
        return frozenset()
    hit = _FN_MEMO.get(e)
    if hit is None:
        out: set = set()
        for a in e.args:
            out |= fn_atoms(a)
        if isinstance(e, se.FunctionSymbol):
            out.add(e)
        hit = frozenset(out)
        if len(_FN_MEMO) > 500000:
            _FN_MEMO.clear()
        _FN_MEMO[e] = hit
    return hit


_FLOORS_MEMO: dict[Any, frozenset] = {}


def floor_atoms(e: Any) -> frozenset:
    """The ``floor`` subterms of ``e`` (memoised)."""
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number) or not has_floor(e):
        return frozenset()
    hit = _FLOORS_MEMO.get(e)
    if hit is None:
        out: set = set()
        for a in e.args:
            out |= floor_atoms(a)
        if isinstance(e, se.floor):
            out.add(e)
        hit = frozenset(out)
        if len(_FLOORS_MEMO) > 500000:
            _FLOORS_MEMO.clear()
        _FLOORS_MEMO[e] = hit
    return hit


def is_sum(e: Any) -> bool:
    return name_of(e) == "_SUM"


def is_bracket(e: Any) -> bool:
    return name_of(e) in ("_GE", "_EQ")


def is_table(e: Any) -> bool:
    n = name_of(e)
    return n is not None and n.startswith("_T")


#: Derived reads: atoms defined by a term (``verify/_tsoftmax.py``'s softmax atoms), by name.
#: A definition has ``mentions(names)``, ``jvp(args, d)`` and ``concrete(idx, value)``.
DERIVED: dict[str, Any] = {}


def is_read(e: Any) -> bool:
    """A read of a leaf or a table (not a sum, bracket or max)."""
    n = name_of(e)
    return n is not None and n not in _SPECIAL


def is_leaf_read(e: Any) -> bool:
    n = name_of(e)
    return n is not None and n not in _SPECIAL and not n.startswith("_T")


def fn(name: str) -> Any:
    return se.Function(name)


def read(name: str, idx: Sequence[Any]) -> Any:
    """The read ``name(idx...)`` (indices simplified)."""
    return se.Function(name)(*[simplify_index(i) for i in idx])


#: The shapes of the leaves read by flat index (:func:`leaf_read`), by name.
LEAF_SHAPES: dict[str, tuple[int, ...]] = {}


def flat_index(idx: Sequence[Any], shape: Sequence[int]) -> Any:
    """The row-major flat index of ``idx`` in an array of ``shape``."""
    flat = ZERO
    for i, d in zip(idx, shape, strict=True):
        flat = flat * int(d) + i
    return simplify_index(se.expand(flat))


def leaf_read(name: str, idx: Sequence[Any], shape: Sequence[int]) -> Any:
    """The read of leaf ``name`` (of ``shape``) at ``idx``. Indices with floors (a reshape)
    are rewritten from the flat index when that is affine: ``(floor(f / 3), f mod 3)`` of a
    ``(2, 3)`` array is canonical whichever way the reshapes were composed."""
    shape = tuple(d if isinstance(d, Dim) else int(d) for d in shape)
    LEAF_SHAPES[name] = shape
    return se.Function(name)(*canonical_index(idx, shape))


def canonical_index(idx: Sequence[Any], shape: Sequence[int]) -> tuple[Any, ...]:
    idx = tuple(simplify_index(i) for i in idx)
    if not any(getattr(i, "atoms", None) and i.atoms(se.floor) for i in idx):
        return idx
    if any(isinstance(d, Dim) for d in shape):
        return idx  # a symbolic size: the reads are compared as they are
    flat = flat_index(idx, shape)
    if flat.atoms(se.floor) or not _in_range(idx, shape):
        return idx
    return delinearize(flat, shape)


def delinearize(flat: Any, shape: Sequence[int]) -> tuple[Any, ...]:
    """The multi-index of a flat index in an array of ``shape`` (row-major)."""
    out = []
    stride = math.prod(shape)
    for d in shape:
        stride //= d
        out.append(mod(floor_div(flat, stride), d) if stride else ZERO)
    return tuple(out)


def _in_range(idx: Sequence[Any], shape: Sequence[int]) -> bool:
    for i, d in zip(idx, shape, strict=True):
        lo, hi = interval(i)
        if lo is None or hi is None or lo < 0 or hi >= d:
            nonneg, _, _ = _sign_facts(i, facts=False)
            below, _, _ = _sign_facts(se.expand(d - 1 - i), facts=False)
            if not (nonneg and below):
                return False
    return True


_REBUILD: dict[type, Callable[..., Any]] = {
    se.StrictLessThan: se.Lt,
    se.LessThan: se.Le,
    se.Equality: se.Eq,
    se.Unequality: se.Ne,
    se.And: se.And,
    se.Or: se.Or,
    se.Not: se.Not,
}


def rebuild(e: Any, args: Sequence[Any]) -> Any:
    """``e`` with new arguments (FunctionSymbols are rebuilt by name)."""
    n = name_of(e)
    if n is not None:
        return se.Function(n)(*args)
    if isinstance(e, se.Piecewise):
        return se.Piecewise(*[(args[i], args[i + 1]) for i in range(0, len(args), 2)])
    if isinstance(e, se.Number):
        return e
    maker = _REBUILD.get(type(e))
    if maker is not None:
        return maker(*args)
    return e.func(*args)


# -- index symbols and their ranges ------------------------------------------------------------

#: Every index symbol's range ``[lo, hi)`` (``hi`` may be ``None``: unbounded above).
RANGES: dict[Any, tuple[int, int | None]] = {}
#: The exclusive upper bound of an index symbol over an axis of symbolic length (an expression
#: in size symbols, :mod:`verify._dims`); its :data:`RANGES` entry then says ``hi = None``, so
#: everything that reads ranges numerically treats it as unbounded (fewer facts, never wrong),
#: and z3 (:func:`_sign_facts`, ``verify._tdecide._Z3``) gets the bound as a fact.
UPPER: dict[Any, Any] = {}
#: The size symbols (each a positive integer, range ``[1, oo)``, a fact like a free index's).
SIZES: set[Any] = set()
#: The bound (summation) variables among them: their range is also written as brackets in the
#: body of their sum, and only those brackets say it (a bracket is never dropped because of a
#: bound variable's registered range; the range only serves to simplify floors and to unroll).
BOUND: set[Any] = set()
_COUNTER = itertools.count()


def fresh(prefix: str, lo: int, hi: Any, *, bound: bool = True) -> Any:
    """A new integer symbol ranging over ``[lo, hi)`` (``hi`` may be a symbolic size, a
    :class:`verify._dims.Dim` or its expression: see :data:`UPPER`)."""
    s = se.Symbol(f"{prefix}{next(_COUNTER)}")
    if hi is not None and not isinstance(hi, int | np.integer | se.Integer):
        RANGES[s] = (int(lo), None)
        UPPER[s] = size_expr(hi)
    else:
        RANGES[s] = (int(lo), None if hi is None else int(hi))
    if bound:
        BOUND.add(s)
    return s


def size_symbol(name: str, lo: int = 1) -> Any:
    """The size symbol ``name`` (an integer ``>= lo >= 1``; the same symbol for the same
    name, which must always come with the same ``lo``)."""
    s = se.Symbol(name)
    register_size(s, lo)
    RANGES[s] = (int(lo), None)
    SIZES.add(s)
    return s


def _symbolic_bound(e: Any) -> bool:
    """Whether ``e`` mentions a size symbol or an index bounded by one."""
    return bool(SIZES or UPPER) and any(v in SIZES or v in UPPER for v in e.free_symbols)


def rename_bound(e: Any) -> Any:
    """``e`` with the variables of its sums and maxima renamed to fresh ones (a term copied
    into another keeps its sums apart)."""
    bound = {}
    for f in fn_atoms(e):
        n = name_of(f)
        if n == "_SUM":
            variables = f.args[1:]
        elif n == "_MAXR":
            variables = f.args[1:2]
        else:
            continue
        for v in variables:
            if isinstance(v, se.Symbol) and v not in bound:
                lo, hi = RANGES.get(v, (0, None))
                bound[v] = fresh("_k", lo, hi)
    return e.xreplace(bound) if bound else e


def free_vars(shape: Sequence[int], prefix: str = "_q") -> tuple[Any, ...]:
    """Fresh element indices for an array of ``shape`` (free: their range is a fact); an axis
    of size 1 has the index 0."""
    return tuple(ZERO if is_one(n) else fresh(prefix, 0, n, bound=False) for n in shape)


def is_index_symbol(s: Any) -> bool:
    return s in RANGES


# -- integer index expressions -----------------------------------------------------------------


def _int_atoms(e: Any) -> set:
    """The index symbols and nat reads (opaque integer atoms) of an index expression."""
    out = set()
    for s in e.free_symbols:
        out.add(s)
    for f in e.atoms(se.FunctionSymbol):
        if is_read(f):
            out.add(f)
    return out


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
    with ``g`` dividing ``d`` and the coefficients of some terms, and the other terms (and
    ``c0 mod g``) staying in ``[0, g)``, it is ``floor(P / (d / g))`` for ``P`` the first terms
    divided by ``g`` (plus ``c0 // g``). A symbol ``v`` that occurs beside ``floor(v / k)`` is
    first written ``k floor(v / k) + (v mod k)``, so ``floor((v + 2 floor(v / 2)) / 4)`` is
    ``floor(v / 2)``. ``None`` when no such ``g`` exists."""
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
        r = se.Add(*[a * v for v, a in ints.items() if v not in big]) + c0 % g
        lo, hi = interval(r)
        if lo is None or hi is None or lo < 0 or hi > g - 1:
            continue
        p = se.Add(*[(a // g) * v for v, a in big.items()]) + c0 // g
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


def _sign_facts(e: Any, facts: bool = True) -> tuple[bool, bool, bool]:
    """For an index expression with floors: is it always >= 0, always < 0, always == 0 over the
    ranges that are facts (or, with ``facts=False``, over every symbol's range)? (Cached; by
    exhaustion over a small box of values, :mod:`verify._tgrid`, else z3, ``False`` when
    unknown; z3 alone where a symbolic size bounds a symbol, :data:`UPPER`.)"""
    if not e.atoms(se.floor) and not _symbolic_bound(e):
        return False, False, False
    hit = _SIGN_CACHE.get((e, facts))
    if hit is not None:
        return hit
    from . import _tgrid

    try:
        out = _tgrid.sign_facts(e, facts)  # by exhaustion over a small box: exact, no timeout
    except _tgrid.NotGridded:
        out = _sign_facts_z3(e, facts)
    if len(_SIGN_CACHE) > 100000:
        _SIGN_CACHE.clear()
    _SIGN_CACHE[(e, facts)] = out
    return out


def _sign_facts_z3(e: Any, facts: bool) -> tuple[bool, bool, bool]:
    """:func:`_sign_facts` by z3 (``False`` where z3 does not answer in time). A budget that
    runs out meanwhile is raised, not cached as "unknown" for the rest of the process."""
    out = (False, False, False)
    try:
        import z3

        from ._tdecide import _Z3

        z = _Z3(facts_only=facts)
        t = z.term(e)
        s = z3.Solver()
        s.set("timeout", 2000)
        s.add(*z.facts)
        nonneg = s.check(t < 0) == z3.unsat
        neg = s.check(t >= 0) == z3.unsat
        zero = s.check(t != 0) == z3.unsat
        out = (nonneg, neg, zero)
    except OutOfTime:
        raise
    except Exception:
        pass
    return out


_SIGN_CACHE: dict[tuple[Any, bool], tuple[bool, bool, bool]] = {}


def ge(e: Any) -> Any:
    """``[e >= 0]`` for an integer expression, normalised: integer coefficients divided by their
    gcd (the constant rounded down, which is exact over the integers), decided by intervals."""
    e = simplify_index(e)
    if isinstance(e, se.Number):
        return ONE if e >= 0 else ZERO
    lo, hi = interval(e, facts=True)
    if lo is not None and lo >= 0:
        return ONE
    if hi is not None and hi < 0:
        return ZERO
    nonneg, neg, _ = _sign_facts(e)
    if nonneg:
        return ONE
    if neg:
        return ZERO
    form = _integer_form(e)
    if form is None:
        return GE(e)
    coeffs, const = form
    g = math.gcd(*coeffs.values()) if coeffs else 1
    if g > 1:
        coeffs = {v: c // g for v, c in coeffs.items()}
        const = math.floor(Fraction(const, g))
    return GE(_assemble(coeffs, const))


def eq(e: Any) -> Any:
    """``[e == 0]`` for an integer expression, normalised (gcd, sign of the first term)."""
    e = simplify_index(e)
    if isinstance(e, se.Number):
        return ONE if e == 0 else ZERO
    lo, hi = interval(e, facts=True)
    if (lo is not None and lo > 0) or (hi is not None and hi < 0):
        return ZERO
    if lo == 0 and hi == 0:
        return ONE
    _, neg, zero = _sign_facts(e)
    if zero:
        return ONE
    if neg:
        return ZERO
    form = _integer_form(e)
    if form is None:
        return EQ(e)
    coeffs, const = form
    g = math.gcd(*coeffs.values()) if coeffs else 1
    if const % g:
        return ZERO
    coeffs = {v: c // g for v, c in coeffs.items()}
    const //= g
    expr = _assemble(coeffs, const)
    if _leading_negative(expr):
        expr = -expr
    return EQ(se.expand(expr))


def _leading_negative(e: Any) -> bool:
    terms = e.args if isinstance(e, se.Add) else (e,)
    keyed = sorted((str(t), t) for t in terms if not isinstance(t, se.Number))
    if not keyed:
        return False
    t = keyed[0][1]
    c = [a for a in t.args if isinstance(a, se.Number)] if isinstance(t, se.Mul) else []
    return bool(c) and c[0] < 0


def bracket(cond: Any) -> Any:
    """The 0/1 integer expression of an index condition (relations between integer
    expressions, combined with And / Or / Not)."""
    if cond is True or cond == se.true:
        return ONE
    if cond is False or cond == se.false:
        return ZERO
    if isinstance(cond, se.StrictLessThan):
        a, b = cond.args
        return ge(b - a - 1)
    if isinstance(cond, se.LessThan):
        a, b = cond.args
        return ge(b - a)
    if isinstance(cond, se.Equality):
        a, b = cond.args
        return eq(a - b)
    if isinstance(cond, se.Unequality):
        a, b = cond.args
        return 1 - eq(a - b)
    if isinstance(cond, se.And):
        out = ONE
        for c in cond.args:
            out = out * bracket(c)
        return out
    if isinstance(cond, se.Or):
        out = ZERO
        for c in cond.args:
            b = bracket(c)
            out = out + b - out * b
        return se.expand(out)
    if isinstance(cond, se.Not):
        return 1 - bracket(cond.args[0])
    raise TermError(f"not an index condition: {cond}")


def range_brackets(k: Any, lo: Any, hi: Any) -> Any:
    """``[lo <= k < hi]`` (bounds may be symbolic sizes)."""
    lo, hi = size_expr(lo), size_expr(hi)
    return ge(k - lo) * ge(hi - 1 - k)


# -- tables ------------------------------------------------------------------------------------


def _table_brackets(name: str, args: Sequence[Any]) -> Any:
    """A read of a 0/1 table at integers and distinct index symbols as a product of interval
    brackets on the symbols, when the table (at those integers) is such a product; else
    ``None``."""
    table = TABLES[name]
    key: list[Any] = []
    syms: list[Any] = []
    for a, d in zip(args, table.shape, strict=True):
        if isinstance(a, se.Integer):
            if not 0 <= int(a) < d:
                return ZERO
            key.append(int(a))
        elif isinstance(a, se.Symbol) and a not in syms:
            key.append(slice(None))
            syms.append(a)
        else:
            return None
    sub = table[tuple(key)]
    if sub.dtype.kind not in "iubf" or not np.all((sub == 0) | (sub == 1)):
        return None
    mask = sub.astype(bool)
    if not mask.any():
        return ZERO
    out = ONE
    rebuilt = np.ones(mask.shape, dtype=bool)
    for ax, v in enumerate(syms):
        others = tuple(i for i in range(mask.ndim) if i != ax)
        m = np.any(mask, axis=others) if others else mask
        runs = _runs(m)
        if len(runs) != 1:
            return None
        lo, hi = runs[0]
        shape = [1] * mask.ndim
        shape[ax] = mask.shape[ax]
        rebuilt = rebuilt & m.reshape(shape)
        out = out * range_brackets(v, lo, hi)
    if not np.array_equal(rebuilt, mask):
        return None
    return out


def _runs(m: np.ndarray) -> list[tuple[int, int]]:
    out, start = [], None
    for i, v in enumerate([*m.tolist(), False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


#: Concrete arrays met while building terms, by name (the name is a hash of the content).
TABLES: dict[str, np.ndarray] = {}


def table_name(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha1(a.dtype.str.encode() + str(a.shape).encode() + a.tobytes()).hexdigest()
    name = f"_T{h[:16]}"
    TABLES.setdefault(name, a)
    return name


def table_read(a: np.ndarray, idx: Sequence[Any]) -> Any:
    """``a[idx]`` for a concrete array ``a`` at index expressions (a constant when ``a`` is
    uniform or the indices are numbers)."""
    a = np.asarray(a)
    if a.size and np.all(a == a.reshape(-1)[0]):
        return exact_scalar(a.reshape(-1)[0])
    if all(isinstance(i, se.Integer) for i in idx):
        return exact_scalar(a[tuple(int(i) for i in idx)])
    a, idx = _uniform_axes_dropped(a, idx)
    if all(isinstance(i, se.Integer) for i in idx):
        return exact_scalar(a[tuple(int(i) for i in idx)])
    return se.Function(table_name(a))(*canonical_index(idx, a.shape))


#: Per table name, the axes along which the table is constant (every slice equal to the first).
_UNIFORM_AXES: dict[str, tuple[int, ...]] = {}


def _uniform_axes(a: np.ndarray) -> tuple[int, ...]:
    name = table_name(a)
    hit = _UNIFORM_AXES.get(name)
    if hit is None:
        hit = tuple(ax for ax, d in enumerate(a.shape)
                    if d > 1 and bool(np.all(a == a.take([0], axis=ax))))  # fmt: skip
        _UNIFORM_AXES[name] = hit
    return hit


def _uniform_axes_dropped(a: np.ndarray, idx: Sequence[Any]) -> tuple[np.ndarray, tuple]:
    """``a[idx]`` as a read of the table with each axis along which ``a`` is constant cut to
    its first slice, read there at 0, where that axis's index is proved in range.

    Exact: when ``a[..., i, ...]`` equals ``a[..., 0, ...]`` for every ``i`` of the axis, a read
    at any in-range index expression ``e`` has the value of the read at 0, and the index is
    rewritten only where its interval over the ranges of its symbols lies in ``[0, d)``. So a
    mask broadcast along the channels (a softmax atom's) and the same mask read at channel 0
    (the reference's) are one table."""
    idx = tuple(idx)
    axes = [ax for ax in _uniform_axes(a) if _within(idx[ax], a.shape[ax])]
    if not axes:
        return a, idx
    for ax in axes:
        a = a.take([0], axis=ax)
    idx = tuple(ZERO if ax in axes else i for ax, i in enumerate(idx))
    return np.ascontiguousarray(a), idx


def _within(i: Any, d: int) -> bool:
    """Whether the index expression ``i`` lies in ``[0, d)`` for every value of its symbols."""
    lo, hi = interval(simplify_index(i))
    return lo is not None and hi is not None and lo >= 0 and hi <= d - 1


def exact_scalar(v: Any) -> Any:
    """A NumPy / Python scalar as an exact symengine number (booleans as 0/1)."""
    if isinstance(v, se.Basic):
        return v
    if isinstance(v, bool | np.bool_):
        return ONE if v else ZERO
    if isinstance(v, int | np.integer):
        return se.Integer(int(v))
    f = float(v)
    if math.isinf(f):
        return se.oo if f > 0 else -se.oo
    if math.isnan(f):
        raise TermError("NaN has no exact value")
    fr = Fraction(f)
    return se.Rational(fr.numerator, fr.denominator)


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


def _add_terms(e: Any) -> tuple[Any, ...]:
    return e.args if isinstance(e, se.Add) else (e,)


def sum_over(k: Any, body: Any, unroll: bool = False) -> Any:
    """The normal form of ``sum_k body`` (``body`` carries ``k``'s range as brackets); with
    ``unroll``, a range of at most :data:`UNROLL_MAX` values is written term by term."""
    body = se.expand(body)
    terms = body.args if isinstance(body, se.Add) else (body,)
    out = [_sum_term(k, t, unroll) for t in terms]
    return se.Add(*out) if out else ZERO


def _factors(t: Any) -> list[Any]:
    return list(t.args) if isinstance(t, se.Mul) else [t]


def _sum_term(k: Any, t: Any, unroll: bool) -> Any:
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
                if n == 1 or (unroll and n <= UNROLL_MAX):
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


def _split_residues(k: Any, dep: Sequence[Any], split: tuple[int, int], unroll: bool) -> Any:
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


def _subs_one(e: Any, k: Any, v: Any, unroll: bool) -> Any:
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


# -- normal form -------------------------------------------------------------------------------


_NORM: tuple[dict[Any, Any], dict[Any, Any]] = ({}, {})


def normalize(e: Any, unroll: bool = False) -> Any:
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


def _normalize(e: Any, unroll: bool) -> Any:
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
    args = [normalize(a, unroll) for a in e.args]
    if type(e) in _RELATIONS_INF:
        folded = _infinite_relation(type(e), args)
        if folded is not None:
            return folded
    out = rebuild(e, args)
    if isinstance(out, se.Pow) and out.args[0] == se.E:
        out = _exp_of_logs(out.args[1])
    if isinstance(out, se.log):
        out = log_of_shift(out)
    if isinstance(out, se.Add | se.Mul | se.Pow):
        out = se.expand(out)
        out = _idempotent_brackets(out)
        if has_floor(out):
            terms = out.args if isinstance(out, se.Add) else (out,)
            out = se.Add(*[_refine(t) for t in terms])
        if unroll:
            terms = out.args if isinstance(out, se.Add) else (out,)
            out = se.Add(*[_lift(t) for t in terms])
    return out


# -- max-shifted exponentials --------------------------------------------------------------------


#: ``_XS(s)`` = ``exp(s)`` for a finite shift ``s`` (:func:`split_shifts`): opaque, so that
#: symengine does not merge it back into ``exp(r) exp(s) = exp(r + s)``.
XS = se.Function("_XS")


def split_shifts(e: Any) -> Any:
    """``e`` with every ``exp(r + s)`` written ``exp(r) _XS(s)`` for the terms ``s`` that hold
    a maximum (the shift of a softmax-like form: a common factor that sums then pull out and
    quotients cancel), when ``s`` is proved finite (:func:`finite`; ``exp(+oo - oo)`` is not
    ``0 * oo``). For the decision only: ``_XS`` has no derivative and no concrete value."""
    memo: dict[Any, Any] = {}

    def go(x: Any) -> Any:
        if not isinstance(x, se.Basic) or not x.args or isinstance(x, se.Number):
            return x
        hit = memo.get(x)
        if hit is not None:
            return hit
        out = rebuild(x, [go(a) for a in x.args])
        if isinstance(out, se.Pow) and out.args[0] == se.E:
            a = out.args[1]
            terms = list(a.args) if isinstance(a, se.Add) else [a]
            shift = [t for t in terms if _has_max(t)]
            if shift and len(shift) < len(terms) and finite(se.Add(*shift)):
                rest = se.Add(*[t for t in terms if not _has_max(t)])
                out = se.exp(rest) * XS(se.Add(*shift))
        memo[x] = out
        return out

    return go(e)


def log_of_shift(e: Any) -> Any:
    """``log(P _XS(s1)^c1 ...)`` as ``log(P) + c1 s1 + ...``: the log of a max-shifted sum of
    exponentials (``log(sum_k exp(x_k - m))`` once :func:`split_shifts` pulled the shift out of
    the sum) meets the unshifted ``log(sum_k exp(x_k))`` plus its shift.

    Sound because ``_XS(s)`` is ``exp(s)`` for a finite real ``s`` (only :func:`split_shifts`
    builds it, after proving ``s`` finite) and a rational power ``c`` of it is the positive real
    ``exp(c s)``: multiplying by a positive real leaves the argument of ``P`` alone, so for
    every ``P != 0`` (real, or complex with the principal branch) ``log(P exp(c s)) = log(P) +
    c s``, and for ``P = 0`` both sides are ``log(0)`` plus a finite shift."""
    arg = e.args[0]
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


def _exp_of_logs(a: Any) -> Any:
    """``exp(r + c1 log(u1) + ...)`` as ``exp(r) u1^c1 ...`` for rational ``c`` and ``u``
    proved nonnegative (:func:`nonnegative`): the exponential of a log-softmax
    (``exp(x_j - log(sum_k exp(x_k)))``) is the quotient the softmax's form has, and a sum
    pulls the normaliser out of it.

    Sound because for ``u > 0`` the log is real and ``exp(c log(u)) = u^c``, and
    ``exp(a + b) = exp(a) exp(b)``; at ``u = 0`` (``log(u) = -oo``) both sides are 0 for
    ``c > 0`` and ``+oo`` for ``c < 0`` (``exp(r)`` is positive). A ``u`` of unknown sign is
    left alone: ``log`` of a negative value is NaN in floating point, its power is not."""
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
    return False


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
        if isinstance(x, se.Pow) and x.args[0] != se.E and not isinstance(x.args[1], se.Integer):
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


def _subterms(e: Any) -> Iterable[Any]:
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, se.Basic) and not isinstance(x, se.FunctionSymbol):
            stack.extend(x.args)


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
        return finite(base) and isinstance(ex, se.Integer) and int(ex) >= 0
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
    return False


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


def _lift(t: Any) -> Any:
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
        return normalize(t.xreplace({b: nb}), True)
    on = normalize(t.xreplace({b: ONE}), True)
    off = normalize(t.xreplace({b: ZERO}), True)
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


def has_infinity(e: Any) -> bool:
    """Whether ``e`` holds an infinity or NaN anywhere (then a 0/1 bracket may not multiply
    it: ``0 * -oo`` is NaN)."""
    return isinstance(e, se.Basic) and any(e.has(v) for v in (se.oo, -se.oo, se.zoo, se.nan))


def _refine(t: Any) -> Any:
    """A monomial with its index expressions re-simplified under the single-variable bounds
    its own brackets state (``[q >= 1] x(floor((q + 7) / 8))`` is ``[q >= 1] x(1)`` when
    ``q < 9``). The brackets that state the bounds are kept."""
    factors = _factors(t)
    narrowed: dict[Any, tuple[int, int | None]] = {}
    for f in factors:
        n = name_of(f)
        if n not in ("_GE", "_EQ"):
            continue
        form = _integer_form(f.args[0])
        if form is None or len(form[0]) != 1:
            continue
        ((v, a),), c = form[0].items(), form[1]
        if not isinstance(v, se.Symbol) or v not in RANGES or a not in (1, -1):
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


def _single_var_bracket(f: Any) -> bool:
    form = _integer_form(f.args[0])
    return form is not None and len(form[0]) == 1


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


def _piecewise_args(args: list[Any]) -> Any:
    pairs = []
    for i in range(0, len(args), 2):
        v, c = args[i], args[i + 1]
        if c == se.false:
            continue
        pairs.append((v, c))
        if c == se.true:
            break
    pairs = _drop_default_branches(pairs)
    if len(pairs) == 1 and pairs[0][1] == se.true:
        return pairs[0][0]
    if not pairs:
        return ZERO
    return se.Piecewise(*pairs)


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
    """``[c]^n = [c]`` in every monomial of an expanded sum."""
    terms = e.args if isinstance(e, se.Add) else (e,)
    changed = False
    out = []
    for t in terms:
        factors = _factors(t)
        new = [f.args[0] if isinstance(f, se.Pow) and is_bracket(f.args[0])
               and isinstance(f.args[1], se.Integer) and int(f.args[1]) > 0 else f
               for f in factors]  # fmt: skip
        if any(a is not b for a, b in zip(new, factors, strict=True)):
            changed = True
            out.append(se.Mul(*new))
        else:
            out.append(t)
    return se.Add(*out) if changed else e


# -- derivative and transpose ------------------------------------------------------------------


def jvp_term(e: Any, tangent: Mapping[str, str], conventional: Callable[[Any], Any]) -> Any:
    """The directional derivative of ``e``: every read of a leaf named in ``tangent`` moves in
    the direction of the read of its tangent leaf at the same indices; sums differentiate
    under the sum; ``Max`` / ``Min`` are read with the tie conventions (``conventional``)
    first. Tables, index symbols and reads of other leaves are constants."""
    e = conventional(e)
    memo: dict[Any, Any] = {}
    return _jvp(e, tangent, conventional, memo)


def _jvp(e: Any, tangent: Mapping[str, str], conv: Callable[[Any], Any], memo: dict) -> Any:
    if not isinstance(e, se.Basic):
        return ZERO
    hit = memo.get(e)
    if hit is not None:
        return hit
    atoms = _moving_atoms(e, tangent)
    if not atoms:
        memo[e] = ZERO
        return ZERO
    temps = {a: se.Symbol(f"_d{i}") for i, a in enumerate(atoms)}
    flat = e.xreplace(temps)
    out = ZERO
    for a, t in temps.items():
        d = flat.diff(t)
        if d == 0:
            continue
        n = name_of(a)
        if n == "_SUM":
            body, k = a.args
            da = SUM(_jvp(conv(body), tangent, conv, memo), k)
        elif n == "_MAXR":
            raise TermError("the derivative of a maximum over a long axis is not defined here")
        elif n in DERIVED:
            da = DERIVED[n].jvp(a.args, lambda v: _jvp(conv(v), tangent, conv, memo))
        else:
            tname = tangent[n]  # type: ignore[index]
            if n in LEAF_SHAPES:
                LEAF_SHAPES[tname] = LEAF_SHAPES[n]  # type: ignore[index]
            da = se.Function(tname)(*a.args)
        back = {t2: a2 for a2, t2 in temps.items()}
        out = out + d.xreplace(back) * da
    memo[e] = out
    return out


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
        if n in ("_SUM", "_MAXR"):
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


# -- concrete elements -------------------------------------------------------------------------


def element_symbol(name: str, idx: Sequence[int]) -> Any:
    """The element symbol of the element method (``x[1,2]``; ``x`` for a scalar)."""
    return se.Symbol(f"{name}[{','.join(map(str, idx))}]" if idx else name)


def concretize(
    e: Any,
    values: Mapping[Any, int],
    nat: Mapping[str, np.ndarray] | None = None,
    leaf: Callable[[str, tuple[int, ...]], Any] = element_symbol,
) -> Any:
    """The element-level expression of ``e`` at concrete index values: sums expanded, brackets
    and tables evaluated, reads of leaves as element symbols (``leaf``), reads of nat tensors
    (``nat``) as their values."""
    nat = nat or {}
    memo: dict[Any, Any] = {}
    env = {k: se.Integer(int(v)) for k, v in values.items()}

    def go(x: Any, env: dict[Any, Any]) -> Any:
        if not isinstance(x, se.Basic):
            return x
        if isinstance(x, se.Symbol):
            return env.get(x, x)
        if not x.args and not isinstance(x, se.FunctionSymbol):  # a 0-d read is a read
            return x
        key = (x, tuple(sorted((str(k), v) for k, v in env.items() if k in x.free_symbols)))
        hit = memo.get(key)
        if hit is not None:
            return hit
        n = name_of(x)
        if n == "_SUM":
            body, k = x.args
            lo, hi = _concrete_range(k, body, env, nat)
            out = se.Add(*[go(body, {**env, k: se.Integer(v)}) for v in range(lo, hi + 1)])
        elif n == "_MAXR":
            body, k, lo, hi = x.args
            out = se.Max(*[go(body, {**env, k: se.Integer(v)}) for v in range(int(lo), int(hi))])
        elif n in ("_GE", "_EQ"):
            v = _int_value(go(x.args[0], env), nat)
            out = ONE if (v >= 0 if n == "_GE" else v == 0) else ZERO
        elif n is not None:
            idx = tuple(_int_value(go(a, env), nat) for a in x.args)
            if n in DERIVED:
                out = DERIVED[n].concrete(idx, lambda v: go(v, {}))
            elif n.startswith("_T"):
                table = TABLES[n]
                inside = all(0 <= i < s for i, s in zip(idx, table.shape, strict=True))
                # a read outside the table only occurs under a bracket that is 0 there
                out = exact_scalar(table[idx]) if inside else ZERO
            elif n in nat:
                arr = nat[n]
                inside = all(0 <= i < s for i, s in zip(idx, arr.shape, strict=True))
                out = se.Integer(int(arr[idx])) if inside else ZERO
            else:
                shape = LEAF_SHAPES.get(n)
                if shape is not None and not all(
                    0 <= i < d for i, d in zip(idx, shape, strict=True)
                ):
                    out = ZERO  # outside the leaf: only under a bracket that is 0 there
                else:
                    out = leaf(n, idx)
        elif isinstance(x, se.floor):
            out = se.Integer(math.floor(Fraction(str(go(x.args[0], env)))))
        else:
            out = rebuild(x, [go(a, env) for a in x.args])
        memo[key] = out
        return out

    return go(e, env)


def _int_value(v: Any, nat: Mapping[str, np.ndarray]) -> int:
    if isinstance(v, se.Integer):
        return int(v)
    if isinstance(v, se.Number):
        f = Fraction(str(v))
        if f.denominator == 1:
            return int(f)
    raise TermError(f"index expression {v} has no integer value here")


def _concrete_range(
    k: Any, body: Any, env: Mapping[Any, Any], nat: Mapping[str, np.ndarray]
) -> tuple[int, int]:
    """Inclusive bounds of ``k`` from its range brackets in ``body`` at concrete outer values."""
    lo, hi = -math.inf, math.inf
    for f in _factors(body):
        if name_of(f) != "_GE":
            continue
        arg = f.args[0].xreplace(dict(env)) if env else f.args[0]
        if arg.free_symbols != {k}:
            continue
        lin = _integer_form(arg)
        if lin is None or set(lin[0]) != {k}:
            continue
        coeffs, const = lin
        a = coeffs[k]
        if a > 0:
            lo = max(lo, math.ceil(Fraction(-const, a)))
        else:
            hi = min(hi, math.floor(Fraction(const, -a)))
    if lo == -math.inf or hi == math.inf:
        r = RANGES.get(k)
        if r is None or r[1] is None:
            raise TermError(f"the range of {k} is not bounded")
        lo = max(lo, r[0])
        hi = min(hi, r[1] - 1)
    return int(lo), int(hi)


__all__ = [
    "EQ",
    "GE",
    "MAXR",
    "NAT_RANGES",
    "RANGES",
    "SUM",
    "TABLES",
    "TermError",
    "bracket",
    "coefficient",
    "concretize",
    "element_symbol",
    "eq",
    "exact_scalar",
    "floor_div",
    "free_vars",
    "fresh",
    "ge",
    "interval",
    "jvp_term",
    "linear",
    "mod",
    "normalize",
    "read",
    "simplify_index",
    "smax",
    "ssum",
    "sum_over",
    "table_read",
]
