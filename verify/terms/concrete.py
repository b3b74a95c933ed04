"""Terms at concrete indices: :func:`concretize` writes an element term out as a closed
expression once every index and runtime index value is a number."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from .core import (
    DERIVED,
    LEAF_SHAPES,
    ONE,
    RANGES,
    TABLES,
    ZERO,
    TermError,
    _factors,
    element_symbol,
    exact_scalar,
    name_of,
    rebuild,
)
from .index import _integer_form, linear


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
        elif isinstance(x, se.Mul) and _bracket_off(x.args, lambda a: go(a, env)):
            # a bracket is a selection (a concatenation's piece, a slice's range): where it is
            # 0 the other factors are not computed, as the program does not compute them (a
            # piece read outside its range can be log 0 there, and 0 * -oo is no number)
            out = ZERO
        else:
            out = rebuild(x, [go(a, env) for a in x.args])
        memo[key] = out
        return out

    return go(e, env)


def _bracket_off(factors: Any, value: Callable[[Any], Any]) -> bool:
    """Whether one of the bracket factors (``_GE`` / ``_EQ``) of a product is 0 here."""
    return any(name_of(f) in ("_GE", "_EQ") and value(f) == ZERO for f in factors)


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


def np_eval(e: Any, env: dict[Any, np.ndarray]) -> Any:
    """An integer index term evaluated with NumPy arrays for its symbols."""
    if isinstance(e, se.Integer):
        return int(e)
    if isinstance(e, se.Rational):
        raise TermError(f"non-integer {e} in an integer term")
    if isinstance(e, se.Symbol):
        if e not in env:
            raise TermError(f"symbolic integer {e}")
        return env[e]
    if isinstance(e, se.Add):
        out: Any = 0
        for a in e.args:
            out = out + np_eval(a, env)
        return out
    if isinstance(e, se.Mul):
        num = [a for a in e.args if isinstance(a, se.Number)]
        if len(num) == 1 and not isinstance(num[0], se.Integer):
            raise TermError(f"non-integer coefficient in {e}")
        out = 1
        for a in e.args:
            out = out * np_eval(a, env)
        return out
    if isinstance(e, se.floor):
        inner = e.args[0]
        lin = linear(inner)
        if lin is None:
            raise TermError(f"cannot evaluate {e}")
        coeffs, const = lin
        d = math.lcm(*[Fraction(str(c)).denominator for c in [*coeffs.values(), const]])
        return np.floor_divide(np_eval(se.expand(inner * d), env), d)
    n = name_of(e)
    if n == "_GE":
        return (np_eval(e.args[0], env) >= 0).astype(np.int64)
    if n == "_EQ":
        return (np_eval(e.args[0], env) == 0).astype(np.int64)
    if n is not None and n.startswith("_T"):
        table = TABLES[n]
        idx = tuple(np.asarray(np_eval(a, env)) for a in e.args)
        idx = np.broadcast_arrays(*idx) if idx else ()
        return table[tuple(np.clip(i, 0, s - 1) for i, s in zip(idx, table.shape, strict=True))]
    raise TermError(f"cannot evaluate {e} concretely")
