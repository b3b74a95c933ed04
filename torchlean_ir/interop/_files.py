"""Files the interop command line reads and writes: parameter files, ``.pt2`` archives and
ONNX models.

Every file is read by :func:`read_file`: a regular file (symbolic links followed), at most
:data:`MAX_FILE_BYTES` bytes (``max_bytes``); a directory, a device (``/dev/zero``), a FIFO or
a socket is refused from ``os.stat`` before it is opened, so nothing blocks or reads forever.
What a file holds packed is bounded the same way: the members of a ``.npz`` or ``.pt2`` zip
archive may declare at most ``max_bytes`` unpacked in all, and a ``.npz`` array no more than
its member holds; a ``.safetensors`` header no more than the file holds.

Parameter files are ``.safetensors`` (a flat tensor container) or ``.npz`` (read with
``allow_pickle=False``): nothing is unpickled. A ``.pt2`` archive (``torch.export.save``) is
checked before ``torch.export.load`` reads it: ``torch.export.load`` unpickles, with
``weights_only=False``, any weight or constant the archive stores in pickle form (tensor
subclasses, script and opaque objects), its sample inputs when the restricted
``weights_only=True`` load fails, and archives of the legacy layout; it also loads compiled
AOTInductor libraries an archive may hold, and evaluates each symbolic size expression
(``expr_str``) of the program with ``sympy.sympify``, that is Python's ``eval``.
:func:`load_pt2` refuses every such archive (it reads the archive's JSON, allows only size
expressions made of numbers, symbols, arithmetic and SymPy's size functions, and loads the
sample inputs with ``weights_only=True`` itself), and checks every member's CRC, so what
remains for ``torch.export.load`` is intact JSON and raw tensor bytes. Torch's and ONNX's
warnings and log records during a load are kept from the terminal: a failure is one line.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import json
import logging
import math
import os
import re
import stat
import struct
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from .._util import clip
from ._trace import InteropError

PARAM_FORMATS = (".safetensors", ".npz")

#: The largest model or parameter file read, in bytes, and the most the members of a ``.npz``
#: or ``.pt2`` archive may unpack to. A graph file's limit (``Limits.max_bytes``, 256 MiB) is
#: smaller: weights are binary, four or eight bytes each (GPT-2's 124M float32 weights take
#: 500 MB). ``torchlean import --max-bytes N`` and the functions' ``max_bytes`` change it.
MAX_FILE_BYTES = 1 << 32


# -- reading a file ----------------------------------------------------------------------------

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(path: str, mode: int) -> InteropError:
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    shown = clip(path)
    real = os.path.realpath(path)
    if real != os.path.abspath(path):
        shown += f" (a link to {clip(real)})"
    return InteropError(f"{shown}: not a regular file but {kind}; refused")


def read_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (symbolic links followed), if it holds at most
    ``max_bytes``; a one-line :class:`InteropError` naming the path otherwise.

    A path that is not a regular file is refused from ``os.stat``, before anything opens it
    (opening a FIFO waits for a writer; a device may be endless). The file is then opened
    without waiting and checked again, so one swapped in between is refused too; its size is
    checked before it is read (as ``load`` does for a graph file), and one that grows or
    shrinks meanwhile is refused."""
    name = os.fspath(path)
    shown = clip(str(name))
    try:
        mode = os.stat(name).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, mode)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with open(fd, "rb") as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise _not_regular(name, info.st_mode)
            size = info.st_size
            if size <= max_bytes:  # a byte more than stat said: a file that grew is noticed
                data = f.read(size + 1)
    except FileNotFoundError:
        raise InteropError(f"cannot read {shown}: no such file") from None
    except (OSError, ValueError) as e:  # ValueError: a NUL or an unencodable character
        raise InteropError(f"cannot read {shown}: {getattr(e, 'strerror', None) or e}") from None
    if size > max_bytes:
        raise InteropError(f"{shown}: file of {size} bytes exceeds the limit {max_bytes}")
    if len(data) != size:
        raise InteropError(f"cannot read {shown}: it changed while it was read")
    return data


