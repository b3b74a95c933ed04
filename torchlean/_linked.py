"""The proof-linked session (TorchLean's ``SessionIR`` / ``LinkedSession``).

The same imperative API as the eager session, but every call records into a
:class:`~torchlean_ir.GraphData` (a well-typed graph plus its leaf values) instead of a runtime
tape:

* leaves (``use``, ``input``) must all come before the first op, the invariant of ``GraphData``
  (leaves first, then nodes); a late leaf is a clear error, and ``reset_tape`` starts a new
  graph;
* ``get_value`` evaluates the recorded graph with the reference interpreter;
* ``backward`` runs the *compiled* tape of the recorded graph (package ``compiler``), the artifact
  the verifier checks: :meth:`LinkedSession.verify` asks it to prove that compiled backward equal
  to the reference ``backprop_ctx`` of the same graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchlean_ir import DType, GraphData, TorchleanError, eval_all
from torchlean_ir._builder import Var, user_call_site

from ._compiled import compile_graph, verify_graph
from ._options import Options
from ._param import Param
from ._record import GraphOps
from ._session import Session, nat_value
from ._tensor import NatRef, Tensor


class LinkedSession(Session, GraphOps):
    """An imperative session that records a graph; see the module docstring.

    ::

        s = LinkedSession(Options(dtype="f64"))
        w = s.use(W)                 # leaves first
        x = s.input(x_value)
        loss = s.mse_loss(s.linear(w, s.use(b), x), s.input(y_value))   # late leaf: an error
    """

    def __init__(self, options: Options | None = None) -> None:
        Session.__init__(self, options)
        self._reset_builder(self.options.float_dtype)
        self._clear()

    def _clear(self) -> None:
        self._values: dict[str, np.ndarray] = {}
        self._grads: dict[str, np.ndarray] | None = None
        self._stepped = False
        self._eval_key: Any = None
        self._eval_vals: list[Any] = []
        self._nat_version = 0
        self._nat_values = []
        self._nat_refs = []

    @property
    def dtype(self) -> DType:
        return self._builder.dtype

    def __repr__(self) -> str:
        return f"LinkedSession({self.dtype}, {len(self._values)} leaves, {self._n_nodes} nodes)"

    # -- invariants --------------------------------------------------------------------------
    def _check_leaf_order(self, what: str) -> None:
        if self._n_nodes:
            raise TorchleanError(
                f"{what}: a LinkedSession records every leaf before the first op, and "
                f"{self._n_nodes} op(s) are recorded already; create all leaves (use / input) "
                f"first, or call reset_tape() to start a new graph, at {user_call_site()}"
            )

    def _check_fresh(self, what: str) -> None:
        if self._stepped:
            raise TorchleanError(
                f"{what}: an optimizer step changed the params recorded in this graph; call "
                f"reset_tape() before the next forward, at {user_call_site()}"
            )

    # -- leaves ----------------------------------------------------------------------------
    def use(self, param: Param) -> Tensor:
        hit = self._used.get(id(param))
        if hit is not None and hit[0] is param:
            self._check_fresh("use")
            return hit[1]
        self._check_fresh("use")
        self._check_leaf_order("use" if param.name is None else f"use({param.name!r})")
        t = GraphOps.use(self, param)
        self._values[self._leaf(t).name] = np.array(param.value)
        self._eval_key = None
        return t

    def input(
        self,
        value: Any = None,
        *,
        name: str | None = None,
        requires_grad: bool = False,
        shape: Any = None,
    ) -> Tensor:
        if value is None:
            raise TorchleanError(f"input: a LinkedSession needs a value, at {user_call_site()}")
        self._check_leaf_order("input" if name is None else f"input({name!r})")
        try:
            arr = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise TorchleanError(
                f"input: expected a float array, got {type(value).__name__}, at {user_call_site()}"
            ) from None
        if shape is not None and tuple(shape) != arr.shape:
            raise TorchleanError(
                f"input: value has shape {list(arr.shape)}, expected {list(shape)}, at "
                f"{user_call_site()}"
            )
        t = GraphOps.input(self, name=name, requires_grad=requires_grad, shape=arr.shape)
        self._values[self._leaf(t).name] = arr
        self._eval_key = None
        return t

    def _add_nat(self, value: Any, size: int | None, name: str | None, what: str) -> NatRef:
        arr = nat_value(value, size, what)
        k, iv = self._new_index(size, name)
        ref = NatRef(self, k, iv.type, iv.name, self._gen)
        self._nat_values.append(arr)
        self._nat_refs.append(ref)
        self._nats_changed()
        return ref

    def _nats_changed(self) -> None:
        self._nat_version += 1

    # -- ops -------------------------------------------------------------------------------
    def apply(self, op_name: str, *args: Tensor | NatRef, **attrs: Any) -> Tensor:
        self._check_fresh(op_name)
        return GraphOps.apply(self, op_name, *args, **attrs)

    # -- the recorded graph ----------------------------------------------------------------
    def _leaf(self, t: Tensor) -> Any:
        kind, i = self._var(t, "leaf")._handle
        return self._builder._leaves[i] if kind == "leaf" else None

    def _vid(self, v: Var) -> int:
        kind, i = v._handle
        return i if kind == "leaf" else len(self._builder._leaves) + i

    def _index(self) -> dict[str, np.ndarray]:
        return {ref.name: v for ref, v in zip(self._nat_refs, self._nat_values, strict=True)}

    def graph(self, *outputs: Tensor) -> GraphData:
        """The recorded graph with the given output(s)."""
        return self.build(*outputs)

    def leaf_values(self) -> dict[str, np.ndarray]:
        """The recorded leaf values, by leaf name (copies)."""
        return {k: v.copy() for k, v in self._values.items()}

    def index_values(self) -> dict[str, np.ndarray]:
        """The current nat environment, by index-input name (copies)."""
        return {k: v.copy() for k, v in self._index().items()}

    def get_value(self, t: Tensor) -> np.ndarray:
        """Evaluate the recorded graph (reference interpreter, float64) and return ``t``'s
        value, with the recorded leaf values and the current nat environment."""
        v = self._var(t, "get_value")
        key = (self._n_nodes, self._nat_version)
        if self._eval_key != key:
            graph = self._builder.build(v)
            self._eval_vals = eval_all(graph, self._values, self._index())
            self._eval_key = key
        return np.array(self._eval_vals[self._vid(v)], dtype=np.float64)

    def compiled(self, t: Tensor) -> Any:
        """The compiled graph (``compiler.compile``) of the recording with output ``t``."""
        return compile_graph(self.graph(t), self.options)

    def backward(self, t: Tensor, seed: Any = None) -> None:
        """Run the compiled tape of the recorded graph (output ``t``) backwards: seed 1 for a
        scalar, else the cotangent ``seed``. Gradients of the leaves are then read with
        :meth:`grad`."""
        v = self._var(t, "backward")
        if seed is None and v.type.shape != ():
            raise TorchleanError(
                f"backward: the output is {v.type}, not a scalar; pass seed= (a cotangent of "
                f"that shape), at {user_call_site()}"
            )
        if seed is not None and tuple(np.shape(seed)) != v.type.shape:
            raise TorchleanError(
                f"backward: seed has shape {list(np.shape(seed))}, the output is {v.type}, at "
                f"{user_call_site()}"
            )
        cg = self.compiled(t)
        if seed is None:
            grads = cg.backward(self._values, self._index())
        else:
            grads = cg.vjp_with_seed(self._values, np.asarray(seed), self._index())
        self._grads = {k: np.asarray(g, dtype=np.float64) for k, g in dict(grads).items()}

    def grad(self, t: Tensor) -> np.ndarray | None:
        """The gradient of the last :meth:`backward` output with respect to leaf ``t``
        (``None`` for a leaf without ``requires_grad``). Only leaves have gradients here: the
        compiled backward returns one cotangent per leaf, like ``backprop_ctx``."""
        leaf = self._leaf(t)
        if leaf is None:
            raise TorchleanError(
                f"grad: a LinkedSession's backward gives gradients of leaves only (use / input), "
                f"not of op results, at {user_call_site()}"
            )
        if self._grads is None:
            raise TorchleanError(f"grad: no backward() since the last reset, at {user_call_site()}")
        if not leaf.requires_grad:
            return None
        return self._grads[leaf.name].copy()

    def verify(self, t: Tensor, **kwargs: Any) -> Any:
        """Ask the verifier to prove that the compiled backward of the recorded graph (output
        ``t``) equals the reference ``backprop_ctx`` (and each op's rules sound). Returns the
        verifier's report; keyword arguments go to the verifier."""
        return verify_graph(self.graph(t), self.options, **kwargs)

    # -- params and the tape ---------------------------------------------------------------
    def used_params(self) -> list[Param]:
        return GraphOps.used_params(self)

    def _param_grads(self) -> list[tuple[Param, Any]]:
        if self._grads is None:
            raise TorchleanError("optimizer step: no backward() since the last reset_tape()")
        out = []
        for p, t in self._used.values():
            if p.requires_grad:
                out.append((p, self._grads[self._leaf(t).name]))
        return out

    def _after_step(self) -> None:
        self._stepped = True

    def reset_tape(self) -> None:
        self._gen += 1
        self._reset_builder(self.options.float_dtype)
        self._clear()
