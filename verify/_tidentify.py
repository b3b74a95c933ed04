"""Equal sums and reads identified across the two sides of a comparison: sums with the same
body whose bracket domains z3 proves equal, and reads of the same leaf whose index expressions
z3 proves equal under a case's facts (the nested floors of a reshape of a reshape and its plain
form), each replaced by one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import symengine as se

from . import terms as T
from .terms.smt import Z3
from .terms.smt import solver as smt_solver


def _identify_sums(g: Any, x: Any, allowed: set) -> tuple[Any, Any]:
    """Sums of both sides with the same body (brackets aside) whose domains z3 proves equal are
    replaced by one of them."""
    sums = [f for f in (T.fn_atoms(g) | T.fn_atoms(x)) if T.is_sum(f)]
    if len(sums) < 2:
        return g, x
    groups: dict[Any, list[Any]] = {}
    for s in sums:
        body, variables = s.args[0], s.args[1:]
        plain, _ = _split_brackets(body)
        groups.setdefault((plain, len(variables)), []).append(s)
    repl: dict[Any, Any] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        members = sorted(members, key=str)
        reps: list[Any] = []
        for s in members:
            for r in reps:
                if _same_domain(s, r):
                    repl[s] = r
                    break
            else:
                reps.append(s)
    if not repl:
        return g, x
    return g.xreplace(repl), x.xreplace(repl)


#: At most this many pairs of reads are compared by :func:`_identify_reads` per comparison.
MAX_READ_PAIRS = 400


def _identify_reads(g: Any, x: Any, facts: list[tuple[Any, int]]) -> tuple[Any, Any]:
    """Reads of the same leaf on both sides whose index expressions z3 proves equal, for every
    value of the indices in their ranges under ``facts`` (the case's brackets), written alike:
    the quasi-affine index of a reshape of a reshape (nested floors) and its plain form are the
    same element. A read on one side only is replaced by its equal on the other side.

    Pairs are first compared at a few points z3 finds (ranges and facts satisfied): only the
    pairs equal there go to the proof."""
    reads_g = {f for f in T.fn_atoms(g) if T.is_leaf_read(f) and f.args}
    reads_x = {f for f in T.fn_atoms(x) if T.is_leaf_read(f) and f.args}
    only_g = sorted(reads_g - reads_x, key=str)
    only_x = sorted(reads_x - reads_g, key=str)
    names = {T.name_of(r) for r in only_g} & {T.name_of(r) for r in only_x}
    only_g = [r for r in only_g if T.name_of(r) in names]
    only_x = [r for r in only_x if T.name_of(r) in names]
    if not only_g or not only_x:
        return g, x
    try:
        z = Z3()
        known = [z.bracket(b) if v else z.z3.Not(z.bracket(b)) for b, v in facts]
        terms = {r: [z.term(a) for a in r.args] for r in only_g + only_x}
    except T.TermError:
        return g, x
    z3 = z.z3
    solver = smt_solver(2)
    solver.add(*z.facts, *known)
    points = _points(solver, z, 3)
    if points is None:
        return g, x

    def at(r: Any, pt: Any) -> tuple | None:
        vals = []
        for t in terms[r]:
            v = pt.eval(t, model_completion=True)
            if not z3.is_int_value(v):
                return None
            vals.append(v.as_long())
        return tuple(vals)

    keys = {r: [at(r, pt) for pt in points] for r in only_g + only_x}
    budget = MAX_READ_PAIRS
    repl: dict[Any, Any] = {}
    for r in only_g:
        for c in only_x:
            if T.name_of(r) != T.name_of(c) or len(r.args) != len(c.args):
                continue
            if any(a is not None and b is not None and a != b
                   for a, b in zip(keys[r], keys[c], strict=True)):  # fmt: skip
                continue
            if budget <= 0:
                break
            budget -= 1
            solver.push()
            solver.add(z3.Or(*[p != q for p, q in zip(terms[r], terms[c], strict=True)]))
            proved = solver.check() == z3.unsat
            solver.pop()
            if proved:
                repl[r] = c
                break
    return (g.xreplace(repl) if repl else g), x


def _points(solver: Any, z: Z3, n: int) -> list[Any] | None:
    """Up to ``n`` distinct models of ``solver``'s assertions (``None`` when it has none)."""
    z3 = z.z3
    out = []
    solver.push()
    for _ in range(n):
        if solver.check() != z3.sat:
            break
        m = solver.model()
        out.append(m)
        vs = list(z.vars.values())
        if not vs:
            break
        solver.add(z3.Or(*[v != m.eval(v, model_completion=True) for v in vs]))
    solver.pop()
    return out or None


def _split_brackets(body: Any) -> tuple[Any, list[Any]]:
    factors = list(body.args) if isinstance(body, se.Mul) else [body]
    plain = [f for f in factors if not T.is_bracket(f)]
    brs = [f for f in factors if T.is_bracket(f)]
    return se.Mul(*plain), brs


def _same_domain(a: Any, b: Any) -> bool:
    """Two canonical sums with the same plain body: are their bracket domains equal?"""
    if a.args[1:] != b.args[1:]:
        return False
    _, ba = _split_brackets(a.args[0])
    _, bb = _split_brackets(b.args[0])
    try:
        z = Z3()
        fa = z.z3.And(*[z.bracket(f) for f in ba]) if ba else z.z3.BoolVal(True)
        fb = z.z3.And(*[z.bracket(f) for f in bb]) if bb else z.z3.BoolVal(True)
    except T.TermError:
        return False
    z3 = z.z3
    s = smt_solver(5)
    facts = [f for f in z.facts if not _mentions_bound(f, a.args[1:], z)]
    s.add(*facts)
    s.add(fa != fb)
    return s.check() == z3.unsat


def _mentions_bound(fact: Any, variables: Sequence[Any], z: Z3) -> bool:
    names = {v.name for v in variables}
    return any(str(c) in names for c in _z3_consts(fact, z))


def _z3_consts(f: Any, z: Z3) -> list[Any]:
    out = []
    stack = [f]
    while stack:
        t = stack.pop()
        if z.z3.is_const(t) and t.decl().kind() == z.z3.Z3_OP_UNINTERPRETED:
            out.append(t)
        stack.extend(t.children())
    return out


__all__ = ["MAX_READ_PAIRS"]
