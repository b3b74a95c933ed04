"""Tensor-level semantics of jaxprs: JAX primitives over :class:`~verify._tensor.TArray`.

The element-wise interpreter (:mod:`verify._jaxpr`) builds one expression per element; this one
builds the term of one symbolic element, whatever the sizes: ``dot_general`` is a sum over the
contracted axes, ``conv_general_dilated`` a sum over input features and kernel offsets with
brackets for padding and dilation, ``reduce_window_*`` a sum or maximum over the (short) window,
``gather`` / ``scatter-add`` read and accumulate at index terms with brackets for their bounds,
and the structural primitives compose index maps. Arithmetic is exact real arithmetic, as in
the element-wise interpreter: float literals are the exact rationals of their value and rounding
is not modelled (but a constant converted to float32 is rounded to it, :mod:`verify._f32`).

Integer computations on concrete values (literals, constants, random-bit arithmetic on ``iota``)
are carried out concretely with NumPy; an integer computation that needs a symbolic value it
cannot express raises :class:`~verify._jaxpr.Unsupported`, which makes the check that needed it
undecided at tensor level (never passed).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import symengine as se

from . import _f32, _tsoftmax
from . import _tensor as TT
from . import terms as T
from ._jaxpr import LemmaError, call_key, check_softmax_call
from ._primitives import JaxprInterpreter, Unsupported, out_dtype, supported
from ._primitives import rule as primitive_rule
from ._tbackend import TENSOR
from ._tdecide import decide_tensor
from ._tensor import TArray, leaf

Value = TArray


def _kind_of_aval(aval: Any) -> str:
    dt = np.dtype(aval.dtype)
    if dt.kind == "f":
        return "f"
    if dt.kind in "iu":
        return "i"
    if dt.kind == "b":
        return "c"
    raise Unsupported(f"dtype {dt}")


def concrete(v: TArray) -> np.ndarray | None:
    """The concrete value of an integer or boolean array, when it has one (computed for small
    symbolic index arrays such as ``iota``)."""
    c = getattr(v, "_concrete", None)
    if c is not None:
        return c
    if v.kind not in "ic" or v.size > 1 << 22:
        return None
    try:
        c = _materialize(v)
    except (T.TermError, Unsupported):
        return None
    v._concrete = c  # type: ignore[attr-defined]
    return c


def _materialize(v: TArray) -> np.ndarray:
    q = T.free_vars(v.shape)
    body = v.at(q)
    env = {}
    for d, s in enumerate(q):
        if isinstance(s, se.Symbol):
            shape = [1] * len(q)
            shape[d] = v.shape[d]
            env[s] = np.arange(v.shape[d], dtype=np.int64).reshape(shape)
    out = T.np_eval(body, env)
    return np.broadcast_to(np.asarray(out, dtype=np.int64), v.shape).copy()


def from_concrete(a: np.ndarray) -> TArray:
    """A concrete integer / boolean / float array as a value (its concrete form kept). A float
    array holding NaN has no exact value: reading it raises :class:`verify.terms.TermError` (a
    ``select_n`` on a known condition never reads it)."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        if np.any(np.isnan(a)):

            def unreadable(idx: tuple[Any, ...]) -> Any:
                raise T.TermError("a constant holding NaN has no exact value")

            return TArray(a.shape, unreadable, "f")
        return TT.from_numpy(a.astype(np.float64))
    if a.dtype == bool:
        out = TT.from_numpy(a)
    else:
        out = TT.from_numpy(a.astype(np.int64))
        out.kind = "i"
    out._concrete = a.astype(np.int64)  # type: ignore[attr-defined]
    return out


def _literal(v: Any, aval: Any) -> TArray:
    arr = np.asarray(v, dtype=np.dtype(aval.dtype))
    return from_concrete(arr)


# -- the interpreter -------------------------------------------------------------------------


class TInterpreter(JaxprInterpreter):
    """Evaluates jaxprs over tensor terms (:mod:`verify._primitives`: the walk, the call hook
    and the table shared with the element level). A compiled ``tl_softmax`` call proved equal
    to the softmax is read as the atom of its input (:func:`softmax_call`)."""

    domain = "tensor"

    def input(self, a: Any, aval: Any) -> TArray:
        if isinstance(a, TArray):
            return a
        return from_concrete(np.asarray(a))

    def literal(self, v: Any, aval: Any) -> TArray:
        return _literal(v, aval)

    def shape(self, value: Any) -> tuple[Any, ...]:
        return value.shape

    def nested(self, name: str, sub: Any, invals: list[Any]) -> list[Any] | None:
        if name == "tl_softmax" and len(invals) == 1 and hasattr(sub, "consts"):
            out = softmax_call(sub, invals[0])  # proved equal to the softmax, read as atoms
            if out is not None:
                return [out]
        return None

    def apply(self, fn: Callable[..., Any], eqn: Any, invals: list[Any]) -> Any:
        try:
            outs = fn(self, eqn, invals, **eqn.params)
        except T.TermError as e:
            raise Unsupported(f"{eqn.primitive.name}: {e}") from None
        outs = outs if isinstance(outs, list) else [outs]
        for k, o in enumerate(outs):
            want = _kind_of_aval(eqn.outvars[k].aval)
            if want == "f" and o.kind != "f":
                outs[k] = TT.unary(o, _as_number, "f")
        return outs

    def unsupported(self, name: str) -> str:
        return f"primitive {name!r} (tensor level)"


