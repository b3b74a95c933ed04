"""Link 1 (rule soundness) at tensor level: one symbolic element for every element.

The same checks as :mod:`verify._rules`, on the tensor backend (:mod:`verify._tensor`):

* ``forward = sym``: the forward's element term equals the symbolic forward's;
* ``jvp = derivative``: the JVP rule's element term equals the directional derivative of the
  symbolic forward's (:func:`verify.terms.jvp_term`);
* ``vjp = adjoint``: for each differentiable argument, the VJP rule's element term equals the
  coefficient of that argument's tangent in ``sum_i ct[i] jvp[i]`` (the Jacobian transpose
  applied to ``ct``, Kronecker deltas eliminated): the adjoint identity as an equality of two
  bilinear forms, decided once for all elements;
* ``kinks``: at the op's declared kink points whose arguments are uniform (every element at the
  kink value), the rules equal the branch-wise derivative there.

Runtime index inputs are symbols ranging over all naturals (a scalar index) or reads of a nat
vector at a symbolic position: the checks quantify over every index value, not a sample.

Each check gives ``exact`` (proved for all elements), ``fail`` with a concrete counterexample
(element index, input values, index values), or ``None`` when the tensor level did not decide:
the caller then uses the element-wise method where the signature is small, or reports the check
as not verified.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

import torchlean_ir as tl

from . import (
    _f32,
    prims,  # noqa: F401  (registers every primitive's rules)
)
from . import terms as T
from ._dims import SizeDependent
from ._kinks import conventional
from ._primitives import Unsupported
from ._report import Check, Counterexample
from ._rules import fmt_value
from ._sig import Signature, output_label, rule_names
from ._tbackend import TENSOR
from ._tdecide import decide_tensor
from ._tensor import TArray, asarray, leaf
from ._tjaxpr import TInterpreter
from ._toutcome import TDecision


class NotTensor(Exception):
    """The tensor-level method does not apply to this signature (a rule that does not run on
    tensor terms, an unsupported construct)."""


@dataclass
class TSetup:
    """Symbolic arguments, tangents, index inputs and rule parameters of one signature."""

    op: tl.Op
    names: list[str]
    X: list[TArray]
    T: list[TArray]
    diff_args: list[int]
    params: dict[str, Any]
    nat_symbols: list[Any]
    domains: dict[str, str]
    index_text: list[str] = field(default_factory=list)
    #: The static index inputs' values as a counterexample shows them (``index i`` -> ``"6"``).
    static_shown: dict[str, str] = field(default_factory=dict)
    #: The size symbols of symbolic argument shapes (:mod:`verify._certify`): quantified over
    #: like free indices; a check that is not proved is then undecided, never refuted here.
    sizes: list[Any] = field(default_factory=list)


def nat_scalar(name: str, hi: int | None) -> tuple[TArray, Any]:
    s = T.fresh(f"_n{name}_", 0, hi, bound=False)
    return TArray((), lambda idx: s, "i"), s


def nat_vector(name: str, n: int, hi: int | None) -> TArray:
    T.NAT_RANGES[name] = (0, hi)
    return leaf(name, (n,), "i")


def setup(sig: Signature, *, index_hi: int | None = None, tag: str = "nat",
          shapes: list[tuple[Any, ...]] | None = None,
          attrs: dict[str, Any] | None = None) -> TSetup:  # fmt: skip
    """Leaves ``name(i...)`` for the arguments, ``d<name>`` for the tangents of the
    differentiable ones, and symbolic index inputs over ``[0, index_hi)`` (all naturals when
    ``index_hi`` is ``None``). ``shapes`` replaces the arguments' shapes and ``attrs`` some
    attributes (symbolic sizes, :mod:`verify._sizecert`)."""
    op = tl.get_op(sig.op)
    names = sig.arg_names()
    shp = [t.shape for t in sig.arg_types] if shapes is None else shapes
    X = [leaf(n, d) for n, d in zip(names, shp, strict=True)]
    diff = [p for p in range(len(X)) if op.is_diff_arg(p)]
    Tn = [leaf("d" + n, d) if p in diff else TENSOR.zeros(d)
          for p, (n, d) in enumerate(zip(names, shp, strict=True))]  # fmt: skip
    params: dict[str, Any] = {**dict(sig.attrs), **(attrs or {})}
    nats: list[Any] = []
    texts = []
    shown: dict[str, str] = {}
    for spec, t, static in zip(op.index_args, sig.index_types, sig.static_index, strict=True):
        if static is not None:
            value = np.asarray(static, dtype=np.int64).reshape(t.shape)
            params[spec.name] = value
            texts.append(f"index {spec.name}: its static value {list(static)}")
            shown[f"index {spec.name}"] = str(value.tolist())
            continue
        rng = "every natural" if index_hi is None else f"every value 0..{index_hi - 1}"
        if t.shape == ():
            arr, s = nat_scalar(spec.name, index_hi)
            params[spec.name] = arr
            nats.append(s)
            texts.append(f"index {spec.name}: symbolic, {rng}")
        else:
            params[spec.name] = nat_vector(f"{spec.name}__{tag}", t.shape[0], index_hi)
            texts.append(f"index {spec.name} (nat[{t.shape[0]}]): symbolic at every position, "
                         f"{rng}, positions independent")  # fmt: skip
    if op.needs_position:
        params["_position"] = sig.position
    domains = {n: op.arg_domain(p, sig.attrs) for p, n in enumerate(names)}
    return TSetup(op, names, X, Tn, diff, params, nats, domains, texts, shown)


def _run(fn: Callable[..., Any] | None, what: str, *args: Any, **kw: Any) -> Any:
    if fn is None:
        raise NotTensor(f"the op has no {what} rule")
    try:
        return fn(*args, **kw)
    except SizeDependent:
        raise  # for verify._certify, which may prove again with that size concrete
    except (T.TermError, TypeError, ValueError, IndexError, AttributeError, NotImplementedError,
            KeyError) as e:  # fmt: skip
        raise NotTensor(f"the {what} rule does not run on tensor terms: "
                        f"{type(e).__name__}: {e}") from None  # fmt: skip


def as_t(v: Any) -> TArray:
    return v if isinstance(v, TArray) else asarray(v)


# -- outcome of one comparison -----------------------------------------------------------------


@dataclass
class TOutcome:
    """One tensor-level check: per compared array, its decision."""

    link: str
    name: str
    started: float = field(default_factory=time.perf_counter)
    hows: list[str] = field(default_factory=list)
    methods: set[str] = field(default_factory=set)
    failure: Counterexample | None = None
    undecided: str = ""
    error: str = ""
    #: said after the ``how`` of a failed check (what else was tried)
    note: str = ""

    def add(
        self, label: str, d: TDecision, st: TSetup, fixed: dict[str, str] | None = None
    ) -> None:
        if d.equal is True:
            self.hows.append(f"{label}: {d.how}")
            self.methods.add(d.method)
            return
        if d.equal is False and self.failure is None:
            self.failure = counterexample(self.name, label, d, st, fixed)
            return
        if d.equal is None and not self.undecided:
            self.undecided = f"{label}: {d.how}"

    @property
    def done(self) -> bool:
        return self.failure is not None or bool(self.undecided) or bool(self.error)

    def check(self, coverage: str) -> Check | None:
        """The check, or ``None`` when the tensor level did not decide it."""
        secs = time.perf_counter() - self.started
        if self.error:
            return Check(self.link, self.name, "exact", "fail", coverage, self.error, None, secs,
                         "tensor")  # type: ignore[arg-type]  # fmt: skip
        if self.failure is not None:
            return Check(self.link, self.name, "exact", "fail", coverage,  # type: ignore[arg-type]
                         "tensor-level comparison; element-level counterexample"
                         + (f"; {self.note}" if self.note else ""), self.failure,
                         secs, "tensor")  # fmt: skip
        if self.undecided:
            return None
        method = "probabilistic" if "probabilistic" in self.methods else "exact"
        how = "; ".join(self.hows[:6]) + (f"; ... ({len(self.hows)} in all)"
                                           if len(self.hows) > 6 else "")  # fmt: skip
        return Check(self.link, self.name, method, "pass", coverage, how, None, secs,  # type: ignore[arg-type]
                     "tensor")  # fmt: skip


def counterexample(check: str, label: str, d: TDecision, st: TSetup,
                   fixed: dict[str, str] | None) -> Counterexample:  # fmt: skip
    inner = d.decision
    inputs = {**st.static_shown, **(fixed or {})}
    for s in st.nat_symbols:
        if d.nat and s.name in d.nat:
            inputs[f"index {s.name.split('_')[1][1:]}"] = str(d.nat[s.name])
    if inner is not None and inner.point:
        inputs.update({k: fmt_value(v) for k, v in inner.point.items()})
    inputs.update(d.inputs or {})
    element = f"{label}[{','.join(map(str, d.element or ()))}]"
    return Counterexample(check, element, inputs,
                          (inner.expected if inner else None) or "?",
                          (inner.got if inner else None) or "?",
                          (inner.evidence if inner else None) or d.how)  # fmt: skip


def compare(out: TOutcome, label: str, got: Any, expected: Any, st: TSetup,
            fixed: dict[str, str] | None = None, seed: int = 0,
            search: bool = True) -> None:  # fmt: skip
    """``got == expected`` for every element (two arrays of the same shape); ``search=False``:
    a proof or nothing (no counterexample search where it is not proved)."""
    g, x = as_t(got), as_t(expected)
    if g.shape != x.shape:
        out.error = f"{label}: shape {list(g.shape)}, expected {list(x.shape)}"
        return
    q = T.free_vars(g.shape)
    try:
        ge, xe = g.at(q), x.at(q)
    except T.TermError as e:
        raise NotTensor(f"{label}: {e}") from None
    try:
        d = decide_tensor(ge, xe, [*q, *st.sizes], domains=st.domains,
                          nat_symbols=st.nat_symbols, seed=seed,
                          counterexamples=search and not st.sizes)  # fmt: skip
    except T.TermError as e:
        d = TDecision(None, f"term error: {e}")
    out.add(label, d, st, fixed)


# -- the checks --------------------------------------------------------------------------------


def adjoint_expected(J: TArray, ct_name: str, out_shape: tuple[int, ...], tan_name: str,
                     shape: tuple[int, ...]) -> TArray:  # fmt: skip
    """The Jacobian transpose applied to the cotangent leaf ``ct_name``: the coefficient of the
    tangent read ``tan_name(q)`` in ``sum_i ct[i] J[i]``."""
    q0 = T.free_vars(out_shape)
    body = J.at(q0)

    def total(k: int, env: dict[Any, Any]) -> Any:
        if k == len(out_shape):
            idx = tuple(env.get(v, v) for v in q0)
            return T.leaf_read(ct_name, idx, out_shape) * body.xreplace(env)
        if not isinstance(q0[k], se.Symbol):  # an axis of size 1: its index is 0
            return total(k + 1, env)
        return T.ssum(lambda v: total(k + 1, {**env, q0[k]: v}), 0, out_shape[k])

    L = total(0, {})

    def fn(q: tuple[Any, ...]) -> Any:
        return T.normalize(T.coefficient(L, tan_name, q))

    return TArray(shape, fn, "f")


def _compare_grads(out: TOutcome, G: Any, Jx: TArray, shapes: list[tuple[Any, ...]], st: TSetup,
                   prefix: str, fixed: dict[str, str] | None) -> None:  # fmt: skip
    """Each differentiable argument's cotangent in the VJP's result ``G`` (the cotangent leaf
    ``ct``) against the Jacobian transpose of ``Jx`` applied to it, up to the first that is not
    proved."""
    G = tuple(G) if isinstance(G, tuple | list) else (G,)
    for p in st.diff_args:
        want = adjoint_expected(Jx, "ct", Jx.shape, "d" + st.names[p], shapes[p])
        got = G[p] if G[p] is not None else TENSOR.zeros(shapes[p])
        compare(out, f"{prefix}grad {st.names[p]}", got, want, st, fixed)
        if out.done:
            break


def jvp_expected(F: TArray, st: TSetup) -> TArray:
    tangent = {st.names[p]: "d" + st.names[p] for p in st.diff_args}
    return TArray(F.shape, lambda idx: T.jvp_term(F.at(idx), tangent, conventional), "f")


def check_signature_tensor(sig: Signature, *, kinks: bool = True,
                           shapes: list[tuple[Any, ...]] | None = None,
                           sizes: list[Any] | None = None,
                           attrs: dict[str, Any] | None = None) -> list[Check]:  # fmt: skip
    """The rule-soundness checks of one signature at tensor level. Raises :class:`NotTensor`
    when the method does not apply; a check it could not decide is returned ``None``-free:
    the caller gets only decided checks and the names of the undecided ones in
    :attr:`undecided_checks` of the raised :class:`Partial`.

    With ``shapes`` (argument shapes with symbolic sizes, the symbols ``sizes``), the checks
    quantify over the sizes too and the kinks check is not run; the caller compares the
    forward's shape with the shape rule at each concrete shape (:mod:`verify._certify`)."""
    op = tl.get_op(sig.op)
    st = setup(sig, shapes=shapes, attrs=attrs)
    st.sizes = list(sizes or [])
    if shapes is not None:
        kinks = False
    names = rule_names(sig, kinks)
    outs = {n: TOutcome("rule", n) for n in names}
    seed = 0
    F = as_t(_run(op.symbolic, "symbolic forward", TENSOR, *st.X, **st.params))
    if shapes is None:
        out_type = op.infer_type(sig.arg_types, sig.index_types, sig.attrs)
        if F.shape != out_type.shape:
            raise NotTensor(f"the symbolic forward has shape {F.shape}, the shape rule says "
                            f"{out_type.shape}")  # fmt: skip
    if "forward = sym" in outs:
        fwd = _run(op.forward_rule, "forward", TENSOR, *st.X, **st.params)
        compare(outs["forward = sym"], "out", fwd, F, st, seed=seed)
    Jx = jvp_expected(F, st)
    J = _run(op.jvp_rule, "jvp", TENSOR, tuple(st.X), tuple(st.T), F, **st.params)
    compare(outs["jvp = derivative"], "jvp out", J, Jx, st, seed=seed)
    ct = leaf("ct", F.shape)
    G = _run(op.vjp_rule, "vjp", TENSOR, tuple(st.X), F, ct, **st.params)
    G = tuple(G) if isinstance(G, tuple | list) else (G,)
    o = outs["vjp = adjoint"]
    if len(G) != len(st.X):
        o.error = f"the vjp returned {len(G)} cotangents for {len(st.X)} arguments"
    else:
        arg_shapes = [t.shape for t in sig.arg_types] if shapes is None else shapes
        _compare_grads(o, G, Jx, arg_shapes, st, "", None)
    coverage = {n: "all elements (tensor level)" for n in names}
    if "kinks" in outs:
        coverage["kinks"] = _kinks(op, sig, st, outs["kinks"])
    checks = []
    undecided = []
    for n in names:
        c = outs[n].check(_coverage(coverage[n], st))
        if c is None:
            undecided.append((n, outs[n].undecided))
        else:
            checks.append(c)
    if undecided:
        raise Partial(checks, undecided)
    return checks


