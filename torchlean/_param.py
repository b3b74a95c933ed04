"""Trainable parameters (TorchLean's ``Param`` / ``ParamList``) and saving / loading them."""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, overload

import numpy as np

from torchlean_ir import TorchleanError
from torchlean_ir.extend import valid_name, write_atomic
from torchlean_ir.interop import MAX_FILE_BYTES


def _host_array(value: Any, what: str) -> np.ndarray:
    try:
        arr = np.array(value, dtype=np.float64, copy=True)
    except (TypeError, ValueError):
        raise TorchleanError(
            f"{what}: expected a float array, got {type(value).__name__}"
        ) from None
    if not np.all(np.isfinite(arr)):
        raise TorchleanError(f"{what}: the value has a non-finite element")
    arr.flags.writeable = False
    return arr


class Param:
    """A trainable tensor: a name, a value and a ``requires_grad`` flag (PyTorch's
    ``nn.Parameter``; TorchLean's ``Param``).

    A parameter is not part of any computation until a backend *uses* it (``ops.use(p)``), which
    records its current value as a leaf. Optimizer steps replace the value.

    The value lives on the host as a read-only float64 NumPy array. Code that trains on a device
    (the compiled backend, the eager GPU path) keeps a *device-resident mirror* instead and
    updates only that; the host copy is then stale until it is synchronised, which happens
    explicitly with :meth:`sync` and implicitly whenever :attr:`value` is read. Assigning
    :attr:`value` drops the mirror.
    """

    __slots__ = ("_device", "_host", "_host_stale", "name", "requires_grad")

    def __init__(self, value: Any, name: str | None = None, requires_grad: bool = True) -> None:
        if name is not None and not valid_name(name):
            raise TorchleanError(
                f"Param: invalid name {name!r}: use an identifier (letters, digits, '_', '.')"
            )
        self.name = name
        self.requires_grad = bool(requires_grad)
        self._host = _host_array(value, f"Param {name or ''}".strip())
        self._device: Any = None
        self._host_stale = False

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._host.shape)

    @property
    def size(self) -> int:
        return int(self._host.size)

    @property
    def value(self) -> np.ndarray:
        """The current value (read-only float64), synchronised from the device mirror first."""
        self.sync()
        return self._host

    @value.setter
    def value(self, new: Any) -> None:
        arr = _host_array(new, f"Param {self.name or ''}.value".replace(" .", "."))
        if arr.shape != self._host.shape:
            raise TorchleanError(
                f"Param {self.name or ''}: cannot assign a value of shape {list(arr.shape)} to a "
                f"parameter of shape {list(self._host.shape)}"
            )
        self._host = arr
        self._device = None
        self._host_stale = False

    # -- the device-resident mirror --------------------------------------------------------
    @property
    def synced(self) -> bool:
        """Whether the host value is up to date (no pending device update)."""
        return not self._host_stale

    def sync(self) -> None:
        """Copy the device mirror back to the host if the device holds a newer value."""
        if self._host_stale:
            host = np.array(self._device, dtype=np.float64, copy=True)
            host.flags.writeable = False
            self._host = host
            self._host_stale = False

    def device_value(self, device: Any, dtype: Any) -> Any:
        """The value as a JAX array on ``device`` in ``dtype``: the mirror when it is already
        there (on that device alone: a mirror replicated over a mesh is fetched and uploaded
        again), else an upload of the host value (which becomes the mirror)."""
        import jax

        dev = self._device
        if dev is not None and dev.dtype == dtype and dev.devices() == {device}:
            return dev
        self.sync()
        arr = jax.device_put(np.asarray(self._host, dtype=dtype), device)
        self._device = arr
        return arr

    def _set_device(self, arr: Any) -> None:
        """Store a new value computed on the device; the host copy becomes stale."""
        self._device = arr
        self._host_stale = True

    def _set_host(self, arr: np.ndarray) -> None:
        """Store a new value computed on the host (no copy, no checks: internal use)."""
        arr = np.asarray(arr, dtype=np.float64)
        arr.flags.writeable = False
        self._host = arr
        self._device = None
        self._host_stale = False

    def __repr__(self) -> str:
        shape = "[" + ",".join(map(str, self._host.shape)) + "]"
        rg = "" if self.requires_grad else ", requires_grad=False"
        return f"Param({self.name or '?'}: {shape}{rg})"


