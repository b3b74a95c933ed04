"""Elementwise primitives: float functions, rounding, arithmetic and bit operations, comparisons,
``select_n``, ``convert_element_type``, ``iota``, ``is_finite``.

Element level: every element its own exact expression (``SymArray`` operations of the symbolic
backend ``SYM`` where a primitive is not smooth, so that it builds the same ``Piecewise`` forms
as the reference rules; ``argmax`` results as :class:`verify._jaxpr.Choice` integers). Tensor
level: the same functions on the term of one symbolic element (:mod:`verify._tensor`), integer
arithmetic on concrete values carried out with NumPy and wrapped to the dtype. The tables both
domains read (the float functions of one argument, the integer operations on concrete values,
the comparisons on concrete values) are written once.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import SYM, SymArray, exact

from .. import _f32
from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import (
    Choice,
    Interpreter,
    _concrete,
    _ew,
    _int_value,
    _kind,
    _obj,
    _sym,
    out_kind,
    to_float_array,
)
from .._primitives import Unsupported, element, out_dtype, tensor
from .._tbackend import TENSOR
from .._tensor import TArray
from .._tjaxpr import TInterpreter, _kind_of_aval, concrete, from_concrete, out_tkind

#: The float functions of one argument, as functions of one element (both domains; ``erfc``
#: is followed at tensor level only, ``cbrt`` and ``exp2`` at element level only).
_UNARY: dict[str, Callable[[Any], Any]] = {
    "exp": se.exp,
    "log": se.log,
    "log1p": lambda v: se.log(1 + v),
    "expm1": lambda v: se.exp(v) - 1,
    "tanh": se.tanh,
    "sqrt": se.sqrt,
    "rsqrt": lambda v: 1 / se.sqrt(v),
    "cbrt": lambda v: v ** se.Rational(1, 3),
    "logistic": lambda v: 1 / (1 + se.exp(-v)),
    "exp2": lambda v: 2**v,
    "sin": se.sin,
    "cos": se.cos,
    "erf": se.erf,
    "erfc": lambda v: 1 - se.erf(v),
    "square": lambda v: v * v,
}


def _float_unary_e(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
        if out_kind(eqn) != "f":
            raise Unsupported(f"{eqn.primitive.name} on {eqn.outvars[0].aval.dtype}")
        return _ew(fn, _obj(invals[0]))

    return impl


def _float_unary_t(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def impl(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
        if out_tkind(eqn) != "f":
            raise Unsupported(f"{eqn.primitive.name} on {eqn.outvars[0].aval.dtype}")
        return TT.unary(invals[0], fn, "f")

    return impl


for _name, _fn in _UNARY.items():
    if _name != "erfc":
        element(_name)(_float_unary_e(_fn))
    if _name not in ("cbrt", "exp2"):
        tensor(_name)(_float_unary_t(_fn))


# -- rounding -------------------------------------------------------------------------------------


def _rounded(kind: str, x: Any, method: int) -> Any:
    """A rational number rounded as ``floor`` / ``ceil`` / ``round`` (``method`` 1: to
    nearest, ties to even; else away from zero)."""
    f = Fraction(str(x))
    if kind == "floor":
        return se.Integer(math.floor(f))
    if kind == "ceil":
        return se.Integer(math.ceil(f))
    if method == 1:  # to nearest, ties to even
        return se.Integer(round(f))
    lo = math.floor(abs(f) + Fraction(1, 2))  # away from zero
    return se.Integer(lo if f >= 0 else -lo)


def _method(p: dict[str, Any]) -> int:
    return int(getattr(p.get("rounding_method", 0), "value", p.get("rounding_method", 0)))


def _rounding(kind: str) -> Callable[..., Any]:
    def one(x: Any, method: int) -> Any:
        if isinstance(x, se.Integer | se.Rational):
            return _rounded(kind, x, method)
        if kind == "floor":
            return se.floor(x)
        if kind == "ceil":
            return se.ceiling(x)
        raise Unsupported("round of a symbolic value")

    def impl(it: Interpreter, eqn: Any, invals: list, **p: Any) -> np.ndarray:
        method = _method(p)
        return _ew(lambda x: one(x, method), to_float_array(invals[0]))

    return impl


for _how in ("floor", "ceil", "round"):
    element(_how)(_rounding(_how))


#: A constant array of at most this many elements is rounded element by element.
CONSTANT_MAX = 4096


def _constant_values(a: TArray) -> np.ndarray | None:
    """The rational numbers ``a`` holds, element by element (an object array of ``a``'s
    shape): one number where its term at a symbolic position is free of symbols (a broadcast
    constant, ``jnp.quantile``'s ``q (n - 1)``), else each element read at its position (a
    table of constants, several ``q``, of at most :data:`CONSTANT_MAX` elements); ``None``
    where any element is not a number (a value of the inputs)."""
    number = se.Integer | se.Rational
    try:
        v = a.at(T.free_vars(a.shape))
        if isinstance(v, number):
            return np.full(a.shape, v, dtype=object)
        if not all(isinstance(d, int | np.integer) for d in a.shape) or a.size > CONSTANT_MAX:
            return None
        out = np.empty(a.shape, dtype=object)
        for ix in np.ndindex(*a.shape):
            x = a.at(tuple(se.Integer(i) for i in ix))
            if not isinstance(x, number):
                return None
            out[ix] = x
    except T.TermError:
        return None
    return out


@tensor("floor", "ceil", "round")
def _rounding_t(it: TInterpreter, eqn: Any, invals: list, **p: Any) -> TArray:
    """A constant rounded exactly (the positions ``jnp.quantile`` interpolates between; the
    float product that gives them is not rounded, as nowhere here); a value of the inputs is
    refused (its derivative, 0 off the integers, is not modelled)."""
    name = eqn.primitive.name
    vals = _constant_values(invals[0])
    if vals is None:
        raise Unsupported(f"{name} of a value of the inputs (only a constant is rounded)")
    method = _method(p)
    rounded = np.vectorize(lambda v: int(_rounded(name, v, method)), otypes=[object])(vals)
    return TT.from_numpy(rounded.astype(np.float64))


# -- abs, sign, neg, not, clz ---------------------------------------------------------------------


# ``abs`` and ``sign``: NumPy on concrete values, else the backend's Piecewise form (``SYM``'s,
# the one the reference rules build; ``TENSOR``'s).
def _piecewise_e(name: str, np_fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def impl(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
        (a,) = invals
        if _concrete(a):
            return np_fn(a)
        return getattr(SYM, name)(_sym(a)).a

    return impl


def _piecewise_t(name: str, np_fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def impl(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
        (a,) = invals
        if out_tkind(eqn) != "f":
            return _concrete_op(eqn, invals, np_fn)
        return getattr(TENSOR, name)(a)

    return impl


for _name, _np_fn in (("abs", np.abs), ("sign", np.sign)):
    element(_name)(_piecewise_e(_name, _np_fn))
    tensor(_name)(_piecewise_t(_name, _np_fn))


@element("neg")
def _neg_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.negative(a)
    if out_kind(eqn) == "i":
        return _ew(lambda x: x.map(lambda v: -v) if isinstance(x, Choice) else -x, a)
    return (-_sym(a)).a


@tensor("neg")
def _neg_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    c = concrete(a) if a.kind in "ic" else None
    if c is not None:
        return from_concrete(np.negative(c).astype(out_dtype(eqn)))
    return TT.unary(a, lambda v: -v, a.kind)


@element("not")
def _not_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.logical_not(a) if a.dtype == bool else np.invert(a)
    return SYM.logical_not(_sym(a)).a


@tensor("not")
def _not_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    if out_tkind(eqn) == "c":
        return TT.logical("not", a)
    return _concrete_op(eqn, invals, np.invert)


@tensor("clz")
def _clz_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    bits = out_dtype(eqn).itemsize * 8

    def clz(v: np.ndarray) -> np.ndarray:
        v = v.astype(np.int64) & ((1 << bits) - 1)
        out = np.full(v.shape, bits, dtype=np.int64)
        for b in range(bits):
            out = np.where((v >> b) & 1 == 1, bits - 1 - b, out)
        return out

    return _concrete_op(eqn, invals, clz)


# -- integer_pow, clamp ---------------------------------------------------------------------------


@element("integer_pow")
def _integer_pow_e(it: Interpreter, eqn: Any, invals: list, *, y: int) -> np.ndarray:
    (a,) = invals
    if _concrete(a):
        return np.power(a, y)
    return _ew(lambda v: v**y, a)


@tensor("integer_pow")
def _integer_pow_t(it: TInterpreter, eqn: Any, invals: list, *, y: int) -> TArray:
    (a,) = invals
    return TT.unary(a, lambda v: v**y, a.kind)


@element("clamp")
def _clamp_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    lo, x, hi = invals
    if _concrete(lo) and _concrete(x) and _concrete(hi):
        return np.clip(x, lo, hi)
    return SYM.minimum(SYM.maximum(_sym(x), _sym(lo)), _sym(hi)).a


@tensor("clamp")
def _clamp_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    lo, x, hi = invals
    if out_tkind(eqn) == "f":
        return TENSOR.minimum(TENSOR.maximum(x, lo), hi)
    return TT.nary([lo, x, hi], lambda a, v, b: T.simplify_index(se.Min(se.Max(v, a), b)), "i")


# -- binary arithmetic ----------------------------------------------------------------------------


def _c_div(a: Any, b: Any) -> Any:
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, 0, np.sign(a) * np.sign(b) * q)


#: The integer operations on concrete values (both domains; in int64 at tensor level).
_INT_NP: dict[str, Callable[[Any, Any], Any]] = {
    "add": np.add,
    "add_any": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _c_div,
    "rem": np.fmod,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
    "shift_left": np.left_shift,
    "shift_right_arithmetic": np.right_shift,
    "pow": np.power,
}


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


#: The integer operations that also follow symbolic integers (an ``argmax`` at element level, a
#: term at tensor level).
_RING: dict[str, Callable[[Any, Any], Any]] = {
    "add": operator.add, "add_any": operator.add, "sub": operator.sub, "mul": operator.mul,
}  # fmt: skip
_INT_BIN = {n: _binary_int(f, _RING.get(n)) for n, f in _INT_NP.items()}


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


_FLOAT_BIN_E: dict[str, Callable[[SymArray, SymArray], SymArray]] = {
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


@element(*sorted(set(_INT_BIN) | set(_FLOAT_BIN_E)))
def _binary_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    name = eqn.primitive.name
    a, b = invals
    k = out_kind(eqn)
    if k == "f":
        fn = _FLOAT_BIN_E.get(name)
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


def _concrete_op(eqn: Any, invals: list, fn: Callable[..., Any]) -> TArray:
    vals = [concrete(v) if v.kind in "ic" else None for v in invals]
    if any(v is None for v in vals):
        raise Unsupported(f"{eqn.primitive.name} on symbolic integers")
    dt = out_dtype(eqn)
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*[v.astype(np.int64) for v in vals]))  # type: ignore[union-attr]
    return from_concrete(out.astype(dt))


def _srl(bits: int) -> Callable[[Any, Any], Any]:
    def fn(a: Any, b: Any) -> Any:
        mask = (1 << bits) - 1
        return (np.asarray(a, np.int64) & mask) >> np.asarray(b, np.int64)

    return fn


def _ieee(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``fn`` (an addition or subtraction) with IEEE's NaN: symengine reads ``-oo + nan`` as
    ``-oo``, where JAX gives NaN."""
    nan = type(se.nan)
    return lambda a, b: se.nan if isinstance(a, nan) or isinstance(b, nan) else fn(a, b)


