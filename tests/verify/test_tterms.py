"""The tensor-level normal form (``verify/terms/``): steps that must keep a sum's bound
variable inside its sum."""

from __future__ import annotations

import itertools
import random

import symengine as se

from verify import _tdecide
from verify import terms as _terms
from verify._tcanonical import canonical


def _row_sum(q: se.Basic, n: int) -> se.Basic:
    x = _terms.fn("x")
    return _terms.ssum(lambda k: x(q, k), 0, n)


def _bound_outside_sums(e: se.Basic) -> set:
    """The bound variables that occur in ``e`` outside the sums that bind them."""
    out: set = set()
    stack = [e]
    while stack:
        t = stack.pop()
        if not isinstance(t, se.Basic) or isinstance(t, se.Number):
            continue
        if _terms.is_sum(t):
            continue
        if isinstance(t, se.Symbol) and t in _terms.BOUND:
            out.add(t)
        stack.extend(t.args)
    return out


def test_a_bracket_of_a_bound_variable_is_not_lifted_out_of_a_sum_under_a_function() -> None:
    # The lifting of nested brackets (``_lift``) once took the range brackets of a sum inside a
    # ``log`` for brackets of the monomial, leaving the sum unbounded and its variable free.
    q = _terms.fresh("_q", 0, 2, bound=False)
    x = _terms.fn("x")
    e = se.log(_row_sum(q, 16)) * x(q, 0)
    for unroll in (False, True):
        n = _terms.normalize(e, unroll=unroll)
        assert not _bound_outside_sums(n), n
        assert n == e, n


def test_log_sums_of_different_lengths_are_not_proved_equal() -> None:
    q = _terms.fresh("_q", 0, 2, bound=False)
    x = _terms.fn("x")
    got = se.log(_row_sum(q, 16)) * x(q, 0)
    expected = se.log(_row_sum(q, 15)) * x(q, 0)
    d = _tdecide.decide_tensor(got, expected, [q], counterexamples=False)
    assert d.equal is not True, d


def test_a_lifted_bracket_is_not_multiplied_into_a_division_by_a_bracket() -> None:
    # ``1 / (e^x([q >= 1]) [q >= 1] + e^y(q) [q <= 0])`` lifted on the nested ``[q >= 1]`` as
    # ``[b] on + (1 - [b]) off`` had ``off = e^-y(q) / [q <= 0]``: at q >= 1 that is
    # ``0 * zoo``, NaN, where the term is e^-x(1). Which bracket was lifted first followed the
    # symbols' names, so the padded 2-D smooth_max_pool (neg beta) verified or not depending on
    # how many fresh variables earlier checks had made. The choice is a Piecewise now.
    q = _terms.fresh("_q", -3, 8, bound=False)
    x, y = _terms.fn("lift_x"), _terms.fn("lift_y")  # leaf names no other test registers
    b, c = _terms.GE(q - 1), _terms.GE(-q)
    t = 1 / (se.exp(x(b)) * b + se.exp(y(q)) * c)
    n = _terms.normalize(t, unroll=_terms.UNROLL_SHORT)
    for v in range(-3, 8):
        at = _terms.normalize(n.xreplace({q: se.Integer(v)}), unroll=_terms.UNROLL_SHORT)
        assert at == (se.exp(-x(1)) if v >= 1 else se.exp(-y(se.Integer(v)))), (v, at)
    right = b * se.exp(-x(1)) + c * se.exp(-y(q))
    wrong = b * se.exp(-x(1)) + c * se.exp(-y(q + 1))
    assert _tdecide.decide_tensor(t, right, [q]).equal is True
    assert _tdecide.decide_tensor(t, wrong, [q]).equal is not True


def _values(e: se.Basic, box: dict) -> list[int]:
    """``e`` at every point of ``box`` (symbol -> range), in order."""
    names = list(box)
    out = []
    for point in itertools.product(*box.values()):
        v = e.xreplace({s: se.Integer(p) for s, p in zip(names, point, strict=True)})
        out.append(int(v))
    return out


