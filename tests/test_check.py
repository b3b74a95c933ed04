"""``check(graph)`` (``torchlean_ir._check``): corrupt a valid graph in memory and assert the exact
message, as JAX's ``core_test.py`` does for jaxpr type checks. Every message names the node (or
leaf, index input, output) and prints the node."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

import torchlean_ir as tl
from torchlean_ir import Attrs, DType, TensorType


def base() -> tl.GraphData:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    W = b.param("W", (2, 3))
    i = b.index("i")
    h = b.tanh(W @ b.reshape(x, shape=(3, 1)))
    return b.build(b.gather_scalar_nat(b.reshape(h, shape=(2,)), i))


def test_base_graph() -> None:
    g = tl.check(base())
    assert tl.format_graph(g) == (
        "graph(%x: f32[3] input, %W: f32[2,3] param; #i: nat[]) {\n"
        "  %2: f32[3,1] = reshape(%x){shape=(3,1)}\n"
        "  %3: f32[2,1] = matmul(%W, %2)\n"
        "  %4: f32[2,1] = tanh(%3)\n"
        "  %5: f32[2] = reshape(%4){shape=(2,)}\n"
        "  %6: f32[] = gather_scalar_nat(%5; #i)\n"
        "  return %6\n"
        "}"
    )


def node(j: int, **changes: Any) -> tl.GraphData:
    g = base()
    nodes = list(g.nodes)
    nodes[j] = dataclasses.replace(nodes[j], **changes)
    return tl.GraphData(g.context, tuple(nodes), g.outputs)


def leaf(k: int, **changes: Any) -> tl.GraphData:
    g = base()
    leaves = list(g.leaves)
    leaves[k] = dataclasses.replace(leaves[k], **changes)
    return tl.GraphData(dataclasses.replace(g.context, leaves=tuple(leaves)), g.nodes, g.outputs)


def index_input(**changes: Any) -> tl.GraphData:
    g = base()
    ix = (dataclasses.replace(g.index_inputs[0], **changes),)
    return tl.GraphData(dataclasses.replace(g.context, index_inputs=ix), g.nodes, g.outputs)


def outputs(*outs: int) -> tl.GraphData:
    g = base()
    return tl.GraphData(g.context, g.nodes, outs)


CASES = [
    (
        node(1, args=(1, 5)),
        1,
        "node 1 (`%3: f32[2,1] = matmul(%W, %5)`): argument 1 refers to %5, which is not an "
        "earlier value (0..2)",
    ),
    (
        node(1, args=(1, -1)),
        1,
        "node 1 (`%3: f32[2,1] = matmul(%W, %<-1?>)`): argument 1 refers to %-1, which is not an "
        "earlier value (0..2)",
    ),
    (
        node(1, args=(1,)),
        1,
        "node 1 (`%3: f32[2,1] = matmul(%W)`): matmul(f32[2,3]): expects 2 arguments, got 1",
    ),
    (
        node(0, op="tahn"),
        0,
        "node 0 (`%2: f32[3,1] = tahn(%x){shape=(3,1)}`): unknown op 'tahn'",
    ),
    (
        node(2, type=TensorType((2, 2))),
        2,
        "node 2 (`%4: f32[2,2] = tanh(%3)`): recorded type f32[2,2] but the shape rule of tanh "
        "gives f32[2,1]",
    ),
    (
        node(2, type=TensorType((2, 1), DType.F64)),
        2,
        "node 2 (`%4: f64[2,1] = tanh(%3)`): recorded type f64[2,1] but the shape rule of tanh "
        "gives f32[2,1]",
    ),
    (
        node(2, type=TensorType((2, 1), DType.NAT)),
        2,
        "node 2 (`%4: nat[2,1] = tanh(%3)`): output: dtype must be f32 or f64, got nat",
    ),
    (
        node(0, attrs=Attrs({"shape": (3, 2)})),
        0,
        "node 0 (`%2: f32[3,1] = reshape(%x){shape=(3,2)}`): reshape(f32[3]): cannot reshape "
        "f32[3] (3 elements) to [3,2] (6 elements)",
    ),
    (
        node(0, attrs=Attrs({})),
        0,
        "node 0 (`%2: f32[3,1] = reshape(%x)`): reshape: missing required attribute 'shape' (a "
        "shape (tuple of non-negative ints))",
    ),
    (
        node(0, attrs=Attrs({"shape": (3, 1), "axis": 0})),
        0,
        "node 0 (`%2: f32[3,1] = reshape(%x){axis=0, shape=(3,1)}`): reshape: unknown attribute "
        "'axis' (allowed: shape)",
    ),
    (
        node(0, attrs=Attrs({"shape": (3, -1)})),
        0,
        "node 0 (`%2: f32[3,1] = reshape(%x){shape=(3,-1)}`): reshape: attribute 'shape' must be "
        "a shape (tuple of non-negative ints), got (3, -1)",
    ),
    (
        node(0, attrs=Attrs({"shape": [3, 1]})),
        0,
        "node 0 (`%2: f32[3,1] = reshape(%x){shape=[3, 1]}`): attributes are not canonical; "
        "expected Attrs(shape=(3, 1))",
    ),
    (
        node(3, attrs={"shape": (2,)}),
        3,
        "node 3 (`%5: f32[2] = reshape(%4){shape=(2,)}`): attrs must be an Attrs record",
    ),
    (
        node(4, index_args=(1,)),
        4,
        "node 4 (`%6: f32[] = gather_scalar_nat(%5; #<1?>)`): index argument 0 refers to #1, but "
        "the graph declares 1 index input",
    ),
    (
        node(4, index_args=()),
        4,
        "node 4 (`%6: f32[] = gather_scalar_nat(%5)`): gather_scalar_nat(f32[2]): expects 1 "
        "index argument, got 0",
    ),
    (leaf(1, name="x"), None, "leaf 1 ('x'): name already used by leaf 0"),
    (leaf(0, name="a b"), None, "leaf 0: invalid name 'a b' (an identifier, dots allowed)"),
    (leaf(0, name="x\n"), None, "leaf 0: invalid name 'x\\n' (an identifier, dots allowed)"),
    (leaf(0, kind="buffer"), None, "leaf 0 ('x'): kind must be 'param' or 'input', got 'buffer'"),
    (
        leaf(0, type=TensorType((3,), DType.NAT)),
        None,
        "leaf 0 ('x'): dtype must be f32 or f64, got nat",
    ),
    (leaf(0, requires_grad=1), None, "leaf 0 ('x'): requires_grad must be a bool"),
    (
        index_input(value=(1, 2)),
        None,
        "index input 0 ('i'): a static value must be a tuple of 1 naturals below 2**63, got (1, 2)",
    ),
    (
        index_input(value=(-1,)),
        None,
        "index input 0 ('i'): a static value must be a tuple of 1 naturals below 2**63, got (-1,)",
    ),
    (
        index_input(value=(1 << 63,)),
        None,
        "index input 0 ('i'): a static value must be a tuple of 1 naturals below 2**63, "
        "got (9223372036854775808,)",
    ),
    (index_input(name="W"), None, "index input 0 ('W'): name already used by leaf 1"),
    (outputs(), None, "graph has no outputs"),
    (outputs(9), None, "output 0 refers to %9, which is not a value (0..6)"),
]


@pytest.mark.parametrize(("graph", "node_index", "message"), CASES)
def test_check_error_messages(graph: tl.GraphData, node_index: int | None, message: str) -> None:
    with pytest.raises(tl.GraphCheckError) as info:
        tl.check(graph)
    assert str(info.value) == message
    assert info.value.node == node_index
    if node_index is not None:
        assert message.endswith(": " + info.value.detail)


def test_check_returns_the_graph() -> None:
    g = base()
    assert tl.check(g) is g


def test_mixed_dtypes_are_refused() -> None:
    """One float dtype per graph: leaves, and nodes whose shape rule cannot see it (no tensor
    arguments), are refused; a node with arguments gets its shape rule's message."""
    g = base()
    leaves = (g.leaves[0], dataclasses.replace(g.leaves[1], type=TensorType((2, 3), DType.F64)))
    bad = tl.GraphData(dataclasses.replace(g.context, leaves=leaves), g.nodes, g.outputs)
    with pytest.raises(tl.GraphCheckError) as info:
        tl.check(bad)
    assert str(info.value) == (
        "leaf 1 ('W'): dtype f64 differs from leaf 0's f32 (a graph has one float dtype)"
    )
    b = tl.GraphBuilder("f64")
    x = b.input("x", (2,))
    c = b.const([1.0, 2.0])
    g = b.build(x + c)
    f32 = tl.ConstArray.from_numpy(np.array([1.0, 2.0], np.float32), DType.F32)
    const = dataclasses.replace(
        g.nodes[0], type=TensorType((2,), DType.F32), attrs=Attrs({"value": f32})
    )
    bad = tl.GraphData(g.context, (const, *g.nodes[1:]), g.outputs)
    with pytest.raises(tl.GraphCheckError) as info:
        tl.check(bad)
    assert str(info.value) == (
        "node 0 (`%1: f32[2] = const(){value=f32[2] [1.0, 2.0]}`): recorded dtype f32 differs "
        "from leaf 0's f64 (a graph has one float dtype)"
    )


