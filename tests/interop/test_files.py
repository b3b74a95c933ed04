"""Model and parameter files that are not what they say: devices, FIFOs, files over the limit,
zip bombs, corrupt and hostile ``.pt2`` archives. Each is refused with one line naming the path
(exit 2 from the command line), before it costs memory or time; nothing waits or reads forever.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("safetensors")

from torchlean_ir import cli  # noqa: E402
from torchlean_ir.interop import InteropError  # noqa: E402
from torchlean_ir.interop._files import (  # noqa: E402
    MAX_FILE_BYTES,
    load_onnx,
    load_pt2,
    read_params,
)

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def _no_hang(seconds: int = 60) -> Iterator[None]:
    """A call that blocks (opening a FIFO) or reads forever (``/dev/zero``) fails the test."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise AssertionError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """``torchlean ARGS`` in process: its one-line error (exit 2, nothing on stdout)."""
    capsys.readouterr()
    with _no_hang():
        code = cli.main(list(args))
    out, err = capsys.readouterr()
    assert (code, out) == (2, ""), (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torchlean: error: "), err
    return lines[0].removeprefix("torchlean: error: ")


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A valid ``.pt2``, ``.onnx``, graph file and parameter files."""
    tmp = tmp_path_factory.mktemp("files")
    torch.manual_seed(0)
    x = torch.randn(2, 3)
    torch.export.save(torch.export.export(_Net().eval(), (x,)), tmp / "net.pt2")
    from torchlean_ir import interop

    imported = interop.from_torch(load_pt2(str(tmp / "net.pt2")))
    onnx.save(interop.to_onnx(imported.graph, imported.params), tmp / "net.onnx")
    assert cli.main(["import", str(tmp / "net.pt2"), "-o", str(tmp / "g.json")]) == 0
    np.savez(tmp / "p.npz", **imported.params)
    return {
        "pt2": tmp / "net.pt2",
        "onnx": tmp / "net.onnx",
        "graph": tmp / "g.json",
        "npz": tmp / "p.npz",
    }