_FLOAT_BIN_T: dict[str, Callable[[Any, Any], Any]] = {
    "add": _ieee(lambda a, b: a + b),
    "add_any": _ieee(lambda a, b: a + b),
    "sub": _ieee(lambda a, b: a - b),
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: se.Max(a, b),
    "min": lambda a, b: se.Min(a, b),
    "pow": lambda a, b: a**b,
    "atan2": lambda a, b: se.atan2(a, b),
}


_INT_SYMBOLIC: dict[str, Callable[[Any, Any], Any]] = {
    **_RING,
    "max": lambda a, b: T.simplify_index(se.Max(a, b)),
    "min": lambda a, b: T.simplify_index(se.Min(a, b)),
}


@tensor(*sorted(set(_FLOAT_BIN_T) | set(_INT_NP) | {"shift_right_logical"}))
def _binary_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    name = eqn.primitive.name
    a, b = invals
    k = out_tkind(eqn)
    if k == "f":
        fn = _FLOAT_BIN_T.get(name)
        if fn is None:
            raise Unsupported(f"{name} on floats")
        return TT.binary(a, b, fn)
    if k == "c" and name in ("and", "or", "xor"):
        if name == "xor":
            return TT.binary(a, b, lambda x, y: se.expand(x + y - 2 * x * y)).retype(
                _cond_kind(a, b)
            )  # type: ignore[attr-defined]
        return TT.logical(name, a, b)
    ca = concrete(a) if a.kind in "ic" else None
    cb = concrete(b) if b.kind in "ic" else None
    if ca is not None and cb is not None:
        dt = out_dtype(eqn)
        if name == "shift_right_logical":
            bits = dt.itemsize * 8
            out = _srl(bits)(ca, cb)
        else:
            with np.errstate(all="ignore"):
                out = _INT_NP[name](ca.astype(np.int64), cb.astype(np.int64))
        return from_concrete(_wrap_int(np.asarray(out), dt))
    fn = _INT_SYMBOLIC.get(name)
    if fn is None:
        if (
            name == "div"
            and cb is not None
            and np.all(cb == cb.reshape(-1)[0])
            and cb.reshape(-1)[0] > 0
        ):
            d = int(cb.reshape(-1)[0])
            return TT.unary(a, lambda v: _nonneg_floor(v, d), "i")
        raise Unsupported(f"{name} on symbolic integers")
    return TT.binary(a, b, fn).retype("i")  # type: ignore[attr-defined]


