"""Per-node rules lowered to JAX, each jitted once per signature.

For a node, the compiler needs three functions: its forward, its JVP and its VJP, built from the
op's registered lowering rules (``op.lowering``, ``op.lowering_jvp``, ``op.lowering_vjp``) on the
JAX backend. Each is wrapped with a flat positional signature and jitted under a recognisable
name, so that it appears in the compiled function's jaxpr as one nested ``jit`` equation:

* ``tl_fwd_<op>(*args, *index) -> out``
* ``tl_jvp_<op>(*args, out, *tangents, *index) -> tangent``: ``tangents`` holds only the
  arguments flagged as carrying a tangent; the others get zeros inside the rule.
* ``tl_vjp_<op>(*args, out, ct, *index) -> tuple``: one cotangent per argument flagged as
  receiving one, in argument order (zeros where the rule returns ``None`` for such an argument).

Functions are cached by :class:`RuleSignature` (op, attributes, argument and index shapes, dtype,
flags, batching), so identical nodes share one function and JAX traces its body once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax

from torchlean_ir import ConstArray, Op
from torchlean_ir.backends import jax_backend

from ._errors import CompileError
from ._fuse import vmap_summed
from ._precision import traced_at

Shape = tuple[int, ...]
RuleKind = Literal["fwd", "jvp", "vjp"]


@dataclass(frozen=True, slots=True)
class RuleBatching:
    """How a batch-level rule is vmapped: per argument and per index argument, whether it has a
    leading batch axis; for a VJP, per receiving argument, whether its cotangent is summed over
    the batch (the argument itself has no batch axis)."""

    args: tuple[bool, ...]
    index: tuple[bool, ...]
    summed: tuple[bool, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleSignature:
    """The cache key of a lowered rule: everything the traced function depends on."""

    kind: RuleKind
    op: str
    attrs: tuple[tuple[str, Any], ...]
    arg_shapes: tuple[Shape, ...]
    index_shapes: tuple[Shape, ...]
    out_shape: Shape
    dtype: str
    flags: tuple[bool, ...]
    position: int | None
    batching: RuleBatching | None
    precision: str = "float32"  # compiler._precision: the matmul / convolution precision


def _canon(v: Any) -> Any:
    """A hashable key for an attribute value that tells 0.0 from -0.0 (they compare equal)."""
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, tuple):
        return tuple(_canon(x) for x in v)
    if isinstance(v, ConstArray):
        return ("array", v.dtype.value, v.shape, v.data)
    return (type(v).__name__, v)


_CACHE: dict[RuleSignature, Callable[..., Any]] = {}

#: Benchmarks only (see ``compiler._compiled.inlined_rules``): build the rule functions with
#: ``jax.jit(inline=True)``, so that they leave no nested ``jit`` equation in the jaxpr.
_INLINE = False


def clear_rule_cache() -> None:
    """Forget every cached rule function (their compiled code goes with them)."""
    _CACHE.clear()


def rule_cache_size() -> int:
    return len(_CACHE)


def _fit(r: Any, shape: Shape, dtype: Any, what: str) -> Any:
    r = jnp.asarray(r)
    if tuple(r.shape) != tuple(shape):
        raise CompileError(
            f"{what} returned shape {list(r.shape)}, expected {list(shape)} (a lowering bug)"
        )
    return lax.convert_element_type(r, dtype)


def _named(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _raw_rule(
    kind: RuleKind,
    op: Op,
    attrs: Mapping[str, Any],
    arg_shapes: tuple[Shape, ...],
    out_shape: Shape,
    dtype: str,
    flags: tuple[bool, ...],
    position: int | None,
) -> Callable[..., Any]:
    """The unjitted flat-signature function of one rule (see the module docstring)."""
    B = jax_backend(dtype)
    dt = B.float_dtype
    n = len(arg_shapes)
    static: dict[str, Any] = dict(attrs)
    if op.needs_position:
        static["_position"] = position
    index_names = tuple(s.name for s in op.index_args)

    def params(idx: tuple[Any, ...]) -> dict[str, Any]:
        p = dict(static)
        p.update(zip(index_names, idx, strict=True))
        return p

    if kind == "fwd":
        rule = op.lowering
        assert rule is not None, op.name

        def fwd(*flat: Any) -> Any:
            r = rule(B, *flat[:n], **params(flat[n:]))
            return _fit(r, out_shape, dt, f"{op.name} forward")

        return fwd

    if kind == "jvp":
        jrule = op.lowering_jvp
        assert jrule is not None, op.name
        n_t = sum(flags)

        def jvp(*flat: Any) -> Any:
            args, out = flat[:n], flat[n]
            given = iter(flat[n + 1 : n + 1 + n_t])
            tans = tuple(
                next(given) if f else B.zeros(s) for f, s in zip(flags, arg_shapes, strict=True)
            )
            r = jrule(B, tuple(args), tans, out, **params(flat[n + 1 + n_t :]))
            return _fit(r, out_shape, dt, f"{op.name} jvp")

        return jvp

    vrule = op.lowering_vjp
    assert vrule is not None, op.name

    def vjp(*flat: Any) -> tuple[Any, ...]:
        args, out, ct = flat[:n], flat[n], flat[n + 1]
        gs = vrule(B, tuple(args), out, ct, **params(flat[n + 2 :]))
        if len(gs) != n:
            raise CompileError(f"{op.name} vjp returned {len(gs)} cotangents for {n} arguments")
        return tuple(
            B.zeros(arg_shapes[p])
            if gs[p] is None
            else _fit(gs[p], arg_shapes[p], dt, f"{op.name} vjp")
            for p in range(n)
            if flags[p]
        )

    return vjp


def node_rule(
    kind: RuleKind,
    op: Op,
    attrs: Mapping[str, Any],
    arg_shapes: tuple[Shape, ...],
    index_shapes: tuple[Shape, ...],
    out_shape: Shape,
    dtype: str,
    flags: tuple[bool, ...] = (),
    position: int | None = None,
    batching: RuleBatching | None = None,
    precision: str = "float32",
) -> Callable[..., Any]:
    """The jitted ``tl_<kind>_<op>`` function for one node signature (cached), traced at the
    matmul ``precision`` (``compiler._precision``)."""
    sig = RuleSignature(
        kind,
        op.name,
        tuple((k, _canon(v)) for k, v in attrs.items()),
        tuple(arg_shapes),
        tuple(index_shapes),
        tuple(out_shape),
        dtype,
        tuple(flags),
        position if op.needs_position else None,
        batching,
        precision,
    )
    fn = _CACHE.get(sig)
    if fn is None:
        fn = _CACHE[sig] = _build(sig, op, attrs)
    return fn


def _build(sig: RuleSignature, op: Op, attrs: Mapping[str, Any]) -> Callable[..., Any]:
    raw = traced_at(
        sig.precision,
        _raw_rule(
            sig.kind, op, attrs, sig.arg_shapes, sig.out_shape, sig.dtype, sig.flags, sig.position
        ),
    )
    name = f"tl_{sig.kind}_{op.name}"
    b = sig.batching
    if b is None:
        return jax.jit(_named(raw, name), inline=_INLINE)
    arg_axes = [0 if x else None for x in b.args]
    idx_axes = [0 if x else None for x in b.index]
    if sig.kind == "fwd":
        in_axes = (*arg_axes, *idx_axes)
        mapped = jax.vmap(raw, in_axes=in_axes)
    elif sig.kind == "jvp":
        tan_axes = [a for a, f in zip(arg_axes, sig.flags, strict=True) if f]
        in_axes = (*arg_axes, 0, *tan_axes, *idx_axes)
        mapped = jax.vmap(raw, in_axes=in_axes)
    else:
        in_axes = (*arg_axes, 0, 0, *idx_axes)
        mapped = vmap_summed(raw, in_axes, b.summed)

    def batched(*flat: Any) -> Any:
        return mapped(*flat)

    return jax.jit(_named(batched, name), inline=_INLINE)
