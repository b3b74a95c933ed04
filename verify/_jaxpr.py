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

This module holds the domain: the interpreter (inputs, literals, shapes) and the value helpers
the rules use; the rules themselves are written beside their tensor-level twins in
:mod:`verify.prims`, one module per family of primitives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import SymArray, exact

from ._abstract import LemmaError, current, explicit, softmax_rows
from ._decide import decide_equal
from ._primitives import JaxprInterpreter, Unsupported, supported
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
    return _ew(lambda v: exact(v.item()), a)


def _ew(fn: Callable[..., Any], *arrays: np.ndarray) -> np.ndarray:
    """``fn`` on the elements of the arrays (broadcast; 0-d included) as an object array."""
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
        if _kind(aval) == "f":
            # the value in the literal's own dtype: a weakly typed ``0.7:f32[]`` may hold the
            # Python float 0.7, which the program materialises as the nearest float32
            with np.errstate(over="ignore"):
                arr = np.asarray(v, dtype=np.dtype(aval.dtype))
            return to_float_array(arr.astype(np.float64))
        return np.asarray(v).astype(np.dtype(aval.dtype))

    def shape(self, value: Any) -> tuple[Any, ...]:
        return np.shape(value)

    def intercept(self, eqn: Any, invals: list[Any]) -> list[Any] | None:
        return softmax_call(eqn, invals)  # only inside the softmax abstraction


def supported_primitives() -> list[str]:
    """The names of the JAX primitives the element-level interpreter follows."""
    return supported("element")


def out_kind(eqn: Any, i: int = 0) -> str:
    return _kind(eqn.outvars[i].aval)


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
