"""Link 2 per signature: the lowered rules (jaxprs) equal the reference rules, symbolically.

A lowered rule is a JAX function; its jaxpr (what XLA compiles) is interpreted over symbolic
arguments (:mod:`verify._jaxpr`) and compared element by element with the reference rule run on
``SYM``. The reference is the spec (``op.forward_rule`` / ``jvp_rule`` / ``vjp_rule``), so a
``def_lower*`` override or a compiler wrapper cannot silently change meaning.

The JVP and VJP rules receive the forward output ``out`` as an argument; it is first given as
independent symbols (equality then holds for every ``out``), and, when that differs, as the
reference forward of the symbolic arguments (an override may recompute ``out`` itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

import torchlean_ir as tl
from torchlean_ir.backends import SYM, SymArray

from . import (
    _abstract,
    _f32,
    prims,  # noqa: F401  (registers every primitive's rules)
)
from ._jaxpr import Interpreter
from ._primitives import Unsupported
from ._report import Check
from ._rules import MAX_ELEMENTS, Collector, _seed, as_sym, choose_elements, compare_arrays
from ._sig import IndexPlan, Signature, index_plan, named_symbols, output_label, rule_params

Kind = str  # "forward" | "jvp" | "vjp"
R = TypeVar("R")


@dataclass(frozen=True)
class Lowered:
    """A traced lowered rule: its jaxpr and how its flat inputs/outputs are laid out.

    ``inputs`` names, in order, what each flat jaxpr input is: ``("arg", p)``, ``("tan", p)``,
    ``("out",)``, ``("ct",)`` or ``("index", k)``; ``outputs`` likewise ``("out",)``,
    ``("tan_out",)`` or ``("grad", p)`` (``None`` for outputs that carry nothing checked).
    With ``flags``, only the flagged arguments have tangents (the others are zero) and only
    their cotangents are produced and compared."""

    kind: Kind
    jaxpr: Any
    inputs: tuple[tuple[Any, ...], ...]
    outputs: tuple[tuple[Any, ...] | None, ...]
    flags: tuple[bool, ...] | None = None  # arguments carrying a tangent / receiving a cotangent


def _symbolic_inputs(
    op: tl.Op,
    sig: Signature,
    names: Sequence[str],
    out_shape: tuple[int, ...],
    flags: tuple[bool, ...] | None,
) -> dict[tuple, Any]:
    vals: dict[tuple, Any] = {}
    for p, (n, t) in enumerate(zip(names, sig.arg_types, strict=True)):
        vals[("arg", p)] = named_symbols(n, t.shape)
        live = op.is_diff_arg(p) and (flags is None or flags[p])
        vals[("tan", p)] = named_symbols("d" + n, t.shape) if live else SYM.zeros(t.shape)
    vals[("out",)] = named_symbols("y", out_shape)
    vals[("ct",)] = named_symbols("ct", out_shape)
    return vals


def trace_op_rule(
    op: tl.Op, sig: Signature, kind: Kind, params: dict[str, Any], dtype: str = "float64"
) -> Lowered:
    """The jaxpr of the op's own lowered rule (``op.lowering*`` on ``jax_backend(dtype)``),
    index values baked in as constants."""
    import jax

    from torchlean_ir.backends import jax_backend

    B = jax_backend(dtype)
    n = len(sig.arg_types)
    ex = [np.zeros(t.shape, dtype=dtype) for t in sig.arg_types]
    out_t = op.infer_type(sig.arg_types, sig.index_types, sig.attrs)
    ex_out = np.zeros(out_t.shape, dtype=dtype)
    with jax.enable_x64(dtype == "float64"):
        if kind == "forward":
            jx = jax.make_jaxpr(lambda *a: op.lowering(B, *a, **params))(*ex)  # type: ignore[misc]
            ins = tuple(("arg", p) for p in range(n))
            outs: tuple = (("out",),)
        elif kind == "jvp":

            def f_jvp(a: list, t: list, o: Any) -> Any:
                return op.lowering_jvp(B, tuple(a), tuple(t), o, **params)  # type: ignore[misc]

            jx = jax.make_jaxpr(f_jvp)(ex, ex, ex_out)
            ins = (*[("arg", p) for p in range(n)], *[("tan", p) for p in range(n)], ("out",))
            outs = (("tan_out",),)
        else:

            def f_vjp(a: list, o: Any, ct: Any) -> Any:
                g = op.lowering_vjp(B, tuple(a), o, ct, **params)  # type: ignore[misc]
                return tuple(g)

            jx = jax.make_jaxpr(f_vjp)(ex, ex_out, ex_out)
            ins = (*[("arg", p) for p in range(n)], ("out",), ("ct",))
            g = jax.eval_shape(f_vjp, ex, ex_out, ex_out)
            outs = tuple(("grad", p) for p in range(len(g)) if g[p] is not None)
    return Lowered(kind, jx, ins, outs)


def reference(
    op: tl.Op,
    kind: Kind,
    vals: dict[tuple, Any],
    n: int,
    params: dict[str, Any],
    dtype: str = "float64",
) -> dict[tuple, Any]:
    """The reference rule of ``kind`` on ``SYM`` for the symbolic inputs ``vals``, with the
    constants of a compilation in ``dtype`` (:mod:`verify._f32`)."""
    with _f32.constants(dtype):
        return _reference(op, kind, vals, n, params)


def _reference(
    op: tl.Op, kind: Kind, vals: dict[tuple, Any], n: int, params: dict[str, Any]
) -> dict[tuple, Any]:
    X = tuple(vals[("arg", p)] for p in range(n))
    if kind == "forward":
        return {("out",): as_sym(op.forward_rule(SYM, *X, **params))}  # type: ignore[misc]
    if kind == "jvp":
        T = tuple(vals[("tan", p)] for p in range(n))
        return {("tan_out",): as_sym(op.jvp_rule(SYM, X, T, vals[("out",)], **params))}  # type: ignore[misc]
    G = op.vjp_rule(SYM, X, vals[("out",)], vals[("ct",)], **params)  # type: ignore[misc]
    return {("grad", p): (None if g is None else as_sym(g)) for p, g in enumerate(G)}


def compare_lowered(
    col: Collector,
    op: tl.Op,
    sig: Signature,
    low: Lowered,
    params: dict[str, Any],
    names: Sequence[str],
    fixed: dict[str, str],
    max_elements: int,
    dtype: str = "float64",
) -> str:
    """Interpret ``low`` (compiled in ``dtype``) symbolically and compare with the reference
    (:func:`abstract_first`); returns the coverage."""
    args = (op, sig, low, params, names, fixed, max_elements, dtype)
    return abstract_first(col, lambda c: _compare_lowered(c, *args))


def abstract_first(col: Collector, run: Callable[[Collector], R]) -> R:
    """``run`` into ``col``, first under the softmax abstraction (:mod:`verify._abstract`);
    where softmax was met and that does not prove every element exactly, again in the explicit
    form."""
    trial = Collector(col.link, col.name)
    try:
        with _abstract.abstraction() as table:
            out = run(trial)
    except (_abstract.LemmaError, _abstract.Abandon):
        return run(col)
    if table.used and not _abstract.clean(trial):
        return run(col)
    col.merge(trial)
    if table.used:
        col.hows[table.note()] = 1
    return out


def _compare_lowered(
    col: Collector,
    op: tl.Op,
    sig: Signature,
    low: Lowered,
    params: dict[str, Any],
    names: Sequence[str],
    fixed: dict[str, str],
    max_elements: int,
    dtype: str = "float64",
) -> str:
    out_t = op.infer_type(sig.arg_types, sig.index_types, sig.attrs)
    vals = _symbolic_inputs(op, sig, names, out_t.shape, low.flags)
    domains = {s.name: op.arg_domain(p, sig.attrs) for p in range(len(names))
               for s in vals[("arg", p)].a.reshape(-1)}  # fmt: skip
    n = len(sig.arg_types)
    seed = _seed(sig.label(), low.kind, fixed)
    attempts = [vals]
    if low.kind != "forward":
        with_fwd = dict(vals)
        with_fwd[("out",)] = reference(op, "forward", vals, n, params, dtype)[("out",)]
        attempts.append(with_fwd)
    coverage = ""
    for k, v in enumerate(attempts):
        trial = Collector(col.link, col.name)
        args = [_flat_input(v, key, params, op) for key in low.inputs]
        try:
            got = Interpreter().run(low.jaxpr, *args)
        except Unsupported as e:
            col.undecided = col.undecided or f"{low.kind}: {e} (not interpreted)"
            return coverage
        except Exception as e:  # an interpreter limitation: never a pass
            col.undecided = (
                col.undecided or f"{low.kind}: interpreter error {type(e).__name__}: {e}"
            )
            return coverage
        want = reference(op, low.kind, v, n, params, dtype)
        if len(got) != len(low.outputs):
            col.fail(f"{low.kind}: {len(got)} outputs, expected {len(low.outputs)}")
            return coverage
        produced = {key: g for key, g in zip(low.outputs, got, strict=True) if key is not None}
        covs = []
        for key, ref in want.items():
            if key not in produced and (ref is None or low.flags is not None):
                continue
            g = produced.get(key)
            if g is None:
                g = SYM.zeros(ref.shape).a
            if ref is None:
                ref = SYM.zeros(np.shape(g))
            elems, cov = choose_elements(ref.shape, max_elements, seed)
            label = output_label(key, names)
            covs.append(f"{label}: {cov}")
            compare_arrays(trial, label, SymArray(g), ref, domains, elements=elems,
                           fixed_inputs=fixed, seed=seed)  # fmt: skip
            if trial.failed:
                break
        extra = [key for key in produced if key not in want]
        if extra:
            trial.fail(f"{low.kind}: outputs {extra} have no reference counterpart")
        coverage = "; ".join(covs)
        if not trial.failed or k == len(attempts) - 1:
            col.merge(trial)
            if k == 1:
                col.hows["out = reference forward"] = 1
            return coverage
    return coverage


def _flat_input(vals: dict[tuple, Any], key: tuple, params: dict[str, Any], op: tl.Op) -> Any:
    if key[0] == "index":
        return np.asarray(params[op.index_args[key[1]].name])
    return vals[key]


def compare_over_plan(
    col: Collector,
    sig: Signature,
    plan: IndexPlan,
    kind: str,
    lowered: Callable[[dict[str, Any]], Lowered],
    max_elements: int,
    dtype: str,
) -> str:
    """:func:`compare_lowered` at each index assignment of ``plan`` (``lowered`` gives the
    jaxpr for its parameters), up to the first failure or undecided comparison; the coverage."""
    op = tl.get_op(sig.op)
    names = sig.arg_names()
    cov = ""
    for index in plan.assignments:
        params = rule_params(sig, index)
        fixed = {f"index {s.name}": str(np.asarray(v).tolist())
                 for s, v in zip(op.index_args, index, strict=True)}  # fmt: skip
        try:
            low = lowered(params)
        except Exception as e:
            col.fail(f"tracing the lowered {kind} failed: {type(e).__name__}: {e}")
            break
        cov = compare_lowered(col, op, sig, low, params, names, fixed, max_elements,
                              dtype=dtype)  # fmt: skip
        if col.failed or col.undecided:
            break
    return f"{cov}; {plan.coverage}" if plan.coverage else cov


def check_op_lowering(
    sig: Signature,
    *,
    dtype: str = "float64",
    max_elements: int = MAX_ELEMENTS,
) -> list[Check]:
    """The op's lowered forward / JVP / VJP jaxprs against the reference rules, at every index
    assignment of :func:`verify._sig.index_plan`."""
    op = tl.get_op(sig.op)
    plan = index_plan(sig, seed=_seed(sig.label()))
    checks = []
    for kind in ("forward", "jvp", "vjp"):
        col = Collector("lowering", f"lowered {kind} = reference")

        def lowered(params: dict[str, Any], kind: str = kind) -> Lowered:
            return trace_op_rule(op, sig, kind, params, dtype)

        cov = compare_over_plan(col, sig, plan, kind, lowered, max_elements, dtype)
        checks.append(col.check(f"{dtype} jaxpr; {cov}"))
    return checks
