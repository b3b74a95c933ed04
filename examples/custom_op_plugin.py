"""A plugin that registers two custom ops; the verifier proves their rules.

Use it from the command line::

    torchlean-verify examples/custom_op_graph.json --plugin examples/custom_op_plugin.py

or import it (``--plugin`` also takes a module name). Importing registers the ops; a graph file
that uses them then loads, compiles and verifies like any other. Run this file to (re)write
``examples/custom_op_graph.json``::

    python3 examples/custom_op_plugin.py

``examples/custom_op_plugin_wrong.py`` registers the same ops with one wrong rule, and the
verifier rejects it with a counterexample (see docs/verification.md, "Writing a custom op").
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

import torchlean_ir as tl
from torchlean_ir import AttrSpec, Op, same_shape

# -- log_cosh: smooth, computed stably, with a symbolic forward for the verifier --------------

log_cosh = Op(
    "log_cosh",
    args=("x",),
    family="custom",
    doc="log(cosh(x)), computed stably as |x| + log1p(exp(-2|x|)) - log(2); derivative tanh(x).",
)
log_cosh.def_shape(same_shape)


@log_cosh.def_forward
def log_cosh_forward(B: Any, x: Any) -> Any:
    # Stable for large |x|; B.abs is a Piecewise on the symbolic backend. log(2) is computed
    # by the backend (exact on SYM): the float np.log(2.0) would be a different number, and the
    # verifier would report it (by 2.3e-17).
    a = B.abs(x)
    return a + B.log1p(B.exp(-2 * a)) - B.log(B.full(x.shape, 2.0))


@log_cosh.def_sym
def log_cosh_sym(B: Any, x: Any) -> Any:
    # What the op means: log((e^x + e^-x) / 2). The verifier proves the forward equal to it,
    # then differentiates it.
    return B.log(B.exp(x) + B.exp(-x)) - B.log(B.full(x.shape, 2.0))


@log_cosh.def_jvp
def log_cosh_jvp(B: Any, args: tuple, tangents: tuple, out: Any) -> Any:
    return B.tanh(args[0]) * tangents[0]


@log_cosh.def_vjp
def log_cosh_vjp(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    return (B.tanh(args[0]) * ct,)


# -- leaky_relu: non-smooth, with its convention at the kink ---------------------------------

leaky_relu = Op(
    "leaky_relu",
    args=("x",),
    attrs={"slope": AttrSpec("float", default=0.01, doc="the slope for x <= 0")},
    family="custom",
    doc="x for x > 0, slope * x otherwise; derivative at 0 is slope (the x <= 0 branch).",
)
leaky_relu.def_shape(same_shape)


@leaky_relu.def_forward
def leaky_relu_forward(B: Any, x: Any, *, slope: float) -> Any:
    # B.where makes the symbolic forward a Piecewise: its branch-wise derivative at x = 0 is
    # slope, and that is the convention the rules must follow there.
    return B.where(x > 0, x, x * slope)


def _leaky_relu_deriv(B: Any, x: Any, slope: float) -> Any:
    return B.where(x > 0, B.ones_like(x), B.full(x.shape, slope))


@leaky_relu.def_jvp
def leaky_relu_jvp(B: Any, args: tuple, tangents: tuple, out: Any, *, slope: float) -> Any:
    return _leaky_relu_deriv(B, args[0], slope) * tangents[0]


@leaky_relu.def_vjp
def leaky_relu_vjp(B: Any, args: tuple, out: Any, ct: Any, *, slope: float) -> tuple:
    return (_leaky_relu_deriv(B, args[0], slope) * ct,)


@leaky_relu.def_kinks
def leaky_relu_kinks(rng: np.random.Generator, x: tl.TensorType, *, slope: float) -> list:
    # Exact points (dyadic rationals) at the kink, where the convention is checked exactly.
    v = rng.integers(-16, 17, size=x.shape) / 8.0
    v = np.where(rng.random(x.shape) < 0.5, 0.0, v)
    return [(v,), (np.zeros(x.shape),)]


def example_graph() -> tl.GraphData:
    """A small regression model that uses both ops."""
    b = tl.GraphBuilder("f32")
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,))
    target = b.input("target", (3,))
    h = b.linear(W, bias, x).leaky_relu(slope=0.125)
    loss = b.sum(b.log_cosh(h - target))
    return b.build(loss)


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "custom_op_graph.json")
    tl.save(example_graph(), path)
    print(f"wrote {path}")
