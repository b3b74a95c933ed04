"""Derivatives at kinks: the tie conventions of the reference, and the one-sided choices.

A forward term holds ``Max`` / ``Min`` atoms (``jnp.maximum``, ``jax.nn.relu``'s
``max(x, 0)``) and ``abs``'s Piecewise (``x`` where ``0 < x``, ``-x`` where ``0 < -x``, else
0). Where their arguments tie, the function has a kink: no derivative, only one-sided ones.

:func:`conventional` reads each ``Max`` / ``Min`` with the conventions of ``docs/ops.md``
before differentiating: two arguments split a tie in half, more give the first maximal one
everything (``max_pool``'s); ``abs``'s Piecewise is 0 at 0, so its derivative there is 0.

A *kink choice* (:data:`KinkChoice`) names, per kink site, the weight ``w`` of the first
argument at a tie instead: the value ``(a + b)/2 + (w - 1/2) _KINK(a - b)``, which is ``a``
(= ``b``) there (``_KINK`` is 0 as a value), so the forward and the form of its value are
unchanged, but whose derivative is ``w da + (1 - w) db``: with ``w`` 1 or 0 a
one-sided derivative, with ``1/2`` the convention (for ``abs``, ``w`` weighs ``x`` against
``-x``: derivative ``2w - 1``, so ``+1``, ``-1`` or ``0``). The frameworks' conventions are
such choices (JAX's ``relu'(0) = 0``, its ``abs'(0) = 1``, PyTorch's ``clamp`` at a bound).
:func:`kink_sites` finds the sites of a term and :func:`kink_choices` lists the choices the
function verifier tries (``verify._functions``): every such derivative is the chain rule over
elementary derivatives each taken from its op's one-sided derivatives or their mean, a
conservative derivative in the sense of Bolte and Pauwels (2021), equal to the derivative
wherever the function is differentiable along the branches.

A site is keyed by its text with every symbol and every read's indices written ``_``, so that
the site of ``relu(x)`` is the same at every element (:func:`site_key`).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import symengine as se

from .terms import fold_extrema, has_atom
from .terms.core import _SPECIAL, KINK, ZERO, atoms_of, fn_atoms, name_of

#: Per kink site, the first argument's weight at a tie; sorted by site key. ``()``: the
#: conventions (every site at 1/2, ``abs`` at 0).
KinkChoice = tuple[tuple[str, Fraction], ...]

HALF = Fraction(1, 2)
#: At most this many choices are tried after the conventions (the uniform ones first, then
#: every combination while there are at most this many).
KINK_CHOICES_MAX = 8

_U = se.Symbol("_")


@dataclass(frozen=True)
class KinkSite:
    """One kink site of a forward term: its key, its kind (``max``, ``min``, ``abs``) and the
    text of its arguments (``args[k]`` of the ``Max`` / ``Min``; ``abs``: the argument)."""

    key: str
    kind: str
    args: tuple[str, ...]
    constant: int | None  # max / min: the position of an argument that is a number, if one is
    values: int = 2  # how many values a max / min is of

    def options(self) -> tuple[tuple[Fraction, str], ...]:
        """The weights tried at this site, with what each means: the convention first, then
        the two one-sided derivatives (a site with a constant argument: the constant's side
        first); of more than two values, the convention (the first maximal value takes it
        all) and an even split among the tied values."""
        if self.values > 2:
            return ((HALF, "the first maximal value's derivative"),
                    (Fraction(1), "an even split among the tied values"))  # fmt: skip
        if self.kind == "abs":
            return ((HALF, "0"), (Fraction(1), "+1 (from the right)"),
                    (Fraction(0), "-1 (from the left)"))  # fmt: skip
        conv = (HALF, "the mean of both arguments' derivatives")
        sides = [(Fraction(1), f"the derivative of {self.args[0]}"),
                 (Fraction(0), f"the derivative of {self.args[1]}")]  # fmt: skip
        if self.constant == 1:
            sides.reverse()
        return (conv, *sides)

    def describe(self, w: Fraction) -> str:
        what = dict(self.options()).get(w, f"weight {w}")
        where = "at 0" if self.kind == "abs" else "at a tie"
        args = self.args if len(self.args) <= 4 else (*self.args[:2], "...", self.args[-1])
        return f"{self.kind}({', '.join(args)}) {where}: {what}"


def site_key(a: Any) -> str:
    """The key of a kink site: its text with every read's indices and every symbol (index
    symbols, bound variables) written ``_``, the arguments of a sum, product, ``max`` or
    ``min`` sorted (so the same at every element: ``max(x(_), x(_))`` for ``max(x(0), x(1))``
    as for ``max(x(i), x(i + 1))``). Written out here, not simplified by symengine, which
    would fold ``max(x(_), x(_))`` to ``x(_)``."""
    return _key(a)


def _shown(a: Any) -> str:
    """``a`` as the report shows it: every read's indices and every symbol written ``_``."""
    reads = {f: se.Function(name_of(f))(*([_U] * len(f.args)))
             for f in fn_atoms(a) if name_of(f) not in _SPECIAL}  # fmt: skip
    b = a.xreplace(reads) if reads else a
    syms = {s: _U for s in b.free_symbols if s != _U}
    return str(b.xreplace(syms) if syms else b)


