"""Rule certificates for every size: elementwise ops proved once, reused at any shape (the
other ops: proofs with symbolic sizes, :mod:`verify._sizecert`).

A tensor-level proof is about one symbolic element, but the rules that produced its terms ran
at one shape, and Python code may look at the shape. For an *elementwise* op that does not, a
proof at one shape is a proof at every shape, and :func:`certificate` makes that argument
checkable:

1. **The rules are elementwise, by construction.** The op's rules (symbolic forward, forward,
   JVP, VJP) run on proxies that expose nothing of the arrays but elementwise arithmetic and
   comparisons, through a backend that offers only elementwise functions (``exp``, ``where``,
   ``maximum``, ...; ``zeros_like`` and 0-d constants). Shapes, sizes, indexing, reductions,
   reshapes and every other backend function raise. A rule that completes there computes each
   output element from the same elements of its inputs by one scalar expression, whatever the
   shape, so its tensor-level term at any shape is that expression at the element's reads.
2. **The identities are proved with the indices as independent atoms.** The rule checks run at
   tensor level at a probe shape ``(5,)``; every one must pass exactly by identical normal
   forms, expansion to the same, or the reads as independent symbols, never by a case split
   on index ranges, so the proof does not use the probe's size.
3. **Kinks**: the kink points the op's kinks rule gives at the probe (uniform values or ties)
   are checked there; at another shape the certificate is reused only when the kinks rule
   gives the same plan.

A certificate is keyed by the op, its attributes and a fingerprint of the rule functions
(their code, constants, closures and the global functions they call, recursively), so a
changed or monkeypatched rule is proved again. ``verify_graph`` reuses it for the rule checks
of every signature of that op whose arguments all have one shape (the report's ``how`` says
``certificate``).
"""

from __future__ import annotations

import hashlib
import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import symengine as se

import torchlean_ir as tl

from ._attempt import tensor_attempt
from ._report import Check
from ._sig import Signature
from ._tbackend import TENSOR
from ._tchecks import NotTensor, Partial, check_signature_tensor
from ._tchecks import _kink_plan as plan_of
from ._tensor import TArray, leaf

#: The probe shape the identities are proved at.
PROBE = (9,)
#: How a rule check may have been decided for the proof not to depend on the probe's size.
_SIZE_FREE = ("identical normal forms", "normal forms expand to the same", "atoms as symbols")


class NotElementwise(Exception):
    """A rule used something other than elementwise arithmetic."""


