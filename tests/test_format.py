"""The graph file format (``torchlean_ir._format``): exact round trip, the canonical encoding and
its pinned hash, the JSON Schema, limits, and refusal of bad files with one-line messages.

Random graphs come from ``strategies.graphs()``; random corruptions of valid files (truncation,
byte flips, deleted/renamed keys, wrong types, out-of-range references, huge shapes, NaN, deep
nesting) must each load to a graph that checks, or be refused with a one-line
``GraphFormatError`` naming the place, never another exception.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchlean_ir as tl

from .op_cases import CASES
from .strategies import graphs

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "graphs").glob("*.json"))
VALIDATOR = jsonschema.Draft202012Validator(tl.graph_schema())

FAST = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))


def small_graph() -> tl.GraphData:
    """A fixed graph touching every encoding: leaves of both kinds, a runtime and a static index
    input, int/float/inf/shape attributes, an inline literal and a base64 literal."""
    b = tl.GraphBuilder()
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,), requires_grad=False)
    label = b.index("label")
    rows = b.index("rows", 2, value=[0, 2])
    h = b.clamp(b.linear(W, bias, x), lo=float("-inf"), hi=1.0)
    small = b.const(np.array([0.1, -0.0, 2.5]))
    big = b.const(np.arange(70, dtype=np.float32) / 8)
    picked = b.gather_rows_nat(b.reshape(h + small, shape=(3, 1)), rows)
    loss = b.gather_scalar_nat(h, label) * 0.5 + b.sum(big) + b.sum(picked)
    return b.build(loss)


def assert_one_line_format_error(err: BaseException) -> str:
    assert type(err) in (tl.GraphFormatError, tl.GraphParseError), type(err)
    text = str(err)
    assert text and "\n" not in text and "\r" not in text, text
    assert len(text) < 600, len(text)
    return text


def refused(data: str | bytes, limits: tl.Limits = tl.DEFAULT_LIMITS) -> str:
    with pytest.raises(tl.GraphFormatError) as info:
        tl.loads(data, limits=limits)
    return assert_one_line_format_error(info.value)


# -- exact round trip ------------------------------------------------------------------------


def test_round_trip_and_hash_of_small_graph(tmp_path: Path) -> None:
    g = small_graph()
    path = tmp_path / "g.json"
    tl.save(g, path)
    back = tl.load(path)
    assert back == g
    assert back.content_hash == g.content_hash
    assert tl.loads(tl.dumps(g, indent=2)) == g
    assert path.read_bytes() == tl.dumps(g).encode()


def test_content_hash_is_pinned() -> None:
    # A change of this value means graph files or cache keys changed meaning: bump the format
    # version (docs/ir-format.md, "Versioning") instead of editing the number.
    assert small_graph().content_hash == PINNED_HASH


PINNED_HASH = "7c9bc38899ef932f73361dcc5cabd983ed5687a75fb75f8f6b4522b6798d7e03"


def test_canonical_file_layout() -> None:
    b = tl.GraphBuilder()
    x = b.input("x", (2,))
    text = tl.dumps(b.build(b.sum(b.scale(x, c=-0.0))))
    assert text == (
        "{\n"
        '  "format": "torchlean_ir.graph",\n'
        '  "version": 1,\n'
        '  "leaves": [\n'
        '    {"name": "x", "kind": "input", "shape": [2], "dtype": "f32", "requires_grad": false}\n'
        "  ],\n"
        '  "index_inputs": [],\n'
        '  "nodes": [\n'
        '    {"op": "scale", "args": [0], "attrs": {"c": 0.0}, "shape": [2], "dtype": "f32"},\n'
        '    {"op": "sum", "args": [1], "shape": [], "dtype": "f32"}\n'
        "  ],\n"
        '  "outputs": [2]\n'
        "}\n"
    )


def test_equal_graphs_hash_equally() -> None:
    # -0.0 and 0.0, 1 and 1.0 are equal attribute values: equal graphs must hash equally.
    def build(c: float) -> tl.GraphData:
        b = tl.GraphBuilder()
        return b.build(b.scale(b.input("x", (2,)), c=c))

    assert build(-0.0) == build(0.0)
    assert build(-0.0).content_hash == build(0.0).content_hash
    assert build(1).content_hash == build(1.0).content_hash
    assert build(1.0).content_hash != build(2.0).content_hash
    assert hash(build(1.0)) == hash(build(1))


def test_literals_are_exact() -> None:
    for dtype in ("f32", "f64"):
        np_dtype = np.float32 if dtype == "f32" else np.float64
        values = np.array(
            [0.1, -0.0, 1e-45 if dtype == "f32" else 5e-324, 3.4e38, -1 / 3, 2.0**-20, 7.0],
            dtype=np_dtype,
        )
        for arr in (values, np.tile(values, 10)):  # inline and base64
            b = tl.GraphBuilder(dtype)
            g = b.build(b.const(arr))
            back = tl.loads(tl.dumps(g))
            assert back == g
            got = back.nodes[0].attrs["value"].to_numpy()
            assert got.tobytes() == arr.tobytes()
    b = tl.GraphBuilder("f32")
    data = tl.graph_to_dict(b.build(b.const(np.array([0.1, 1 / 3], dtype=np.float32))))
    # f32 literals are written in their shortest exact form, not as the float64 expansion
    assert data["nodes"][0]["attrs"]["value"]["data"] == [0.1, 0.33333334]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_table_graphs_round_trip(case: Any) -> None:
    for dtype in ("f32", "f64"):
        g = case.graph(dtype)
        assert tl.loads(tl.dumps(g)) == g
        assert not list(VALIDATOR.iter_errors(tl.graph_to_dict(g)))


@FAST
@given(graphs())
def test_random_graphs_round_trip(g: tl.GraphData) -> None:
    tl.check(g)
    text = tl.dumps(g)
    back = tl.loads(text)
    assert back == g
    assert back.content_hash == g.content_hash
    assert tl.dumps(back) == text
    assert not list(VALIDATOR.iter_errors(json.loads(text)))


@pytest.mark.slow
@SLOW
@given(graphs(max_nodes=40))
def test_random_graphs_round_trip_sweep(g: tl.GraphData) -> None:
    test_random_graphs_round_trip.hypothesis.inner_test(g)  # type: ignore[attr-defined]


# -- the schema ------------------------------------------------------------------------------


def test_schema_is_valid_and_shipped() -> None:
    jsonschema.Draft202012Validator.check_schema(tl.graph_schema())
    assert (ROOT / "torchlean_ir" / "schema" / "graph-v1.schema.json").is_file()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_schema_accepts_examples(path: Path) -> None:
    errors = list(VALIDATOR.iter_errors(json.loads(path.read_text())))
    assert not errors, errors[0].message


def test_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {
        "mlp_regression.json",
        "softmax_classifier.json",
        "attention_block.json",
    }


# -- bad files: exact messages ---------------------------------------------------------------


def _dict() -> dict[str, Any]:
    return tl.graph_to_dict(small_graph())


def _refuse_dict(d: Any, limits: tl.Limits = tl.DEFAULT_LIMITS) -> str:
    return refused(json.dumps(d), limits)


def _with(path: str, value: Any) -> dict[str, Any]:
    """A copy of the small graph's dict with the value at ``path`` (``a.0.b``) replaced
    (``DELETE`` removes it)."""
    d = _dict()
    keys: list[Any] = [int(k) if k.isdigit() else k for k in path.split(".")]
    parent = d
    for k in keys[:-1]:
        parent = parent[k]
    if value is DELETE:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    return d


DELETE = object()

BAD = [
    ("format", "onnx", "$.format: expected 'torchlean_ir.graph', got 'onnx'"),
    ("version", 2, "$.version: unsupported version 2 (this reader knows 1)"),
    ("version", 1.0, "$.version: unsupported version 1.0 (this reader knows 1)"),
    ("version", True, "$.version: unsupported version True (this reader knows 1)"),
    ("leaves", DELETE, "$: missing key 'leaves'"),
    ("leaves", {}, "$.leaves: expected an array, got an object"),
    (
        "leaves.0.name",
        "1x",
        "$.leaves[0].name: invalid name '1x' (an identifier; dots allowed; 256 chars max)",
    ),
    (
        "leaves.0.name",
        "x\n",
        "$.leaves[0].name: invalid name 'x\\n' (an identifier; dots allowed; 256 chars max)",
    ),
    ("leaves.1.name", "x", "$.leaves[1].name: name 'x' is already used by $.leaves[0]"),
    ("index_inputs.0.name", "W", "$.index_inputs[0].name: name 'W' is already used by $.leaves[1]"),
    ("leaves.0.kind", "buffer", "$.leaves[0].kind: expected 'param' or 'input', got 'buffer'"),
    ("leaves.0.dtype", "f16", "$.leaves[0].dtype: expected dtype 'f32' or 'f64', got 'f16'"),
    ("leaves.0.requires_grad", 1, "$.leaves[0].requires_grad: expected a boolean, got an integer"),
    ("leaves.0.shape", [4, -1], "$.leaves[0].shape[1]: expected an integer >= 0, got -1"),
    ("leaves.0.shape", [4.0], "$.leaves[0].shape[0]: expected an integer, got a number"),
    ("leaves.0.shape", [1] * 9, "$.leaves[0].shape: rank 9 exceeds the limit 8"),
    (
        "leaves.0.shape",
        [2**20, 2**20],
        "$.leaves[0].shape: 1099511627776 elements exceed the limit 268435456",
    ),
    ("leaves.0.extra", 1, "$.leaves[0]: unknown key 'extra'"),
    (
        "index_inputs.0.shape",
        [2, 2],
        "$.index_inputs[0].shape: an index input is a nat scalar or vector, got rank 2",
    ),
    ("index_inputs.1.value", [0], "$.index_inputs[1].value: expected 2 naturals, got 1"),
    (
        "index_inputs.1.value",
        [0, -2],
        "$.index_inputs[1].value[1]: expected an integer >= 0, got -2",
    ),
    ("index_inputs.1.value", None, "$.index_inputs[1].value: expected an array, got null"),
    ("nodes.0.op", "conv9d", "$.nodes[0].op: unknown op 'conv9d'"),
    ("nodes.0.op", DELETE, "$.nodes[0]: missing key 'op'"),
    (
        "nodes.0.args",
        [1, 2, 3],
        "$.nodes[0].args[2]: refers to value 3, but ids 0..2 are available",
    ),
    (
        "nodes.0.args",
        [1, 2, "0"],
        "$.nodes[0].args[2]: expected an integer (a value id), got a string",
    ),
    (
        "nodes.6.index_args",
        [5],
        "$.nodes[6].index_args[0]: refers to index input 5, but ids 0..1 are available",
    ),
    (
        "nodes.1.attrs.lo",
        "-Infinity",
        "$.nodes[1].attrs.lo: expected a number, 'inf' or '-inf', got '-Infinity'",
    ),
    ("nodes.1.attrs.hi", [1.0], "$.nodes[1].attrs.hi: expected a number, got an array"),
    (
        "nodes.1.attrs.mode",
        1,
        "$.nodes[1].attrs.mode: unknown attribute of clamp (allowed: hi, lo)",
    ),
    (
        "nodes.1.attrs",
        {"hi": 1.0},
        "$.nodes[1].attrs: clamp: missing required attribute 'lo' "
        "(a finite or infinite float (not NaN))",
    ),
    ("nodes.1.attrs", [], "$.nodes[1].attrs: expected an object, got an array"),
    (
        "nodes.1.attrs.lo",
        2.0,
        "$.nodes[1] (`%4: f32[3] = clamp(%3){hi=1.0, lo=2.0}`): "
        "clamp(f32[3]): needs lo <= hi, got lo=2.0, hi=1.0",
    ),
    (
        "nodes.1.shape",
        [4],
        "$.nodes[1] (`%4: f32[4] = clamp(%3){hi=1.0, lo=-inf}`): recorded "
        "type f32[4] but the shape rule of clamp gives f32[3]",
    ),
    (
        "nodes.1.dtype",
        "f64",
        "$.nodes[1] (`%4: f64[3] = clamp(%3){hi=1.0, lo=-inf}`): recorded "
        "type f64[3] but the shape rule of clamp gives f32[3]",
    ),
    (
        "nodes.2.attrs.value.data",
        [0.1, 0.2],
        "$.nodes[2].attrs.value.data: expected 3 elements for shape [3], got 2",
    ),
    (
        "nodes.2.attrs.value.data",
        [0.1, 0.2, True],
        "$.nodes[2].attrs.value.data[2]: expected a number, got a boolean",
    ),
    (
        "nodes.2.attrs.value.data",
        [0.1, 0.2, 1e300],
        "$.nodes[2].attrs.value.data[2]: element 1e+300 is not a finite f32 (literals are finite)",
    ),
    (
        "nodes.2.attrs.value.dtype",
        "bool",
        "$.nodes[2].attrs.value.dtype: expected 'f32' or 'f64', got 'bool'",
    ),
    (
        "nodes.2.attrs.value.base64",
        "AAAA",
        "$.nodes[2].attrs.value: needs exactly one of 'data' and 'base64'",
    ),
    (
        "nodes.3.attrs.value.base64",
        "AAAA",
        "$.nodes[3].attrs.value.base64: expected 280 bytes for f32[70], got 3",
    ),
    ("nodes.3.attrs.value.base64", "not base64!", "$.nodes[3].attrs.value.base64: invalid base64"),
    (
        "nodes.5.attrs.shape",
        [3, 2],
        "$.nodes[5] (`%8: f32[3,1] = reshape(%7){shape=(3,2)}`): "
        "reshape(f32[3]): cannot reshape f32[3] (3 elements) to [3,2] (6 elements)",
    ),
    ("outputs", [], "$.outputs: a graph needs at least one output"),
    ("outputs", [99], "$.outputs[0]: refers to value 99, but ids 0..15 are available"),
    ("outputs", 3, "$.outputs: expected an array, got an integer"),
]


@pytest.mark.parametrize(("path", "value", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_file_exact_message(path: str, value: Any, message: str) -> None:
    assert _refuse_dict(_with(path, value)) == message


def test_bad_json_text_exact_messages() -> None:
    good = tl.dumps(small_graph())
    assert refused(good[:40]) == (
        "$: invalid JSON at line 3 column 3: Unterminated string starting at"
    )
    assert refused(b"\xff" + good.encode()) == "$: not UTF-8 text (bad byte at line 1 column 1)"
    assert refused(good.replace('"hi": 1.0', '"hi": NaN')) == (
        "$.nodes[1].attrs.hi: expected a number, got NaN (not valid JSON)"
    )
    assert refused(good.replace('"hi": 1.0', '"hi": 1e400')) == (
        "$.nodes[1].attrs.hi: expected a number, got 1e400 (out of range)"
    )
    assert refused(good.replace('"version": 1', '"version": 1, "version": 1')) == (
        "$: duplicate key 'version'"
    )
    deep = good.replace('"hi": 1.0', '"hi": ' + "[" * 50 + "]" * 50)
    line = deep[: deep.index('"hi": [')].count("\n") + 1
    column = (
        deep.split("\n")[line - 1].index('"hi": [') + len('"hi": ') + 29
    )  # the 29th '[' is level 33
    assert refused(deep) == (
        f"$: JSON nested deeper than 32 levels (at line {line} column {column})"
    )
    assert refused("[" * 100_000) == "$: JSON nested deeper than 32 levels (at line 1 column 33)"
    assert refused("") == "$: invalid JSON at line 1 column 1: Expecting value"
    assert refused("[]") == "$: expected an object, got an array"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    g = small_graph()
    text = tl.dumps(g).replace('"op": "linear"', '"op": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["')
    assert refused(text).startswith("$.nodes[0].op: unknown op '[[[[[[[[[[")


def test_limits_are_enforced_and_overridable(tmp_path: Path) -> None:
    g = small_graph()
    text = tl.dumps(g)
    assert refused(text, tl.Limits(max_nodes=5)) == "$.nodes: 13 nodes exceed the limit 5"
    assert refused(text, tl.Limits(max_leaves=2)) == "$.leaves: 3 leaves exceed the limit 2"
    assert refused(text, tl.Limits(max_bytes=100)) == (
        f"$: {len(text)} characters exceed the limit 100"
    )
    assert refused(text.encode(), tl.Limits(max_bytes=100)) == (
        f"$: {len(text.encode())} bytes exceed the limit 100"
    )
    assert refused(text, tl.Limits(max_rank=1)) == "$.leaves[1].shape: rank 2 exceeds the limit 1"
    assert refused(text, tl.Limits(max_elements=10)) == (
        "$.leaves[1].shape: 12 elements exceed the limit 10"
    )
    assert refused(text, tl.Limits(max_depth=4)).startswith("$: JSON nested deeper than 4 levels")
    # an axis over the limit beside an empty one (0 elements in all): refused, not a NumPy error
    huge = json.loads(text)
    huge["leaves"][1]["shape"] = [2**70, 0]
    assert refused(json.dumps(huge)) == (
        f"$.leaves[1].shape[0]: an axis of {2**70} exceeds the limit {1 << 28} elements"
    )
    assert tl.loads(text, limits=tl.DEFAULT_LIMITS.replace(max_nodes=13)) == g
    path = tmp_path / "g.json"
    tl.save(g, path)
    with pytest.raises(tl.GraphFormatError) as info:
        tl.load(path, limits=tl.Limits(max_bytes=10))
    assert str(info.value) == f"$: file of {path.stat().st_size} bytes exceeds the limit 10"
    with pytest.raises(ValueError, match=r"Limits\.max_nodes must be a positive int, got 0"):
        tl.Limits(max_nodes=0)


def test_unreadable_paths(tmp_path: Path) -> None:
    with pytest.raises(tl.GraphFormatError) as info:
        tl.load(tmp_path / "missing.json")
    assert str(info.value) == (
        f"cannot read {str(tmp_path / 'missing.json')!r}: No such file or directory"
    )
    with pytest.raises(tl.GraphFormatError) as info:
        tl.load(tmp_path)
    assert str(info.value) == f"cannot read {str(tmp_path)!r}: Is a directory"


def test_long_values_are_shortened_in_messages() -> None:
    message = _refuse_dict(_with("nodes.0.op", "z" * 100_000))
    assert message == "$.nodes[0].op: unknown op '" + "z" * 56 + "..."
    message = _refuse_dict(_with("format", ["x"] * 100_000))
    assert len(message) < 120


def test_save_checks_the_graph(tmp_path: Path) -> None:
    g = small_graph()
    bad = tl.GraphData(g.context, g.nodes, (999,))
    with pytest.raises(tl.GraphCheckError):
        tl.save(bad, tmp_path / "bad.json")
    assert not (tmp_path / "bad.json").exists()


def test_huge_limits_mean_no_limit(tmp_path: Path) -> None:
    """A limit above sys.maxsize (``--max-bytes 99999999999999999999999``) used to overflow
    when reading; it now means no limit, for files, bytes, text and the text form."""
    huge = tl.Limits(**{f: 10**23 for f in tl.Limits.__dataclass_fields__})
    assert huge.max_bytes == sys.maxsize
    g = small_graph()
    path = tmp_path / "g.json"
    tl.save(g, path, limits=huge)
    assert tl.load(path, limits=huge) == g
    assert tl.loads(tl.dumps(g).encode(), limits=huge) == g
    assert tl.parse_graph(tl.format_graph(g), limits=huge) == g


def test_a_device_or_pipe_is_read_up_to_the_limit() -> None:
    """No size to check first: at most max_bytes + 1 bytes are read, then refused."""
    assert _refuse_path("/dev/zero", tl.Limits(max_bytes=1000)) == (
        "$: 1001 bytes exceed the limit 1000"
    )


def _refuse_path(path: Any, limits: tl.Limits = tl.DEFAULT_LIMITS) -> str:
    with pytest.raises(tl.GraphFormatError) as info:
        tl.load(path, limits=limits)
    return assert_one_line_format_error(info.value)


def test_every_list_is_bounded() -> None:
    """Outputs, args and index args are bounded by ``max_items`` (a file of 17 million outputs
    used to be accepted after 25 s); integers of more than 400 digits are refused."""
    d = _dict()
    d["outputs"] = d["outputs"] * 100_001
    assert _refuse_dict(d) == "$.outputs: 100001 entries exceed the limit 100000"
    small = tl.Limits(max_items=3)
    assert _refuse_dict(_with("nodes.0.args", [0, 0, 0, 0]), small) == (
        "$.nodes[0].args: 4 entries exceed the limit 3"
    )
    assert _refuse_dict(_with("nodes.1.index_args", [0, 0, 0, 0]), small) == (
        "$.nodes[1].index_args: 4 entries exceed the limit 3"
    )
    assert _refuse_dict(_with("outputs", [0, 0, 0, 0]), small) == (
        "$.outputs: 4 entries exceed the limit 3"
    )
    assert _refuse_dict(_with("leaves.0.shape", [10**400])) == (
        "$.leaves[0].shape[0]: an integer of 401 digits is too long (at most 400)"
    )
    assert _refuse_dict(_with("outputs", [10**399])) == (
        "$.outputs[0]: refers to value <an integer of 400 digits>, but ids 0..15 are available"
    )


def _over_limit_graphs() -> list[tuple[tl.GraphData, tl.Limits]]:
    b = tl.GraphBuilder()
    big = b.build(b.sum(b.param("p", (1 << 20, 1 << 20))))  # 2^40 elements
    b = tl.GraphBuilder()
    rank9 = b.build(b.sum(b.param("p", (1,) * 9)))
    b = tl.GraphBuilder()
    x = b.input("x", (2,))
    outs = b.build([x] * 5)
    b = tl.GraphBuilder()
    x = b.input("x", (80,))
    lit = b.build(x + b.const(np.arange(80.0)))
    b = tl.GraphBuilder()
    x = b.input("x", (2, 3))
    perm = b.build(b.reshape(x, shape=(1,) * 7 + (6,)))
    g = small_graph()
    return [
        (big, tl.DEFAULT_LIMITS),
        (rank9, tl.DEFAULT_LIMITS),
        (outs, tl.Limits(max_items=4)),
        (lit, tl.Limits(max_elements=79)),
        (perm, tl.Limits(max_rank=4)),
        (g, tl.Limits(max_nodes=12)),
        (g, tl.Limits(max_leaves=2)),
        (g, tl.Limits(max_leaves=1)),
        (g, tl.Limits(max_depth=5)),
        (g, tl.Limits(max_bytes=2000)),
    ]


@pytest.mark.parametrize("case", range(10))
def test_save_refuses_what_load_would_refuse_with_the_same_message(
    tmp_path: Path, case: int
) -> None:
    """What the library writes, it reads back: ``save`` (and ``dumps(limits=...)``) refuse a
    graph over a limit with the message ``load`` gives for the same file, and write nothing."""
    g, limits = _over_limit_graphs()[case]
    path = tmp_path / "g.json"
    with pytest.raises(tl.GraphFormatError) as info:
        tl.save(g, path, limits=limits)
    message = assert_one_line_format_error(info.value)
    assert not path.exists() and not list(tmp_path.iterdir())
    path.write_text(tl.dumps(g))  # written anyway, without limits
    assert _refuse_path(path, limits) == message
    with pytest.raises(tl.GraphFormatError) as info:
        tl.dumps(g, limits=limits)
    assert str(info.value) == refused(tl.dumps(g), limits)


def test_save_is_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g = small_graph()
    path = tmp_path / "g.json"
    path.write_text("old")

    def fail(*args: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space left"):
        tl.save(g, path)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["g.json"]


# -- random corruptions ----------------------------------------------------------------------


def _paths(v: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += _paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += _paths(x, (*prefix, i))
    return out


def _get(d: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        d = d[k]
    return d


JUNK = [None, True, -1, 0, 2**70, 1.5, -0.0, "", "x", "inf", [], [1, 2], {}, {"a": 1}, float("nan")]


def _loads_or_refuses(text: str | bytes) -> tl.GraphData | None:
    """Load ``text``: either a graph that checks or a one-line GraphFormatError."""
    try:
        g = tl.loads(text)
    except tl.GraphFormatError as e:
        assert_one_line_format_error(e)
        return None
    tl.check(g)
    assert tl.loads(tl.dumps(g)) == g
    return g


@st.composite
def corrupted_dicts(draw: Any) -> tuple[dict[str, Any], str]:
    """A valid graph's dict with one random edit: delete, rename, or replace a value."""
    d = tl.graph_to_dict(draw(graphs()))
    paths = [p for p in _paths(d) if p]
    path = draw(st.sampled_from(paths))
    parent = _get(d, path[:-1])
    key = path[-1]
    how = draw(st.sampled_from(["delete", "rename", "replace", "wrap"]))
    if how == "delete" and isinstance(parent, dict):
        del parent[key]
    elif how == "rename" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["x", key + "s", key.upper(), ""]))] = parent.pop(key)
    elif how == "wrap":
        parent[key] = [parent[key]]
    else:
        parent[key] = draw(st.sampled_from(JUNK))
    return d, f"{how} {path}"


