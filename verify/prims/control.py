"""Control flow: ``cond``, ``while``, ``scan`` (and the ``empty`` buffers of their transposes).

Element level: loops are run (a ``while`` whose condition is concrete at every iteration, up to
:data:`MAX_WHILE` iterations), a ``cond`` on a symbolic predicate of two branches is a
``SYM.where`` of both. Tensor level: a loop whose trip count is known when the jaxpr is read
(``scan``: always; ``while``: when its condition evaluates to a concrete boolean at every
iteration, as ``fori_loop`` with static bounds gives) is unrolled, each iteration's body
interpreted on the previous iteration's terms, so a ``dynamic_slice`` at ``j * BLK`` with ``j``
the loop counter becomes an affine read; a ``cond`` with a concrete index takes its branch, on
data every branch is interpreted and the results are selected element-wise (a piecewise term,
the branches' conditions as brackets). Unrolling is bounded (:data:`MAX_ITERATIONS`): a longer
loop, or a ``while`` whose condition is not concrete, is :class:`verify._primitives.Unsupported`
(the check is "not verified", never passed).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchlean_ir.backends import SYM

from .. import _tensor as TT
from .. import terms as T
from .._jaxpr import Choice, Interpreter, _bool_value, _concrete, _sym, out_kind
from .._primitives import Unsupported, element, tensor
from .._tjaxpr import TInterpreter, concrete

#: Element level: a ``while`` loop with a concrete condition is run up to this many iterations.
MAX_WHILE = 100_000

#: Tensor level: the most loop iterations one ``scan`` / ``while`` is unrolled to.
MAX_ITERATIONS = 4096


def _closed(j: Any) -> tuple[Any, list[Any]]:
    return (j.jaxpr, list(j.consts)) if hasattr(j, "consts") else (j, [])


def _body(it: TInterpreter, closed: Any, args: list[Any]) -> list[Any]:
    jaxpr, consts = _closed(closed)
    return it.eval_jaxpr(jaxpr, consts, args)


def _kind(aval: Any) -> str:
    dt = np.dtype(aval.dtype)
    return "f" if dt.kind == "f" else ("c" if dt.kind == "b" else "i")


@element("cond")
def _cond_e(it: Interpreter, eqn: Any, invals: list, *, branches: Any, **_: Any) -> list:
    index, *ops = invals
    if _concrete(index):
        i = int(np.clip(int(index), 0, len(branches) - 1))
        br = branches[i]
        return it.eval_jaxpr(br.jaxpr, br.consts, ops)
    if len(branches) != 2 or index.shape != ():
        raise Unsupported("cond on a symbolic index with more than two branches")
    c = index[()]
    cond = c.test(lambda v: v != 0) if isinstance(c, Choice) else c
    outs_f = it.eval_jaxpr(branches[0].jaxpr, branches[0].consts, ops)
    outs_t = it.eval_jaxpr(branches[1].jaxpr, branches[1].consts, ops)
    res = []
    for k, (a, b) in enumerate(zip(outs_f, outs_t, strict=True)):
        if out_kind(eqn, k) != "f":
            raise Unsupported("cond with symbolic predicate and non-float outputs")
        res.append(SYM.where(cond, _sym(b), _sym(a)).a)
    return res


@tensor("cond")
def _cond_t(it: TInterpreter, eqn: Any, invals: list, *, branches: Any, **_: Any) -> list:
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


@element("while")
def _while_e(it: Interpreter, eqn: Any, invals: list, **p: Any) -> list:
    cj, bj = p["cond_jaxpr"], p["body_jaxpr"]
    nc, nb = p["cond_nconsts"], p["body_nconsts"]
    cconsts, bconsts, carry = invals[:nc], invals[nc : nc + nb], invals[nc + nb :]
    for _ in range(MAX_WHILE):
        (c,) = it.eval_jaxpr(cj.jaxpr, cj.consts, [*cconsts, *carry])
        flag = _bool_value(c[()]) if c.dtype == object else bool(c)
        if flag is None:
            raise Unsupported("while loop with a symbolic condition")
        if not flag:
            return carry
        carry = it.eval_jaxpr(bj.jaxpr, bj.consts, [*bconsts, *carry])
    raise Unsupported(f"while loop longer than {MAX_WHILE} iterations")


@tensor("while")
def _while_t(it: TInterpreter, eqn: Any, invals: list, *, cond_jaxpr: Any, body_jaxpr: Any,
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


@element("scan")
def _scan_e(it: Interpreter, eqn: Any, invals: list, **p: Any) -> list:
    j, length, reverse = p["jaxpr"], p["length"], p["reverse"]
    nconsts, ncarry = p["num_consts"], p["num_carry"]
    consts, carry, xs = (
        invals[:nconsts],
        invals[nconsts : nconsts + ncarry],
        invals[nconsts + ncarry :],
    )
    ys: list[list[np.ndarray]] = []
    order = range(length - 1, -1, -1) if reverse else range(length)
    for i in order:
        outs = it.eval_jaxpr(j.jaxpr, j.consts, [*consts, *carry, *[x[i] for x in xs]])
        carry, y = outs[:ncarry], outs[ncarry:]
        ys.append(y)
    if reverse:
        ys.reverse()
    stacked = []
    for k in range(len(eqn.outvars) - ncarry):
        aval = eqn.outvars[ncarry + k].aval
        parts = [y[k] for y in ys]
        is_concrete = bool(parts) and all(_concrete(q) for q in parts)
        arr = np.empty(aval.shape, dtype=parts[0].dtype if is_concrete else object)
        for i, q in enumerate(parts):
            arr[i] = q
        stacked.append(arr)
    return [*carry, *stacked]


@tensor("scan")
def _scan_t(it: TInterpreter, eqn: Any, invals: list, *, jaxpr: Any, length: int, reverse: bool,
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


@tensor("empty", "empty2")
def _empty_t(it: TInterpreter, eqn: Any, invals: list, **_: Any) -> list:
    # an uninitialised buffer (JAX's transposes of ``cond`` / ``scan`` start from one and
    # write every element before reading it): its values are unspecified, read as zeros
    return [TT.constant(0, tuple(v.aval.shape), _kind(v.aval)) for v in eqn.outvars]


__all__ = ["MAX_ITERATIONS", "MAX_WHILE"]
