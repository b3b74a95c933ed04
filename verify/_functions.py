"""Verifying the gradients people write: JAX functions, ``custom_vjp`` / ``custom_jvp`` rules.

For a JAX-traceable ``f`` and example arguments (what matters is their shapes and dtypes), the
verifier reads three jaxprs and interprets them at tensor level (:mod:`verify._tjaxpr`, one
symbolic element for every element):

* the **forward** ``jax.make_jaxpr(f)``: a ``custom_vjp`` / ``custom_jvp`` function is read as
  the primal function it stands for (its ``call_jaxpr``), so the forward is what ``f`` computes;
* the **VJP** ``jax.vjp(f, *xs)[1]`` as JAX runs it (a user's backward rule traced in);
* the **JVP** ``jax.jvp(f, ...)`` (not for a function that holds a ``custom_vjp``, which JAX
  does not differentiate forward).

The reference derivative is our own: the forward's terms differentiated symbolically
(:func:`verify.terms.jvp_term`), and the adjoint as the coefficient of each tangent in
``sum ct * jvp`` (:func:`verify._tchecks.adjoint_expected`). JAX's differentiation is the thing
under test, never the oracle.

``stop_gradient``: JAX's derivative treats a stopped value as a constant. Each stopped value of
the forward is read as a free leaf; the check "stop_gradient ... does not change the derivative"
proves that the forward does not depend on it (its derivative in that leaf is 0 for every
element, as for the max shift of a stable softmax or logsumexp), and the reference derivative
then holds it constant. With ``stop_gradient="constant"`` the neutrality is not asked: the
reference is the derivative with the stopped values held constant (JAX's documented meaning).

Each ``custom_vjp`` / ``custom_jvp`` call met in the forward is also checked on its own, at the
argument shapes of that call: the user's rule against the derivative of its primal function.

Everything is "not verified" with its reason, never passed, where the interpreter does not
follow a construct (the primitive and the user's source line named) or a decision ran out of
its budget.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

import jax
import numpy as np
import symengine as se
from jax._src import source_info_util

from . import _tensor as TT
from . import prims  # noqa: F401  (registers every primitive's rules)
from . import terms as T
from ._attempt import TENSOR_BUDGET_S
from ._f32 import round_f32
from ._kinks import (
    KinkChoice,
    KinkSite,
    conventional,
    even_ties,
    kink_choices,
    kink_sites,
)
from ._primitives import Unsupported
from ._report import Check, NodeReport, Report
from ._tchecks import (
    NotTensor,
    TOutcome,
    TSetup,
    adjoint_expected,
    compare,
    nat_scalar,
    nat_vector,
)
from ._tensor import TArray, leaf
from ._tjaxpr import TInterpreter, concrete

StopGradient = Literal["prove", "constant"]
Kinks = Literal["one-sided", "convention"]

# the user's source line of an equation is the first frame outside JAX and outside verify
source_info_util.register_exclusion(os.path.dirname(__file__))

_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
           "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8",
           "u32": "uint32", "bool": "bool"}  # fmt: skip
_SPEC = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,\s]*)\]\s*$")


class FunctionSpecError(ValueError):
    """An argument specification or an example argument the verifier cannot use."""


def parse_arg_specs(text: str) -> list[jax.ShapeDtypeStruct]:
    """``"f32[1024,64] f32[64] i32[]"`` -> shapes and dtypes (whitespace separated)."""
    out = []
    for k, tok in enumerate(text.split()):
        m = _SPEC.match(tok)
        if m is None or m.group(1) not in _DTYPES:
            raise FunctionSpecError(
                f"argument {k} {tok!r}: expected dtype[dims], e.g. f32[1024,64] or f32[] "
                f"(dtypes: {', '.join(_DTYPES)})"
            )
        dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
        out.append(jax.ShapeDtypeStruct(dims, np.dtype(_DTYPES[m.group(1)])))
    if not out:
        raise FunctionSpecError("no argument specifications given")
    return out


# -- the arguments ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Args:
    """The example arguments, flattened: the float leaves are the symbolic inputs (by name), the
    integer leaves symbolic index inputs (every value in their range), every other leaf a
    constant closed over."""

    names: tuple[str, ...]
    avals: tuple[jax.ShapeDtypeStruct, ...]
    positions: tuple[int, ...]  # of the float leaves among all leaves
    index: tuple[tuple[str, jax.ShapeDtypeStruct, int], ...]  # name, aval, values 0..hi-1
    index_positions: tuple[int, ...]
    fixed: dict[int, Any]  # the other leaves' values, by position
    tree: Any

    def call(self, f: Callable[..., Any]) -> Callable[..., list[Any]]:
        """``f`` as a function of the float leaves then the integer leaves, returning its flat
        float outputs."""
        n = len(self.positions)

        def flat(*xs: Any) -> list[Any]:
            leaves: list[Any] = [None] * (n + len(self.index_positions) + len(self.fixed))
            for p, x in zip((*self.positions, *self.index_positions), xs, strict=True):
                leaves[p] = x
            for p, v in self.fixed.items():
                leaves[p] = v
            out = f(*jax.tree_util.tree_unflatten(self.tree, leaves))
            return [o for o in jax.tree_util.tree_leaves(out) if _is_float(o)]

        return flat


def _is_float(x: Any) -> bool:
    dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
    return np.dtype(dtype).kind == "f"


def _ident(text: str) -> str:
    s = re.sub(r"[^0-9A-Za-z]+", "_", text).strip("_") or "x"
    return s if s[0].isalpha() else "x" + s


def _arg_names(f: Callable[..., Any], n: int) -> list[str]:
    try:
        params = [p.name for p in inspect.signature(f).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    except (TypeError, ValueError):
        params = []
    return [params[k] if k < len(params) else f"arg{k}" for k in range(n)]


#: The values an integer argument ranges over by default: every int32 value JAX can index with
#: that is not negative (``index_ranges`` narrows it).
INDEX_VALUES = 2**31


def _flatten_args(f: Callable[..., Any], args: Sequence[Any], argnames: Sequence[str] | None,
                  index_ranges: Mapping[str, int] | None = None) -> _Args:  # fmt: skip
    top = list(argnames) if argnames is not None else _arg_names(f, len(args))
    if len(top) != len(args):
        raise FunctionSpecError(f"{len(top)} argument names for {len(args)} arguments")
    ranges = dict(index_ranges or {})
    with_path, tree = jax.tree_util.tree_flatten_with_path(tuple(args))
    names: list[str] = []
    avals = []
    positions = []
    index: list[tuple[str, jax.ShapeDtypeStruct, int]] = []
    index_positions = []
    fixed: dict[int, Any] = {}
    taken = {"ct", "y"}
    for p, (path, x) in enumerate(with_path):
        k = path[0].idx  # type: ignore[attr-defined]
        rest = jax.tree_util.keystr(path[1:]) if len(path) > 1 else ""
        label = f"{top[k]}{rest}"
        shape = tuple(getattr(x, "shape", np.shape(x)))
        dtype = np.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
        if dtype.kind in "fiu":
            name = _ident(label)
            while name in taken or (name.startswith("d") and name[1:] in taken):
                name += "_"
            taken.add(name)
        if dtype.kind == "f":
            names.append(name)
            avals.append(jax.ShapeDtypeStruct(shape, dtype))
            positions.append(p)
            continue
        if dtype.kind in "iu":
            hi = ranges.pop(name, ranges.pop(label, INDEX_VALUES))
            if not isinstance(hi, int) or hi < 1:
                raise FunctionSpecError(f"index_ranges[{name!r}] must be a positive int, got "
                                        f"{hi!r}")  # fmt: skip
            index.append((name, jax.ShapeDtypeStruct(shape, dtype), hi))
            index_positions.append(p)
            continue
        if isinstance(x, jax.ShapeDtypeStruct):
            raise FunctionSpecError(f"argument {label} ({dtype}{list(shape)}): a {dtype} "
                                    "argument needs its value (pass an array): it is read as a "
                                    "constant")  # fmt: skip
        fixed[p] = np.asarray(x)
    if ranges:
        raise FunctionSpecError(f"index_ranges names {sorted(ranges)}, not integer arguments "
                                f"(those are {[i[0] for i in index]})")  # fmt: skip
    if not names:
        raise FunctionSpecError("no floating-point argument: nothing to differentiate")
    return _Args(tuple(names), tuple(avals), tuple(positions), tuple(index),
                 tuple(index_positions), fixed, tree)  # fmt: skip


def _index_value(name: str, aval: Any, hi: int) -> tuple[TArray, list[Any]]:
    """A symbolic index input: every element any value in ``0..hi-1``, independently."""
    shape = tuple(aval.shape)
    if shape == ():
        arr, sym = nat_scalar(name, hi)
        return arr, [sym]
    vec = nat_vector(name, int(np.prod(shape)), hi)
    return (vec if len(shape) == 1 else TT.reshape(vec, shape)), []


# -- reading the jaxprs -------------------------------------------------------------------------


def _where(eqn: Any) -> str:
    """The user's source line of an equation (``file:line``), or ``""``."""
    try:
        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # no traceback recorded
        return ""
    if frame is None:
        return ""
    return f"{frame.file_name}:{frame.start_line}"