def test_a_floor_of_a_padded_block_index_drops_the_inner_terms_with_a_negative_offset() -> None:
    """``floor((5 a + b + 99) / 100)`` for ``b`` in ``[1, 5]`` is ``floor((a + 20) / 20)``: the
    constant's share that keeps ``b`` inside one block is -1, not ``99 mod 5 = 4`` (a grouped
    convolution's channel group, read through the flat index of a padded window: its rule
    VJP met the adjoint only when the group's channels were few enough to unroll)."""
    a = _terms.fresh("_a", 0, 40, bound=False)
    b = _terms.fresh("_b", 1, 6, bound=False)
    e = se.floor((5 * a + b + 99) / 100)
    s = _terms.simplify_index(e)
    assert s == se.floor((a + 20) / 20) or s == 1 + se.floor(a / 20), s
    assert _values(s, {a: range(40), b: range(1, 6)}) == _values(e, {a: range(40), b: range(1, 6)})
    c = _terms.fresh("_c", 0, 6, bound=False)  # b one wider: no offset fits, the floor stays
    wide = _terms.simplify_index(se.floor((5 * a + c + 99) / 100))
    assert wide.has(c), wide


def test_floors_simplified_by_the_ranges_equal_the_floors_at_every_point() -> None:
    """Random floors of small linear forms over small boxes: the simplified floor has the
    original's value at every point (the offsets of the gcd split included)."""
    rng = random.Random(3)
    for _ in range(300):
        box = {}
        for _ in range(rng.choice((1, 2, 2, 3))):
            lo = rng.randint(-3, 3)
            box[_terms.fresh("_r", lo, lo + rng.randint(1, 7), bound=False)] = None
        box = {s: range(_terms.RANGES[s][0], _terms.RANGES[s][1]) for s in box}
        form = sum(rng.choice((1, 2, 3, 4, 5, 6, 10, -2, -5)) * s for s in box)
        e = se.floor((form + rng.randint(-120, 120)) / rng.choice((2, 3, 4, 6, 10, 12, 20, 100)))
        assert _values(_terms.simplify_index(e), box) == _values(e, box), e


def test_a_rational_factor_of_a_piecewise_has_one_normal_form() -> None:
    """``-dx Piecewise((-1, c), (0, True))`` and ``dx Piecewise((1, c), (0, True))`` are one
    term: the rational factor of the first nonzero value is taken out of the values, so both
    get one normal form (they had two, and the case splitter decided their difference by
    cases). The conditions keep their order, and a term that differs in sign stays apart."""
    x, dx = _terms.fn("x"), _terms.fn("dx")
    c, d = se.StrictLessThan(x(0), x(1)), se.StrictLessThan(x(1), x(2))
    for unroll in (_terms.UNROLL_NONE, _terms.UNROLL_SHORT):

        def nf(e: se.Basic, unroll: int = unroll) -> se.Basic:
            return _terms.normalize(e, unroll=unroll)

        one = nf(dx(0) * se.Piecewise((1, c), (0, True)))
        assert nf(-dx(0) * se.Piecewise((-1, c), (0, True))) == one
        assert nf(dx(0) * se.Piecewise((-1, c), (0, True))) == nf(-one) != one
        three = nf(dx(0) * se.Piecewise((se.Rational(3, 2), c), (-3, d), (x(2), True)))
        assert nf(3 * dx(0) * se.Piecewise((se.Rational(1, 2), c), (-1, d), (x(2) / 3, True))) \
            == three  # fmt: skip
        at = {x(0): 0, x(1): 1, x(2): 5, dx(0): 2}  # c and d hold: c's branch, taken first
        assert three.xreplace(at) == 3
        assert nf(dx(0) * se.Piecewise((-se.oo, c), (0, True))) == dx(0) * se.Piecewise(
            (-se.oo, c), (0, True))  # an infinity stays in its branch  # fmt: skip