class _Elem:
    """An array seen through elementwise operations only."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        object.__setattr__(self, "v", v)

    def __getattr__(self, name: str) -> Any:
        raise NotElementwise(f"the rule reads .{name} of an array")

    def __setattr__(self, name: str, value: Any) -> None:
        raise NotElementwise(f"the rule sets .{name} of an array")

    def __bool__(self) -> bool:
        raise NotElementwise("the rule branches on an array")

    def __array__(self, *a: Any, **k: Any) -> Any:
        raise NotElementwise("the rule converts an array to NumPy")


def _un(x: Any) -> Any:
    if isinstance(x, _Elem):
        return x.v
    if isinstance(x, bool | int | float | np.number | np.bool_ | se.Basic):
        return x
    if isinstance(x, TArray) and x.shape == ():
        return x
    if isinstance(x, np.ndarray) and x.shape == ():
        return x
    raise NotElementwise(f"the rule uses a value of type {type(x).__name__} next to the arrays")


def _wrap(v: Any) -> Any:
    return _Elem(v) if isinstance(v, TArray) and v.shape != () else v


def _dunder(name: str) -> Callable[..., Any]:
    def op(self: _Elem, *others: Any) -> Any:
        return _wrap(getattr(self.v, name)(*[_un(o) for o in others]))

    return op


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__pow__", "__rpow__", "__neg__", "__pos__", "__gt__", "__ge__",
              "__lt__", "__le__", "__eq__", "__ne__"):  # fmt: skip
    setattr(_Elem, _name, _dunder(_name))
_Elem.__hash__ = None  # type: ignore[assignment]

#: The backend functions a certified rule may call: each maps elements to elements.
ELEMENTWISE = ("exp", "log", "log1p", "expm1", "tanh", "sqrt", "erf", "pi", "abs", "sign",
               "maximum", "minimum", "where", "logical_and", "logical_or", "logical_not",
               "to_float", "softplus", "sigmoid", "stop_gradient", "zeros_like",
               "ones_like")  # fmt: skip


class _ElemBackend:
    """The tensor backend restricted to elementwise functions (and 0-d constants)."""

    name = "tensor"
    float_dtype = TENSOR.float_dtype
    index_dtype = TENSOR.index_dtype

    def __getattr__(self, name: str) -> Any:
        if name in ELEMENTWISE:
            fn = getattr(TENSOR, name)
            return lambda *a, **k: _wrap(fn(*[_un(x) for x in a],
                                            **{n: _un(v) for n, v in k.items()}))  # fmt: skip
        if name in ("asarray", "full", "zeros", "ones"):
            return getattr(self, "_" + name)
        raise NotElementwise(f"the rule calls B.{name}")

    def _asarray(self, value: Any) -> Any:
        return _wrap(TENSOR.asarray(_un(value)))

    def _full(self, shape: Any, value: Any) -> Any:
        if tuple(shape) != ():
            raise NotElementwise("the rule builds an array of a given shape")
        return TENSOR.full((), _un(value))

    def _zeros(self, shape: Any) -> Any:
        return self._full(shape, 0)

    def _ones(self, shape: Any) -> Any:
        return self._full(shape, 1)


def _elementwise_trace(op: tl.Op, sig: Signature) -> str | None:
    """``None`` when every rule of ``op`` runs on elementwise proxies, else why not."""
    B = _ElemBackend()
    params = dict(sig.attrs)
    X = [_Elem(leaf(f"x{p}", t.shape)) for p, t in enumerate(sig.arg_types)]
    Tn = [_Elem(leaf(f"dx{p}", t.shape)) for p, t in enumerate(sig.arg_types)]
    try:
        F = op.symbolic(B, *X, **params)
        if op.forward_rule is not None:
            op.forward_rule(B, *X, **params)
        op.jvp_rule(B, tuple(X), tuple(Tn), F, **params)
        op.vjp_rule(B, tuple(X), F, _Elem(leaf("ct", sig.arg_types[0].shape)), **params)
    except NotElementwise as e:
        return str(e)
    except Exception as e:  # anything else the proxies refused (len, indexing, ...)
        return f"{type(e).__name__}: {e}"
    if not isinstance(F, _Elem):
        return "the forward's result is not an elementwise image of the arguments"
    return None


def _fingerprint(fn: Any, seen: set[int] | None = None) -> str:
    """A hash of ``fn``'s code, constants, defaults, closure values and, recursively, of the
    global functions it names."""
    seen = set() if seen is None else seen
    h = hashlib.sha256()
    if fn is None or id(fn) in seen:
        return "-"
    seen.add(id(fn))
    fn = inspect.unwrap(fn) if callable(fn) else fn
    code = getattr(fn, "__code__", None)
    if code is None:
        h.update(repr(fn).encode())
        return h.hexdigest()

    def walk(c: types.CodeType) -> None:
        h.update(c.co_code)
        h.update(repr(c.co_names).encode())
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                walk(k)
            else:
                h.update(repr(k).encode())

    walk(code)
    h.update(repr(getattr(fn, "__defaults__", None)).encode())
    h.update(repr(getattr(fn, "__kwdefaults__", None)).encode())
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        h.update((_fingerprint(v, seen) if callable(v) else repr(v)).encode())
    g = getattr(fn, "__globals__", {})
    names: list[str] = []

    def names_of(c: types.CodeType) -> None:
        names.extend(c.co_names)
        for k in c.co_consts:
            if isinstance(k, types.CodeType):
                names_of(k)

    names_of(code)
    for n in names:
        v = g.get(n)
        if isinstance(v, types.FunctionType):
            h.update(_fingerprint(v, seen).encode())
    return h.hexdigest()


def _rules_fingerprint(op: tl.Op) -> str:
    rules = (op.symbolic, op.forward_rule, op.jvp_rule, op.vjp_rule, op.sym_rule, op.kinks_rule)
    return hashlib.sha256("".join(_fingerprint(r) for r in rules).encode()).hexdigest()


def _attrs_key(attrs: Any) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in dict(attrs).items()))


@dataclass(frozen=True)
class Certificate:
    """The rule checks of ``op`` with ``attrs`` proved for every shape (see the module)."""

    op: str
    attrs: tuple
    rules: str  # the rules' fingerprint
    probe: tuple[int, ...]
    checks: tuple[Check, ...]
    kinks: str  # the probe's kink plan, compared at reuse


_CACHE: dict[tuple, Certificate | str] = {}


def _kink_plan(op: tl.Op, sig: Signature) -> str:
    if op.kinks_rule is None:
        return ""
    rng = np.random.default_rng(0)
    params = {k: v for k, v in dict(sig.attrs).items() if k != "_position"}
    try:
        points = op.kinks_rule(rng, *sig.arg_types, **params)
    except Exception as e:
        return f"error {type(e).__name__}"
    return repr([plan_of(p) for p in points])


def certificate(sig: Signature, *, kinks: bool = True) -> Certificate | str:
    """The certificate for the rules of ``sig``'s op and attributes (computed once per op,
    attributes and rule fingerprint), or why there is none."""
    op = tl.get_op(sig.op)
    if op.index_args or len({t.shape for t in sig.arg_types}) != 1 or not sig.arg_types:
        return "not an elementwise signature (index inputs, or arguments of different shapes)"
    key = (sig.op, _attrs_key(sig.attrs), _rules_fingerprint(op), kinks,
           tuple(t.dtype for t in sig.arg_types))  # fmt: skip
    hit = _CACHE.get(key)
    if hit is None:
        hit = _prove(op, sig, key, kinks)
        _CACHE[key] = hit
    return hit


def _prove(op: tl.Op, sig: Signature, key: tuple, kinks: bool) -> Certificate | str:
    probe = replace(sig, arg_types=tuple(replace(t, shape=PROBE) for t in sig.arg_types))
    why = _elementwise_trace(op, probe)
    if why is not None:
        return f"not elementwise: {why}"
    try:
        checks = tensor_attempt(probe, "tensor", check_signature_tensor, probe, kinks=kinks)
    except (NotTensor, Partial) as e:
        return f"not proved at the probe shape: {e}"
    for c in checks:
        if (c.result, c.method) != ("pass", "exact"):
            return f"{c.name} did not pass exactly at the probe shape"
        parts = [p.rsplit(": ", 1)[-1] for p in c.how.split("; ")] if c.how else []
        if not parts or not all(p in _SIZE_FREE for p in parts):
            return f"{c.name} used the probe's index ranges ({c.how})"
    return Certificate(sig.op, key[1], key[2], PROBE, tuple(checks), _kink_plan(op, probe))


def reuse(sig: Signature, cert: Certificate) -> list[Check] | None:
    """The rule checks of ``sig`` from its op's elementwise certificate ``cert``, or ``None``
    (the kinks rule gives another plan at this shape)."""
    if cert.kinks != _kink_plan(tl.get_op(sig.op), sig):
        return None
    note = (f"certificate: the rules are elementwise and proved at shape {list(cert.probe)} with "
            "the reads as independent atoms, so for every shape")  # fmt: skip
    return [replace(c, how=f"{c.how}; {note}", seconds=0.0) for c in cert.checks]


def clear() -> None:
    """Forget every elementwise certificate."""
    _CACHE.clear()


__all__ = ["ELEMENTWISE", "PROBE", "Certificate", "certificate", "clear", "reuse"]
