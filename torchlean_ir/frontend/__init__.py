"""The Torch-style front end: write a model once, run it eagerly or compiled.

* :class:`Ops` - the backend-generic interface model code is written against (every registry op
  is a method, plus derived ops such as :meth:`Ops.gelu`);
* :class:`EagerSession` - ops run at once on a hidden tape (PyTorch-like);
* :class:`GraphOps` - ops record a :class:`~torchlean_ir.GraphData` (the compiled backend);
* :class:`LinkedSession` - the imperative API over a recorded graph whose backward is the
  compiled tape, provable equal to ``backprop_ctx``;
* :class:`Session` - picks one of the two sessions from :class:`Options`;
* :class:`Param`, :class:`ParamList`, :func:`save_params`, :func:`load_params`.
"""

from ._eager import EagerSession
from ._ops import Ops, derived
from ._options import Options
from ._param import Param, ParamList, load_params, read_params_file, save_params
from ._record import GraphOps
from ._session import Session
from ._tensor import NatRef, Tensor

__all__ = [
    "EagerSession",
    "GraphOps",
    "NatRef",
    "Ops",
    "Options",
    "Param",
    "ParamList",
    "Session",
    "Tensor",
    "derived",
    "load_params",
    "read_params_file",
    "save_params",
]
