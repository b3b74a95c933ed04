"""A symbolic interpreter of jaxprs: JAX primitives over exact symengine arrays.

Values are NumPy arrays: float values are object arrays of symengine expressions; integer and
boolean values are plain NumPy arrays when concrete (index inputs, iota, shapes), or object
arrays when symbolic (comparisons of symbolic floats give relations; ``argmax`` gives
:class:`Choice` elements). Arithmetic is exact real arithmetic: float literals become the exact
rationals of their value in their own dtype (f32 or f64), and rounding of computed values is
not modelled (``convert_element_type`` between float types and ``reduce_precision`` are the
identity on expressions of the inputs; a constant converted to float32 is rounded to it, the
float32 constants model of :mod:`verify._f32`). Non-smooth primitives build the
same ``Piecewise`` forms as the symbolic backend ``SYM`` (``select_n`` is ``SYM.where``), so the
reference rules and their lowerings meet in one canonical form.

A primitive this interpreter does not know raises :class:`Unsupported`: the check that needed
it is then "not verified", never passed. Nested jaxprs (``jit``, ``custom_jvp_call``,
``custom_vjp_call``, ``closed_call``, ``remat``, ``cond``, ``scan``, bounded ``while``) are
interpreted recursively.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import SYM, SymArray, exact

from . import _f32
from ._abstract import LemmaError, current, explicit, softmax_rows
from ._decide import decide_equal
from ._primitives import JaxprInterpreter, Unsupported, out_dtype, supported
from ._primitives import rule as primitive_rule
from ._sig import named_symbols


@dataclass(frozen=True)
class Choice:
    """A symbolic integer: ``values[k]`` where ``conds[k]`` holds (conditions are mutually
    exclusive and exhaustive, as for the first maximum of ``argmax``)."""

    values: tuple[int, ...]
    conds: tuple[Any, ...]

    def test(self, pred: Callable[[int], bool]) -> Any:
        hits = [c for v, c in zip(self.values, self.conds, strict=True) if pred(v)]
        if not hits:
            return se.false
        if len(hits) == len(self.values):
            return se.true
        return hits[0] if len(hits) == 1 else se.Or(*hits)

    def map(self, fn: Callable[[int], int]) -> Choice:
        return Choice(tuple(fn(v) for v in self.values), self.conds)

    def as_expr(self) -> Any:
        pieces = [(se.Integer(v), c) for v, c in zip(self.values, self.conds, strict=True)]
        pieces[-1] = (pieces[-1][0], se.true)
        return se.Piecewise(*pieces)


# -- value helpers ---------------------------------------------------------------------------


def _kind(aval: Any) -> str:
    """``"f"`` float, ``"i"`` integer (signed or unsigned), ``"b"`` bool."""
    dt = np.dtype(aval.dtype)
    if dt.kind == "f":
        return "f"
    if dt.kind in "iu":
        return "i"
    if dt.kind == "b":
        return "b"
    raise Unsupported(f"dtype {dt}")


def _scalar(v: Any) -> Any:
    """A concrete NumPy scalar as what symbolic code mixes with: booleans as symengine's."""
    if isinstance(v, bool | np.bool_):
        return se.true if v else se.false
    if isinstance(v, np.integer):
        return int(v)
    return v


def _obj(a: Any) -> np.ndarray:
    if isinstance(a, np.ndarray) and a.dtype == object:
        return a
    out = np.empty(np.shape(a), dtype=object)
    if isinstance(a, np.ndarray):
        for ix in np.ndindex(a.shape):
            out[ix] = _scalar(a[ix])
    else:
        out[()] = _scalar(a)
    return out


def _concrete(a: np.ndarray) -> bool:
    return a.dtype != object


def to_float_array(a: np.ndarray) -> np.ndarray:
    """Exact symengine numbers for a float value given as NumPy floats or expressions."""
    if a.dtype == object:
        return a
    out = np.empty(a.shape, dtype=object)
    for ix in np.ndindex(a.shape):
        out[ix] = exact(a[ix].item())
    return out