def _half_tie(a: se.Basic, b: se.Basic) -> se.Basic:
    """``max(a, b)`` as the reference writes it before differentiating (the tie in halves)."""
    return se.Piecewise((a, se.StrictLessThan(b, a)), (b, se.StrictLessThan(a, b)),
                        ((a + b) / 2, True))  # fmt: skip


def test_a_maximum_and_its_tie_halved_piecewise_have_one_normal_form() -> None:
    """JAX's ``max(0, x)`` and the reference's ``Piecewise((0, x < 0), (x, 0 < x), (x/2,
    True))`` are one value (at the tie ``x/2 = 0``), so one term: a ReLU summed by the next
    layer is one sum on both sides. Swapped values are the minimum; a tie that takes another
    value is no maximum and stays."""
    x, w = _terms.fn("x"), _terms.fn("w")
    for unroll in (_terms.UNROLL_NONE, _terms.UNROLL_SHORT):

        def nf(e: se.Basic, unroll: int = unroll) -> se.Basic:
            return _terms.normalize(e, unroll=unroll)

        def layer(act: object) -> se.Basic:
            return _terms.ssum(lambda k: w(0, k) * act(x(k)), 0, 16)  # type: ignore[operator]

        relu = canonical(nf(layer(lambda v: se.Max(0, v))))
        assert canonical(nf(layer(lambda v: _half_tie(se.Integer(0), v)))) == relu
        assert nf(_half_tie(x(0), x(1))) == se.Max(x(0), x(1))
        swapped = se.Piecewise((x(1), se.StrictLessThan(x(1), x(0))),
                               (x(0), se.StrictLessThan(x(0), x(1))),
                               ((x(0) + x(1)) / 2, True))  # fmt: skip
        assert nf(swapped) == se.Min(x(0), x(1))
        other = se.Piecewise((x(0), se.StrictLessThan(x(1), x(0))),
                             (x(1), se.StrictLessThan(x(0), x(1))), (0, True))  # fmt: skip
        assert not nf(other).atoms(se.Max, se.Min), nf(other)


def test_steps_in_one_difference_multiply_into_one_normal_form() -> None:
    """JAX's derivative of ``max(0, x)``, ``[0 <= x] / ([x <= 0] + [0 < x]/2)``, is twice the
    reference's ``Piecewise((0, x < 0), (1, 0 < x), (1/2, True))`` at every ``x``: one normal
    form, whichever way the relations are written (``0 < 2x``, ``-x < 0``). Steps in different
    differences stay apart, and a negative power of a step that is 0 somewhere is not taken."""
    x, y = _terms.fn("x"), _terms.fn("y")
    half = se.Rational(1, 2)
    jax_mask = se.Piecewise((1, se.LessThan(0, x(0))), (0, True)) / se.Piecewise(
        (1, se.LessThan(x(0), 0)), (half, True))  # fmt: skip
    ref = se.Piecewise((0, se.StrictLessThan(x(0), 0)), (1, se.StrictLessThan(0, x(0))),
                       (half, True))  # fmt: skip
    scaled = se.Piecewise((0, se.StrictLessThan(0, -2 * x(0))), (2, se.StrictLessThan(-x(0), 0)),
                          (1, True))  # fmt: skip
    for v in (-1, 0, 1):  # the identity the normal form relies on
        assert jax_mask.xreplace({x(0): v}) == 2 * ref.xreplace({x(0): v})
    for unroll in (_terms.UNROLL_NONE, _terms.UNROLL_SHORT):
        one = _terms.normalize(2 * ref, unroll=unroll)
        assert _terms.normalize(jax_mask, unroll=unroll) == one
        assert _terms.normalize(scaled, unroll=unroll) == one
        apart = se.Piecewise((1, se.LessThan(0, x(0))), (0, True)) / se.Piecewise(
            (1, se.LessThan(y(0), 0)), (half, True))  # fmt: skip
        assert len(_terms.normalize(apart, unroll=unroll).atoms(se.Piecewise)) == 2
        inverse = se.Piecewise((1, se.StrictLessThan(0, x(0))), (0, True)) ** -1
        assert _terms.normalize(inverse, unroll=unroll) == inverse


