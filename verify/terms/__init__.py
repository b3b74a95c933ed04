"""Tensor terms: one symbolic element stands for a whole tensor.

A tensor value is represented by the scalar term of a *symbolic* element: its indices are integer
symbols with known ranges, leaves are read at (quasi-)affine index expressions, contractions are
sums over bound index variables, and index conditions (padding, strides, windows, masks, gather
ranges) are Iverson brackets, all symengine expressions. The layers, bottom up (each module
imports only the ones before it; ``tests/test_layering.py``):

* :mod:`.core` - atoms, constructors, index symbols and the registries;
* :mod:`.budget` - the CPU-time budget;
* :mod:`.index` - integer index arithmetic (the one linearizer, intervals, floors, residues);
* :mod:`.grid` and :mod:`.smt` - integer facts by exhaustion over a small box, and by z3;
* :mod:`.signs` - sign facts, brackets, reads at canonical indices;
* :mod:`.normal` - sums and the normal form;
* :mod:`.diff` - differentiation (``jvp_term``, ``coefficient``);
* :mod:`.concrete` - terms at concrete indices.

This package's namespace re-exports what the layers above it use.
"""

from __future__ import annotations

from .budget import OutOfTime, budget, tick
from .concrete import _concrete_range, concretize, np_eval
from .core import (
    _SPECIAL,
    BOUND,
    DERIVED,
    EQ,
    GE,
    LEAF_SHAPES,
    MAXR,
    ONE,
    RANGES,
    SHIFT_LEAVES,
    SIZES,
    SUM,
    TABLES,
    UNROLL_MAX,
    UNROLL_NONE,
    UNROLL_SHORT,
    UNROLL_WIDE,
    UNROLL_WIDE_MAX,
    UPPER,
    XS,
    ZERO,
    TermError,
    exact_scalar,
    expand_derived,
    floor_atoms,
    fn,
    fn_atoms,
    fold_extrema,
    free_vars,
    fresh,
    has_derived,
    has_infinity,
    is_bracket,
    is_leaf_read,
    is_read,
    is_sum,
    is_table,
    name_of,
    rebuild,
    rename_bound,
    size_symbol,
)
from .diff import coefficient, jvp_term
from .grid import NotGridded
from .index import (
    NAT_RANGES,
    _assemble,
    _integer_form,
    _residue_window,
    _simplify_index,
    _tightest,
    floor_div,
    interval,
    linear,
    mod,
    read,
    simplify_index,
)
from .normal import (
    _literals,
    _negated,
    _refine,
    disjoint,
    finite,
    known_relation,
    log_of_shift,
    nonnegative,
    normalize,
    positive,
    smax,
    split_shifts,
    ssum,
    wide_sums,
)
from .signs import _SIGN_CACHE, _sign_facts, bracket, eq, ge, leaf_read, range_brackets, table_read
from .smt import Z3

__all__ = [
    "BOUND",
    "DERIVED",
    "EQ",
    "GE",
    "LEAF_SHAPES",
    "MAXR",
    "NAT_RANGES",
    "ONE",
    "RANGES",
    "SHIFT_LEAVES",
    "SIZES",
    "SUM",
    "TABLES",
    "UNROLL_MAX",
    "UNROLL_NONE",
    "UNROLL_SHORT",
    "UNROLL_WIDE",
    "UNROLL_WIDE_MAX",
    "UPPER",
    "XS",
    "Z3",
    "ZERO",
    "_SIGN_CACHE",
    "_SPECIAL",
    "NotGridded",
    "OutOfTime",
    "TermError",
    "_assemble",
    "_concrete_range",
    "_integer_form",
    "_literals",
    "_negated",
    "_refine",
    "_residue_window",
    "_sign_facts",
    "_simplify_index",
    "_tightest",
    "bracket",
    "budget",
    "coefficient",
    "concretize",
    "disjoint",
    "eq",
    "exact_scalar",
    "expand_derived",
    "finite",
    "floor_atoms",
    "floor_div",
    "fn",
    "fn_atoms",
    "fold_extrema",
    "free_vars",
    "fresh",
    "ge",
    "has_derived",
    "has_infinity",
    "interval",
    "is_bracket",
    "is_leaf_read",
    "is_read",
    "is_sum",
    "is_table",
    "jvp_term",
    "known_relation",
    "leaf_read",
    "linear",
    "log_of_shift",
    "mod",
    "name_of",
    "nonnegative",
    "normalize",
    "np_eval",
    "positive",
    "range_brackets",
    "read",
    "rebuild",
    "rename_bound",
    "simplify_index",
    "size_symbol",
    "smax",
    "split_shifts",
    "ssum",
    "table_read",
    "tick",
    "wide_sums",
]
