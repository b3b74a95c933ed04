"""Tensor-level arrays: a :class:`TArray`'s one symbolic element stands for all its elements.

A :class:`TArray` is a shape and a function from index expressions to the term of that element
(:mod:`verify.terms`). Every backend function (see ``torchlean_ir.backends.NumpyBackend``) and
every array operator the rules may use builds a new ``TArray`` by composing index maps: a
transpose permutes the indices, a reshape maps them through the flat index (floor division and
modulo, simplified by the variables' ranges), a reduction sums over a bound variable, padding
and concatenation add brackets, and so on. Nothing is expanded element by element, so the cost
of running a rule does not depend on the sizes of its arguments.

Kinds: ``"f"`` real values; ``"i"`` integer values (index inputs and index arithmetic);
``"c"`` index conditions, kept as 0/1 integer terms made of brackets (so that where they
select, the selection is a sum of bracketed terms); ``"b"`` conditions on real values
(relations, turned into ``Piecewise`` where they select); ``"n"`` conditions that mix both,
kept as 0/1 terms (brackets times ``Piecewise`` indicators).

Concrete NumPy arrays met in a rule (a padding mask, a one-hot bump, random draws) become
tables (:func:`verify.terms.table_read`); boolean tables that are products of intervals along
their axes are written as brackets instead.
"""

from __future__ import annotations

import math
import operator
import string
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir import ConstArray
from torchlean_ir.backends import piecewise, weak_float

from . import terms as T
from ._dims import Dim, SizeDependent, is_one, is_symbolic, size_expr

Index = tuple[Any, ...]
Fn = Callable[[Index], Any]
Method = Callable[["TArray", Any], "TArray"]


def _arithmetic(op: Callable[[Any, Any], Any]) -> tuple[Method, Method]:
    """An arithmetic operator of :class:`TArray` and its reflected form: ``op`` on the two
    elements at each index (broadcast, :func:`binary`)."""

    def forward(self: TArray, o: Any) -> TArray:
        return binary(self, o, op)

    def reflected(self: TArray, o: Any) -> TArray:
        return binary(o, self, op)

    return forward, reflected


def _relation(how: str) -> Method:
    """A comparison operator of :class:`TArray` (:func:`compare`)."""

    def method(self: TArray, o: Any) -> TArray:
        return compare(self, o, how)

    return method


class TArray:
    """An array of any shape given by the term of its element at symbolic indices."""

    __slots__ = ("_concrete", "_memo", "fn", "kind", "shape")
    __array_ufunc__ = None  # NumPy defers to our reflected operators

    def __init__(self, shape: Sequence[int], fn: Fn, kind: str = "f") -> None:
        self.shape = tuple(d if isinstance(d, Dim) else int(d) for d in shape)
        self.fn = fn
        self.kind = kind
        self._memo: dict[Index, Any] = {}
        self._concrete: np.ndarray | None = None

    def at(self, idx: Sequence[Any]) -> Any:
        """The term of the element at ``idx`` (index expressions, one per axis)."""
        key = tuple(idx)
        hit = self._memo.get(key)
        if hit is None:
            if len(key) != len(self.shape):
                raise T.TermError(f"{len(key)} indices for an array of shape {self.shape}")
            hit = self.fn(key)
            if len(self._memo) < 4096:
                self._memo[key] = hit
        return hit

    # -- array protocol ---------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def T(self) -> TArray:
        return transpose(self, None)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self) -> Any:
        return (self[i] for i in range(len(self)))

    def reshape(self, *shape: Any) -> TArray:
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def __getitem__(self, key: Any) -> TArray:
        return getitem(self, key)

    def __repr__(self) -> str:
        return f"TArray({self.shape}, {self.kind})"

    # -- arithmetic -------------------------------------------------------------------------
    __add__, __radd__ = _arithmetic(operator.add)
    __sub__, __rsub__ = _arithmetic(operator.sub)
    __mul__, __rmul__ = _arithmetic(operator.mul)
    __truediv__, __rtruediv__ = _arithmetic(operator.truediv)
    __pow__, __rpow__ = _arithmetic(operator.pow)

    def __neg__(self) -> TArray:
        return unary(self, lambda a: -a)

    def __pos__(self) -> TArray:
        return self

    def __matmul__(self, o: Any) -> TArray:
        return matmul(self, asarray(o))

    def __rmatmul__(self, o: Any) -> TArray:
        return matmul(asarray(o), self)

    __gt__ = _relation("gt")
    __ge__ = _relation("ge")
    __lt__ = _relation("lt")
    __le__ = _relation("le")
    __eq__ = _relation("eq")  # type: ignore[assignment]
    __ne__ = _relation("ne")  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


