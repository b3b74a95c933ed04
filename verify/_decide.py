"""Deciding ``got == expected`` for exact symbolic expressions.

The procedure, cheapest first:

1. **symengine**: ``expand(got - expected) == 0`` (or both sides identical). Exact.
2. **A quick numeric probe** at two random exact rational points, evaluated at 256 bits (about
   77 digits, MPFR through symengine): a clearly nonzero difference is a mismatch, reported
   with the point (exact when the difference there is a rational number).
3. **sympy**: the difference is folded into one ``Piecewise`` (``piecewise_fold``; ``Max`` /
   ``Min`` rewritten as pieces when needed); each branch is decided under its condition:
   infeasible branches are dropped (exact Fourier-Motzkin on linear conditions), linear
   equalities of the condition are substituted (ties such as ``a == b``), and the branch
   expression goes through rewriting (tanh / sigmoid forms to exp, exp of sums and logs of
   products expanded, ``cancel`` / ``together``, ``exp(d) == 1`` for sums of logs, finally
   ``simplify`` on small expressions). Exact.
4. **Random rational points** (inside every feasible branch, ties included), evaluated at 256
   bits: all zero gives ``probabilistic``, never ``exact``; a nonzero value is a mismatch with a
   concrete counterexample.

Identities are over the reals, where both sides are defined (the log of a non-positive number
and division by zero are outside every op's domain).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Literal

import symengine as se
import sympy as sp

from . import _linear as lin
from ._cases import decide_cases, parse_name
from ._interval import nonzero
from .terms import rebuild, rewrite, tick

Method = Literal["exact", "probabilistic", "not verified"]
Domain = Literal["real", "positive", "nonzero", "unit"]

#: Bits of precision for numeric evaluation (256 bits is about 77 decimal digits; >= 50 required).
PREC_BITS = 256
#: A difference below ``ZERO_TOL * max(1, |got|, |expected|)`` at 256 bits counts as zero.
ZERO_TOL = Fraction(1, 10**50)
#: A difference that small at a point is enclosed again at this precision (about 1233 digits):
#: an error below every float (an argument shifted by 1e-300) is then certified, not taken for 0.
DEEP_PREC_BITS = 4096
#: ... for differences of at most this many expression nodes (a true identity pays for it).
DEEP_MAX_NODES = 4000
#: Random points per branch in the probabilistic fallback.
SAMPLES = 12
#: Beyond this many operations, sympy's ``simplify`` is not attempted.
SIMPLIFY_MAX_OPS = 400
#: Beyond this many operations (as a tree) in ``got`` plus ``expected``, exact algebra is not
#: attempted (its normal forms would swell past memory): random points only, fewer of them.
ALGEBRA_MAX_TREE = 20000
BIG_SAMPLES = 4


@dataclass(frozen=True)
class Decision:
    """The outcome of deciding ``got == expected``.

    ``equal`` is ``True`` (proved or, for ``probabilistic``, sampled), ``False`` (a mismatch: the
    ``point`` is a counterexample) or ``None`` (undecided). ``how`` names the step that decided.
    """

    equal: bool | None
    method: Method
    how: str
    point: dict[str, Fraction] | None = None
    got: str | None = None
    expected: str | None = None
    evidence: str | None = None


def _size_ok(e: se.Basic, limit: int = 20000) -> bool:
    try:
        return len(str(e)) <= limit
    except Exception:
        return False


# -- symengine normal forms -------------------------------------------------------------------


def split_exp(e: se.Basic) -> se.Basic:
    """``exp(a + c * Max(...))`` as ``exp(a) * exp(c * Max(...))`` and ``exp(a + c * log(u))``
    as ``exp(a) * u**c``, everywhere in ``e``: the max shift of softmax-like forms and the log
    of a normaliser come out as factors. Polynomial exponents stay whole (splitting them into
    monomials would only make the expressions grow). Shared subterms are visited once."""
    return rewrite(e, _split_exp)


def _split_exp(e: se.Basic, args: list[Any]) -> se.Basic:
    if isinstance(e, se.Pow) and args[0] == se.E:
        terms = args[1].args if isinstance(args[1], se.Add) else (args[1],)
        special = [t for t in terms if _splittable(t)]
        if special:
            rest = [t for t in terms if not _splittable(t)]
            factors = [_exp_term(t) for t in special]
            if rest:
                factors.append(se.exp(se.Add(*rest)))
            return se.Mul(*factors)
        return se.exp(args[1])
    return rebuild(e, args)


def normalize(e: se.Basic, memo: dict[Any, Any] | None = None) -> se.Basic:
    """A cheap normal form for large expressions (shared subterms visited once): exp of sums
    split as in :func:`split_exp`, and a factor ``exp(c * Max(...))`` common to every term of a
    sum taken out of it, so that a max-shifted softmax ``exp(s - M) / sum(exp(s_k - M))``
    becomes ``exp(s) / sum(exp(s_k))`` (the factors cancel in the product)."""
    memo = {} if memo is None else memo
    if not isinstance(e, se.Basic) or not e.args or isinstance(e, se.Number):
        return e  # a number is a leaf (-oo has args (-1,) but no func)
    hit = memo.get(e)
    if hit is not None:
        return hit
    args = [normalize(a, memo) for a in e.args]
    if isinstance(e, se.Pow) and args[0] == se.E:
        out = split_exp(se.exp(args[1]))
    elif isinstance(e, se.Add):
        out = _factor_shifts(args)
    else:
        out = rebuild(e, args)
    memo[e] = out
    return out


def _shift_factors(t: se.Basic) -> list[se.Basic]:
    parts = t.args if isinstance(t, se.Mul) else (t,)
    return [
        p for p in parts if isinstance(p, se.Pow) and p.args[0] == se.E and _splittable(p.args[1])
    ]


def _factor_shifts(terms: list[se.Basic]) -> se.Basic:
    common = _shift_factors(terms[0])
    for t in terms[1:]:
        if not common:
            break
        have = _shift_factors(t)
        common = [f for f in common if f in have]
    total = se.Add(*terms)
    if not common:
        return total
    f = se.Mul(*common)
    return f * se.Add(*[t / f for t in terms])


def _splittable(t: se.Basic) -> bool:
    core = [a for a in t.args if not isinstance(a, se.Number)] if isinstance(t, se.Mul) else [t]
    return len(core) == 1 and isinstance(core[0], se.log | se.Max | se.Min)


def _exp_term(t: se.Basic) -> se.Basic:
    """``exp(t)``, with ``exp(c * log(u)) = u**c`` for a number ``c``."""
    if isinstance(t, se.log):
        return t.args[0]
    if isinstance(t, se.Mul):
        nums = [a for a in t.args if isinstance(a, se.Number)]
        rest = [a for a in t.args if not isinstance(a, se.Number)]
        if len(rest) == 1 and isinstance(rest[0], se.log):
            return rest[0].args[0] ** se.Mul(*nums)
    return se.exp(t)


def _rational_zero(e: se.Basic, full: bool = True) -> bool:
    """``e`` is 0 as a rational function of its atoms (exp of sums split): numerator 0. Without
    ``full``, only over its denominators group by group (:func:`_zero_over_denominators`), not
    over their product (which swells on large expressions)."""
    e = se.expand(split_exp(e))
    if e == 0:
        return True
    if _zero_over_denominators(e):
        return True
    if not full:
        return False
    num, _ = e.as_numer_denom()
    return se.expand(num) == 0


#: The largest power of a denominator looked for among the others (:func:`_powers_of`).
POWER_MAX = 8
#: Beyond this many distinct denominators, :func:`_zero_over_denominators` does not look for
#: powers among them.
DENOMINATORS_MAX = 64
#: A power is not expanded further when this many products of terms would make the next one.
POWER_PRODUCT_MAX = 50_000


def _terms(e: se.Basic) -> int:
    return len(e.args) if isinstance(e, se.Add) else 1


def _zero_over_denominators(e: se.Basic) -> bool:
    """An expanded sum ``e`` proved 0 over the least common multiple of its denominators,
    group by group: symengine expands a power of a sum in a denominator, ``1/(a + b)^2`` is
    ``1/(a^2 + 2 a b + b^2)``, so the terms of one normaliser's derivative (``1/l``,
    ``1/l^2``, ``1/l^4``: a blockwise softmax's backward) have unrelated denominators, and
    ``as_numer_denom`` multiplies them all together. Here each denominator that is an
    expanded power ``q^k`` of another one (checked by expanding ``q^k``) is written so, the
    terms are grouped by the denominators they hold, and each group's numerator over the
    group's least common multiple is expanded.

    Sound: every rewrite is an identity (``p = q^k`` checked exactly) and a group's terms
    times the common multiple sum to a polynomial; each group 0 wherever its denominators are
    nonzero makes the sum 0 there (incomplete: groups that cancel only together are left to
    ``as_numer_denom``)."""
    terms = e.args if isinstance(e, se.Add) else (e,)
    parsed: list[tuple[se.Basic, dict[se.Basic, int]]] = []
    for t in terms:
        num, den = [], {}
        for f in t.args if isinstance(t, se.Mul) else (t,):
            if isinstance(f, se.Pow) and isinstance(f.args[1], se.Number) and f.args[1] < 0:
                if not isinstance(f.args[1], se.Integer):
                    return False  # a root in a denominator: as_numer_denom's business
                den[f.args[0]] = den.get(f.args[0], 0) - int(f.args[1])
            else:
                num.append(f)
        parsed.append((se.Mul(*num), den))
    bases = {b for _, den in parsed for b in den}
    if not bases or len(bases) > DENOMINATORS_MAX:
        return False
    root = _powers_of(bases)
    groups: dict[frozenset, list[tuple[se.Basic, dict[se.Basic, int]]]] = {}
    for num, den in parsed:
        mapped: dict[se.Basic, int] = {}
        for b, k in den.items():
            r, m = root.get(b, (b, 1))
            mapped[r] = mapped.get(r, 0) + k * m
        groups.setdefault(frozenset(mapped), []).append((num, mapped))
    for members in groups.values():
        tick()
        lcm: dict[se.Basic, int] = {}
        for _, den in members:
            for b, k in den.items():
                lcm[b] = max(lcm.get(b, 0), k)
        total = se.Add(*[num * se.Mul(*[b ** (k - den.get(b, 0)) for b, k in lcm.items()])
                         for num, den in members])  # fmt: skip
        if se.expand(total) != 0:
            return False
    return True


def _powers_of(bases: set[se.Basic]) -> dict[se.Basic, tuple[se.Basic, int]]:
    """Each base that is an expanded power ``q^k`` (``2 <= k <=`` :data:`POWER_MAX`) of another
    base ``q`` (itself not such a power): ``{p: (q, k)}``."""
    sums = sorted((b for b in bases if isinstance(b, se.Add)), key=lambda b: len(b.args))
    out: dict[se.Basic, tuple[se.Basic, int]] = {}
    for q in sums:
        if q in out:
            continue
        power = q
        for k in range(2, POWER_MAX + 1):
            tick()
            if _terms(power) * _terms(q) > POWER_PRODUCT_MAX:
                break
            power = se.expand(power * q)
            n = _terms(power)
            hits = [p for p in sums if p not in out and p is not q and len(p.args) == n
                    and p == power]  # fmt: skip
            for p in hits:
                out[p] = (q, k)
            if n > len(sums[-1].args):
                break
    return out


def exp_as_symbols(e: se.Basic) -> se.Basic:
    """``e`` with every ``exp(c1 t1 + c2 t2 + ...)`` (after :func:`split_exp`) written
    ``z1^c1 z2^c2 ...``, one fresh symbol ``z`` per monomial ``t`` of the exponents.

    Sound for proving ``e == 0``: ``exp(sum c_i t_i) = prod exp(t_i)^c_i`` for reals, and a
    rational function that is 0 with the ``z`` independent of everything is 0 at their values.
    It makes ``exp(a) exp(b)`` and ``exp(a + b)``, or ``exp(a)^2`` and ``exp(2 a)``, one term
    (symengine merges the products of exponentials back into one exponent, and a symbol per
    exponential keeps them apart)."""
    symbols: dict[Any, se.Symbol] = {}

    def z(t: se.Basic) -> se.Basic:
        s = symbols.get(t)
        if s is None:
            s = symbols[t] = se.Symbol(f"_z{len(symbols)}")
        return s

    def node(x: se.Basic, args: list[Any]) -> Any:
        if not (isinstance(x, se.Pow) and args[0] == se.E):
            return rebuild(x, args)
        ex = se.expand(args[1])
        factors = []
        for t in ex.args if isinstance(ex, se.Add) else (ex,):
            if isinstance(t, se.Number):
                factors.append(se.exp(t))
                continue
            parts = t.args if isinstance(t, se.Mul) else (t,)
            c = se.Mul(*[a for a in parts if isinstance(a, se.Number)])
            factors.append(z(se.Mul(*[a for a in parts if not isinstance(a, se.Number)])) ** c)
        return se.Mul(*factors)

    return rewrite(split_exp(e), node)


def se_zero(diff: se.Basic) -> str | None:
    """Cheap exact proofs in symengine that ``diff`` is 0; the name of the one that worked."""
    try:
        if _rational_zero(diff):
            return "symengine normal form"
        # d == 0 <=> exp(d) == 1 for real d: sums of logs become products.
        if diff.atoms(se.log) and _rational_zero(split_exp(se.exp(diff)) - 1):
            return "symengine exp(d) = 1"
        if _has_exp_of_sum(diff) and _rational_zero(exp_as_symbols(diff)):
            return "symengine normal form, exponentials by monomial"
    except Exception:  # a cheap attempt only: the later steps decide
        return None
    return None


#: Past :data:`ALGEBRA_MAX_TREE`, the exponentials-by-monomial normal form is still tried up to
#: this size (a blockwise softmax's backward, with its shifts written as factors) ...
EXP_MONOMIALS_MAX_TREE = 100_000
#: ... and up to this size over its denominators group by group only (a blockwise softmax's
#: backward at a head dimension of 2: :func:`_zero_over_denominators`), for a caller that
#: keeps exact results only (``sample=False``).
EXP_DENOMINATORS_MAX_TREE = 400_000


def _exp_monomials_zero(diff: se.Basic, full: bool = True) -> bool:
    try:
        return _has_exp_of_sum(diff) and _rational_zero(exp_as_symbols(se.expand(diff)), full)
    except (ArithmeticError, RuntimeError, TypeError, ValueError):
        return False


def _has_exp_of_sum(e: se.Basic) -> bool:
    return any(isinstance(p.args[1], se.Add | se.Mul) for p in e.atoms(se.Pow)
               if p.args[0] == se.E)  # fmt: skip


# -- numeric evaluation ------------------------------------------------------------------------


def _se_point(point: Mapping[str, Fraction]) -> dict[se.Symbol, se.Basic]:
    return {se.Symbol(k): se.Rational(v.numerator, v.denominator) for k, v in point.items()}


def _numeric(e: se.Basic) -> se.Basic | None:
    """An exact rational or a 256-bit float for a closed expression, ``None`` if it does not
    evaluate to a real number."""
    if isinstance(e, se.Rational | se.Integer):
        return e
    try:
        v = e.n(PREC_BITS, real=True)
    except Exception:
        return None
    return v if isinstance(v, se.Number) else None


def _show(v: se.Basic | None) -> str:
    if v is None:
        return "undefined"
    if isinstance(v, se.Integer | se.Rational):
        f = Fraction(int(v.p), int(v.q)) if hasattr(v, "p") else Fraction(int(v))
        return str(f) if f.denominator == 1 else f"{f} (~{float(f):.17g})"
    return f"{float(v):.17g}"


def evaluate_at(
    got: se.Basic, expected: se.Basic, point: Mapping[str, Fraction], deep: bool = False
) -> tuple[bool | None, str, str, str]:
    """Compare both sides at an exact point: ``(differ?, got, expected, evidence)``; ``differ``
    is ``None`` when a side does not evaluate to a finite real number. With ``deep``, a
    difference too small to tell from 0 at 256 bits is enclosed at :data:`DEEP_PREC_BITS`."""
    sub = _se_point(point)
    try:
        g = se.sympify(got).subs(sub)
        x = se.sympify(expected).subs(sub)
    except Exception:
        return None, "?", "?", "substitution failed"
    d = se.expand(g - x)
    if d == 0:
        return False, _show(_numeric(g)), _show(_numeric(x)), "exact"
    gv, xv, dv = _numeric(g), _numeric(x), _numeric(d)
    if gv is None or xv is None or dv is None:
        return None, _show(gv), _show(xv), "not a finite real number"
    exact = isinstance(dv, se.Integer | se.Rational) and not isinstance(dv, se.RealMPFR)
    if exact:
        return True, _show(gv), _show(xv), "exact rational arithmetic"
    scale = max(1.0, abs(float(gv)), abs(float(xv)))
    mag = abs(float(dv))
    if mag <= float(ZERO_TOL) * scale:
        if deep and tree_size(d, {}) <= DEEP_MAX_NODES:
            proved, text = nonzero(d, DEEP_PREC_BITS)
            if proved:
                return (
                    True,
                    _show(gv),
                    _show(xv),
                    (f"interval arithmetic at {DEEP_PREC_BITS} bits: {text}"),
                )
        return False, _show(gv), _show(xv), f"|difference| = {mag:.2e} at {PREC_BITS} bits"
    # the expanded difference itself, or, when that is large, each side on its own
    proved, text = nonzero(d) if tree_size(d, {}) <= DEEP_MAX_NODES else nonzero(g, minus=x)
    if proved:
        return True, _show(gv), _show(xv), f"interval arithmetic at {PREC_BITS} bits: {text}"
    return True, _show(gv), _show(xv), f"|difference| = {mag:.3g} at {PREC_BITS} bits"


# -- sympy -------------------------------------------------------------------------------------


def _to_sympy(e: se.Basic, domains: Mapping[str, Domain]) -> tuple[sp.Basic, dict[str, sp.Symbol]]:
    s = sp.sympify(e)
    repl = {}
    names: dict[str, sp.Symbol] = {}
    for sym in s.free_symbols:
        dom = domains.get(sym.name, "real")
        new = (
            sp.Symbol(sym.name, positive=True)
            if dom in ("positive", "unit")
            else sp.Symbol(sym.name, real=True)
        )
        repl[sym] = new
        names[sym.name] = new
    return s.xreplace(repl), names


def _max_min_pieces(s: sp.Basic) -> sp.Basic:
    """Rewrite ``Max`` / ``Min`` as ``Piecewise`` (only to decide equalities: both sides are
    rewritten alike, so the convention at ties does not matter here)."""
    atoms = s.atoms(sp.Max, sp.Min)
    if not atoms:
        return s
    return s.rewrite(sp.Piecewise)


def _smooth_zero(s: sp.Basic) -> bool:
    """Exact rewriting steps for an expression without Piecewise; ``True`` when proved 0."""
    if s == 0:
        return True
    try:
        if s.has(sp.tanh, sp.sinh, sp.cosh, sp.coth):
            s = s.rewrite(sp.exp)
        s = sp.expand(s, power_exp=True, power_base=False, log=False)
        if s == 0:
            return True
        t = sp.cancel(sp.together(s))
        if t == 0:
            return True
        if s.has(sp.log):
            e2 = sp.expand_log(s, force=True)
            if sp.cancel(sp.together(sp.expand(e2, power_exp=True))) == 0:
                return True
            # d == 0  <=>  exp(d) == 1 for real d: turns sums of logs into products.
            ex = sp.expand(sp.exp(s), power_exp=True)
            if sp.cancel(sp.together(ex - 1)) == 0:
                return True
        if sp.count_ops(s) <= SIMPLIFY_MAX_OPS and sp.simplify(s) == 0:
            return True
    except Exception:
        return False
    return False


def _domain_constraints(
    names: list[str], domains: Mapping[str, Domain], rng: random.Random
) -> list[lin.Lin]:
    out = []
    for n in names:
        dom = domains.get(n, "real")
        one = ((n, Fraction(1)),)
        neg = ((n, Fraction(-1)),)
        if dom == "positive":
            out.append(lin.Lin(one, Fraction(0), ">"))
        elif dom == "unit":
            out += [lin.Lin(one, Fraction(0), ">"), lin.Lin(neg, Fraction(1), ">")]
        elif dom == "nonzero":
            out.append(lin.Lin(one if rng.random() < 0.5 else neg, Fraction(0), ">"))
    return out


@dataclass
class _Branch:
    expr: sp.Basic
    conj: list[lin.Lin] | None  # None: nonlinear condition (sample by rejection)
    cond: sp.Basic


def _branches(s: sp.Basic) -> list[_Branch] | None:
    """The branches of a folded Piecewise with their effective conditions as conjunctions of
    linear constraints (a branch per DNF term); ``None`` when conditions are too large."""
    if not isinstance(s, sp.Piecewise):
        return [_Branch(s, [], sp.true)]
    out = []
    previous: list[sp.Basic] = []
    for expr, cond in s.args:
        eff = sp.And(cond, *[sp.Not(p) for p in previous]) if previous else cond
        previous.append(cond)
        try:
            terms = lin.dnf(eff)
        except lin.Nonlinear:
            out.append(_Branch(expr, None, eff))
            continue
        for conj in terms:
            out.append(_Branch(expr, conj, eff))
        if len(out) > 512:
            return None
    return out


def _subst_equalities(s: sp.Basic, conj: list[lin.Lin], names: Mapping[str, sp.Symbol]) -> sp.Basic:
    """Substitute the linear equalities of a branch condition (ties such as ``a == b``)."""
    sub = {}
    for var, (co, c0) in lin.equality_substitution(conj).items():
        expr = sp.Rational(c0.numerator, c0.denominator)
        for k, v in co.items():
            expr += sp.Rational(v.numerator, v.denominator) * names.get(k, sp.Symbol(k, real=True))
        sub[names.get(var, sp.Symbol(var, real=True))] = expr
    return s.xreplace(sub) if sub else s


# -- the procedure -----------------------------------------------------------------------------


def _always_nan(e: Any) -> bool:
    """``e`` holds NaN outside every branch and extremum: NaN at every input."""
    if e == se.nan:
        return True
    if isinstance(e, se.Piecewise | se.Max | se.Min) or not e.args:
        return False
    return any(_always_nan(a) for a in e.args)


def _nan_against_number(got: Any, expected: Any) -> Decision | None:
    """A mismatch where one side is NaN at every input and the other a real number at a
    rational point (e.g. ``exp(-inf - -inf)`` in a softmax row with no allowed entry, where the
    reference says 0)."""
    for a, b in ((got, expected), (expected, got)):
        if not _always_nan(a) or any(b.has(v) for v in (se.nan, se.oo, se.zoo)):
            continue
        point = {s: se.Rational(1, 2 + n) for n, s in enumerate(sorted(b.free_symbols, key=str))}
        value = b.xreplace(point) if point else b
        if isinstance(value, se.Number) and value != se.nan:
            return Decision(False, "exact", "NaN against a number",
                            {s.name: Fraction(str(v)) for s, v in point.items()},
                            str(se.nan if a is got else value), str(value if a is got else se.nan),
                            "exact: NaN is not a number")  # fmt: skip
    return None


def decide_equal(
    got: se.Basic,
    expected: se.Basic,
    *,
    domains: Mapping[str, Domain] | None = None,
    seed: int = 0,
    use_sympy: bool = True,
    sample: bool = True,
    probe_only: bool = False,
) -> Decision:
    """Decide ``got == expected`` as functions of their free symbols (see the module doc).
    Without ``sample``, what the exact steps leave open is ``not verified`` at once (no random
    points: for a caller that keeps exact results only). With ``probe_only``, only the quick
    numeric probe runs (the same points as the full procedure's): a mismatch, or ``not
    verified`` (for a search over many elements that must not pay for proofs)."""
    domains = domains or {}
    got, expected = se.sympify(got), se.sympify(expected)
    if got == expected:
        return Decision(True, "exact", "identical")
    nan = _nan_against_number(got, expected)
    if nan is not None:
        return nan
    if probe_only:
        return _probe(got, expected, domains, random.Random(seed))
    memo: dict[Any, int] = {}
    size = tree_size(got, memo) + tree_size(expected, memo)
    if size > ALGEBRA_MAX_TREE:
        norm: dict[Any, Any] = {}
        if normalize(got, norm) == normalize(expected, norm):
            return Decision(True, "exact", "identical after normalisation")
        # past EXP_MONOMIALS_MAX_TREE only for a caller that keeps exact results only (the
        # tensor level's atoms); one that samples gets its random points at once
        limit = EXP_MONOMIALS_MAX_TREE if sample else EXP_DENOMINATORS_MAX_TREE
        if size <= limit and _exp_monomials_zero(got - expected,
                                                 full=size <= EXP_MONOMIALS_MAX_TREE):  # fmt: skip
            return Decision(True, "exact", "symengine normal form, exponentials by monomial")
        if not sample:
            return Decision(None, "not verified", "too large for the exact steps")
        return _sample_big(got, expected, size, domains, random.Random(seed))
    diff = se.expand(got - expected)
    if diff == 0:
        return Decision(True, "exact", "symengine expand")
    if not diff.atoms(se.Piecewise):
        how = se_zero(diff)
        if how:
            return Decision(True, "exact", how)
    rng = random.Random(seed)
    free = sorted(s.name for s in (got.free_symbols | expected.free_symbols))
    # A closed difference: decide at once.
    if not diff.free_symbols:
        differ, g, x, ev = evaluate_at(got, expected, {})
        if differ is True:
            return Decision(
                False,
                "exact" if ev.startswith("exact") else "probabilistic",
                "closed form",
                {},
                g,
                x,
                ev,
            )
    # Quick numeric probe: random points, mismatches found early.
    d = _probe(got, expected, domains, rng)
    if d.equal is False:
        return d
    if diff.atoms(se.Piecewise, se.Max, se.Min):
        d = _cases_decide(got, expected, diff, free, seed)
        if d is not None:
            return d
    if use_sympy and _size_ok(diff):
        d = _sympy_decide(got, expected, diff, free, domains, rng)
        if d is not None:
            return d
    if not sample:
        return Decision(None, "not verified", "not proved by the exact steps")
    return _sample(got, expected, diff, free, domains, rng)


def _probe(
    got: se.Basic, expected: se.Basic, domains: Mapping[str, Domain], rng: random.Random
) -> Decision:
    """Two random exact points where both sides are finite reals (at most
    :data:`PROBE_DRAWS` drawn: a point where a side is not, a square root of a negative
    difference of independent atoms, is replaced by the next), then tie points
    (:func:`_tie_points`) of the last one: a mismatch found there, else ``not verified``.
    Replacing such a point keeps what the probe finds from depending on how the atoms happen
    to be numbered (which value lands under the root)."""
    free = sorted(s.name for s in (got.free_symbols | expected.free_symbols))
    finite: list[dict[str, Fraction]] = []
    point: dict[str, Fraction] = {}
    for drawn in range(1, PROBE_DRAWS + 1):
        point = _random_point(free, domains, rng)
        differ, g, x, ev = evaluate_at(got, expected, point)
        if differ:
            return Decision(False, _mismatch_method(ev), "random point", point, g, x, ev)
        if differ is False:
            finite.append(point)
        if len(finite) == 2 or (drawn >= 2 and not free):
            break
    for tied in _tie_points(finite[-1] if finite else point):
        differ, g, x, ev = evaluate_at(got, expected, tied)
        if differ:
            return Decision(False, _mismatch_method(ev), "random point", tied, g, x, ev)
    return Decision(None, "not verified", "no mismatch at two random points and tie points")


#: Random points a probe draws at most to find two where both sides are finite reals.
PROBE_DRAWS = 12


#: Tie points per probe, at most.
TIE_POINTS = 3


def _tie_points(point: dict[str, Fraction]) -> list[dict[str, Fraction]]:
    """``point`` with every element of one tensor (the symbols of one base name, ``x[0,1]``,
    ``x[0,2]``) at one value, its first's, the others as they are: one point per such tensor
    (at most :data:`TIE_POINTS`). Every maximum over its elements is then a tie, where the
    conventions of a reduction's derivative differ (JAX splits a tie evenly; the reference
    gives it to one maximum), and random points never meet a tie. Then ``point`` with every
    element of one tensor at 0 (at most :data:`TIE_POINTS` of them): every sum of products over
    it is then 0, a layer's pre-activation at its kink ``relu(w @ x)`` at ``x = 0``."""
    by_base: dict[str, list[str]] = {}
    for n in sorted(point):
        by_base.setdefault(parse_name(n)[0], []).append(n)
    out = []
    for names in by_base.values():
        if len(names) < 2:
            continue
        tied = dict(point)
        for n in names:
            tied[n] = point[names[0]]
        out.append(tied)
        if len(out) == TIE_POINTS:
            break
    for names in list(by_base.values())[:TIE_POINTS]:
        zero = dict(point)
        for n in names:
            zero[n] = Fraction(0)
        out.append(zero)
    return out


