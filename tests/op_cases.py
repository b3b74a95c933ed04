"""The op table: one or more rows per registered op, shared by every op-level test.

The reference-semantics tests (``test_op_rules.py``), the ONNX oracle (``test_op_onnx.py``), the
compiler's equivalence tests and the verifier's soundness tests all iterate over :data:`CASES`.
A new op adds its rows here; ``test_registry_coverage`` fails while an op has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import torchlean_ir as tl

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class OpCase:
    """One op applied to arguments of given shapes.

    ``index`` gives, per index argument, ``(size, value)``: ``size`` is ``None`` for a nat scalar,
    ``value`` the index value used by the tests (out-of-range values allowed). ``samplers``
    overrides the per-argument input sampler (by position); by default it follows the op's
    declared domain, bounded away from the op's kinks."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    index: tuple[tuple[int | None, Any], ...] = ()
    samplers: dict[int, Sampler] = field(default_factory=dict)
    label: str = ""

    @property
    def id(self) -> str:
        shapes = "_".join("x".join(map(str, s)) or "s" for s in self.shapes)
        return f"{self.op}[{shapes}{'-' + self.label if self.label else ''}]"

    def graph(self, dtype: str = "f64") -> tl.GraphData:
        """A graph with one leaf per tensor argument (all requiring grad) and this op's node."""
        b = tl.GraphBuilder(dtype)
        xs = [b.input(f"a{i}", s, requires_grad=True) for i, s in enumerate(self.shapes)]
        ixs = [b.index(f"i{k}", size) for k, (size, _) in enumerate(self.index)]
        return b.build(b.apply(self.op, *xs, *ixs, **self.attrs))

    def index_values(self) -> dict[str, Any]:
        return {f"i{k}": v for k, (_, v) in enumerate(self.index)}

    def sample(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Random float64 arguments, away from kinks and inside the op's domain."""
        op = tl.get_op(self.op)
        out = {}
        for i, s in enumerate(self.shapes):
            sampler = self.samplers.get(i) or DOMAIN_SAMPLERS[op.arg_domain(i, self.attrs)]
            out[f"a{i}"] = np.asarray(sampler(rng, s), dtype=np.float64)
        return out


def away_from_zero(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform magnitudes in [0.2, 2] with random signs: no zeros, no near-ties with 0."""
    return rng.uniform(0.2, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def positive(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.3, 2.0, size=shape)


def near_grid(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Points k/4 + jitter with 0.01 <= |jitter| <= 0.05."""
    jitter = rng.uniform(0.01, 0.05, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return rng.integers(-8, 9, size=shape) * 0.25 + jitter


def mid_grid(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Points k/4 + 1/8: at least 0.075 away from every ``near_grid`` point, so max/min
    arguments drawn from the two never tie, even under a finite-difference step."""
    return rng.integers(-8, 9, size=shape) * 0.25 + 0.125


DOMAIN_SAMPLERS: dict[str, Sampler] = {
    "real": away_from_zero,
    "positive": positive,
    "nonzero": away_from_zero,
    "unit": lambda rng, s: rng.uniform(0.05, 0.95, size=s),
}

CASES: list[OpCase] = [
    OpCase("const", (), {"value": np.array([[1.5, -2.0], [0.25, 3.0]])}),
    OpCase("const", (), {"value": np.array(0.5)}, label="scalar"),
    OpCase("detach", ((3,),)),
    OpCase("add", ((3,), (3,))),
    OpCase("add", ((2, 3), (2, 3))),
    OpCase("sub", ((2, 3), (2, 3))),
    OpCase("mul", ((2, 3), (2, 3))),
    OpCase("mul", ((), ())),
    OpCase("scale", ((4,),), {"c": -0.75}),
    OpCase("abs", ((5,),)),
    OpCase("sqrt", ((2, 3),)),
    OpCase("clamp", ((6,),), {"lo": -0.5, "hi": 0.7}, samplers={0: near_grid}),
    OpCase("max", ((5,), (5,)), samplers={0: near_grid, 1: mid_grid}),
    OpCase("min", ((2, 3), (2, 3)), samplers={0: near_grid, 1: mid_grid}),
    OpCase("broadcast_to", ((3, 1),), {"shape": (2, 3, 4)}),
    OpCase("broadcast_to", ((),), {"shape": (2, 2)}, label="scalar"),
    OpCase("reshape", ((2, 3),), {"shape": (3, 2)}),
    OpCase("flatten", ((2, 3, 2),)),
    OpCase("transpose2d", ((2, 3),)),
    OpCase("swap_adjacent_at_depth", ((2, 3, 4),), {"depth": 1}),
    OpCase("swap_adjacent_at_depth", ((2, 3, 4),), {"depth": 0}, label="d0"),
    OpCase("reduce_sum", ((2, 3),), {"axis": 1}),
    OpCase("reduce_sum", ((2, 3, 2),), {"axis": 0}, label="ax0"),
    OpCase("reduce_mean", ((2, 3),), {"axis": 0}),
    OpCase("sum", ((2, 3),)),
    OpCase("matmul", ((2, 3), (3, 4))),
    OpCase("bmm", ((2, 2, 3), (2, 3, 4))),
    OpCase("linear", ((3, 4), (3,), (4,))),
    OpCase("relu", ((6,),)),
    OpCase("step", ((6,),)),
    OpCase("sigmoid", ((5,),)),
    OpCase("tanh", ((2, 3),)),
    OpCase("exp", ((4,),)),
    OpCase("log", ((4,),)),
    OpCase("inv", ((4,),)),
    OpCase("rsqrt", ((4,),)),
    OpCase("erf", ((2, 3),)),
    OpCase("pow", ((5,),), {"p": 3.0}),
    OpCase("pow", ((4,),), {"p": -2.0}, label="neg"),
    OpCase("pow", ((3,),), {"p": 0.0}, label="zero"),
    OpCase("pow", ((4,),), {"p": 2.5}, label="real"),
    OpCase("pow", ((4,),), {"p": 0.3}, label="small"),
    OpCase("softplus", ((6,),)),
    OpCase("softmax", ((2, 4),)),
    OpCase("softmax", ((5,),), label="vec"),
    OpCase("log_softmax", ((2, 4),)),
    OpCase("mse_loss", ((2, 3), (2, 3))),
    OpCase("layer_norm", ((2, 4), (4,), (4,)), {"eps": 1e-5}),
    OpCase("concat", ((2, 3), (1, 3))),
    OpCase("concat", ((2,), (3,), (1,)), label="three"),
    OpCase("slice", ((4, 2),), {"start": 1, "length": 2}),
    OpCase("gather_scalar_nat", ((4,),), index=((None, 2),)),
    OpCase("gather_scalar_nat", ((4,),), index=((None, 9),), label="oob"),
    OpCase("gather_rows_nat", ((3, 2),), index=((4, [2, 0, 2, 7]),)),
    OpCase("nat_to_float", (), index=((None, 7),)),
    OpCase("nat_vec_to_float", (), index=((4, [2, 0, 1, 9]),)),
]


@dataclass(frozen=True)
class KinkCase:
    """An op at a non-smooth point, with the derivative the conventions of ``docs/ops.md``
    prescribe there (written out by hand from the table, not computed by our rules).

    ``args`` are exact dyadic values; ``tangents`` one per argument; ``expected_jvp`` the
    output tangent; ``ct`` a cotangent of the output and ``expected_vjp`` the argument cotangents.
    """

    op: str
    args: tuple[np.ndarray, ...]
    attrs: dict[str, Any]
    tangents: tuple[np.ndarray, ...]
    expected_jvp: np.ndarray
    ct: np.ndarray
    expected_vjp: tuple[np.ndarray, ...]
    rule: str

    @property
    def id(self) -> str:
        return f"{self.op}-{self.rule}"


def _a(*v: float) -> np.ndarray:
    return np.asarray(v, dtype=np.float64)


KINKS: list[KinkCase] = [
    KinkCase(
        "step",
        (_a(0.0, 1.0, -1.0),),
        {},
        (_a(3.0, 3.0, 3.0),),
        _a(0.0, 0.0, 0.0),
        _a(2.0, 2.0, 2.0),
        (_a(0.0, 0.0, 0.0),),
        "step(0)=0, step'=0",
    ),
    KinkCase(
        "relu",
        (_a(0.0, 1.0, -1.0),),
        {},
        (_a(3.0, 3.0, 3.0),),
        _a(0.0, 3.0, 0.0),
        _a(2.0, 2.0, 2.0),
        (_a(0.0, 2.0, 0.0),),
        "relu'(0)=0",
    ),
    KinkCase(
        "abs",
        (_a(0.0, 2.0, -2.0),),
        {},
        (_a(1.0, 1.0, 1.0),),
        _a(0.0, 1.0, -1.0),
        _a(5.0, 5.0, 5.0),
        (_a(0.0, 5.0, -5.0),),
        "sign(0)=0",
    ),
    KinkCase(
        "sqrt",
        (_a(0.0, -1.0, 4.0),),
        {},
        (_a(1.0, 1.0, 1.0),),
        _a(0.0, 0.0, 0.25),
        _a(1.0, 1.0, 1.0),
        (_a(0.0, 0.0, 0.25),),
        "sqrt'=0 for x<=0",
    ),
    KinkCase(
        "clamp",
        (_a(-0.5, 0.5, 0.0, -1.0, 1.0),),
        {"lo": -0.5, "hi": 0.5},
        (_a(1.0, 1.0, 1.0, 1.0, 1.0),),
        _a(0.0, 0.0, 1.0, 0.0, 0.0),
        _a(2.0, 2.0, 2.0, 2.0, 2.0),
        (_a(0.0, 0.0, 2.0, 0.0, 0.0),),
        "0 at/outside bounds",
    ),
    KinkCase(
        "max",
        (_a(1.0, 2.0, 0.0), _a(1.0, 0.0, 3.0)),
        {},
        (_a(1.0, 1.0, 1.0), _a(3.0, 3.0, 3.0)),
        _a(2.0, 1.0, 3.0),
        _a(4.0, 4.0, 4.0),
        (_a(2.0, 4.0, 0.0), _a(2.0, 0.0, 4.0)),
        "tie splits half",
    ),
    KinkCase(
        "min",
        (_a(1.0, 2.0, 0.0), _a(1.0, 0.0, 3.0)),
        {},
        (_a(1.0, 1.0, 1.0), _a(3.0, 3.0, 3.0)),
        _a(2.0, 3.0, 1.0),
        _a(4.0, 4.0, 4.0),
        (_a(2.0, 0.0, 4.0), _a(2.0, 4.0, 0.0)),
        "tie splits half",
    ),
]

from .op_cases_parity import PARITY_CASES, PARITY_KINKS  # noqa: E402

CASES += PARITY_CASES
KINKS += PARITY_KINKS