def kinks_check_tensor(sig: Signature) -> Check | None:
    """The kinks check alone, at ``sig``'s own shape (a certificate proved with symbolic sizes
    covers the other rule checks; kink points are drawn at a concrete shape); ``None`` when the
    tensor level did not decide it."""
    op = tl.get_op(sig.op)
    st = setup(sig)
    out = TOutcome("rule", "kinks")
    coverage = _kinks(op, sig, st, out)
    return out.check(_coverage(coverage, st))


def _coverage(text: str, st: TSetup) -> str:
    return "; ".join([text, *st.index_text]) if st.index_text else text


class Partial(Exception):
    """Some checks were decided at tensor level, others were not."""

    def __init__(self, checks: list[Check], undecided: list[tuple[str, str]]) -> None:
        super().__init__(f"undecided at tensor level: {undecided}")
        self.checks = checks
        self.undecided = undecided


def _kinks(op: tl.Op, sig: Signature, st: TSetup, out: TOutcome) -> str:
    """The kink points whose arguments are uniform, checked by substituting the value for every
    read of the argument."""
    rng = np.random.default_rng(0)
    kink_params = {k: v for k, v in st.params.items() if k != "_position"}
    try:
        points = op.kinks_rule(rng, *sig.arg_types, **kink_params)  # type: ignore[misc]
    except Exception as e:
        out.error = f"the kinks rule failed: {type(e).__name__}: {e}"
        return ""
    plans = [plan for plan in map(_kink_plan, points) if plan is not None]
    if not plans:
        out.undecided = ("no kink point with uniform or equal arguments, the only kind the "
                         "tensor level checks")  # fmt: skip
        return ""
    tangent = {st.names[p]: "d" + st.names[p] for p in st.diff_args}
    F = as_t(_run(op.symbolic, "symbolic forward", TENSOR, *st.X, **st.params))
    for n, plan in enumerate(plans):
        values = {st.names[p]: T.exact_scalar(v) for p, v in enumerate(plan)
                  if not isinstance(v, _Alias)}  # fmt: skip
        plan = [st.X[p] if v is _FREE else v for p, v in enumerate(plan)]
        aliases = {st.names[p]: st.names[v.of] for p, v in enumerate(plan)
                   if isinstance(v, _Alias) and v is not _FREE}  # fmt: skip
        shown = {name: fmt_value(Fraction(str(v))) for name, v in values.items()}
        shown |= {name: f"= {other}" for name, other in aliases.items()}
        Xp = [_kink_arg(x, v, st) for x, v in zip(st.X, plan, strict=True)]
        Fp = as_t(_run(op.symbolic, "symbolic forward", TENSOR, *Xp, **st.params))
        Jx = TArray(F.shape, lambda idx, values=values, aliases=aliases: alias_leaves(
            subst_leaves(T.jvp_term(F.at(idx), tangent, conventional), values), aliases),
            "f")  # fmt: skip
        J = _run(op.jvp_rule, "jvp", TENSOR, tuple(Xp), tuple(st.T), Fp, **st.params)
        compare(out, f"kink {n}: jvp out", J, Jx, st, {f"all {k}": v for k, v in shown.items()})
        if out.done:
            break
        ct = leaf("ct", F.shape)
        G = _run(op.vjp_rule, "vjp", TENSOR, tuple(Xp), Fp, ct, **st.params)
        _compare_grads(out, G, Jx, [t.shape for t in sig.arg_types], st, f"kink {n}: ",
                       {f"all {k}": v for k, v in shown.items()})  # fmt: skip
        if out.done:
            break
    return (f"{len(plans)} of the op's {len(points)} kink points (those whose every argument "
            "is uniform or equal to an earlier one), all elements (tensor level)")  # fmt: skip


