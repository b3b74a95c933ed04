"""Fuzz targets: ``torchlean import`` of corrupted and hostile model files, one target per
importer (``.pt2`` archives of ``torch.export.save``, ``.onnx`` models).

Files are mutated as bytes (bit flips, truncations, inserted and deleted ranges) and by their
structure (a ``.pt2`` member rewritten inside an intact zip archive, so that torch itself reads
it; an ONNX protobuf field changed). Property: exit 0, one summary line on stdout, a graph file
that loads, and nothing on stderr; or exit 2, one line ``torchlean: error: ...`` on stderr,
nothing on stdout and no file written. Never a traceback, a warning of torch or ONNX, a log
record, a Python warning; always within the time bound.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl
from torchlean_ir import cli

from ._harness import fuzz, mutate_bytes, mutate_dict, time_bound

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

seeds = st.integers(0, 2**32 - 1)


class _Net(torch.nn.Module):
    """Small, with a 0-d parameter and a conv, so that the archive has several members."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(8, 3)
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1)) * self.scale


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The valid files every example starts from, by suffix."""
    torch.manual_seed(0)
    net = _Net().eval()
    x = torch.randn(2, 1, 4, 4)
    tmp = tmp_path_factory.mktemp("models")
    torch.export.save(torch.export.export(net, (x,)), tmp / "net.pt2")
    with warnings.catch_warnings():  # the legacy exporter warns that it is deprecated
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (x,), tmp / "net.onnx", dynamo=False)
    return {".pt2": (tmp / "net.pt2").read_bytes(), ".onnx": (tmp / "net.onnx").read_bytes()}


@contextlib.contextmanager
def _logged() -> Iterator[io.StringIO]:
    """What the stream handlers of every logger write (torch gives its loggers handlers that
    write to the ``sys.stderr`` of when it was imported, which ``capfd`` does not see)."""
    buf = io.StringIO()
    handlers = [
        h
        for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
        if isinstance(logger, logging.Logger)
        for h in logger.handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    streams = [h.setStream(buf) for h in handlers]
    try:
        yield buf
    finally:
        for h, stream in zip(handlers, streams, strict=True):
            h.setStream(stream)


def _import(tmp: Path, suffix: str, data: bytes, capfd: pytest.CaptureFixture[str]) -> None:
    """``torchlean import`` of ``data`` in process; the property of the module docstring."""
    model = tmp / f"model{suffix}"
    model.write_bytes(data)
    graph, params = tmp / "g.json", tmp / "p.npz"
    argv = ["import", str(model), "-o", str(graph), "--params", str(params)]
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as seen, _logged() as logged:
        warnings.simplefilter("always")
        with time_bound(f"import {suffix}"):
            code = cli.main(argv)
    out, err = capfd.readouterr()
    assert not seen, [str(w.message) for w in seen]
    assert logged.getvalue() == "", logged.getvalue()
    if code == 0:
        assert err == "" and out.count("\n") == 1 and out.startswith(str(graph)), (out, err)
        tl.check(tl.load(graph))
        assert params.exists()
        return
    assert code == 2, (code, err)
    assert out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("torchlean: error: ") and "Traceback" not in err, err
    assert not graph.exists() and not params.exists()


# -- .pt2 -----------------------------------------------------------------------------------------


def _rezip(data: bytes, edit: Any, rng: np.random.Generator) -> bytes:
    """The archive ``data`` rebuilt, a member's bytes replaced by ``edit(name, bytes, rng)`` (or
    dropped where it returns None; a member added or stored twice sometimes): an intact zip
    archive with a corrupt member, which torch reads."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(buf, "w") as zout:
        infos = zin.infolist()
        target = infos[int(rng.integers(0, len(infos)))].filename
        for info in infos:
            payload = zin.read(info.filename)
            if info.filename == target:
                new = edit(info.filename, payload, rng)
                if new is None:
                    continue
                payload = new
            zout.writestr(info.filename, payload)
        root = infos[0].filename.split("/", 1)[0]
        extra = rng.random()
        with warnings.catch_warnings():  # zipfile warns of a duplicate name
            warnings.simplefilter("ignore")
            if extra < 0.05:
                zout.writestr(target, b"{}")
            elif extra < 0.1:
                name = ["data/aotinductor/x.so", "data/weights/w.pt", "version", "a/b"]
                zout.writestr(f"{root}/{name[int(rng.integers(0, 4))]}", b"\0")
    return buf.getvalue()


#: Size expressions an archive may ask torch.export.load to evaluate (with sympy.sympify).
HOSTILE_EXPRESSIONS = [
    "__import__('os').system('exit 3')",
    "Symbol('s0').__class__",
    "LShift(1, 10**10)",
    "Integer(10)**Integer(10)**Integer(10)",
    "Pow(Integer(99999999999), Integer(99999999999))",
    "(lambda: 0)()",
    "s0" * 10_000,
    "Symbol('s0', positive=True, integer=True)",
    "Mul(Integer(2), Symbol('s17', positive=True, integer=True))",
]


