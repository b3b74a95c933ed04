"""Very large programs run in slices: one traced jaxpr, several executables, identical slices
compiled once.

XLA compiles a jitted function as one module, and some of its work grows faster than the
module: buffer assignment, the CPU runtime's dependency graph between kernels, copy insertion.
With the fusion boundaries of :mod:`compiler._lower`, a 10,000-node chain's value and gradient
compiles in about 30 s of CPU, a 20,000-node one in about 130 s, and a 100,000-node one would
take hours. Hand-written ``jax.jit`` has the same limit (it also builds one module).

A function with more than ``SLICE_ABOVE`` rule calls is therefore not compiled as one module.
Its jaxpr (the very jaxpr ``CompiledGraph.traceable`` gives, which the verifier checks) is cut
into consecutive slices of ``SLICE_CALLS`` rule calls. Each slice is jitted on its own: its
equations are bound again in order, so XLA compiles exactly that part of the jaxpr. Slices
whose equations are the same (same primitives, parameters, nested rule jaxprs and wiring, up
to renaming) share one jitted function, so repeated structure, such as the layers of a deep
chain, is compiled once. A short driver runs the slices in order and passes between them the
values that cross a cut; small values of one shape that a slice hands on (the residuals a
backward pass reads) are stacked into one array, since every array that crosses costs
microseconds, and unstacked by the slices that read them (data movement only). Values are
dropped once the last slice that reads them has run.

The price: values that cross a cut are materialised and XLA cannot fuse across it, and each
slice is one dispatch (tens of microseconds). Above ``SLICE_ABOVE`` calls both are small beside
the work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental.xla_metadata import set_xla_metadata
from jax.extend.core import ClosedJaxpr, Jaxpr, Literal

from ._fuse import bind_primitive

#: A function with more rule calls than this runs in slices (a value and gradient: about half
#: as many graph nodes).
SLICE_ABOVE = 16_384
#: Rule calls per slice (a power of two, so that slices of a periodic structure line up).
SLICE_CALLS = 512
#: Values of at most this many elements that a slice hands on are stacked by shape, at most
#: PACK_GROUP in one array.
PACK_MAX_ELEMENTS = 1 << 16
PACK_GROUP = 64

_CALLS = ("jit", "pjit")

Ref = tuple[int, int | None]  # (slot, index in the slot's stack or None)


def _metadata(eqn: Any) -> tuple[tuple[str, Any], ...]:
    md = getattr(eqn.ctx, "xla_metadata", None)
    return tuple(sorted(md.items())) if md else ()


def _params_key(params: dict[str, Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for k, v in sorted(params.items()):
        if isinstance(v, ClosedJaxpr | Jaxpr):
            out.append((k, "jaxpr", id(v)))  # nested rule jaxprs are cached, hence shared
            continue
        try:
            hash(v)
        except TypeError:
            v = repr(v)
        out.append((k, v))
    return tuple(out)


def _literal_key(v: Literal) -> tuple[Any, ...]:
    return ("lit", str(v.aval), np.asarray(v.val).tobytes())


@dataclass(frozen=True, eq=False)
class _Slice:
    fn: Callable[..., tuple[Any, ...]]
    reads: tuple[int, ...]  # the slots passed in, in order
    writes: tuple[int, ...]  # the slots its results fill, in order
    frees: tuple[int, ...]  # the slots no later slice reads


@dataclass(frozen=True, eq=False)
class _Plan:
    """How to run one traced jaxpr in slices."""

    n_slots: int
    args: tuple[int, ...]  # the slot of each flat argument
    consts: tuple[tuple[int, Any], ...]
    slices: tuple[_Slice, ...]
    outs: tuple[tuple[int, Any], ...]  # per flat result: (slot, None) or (-1, literal value)
    out_tree: Any

    def run(self, args: Sequence[Any]) -> Any:
        slots: list[Any] = [None] * self.n_slots
        for s, a in zip(self.args, args, strict=True):
            slots[s] = a
        for s, c in self.consts:
            slots[s] = c
        for sl in self.slices:
            results = sl.fn(*[slots[s] for s in sl.reads])
            for s in sl.frees:
                slots[s] = None
            for s, r in zip(sl.writes, results, strict=True):
                slots[s] = r
        flat = [slots[s] if s >= 0 else v for s, v in self.outs]
        return jax.tree_util.tree_unflatten(self.out_tree, flat)


def _cuts(eqns: Sequence[Any], per_slice: int) -> list[tuple[int, int]]:
    """Consecutive ranges of equations with at most ``per_slice`` rule calls each.

    A tape VJP calls every ``tl_fwd_*`` rule, then the VJP rules in reverse. Its forward part
    is cut from its end and its backward part from its start, so that the backward slice of
    some nodes reads the residuals of the one forward slice of the same nodes: on repeated
    structure the slices then repeat too, and are compiled once."""
    calls = [i for i, e in enumerate(eqns) if e.primitive.name in _CALLS]
    fwd = [str(eqns[i].params.get("name", "")).startswith("tl_fwd_") for i in calls]
    m = fwd.index(False) if False in fwd else len(fwd)
    if 0 < m < len(fwd) and not any(fwd[m:]):
        first = m % per_slice
        starts = {*range(first, m, per_slice), *range(m, len(calls), per_slice)}
    else:
        starts = set(range(0, len(calls), per_slice))
    pos = sorted({0, *(calls[c] for c in starts)})
    return list(zip(pos, [*pos[1:], len(eqns)], strict=True))


def _slice_function(
    eqns: Sequence[Any],
    inputs: Sequence[tuple[Any, int, int | None]],
    groups: Sequence[tuple[Any, ...]],
    name: str,
    jit_kwargs: dict[str, Any],
) -> Callable[..., tuple[Any, ...]]:
    """The jitted function of one slice: its equations bound in order. ``inputs`` says where
    each variable read from outside comes from (argument position, stack index or None);
    ``groups`` are its results, each one variable or several stacked."""

    def run_slice(*arrays: Any) -> tuple[Any, ...]:
        env: dict[Any, Any] = {}
        for var, pos, idx in inputs:
            a = arrays[pos]
            env[var] = a if idx is None else lax.index_in_dim(a, idx, keepdims=False)
        for e in eqns:
            args = [v.val if isinstance(v, Literal) else env[v] for v in e.invars]
            md = _metadata(e)
            with set_xla_metadata(**dict(md)) if md else contextlib.nullcontext():
                results = bind_primitive(e.primitive, args, e.params)
            for o, r in zip(e.outvars, results, strict=True):
                env[o] = r
        return tuple(env[g[0]] if len(g) == 1 else jnp.stack([env[v] for v in g]) for g in groups)

    run_slice.__name__ = run_slice.__qualname__ = name
    return jax.jit(run_slice, **jit_kwargs)


class SlicedFunction:
    """A function run as slices of its jaxpr (see the module docstring); called like the
    jitted function it replaces. One plan per argument signature, traced on first use."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        calls_per_slice: int | None = None,
        jit_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self._fn = fn
        self._per_slice = SLICE_CALLS if calls_per_slice is None else calls_per_slice
        self._jit_kwargs = dict(jit_kwargs or {})
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._functions: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self._name = getattr(fn, "__name__", "tl_graph")

    def __call__(self, *args: Any) -> Any:
        key = tuple(map(jax.typeof, args))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(args)
        return plan.run(args)

    @property
    def executables(self) -> int:
        """How many distinct slice functions exist (identical slices share one)."""
        return len(self._functions)

    def plan_slices(self, *args: Any) -> int:
        """How many slices the function runs at these arguments (tracing it if needed)."""
        key = tuple(map(jax.typeof, args))
        if key not in self._plans:
            self._plans[key] = self._plan(args)
        return len(self._plans[key].slices)

    def _plan(self, args: Sequence[Any]) -> _Plan:
        closed, shape = jax.make_jaxpr(self._fn, return_shape=True)(*args)
        jaxpr = closed.jaxpr
        eqns = jaxpr.eqns
        ranges = _cuts(eqns, self._per_slice)
        slice_of = np.empty(len(eqns), np.int64)
        for k, (lo, hi) in enumerate(ranges):
            slice_of[lo:hi] = k
        end = len(ranges)
        last: dict[Any, int] = {}  # variable -> the last slice that reads it
        for i, e in enumerate(eqns):
            for v in e.invars:
                if not isinstance(v, Literal):
                    last[v] = int(slice_of[i])
        outvars = {v for v in jaxpr.outvars if not isinstance(v, Literal)}
        for v in outvars:
            last[v] = end

        where: dict[Any, Ref] = {}
        n_slots = 0
        arg_slots, consts = [], []
        for v in jaxpr.invars:
            where[v] = (n_slots, None)
            arg_slots.append(n_slots)
            n_slots += 1
        for v, c in zip(jaxpr.constvars, closed.consts, strict=True):
            where[v] = (n_slots, None)
            consts.append((n_slots, c))
            n_slots += 1
        slot_aval: dict[int, Any] = {}
        for v, s in zip(jaxpr.invars, arg_slots, strict=True):
            slot_aval[s] = v.aval
        for v, (s, _) in zip(jaxpr.constvars, consts, strict=True):
            slot_aval[s] = v.aval
        slot_last: dict[int, int] = {}
        for v, (s, _) in where.items():
            slot_last[s] = max(slot_last.get(s, -1), last.get(v, -1))

        slices: list[_Slice] = []
        for k, (lo, hi) in enumerate(ranges):
            part = eqns[lo:hi]
            # what it reads from outside, in order of first use
            reads: list[int] = []
            read_pos: dict[int, int] = {}
            inputs: list[tuple[Any, int, int | None]] = []
            local: dict[Any, Any] = {}
            for e in part:
                for v in e.invars:
                    if isinstance(v, Literal) or v in local:
                        continue
                    s, idx = where[v]
                    pos = read_pos.get(s)
                    if pos is None:
                        pos = read_pos[s] = len(reads)
                        reads.append(s)
                    local[v] = ("in", pos, idx)
                    inputs.append((v, pos, idx))
                for j, o in enumerate(e.outvars):
                    local[o] = ("eq", id(e), j)
            # what it hands on: stacked by shape where small
            handed = [o for e in part for o in e.outvars if last.get(o, -1) > k and o in local]
            by_aval: dict[Any, list[Any]] = {}
            groups: list[tuple[Any, ...]] = []
            for o in handed:
                if o in outvars or o.aval.size > PACK_MAX_ELEMENTS:
                    groups.append((o,))
                else:
                    by_aval.setdefault(o.aval, []).append(o)
            for vs in by_aval.values():
                # chunked from the end: the last values (what the next slice reads first) sit
                # in a full stack whatever the slice's length, so repeated slices match
                ends = range(len(vs), 0, -PACK_GROUP)
                groups.extend(tuple(vs[max(0, e - PACK_GROUP) : e]) for e in reversed(ends))
            writes = []
            for g in groups:
                s = n_slots
                n_slots += 1
                writes.append(s)
                for i, o in enumerate(g):
                    where[o] = (s, None if len(g) == 1 else i)
                slot_last[s] = max(last[o] for o in g)
                a = g[0].aval
                slot_aval[s] = a if len(g) == 1 else a.update(shape=(len(g), *a.shape))
            key = self._key(part, reads, inputs, groups, slot_aval, local)
            fn = self._functions.get(key)
            if fn is None:
                fn = self._functions[key] = _slice_function(
                    part,
                    inputs,
                    groups,
                    f"{self._name}_slice",
                    self._jit_kwargs,
                )
            frees = tuple(s for s in reads if slot_last.get(s, -1) == k)
            slices.append(_Slice(fn, tuple(reads), tuple(writes), frees))

        outs: list[tuple[int, Any]] = []
        for v in jaxpr.outvars:
            if isinstance(v, Literal):
                outs.append((-1, jnp.asarray(v.val, v.aval.dtype)))
            else:
                s, idx = where[v]
                assert idx is None, "results are never stacked"
                outs.append((s, None))
        return _Plan(
            n_slots,
            tuple(arg_slots),
            tuple(consts),
            tuple(slices),
            tuple(outs),
            jax.tree_util.tree_structure(shape),
        )

    @staticmethod
    def _key(
        part: Sequence[Any],
        reads: Sequence[int],
        inputs: Sequence[tuple[Any, int, int | None]],
        groups: Sequence[tuple[Any, ...]],
        slot_aval: dict[int, Any],
        local: dict[Any, Any],
    ) -> tuple[Any, ...]:
        """What a slice's function depends on, up to renaming: two slices with equal keys
        compute the same function of their inputs."""
        order = {id(e): j for j, e in enumerate(part)}

        def ref(v: Any) -> Any:
            if isinstance(v, Literal):
                return _literal_key(v)
            r = local[v]
            return ("eq", order[r[1]], r[2]) if r[0] == "eq" else r

        eq_keys = tuple(
            (e.primitive, _params_key(e.params), tuple(map(ref, e.invars)), _metadata(e))
            for e in part
        )
        return (
            tuple(slot_aval[s] for s in reads),
            tuple((pos, idx) for _, pos, idx in inputs),
            eq_keys,
            tuple(tuple(ref(o) for o in g) for g in groups),
        )
