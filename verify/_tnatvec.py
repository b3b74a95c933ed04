"""Concrete values of runtime index vectors for the tensor-level counterexample search.

At tensor level a runtime index vector ``idx`` (``nat[K]``) is read as ``idx(p)`` at symbolic
positions, quantified over every value (:func:`verify._tchecks.nat_vector`). A comparison the
normal forms and case splits do not prove is searched for a counterexample at concrete
elements (:func:`verify._tcounterexample._search`); an element whose term reads ``idx`` inside a
bracket (``[idx(p) == j]``, the scatter-add of a gather's VJP) has no element-level expression
until ``idx`` has values too. This module proposes those values: a few whole vectors per
element, built from the values that element makes interesting (its own indices, one past them,
``0`` and the largest value the input can take).

Nothing here proves anything and nothing here is trusted: a proposed vector is one concrete
input of the domain (every position within the vector's range, :data:`verify.terms.NAT_RANGES`),
and a counterexample found with it is decided exactly at element level for that input, so it
is a genuine one. Finding none leaves the check undecided.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import symengine as se

from . import terms as T

#: Whole vectors proposed per concrete element (the first is the element's own row).
PER_POINT = 2
#: Elements tried with proposed vectors, at most: writing out an element of a vector of 512
#: positions takes about a third of a second per side and vector, and a comparison that is true
#: but not proved pays that for every element and vector tried (within the check's budget).
MAX_ELEMENTS = 3
#: Whole vectors proposed per element from the values the terms' brackets single out, at most.
MAX_PINNED = 2
#: The value standing for "every larger natural" where a vector's range is unbounded (a rule
#: check over every natural): the largest value a compiled call receives, any natural will do.
LARGE = 2**31 - 1


@dataclass(frozen=True)
class NatVector:
    """A runtime index vector read in a term: its read name, length and value range."""

    name: str
    length: int
    lo: int
    hi: int  # exclusive

    @property
    def shown(self) -> str:
        """How a counterexample names it (``index idx``, as a static index input is named)."""
        return f"index {self.name.split('__', 1)[0]}"


def nat_vectors(*terms: Any) -> list[NatVector]:
    """The runtime index vectors read in ``terms`` (reads of a name with a registered nat
    range and a known one-axis shape), by name."""
    names: set[str] = set()
    for e in terms:
        if not isinstance(e, se.Basic):
            continue
        for f in T.fn_atoms(e):
            n = T.name_of(f)
            if n is not None and n in T.NAT_RANGES and T.is_read(f):
                names.add(n)
    out = []
    for n in sorted(names):
        shape = T.LEAF_SHAPES.get(n)
        if shape is None or len(shape) != 1:
            continue
        lo, hi = T.NAT_RANGES[n]
        out.append(NatVector(n, int(shape[0]), int(lo), LARGE + 1 if hi is None else int(hi)))
    return out


def elements(points: Sequence[Mapping[Any, int]]) -> list[Mapping[Any, int]]:
    """At most :data:`MAX_ELEMENTS` of the search's ``points`` for the vectors: the first (a
    point of the region not proved, when there is one), then the last and the first row (the
    largest and smallest first index: a value clamped to the last row, an off-by-one at either
    end), each row once."""

    def row(p: Mapping[Any, int]) -> int:
        return int(next(iter(p.values()), -1))

    order = [*points[:1], *sorted(points, key=row, reverse=True)[:1],
             *sorted(points, key=row)[:1], *points]  # fmt: skip
    out: list[Mapping[Any, int]] = []
    seen: set[int] = set()
    for p in order:
        if row(p) not in seen:
            seen.add(row(p))
            out.append(p)
        if len(out) == MAX_ELEMENTS:
            break
    return out


def assignments(point: Mapping[Any, int], vectors: Sequence[NatVector], rng: random.Random,
                terms: Sequence[Any] = ()) -> Iterator[dict[str, np.ndarray]]:  # fmt: skip
    """Values for every vector at one concrete element ``point`` (free index values): every
    position the element's first index (the row a scatter sends to), then positions drawn from
    the interesting values (the element's indices and one past them, 0, the largest value),
    so that a dropped, shifted or misdirected position shows at this element; then, for the
    values a bracket of ``terms`` singles out (:func:`bracket_values`: a rule that tests
    ``idx == 1000``), every position at that value."""
    if not vectors:
        return
    own = [int(v) for v in point.values()]
    firsts = {}
    for n in range(PER_POINT):
        out = {}
        for vec in vectors:
            values = _interesting(own, vec)
            if n == 0:
                first = own[0] if own and vec.lo <= own[0] < vec.hi else values[0]
                firsts[vec.name] = first
                arr = np.full(vec.length, first, dtype=np.int64)
            else:
                arr = np.asarray([rng.choice(values) for _ in range(vec.length)], dtype=np.int64)
            out[vec.name] = arr
        yield out
    pinned = {vec.name: bracket_values(terms, vec, point) for vec in vectors}
    for k in range(MAX_PINNED):
        if all(len(v) <= k for v in pinned.values()):
            break
        yield {vec.name: np.full(vec.length, pinned[vec.name][k] if k < len(pinned[vec.name])
                                 else firsts[vec.name], dtype=np.int64)
               for vec in vectors}  # fmt: skip


def bracket_values(terms: Sequence[Any], vec: NatVector, point: Mapping[Any, int]) -> list[int]:
    """The values of ``vec``'s positions that a bracket of ``terms`` singles out at ``point``:
    a bracket linear in one read of ``vec`` (the point's index values substituted),
    ``[a idx(p) + c == 0]`` gives its integer solution, ``[a idx(p) + c >= 0]`` the first value
    on each side of its boundary; those within the vector's range, the values not already
    interesting first, in the order of the terms' brackets (sorted by their text)."""
    sub = {s: se.Integer(v) for s, v in point.items()}
    found: list[int] = []
    for e in terms:
        if not isinstance(e, se.Basic):
            continue
        brackets = [f for f in T.fn_atoms(e) if T.is_bracket(f)]
        for f in sorted(brackets, key=str):
            lin = T.linear(f.args[0].xreplace(sub))
            if lin is None:
                continue
            coeffs, const = lin
            if len(coeffs) != 1:
                continue
            ((atom, a),) = coeffs.items()
            if T.name_of(atom) != vec.name or not T.is_read(atom):
                continue
            a, c = Fraction(str(a)), Fraction(str(const))
            if a.denominator != 1 or c.denominator != 1 or a == 0:
                continue  # (brackets are normalised to integer coefficients)
            a, c = int(a), int(c)
            if T.name_of(f) == "_EQ":
                values = [-c // a] if c % a == 0 else []
            else:  # a v + c >= 0: the boundary at -c / a, the first value on each side
                b = -c // a if a > 0 else c // -a
                values = [b - 1, b, b + 1]
            found += [v for v in values if vec.lo <= v < vec.hi and v not in found]
    return found


def _interesting(own: Sequence[int], vec: NatVector) -> list[int]:
    cands = [*own, *(v + 1 for v in own), vec.lo, vec.hi - 1]
    seen: list[int] = []
    for v in cands:
        if vec.lo <= v < vec.hi and v not in seen:
            seen.append(v)
    return seen


def shown(values: Mapping[str, np.ndarray], vectors: Sequence[NatVector]) -> dict[str, str]:
    """The vectors' values as a counterexample's inputs show them."""
    return {vec.shown: str(values[vec.name].tolist()) for vec in vectors if vec.name in values}


__all__ = ["NatVector", "assignments", "bracket_values", "elements", "nat_vectors", "shown"]
