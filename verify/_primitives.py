"""One walk over jaxprs for both value domains, and one table of JAX primitives.

The verifier reads the jaxprs a compilation produces in two value domains:

* ``element`` (:mod:`verify._jaxpr`): every element its own exact expression (NumPy object
  arrays of symengine expressions); the independent second method for small tensors;
* ``tensor`` (:mod:`verify._tjaxpr`): one symbolic element stands for all (a
  :class:`verify._tensor.TArray` term), whatever the sizes.

A primitive is one entry of :data:`PRIMITIVES` with its semantics for each domain (``rule(name,
domain=...)`` registers one); both domains share the walk over a jaxpr's equations (the
environment, literals, every result's shape checked against its aval), the nested calls and the
identities. A domain's interpreter supplies how it reads inputs and literals, what a value's
shape is, and what it does around a rule (:class:`JaxprInterpreter`'s hooks). A primitive with
no rule for a domain raises :class:`Unsupported`: the check that needed it is "not verified",
never passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, Literal

import numpy as np

Domain = Literal["element", "tensor"]
DOMAINS: tuple[Domain, ...] = ("element", "tensor")


#: ``rule(interpreter, eqn, invals, **params) -> value or list of values``
Rule = Callable[..., Any]


class Unsupported(Exception):
    """A primitive (or a use of one) the interpreter cannot follow."""


@dataclass
class Primitive:
    """A JAX primitive's semantics in each value domain (``None``: not followed there)."""

    name: str
    element: Rule | None = None
    tensor: Rule | None = None


#: Every primitive either interpreter follows, by name.
PRIMITIVES: dict[str, Primitive] = {}


def rule(*names: str, domain: Domain | Sequence[Domain]) -> Callable[[Rule], Rule]:
    """Register ``fn(interpreter, eqn, invals, **params)`` as the semantics of the primitives
    ``names`` in ``domain`` (one or several)."""
    domains = (domain,) if isinstance(domain, str) else tuple(domain)

    def deco(fn: Rule) -> Rule:
        for n in names:
            prim = PRIMITIVES.setdefault(n, Primitive(n))
            for d in domains:
                setattr(prim, d, fn)
        return fn

    return deco


#: ``@element(*names)`` / ``@tensor(*names)``: a rule of one domain (the family modules of
#: :mod:`verify.prims` write a primitive's two rules side by side with these).
element = partial(rule, domain="element")
tensor = partial(rule, domain="tensor")


def out_dtype(eqn: Any, i: int = 0) -> np.dtype:
    """The dtype of an equation's ``i``-th result."""
    return np.dtype(eqn.outvars[i].aval.dtype)


def supported(domain: Domain) -> list[str]:
    """The names of the primitives followed in ``domain``."""
    return sorted(n for n, p in PRIMITIVES.items() if getattr(p, domain) is not None)


CallHook = Callable[[Any, list[Any]], list[Any] | None]


