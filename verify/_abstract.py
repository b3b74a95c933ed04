"""The softmax abstraction: softmax outputs as symbols, reasoned about by their identities.

Expanded, a softmax of symbolic scores (attention: scores cubic in the leaves) gives expressions
whose size explodes under differentiation and comparison. Inside :func:`abstraction`:

- the symbolic backend's softmax returns, for each row of valid entries with arguments
  ``s_0..s_{m-1}``, fresh symbols ``softmax<r>[j]`` (one row ``r`` per distinct row of arguments,
  compared after expansion), 0 for the masked entries, and the explicit form for rows of
  numbers;
- derivatives follow the chain rule through the rows with the identity
  ``d softmax_j / d s_k = softmax_j (delta_jk - softmax_k)``, itself proved once per row length
  by differentiating ``exp(s_j) / sum_i exp(s_i)`` (:func:`row_lemma`);
- a compiled ``tl_softmax`` call (the JAX backend's softmax) is first proved equal, element by
  element and exactly, to ``exp(s_j) / sum_i exp(s_i)`` over the valid entries of fresh symbols
  (its max shift and mask included), once per shape and mask (:func:`check_softmax_call`); its
  outputs are then the same symbols.

An identity proved with the softmax symbols free holds for every value they could take, so in
particular for the softmax values: the abstraction can prove equalities, never refute them. A
check that is not proved exactly under the abstraction is redone in the explicit form (a
difference found with free symbols may be one their true values remove), so a counterexample
always comes from the explicit form.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import symengine as se

from torchlean_ir.backends import PRODUCT_HOOK, SOFTMAX_HOOK, SymArray

from ._decide import Decision, decide_equal


class LemmaError(Exception):
    """A softmax identity the abstraction relies on could not be proved exactly."""


class Abandon(Exception):
    """A comparison under the abstraction was not proved exactly: redo it explicitly."""


@dataclass(frozen=True)
class Row:
    """One abstracted softmax row: its (expanded) arguments and output symbols."""

    index: int
    args: tuple[Any, ...]
    symbols: tuple[Any, ...]


@dataclass
class Table:
    """The rows met inside one :func:`abstraction`, and what was proved for them."""

    rows: dict[tuple[Any, ...], Row] = field(default_factory=dict)
    of_symbol: dict[Any, tuple[Row, int]] = field(default_factory=dict)
    calls: int = 0  # compiled tl_softmax calls read as rows
    products: bool = False  # abstract matmul / einsum results of primal values too
    perturbations: set[Any] = field(default_factory=set)  # tangent and cotangent symbols
    values: dict[Any, Any] = field(default_factory=dict)  # expanded expression -> symbol
    defs: dict[Any, Any] = field(default_factory=dict)  # symbol -> its expression

    @property
    def used(self) -> bool:
        return bool(self.rows) or self.calls > 0 or bool(self.values)

    def value(self, e: Any) -> Any:
        """``e`` as a symbol standing for it, when it is a product of primal values (no
        tangent or cotangent in it); ``e`` itself otherwise."""
        e = se.sympify(e)
        free = e.free_symbols
        if not free or isinstance(e, se.Symbol) or free & self.perturbations:
            return e
        key = se.expand(e)
        hit = self.values.get(key)
        if hit is None:
            hit = se.Symbol(f"value{len(self.values)}")
            self.values[key] = hit
            self.defs[hit] = key
        return hit

    def row(self, args: list[Any]) -> tuple[Any, ...]:
        key = tuple(se.expand(a) for a in args)
        hit = self.rows.get(key)
        if hit is None:
            row_lemma(len(key))
            r = len(self.rows)
            syms = tuple(se.Symbol(f"softmax{r}[{j}]") for j in range(len(key)))
            hit = Row(r, key, syms)
            self.rows[key] = hit
            for j, s in enumerate(syms):
                self.of_symbol[s] = (hit, j)
        return hit.symbols

    def note(self) -> str:
        parts = []
        if self.rows:
            lengths = sorted({len(r.args) for r in self.rows.values()})
            calls = (
                f", {self.calls} compiled tl_softmax calls proved equal to it" if self.calls else ""
            )
            parts.append(
                f"softmax abstracted: {len(self.rows)} rows as symbols (d softmax = softmax "
                f"(delta - softmax) proved for rows of length {', '.join(map(str, lengths))}"
                f"{calls})"
            )
        if self.values:
            parts.append(
                f"{len(self.values)} primal matmul / einsum values as symbols, differentiated "
                "through their definitions"
            )
        return "; ".join(parts)


_TABLE: contextvars.ContextVar[Table | None] = contextvars.ContextVar(
    "verify_softmax_table", default=None
)


def current() -> Table | None:
    """The active table (``None`` outside :func:`abstraction`)."""
    return _TABLE.get()


@contextmanager
def abstraction(products: bool = False) -> Iterator[Table]:
    """Within the block, symbolic softmaxes are rows of symbols (see the module doc); with
    ``products``, so are the results of matmul / einsum on primal values."""
    table = Table(products=products)
    t1 = _TABLE.set(table)
    t2 = SOFTMAX_HOOK.set(_hook)
    t3 = PRODUCT_HOOK.set(_product_hook if products else None)
    try:
        yield table
    finally:
        PRODUCT_HOOK.reset(t3)
        SOFTMAX_HOOK.reset(t2)
        _TABLE.reset(t1)


def _product_hook(a: np.ndarray) -> np.ndarray:
    table = current()
    if table is None:
        return a
    out = np.empty(a.shape, dtype=object)
    for ix in np.ndindex(*a.shape):
        out[ix] = table.value(a[ix])
    return out


@contextmanager
def explicit() -> Iterator[None]:
    """Within the block, softmax is the explicit exponential form again."""
    t1 = _TABLE.set(None)
    t2 = SOFTMAX_HOOK.set(None)
    t3 = PRODUCT_HOOK.set(None)
    try:
        yield
    finally:
        PRODUCT_HOOK.reset(t3)
        SOFTMAX_HOOK.reset(t2)
        _TABLE.reset(t1)


def _explicit_row(args: list[Any]) -> list[Any]:
    e = [se.exp(a) for a in args]
    total = se.Add(*e)
    return [v / total for v in e]


def softmax_rows(x: np.ndarray, axis: int, valid: Any) -> np.ndarray:
    """Softmax of an object array along ``axis`` over ``valid``, rows of symbols where the
    arguments are symbolic (the active table's), the explicit form for rows of numbers."""
    table = current()
    xm = np.moveaxis(np.asarray(x, dtype=object), axis, -1)
    ok = (
        np.ones(xm.shape, bool)
        if valid is None
        else np.moveaxis(np.broadcast_to(np.asarray(valid, bool), x.shape), axis, -1)
    )
    out = np.empty(xm.shape, dtype=object)
    out[...] = se.Integer(0)
    for ix in np.ndindex(*xm.shape[:-1]):
        allowed = np.flatnonzero(ok[ix])
        if allowed.size == 0:
            continue
        args = [se.sympify(xm[ix][k]) for k in allowed]
        symbolic = any(a.free_symbols for a in args)
        vals = table.row(args) if symbolic and table is not None else _explicit_row(args)
        for k, v in zip(allowed, vals, strict=True):
            out[ix + (k,)] = v
    return np.moveaxis(out, -1, axis)


def _hook(x: np.ndarray, axis: int, valid: Any) -> SymArray | None:
    if current() is None:
        return None
    return SymArray(softmax_rows(x, axis, valid))


# -- derivatives -------------------------------------------------------------------------------


def depends_on(e: Any, table: Table) -> set[Any]:
    """The leaf symbols ``e`` depends on, through softmax rows included."""
    out: set[Any] = set()
    todo = list(se.sympify(e).free_symbols)
    seen: set[Any] = set()
    while todo:
        s = todo.pop()
        if s in seen:
            continue
        seen.add(s)
        hit = table.of_symbol.get(s)
        if hit is not None:
            for a in hit[0].args:
                todo.extend(a.free_symbols)
        elif s in table.defs:
            todo.extend(table.defs[s].free_symbols)
        else:
            out.add(s)
    return out


def total_diff(e: Any, s: Any, table: Table, memo: dict[tuple[Any, Any], Any]) -> Any:
    """``de/ds`` with every softmax symbol in ``e`` a function of its row's arguments."""
    e = se.sympify(e)
    key = (e, s)
    hit = memo.get(key)
    if hit is not None:
        return hit
    d = e.diff(s)
    for p in e.free_symbols:
        row = table.of_symbol.get(p)
        if row is not None:
            dp = _symbol_diff(row[0], row[1], s, table, memo)
        elif p in table.defs:
            dp = total_diff(table.defs[p], s, table, memo)
        else:
            continue
        if dp != 0:
            d = d + e.diff(p) * dp
    memo[key] = d
    return d


def _symbol_diff(row: Row, j: int, s: Any, table: Table, memo: dict) -> Any:
    ds = [total_diff(a, s, table, memo) for a in row.args]
    if all(v == 0 for v in ds):
        return se.Integer(0)
    p = row.symbols
    return p[j] * (ds[j] - se.Add(*[p[k] * ds[k] for k in range(len(p))]))


# -- the lemmas ----------------------------------------------------------------------------------

_ROW_LEMMAS: set[int] = set()


def row_lemma(m: int) -> None:
    """Prove ``d/ds_k [exp(s_j) / sum_i exp(s_i)] = P_j (delta_jk - P_k)`` for rows of length
    ``m`` (every ``j``, ``k``), exactly; raises :class:`LemmaError` otherwise."""
    if m in _ROW_LEMMAS:
        return
    s = [se.Symbol(f"s[{i}]") for i in range(m)]
    P = _explicit_row(s)
    for j in range(m):
        for k in range(m):
            want = P[j] * ((1 if j == k else 0) - P[k])
            d = decide_equal(P[j].diff(s[k]), want)
            if not (d.equal is True and d.method == "exact"):
                raise LemmaError(f"softmax derivative identity at row length {m}: {d.how}")
    _ROW_LEMMAS.add(m)


def clean(col: Any) -> bool:
    """Whether a collector holds only exact passes."""
    return not col.failed and not col.undecided and all(m == "exact" for m in col.methods)


def decide_polynomial(got: Any, expected: Any) -> Decision:
    """Under the abstraction both sides are polynomials (or quotients the usual procedure takes)
    in leaf, tangent, cotangent and abstract symbols: decide by expanding the difference; an
    expansion that is not 0 or a non-polynomial goes to :func:`decide_equal`."""
    got, expected = se.sympify(got), se.sympify(expected)
    if got == expected:
        return Decision(True, "exact", "identical")
    diff = se.expand(got - expected)
    if diff == 0:
        return Decision(True, "exact", "expanded difference is 0 (abstract symbols free)")
    return decide_equal(got, expected)
