"""Window maxima and argmax chains at tensor level: the rules that let a max pool's reference
(``_MAXR``, first-max one-hots) and its compiled forms (nested ``max``, argmax chains of
``select_and_scatter_add``) meet, and tables read at shifted indices inside a case
(``verify/terms/``, ``verify/_tmaxima.py``, ``verify/_tchains.py``, ``verify/_ttables.py``).
Each rule is checked against brute force over every ordering of the values (ties included),
and a wrong variant must not be proved."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import symengine as se

from verify import terms as T
from verify._tchains import _complete_chains
from verify._tdecide import decide_tensor
from verify._tmaxima import _as_maxima

A, B, C = se.symbols("a b c")
VALUES = (A, B, C)


def _first_max(vals, j, strict_before=True):
    """``vals[j]`` is the first maximum of ``vals`` (earlier ones strictly smaller)."""
    lits = [(se.Lt if (i < j and strict_before) else se.Le)(v, vals[j])
            for i, v in enumerate(vals) if i != j]  # fmt: skip
    return se.And(*lits)


def _one_hot(vals, j, strict_before=True):
    return se.Piecewise((1, _first_max(vals, j, strict_before)), (0, True))


def _chain(vals, j):
    """The argmax chain's indicator of cell ``j``: the first of the first-max conditions of
    cells ``0 .. n-2`` that holds picks its cell; none picks the last cell."""
    n = len(vals)
    pairs = [(int(i == j), _first_max(vals, i)) for i in range(n - 1)]
    return se.Piecewise(*pairs, (int(j == n - 1), True))


def _orderings():
    """Every assignment of values in {0, 1, 2} to a, b, c (every ordering, every tie)."""
    for point in itertools.product(range(3), repeat=3):
        yield dict(zip(VALUES, map(se.Integer, point), strict=True))


def _value(e, point):
    return se.sympify(e).xreplace(point)


def test_default_branches_disjoint_from_the_rest_are_dropped() -> None:
    for j in range(3):
        pw = _chain(VALUES, j)
        norm = T.normalize(pw)
        if j < 2:  # (0, c_0), (1, c_1), (0, True): only cell j's branch is left
            assert norm == _one_hot(VALUES, j), norm
        for point in _orderings():
            assert _value(norm, point) == _value(pw, point)
    # not disjoint (a <= b and c <= b can hold together): the branch is kept
    kept = se.Piecewise((0, se.Le(A, B)), (1, se.Le(C, B)), (0, True))
    assert T.normalize(kept) == kept


def test_an_argmax_chain_meets_the_first_max_one_hot() -> None:
    """The chain's last cell (``True``) is the one-hot of that cell when the earlier
    conditions and the cell's own cover every value (z3); a chain missing a cell is not."""
    last = _chain(VALUES, 2)
    one_hot = _one_hot(VALUES, 2)
    g, x = _complete_chains(T.normalize(last), one_hot, unroll=T.UNROLL_SHORT)
    assert g == x == one_hot
    for point in _orderings():
        assert _value(last, point) == _value(one_hot, point)
    # a chain over cells 0 and 1 only: its "else" is not "c is the first maximum"
    short = se.Piecewise((0, _first_max(VALUES, 0)), (1, True))
    g, x = _complete_chains(short, one_hot, unroll=T.UNROLL_SHORT)
    assert g != x
    (q,) = T.free_vars((2,))
    assert decide_tensor(short, one_hot, [q]).equal is not True


def test_first_max_one_hot_sums_are_maxima() -> None:
    """``sum_j v_j [v_j first max]`` is ``Max(v)``; with both comparisons strict (a tie picks
    no cell) or a cell missing, it is not."""
    total = se.Add(*[v * _one_hot(VALUES, j) for j, v in enumerate(VALUES)])
    assert _as_maxima(total, True) == se.Max(*VALUES)
    for point in _orderings():
        assert _value(total, point) == _value(se.Max(*VALUES), point)
    strict = se.Add(*[v * se.Piecewise((1, se.And(*[se.Lt(u, v) for u in VALUES if u != v])),
                                       (0, True)) for v in VALUES])  # fmt: skip
    assert _as_maxima(strict, True) == se.expand(strict)
    partial = se.Add(*[v * _one_hot(VALUES, j) for j, v in enumerate(VALUES) if j < 2])
    assert not _as_maxima(partial, True).atoms(se.Max)