def _ew(fn: Callable[..., Any], *arrays: np.ndarray) -> np.ndarray:
    shape = np.broadcast_shapes(*[a.shape for a in arrays])
    arrs = [np.broadcast_to(a, shape) for a in arrays]
    out = np.empty(shape, dtype=object)
    for ix in np.ndindex(shape):
        out[ix] = fn(*[a[ix] for a in arrs])
    return out


def _same_kind(arrays: Sequence[np.ndarray], k: str) -> list[np.ndarray]:
    if k == "f":
        return [to_float_array(a) for a in arrays]
    if all(_concrete(a) for a in arrays):
        return list(arrays)
    return [_obj(a) for a in arrays]


def _sym(a: np.ndarray) -> SymArray:
    return SymArray(_obj(a))


def _literal(v: Any, aval: Any) -> np.ndarray:
    k = _kind(aval)
    if k == "f":
        # the value in the literal's own dtype: a weakly typed ``0.7:f32[]`` may hold the
        # Python float 0.7, which the program materialises as the nearest float32
        with np.errstate(over="ignore"):
            arr = np.asarray(v, dtype=np.dtype(aval.dtype))
        return to_float_array(arr.astype(np.float64))
    return np.asarray(v).astype(np.dtype(aval.dtype))


def _int_value(x: Any) -> int:
    if isinstance(x, int | np.integer):
        return int(x)
    if isinstance(x, se.Integer):
        return int(x)
    raise Unsupported(f"a symbolic index ({x})")


def _bool_value(x: Any) -> bool | None:
    if isinstance(x, bool | np.bool_):
        return bool(x)
    if x is se.true or x == se.true:
        return True
    if x is se.false or x == se.false:
        return False
    return None


# -- the interpreter -------------------------------------------------------------------------


class Interpreter(JaxprInterpreter):
    """Evaluates jaxprs over symbolic values, every element its own expression
    (:mod:`verify._primitives`: the walk, the call hook and the table shared with the tensor
    level). Inside the softmax abstraction a compiled ``tl_softmax`` call is read as softmax
    rows (:func:`softmax_call`)."""

    domain = "element"

    def input(self, a: Any, aval: Any) -> np.ndarray:
        if isinstance(a, SymArray):
            return a.a
        k = _kind(aval)
        arr = a if isinstance(a, np.ndarray) else np.asarray(a)
        if k == "f":
            return to_float_array(arr)
        return arr

    def literal(self, v: Any, aval: Any) -> np.ndarray:
        return _literal(v, aval)

    def shape(self, value: Any) -> tuple[Any, ...]:
        return np.shape(value)

    def intercept(self, eqn: Any, invals: list[Any]) -> list[Any] | None:
        return softmax_call(eqn, invals)  # only inside the softmax abstraction


rule = partial(primitive_rule, domain="element")


def supported_primitives() -> list[str]:
    """The names of the JAX primitives the element-level interpreter follows."""
    return supported("element")


def out_kind(eqn: Any, i: int = 0) -> str:
    return _kind(eqn.outvars[i].aval)


# -- elementwise -----------------------------------------------------------------------------


def _float_unary(fn: Callable[[SymArray], SymArray]) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
        if out_kind(eqn) != "f":
            raise Unsupported(f"{eqn.primitive.name} on {eqn.outvars[0].aval.dtype}")
        return fn(_sym(invals[0])).a

    return impl


