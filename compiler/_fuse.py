"""Batch sums contracted into matrix products and convolutions.

In a batch-level tape, a parameter's cotangent is the sum over the batch of per-sample
cotangents. For a linear layer the per-sample cotangent of ``W`` is an outer product
``ct x^T``; vmapped, it is a ``dot_general`` with a batch dimension, and the sum over that batch
dimension is, mathematically, one matrix product ``CT^T X`` contracting the batch. XLA does not
rewrite ``reduce_sum(dot_general(batch))`` into a contraction (it turns the batched outer product
into an elementwise multiply first), so the summed form runs several times slower than the GEMM a
hand-written ``jax.grad`` produces.

A convolution's weight cotangent is the same story: per sample it is a convolution of the input
with the output cotangent (the sample's one "batch" element contracted as the feature); vmapped,
JAX folds the batch into ``feature_group_count=B`` groups, one per sample, whose outputs
(``B * outC`` features) are reshaped to ``(B, outC)`` and summed. The sum over the groups is one
ungrouped convolution whose kernel takes the groups as extra input features (what a
hand-written ``jax.grad`` of a batched convolution emits); XLA's CPU backend runs the grouped
form 2 to 3 times slower.

:func:`vmap_summed` traces ``vmap(rule)`` followed by the batch sums to a jaxpr and evaluates it
with a small interpreter that applies two identities to a ``reduce_sum`` whose operand has no
other use:

* over batch dimensions of a ``dot_general`` (directly, or through one ``transpose``): a
  ``dot_general`` that contracts those dimensions;
* over the group axis of a ``reshape`` that splits the output features of a grouped
  ``conv_general_dilated`` into ``(groups, features per group)`` (directly, or through
  ``transpose`` and ``rev`` equations, as in a transpose convolution's weight cotangent): the
  ungrouped convolution with the kernel's groups moved into its input features,
  ``sum_g conv(lhs_g, rhs_g) = conv(lhs, rhs')`` with ``rhs'[o, (g, c)] = rhs[(g, o), c]``,
  followed by the same moves.

Every other equation is bound as it is; nested ``jit`` equations are inlined so the patterns are
seen through them. Both identities are exact in real arithmetic (only the order of the sums
changes).
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
    shapes: tuple[tuple[int, ...], ...]  # of the outputs


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
            shapes = tuple(tuple(v.aval.shape) for v in eqn.outvars)
            eqns.append(_Eqn(eqn.primitive, args, results, dict(eqn.params), shapes))
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


class _ConvMatch(NamedTuple):
    conv: _Eqn  # a conv_general_dilated with feature_group_count = groups > 1
    split: _Eqn  # the reshape of its output features into (groups, features per group)
    moves: tuple[_Eqn, ...]  # transposes and reversals between the reshape and the sum, in order
    axes: tuple[int, ...]  # the sum's axes, the group axis among them


def _find_matches(eqns: list[_Eqn], outs: list[Atom]) -> dict[int, _Match | _ConvMatch]:
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

    matches: dict[int, _Match | _ConvMatch] = {}
    for k, e in enumerate(eqns):
        if e.prim.name != "reduce_sum":
            continue
        axes = tuple(e.params["axes"])
        conv = _conv_match(e, single_use_producer)
        if conv is not None:
            matches[k] = conv
            continue
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


def _conv_match(
    e: _Eqn, single_use_producer: Callable[[Atom, str], _Eqn | None]
) -> _ConvMatch | None:
    """``e`` (a reduce_sum) sums the groups of a grouped convolution, through a reshape that
    splits its output features and any transposes and reversals (see the module docstring);
    else None."""
    moves: list[_Eqn] = []
    a = e.ins[0]
    while True:
        move = single_use_producer(a, "transpose") or single_use_producer(a, "rev")
        if move is None:
            break
        moves.insert(0, move)
        a = move.ins[0]
    split = single_use_producer(a, "reshape")
    if split is None or split.params.get("dimensions") is not None:
        return None
    conv = single_use_producer(split.ins[0], "conv_general_dilated")
    if conv is None or conv.params["batch_group_count"] != 1:
        return None
    groups = conv.params["feature_group_count"]
    shape = conv.shapes[0]
    fd = conv.params["dimension_numbers"].out_spec[1]
    want = (*shape[:fd], groups, shape[fd] // groups, *shape[fd + 1 :])
    if groups == 1 or tuple(split.params["new_sizes"]) != want:
        return None
    axes = tuple(int(x) for x in e.params["axes"])
    if _group_axis(fd, moves) not in axes:
        return None
    return _ConvMatch(conv, split, tuple(moves), axes)


def _group_axis(fd: int, moves: Sequence[_Eqn]) -> int:
    """Where the group axis (``fd`` after the split) is after ``moves``."""
    for m in moves:
        if m.prim.name == "transpose":
            fd = tuple(m.params["permutation"]).index(fd)
    return fd


def _drop_axis(axes: Sequence[int], g: int) -> tuple[int, ...]:
    """``axes`` of an array with axis ``g``, renumbered for the array without it."""
    return tuple(a - (a > g) for a in axes if a != g)


def _ungrouped_conv(m: _ConvMatch, lhs: Any, rhs: Any) -> Any:
    """The sum over the groups of ``m.conv(lhs, rhs)`` (split, moved as in ``m``), then over
    the sum's other axes."""
    params = m.conv.params
    groups = params["feature_group_count"]
    dn = params["dimension_numbers"]
    od, idim = dn.rhs_spec[0], dn.rhs_spec[1]
    # split the kernel's output features into (g, o), move g just before the input features c
    # and merge them: rhs'[o, (g, c)] = rhs[(g, o), c]
    shape = tuple(rhs.shape)
    split = lax.reshape(rhs, (*shape[:od], groups, shape[od] // groups, *shape[od + 1 :]))
    labels: list[Any] = [*range(od), "g", *range(od, len(shape))]
    order = [a for a in labels if a != "g"]
    order.insert(order.index(idim), "g")
    moved = lax.transpose(split, tuple(labels.index(a) for a in order))
    merged_shape = list(moved.shape)
    at = order.index("g")
    merged_shape[at : at + 2] = [merged_shape[at] * merged_shape[at + 1]]
    kernel = lax.reshape(moved, tuple(merged_shape))
    final = [a for a in order if a != "g"]
    spec = lax.ConvDimensionNumbers(
        dn.lhs_spec, tuple(final.index(a) for a in dn.rhs_spec), dn.out_spec
    )
    (out,) = bind_primitive(
        m.conv.prim, [lhs, kernel], dict(params, dimension_numbers=spec, feature_group_count=1)
    )
    # the split's output without its group axis is ``out``: replay the moves without it
    g = dn.out_spec[1]
    for move in m.moves:
        if move.prim.name == "transpose":
            perm = tuple(move.params["permutation"])
            out = lax.transpose(out, _drop_axis(perm, g))
            g = perm.index(g)
        else:  # rev: reversing the summed axis changes nothing
            dims = _drop_axis(move.params["dimensions"], g)
            out = lax.rev(out, dims) if dims else out
    rest = _drop_axis(m.axes, g)
    return lax.reduce_sum(out, rest) if rest else out


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
    deferred: set[int] = set()
    for k, m in matches.items():
        if isinstance(m, _ConvMatch):
            deferred |= {id(m.conv), id(m.split), *(id(e) for e in m.moves)}
            continue
        deferred.add(id(m.dot))
        if m.perm is not None:
            deferred.add(id(_producer_of(eqns, eqns[k].ins[0])))
    env: dict[int, Any] = {a[1]: v for a, v in zip(ins, args, strict=True)}

    def read(a: Atom) -> Any:
        return a[1] if a[0] == "lit" else env[a[1]]

    for k, e in enumerate(eqns):
        if id(e) in deferred:
            continue
        m = matches.get(k)
        if isinstance(m, _ConvMatch):
            results = [_ungrouped_conv(m, read(m.conv.ins[0]), read(m.conv.ins[1]))]
        elif m is not None:
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