def test_a_window_maximum_meets_its_one_hot_and_nested_max() -> None:
    """``_MAXR`` over a window with a masked (padded) cell against the one-hot sum over the
    valid cells and against nested ``max`` with the padded cell as ``-oo``: proved; against a
    one-hot sum that lets ties pick no cell: refuted."""
    (q,) = T.free_vars((4,))
    m = T.fresh("_m", 0, 3)
    mask = np.array([[0, 1, 1]] + [[1, 1, 1]] * 3)  # row 0: cell 0 is padding

    def cell(k):
        return T.leaf_read("x", (q + k,), (6,))

    body = se.Piecewise((cell(0) * T.eq(m) + cell(1) * T.eq(m - 1) + cell(2) * T.eq(m - 2),
                         se.Eq(1, T.table_read(mask, (q, m)))), (-se.oo, True))  # fmt: skip
    window = T.MAXR(body, m, se.Integer(0), se.Integer(3))
    valid = [T.ge(q - 1), 1, 1]  # cell 0 is valid from q = 1 on
    cells = [cell(k) for k in range(3)]

    def one_hot(strict_before):
        out = 0
        for j in range(3):
            lits = []
            for i in range(3):
                if i == j:
                    continue
                rel = se.Lt if (i < j and strict_before) else se.Le
                lits.append(rel(cells[i], cells[j]) if i else
                            se.Or(se.Eq(0, valid[0]), rel(cells[i], cells[j])))  # fmt: skip
            out += valid[j] * cells[j] * se.Piecewise((1, se.And(*lits)), (0, True))
        return out

    nested = se.Max(se.Max(se.Piecewise((cells[0], se.Eq(1, valid[0])), (-se.oo, True)),
                           cells[1]), cells[2])  # fmt: skip
    assert decide_tensor(window, one_hot(True), [q]).equal is True
    assert decide_tensor(nested, window, [q]).equal is True
    assert decide_tensor(one_hot(False), window, [q]).equal is not True


def test_tables_read_at_shifted_indices_are_materialised_per_case() -> None:
    """``[q >= 1] V(q - 1)`` with ``V`` all ones on ``0..4``: outside the table at ``q = 0``
    over the whole range, inside it in the case ``q >= 1``, where it is the constant 1."""
    (q,) = T.free_vars((6,))
    a = T.leaf_read("a", (q,), (6,))
    ones = np.array([1, 1, 1, 1, 1, 0])
    got = T.ge(q - 1) * T.table_read(ones, (q - 1,)) * a
    assert decide_tensor(got, T.ge(q - 1) * a, [q]).equal is True
    holed = np.array([1, 1, 0, 1, 1, 0])
    bad = T.ge(q - 1) * T.table_read(holed, (q - 1,)) * a
    d = decide_tensor(bad, T.ge(q - 1) * a, [q])
    assert d.equal is False and d.element == (3,)


def test_a_table_constant_along_an_axis_is_read_at_its_first_slice() -> None:
    """A mask broadcast over 64 channels read at ``(c, i)`` and the same mask read at
    ``(0, i)`` are one table (a softmax atom's and the reference's masks of a padded pool);
    a table that differs along the axis keeps its index."""
    c, i = T.free_vars((64, 9))
    a = T.leaf_read("a", (c, i), (64, 9))
    mask = np.array([0, 1, 1, 1, 1, 1, 1, 1, 0])
    wide = np.broadcast_to(mask, (64, 9))
    one = mask.reshape(1, 9)
    assert T.table_read(wide, (c, i)) == T.table_read(one, (se.Integer(0), i))
    assert decide_tensor(T.table_read(wide, (c, i)) * a, T.table_read(one, (0, i)) * a,
                         [c, i]).equal is True  # fmt: skip
    varied = np.array(wide)
    varied[5, 4] = 0  # channel 5 differs
    assert T.name_of(T.table_read(varied, (c, i))) != T.name_of(T.table_read(one, (0, i)))
    d = decide_tensor(T.table_read(varied, (c, i)) * a, T.table_read(one, (0, i)) * a, [c, i])
    assert d.equal is False and d.element == (5, 4)


