"""Index expressions as z3 integer terms, brackets as formulas: the one place the verifier
speaks to z3 about integers (sign facts here, regions and case splits in the decision)."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import symengine as se

from .core import BOUND, RANGES, UPPER, TermError, is_bracket, is_read, name_of
from .index import NAT_RANGES, linear


class Z3:
    """Index expressions as z3 integer terms; brackets as formulas."""

    def __init__(self, facts_only: bool = False) -> None:
        import z3

        self.z3 = z3
        self.vars: dict[Any, Any] = {}
        self.funcs: dict[str, Any] = {}
        self.facts: list[Any] = []
        self.facts_only = facts_only

    def var(self, s: Any) -> Any:
        v = self.vars.get(s)
        if v is None:
            v = self.z3.Int(s.name)
            self.vars[s] = v
            lo, hi = RANGES.get(s, (None, None))
            if self.facts_only and s in BOUND:
                lo = hi = None
            if lo is not None:
                self.facts.append(v >= lo)
            if hi is not None:
                self.facts.append(v < hi)
            up = UPPER.get(s)
            if up is not None and not (self.facts_only and s in BOUND):
                self.facts.append(v < self.term(up))
        return v

    def term(self, e: Any) -> Any:
        z3 = self.z3
        if isinstance(e, se.Integer):
            return z3.IntVal(int(e))
        if isinstance(e, se.Symbol):
            return self.var(e)
        if isinstance(e, se.Add):
            return z3.Sum(*[self.term(a) for a in e.args])
        if isinstance(e, se.Mul):
            nums = [a for a in e.args if isinstance(a, se.Number)]
            rest = [a for a in e.args if not isinstance(a, se.Number)]
            c = math.prod((Fraction(str(n)) for n in nums), start=Fraction(1))
            if c.denominator != 1:
                raise TermError(f"non-integer coefficient in {e}")
            out = z3.IntVal(int(c))
            for r in rest:
                out = out * self.term(r)
            return out
        if isinstance(e, se.floor):
            inner = e.args[0]
            lin = linear(inner)
            if lin is None:
                raise TermError(f"cannot read {e}")
            coeffs, const = lin
            dens = [Fraction(str(c)).denominator for c in [*coeffs.values(), const]]
            d = math.lcm(*dens)
            num = se.expand(inner * d)
            return self.term(num) / d  # z3 integer division is floor for d > 0
        if isinstance(e, se.Max | se.Min):
            args = [self.term(a) for a in e.args]
            out = args[0]
            for a in args[1:]:
                out = z3.If(a > out, a, out) if isinstance(e, se.Max) else z3.If(a < out, a, out)
            return out
        if is_bracket(e):
            return z3.If(self.bracket(e), 1, 0)
        if is_read(e):
            name = name_of(e)
            f = self.funcs.get(name)
            if f is None:
                f = z3.Function(name, *[z3.IntSort()] * (len(e.args) + 1))
                self.funcs[name] = f
            app = f(*[self.term(a) for a in e.args])
            r = NAT_RANGES.get(name)
            if r is not None:
                self.facts.append(app >= r[0])
                if r[1] is not None:
                    self.facts.append(app < r[1])
            return app
        raise TermError(f"not an index expression: {e}")

    def bracket(self, b: Any) -> Any:
        n = name_of(b)
        t = self.term(b.args[0])
        return t >= 0 if n == "_GE" else t == 0


#: z3's resource units granted per second of the old wall-clock timeouts (about what z3 spends
#: in a second on this project's CI machines); a budget in these units is the same on any
#: machine and under any load, so it decides the same way everywhere.
RLIMIT_PER_SECOND = 1_000_000


def solver(seconds: float) -> Any:
    """A z3 solver whose every ``check`` is bounded by a deterministic resource limit worth
    about ``seconds`` (never by a wall-clock timeout): a question gets the same answer, or the
    same "unknown", in every process."""
    import z3

    class _Bounded(z3.Solver):
        def check(self, *assumptions: Any) -> Any:
            self.set("rlimit", int(seconds * RLIMIT_PER_SECOND))  # afresh for each check
            return super().check(*assumptions)

    return _Bounded()


__all__ = ["RLIMIT_PER_SECOND", "Z3", "solver"]
