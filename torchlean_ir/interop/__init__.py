"""Models in and out: PyTorch (``torch.export``) and ONNX import, ONNX export.

::

    from torchlean_ir import interop

    imported = interop.from_onnx("resnet50.onnx")        # or from_torch(torch.export.export(...))
    cg = compiler.compile(imported.graph).batched(over=imported.batched)
    logits = cg.forward({**imported.params, "x": images})
    model = interop.to_onnx(imported.graph, imported.params)   # an onnx.ModelProto
    interop.import_report("model.pt2")   # every op refused, not only the first: Unsupported
    joint = interop.joint_from_torch(model, x, y)   # AOTAutograd's forward + backward, one graph

Graphs are per sample: the source's batch axis becomes the compiler's batching
(``Imported.batched``), not a graph dimension. ``onnx`` and ``torch`` are optional and imported
only by the functions that need them. What maps to what, and what is refused, is in
``docs/interop.md`` (generated from the tables :data:`ONNX_IMPORTS`, :data:`ONNX_EXPORTS` and
:data:`ATEN_IMPORTS`).
"""

from ._common import Imported, Mapping, Unsupported
from ._files import MAX_FILE_BYTES, param_arrays, param_headers, read_file
from ._joint import Joint, joint_from_torch
from ._onnx_export import (
    EXPORT_OPSET,
    NOT_EXPORTED,
    ONNX_EXPORTS,
    OPSET_NEEDED,
    UNBATCHED_ARGS,
    to_onnx,
)
from ._onnx_import import IMPORT_OPSET, ONNX_IMPORTS, ONNX_REFUSED, from_onnx
from ._report import import_report
from ._torch_import import ATEN_IMPORTS, ATEN_REFUSED, from_torch
from ._trace import InteropError

__all__ = [
    "ATEN_IMPORTS",
    "ATEN_REFUSED",
    "EXPORT_OPSET",
    "IMPORT_OPSET",
    "MAX_FILE_BYTES",
    "NOT_EXPORTED",
    "ONNX_EXPORTS",
    "ONNX_IMPORTS",
    "ONNX_REFUSED",
    "OPSET_NEEDED",
    "UNBATCHED_ARGS",
    "Imported",
    "InteropError",
    "Joint",
    "Mapping",
    "Unsupported",
    "from_onnx",
    "from_torch",
    "import_report",
    "joint_from_torch",
    "param_arrays",
    "param_headers",
    "read_file",
    "to_onnx",
]