def test_a_table_materialised_over_a_narrowed_range_is_read_at_the_index_itself() -> None:
    """``T(r - 1)`` with ``r`` over ``[2, 5)`` materialised as ``U(r)``: ``U[r]`` is the value at
    ``r`` (a later case that fixes ``r`` reads that cell), not the value at ``r - 2``."""
    from verify._ttables import _tables

    a = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0])
    r = T.fresh("_r", 2, 5, bound=False)
    u = _tables(T.table_read(a, (r - 1,)))
    assert T.name_of(u).startswith("_T") and u.args == (r,)
    table = T.TABLES[T.name_of(u)]
    assert [table[v] for v in range(2, 5)] == [20.0, 30.0, 40.0]


def test_residue_classes_partition_the_range_exactly() -> None:
    # (5, 7, 578): no value of the range in most classes (it raised StopIteration before)
    from verify._tregions import residue_class

    for lo, hi, d in [(0, 7, 3), (5, 7, 578), (-1, 2, 2), (-3, 5, 4), (4, 20, 5), (0, 0, 3)]:
        seen = []
        for r in range(d):
            first, n = residue_class(lo, hi, d, r)
            vals = [first + d * t for t in range(n)]
            assert all(lo <= v < hi and v % d == r for v in vals)
            seen += vals
        assert sorted(seen) == list(range(lo, hi)), (lo, hi, d)


def test_a_cover_is_refuted_at_a_point_before_z3_and_proved_by_z3_or_a_first_max_family(
    monkeypatch,
) -> None:
    """``_covers`` answers "no" at a point where no condition holds without asking z3 (the
    quick refutation of most candidates of a chain; the points are kept across queries, each
    condition evaluated once at each); "yes" comes from the first-max conditions of a totally
    ordered set (an argmax chain with its last cell's condition) or from z3, never from a
    point; ties left uncovered are never claimed."""
    from verify import _tchains as D
    from verify._tmaxima import _first_max_family

    a_first, b_first = se.Lt(B, A), se.Le(A, B)  # a first maximum of (a, b), b the other
    not_covering = (se.Lt(A, B), se.And(se.Le(B, A), se.Le(C, A)))  # c > a > b: neither
    either = (se.Le(A, B), se.Le(B, A))  # covers, but not as a first-max family
    no_tie = (se.Lt(A, B), se.Lt(B, A))  # both strict: a tie satisfies neither

    def no_z3(*args, **kwargs):
        raise AssertionError("z3 asked")

    monkeypatch.setattr(D, "_Reals", no_z3)
    # fresh points (seeded): the values of the unknowns a point draws depend on the order it
    # meets them in, so points kept from earlier verifications in this process are other points
    monkeypatch.setattr(D, "_POINTS", [])
    assert D._uncovered_at_a_point(not_covering)
    evaluated = []
    inner = D._RealPoint._cond
    monkeypatch.setattr(D._RealPoint, "_cond", lambda at, c: evaluated.append(c) or inner(at, c))
    assert D._uncovered_at_a_point(not_covering)
    assert not evaluated  # the points are kept, with their conditions' values
    assert D._covers(not_covering[:1], not_covering[1]) is False
    assert D._covers((a_first,), b_first) is True  # a first-max family: no z3
    with pytest.raises(AssertionError, match="z3 asked"):
        D._covers(either[:1], either[1])
    monkeypatch.undo()
    assert not D._uncovered_at_a_point((a_first, b_first))
    assert not _first_max_family(either) and not _first_max_family(no_tie)
    # every ordering of (a, b, c) satisfies a condition exactly when they are said to cover
    for conds in [(a_first, b_first), not_covering, either, no_tie]:
        covered = all(any(bool(_value(x, p)) for x in conds) for p in _orderings())
        assert D._covers(conds[:-1], conds[-1]) is covered, conds


def test_first_max_families_cover_every_ordering_and_only_complete_ones_are_claimed() -> None:
    """The first-max conditions of (a, b, c) (earlier cells strictly smaller) are a family:
    exactly one holds at every ordering, ties included; without one cell's condition, with
    the strictness the wrong way for one pair, or with one cell twice, they are not claimed."""
    from verify._tmaxima import _first_max_family

    family = tuple(_first_max(VALUES, j) for j in range(3))
    assert _first_max_family(family)
    for point in _orderings():
        assert sum(bool(_value(c, point)) for c in family) == 1
    assert not _first_max_family(family[:2])
    all_strict = tuple(se.And(*[se.Lt(u, v) for u in VALUES if u != v]) for v in VALUES)
    assert not _first_max_family(all_strict)
    cycle = (se.And(se.Lt(B, A), se.Le(C, A)), se.And(se.Lt(C, B), se.Le(A, B)),
             se.And(se.Lt(A, C), se.Le(B, C)))  # fmt: skip
    assert not _first_max_family(cycle)  # "before" is a cycle, not an order
    assert any(not any(bool(_value(c, p)) for c in cycle) for p in _orderings())
    assert not _first_max_family((*family[:2], family[0]))  # cell 2's condition missing


