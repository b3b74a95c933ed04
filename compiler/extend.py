"""What the layers above build on beyond the compiler's user API, in one public place (as
``jax.extend`` is for JAX; ``torchlean_ir.extend`` is the same for the IR): the eager front end
jits one node at a time with the compiler's own per-node rules, so that an eager step and a
compiled one run the same code.

* :func:`node_rule` - the jitted ``tl_<kind>_<op>`` function (forward, JVP or VJP) of one node
  signature, cached, with :class:`RuleBatching` for its vmapped form;
* :func:`traced_at` - a function traced at a matmul precision (``"float32"``, ``"tf32"``, ...)
  whatever context calls it.
"""

from ._precision import traced_at
from ._rules import RuleBatching, node_rule

__all__ = ["RuleBatching", "node_rule", "traced_at"]
