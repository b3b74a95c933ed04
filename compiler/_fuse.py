"""Batch sums contracted into matrix products.

In a batch-level tape, a parameter's cotangent is the sum over the batch of per-sample
cotangents. For a linear layer the per-sample cotangent of ``W`` is an outer product
``ct x^T``; vmapped, it is a ``dot_general`` with a batch dimension, and the sum over that batch
dimension is, mathematically, one matrix product ``CT^T X`` contracting the batch. XLA does not
rewrite ``reduce_sum(dot_general(batch))`` into a contraction (it turns the batched outer product
into an elementwise multiply first), so the summed form runs several times slower than the GEMM a
hand-written ``jax.grad`` produces.

:func:`vmap_summed` traces ``vmap(rule)`` followed by the batch sums to a jaxpr and evaluates it
with a small interpreter that applies one identity: a ``reduce_sum`` over batch dimensions of a
``dot_general`` (directly, or through one ``transpose``) whose result has no other use becomes a
``dot_general`` that contracts those dimensions. Every other equation is bound as it is; nested
``jit`` equations are inlined so the pattern is seen through them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import ClosedJaxpr, DropVar, Jaxpr, Literal

Atom = tuple[str, Any]  # ("lit", value) or ("var", int)


class _Eqn(NamedTuple):
    prim: Any
    ins: list[Atom]
    outs: list[Atom]
    params: dict[str, Any]


def vmap_summed(
    fn: Callable[..., tuple[Any, ...]], in_axes: Sequence[int | None], summed: Sequence[bool]
) -> Callable[..., tuple[Any, ...]]:
    """``vmap(fn, in_axes)`` (outputs batched on axis 0) with the outputs flagged in ``summed``
    summed over the batch axis, batch sums of matrix products contracted inside the product."""
    mapped = jax.vmap(fn, in_axes=tuple(in_axes), out_axes=0)
    flags = tuple(summed)

    def with_sums(*args: Any) -> tuple[Any, ...]:
        outs = mapped(*args)
        return tuple(jnp.sum(o, axis=0) if s else o for o, s in zip(outs, flags, strict=True))

    if not any(flags):
        return with_sums

    def run(*args: Any) -> tuple[Any, ...]:
        avals = [jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)) for a in args]
        closed = jax.make_jaxpr(with_sums)(*avals)
        return tuple(eval_contracting(closed, args))

    return run


def _flatten(
    jaxpr: Jaxpr, consts: Sequence[Any], ins: Sequence[Atom], eqns: list[_Eqn], fresh: Any
) -> list[Atom]:
    env: dict[Any, Atom] = {}

    def read(v: Any) -> Atom:
        return ("lit", v.val) if isinstance(v, Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts, strict=True):
        env[v] = ("lit", c)
    for v, a in zip(jaxpr.invars, ins, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        args = [read(v) for v in eqn.invars]
        inner = eqn.params.get("jaxpr") if eqn.primitive.name in ("jit", "pjit") else None
        if isinstance(inner, ClosedJaxpr):
            results = _flatten(inner.jaxpr, inner.consts, args, eqns, fresh)
        else:
            results = [("var", next(fresh)) for _ in eqn.outvars]
            eqns.append(_Eqn(eqn.primitive, args, results, dict(eqn.params)))
        for v, r in zip(eqn.outvars, results, strict=True):
            if not isinstance(v, DropVar):
                env[v] = r
    return [read(v) for v in jaxpr.outvars]


def bind_primitive(prim: Any, args: Sequence[Any], params: dict[str, Any]) -> list[Any]:
    """Bind ``prim`` to ``args`` with equation parameters ``params``; its results as a list."""
    # As jax.core.eval_jaxpr does. Older JAX returned (subfuns, params) here.
    bound = prim.get_bind_params(params)
    subfuns, bind_params = bound if isinstance(bound, tuple) else ((), bound)
    out = prim.bind(*subfuns, *args, **bind_params)
    return list(out) if prim.multiple_results else [out]


class _Match(NamedTuple):
    dot: _Eqn
    perm: tuple[int, ...] | None  # the transpose between the dot and the sum, if any
    axes: tuple[int, ...]  # reduced axes of the dot's output (all batch dimensions)


def _find_matches(eqns: list[_Eqn], outs: list[Atom]) -> dict[int, _Match]:
    producer: dict[Any, _Eqn] = {}
    uses: dict[Any, int] = {}
    for e in eqns:
        for a in e.ins:
            if a[0] == "var":
                uses[a[1]] = uses.get(a[1], 0) + 1
        for o in e.outs:
            producer[o[1]] = e
    for a in outs:
        if a[0] == "var":
            uses[a[1]] = uses.get(a[1], 0) + 1

    def single_use_producer(a: Atom, name: str) -> _Eqn | None:
        if a[0] != "var" or uses.get(a[1], 0) != 1:
            return None
        e = producer.get(a[1])
        return e if e is not None and e.prim.name == name else None

    matches: dict[int, _Match] = {}
    for k, e in enumerate(eqns):
        if e.prim.name != "reduce_sum":
            continue
        axes = tuple(e.params["axes"])
        perm: tuple[int, ...] | None = None
        dot = single_use_producer(e.ins[0], "dot_general")
        if dot is None:
            tr = single_use_producer(e.ins[0], "transpose")
            if tr is None:
                continue
            dot = single_use_producer(tr.ins[0], "dot_general")
            if dot is None:
                continue
            perm = tuple(tr.params["permutation"])
            axes = tuple(perm[a] for a in axes)
        (_, _), (lb, _) = dot.params["dimension_numbers"]
        if axes and all(a < len(lb) for a in axes):
            matches[k] = _Match(dot, perm, tuple(sorted(axes)))
    return matches


def _contracted(m: _Match, lhs: Any, rhs: Any) -> Any:
    (lc, rc), (lb, rb) = m.dot.params["dimension_numbers"]
    keep = [i for i in range(len(lb)) if i not in m.axes]
    dims = (
        (tuple(lc) + tuple(lb[i] for i in m.axes), tuple(rc) + tuple(rb[i] for i in m.axes)),
        (tuple(lb[i] for i in keep), tuple(rb[i] for i in keep)),
    )
    (out,) = bind_primitive(m.dot.prim, [lhs, rhs], dict(m.dot.params, dimension_numbers=dims))
    if m.perm is None:
        return out
    nb = len(lb)

    def new_axis(d: int) -> int:
        return keep.index(d) if d < nb else d - len(m.axes)

    kept = [m.perm[t] for t in range(len(m.perm)) if m.perm[t] not in m.axes]
    perm = tuple(new_axis(d) for d in kept)
    return out if perm == tuple(range(len(perm))) else lax.transpose(out, perm)


def eval_contracting(closed: ClosedJaxpr, args: Sequence[Any]) -> list[Any]:
    """Evaluate ``closed`` on ``args``, contracting batch sums of matrix products (see the module
    docstring). The result equals ``jax.core.eval_jaxpr`` up to floating-point summation order."""
    eqns: list[_Eqn] = []
    fresh = itertools.count()
    ins: list[Atom] = [("var", next(fresh)) for _ in closed.jaxpr.invars]
    outs = _flatten(closed.jaxpr, closed.consts, ins, eqns, fresh)
    matches = _find_matches(eqns, outs)
    deferred = {id(m.dot) for m in matches.values()}
    for k, m in matches.items():
        if m.perm is not None:
            deferred.add(id(_producer_of(eqns, eqns[k].ins[0])))
    env: dict[int, Any] = {a[1]: v for a, v in zip(ins, args, strict=True)}

    def read(a: Atom) -> Any:
        return a[1] if a[0] == "lit" else env[a[1]]

    for k, e in enumerate(eqns):
        if id(e) in deferred:
            continue
        m = matches.get(k)
        if m is not None:
            results = [_contracted(m, read(m.dot.ins[0]), read(m.dot.ins[1]))]
        else:
            results = bind_primitive(e.prim, [read(a) for a in e.ins], e.params)
        for o, r in zip(e.outs, results, strict=True):
            env[o[1]] = r
    return [read(a) for a in outs]


def _producer_of(eqns: list[_Eqn], a: Atom) -> _Eqn:
    for e in eqns:
        if a in e.outs:
            return e
    raise AssertionError(a)