class JaxprInterpreter:
    """Evaluates jaxprs in one value domain; records the primitives it met.

    ``call_hook(eqn, invals)`` is consulted for every ``jit`` / ``pjit`` equation first: it may
    return the outputs (the verifier checks nested rule calls one by one this way) or ``None``
    to interpret the nested jaxpr."""

    domain: ClassVar[Domain]

    def __init__(self, call_hook: CallHook | None = None) -> None:
        self.call_hook = call_hook
        self.primitives: set[str] = set()

    def run(self, closed: Any, *args: Any) -> list[Any]:
        """Interpret a ``ClosedJaxpr`` (or a jaxpr without constants) on the arguments."""
        jaxpr = closed.jaxpr if hasattr(closed, "jaxpr") else closed
        consts = list(closed.consts) if hasattr(closed, "consts") else []
        return self.eval_jaxpr(jaxpr, consts, list(args))

    def eval_jaxpr(self, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            if type(v).__name__ == "Literal":
                return self.literal(v.val, v.aval)
            return env[v]

        if len(args) != len(jaxpr.invars):
            raise Unsupported(f"expected {len(jaxpr.invars)} arguments, got {len(args)}")
        for v, c in zip(jaxpr.constvars, consts, strict=True):
            env[v] = self.input(c, v.aval)
        for v, a in zip(jaxpr.invars, args, strict=True):
            env[v] = self.input(a, v.aval)
        for eqn in jaxpr.eqns:
            outs = self.eqn(eqn, [read(v) for v in eqn.invars])
            for v, o in zip(eqn.outvars, outs, strict=True):
                if tuple(self.shape(o)) != tuple(v.aval.shape):
                    raise Unsupported(f"{eqn.primitive.name}: interpreted shape "
                                      f"{tuple(self.shape(o))} != {v.aval.shape}")  # fmt: skip
                if type(v).__name__ != "DropVar":
                    env[v] = o
        return [read(v) for v in jaxpr.outvars]

    def eqn(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        self.primitives.add(name)
        if name in ("jit", "pjit"):
            out = self.intercept(eqn, invals)
            if out is None and self.call_hook is not None:
                out = self.call_hook(eqn, invals)
            if out is not None:
                return out
        prim = PRIMITIVES.get(name)
        fn = None if prim is None else getattr(prim, self.domain)
        if fn is None:
            raise Unsupported(self.unsupported(name))
        outs = self.apply(fn, eqn, invals)
        return outs if isinstance(outs, list) else [outs]

    # -- the domain's hooks ----------------------------------------------------------------------

    def input(self, a: Any, aval: Any) -> Any:
        """An argument or constant as a value of the domain."""
        raise NotImplementedError

    def literal(self, v: Any, aval: Any) -> Any:
        """A literal of the jaxpr as a value of the domain."""
        raise NotImplementedError

    def shape(self, value: Any) -> tuple[Any, ...]:
        raise NotImplementedError

    def intercept(self, eqn: Any, invals: list[Any]) -> list[Any] | None:
        """A ``jit`` equation this domain reads itself (before the call hook), else ``None``."""
        return None

    def nested(self, name: str, sub: Any, invals: list[Any]) -> list[Any] | None:
        """A nested call (named ``name``) this domain reads without interpreting its body."""
        return None

    def apply(self, fn: Callable[..., Any], eqn: Any, invals: list[Any]) -> Any:
        return fn(self, eqn, invals, **eqn.params)

    def unsupported(self, name: str) -> str:
        return f"primitive {name!r}"


# -- what both domains read the same way ------------------------------------------------------


@rule("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
      "custom_vjp_call_jaxpr", "remat", "checkpoint", "custom_lin", domain=DOMAINS)  # fmt: skip
def _call(it: JaxprInterpreter, eqn: Any, invals: list, **p: Any) -> list:
    sub = p.get("jaxpr") or p.get("call_jaxpr") or p.get("fun_jaxpr")
    if sub is None:
        raise Unsupported(f"{eqn.primitive.name} without a jaxpr")
    out = it.nested(p.get("name", ""), sub, invals)
    if out is not None:
        return out
    if hasattr(sub, "consts"):
        return it.eval_jaxpr(sub.jaxpr, sub.consts, invals[-len(sub.jaxpr.invars) :])
    return it.eval_jaxpr(sub, [], invals[-len(sub.invars) :])


@rule("stop_gradient", "copy", "copy_p", "reduce_precision", "optimization_barrier",
      domain=DOMAINS)  # fmt: skip
def _identity(it: JaxprInterpreter, eqn: Any, invals: list, **_: Any) -> Any:
    return list(invals) if len(invals) > 1 else invals[0]


__all__ = [
    "DOMAINS",
    "PRIMITIVES",
    "Domain",
    "JaxprInterpreter",
    "Primitive",
    "Unsupported",
    "element",
    "out_dtype",
    "rule",
    "supported",
    "tensor",
]