@FAST
@given(corrupted_dicts())
def test_random_edits_are_loaded_or_refused_cleanly(edit: tuple[dict[str, Any], str]) -> None:
    d, _ = edit
    text = json.dumps(d)  # NaN becomes the (invalid) token NaN
    g = _loads_or_refuses(text)
    if g is not None and "NaN" not in text:
        # whatever the loader accepts, the schema accepts
        assert not list(VALIDATOR.iter_errors(json.loads(text)))


@FAST
@given(graphs(), st.data())
def test_truncations_are_refused(g: tl.GraphData, data: st.DataObject) -> None:
    text = tl.dumps(g).encode()
    cut = data.draw(st.integers(0, len(text.rstrip()) - 1))
    refused(text[:cut])


@FAST
@given(graphs(), st.data())
def test_byte_flips_are_loaded_or_refused_cleanly(g: tl.GraphData, data: st.DataObject) -> None:
    text = bytearray(tl.dumps(g).encode())
    for _ in range(data.draw(st.integers(1, 3))):
        text[data.draw(st.integers(0, len(text) - 1))] = data.draw(st.integers(0, 255))
    _loads_or_refuses(bytes(text))


@FAST
@given(graphs(), st.data())
def test_out_of_range_references_are_refused(g: tl.GraphData, data: st.DataObject) -> None:
    d = tl.graph_to_dict(g)
    with_args = [j for j, n in enumerate(d["nodes"]) if n["args"]]
    if not with_args or data.draw(st.booleans()):
        bad = data.draw(st.integers(g.num_values, g.num_values + 5))
        d["outputs"][0] = bad
        want = f"$.outputs[0]: refers to value {bad}, but ids 0..{g.num_values - 1} are available"
    else:
        j = data.draw(st.sampled_from(with_args))
        bad = data.draw(st.integers(g.num_leaves + j, g.num_leaves + j + 5))
        d["nodes"][j]["args"][0] = bad
        n = g.num_leaves + j
        avail = f"ids 0..{n - 1} are available" if n else "there is no value to refer to"
        want = f"$.nodes[{j}].args[0]: refers to value {bad}, but {avail}"
    assert _refuse_dict(d) == want


