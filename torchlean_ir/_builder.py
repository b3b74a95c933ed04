"""The graph builder (TorchLean's ``GraphM``).

::

    b = GraphBuilder()
    x = b.input("x", (4,))
    W = b.param("W", (3, 4))
    bias = b.param("b", (3,))
    y = b.linear(W, bias, x).tanh()
    loss = b.sum(y * y)
    graph = b.build(loss)

Every op of the registry is a method of the builder (``b.tanh(x)``) and of a value
(``x.tanh()``); ``+ - * / @`` and unary ``-`` work on values. The shape rule runs at each call: a
mismatch raises :class:`ShapeError` naming the op, the argument types, what was expected and the
caller's file:line. There is no implicit broadcasting.
"""

from __future__ import annotations

import functools
import numbers
import os
import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

import numpy as np

from ._attrs import AttrError, ConstArray, make_attrs
from ._errors import ShapeError, TorchleanError
from ._graph import Context, GraphData, IndexInput, Leaf, LeafKind, Node, valid_name
from ._registry import get_op, has_op
from ._types import DType, IndexType, TensorType, as_dtype, as_shape, format_shape, is_nat
from ._util import short_repr

#: Directories whose frames are skipped when reporting the user's call site. Front ends built on
#: the builder add their own package directory with :func:`add_internal_dir`.
_INTERNAL_DIRS: set[str] = {os.path.dirname(os.path.abspath(__file__))}


def add_internal_dir(path: str) -> None:
    """Treat frames from files under ``path`` as library code when reporting call sites."""
    _INTERNAL_DIRS.add(os.path.dirname(os.path.abspath(path)) if os.path.isfile(path) else path)
    _is_internal.cache_clear()


@functools.lru_cache(maxsize=1024)
def _is_internal(filename: str) -> bool:
    fname = os.path.abspath(filename)
    return any(fname.startswith(d + os.sep) for d in _INTERNAL_DIRS)