@contextlib.contextmanager
def quiet_loaders(*modules: str) -> Iterator[list[logging.LogRecord]]:
    """Python warnings, and torch's and onnx's log records, kept from the terminal while a
    model is loaded: the records are collected in the list yielded (a failure's cause may be
    in one). ``modules`` (``"torch.export"``) are imported first, where installed: torch gives
    its loggers their own handlers as it is imported, and these are held back too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for module in modules:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = _Keep()
    tops = (
        "torch",
        "onnx",
        "onnxscript",
        "strobelight_function_profiler",
        "strobelight_compile_time_profiler",
    )
    names = [
        n for n in logging.Logger.manager.loggerDict if n.startswith(tuple(f"{t}." for t in tops))
    ]
    saved = []
    for n in (*tops, *names):
        logger = logging.getLogger(n)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [keep] if n in tops else []
        logger.propagate = n not in tops
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield records
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return clip(" ".join(text.split()))


# -- parameter files ----------------------------------------------------------------------------


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


def _unpacked(z: zipfile.ZipFile, max_bytes: int) -> None:
    """Refuse an archive whose members declare more than ``max_bytes`` unpacked (a zip bomb);
    reading a member stops at its declared size."""
    total = sum(info.file_size for info in z.infolist())
    if total > max_bytes:
        raise ValueError(f"its members unpack to {total} bytes, over the limit {max_bytes}")


#: safetensors dtype names -> NumPy (the float ones; anything else reads as not a float)
_SAFETENSORS_DTYPES = {"F16": "float16", "F32": "float32", "F64": "float64"}


def _safetensors_header(data: bytes) -> dict[str, Any]:
    if len(data) < 8:
        raise ValueError(f"{len(data)} bytes, too short for a header")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"a header of {n} bytes in a file of {len(data)} bytes")
    header = json.loads(data[8 : 8 + n])
    if not isinstance(header, dict):
        raise ValueError("the header is not a JSON object")
    return {k: v for k, v in header.items() if k != "__metadata__"}


def param_headers(data: bytes, fmt: str) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Name -> (shape, dtype) of every array of a parameter file's bytes, from its headers
    only (no array is read or unpacked: a huge declared array costs nothing). Raises whatever
    a malformed file raises (the caller says it in one line)."""
    out: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
    if fmt == ".npz":
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            for info in z.infolist():
                name = info.filename.removesuffix(".npy")
                if name in out:  # two members of one name: which one is meant?
                    raise ValueError(f"the array {name[:60]!r} is stored twice")
                with z.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(f)
                    else:
                        shape, _, dtype = np.lib.format.read_array_header_2_0(f)
                out[name] = (tuple(shape), dtype)
        return out
    for name, entry in _safetensors_header(data).items():
        dtype = np.dtype(_SAFETENSORS_DTYPES.get(entry["dtype"], "O"))
        out[name] = (tuple(int(d) for d in entry["shape"]), dtype)
    return out


def param_arrays(data: bytes, fmt: str, max_bytes: int = MAX_FILE_BYTES) -> dict[str, np.ndarray]:
    """The arrays of a parameter file's bytes by name (nothing is unpickled; a ``.npz`` unpacks
    to at most ``max_bytes``, and no array to more than its member holds). Raises whatever a
    malformed file raises (the caller says it in one line)."""
    if fmt != ".npz":
        _safetensors_header(data)  # its length checked against the file's, here and in Rust
        return dict(_safetensors().load(data))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        _unpacked(z, max_bytes)
        headers = param_headers(data, fmt)
        for info in z.infolist():
            shape, dtype = headers[info.filename.removesuffix(".npy")]
            need = math.prod(shape) * dtype.itemsize
            if need > info.file_size:
                raise ValueError(
                    f"{info.filename[:60]!r} declares {need} bytes of data in a member of "
                    f"{info.file_size}"
                )
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: np.asarray(npz[k]) for k in npz.files}


def read_params(path: str, *, max_bytes: int = MAX_FILE_BYTES) -> dict[str, np.ndarray]:
    """The arrays of a ``.safetensors`` or ``.npz`` file by name (nothing is unpickled; see the
    module docstring for what is refused)."""
    fmt = _format(path, "--params")
    data = read_file(path, max_bytes=max_bytes)
    try:
        return param_arrays(data, fmt, max_bytes)
    except Exception as e:  # a corrupt file fails in many ways: one line
        raise InteropError(
            f"{clip(path)}: not a readable {fmt} parameter file ({_first_line(e)})"
        ) from None


# -- .pt2 archives ------------------------------------------------------------------------------