@dataclass(frozen=True)
class _Alias:
    """A kink point's argument equal, element by element, to an earlier argument ``of``."""

    of: int


def _kink_plan(point: Any) -> list[Any] | None:
    """Per argument of a kink point: its uniform value, or an :class:`_Alias` of an earlier
    argument it equals; ``None`` when an argument is neither (not checkable at tensor level)."""
    arrays = [np.asarray(a) for a in point]
    plan: list[Any] = []
    for p, a in enumerate(arrays):
        if a.size and np.all(a == a.reshape(-1)[0]):
            plan.append(a.reshape(-1)[0])
            continue
        same = [q for q in range(p) if arrays[q].shape == a.shape
                and np.array_equal(arrays[q], a)]  # fmt: skip
        plan.append(_Alias(same[0]) if same else _FREE)
    aliased = {v.of for v in plan if isinstance(v, _Alias)}
    if any(v is _FREE and p not in aliased for p, v in enumerate(plan)):
        return None  # a non-uniform argument that no other argument equals: a concrete point
    return plan


#: A kink point's argument that stays symbolic: other arguments equal it (a tie everywhere).
_FREE = _Alias(-1)


def _kink_arg(x: TArray, v: Any, st: TSetup) -> TArray:
    """A kink point's argument: kept symbolic, an earlier argument, or a uniform value."""
    if isinstance(v, TArray):
        return v
    if isinstance(v, _Alias):
        return st.X[v.of]
    return TENSOR.full(x.shape, float(v))


