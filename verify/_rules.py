"""Link 1, rule soundness: each op's reference rules against the derivative of its forward.

For one signature (op, attributes, argument types, index values) and symbolic arguments:

* ``forward = sym`` (ops with a ``sym`` override): the forward equals the symbolic forward;
* ``jvp = derivative``: every output element of the JVP equals the exact derivative of the
  symbolic forward contracted with symbolic tangents (``out`` is the symbolic forward's output);
* ``vjp = adjoint``: every argument element of the VJP of a symbolic cotangent equals the
  Jacobian transpose applied to it, i.e. ``<jvp(dx), ct> = <dx, vjp(ct)>`` coefficient by
  coefficient, with the exact Jacobian;
* ``kinks``: at the op's declared non-smooth points (exact rationals), JVP and VJP equal the
  branch-wise derivative of the Piecewise forward there: the conventions of ``docs/ops.md``.

Derivatives are symengine's. ``Max`` / ``Min`` in a symbolic forward are read with a convention
before differentiating: two arguments split a tie in half (ops.md's ``max`` / ``min``), more
arguments give the first maximal one everything (ops.md's ``max_pool``); an op that means
another convention states it with ``B.where`` in a ``sym`` rule.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

import torchlean_ir as tl
from torchlean_ir.backends import SYM, SymArray

from . import _abstract
from ._cases import flat_pieces
from ._decide import Decision, decide_memo
from ._jaxpr import _ew
from ._kinks import conventional
from ._report import Check, Counterexample, Link, Method
from ._sig import (
    IndexPlan,
    Signature,
    index_plan,
    iter_elements,
    named_symbols,
    rule_names,
    rule_params,
)

#: Per check, at most this many elements are compared; beyond, a deterministic sample (first,
#: last and random elements) is, and the check is marked probabilistic with that coverage.
MAX_ELEMENTS = 4096
#: Signatures whose arguments have more elements than this are not checked ("not verified").
MAX_SYMBOLS = 60000


class RuleError(Exception):
    """A rule failed to run on the symbolic backend or returned something malformed."""


# -- helpers -----------------------------------------------------------------------------------


def as_sym(v: Any) -> SymArray:
    return v if isinstance(v, SymArray) else SYM.asarray(v)


def fmt_value(v: Fraction) -> str:
    if v.denominator == 1:
        return str(v.numerator)
    return f"{v} (~{float(v):.6g})"


def _seed(*parts: Any) -> int:
    return zlib.crc32(repr(parts).encode())


def choose_elements(shape: tuple[int, ...], limit: int, seed: int) -> tuple[list[tuple], str]:
    """All elements of ``shape`` when there are at most ``limit``, else a deterministic sample:
    the first and last ``limit // 8`` and random others."""
    n = int(np.prod(shape)) if shape else 1
    elems = list(iter_elements(shape))
    if n <= limit:
        return elems, f"all {n} elements"
    k = max(1, limit // 8)
    rng = np.random.default_rng(seed)
    middle = rng.choice(np.arange(k, n - k), size=limit - 2 * k, replace=False)
    picked = sorted({*range(k), *range(n - k, n), *middle.tolist()})
    return [elems[i] for i in picked], (
        f"{len(picked)} of {n} elements (first {k}, last {k}, {len(picked) - 2 * k} random; "
        f"seed {seed})"
    )


def _ix(ix: tuple) -> str:
    return "[" + ",".join(map(str, ix)) + "]"


@dataclass
class Collector:
    """Per-element decisions of one check, folded into a :class:`Check`."""

    link: Link
    name: str
    started: float = field(default_factory=time.perf_counter)
    methods: list[Method] = field(default_factory=list)
    hows: dict[str, int] = field(default_factory=dict)
    failure: Counterexample | None = None
    failed_method: Method = "exact"
    undecided: str = ""
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.failure is not None or bool(self.error)

    def add(
        self,
        element: str,
        d: Decision,
        fixed_inputs: dict[str, str] | None = None,
    ) -> None:
        self.hows[d.how] = self.hows.get(d.how, 0) + 1
        if d.equal is True:
            self.methods.append(d.method)
        elif d.equal is False and self.failure is None:
            inputs = dict(fixed_inputs or {})
            inputs.update({k: fmt_value(v) for k, v in (d.point or {}).items()})
            self.failure = Counterexample(
                self.name, element, inputs, d.expected or "?", d.got or "?", d.evidence or ""
            )
            self.failed_method = d.method
        elif d.equal is None and not self.undecided:
            self.undecided = f"{element}: {d.how}"

    def merge(self, other: Collector) -> None:
        """Fold another collector's outcome (same check) into this one."""
        self.methods += other.methods
        for k, v in other.hows.items():
            self.hows[k] = self.hows.get(k, 0) + v
        if other.failure is not None and self.failure is None:
            self.failure, self.failed_method = other.failure, other.failed_method
        self.undecided = self.undecided or other.undecided
        self.error = self.error or other.error

    def fail(self, message: str) -> None:
        if not self.error:
            self.error = message

    def check(self, coverage: str) -> Check:
        how = ", ".join(f"{k} ({v})" for k, v in sorted(self.hows.items(), key=lambda kv: -kv[1]))
        secs = time.perf_counter() - self.started
        if self.error:
            return Check(self.link, self.name, "exact", "fail", coverage, self.error, None, secs)
        if self.failure is not None:
            return Check(
                self.link, self.name, self.failed_method, "fail", coverage, how, self.failure, secs
            )
        if self.undecided:
            return Check(
                self.link, self.name, "not verified", "undecided", coverage,
                f"undecided at {self.undecided}; {how}", None, secs,
            )  # fmt: skip
        method: Method = "probabilistic" if "probabilistic" in self.methods else "exact"
        if "elements (first" in coverage:
            method = "probabilistic"
        return Check(self.link, self.name, method, "pass", coverage, how, None, secs)


def compare_arrays(
    col: Collector,
    label: str,
    got: Any,
    expected: Any,
    domains: dict[str, str],
    *,
    elements: list[tuple] | None = None,
    fixed_inputs: dict[str, str] | None = None,
    seed: int = 0,
) -> None:
    """Element-wise ``got == expected`` into ``col`` (stops at the first failure)."""
    g, x = as_sym(got), as_sym(expected)
    if g.shape != x.shape:
        col.fail(f"{label}: shape {list(g.shape)}, expected {list(x.shape)}")
        return
    for ix in elements if elements is not None else iter_elements(g.shape):
        table = _abstract.current()
        abstract = table is not None and table.used
        if abstract:
            d = _abstract.decide_polynomial(g.a[ix], x.a[ix])
        else:
            d = decide_memo(g.a[ix], x.a[ix], domains, seed)
        if abstract and not (d.equal is True and d.method == "exact"):
            raise _abstract.Abandon(f"{label}{_ix(ix)}: {d.how}")
        col.add(f"{label}{_ix(ix)}", d, fixed_inputs)
        if col.failed:
            return


# -- the checks --------------------------------------------------------------------------------


@dataclass
class _Setup:
    op: tl.Op
    names: list[str]
    X: list[SymArray]
    T: list[SymArray]
    domains: dict[str, str]
    diff_args: list[int]


def _setup(op: tl.Op, sig: Signature) -> _Setup:
    names = sig.arg_names()
    X = [named_symbols(n, t.shape) for n, t in zip(names, sig.arg_types, strict=True)]
    diff_args = [p for p in range(len(X)) if op.is_diff_arg(p)]
    T = [
        named_symbols("d" + n, t.shape) if p in diff_args else SYM.zeros(t.shape)
        for p, (n, t) in enumerate(zip(names, sig.arg_types, strict=True))
    ]
    domains: dict[str, str] = {}
    for p, x in enumerate(X):
        dom = op.arg_domain(p, sig.attrs)
        for s in x.a.reshape(-1):
            domains[s.name] = dom
    return _Setup(op, names, X, T, domains, diff_args)


Rows = list[list[dict[int, Any]]]


def _jacobian(F: SymArray, X: list[SymArray], diff_args: list[int]) -> tuple[SymArray, Rows]:
    """The conventional forward and, per output element (flat), per argument, its nonzero
    partial derivatives by flat element index (differentiable arguments only)."""
    Fc = SymArray(_ew(conventional, F.a))
    wrt = {s: (p, k) for p in diff_args for k, s in enumerate(X[p].a.reshape(-1))}
    table = _abstract.current()
    memo: dict[tuple[Any, Any], Any] = {}
    rows: Rows = []
    for e in Fc.a.reshape(-1):
        row: list[dict[int, Any]] = [{} for _ in X]
        if isinstance(e, se.Basic):
            deps = e.free_symbols if table is None else _abstract.depends_on(e, table)
            for s in deps:
                pk = wrt.get(s)
                if pk is None:
                    continue
                d = flat_pieces(
                    e.diff(s) if table is None else _abstract.total_diff(e, s, table, memo)
                )
                if d != 0:
                    row[pk[0]][pk[1]] = d
        rows.append(row)
    return Fc, rows


def _contract_jvp(rows: Rows, T: list[SymArray], shape: tuple[int, ...]) -> SymArray:
    """``sum_s dF_i/ds * t_s`` per output element."""
    flat_T = [t.a.reshape(-1) for t in T]
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        terms = [d * flat_T[p][k] for p, part in enumerate(row) for k, d in part.items()]
        out[i] = se.Add(*terms) if terms else se.Integer(0)
    return SymArray(out.reshape(shape))


def _contract_vjp(rows: Rows, ct: SymArray, shape: tuple[int, ...], p: int) -> SymArray:
    """``sum_i dF_i/ds * ct_i`` per element ``s`` of argument ``p``."""
    acc: dict[int, list[Any]] = {}
    cts = ct.a.reshape(-1)
    for i, row in enumerate(rows):
        for k, d in row[p].items():
            acc.setdefault(k, []).append(d * cts[i])
    n = int(np.prod(shape)) if shape else 1
    out = np.empty(n, dtype=object)
    for k in range(n):
        terms = acc.get(k)
        out[k] = se.Add(*terms) if terms else se.Integer(0)
    return SymArray(out.reshape(shape))


def _call(fn: Callable[..., Any] | None, what: str, *args: Any, **kw: Any) -> Any:
    if fn is None:
        raise RuleError(f"the op has no {what} rule")
    try:
        return fn(*args, **kw)
    except Exception as e:
        raise RuleError(
            f"the {what} rule failed on symbolic arguments: {type(e).__name__}: {e}"
        ) from e


def check_signature(
    sig: Signature,
    *,
    max_elements: int = MAX_ELEMENTS,
    kinks: bool = True,
) -> list[Check]:
    """The rule-soundness checks of one signature (see the module doc)."""
    op = tl.get_op(sig.op)
    total = sum(t.size for t in sig.arg_types)
    if total > MAX_SYMBOLS:
        return [
            Check("rule", "rules", "not verified", "undecided",
                  f"{total} argument elements > {MAX_SYMBOLS}", "too large to check symbolically")
        ]  # fmt: skip
    plan = index_plan(sig, seed=_seed(sig.label()))
    cols = {name: Collector("rule", name) for name in rule_names(sig, kinks)}
    st = _setup(op, sig)
    try:
        with _abstract.abstraction(products=True) as table:
            for t in st.T:
                table.perturbations.update(se.sympify(v) for v in t.a.reshape(-1))
            trial = {name: Collector("rule", name) for name in cols}
            coverage = _check_plan(op, sig, st, plan, trial, max_elements)
    except (_abstract.LemmaError, _abstract.Abandon):
        table, trial = None, {}
    if table is not None and (not table.used or all(_abstract.clean(c) for c in trial.values())):
        cols = trial
        if table.used:
            for c in cols.values():
                c.hows[table.note()] = 1
    else:  # not proved under the abstraction: the explicit form decides (and finds mismatches)
        coverage = _check_plan(op, sig, st, plan, cols, max_elements)
    out = []
    for name, col in cols.items():
        cov = coverage.get(name, "")
        if plan.coverage:
            cov = f"{cov}; {plan.coverage}" if cov else plan.coverage
        out.append(col.check(cov))
    return out


def _check_plan(
    op: tl.Op,
    sig: Signature,
    st: _Setup,
    plan: IndexPlan,
    cols: dict[str, Collector],
    max_elements: int,
) -> dict[str, str]:
    coverage: dict[str, str] = {}
    for index in plan.assignments:
        params = rule_params(sig, index)
        fixed = {
            f"index {spec.name}": str(np.asarray(v).tolist())
            for spec, v in zip(op.index_args, index, strict=True)
        }
        try:
            _check_one(op, sig, st, params, fixed, cols, coverage, max_elements)
        except RuleError as e:
            for c in cols.values():
                if not c.failed:
                    c.fail(f"{e} (at {fixed})" if fixed else str(e))
                    break
        if any(c.failed for c in cols.values()):
            break
    return coverage


def _check_one(
    op: tl.Op,
    sig: Signature,
    st: _Setup,
    params: dict[str, Any],
    fixed: dict[str, str],
    cols: dict[str, Collector],
    coverage: dict[str, str],
    max_elements: int,
) -> None:
    seed = _seed(sig.label(), fixed)
    F = as_sym(_call(op.symbolic, "symbolic forward", SYM, *st.X, **params))
    out_type = op.infer_type(sig.arg_types, sig.index_types, sig.attrs)
    if F.shape != out_type.shape:
        raise RuleError(f"the symbolic forward has shape {list(F.shape)}, the shape rule says "
                        f"{list(out_type.shape)}")  # fmt: skip
    out_elems, out_cov = choose_elements(F.shape, max_elements, seed)
    if "forward = sym" in cols:
        col = cols["forward = sym"]
        fwd = _call(op.forward_rule, "forward", SYM, *st.X, **params)
        compare_arrays(col, "out", fwd, F, st.domains, elements=out_elems, fixed_inputs=fixed,
                       seed=seed)  # fmt: skip
        coverage["forward = sym"] = out_cov
    Fc, rows = _jacobian(F, st.X, st.diff_args)
    # JVP
    col = cols["jvp = derivative"]
    J = as_sym(_call(op.jvp_rule, "jvp", SYM, tuple(st.X), tuple(st.T), F, **params))
    expected_J = _contract_jvp(rows, st.T, F.shape)
    compare_arrays(col, "jvp out", J, expected_J, st.domains, elements=out_elems,
                   fixed_inputs=fixed, seed=seed)  # fmt: skip
    coverage["jvp = derivative"] = out_cov
    # VJP
    col = cols["vjp = adjoint"]
    ct = named_symbols("ct", F.shape)
    table = _abstract.current()
    if table is not None:
        table.perturbations.update(ct.a.reshape(-1))
    G = _call(op.vjp_rule, "vjp", SYM, tuple(st.X), F, ct, **params)
    G = tuple(G) if isinstance(G, tuple | list) else (G,)
    if len(G) != len(st.X):
        col.fail(f"the vjp returned {len(G)} cotangents for {len(st.X)} arguments")
    else:
        covs = []
        for p in st.diff_args:
            expected_G = _contract_vjp(rows, ct, st.X[p].shape, p)
            got = G[p] if G[p] is not None else SYM.zeros(st.X[p].shape)
            elems, cov = choose_elements(st.X[p].shape, max_elements, seed + p)
            covs.append(f"{st.names[p]}: {cov}")
            compare_arrays(col, f"grad {st.names[p]}", got, expected_G, st.domains,
                           elements=elems, fixed_inputs=fixed, seed=seed)  # fmt: skip
            if col.failed:
                break
        coverage["vjp = adjoint"] = "; ".join(covs) if covs else "no differentiable argument"
    if "kinks" in cols:
        _check_kinks(op, sig, st, params, fixed, Fc, rows, cols["kinks"], coverage, seed)


def _check_kinks(
    op: tl.Op,
    sig: Signature,
    st: _Setup,
    params: dict[str, Any],
    fixed: dict[str, str],
    Fc: SymArray,
    rows: Rows,
    col: Collector,
    coverage: dict[str, str],
    seed: int,
) -> None:
    """JVP and VJP at the declared kink points equal the branch-wise derivative there."""
    rng = np.random.default_rng(seed % (2**32))
    kink_params = {k: v for k, v in params.items() if k != "_position"}
    try:
        points = op.kinks_rule(rng, *sig.arg_types, **kink_params)  # type: ignore[misc]
    except Exception as e:
        col.fail(f"the kinks rule failed: {type(e).__name__}: {e}")
        return
    for n, pt in enumerate(points):
        values = [np.asarray(a, dtype=np.float64) for a in pt]
        subs: dict[Any, Any] = {}
        shown = dict(fixed)
        for x, v in zip(st.X, values, strict=True):
            for s, val in zip(x.a.reshape(-1), v.reshape(-1), strict=True):
                f = Fraction(float(val))
                subs[s] = se.Rational(f.numerator, f.denominator)
                shown[s.name] = fmt_value(f)
        Xp = [SYM.asarray(v) for v in values]
        Fp = as_sym(_call(op.symbolic, "symbolic forward", SYM, *Xp, **params))
        at = [[{s: d.subs(subs) for s, d in part.items()} for part in row] for row in rows]
        J = as_sym(_call(op.jvp_rule, "jvp", SYM, tuple(Xp), tuple(st.T), Fp, **params))
        compare_arrays(col, f"kink {n}: jvp out", J, _contract_jvp(at, st.T, Fc.shape),
                       st.domains, fixed_inputs=shown, seed=seed)  # fmt: skip
        if col.failed:
            return
        ct = named_symbols("ct", Fc.shape)
        G = _call(op.vjp_rule, "vjp", SYM, tuple(Xp), Fp, ct, **params)
        G = tuple(G) if isinstance(G, tuple | list) else (G,)
        for p in st.diff_args:
            got = G[p] if G[p] is not None else SYM.zeros(st.X[p].shape)
            compare_arrays(col, f"kink {n}: grad {st.names[p]}", got,
                           _contract_vjp(at, ct, st.X[p].shape, p), st.domains, fixed_inputs=shown,
                           seed=seed)  # fmt: skip
            if col.failed:
                return
    coverage["kinks"] = f"{len(points)} kink points from the op's kinks rule, all elements"


__all__ = ["MAX_ELEMENTS", "IndexPlan", "RuleError", "check_signature"]