#: Archive folders ``torch.export.save`` does not write and ``torch.export.load`` may act on.
_FOREIGN = ("data/aotinductor/", "data/executorch/", "data/mtia", "xl_model_weights/")

#: What a size expression (``expr_str``) may call: SymPy's and torch's size functions; not those
#: that shift or raise to any power (``PowByNatural``, ``LShift``: results as large as memory).
_SYM_FUNCTIONS = frozenset(
    """Symbol Integer Rational Float Add Mul Pow Max Min Mod Abs Eq Ne Lt Le Gt Ge Equality
    Unequality StrictLessThan LessThan StrictGreaterThan GreaterThan And Or Not BooleanTrue
    BooleanFalse floor ceiling Piecewise ExprCondPair FloorDiv ModularIndexing Where PythonMod
    CleanDiv CeilToInt FloorToInt CeilDiv FloatTrueDiv IntTrueDiv TruncToFloat TruncToInt
    RoundToInt ToFloat IsNonOverlappingAndDenseIndicator""".split()  # noqa: SIM905 (a table, one word per name)
)
_SYM_CONSTANTS = frozenset({"True", "False", "oo", "zoo", "nan", "true", "false"})
#: torch's symbol names: s0, u1, zuf0, ...
_SYM_NAME = re.compile(r"[a-z]{1,4}[0-9]{1,9}\Z")
#: A number as SymPy's ``srepr`` writes a float: ``Float('1.5', precision=53)``.
_NUMBER = re.compile(r"[-+]?[0-9]{1,40}(\.[0-9]{0,40})?(e[-+]?[0-9]{1,3})?\Z")
_SYM_NODES = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.Tuple,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.keyword,
)
_MAX_EXPR = 10_000


def _is_pow(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Pow)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Pow"


def _small_int(node: ast.AST, limit: int) -> bool:
    """``node`` is a literal int (``n`` or ``Integer(n)``) in ``[0, limit]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Integer":
        node = node.args[0] if len(node.args) == 1 and not node.keywords else node
    return isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= limit


def _sym_expr_refused(text: str) -> str | None:
    """Why ``sympy.sympify(text)`` is not safe to run (``None`` when it is): only numbers,
    symbol names, arithmetic and comparisons, and calls of :data:`_SYM_FUNCTIONS` (SymPy's
    ``srepr`` form included) with assumptions as keywords; a power only with a constant
    exponent of at most 64 and a base without a power (results stay small); no attributes,
    subscripts, other names, lambdas."""
    if len(text) > _MAX_EXPR:
        return f"longer than {_MAX_EXPR} characters"
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "not an expression"
    for node in ast.walk(tree):
        if _is_pow(node):
            if isinstance(node, ast.BinOp):
                base, power = node.left, node.right
            elif isinstance(node, ast.Call) and len(node.args) == 2 and not node.keywords:
                base, power = node.args
            else:
                return "a power other than a small constant one"
            if not _small_int(power, 64) or any(_is_pow(n) for n in ast.walk(base)):
                return "a power other than a small constant one"
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _SYM_FUNCTIONS):
                return "a call of something other than a size function"
            for kw in node.keywords:
                if not (kw.arg and kw.arg.isalpha() and isinstance(kw.value, ast.Constant)):
                    return "an argument other than an assumption"
                if not (type(kw.value.value) is bool or _small_int(kw.value, 1024)):
                    return "an argument other than an assumption"
        elif isinstance(node, ast.Name):
            if not (
                node.id in _SYM_FUNCTIONS or node.id in _SYM_CONSTANTS or _SYM_NAME.match(node.id)
            ):
                return f"the name {clip(node.id, 40)!r}"
        elif isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, str) and not (_SYM_NAME.match(v) or _NUMBER.match(v)):
                return "a string other than a symbol's name or a number"
            if type(v) is int and v.bit_length() > 64:
                return "an integer of more than 64 bits"
            if not isinstance(v, bool | int | float | str):
                return "a constant other than a number or a name"
        elif not isinstance(node, _SYM_NODES):
            return f"{type(node).__name__} syntax"
    return None


def _check_expressions(value: Any, where: str, member: str) -> None:
    """Every ``expr_str`` of a decoded JSON document is a safe size expression."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            for k, x in v.items():
                if k == "expr_str":
                    why = _sym_expr_refused(x) if isinstance(x, str) else "not a string"
                    if why is not None:
                        raise InteropError(
                            f"{where}: {member}: the size expression {clip(repr(x), 80)}, which "
                            f"torch.export.load would evaluate, holds {why}; refused"
                        )
                else:
                    stack.append(x)
        elif isinstance(v, list):
            stack.extend(v)


