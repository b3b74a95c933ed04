"""JAX's own functions (``benchmarks/jax_functions.py``'s rows) decided by verify_function: each
row that verifies is pinned here, with a wrong custom rule for the same function refuted."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import symengine as se

from verify import verify_function

F32 = jnp.float32


def _arg(*shape: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, F32)


def _with_vjp(f, bwd):
    """``f`` with the custom VJP ``bwd(x, g)`` (residual: the input)."""
    c = jax.custom_vjp(f)
    c.defvjp(lambda x: (f(x), x), lambda x, g: (bwd(x, g),))
    return c


# -- var / std: a select on a known condition never reads the case it does not take ----------


def test_var_and_std_verify():
    for f in (lambda x: jnp.var(x, -1), lambda x: jnp.std(x, -1)):
        for shape in ((8, 16), (2, 3, 4, 6)):
            r = verify_function(f, _arg(*shape))
            assert r.verdict == "verified", str(r)


def test_var_with_a_wrong_rule_is_refuted():
    n = 6

    def var(x):
        return jnp.var(x, -1)

    def bwd(x, g):  # 2 (x - mean) / (n - 1): the unbiased estimator's factor
        return g[:, None] * 2 * (x - x.mean(-1, keepdims=True)) / (n - 1)

    assert verify_function(_with_vjp(var, lambda x, g: g[:, None] * 2 * (
        x - x.mean(-1, keepdims=True)) / n), _arg(3, n)).verdict == "verified"  # fmt: skip
    r = verify_function(_with_vjp(var, bwd), _arg(3, n))
    assert r.verdict == "mismatch", str(r)


def test_var_whose_known_condition_selects_nan_is_not_verified():
    """ddof = n: ``n - ddof > 0`` is known false, so the NaN case is selected: never a pass."""
    r = verify_function(lambda x: jnp.var(x, -1, ddof=4), _arg(3, 4))
    assert r.verdict == "undecided", str(r)
    assert "NaN" in " ".join(c.how for c in r.graph_checks)


# -- standardize: a clipped variance, its condition linear after a change of variables --------


def test_standardize_verifies_and_a_wrong_rule_is_refuted():
    """JAX's variance ``max(0, E[x^2] - E[x]^2)``: the relation is of a polynomial in the sums as
    symbols, decided on every branch (infeasible ones too) once ``E[x^2]`` is traded for it."""

    def std(x):
        return jax.nn.standardize(x, -1)

    def bwd(x, g):  # the projection onto the normalised input forgotten
        m = x.mean(-1, keepdims=True)
        r = jax.lax.rsqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        return r * (g - g.mean(-1, keepdims=True))

    r = verify_function(std, _arg(2, 3, 4))
    assert r.verdict == "verified", str(r)
    r = verify_function(_with_vjp(std, bwd), _arg(2, 4))
    assert r.verdict == "mismatch", str(r)


# -- maximum / minimum / clip / relu6: JAX tests which argument equals the maximum -------------


def test_maximum_minimum_clip_verify():
    two = (_arg(4, 5), _arg(4, 5))
    assert verify_function(jnp.maximum, *two).verdict == "verified"
    assert verify_function(jnp.minimum, *two).verdict == "verified"
    r = verify_function(lambda x: jnp.clip(x, -0.5, 0.5), _arg(2, 3, 4))
    assert r.verdict == "verified", str(r)
    assert all(c.method == "exact" for c in r.all_checks)


def test_wrong_maximum_and_clip_rules_are_refuted():
    @jax.custom_vjp
    def mx(x, y):
        return jnp.maximum(x, y)

    def bwd(res, g):  # the masks swapped
        x, y = res
        return g * (x < y), g * (x > y)

    mx.defvjp(lambda x, y: (mx(x, y), (x, y)), bwd)
    r = verify_function(mx, _arg(3, 4), _arg(3, 4))
    assert r.verdict == "mismatch", str(r)

    def clip(x):
        return jnp.clip(x, -0.5, 0.5)

    # the upper bound of the mask off: wrong on (0.4, 0.5), away from any kink
    wrong = _with_vjp(clip, lambda x, g: g * ((x > -0.5) & (x < 0.4)))
    r = verify_function(wrong, _arg(3, 4))
    assert r.verdict == "mismatch", str(r)


def test_relu6_verifies_with_the_one_sided_derivatives_jax_takes_at_its_kinks():
    """JAX's relu6 takes derivative 0 at x = 0 and x = 6: a one-sided derivative at each kink,
    both named; the reference's conventions alone (ops.md: a tie splits half, 1/2) differ
    there, the counterexample at a kink."""
    r = verify_function(jax.nn.relu6, _arg(2, 3))
    assert r.verdict == "verified", str(r)
    for c in r.graph_checks:
        assert "max(0, x(_, _)) at a tie: the derivative of 0" in c.how, c.how
        assert "min(6, max(0, x(_, _))) at a tie: the derivative of 6" in c.how, c.how
    r = verify_function(jax.nn.relu6, _arg(2, 3), kinks="convention")
    assert r.verdict == "mismatch" and r.counterexamples
    for ce in r.counterexamples:
        (value,) = (v for k, v in ce.inputs.items() if not k.startswith(("ct", "d")))
        assert value in ("0", "6"), ce.describe()


# -- reduce_prod and unstack: new primitives -------------------------------------------------


def test_prod_verifies_and_a_wrong_rule_is_refuted():
    r = verify_function(lambda x: jnp.prod(x, -1), _arg(4, 8, 16))
    assert r.verdict == "verified", str(r)
    assert verify_function(lambda x: jnp.prod(x), _arg(2, 3)).verdict == "verified"

    def prod(x):
        return jnp.prod(x, -1)

    def bwd(x, g):  # the product of the others, except that position 0's is taken everywhere
        return g[:, None] * jnp.prod(x[:, 1:], -1, keepdims=True) * jnp.ones_like(x)

    r = verify_function(_with_vjp(prod, bwd), _arg(3, 4))
    assert r.verdict == "mismatch", str(r)
    assert not r.counterexamples[0].element.endswith(",0]"), r.counterexamples[0].element


def test_prod_over_a_long_axis_is_not_verified():
    r = verify_function(lambda x: jnp.prod(x, -1), _arg(2, 65))
    assert r.verdict == "undecided"
    assert "reduce_prod over 65 entries" in " ".join(c.how for c in r.graph_checks)


def test_stack_verifies_and_a_wrong_rule_is_refuted():
    def stack(x, y):
        return jnp.stack([x, y * y], 0)

    r = verify_function(stack, _arg(4, 8, 16), _arg(4, 8, 16))
    assert r.verdict == "verified", str(r)
    wrong = jax.custom_vjp(stack)  # the two pieces of the cotangent swapped
    wrong.defvjp(lambda x, y: (stack(x, y), y), lambda y, g: (g[1], 2 * y * g[0]))
    assert verify_function(wrong, _arg(3, 4), _arg(3, 4)).verdict == "mismatch"


# -- logsumexp: the sign of a sum of exponentials is known ------------------------------------


def test_logsumexp_over_a_long_axis_verifies_and_a_wrong_rule_is_refuted():
    r = verify_function(lambda x: jax.nn.logsumexp(x, -1), _arg(8, 16))
    assert r.verdict == "verified", str(r)

    def lse(x):
        return jax.nn.logsumexp(x, -1)

    def bwd(x, g):  # the softmax of 2 x
        return g[:, None] * jax.nn.softmax(2 * x, -1)

    r = verify_function(_with_vjp(lse, bwd), _arg(3, 12))
    assert r.verdict == "mismatch", str(r)


def test_signs_known_to_the_terms():
    """``positive`` / ``known_relation`` decide only what holds for every value."""
    from verify import terms as T

    q = se.Symbol("q")
    x, b = se.Function("x")(q), T.ge(q - 2)  # a read (any real), a bracket (0 or 1)
    k = T.fresh("_k", 0, 16)
    body = se.exp(se.Function("x")(k)) * T.ge(k) * T.ge(15 - k)
    s = T.SUM(body, k)
    assert T.positive(s) and T.positive(se.exp(x)) and T.positive(s + b)
    assert not T.positive(x) and not T.positive(se.exp(x - se.oo))
    empty = T.SUM(se.exp(se.Function("x")(k)) * T.ge(k - 3) * T.ge(2 - k), k)
    assert not T.positive(empty)  # an empty range: the sum is 0
    assert not T.positive(T.SUM(se.exp(se.Function("x")(k)) * T.ge(q - k), k))
    assert T.known_relation(se.Lt(0, s)) == se.true
    assert T.known_relation(se.Lt(s, 0)) == se.false
    assert T.known_relation(se.Le(0, b)) == se.true
    assert T.known_relation(se.Lt(0, b)) == se.Lt(0, b)  # b may be 0
    assert T.known_relation(se.Lt(0, x)) == se.Lt(0, x)


# -- maxima over an axis: JAX splits a tie evenly, the reference gives it to one maximum ---------


def test_max_over_an_axis_verifies_with_the_even_split_jax_takes_at_a_tie():
    """JAX splits a tie of a maximum evenly among the tied values: one of the choices tried at
    a maximum of more than two values, named in the check. With the conventions alone (the
    first maximum takes it all) it is MISMATCH, the counterexample a row whose values all tie
    (a tie point of the probe); away from ties the two agree."""
    for shape in ((8, 16), (2, 3, 4, 6)):
        r = verify_function(lambda x: jnp.max(x, -1), _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all("an even split among the tied values" in c.how for c in r.graph_checks)
        r = verify_function(lambda x: jnp.max(x, -1), _arg(*shape), kinks="convention")
        assert r.verdict == "mismatch", str(r)
        ce = r.counterexamples[0]
        row = {v for k, v in ce.inputs.items() if k.startswith("x[")}
        assert len(row) == 1, ce.describe()  # every value of the row the same

    def mx(x):
        return jnp.max(x, -1)

    def bwd(x, g):  # the whole cotangent to every tied maximum: no choice gives that
        return g[..., None] * (x == x.max(-1, keepdims=True))

    r = verify_function(_with_vjp(mx, bwd), _arg(2, 6), rules=False)
    assert r.verdict == "mismatch", str(r)
    ce = r.counterexamples[0]
    row = [v for k, v in ce.inputs.items() if k.startswith("x[")]
    assert max(row.count(v) for v in row) >= 2, ce.describe()  # a tie


def test_min_over_two_values_verifies_and_a_wrong_rule_is_refuted():
    """Over two values both split a tie in halves (ops.md's ``min``): verified."""
    r = verify_function(lambda x: jnp.min(x, 0), _arg(2, 3, 4, 6))
    assert r.verdict == "verified", str(r)

    def mn(x):
        return jnp.min(x, 0)

    def bwd(x, g):  # the cotangent sent to the maximum
        return g[None, :] * (x == x.max(0, keepdims=True))

    r = verify_function(_with_vjp(mn, bwd), _arg(2, 3))
    assert r.verdict == "mismatch", str(r)


# -- cumprod / cummax: each position's prefix written out ---------------------------------------


def _revcumsum(v, axis):
    return jnp.flip(jnp.cumsum(jnp.flip(v, axis), axis), axis)


def test_cumprod_verifies_and_a_wrong_rule_is_refuted():
    """JAX differentiates ``cumprod`` through its associative scan (slices, pads, products): the
    reference is each position's prefix product, written out."""
    for f, shape in ((lambda x: jnp.cumprod(x, -1), (5,)),
                     (lambda x: jnp.cumprod(x, 0), (3, 4)),
                     (lambda x: jax.lax.cumprod(x, 1, reverse=True), (2, 4))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all(c.method == "exact" for c in r.all_checks)

    def cp(x):
        return jnp.cumprod(x, -1)

    def bwd(x, g):  # sum_{i >= k} g_i out_i, the division by x_k forgotten
        return _revcumsum(g * jnp.cumprod(x, -1), -1)

    for shape in ((4,), (2, 3)):
        r = verify_function(_with_vjp(cp, bwd), _arg(*shape))
        assert r.verdict == "mismatch", str(r)
        ce = r.counterexamples[0]
        assert re.fullmatch(r"grad \w+\[[0-9,]+\]", ce.element), ce.describe()


def test_cumprod_over_a_long_axis_is_not_verified():
    r = verify_function(lambda x: jnp.cumprod(x, -1), _arg(2, 17))
    assert r.verdict == "undecided"
    assert "cumprod over an axis of 17 entries" in " ".join(c.how for c in r.graph_checks)


def test_cummax_differs_from_jax_only_at_a_tie():
    """JAX differentiates ``cummax`` through a tree of pairwise ``max``, each splitting a tie in
    halves; the reference's prefix maximum is ``reduce_max``'s (two values split a tie in halves,
    more give it to the first maximum). Over two values they agree; over more they differ only
    where the maximum of a prefix of three or more values is tied: the counterexample is such a
    tie (the decision tries tie points first: a row whose values are equal)."""
    assert verify_function(lambda x: jax.lax.cummax(x, 0), _arg(2)).verdict == "verified"
    assert verify_function(lambda x: jax.lax.cummin(x, 1), _arg(3, 2)).verdict == "verified"
    for f, shape in ((lambda x: jax.lax.cummax(x, 0), (5,)),
                     (lambda x: jax.lax.cummax(x, 1, reverse=True), (3, 4))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "mismatch", str(r)
        for ce in r.counterexamples:
            xs = [v for k, v in ce.inputs.items() if k.startswith("x[")]
            assert max(xs.count(v) for v in xs) >= 3, ce.describe()  # a tied prefix of three


def test_wrong_cummax_rule_is_refuted():
    def cm(x):
        return jax.lax.cummax(x, x.ndim - 1)

    def bwd(x, g):  # each position's cotangent to its own input where it is a new maximum
        return g * (x == jax.lax.cummax(x, x.ndim - 1))

    for shape in ((4,), (2, 3)):
        r = verify_function(_with_vjp(cm, bwd), _arg(*shape))
        assert r.verdict == "mismatch", str(r)
        ce = r.counterexamples[0]
        assert re.fullmatch(r"grad \w+\[[0-9,]+\]", ce.element), ce.describe()


# -- sort: order statistics, the permutation a choice that gather / scatter-add read by case ---


def test_sort_verifies_and_wrong_rules_are_refuted():
    """JAX's derivative of ``sort`` gathers the tangent at the sorted ``iota`` (its VJP
    scatter-adds the cotangent there): read as a choice among the positions, case by case, it
    meets the derivative of the order statistics term by term, ties included (the stable order
    decides both)."""
    for f, shape in ((lambda x: jnp.sort(x, -1), (5,)),
                     (lambda x: jnp.sort(x, 0), (3, 4)),
                     (lambda x: jnp.take_along_axis(x, jnp.argsort(x, -1), -1) * 2, (2, 4)),
                     (lambda x: -jnp.sort(-x, -1), (2, 3))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all(c.method == "exact" for c in r.all_checks)

    def srt(x):
        return jnp.sort(x, -1)

    def unpermuted(x, g):  # the cotangent sent back in sorted order, not to its entries
        return g

    def descending(x, g):  # scattered by the permutation of the descending order
        rows = jnp.arange(x.shape[0])[:, None]
        return jnp.zeros_like(x).at[rows, jnp.argsort(-x, -1)].add(g)

    for bwd, shape in ((unpermuted, (4,)), (descending, (2, 3))):
        r = verify_function(_with_vjp(srt, bwd), _arg(*shape))
        assert r.verdict == "mismatch", str(r)
        ce = r.counterexamples[0]
        assert re.fullmatch(r"grad \w+\[[0-9,]+\]", ce.element), ce.describe()


def test_sort_over_a_long_axis_is_not_verified():
    r = verify_function(lambda x: jnp.sort(x, -1), _arg(17))
    assert r.verdict == "undecided"
    assert "sort over an axis of 17 entries" in " ".join(c.how for c in r.graph_checks)


def test_an_index_chosen_by_a_condition_on_data_is_read_by_case():
    """``x[where(x[0] > 0, 2, 1)]``: the dynamic slice at a choice reads each case; an index
    holding two choices is refused ("not verified"), never read as it stands."""
    r = verify_function(lambda x: x[jnp.where(x[0] > 0, 2, 1)] * x, _arg(3))
    assert r.verdict == "verified", str(r)

    def two(x):
        return x[jnp.where(x[0] > 0, 1, 0) + jnp.where(x[1] > 0, 1, 0)] * x

    r = verify_function(two, _arg(3))
    assert r.verdict == "undecided", str(r)
    assert "an index chosen by conditions on values" in " ".join(c.how for c in r.graph_checks)


# -- top_k: the stable descending order, its indices a choice read case by case ---------------


def _top2(x):
    return jax.lax.top_k(x, 2)[0]


def _scattered(x, g, idx):
    rows = jnp.arange(x.shape[0])[:, None]
    return jnp.zeros_like(x).at[rows, idx].add(g)


def test_top_k_verifies_and_wrong_rules_are_refuted():
    """``lax.top_k``: descending, equal values with the lower index first. JAX's JVP gathers
    the tangent at the indices (its VJP scatter-adds there): verified exactly, ties included.
    A rule that breaks ties toward the higher index is refuted at a tie, with the element
    named; one that sends the cotangent to the first k positions, anywhere."""
    for f, shape in ((_top2, (2, 4)),
                     (lambda x: jax.lax.top_k(x, 4)[0], (4,)),
                     (lambda x: x[jax.lax.top_k(x, 2)[1]] * 3, (4,))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all(c.method == "exact" for c in r.all_checks)
    right = _with_vjp(_top2, lambda x, g: _scattered(x, g, jax.lax.top_k(x, 2)[1]))
    assert verify_function(right, _arg(2, 4)).verdict == "verified"

    def tie_high(x, g):  # the descending order with equal values' higher index first
        return _scattered(x, g, jnp.argsort(x, -1)[:, ::-1][:, :2])

    r = verify_function(_with_vjp(_top2, tie_high), _arg(2, 4))
    assert r.verdict == "mismatch", str(r)
    ce = r.counterexamples[0]
    assert re.fullmatch(r"grad \w+\[[0-9,]+\]", ce.element), ce.describe()
    name, row = re.fullmatch(r"grad (\w+)\[(\d+),\d+\]", ce.element).groups()
    entries = [v for k, v in ce.inputs.items() if re.fullmatch(rf"{name}\[{row},\d\]", k)]
    assert len(entries) == 4 and len(set(entries)) < 4, ce.describe()  # at a tie

    r = verify_function(_with_vjp(_top2, lambda x, g: jnp.zeros_like(x).at[:, :2].add(g)),
                        _arg(2, 4))  # fmt: skip
    assert r.verdict == "mismatch", str(r)


def test_top_k_over_a_long_axis_is_not_verified():
    r = verify_function(lambda x: jax.lax.top_k(x, 2)[0], _arg(17))
    assert r.verdict == "undecided"
    assert "top_k over an axis of 17 entries" in " ".join(c.how for c in r.graph_checks)


# -- median / quantile / percentile: the NaN check decided, positions rounded, a sort gathered --


def test_median_quantile_percentile_verify_and_a_wrong_rule_is_refuted():
    """``jnp.quantile`` checks ``any(x != x)`` (NaN): false for every real ``x``, so its
    ``select_n`` takes the input and never reads the NaN; the interpolation positions
    ``floor`` / ``ceil`` of ``q (n - 1)`` are constants, rounded exactly; the two order
    statistics are gathers of the sort."""
    for f, shape in ((jnp.median, (5,)),
                     (lambda x: jnp.median(x, -1), (2, 4)),
                     (lambda x: jnp.quantile(x, 0.3, -1), (2, 5)),
                     (lambda x: jnp.percentile(x, 30.0), (5,))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all(c.method == "exact" for c in r.all_checks)

    def med(x):
        return jnp.median(x, -1)

    def mean_rule(x, g):  # the mean's derivative: 1/n to every entry
        return jnp.broadcast_to(g[:, None] / x.shape[-1], x.shape)

    r = verify_function(_with_vjp(med, mean_rule), _arg(2, 3))
    assert r.verdict == "mismatch", str(r)


def test_quantile_at_several_q_verifies_and_a_wrong_rule_is_refuted():
    """Several ``q``: the JVP gathers the sorted tangent at a table of positions, so the
    permutation is read at a table's entry (``sum_m [T(i) == m] P_m``); each output position
    reads the table at a number, each bracket is then a number, and one choice is left, read
    case by case. Both modes proved exactly; a rule with the interpolation weights swapped is
    refuted in both, the element named."""
    three = jnp.array([0.1, 0.5, 0.9])
    for f, shape in ((lambda x: jnp.quantile(x, jnp.array([0.25, 0.75])), (6,)),
                     (lambda x: jnp.quantile(x, three, -1), (2, 5))):  # fmt: skip
        r = verify_function(f, _arg(*shape))
        assert r.verdict == "verified", str(r)
        assert all(c.method == "exact" for c in r.all_checks), str(r)
        assert "index cases" in r.graph_checks[1].how, str(r)

    q = np.array([0.25, 0.75], np.float32)
    pos = q * 5
    lo, hi = np.floor(pos).astype(int), np.ceil(pos).astype(int)
    w = jnp.asarray(pos - lo, F32)

    def quantiles(x):
        return jnp.quantile(x, q)

    swapped = jax.custom_jvp(quantiles)

    @swapped.defjvp
    def _(primals, tangents):  # the lower statistic weighted by w, the upper by 1 - w
        (x,), (t,) = primals, tangents
        ts = t[jnp.argsort(x)]
        return quantiles(x), ts[lo] * w + ts[hi] * (1 - w)

    r = verify_function(swapped, _arg(6))
    assert r.verdict == "mismatch", str(r)
    jvp = next(c for c in r.graph_checks if c.name == "jvp = derivative")
    assert jvp.result == "fail" and jvp.method == "exact", str(r)
    assert re.search(r"jvp out\[[01]\]", jvp.counterexample.describe()), str(r)


def test_conditions_not_known_for_every_value_are_not_reduced():
    """``any(x > 0)`` is not decided by the terms: "not verified", never a guess; nor is a
    ``floor`` of an input (only a constant is rounded)."""
    r = verify_function(lambda x: jnp.where(jnp.any(x > 0), x, -x), _arg(3))
    assert r.verdict == "undecided", str(r)
    assert "reduce_or of symbolic conditions" in " ".join(c.how for c in r.graph_checks)
    r = verify_function(lambda x: jnp.floor(x) * x, _arg(3))
    assert r.verdict == "undecided", str(r)
    assert "floor of a value of the inputs" in " ".join(c.how for c in r.graph_checks)
