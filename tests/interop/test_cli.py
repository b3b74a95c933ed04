"""``torchlean import`` and ``torchlean export``: exact stdout, one-line stderr, exit codes (0
success, 2 bad input or usage). The end-to-end test runs the commands as subprocesses, the way
users run them; the error cases call ``torchlean_ir.cli.main`` in process (same code path, a
fraction of the start-up time)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx.reference import ReferenceEvaluator  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
from torchlean_ir.interop._files import read_params  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "torchlean_ir.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=600,
    )


@pytest.fixture
def call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Any:
    """``torchlean ARGS`` in process, in ``tmp_path``: a CompletedProcess-like result."""
    from torchlean_ir import cli

    monkeypatch.chdir(tmp_path)

    def go(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        code = cli.main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return go


def _error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2 and proc.stdout == "", (proc.returncode, proc.stdout)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchlean: error: "), proc.stderr
    return lines[0].removeprefix("torchlean: error: ")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.bn = torch.nn.BatchNorm2d(2)
        self.fc = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def pt2(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = _Net().eval()
    x = torch.randn(2, 1, 4, 4)
    path = tmp_path_factory.mktemp("pt2") / "net.pt2"
    torch.export.save(torch.export.export(model, (x,)), path)
    return path, model, x


def test_import_pt2_export_onnx_and_verify(
    pt2: tuple[Path, torch.nn.Module, torch.Tensor], tmp_path: Path
) -> None:
    path, model, x = pt2
    proc = run("import", str(path), "-o", "g.json", "--params", "p.safetensors", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (
        proc.stdout == "g.json: 5 nodes, 9 leaves, batched over x; 8 parameters in p.safetensors\n"
    )
    g = tl.load(tmp_path / "g.json")
    params = read_params(str(tmp_path / "p.safetensors"))
    assert set(params) == {leaf.name for leaf in g.leaves if leaf.kind == "param"}
    cg = compiler.compile(g).batched(over=("x",))
    got = np.asarray(cg.forward({**params, "x": x.numpy()}))
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    # the imported graph's compiled backward is proved
    proc = subprocess.run(
        [sys.executable, "-m", "verify", "g.json", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0 and "VERIFIED" in proc.stdout, proc.stdout + proc.stderr
    # and out to ONNX, where the reference evaluator gives PyTorch's values
    proc = run("export", "g.json", "-o", "net.onnx", "--params", "p.safetensors", cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("net.onnx: ") and proc.stdout.endswith(" ONNX nodes, opset 18\n")
    model_proto = onnx.load(tmp_path / "net.onnx")
    onnx.checker.check_model(model_proto, full_check=True)
    (theirs,) = ReferenceEvaluator(model_proto).run(None, {"x": x.numpy()})
    np.testing.assert_allclose(theirs, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    # and back in: the same graph, the same values
    proc = run("import", "net.onnx", "-o", "g2.json", "--params", "p2.npz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    g2 = tl.load(tmp_path / "g2.json")
    p2 = read_params(str(tmp_path / "p2.npz"))
    got2 = compiler.compile(g2).batched(over=("x",)).forward({**p2, "x": x.numpy()})
    np.testing.assert_allclose(np.asarray(got2), got, rtol=1e-6, atol=1e-7)


def test_export_needs_params_or_zero_params(
    pt2: tuple[Path, torch.nn.Module, torch.Tensor], tmp_path: Path, call: Any
) -> None:
    run = call
    path, _, _ = pt2
    assert run("import", str(path), "-o", "g.json", cwd=tmp_path).returncode == 0
    assert _error(run("export", "g.json", "-o", "m.onnx", cwd=tmp_path)) == (
        "the graph has 8 param leaves: give their values with --params FILE (or --zero-params "
        "for a model with zero weights)"
    )
    proc = run("export", "g.json", "-o", "m.onnx", "--zero-params", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    inits = {t.name: t for t in onnx.load(tmp_path / "m.onnx").graph.initializer}
    assert not np.any(onnx.numpy_helper.to_array(inits["conv.weight"]))


def test_bad_input_is_one_line_exit_2(tmp_path: Path, call: Any) -> None:
    run = call
    (tmp_path / "junk.onnx").write_bytes(b"not a protobuf \xff\xff")
    (tmp_path / "junk.pt2").write_bytes(b"not a zip")
    (tmp_path / "g.txt").write_text("{}")
    cases = {
        ("import", "missing.onnx", "-o", "g.json"): "cannot read missing.onnx: no such file",
        ("import", "g.txt", "-o", "g.json"): "g.txt: expected a .pt2 (torch.export.save) or "
        ".onnx file",
        ("import", "junk.pt2", "-o", "g.json"): "junk.pt2: not a .pt2 archive (File is not a "
        "zip file)",
        ("export", "missing.json", "-o", "m.onnx"): "cannot read 'missing.json': "
        "No such file or directory",
    }
    for args, want in cases.items():
        assert _error(run(*args, cwd=tmp_path)) == want, args
    msg = _error(run("import", "junk.onnx", "-o", "g.json", cwd=tmp_path))
    assert msg.startswith("from_onnx: junk.onnx: not an ONNX model")
    assert _error(run("import", "junk.onnx", "-o", "g.json", "--params", "p.pt", cwd=tmp_path)) == (
        "--params p.pt: expected a .safetensors or .npz file"
    )


def test_unsupported_op_names_the_node(tmp_path: Path, call: Any) -> None:
    run = call
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x"], ["y"], name="rmax1")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
    )
    onnx.save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "rm.onnx"
    )
    assert _error(run("import", "rm.onnx", "-o", "g.json", cwd=tmp_path)) == (
        "from_onnx: node 0 (ReduceMax 'rmax1'): ONNX op ReduceMax is not supported: no "
        "max-reduction op (max pooling covers windows)"
    )
    assert not (tmp_path / "g.json").exists()


def _rewrite(src: Path, dst: Path, edit: dict[str, bytes]) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            for suffix, new in edit.items():
                if item.filename.endswith(suffix):
                    data = new
            zout.writestr(item, data)


class _Unpicklable:
    """Not in torch's weights_only allow list: loading it needs the full unpickler."""