class ParamList:
    """An ordered collection of uniquely named :class:`Param` s (``model.parameters()``).

    Unnamed params get the names ``p0``, ``p1``, ... (by position). Index by position or by
    name; :meth:`values` / :meth:`set_values` read and write all values at once (checked);
    :meth:`save` / :meth:`load` go through :func:`save_params` / :func:`load_params`.
    """

    def __init__(self, params: Iterable[Param] | Mapping[str, Param] = ()) -> None:
        items: list[Param] = []
        if isinstance(params, Mapping):
            for name, p in params.items():
                if not isinstance(p, Param):
                    raise TorchleanError(f"ParamList: {name!r} is not a Param")
                if p.name is None:
                    p.name = name
                elif p.name != name:
                    raise TorchleanError(f"ParamList: key {name!r} names a param called {p.name!r}")
                items.append(p)
        else:
            items = list(params)
        seen: dict[str, Param] = {}
        for i, p in enumerate(items):
            if not isinstance(p, Param):
                raise TorchleanError(f"ParamList: item {i} is {type(p).__name__}, not a Param")
            if p.name is None:
                p.name = f"p{i}"
            if p.name in seen and seen[p.name] is not p:
                raise TorchleanError(f"ParamList: two different params are named {p.name!r}")
            seen[p.name] = p
        self._params = list(seen.values())

    def __len__(self) -> int:
        return len(self._params)

    def __iter__(self) -> Iterator[Param]:
        return iter(self._params)

    @overload
    def __getitem__(self, key: int) -> Param: ...
    @overload
    def __getitem__(self, key: str) -> Param: ...
    def __getitem__(self, key: int | str) -> Param:
        if isinstance(key, str):
            for p in self._params:
                if p.name == key:
                    return p
            raise KeyError(key)
        return self._params[key]

    def __contains__(self, p: object) -> bool:
        return any(q is p for q in self._params)

    def names(self) -> list[str]:
        return [p.name for p in self._params]  # type: ignore[misc]

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {p.name: p.shape for p in self._params}  # type: ignore[misc]

    def values(self) -> dict[str, np.ndarray]:
        """Every value by name (synchronised from device mirrors)."""
        return {p.name: p.value for p in self._params}  # type: ignore[misc]

    def set_values(self, values: Mapping[str, Any], *, what: str = "set_values") -> None:
        """Overwrite every value; names and shapes must match exactly (nothing is written
        unless everything matches)."""
        checked = _check_state(self, values, what)
        for p in self._params:
            p._set_host(checked[p.name])  # type: ignore[index]

    def num_params(self) -> int:
        """Total number of scalars."""
        return sum(p.size for p in self._params)

    def save(self, path: str | os.PathLike[str]) -> None:
        save_params(self, path)

    def load(self, path: str | os.PathLike[str]) -> None:
        load_params(self, path)

    def __repr__(self) -> str:
        return "ParamList(" + ", ".join(repr(p) for p in self._params) + ")"


def as_param_list(params: ParamList | Iterable[Param] | Mapping[str, Param]) -> ParamList:
    return params if isinstance(params, ParamList) else ParamList(params)


def _check_names(params: ParamList, names: Iterable[str], what: str) -> None:
    have = set(names)
    missing = [n for n in params.names() if n not in have]
    if missing:
        raise TorchleanError(f"{what}: missing parameter {missing[0]!r} ({len(missing)} missing)")
    extra = sorted(have - set(params.names()))
    if extra:
        shown = extra[0] if len(extra[0]) <= 60 else extra[0][:57] + "..."
        raise TorchleanError(f"{what}: unexpected parameter {shown!r} ({len(extra)} unexpected)")


def _check_entry(p: Param, shape: tuple[int, ...], dtype: np.dtype, what: str) -> None:
    if shape != p.shape:
        raise TorchleanError(
            f"{what}: shape mismatch for {p.name!r}: got {list(shape)}, the parameter is "
            f"{list(p.shape)}"
        )
    if not np.issubdtype(dtype, np.floating):
        raise TorchleanError(f"{what}: {p.name!r} has dtype {dtype}, expected a float")