@functools.lru_cache(maxsize=65536)
def _key(e: Any) -> str:
    if isinstance(e, se.Symbol):
        return "_"
    n = name_of(e)
    if n is not None and n not in _SPECIAL:
        return f"{n}({', '.join(['_'] * len(e.args))})"
    if not e.args:
        return str(e)
    head = n or type(e).__name__
    parts = [_key(x) for x in e.args]
    if isinstance(e, se.Add | se.Mul | se.Max | se.Min):
        parts.sort()
    return f"{head}({', '.join(parts)})"


def _abs_argument(p: Any) -> Any | None:
    """``v`` when ``p`` is ``abs(v)``'s Piecewise (``v`` where ``0 < v``, ``-v`` where
    ``0 < -v``, else 0), else ``None``."""
    a = p.args
    if len(a) != 4 or a[3] != se.true or not isinstance(a[2], se.Piecewise):
        return None
    v, inner = a[0], a[2].args
    if a[1] != se.Lt(ZERO, v) or len(inner) != 4 or inner[3] != se.true:
        return None
    if inner[0] != -v or inner[1] != se.Lt(ZERO, -v) or inner[2] != 0:
        return None
    return v


@functools.lru_cache(maxsize=4096)
def kink_sites(e: Any) -> frozenset[KinkSite]:
    """The kink sites of ``e``: its ``Max`` / ``Min`` atoms of two arguments and its ``abs``
    Piecewise, at any depth (memoised)."""
    if not isinstance(e, se.Basic):
        return frozenset()
    out = set()
    if has_atom(e, (se.Max, se.Min)):
        for a in atoms_of(e, (se.Max, se.Min)):
            const = [k for k, x in enumerate(a.args) if isinstance(x, se.Number)]
            out.add(KinkSite(site_key(a), "max" if isinstance(a, se.Max) else "min",
                             tuple(_shown(x) for x in a.args),
                             const[0] if len(const) == 1 else None, len(a.args)))  # fmt: skip
    for f in fn_atoms(e):
        if name_of(f) == "_MAXR":
            body, k, lo, hi = f.args
            if isinstance(lo, se.Integer) and isinstance(hi, se.Integer) and int(hi) - int(lo) > 2:
                shown = (f"{_shown(body)} over {_shown(k)} in {lo}..{int(hi) - 1}",)
                out.add(KinkSite(site_key(f), "max", shown, None, int(hi) - int(lo)))
    if has_atom(e, se.Piecewise):
        for p in atoms_of(e, se.Piecewise):
            v = _abs_argument(p)
            if v is not None:
                out.add(KinkSite(site_key(p), "abs", (_shown(v),), None))
    return frozenset(out)


def kink_choices(sites: Sequence[KinkSite]) -> Iterator[tuple[KinkChoice, str]]:
    """The choices tried after the conventions, with their description: every site at its
    first one-sided option, every site at its second, then (while there are at most
    :data:`KINK_CHOICES_MAX` in all) every other combination of the options."""
    sites = sorted(sites, key=lambda s: s.key)
    opts = [s.options() for s in sites]

    def made(pick: Sequence[int]) -> tuple[KinkChoice, str]:
        choice = tuple((s.key, o[k][0]) for s, o, k in zip(sites, opts, pick, strict=True))
        text = "; ".join(s.describe(w) for s, (_, w) in zip(sites, choice, strict=True))
        return choice, text

    done = {(0,) * len(sites)}
    for k in (1, 2):
        pick = tuple(min(k, len(o) - 1) for o in opts)
        if pick not in done:
            done.add(pick)
            yield made(pick)
    if math.prod(len(o) for o in opts) - 1 <= KINK_CHOICES_MAX:
        for pick in itertools.product(*(range(len(o)) for o in opts)):
            if pick not in done:
                yield made(pick)


def even_ties(choice: KinkChoice) -> Callable[[Any], bool] | None:
    """For :func:`verify.terms.jvp_term`: which maxima over a range (``_MAXR``) ``choice``
    splits evenly at a tie (``None``: none)."""
    chosen = {k for k, w in choice if w == 1}
    if not chosen:
        return None
    return lambda m: site_key(m) in chosen