def _nonneg_floor(v: Any, d: int) -> Any:
    lo, _ = T.interval(v)
    if lo is None or lo < 0:
        raise Unsupported("integer division of a possibly negative symbolic value")
    return T.floor_div(v, d)


def _wrap_int(a: np.ndarray, dt: np.dtype) -> np.ndarray:
    """Integers reduced to the dtype's range (two's complement wrap-around, as XLA does)."""
    if dt == np.bool_:
        return a.astype(bool)
    bits = dt.itemsize * 8
    a = a.astype(np.int64) & ((1 << bits) - 1) if bits < 64 else a.astype(np.int64)
    if dt.kind == "i" and bits < 64:
        a = np.where(a >= (1 << (bits - 1)), a - (1 << bits), a)
    return a.astype(dt)


def _cond_kind(*arrays: TArray) -> str:
    return "c" if all(a.kind == "c" for a in arrays) else "n"


# -- comparisons ----------------------------------------------------------------------------------


#: The comparisons of Python values (element level: of concrete integers).
_PY_CMP: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
}  # fmt: skip
#: Element level: comparisons of symbolic booleans (``==`` of symengine values is structural).
_CMP = {**_PY_CMP, "eq": se.Eq, "ne": se.Ne}
#: The comparisons of concrete arrays (both domains).
_NP_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
           "gt": np.greater, "ge": np.greater_equal}  # fmt: skip