rule("exp")(_float_unary(SYM.exp))
rule("log")(_float_unary(SYM.log))
rule("log1p")(_float_unary(SYM.log1p))
rule("expm1")(_float_unary(SYM.expm1))
rule("tanh")(_float_unary(SYM.tanh))
rule("sqrt")(_float_unary(SYM.sqrt))
rule("rsqrt")(_float_unary(lambda x: 1 / SYM.sqrt(x)))
rule("cbrt")(_float_unary(lambda x: x ** se.Rational(1, 3)))
rule("logistic")(_float_unary(lambda x: 1 / (1 + SYM.exp(-x))))
rule("exp2")(_float_unary(lambda x: 2**x))
rule("sin")(_float_unary(lambda x: SymArray(_ew(se.sin, x.a))))
rule("cos")(_float_unary(lambda x: SymArray(_ew(se.cos, x.a))))
rule("erf")(_float_unary(lambda x: SymArray(_ew(se.erf, x.a))))
rule("square")(_float_unary(lambda x: x * x))


def _rounding(kind: str) -> Callable[..., Any]:
    def one(x: Any, method: int) -> Any:
        if isinstance(x, se.Integer | se.Rational):
            f = Fraction(str(x))
            if kind == "floor":
                return se.Integer(math.floor(f))
            if kind == "ceil":
                return se.Integer(math.ceil(f))
            if method == 1:  # to nearest, ties to even
                return se.Integer(round(f))
            lo = math.floor(abs(f) + Fraction(1, 2))  # away from zero
            return se.Integer(lo if f >= 0 else -lo)
        if kind == "floor":
            return se.floor(x)
        if kind == "ceil":
            return se.ceiling(x)
        raise Unsupported("round of a symbolic value")

    def impl(it: Interpreter, eqn: Any, invals: list, **p: Any) -> np.ndarray:
        method = int(getattr(p.get("rounding_method", 0), "value", p.get("rounding_method", 0)))
        return _ew(lambda x: one(x, method), to_float_array(invals[0]))

    return impl


rule("floor")(_rounding("floor"))
rule("ceil")(_rounding("ceil"))
rule("round")(_rounding("round"))


_INFINITE = (se.oo, -se.oo, se.zoo, se.nan)


