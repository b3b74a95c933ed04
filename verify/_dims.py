"""Symbolic sizes: an array axis whose length is a named positive integer.

A rule proved with symbolic sizes is proved for every size, but only if the rule's Python code
cannot have looked at a size in a way that depends on its value: a :class:`Dim` answers a
comparison or a truth test only when the answer is the same for every positive value of the
size symbols (``n >= 1``, ``n == n``, ``n + 1 != n``), and refuses anything else
(:class:`SizeDependent`): ``n == 1``, ``n > 8``, ``int(n)``, ``range(n)``, indexing with it.
Arithmetic builds new sizes (``n * m``, ``n - 0``); exact division only (``(n * m) // m``).

Dims are used by :mod:`verify._certify` for the size-generic certificates; the tensor backend
(:mod:`verify._tensor`) and the terms (:mod:`verify.terms`) accept them wherever a shape's
entry goes, and write them as their symengine expression in index terms (a sum's range
``[k < n]``, a mean's ``1 / n``). The size symbols are registered as index symbols of range
``[1, oo)`` (:func:`verify.terms.size_symbol`), so the decision procedure reasons about them
as about any free integer, with exactly the facts that hold for every size.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se


class SizeDependent(TypeError):
    """A rule used a symbolic size in a way whose outcome depends on the size's value;
    ``symbols`` are the size symbols involved (:mod:`verify._sizecert` may prove again with
    those sizes less general: ``divisor`` says the rule divided by it, ``fixed`` that only a
    concrete value can do, as for ``int(n)`` or ``range(n)``)."""

    def __init__(self, message: str, *values: Any, divisor: int | None = None,
                 fixed: bool = False) -> None:  # fmt: skip
        super().__init__(message)
        self.divisor = divisor
        self.fixed = fixed
        found: set[Any] = set()
        for v in values:
            e = v.expr if isinstance(v, Dim) else v
            found |= set(getattr(e, "free_symbols", ()))
        self.symbols = frozenset(found)


#: Each size symbol's least value (1 unless a certificate asked for more, see
#: :mod:`verify._certify`); a symbol's name says it, so a name always means the same range.
LOWER: dict[Any, int] = {}


def register(s: Any, lo: int) -> None:
    """Record the size symbol ``s`` with least value ``lo >= 1``."""
    if lo < 1:
        raise ValueError(f"a size symbol's least value must be at least 1, got {lo}")
    if LOWER.setdefault(s, lo) != lo:
        raise ValueError(f"size symbol {s} registered with two least values")


def _positive_everywhere(p: Any, strict: bool) -> bool:
    """Whether the polynomial ``p`` in size symbols is ``> 0`` (``strict``) or ``>= 0`` for
    every assignment of integers ``n >= lo(n)``: written in ``n = lo + u`` (``u >= 0``), a
    polynomial whose coefficients are all nonnegative is ``>= 0``, and ``> 0`` when its constant
    is too. (Sufficient, not necessary: an undecided comparison is refused, never guessed.)"""
    p = se.expand(p)
    syms = sorted(p.free_symbols, key=str)
    if not syms:
        return bool(p > 0) if strict else bool(p >= 0)
    if any(s not in LOWER for s in syms):
        return False  # not a size symbol: nothing known
    u = {s: s + LOWER[s] for s in syms}
    q = se.expand(p.xreplace(u))
    terms = q.args if isinstance(q, se.Add) else (q,)
    const = se.Integer(0)
    for t in terms:
        if isinstance(t, se.Number):
            const = const + t
            continue
        c = se.Integer(1)
        for f in t.args if isinstance(t, se.Mul) else (t,):
            if isinstance(f, se.Number):
                c = c * f
            elif not _monomial_factor(f):
                return False
        if c < 0:
            return False
    return bool(const > 0) if strict else bool(const >= 0)


def _monomial_factor(f: Any) -> bool:
    """A size symbol or a positive integer power of one."""
    if isinstance(f, se.Symbol):
        return True
    return (isinstance(f, se.Pow) and isinstance(f.args[0], se.Symbol)
            and isinstance(f.args[1], se.Integer) and f.args[1] > 0)  # fmt: skip


def sign(p: Any) -> str | None:
    """``"+"`` (> 0 for every size), ``"0"`` (identically 0), ``"-"`` (< 0), ``"0+"`` (>= 0),
    ``"0-"`` (<= 0), or ``None`` (depends on the sizes)."""
    p = se.expand(p)
    if p == 0:
        return "0"
    if _positive_everywhere(p, True):
        return "+"
    if _positive_everywhere(-p, True):
        return "-"
    if _positive_everywhere(p, False):
        return "0+"
    if _positive_everywhere(-p, False):
        return "0-"
    return None


def _expr(v: Any) -> Any:
    if isinstance(v, Dim):
        return v.expr
    if isinstance(v, bool):
        raise SizeDependent(f"a size compared with the boolean {v}")
    if isinstance(v, int):
        return se.Integer(v)
    if isinstance(v, np.integer):
        return se.Integer(int(v))
    raise SizeDependent(f"a size used with {type(v).__name__} {v!r}")


def dim(e: Any) -> Any:
    """``e`` (an expression in size symbols) as a :class:`Dim`, or as an ``int`` when it is
    a constant."""
    e = se.expand(e)
    if isinstance(e, se.Integer):
        return int(e)
    return Dim(e)


class Dim:
    """The length of an axis: a polynomial with integer coefficients in size symbols, each a
    positive integer. See the module."""

    __slots__ = ("expr",)

    def __init__(self, expr: Any) -> None:
        object.__setattr__(self, "expr", se.expand(expr))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Dim is immutable")

    def __repr__(self) -> str:
        return str(self.expr)

    def __hash__(self) -> int:
        return hash(self.expr)

    # -- comparisons: decided for every size, or refused --------------------------------------
    def _cmp(self, other: Any, want: dict[str, bool | None], what: str) -> bool:
        s = sign(self.expr - _expr(other))
        v = want.get(s) if s is not None else None
        if v is None:
            raise SizeDependent(f"the rule compares the size {self} {what} {other}, which "
                                "depends on the size's value", self, other)  # fmt: skip
        return v

    def __eq__(self, other: object) -> bool:  # type: ignore[override]
        if not isinstance(other, Dim | int) or isinstance(other, bool):
            try:
                _expr(other)
            except SizeDependent:
                return NotImplemented
        return self._cmp(other, {"0": True, "+": False, "-": False}, "==")

    def __ne__(self, other: object) -> bool:  # type: ignore[override]
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __lt__(self, other: Any) -> bool:
        return self._cmp(other, {"-": True, "0": False, "+": False, "0+": False}, "<")

    def __le__(self, other: Any) -> bool:
        return self._cmp(other, {"-": True, "0": True, "0-": True, "+": False}, "<=")

    def __gt__(self, other: Any) -> bool:
        return self._cmp(other, {"+": True, "0": False, "-": False, "0-": False}, ">")

    def __ge__(self, other: Any) -> bool:
        return self._cmp(other, {"+": True, "0": True, "0+": True, "-": False}, ">=")

    def __bool__(self) -> bool:
        return self != 0

    def __index__(self) -> int:
        raise SizeDependent(f"the rule uses the size {self} as a Python integer", self,
                            fixed=True)  # fmt: skip

    __int__ = __index__

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise SizeDependent(f"the rule makes a NumPy array of the size {self}", self,
                            fixed=True)  # fmt: skip

    def __float__(self) -> float:
        raise SizeDependent(f"the rule uses the size {self} as a float", self)

    # -- arithmetic ---------------------------------------------------------------------------
    def __add__(self, o: Any) -> Any:
        return dim(self.expr + _expr(o))

    def __radd__(self, o: Any) -> Any:
        return dim(_expr(o) + self.expr)

    def __sub__(self, o: Any) -> Any:
        return dim(self.expr - _expr(o))

    def __rsub__(self, o: Any) -> Any:
        return dim(_expr(o) - self.expr)

    def __mul__(self, o: Any) -> Any:
        return dim(self.expr * _expr(o))

    def __rmul__(self, o: Any) -> Any:
        return dim(_expr(o) * self.expr)

    def __neg__(self) -> Any:
        return dim(-self.expr)

    def __floordiv__(self, o: Any) -> Any:
        return floordiv(self.expr, _expr(o))

    def __rfloordiv__(self, o: Any) -> Any:
        return floordiv(_expr(o), self.expr)

    def __mod__(self, o: Any) -> Any:
        q = floordiv(self.expr, _expr(o))
        return dim(self.expr - _expr(o) * _expr(q))

    def value(self) -> Any:
        """The size as a real value (a mean's count), which must be positive for every size
        (so that no division by it is a division by zero the proof would not see)."""
        if sign(self.expr) != "+":
            raise SizeDependent(f"the size {self} used as a value may be 0 or less", self)
        return self.expr

    def __truediv__(self, o: Any) -> Any:
        """A real value (a mean's ``1 / n``), not a size."""
        if isinstance(o, Dim | int) and not isinstance(o, bool):
            den = o.value() if isinstance(o, Dim) else _expr(o)
            return self.expr / den
        return NotImplemented

    def __rtruediv__(self, o: Any) -> Any:
        if isinstance(o, float) and math.isfinite(o):
            f = Fraction(o)  # exactly the float's value, as every constant of a term
            return se.Rational(f.numerator, f.denominator) / self.value()
        if isinstance(o, Dim | int) and not isinstance(o, bool):
            return _expr(o) / self.value()
        return NotImplemented


def floordiv(a: Any, b: Any) -> Any:
    """``floor(a / b)`` for sizes ``a`` and ``b``, when it is a polynomial for every value of the
    size symbols: an exact polynomial quotient, or, for a constant ``b = d > 0``, ``a = d P + c``
    with ``P`` integer-valued (every non-constant coefficient divisible by ``d``), which makes it
    ``P + floor(c / d)`` for every value (``floor((d P + c) / d) = P + floor(c / d)`` for an
    integer ``P``). Anything else is refused."""
    a, b = se.expand(a), se.expand(b)
    if isinstance(b, se.Integer) and int(b) > 0:
        d = int(b)
        const = se.Integer(0)
        rest = se.Integer(0)
        for t in a.args if isinstance(a, se.Add) else (a,):
            if isinstance(t, se.Number):
                const = const + t
                continue
            c = _coefficient(t)
            if not isinstance(c, se.Integer) or int(c) % d:
                raise SizeDependent(f"the rule divides the size {a} by {b}, which is exact "
                                    "only for some sizes", a, divisor=d)  # fmt: skip
            rest = rest + t
        if not isinstance(const, se.Integer):
            raise SizeDependent(f"a size with a fractional constant {a}", a)
        return dim(rest / d + math.floor(Fraction(int(const), d)))
    q = se.expand(a / b)
    if isinstance(q, se.Integer) or (
        q.free_symbols
        and se.expand(q * b - a) == 0
        and all(_polynomial_term(t) for t in (q.args if isinstance(q, se.Add) else (q,)))
    ):
        return dim(q)  # fmt: skip
    raise SizeDependent(f"the rule divides the size {a} by {b}, which is exact only for some "
                        "sizes", a, b)  # fmt: skip


def _coefficient(t: Any) -> Any:
    c = se.Integer(1)
    for f in t.args if isinstance(t, se.Mul) else (t,):
        if isinstance(f, se.Number):
            c = c * f
    return c


def _polynomial_term(t: Any) -> bool:
    """An integer times a product of size symbols (positive integer powers)."""
    if isinstance(t, se.Integer):
        return True
    factors = t.args if isinstance(t, se.Mul) else (t,)
    return all(isinstance(f, se.Integer) or _monomial_factor(f) for f in factors)


def is_one(d: Any) -> bool:
    """Whether an axis has length 1 (a :class:`Dim` never does: it stands for every size)."""
    return not isinstance(d, Dim) and d == 1


def size_expr(d: Any) -> Any:
    """A shape entry (or an index expression) as a symengine term: a :class:`Dim` as its
    expression, an integer as a symengine integer, a term as it is."""
    if isinstance(d, Dim):
        return d.expr
    if isinstance(d, se.Basic):
        return d
    return se.Integer(int(d))


def is_symbolic(shape: Any) -> bool:
    return any(isinstance(d, Dim) for d in shape)


__all__ = [
    "LOWER",
    "Dim",
    "SizeDependent",
    "dim",
    "floordiv",
    "is_one",
    "is_symbolic",
    "register",
    "sign",
    "size_expr",
]
