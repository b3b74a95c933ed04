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

Batched inputs and nats (``batched=True``) record the same per-sample graph an eager session
runs on the batch; ``backward`` runs it batched (``CompiledGraph.batched`` over those leaves and
index inputs, ``grads="sum"`` or ``"mean"``), ``get_value`` evaluates it per sample. Values and
gradients have the session's dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchlean_ir import DType, GraphData, TorchleanError, Var, eval_all
from torchlean_ir.extend import user_call_site

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
        self._nat_batched = []
        self._batch = None
        self._batched_leaves: set[str] = set()
        self._batched_vids: set[int] = set()  # value ids that carry the batch axis

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
        batched: bool = False,
    ) -> Tensor:
        """An input leaf holding ``value`` (``batched=True``: the leading axis is the batch and
        the leaf has the per-sample shape)."""
        if value is None:
            raise TorchleanError(f"input: a LinkedSession needs a value, at {user_call_site()}")
        self._check_leaf_order("input" if name is None else f"input({name!r})")
        try:
            arr = np.array(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise TorchleanError(
                f"input: expected a float array, got {type(value).__name__}, at {user_call_site()}"
            ) from None
        per_sample = self._input_shape(arr.shape, shape, batched)
        t = GraphOps.input(self, name=name, requires_grad=requires_grad, shape=per_sample)
        leaf = self._leaf(t)
        self._values[leaf.name] = arr
        if batched:
            self._batched_leaves.add(leaf.name)
            self._batched_vids.add(self._vid(t._key))
        self._eval_key = None
        return t

    def _add_nat(
        self, value: Any, size: int | None, name: str | None, what: str, batched: bool = False
    ) -> NatRef:
        arr = nat_value(value, size, what, batched)
        if batched:
            self._set_batch(arr.shape[0], what)
        k, iv = self._new_index(size, name)
        ref = NatRef(self, k, iv.type, iv.name, self._gen)
        self._nat_values.append(arr)
        self._nat_refs.append(ref)
        self._nat_batched.append(batched)
        self._nats_changed()
        return ref

    def _is_batched(self, t: Tensor) -> bool:
        return self._vid(self._var(t, "batched")) in self._batched_vids

    def _nats_changed(self) -> None:
        self._nat_version += 1

    # -- ops -------------------------------------------------------------------------------
    def apply(self, op_name: str, *args: Tensor | NatRef, **attrs: Any) -> Tensor:
        self._check_fresh(op_name)
        t = GraphOps.apply(self, op_name, *args, **attrs)
        if self._batch is not None and any(
            self._nat_batched[a._key] if isinstance(a, NatRef) else self._is_batched(a)
            for a in args
        ):
            self._batched_vids.add(self._vid(t._key))
        return t

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

    def _batched_names(self) -> list[str]:
        index = [r.name for r, b in zip(self._nat_refs, self._nat_batched, strict=True) if b]
        return sorted(self._batched_leaves) + index

    def get_value(self, t: Tensor) -> np.ndarray:
        """Evaluate the recorded graph (the reference interpreter, in float64; per sample when
        the graph has batched inputs) and return ``t``'s value in the session's dtype, with the
        recorded leaf values and the current nat environment."""
        v = self._var(t, "get_value")
        key = (self._n_nodes, self._nat_version)
        if self._eval_key != key:
            graph = self._builder.build(v)
            if self._batch is None:
                self._eval_vals = eval_all(graph, self._values, self._index())
            else:
                batched = set(self._batched_names())
                per_sample = []
                for k in range(self._batch):
                    leaves = {n: a[k] if n in batched else a for n, a in self._values.items()}
                    index = {n: a[k] if n in batched else a for n, a in self._index().items()}
                    per_sample.append(eval_all(graph, leaves, index))
                self._eval_vals = [np.stack(vs) for vs in zip(*per_sample, strict=True)]
            self._eval_key = key
        vid = self._vid(v)
        value = self._eval_vals[vid]
        if self._batch is not None and vid not in self._batched_vids:
            value = value[0]  # the same for every sample
        return np.array(value, dtype=self.dtype.numpy_name)

    def compiled(self, t: Tensor) -> Any:
        """The compiled graph (``compiler.compile``) of the recording with output ``t``."""
        return compile_graph(self.graph(t), self.options)

    def backward(self, t: Tensor, seed: Any = None, *, grads: str = "sum") -> None:
        """Run the compiled tape of the recorded graph (output ``t``) backwards: seed 1 for a
        scalar, else the cotangent ``seed``. With batched inputs the graph runs batched
        (``CompiledGraph.batched``): a batched ``t`` is seeded per sample (``seed`` with the
        batch leading) and the other leaves' gradients are summed or averaged over the batch
        (``grads``). Gradients of the leaves are then read with :meth:`grad`."""
        v = self._var(t, "backward")
        if grads not in ("sum", "mean"):
            raise TorchleanError(f"backward: grads must be 'sum' or 'mean', got {grads!r}")
        batched = self._vid(v) in self._batched_vids
        full = (self._batch, *v.type.shape) if batched else v.type.shape
        if seed is None and v.type.shape != ():
            raise TorchleanError(
                f"backward: the output is {v.type}, not a scalar; pass seed= (a cotangent of "
                f"that shape), at {user_call_site()}"
            )
        if seed is not None and tuple(np.shape(seed)) != full:
            want = f"{list(full)} (the batch, then {v.type})" if batched else str(v.type)
            raise TorchleanError(
                f"backward: seed has shape {list(np.shape(seed))}, the output is {want}, at "
                f"{user_call_site()}"
            )
        cg = self.compiled(t)
        if self._batch is None:
            if seed is None:
                out = cg.backward(self._values, self._index())
            else:
                out = cg.vjp_with_seed(self._values, np.asarray(seed), self._index())
        else:
            # an unbatched output is the same for every sample: seed one sample only, so that
            # the per-sample seeds add up to the seed (batched(grads="sum") sums them)
            cg = cg.batched(over=self._batched_names(), grads=grads if batched else "sum")
            if not batched:
                one = np.ones(()) if seed is None else np.asarray(seed)
                seed = np.zeros((self._batch, *v.type.shape))
                seed[0] = one
            elif seed is None:
                seed = np.ones(self._batch)
            out = cg.vjp_with_seed(self._values, np.asarray(seed), self._index())
        dt = self.dtype.numpy_name
        self._grads = {k: np.asarray(g, dtype=dt) for k, g in dict(out).items()}

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