def _check_archive(zf: zipfile.ZipFile, where: str, max_bytes: int) -> None:
    """Refuse what ``torch.export.load`` would unpickle or evaluate, and a corrupt archive."""
    import torch

    names = zf.namelist()
    if len(set(names)) != len(names):  # which copy would torch read?
        raise InteropError(f"{where}: not a .pt2 archive (a member stored twice)")
    root = names[0].split("/", 1)[0] if names else ""
    if not root or not all(n.startswith(f"{root}/") for n in names):
        raise InteropError(f"{where}: not a .pt2 archive (no single root folder)")
    inner = [n[len(root) + 1 :] for n in names]
    if "models/model.json" not in inner:
        raise InteropError(f"{where}: not a torch.export archive (no models/model.json)")
    _unpacked(zf, max_bytes)
    bad = zf.testzip()  # every member read once: a CRC error (a flipped bit) is caught here
    if bad is not None:
        raise InteropError(f"{where}: a corrupt .pt2 archive (bad CRC-32 for {clip(bad, 80)!r})")
    for n in inner:
        if n.startswith(_FOREIGN) or (
            n.startswith(("data/weights/", "data/constants/")) and n.endswith(".pt")
        ):
            raise InteropError(
                f"{where}: holds {n!r}, which torch.export.load would unpickle or load as "
                "code; refused (load it with torch.export.load yourself if you trust it)"
            )
    for n in inner:
        if not n.endswith(".json"):
            continue
        try:
            doc = json.loads(zf.read(f"{root}/{n}"))
        except (ValueError, RecursionError) as e:
            raise InteropError(f"{where}: {n}: not JSON ({_first_line(e)})") from None
        _check_expressions(doc, where, n)
        if not n.endswith(("_weights_config.json", "_constants_config.json")):
            continue
        config = doc.get("config", {}) if isinstance(doc, dict) else None
        if not isinstance(config, dict):
            raise InteropError(f"{where}: {n}: not a weights config")
        for fqn, meta in config.items():
            if not isinstance(meta, dict):
                raise InteropError(f"{where}: {n}: not a weights config")
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


