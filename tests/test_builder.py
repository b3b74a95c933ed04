"""The builder (``torchlean_ir._builder``): operators, methods, leaves and index inputs, and the
errors a user sees, each naming the op, the argument types and the user's own file:line."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import torchlean_ir as tl

HERE = __file__


def test_operators_build_the_expected_nodes() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    y = b.param("y", (3,))
    M = b.param("M", (2, 3))
    outs = [x + y, x - y, x * y, x / y, -x, x * 2, 2 * x, x / 4, 1 - x, 1 + x, 1 / x]
    outs.append(M @ b.reshape(x, shape=(3, 1)))
    outs.append(np.float32(0.5) * x)  # a NumPy scalar on the left defers to Var
    g = b.build(outs)
    ops = [n.op for n in g.nodes]
    assert ops[:7] == ["add", "sub", "mul", "inv", "mul", "scale", "scale"]
    assert g.nodes[5].attrs["c"] == -1.0 and g.nodes[6].attrs["c"] == 2.0
    assert g.nodes[-1].op == "scale" and g.nodes[-1].attrs["c"] == 0.5
    assert tl.format_node(g, 8) == "%11: f32[3] = scale(%x){c=0.25}"
    # 1 - x: a literal broadcast to x's shape, then sub
    assert [n.op for n in g.nodes[9:12]] == ["const", "broadcast_to", "sub"]
    vals = tl.eval_graph(g, {"x": [1.0, 2.0, 4.0], "y": [2.0, 2.0, 2.0], "M": np.ones((2, 3))})
    np.testing.assert_allclose(vals[3], [0.5, 1.0, 2.0])
    np.testing.assert_allclose(vals[8], [0.0, -1.0, -3.0])
    np.testing.assert_allclose(vals[10], [1.0, 0.5, 0.25])
    np.testing.assert_allclose(vals[11], [[7.0], [7.0]])


def test_scalar_literals_stay_scalars() -> None:
    b = tl.GraphBuilder()
    s = b.input("s", ())
    g = b.build(s + 1.0, b.const(2.5), b.full((2,), 3.0))
    assert g.output_types == (tl.TensorType(()), tl.TensorType(()), tl.TensorType((2,)))


def test_methods_on_values_and_builder() -> None:
    b = tl.GraphBuilder("f64")
    x = b.input("x", (2, 3))
    a = x.tanh().transpose2d().reduce_sum(axis=0)
    c = b.softmax(b.flatten(x))
    g = b.build(a, c)
    assert [n.op for n in g.nodes] == ["tanh", "transpose2d", "reduce_sum", "flatten", "softmax"]
    assert all(t.dtype == tl.DType.F64 for t in g.output_types)
    assert b.tanh.__doc__ == tl.get_op("tanh").doc


def test_leaves_and_index_inputs() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", 3)  # an int is a vector length
    w = b.param("layer.w", (3,), requires_grad=False)
    t = b.input("t", (3,), requires_grad=True)
    i = b.index("label")
    rows = b.index("rows", 0, value=[])
    g = b.build(
        b.gather_scalar_nat(x * w + t, i), b.gather_rows_nat(b.reshape(x, shape=(3, 1)), rows)
    )
    assert [(lf.name, lf.kind, lf.requires_grad) for lf in g.leaves] == [
        ("x", "input", False),
        ("layer.w", "param", False),
        ("t", "input", True),
    ]
    assert g.index_inputs[1].value == () and g.output_types[1].shape == (0, 1)
    assert repr(x) == "Var(x: f32[3])" and repr(i) == "IndexVar(label: nat[])"
    assert i.name == "label" and x.shape == (3,) and x.dtype == tl.DType.F32


def test_leaves_declared_late_still_come_first() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (2,))
    h = x.tanh()
    w = b.param("w", (2,))
    g = b.build(h * w)
    assert [lf.name for lf in g.leaves] == ["x", "w"]
    assert g.nodes[0].args == (0,) and g.nodes[1].args == (2, 1)


def _raises(exc: type[BaseException], fn: Callable[[], object]) -> str:
    """The message of the error ``fn()`` raises, checking that it ends with the call site: the
    line of this file where ``fn`` (a lambda) is written."""
    with pytest.raises(exc) as info:
        fn()
    message = str(info.value)
    site = f", at {HERE}:{fn.__code__.co_firstlineno}"
    assert message.endswith(site), (message, site)
    return message.removesuffix(site)


def test_shape_errors_name_op_types_and_call_site() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    W = b.param("W", (2, 4))
    assert _raises(tl.ShapeError, lambda: W @ x) == (
        "matmul(f32[2,4], f32[3]): needs two matrices, got f32[2,4] and f32[3]"
    )
    assert _raises(tl.ShapeError, lambda: x + W) == (
        "add(f32[3], f32[2,4]): needs identical shapes (no implicit broadcasting; use "
        "broadcast_to), got f32[3], f32[2,4]"
    )
    assert _raises(tl.ShapeError, lambda: b.reduce_sum(x, axis=3)) == (
        "reduce_sum(f32[3]): axis 3 out of range for f32[3] (rank 1)"
    )
    i2 = b.index("j", 2)
    assert _raises(tl.ShapeError, lambda: b.gather_scalar_nat(x, i2)) == (
        "gather_scalar_nat(f32[3], nat[2]): index argument 'i' must be a nat scalar, got nat[2]"
    )
    b64 = tl.GraphBuilder("f64")
    y = b64.input("y", (3,))
    assert _raises(tl.TorchleanError, lambda: x + y) == (
        "add: argument 1 belongs to another builder"
    )


def test_attribute_errors_name_the_call_site() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    assert _raises(tl.AttrError, lambda: b.scale(x)) == (
        "scale: missing required attribute 'c' (a finite or infinite float (not NaN))"
    )
    assert _raises(tl.AttrError, lambda: b.scale(x, c=float("nan"))) == (
        "scale: attribute 'c' must be a finite or infinite float (not NaN), got nan: NaN is not "
        "a valid attribute value"
    )
    assert _raises(tl.AttrError, lambda: b.scale(x, c=1.0, d=2)) == (
        "scale: unknown attribute 'd' (allowed: c)"
    )
    assert _raises(tl.AttrError, lambda: b.reshape(x, shape=(3, True))) == (
        "reshape: attribute 'shape' must be a shape (tuple of non-negative ints), got (3, True)"
    )


def test_declaration_errors() -> None:
    b = tl.GraphBuilder()
    b.input("x", (3,))
    assert _raises(tl.TorchleanError, lambda: b.input("x", (2,))) == (
        "name 'x' is already declared"
    )
    assert _raises(tl.TorchleanError, lambda: b.param("1w", (2,))) == (
        "invalid name '1w': use an identifier (letters, digits, '_', '.')"
    )
    assert _raises(tl.ShapeError, lambda: b.input("y", (-1,))) == (
        "input 'y': shape must be a tuple of non-negative ints, got (-1,)"
    )
    assert _raises(tl.TorchleanError, lambda: b.index("i", 2, value=[1, -1])) == (
        "index 'i': value must be nat[2] of non-negative ints below 2**63, got [1, -1]"
    )
    assert _raises(tl.TorchleanError, lambda: b.build()) == ("build() needs at least one output")
    assert _raises(tl.TorchleanError, lambda: b.apply("nosuch")) == ("unknown op 'nosuch'")
    assert _raises(tl.TorchleanError, lambda: tl.GraphBuilder("nat")) == (
        "builder dtype must be f32 or f64, got nat"
    )


def test_python_misuse_is_a_library_error() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    assert _raises(tl.TorchleanError, lambda: bool(x)) == (
        "a Var has no truth value (graphs have no data-dependent control flow)"
    )
    assert _raises(tl.TorchleanError, lambda: x + "s") == "cannot combine a Var with str"
    assert _raises(tl.TorchleanError, lambda: b.apply("tanh", x, 3)) == (
        "tanh: argument 1 must be a Var or IndexVar, got int (attributes go by keyword)"
    )
    with pytest.raises(AttributeError, match="no op of that name exists"):
        x.nosuch  # noqa: B018
    with pytest.raises(AttributeError, match="no op of that name exists"):
        b.nosuch  # noqa: B018


def test_bad_arguments_are_library_errors_naming_the_call_site() -> None:
    """Each public builder call answers a bad argument with a TorchleanError ending in the
    caller's file:line, never a raw ZeroDivisionError, ValueError, TypeError or OverflowError."""
    b = tl.GraphBuilder()
    x = b.input("x", (3,))
    assert _raises(tl.AttrError, lambda: x / 0.0) == "division by the constant 0.0"
    assert _raises(tl.AttrError, lambda: x / np.float32(0)) == (
        "division by the constant np.float32(0.0)"
    )
    assert _raises(tl.AttrError, lambda: b.const("")) == (
        "const: value must be a real number or an array of them, got ''"
    )
    assert _raises(tl.AttrError, lambda: b.const({"a": 1})) == (
        "const: value must be a real number or an array of them, got {'a': 1}"
    )
    assert _raises(tl.AttrError, lambda: b.const("1.5")) == (
        "const: value must be a real number or an array of them, got '1.5'"
    )
    assert _raises(tl.AttrError, lambda: b.const(1 + 2j)) == (
        "const: value must be a real number or an array of them, got (1+2j)"
    )
    assert _raises(tl.AttrError, lambda: b.const([[1.0], [2.0, 3.0]])) == (
        "const: value must be a real number or an array of them, got [[1.0], [2.0, 3.0]]"
    )
    assert _raises(tl.AttrError, lambda: b.const(10**400)) == (
        "const: <an integer of 401 digits> is out of the float range"
    )
    assert _raises(tl.AttrError, lambda: x * 10**400) == (
        "scale: <an integer of 401 digits> is out of the float range"
    )
    assert _raises(tl.AttrError, lambda: x + 10**400) == (
        "constant: <an integer of 401 digits> is out of the float range"
    )
    assert _raises(tl.ShapeError, lambda: b.full((-1,), 1.0)) == (
        "full: shape must be a tuple of non-negative ints, got (-1,)"
    )
    assert _raises(tl.TorchleanError, lambda: b.full((2,), "a")) == (
        "full: expected a real number, got 'a'"
    )
    assert _raises(
        tl.TorchleanError, lambda: b.input("y", (2,), requires_grad=np.array([1, 2]))
    ) == ("input 'y': requires_grad must be True or False, got array([1, 2])")
    assert _raises(tl.ShapeError, lambda: b.index("j", -1)) == (
        "index 'j': size: shape must be a tuple of non-negative ints, got (-1,)"
    )
    assert _raises(tl.TorchleanError, lambda: b.apply(["tanh"], x)) == "unknown op ['tanh']"
    assert _raises(tl.TorchleanError, lambda: b.param("p" * 300, (1,))).startswith(
        "invalid name 'pppp"
    )