def test_pt2_archives_that_would_be_unpickled_are_refused(
    pt2: tuple[Path, torch.nn.Module, torch.Tensor], tmp_path: Path, call: Any
) -> None:
    run = call
    path, _, _ = pt2
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("_weights_config.json"))
        config = json.loads(z.read(name))
    first = next(iter(config["config"]))
    config["config"][first]["use_pickle"] = True
    _rewrite(path, tmp_path / "pickled.pt2", {"_weights_config.json": json.dumps(config).encode()})
    assert _error(run("import", "pickled.pt2", "-o", "g.json", cwd=tmp_path)) == (
        f"pickled.pt2: {first!r} is stored pickled (weight_0), which torch.export.load would "
        "unpickle; refused (load it with torch.export.load yourself if you trust it)"
    )
    buf = io.BytesIO()
    torch.save((_Unpicklable(),), buf)
    _rewrite(path, tmp_path / "inputs.pt2", {"sample_inputs/model.pt": buf.getvalue()})
    assert _error(run("import", "inputs.pt2", "-o", "g.json", cwd=tmp_path)) == (
        "inputs.pt2: its sample inputs (data/sample_inputs/model.pt) need a full unpickler, "
        "which torch.export.load would fall back to; refused"
    )


class _Scaled(torch.nn.Module):
    """A model with a 0-d parameter (a learned scale)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.scale = torch.nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * self.scale


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_0d_parameters_keep_their_shape(suffix: str, tmp_path: Path, call: Any) -> None:
    """What ``import --params`` writes, the compiled forward and ``export`` read back: a 0-d
    parameter stays 0-d (it was written as shape [1])."""
    run = call
    torch.manual_seed(0)
    model = _Scaled().eval()
    x = torch.randn(4, 3)
    torch.export.save(torch.export.export(model, (x,)), tmp_path / "scaled.pt2")
    params_file = f"p{suffix}"
    proc = run("import", "scaled.pt2", "-o", "g.json", "--params", params_file, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    g = tl.load(tmp_path / "g.json")
    params = read_params(str(tmp_path / params_file))
    assert params["scale"].shape == () and params["scale"].dtype == np.float32
    shapes = {leaf.name: leaf.type.shape for leaf in g.leaves if leaf.kind == "param"}
    assert {k: v.shape for k, v in params.items()} == shapes
    got = compiler.compile(g).batched(over=("x",)).forward({**params, "x": x.numpy()})
    np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), rtol=1e-6)
    proc = run("export", "g.json", "-o", "m.onnx", "--params", params_file, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    (theirs,) = ReferenceEvaluator(onnx.load(tmp_path / "m.onnx")).run(None, {"x": x.numpy()})
    np.testing.assert_allclose(theirs, model(x).detach().numpy(), rtol=1e-6)