class _Located(Unsupported):
    """An unsupported construct with the equation that holds it named."""


class FunctionInterpreter(TInterpreter):
    """The tensor-level interpreter with the user's source line on every refusal and, with
    ``hold=True``, two kinds of values read as fresh leaves (:attr:`held`: leaf name -> the
    value it stands for, and where):

    * every ``stop_gradient`` of a symbolic value (``_sg<k>``);
    * every maximum that can be a softmax's shift (:attr:`shifts`, ``_mx<k>``): a
      ``reduce_max``, and a ``max`` of a held maximum with anything (the running maximum of an
      online softmax). Where a result is proved not to depend on one, it is set to 0 (the max
      shift of a stable or blockwise softmax gone); elsewhere it is its value again."""

    def __init__(self, hold: bool = False) -> None:
        super().__init__()
        self.hold = hold
        self.held: dict[str, tuple[TArray, str]] = {}
        self.shifts: set[str] = set()

    def _reads_shift(self, v: TArray) -> bool:
        if not self.shifts:
            return False
        try:
            names = {T.name_of(f) for f in T.fn_atoms(v.at(T.free_vars(v.shape)))}
        except T.TermError:
            return False
        return not names.isdisjoint(self.shifts)

    def eqn(self, eqn: Any, invals: list[Any]) -> list[Any]:
        name = eqn.primitive.name
        if self.hold and name == "stop_gradient":
            v = invals[0]
            if v.kind == "f" and concrete(v) is None:
                leaf_name = f"_sg{len(self.held)}"
                self.held[leaf_name] = (v, _where(eqn))
                return [leaf(leaf_name, v.shape)]
        try:
            out = super().eqn(eqn, invals)
        except _Located:
            raise
        except Unsupported as e:
            at = _where(eqn)
            raise _Located(f"{e}" + (f" at {at}" if at else "")) from None
        if self.hold and len(out) == 1 and out[0].kind == "f" and (
                name == "reduce_max" or (name == "max" and any(
                    self._reads_shift(v) for v in invals))):  # fmt: skip
            leaf_name = f"_mx{len(self.held)}"
            self.held[leaf_name] = (out[0], _where(eqn))
            self.shifts.add(leaf_name)
            T.SHIFT_LEAVES.add(leaf_name)
            return [leaf(leaf_name, out[0].shape)]
        return out


def _substitute(arr: TArray, held: dict[str, tuple[TArray, str]],
                zero: frozenset[str] = frozenset()) -> TArray:  # fmt: skip
    """Every read of a held leaf replaced by the value it stands for, or by 0 for those in
    ``zero`` (stopped values the array is proved not to depend on: any value gives the same
    array, and 0 gives the simplest terms, the max shift of a stable softmax gone)."""
    if not held:
        return arr

    def fn(idx: tuple[Any, ...]) -> Any:
        e = arr.at(idx)
        done: dict[Any, Any] = {}  # a read of a held leaf -> its value, its own reads resolved

        def value(f: Any) -> Any:
            hit = done.get(f)
            if hit is None:
                n = T.name_of(f)
                hit = T.ZERO if n in zero else T.rename_bound(held[n][0].at(tuple(f.args)))
                hit = resolve(hit)  # a held value may read an earlier held leaf
                done[f] = hit
            return hit

        def resolve(x: Any) -> Any:
            repl = {f: value(f) for f in T.fn_atoms(x) if T.name_of(f) in held}
            return x.xreplace(repl) if repl else x

        return resolve(e)

    return TArray(arr.shape, fn, arr.kind)


def _read_names(held: dict[str, tuple[TArray, str]]) -> dict[str, set[str]]:
    """Per held leaf, the held leaves its value reads."""
    out = {}
    for name, (v, _) in held.items():
        try:
            atoms = T.fn_atoms(v.at(T.free_vars(v.shape)))
        except T.TermError:
            atoms = frozenset()
        out[name] = {T.name_of(f) for f in atoms} & set(held)
    return out


def _closed(zero: set[str], held: dict[str, tuple[TArray, str]]) -> frozenset[str]:
    """The leaves of ``zero`` that can be set to 0 together: none read, even through other
    values, by the value of a leaf that keeps its value."""
    reads = _read_names(held)
    z = set(zero)
    changed = True
    while changed:
        changed = False
        for name in held:
            if name not in z and reads[name] & z:
                z -= reads[name]
                changed = True
    return frozenset(z)


def _neutral(o: TOutcome, arrays: Sequence[TArray], labels: Sequence[str], name: str,
             st: TSetup, search: bool = True) -> None:  # fmt: skip
    """Into ``o``: every array's derivative in the held leaf ``name`` is 0, every held leaf a
    free leaf (so that, all of them proved so, the arrays are constant in all of them
    together). That is what "does not change the derivative" means; whether the leaf can
    also be set to 0 is :func:`_jumps`' question. ``search=False`` (a maximum that may be set
    to 0 to simplify, not a reported check): a proof or nothing, no counterexample search."""
    for A, label in zip(arrays, labels, strict=True):
        D = TArray(A.shape, lambda idx, A=A: T.jvp_term(A.at(idx), {name: "d" + name},
                                                        conventional), "f")  # fmt: skip
        compare(o, label, D, TT.constant(0, A.shape), st, search=search)
        if o.done:
            return


