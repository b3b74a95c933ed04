"""verify: symbolic proof that the compiled backward equals the reference backprop.

Three links of one chain, checked per op signature (cached) plus a linear pass over the graph:

1. **rules** - each op's reference JVP / VJP equals the exact derivative of its symbolic forward
   (and follows the kink conventions of ``docs/ops.md`` at exact points);
2. **compiled = reference** - the compiler's nested per-node rule jaxprs, interpreted
   symbolically, equal the reference rules; small graphs end to end;
3. **wiring** - the compiled functions' data flow (which cotangent flows to which parent, summed
   on fan-out) equals the reference interpreters'.

::

    import verify
    report = verify.verify_graph(graph)
    print(report)               # a table and the verdict
    assert report.verdict == "verified"

Every result names its method: ``exact``, ``probabilistic`` or ``not verified``; the verdict is
``verified`` only when everything was proved exactly. See ``docs/verification.md``.
"""

from . import prims  # noqa: F401  (registers every primitive's rules)
from ._decide import Decision, decide_equal
from ._functions import (
    FunctionSpecError,
    parse_arg_specs,
    verify_function,
    verify_gradient_outputs,
)
from ._html import render_html
from ._jaxpr import Interpreter, supported_primitives
from ._primitives import Unsupported
from ._report import (
    EXIT_CODES,
    SCHEMA_VERSION,
    Check,
    Counterexample,
    NodeReport,
    Report,
    render_text,
)
from ._rules import check_signature
from ._sig import Signature, index_plan, named_symbols
from ._torch_functions import verify_autograd
from ._verify import WorkerError, clear_caches, verify_graph

__all__ = [
    "EXIT_CODES",
    "SCHEMA_VERSION",
    "Check",
    "Counterexample",
    "Decision",
    "FunctionSpecError",
    "Interpreter",
    "NodeReport",
    "Report",
    "Signature",
    "Unsupported",
    "WorkerError",
    "check_signature",
    "clear_caches",
    "decide_equal",
    "index_plan",
    "named_symbols",
    "parse_arg_specs",
    "render_html",
    "render_text",
    "supported_primitives",
    "verify_autograd",
    "verify_function",
    "verify_gradient_outputs",
    "verify_graph",
]
