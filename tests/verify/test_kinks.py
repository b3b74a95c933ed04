"""verify._kinks: kink sites, their keys, the one-sided choices and the tie readings."""

from __future__ import annotations

from fractions import Fraction

import symengine as se

from verify._kinks import KINK_CHOICES_MAX, conventional, kink_choices, kink_sites, site_key
from verify._tbackend import TENSOR
from verify._tensor import leaf
from verify.terms import jvp_term

i = se.Symbol("i0")


def _x(k):
    return se.Function("x")(k)


def test_a_site_has_one_key_at_every_element_and_two_reads_stay_two():
    assert site_key(se.Max(_x(i), 0)) == site_key(se.Max(_x(3), 0))
    # symengine folds max(x(_), x(_)) to x(_): the key is written out, not simplified
    assert site_key(se.Max(_x(0), _x(1))) == "Max(x(_), x(_))"
    assert site_key(se.Max(_x(i), 0)) != site_key(se.Min(_x(i), 0))


def test_sites_of_max_min_and_abs():
    x = leaf("x", (3,))
    sites = kink_sites(TENSOR.abs(x).at((i,)) + se.Min(se.Max(_x(i), 0), 6))
    assert sorted(s.kind for s in sites) == ["abs", "max", "min"]
    (m,) = (s for s in sites if s.kind == "max")
    assert m.constant == 0 and m.options()[1][1] == "the derivative of 0"
    (three,) = kink_sites(se.Max(_x(0), _x(1), _x(2)))  # three values: first max or even
    assert three.values == 3 and [t for _, t in three.options()] == [
        "the first maximal value's derivative",
        "an even split among the tied values",
    ]


def test_choices_uniform_first_then_every_combination_within_the_cap():
    x = leaf("x", (3,))
    one = list(kink_sites(se.Max(_x(i), 0)))
    assert [c for c, _ in kink_choices(one)] == [((one[0].key, Fraction(1)),),
                                                 ((one[0].key, Fraction(0)),)]  # fmt: skip
    two = list(kink_sites(se.Max(_x(i), 0) + TENSOR.abs(x).at((i,))))
    assert len(list(kink_choices(two))) == 3**2 - 1 == KINK_CHOICES_MAX
    three = two + list(kink_sites(se.Min(_x(i), 6)))
    assert len(list(kink_choices(three))) == 2  # past the cap: the uniform ones only


def test_a_choice_changes_the_derivative_at_the_tie_only():
    x = leaf("x", (3,))
    e = se.Max(_x(i), 0)
    (site,) = kink_sites(e)
    tangent = {"x": "dx"}
    dx = se.Function("dx")(i)
    conv = jvp_term(e, tangent, conventional)
    zero_side = jvp_term(e, tangent, lambda t: conventional(t, ((site.key, Fraction(1)),)))
    at0 = {_x(i): 0}
    assert conv.xreplace(at0) == dx / 2 and zero_side.xreplace(at0) == 0
    at1 = {_x(i): 1}
    assert conv.xreplace(at1) == zero_side.xreplace(at1) == dx
    a = TENSOR.abs(x).at((i,))
    (s_abs,) = kink_sites(a)
    right = jvp_term(a, tangent, lambda t: conventional(t, ((s_abs.key, Fraction(1)),)))
    left = jvp_term(a, tangent, lambda t: conventional(t, ((s_abs.key, Fraction(0)),)))
    assert right.xreplace(at0) == dx and left.xreplace(at0) == -dx
    assert jvp_term(a, tangent, conventional).xreplace(at0) == 0