def _jumping(arrays: Sequence[TArray]) -> set[str] | None:
    """The names of the leaves some array may jump in (:func:`_condition_reads`), read once
    per array; ``None`` when an array's term cannot be built (then every leaf may jump). A
    derivative of 0 proves a value constant in a leaf only where it is continuous in it: a
    leaf read by a comparison (a Piecewise condition, a relation, ``sign``, ``floor``: ReLU's
    mask of a stopped value) has derivative 0 and still changes the value, so it is never set
    to 0 (it keeps its value)."""
    out: set[str] = set()
    for A in arrays:
        try:
            out |= _condition_reads(A.at(T.free_vars(A.shape)))
        except T.TermError:
            return None
    return out


def _jumps(jumping: set[str] | None, name: str) -> bool:
    """Whether an array may jump in the held leaf ``name`` (``jumping``: :func:`_jumping`)."""
    return jumping is None or name in jumping


def _condition_reads(e: Any) -> set[str]:
    """The names of the leaves read where ``e`` jumps: in a Piecewise condition, a relation, a
    ``sign`` or a ``floor``."""
    memo: set[Any] = set()
    out: set[str] = set()

    def reads(x: Any) -> None:
        out.update(n for f in T.fn_atoms(x) if (n := T.name_of(f)) is not None)

    def go(x: Any) -> None:
        if not isinstance(x, se.Basic) or not x.args or x in memo:
            return
        memo.add(x)
        if isinstance(x, se.Piecewise):
            for c in x.args[1::2]:
                reads(c)
            for v in x.args[0::2]:
                go(v)
            return
        if isinstance(x, _RELATIONAL | se.sign | se.floor):
            reads(x)
            return
        for a in x.args:
            go(a)

    go(e)
    return out


def _built_once(A: TArray) -> TArray:
    """``A`` with its element term built once, at free indices of its own, and renamed to the
    free indices asked for (other ones built again): the same term, since all a term knows of
    a free index is its range, the same for every free index of one axis. Checking each held
    leaf builds every array at new free indices."""
    q0 = T.free_vars(A.shape)
    built: list[Any] = []

    def fn(idx: tuple[Any, ...]) -> Any:
        if not built:
            built.append(A.at(q0))
        e0 = built[0]
        renames = {}
        for a, b in zip(q0, idx, strict=True):
            if a == b:
                continue
            if not (isinstance(a, se.Symbol) and isinstance(b, se.Symbol)
                    and T.RANGES.get(a) == T.RANGES.get(b)
                    and T.UPPER.get(a) == T.UPPER.get(b) and a not in T.BOUND
                    and b not in T.BOUND):  # fmt: skip
                return A.at(idx)
            renames[a] = b
        return e0.xreplace(renames) if renames else e0

    return TArray(A.shape, fn, A.kind)


def _proved(o: TOutcome) -> bool:
    c = o.check("")
    return c is not None and c.result == "pass" and c.method == "exact"


def _all_neutral(arrays: Sequence[TArray], names: Sequence[str], st: TSetup) -> bool:
    """Whether every array is proved, exactly and for every element, equal to itself with the
    reads of the held maxima ``names`` set to 0, every other leaf (held ones too) free: then it
    does not depend on any of them, jointly (an identity for every value of the leaves). One
    comparison per array for all of them, where :func:`_neutral` asks one per leaf: an online
    softmax holds two maxima per query block and key step, each read by every output array, and
    the normal form takes each out of its exponentials as a factor (:data:`T.SHIFT_LEAVES`), so
    that they cancel. Only for such maxima: a stopped value stays in its exponentials, and the
    comparison with it set to 0 can be a hard rational identity where its derivative is easy."""
    zero = set(names)

    def without(A: TArray) -> TArray:
        def fn(idx: tuple[Any, ...]) -> Any:
            e = A.at(idx)
            repl = {f: T.ZERO for f in T.fn_atoms(e) if T.name_of(f) in zero}
            return e.xreplace(repl) if repl else e

        return TArray(A.shape, fn, A.kind)

    o = TOutcome("function", "independent")
    for A in arrays:
        compare(o, "independent", A, without(A), st, search=False)
        if o.done:
            return False
    return _proved(o)


def _independent(arrays: Sequence[TArray], held: dict[str, tuple[TArray, str]],
                 st: TSetup) -> frozenset[str]:  # fmt: skip
    """The held leaves that ``arrays`` are proved, exactly and for every element, not to depend
    on, closed (:func:`_closed`): those can be set to 0 together. The held maxima all at once
    first (:func:`_all_neutral`), the others (and all, where that fails) one by one (their
    derivatives 0). ``arrays`` built once (:func:`_built_once`): each leaf's check builds them
    at new free indices."""
    jumping = _jumping(arrays)
    free = [name for name in held if not _jumps(jumping, name)]
    maxima = [name for name in free if name in T.SHIFT_LEAVES]
    zero: set[str] = set()
    if len(maxima) > 1 and _all_neutral(arrays, maxima, st):
        zero.update(maxima)
    for name in free:
        if name in zero:
            continue
        o = TOutcome("function", name)
        _neutral(o, arrays, ["independent"] * len(arrays), name, st, search=False)
        if _proved(o):
            zero.add(name)
    return _closed(zero, held)


_BOOLEAN = type(se.true).__mro__[2]  # symengine's Boolean (not exported by name)
_RELATIONAL = type(se.Eq(se.Symbol("x"), 0)).__mro__[1]  # symengine's Relational (the same)

#: What a check proved with the reference's constants rounded to the float type says.
F32_PROVISO = "the reference's constants not representable at the dtype's precision, rounded to it"


def _constants_f32(e: Any, bits: int = 32, *, rationals: bool = False) -> Any:
    """``e`` with every irrational constant subterm (``2/sqrt(pi)``, ``log(2)``: no leaf, no
    index) replaced by its nearest float32 (``bits=64``: float64), as JAX's derivative rules
    hold them; with ``rationals``, also every rational one that the float type cannot represent
    (``1/3``: a forward's mean over 3, which PyTorch's MSE backward holds as ``2/3`` rounded;
    not in a derivative, whose rationals are exact products of the forward's constants, such
    as ``c^2`` of a rounded ``c = 1/sqrt(2)``). Conditions (a ``Piecewise``'s, where a kink
    sits), exponents and element indices keep their exact values."""
    found: dict[Any, Any] = {}
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, se.Rational):  # se.Integer included
            if not rationals:
                continue
            q = Fraction(int(x.p), int(x.q))
            try:
                r = round_f32(q) if bits == 32 else Fraction(float(q))
            except OverflowError:
                continue
            if not isinstance(r, float) and r != q:
                found[x] = se.Rational(r.numerator, r.denominator)
            continue
        if (isinstance(x, _BOOLEAN | se.FunctionSymbol) or not isinstance(x, se.Basic)
                or x == se.E):  # conditions, and the index terms of an element: exact  # fmt: skip
            continue
        if isinstance(x, se.Pow) and x.args[0] == se.E:  # exp(...): computed, not a literal
            stack.append(x.args[1])
            continue
        if not x.free_symbols and not T.fn_atoms(x) and not x.has(se.E):
            try:
                v = x.evalf(60)
                if not v.is_Number or not v.is_real:
                    continue
                value = Fraction(str(se.Float(v, dps=60)))
            except (TypeError, ValueError, RuntimeError, AttributeError):
                continue
            r = round_f32(value) if bits == 32 else Fraction(float(value))
            if not isinstance(r, float):
                found[x] = se.Rational(r.numerator, r.denominator)
            continue
        # x ** p: the exponent p keeps its exact value
        stack.extend(x.args[:1] if isinstance(x, se.Pow) else x.args)
    return e.xreplace(found) if found else e