# -- construction ------------------------------------------------------------------------------


def leaf(name: str, shape: Sequence[int], kind: str = "f") -> TArray:
    """The array of reads of leaf ``name``, by flat index (:func:`verify.terms.leaf_read`)."""
    shape = tuple(d if isinstance(d, Dim) else int(d) for d in shape)
    return TArray(shape, lambda idx: T.leaf_read(name, idx, shape), kind)


def constant(value: Any, shape: Sequence[int] = (), kind: str = "f") -> TArray:
    v = T.exact_scalar(value)
    return TArray(shape, lambda idx: v, kind)


def from_numpy(a: np.ndarray) -> TArray:
    """A concrete array as a table (constants, uniform arrays and interval masks simplified)."""
    a = np.asarray(a)
    if a.dtype == bool:
        return _bool_table(a)
    kind = "i" if a.dtype.kind in "iu" else "f"
    if kind == "f":
        a = a.astype(np.float64)
    if a.size == 0:
        return TArray(a.shape, lambda idx: T.ZERO, kind)
    first = a.reshape(-1)[0]
    if np.all(a == first):
        return constant(first, a.shape, kind)
    return TArray(a.shape, lambda idx: T.table_read(a, idx), kind)


def _bool_table(a: np.ndarray) -> TArray:
    """A boolean array as a 0/1 condition: a product of interval brackets along the axes when
    it is one, else a table."""
    if a.size == 0:
        return TArray(a.shape, lambda idx: T.ZERO, "c")
    if np.all(a):
        return constant(1, a.shape, "c")
    if not np.any(a):
        return constant(0, a.shape, "c")
    axes = []
    outer = np.ones(a.shape, dtype=bool)
    for ax in range(a.ndim):
        others = tuple(i for i in range(a.ndim) if i != ax)
        m = np.any(a, axis=others) if others else a
        axes.append(m)
        shape = [1] * a.ndim
        shape[ax] = a.shape[ax]
        outer = outer & m.reshape(shape)
    if np.array_equal(outer, a):
        intervals = [_intervals(m) for m in axes]
        if all(len(iv) <= 2 for iv in intervals):

            def fn(idx: Index) -> Any:
                out = T.ONE
                for i, iv in zip(idx, intervals, strict=True):
                    out = out * se.Add(*[T.range_brackets(i, lo, hi) for lo, hi in iv])
                return out

            return TArray(a.shape, fn, "c")
    b = a.astype(np.int64)
    return TArray(a.shape, lambda idx: T.table_read(b, idx), "c")