def test_index_simplification_under_narrowed_ranges_is_memoised_per_range(monkeypatch) -> None:
    """Inside a product, its brackets narrow the ranges its floors are simplified under
    (``[q >= 8] x(floor(q / 8))`` is ``[q >= 8] x(1)`` for ``q < 16``); that simplification is
    memoised with the narrowed ranges in the key: computed once per range, and a floor under
    one range is never reused under another."""
    (q,) = T.free_vars((16,))
    x = T.leaf_read("x", (se.floor(q / 8),), (2,))
    calls = []
    inner = T.index._simplify_index
    monkeypatch.setattr(T.index, "_simplify_index", lambda e: calls.append(e) or inner(e))
    high, low = T.ge(q - 8) * x, T.ge(7 - q) * x
    assert T._refine(high) == T.ge(q - 8) * T.leaf_read("x", (1,), (2,))
    n = len(calls)
    assert n and T._refine(high) == T.ge(q - 8) * T.leaf_read("x", (1,), (2,))
    assert len(calls) == n  # the second time from the memo
    assert T._refine(low) == T.ge(7 - q) * T.leaf_read("x", (0,), (2,))
    assert T.simplify_index(se.floor(q / 8)) == se.floor(q / 8)  # no narrowing outside


def test_a_27_cell_argmax_chain_meets_its_one_hot_without_z3(monkeypatch) -> None:
    """The argmax chain of a 3x3x3 window (a padded 3-D max pool's compiled JVP) against the
    one-hot of its last cell: completed by the first-max argument (z3 timed out on it), and
    the chain missing one cell's condition is not."""
    from verify import _tchains as D

    def no_z3(*args, **kwargs):
        raise AssertionError("z3 asked")

    monkeypatch.setattr(D, "_Reals", no_z3)
    vals = se.symbols("v0:27")
    g, x = _complete_chains(
        T.normalize(_chain(vals, 26)), _one_hot(vals, 26), unroll=T.UNROLL_SHORT
    )
    assert g == x == _one_hot(vals, 26)
    pairs = [(0, _first_max(vals, i)) for i in range(26) if i != 13]
    holed = se.Piecewise(*pairs, (1, True))  # cell 13's condition missing: not a family
    monkeypatch.undo()
    g, x = _complete_chains(T.normalize(holed), _one_hot(vals, 26), unroll=T.UNROLL_SHORT)
    assert g != x


@pytest.mark.parametrize("wrong", ["sign of beta dropped", "padded cells in the normaliser"])
def test_a_wrong_padded_smooth_max_pool_jvp_is_not_proved(monkeypatch, wrong: str) -> None:
    """The padded 2-D smooth max (a smooth min at negative beta) with a wrong JVP rule: the
    weights a softmax of ``|beta| x``, or one over every window cell (padded ones too). Its
    mask is broadcast over the channels (a table read at its first slice) and must still not
    meet the reference's."""
    import torchlean_ir as tl
    import verify
    from torchlean_ir.ops import pool

    right = pool._smooth_weights

    def weights(B, x, g, beta):
        if wrong == "sign of beta dropped":
            return right(B, x, g, abs(beta))
        return B.softmax(g.windows(B, x) * beta, axis=-1)

    monkeypatch.setattr(pool, "_smooth_weights", weights)
    b = tl.GraphBuilder("f64")
    x = b.param("a0", (2, 4, 4))
    attrs = {"kernel": (2, 2), "stride": (2, 2), "padding": (1, 1), "beta": -1.5}
    y = b.apply("smooth_max_pool", x, **attrs)
    report = verify.verify_graph(b.build(b.sum(y * y)), method="tensor", end_to_end="never")
    jvp = [c for c in report.nodes[0].checks if c.name == "jvp = derivative"]
    assert jvp and jvp[0].result != "pass", jvp