def _leaf_zero(e: se.Basic) -> bool:
    """A smooth difference (no Piecewise) is 0: symengine normal forms, then sympy."""
    e = se.expand(e)
    if e == 0 or se_zero(e):
        return True
    if not _size_ok(e, 5000):
        return False
    try:
        s, _ = _to_sympy(e, {})
    except Exception:
        return False
    return _smooth_zero(s)


def _cases_decide(
    got: se.Basic, expected: se.Basic, diff: se.Basic, free: list[str], seed: int
) -> Decision | None:
    """Case splitting on the Piecewise conditions (:mod:`verify._cases`)."""
    found: dict[str, tuple[str, str, str]] = {}

    def differ(pt: dict[str, Fraction]) -> bool:
        d, g, x, ev = evaluate_at(got, expected, pt)
        if d:
            found["ce"] = (g, x, ev)
        return bool(d)

    res = decide_cases(diff, free, [], _leaf_zero, differ, seed)
    if res is None:
        return None
    if res.counterexample is not None:
        g, x, ev = found["ce"]
        return Decision(False, _mismatch_method(ev), "case split", res.counterexample, g, x, ev)
    if res.proved:
        return Decision(True, "exact", "case split")
    return None


def tree_size(e: Any, memo: dict[Any, int]) -> int:
    """Operations in ``e`` as a tree (a shared subterm counts each time it occurs)."""
    args = getattr(e, "args", ())
    if not args:
        return 1
    got = memo.get(e)
    if got is None:
        got = memo[e] = 1 + sum(tree_size(a, memo) for a in args)
    return got