def alias_leaves(e: Any, aliases: dict[str, str]) -> Any:
    """Every read of a leaf named in ``aliases`` replaced by the same read of its alias."""
    if not aliases:
        return e
    _no_atoms_of(e, aliases)
    repl = {f: T.fn(aliases[T.name_of(f)])(*f.args) for f in e.atoms(se.FunctionSymbol)
            if T.name_of(f) in aliases}  # fmt: skip
    return e.xreplace(repl) if repl else e


def _no_atoms_of(e: Any, names: Any) -> None:
    """Refuse a term with a softmax atom defined from one of ``names``: renaming the reads
    would not reach into its definition."""
    for f in T.fn_atoms(e):
        d = T.DERIVED.get(T.name_of(f) or "")
        if d is not None and d.mentions(names):
            raise T.TermError("a softmax over the leaves of a kink point")


def subst_leaves(e: Any, values: dict[str, Any]) -> Any:
    """Every read of a leaf named in ``values`` replaced by that value."""
    _no_atoms_of(e, values)
    repl = {f: values[T.name_of(f)] for f in e.atoms(se.FunctionSymbol)
            if T.name_of(f) in values}  # fmt: skip
    return e.xreplace(repl) if repl else e


__all__ = ["NotTensor", "Partial", "check_signature_tensor"]