def _intervals(m: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of True in a 1-D boolean array, as ``[lo, hi)``."""
    out = []
    start = None
    for i, v in enumerate(m.tolist() + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            out.append((start, i))
            start = None
    return out


def asarray(value: Any) -> TArray:
    if isinstance(value, TArray):
        return value
    value = weak_float(value)  # a float32 compilation's constants (verify/_f32.py)
    if isinstance(value, ConstArray):
        value = value.to_numpy()
    if isinstance(value, Dim):  # a symbolic size used as a value (a mean's count)
        e = value.value()
        return TArray((), lambda idx: e, "i")
    if isinstance(value, se.Basic):
        return TArray((), lambda idx: value, "f")
    if isinstance(value, bool | np.bool_):
        return constant(int(value), (), "c")
    if isinstance(value, int | float | np.integer | np.floating):
        return constant(value, (), "i" if isinstance(value, int | np.integer) else "f")
    arr = np.asarray(value)
    if arr.dtype == object:
        raise T.TermError("cannot use an object array at tensor level")
    return from_numpy(arr)


# -- elementwise -------------------------------------------------------------------------------


def _bshape(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    if not any(is_symbolic(s) for s in shapes):
        try:
            return tuple(np.broadcast_shapes(*shapes))
        except ValueError:
            raise T.TermError(f"shapes {shapes} do not broadcast") from None
    # NumPy's rule with symbolic sizes: an axis of length 1 takes the other's; two symbolic
    # axes must be the same size for every size (else the comparison is refused)
    ndim = max(len(s) for s in shapes)
    out: list[Any] = []
    for ax in range(ndim):
        d: Any = 1
        for s in shapes:
            e = s[ax - ndim + len(s)] if ax - ndim + len(s) >= 0 else 1
            if is_one(e):
                continue
            if is_one(d):
                d = e
            elif d != e:
                raise T.TermError(f"shapes {shapes} do not broadcast")
        out.append(d)
    return tuple(out)


def _bidx(idx: Index, shape: tuple[int, ...]) -> Index:
    """The index into an operand of ``shape`` broadcast to an output indexed by ``idx``."""
    off = len(idx) - len(shape)
    return tuple(T.ZERO if is_one(d) else idx[off + i] for i, d in enumerate(shape))


def _kind_of(*arrays: TArray) -> str:
    kinds = {a.kind for a in arrays}
    if kinds <= {"i", "c"}:
        return "i"
    if "b" in kinds:
        return "b"
    return "f"


def binary(a: Any, b: Any, op: Callable[[Any, Any], Any]) -> TArray:
    A, Bv = asarray(a), asarray(b)
    shape = _bshape(A.shape, Bv.shape)
    kind = _kind_of(A, Bv)

    def fn(idx: Index) -> Any:
        return op(A.at(_bidx(idx, A.shape)), Bv.at(_bidx(idx, Bv.shape)))

    return TArray(shape, fn, kind)


def unary(a: Any, op: Callable[[Any], Any], kind: str | None = None) -> TArray:
    A = asarray(a)
    return TArray(A.shape, lambda idx: op(A.at(idx)), kind or A.kind)


def nary(arrays: Sequence[Any], op: Callable[..., Any], kind: str) -> TArray:
    As = [asarray(a) for a in arrays]
    shape = _bshape(*[A.shape for A in As])

    def fn(idx: Index) -> Any:
        return op(*[A.at(_bidx(idx, A.shape)) for A in As])

    return TArray(shape, fn, kind)


_RELATIONS = {
    "gt": lambda a, b: se.Lt(b, a),
    "ge": lambda a, b: se.Le(b, a),
    "lt": lambda a, b: se.Lt(a, b),
    "le": lambda a, b: se.Le(a, b),
    "eq": lambda a, b: se.Eq(a, b),
    "ne": lambda a, b: se.Ne(a, b),
}


def compare(a: Any, b: Any, how: str) -> TArray:
    """Elementwise comparison: a condition on indices (``"c"``, brackets) when both sides are
    integer-valued, else a relation on values (``"b"``)."""
    A, Bv = asarray(a), asarray(b)
    rel = _RELATIONS[how]
    if A.kind in "ic" and Bv.kind in "ic":
        return binary(A, Bv, lambda x, y: T.bracket(rel(x, y))).retype("c")
    return binary(A, Bv, lambda x, y: T.known_relation(T.fold_extrema(rel(x, y)))).retype("b")


def _retype(self: TArray, kind: str) -> TArray:
    self.kind = kind
    return self


TArray.retype = _retype  # type: ignore[attr-defined]


def as_relation(c: TArray) -> TArray:
    """A condition as a relation on values (an index condition ``[...]`` becomes ``[...] = 1``)."""
    if c.kind == "b":
        return c
    return unary(c, lambda v: se.true if v == 1 else (se.false if v == 0 else se.Eq(v, 1)), "b")


def where(cond: Any, a: Any, b: Any) -> TArray:
    C = asarray(cond)
    if C.kind in "cin":
        return nary([C, a, b], _blend, _kind_of(asarray(a), asarray(b)))
    return nary([C, a, b], piecewise, _kind_of(asarray(a), asarray(b)))


_INFINITIES = (se.oo, -se.oo, se.zoo)


def _blend(c: Any, x: Any, y: Any) -> Any:
    """``x`` where the 0/1 condition ``c`` is 1, else ``y`` (a Piecewise when a value is
    infinite, where ``0 * inf`` would not vanish)."""
    if c == 1:
        return x
    if c == 0:
        return y
    if x in _INFINITIES or y in _INFINITIES:
        return se.Piecewise((x, se.Eq(c, 1)), (y, True))
    return c * x + (1 - c) * y


def logical(op: str, *arrays: Any) -> TArray:
    As = [asarray(a) for a in arrays]
    if all(A.kind in "cin" for A in As):
        kind = "c" if all(A.kind in "ci" for A in As) else "n"
        if op == "not":
            return unary(As[0], lambda v: 1 - v, kind)
        if op == "and":
            return nary(As, lambda x, y: x * y, kind)
        return nary(As, lambda x, y: se.expand(x + y - x * y), kind)
    Rs = [as_relation(A) for A in As]
    if op == "not":
        return unary(Rs[0], lambda v: se.Not(v), "b")
    if op == "and":
        return nary(Rs, lambda x, y: se.And(x, y), "b")
    return nary(Rs, lambda x, y: se.Or(x, y), "b")


# -- reductions and products -------------------------------------------------------------------


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        return (int(axis) % ndim,) if ndim else ()
    return tuple(sorted(int(a) % ndim for a in axis))


def reduce(x: Any, axis: Any, keepdims: bool, how: str) -> TArray:
    X = asarray(x)
    axes = _axes(axis, X.ndim)
    if not axes and X.ndim == 0:
        return X
    kept = [d for i, d in enumerate(X.shape) if i not in axes]
    out_shape = [1 if i in axes else d for i, d in enumerate(X.shape)] if keepdims else kept

    def fn(idx: Index) -> Any:
        it = iter(idx)
        base: list[Any] = []
        for i in range(X.ndim):
            if i in axes:
                base.append(None)
                if keepdims:
                    next(it)
            else:
                base.append(next(it))

        def body(k: int, fixed: list[Any]) -> Any:
            if k == len(axes):
                return X.at(tuple(fixed))
            ax = axes[k]

            def inner(v: Any) -> Any:
                f = list(fixed)
                f[ax] = v
                return body(k + 1, f)

            if how == "sum":
                return T.ssum(inner, 0, X.shape[ax])
            return T.smax(inner, 0, X.shape[ax])

        return body(0, base)

    return TArray(out_shape, fn, X.kind if how == "max" else ("f" if X.kind == "f" else X.kind))


def einsum(subscripts: str, *operands: Any) -> TArray:
    ops = [asarray(o) for o in operands]
    if "->" not in subscripts:
        raise T.TermError("einsum needs an explicit output")
    ins, out = subscripts.replace(" ", "").split("->")
    terms = ins.split(",")
    if "." in subscripts or len(terms) != len(ops):
        raise T.TermError(f"unsupported einsum {subscripts!r}")
    sizes: dict[str, int] = {}
    for t, o in zip(terms, ops, strict=True):
        if len(t) != o.ndim:
            raise T.TermError(f"einsum {subscripts!r}: operand of shape {o.shape}")
        for c, d in zip(t, o.shape, strict=True):
            if c in sizes and not is_one(sizes[c]) and not is_one(d) and sizes[c] != d:
                raise T.TermError(f"einsum {subscripts!r}: index {c!r} of sizes {sizes[c]} "
                                  f"and {d}")  # fmt: skip
            sizes[c] = d
    summed = [c for c in dict.fromkeys("".join(terms)) if c not in out]

    def fn(idx: Index) -> Any:
        env = dict(zip(out, idx, strict=True))

        def body(k: int) -> Any:
            if k == len(summed):
                prod = T.ONE
                for t, o in zip(terms, ops, strict=True):
                    prod = prod * o.at(tuple(env[c] for c in t))
                return prod
            c = summed[k]

            def inner(v: Any) -> Any:
                env[c] = v
                return body(k + 1)

            return T.ssum(inner, 0, sizes[c])

        return body(0)

    return TArray([sizes[c] for c in out], fn, "f")


def matmul(a: Any, b: Any) -> TArray:
    A, Bv = asarray(a), asarray(b)
    if A.ndim == 0 or Bv.ndim == 0:
        raise T.TermError("matmul of a scalar")
    letters = iter(string.ascii_lowercase)
    if A.ndim == 1 and Bv.ndim == 1:
        return einsum("i,i->", A, Bv)
    if A.ndim == 1:
        batch = "".join(next(letters) for _ in range(Bv.ndim - 2))
        return einsum(f"y,{batch}yz->{batch}z", A, Bv)
    if Bv.ndim == 1:
        batch = "".join(next(letters) for _ in range(A.ndim - 2))
        return einsum(f"{batch}xy,y->{batch}x", A, Bv)
    if A.ndim != Bv.ndim or A.shape[:-2] != Bv.shape[:-2]:
        raise T.TermError(f"matmul of {A.shape} and {Bv.shape} (batch broadcasting)")
    batch = "".join(next(letters) for _ in range(A.ndim - 2))
    return einsum(f"{batch}xy,{batch}yz->{batch}xz", A, Bv)


# -- shape -------------------------------------------------------------------------------------


def transpose(x: Any, axes: Sequence[int] | None = None) -> TArray:
    X = asarray(x)
    perm = tuple(reversed(range(X.ndim))) if axes is None else tuple(int(a) % X.ndim for a in axes)
    shape = [X.shape[p] for p in perm]

    def fn(idx: Index) -> Any:
        src = [None] * X.ndim
        for out_ax, p in enumerate(perm):
            src[p] = idx[out_ax]
        return X.at(tuple(src))

    return TArray(shape, fn, X.kind)


def reshape(x: Any, shape: Sequence[int]) -> TArray:
    X = asarray(x)
    shape = list(shape)
    if any(isinstance(d, int | np.integer) and d == -1 for d in shape):
        known = math.prod(d for d in shape if not (isinstance(d, int | np.integer) and d == -1))
        shape[shape.index(-1)] = X.size // known if known else 0
    if math.prod(shape) != X.size:
        raise T.TermError(f"cannot reshape {X.shape} to {tuple(shape)}")
    if _same_shape(tuple(shape), X.shape):
        return X
    symbolic = is_symbolic(shape) or is_symbolic(X.shape)
    kept = tuple(d for d in shape if not is_one(d))
    if symbolic and _same_shape(kept, tuple(d for d in X.shape if not is_one(d))):
        # axes of length 1 inserted or removed: the other indices map one to one (the
        # row-major flat index is the same), whatever the sizes
        src_axes = [a for a, d in enumerate(X.shape) if not is_one(d)]
        out_axes = [a for a, d in enumerate(shape) if not is_one(d)]

        def squeezed(idx: Index) -> Any:
            src: list[Any] = [T.ZERO] * X.ndim
            for a, b in zip(src_axes, out_axes, strict=True):
                src[a] = idx[b]
            return X.at(tuple(src))

        return TArray(shape, squeezed, X.kind)
    if symbolic:
        groups = _groups(X.shape, tuple(shape))
        if groups is not None:
            return _reshape_groups(X, tuple(shape), groups)
        raise SizeDependent(
            f"a reshape of {X.shape} to {tuple(shape)} with symbolic sizes", *X.shape, *shape
        )

    def fn(idx: Index) -> Any:
        flat = T.ZERO
        for i, d in zip(idx, shape, strict=True):
            flat = flat * d + i
        flat = se.expand(flat)
        src = []
        stride = X.size
        for d in X.shape:
            stride = stride // d if d else 0
            src.append(T.mod(T.floor_div(flat, stride), d) if stride else T.ZERO)
        return X.at(tuple(src))

    return TArray(shape, fn, X.kind)


def _same(a: Any, b: Any) -> bool:
    """The same shape entry (structurally: a symbolic size only equals itself)."""
    if isinstance(a, Dim) or isinstance(b, Dim):
        return isinstance(a, Dim) and isinstance(b, Dim) and se.expand(a.expr - b.expr) == 0
    return int(a) == int(b)


def _same_shape(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))


def _groups(src: tuple, dst: tuple) -> list[tuple[int, int, int, int]] | None:
    """``src`` and ``dst`` cut into consecutive groups of one size each, ``(i0, i1, j0, j1)``
    for ``src[i0:i1]`` and ``dst[j0:j1]``, where only a group's first entry on each side may be
    symbolic: a row-major reshape is then one reshape per group (the cumulative sizes agree at
    every cut), each with integer strides. ``None`` when the shapes do not cut so."""
    out: list[tuple[int, int, int, int]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        if i == len(src) or j == len(dst):
            if all(is_one(d) for d in (*src[i:], *dst[j:])) and out:
                i0, _, j0, _ = out.pop()
                out.append((i0, len(src), j0, len(dst)))  # trailing axes of length 1
                break
            return None
        if is_one(src[i]) != is_one(dst[j]):  # an axis of length 1 on one side only
            out.append((i, i + 1, j, j) if is_one(src[i]) else (i, i, j, j + 1))
            i, j = (i + 1, j) if is_one(src[i]) else (i, j + 1)
            continue
        i0, j0 = i, j
        ps, pd = size_expr(src[i]), size_expr(dst[j])
        i, j = i + 1, j + 1
        while True:
            q = _integer_ratio(ps, pd)
            if q == 1:
                break
            if q is not None and q > 1 and j < len(dst) and not isinstance(dst[j], Dim):
                pd, j = pd * int(dst[j]), j + 1
            elif (r := _integer_ratio(pd, ps)) is not None and r > 1 and i < len(src) and (
                    not isinstance(src[i], Dim)):  # fmt: skip
                ps, i = ps * int(src[i]), i + 1
            else:
                return None
        out.append((i0, i, j0, j))
    return out


def _integer_ratio(a: Any, b: Any) -> int | None:
    """The integer ``c`` with ``a = c b`` identically in the size symbols, if there is one (the
    candidate read at a point, then checked by expansion)."""
    point = {s: se.Integer(7 + n) for n, s in enumerate(sorted(
        (a.free_symbols | b.free_symbols), key=str))}  # fmt: skip
    bv = se.expand(b.xreplace(point))
    if bv == 0:
        return None
    c = se.expand(a.xreplace(point)) / bv
    if not isinstance(c, se.Integer):
        return None
    return int(c) if se.expand(a - c * b) == 0 else None


def _reshape_groups(X: TArray, shape: tuple, groups: list[tuple[int, int, int, int]]) -> TArray:
    """A row-major reshape by groups (:func:`_groups`): in each, the flat index is the same on
    both sides; the outermost source index is ``floor(flat / stride)``, in range without a
    modulo."""

    def fn(idx: Index) -> Any:
        src: list[Any] = []
        for i0, i1, j0, j1 in groups:
            mid_src, mid_dst = X.shape[i0:i1], shape[j0:j1]
            flat = T.ZERO
            for k, i in enumerate(idx[j0:j1]):
                flat = flat + i * math.prod(mid_dst[k + 1 :])
            flat = se.expand(flat)
            for k, d in enumerate(mid_src):
                stride = math.prod(mid_src[k + 1 :])
                q = T.floor_div(flat, stride) if stride != 1 else flat
                src.append(q if k == 0 else T.mod(q, d))
        return X.at(tuple(src))

    return TArray(shape, fn, X.kind)


def broadcast_to(x: Any, shape: Sequence[int]) -> TArray:
    X = asarray(x)
    shape = tuple(shape)
    if _bshape(X.shape, shape) != shape:
        raise T.TermError(f"cannot broadcast {X.shape} to {shape}")
    return TArray(shape, lambda idx: X.at(_bidx(idx, X.shape)), X.kind)


def expand_dims(x: Any, axis: int) -> TArray:
    X = asarray(x)
    ax = axis % (X.ndim + 1)
    shape = list(X.shape)
    shape.insert(ax, 1)
    return TArray(shape, lambda idx: X.at(idx[:ax] + idx[ax + 1 :]), X.kind)


def moveaxis(x: Any, src: int, dst: int) -> TArray:
    X = asarray(x)
    order = [i for i in range(X.ndim) if i != src % X.ndim]
    order.insert(dst % X.ndim, src % X.ndim)
    return transpose(X, order)


def swapaxes(x: Any, a: int, b: int) -> TArray:
    X = asarray(x)
    perm = list(range(X.ndim))
    a, b = a % X.ndim, b % X.ndim
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(X, perm)


def concatenate(xs: Sequence[Any], axis: int = 0) -> TArray:
    Xs = [asarray(x) for x in xs]
    nd = Xs[0].ndim
    ax = axis % nd
    offs = []
    o = 0
    for X in Xs:
        offs.append(o)
        o += X.shape[ax]
    shape = list(Xs[0].shape)
    shape[ax] = o
    kind = _kind_of(*Xs)

    def fn(idx: Index) -> Any:
        i = idx[ax]
        out = T.ZERO
        for X, off in zip(Xs, offs, strict=True):
            n = X.shape[ax]
            if n == 0:
                continue
            br = T.range_brackets(i, off, off + n)
            if br == 0:
                continue
            sub = list(idx)
            sub[ax] = se.expand(i - size_expr(off))
            out = out + br * X.at(tuple(sub))
        return out

    return TArray(shape, fn, kind)


def stack(xs: Sequence[Any], axis: int = 0) -> TArray:
    return concatenate([expand_dims(x, axis) for x in xs], axis)


def pad(x: Any, widths: Sequence[tuple[int, int]], value: float = 0.0) -> TArray:
    X = asarray(x)
    widths = [tuple(v if isinstance(v, Dim) else int(v) for v in w) for w in widths]
    shape = [d + lo + hi for d, (lo, hi) in zip(X.shape, widths, strict=True)]
    if any(d < 0 for d in shape):
        raise T.TermError(f"negative padding past the array: {X.shape} padded by {widths}")
    fill = T.exact_scalar(value)

    def fn(idx: Index) -> Any:
        inside = T.ONE
        src = []
        for i, d, (lo, _) in zip(idx, X.shape, widths, strict=True):
            inside = inside * T.range_brackets(i, lo, lo + d)
            src.append(se.expand(i - size_expr(lo)))
        if inside == 0:
            return fill
        if inside == 1:
            return X.at(tuple(src))
        if fill == 0:
            v = X.at(tuple(src))
            if T.has_infinity(v):  # a selection, not a product: 0 * -oo would be nan
                return se.Piecewise((v, _bracket_relation(inside)), (fill, True))
            return inside * v
        if fill in (se.oo, -se.oo):
            cond = _bracket_relation(inside)
            return se.Piecewise((X.at(tuple(src)), cond), (fill, True))
        return inside * X.at(tuple(src)) + (1 - inside) * fill

    return TArray(shape, fn, X.kind)


def _bracket_relation(b: Any) -> Any:
    """A 0/1 bracket product as a relation (for a Piecewise whose other value is infinite)."""
    return se.Eq(b, 1)


def getitem(x: TArray, key: Any) -> TArray:
    """Basic indexing: integers, slices (with steps), ``...`` and ``None``."""
    if not isinstance(key, tuple):
        key = (key,)
    n_explicit = sum(1 for k in key if k is not None and k is not Ellipsis)
    if any(k is Ellipsis for k in key):
        pos = next(i for i, k in enumerate(key) if k is Ellipsis)
        fill = (slice(None),) * (x.ndim - n_explicit)
        key = key[:pos] + fill + key[pos + 1 :]
    else:
        key = key + (slice(None),) * (x.ndim - n_explicit)
    out_shape: list[int] = []
    plan: list[tuple[str, Any]] = []  # per source axis: ("int", i) or ("slice", (start, step))
    src_axis = 0
    for k in key:
        if k is None:
            out_shape.append(1)
            plan.append(("new", None))
            continue
        d = x.shape[src_axis]
        if isinstance(k, int | np.integer) and not isinstance(d, Dim):
            i = int(k) + (d if k < 0 else 0)
            if not 0 <= i < d:
                raise IndexError(f"index {k} out of range for axis of size {d}")
            plan.append(("int", i))
        elif isinstance(k, slice) and not (isinstance(d, Dim) or any(
                isinstance(v, Dim) for v in (k.start, k.stop, k.step))):  # fmt: skip
            start, stop, step = k.indices(d)
            n = len(range(start, stop, step))
            out_shape.append(n)
            plan.append(("slice", (start, step)))
        elif isinstance(k, int | np.integer | slice):
            entry = _symbolic_index(k, d)
            if entry[0] == "int":
                plan.append(entry)
            else:
                out_shape.append(entry[1][2])
                plan.append(("slice", entry[1][:2]))
        else:
            raise T.TermError(f"unsupported index {k!r}")
        src_axis += 1

    def fn(idx: Index) -> Any:
        it = iter(idx)
        src = []
        for kind, v in plan:
            if kind == "new":
                next(it)
            elif kind == "int":
                src.append(se.Integer(v))
            else:
                start, step = v
                src.append(se.expand(size_expr(start) + step * next(it)))
        return x.at(tuple(src))

    return TArray(out_shape, fn, x.kind)


def _symbolic_index(k: Any, d: Any) -> tuple[str, Any]:
    """An integer or a slice with nonnegative bounds on an axis of length ``d`` where a size is
    symbolic, as ``("int", i)`` or ``("slice", (start, step, length))``: Python's clipping of
    the bounds decided for every size (:class:`verify._dims.Dim` comparisons), else refused."""
    if isinstance(k, int | np.integer):
        if k < 0 or not k < d:
            raise SizeDependent(f"index {k} on an axis of symbolic length {d}", d)
        return ("int", int(k))
    step = 1 if k.step is None else k.step
    if not isinstance(step, int | np.integer) or step < 1:
        raise SizeDependent(f"slice step {step} on an axis of symbolic length {d}", d)
    start = 0 if k.start is None else k.start
    stop = d if k.stop is None else k.stop
    for v in (start, stop):
        if not isinstance(v, Dim) and v < 0:
            raise SizeDependent(f"a negative slice bound on an axis of length {d}", d)
    start = start if start <= d else d  # Python clips both bounds to the axis
    stop = stop if stop <= d else d
    n = stop - start
    if n <= 0:
        return ("slice", (start, int(step), 0))
    length = n if step == 1 else (n + step - 1) // step
    return ("slice", (start, int(step), length))


def take(x: Any, indices: Sequence[int], axis: int = 0) -> TArray:
    X = asarray(x)
    ax = axis % X.ndim
    ind = [int(i) for i in np.asarray(indices).reshape(-1)]
    shape = list(X.shape)
    shape[ax] = len(ind)
    if len(ind) >= 2 and all(ind[i + 1] - ind[i] == ind[1] - ind[0] for i in range(len(ind) - 1)):
        start, step = ind[0], ind[1] - ind[0]

        def fn(idx: Index) -> Any:
            sub = list(idx)
            sub[ax] = se.expand(start + step * idx[ax])
            return X.at(tuple(sub))

        return TArray(shape, fn, X.kind)
    table = np.asarray(ind, dtype=np.int64)

    def fn2(idx: Index) -> Any:
        sub = list(idx)
        sub[ax] = T.table_read(table, (idx[ax],))
        return X.at(tuple(sub))

    return TArray(shape, fn2, X.kind)


# -- runtime indices ---------------------------------------------------------------------------


def gather(x: Any, idx: Any, axis: int = 0) -> TArray:
    """``x`` along ``axis`` at a nat scalar or vector; out of range reads 0."""
    X = asarray(x)
    I = asarray(idx) if not isinstance(idx, TArray) else idx
    ax = axis % X.ndim
    n = X.shape[ax]
    shape = X.shape[:ax] + I.shape + X.shape[ax + 1 :]

    def fn(o: Index) -> Any:
        before = o[:ax]
        pos = o[ax : ax + I.ndim]
        after = o[ax + I.ndim :]
        i = I.at(pos)
        return T.ge(n - 1 - i) * X.at((*before, i, *after))

    return TArray(shape, fn, X.kind)


def scatter_add(x: Any, idx: Any, updates: Any, axis: int = 0) -> TArray:
    """A copy of ``x`` with ``updates`` added at the nat indices ``idx`` along ``axis``."""
    X = asarray(x)
    I = asarray(idx) if not isinstance(idx, TArray) else idx
    U = asarray(updates)
    ax = axis % X.ndim
    n = X.shape[ax]

    def fn(o: Index) -> Any:
        target = o[ax]
        if I.ndim == 0:
            i = I.at(())
            sub = o[:ax] + o[ax + 1 :]
            return X.at(o) + T.eq(i - target) * T.ge(n - 1 - i) * U.at(sub)

        def body(k: int, pos: list[Any]) -> Any:
            if k == I.ndim:
                i = I.at(tuple(pos))
                return T.eq(i - target) * T.ge(n - 1 - i) * U.at((*o[:ax], *pos, *o[ax + 1 :]))
            return T.ssum(lambda v: body(k + 1, [*pos, v]), 0, I.shape[k])

        return X.at(o) + body(0, [])

    return TArray(X.shape, fn, X.kind)


def _mask(valid: Any, shape: tuple[Any, ...]) -> TArray:
    """A static mask (NumPy, or built by :data:`STATIC`) broadcast to ``shape``, as a condition."""
    if isinstance(valid, TArray):
        if valid.kind != "c":
            raise T.TermError(f"a mask of kind {valid.kind!r}, not an index condition")
        return broadcast_to(valid, shape)
    return broadcast_to(asarray(np.asarray(valid, bool)), shape)


def _any(c: TArray, axis: int) -> TArray:
    """Whether any entry along ``axis`` of the condition ``c`` holds (kept as an axis of
    length 1): ``1 - prod_j (1 - c_j)`` over an axis of constant length."""
    ax = axis % c.ndim
    n = c.shape[ax]
    if isinstance(n, Dim):
        raise SizeDependent(f"whether a mask allows any entry along an axis of length {n}", n)
    shape = tuple(1 if a == ax else d for a, d in enumerate(c.shape))

    def fn(idx: Index) -> Any:
        none = T.ONE
        for j in range(n):
            none = none * (1 - c.at((*idx[:ax], se.Integer(j), *idx[ax + 1 :])))
        return se.expand(1 - none)

    return TArray(shape, fn, "c")


def valid_exp(x: Any, valid: Any) -> TArray:
    """``exp(x)`` on the entries ``valid`` (broadcast; ``None``: all), 0 on the others."""
    e = unary(x, se.exp, "f")
    if valid is None:
        return e
    return where(_mask(valid, e.shape), e, 0)


__all__ = ["TArray", "asarray", "from_numpy", "leaf", "valid_exp"]