def _sample_big(
    got: se.Basic, expected: se.Basic, size: int, domains: Mapping[str, Domain], rng: random.Random
) -> Decision:
    free = sorted(s.name for s in (got.free_symbols | expected.free_symbols))
    bad = 0
    for _ in range(BIG_SAMPLES):
        pt = _random_point(free, domains, rng)
        differ, g, x, ev = evaluate_at(got, expected, pt)
        if differ:
            return Decision(False, _mismatch_method(ev), "random point", pt, g, x, ev)
        bad += differ is None
    if bad == BIG_SAMPLES:
        return Decision(None, "not verified", "no point evaluated to a real number")
    return Decision(
        True,
        "probabilistic",
        f"{BIG_SAMPLES - bad} random rational points at {PREC_BITS} bits (expressions of "
        f"{size} operations: too large for exact algebra)",
    )


def _mismatch_method(evidence: str) -> Method:
    # A nonzero exact rational is a proof; a 77-digit evaluation far from 0 is numerical evidence.
    return "exact" if evidence.startswith(("exact", "interval")) else "probabilistic"


def _random_point(
    free: list[str], domains: Mapping[str, Domain], rng: random.Random
) -> dict[str, Fraction]:
    out = {}
    for n in free:
        dom = domains.get(n, "real")
        if dom == "positive":
            v = Fraction(rng.randint(64, 4096), 1024)
        elif dom == "unit":
            v = Fraction(rng.randint(16, 1008), 1024)
        else:
            v = Fraction(rng.randint(64, 4096), 1024) * rng.choice((-1, 1))
        out[n] = v
    return out