def test_mixed_dtypes_compile_never_overflow_silently() -> None:
    """The reported case: an f32 leaf and an f64 leaf holding 1e200 used to pass check; the
    compiled float32 function turned 1e200 into inf. Such a file is now refused at load."""
    b = tl.GraphBuilder()
    x = b.input("x", (1,))
    y = b.input("y", (1,))
    d = tl.graph_to_dict(b.build(x + y))
    d["leaves"][1]["dtype"] = "f64"
    with pytest.raises(tl.GraphFormatError, match=r"^\$: leaf 1 \('y'\): dtype f64 differs"):
        tl.graph_from_dict(d)


def test_interpreter_errors_print_the_node() -> None:
    op = tl.Op("_boom", args=("x",))
    op.def_shape(tl.same_shape)

    @op.def_forward
    def _boom_forward(B: Any, x: Any) -> Any:
        raise ValueError("boom")

    try:
        b = tl.GraphBuilder()
        x = b.input("x", (2,))
        g = b.build(b.apply("_boom", b.tanh(x)))
        with pytest.raises(tl.EvalError) as info:
            tl.eval_graph(g, {"x": [1.0, 2.0]})
        assert str(info.value) == (
            "while evaluating node 1 (`%2: f32[2] = _boom(%1)`): ValueError: boom"
        )
    finally:
        tl.unregister_op("_boom")


def test_a_huge_node_is_shown_clipped() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (1,))
    g = b.build(b.concat(*[x] * 3000))
    bad = tl.GraphData(
        g.context, (dataclasses.replace(g.nodes[0], type=TensorType((1,))),), g.outputs
    )
    with pytest.raises(tl.GraphCheckError) as info:
        tl.check(bad)
    message = str(info.value)
    assert message.startswith("node 0 (`%1: f32[1] = concat(%x, %x,") and len(message) < 400
    assert message.endswith("recorded type f32[1] but the shape rule of concat gives f32[3000]")
