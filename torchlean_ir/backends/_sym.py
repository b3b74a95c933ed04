"""The symbolic backend: op rules run on arrays of exact symengine expressions.

The verifier uses it to read an op's forward as element expressions (its symbolic semantics) and
to run the reference JVP/VJP rules over symbols. Numbers entering a computation become exact
rationals of their float64 value (``0.1`` is ``3602879701896397/36028797018963968``), so the
arithmetic is exact: rules should write ``x / 3``, not ``x * (1 / 3)``, when they mean a third.

``where`` builds ``Piecewise``; comparisons build relations; with exact rational inputs
everything folds to numbers, which is how kink conventions are checked at exact points.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterator, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se
from symengine.lib.symengine_wrapper import Boolean as _Boolean

from .._attrs import ConstArray
from . import _random


def exact(v: Any) -> Any:
    """An exact symengine number (or the expression itself) for a scalar value."""
    if isinstance(v, se.Basic):
        return v
    if isinstance(v, bool | np.bool_):
        return se.true if v else se.false
    if isinstance(v, int | np.integer):
        return se.Integer(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        if math.isinf(f):
            return se.oo if f > 0 else -se.oo
        if math.isnan(f):
            raise ValueError("NaN has no exact symbolic value")
        fr = Fraction(f)
        return se.Rational(fr.numerator, fr.denominator)
    if isinstance(v, Fraction):
        return se.Rational(v.numerator, v.denominator)
    raise TypeError(f"cannot use {type(v).__name__} in a symbolic computation")


_exact_vec = np.frompyfunc(exact, 1, 1)


def _obj(a: np.ndarray | Any) -> np.ndarray:
    """An object ndarray (0-d included) from the result of a ufunc-like call."""
    if isinstance(a, np.ndarray):
        return a.astype(object, copy=False)
    out = np.empty((), dtype=object)
    out[()] = a
    return out


def _lift(v: Any) -> np.ndarray:
    """Any operand as an object ndarray of exact symengine values."""
    if isinstance(v, SymArray):
        return v.a
    v = weak_float(v)
    if isinstance(v, ConstArray):
        v = v.to_numpy()
    arr = np.asarray(v, dtype=object) if not isinstance(v, np.ndarray) else v
    return _obj(_exact_vec(arr)) if arr.size else arr.astype(object)


def _elementwise(fn: Callable[..., Any], *operands: Any) -> SymArray:
    arrays = [_lift(o) for o in operands]
    return SymArray(_obj(np.frompyfunc(fn, len(arrays), 1)(*arrays)))


def _taken(pw: Any, cond: Any, value: bool) -> Any:
    args = pw.args
    if value:
        return args[0]
    rest = args[2:]
    if len(rest) == 2 and rest[1] == se.true:
        return rest[0]
    return se.Piecewise(*[(rest[i], rest[i + 1]) for i in range(0, len(rest), 2)])


def _under(expr: Any, cond: Any, value: bool) -> Any:
    """``expr`` simplified for a context where ``cond`` is known to be ``value``: every
    Piecewise inside it whose first condition is ``cond`` loses the branch not taken."""
    if not isinstance(expr, se.Basic):
        return expr
    if isinstance(expr, se.Piecewise) and expr.args[1] == cond:
        return _under(_taken(expr, cond, value), cond, value)
    pieces = expr.atoms(se.Piecewise)
    if not pieces:
        return expr
    repl = {pw: _taken(pw, cond, value) for pw in pieces if pw.args[1] == cond}
    return expr.xreplace(repl) if repl else expr


def piecewise(c: Any, a: Any, b: Any) -> Any:
    """``a`` where ``c`` holds, else ``b``: a ``Piecewise``, or a branch when ``c`` is known."""
    if c is se.true or c is True:
        return a
    if c is se.false or c is False:
        return b
    a, b = _under(a, c, True), _under(b, c, False)
    if a == b:
        return a
    return se.Piecewise((a, c), (b, True))


SOFTMAX_HOOK: contextvars.ContextVar[Callable[[np.ndarray, int, Any], Any] | None] = (
    contextvars.ContextVar("torchlean_sym_softmax_hook", default=None)
)
"""A hook :meth:`SymBackend.softmax` consults first (set by ``verify``'s softmax abstraction;
``None``, the default, means the explicit exponential form)."""
PRODUCT_HOOK: contextvars.ContextVar[Callable[[np.ndarray], np.ndarray] | None] = (
    contextvars.ContextVar("torchlean_sym_product_hook", default=None)
)
"""A hook the results of :meth:`SymBackend.matmul` and :meth:`SymBackend.einsum` pass through
(the verifier's abstraction of intermediate values; ``None``, the default, leaves them)."""
FLOAT_CONSTANTS: contextvars.ContextVar[np.dtype | None] = contextvars.ContextVar(
    "torchlean_sym_float_constants", default=None
)
"""The narrower float dtype (float32) of a compilation whose constants the reference takes (set
by ``verify``'s float32 model, ``verify/_f32.py``). A Python ``float`` is rounded to it where
it meets an array (a weakly typed scalar, which JAX rounds to the array's dtype); every float
given to :meth:`SymBackend.asarray`, :meth:`SymBackend.full` and :meth:`SymBackend.pad` (which
the JAX backend casts to its dtype) is rounded too, and :meth:`SymBackend.rand_uniform` draws
in it. ``None``, the default: the exact float64 values."""


def round_floats(v: Any, dtype: Any) -> Any:
    """A float or a float array rounded to ``dtype`` (to nearest, ties to even, past its range
    to infinity) and given back as float64: a float for a float."""
    with np.errstate(over="ignore"):
        r = np.asarray(v, dtype=np.float64).astype(dtype).astype(np.float64)
    return float(r) if np.ndim(r) == 0 and isinstance(v, float | np.floating) else r


def weak_float(v: Any) -> Any:
    """A Python ``float`` operand under :data:`FLOAT_CONSTANTS`; anything else unchanged (NumPy
    floats included: JAX promotes them instead of rounding)."""
    dt = FLOAT_CONSTANTS.get()
    if dt is not None and isinstance(v, float) and not isinstance(v, np.floating):
        return round_floats(v, dt)
    return v


def cast_floats(v: Any) -> Any:
    """Every float of a constant under :data:`FLOAT_CONSTANTS` (what a backend's ``asarray``
    casts to its dtype); expressions and integers unchanged."""
    dt = FLOAT_CONSTANTS.get()
    if dt is None:
        return v
    if isinstance(v, ConstArray):
        v = v.to_numpy()
    if isinstance(v, float | np.floating):
        return round_floats(float(v), dt)
    if isinstance(v, list | tuple):
        a = np.asarray(v)
        return round_floats(a, dt) if a.dtype.kind == "f" else v
    if isinstance(v, np.ndarray) and v.dtype.kind == "f":
        return round_floats(v, dt)
    return v


def _product(a: np.ndarray) -> SymArray:
    hook = PRODUCT_HOOK.get()
    return SymArray(a if hook is None else hook(a))


class SymArray:
    """An n-d array of symengine expressions with NumPy-like arithmetic.

    Wraps an object ndarray; Python numbers and float arrays mixed into arithmetic are first
    made exact. Comparisons give arrays of relations (booleans when decidable)."""

    __slots__ = ("a",)
    __array_ufunc__ = None  # make NumPy defer to our reflected operators

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    # -- array protocol -------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.a.shape

    @property
    def ndim(self) -> int:
        return self.a.ndim

    @property
    def size(self) -> int:
        return self.a.size

    @property
    def T(self) -> SymArray:
        return SymArray(self.a.T)

    def __len__(self) -> int:
        return len(self.a)

    def __iter__(self) -> Iterator[SymArray]:
        return (SymArray(_obj(x)) for x in self.a)

    def __getitem__(self, key: Any) -> SymArray:
        return SymArray(_obj(self.a[key]))

    def reshape(self, *shape: Any) -> SymArray:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return SymArray(self.a.reshape(shape))

    def item(self) -> Any:
        return self.a.reshape(()).item() if self.a.size == 1 else self.a.item()

    def tolist(self) -> Any:
        return self.a.tolist()

    def __repr__(self) -> str:
        return f"SymArray({self.a!r})"

    # -- arithmetic -----------------------------------------------------------------------
    def _bin(self, other: Any, fn: Callable[[Any, Any], Any], reflect: bool = False) -> SymArray:
        a, b = self.a, _lift(other)
        if reflect:
            a, b = b, a
        return SymArray(_obj(np.frompyfunc(fn, 2, 1)(a, b)))

    def __add__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x + y)

    def __radd__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x + y, True)

    def __sub__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x - y)

    def __rsub__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x - y, True)

    def __mul__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x * y)

    def __rmul__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x * y, True)

    def __truediv__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x / y)

    def __rtruediv__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x / y, True)

    def __pow__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x**y)

    def __rpow__(self, o: Any) -> SymArray:
        return self._bin(o, lambda x, y: x**y, True)

    def __neg__(self) -> SymArray:
        return SymArray(_obj(-self.a))

    def __pos__(self) -> SymArray:
        return self

    def __matmul__(self, o: Any) -> SymArray:
        return SymArray(_obj(np.matmul(self.a, _lift(o))))

    def __rmatmul__(self, o: Any) -> SymArray:
        return SymArray(_obj(np.matmul(_lift(o), self.a)))

    # comparisons build relations (elementwise), never Python bools
    def __gt__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: x > y)

    def __ge__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: x >= y)

    def __lt__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: x < y)

    def __le__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: x <= y)

    def __eq__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: se.Eq(x, y))

    def __ne__(self, o: Any) -> SymArray:  # type: ignore[override]
        return self._bin(o, lambda x, y: se.Ne(x, y))

    __hash__ = None  # type: ignore[assignment]