def test_static_index_values_are_naturals_below_2_63() -> None:
    """2**63 - 1 is the largest static index value: the builder refuses more (it used to accept
    2**63 .. 2**64 - 1 and the interpreters then crashed); runtime values above it are out of
    range, read 0 in the reference and the compiled function alike."""
    b = tl.GraphBuilder()
    x = b.input("x", (4,), requires_grad=True)
    for bad in (1 << 63, (1 << 64) - 1, 1 << 64, np.uint64(1 << 63), -1, 1.0, True):
        with pytest.raises(tl.TorchleanError, match="non-negative ints below 2\\*\\*63"):
            b.index(f"s{abs(hash(repr(bad)))}", value=bad)
    top = b.index("top", value=(1 << 63) - 1)
    rt = b.index("rt")
    g = b.build(b.gather_scalar_nat(x, top), b.gather_scalar_nat(x, rt))
    assert tl.loads(tl.dumps(g)) == g
    assert tl.parse_graph(tl.format_graph(g)) == g
    leaves = {"x": np.arange(1.0, 5.0)}
    for v in (2, 1 << 63, 1 << 64, 10**30, np.uint64((1 << 64) - 1)):
        ref = tl.eval_graph(g, leaves, {"rt": v})
        assert ref == (0.0, 3.0 if v == 2 else 0.0)
        assert tl.backprop_ctx(g, leaves, (1.0, 1.0), index={"rt": v})["x"].tolist() == (
            [0.0, 0.0, 1.0, 0.0] if v == 2 else [0.0] * 4
        )
    import compiler

    c = compiler.compile(g)
    for v in (2, 1 << 63, 1 << 64):
        got = c.forward(leaves, {"rt": v})
        assert [float(a) for a in got] == [0.0, 3.0 if v == 2 else 0.0]
