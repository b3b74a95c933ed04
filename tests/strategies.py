"""Hypothesis strategies: random well-typed graphs, built through the builder over the core ops.

``graphs()`` declares a few leaves and index inputs, then applies random ops to values already
built (so values fan out), declaring extra parameters when an op needs a partner of a given
shape (``matmul``, ``linear``, ``layer_norm``). Every graph it returns passes ``check``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import torchlean_ir as tl

Draw = Callable[[st.SearchStrategy[Any]], Any]

dims = st.integers(0, 4)
small_shapes = st.lists(dims, max_size=3).map(tuple)


@dataclass
class _State:
    draw: Draw
    b: tl.GraphBuilder
    pool: list[tl.Var] = field(default_factory=list)
    indices: list[tl.IndexVar] = field(default_factory=list)
    counter: int = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def pick(self, pred: Callable[[tl.Var], bool] = lambda v: True) -> tl.Var | None:
        cands = [v for v in self.pool if pred(v)]
        return self.draw(st.sampled_from(cands)) if cands else None

    def partner(self, shape: tuple[int, ...]) -> tl.Var:
        """A value of ``shape`` from the pool (fan-out) or a new parameter."""
        same = [v for v in self.pool if v.shape == shape]
        if same and self.draw(st.booleans()):
            return self.draw(st.sampled_from(same))
        return self.b.param(self.fresh("w"), shape)

    def index(self, size: int | None) -> tl.IndexVar:
        want = () if size is None else (size,)
        same = [i for i in self.indices if i.type.shape == want]
        if same and self.draw(st.booleans()):
            return self.draw(st.sampled_from(same))
        value = None
        if self.draw(st.booleans()):
            n = 1 if size is None else size
            vals = self.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
            value = vals[0] if size is None else vals
        ix = self.b.index(self.fresh("i"), size, value=value)
        self.indices.append(ix)
        return ix


def _floats(dtype: str) -> st.SearchStrategy[float]:
    width = 32 if dtype == "f32" else 64
    return st.floats(allow_nan=False, allow_infinity=False, width=width)


# -- one generator per op family: each returns a new value, or None if nothing fits ----------

UNARY = (
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "inv",
    "softplus",
    "sqrt",
    "abs",
    "detach",
    "softmax",
    "log_softmax",
    "flatten",
    "sum",
)
BINARY = ("add", "sub", "mul", "max", "min")


def g_unary(s: _State) -> tl.Var | None:
    x = s.pick()
    return None if x is None else s.b.apply(s.draw(st.sampled_from(UNARY)), x)


def g_binary(s: _State) -> tl.Var | None:
    a = s.pick()
    if a is None:
        return None
    return s.b.apply(s.draw(st.sampled_from(BINARY)), a, s.partner(a.shape))


def g_operator(s: _State) -> tl.Var | None:
    a = s.pick()
    if a is None:
        return None
    c = s.draw(st.sampled_from([0.5, -2.0, 3.0]))
    form = s.draw(st.integers(0, 5))
    if form == 0:
        return a + s.partner(a.shape)
    if form == 1:
        return a * c
    if form == 2:
        return -a
    if form == 3:
        return c - a
    if form == 4:
        return a / s.partner(a.shape)
    return a / c


def g_mse(s: _State) -> tl.Var | None:
    a = s.pick(lambda v: v.type.size > 0)
    return None if a is None else s.b.mse_loss(a, s.partner(a.shape))


def g_scale(s: _State) -> tl.Var | None:
    x = s.pick()
    return (
        None
        if x is None
        else s.b.scale(x, c=s.draw(st.floats(allow_nan=False, allow_infinity=False)))
    )


def g_clamp(s: _State) -> tl.Var | None:
    x = s.pick()
    if x is None:
        return None
    lo, hi = sorted(s.draw(st.lists(st.floats(allow_nan=False), min_size=2, max_size=2)))
    return s.b.clamp(x, lo=lo, hi=hi)


def g_broadcast(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank <= 3)
    if x is None:
        return None
    lead = s.draw(st.lists(st.integers(0, 3), max_size=4 - x.type.rank))
    tail = [s.draw(st.integers(0, 3)) if d == 1 else d for d in x.shape]
    return s.b.broadcast_to(x, shape=(*lead, *tail))


def g_reshape(s: _State) -> tl.Var | None:
    x = s.pick()
    if x is None:
        return None
    n = x.type.size
    choices = [(n,), (1, n), tuple(reversed(x.shape)), (n, 1, 1)]
    return s.b.reshape(x, shape=s.draw(st.sampled_from(choices)))


def g_transpose(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank >= 2)
    if x is None:
        return None
    if x.type.rank == 2 and s.draw(st.booleans()):
        return s.b.transpose2d(x)
    return s.b.swap_adjacent_at_depth(x, depth=s.draw(st.integers(0, x.type.rank - 2)))


def g_reduce(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    axis = s.draw(st.integers(0, x.type.rank - 1))
    if x.shape[axis] > 0 and s.draw(st.booleans()):
        return s.b.reduce_mean(x, axis=axis)
    return s.b.reduce_sum(x, axis=axis)


def g_matmul(s: _State) -> tl.Var | None:
    a = s.pick(lambda v: v.type.rank in (1, 2, 3))
    if a is None:
        return None
    p = s.draw(dims)
    if a.type.rank == 1:  # linear(W, b, x)
        return s.b.linear(s.partner((p, a.shape[0])), s.partner((p,)), a)
    if a.type.rank == 2:
        return a @ s.partner((a.shape[1], p))
    return s.b.bmm(a, s.partner((a.shape[0], a.shape[2], p)))


def g_layer_norm(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank == 2 and v.shape[1] > 0)
    if x is None:
        return None
    e = x.shape[1]
    eps = s.draw(st.sampled_from([1e-5, 1e-6, 0.1]))
    return s.b.layer_norm(x, s.partner((e,)), s.partner((e,)), eps=eps)


def g_concat_slice(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank >= 1)
    if x is None:
        return None
    if s.draw(st.booleans()):
        others = [v for v in s.pool if v.type.rank >= 1 and v.shape[1:] == x.shape[1:]]
        k = s.draw(st.integers(1, 2))
        return s.b.concat(x, *(s.draw(st.sampled_from(others)) for _ in range(k)))
    n = x.shape[0]
    start = s.draw(st.integers(0, n))
    return s.b.slice(x, start=start, length=s.draw(st.integers(0, n - start)))


def g_gather(s: _State) -> tl.Var | None:
    x = s.pick(lambda v: v.type.rank in (1, 2))
    if x is None:
        return None
    if x.type.rank == 1:
        return s.b.gather_scalar_nat(x, s.index(None))
    return s.b.gather_rows_nat(x, s.index(s.draw(st.integers(0, 3))))


def g_const(s: _State) -> tl.Var | None:
    dtype = s.b.dtype.value
    big = s.draw(st.integers(0, 9)) == 0  # sometimes above the inline limit (base64)
    shape = (s.draw(st.integers(65, 90)),) if big else s.draw(small_shapes)
    np_dtype = np.float32 if dtype == "f32" else np.float64
    arr = s.draw(hnp.arrays(np_dtype, shape, elements=_floats(dtype)))
    return s.b.const(arr)


GENERATORS = (
    g_unary,
    g_binary,
    g_operator,
    g_mse,
    g_scale,
    g_clamp,
    g_broadcast,
    g_reshape,
    g_transpose,
    g_reduce,
    g_matmul,
    g_layer_norm,
    g_concat_slice,
    g_gather,
    g_const,
)


@st.composite
def graphs(draw: Draw, max_nodes: int = 12) -> tl.GraphData:
    """A random well-typed graph of up to ``max_nodes`` op applications."""
    dtype = draw(st.sampled_from(["f32", "f64"]))
    s = _State(draw, tl.GraphBuilder(dtype))
    for _ in range(draw(st.integers(0, 3))):
        name, shape = s.fresh("x"), draw(small_shapes)
        if draw(st.booleans()):
            s.pool.append(s.b.param(name, shape, requires_grad=draw(st.booleans())))
        else:
            s.pool.append(s.b.input(name, shape, requires_grad=draw(st.booleans())))
    for _ in range(draw(st.integers(0, 2))):
        s.index(draw(st.one_of(st.none(), st.integers(0, 3))))
    for _ in range(draw(st.integers(0, max_nodes))):
        gen = draw(st.sampled_from(GENERATORS))
        try:
            v = gen(s)
        except tl.ShapeError:
            continue  # the generator proposed a shape the op rejects (e.g. an empty softmax row)
        if v is not None:
            s.pool.append(v)
    if not s.pool:
        s.pool.append(g_const(s))  # type: ignore[arg-type]
    outs = draw(st.lists(st.sampled_from(s.pool), min_size=1, max_size=3))
    return s.b.build(outs)