def _call_site(frame: FrameType | None) -> str:
    while frame is not None:
        if not _is_internal(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


def user_call_site() -> str:
    """``file:line`` of the innermost frame outside the library."""
    return _call_site(sys._getframe(1))


class _Site:
    """The user's call site, found only when an error message needs it (``f"at {site}"``)."""

    __slots__ = ("frame",)

    def __init__(self, frame: FrameType) -> None:
        self.frame = frame

    def __str__(self) -> str:
        return _call_site(self.frame)


def is_number(v: object) -> bool:
    """A Python or NumPy real scalar (not a bool): what ``Var`` arithmetic accepts as a constant."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)


# Argument checks of the builder's public calls: each raises a library error naming the call
# and the user's call site (never a raw ValueError, TypeError or OverflowError).


def _scalar(v: object, what: str, site: object) -> float:
    """A real number constant as a Python float (finite or infinite; NaN is refused later by the
    attribute rules, which name it)."""
    if not is_number(v):
        raise TorchleanError(f"{what}: expected a real number, got {short_repr(v)}, at {site}")
    try:
        return float(v)  # type: ignore[arg-type]
    except (OverflowError, ValueError, TypeError):
        raise AttrError(f"{what}: {short_repr(v)} is out of the float range, at {site}") from None


def _shape_arg(shape: object, what: str, site: object) -> tuple[int, ...]:
    try:
        return as_shape(shape)
    except ValueError:
        raise ShapeError(
            f"{what}: shape must be a tuple of non-negative ints, got {short_repr(shape)}, "
            f"at {site}"
        ) from None


def _flag(v: object, what: str, site: object) -> bool:
    if not isinstance(v, bool | np.bool_):
        raise TorchleanError(f"{what} must be True or False, got {short_repr(v)}, at {site}")
    return bool(v)


def _nat_values(value: object, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """``value`` as the static values of an index input of ``shape``, or None if it is not
    naturals (at most ``NAT_MAX``) of that shape."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return None
    if arr.size == 0 and arr.shape == shape:
        return ()  # [] is a float array to NumPy
    if arr.shape != shape:
        return None
    if arr.dtype == object:  # Python ints beyond the int64 range
        flat = arr.reshape(-1).tolist()
    elif np.issubdtype(arr.dtype, np.integer):
        flat = [int(v) for v in arr.reshape(-1).tolist()]
    else:
        return None
    return tuple(flat) if all(is_nat(v) for v in flat) else None


class Operand:
    """The arithmetic of a typed value handle, written once for :class:`Var` and the front end's
    ``torchlean.Tensor``: ``+ - * / @`` and unary ``-``, with a real number on either side (a
    constant of the same shape, or a ``scale``); there is no implicit broadcasting. A subclass
    gives :meth:`_apply` (an op applied to handles) and :meth:`_lift` (a number as a handle of
    this one's shape)."""

    __slots__ = ()

    def _apply(self, op: str, *args: Any, **attrs: Any) -> Any:
        raise NotImplementedError

    def _lift(self, other: Any) -> Any:
        raise NotImplementedError

    def __add__(self, o: Any) -> Any:
        return self._apply("add", self, self._lift(o))

    def __radd__(self, o: Any) -> Any:
        return self._apply("add", self._lift(o), self)

    def __sub__(self, o: Any) -> Any:
        return self._apply("sub", self, self._lift(o))

    def __rsub__(self, o: Any) -> Any:
        return self._apply("sub", self._lift(o), self)

    def __mul__(self, o: Any) -> Any:
        if is_number(o):
            return self._apply("scale", self, c=_scalar(o, "scale", _Site(sys._getframe(1))))
        return self._apply("mul", self, o)

    def __rmul__(self, o: Any) -> Any:
        return self.__mul__(o)

    def __truediv__(self, o: Any) -> Any:
        if is_number(o):
            site = _Site(sys._getframe(1))
            c = _scalar(o, "division", site)
            if c == 0:
                raise AttrError(f"division by the constant {short_repr(o)}, at {site}")
            return self._apply("scale", self, c=1.0 / c)
        return self._apply("mul", self, self._apply("inv", o))

    def __rtruediv__(self, o: Any) -> Any:
        return self._apply("mul", self._lift(o), self._apply("inv", self))

    def __neg__(self) -> Any:
        return self._apply("scale", self, c=-1.0)

    def __matmul__(self, o: Any) -> Any:
        return self._apply("matmul", self, o)

    __hash__ = object.__hash__


class Var(Operand):
    """A value being built: a leaf or a node output of a :class:`GraphBuilder`."""

    __slots__ = ("_builder", "_handle", "type")
    # NumPy scalars on the left (``np.float32(2) * x``) defer to Var's reflected operators.
    __array_ufunc__ = None

    def __init__(self, builder: GraphBuilder, handle: tuple[str, int], type: TensorType) -> None:
        self._builder = builder
        self._handle = handle
        self.type = type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def builder(self) -> GraphBuilder:
        return self._builder

    def __repr__(self) -> str:
        kind, i = self._handle
        name = self._builder._leaves[i].name if kind == "leaf" else f"node{i}"
        return f"Var({name}: {self.type})"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not has_op(name):
            raise AttributeError(f"'Var' has no attribute {name!r} (and no op of that name exists)")

        def method(*args: Any, **attrs: Any) -> Var:
            return self._builder.apply(name, self, *args, **attrs)

        return method

    def _apply(self, op: str, *args: Any, **attrs: Any) -> Var:
        return self._builder.apply(op, *args, **attrs)

    def _lift(self, other: Any) -> Var:
        if isinstance(other, Var):
            return other
        site = _Site(sys._getframe(1))
        if is_number(other):
            return self._builder._full(self.shape, _scalar(other, "constant", site), site)
        raise TorchleanError(f"cannot combine a Var with {type(other).__name__}, at {site}")

    def __bool__(self) -> bool:
        raise TorchleanError(
            "a Var has no truth value (graphs have no data-dependent control flow), "
            f"at {user_call_site()}"
        )


class IndexVar:
    """An index input being built (a nat scalar or vector)."""

    __slots__ = ("_builder", "index", "type")

    def __init__(self, builder: GraphBuilder, index: int, type: IndexType) -> None:
        self._builder = builder
        self.index = index
        self.type = type

    @property
    def name(self) -> str:
        return self._builder._index_inputs[self.index].name

    def __repr__(self) -> str:
        return f"IndexVar({self.name}: {self.type})"


class GraphBuilder:
    """Build a :class:`GraphData` by declaring leaves and calling ops.

    Leaves and index inputs may be declared at any point; in the built graph the leaves come
    first (in declaration order), then the nodes (in call order).

    Parameters
    ----------
    dtype:
        The float dtype of every value (``"f32"`` default, or ``"f64"``).
    """

    def __init__(self, dtype: DType | str = DType.F32) -> None:
        try:
            self.dtype = as_dtype(dtype)
        except (ValueError, TypeError):
            self.dtype = DType.NAT  # refused just below, with the value shown
            dtype = short_repr(dtype)
        if not self.dtype.is_float:
            raise TorchleanError(
                f"builder dtype must be f32 or f64, got {dtype}, at {user_call_site()}"
            )
        self._leaves: list[Leaf] = []
        self._index_inputs: list[IndexInput] = []
        self._nodes: list[Node] = []  # args hold handles until build()
        self._node_args: list[tuple[tuple[str, int], ...]] = []
        self._names: set[str] = set()

    # -- leaves ----------------------------------------------------------------------------
    def _new_name(self, name: str) -> str:
        if not valid_name(name):
            raise TorchleanError(
                f"invalid name {short_repr(name)}: use an identifier (letters, digits, '_', '.'), "
                f"at {user_call_site()}"
            )
        if name in self._names:
            raise TorchleanError(f"name {name!r} is already declared, at {user_call_site()}")
        self._names.add(name)
        return name

    def _leaf(self, name: str, shape: Any, kind: LeafKind, requires_grad: bool) -> Var:
        site = user_call_site()
        shp = _shape_arg(shape, f"{kind} {short_repr(name)}", site)
        rg = _flag(requires_grad, f"{kind} {short_repr(name)}: requires_grad", site)
        leaf = Leaf(self._new_name(name), TensorType(shp, self.dtype), kind, rg)
        self._leaves.append(leaf)
        return Var(self, ("leaf", len(self._leaves) - 1), leaf.type)

    def param(self, name: str, shape: Any, *, requires_grad: bool = True) -> Var:
        """Declare a parameter leaf (receives gradient by default)."""
        return self._leaf(name, shape, "param", requires_grad)

    def input(self, name: str, shape: Any, *, requires_grad: bool = False) -> Var:
        """Declare an input leaf (no gradient unless ``requires_grad=True``)."""
        return self._leaf(name, shape, "input", requires_grad)

    def index(self, name: str, size: int | None = None, *, value: Any = None) -> IndexVar:
        """Declare an index input: a nat scalar (``size=None``) or a nat vector of ``size``.

        With ``value`` the index is baked into the graph (static); otherwise it is supplied at
        each call (a label, gather indices)."""
        site = user_call_site()
        shape: tuple[int, ...] = ()
        if size is not None:
            shape = _shape_arg((size,), f"index {short_repr(name)}: size", site)
        static = None
        if value is not None:
            static = _nat_values(value, shape)
            if static is None:
                raise TorchleanError(
                    f"index {short_repr(name)}: value must be nat{format_shape(shape)} of "
                    f"non-negative ints below 2**63, got {short_repr(value)}, at {site}"
                )
        ix = IndexInput(self._new_name(name), IndexType(shape), static)
        self._index_inputs.append(ix)
        return IndexVar(self, len(self._index_inputs) - 1, ix.type)

    # -- ops -------------------------------------------------------------------------------
    def const(self, value: Any) -> Var:
        """A literal tensor of real numbers (cast to the builder's dtype)."""
        return self._const(value, _Site(sys._getframe(1)))

    def _const(self, value: Any, site: object) -> Var:
        if isinstance(value, ConstArray):
            value = value.to_numpy()
        try:
            arr = np.asarray(value)
            if arr.dtype == object:  # Python ints beyond int64, or anything else
                flat = arr.reshape(-1).tolist()
                if not all(is_number(x) or isinstance(x, bool) for x in flat):
                    raise TypeError
            elif arr.dtype.kind not in "biuf":
                raise TypeError
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(self.dtype.numpy_name)
        except OverflowError:
            raise AttrError(
                f"const: {short_repr(value)} is out of the float range, at {site}"
            ) from None
        except (ValueError, TypeError):
            raise AttrError(
                f"const: value must be a real number or an array of them, got "
                f"{short_repr(value)}, at {site}"
            ) from None
        try:
            attrs = make_attrs("const", get_op("const").attrs, {"value": arr})
        except AttrError as e:
            raise AttrError(f"{e}, at {site}") from None
        return self.apply("const", value=attrs["value"])

    def full(self, shape: Any, value: float) -> Var:
        """A tensor filled with ``value``: a scalar literal, broadcast if ``shape`` is not ()."""
        site = _Site(sys._getframe(1))
        return self._full(shape, _scalar(value, "full", site), site)

    def _full(self, shape: Any, value: float, site: object) -> Var:
        shp = _shape_arg(shape, "full", site)
        c = self._const(np.asarray(value), site)
        return c if shp == () else self.apply("broadcast_to", c, shape=shp)

    def apply(self, op_name: str, *args: Var | IndexVar, **attrs: Any) -> Var:
        """Apply the registered op ``op_name`` to tensor ``Var`` s and ``IndexVar`` s."""
        site = _Site(sys._getframe(1))
        try:
            op = get_op(op_name)
        except TorchleanError as e:
            raise TorchleanError(f"{e}, at {site}") from None
        op_name = op.name
        tensors: list[Var] = []
        indices: list[IndexVar] = []
        for p, a in enumerate(args):
            if isinstance(a, Var):
                if a._builder is not self:
                    raise TorchleanError(
                        f"{op_name}: argument {p} belongs to another builder, at {site}"
                    )
                tensors.append(a)
            elif isinstance(a, IndexVar):
                if a._builder is not self:
                    raise TorchleanError(
                        f"{op_name}: argument {p} belongs to another builder, at {site}"
                    )
                indices.append(a)
            else:
                raise TorchleanError(
                    f"{op_name}: argument {p} must be a Var or IndexVar, got "
                    f"{type(a).__name__} (attributes go by keyword), at {site}"
                )
        try:
            node_attrs = make_attrs(op_name, op.attrs, attrs)
        except AttrError as e:
            raise AttrError(f"{e}, at {site}") from None
        arg_types = tuple(t.type for t in tensors)
        index_types = tuple(i.type for i in indices)
        try:
            out_type = op.infer_type(arg_types, index_types, node_attrs)
        except ShapeError as e:
            shown = ", ".join([str(t) for t in arg_types] + [str(t) for t in index_types])
            raise ShapeError(f"{op_name}({shown}): {e}, at {site}") from None
        if arg_types and out_type.dtype != self.dtype:
            raise ShapeError(
                f"{op_name}: result dtype {out_type.dtype} differs from the builder's "
                f"{self.dtype}, at {site}"
            )
        if not arg_types and out_type.dtype != self.dtype:
            out_type = TensorType(out_type.shape, self.dtype)
            if op_name == "const":
                value = node_attrs["value"].to_numpy()
                node_attrs = make_attrs(
                    op_name, op.attrs, {"value": ConstArray.from_numpy(value, self.dtype)}
                )
            elif "dtype" in op.attrs:  # ops without tensor arguments declare their float dtype
                if "dtype" in attrs:
                    raise ShapeError(
                        f"{op_name}: dtype {attrs['dtype']} differs from the builder's "
                        f"{self.dtype}, at {site}"
                    )
                node_attrs = make_attrs(
                    op_name, op.attrs, {**dict(node_attrs), "dtype": self.dtype.value}
                )
        self._nodes.append(Node(op_name, (), out_type, node_attrs, tuple(i.index for i in indices)))
        self._node_args.append(tuple(t._handle for t in tensors))
        return Var(self, ("node", len(self._nodes) - 1), out_type)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or not has_op(name):
            raise AttributeError(
                f"'GraphBuilder' has no attribute {name!r} (and no op of that name exists)"
            )

        def method(*args: Any, **attrs: Any) -> Var:
            return self.apply(name, *args, **attrs)

        method.__name__ = name
        method.__doc__ = get_op(name).doc
        return method

    @classmethod
    def from_graph(cls, graph: GraphData) -> tuple[GraphBuilder, tuple[Var, ...]]:
        """A builder holding ``graph`` (its leaves, index inputs and nodes) and the
        :class:`Var` of each of its outputs, to build on: add a loss to an imported model,
        another head, more outputs. ``b.build(*outs) == graph``."""
        types = [leaf.type for leaf in graph.leaves] + [n.type for n in graph.nodes]
        b = cls(types[0].dtype if types else DType.F32)
        for leaf in graph.leaves:
            b._new_name(leaf.name)
            b._leaves.append(leaf)
        for ix in graph.index_inputs:
            b._new_name(ix.name)
            b._index_inputs.append(ix)
        n_leaves = len(graph.leaves)

        def handle(v: int) -> tuple[str, int]:
            return ("leaf", v) if v < n_leaves else ("node", v - n_leaves)

        for node in graph.nodes:
            b._nodes.append(Node(node.op, (), node.type, node.attrs, node.index_args))
            b._node_args.append(tuple(handle(a) for a in node.args))
        outs = tuple(Var(b, handle(o), graph.value_type(o)) for o in graph.outputs)
        return b, outs

    # -- build -----------------------------------------------------------------------------
    def build(self, *outputs: Var | Sequence[Var]) -> GraphData:
        """Freeze into a :class:`GraphData` with the given output value(s)."""
        outs: list[Var] = []
        for o in outputs:
            outs.extend(o if isinstance(o, list | tuple) else [o])
        if not outs:
            raise TorchleanError(f"build() needs at least one output, at {user_call_site()}")
        n_leaves = len(self._leaves)

        def vid(handle: tuple[str, int]) -> int:
            kind, i = handle
            return i if kind == "leaf" else n_leaves + i

        nodes = tuple(
            Node(n.op, tuple(vid(h) for h in hs), n.type, n.attrs, n.index_args)
            for n, hs in zip(self._nodes, self._node_args, strict=True)
        )
        for o in outs:
            if not isinstance(o, Var) or o._builder is not self:
                raise TorchleanError(
                    f"build(): outputs must be Vars of this builder, at {user_call_site()}"
                )
        ctx = Context(tuple(self._leaves), tuple(self._index_inputs))
        return GraphData(ctx, nodes, tuple(vid(o._handle) for o in outs))