def _sympy_decide(
    got: se.Basic,
    expected: se.Basic,
    diff: se.Basic,
    free: list[str],
    domains: Mapping[str, Domain],
    rng: random.Random,
) -> Decision | None:
    try:
        s, names = _to_sympy(diff, domains)
    except Exception:
        return None
    try:
        if not s.has(sp.Piecewise) and _smooth_zero(s):
            return Decision(True, "exact", "sympy rewriting")
        if s.has(sp.Max, sp.Min):
            s = _max_min_pieces(s)
        folded = sp.piecewise_fold(s)
        branches = _branches(folded)
    except Exception:
        return None
    if branches is None:
        return None
    undecided = False
    for br in branches:
        if br.conj is None:
            undecided = True
            continue
        pt = lin.solve(br.conj + _domain_constraints(free, domains, rng), free, rng)
        if pt is None:
            continue  # infeasible branch
        if pt == "unknown":
            undecided = True
            continue
        try:
            expr = _subst_equalities(br.expr, lin.tighten(br.conj), names)
            expr = sp.piecewise_fold(expr)
        except Exception:
            undecided = True
            continue
        if isinstance(expr, sp.Piecewise):
            undecided = True
            continue
        if _smooth_zero(expr):
            continue
        # Not proved: look for a counterexample inside this branch.
        for _ in range(4):
            differ, g, x, ev = evaluate_at(got, expected, pt)
            if differ:
                return Decision(False, _mismatch_method(ev), "branch point", pt, g, x, ev)
            pt = lin.solve(br.conj + _domain_constraints(free, domains, rng), free, rng)
            if not isinstance(pt, dict):
                break
        undecided = True
    if not undecided:
        return Decision(True, "exact", "sympy, branch by branch")
    return None