# -- link 2: a compiled call against the reference rule ----------------------------------------

#: Compiled functions take int32 index inputs; the host maps every larger value to
#: ``2**31 - 1``, so the values a compiled call can see are ``0 .. 2**31 - 1``.
INT32_VALUES = 2**31


def check_call_tensor(sig: Signature, kind: str, inputs: tuple, outputs: tuple,
                      flags: tuple[bool, ...] | None, inner: Any, dtype: str) -> Check:  # fmt: skip
    """A nested ``tl_<kind>_<op>`` jaxpr (inputs and outputs laid out as ``inputs`` /
    ``outputs``, see :func:`verify._tape.call_layout`) against the op's reference rule on the
    tensor backend, for every element and every index value the compiled call can receive.
    Raises :class:`NotTensor` when the method does not apply or does not decide."""
    op = tl.get_op(sig.op)
    st = setup(sig, index_hi=INT32_VALUES, tag="i32")
    out_t = op.infer_type(sig.arg_types, sig.index_types, sig.attrs)
    name = f"compiled {kind} = reference"
    vals: dict[tuple, Any] = {}
    for p, x in enumerate(st.X):
        vals[("arg", p)] = x
        live = op.is_diff_arg(p) and (flags is None or flags[p])
        vals[("tan", p)] = leaf("d" + st.names[p], x.shape) if live else TENSOR.zeros(x.shape)
    vals[("out",)] = leaf("y", out_t.shape)
    vals[("ct",)] = leaf("ct", out_t.shape)
    for k, spec in enumerate(op.index_args):
        vals[("index", k)] = as_t(st.params[spec.name])
    attempts = [vals]
    if kind != "fwd":
        with_fwd = dict(vals)
        with _f32.constants(dtype):
            fwd = _run(op.forward_rule, "forward", TENSOR, *st.X, **st.params)
        with_fwd[("out",)] = as_t(fwd)
        attempts.append(with_fwd)
    last: TOutcome | None = None
    for n_try, v in enumerate(attempts):
        trial = TOutcome("compiled", name)
        args = [v[key] for key in inputs]
        try:
            got = TInterpreter().run(inner, *args)
        except Unsupported as e:
            raise NotTensor(f"{kind}: {e}") from None
        with _f32.constants(dtype):  # the constants a compilation in dtype holds
            want = _reference(op, kind, v, st)
        if len(got) != len(outputs):
            trial.error = f"tl_{kind}_{sig.op}: {len(got)} outputs, expected {len(outputs)}"
        else:
            produced = dict(zip(outputs, got, strict=True))
            for key, ref in want.items():
                if key not in produced and (ref is None or flags is not None):
                    continue
                g = produced.get(key)
                shape = (ref if ref is not None else g).shape
                g = g if g is not None else TENSOR.zeros(shape)
                ref = ref if ref is not None else TENSOR.zeros(shape)
                compare(trial, output_label(key, st.names), g, ref, st)
                if trial.done:
                    break
        last = trial
        if trial.failure is None and not trial.error and not trial.undecided:
            if n_try == 1:
                trial.hows.append("out = reference forward")
            break
    assert last is not None
    cov = f"{dtype} nested jaxpr; all elements (tensor level)"
    c = last.check(_coverage(cov, st))
    if c is None:
        raise NotTensor(f"{kind}: {last.undecided}")
    return c


def _reference(op: tl.Op, kind: str, vals: dict[tuple, Any], st: TSetup) -> dict[tuple, Any]:
    n = len(st.X)
    X = tuple(vals[("arg", p)] for p in range(n))
    if kind == "fwd":
        return {("out",): as_t(_run(op.forward_rule, "forward", TENSOR, *X, **st.params))}
    if kind == "jvp":
        Tn = tuple(vals[("tan", p)] for p in range(n))
        return {("tan_out",): as_t(_run(op.jvp_rule, "jvp", TENSOR, X, Tn, vals[("out",)],
                                        **st.params))}  # fmt: skip
    G = _run(op.vjp_rule, "vjp", TENSOR, X, vals[("out",)], vals[("ct",)], **st.params)
    G = tuple(G) if isinstance(G, tuple | list) else (G,)
    return {("grad", p): (None if g is None else as_t(g)) for p, g in enumerate(G)}
