"""The graph-recording backend of :class:`~torchlean.Ops` (TorchLean's ``Ops``
instance for ``GraphM``): each op call adds a node to a :class:`~torchlean_ir.GraphBuilder`
instead of computing a value. This is how the compiled backend turns model code into a
:class:`~torchlean_ir.GraphData`."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchlean_ir import DType, GraphBuilder, GraphData, IndexVar, TorchleanError, Var
from torchlean_ir.extend import as_dtype, as_shape, user_call_site

from ._ops import Ops
from ._options import Options, as_options
from ._param import Param
from ._tensor import NatRef, Tensor


class GraphOps(Ops):
    """Record model code as a graph.

    ::

        g = GraphOps(Options(dtype="f64"))
        x = g.input(name="x", shape=(4,))
        loss = model(g, x)
        graph = g.build(loss)

    Params become ``param`` leaves named after the :class:`Param` (``use`` of the same param
    returns the same leaf), inputs become ``input`` leaves, nat refs become index inputs
    (runtime ones without a value, static ones - baked into the graph - with a value, such as
    the positions ``ops.nat_vec(np.arange(n))`` a model uses). Leaves may be declared at any
    point; in the graph they come first.
    """

    def __init__(self, options: Options | None = None, *, dtype: Any = None) -> None:
        self.options = as_options(options)
        self._gen = 0
        self._reset_builder(as_dtype(dtype or self.options.dtype))

    def _reset_builder(self, dtype: DType) -> None:
        self._builder = GraphBuilder(dtype)
        self._used: dict[int, tuple[Param, Tensor]] = {}
        self._index_vars: list[IndexVar] = []
        self._n_nodes = 0
        self._n_inputs = 0

    @property
    def dtype(self) -> DType:
        return self._builder.dtype

    def _describe(self, t: Tensor) -> str:
        kind, i = t._key._handle
        return f"graph {kind} {i}"

    def _var(self, t: Any, what: str) -> Var:
        if type(t) is not Tensor or t._ops is not self:
            if isinstance(t, Tensor):
                raise TorchleanError(f"{what}: tensor belongs to another session or graph")
            raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t._gen != self._gen:
            raise TorchleanError(
                f"{what}: tensor is from before the last reset_tape(), at {user_call_site()}"
            )
        return t._key  # type: ignore[no-any-return]

    def _index_var(self, ref: NatRef, what: str) -> IndexVar:
        if not isinstance(ref, NatRef) or ref._ops is not self or ref._gen != self._gen:
            raise TorchleanError(f"{what}: not a current NatRef of this graph")
        return self._index_vars[ref._key]

    def _wrap(self, v: Var) -> Tensor:
        return Tensor(self, v, v.type, self._gen)

    # -- leaves ----------------------------------------------------------------------------
    def use(self, param: Param) -> Tensor:
        if not isinstance(param, Param):
            raise TypeError(f"use: expected a Param, got {type(param).__name__}")
        hit = self._used.get(id(param))
        if hit is not None and hit[0] is param:
            return hit[1]
        name = param.name or f"param{len(self._used)}"
        for other, _ in self._used.values():
            if other.name == name:
                raise TorchleanError(
                    f"use: two different params are named {name!r} (give params unique names; "
                    f"Module.parameters() names them by path), at {user_call_site()}"
                )
        t = self._wrap(self._builder.param(name, param.shape, requires_grad=param.requires_grad))
        self._used[id(param)] = (param, t)
        return t

    def input(
        self,
        value: Any = None,
        *,
        name: str | None = None,
        requires_grad: bool = False,
        shape: Any = None,
    ) -> Tensor:
        if shape is None:
            if value is None:
                raise TorchleanError(f"input: give a value or a shape, at {user_call_site()}")
            shape = np.shape(value)
        name = name or f"input{self._n_inputs}"
        self._n_inputs += 1
        return self._wrap(self._builder.input(name, as_shape(shape), requires_grad=requires_grad))

    def _new_index(
        self, size: int | None, name: str | None, value: Any = None
    ) -> tuple[int, IndexVar]:
        k = len(self._index_vars)
        iv = self._builder.index(name or f"nat{k}", size, value=value)
        self._index_vars.append(iv)
        return k, iv

    def nat(self, value: int | None = None, *, name: str | None = None) -> NatRef:
        """A nat scalar index input of the graph: a runtime input (supplied at each call) when
        ``value`` is ``None``, else a static index baked into the graph."""
        k, iv = self._new_index(None, name, value)
        return NatRef(self, k, iv.type, iv.name, self._gen)

    def nat_vec(
        self, values: Any = None, *, size: int | None = None, name: str | None = None
    ) -> NatRef:
        """A nat vector index input of the graph, of ``size`` (or ``len(values)``): runtime
        when ``values`` is ``None``, else static (baked into the graph)."""
        if size is None:
            if values is None:
                raise TorchleanError(f"nat_vec: give a size, at {user_call_site()}")
            size = len(values)
        k, iv = self._new_index(int(size), name, values)
        return NatRef(self, k, iv.type, iv.name, self._gen)

    # -- ops -------------------------------------------------------------------------------
    def apply(self, op_name: str, *args: Tensor | NatRef, **attrs: Any) -> Tensor:
        unwrapped: list[Var | IndexVar] = []
        for p, a in enumerate(args):
            if isinstance(a, NatRef):
                unwrapped.append(self._index_var(a, f"{op_name}: argument {p}"))
            elif isinstance(a, Tensor):
                unwrapped.append(self._var(a, f"{op_name}: argument {p}"))
            else:
                raise TypeError(
                    f"{op_name}: argument {p} must be a Tensor or NatRef, got "
                    f"{type(a).__name__} (attributes go by keyword), at {user_call_site()}"
                )
        v = self._builder.apply(op_name, *unwrapped, **attrs)
        self._n_nodes += 1
        return self._wrap(v)

    # -- result ----------------------------------------------------------------------------
    def used_params(self) -> list[Param]:
        """The params used so far, in order of first use."""
        return [p for p, _ in self._used.values()]

    def build(self, *outputs: Tensor) -> GraphData:
        """The recorded graph with the given output(s)."""
        if not outputs:
            raise TorchleanError(f"build() needs at least one output, at {user_call_site()}")
        return self._builder.build(*[self._var(o, "build") for o in outputs])
