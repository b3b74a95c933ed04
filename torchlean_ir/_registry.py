"""The op registry: one declaration per op, with all of its rules side by side.

An op is declared once (``Op(...)``) and its rules are registered right after it with the
``def_*`` decorators, as in ``jax/_src/lax/lax.py``::

    tanh = Op("tanh", args=("x",), doc="...")
    tanh.def_shape(same_shape)

    @tanh.def_forward
    def tanh_forward(B, x):
        return B.tanh(x)

Rules are written once against a backend ``B`` (see :mod:`torchlean_ir.backends`): the reference
interpreter runs them with NumPy in float64, the compiler with ``jax.numpy``, the verifier with
exact symbolic arrays. The rule signatures are:

``shape(*arg_types, **params) -> TensorType | Shape``
    ``params`` holds the attributes and, for each index argument, its :class:`IndexType`.
``forward(B, *args, **params) -> array``
    ``params`` holds the attributes and, for each index argument, its value.
``jvp(B, args, tangents, out, **params) -> array``
    The tangent of the output given one tangent per argument (zeros where there is none).
``vjp(B, args, out, ct, **params) -> tuple[array | None, ...]``
    One cotangent per argument; ``None`` means no gradient flows to that argument.
``lower(B, *args, **params)`` (optional)
    A JAX-specific forward (``B`` is the JAX backend) when the generic forward is not the fastest
    way to say it in JAX; ``lower_jvp`` / ``lower_vjp`` likewise. Without them the generic rules
    are the lowering.
``sym(B, *args, **params)`` (optional)
    The symbolic forward the verifier differentiates, when it should differ from running the
    forward on symbolic arrays (it must be equal to it as a function).
``kinks(rng, *arg_types, **params) -> list[tuple[np.ndarray, ...]]`` (optional)
    Argument values (exact dyadic rationals) at the op's non-smooth points, where the
    derivative conventions of ``docs/ops.md`` are checked exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._attrs import AttrSpec
from ._errors import ShapeError, UnknownOpError
from ._types import DType, IndexType, TensorType
from ._util import short_repr

Rule = Callable[..., Any]
Domain = Literal["real", "positive", "nonzero", "unit"]
#: A domain that depends on the attributes (``pow``'s on its exponent): ``fn(**attrs)``.
DomainRule = Callable[..., Domain]

#: The rules every op must have; :func:`missing_rules` reports the ones an op lacks.
REQUIRED_RULES = ("shape", "forward", "jvp", "vjp", "lowering", "symbolic")


@dataclass(frozen=True, slots=True)
class IndexArg:
    """An index argument of an op: a scalar natural or a vector of naturals."""

    name: str
    kind: Literal["scalar", "vector"]

    def accepts(self, t: IndexType) -> bool:
        return (len(t.shape) == 0) if self.kind == "scalar" else (len(t.shape) == 1)


class Op:
    """The declaration of one op and its rules.

    Parameters
    ----------
    name:
        The op's name in graphs and files (``snake_case``).
    args:
        Names of the tensor arguments, in order. With ``variadic=True`` the op takes
        ``min_args`` or more arguments, all described by ``args[0]``.
    index_args:
        Index (nat) arguments, read from the graph's index inputs.
    attrs:
        Attribute schema.
    nondiff:
        Names of tensor arguments that never receive a gradient (their VJP entry is ``None``).
    domain:
        Per argument, the inputs on which the op is defined and smooth away from its kinks
        (``"positive"`` for ``log``): tests and the verifier sample from it. A function of the
        attributes where it depends on them (``pow``: ``"positive"`` for a non-integer
        exponent).
    needs_position:
        The forward receives ``_position=<node index>`` (seeded random ops).
    """

    def __init__(
        self,
        name: str,
        *,
        args: Iterable[str] = (),
        index_args: Iterable[IndexArg] = (),
        attrs: Mapping[str, AttrSpec] | None = None,
        variadic: bool = False,
        min_args: int = 1,
        nondiff: Iterable[str] = (),
        domain: Mapping[str, Domain | DomainRule] | None = None,
        needs_position: bool = False,
        family: str = "misc",
        doc: str = "",
        register: bool = True,
    ) -> None:
        self.name = name
        self.arg_names: tuple[str, ...] = tuple(args)
        self.index_args: tuple[IndexArg, ...] = tuple(index_args)
        self.attrs: dict[str, AttrSpec] = dict(attrs or {})
        self.variadic = variadic
        self.min_args = min_args if variadic else len(self.arg_names)
        self.nondiff: frozenset[str] = frozenset(nondiff)
        self.domain: dict[str, Domain | DomainRule] = dict(domain or {})
        self.needs_position = needs_position
        self.family = family
        self.doc = doc
        self.shape_rule: Rule | None = None
        self.forward_rule: Rule | None = None
        self.jvp_rule: Rule | None = None
        self.vjp_rule: Rule | None = None
        self.lower_rule: Rule | None = None
        self.lower_jvp_rule: Rule | None = None
        self.lower_vjp_rule: Rule | None = None
        self.sym_rule: Rule | None = None
        self.kinks_rule: Rule | None = None
        unknown = self.nondiff - set(self.arg_names)
        if unknown:
            raise ValueError(f"{name}: nondiff names unknown arguments {sorted(unknown)}")
        if register:
            register_op(self)

    # -- rule registration -------------------------------------------------------------
    def _set(self, slot: str, fn: Rule) -> Rule:
        if getattr(self, slot) is not None:
            raise ValueError(f"op {self.name!r} already has a {slot.removesuffix('_rule')} rule")
        setattr(self, slot, fn)
        return fn

    def def_shape(self, fn: Rule) -> Rule:
        return self._set("shape_rule", fn)

    def def_forward(self, fn: Rule) -> Rule:
        return self._set("forward_rule", fn)

    def def_jvp(self, fn: Rule) -> Rule:
        return self._set("jvp_rule", fn)

    def def_vjp(self, fn: Rule) -> Rule:
        return self._set("vjp_rule", fn)

    def def_lower(self, fn: Rule) -> Rule:
        return self._set("lower_rule", fn)

    def def_lower_jvp(self, fn: Rule) -> Rule:
        return self._set("lower_jvp_rule", fn)

    def def_lower_vjp(self, fn: Rule) -> Rule:
        return self._set("lower_vjp_rule", fn)

    def def_sym(self, fn: Rule) -> Rule:
        return self._set("sym_rule", fn)

    def def_kinks(self, fn: Rule) -> Rule:
        return self._set("kinks_rule", fn)

    # -- the rules as used by the interpreters ------------------------------------------
    @property
    def lowering(self) -> Rule | None:
        """The JAX forward: the explicit ``lower`` rule, else the generic forward."""
        return self.lower_rule or self.forward_rule

    @property
    def lowering_jvp(self) -> Rule | None:
        return self.lower_jvp_rule or self.jvp_rule

    @property
    def lowering_vjp(self) -> Rule | None:
        return self.lower_vjp_rule or self.vjp_rule

    @property
    def symbolic(self) -> Rule | None:
        """The symbolic forward: the explicit ``sym`` rule, else the generic forward."""
        return self.sym_rule or self.forward_rule

    def arg_name(self, i: int) -> str:
        return self.arg_names[0] if self.variadic else self.arg_names[i]

    def is_diff_arg(self, i: int) -> bool:
        return self.arg_name(i) not in self.nondiff

    def arg_domain(self, i: int, attrs: Mapping[str, Any] | None = None) -> Domain:
        """The domain of argument ``i`` for a node with attributes ``attrs``."""
        dom = self.domain.get(self.arg_name(i), "real")
        if callable(dom):
            return dom(**{k: v for k, v in (attrs or {}).items() if k in self.attrs})
        return dom

    def infer_type(
        self,
        arg_types: tuple[TensorType, ...],
        index_types: tuple[IndexType, ...],
        attrs: Mapping[str, Any],
    ) -> TensorType:
        """Run the shape rule (arity and dtype checks included); raise :class:`ShapeError`."""
        n = len(arg_types)
        if self.variadic:
            if n < self.min_args:
                raise ShapeError(f"expects at least {_count(self.min_args, 'argument')}, got {n}")
        elif n != len(self.arg_names):
            raise ShapeError(f"expects {_count(len(self.arg_names), 'argument')}, got {n}")
        if len(index_types) != len(self.index_args):
            raise ShapeError(
                f"expects {_count(len(self.index_args), 'index argument')}, got {len(index_types)}"
            )
        for spec, t in zip(self.index_args, index_types, strict=True):
            if not spec.accepts(t):
                raise ShapeError(f"index argument {spec.name!r} must be a nat {spec.kind}, got {t}")
        dtypes = {t.dtype for t in arg_types}
        if any(not d.is_float for d in dtypes):
            raise ShapeError("tensor arguments must be f32 or f64")
        if len(dtypes) > 1:
            got = ", ".join(str(t) for t in arg_types)
            raise ShapeError(f"arguments must share one dtype, got ({got})")
        assert self.shape_rule is not None, f"op {self.name!r} has no shape rule"
        params = dict(attrs)
        params.update({s.name: t for s, t in zip(self.index_args, index_types, strict=True)})
        result = self.shape_rule(*arg_types, **params)
        if isinstance(result, TensorType):
            return result
        dtype = arg_types[0].dtype if arg_types else DType(attrs.get("dtype", "f32"))
        return TensorType(tuple(result), dtype)

    def __repr__(self) -> str:
        return f"<Op {self.name}>"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


_REGISTRY: dict[str, Op] = {}


def register_op(op: Op) -> Op:
    """Add an op to the registry; a second op of the same name is an error."""
    if op.name in _REGISTRY:
        raise ValueError(f"an op named {op.name!r} is already registered")
    _REGISTRY[op.name] = op
    return op


def unregister_op(name: str) -> None:
    """Remove a (custom) op from the registry."""
    _REGISTRY.pop(name, None)


def get_op(name: str) -> Op:
    op = _REGISTRY.get(name) if isinstance(name, str) else None
    if op is None:
        raise UnknownOpError(f"unknown op {short_repr(name)}")
    return op


def has_op(name: str) -> bool:
    return isinstance(name, str) and name in _REGISTRY


def all_ops() -> dict[str, Op]:
    """A snapshot of the registry, by name."""
    return dict(_REGISTRY)


def missing_rules(op: Op) -> list[str]:
    """The required rules (:data:`REQUIRED_RULES`) that ``op`` lacks."""
    have = {
        "shape": op.shape_rule,
        "forward": op.forward_rule,
        "jvp": op.jvp_rule,
        "vjp": op.vjp_rule,
        "lowering": op.lowering,
        "symbolic": op.symbolic,
    }
    return [r for r in REQUIRED_RULES if have[r] is None]


# -- helpers that declare common families in one call ----------------------------------------


def same_shape(*args: TensorType, **_: Any) -> tuple[int, ...]:
    """Shape rule of elementwise ops: every argument has the same shape; so does the output."""
    first = args[0].shape
    for t in args[1:]:
        if t.shape != first:
            raise ShapeError(
                "needs identical shapes (no implicit broadcasting; use broadcast_to), got "
                + ", ".join(str(a) for a in args)
            )
    return first


def lower_widened(op: Op) -> Op:
    """Give ``op`` lowering rules (forward, JVP, VJP) that run its own rules in the backend's
    widest float (``B.wide()``: float64 for a float32 compilation) and round the results back.

    For ops whose intermediate values leave the float32 range although their results do not:
    layer_norm's squared deviations at 1e30 overflow (the row used to come out as ``beta``),
    and a mean of the smallest normals is flushed to 0 as subnormal. The reference already
    computes in float64, so the float32 lowering then agrees with it over the whole float32
    range. Equal to the rules in real arithmetic; the verifier reads the conversions as the
    identity."""
    fwd, jvp, vjp = op.forward_rule, op.jvp_rule, op.vjp_rule
    assert fwd is not None and jvp is not None and vjp is not None, op.name

    def widen(W: Any, v: Any) -> Any:
        if isinstance(v, tuple | list):
            return type(v)(widen(W, x) for x in v)
        return None if v is None else W.asarray(v)

    def rounded(B: Any, params: dict[str, Any]) -> dict[str, Any]:
        # float attributes keep the compiled dtype's value (eps as a float32 constant), as in
        # the unwidened rule and in the verifier's model of a float32 compilation
        return {
            k: float(np.asarray(v, B.float_dtype)) if isinstance(v, float) else v
            for k, v in params.items()
        }

    def lowered(B: Any, *args: Any, **params: Any) -> Any:
        W = B.wide()
        if W is B:
            return fwd(B, *args, **params)
        return B.asarray(fwd(W, *widen(W, args), **rounded(B, params)))

    def lowered_jvp(B: Any, args: tuple, tangents: tuple, out: Any, **params: Any) -> Any:
        W = B.wide()
        if W is B:
            return jvp(B, args, tangents, out, **params)
        p = rounded(B, params)
        return B.asarray(jvp(W, widen(W, args), widen(W, tangents), W.asarray(out), **p))

    def lowered_vjp(B: Any, args: tuple, out: Any, ct: Any, **params: Any) -> tuple:
        W = B.wide()
        if W is B:
            return vjp(B, args, out, ct, **params)
        cts = vjp(W, widen(W, args), W.asarray(out), W.asarray(ct), **rounded(B, params))
        return tuple(None if c is None else B.asarray(c) for c in cts)

    for fn, rule in ((lowered, "lower"), (lowered_jvp, "lower_jvp"), (lowered_vjp, "lower_vjp")):
        fn.__name__ = f"{op.name}_{rule}"
        fn.__qualname__ = fn.__name__
    op.def_lower(lowered)
    op.def_lower_jvp(lowered_jvp)
    op.def_lower_vjp(lowered_vjp)
    return op


def deflinear(op: Op) -> Op:
    """Declare ``op`` linear in its differentiable arguments: its JVP is its forward applied to
    the tangents (with zeros for non-differentiable arguments)."""
    assert op.forward_rule is not None

    def linear_jvp(B: Any, args: tuple, tangents: tuple, out: Any, **params: Any) -> Any:
        return op.forward_rule(B, *tangents, **params)  # type: ignore[misc]

    linear_jvp.__name__ = f"{op.name}_jvp"
    op.def_jvp(linear_jvp)
    return op


def defunary(
    name: str,
    forward: Callable[[Any, Any], Any],
    deriv: Callable[[Any, Any, Any], Any],
    *,
    doc: str,
    domain: Domain = "real",
    family: str = "elementwise",
) -> Op:
    """Declare an elementwise unary op from its forward and its derivative ``deriv(B, x, y)``
    (``y`` the forward's output): JVP ``deriv * t`` and VJP ``deriv * ct`` follow."""
    op = Op(name, args=("x",), domain={"x": domain}, family=family, doc=doc)
    op.def_shape(same_shape)

    def unary_forward(B: Any, x: Any) -> Any:
        return forward(B, x)

    def unary_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
        return deriv(B, args[0], out) * tangents[0]

    def unary_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
        return (deriv(B, args[0], out) * ct,)

    for fn, rule in ((unary_forward, "forward"), (unary_jvp, "jvp"), (unary_vjp, "vjp")):
        fn.__name__ = f"{name}_{rule}"
        fn.__qualname__ = fn.__name__
    op.def_forward(unary_forward)
    op.def_jvp(unary_jvp)
    op.def_vjp(unary_vjp)
    return op