def _check_state(params: ParamList, values: Mapping[str, Any], what: str) -> dict[str, Any]:
    _check_names(params, values, what)
    out: dict[str, Any] = {}
    for p in params:
        v = values[p.name]  # type: ignore[index]
        _check_entry(p, tuple(np.shape(v)), np.asarray(v).dtype, what)
        out[p.name] = _host_array(np.asarray(v), f"{what}: {p.name!r}")  # type: ignore[index]
    return out


# -- files -----------------------------------------------------------------------------------

_FORMATS = (".npz", ".safetensors")


def _format_of(path: str | os.PathLike[str]) -> str:
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in _FORMATS:
        raise TorchleanError(
            f"{os.fspath(path)}: unknown parameter file format {suffix or '(none)'!r}; "
            "use .npz or .safetensors"
        )
    return suffix


def _safetensors_numpy() -> Any:
    try:
        from safetensors import numpy as st
    except ImportError:
        raise TorchleanError(
            "saving .safetensors files needs the safetensors package "
            "(pip install 'torchlean-ir[safetensors]'), or use .npz"
        ) from None
    return st


def save_params(
    params: ParamList | Iterable[Param] | Mapping[str, Param], path: str | os.PathLike[str]
) -> None:
    """Write every parameter (by name, float64) to ``path``: ``.npz`` (NumPy, no pickle) or
    ``.safetensors``. The file is written all or nothing (a full disk or an interruption
    leaves ``path`` as it was)."""
    plist = as_param_list(params)
    # np.asarray, not np.ascontiguousarray: that one makes a 0-d array 1-d (shape [1])
    arrays = {p.name: np.asarray(p.value, order="C") for p in plist}  # type: ignore[misc]
    fmt = _format_of(path)
    if fmt == ".npz":
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]
        data = buf.getvalue()
    else:
        data = _safetensors_numpy().save(arrays, metadata={"format": "torchlean-ir"})
    write_atomic(path, data)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _read(path: str | os.PathLike[str], read: Any, max_bytes: int) -> Any:
    """``read(data, fmt)`` of the file's bytes; a missing file, one that is not a regular file
    (a device, a FIFO) or holds more than ``max_bytes``, and any failure of a corrupt one, as
    one line."""
    from torchlean_ir.interop import read_file

    fmt = _format_of(path)
    where = os.fspath(path)
    data = read_file(where, max_bytes=max_bytes)
    try:
        return read(data, fmt)
    except TorchleanError:
        raise
    except Exception as e:  # a corrupt file can fail in many ways; report it in one line
        raise TorchleanError(
            f"{where}: not a readable {fmt} parameter file ({_one_line(e)})"
        ) from None


def read_params_file(
    path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES
) -> dict[str, np.ndarray]:
    """The arrays stored in a ``.npz`` or ``.safetensors`` parameter file, by name (nothing is
    unpickled). A path that is not a regular file (a device, a FIFO), a file over
    ``max_bytes`` (4 GiB by default) and a ``.npz`` that unpacks to more are refused."""
    from torchlean_ir.interop import param_arrays

    return _read(path, lambda data, fmt: param_arrays(data, fmt, max_bytes), max_bytes)  # type: ignore[no-any-return]


def load_params(
    params: ParamList | Iterable[Param] | Mapping[str, Param],
    path: str | os.PathLike[str],
    *,
    max_bytes: int = MAX_FILE_BYTES,
) -> None:
    """Load every parameter from ``path`` (written by :func:`save_params`). Names, shapes and
    float dtypes must match exactly, and are checked from the file's headers before any array is
    read or unpacked; on any mismatch a one-line :class:`~torchlean_ir.TorchleanError` names it
    and no parameter is changed. The file is read once, as :func:`read_params_file` reads it."""
    from torchlean_ir.interop import param_arrays, param_headers

    plist = as_param_list(params)
    what = f"load_params({os.fspath(path)})"

    def read(data: bytes, fmt: str) -> dict[str, np.ndarray]:
        headers = param_headers(data, fmt)
        _check_names(plist, headers, what)
        for p in plist:
            _check_entry(p, *headers[p.name], what)  # type: ignore[index]
        return param_arrays(data, fmt, max_bytes)

    plist.set_values(_read(path, read, max_bytes), what=what)