def _max2(a: Any, b: Any) -> Any:
    return se.Max(a, b)


def _min2(a: Any, b: Any) -> Any:
    return se.Min(a, b)


class SymBackend:
    """The backend functions on :class:`SymArray` (see ``NumpyBackend`` for their meaning)."""

    name = "sym"
    float_dtype = object
    index_dtype = np.int64

    # -- creation -------------------------------------------------------------------------
    def static_arrays(self, *sizes: Any) -> Any:
        """NumPy (see :meth:`NumpyBackend.static_arrays`)."""
        return np

    def asarray(self, value: Any) -> SymArray:
        return SymArray(_lift(cast_floats(value)))

    def zeros(self, shape: Sequence[int]) -> SymArray:
        return SymArray(_obj(np.full(tuple(shape), se.Integer(0), dtype=object)))

    def ones(self, shape: Sequence[int]) -> SymArray:
        return SymArray(_obj(np.full(tuple(shape), se.Integer(1), dtype=object)))

    def full(self, shape: Sequence[int], value: float) -> SymArray:
        return SymArray(_obj(np.full(tuple(shape), exact(cast_floats(value)), dtype=object)))

    def zeros_like(self, x: Any) -> SymArray:
        return self.zeros(x.shape)

    def ones_like(self, x: Any) -> SymArray:
        return self.ones(x.shape)

    # -- elementwise ----------------------------------------------------------------------
    def exp(self, x: Any) -> SymArray:
        return _elementwise(se.exp, x)

    def log(self, x: Any) -> SymArray:
        return _elementwise(se.log, x)

    def log1p(self, x: Any) -> SymArray:
        return _elementwise(lambda v: se.log(1 + v), x)

    def expm1(self, x: Any) -> SymArray:
        return _elementwise(lambda v: se.exp(v) - 1, x)

    def tanh(self, x: Any) -> SymArray:
        return _elementwise(se.tanh, x)

    def sqrt(self, x: Any) -> SymArray:
        return _elementwise(se.sqrt, x)

    def erf(self, x: Any) -> SymArray:
        return _elementwise(se.erf, x)

    def pi(self) -> SymArray:
        """The exact constant pi (0-d)."""
        return SymArray(_obj(se.pi))

    def abs(self, x: Any) -> SymArray:
        return _elementwise(lambda v: piecewise(v > 0, v, piecewise(v < 0, -v, se.Integer(0))), x)

    def sign(self, x: Any) -> SymArray:
        one, zero = se.Integer(1), se.Integer(0)
        return _elementwise(lambda v: piecewise(v > 0, one, piecewise(v < 0, -one, zero)), x)

    def maximum(self, a: Any, b: Any) -> SymArray:
        return _elementwise(_max2, a, b)

    def minimum(self, a: Any, b: Any) -> SymArray:
        return _elementwise(_min2, a, b)

    def where(self, cond: Any, a: Any, b: Any) -> SymArray:
        return _elementwise(piecewise, cond, a, b)

    def logical_and(self, a: Any, b: Any) -> SymArray:
        return _elementwise(lambda x, y: se.And(x, y), a, b)

    def logical_or(self, a: Any, b: Any) -> SymArray:
        return _elementwise(lambda x, y: se.Or(x, y), a, b)

    def logical_not(self, a: Any) -> SymArray:
        return _elementwise(lambda x: se.Not(x), a)

    def to_float(self, cond: Any) -> SymArray:
        """A condition as 1 / 0, or the naturals of an index (concrete here) as numbers."""
        one, zero = se.Integer(1), se.Integer(0)

        def convert(c: Any) -> Any:
            if isinstance(c, bool | np.bool_ | _Boolean):
                return piecewise(c, one, zero)
            return se.Integer(int(c)) if isinstance(c, int | np.integer) else c

        return _elementwise(convert, cond)

    def softplus(self, x: Any) -> SymArray:
        """``log(1 + exp(x))`` (the plain formula: exact arithmetic needs no shifting)."""
        return _elementwise(lambda v: se.log(1 + se.exp(v)), x)

    def sigmoid(self, x: Any) -> SymArray:
        """``1 / (1 + exp(-x))``."""
        return _elementwise(lambda v: 1 / (1 + se.exp(-v)), x)

    # -- reductions and linear algebra ----------------------------------------------------
    def sum(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        a = _lift(x)
        if a.size == 0:
            shape = np.sum(np.zeros(a.shape), axis=axis, keepdims=keepdims).shape
            return self.zeros(shape)
        return SymArray(_obj(np.sum(a, axis=axis, keepdims=keepdims)))

    def max(self, x: Any, axis: int | tuple[int, ...] | None = None, keepdims: bool = False) -> Any:
        a = _lift(x)
        red = np.frompyfunc(_max2, 2, 1).reduce
        if axis is None:
            out = red(a.reshape(-1), axis=0)
            out = _obj(out)
            if keepdims:
                out = out.reshape((1,) * a.ndim)
            return SymArray(out)
        axes = (axis,) if isinstance(axis, int) else tuple(axis)
        out = a
        for ax in sorted((ax % a.ndim for ax in axes), reverse=True):
            out = _obj(red(out, axis=ax))
            if keepdims:
                out = np.expand_dims(out, ax)
        return SymArray(out)

    def matmul(self, a: Any, b: Any) -> SymArray:
        return _product(_obj(np.matmul(_lift(a), _lift(b))))

    def einsum(self, subscripts: str, *operands: Any) -> SymArray:
        return _product(_obj(np.einsum(subscripts, *[_lift(o) for o in operands])))

    def first_max_onehot(self, x: Any, axis: int = -1, valid: Any = None) -> SymArray:
        """Piecewise 0/1: element k wins when it beats every earlier element strictly and every
        later one weakly (the first maximum in order). Entries the static mask ``valid``
        excludes are 0 and take no part in the comparisons."""
        full = _lift(x)
        a = np.moveaxis(full, axis, -1)
        ok = np.ones(full.shape, dtype=bool)
        if valid is not None:
            ok = np.broadcast_to(np.asarray(valid, dtype=bool), full.shape)
        ok = np.moveaxis(ok, axis, -1)
        n = a.shape[-1]
        out = np.empty(a.shape, dtype=object)
        one, zero = se.Integer(1), se.Integer(0)
        for pos in np.ndindex(a.shape[:-1]):
            row, live = a[pos], [j for j in range(n) if ok[pos][j]]
            for k in range(n):
                if not ok[pos][k]:
                    out[(*pos, k)] = zero
                    continue
                conds = [row[k] > row[j] for j in live if j < k] + [
                    row[k] >= row[j] for j in live if j > k
                ]
                cond = se.And(*conds) if conds else se.true
                out[(*pos, k)] = piecewise(cond, one, zero)
        return SymArray(np.moveaxis(out, -1, axis))

    def _valid_exp(self, x: Any, valid: Any) -> SymArray:
        e = self.exp(x)
        return e if valid is None else self.where(np.asarray(valid, dtype=bool), e, 0)

    def logsumexp(
        self, x: Any, axis: int = -1, keepdims: bool = False, valid: Any = None
    ) -> SymArray:
        """``log(sum(exp(x)))`` over the valid entries (no shift: the form the verifier
        differentiates)."""
        return self.log(self.sum(self._valid_exp(x, valid), axis=axis, keepdims=keepdims))

    def softmax(self, x: Any, axis: int = -1, valid: Any = None) -> SymArray:
        """``exp(x) / sum(exp(x))`` over the valid entries; the others are exactly 0.

        While :data:`SOFTMAX_HOOK` holds a function (the verifier's softmax abstraction), that
        function is asked first; it returns the result or ``None`` to fall through."""
        hook = SOFTMAX_HOOK.get()
        if hook is not None:
            out = hook(_lift(x), axis, valid)
            if out is not None:
                return out
        e = self._valid_exp(x, valid)
        s = self.sum(e, axis=axis, keepdims=True)
        if valid is not None:
            shape = _lift(x).shape
            allowed = np.any(np.broadcast_to(np.asarray(valid, bool), shape), axis, keepdims=True)
            s = self.where(allowed, s, 1)
        return e / s

    # -- shape ----------------------------------------------------------------------------
    def reshape(self, x: Any, shape: Sequence[int]) -> SymArray:
        return SymArray(_lift(x).reshape(tuple(shape)))

    def transpose(self, x: Any, axes: Sequence[int] | None = None) -> SymArray:
        return SymArray(np.transpose(_lift(x), axes))

    def swapaxes(self, x: Any, a: int, b: int) -> SymArray:
        return SymArray(np.swapaxes(_lift(x), a, b))

    def moveaxis(self, x: Any, src: int, dst: int) -> SymArray:
        return SymArray(np.moveaxis(_lift(x), src, dst))

    def broadcast_to(self, x: Any, shape: Sequence[int]) -> SymArray:
        return SymArray(np.array(np.broadcast_to(_lift(x), tuple(shape)), dtype=object))

    def expand_dims(self, x: Any, axis: int) -> SymArray:
        return SymArray(np.expand_dims(_lift(x), axis))

    def concatenate(self, xs: Sequence[Any], axis: int = 0) -> SymArray:
        return SymArray(np.concatenate([_lift(x) for x in xs], axis=axis))

    def stack(self, xs: Sequence[Any], axis: int = 0) -> SymArray:
        return SymArray(np.stack([_lift(x) for x in xs], axis=axis))

    def pad(self, x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> SymArray:
        a = _lift(x)
        out_shape = tuple(d + lo + hi for d, (lo, hi) in zip(a.shape, widths, strict=True))
        out = np.full(out_shape, exact(cast_floats(value)), dtype=object)
        inner = tuple(slice(lo, lo + d) for d, (lo, _) in zip(a.shape, widths, strict=True))
        out[inner] = a
        return SymArray(out)

    def take(self, x: Any, indices: Sequence[int], axis: int = 0) -> SymArray:
        return SymArray(_obj(np.take(_lift(x), np.asarray(indices, dtype=np.int64), axis=axis)))

    # -- runtime indices (concrete nats in the symbolic backend) --------------------------
    def gather(self, x: Any, idx: Any, axis: int = 0) -> SymArray:
        a = _lift(x)
        idx = np.asarray(idx, dtype=np.int64)
        n = a.shape[axis]
        moved = np.moveaxis(a, axis, 0)
        zero_row = np.full(moved.shape[1:], se.Integer(0), dtype=object)
        rows = [moved[i] if 0 <= i < n else zero_row for i in idx.reshape(-1)]
        stacked = np.stack(rows, axis=0) if rows else np.empty((0,) + moved.shape[1:], object)
        stacked = stacked.reshape(idx.shape + moved.shape[1:])
        for _ in range(idx.ndim):
            stacked = np.moveaxis(stacked, 0, axis + idx.ndim - 1)
        return SymArray(_obj(stacked))

    def scatter_add(self, x: Any, idx: Any, updates: Any, axis: int = 0) -> SymArray:
        out = _lift(x).copy()
        idx = np.asarray(idx, dtype=np.int64)
        n = out.shape[axis]
        moved = np.moveaxis(out, axis, 0)
        upd = _lift(updates)
        upd = np.moveaxis(upd, axis, 0) if idx.ndim else upd
        flat = idx.reshape(-1)
        upd = upd.reshape((flat.size,) + moved.shape[1:])
        for k, i in enumerate(flat):
            if 0 <= i < n:
                moved[i] = moved[i] + upd[k]
        return SymArray(out)

    def stop_gradient(self, x: Any) -> Any:
        return x

    def max_shift(self, x: Any, axis: int = -1) -> SymArray:
        """``x - max(x)`` along ``axis``."""
        return x - self.max(x, axis=axis, keepdims=True)

    def wide(self) -> SymBackend:
        """Itself: exact arithmetic has no range to leave."""
        return self

    # -- seeded randomness (concrete: the draws do not depend on any symbol) -------------
    def rand_uniform(
        self, seed: int, counter: int, shape: Sequence[int], dtype: Any = None
    ) -> SymArray:
        """The reference draws ``k / 2^32`` as exact rationals, rounded toward zero in ``dtype``
        when given (``"f32"``: ``k`` keeps its 24 leading significant bits), and in
        :data:`FLOAT_CONSTANTS` when set, whichever is narrower."""
        bits = _random.random_bits(seed, counter, shape)
        if dtype is not None or FLOAT_CONSTANTS.get() is not None:
            bits = _random.truncated_bits(bits, _random.narrowest(dtype, FLOAT_CONSTANTS.get()))
        out = np.empty(bits.shape, dtype=object)
        for i, k in np.ndenumerate(bits):
            out[i] = se.Rational(int(k), 1 << 32)
        return SymArray(out)


SYM = SymBackend()


def symbols(prefix: str, shape: Sequence[int]) -> SymArray:
    """A :class:`SymArray` of fresh real symbols ``prefix_0, prefix_1, ...`` in row-major order."""
    shape = tuple(shape)
    n = math.prod(shape)
    syms = [se.Symbol(f"{prefix}_{i}") for i in range(n)]
    arr = np.empty(n, dtype=object)
    arr[:] = syms
    return SymArray(arr.reshape(shape))