@element(*_CMP)
def _compare_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
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


@tensor(*_CMP)
def _compare_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    name = eqn.primitive.name
    a, b = invals
    ca = concrete(a) if a.kind in "ic" else None
    cb = concrete(b) if b.kind in "ic" else None
    if ca is not None and cb is not None:
        return from_concrete(_NP_CMP[name](ca, cb))
    if a.kind in "ic" and b.kind in "ic" and (_has_piecewise(a) or _has_piecewise(b)):
        return _compare_choice(a, b, name)
    if a.kind in "cn" or b.kind in "cn":
        a, b = _numeric(a), _numeric(b)
    return TT.compare(a, b, name)


def _numeric(a: TArray) -> TArray:
    if a.kind == "b":
        return TT.unary(a, lambda v: se.Piecewise((T.ONE, v), (T.ZERO, True)), "f")
    if a.kind in "cn":
        return TT.unary(a, lambda v: v, "f")
    return a


def _has_piecewise(a: TArray) -> bool:
    q = T.free_vars(a.shape)
    return T.has_atom(a.at(q), se.Piecewise)


def _compare_choice(a: TArray, b: TArray, name: str) -> TArray:
    """A comparison with a data-dependent integer (an ``argmax``): a Piecewise of brackets."""
    rel = {"eq": se.Eq, "ne": se.Ne, "lt": se.Lt, "le": se.Le,
           "gt": lambda x, y: se.Lt(y, x), "ge": lambda x, y: se.Le(y, x)}[name]  # fmt: skip

    def one(x: Any, y: Any) -> Any:
        if isinstance(y, se.Piecewise):
            args = list(y.args)
            pairs = [(one(x, args[i]), args[i + 1]) for i in range(0, len(args), 2)]
            return se.Piecewise(*pairs)
        if isinstance(x, se.Piecewise):
            args = list(x.args)
            pairs = [(one(args[i], y), args[i + 1]) for i in range(0, len(args), 2)]
            return se.Piecewise(*pairs)
        return T.bracket(rel(x, y))

    return TT.binary(a, b, one).retype("n")  # type: ignore[attr-defined]


