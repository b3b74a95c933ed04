"""What the layers above build on: the names ``compiler``, ``verify`` and ``torchlean`` (and
anyone extending them) take from ``torchlean_ir`` beyond its user API, in one public place (as
``jax.extend`` is for JAX). The user API is the package itself; the backends' hooks are in
:mod:`torchlean_ir.backends` and the model-file readers in :mod:`torchlean_ir.interop`. No module
outside ``torchlean_ir`` imports one of its private modules (``tests/test_layering.py``).

* call sites: :func:`user_call_site`, :func:`add_internal_dir` (frames under a directory are
  library code when an error names the user's line);
* attributes: :func:`make_attrs`, :data:`REQUIRED`;
* handles: :class:`Operand` (the arithmetic of ``Var`` and ``torchlean.Tensor``, written once),
  :func:`is_number` (what it takes as a constant);
* types and names: :func:`as_dtype`, :func:`as_shape`, :func:`valid_name`;
* interpreters: :func:`at_node` (re-raise with the node printed), :func:`node_params` (a node's
  keyword arguments for its rules);
* text and files: :func:`clip`, :func:`write_atomic`.
"""

from ._attrs import REQUIRED, make_attrs
from ._builder import Operand, add_internal_dir, is_number, user_call_site
from ._graph import valid_name
from ._interpret import at_node, node_params
from ._types import as_dtype, as_shape
from ._util import clip, write_atomic

__all__ = [
    "REQUIRED",
    "Operand",
    "add_internal_dir",
    "as_dtype",
    "as_shape",
    "at_node",
    "clip",
    "is_number",
    "make_attrs",
    "node_params",
    "user_call_site",
    "valid_name",
    "write_atomic",
]