@FAST
@given(graphs(), st.data())
def test_huge_shapes_are_refused(g: tl.GraphData, data: st.DataObject) -> None:
    d = tl.graph_to_dict(g)
    where = [("leaves", i) for i in range(len(d["leaves"]))]
    where += [("nodes", j) for j in range(len(d["nodes"]))]
    if not where:
        return
    section, i = data.draw(st.sampled_from(where))
    d[section][i]["shape"] = [2**31, 2**31]
    assert _refuse_dict(d) == (
        f"$.{section}[{i}].shape: {2**62} elements exceed the limit {1 << 28}"
    )


@FAST
@given(graphs(), st.data())
def test_nan_and_deep_nesting_are_refused(g: tl.GraphData, data: st.DataObject) -> None:
    d = tl.graph_to_dict(g)
    path = data.draw(st.sampled_from([p for p in _paths(d) if p]))
    parent = _get(d, path[:-1])
    if data.draw(st.booleans()):
        parent[path[-1]] = float("nan")  # json.dumps writes the token NaN
        assert "NaN (not valid JSON)" in _refuse_dict(d)
    else:
        depth = data.draw(st.integers(33, 5000))
        text = json.dumps(d).replace('"@"', "[" * depth + "0" + "]" * depth)
        parent[path[-1]] = "@"
        text = json.dumps(d).replace('"@"', "[" * depth + "0" + "]" * depth)
        assert refused(text).startswith("$: JSON nested deeper than 32 levels (at line 1 column ")