def test_steps_in_one_difference_added_have_one_normal_form() -> None:
    """A leaky ReLU's derivative as JAX adds it, ``[0 < x] + a [x < 0]`` (the tie in halves on
    each side), and the reference's one step with the values added are one term; so are
    ``[0 < x] + [x <= 0]`` and 1. Monomials whose other factors differ stay apart."""
    x, dx, w = _terms.fn("x"), _terms.fn("dx"), _terms.fn("w")
    a, half = se.Rational(1, 100), se.Rational(1, 2)
    lt, gt = se.StrictLessThan(x(0), 0), se.StrictLessThan(0, x(0))
    jax_sum = dx(0) * (se.Piecewise((0, lt), (1, gt), (half, True))
                       + a * se.Piecewise((1, lt), (0, gt), (half, True)))  # fmt: skip
    ref = dx(0) * se.Piecewise((a, lt), (1, gt), ((1 + a) / 2, True))
    for v in (-1, 0, 1):  # the identity the normal form relies on
        assert jax_sum.xreplace({x(0): v}) == ref.xreplace({x(0): v})
    for unroll in (_terms.UNROLL_NONE, _terms.UNROLL_SHORT):

        def nf(e: se.Basic, unroll: int = unroll) -> se.Basic:
            return _terms.normalize(e, unroll=unroll)

        assert nf(jax_sum) == nf(ref)
        assert len(nf(jax_sum).atoms(se.Piecewise)) == 1
        both = se.Piecewise((1, gt), (0, True)) + se.Piecewise((1, se.LessThan(x(0), 0)), (0, True))
        assert nf(both) == 1
        apart = dx(0) * se.Piecewise((1, gt), (0, True)) + w(0) * se.Piecewise((1, lt), (0, True))
        assert len(nf(apart).atoms(se.Piecewise)) == 2


def test_a_finite_value_selected_by_a_condition_is_the_value_times_a_step() -> None:
    """``Piecewise((v, c), (0, True))`` is ``v Piecewise((1, c), (0, True))`` when ``v`` is
    finite for every value of the leaves (``jnp.where(v > 0, v, 0)``, JAX's ``where(c, ct, 0)``
    against the reference's ``ct`` times its mask); a value that may not be (a ``log``, an
    infinity) stays in its branch, where the condition keeps it from being computed."""
    x, ct = _terms.fn("x"), _terms.fn("ct")
    gt = se.StrictLessThan(0, x(0))
    step = se.Piecewise((1, gt), (0, True))
    for unroll in (_terms.UNROLL_NONE, _terms.UNROLL_SHORT):

        def nf(e: se.Basic, unroll: int = unroll) -> se.Basic:
            return _terms.normalize(e, unroll=unroll)

        assert nf(se.Piecewise((ct(), gt), (0, True))) == nf(ct() * step)
        assert nf(se.Piecewise((3 * ct() * x(0), gt), (-ct() * x(0), True))) == nf(
            ct() * x(0) * se.Piecewise((3, gt), (-1, True)))  # fmt: skip
        kept = se.Piecewise((se.log(x(0)), gt), (0, True))
        assert nf(kept) == kept
        masked = se.Piecewise((x(0), gt), (-se.oo, True))
        assert nf(masked) == masked
        # a finite sum selected whole (a ReLU's JVP of a layer: where(c, t, 0)) distributes
        whole = se.Piecewise((ct() * x(1) + x(2), gt), (0, True))
        assert nf(whole) == nf(ct() * x(1) * step + x(2) * step)
        assert nf(se.Piecewise((se.log(x(1)) + x(2), gt), (0, True))) != nf(
            se.log(x(1)) * step + x(2) * step
        )  # a log may be -oo where c fails: kept whole