def _compare(o: TOutcome, label: str, got: TArray, want: TArray, st: TSetup, bits: int,
             rounded: Callable[[], TArray] | None = None) -> None:  # fmt: skip
    """``compare`` into ``o``; a comparison not proved is tried again with the reference's
    irrational constants rounded to the inputs' float type (``bits``: 32 or 64; the derivative
    rules of JAX's primitives hold ``2/sqrt(pi)`` and the like as literals of that type), then
    with ``rounded()`` where given: the derivative of the forward with its constants that the
    float type cannot represent, rational ones too, so rounded (PyTorch's MSE backward scales
    by ``2/N`` rounded, twice the rounded ``1/N`` of the mean, where the reference's derivative
    has gathered ``2/N`` exactly into other coefficients); the proof says so
    (:data:`F32_PROVISO`)."""
    first = TOutcome(o.link, o.name)
    compare(first, label, got, want, st)
    if bits in (32, 64) and (first.failure is not None or first.undecided) and not first.error:
        tries = [lambda: TArray(want.shape, lambda idx: _constants_f32(want.at(idx), bits),
                                want.kind)]  # fmt: skip
        for make in [*tries, *([rounded] if rounded is not None else [])]:
            again = TOutcome(o.link, o.name)
            compare(again, label, got, make(), st)
            if again.failure is None and not again.undecided and not again.error:
                o.hows += [f"{h} ({F32_PROVISO})" for h in again.hows]
                o.methods |= again.methods
                return
    o.hows += first.hows
    o.methods |= first.methods
    if first.failure is not None and o.failure is None:
        o.failure = first.failure
    if first.undecided and not o.undecided:
        o.undecided = first.undecided
    if first.error and not o.error:
        o.error = first.error


def _plus(a: TArray | None, b: TArray) -> TArray:
    return b if a is None else TT.binary(a, b, lambda u, v: u + v)


def _check_kinks(kinks: str) -> None:
    if kinks not in ("one-sided", "convention"):
        raise FunctionSpecError(f"kinks must be 'one-sided' or 'convention', got {kinks!r}")


def _jvp_with(e: Any, tangent: Mapping[str, str], choice: KinkChoice) -> Any:
    """The derivative of the term ``e`` with the tie reading ``choice`` (``()``: the
    conventions; :mod:`verify._kinks`)."""
    return T.jvp_term(e, tangent, functools.partial(conventional, choice=choice),
                      even_ties(choice))  # fmt: skip


def _kink_sites(F: Sequence[TArray]) -> list[KinkSite]:
    """The kink sites of the forward's terms (at the symbolic indices the comparisons read)."""
    found: dict[str, KinkSite] = {}
    for A in F:
        for site in kink_sites(A.at(T.free_vars(A.shape))):
            found[site.key] = site
    return list(found.values())


#: With kink sites, the share of a check's remaining budget that the conventions get first,
#: then each one-sided choice: the counterexample search of the conventions at a kink of a sum
#: (``relu(w @ x)``, a tie of ``w @ x`` with 0) can stay busy to the end of it.
KINK_CONVENTION_SHARE = 0.1
KINK_CHOICE_SHARE = 0.25


def _within(share: float, fn: Callable[[], TOutcome]) -> TOutcome | None:
    """``fn()`` within ``share`` of the remaining budget; ``None`` when that runs out (the
    budget of the whole check running out stops the check, as anywhere)."""
    left = T.remaining()
    if left is None:
        return fn()
    try:
        with T.budget(left * share):
            return fn()
    except T.OutOfTime:
        T.tick()
        return None


def _kinks_searched(link: str, name: str, run: Callable[[KinkChoice], TOutcome],
                    sites_of: Callable[[], list[KinkSite]], kinks: Kinks) -> TOutcome:  # fmt: skip
    """``run(choice)``: a check's comparisons against the derivative built with the tie
    reading ``choice`` (:func:`verify._kinks.conventional`; ``()``: the conventions).

    Without kink sites (``sites_of()``; none asked with ``kinks="convention"``): the
    conventions. With them, the conventions within :data:`KINK_CONVENTION_SHARE` of the
    remaining budget, then each of :func:`verify._kinks.kink_choices` within
    :data:`KINK_CHOICE_SHARE`; the first proved is the outcome (a choice named in front of
    its ``how``). MISMATCH (the first refuted choice's counterexample, its ``how`` saying how
    many choices were refuted and which one the counterexample is under) only when the
    conventions and every choice are refuted; else undecided."""
    sites = sites_of() if kinks == "one-sided" else []
    if not sites:
        return run(())
    first = _within(KINK_CONVENTION_SHARE, lambda: run(()))
    if first is not None and (first.error or _proved(first)):
        return first
    choices = list(kink_choices(sites))
    undecided = ""
    refuted: tuple[TOutcome, str] | None = None  # the first choice refuted, and what it is
    for choice, text in choices:
        o = _within(KINK_CHOICE_SHARE, lambda choice=choice: run(choice))
        if o is not None and _proved(o):
            o.hows.insert(0, f"at the kinks, {text}")
            return o
        if refuted is None and o is not None and o.failure is not None:
            refuted = (o, text)
        if not undecided and (o is None or o.failure is None):
            why = "its share of the budget ran out" if o is None else o.error or o.undecided
            undecided = f"with a one-sided choice at the kinks: {why}"
    if first is None:  # its share ran out: again, with what is left
        first = run(())
        if first.error or _proved(first):
            return first
    n = len(sites)
    if first.failure is not None and not undecided:
        # the counterexample of a one-sided choice: one at a kink only when no choice fits
        # there (the conventions' may sit at a kink where JAX took another one-sided value)
        out, text = refuted if refuted is not None else (first, "")
        out.note = (f"refuted with the reference's conventions at the {n} kink site(s) and "
                    f"with each of {len(choices)} one-sided choices there"
                    + (f"; the counterexample with {text}" if text else ""))  # fmt: skip
        return out
    why = (f"counterexample at {first.failure.element}" if first.failure is not None
           else first.undecided)  # fmt: skip
    out = TOutcome(link, name)  # type: ignore[arg-type]
    out.undecided = (f"with the conventions at the {n} kink site(s): {why}; "
                     f"{undecided or 'each one-sided choice refuted'}")  # fmt: skip
    return out


# -- the checks of one function -------------------------------------------------------------------


@dataclass
class _Subject:
    """One function to check: flat float inputs (names, shapes) to flat float outputs."""

    label: str
    fn: Callable[..., list[Any]]  # (*float inputs, *index inputs) -> float outputs
    names: tuple[str, ...]
    avals: tuple[jax.ShapeDtypeStruct, ...]
    index: tuple[tuple[str, jax.ShapeDtypeStruct, int], ...] = ()
    out_names: tuple[str, ...] = ()

    def inputs(self) -> tuple[list[TArray], list[TArray], TSetup]:
        """Leaves for the float inputs, symbolic index inputs, and the comparison setup."""
        X = [leaf(nm, a.shape) for nm, a in zip(self.names, self.avals, strict=True)]
        Tn = [leaf("d" + nm, a.shape) for nm, a in zip(self.names, self.avals, strict=True)]
        st = _setup(self.names, X, Tn)
        index = []
        for name, aval, hi in self.index:
            arr, syms = _index_value(name, aval, hi)
            index.append(arr)
            st.nat_symbols += syms
            st.index_text.append(f"index {name}: symbolic, every value 0..{hi - 1}")
        return X, index, st