def _sample(
    got: se.Basic,
    expected: se.Basic,
    diff: se.Basic,
    free: list[str],
    domains: Mapping[str, Domain],
    rng: random.Random,
) -> Decision:
    """Random exact points (every feasible branch when conditions are linear)."""
    points: list[dict[str, Fraction]] = [_random_point(free, domains, rng) for _ in range(SAMPLES)]
    try:
        s, _names = _to_sympy(diff, domains)
        if s.has(sp.Max, sp.Min):
            s = _max_min_pieces(s)
        branches = _branches(sp.piecewise_fold(s)) if s.has(sp.Piecewise) else None
    except Exception:
        branches = None
    for br in branches or []:
        if br.conj is None:
            continue
        for _ in range(3):
            pt = lin.solve(br.conj + _domain_constraints(free, domains, rng), free, rng)
            if isinstance(pt, dict):
                points.append(pt)
    bad = 0
    for k, pt in enumerate(points):
        differ, g, x, ev = evaluate_at(got, expected, pt, deep=k < 2)
        if differ:
            return Decision(False, _mismatch_method(ev), "random point", pt, g, x, ev)
        if differ is None:
            bad += 1
    if bad == len(points):
        return Decision(None, "not verified", "no point evaluated to a real number")
    return Decision(
        True,
        "probabilistic",
        f"{len(points) - bad} random rational points at {PREC_BITS} bits",
    )


