"""Control flow at tensor level: ``scan``, ``while`` and ``cond`` of the jaxprs people write.

A loop whose trip count is known when the jaxpr is read (``scan``: always; ``while``: when its
condition evaluates to a concrete boolean at every iteration, as ``fori_loop`` with static bounds
gives) is unrolled: each iteration's body interpreted on the previous iteration's terms, so a
``dynamic_slice`` at ``j * BLK`` with ``j`` the loop counter becomes an affine read. A ``cond``
with a concrete index takes its branch; on data, every branch is interpreted and the results
are selected element-wise (a piecewise term, the branches' conditions as brackets).

Unrolling is bounded (:data:`MAX_ITERATIONS`): a longer loop, or a ``while`` whose condition is
not concrete, is :class:`verify._primitives.Unsupported` (the check is "not verified", never
passed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _tensor as TT
from . import terms as T
from ._primitives import Unsupported, rule
from ._tjaxpr import TInterpreter, concrete

#: The most loop iterations one ``scan`` / ``while`` is unrolled to.
MAX_ITERATIONS = 4096


def _closed(j: Any) -> tuple[Any, list[Any]]:
    return (j.jaxpr, list(j.consts)) if hasattr(j, "consts") else (j, [])


def _body(it: TInterpreter, closed: Any, args: list[Any]) -> list[Any]:
    jaxpr, consts = _closed(closed)
    return it.eval_jaxpr(jaxpr, consts, args)


@rule("scan", domain="tensor")
def _scan(it: TInterpreter, eqn: Any, invals: list, *, jaxpr: Any, length: int, reverse: bool,
          num_consts: int, num_carry: int, **_: Any) -> list:  # fmt: skip
    if length > MAX_ITERATIONS:
        raise Unsupported(f"scan of {length} iterations (unrolled up to {MAX_ITERATIONS})")
    consts = invals[:num_consts]
    carry = list(invals[num_consts : num_consts + num_carry])
    xs = invals[num_consts + num_carry :]
    ys: list[list[Any]] = []
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        T.tick()
        x_i = [TT.getitem(x, (i,)) for x in xs]
        out = _body(it, jaxpr, [*consts, *carry, *x_i])
        carry, y = list(out[:num_carry]), out[num_carry:]
        ys.append(y)
    if reverse:
        ys.reverse()
    n_ys = len(eqn.outvars) - num_carry
    stacked = []
    for k in range(n_ys):
        aval = eqn.outvars[num_carry + k].aval
        if length == 0:
            stacked.append(TT.constant(0, tuple(aval.shape), _kind(aval)))
        else:
            stacked.append(TT.stack([y[k] for y in ys], 0))
    return [*carry, *stacked]


def _kind(aval: Any) -> str:
    dt = np.dtype(aval.dtype)
    return "f" if dt.kind == "f" else ("c" if dt.kind == "b" else "i")


@rule("while", domain="tensor")
def _while(it: TInterpreter, eqn: Any, invals: list, *, cond_jaxpr: Any, body_jaxpr: Any,
           cond_nconsts: int, body_nconsts: int, **_: Any) -> list:  # fmt: skip
    cconsts = invals[:cond_nconsts]
    bconsts = invals[cond_nconsts : cond_nconsts + body_nconsts]
    carry = list(invals[cond_nconsts + body_nconsts :])
    for _n in range(MAX_ITERATIONS + 1):
        T.tick()
        (c,) = _body(it, cond_jaxpr, [*cconsts, *carry])
        value = concrete(c)
        if value is None:
            raise Unsupported("while loop whose condition is not known when the jaxpr is read "
                              "(a trip count that depends on data)")  # fmt: skip
        if not bool(np.asarray(value).reshape(-1)[0]):
            return carry
        carry = _body(it, body_jaxpr, [*bconsts, *carry])
    raise Unsupported(f"while loop of more than {MAX_ITERATIONS} iterations")


@rule("cond", domain="tensor")
def _cond(it: TInterpreter, eqn: Any, invals: list, *, branches: Any, **_: Any) -> list:
    index, *ops = invals
    value = concrete(index)
    if value is not None:
        k = int(np.clip(np.asarray(value).reshape(-1)[0], 0, len(branches) - 1))
        return _body(it, branches[k], list(ops))
    results = [_body(it, b, list(ops)) for b in branches]
    out = []
    for k, v in enumerate(eqn.outvars):
        cases = [r[k] for r in results]
        kind = _kind(v.aval)
        clamp = len(branches) - 1

        def pick(p: Any, *vals: Any, _n: int = clamp) -> Any:
            # lax.cond clamps the index into range: below 0 takes branch 0, above the last
            # takes the last
            total = T.ZERO
            for j, val in enumerate(vals):
                if j == 0:
                    br = T.ge(-p) if _n > 0 else T.ONE
                elif j == _n:
                    br = T.ge(p - j)
                else:
                    br = T.eq(p - j)
                total = total + br * val
            return total

        shape = tuple(v.aval.shape)
        out.append(TT.nary([TT.broadcast_to(index, shape),
                            *[TT.broadcast_to(c, shape) for c in cases]], pick,
                           kind if kind != "c" else "n"))  # fmt: skip
    return out


@rule("empty", "empty2", domain="tensor")
def _empty(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> list:
    # an uninitialised buffer (JAX's transposes of ``cond`` / ``scan`` start from one and
    # write every element before reading it): its values are unspecified, read as zeros
    return [TT.constant(0, tuple(v.aval.shape), _kind(v.aval)) for v in eqn.outvars]


__all__ = ["MAX_ITERATIONS"]