def _setup(names: Sequence[str], X: list[TArray], Tn: list[TArray]) -> TSetup:
    return TSetup(None, list(names), X, Tn, list(range(len(X))), {}, [],  # type: ignore[arg-type]
                  {n: "real" for n in names})  # fmt: skip


def _coverage(st: TSetup) -> str:
    return "; ".join(["all elements (tensor level)", *st.index_text])


def _not_verified(link: str, name: str, why: str, t0: float) -> Check:
    return Check(link, name, "not verified", "undecided", "", why,  # type: ignore[arg-type]
                 None, time.perf_counter() - t0)  # fmt: skip


def _decided(o: TOutcome, coverage: str, link: str, t0: float) -> Check:
    c = o.check(coverage)
    if c is None:
        return _not_verified(link, o.name, f"not decided at tensor level: {o.undecided}", t0)
    return c


def _attempt(link: str, name: str, budget_s: float, fn: Callable[[], Check]) -> Check:
    """One check under the tensor level's budget; anything that stops it is "not verified"
    with the reason."""
    t0 = time.perf_counter()
    try:
        with T.budget(budget_s):
            return fn()
    except T.OutOfTime:
        return _not_verified(link, name, f"the tensor-level time budget ({budget_s:g} s) ran "
                             "out", t0)  # fmt: skip
    except (Unsupported, NotTensor) as e:
        return _not_verified(link, name, str(e), t0)
    except (T.TermError, ArithmeticError, TypeError, ValueError, IndexError, KeyError,
            AttributeError, NotImplementedError, RecursionError, RuntimeError) as e:  # fmt: skip
        return _not_verified(link, name, f"the tensor level stopped: {type(e).__name__}: {e}", t0)


def _trace(what: str, fn: Callable[..., Any], *avals: Any) -> Any:
    try:
        return jax.make_jaxpr(fn)(*avals)
    except Exception as e:  # JAX refuses to trace: the user's function or rule is at fault
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise Unsupported(f"tracing {what} failed: {type(e).__name__}: {msg}") from None


def _has(jaxpr: Any, names: set[str]) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in names:
            return True
        for sub in _subjaxprs(eqn):
            if _has(sub, names):
                return True
    return False


def _subjaxprs(eqn: Any) -> list[Any]:
    out = []
    for v in eqn.params.values():
        for u in v if isinstance(v, tuple | list) else (v,):
            j = getattr(u, "jaxpr", u)
            if hasattr(j, "eqns"):
                out.append(j)
    return out


Held = dict[str, tuple[TArray, str]]


def _reference(F: list[TArray], labels: Sequence[str], held: Held, shifts: set[str],
               st: TSetup, *, prove: bool, link: str, budget_s: float,
               checks: list[Check]) -> tuple[list[TArray], Held]:  # fmt: skip
    """The forward to differentiate, and the held values to put back after differentiating.

    A stopped value proved not to change the derivative (a reported check, with ``prove``)
    and a maximum proved not to change the result are set to 0 (:func:`_closed`); a maximum
    that does matter is its value again before differentiating (the derivative goes through
    it); a stopped value that is not set to 0 is held constant while differentiating (JAX's
    meaning), its value put back after."""
    neutral: set[str] = set()
    once = [_built_once(A) for A in F] if held else F
    jumping: set[str] | None = None
    maxima: list[str] = []
    try:
        with T.budget(budget_s):
            jumping = _jumping(once) if held else set()
            maxima = [n for n in held if n in shifts and not _jumps(jumping, n)]
            if len(maxima) > 1 and _all_neutral(once, maxima, st):
                neutral.update(maxima)  # every maximum at once: none asked again below
    except (T.OutOfTime, T.TermError, NotTensor, Unsupported, ArithmeticError, RuntimeError):
        pass
    for name, (_v, at) in held.items():
        if name in shifts:
            if name in neutral or name not in maxima:
                continue
            o = TOutcome("function", name)
            try:
                with T.budget(budget_s):
                    _neutral(o, once, labels, name, st, search=False)
            except (T.OutOfTime, T.TermError, NotTensor, Unsupported, ArithmeticError,
                    RuntimeError):  # fmt: skip
                continue
            if _proved(o):
                neutral.add(name)
            continue
        if not prove:
            continue
        label = f"stop_gradient{' at ' + at if at else ''} does not change the derivative"

        def one(name: str = name, label: str = label) -> Check:
            t1 = time.perf_counter()
            o = TOutcome(link, label)  # type: ignore[arg-type]
            _neutral(o, once, labels, name, st)
            return _decided(o, _coverage(st), link, t1)

        c = _attempt(link, label, budget_s, one)
        checks.append(c)
        if c.result == "pass" and c.method == "exact" and not _jumps(jumping, name):
            neutral.add(name)
    zero = _closed(neutral, held)
    before = {n: v for n, v in held.items() if n in zero or (n in shifts)}
    out = [_substitute(Fk, before, zero) for Fk in once]
    after = {n: v for n, v in held.items() if n not in zero and n not in shifts}
    return out, after


