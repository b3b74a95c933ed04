"""Rigorous enclosures of closed symengine expressions (mpmath interval arithmetic).

When a difference evaluated at an exact rational point is not itself a rational number (it
contains ``exp``, ``log``, ``tanh``, ...), an interval that excludes 0 proves it nonzero: the
mismatch is then as certain as an exact one.
"""

from __future__ import annotations

import math
from typing import Any

import mpmath
import symengine as se

IV = mpmath.iv
IV.prec = 256


class NoEnclosure(Exception):
    """The expression contains something this evaluator cannot enclose."""


def _rat(e: se.Basic) -> Any:
    p, q = (int(e.p), int(e.q)) if hasattr(e, "q") else (int(e), 1)
    return IV.mpf(p) / q


def _sign(iv: Any) -> int | None:
    if iv.a > 0:
        return 1
    if iv.b < 0:
        return -1
    if iv.a == 0 and iv.b == 0:
        return 0
    return None


def _cond(c: Any) -> bool:
    if c is se.true or c == se.true:
        return True
    if c is se.false or c == se.false:
        return False
    name = type(c).__name__
    if name in ("And", "Or"):
        vals = [_cond(a) for a in c.args]
        return all(vals) if name == "And" else any(vals)
    if name == "Not":
        return not _cond(c.args[0])
    if name in ("StrictLessThan", "LessThan", "Equality", "Unequality"):
        lhs, rhs = c.args
        d = se.expand(lhs - rhs)
        s = 0 if d == 0 else _sign(enclose(d))
        if s is None:
            raise NoEnclosure(f"cannot decide {c}")
        return {"StrictLessThan": s < 0, "LessThan": s <= 0, "Equality": s == 0,
                "Unequality": s != 0}[name]  # fmt: skip
    raise NoEnclosure(f"condition {c}")


def enclose(e: se.Basic) -> Any:
    """An mpmath interval containing the value of the closed expression ``e``."""
    if isinstance(e, se.Integer | se.Rational):
        return _rat(e)
    if e.free_symbols:
        raise NoEnclosure("not closed")
    name = type(e).__name__
    args = e.args
    if name == "Add":
        return sum((enclose(a) for a in args), IV.mpf(0))
    if name == "Mul":
        return math.prod((enclose(a) for a in args), start=IV.mpf(1))
    if name == "Pow":
        base, ex = args
        if base == se.E:
            return IV.exp(enclose(ex))
        if isinstance(ex, se.Integer):
            b = enclose(base)
            n = int(ex)
            if n >= 0:
                return b**n
            return 1 / (b ** (-n))
        if ex == se.Rational(1, 2):
            return IV.sqrt(enclose(base))
        if ex == se.Rational(-1, 2):
            return 1 / IV.sqrt(enclose(base))
        return IV.exp(enclose(ex) * IV.log(enclose(base)))
    if name == "log":
        return IV.log(enclose(args[0]))
    if name == "tanh":
        t = IV.exp(2 * enclose(args[0]))
        return 1 - 2 / (t + 1)
    if name == "sinh":
        x = enclose(args[0])
        return (IV.exp(x) - IV.exp(-x)) / 2
    if name == "cosh":
        x = enclose(args[0])
        return (IV.exp(x) + IV.exp(-x)) / 2
    if name == "erf":  # increasing: erf of the endpoints, each widened past mpmath's error
        x = enclose(args[0])
        with mpmath.workprec(IV.prec + 20):
            lo, hi = mpmath.erf(x.a), mpmath.erf(x.b)
        eps = mpmath.mpf(2) ** -(IV.prec - 4)
        return IV.mpf([lo - eps * (1 + abs(lo)), hi + eps * (1 + abs(hi))])
    if name == "sin":
        return IV.sin(enclose(args[0]))
    if name == "cos":
        return IV.cos(enclose(args[0]))
    if name == "Abs":
        x = enclose(args[0])
        s = _sign(x)
        if s is not None:
            return x if s >= 0 else -x
        return IV.mpf([0, max(abs(x.a), abs(x.b))])
    if name in ("Max", "Min"):
        vals = [enclose(a) for a in args]
        lo = [v.a for v in vals]
        hi = [v.b for v in vals]
        f = max if name == "Max" else min
        return IV.mpf([f(lo), f(hi)])
    if name == "Piecewise":
        for k in range(0, len(args), 2):
            if _cond(args[k + 1]):
                return enclose(args[k])
        raise NoEnclosure("no branch applies")
    if name == "Exp1":
        return IV.e
    if name == "Pi":
        return IV.pi
    raise NoEnclosure(name)


def nonzero(e: se.Basic, prec: int = 256, minus: se.Basic | None = None) -> tuple[bool, str]:
    """Whether ``e`` (``e - minus`` when given: each side enclosed on its own, for a difference
    too large to write out) is provably nonzero, and the enclosure that shows it, in interval
    arithmetic at ``prec`` bits."""
    saved = IV.prec
    IV.prec = prec
    try:
        iv = enclose(e) if minus is None else enclose(e) - enclose(minus)
    except (NoEnclosure, ZeroDivisionError, ValueError, TypeError):
        return False, ""
    finally:
        IV.prec = saved
    s = _sign(iv)
    lo, hi = (mpmath.nstr(mpmath.mpf(end._mpi_[0]), 6) for end in (iv.a, iv.b))
    return s is not None and s != 0, f"difference in [{lo}, {hi}]"