def _edit_member(name: str, payload: bytes, rng: np.random.Generator) -> bytes | None:
    kind = int(rng.integers(0, 6))
    if kind == 0:
        return None
    if kind in (1, 2) and name.endswith(".json"):
        try:
            doc = json.loads(payload)
            for _ in range(int(rng.integers(1, 4))):
                doc = mutate_dict(doc, rng)
            return json.dumps(doc).encode()
        except (ValueError, TypeError, KeyError, IndexError):
            pass
    if kind == 3 and name.endswith("model.json"):
        text = payload.decode()
        expr = HOSTILE_EXPRESSIONS[int(rng.integers(0, len(HOSTILE_EXPRESSIONS)))]
        # a size made symbolic: the first int of a tensor's sizes
        at = text.find('"as_int": ')
        if at >= 0:
            end = text.find("}", at)
            sym = f'"as_expr": {{"expr_str": {json.dumps(expr)}, "hint": null}}'
            return (text[:at] + sym + text[end:]).encode()
    return mutate_bytes(payload, rng, int(rng.integers(1, 4)))


@fuzz(100)
@given(st.integers(1, 4), seeds)
def test_import_pt2_corrupted_bytes(  # type: ignore[no-untyped-def]
    models, tmp_path_factory, capfd, rounds: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    data = mutate_bytes(models[".pt2"], rng, rounds)
    _import(tmp_path_factory.mktemp("pt2"), ".pt2", data, capfd)


@fuzz(100)
@given(seeds)
def test_import_pt2_corrupted_members(models, tmp_path_factory, capfd, seed: int) -> None:  # type: ignore[no-untyped-def]
    """An intact archive with a corrupt, hostile, missing or duplicated member."""
    rng = np.random.default_rng(seed)
    data = _rezip(models[".pt2"], _edit_member, rng)
    _import(tmp_path_factory.mktemp("pt2m"), ".pt2", data, capfd)


# -- .onnx --------------------------------------------------------------------------------------


def _edit_proto(model: Any, rng: np.random.Generator) -> None:
    """One field of an ONNX model changed: a dimension, an element type, a node's input, op
    type or attribute, an initializer's data or dimensions, the opset."""
    g = model.graph
    kind = int(rng.integers(0, 8))
    values = [0, 1, -1, 2, 3, 7, 2**31, 2**40]
    if kind == 0 and g.input:
        dims = g.input[int(rng.integers(0, len(g.input)))].type.tensor_type.shape.dim
        if dims:
            dims[int(rng.integers(0, len(dims)))].dim_value = int(rng.choice(values[:6]))
    elif kind == 1:
        vis = [*g.input, *g.output]
        vis[int(rng.integers(0, len(vis)))].type.tensor_type.elem_type = int(rng.integers(0, 17))
    elif kind == 2 and g.node:
        node = g.node[int(rng.integers(0, len(g.node)))]
        if node.input:
            names = [v.name for v in g.input] + [t.name for t in g.initializer] + ["", "nope"]
            node.input[int(rng.integers(0, len(node.input)))] = str(rng.choice(names))
    elif kind == 3 and g.node:
        ops = ["Relu", "Gemm", "Conv", "Flatten", "Mul", "Reshape", "Softmax", "Frobnicate"]
        g.node[int(rng.integers(0, len(g.node)))].op_type = str(rng.choice(ops))
    elif kind == 4 and g.node:
        node = g.node[int(rng.integers(0, len(g.node)))]
        for a in node.attribute:
            if a.ints:
                a.ints[int(rng.integers(0, len(a.ints)))] = int(rng.choice(values))
            elif a.type == onnx.AttributeProto.INT:
                a.i = int(rng.choice(values))
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = float(rng.choice([0.0, -1.0, 1e30, float("nan")]))
    elif kind == 5 and g.initializer:
        t = g.initializer[int(rng.integers(0, len(g.initializer)))]
        if rng.random() < 0.5 and t.dims:
            t.dims[int(rng.integers(0, len(t.dims)))] = int(rng.choice(values))
        else:
            t.raw_data = t.raw_data[: int(rng.integers(0, len(t.raw_data) + 1))]
    elif kind == 6:
        model.opset_import[0].version = int(rng.choice([1, 6, 11, 13, 18, 21, 99]))
    elif g.node:
        del g.node[int(rng.integers(0, len(g.node)))]


@fuzz(100)
@given(st.integers(1, 4), seeds)
def test_import_onnx_corrupted_bytes(  # type: ignore[no-untyped-def]
    models, tmp_path_factory, capfd, rounds: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    data = mutate_bytes(models[".onnx"], rng, rounds)
    _import(tmp_path_factory.mktemp("onnx"), ".onnx", data, capfd)


@fuzz(100)
@given(st.integers(1, 3), seeds)
def test_import_onnx_edited_fields(  # type: ignore[no-untyped-def]
    models, tmp_path_factory, capfd, rounds: int, seed: int
) -> None:
    """A well-formed protobuf with wrong contents."""
    rng = np.random.default_rng(seed)
    model = onnx.load_from_string(models[".onnx"])
    for _ in range(rounds):
        _edit_proto(model, rng)
    _import(tmp_path_factory.mktemp("onnxf"), ".onnx", model.SerializeToString(), capfd)
