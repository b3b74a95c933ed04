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

This module holds the domain: the interpreter (inputs, literals, shapes, the kind of a result),
the value helpers the rules use (``concrete``, ``from_concrete``) and the compiled softmax
calls; the rules themselves are written beside their element-level twins in
:mod:`verify.prims`, one module per family of primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import symengine as se

from . import _tensor as TT
from . import _tsoftmax
from . import terms as T
from ._jaxpr import LemmaError, _kind, call_key, check_softmax_call
from ._primitives import JaxprInterpreter, Unsupported
from ._tdecide import decide_tensor
from ._tensor import TArray, leaf


def _kind_of_aval(aval: Any) -> str:
    """The element level's kind of an aval (:func:`verify._jaxpr._kind`), a boolean as ``"c"``
    (a condition)."""
    k = _kind(aval)
    return "c" if k == "b" else k


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
        return from_concrete(np.asarray(v, dtype=np.dtype(aval.dtype)))

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


def out_tkind(eqn: Any, i: int = 0) -> str:
    return _kind_of_aval(eqn.outvars[i].aval)


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


__all__ = ["TInterpreter", "concrete", "from_concrete"]
