"""The ops of ``custom_op_plugin.py`` with one classic mistake: log_cosh's VJP uses the
derivative of tanh (1 - tanh^2) instead of tanh. The JVP is right, so only the adjoint check
fails; the verifier reports it with a counterexample::

    torchlean-verify examples/custom_op_graph.json --plugin examples/custom_op_plugin_wrong.py
    # exit 1: node 3: vjp = adjoint: grad x[0] expected ..., got ... at ct[0] = ..., x[0] = ...
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

# Register the correct ops (the file next to this one), then replace one rule.
_here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "custom_op_plugin.py")
_spec = importlib.util.spec_from_file_location("custom_op_plugin", _here)
assert _spec is not None and _spec.loader is not None
plugin = importlib.util.module_from_spec(_spec)
sys.modules["custom_op_plugin"] = plugin
_spec.loader.exec_module(plugin)


def log_cosh_vjp_wrong(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
    t = B.tanh(args[0])
    return ((1 - t * t) * ct,)  # wrong: d/dx log(cosh(x)) is tanh(x)


plugin.log_cosh.vjp_rule = log_cosh_vjp_wrong
