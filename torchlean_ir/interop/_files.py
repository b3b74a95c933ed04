"""Files the interop command line reads and writes: parameter files and ``.pt2`` archives.

Parameter files are ``.safetensors`` (a flat tensor container) or ``.npz`` (read with
``allow_pickle=False``): nothing is unpickled. A ``.pt2`` archive (``torch.export.save``) is
checked before ``torch.export.load`` reads it: ``torch.export.load`` unpickles, with
``weights_only=False``, any weight or constant the archive stores in pickle form (tensor
subclasses, script and opaque objects), its sample inputs when the restricted
``weights_only=True`` load fails, and archives of the legacy layout; it also loads compiled
AOTInductor libraries an archive may hold. :func:`load_pt2` refuses every such archive (it reads
the archive's JSON configs and loads the sample inputs with ``weights_only=True`` itself), so
what remains for ``torch.export.load`` is JSON and raw tensor bytes.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._trace import InteropError

PARAM_FORMATS = (".safetensors", ".npz")


def _format(path: str, what: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    if ext not in PARAM_FORMATS:
        raise InteropError(f"{what} {path}: expected a .safetensors or .npz file")
    return ext


def _safetensors() -> Any:
    try:
        import safetensors.numpy
    except ImportError:
        raise InteropError(
            ".safetensors files need the safetensors package: pip install "
            "'torchlean-ir[safetensors]' (or use .npz)"
        ) from None
    return safetensors.numpy


def save_params(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    """Write arrays by name to a ``.safetensors`` or ``.npz`` file."""
    fmt = _format(path, "--params")
    # np.asarray, not np.ascontiguousarray: that one makes a 0-d array 1-d (shape [1])
    data = {k: np.asarray(v, order="C") for k, v in arrays.items()}
    if fmt == ".npz":
        with open(path, "wb") as f:
            np.savez(f, **data)  # type: ignore[arg-type]
    else:
        _safetensors().save_file(data, path, metadata={"format": "torchlean-ir"})


def read_params(path: str) -> dict[str, np.ndarray]:
    """The arrays of a ``.safetensors`` or ``.npz`` file by name (nothing is unpickled)."""
    fmt = _format(path, "--params")
    try:
        if fmt == ".npz":
            with np.load(path, allow_pickle=False) as data:
                return {k: np.asarray(data[k]) for k in data.files}
        return dict(_safetensors().load_file(path))
    except FileNotFoundError:
        raise InteropError(f"cannot read {path}: no such file") from None
    except InteropError:
        raise
    except Exception as e:  # a corrupt file fails in many ways: one line
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InteropError(f"{path}: not a readable {fmt} parameter file ({msg})") from None


#: Archive folders ``torch.export.save`` does not write and ``torch.export.load`` may act on.
_FOREIGN = ("data/aotinductor/", "data/executorch/", "data/mtia", "xl_model_weights/")


def load_pt2(path: str) -> Any:
    """``torch.export.load(path)`` after refusing archives it would unpickle (see the module
    docstring); one-line :class:`InteropError` otherwise."""
    where = f"{path}"
    try:
        zf = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise InteropError(f"cannot read {path}: no such file") from None
    except (zipfile.BadZipFile, OSError) as e:
        raise InteropError(f"{where}: not a .pt2 archive ({e})") from None
    try:
        import torch
    except ImportError:
        raise InteropError(
            f"{where}: .pt2 files need PyTorch, an optional extra: pip install "
            "'torchlean-ir[torch]'"
        ) from None
    with zf:
        names = zf.namelist()
        roots = {n.split("/", 1)[0] for n in names}
        if len(roots) != 1:
            raise InteropError(f"{where}: not a .pt2 archive (no single root folder)")
        (root,) = roots
        inner = [n[len(root) + 1 :] for n in names]
        if "models/model.json" not in inner:
            raise InteropError(f"{where}: not a torch.export archive (no models/model.json)")
        for n in inner:
            if n.startswith(_FOREIGN) or (
                n.startswith(("data/weights/", "data/constants/")) and n.endswith(".pt")
            ):
                raise InteropError(
                    f"{where}: holds {n!r}, which torch.export.load would unpickle or load as "
                    "code; refused (load it with torch.export.load yourself if you trust it)"
                )
        for n in inner:
            if not n.endswith(("_weights_config.json", "_constants_config.json")):
                continue
            try:
                config = json.loads(zf.read(f"{root}/{n}")).get("config", {})
            except (ValueError, AttributeError) as e:
                raise InteropError(f"{where}: {n}: not JSON ({e})") from None
            for fqn, meta in config.items():
                file = str(meta.get("path_name", ""))
                if meta.get("use_pickle") or file.startswith(("custom_obj_", "opaque_obj_")):
                    raise InteropError(
                        f"{where}: {fqn!r} is stored pickled ({file}), which torch.export.load "
                        "would unpickle; refused (load it with torch.export.load yourself if "
                        "you trust it)"
                    )
        for n in inner:
            if n.startswith("data/sample_inputs/"):
                try:
                    torch.load(io.BytesIO(zf.read(f"{root}/{n}")), weights_only=True)
                except Exception:
                    raise InteropError(
                        f"{where}: its sample inputs ({n}) need a full unpickler, which "
                        "torch.export.load would fall back to; refused"
                    ) from None
    try:
        return torch.export.load(path)
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InteropError(f"{where}: torch.export.load failed: {msg}") from None


__all__ = ["PARAM_FORMATS", "load_pt2", "read_params", "save_params"]