@rule("is_finite")
def _is_finite(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    """Symbolic values are finite (inputs are finite reals inside the ops' domains); only the
    infinities and NaN themselves are not."""
    (a,) = invals
    if _concrete(a):
        return np.isfinite(a)
    return _ew(lambda x: se.false if any(x == v for v in _INFINITE) else se.true, a)


def _binary_int(np_fn: Callable, choice_fn: Callable | None = None) -> Callable:
    def impl(a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
        if _concrete(a) and _concrete(b):
            with np.errstate(all="ignore"):
                return np.asarray(np_fn(a.astype(dtype), b.astype(dtype))).astype(dtype)
        if choice_fn is None:
            raise Unsupported("integer arithmetic on symbolic integers")

        def one(x: Any, y: Any) -> Any:
            if isinstance(x, Choice) and not isinstance(y, Choice):
                return x.map(lambda v: choice_fn(v, int(y)))
            if isinstance(y, Choice) and not isinstance(x, Choice):
                return y.map(lambda v: choice_fn(int(x), v))
            if not isinstance(x, Choice) and not isinstance(y, Choice):
                return choice_fn(int(x), int(y))
            raise Unsupported("arithmetic on two symbolic integers")

        return _ew(one, _obj(a), _obj(b))

    return impl


def _c_div(a: Any, b: Any) -> Any:
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, 0, np.sign(a) * np.sign(b) * q)


_INT_BIN = {
    "add": _binary_int(np.add, lambda x, y: x + y),
    "add_any": _binary_int(np.add, lambda x, y: x + y),
    "sub": _binary_int(np.subtract, lambda x, y: x - y),
    "mul": _binary_int(np.multiply, lambda x, y: x * y),
    "div": _binary_int(_c_div),
    "rem": _binary_int(np.fmod),
    "max": _binary_int(np.maximum),
    "min": _binary_int(np.minimum),
    "and": _binary_int(np.bitwise_and),
    "or": _binary_int(np.bitwise_or),
    "xor": _binary_int(np.bitwise_xor),
    "shift_left": _binary_int(np.left_shift),
    "shift_right_arithmetic": _binary_int(np.right_shift),
    "pow": _binary_int(np.power),
}


def _shift_right_logical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ua = a.view(np.dtype(f"u{a.dtype.itemsize}"))
    return np.right_shift(ua, b.astype(ua.dtype)).view(a.dtype)


_INT_BIN["shift_right_logical"] = _binary_int(_shift_right_logical)

_NAN_TYPE = type(se.nan)


def _nan_positions(a: np.ndarray) -> np.ndarray | None:
    hits = [isinstance(x, _NAN_TYPE) for x in a.reshape(-1)]
    return np.array(hits).reshape(a.shape) if any(hits) else None


def _nan_kept(fn: Callable[[SymArray, SymArray], SymArray]) -> Callable[..., SymArray]:
    """``fn`` (an addition or subtraction) with IEEE's NaN: symengine reads ``oo + nan`` and
    ``-oo + nan`` as the infinity (``nan + oo`` as NaN), where JAX gives NaN."""

    def go(a: SymArray, b: SymArray) -> SymArray:
        out = fn(a, b)
        na, nb = _nan_positions(a.a), _nan_positions(b.a)
        if na is None and nb is None:
            return out
        mask = np.zeros(out.a.shape, dtype=bool)
        for m in (na, nb):
            if m is not None:
                mask |= np.broadcast_to(m, out.a.shape)
        res = out.a.copy()
        res[mask] = se.nan
        return SymArray(res)

    return go


_FLOAT_BIN: dict[str, Callable[[SymArray, SymArray], SymArray]] = {
    "add": _nan_kept(lambda a, b: a + b),
    "add_any": _nan_kept(lambda a, b: a + b),
    "sub": _nan_kept(lambda a, b: a - b),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": SYM.maximum,
    "min": SYM.minimum,
    "pow": lambda a, b: a**b,
    "atan2": lambda a, b: SymArray(_ew(se.atan2, a.a, b.a)),
}


@rule(*sorted(set(_INT_BIN) | set(_FLOAT_BIN)))
def _binary(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    name = eqn.primitive.name
    a, b = invals
    k = out_kind(eqn)
    if k == "f":
        fn = _FLOAT_BIN.get(name)
        if fn is None:
            raise Unsupported(f"{name} on floats")
        return fn(_sym(to_float_array(a)), _sym(to_float_array(b))).a
    if k == "b" and name in ("and", "or", "xor"):
        if _concrete(a) and _concrete(b):
            return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[name](a, b)
        if name == "xor":
            return _ew(lambda x, y: se.Xor(x, y), _obj(a), _obj(b))
        fn2 = SYM.logical_and if name == "and" else SYM.logical_or
        return fn2(_sym(a), _sym(b)).a
    fn3 = _INT_BIN.get(name)
    if fn3 is None:
        raise Unsupported(f"{name} on integers")
    return fn3(a, b, out_dtype(eqn))


@rule("neg")
def _neg(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.negative(a)
    if out_kind(eqn) == "i":
        return _ew(lambda x: x.map(lambda v: -v) if isinstance(x, Choice) else -x, a)
    return (-_sym(a)).a


@rule("not")
def _not(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.logical_not(a) if a.dtype == bool else np.invert(a)
    return SYM.logical_not(_sym(a)).a


@rule("abs")
def _abs(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.abs(a)
    return SYM.abs(_sym(a)).a


@rule("sign")
def _sign(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.sign(a)
    return SYM.sign(_sym(a)).a


@rule("integer_pow")
def _integer_pow(it: Interpreter, eqn: Any, invals: list, *, y: int) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.power(a, y)
    return _ew(lambda v: v**y, a)


@rule("clamp")
def _clamp(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    lo, x, hi = invals
    if _concrete(lo) and _concrete(x) and _concrete(hi):
        return np.clip(x, lo, hi)
    return SYM.minimum(SYM.maximum(_sym(x), _sym(lo)), _sym(hi)).a


_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "eq": lambda x, y: se.Eq(x, y),
    "ne": lambda x, y: se.Ne(x, y),
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}
_NP_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}  # fmt: skip
_PY_CMP: dict[str, Callable[[int, int], bool]] = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}


@rule(*_CMP)
def _compare(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    name = eqn.primitive.name
    a, b = invals
    if _concrete(a) and _concrete(b):
        return _NP_CMP[name](a, b)
    in_kind = _kind(eqn.invars[0].aval)
    if in_kind == "f":
        fa, fb = _sym(to_float_array(a)), _sym(to_float_array(b))
        if name == "eq":
            return (fa == fb).a
        if name == "ne":
            return (fa != fb).a
        return {"lt": fa < fb, "le": fa <= fb, "gt": fa > fb, "ge": fa >= fb}[name].a
    py = _PY_CMP[name]

    def one(x: Any, y: Any) -> Any:
        if isinstance(x, Choice) and not isinstance(y, Choice):
            return x.test(lambda v: py(v, _int_value(y)))
        if isinstance(y, Choice) and not isinstance(x, Choice):
            return y.test(lambda v: py(_int_value(x), v))
        if not isinstance(x, Choice) and not isinstance(y, Choice):
            if in_kind == "b":
                return _CMP[name](x, y)
            return se.true if py(_int_value(x), _int_value(y)) else se.false
        raise Unsupported("comparison of two symbolic integers")

    return _ew(one, _obj(a), _obj(b))


@rule("select_n")
def _select_n(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    pred, *cases = invals
    k = out_kind(eqn)
    if _concrete(pred):
        idx = pred.astype(np.int64)
        shape = np.broadcast_shapes(idx.shape, *[c.shape for c in cases])
        objs = [np.broadcast_to(c if k != "f" else to_float_array(c), shape) for c in cases]
        if all(_concrete(c) for c in cases):
            return np.choose(np.broadcast_to(idx, shape), objs)
        out = np.empty(shape, dtype=object)
        ib = np.broadcast_to(idx, shape)
        for ix in np.ndindex(shape):
            out[ix] = objs[ib[ix]][ix]
        return out
    if len(cases) != 2:
        raise Unsupported("select_n with a symbolic integer predicate")
    f_case, t_case = cases
    if pred.dtype == object and any(isinstance(x, Choice) for x in pred.reshape(-1)):
        raise Unsupported("select_n with a symbolic integer predicate")
    if k == "f":
        return SYM.where(_sym(pred), _sym(to_float_array(t_case)), _sym(to_float_array(f_case))).a
    if k == "b":
        return _ew(lambda c, t, f: se.Or(se.And(c, t), se.And(se.Not(c), f)), _obj(pred),
                   _obj(t_case), _obj(f_case))  # fmt: skip
    raise Unsupported("select_n of integers on a symbolic predicate")


@rule("convert_element_type")
def _convert(it: Interpreter, eqn: Any, invals: list, *, new_dtype: Any, **_: Any) -> np.ndarray:
    (a,) = invals
    src = _kind(eqn.invars[0].aval)
    dst = _kind(eqn.outvars[0].aval)
    dt = np.dtype(new_dtype)
    if dst == "f":
        # a constant converted to a narrower float32 is rounded (verify/_f32.py); rounding
        # of an expression of the inputs is not modelled
        narrow = _f32.is_float32(dt) and not _f32.is_float32(eqn.invars[0].aval.dtype)
        if src == "f":
            out = to_float_array(a)
            return _ew(_f32.round_number, out) if narrow else out
        if _concrete(a):
            out = to_float_array(a.astype(np.float64) if src == "b" else a)
            return _ew(_f32.round_number, out) if narrow else out
        if src == "b":
            return SYM.to_float(_sym(a)).a
        return _ew(lambda x: x.as_expr() if isinstance(x, Choice) else exact(int(x)), a)
    if src == "f":

        def trunc(x: Any) -> Any:
            if isinstance(x, se.Number):
                f = float(x)
                return math.trunc(f) if dst == "i" else f != 0
            raise Unsupported("float to integer conversion of a symbolic value")

        vals = _ew(trunc, _obj(a))
        return vals.astype(dt)
    if _concrete(a):
        return a.astype(dt)
    if dst == "b":
        return _ew(lambda x: x.test(lambda v: v != 0) if isinstance(x, Choice) else x, a)
    if src == "b":
        raise Unsupported("bool to integer conversion of a symbolic value")
    return a


@rule("iota")
def _iota(it: Interpreter, eqn: Any, invals: list, *, dtype: Any, shape: Any, dimension: int,
          **_: Any) -> np.ndarray:  # fmt: skip
    dt = np.dtype(dtype)
    ar = np.arange(shape[dimension]).reshape(
        [-1 if d == dimension else 1 for d in range(len(shape))]
    )
    out = np.broadcast_to(ar, shape).copy()
    return to_float_array(out.astype(np.float64)) if dt.kind == "f" else out.astype(dt)


# -- compiled softmax calls (inside the softmax abstraction) -------------------------------------

def call_key(sub: Any, shape: Sequence[int]) -> tuple:
    """A cache key of a closed jaxpr on ``shape``: its text *and its constants' values* (a
    mask is a constant, and the text does not show it)."""
    digests: list[str] = []

    def walk(closed: Any) -> None:
        for c in getattr(closed, "consts", ()):
            a = np.ascontiguousarray(np.asarray(c))
            digests.append(hashlib.sha1(a.tobytes() + str((a.dtype, a.shape)).encode())
                           .hexdigest())  # fmt: skip
        for eqn in getattr(closed, "jaxpr", closed).eqns:
            for v in eqn.params.values():
                if hasattr(v, "jaxpr") and hasattr(v, "consts"):
                    walk(v)

    walk(sub)
    return (str(sub), tuple(shape), tuple(digests))


_SOFTMAX_CALLS: dict[tuple[Any, ...], np.ndarray] = {}


def check_softmax_call(sub: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Prove a compiled ``tl_softmax`` body (a closed jaxpr over an array of ``shape``) equal to
    the explicit softmax along the last axis over its valid entries, exactly, for every
    element; return its mask (valid entries). Cached per body, shape and constants."""
    key = call_key(sub, shape)  # the text and the constants (the mask) of the body
    hit = _SOFTMAX_CALLS.get(key)
    if hit is not None:
        return hit
    with explicit():
        (probe,) = Interpreter().run(sub, np.zeros(shape))
        valid = np.vectorize(lambda v: se.sympify(v) != 0, otypes=[bool])(probe)
        z = named_symbols("z", tuple(shape))
        (got,) = Interpreter().run(sub, z)
        want = softmax_rows(z.a, -1, valid)
        for ix in np.ndindex(*shape):
            d = decide_equal(se.sympify(got[ix]), se.sympify(want[ix]))
            if not (d.equal is True and d.method == "exact"):
                raise LemmaError(
                    f"tl_softmax{list(shape)} element {list(ix)} is not proved equal to "
                    f"exp(z_j) / sum exp(z_k): {d.how}"
                )
    _SOFTMAX_CALLS[key] = valid
    return valid


def softmax_call(eqn: Any, invals: list[Any]) -> list[np.ndarray] | None:
    """A compiled ``tl_softmax`` call read as softmax rows (``None`` outside the abstraction or
    for another call)."""
    table = current()
    if table is None or eqn.params.get("name") != "tl_softmax" or len(invals) != 1:
        return None
    x = np.asarray(invals[0], dtype=object)
    valid = check_softmax_call(eqn.params["jaxpr"], x.shape)
    table.calls += 1
    return [softmax_rows(x, -1, valid)]


__all__ = ["Choice", "Interpreter", "Unsupported", "supported_primitives", "to_float_array"]