def check_subject(s: _Subject, *, modes: Sequence[str], stop_gradient: StopGradient,
                  budget_s: float, link: str = "function",
                  vjp_name: str = "vjp = derivative",
                  jvp_name: str = "jvp = derivative",
                  kinks: Kinks = "one-sided") -> list[Check]:  # fmt: skip
    """The checks of one function: stop_gradient neutrality, JAX's VJP and JVP against the
    reference derivative of the forward (at kinks: see :func:`_kinks_searched`)."""
    n = len(s.names)
    widths = {np.dtype(a.dtype).itemsize * 8 for a in s.avals}
    bits = widths.pop() if len(widths) == 1 else 0  # one float type: its constants
    X, Ix, st = s.inputs()
    Tn = st.T
    iavals = [a for _, a, _ in s.index]
    checks: list[Check] = []
    t0 = time.perf_counter()
    state: dict[str, Any] = {}

    def forward() -> None:
        closed = _trace("the forward", s.fn, *s.avals, *iavals)
        it = FunctionInterpreter(hold=True)
        outs = it.run(closed, *X, *Ix)
        state["closed"] = closed
        state["F"] = outs
        state["held"] = it.held
        state["shifts"] = it.shifts
        state["out_avals"] = [v.aval for v in closed.jaxpr.outvars]

    try:
        with T.budget(budget_s):
            forward()
    except T.OutOfTime:
        why = f"the forward did not fit the tensor-level time budget ({budget_s:g} s)"
        return [_not_verified(link, nm, why, t0) for nm in _names(modes, vjp_name, jvp_name)]
    except (Unsupported, NotTensor, T.TermError) as e:
        why = f"the forward is not read at tensor level: {e}"
        return [_not_verified(link, nm, why, t0) for nm in _names(modes, vjp_name, jvp_name)]
    F: list[TArray] = state["F"]
    held: dict[str, tuple[TArray, str]] = state["held"]
    out_avals = state["out_avals"]
    if not F:
        raise FunctionSpecError(f"{s.label}: no floating-point output to differentiate")
    out_names = s.out_names or tuple(["out"] if len(F) == 1 else [f"out{k}" for k in range(len(F))])
    tangent = {nm: "d" + nm for nm in s.names}
    shifts: set[str] = state["shifts"]
    F, post = _reference(F, [f"d{x}/d(stopped value)" for x in out_names], held, shifts, st,
                         prove=stop_gradient == "prove", link=link, budget_s=budget_s,
                         checks=checks)  # fmt: skip
    derivatives: dict[KinkChoice, list[TArray]] = {}
    sites_of = functools.cache(lambda: _kink_sites(F))

    def derivative(choice: KinkChoice) -> list[TArray]:
        """The reference derivative with the tie reading ``choice`` (built once per choice)."""
        if choice not in derivatives:
            derivatives[choice] = [TArray(Fk.shape, lambda idx, Fk=Fk: _jvp_with(
                Fk.at(idx), tangent, choice), "f") for Fk in F]  # fmt: skip
        return derivatives[choice]

    ct_names = ["ct"] if len(F) == 1 else [f"ct{k}" for k in range(len(F))]
    has_custom_vjp = _has(state["closed"].jaxpr, {"custom_vjp_call", "custom_vjp_call_jaxpr"})

    if "vjp" in modes:

        def vjp() -> Check:
            t1 = time.perf_counter()
            cts = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in out_avals]
            m = n + len(iavals)

            def vjp_of(*a: Any) -> Any:
                return jax.vjp(lambda *xs: s.fn(*xs, *a[n:m]), *a[:n])[1](list(a[m:]))

            closed = _trace("jax.vjp", vjp_of, *s.avals, *iavals, *cts)
            got_it = FunctionInterpreter(hold=True)
            G = got_it.run(closed, *X, *Ix, *[leaf(c, a.shape) for c, a in zip(
                ct_names, out_avals, strict=True)])  # fmt: skip
            G = _without_shifts(G[:n], got_it.held, st)

            def run(choice: KinkChoice) -> TOutcome:
                J = derivative(choice)
                o = TOutcome(link, vjp_name)  # type: ignore[arg-type]
                for p, nm in enumerate(s.names):
                    want: TArray | None = None
                    for k, Jk in enumerate(J):
                        want = _plus(want, adjoint_expected(Jk, ct_names[k], Jk.shape, "d" + nm,
                                                            s.avals[p].shape))  # fmt: skip
                    assert want is not None
                    _compare(o, f"grad {nm}", G[p], _substitute(want, post), st, bits)
                    if o.done:
                        break
                return o

            return _decided(
                _kinks_searched(link, vjp_name, run, sites_of, kinks), _coverage(st), link, t1
            )

        checks.append(_attempt(link, vjp_name, budget_s, vjp))
    if "jvp" in modes:
        if has_custom_vjp:  # jax.jvp refuses it: nothing to check (verify_function notes it)
            pass
        else:

            def jvp() -> Check:
                t1 = time.perf_counter()
                m = n + len(iavals)

                def jvp_of(*a: Any) -> Any:
                    return jax.jvp(lambda *xs: s.fn(*xs, *a[n:m]), a[:n], a[m:])[1]

                closed = _trace("jax.jvp", jvp_of, *s.avals, *iavals, *s.avals)
                got_it = FunctionInterpreter(hold=True)
                got = _without_shifts(got_it.run(closed, *X, *Ix, *Tn), got_it.held, st)

                def run(choice: KinkChoice) -> TOutcome:
                    o = TOutcome(link, jvp_name)  # type: ignore[arg-type]
                    for k, Jk in enumerate(derivative(choice)):
                        _compare(o, f"jvp {out_names[k]}", got[k], _substitute(Jk, post), st,
                                 bits)  # fmt: skip
                        if o.done:
                            break
                    return o

                return _decided(
                    _kinks_searched(link, jvp_name, run, sites_of, kinks), _coverage(st), link, t1
                )

            checks.append(_attempt(link, jvp_name, budget_s, jvp))
    return checks


def _without_shifts(arrays: list[TArray], held: dict[str, tuple[TArray, str]],
                    st: TSetup) -> list[TArray]:  # fmt: skip
    """JAX's derivative as computed, its stopped values at 0 where it is proved not to depend
    on them, at their values elsewhere: the same arrays, in simpler terms."""
    if not held:
        return arrays
    arrays = [_built_once(A) for A in arrays]  # built once for the proofs and the result
    zero = _independent(arrays, held, st)
    return [_substitute(A, held, zero) for A in arrays]


def _names(modes: Sequence[str], vjp_name: str, jvp_name: str) -> list[str]:
    return [nm for m, nm in (("vjp", vjp_name), ("jvp", jvp_name)) if m in modes]


# -- custom rules ---------------------------------------------------------------------------------

_CUSTOM = {"custom_vjp_call": "custom_vjp", "custom_vjp_call_jaxpr": "custom_vjp",
           "custom_jvp_call": "custom_jvp"}  # fmt: skip


def _custom_calls(jaxpr: Any, found: list[Any]) -> list[Any]:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _CUSTOM:
            found.append(eqn)
        for sub in _subjaxprs(eqn):
            _custom_calls(sub, found)
    return found


def _rule_name(eqn: Any) -> str:
    """The user's rule as JAX recorded it (``ln_bwd at file.py:12``), or ``""``."""
    for key in ("bwd", "jvp_jaxpr_fun", "jvp_jaxpr_thunk", "fwd_jaxpr_thunk"):
        info = getattr(eqn.params.get(key), "debug_info", None)
        src = getattr(info, "func_src_info", None)
        if src:
            return str(src)
    return ""


def _custom_subject(eqn: Any, ranges: Mapping[Any, tuple[str, int]]) -> _Subject | None:
    """The custom rule of ``eqn`` as a function of its float inputs and its integer inputs
    (symbolic index inputs: the range of ``f``'s argument they are, ``ranges`` by jaxpr
    variable, else every non-negative int32); ``None`` when an input is neither."""
    params = eqn.primitive.get_bind_params(eqn.params)
    subfuns: list[Any] = []
    if isinstance(params, tuple):  # older JAX: (subfuns, params)
        subfuns, params = params
    floats = [k for k, v in enumerate(eqn.invars) if np.dtype(v.aval.dtype).kind == "f"]
    ints = [k for k, v in enumerate(eqn.invars)
            if np.dtype(v.aval.dtype).kind in "iu" and not hasattr(v, "val")]  # fmt: skip
    fixed = {k: v.val for k, v in enumerate(eqn.invars) if hasattr(v, "val")}
    if not floats or len(floats) + len(ints) + len(fixed) != len(eqn.invars):
        return None

    def fn(*xs: Any) -> list[Any]:
        args: list[Any] = [None] * len(eqn.invars)
        for k, x in zip((*floats, *ints), xs, strict=True):
            args[k] = x
        for k, val in fixed.items():
            args[k] = val
        out = eqn.primitive.bind(*subfuns, *args, **params)
        out = out if eqn.primitive.multiple_results else [out]
        return [o for o in out if _is_float(o)]

    kind = _CUSTOM[eqn.primitive.name]
    rule = _rule_name(eqn)
    at = _where(eqn)
    label = f"{kind} {rule or 'rule'}" + (f", called at {at}" if at else "")
    names = tuple(f"a{k}" for k in floats)
    avals = tuple(jax.ShapeDtypeStruct(eqn.invars[k].aval.shape, eqn.invars[k].aval.dtype)
                  for k in floats)  # fmt: skip
    index = []
    for k in ints:
        v = eqn.invars[k]
        name, hi = ranges.get(v, (f"i{k}", INDEX_VALUES))
        index.append((name, jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype), hi))
    return _Subject(label, fn, names, avals, tuple(index))