# -- select_n -------------------------------------------------------------------------------------


@element("select_n")
def _select_n_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
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


@tensor("select_n")
def _select_n_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    pred, *cases = invals
    k = out_tkind(eqn)
    kind = "f" if k == "f" else ("i" if k == "i" else "n")
    cp = concrete(pred) if pred.kind in "ic" else None
    if cp is not None and np.all(cp == cp.reshape(-1)[0]):
        return TT.broadcast_to(cases[int(cp.reshape(-1)[0])], eqn.outvars[0].aval.shape)
    known = _known_relation(pred) if pred.kind == "b" else None
    if known is not None:  # a relation of constants (``jnp.var``'s ``n - ddof > 0``)
        return TT.broadcast_to(cases[int(known)], eqn.outvars[0].aval.shape)
    if len(cases) == 2:
        f_case, t_case = cases
        if pred.kind == "b":
            out = TT.where(pred, t_case, f_case)
        else:
            out = TT.nary([pred, t_case, f_case], TT._blend, kind)
        out.kind = kind if k != "c" else ("c" if all(c.kind == "c" for c in cases) else "n")
        return out
    if pred.kind != "i":
        raise Unsupported("select_n with more than two cases on a condition")

    def pick(p: Any, *vals: Any) -> Any:
        return se.Add(*[T.eq(p - j) * v for j, v in enumerate(vals)])

    return TT.nary([pred, *cases], pick, kind)