_BOOLEAN = type(se.true).__mro__[2]  # symengine's Boolean (not exported by name)


def _as_number(v: Any) -> Any:
    if isinstance(v, _BOOLEAN):
        return se.Piecewise((T.ONE, v), (T.ZERO, True))
    return v


rule = partial(primitive_rule, domain="tensor")


def supported_tensor_primitives() -> list[str]:
    return supported("tensor")


def out_tkind(eqn: Any, i: int = 0) -> str:
    return _kind_of_aval(eqn.outvars[i].aval)


# -- elementwise ---------------------------------------------------------------------------------


def _float_unary(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    def impl(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
        if out_tkind(eqn) != "f":
            raise Unsupported(f"{eqn.primitive.name} on {eqn.outvars[0].aval.dtype}")
        return TT.unary(invals[0], fn, "f")

    return impl


rule("exp")(_float_unary(se.exp))
rule("log")(_float_unary(se.log))
rule("log1p")(_float_unary(lambda v: se.log(1 + v)))
rule("expm1")(_float_unary(lambda v: se.exp(v) - 1))
rule("tanh")(_float_unary(se.tanh))
rule("sqrt")(_float_unary(se.sqrt))
rule("rsqrt")(_float_unary(lambda v: 1 / se.sqrt(v)))
rule("logistic")(_float_unary(lambda v: 1 / (1 + se.exp(-v))))
rule("square")(_float_unary(lambda v: v * v))
rule("erf")(_float_unary(se.erf))
rule("erfc")(_float_unary(lambda v: 1 - se.erf(v)))
rule("sin")(_float_unary(se.sin))
rule("cos")(_float_unary(se.cos))


@rule("abs")
def _abs(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    if out_tkind(eqn) != "f":
        return _concrete_op(eqn, invals, np.abs)
    return TENSOR.abs(a)


@rule("sign")
def _sign(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    if out_tkind(eqn) != "f":
        return _concrete_op(eqn, invals, np.sign)
    return TENSOR.sign(a)


@rule("neg")
def _neg(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    c = concrete(a) if a.kind in "ic" else None
    if c is not None:
        return from_concrete(np.negative(c).astype(out_dtype(eqn)))
    return TT.unary(a, lambda v: -v, a.kind)


@rule("integer_pow")
def _integer_pow(it: TInterpreter, eqn: Any, invals: list, *, y: int) -> TArray:
    (a,) = invals
    return TT.unary(a, lambda v: v**y, a.kind)


@rule("clamp")
def _clamp(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    lo, x, hi = invals
    if out_tkind(eqn) == "f":
        return TENSOR.minimum(TENSOR.maximum(x, lo), hi)
    return TT.nary([lo, x, hi], lambda a, v, b: T.simplify_index(se.Min(se.Max(v, a), b)), "i")


def _concrete_op(eqn: Any, invals: list, fn: Callable[..., Any]) -> TArray:
    vals = [concrete(v) if v.kind in "ic" else None for v in invals]
    if any(v is None for v in vals):
        raise Unsupported(f"{eqn.primitive.name} on symbolic integers")
    dt = out_dtype(eqn)
    with np.errstate(all="ignore"):
        out = np.asarray(fn(*[v.astype(np.int64) for v in vals]))  # type: ignore[union-attr]
    return from_concrete(out.astype(dt))


def _c_div(a: Any, b: Any) -> Any:
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, 0, np.sign(a) * np.sign(b) * q)


def _wrap(dtype: np.dtype) -> Callable[[np.ndarray], np.ndarray]:
    return lambda v: np.asarray(v).astype(dtype)


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


_FLOAT_BIN: dict[str, Callable[[Any, Any], Any]] = {
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
    "add": lambda a, b: a + b,
    "add_any": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": lambda a, b: T.simplify_index(se.Max(a, b)),
    "min": lambda a, b: T.simplify_index(se.Min(a, b)),
}
_INT_CONCRETE: dict[str, Callable[[Any, Any], Any]] = {
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


@rule(*sorted(set(_FLOAT_BIN) | set(_INT_CONCRETE) | {"shift_right_logical"}))
def _binary(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    name = eqn.primitive.name
    a, b = invals
    k = out_tkind(eqn)
    if k == "f":
        fn = _FLOAT_BIN.get(name)
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
                out = _INT_CONCRETE[name](ca.astype(np.int64), cb.astype(np.int64))
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


@rule("not")
def _not(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals
    if out_tkind(eqn) == "c":
        return TT.logical("not", a)
    return _concrete_op(eqn, invals, np.invert)


@rule("clz")
def _clz(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    bits = out_dtype(eqn).itemsize * 8

    def clz(v: np.ndarray) -> np.ndarray:
        v = v.astype(np.int64) & ((1 << bits) - 1)
        out = np.full(v.shape, bits, dtype=np.int64)
        for b in range(bits):
            out = np.where((v >> b) & 1 == 1, bits - 1 - b, out)
        return out

    return _concrete_op(eqn, invals, clz)


_CMP = ("eq", "ne", "lt", "le", "gt", "ge")


@rule(*_CMP)
def _compare(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    name = eqn.primitive.name
    a, b = invals
    ca = concrete(a) if a.kind in "ic" else None
    cb = concrete(b) if b.kind in "ic" else None
    if ca is not None and cb is not None:
        np_fn = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                 "gt": np.greater, "ge": np.greater_equal}[name]  # fmt: skip
        return from_concrete(np_fn(ca, cb))
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
    return bool(a.at(q).atoms(se.Piecewise))


_PY = {
    "eq": lambda x, y: x == y,
    "ne": lambda x, y: x != y,
    "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y,
    "gt": lambda x, y: x > y,
    "ge": lambda x, y: x >= y,
}


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


@rule("select_n")
def _select_n(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    pred, *cases = invals
    k = out_tkind(eqn)
    kind = "f" if k == "f" else ("i" if k == "i" else "n")
    cp = concrete(pred) if pred.kind in "ic" else None
    if cp is not None and np.all(cp == cp.reshape(-1)[0]):
        return TT.broadcast_to(cases[int(cp.reshape(-1)[0])], eqn.outvars[0].aval.shape)
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


@rule("convert_element_type")
def _convert(it: TInterpreter, eqn: Any, invals: list, *, new_dtype: Any, **_: Any) -> TArray:
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
    if src == "f":
        raise Unsupported("float to integer conversion")
    c = concrete(a) if a.kind in "ic" else None
    if c is not None:
        return from_concrete(_wrap_int(c, np.dtype(new_dtype)))
    if dst == "c":
        return TT.compare(a, 0, "ne")
    if src == "c":
        return TT.unary(a, lambda v: v, "i")
    return a


@rule("iota")
def _iota(it: TInterpreter, eqn: Any, invals: list, *, dtype: Any, shape: Any, dimension: int,
          **_: Any) -> TArray:  # fmt: skip
    kind = "f" if np.dtype(dtype).kind == "f" else "i"
    return TArray(tuple(shape), lambda idx: idx[dimension], kind)


@rule("is_finite")
def _is_finite(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> TArray:
    (a,) = invals

    def fin(v: Any) -> Any:
        return T.ZERO if v in (se.oo, -se.oo, se.zoo, se.nan) else T.ONE

    return TT.unary(a, fin, "c")


# -- compiled softmax calls -----------------------------------------------------------------------

_SOFTMAX_CALLS: dict[tuple, np.ndarray | bool] = {}


#: A call the tensor level does not prove is proved element by element up to this size.
ELEMENT_LEMMA_MAX = 512


def _by_elements(sub: Any, shape: tuple[int, ...]) -> np.ndarray | bool:
    """The element method's proof of a ``tl_softmax`` body (``verify/_abstract.py``), for a
    small shape: its mask, or ``False``."""
    if int(np.prod(shape)) > ELEMENT_LEMMA_MAX:
        return False
    try:
        return check_softmax_call(sub, shape)
    except LemmaError:
        return False


def softmax_call(sub: Any, x: Any) -> Any:
    """A compiled ``tl_softmax`` call (closed jaxpr ``sub``) on tensor value ``x``: the atom of
    its input when the body is proved equal to the explicit softmax over the mask it holds,
    else ``None`` (interpret the body)."""
    shape = tuple(x.shape)
    if not shape:
        return None
    key = call_key(sub, shape)
    if key not in _SOFTMAX_CALLS:
        from jax.extend.core import jaxpr_as_fun

        zeros = np.zeros(shape, sub.jaxpr.invars[0].aval.dtype)
        try:
            valid = np.asarray(jaxpr_as_fun(sub)(zeros)[0]) != 0  # a masked entry is exactly 0
        except Exception:  # a body JAX does not run on the host: interpret it instead
            _SOFTMAX_CALLS[key] = False
            return None
        z = leaf("_smx_z", shape)
        (got,) = TInterpreter().run(sub, z)
        want = _tsoftmax.explicit_softmax(z, None if valid.all() else valid)
        q = T.free_vars(shape)
        d = decide_tensor(got.at(q), want.at(q), q, counterexamples=False)
        exact = d.equal is True and d.method == "exact"
        _SOFTMAX_CALLS[key] = valid if exact else _by_elements(sub, shape)
    valid = _SOFTMAX_CALLS[key]
    if valid is False:
        return None
    return _tsoftmax.softmax(x, -1, None if valid.all() else valid)


__all__ = ["TInterpreter", "concrete", "from_concrete", "supported_tensor_primitives"]