@pytest.mark.slow
@SLOW
@given(corrupted_dicts())
def test_random_edits_sweep(edit: tuple[dict[str, Any], str]) -> None:
    test_random_edits_are_loaded_or_refused_cleanly.hypothesis.inner_test(edit)  # type: ignore[attr-defined]


def test_attrs_edge_cases() -> None:
    a = tl.Attrs({"b": 1, "a": (1, 2)})
    assert list(a) == ["a", "b"] and a["a"] == (1, 2) and len(a) == 2
    assert a == tl.Attrs({"a": (1, 2), "b": 1}) and hash(a) == hash(tl.Attrs({"a": (1, 2), "b": 1}))
    assert a != tl.Attrs({"a": (1, 2)})
    with pytest.raises(KeyError):
        a["c"]
    c = tl.ConstArray.from_numpy(np.array([[1.0, 2.0]], dtype=np.float32))
    assert c.shape == (1, 2) and c.dtype == tl.DType.F32
    assert tl.ConstArray(tl.DType.F32, [1, 2], bytearray(c.data)) == c  # normalised
    with pytest.raises(tl.AttrError, match=r"tensor literal f32\[3\] needs 12 bytes, got 8"):
        tl.ConstArray(tl.DType.F32, (3,), c.data)
    with pytest.raises(tl.AttrError, match="tensor literal shape must be a tuple"):
        tl.ConstArray(tl.DType.F32, (-1,), b"")
    with pytest.raises(tl.AttrError, match="one byte 0 or 1 per element"):
        tl.ConstArray(tl.DType.BOOL, (2,), b"\x00\x02")
    with pytest.raises(tl.AttrError, match="data must be bytes, got str"):
        tl.ConstArray(tl.DType.F32, (), "abcd")  # type: ignore[arg-type]
    empty = tl.ConstArray.from_numpy(np.zeros((0, 3)))
    b = tl.GraphBuilder("f64")
    g = b.build(b.const(empty.to_numpy()))
    assert tl.loads(tl.dumps(g)) == g
    assert math.prod(g.nodes[0].type.shape) == 0