# -- not a regular file -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["zero", "fifo", "dir"])
def test_not_a_regular_file_is_refused_before_it_is_opened(
    kind: str, tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``.npz`` / ``.safetensors`` / ``.pt2`` / ``.onnx`` name linked to ``/dev/zero`` (read
    until memory ran out), a FIFO (opening it waited for a writer) or a directory."""
    names = ["p.npz", "p.safetensors", "m.pt2", "m.onnx"]
    for name in names:
        path = tmp_path / name
        if kind == "zero":
            path.symlink_to("/dev/zero")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
    what = {"zero": "a character device", "fifo": "a FIFO", "dir": "a directory"}[kind]

    def refused(name: str) -> str:
        shown = str(tmp_path / name)
        if kind == "zero":
            shown += " (a link to /dev/zero)"
        return f"{shown}: not a regular file but {what}; refused"

    for name in names[:2]:
        with _no_hang(), pytest.raises(InteropError) as e:
            read_params(str(tmp_path / name))
        assert str(e.value) == refused(name)
        assert _main(
            capsys, "export", str(files["graph"]), "-o", str(tmp_path / "x.onnx"),
            "--params", str(tmp_path / name),
        ) == refused(name)  # fmt: skip
    for name in names[2:]:
        assert _main(capsys, "import", str(tmp_path / name), "-o", str(tmp_path / "g.json")) == (
            refused(name)
        )
    with _no_hang(), pytest.raises(InteropError, match="not a regular file"):
        load_pt2(str(tmp_path / "m.pt2"))
    with _no_hang(), pytest.raises(InteropError, match="not a regular file"):
        load_onnx(str(tmp_path / "m.onnx"))
    assert not (tmp_path / "g.json").exists() and not (tmp_path / "x.onnx").exists()


# -- bounded reads ------------------------------------------------------------------------------


def test_files_over_the_limit_are_refused_from_their_size(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAX_FILE_BYTES == 1 << 32
    pt2, size = files["pt2"], files["pt2"].stat().st_size
    out = str(tmp_path / "g.json")
    assert _main(capsys, "import", str(pt2), "-o", out, "--max-bytes", "1000") == (
        f"{pt2}: file of {size} bytes exceeds the limit 1000"
    )
    onnx_size = files["onnx"].stat().st_size
    assert _main(capsys, "import", str(files["onnx"]), "-o", "g.json", "--max-bytes", "10") == (
        f"{files['onnx']}: file of {onnx_size} bytes exceeds the limit 10"
    )
    npz = files["npz"]
    with pytest.raises(InteropError) as e:
        read_params(str(npz), max_bytes=100)
    assert str(e.value) == f"{npz}: file of {npz.stat().st_size} bytes exceeds the limit 100"
    capsys.readouterr()
    assert (
        cli.main(["import", str(pt2), "-o", str(tmp_path / "g.json"), "--max-bytes", str(size)])
        == 0
    )


def test_zip_bombs_and_lying_headers_are_refused_before_they_are_unpacked(tmp_path: Path) -> None:
    import tracemalloc

    bomb = tmp_path / "bomb.npz"  # 64 MiB of zeros, deflated to 64 KiB
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f8", "fortran_order": False, "shape": (1 << 23,)}
        )
        z.writestr("w.npy", header.getvalue() + bytes(1 << 26))
    tracemalloc.start()
    try:
        with pytest.raises(InteropError) as e:
            read_params(str(bomb), max_bytes=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(e.value) == (
        f"{bomb}: not a readable .npz parameter file (its members unpack to 67108992 bytes, "
        "over the limit 1048576)"
    )
    assert peak < 1 << 22
    assert read_params(str(bomb))["w"].shape == (1 << 23,)  # under the default limit: read

    short = tmp_path / "short.npz"  # an array header declaring 2**40 float64 in a tiny member
    with zipfile.ZipFile(short, "w", zipfile.ZIP_DEFLATED) as z:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f8", "fortran_order": False, "shape": (1 << 40,)}
        )
        z.writestr("w.npy", header.getvalue() + bytes(64))
    with pytest.raises(InteropError, match=r"'w.npy' declares 8796093022208 bytes of data in a"):
        read_params(str(short))

    st = tmp_path / "p.safetensors"  # a header length past the end of the file
    st.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(InteropError) as e:
        read_params(str(st))
    assert str(e.value) == (
        f"{st}: not a readable .safetensors parameter file (a header of 1099511627776 bytes in a "
        "file of 10 bytes)"
    )


# -- corrupt and hostile .pt2 archives ----------------------------------------------------------


def _rewrite(src: Path, dst: Path, edit: dict[str, bytes | None], extra: Any = ()) -> None:
    """``src`` with members (by suffix) replaced, or dropped where None; ``extra`` added."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data: bytes | None = zin.read(info.filename)
            for suffix, new in edit.items():
                if info.filename.endswith(suffix):
                    data = new
            if data is not None:
                zout.writestr(info.filename, data)
        for name, data in extra:
            zout.writestr(name, data)


def _import_pt2(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    return _main(capsys, "import", str(path), "-o", str(path.with_suffix(".json")))


def test_corrupt_pt2_archives_are_one_line(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    data = bytearray(files["pt2"].read_bytes())
    with zipfile.ZipFile(files["pt2"]) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("_weights_config.json"))
        config_name = info.filename
    at = data.index(b'"config"', info.header_offset)
    data[at + 1] ^= 0x20  # "Config": a flipped bit in a member (a traceback, exit 1, before)
    flipped = tmp_path / "flipped.pt2"
    flipped.write_bytes(bytes(data))
    assert _import_pt2(capsys, flipped) == (
        f"{flipped}: a corrupt .pt2 archive (bad CRC-32 for {config_name!r})"
    )
    cut = tmp_path / "cut.pt2"
    cut.write_bytes(files["pt2"].read_bytes()[:1000])
    assert _import_pt2(capsys, cut) == f"{cut}: not a .pt2 archive (File is not a zip file)"
    twice = tmp_path / "twice.pt2"
    with pytest.warns(UserWarning, match="Duplicate name"):
        _rewrite(files["pt2"], twice, {}, [(config_name, b"{}")])
    assert _import_pt2(capsys, twice) == f"{twice}: not a .pt2 archive (a member stored twice)"


def test_torch_s_own_errors_are_one_line_with_their_cause(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    """A weight shorter than its tensor: torch logs a warning with a traceback, then raises an
    error pointing at it. From the command line, as users run it (torch imported afresh): one
    line, with torch's first error."""
    short = tmp_path / "short.pt2"
    with zipfile.ZipFile(files["pt2"]) as z:
        weight = next(n for n in z.namelist() if n.endswith("data/weights/weight_0"))
    _rewrite(files["pt2"], short, {weight: b"\0" * 4})
    proc = subprocess.run(
        [sys.executable, "-c", "import torchlean_cli, sys; sys.exit(torchlean_cli.torchlean())",
         "import", "short.pt2", "-o", "g.json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600, check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (2, "")
    assert (
        proc.stderr.startswith(
            "torchlean: error: short.pt2: torch.export.load failed: setStorage: sizes [2, 3]"
        )
        and proc.stderr.count("\n") == 1
    ), proc.stderr


def test_size_expressions_torch_would_evaluate_are_checked(
    tmp_path: Path, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """torch.export.load reads each symbolic size with ``sympy.sympify``, Python's ``eval``:
    an archive could run any code. Only arithmetic over symbols and size functions passes."""
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    dyn = tmp_path / "dyn.pt2"
    batch = torch.export.Dim("batch")
    program = torch.export.export(_Net().eval(), (x,), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, dyn)
    with zipfile.ZipFile(dyn) as z:
        name = next(n for n in z.namelist() if n.endswith("models/model.json"))
        text = z.read(name).decode()
    assert '"expr_str": "Symbol(' in text
    assert cli.main(["import", str(dyn), "-o", str(tmp_path / "dyn.json")]) == 0  # it passes
    marker = tmp_path / "ran"
    hostile = {
        f"__import__('pathlib').Path({str(marker)!r}).touch() or ": "a call of something "
        "other than a size function",
        "Symbol.__class__ or ": "Attribute syntax",
        "LShift(1, 10**10) or ": "a call of something other than a size function",
        "Pow(Integer(10), Pow(Integer(10), Integer(10))) + ": "a power other than a "
        "small constant one",
    }
    for k, (prefix, why) in enumerate(hostile.items()):
        evil = tmp_path / f"evil{k}.pt2"
        edited = text.replace(
            '"expr_str": "Symbol(', f'"expr_str": {json.dumps(prefix)[:-1]}Symbol('
        )
        assert edited != text
        _rewrite(dyn, evil, {"models/model.json": edited.encode()})
        msg = _import_pt2(capsys, evil)
        assert msg.startswith(f"{evil}: models/model.json: the size expression ") and msg.endswith(
            f", which torch.export.load would evaluate, holds {why}; refused"
        ), msg
    assert not marker.exists()