def _same_as_f(jaxpr: Any, eqn: Any, sub: _Subject, a: _Args, checks: Sequence[Check],
               modes: Sequence[str], vjp_name: str,
               jvp_name: str) -> list[Check] | None:  # fmt: skip
    """The rule's checks when ``f`` is the custom call ``eqn`` alone (``f`` decorated itself:
    its jaxpr one equation, on ``f``'s float arguments in order, its outputs ``f``'s): then
    ``f``'s VJP and JVP are the rule's, the same jaxprs read the same way, and ``f``'s checks
    are the rule's where they are decided, proved exactly or failed (the rule's inputs named
    ``a0, a1, ...`` there, as ``f``'s here; a counterexample names ``f``'s); ``None``
    otherwise (the rule is checked on its own: where ``f``'s check is undecided, the rule's
    counterexample search, over its own names, may still find one)."""
    alone = len(jaxpr.eqns) == 1 and jaxpr.eqns[0] is eqn and not jaxpr.constvars
    same_args = list(eqn.invars) == list(jaxpr.invars) and not a.index and not sub.index
    same_out = list(eqn.outvars) == list(jaxpr.outvars)
    same_avals = [(x.shape, x.dtype) for x in sub.avals] == [(x.shape, x.dtype) for x in a.avals]
    if not (alone and same_args and same_out and same_avals):
        return None
    names = {"vjp = derivative": vjp_name, "jvp = derivative": jvp_name}
    wanted = {f"{m} = derivative" for m in modes}
    if not wanted <= {c.name for c in checks}:
        return None
    renamed = ", ".join(f"{x} = {y}" for x, y in zip(a.names, sub.names, strict=True))
    out = []
    for c in checks:  # the modes asked, and the stop_gradient checks the rule's would repeat
        if c.name in names and c.name not in wanted:
            continue
        if not (c.result == "pass" and c.method == "exact") and c.result != "fail":
            return None  # not decided: the rule's own run may decide it (its search differs)
        name = names.get(c.name, c.name)
        ce = c.counterexample
        out.append(replace(c, link="rule", name=name, seconds=0.0,
                           counterexample=None if ce is None else replace(ce, check=name),
                           how=(f"f is this call alone, on its arguments as they are "
                                f"({renamed}): f's check '{c.name}': {c.how}")))  # fmt: skip
    return out


# -- the public entry point -----------------------------------------------------------------------


def verify_function(
    f: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    argnames: Sequence[str] | None = None,
    modes: Sequence[str] = ("vjp", "jvp"),
    rules: bool = True,
    stop_gradient: StopGradient = "prove",
    index_ranges: Mapping[str, int] | None = None,
    budget_s: float = TENSOR_BUDGET_S,
    kinks: Kinks = "one-sided",
) -> Report:
    """Prove that JAX's derivatives of ``f`` equal the derivative of ``f``'s forward.

    ``args``: example arguments (arrays, ``jax.ShapeDtypeStruct`` or pytrees of them; only their
    shapes and dtypes matter). Floating-point leaves are the inputs differentiated; integer
    leaves are index inputs, symbolic: every element any value in ``0..hi-1``, independently,
    ``hi`` from ``index_ranges`` (by name; default every non-negative int32); other leaves
    (booleans) are constants and need their values. ``modes``: ``"vjp"`` (``jax.vjp``)
    and/or ``"jvp"`` (``jax.jvp``). ``rules``: also check each ``custom_vjp`` /
    ``custom_jvp`` rule met in the forward on its own. ``stop_gradient``: see the module.
    ``budget_s``: CPU seconds per check at tensor level (past it: "not verified").
    ``kinks``: at a kink of the forward (``max`` / ``min`` of two values at a tie, ``abs`` at
    0), ``"one-sided"`` (default) accepts the derivative from either side or their mean,
    one choice per site, the check naming it (JAX's ``relu'(0) = 0``); ``"convention"``
    holds the derivative to ``docs/ops.md``'s conventions alone.

    Returns a :class:`verify.Report` whose graph-level checks are those of ``f`` (link
    ``function``) and whose "nodes" are the custom rules (link ``rule``); its verdict is
    ``verified`` only when every check was proved exactly.
    """
    t0 = time.perf_counter()
    bad = [m for m in modes if m not in ("vjp", "jvp")]
    if bad or not modes:
        raise FunctionSpecError(f"modes must be 'vjp' and/or 'jvp', got {list(modes)}")
    if stop_gradient not in ("prove", "constant"):
        raise FunctionSpecError(f"stop_gradient must be 'prove' or 'constant', got "
                                f"{stop_gradient!r}")  # fmt: skip
    _check_kinks(kinks)
    if not callable(f):
        raise FunctionSpecError(f"{f!r} is not callable")
    label = name or getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or "f"
    a = _flatten_args(f, args, argnames, index_ranges)
    subject = _Subject(label, a.call(f), a.names, a.avals, a.index)
    checks = check_subject(subject, modes=modes, stop_gradient=stop_gradient, budget_s=budget_s,
                           kinks=kinks)  # fmt: skip
    nodes: list[NodeReport] = []
    notes: list[str] = []
    if rules:
        try:
            closed = jax.make_jaxpr(subject.fn)(*a.avals, *[x for _, x, _ in a.index])
        except Exception:
            closed = None
        seen: set[str] = set()
        ranges: dict[Any, tuple[str, int]] = {}
        if closed is not None:  # f's integer arguments, where a rule takes one as it is
            index_vars = closed.jaxpr.invars[len(a.names) :]
            ranges = {v: (nm, hi) for v, (nm, _, hi) in zip(index_vars, a.index, strict=True)}
        for eqn in _custom_calls(closed.jaxpr, []) if closed is not None else []:
            sub = _custom_subject(eqn, ranges)
            if sub is None:
                where = _where(eqn) or "?"
                notes.append(f"{_CUSTOM[eqn.primitive.name]} call at {where}: an input is "
                             "neither float nor integer; checked through f only")  # fmt: skip
                continue
            key = f"{eqn.primitive.name}|{eqn.params.get('call_jaxpr')}|{sub.avals}"
            if key in seen:
                continue
            seen.add(key)
            kind = _CUSTOM[eqn.primitive.name]
            rule_modes = ["vjp"] if kind == "custom_vjp" else list(modes)
            vjp_name = f"{kind} vjp = derivative of the primal"
            jvp_name = f"{kind} jvp = derivative of the primal"
            rc = _same_as_f(closed.jaxpr, eqn, sub, a, checks, rule_modes, vjp_name, jvp_name)
            if rc is None:
                rc = check_subject(sub, modes=rule_modes, stop_gradient=stop_gradient,
                                   budget_s=budget_s, link="rule", vjp_name=vjp_name,
                                   jvp_name=jvp_name, kinks=kinks)  # fmt: skip
            sig = f"{sub.label}: ({', '.join(_aval_text(x) for x in sub.avals)})"
            nodes.append(NodeReport(len(nodes), kind, sig, tuple(rc)))
    if any(F32_PROVISO in c.how for n in nodes for c in n.checks) or any(
            F32_PROVISO in c.how for c in checks):  # fmt: skip
        notes.append("the derivative rules of JAX's primitives hold irrational constants "
                     "(2/sqrt(pi), ...) as literals of the float type; the checks that say "
                     f"'{F32_PROVISO}' are proved with the reference's rounded alike")  # fmt: skip
    if "jvp" in modes and not any(c.name == "jvp = derivative" for c in checks):
        notes.append("no JVP check: f holds a custom_vjp function, which JAX does not "
                     "differentiate in forward mode")  # fmt: skip
    dtypes = sorted({str(np.dtype(x.dtype)) for x in a.avals})
    notes.append("reference: the derivative of the forward's terms (ours); JAX's AD is what is "
                 "checked; real arithmetic, float rounding not modelled")  # fmt: skip
    return Report(
        graph=label,
        dtype=",".join(dtypes),
        nodes=tuple(nodes),
        graph_checks=tuple(checks),
        seconds=time.perf_counter() - t0,
        notes=tuple(notes),
        subject="function",
    )


