"""The Torch-style front end: write a model once, run it eagerly or compiled.

* :class:`Ops` - the backend-generic interface model code is written against (every registry op
  is a method, plus derived ops such as :meth:`Ops.gelu`);
* :class:`EagerSession` - ops run at once on a hidden tape (PyTorch-like);
* :class:`GraphOps` - ops record a :class:`~torchlean_ir.GraphData` (the compiled backend);
* :class:`LinkedSession` - the same imperative API over a recorded graph whose backward is the
  compiled tape, which the verifier proves equal to ``backprop_ctx``;
* :class:`Session` - one of the two sessions, picked by :class:`Options`;
* :class:`Param`, :class:`ParamList`, :func:`save_params`, :func:`load_params`;
* :class:`ScalarTrainer` and :class:`Predictor` - training and inference over model code, on
  either backend; :func:`compile_fn` - TorchLean's ``CompiledScalar`` / ``CompiledOut``;
* :mod:`torchlean.nn` - layers (``Linear``, ``Conv2d``, ``LayerNorm``, ...).

See ``docs/tutorial.md``.
"""

from torchlean_ir.extend import add_internal_dir

from . import nn
from ._compiled import (
    CompiledOut,
    CompiledScalar,
    NatInput,
    Traced,
    compile_fn,
    compile_graph,
    trace,
    verify_graph,
)
from ._eager import EagerSession
from ._linked import LinkedSession
from ._ops import Ops, derived
from ._options import Options
from ._param import Param, ParamList, load_params, read_params_file, save_params
from ._plot import plot_losses
from ._record import GraphOps
from ._session import Session
from ._tensor import NatRef, Tensor
from ._trainer import Predictor, ScalarTrainer, scalar_trainer

# Errors name the user's file:line: frames of this package count as library code.
add_internal_dir(__file__)

__all__ = [
    "CompiledOut",
    "CompiledScalar",
    "EagerSession",
    "GraphOps",
    "LinkedSession",
    "NatInput",
    "NatRef",
    "Ops",
    "Options",
    "Param",
    "ParamList",
    "Predictor",
    "ScalarTrainer",
    "Session",
    "Tensor",
    "Traced",
    "compile_fn",
    "compile_graph",
    "derived",
    "load_params",
    "nn",
    "plot_losses",
    "read_params_file",
    "save_params",
    "scalar_trainer",
    "trace",
    "verify_graph",
]
