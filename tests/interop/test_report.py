"""``torchlean import --report`` and ``interop.import_report``: every unsupported op at once,
with counts and first source locations; dependent nodes are marked, not counted."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402
from torch import nn  # noqa: E402

from torchlean_ir import interop  # noqa: E402


class _ThreeUnsupported(nn.Module):
    def forward(self, x: Any) -> Any:
        a = torch.cumsum(x, dim=1)
        b = torch.flip(x, [1])
        c = torch.amax(x, dim=1, keepdim=True)
        d = torch.cumsum(b, dim=1)
        return a + b + c + d


_LINE = _ThreeUnsupported.forward.__code__.co_firstlineno


@pytest.fixture
def call(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Any:
    from torchlean_ir import cli

    monkeypatch.chdir(tmp_path)

    def go(*args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return go


def _program() -> Any:
    return torch.export.export(_ThreeUnsupported(), (torch.randn(2, 3),))


def test_report_of_a_torch_program_lists_every_unsupported_op(tmp_path: Path) -> None:
    records = interop.import_report(_program())
    own = [(r.op, r.node, r.location) for r in records if not r.blocked_by]
    assert own == [
        ("aten.cumsum", "cumsum", f"test_report.py:{_LINE + 1}"),
        ("aten.flip", "flip", f"test_report.py:{_LINE + 2}"),
        ("aten.amax", "amax", f"test_report.py:{_LINE + 3}"),
        ("aten.cumsum", "cumsum_1", f"test_report.py:{_LINE + 4}"),
    ]
    blocked = [r for r in records if r.blocked_by]
    assert blocked and all(r.reason == "depends on an unsupported node" for r in blocked)
    assert {r.op for r in blocked} == {"aten.add"}
    assert records[0].hint.startswith("not supported yet")


def test_cli_report_prints_counts_and_locations_and_exits_2(tmp_path: Path, call: Any) -> None:
    torch.export.save(_program(), tmp_path / "m.pt2")
    r = call("import", "m.pt2", "--report")
    assert r.returncode == 2
    assert r.stderr == ""
    hint = "; hint: not supported yet (docs/interop.md lists the ATen ops that import)"
    assert r.stdout.splitlines() == [
        f"aten.cumsum: 2x, first node cumsum at test_report.py:{_LINE + 1}: ATen op aten.cumsum "
        f"is not supported: no mapping to our ops{hint}",
        f"aten.flip: 1x, first node flip at test_report.py:{_LINE + 2}: ATen op aten.flip is "
        f"not supported: no mapping to our ops{hint}",
        f"aten.amax: 1x, first node amax at test_report.py:{_LINE + 3}: ATen op aten.amax is "
        "not supported: no max-reduction op (max pooling covers windows)",
        "m.pt2: 4 unsupported nodes (3 distinct op and reason); 3 more depend on them",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2"]


def test_cli_report_of_an_onnx_graph(tmp_path: Path, call: Any) -> None:
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("IsNaN", ["r"], ["n"], name="nan1"),
            helper.make_node("Not", ["n"], ["m"], name="not1"),
            helper.make_node("CumSum", ["x", "axis"], ["c1"], name="cs1"),
            helper.make_node("CumSum", ["r", "axis"], ["c2"], name="cs2"),
            helper.make_node("Add", ["c1", "c2"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", f, ["N", 3])],
        [
            helper.make_tensor_value_info("y", f, ["N", 3]),
            helper.make_tensor_value_info("m", TensorProto.BOOL, ["N", 3]),
        ],
        [helper.make_tensor("axis", TensorProto.INT64, [], [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    onnx.save(model, tmp_path / "g.onnx")
    records = interop.import_report(tmp_path / "g.onnx")
    assert [(r.op, r.node, r.location, r.blocked_by) for r in records] == [
        ("IsNaN", "nan1", "node 1", ""),
        ("Not", "not1", "node 2", ""),
        ("CumSum", "cs1", "node 3", ""),
        ("CumSum", "cs2", "node 4", ""),
        ("Add", "add", "node 5", "cs1"),
    ]
    r = call("import", "g.onnx", "--report")
    assert (r.returncode, r.stderr) == (2, "")
    lines = r.stdout.splitlines()
    assert [line.split(",")[0] for line in lines[:-1]] == ["IsNaN: 1x", "Not: 1x", "CumSum: 2x"]
    assert lines[2].startswith("CumSum: 2x, first node 3 'cs1': ONNX op CumSum is not supported")
    assert (
        lines[-1] == "g.onnx: 4 unsupported nodes (3 distinct op and reason); 1 more depend on them"
    )


def test_cli_report_of_a_supported_model_exits_0_and_writes_nothing(
    tmp_path: Path, call: Any
) -> None:
    torch.export.save(
        torch.export.export(nn.Linear(3, 2), (torch.randn(2, 3),)), tmp_path / "ok.pt2"
    )
    assert interop.import_report(tmp_path / "ok.pt2") == ()
    r = call("import", "ok.pt2", "--report", "-o", "g.json")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == "ok.pt2: would import: 1 nodes, 3 leaves, batched over input\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.pt2"]


def test_one_line_error_names_op_location_and_hint(tmp_path: Path, call: Any) -> None:
    torch.export.save(_program(), tmp_path / "m.pt2")
    r = call("import", "m.pt2", "-o", "g.json")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"torchlean: error: from_torch: node cumsum (aten.cumsum) at test_report.py:{_LINE + 1}: "
        "ATen op aten.cumsum is not supported: no mapping to our ops; hint: not supported yet "
        "(docs/interop.md lists the ATen ops that import)\n"
    )


def test_hint_points_at_run_decompositions_where_it_rewrites_the_op() -> None:
    class Erfinv(nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.special.erfinv(x * 0.1)

    program = torch.export.export(Erfinv(), (torch.randn(2, 3),))
    with pytest.raises(interop.InteropError, match=r"hint: export with program\.run_decomp"):
        interop.from_torch(program)
