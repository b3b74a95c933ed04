"""The text form (``torchlean_ir._printer`` and ``torchlean_ir._parser``): the printer and the
parser round-trip on every test graph (the op table, the examples, random graphs), literals are
exact, and every parse error is one line ``line:column: message``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchlean_ir as tl
from torchlean_ir._attrs import float_text

from .op_cases import CASES
from .strategies import graphs
from .test_format import small_graph

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))
FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def round_trips(g: tl.GraphData) -> None:
    text = tl.format_graph(g)
    back = tl.parse_graph(text)
    assert back == g
    assert back.content_hash == g.content_hash
    assert tl.format_graph(back) == text
    assert str(g) == text


def test_printed_form_is_stable() -> None:
    assert tl.format_graph(small_graph()) == (
        "graph(%x: f32[4] input, %W: f32[3,4] param, %b: f32[3] param nograd; #label: nat[], "
        "#rows: nat[2] = [0, 2]) {\n"
        "  %3: f32[3] = linear(%W, %b, %x)\n"
        "  %4: f32[3] = clamp(%3){hi=1.0, lo=-inf}\n"
        "  %5: f32[3] = const(){value=f32[3] [0.1, -0.0, 2.5]}\n"
        '  %6: f32[70] = const(){value=f32[70] b64"'
        + __import__("base64").b64encode((np.arange(70, dtype="<f4") / 8).tobytes()).decode()
        + '"}\n'
        "  %7: f32[3] = add(%4, %5)\n"
        "  %8: f32[3,1] = reshape(%7){shape=(3,1)}\n"
        "  %9: f32[2,1] = gather_rows_nat(%8; #rows)\n"
        "  %10: f32[] = gather_scalar_nat(%4; #label)\n"
        "  %11: f32[] = scale(%10){c=0.5}\n"
        "  %12: f32[] = sum(%6)\n"
        "  %13: f32[] = add(%11, %12)\n"
        "  %14: f32[] = sum(%9)\n"
        "  %15: f32[] = add(%13, %14)\n"
        "  return %15\n"
        "}"
    )


def test_short_form_abbreviates_literals_and_does_not_parse() -> None:
    g = small_graph()
    short = tl.format_graph(g, short=True)
    assert "  %6: f32[70] = const(){value=f32[70] [...]}\n" in short
    assert "value=f32[3] [0.1, -0.0, 2.5]" in short  # small literals stay exact
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph(short)
    assert str(info.value) == (
        "5:40: abbreviated literal (printed with short=True) cannot be parsed"
    )
    # error messages use the short form of a node
    assert tl.format_node(g, 3) == "%6: f32[70] = const(){value=f32[70] [...]}"


def test_small_graph_round_trips() -> None:
    round_trips(small_graph())


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_table_graphs_round_trip(case: Any) -> None:
    for dtype in ("f32", "f64"):
        round_trips(case.graph(dtype))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_round_trip(path: Path) -> None:
    round_trips(tl.load(path))


@FAST
@given(graphs())
def test_random_graphs_round_trip(g: tl.GraphData) -> None:
    round_trips(g)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(graphs(max_nodes=40))
def test_random_graphs_round_trip_sweep(g: tl.GraphData) -> None:
    round_trips(g)


def test_every_attribute_kind_round_trips() -> None:
    # kinds no core op uses yet (str, bool, ints, floats, bool_array) through a test-only op
    op = tl.Op(
        "_text_test_op",
        args=("x",),
        attrs={
            "s": tl.AttrSpec("str"),
            "flag": tl.AttrSpec("bool"),
            "ks": tl.AttrSpec("ints"),
            "ns": tl.AttrSpec("nats"),
            "fs": tl.AttrSpec("floats"),
            "mask": tl.AttrSpec("bool_array"),
            "k": tl.AttrSpec("int"),
        },
    )
    op.def_shape(tl.same_shape)
    try:
        b = tl.GraphBuilder("f64")
        x = b.input("x", (2,))
        y = b.apply(
            "_text_test_op",
            x,
            s='it\'s a "test"\n\t\\ é \x00 \U0001f600',
            flag=False,
            ks=(-1, 0, 7),
            ns=(),
            fs=(0.1, -math.inf, 5e-324, 1.7976931348623157e308),
            mask=np.array([[True, False], [False, True]]),
            k=-(2**62),
        )
        g = b.build(y)
        round_trips(g)
        assert tl.loads(tl.dumps(g)) == g
        text = tl.format_graph(g)
        assert "ns=()" in text and "ks=(-1,0,7)" in text and "flag=False" in text
        assert "mask=bool[2,2] [True, False, False, True]" in text
    finally:
        tl.unregister_op("_text_test_op")


@given(st.floats(allow_nan=False))
def test_float_text_is_exact_f64(x: float) -> None:
    assert float(float_text(x)).hex() == x.hex()


@given(st.floats(allow_nan=False, width=32))
def test_float_text_is_exact_f32(x: float) -> None:
    text = float_text(x, tl.DType.F32)
    with np.errstate(over="ignore"):
        assert np.float32(float(text)).tobytes() == np.float32(x).tobytes()
    assert len(text) <= max(len(repr(x)), 16)


def test_hand_written_text() -> None:
    g = tl.parse_graph(
        """
        graph(%x: f64[3] input grad, %w: f64[3] param; #k: nat[]) {
          %h: f64[3] = mul(%x, %w)
          %s: f64[] = gather_scalar_nat(%h; #k)
          %c: f64[] = const(){value=f64[] [2]}
          %out: f64[] = add(%s, %c)
          return %out, %h
        }
        """
    )
    assert [n.op for n in g.nodes] == ["mul", "gather_scalar_nat", "const", "add"]
    assert g.outputs == (5, 2)
    assert g.leaves[0].requires_grad
    assert tl.eval_graph(g, {"x": [1.0, 2.0, 3.0], "w": [2.0, 2.0, 2.0]}, {"k": 1})[0] == 6.0


ERRORS = [
    ("", "1:1: expected 'graph', got end of input"),
    (
        "graph(",
        "1:7: expected ',', ';' or ')', got end of input".replace(
            "',', ';' or ')'", "a leaf '%name', ';' or ')'"
        ),
    ),
    ("graph(%x: f32[3]) {", "1:17: expected 'param' or 'input', got ')'"),
    ("graph(%x: i32[3] input) {", "1:11: expected a type 'f32[...]' or 'f64[...]', got 'i32'"),
    ("graph(%x: f32[3,] input) {", "1:17: expected a dimension (a non-negative integer), got ']'"),
    ("graph(%x: f32[-3] input) {", "1:15: expected a dimension (a non-negative integer), got '-3'"),
    ("graph(%1x: f32[3] input) {", "1:7: invalid leaf name '1x' (an identifier, dots allowed)"),
    ("graph(%x: f32[3] input, %x: f32[3] input) {", "1:25: %x is declared twice"),
    ("graph(%x: f32[3] input; #x: nat[]) {", "1:25: the name 'x' is declared twice"),
    (
        "graph(%x: f32[3] input; #i: nat[2,2]) {",
        "1:32: an index input is a nat scalar or vector, got rank 2",
    ),
    ("graph(%x: f32[3] input; #i: nat[2] = [1]) {", "1:38: expected 2 index values, got 1"),
    (
        "graph(%x: f32[3] input) {\n  return %y\n}",
        "2:10: %y is not defined (values must be defined before use)",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = tahn(%x)\n  return %1\n}",
        "2:16: unknown op 'tahn'",
    ),
    (
        "graph(%x: f32[3] input) {\n  %x: f32[3] = tanh(%x)\n  return %x\n}",
        "2:3: %x is already defined",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = tanh(%x; #i)\n  return %1\n}",
        "2:25: #i is not a declared index input",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c=1.0, c=2.0}\n  return %1\n}",
        "2:33: attribute 'c' is given twice",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c=nan}\n  return %1\n}",
        "2:28: expected an attribute value, got 'nan'",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c=1e999}\n  return %1\n}",
        "2:28: number '1e999' is out of range (write inf or -inf)",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c=inf}\n  return %1\n}",
        "2:28: scale: attribute 'c' must be finite, got inf",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c='a'}\n  return %1\n}",
        "2:28: scale: attribute 'c' must be a finite or infinite float (not NaN), got 'a'",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = tanh(%x){c=1}\n  return %1\n}",
        "2:25: unknown attribute 'c' of tanh (allowed: none)",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x)\n  return %1\n}",
        "2:16: scale: missing required attribute 'c' (a finite or infinite float (not NaN))",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[4] = tanh(%x)\n  return %1\n}",
        "2:3: recorded type f32[4] but the shape rule of tanh gives f32[3]",
    ),
    (
        "graph(%x: f32[3] input) {\n  %1: f32[] = matmul(%x, %x)\n  return %1\n}",
        "2:3: matmul(f32[3], f32[3]): needs two matrices, got f32[3] and f32[3]",
    ),
    (
        "graph() {\n  %0: f32[2] = const(){value=f32[2] [1.0]}\n  return %0\n}",
        "2:37: expected 2 elements for shape [2], got 1",
    ),
    (
        "graph() {\n  %0: f32[2] = const(){value=f32[2] [1.0, 1e39]}\n  return %0\n}",
        "2:30: const: attribute 'value' must be a float tensor literal, got ConstArray(dtype=<DType"
        ".F32: 'f32'>, shape=(2,)): tensor literal has a non-finite element",
    ),
    (
        'graph() {\n  %0: f32[1] = const(){value=f32[1] b64"AAA"}\n  return %0\n}',
        "2:37: invalid base64 in a tensor literal",
    ),
    (
        "graph() {\n  %0: f32[1] = const(){value=bool[1] [True]}\n  return %0\n}",
        "2:30: const: attribute 'value' must be a float tensor literal, got ConstArray(dtype=<DType"
        ".BOOL: 'bool'>, shape=(1,))",
    ),
    (
        "graph(%x: f32[3] input) {\n  return %x\n} extra",
        "3:3: expected end of input after '}', got 'extra'",
    ),
    ("graph(%x: f32[3] input) {\n  return %x\n}\n@", "4:1: unexpected character '@'"),
    (
        "graph() {\n  %0: f32[] = const(){value=f32[] [1.0]}\n  return %0\n}\n" + "(" * 3,
        "5:1: expected end of input after '}', got '('",
    ),
    (
        "graph(%x: f32[1] input) {\n  %1: f32[1] = _t(%x){s='\\q'}\n  return %1\n}",
        "2:16: unknown op '_t'",
    ),
]


@pytest.mark.parametrize(("text", "message"), ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_parse_errors_exact(text: str, message: str) -> None:
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph(text)
    assert str(info.value) == message
    line, column = message.split(":")[:2]
    assert (info.value.line, info.value.column) == (int(line), int(column))


def test_source_prefixes_positions_and_limits_apply() -> None:
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph("graph(", source="g.tl")
    assert str(info.value).startswith("g.tl:1:7: ")
    text = tl.format_graph(small_graph())
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph(text, limits=tl.Limits(max_nodes=3))
    assert str(info.value) == "5:3: more than 3 nodes (the limit)"
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph("graph(%x: f32[1,1,1] input) {\n return %x\n}", limits=tl.Limits(max_rank=2))
    assert str(info.value) == "1:14: rank 3 exceeds the limit 2"


def test_deep_attribute_nesting_is_refused() -> None:
    text = "graph(%x: f32[3] input) {\n  %1: f32[3] = scale(%x){c=" + "(" * 100
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph(text)
    assert str(info.value) == "2:45: attribute value nested deeper than 16"


@FAST
@given(graphs(), st.data())
def test_random_text_corruptions_are_parsed_or_refused_cleanly(
    g: tl.GraphData, data: st.DataObject
) -> None:
    text = tl.format_graph(g)
    how = data.draw(st.sampled_from(["truncate", "replace", "delete", "insert"]))
    k = data.draw(st.integers(0, len(text) - 1))
    if how == "truncate":
        bad = text[:k]
    elif how == "delete":
        bad = text[:k] + text[k + data.draw(st.integers(1, 8)) :]
    else:
        ch = data.draw(st.sampled_from(list("%#(){}[],;:=.-0123456789eE abfinrt'\"\\\n\x00é")))
        bad = text[:k] + ch + text[k + (how == "replace") :]
    try:
        back = tl.parse_graph(bad)
    except tl.GraphParseError as e:
        message = str(e)
        assert "\n" not in message and len(message) < 600
        line, column = e.line, e.column
        assert 1 <= line <= bad.count("\n") + 1 and column >= 1
        assert message.startswith(f"{line}:{column}: ")
        return
    tl.check(back)
    assert how != "truncate" or bad.rstrip() == text


def test_an_early_error_is_reported_without_reading_the_rest() -> None:
    """The lexer runs on demand: ten million '(' used to be tokenised first (seconds, hundreds of
    MB) before the error at 1:1; a bad character further on no longer hides the first error."""
    import tracemalloc

    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph("(" + "$" * 10)
    assert str(info.value) == "1:1: expected 'graph', got '('"
    text = "(" * 10_000_000
    tracemalloc.start()
    try:
        with pytest.raises(tl.GraphParseError) as info:
            tl.parse_graph(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(info.value) == "1:1: expected 'graph', got '('"
    assert peak < 1 << 20  # a few tokens, not ten million


def test_text_lists_are_bounded() -> None:
    g = small_graph()
    text = tl.format_graph(g)
    out = text.rsplit("return ", 1)[1].split("\n", 1)[0]
    many = text.replace(f"return {out}", "return " + ", ".join([out] * 4))
    with pytest.raises(tl.GraphParseError, match=r"more than 3 outputs \(the limit\)"):
        tl.parse_graph(many, limits=tl.Limits(max_items=3))
    assert tl.parse_graph(many, limits=tl.Limits(max_items=4)).outputs == g.outputs * 4
    args = text.replace("linear(%W, %b, %x)", "linear(%W, %b, %x, %x)")
    with pytest.raises(tl.GraphParseError, match=r"more than 3 arguments \(the limit\)"):
        tl.parse_graph(args, limits=tl.Limits(max_items=3))
    with pytest.raises(tl.GraphParseError, match=r"the index value '9223372036854775808' exceeds"):
        tl.parse_graph(text.replace("#rows: nat[2] = [0, 2]", "#rows: nat[] = 9223372036854775808"))


def test_messages_quoting_long_input_stay_short() -> None:
    """Found by the fuzz campaign: an undefined value named by 5000 digits made a 5000-character
    message. Parse messages are clipped (300 characters)."""
    with pytest.raises(tl.GraphParseError) as info:
        tl.parse_graph("graph(%x: f32[1] input) {\n return %" + "1" * 5000 + "\n}")
    assert str(info.value).startswith("2:9: %111")
    assert str(info.value).endswith("...") and len(str(info.value)) <= 310