def conventional(e: Any, choice: KinkChoice = ()) -> Any:
    """``Max`` / ``Min`` atoms replaced by Piecewise with the documented tie conventions,
    outermost first: a condition compares the arguments as written, its maxima folded away
    where that is exact (:func:`verify.terms.fold_extrema`: ``1/2 < max(-1/2, x)`` is
    ``1/2 < x``), only the values are the conventional Piecewise of the arguments. With a
    ``choice``, the sites it names take its weight at a tie instead (``abs`` too)."""
    if not isinstance(e, se.Basic):
        return e
    return _conventional(e, choice)


@functools.lru_cache(maxsize=4096)
def _conventional(e: Any, choice: KinkChoice) -> Any:
    """:func:`conventional`, memoised: a condition and a value read the same arguments, so a
    nested maximum is rewritten once, not once per place it is read."""
    if choice and has_atom(e, se.Piecewise):
        e = _abs_chosen(e, dict(choice))
    if not has_atom(e, (se.Max, se.Min)):  # memoised: most terms hold none
        return e
    while True:  # each found again in the term as rewritten so far
        atoms = e.atoms(se.Max, se.Min)
        if not atoms:
            return e
        a = max(atoms, key=lambda x: (len(str(x)), str(x)))
        w = dict(choice).get(site_key(a)) if choice else None
        if w is not None and len(a.args) > 2 and w == 1:
            e = e.xreplace({a: _even_split(a.args, isinstance(a, se.Max), choice)})
        else:
            e = e.xreplace({a: _pick_convention(a.args, isinstance(a, se.Max), choice, w)})


def _abs_chosen(e: Any, choice: dict[str, Fraction]) -> Any:
    """``e`` with each ``abs`` site that ``choice`` names given its weight at 0."""
    found = {}
    for p in atoms_of(e, se.Piecewise):
        v = _abs_argument(p)
        w = choice.get(site_key(p)) if v is not None else None
        if w is not None and w != HALF:
            slope = se.Rational(2 * w.numerator - w.denominator, w.denominator)
            inner = se.Piecewise((-v, se.Lt(ZERO, -v)), (slope * KINK(v), True))
            found[p] = se.Piecewise((v, se.Lt(ZERO, v)), (inner, True))
    return e.xreplace(found) if found else e


def _even_split(args: Sequence[Any], greater: bool, choice: KinkChoice) -> Any:
    """The maximum (``greater``) or minimum of ``args`` as the mean of the extremal values,
    ``sum_k v_k [v_k extremal] / sum_k [v_k extremal]``: its value everywhere, its
    branch-wise derivative the even split of a tie among the tied values (JAX's and PyTorch's
    ``amax``)."""
    vals = [conventional(x, choice) for x in args]
    num, den = ZERO, ZERO
    for k, x in enumerate(args):
        conds = [conventional(fold_extrema(se.Le(y, x) if greater else se.Le(x, y)), choice)
                 for j, y in enumerate(args) if j != k]  # fmt: skip
        ind = se.Piecewise((se.Integer(1), se.And(*conds)), (ZERO, True))
        num, den = num + vals[k] * ind, den + ind
    return num / den


def _pick_convention(args: Sequence[Any], greater: bool, choice: KinkChoice,
                     w: Fraction | None) -> Any:  # fmt: skip
    def beats(x: Any, y: Any, strict: bool) -> Any:
        if greater:
            r = se.Lt(y, x) if strict else se.Le(y, x)
        else:
            r = se.Lt(x, y) if strict else se.Le(x, y)
        return conventional(fold_extrema(r), choice)

    vals = [conventional(x, choice) for x in args]
    if len(args) == 2:
        a, b = args
        va, vb = vals
        tie = (va + vb) / 2
        if w is not None and w != HALF:  # the same value, the derivative w da + (1 - w) db
            tie += se.Rational(2 * w.numerator - w.denominator, 2 * w.denominator) * KINK(va - vb)
        return se.Piecewise((va, beats(a, b, True)), (vb, beats(b, a, True)), (tie, True))
    pieces = []
    for k, x in enumerate(args):
        conds = [beats(x, y, True) for y in args[:k]] + [beats(x, y, False) for y in args[k + 1 :]]
        pieces.append((vals[k], se.And(*conds) if len(conds) > 1 else conds[0]))
    pieces[-1] = (pieces[-1][0], se.true)
    return se.Piecewise(*pieces)


__all__ = ["KINK_CHOICES_MAX", "KinkChoice", "KinkSite", "conventional", "even_ties",
           "kink_choices", "kink_sites", "site_key"]  # fmt: skip