def _known_relation(pred: TArray) -> bool | None:
    """The value of a relation that holds or fails for every element (a comparison of
    constants), else ``None``: the case it does not select is never read (it may hold NaN)."""
    try:
        v = pred.at(T.free_vars(pred.shape))
    except T.TermError:
        return None
    if v == se.true:
        return True
    if v == se.false:
        return False
    return None


# -- convert_element_type -------------------------------------------------------------------------


@element("convert_element_type")
def _convert_e(it: Interpreter, eqn: Any, invals: list, *, new_dtype: Any, **_: Any) -> np.ndarray:
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


@tensor("convert_element_type")
def _convert_t(it: TInterpreter, eqn: Any, invals: list, *, new_dtype: Any, **_: Any) -> TArray:
    (a,) = invals
    src = _kind_of_aval(eqn.invars[0].aval)
    dst = _kind_of_aval(eqn.outvars[0].aval)
    if dst == "f":
        # a constant converted to float32 is rounded (verify/_f32.py); rounding of an
        # expression of the inputs is not modelled
        narrow = _f32.is_float32(new_dtype) and not _f32.is_float32(eqn.invars[0].aval.dtype)
        if src == "f":
            return TT.unary(a, _f32.round_number, "f") if narrow else a
        if a.kind == "b":
            return TENSOR.to_float(a)
        return TT.unary(a, _f32.round_number if narrow else lambda v: v, "f")
    if src == "f":  # a constant, truncated toward zero as XLA converts; else refused
        vals = _constant_values(a)
        info = np.iinfo(np.dtype(new_dtype)) if dst == "i" else None
        if vals is None or info is None:
            raise Unsupported("float to integer conversion of a value of the inputs")
        ints = [int(Fraction(str(v))) for v in vals.reshape(-1)]  # truncated toward zero
        if not all(info.min <= n <= info.max for n in ints):
            raise Unsupported("float to integer conversion out of the integer type's range")
        return from_concrete(np.array(ints, dtype=np.dtype(new_dtype)).reshape(vals.shape))
    c = concrete(a) if a.kind in "ic" else None
    if c is not None:
        return from_concrete(_wrap_int(c, np.dtype(new_dtype)))
    if dst == "c":
        return TT.compare(a, 0, "ne")
    if src == "c":
        return TT.unary(a, lambda v: v, "i")
    return a


# -- iota -----------------------------------------------------------------------------------------


@element("iota")
def _iota_e(it: Interpreter, eqn: Any, invals: list, *, dtype: Any, shape: Any, dimension: int,
            **_: Any) -> np.ndarray:  # fmt: skip
    dt = np.dtype(dtype)
    ar = np.arange(shape[dimension]).reshape(
        [-1 if d == dimension else 1 for d in range(len(shape))]
    )
    out = np.broadcast_to(ar, shape).copy()
    return to_float_array(out.astype(np.float64)) if dt.kind == "f" else out.astype(dt)


@tensor("iota")
def _iota_t(it: TInterpreter, eqn: Any, invals: list, *, dtype: Any, shape: Any, dimension: int,
            **_: Any) -> TArray:  # fmt: skip
    kind = "f" if np.dtype(dtype).kind == "f" else "i"
    return TArray(tuple(shape), lambda idx: idx[dimension], kind)


# -- is_finite ------------------------------------------------------------------------------------


_INFINITE = (se.oo, -se.oo, se.zoo, se.nan)


@element("is_finite")
def _is_finite_e(it: Interpreter, eqn: Any, invals: list, **_: Any) -> np.ndarray:
    """Symbolic values are finite (inputs are finite reals inside the ops' domains); only the
    infinities and NaN themselves are not."""
    (a,) = invals
    if _concrete(a):
        return np.isfinite(a)
    return _ew(lambda x: se.false if any(x == v for v in _INFINITE) else se.true, a)


@tensor("is_finite")
def _is_finite_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals

    def fin(v: Any) -> Any:
        return T.ZERO if v in _INFINITE else T.ONE

    return TT.unary(a, fin, "c")
