"""Atoms as symbols (step 2 of :mod:`verify._tdecide`): every read, sum, bracket and maximum of
a term becomes a symbol (the same atom, the same symbol), and the scalar decision procedure
(:func:`verify._decide.decide_equal`) decides the two sides as functions of independent
symbols; only its *exact* proofs are taken.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import symengine as se

from . import terms as T
from ._decide import Decision, decide_equal


@dataclass
class Atoms:
    """A consistent naming of atoms as symbols for one comparison."""

    to_sym: dict[Any, Any]
    from_sym: dict[str, Any]
    domains: dict[str, str]

    @classmethod
    def empty(cls) -> Atoms:
        return cls({}, {}, {})

    def symbol(self, atom: Any, domain: str = "real") -> Any:
        s = self.to_sym.get(atom)
        if s is None:
            s = se.Symbol(f"_a{len(self.to_sym)}")
            self.to_sym[atom] = s
            self.from_sym[s.name] = atom
            self.domains[s.name] = domain
        return s


def symbolize(e: Any, atoms: Atoms, domains: Mapping[str, str]) -> Any:
    """``e`` with every read, sum, bracket and maximum replaced by a symbol."""
    outer = _outer_functions(e)
    repl = {}
    for a in outer:
        dom = domains.get(T.name_of(a) or "", "real") if T.is_leaf_read(a) else "real"
        repl[a] = atoms.symbol(a, dom)
    return e.xreplace(repl) if repl else e


def _outer_functions(e: Any) -> list[Any]:
    """The function atoms of ``e`` not inside another one's arguments."""
    out: dict[Any, None] = {}
    seen: set = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if not isinstance(x, se.Basic) or x in seen or not x.args:
            continue
        seen.add(x)
        if isinstance(x, se.FunctionSymbol):
            out[x] = None
            continue
        stack.extend(x.args)
    return list(out)


def _scalar(g: Any, x: Any, atoms: Atoms, domains: Mapping[str, str], seed: int,
            use_sympy: bool = True) -> Decision | None:  # fmt: skip
    """Step 2: an exact proof with atoms as independent symbols, else ``None``."""
    gs, xs = symbolize(g, atoms, domains), symbolize(x, atoms, domains)
    if gs == xs:
        return Decision(True, "exact", "identical")
    try:
        d = decide_equal(gs, xs, domains=atoms.domains, seed=seed, use_sympy=use_sympy,
                         sample=False)  # fmt: skip
    except Exception:
        return None
    if d.equal is True and d.method == "exact":
        return d
    return None


__all__ = ["Atoms", "symbolize"]