def load_pt2(path: str, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """``torch.export.load`` of the file's bytes after refusing archives it would unpickle or
    evaluate, and corrupt ones (see the module docstring); one-line :class:`InteropError`
    otherwise, and nothing printed."""
    where = clip(path)
    data = read_file(path, max_bytes=max_bytes)
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except Exception as e:  # BadZipFile, and what a corrupt directory raises
        raise InteropError(f"{where}: not a .pt2 archive ({_first_line(e)})") from None
    with quiet_loaders("torch.export") as records, zf:
        try:
            import torch.export
        except ImportError:
            raise InteropError(
                f"{where}: .pt2 files need PyTorch, an optional extra: pip install "
                "'torchlean-ir[torch]'"
            ) from None
        try:
            _check_archive(zf, where, max_bytes)
        except InteropError:
            raise
        except Exception as e:  # a corrupt member fails in many ways: one line
            raise InteropError(f"{where}: a corrupt .pt2 archive ({_first_line(e)})") from None
        try:
            data = _plain_specs(zf, data)
        except Exception as e:  # JSON that passed the checks but is not a program's
            raise InteropError(f"{where}: a corrupt .pt2 archive ({_first_line(e)})") from None
        try:
            return torch.export.load(io.BytesIO(data))
        except Exception as e:
            # torch logs the first error and raises a second one pointing at the log
            causes = [r.exc_info[1] for r in records if r.exc_info and r.exc_info[1]]
            msg = _first_line(causes[0] if causes else e)
            raise InteropError(f"{where}: torch.export.load failed: {msg}") from None


def _plain_specs(zf: zipfile.ZipFile, data: bytes) -> bytes:
    """The archive with every input and output structure of a type this process has not
    registered with PyTorch's pytree (``transformers``' ``CausalLMOutputWithPast``, a model
    output dataclass) read as a tuple of the same leaves, so that loading it imports nothing:
    the importer reads the program's flat inputs and outputs, not their Python structure.
    Unchanged (the same bytes) when every type is known."""
    from torch.utils import _pytree as pytree

    known = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE

    def plain(node: Any) -> bool:
        changed = False
        if isinstance(node, dict):
            t = node.get("type")
            if isinstance(t, str) and t not in known:
                node["type"], node["context"] = "builtins.tuple", "null"
                changed = True
            for child in node.get("children_spec") or ():
                changed = plain(child) or changed
        return changed

    def walk(obj: Any) -> bool:
        changed = False
        if isinstance(obj, dict):
            for k, v in obj.items():
                if k in ("in_spec", "out_spec") and isinstance(v, str):
                    spec = json.loads(v)
                    if isinstance(spec, list) and len(spec) == 2 and plain(spec[1]):
                        obj[k] = json.dumps(spec)
                        changed = True
                else:
                    changed = walk(v) or changed
        elif isinstance(obj, list):
            for v in obj:
                changed = walk(v) or changed
        return changed

    models = [n for n in zf.namelist() if n.endswith(".json") and "/models/" in n]
    rewritten = {}
    for n in models:
        doc = json.loads(zf.read(n))
        if walk(doc):
            rewritten[n] = json.dumps(doc).encode()
    if not rewritten:
        return data
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as new:
        for info in zf.infolist():
            new.writestr(info, rewritten.get(info.filename, zf.read(info)))
    return out.getvalue()


# -- ONNX models --------------------------------------------------------------------------------


def load_onnx(path: str, *, max_bytes: int = MAX_FILE_BYTES) -> Any:
    """The ``onnx.ModelProto`` in the file at ``path``, read as :func:`read_file` reads, checked
    by ``onnx.checker`` and ONNX's strict shape inference (a Gemm of a vector is refused here,
    not half-way through the import), with its external data (which ONNX reads from beside it
    and checks); one-line :class:`InteropError` otherwise, and nothing printed."""
    import onnx
    from onnx import external_data_helper

    data = read_file(path, max_bytes=max_bytes)
    where = clip(path)
    with quiet_loaders("onnx"):
        try:
            model = onnx.load_from_string(data)
        except Exception as e:  # protobuf's DecodeError and friends
            raise InteropError(
                f"from_onnx: {where}: not an ONNX model ({_first_line(e)})"
            ) from None
        base = os.path.dirname(os.path.abspath(path))
        external = any(
            external_data_helper.uses_external_data(t)
            for t in external_data_helper._get_all_tensors(model)
        )
        try:  # before its external data is loaded: both serialize the model
            # the checker looks for external data files (torch.onnx.export writes the weights
            # to MODEL.onnx.data) from the working directory: the model's own, meanwhile
            with contextlib.chdir(base) if external else contextlib.nullcontext():
                onnx.checker.check_model(model)
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        except Exception as e:
            raise InteropError(
                f"from_onnx: {where}: not a valid ONNX model ({_first_line(e)})"
            ) from None
        try:
            external_data_helper.load_external_data_for_model(model, base)
        except Exception as e:
            raise InteropError(
                f"from_onnx: {where}: cannot load its external data ({_first_line(e)})"
            ) from None
        _check_tensors(model, f"from_onnx: {where}")
    return model


def _check_tensors(model: Any, where: str) -> None:
    """What the checker lets through and the importer reads: every initializer holds the data
    its type and dimensions declare, every graph input is a tensor of a known element type."""
    from onnx import helper, numpy_helper

    for t in model.graph.initializer:
        try:
            numpy_helper.to_array(t)
        except Exception as e:
            raise InteropError(
                f"{where}: initializer {clip(t.name, 60)!r} does not hold the data it declares "
                f"({_first_line(e)})"
            ) from None
    for vi in model.graph.input:
        try:
            if vi.type.WhichOneof("value") != "tensor_type":
                raise ValueError("not a tensor")
            helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        except Exception:
            raise InteropError(
                f"{where}: input {clip(vi.name, 60)!r} is not a tensor of a known element type"
            ) from None


__all__ = [
    "MAX_FILE_BYTES",
    "PARAM_FORMATS",
    "load_onnx",
    "load_pt2",
    "param_arrays",
    "param_headers",
    "quiet_loaders",
    "read_file",
    "read_params",
    "save_params",
]
