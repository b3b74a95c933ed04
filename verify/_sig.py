"""Op signatures (the unit of caching) and the index values a signature is checked at."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import symengine as se

import torchlean_ir as tl
from torchlean_ir import Attrs, ConstArray
from torchlean_ir.backends import SymArray

#: Out-of-range index values always tried, besides the first ones past every dimension:
#: the int32 limits (JAX indexes with int32) and a value that wraps to 1 modulo 2^32.
FAR_INDICES = (2**31 - 1, 2**31, 2**32 + 1)


@dataclass(frozen=True)
class Signature:
    """What a node's rules depend on: op, attributes, argument types, index types, static index
    values (``None`` for a runtime index input) and, for seeded random ops, the position."""

    op: str
    attrs: Attrs
    arg_types: tuple[tl.TensorType, ...]
    index_types: tuple[tl.IndexType, ...] = ()
    static_index: tuple[tuple[int, ...] | None, ...] = ()
    position: int | None = None

    @staticmethod
    def of(graph: tl.GraphData, j: int) -> Signature:
        node = graph.nodes[j]
        op = tl.get_op(node.op)
        ix = [graph.index_inputs[a] for a in node.index_args]
        return Signature(
            op=node.op,
            attrs=node.attrs,
            arg_types=tuple(graph.value_type(a) for a in node.args),
            index_types=tuple(i.type for i in ix),
            static_index=tuple(i.value for i in ix),
            position=j if op.needs_position else None,
        )

    @property
    def dtype(self) -> str:
        return self.arg_types[0].dtype.value if self.arg_types else "f64"

    def arg_names(self) -> list[str]:
        """The arguments' names in checks and counterexamples (numbered for a variadic op)."""
        op = tl.get_op(self.op)
        return [
            op.arg_name(p) + (str(p) if op.variadic else "") for p in range(len(self.arg_types))
        ]

    def label(self) -> str:
        parts = [str(t) for t in self.arg_types] + [str(t) for t in self.index_types]
        attrs = [f"{k}={_short(v)}" for k, v in self.attrs.items()]
        return f"{self.op}({', '.join(parts + attrs)})"


def _short(v: Any) -> str:
    if isinstance(v, ConstArray):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    return str(v).replace(" ", "")


def named_symbols(name: str, shape: tuple[int, ...]) -> SymArray:
    """A :class:`SymArray` of real symbols ``name[i,j]`` (``name`` for a scalar)."""
    n = math.prod(shape)
    arr = np.empty(n, dtype=object)
    for k, ix in enumerate(np.ndindex(shape) if shape else [()]):
        arr[k] = se.Symbol(f"{name}[{','.join(map(str, ix))}]" if shape else name)
    return SymArray(arr.reshape(shape))


@dataclass(frozen=True)
class IndexPlan:
    """The index values a signature is checked at, and a sentence saying which they are."""

    assignments: tuple[tuple[np.ndarray, ...], ...]
    coverage: str


def index_plan(
    sig: Signature, *, seed: int = 0, combos: int = 4, far: tuple[int, ...] = FAR_INDICES
) -> IndexPlan:
    """Static index inputs are checked at their value. A runtime index is checked at every value
    from 0 to the largest argument dimension (every in-range value, whichever axis it indexes),
    the first value past it, and the ``far`` values (:data:`FAR_INDICES`; compiled functions take
    int32 indices, so only ``2**31 - 1`` there); a vector index at each such value in each
    position (others in range), all positions equal (duplicates), and ``combos`` random mixes."""
    if not sig.index_types:
        return IndexPlan(((),), "")
    dims = [d for t in sig.arg_types for d in t.shape] or [1]
    top = max(dims)
    values = [*range(top + 1), top + 1, *far]
    rng = random.Random(seed)
    per_arg: list[list[np.ndarray]] = []
    texts = []
    for k, (t, static) in enumerate(zip(sig.index_types, sig.static_index, strict=True)):
        if static is not None:
            clipped = np.minimum(np.asarray(static, dtype=np.int64), max(far))
            per_arg.append([clipped.reshape(t.shape)])
            texts.append(f"index {k}: its static value {list(static)}")
            continue
        if t.shape == ():
            per_arg.append([np.asarray(v, dtype=np.int64) for v in values])
            texts.append(
                f"index {k}: every value 0..{top} and out of range {top + 1}, "
                + ", ".join(map(str, far))
            )
            continue
        (n,) = t.shape
        base = [rng.randrange(top + 1) for _ in range(n)]
        opts: list[np.ndarray] = []
        for p in range(n):
            for v in values:
                a = list(base)
                a[p] = v
                opts.append(np.asarray(a, dtype=np.int64))
        opts += [np.full(n, v, dtype=np.int64) for v in values]
        opts += [
            np.asarray([rng.choice(values) for _ in range(n)], dtype=np.int64)
            for _ in range(combos)
        ]
        uniq = {tuple(o.tolist()): o for o in opts}
        per_arg.append(list(uniq.values()))
        texts.append(
            f"index {k} (nat[{n}]): each position at every value 0..{top}, {top + 1} and "
            f"{', '.join(map(str, far))} (others fixed in range), all positions equal, "
            f"{combos} random mixes ({len(uniq)} vectors)"
        )
    # Index arguments vary one at a time around the first choice of the others.
    assignments: list[tuple[np.ndarray, ...]] = []
    first = [opts[0] for opts in per_arg]
    for k, opts in enumerate(per_arg):
        for o in opts:
            a = list(first)
            a[k] = o
            assignments.append(tuple(a))
    uniq_assign = {tuple(tuple(np.ravel(x).tolist()) for x in a): a for a in assignments}
    if len(per_arg) > 1:
        texts.append("index arguments varied one at a time")
    return IndexPlan(tuple(uniq_assign.values()), "; ".join(texts))


def rule_params(sig: Signature, index: tuple[np.ndarray, ...]) -> dict[str, Any]:
    """Keyword parameters of the op's rules for this signature and index values."""
    op = tl.get_op(sig.op)
    params: dict[str, Any] = dict(sig.attrs)
    for spec, v in zip(op.index_args, index, strict=True):
        params[spec.name] = v
    if op.needs_position:
        params["_position"] = sig.position
    return params


def rule_names(sig: Signature, kinks: bool) -> list[str]:
    """The rule-soundness checks of ``sig`` (link 1), in report order."""
    op = tl.get_op(sig.op)
    names = ["forward = sym"] if op.sym_rule is not None else []
    names += ["jvp = derivative", "vjp = adjoint"]
    return names + (["kinks"] if kinks and op.kinks_rule is not None else [])


def output_label(key: tuple, names: Sequence[str]) -> str:
    """How a check names a rule's output (the layout keys of :class:`verify._lowering.Lowered`)."""
    if key[0] == "grad":
        return f"grad {names[key[1]]}"
    return {"out": "out", "tan_out": "jvp out"}.get(key[0], str(key))


def iter_elements(shape: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    return iter(np.ndindex(shape)) if shape else iter([()])