def verify_gradient_outputs(
    f: Callable[..., Any],
    *args: Any,
    loss: int = 0,
    grads: Mapping[int, str],
    name: str | None = None,
    argnames: Sequence[str] | None = None,
    index_ranges: Mapping[str, int] | None = None,
    budget_s: float = TENSOR_BUDGET_S,
    kinks: Kinks = "one-sided",
) -> Report:
    """Prove that some outputs of ``f`` are the gradient of another: a joint forward/backward
    program (PyTorch's AOTAutograd joint graph, a hand-fused training step) whose output
    ``loss`` (a scalar) comes with outputs that claim to be its gradient.

    ``grads`` maps an output position (among ``f``'s flat floating-point outputs) to the name
    of the input it is the gradient for (the names as in the report: an argument's name, or its
    pytree path written with underscores, see :func:`verify_function`). Each claim is checked
    for every element against the derivative of output ``loss``'s terms (ours), with
    ``stop_gradient`` as in :func:`verify_function` ("prove"), kinks as its ``kinks``."""
    t0 = time.perf_counter()
    _check_kinks(kinks)
    if not callable(f):
        raise FunctionSpecError(f"{f!r} is not callable")
    label = name or getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or "f"
    a = _flatten_args(f, args, argnames, index_ranges)
    unknown = sorted({str(v) for v in grads.values()} - set(a.names))
    if unknown:
        raise FunctionSpecError(f"grads names inputs {unknown}; the floating-point inputs are "
                                f"{list(a.names)}")  # fmt: skip
    link = "function"
    subject = _Subject(label, a.call(f), a.names, a.avals, a.index)
    X, Ix, st = subject.inputs()
    checks: list[Check] = []
    check_name = "gradient outputs = derivative of the loss"
    try:
        with T.budget(budget_s):
            closed = _trace("f", subject.fn, *a.avals, *[x for _, x, _ in a.index])
            it = FunctionInterpreter(hold=True)
            F = it.run(closed, *X, *Ix)
    except T.OutOfTime:
        F, it = None, None
        why = f"the forward did not fit the tensor-level time budget ({budget_s:g} s)"
    except (Unsupported, NotTensor, T.TermError) as e:
        F, it = None, None
        why = f"f is not read at tensor level: {e}"
    if F is None or it is None:
        checks.append(_not_verified(link, check_name, why, t0))
    else:
        if not 0 <= loss < len(F) or F[loss].shape != ():
            raise FunctionSpecError(f"output {loss} is not a scalar floating-point output "
                                    f"({len(F)} floating-point outputs)")  # fmt: skip
        bad = [k for k in grads if not 0 <= k < len(F) or k == loss]
        if bad:
            raise FunctionSpecError(f"grads names outputs {bad}: not gradient outputs of the "
                                    f"{len(F)} floating-point outputs")  # fmt: skip
        tangent = {nm: "d" + nm for nm in a.names}
        widths = {np.dtype(x.dtype).itemsize * 8 for x in a.avals}
        bits = widths.pop() if len(widths) == 1 else 0  # one float type: its constants
        L = F[loss]
        held = it.held
        (L,), post = _reference([L], ["dloss/d(stopped value)"], held, it.shifts, st,
                                prove=True, link=link, budget_s=budget_s,
                                checks=checks)  # fmt: skip
        index = {nm: p for p, nm in enumerate(a.names)}

        def claims() -> Check:
            t1 = time.perf_counter()

            def run(choice: KinkChoice) -> TOutcome:
                J = _jvp_with(L.at(()), tangent, choice)
                rounded_jvp: dict[str, Any] = {}
                o = TOutcome(link, check_name)  # type: ignore[arg-type]
                for k, nm in sorted(grads.items()):
                    shape = a.avals[index[str(nm)]].shape
                    if tuple(F[k].shape) != tuple(shape):
                        o.error = (f"output {k} has shape {list(F[k].shape)}, the gradient of "
                                   f"{nm} has shape {list(shape)}")  # fmt: skip
                        break
                    want = TArray(tuple(shape), lambda q, nm=nm, J=J: T.normalize(
                        T.coefficient(J, "d" + str(nm), q)), "f")  # fmt: skip
                    claimed = _without_shifts([F[k]], held, st)[0]

                    def rounded(nm: str = str(nm), shape: tuple[int, ...] = tuple(shape),
                                rounded_jvp: dict = rounded_jvp) -> TArray:  # fmt: skip
                        if "J" not in rounded_jvp:  # the forward's constants at the dtype's
                            Lr = _constants_f32(L.at(()), bits, rationals=True)
                            rounded_jvp["J"] = _jvp_with(Lr, tangent, choice)
                        Jr = rounded_jvp["J"]
                        return _substitute(TArray(shape, lambda q: T.normalize(
                            T.coefficient(Jr, "d" + nm, q)), "f"), post)  # fmt: skip

                    _compare(o, f"output {k} = grad {nm}", claimed, _substitute(want, post), st,
                             bits, rounded)  # fmt: skip
                    if o.done:
                        break
                return o

            o = _kinks_searched(link, check_name, run, lambda: _kink_sites([L]), kinks)
            return _decided(o, _coverage(st), link, t1)

        checks.append(_attempt(link, check_name, budget_s, claims))
    notes = ["reference: the derivative of the loss output's terms (ours); real arithmetic, "
             "float rounding not modelled"]  # fmt: skip
    dtypes = sorted({str(np.dtype(x.dtype)) for x in a.avals})
    return Report(graph=label, dtype=",".join(dtypes), nodes=(), graph_checks=tuple(checks),
                  seconds=time.perf_counter() - t0, notes=tuple(notes),
                  subject="function")  # fmt: skip


def _aval_text(a: Any) -> str:
    inv = {v: k for k, v in _DTYPES.items()}
    return f"{inv.get(str(np.dtype(a.dtype)), str(np.dtype(a.dtype)))}{list(a.shape)}"


__all__ = [
    "FunctionInterpreter",
    "FunctionSpecError",
    "parse_arg_specs",
    "verify_function",
    "verify_gradient_outputs",
]