_MEMO: dict[tuple, Decision] = {}
_MEMO_MAX = 20000


def decide_memo(got: Any, expected: Any, domains: dict[str, str], seed: int,
                probe_only: bool = False) -> Decision:  # fmt: skip
    """:func:`decide_equal`, memoised up to a renaming of symbols: per base name (``x`` of
    ``x[i,j]``), symbols are renumbered by the rank of their index, so the elements of an
    elementwise op, or the windows of a pooling op, are decided once per shape of expression;
    the bases are renumbered by their element sets (their names break ties only), so renaming
    a leaf changes neither the decision nor the points it is sampled at."""
    got, expected = se.sympify(got), se.sympify(expected)
    if got == expected:
        return decide_equal(got, expected)
    syms = got.free_symbols | expected.free_symbols
    by_base: dict[str, list[tuple[tuple[int, ...], Any]]] = {}
    for sym in syms:
        base, ix = parse_name(sym.name)
        by_base.setdefault(base, []).append((ix, sym))
    repl: dict[Any, Any] = {}
    back: dict[str, str] = {}
    cdom: dict[str, str] = {}
    for items in by_base.values():
        items.sort(key=lambda t: t[0])
    # bases renamed too, in an order that does not depend on their names where their element
    # sets differ (a leaf's name then changes neither the decision nor its sample points)
    order = sorted(by_base, key=lambda b: (len(by_base[b]), [ix for ix, _ in by_base[b]], b))
    for k, base in enumerate(order):
        for rank, (_, sym) in enumerate(by_base[base]):
            new = f"_v{k}#{rank}"
            repl[sym] = se.Symbol(new)
            back[new] = sym.name
            cdom[new] = domains.get(sym.name, "real")
    cg, cx = got.subs(repl), expected.subs(repl)
    key = (cg, cx, tuple(sorted(cdom.items())), seed, probe_only)
    d = _MEMO.get(key)
    if d is None:
        tick()  # past a deadline (verify_graph(timeout=...)) no decision starts ...
        d = decide_equal(
            cg,
            cx,
            domains=cdom,
            seed=seed,  # type: ignore[arg-type]
            probe_only=probe_only,
        )
        tick()  # ... and one it cut short (maybe weaker than it should be) is dropped
        if len(_MEMO) < _MEMO_MAX:
            _MEMO[key] = d
    if d.point:
        d = replace(d, point={back.get(k, k): v for k, v in d.point.items()})
    return d
