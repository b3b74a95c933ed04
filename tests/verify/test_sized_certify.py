"""Rule certificates with symbolic sizes (``verify/_certify.py``, ``verify/_dims.py``): a
symbolic size answers only what holds for every size; which ops are proved for every size; a
wrong rule, a rule that looks at a size's value and a rule wrong only at some sizes get no
certificate; verify_graph reuses a certificate at every size of the pattern."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
import symengine as se
from hypothesis import given, settings
from hypothesis import strategies as st

import torchlean_ir as tl
import verify
from verify import _sizecert as K
from verify import terms as T
from verify._dims import Dim, SizeDependent
from verify._sig import Signature

from .test_certify import _signatures

#: The registry ops whose rules are proved with symbolic sizes at some op-table signature
#: (docs/verification.md lists them): a change of this set, either way, fails here.
SIZED = {"abs", "add", "avg_pool", "avg_pool2d", "avg_pool2d_pad", "batchnorm_channel_first",
         "batchnorm_eval", "bmm", "broadcast_to", "clamp", "concat", "concat_vectors", "conv",
         "conv2d", "conv_transpose", "conv_transpose2d", "detach", "erf", "exp", "flatten",
         "gather_row",
         "gather_scalar", "gelu", "global_avg_pool2d", "inv", "layer_norm", "linear", "log",
         "log_softmax", "matmul", "max", "max_pool", "max_pool2d", "max_pool2d_pad", "min",
         "mse_loss", "mul", "multi_head_attention", "pow", "reduce_mean", "reduce_sum", "relu",
         "rsqrt", "safe_log", "scale", "scatter_add_row", "scatter_add_vec", "sigmoid", "silu",
         "slice", "smooth_max_pool", "smooth_max_pool2d", "softmax",
         "softplus", "sqrt", "step", "sub", "sum", "swap_adjacent_at_depth", "tanh", "transpose2d",
         "transpose3d_first_to_last", "transpose3d_last_to_first",
         "transpose3d_last_two"}  # fmt: skip


# -- symbolic sizes ------------------------------------------------------------------------------


def test_a_size_answers_only_what_holds_for_every_size() -> None:
    n, m = Dim(T.size_symbol("_Nt0")), Dim(T.size_symbol("_Nt1"))
    assert n == n and n * m == m * n and n + 1 != n and n != 0 and bool(n)
    assert n >= 1 and n > 0 and not n < 1 and n * m >= n and not n + 1 <= n
    assert (n * m) // m == n and 3 * n // 3 == n
    for use in (lambda: n == 1, lambda: n > 1, lambda: n == m, lambda: n <= m,
                lambda: n * m == n, lambda: int(n), lambda: range(n), lambda: [0, 1][n],
                lambda: n // 2, lambda: (n + 1) // n, lambda: n % 2, lambda: float(n)):  # fmt: skip
        with pytest.raises(SizeDependent):
            use()


def test_a_size_pattern_names_sizes_by_the_roles_the_shape_rule_ties() -> None:
    b = tl.GraphBuilder("f64")
    W, x = b.param("W", (3, 3)), b.param("x", (3, 3))
    sig = Signature.of(b.build(b.sum(b.apply("matmul", W, x))), 0)
    # the contracted sizes are tied, the others free: a square matmul is proved for any shape
    assert K.size_pattern(sig, refine=True) == ((("n0", "n1"), ("n1", "n2")),
                                                {"n0": 3, "n1": 3, "n2": 3})  # fmt: skip
    assert K.size_pattern(sig) == ((("n0", "n0"), ("n0", "n0")), {"n0": 3})
    b = tl.GraphBuilder("f64")
    W, bias, x = b.param("W", (3, 2, 3, 3)), b.param("b", (3,)), b.param("x", (2, 3, 3))
    y = b.apply("conv2d", W, bias, x, stride=1, padding=1)
    pattern, _ = K.size_pattern(Signature.of(b.build(b.sum(y)), 0), refine=True)  # type: ignore[misc]
    # out channels tied with the bias; kernel and image sizes of 3 each their own
    assert pattern == (("n0", "n1", "n2", "n3"), ("n0",), ("n1", "n4", "n5"))


def test_a_size_pattern_shares_a_symbol_between_equal_sizes_and_keeps_ones() -> None:
    b = tl.GraphBuilder("f64")
    W, x = b.param("W", (4, 3)), b.param("x", (3, 1))
    g = b.build(b.sum(b.apply("matmul", W, x)))
    pattern, values = K.size_pattern(Signature.of(g, 0))  # type: ignore[misc]
    assert pattern == (("n0", "n1"), ("n1", 1)) and values == {"n0": 4, "n1": 3}


# -- which ops ------------------------------------------------------------------------------------


def test_the_ops_proved_with_symbolic_sizes_are_the_ones_listed() -> None:
    got = {op for op, sigs in _signatures().items()
           if any(not isinstance(K.sized_certificate(s), str) for s in sigs)}  # fmt: skip
    assert got == SIZED


@pytest.mark.parametrize(
    ("op", "why"),
    [("gather_scalar_nat", "index inputs"),
     ("reshape", "the rules depend on the values of n0")],
)  # fmt: skip
def test_a_sized_certificate_is_refused_with_its_reason(op: str, why: str) -> None:
    reasons = [K.sized_certificate(s) for s in _signatures()[op]]
    assert all(isinstance(r, str) for r in reasons)
    assert any(why in r for r in reasons), reasons


def test_every_check_of_a_sized_certificate_passed_exactly() -> None:
    sig = _signatures()["linear"][0]
    cert = K.sized_certificate(sig)
    assert not isinstance(cert, str)
    assert [c.name for c in cert.checks] == ["jvp = derivative", "vjp = adjoint"]
    assert all((c.result, c.method, c.level) == ("pass", "exact", "tensor") for c in cert.checks)
    assert cert.out == (se.Symbol("_N0"),)


# -- wrong rules ----------------------------------------------------------------------------------


@contextmanager
def _vjp(op_name: str, rule: Any) -> Iterator[None]:
    op = tl.get_op(op_name)
    saved = op.vjp_rule
    object.__setattr__(op, "vjp_rule", rule)
    K._SIZED.clear()
    try:
        yield
    finally:
        object.__setattr__(op, "vjp_rule", saved)
        K._SIZED.clear()


def _mean_graph(shape: tuple[int, int]) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x = b.param("x", shape)
    return b.build(b.sum(b.apply("reduce_mean", x, axis=1)))


def _mean_sig(shape: tuple[int, int] = (3, 5)) -> Signature:
    return Signature.of(_mean_graph(shape), 0)


def test_the_right_mean_rule_is_certified() -> None:
    assert not isinstance(K.sized_certificate(_mean_sig()), str)


def test_a_mean_vjp_that_divides_by_n_plus_1_is_not_certified() -> None:
    def wrong(B: Any, args: tuple, out: Any, ct: Any, axis: int) -> tuple:
        n = args[0].shape[axis]
        return (B.broadcast_to(B.expand_dims(ct / (n + 1), axis), args[0].shape),)

    with _vjp("reduce_mean", wrong):
        why = K.sized_certificate(_mean_sig())
        assert isinstance(why, str) and ("did not pass" in why or "not proved" in why), why


def test_a_mean_vjp_wrong_only_past_a_size_gets_a_certificate_for_its_own_size_only() -> None:
    def branchy(B: Any, args: tuple, out: Any, ct: Any, axis: int) -> tuple:
        n = args[0].shape[axis]
        scale = n if n <= 1000 else n + 1  # wrong only for rows longer than 1000
        return (B.broadcast_to(B.expand_dims(ct / scale, axis), args[0].shape),)

    with _vjp("reduce_mean", branchy):
        # the branch on the row length fixes it: a certificate for rows of 5 only
        cert = K.sized_certificate(_mean_sig())
        assert not isinstance(cert, str)
        assert dict(cert.plan) == {"n0": ("ge", 1), "n1": ("eq", 5)}
        assert cert.covers({"n0": 7, "n1": 5}) and not cert.covers({"n0": 2, "n1": 1001})
        # at 3x5 the rule is right, at 3x1001 wrong: each shape's own proof says so
        ok = verify.verify_graph(_mean_graph((3, 5)), method="tensor", end_to_end="never")
        bad = verify.verify_graph(_mean_graph((2, 1001)), method="tensor", end_to_end="never")
        assert ok.verdict == "verified" and bad.verdict == "mismatch"


def test_a_matmul_vjp_with_a_wrong_transpose_is_not_certified() -> None:
    # right for square matrices only; with distinct size symbols the shapes disagree
    def wrong(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
        a, b = args
        return (B.matmul(ct, b), B.matmul(B.transpose(a, (1, 0)), ct))

    b = tl.GraphBuilder("f64")
    A, Bm = b.param("a", (4, 3)), b.param("b", (3, 2))
    sig = Signature.of(b.build(b.sum(b.apply("matmul", A, Bm))), 0)
    with _vjp("matmul", wrong):
        assert isinstance(K.sized_certificate(sig), str)


# -- reuse ----------------------------------------------------------------------------------------


def test_verify_graph_reuses_one_sized_certificate_at_every_size() -> None:
    K._SIZED.clear()
    for n, d in [(16, 16), (4096, 4096), (3, 7)]:
        b = tl.GraphBuilder("f64")
        W, bias, x = b.param("W", (n, d)), b.param("b", (n,)), b.param("x", (d,))
        report = verify.verify_graph(b.build(b.sum(b.apply("linear", W, bias, x))),
                                     method="tensor", end_to_end="never")  # fmt: skip
        assert report.verdict == "verified"
        lin = [c for c in report.all_checks if c.link == "rule" and "(n0,n1) (n0) (n1)" in c.how]
        assert len(lin) == 2  # jvp = derivative, vjp = adjoint
        assert all("proved with symbolic sizes" in c.how and f"n0={n}" in c.how for c in lin)
    # the square (16, 16) too: its two sizes have roles the shape rule does not tie
    assert len([key for (key, _) in K._SIZED if key[0] == "linear"]) == 1


def test_the_forward_shape_is_compared_at_each_reuse() -> None:
    sig = _mean_sig((3, 5))
    cert = K.sized_certificate(sig)
    assert not isinstance(cert, str)
    assert K.reuse_sized(sig, kinks=True) is not None
    broken = replace(cert, out=(cert.out[0] + 1,))
    key = next(k for k, v in K._SIZED.items() if v is cert)
    K._SIZED[key] = broken
    try:
        assert K.reuse_sized(sig, kinks=True) is None
    finally:
        K._SIZED[key] = cert


# -- strides: sizes of one residue ----------------------------------------------------------------


def test_floor_division_of_a_size_is_a_polynomial_only_where_it_is_for_every_size() -> None:
    n = Dim(T.size_symbol("_Nt2"))
    assert (2 * n + 3) // 2 == n + 1 and (4 * n - 1) // 2 == 2 * n - 1 and (2 * n + 1) % 2 == 1
    with pytest.raises(SizeDependent) as e:
        (n + 2) // 2
    assert e.value.divisor == 2 and e.value.symbols == {se.Symbol("_Nt2")}


def _conv_sig(c_in: int, c_out: int, h: int, w: int, stride: int) -> Signature:
    b = tl.GraphBuilder("f64")
    W, bias = b.param("W", (c_out, c_in, 3, 3)), b.param("b", (c_out,))
    x = b.param("x", (c_in, h, w))
    y = b.apply("conv2d", W, bias, x, stride=stride, padding=1)
    return Signature.of(b.build(b.sum(y)), 0)


def test_a_strided_conv_is_proved_for_every_size_of_its_residues_and_reused() -> None:
    K._SIZED.clear()
    small = _conv_sig(2, 4, 9, 8, stride=2)
    cert = K.sized_certificate(small)
    assert not isinstance(cert, str)
    plan = dict(cert.plan)
    # channels for every size, the kernel fixed, each spatial size of its residue mod 2
    assert plan["n0"] == ("ge", 1) and plan["n1"] == ("ge", 1)
    assert plan["n2"] == plan["n3"] == ("eq", 3)
    assert plan["n4"][:3] == ("mod", 2, 1) and plan["n5"][:3] == ("mod", 2, 0)
    assert all((c.result, c.method) == ("pass", "exact") for c in cert.checks)
    big = _conv_sig(16, 8, 33, 32, stride=2)
    proofs = len(K._SIZED)
    checks = K.reuse(big)
    assert checks is not None and len(K._SIZED) == proofs  # no new proof: the same certificate
    assert all("proved with symbolic sizes" in c.how and "n4=33" in c.how for c in checks)
    # another residue is another proof
    assert K.sized_certificate(_conv_sig(16, 8, 32, 32, stride=2)) is not cert


def test_a_conv_vjp_without_the_stride_dilation_is_certified_at_stride_1_only() -> None:
    from .mutants import _conv2d_vjp_undilated

    with _vjp("conv2d", _conv2d_vjp_undilated):
        assert isinstance(K.sized_certificate(_conv_sig(2, 4, 9, 8, stride=2)), str)
        assert not isinstance(K.sized_certificate(_conv_sig(2, 4, 9, 8, stride=1)), str)


def test_a_size_used_as_a_value_must_be_positive_for_every_size() -> None:
    n = Dim(T.size_symbol("_Nt3"))
    assert 1 / n == 1 / se.Symbol("_Nt3") and (n * 2).value() == 2 * se.Symbol("_Nt3")
    for use in (lambda: 1.0 / (n - 1), lambda: (n - 1).value(), lambda: n / (n - 1)):
        with pytest.raises(SizeDependent):
            use()


def test_a_rule_dividing_by_n_minus_1_is_certified_only_where_that_is_positive() -> None:
    def unbiased(B: Any, args: tuple, out: Any, ct: Any, axis: int) -> tuple:
        n = args[0].shape[axis]  # right for n >= 2; 0 / 0 at n = 1, where it cancels formally
        g = ct / n * (n - 1) / (n - 1)
        return (B.broadcast_to(B.expand_dims(g, axis), args[0].shape),)

    with _vjp("reduce_mean", unbiased):
        cert = K.sized_certificate(_mean_sig((3, 5)))
        assert not isinstance(cert, str) and dict(cert.plan)["n1"] == ("ge", 5)


# -- reshapes with symbolic sizes -----------------------------------------------------------------


def test_a_symbolic_reshape_reads_the_cell_numpy_does_at_every_size_tried() -> None:
    import itertools

    import numpy as np

    from verify._tensor import leaf, reshape

    u, v = T.size_symbol("_Nt4"), T.size_symbol("_Nt5")
    U, V = Dim(u), Dim(v)
    cases = [((2 * U,), (U, 2)), ((U, 2), (2 * U,)), ((3, 2 * U, 2 * V), (3, U, 2, V, 2)),
             ((1, U), (U,)), ((U,), (1, U, 1)), ((U, 2, 3), (U, 6)), ((U, 6), (U, 3, 2)),
             ((U, V, 2), (U, 2 * V)), ((U, 3, 2), (6 * U,))]  # fmt: skip

    def at(shape: tuple, sub: dict) -> list[int]:
        return [int(se.expand(d.expr.xreplace(sub))) if isinstance(d, Dim) else d for d in shape]

    for src, dst in cases:
        Y = reshape(leaf("x", src), dst)
        for uv in [(2, 3), (3, 1), (1, 2)]:
            sub = {u: se.Integer(uv[0]), v: se.Integer(uv[1])}
            cs, cd = at(src, sub), at(dst, sub)
            ref = np.arange(int(np.prod(cs))).reshape(cs).reshape(cd)
            for idx in itertools.product(*[range(n) for n in cd]):
                t = Y.at(tuple(se.Integer(i) for i in idx)).xreplace(sub)
                cell = [int(se.expand(a)) for a in t.args]
                assert int(np.ravel_multi_index(cell, cs)) == ref[idx], (src, dst, uv, idx)


def test_a_reshape_that_mixes_two_symbolic_sizes_is_refused() -> None:
    from verify._tensor import leaf, reshape

    U, V = Dim(T.size_symbol("_Nt4")), Dim(T.size_symbol("_Nt5"))
    with pytest.raises(SizeDependent):
        reshape(leaf("x", (U, V)), (V, U))


def test_an_op_with_kinks_reuses_its_certificate_and_checks_its_kinks_at_each_shape() -> None:
    b = tl.GraphBuilder("f64")
    x = b.param("x", (8, 6, 10))
    g = b.build(b.sum(b.apply("max_pool2d", x, kernel=(2, 2), stride=2)))
    K._SIZED.clear()
    checks = K.reuse(Signature.of(g, 0))
    assert checks is not None
    names = [c.name for c in checks]
    assert names == ["forward = sym", "jvp = derivative", "vjp = adjoint", "kinks"]
    assert all((c.result, c.method) == ("pass", "exact") for c in checks)
    assert "proved with symbolic sizes" in checks[0].how and "n1 = 2 u + 0" in checks[0].how
    assert "proved with symbolic sizes" not in checks[3].how  # the kinks: at this shape


def test_a_kink_only_mutant_is_certified_but_refuted_by_its_kinks_check() -> None:
    from .mutants import MUTANTS, applied

    mutant = next(m for m in MUTANTS if m.name == "relu'(0) = 1")
    with applied(mutant):
        report = verify.verify_graph(mutant.graph(), method="tensor", end_to_end="never")
        assert report.verdict == "mismatch"
        failed = [c for c in report.all_checks if c.result == "fail"]
        assert any(c.name == "kinks" for c in failed)


# -- the answers of a size hold at every size -----------------------------------------------------

_polys = st.lists(st.tuples(st.integers(-6, 6), st.integers(0, 2), st.integers(0, 2)),
                  min_size=1, max_size=4)  # fmt: skip


def _poly(terms: list[tuple[int, int, int]], a: Any, b: Any) -> Any:
    return se.expand(se.Add(*[c * a**i * b**j for c, i, j in terms]))


@settings(max_examples=300, deadline=None)
@given(p=_polys, q=_polys, lo_a=st.integers(1, 4), lo_b=st.integers(1, 4),
       d=st.integers(1, 4))  # fmt: skip
def test_every_decided_comparison_and_division_holds_at_every_size(
    p: list, q: list, lo_a: int, lo_b: int, d: int
) -> None:
    import operator

    a = T.size_symbol(f"_Nh_a{lo_a}", lo_a)
    b = T.size_symbol(f"_Nh_b{lo_b}", lo_b)
    P, Q = Dim(_poly(p, a, b)), Dim(_poly(q, a, b))
    grid = [{a: se.Integer(x), b: se.Integer(y)} for x in range(lo_a, lo_a + 6)
            for y in range(lo_b, lo_b + 6)]  # fmt: skip

    def val(e: Any, pt: dict) -> int:
        return int(se.expand(e.xreplace(pt)))

    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        try:
            answer = getattr(P, f"__{name}__")(Q)
        except SizeDependent:
            continue
        cmp = getattr(operator, name)
        assert all(cmp(val(P.expr, pt), val(Q.expr, pt)) == answer for pt in grid), name
    try:
        r = P // d
    except SizeDependent:
        return
    r_expr = r.expr if isinstance(r, Dim) else se.Integer(r)
    assert all(val(r_expr, pt) == val(P.expr, pt) // d for pt in grid)


def test_a_target_shape_attribute_is_named_like_the_sizes_and_reused() -> None:
    def graph(rows: int, cols: int, lead: int) -> tl.GraphData:
        b = tl.GraphBuilder("f64")
        x = b.param("x", (rows, 1))
        return b.build(b.sum(b.apply("broadcast_to", x, shape=(lead, rows, cols))))

    K._SIZED.clear()
    cert = K.sized_certificate(Signature.of(graph(3, 4, 2), 0))
    assert not isinstance(cert, str)
    assert cert.attr_pattern == (("shape", ("n1", "n0", "n2")),)
    assert all((c.result, c.method) == ("pass", "exact") for c in cert.checks)
    big = K.reuse(Signature.of(graph(512, 768, 8), 0))
    assert big is not None and all("shape=(n1,n0,n2)" in c.how for c in big)
    assert all("n0=512" in c.how and "n2=768" in c.how for c in big)


# -- padding masks with symbolic sizes ------------------------------------------------------------


def _pool_sig(op: str, shape: tuple[int, ...], **attrs: Any) -> Signature:
    b = tl.GraphBuilder("f64")
    x = b.param("x", shape)
    return Signature.of(b.build(b.sum(b.apply(op, x, **attrs))), 0)


def test_a_padding_mask_built_at_tensor_level_is_numpys_at_every_size_tried() -> None:
    import itertools

    from torchlean_ir.ops._windows import out_size, valid_mask
    from verify._tbackend import STATIC

    n, m = T.size_symbol("_Nt6"), T.size_symbol("_Nt7")
    for kernel, stride, padding in [((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (2, 1)),
                                    ((2, 2), (2, 2), (1, 0))]:  # fmt: skip
        size = (2 * Dim(n) + 1, 2 * Dim(m) + 2)  # sizes every stride divides as the rule needs
        geometry = list(zip(kernel, stride, padding, strict=True))
        out = tuple((d + 2 * p - k) // s + 1 for d, (k, s, p) in zip(size, geometry, strict=True))
        sym = valid_mask(size, kernel, stride, padding, out, STATIC)
        for nv, mv in [(1, 1), (2, 3), (4, 1)]:
            sub = {n: se.Integer(nv), m: se.Integer(mv)}
            cs = (2 * nv + 1, 2 * mv + 2)
            co = tuple(out_size(d, k, s, p) for d, (k, s, p) in zip(cs, geometry, strict=True))
            ref = valid_mask(cs, kernel, stride, padding, co)
            for idx in itertools.product(*[range(d) for d in ref.shape]):
                cell = sym.at(tuple(se.Integer(i) for i in idx)).xreplace(sub)
                assert T.normalize(cell) == int(ref[idx]), (kernel, nv, mv, idx)


def test_a_padded_max_pool_is_proved_for_every_spatial_size_and_reused() -> None:
    K._SIZED.clear()
    attrs = {"kernel": (3, 3), "stride": 1, "padding": 1}
    cert = K.sized_certificate(_pool_sig("max_pool2d_pad", (2, 5, 5), **attrs))
    assert not isinstance(cert, str)
    assert all(m[0] != "eq" for _, m in cert.plan), cert.plan  # channels and spatial sizes
    proofs = len(K._SIZED)
    checks = K.reuse(_pool_sig("max_pool2d_pad", (64, 32, 32), **attrs))
    assert checks is not None and len(K._SIZED) == proofs  # the same certificate
    assert [c.name for c in checks] == ["forward = sym", "jvp = derivative", "vjp = adjoint",
                                        "kinks"]  # fmt: skip
    assert all((c.result, c.method) == ("pass", "exact") for c in checks)
    assert all("proved with symbolic sizes" in c.how for c in checks[:3])


def test_a_padded_smooth_max_pool_is_proved_for_every_size() -> None:
    K._SIZED.clear()
    cert = K.sized_certificate(_pool_sig("smooth_max_pool", (2, 6), kernel=(3,), stride=(1,),
                                         padding=(1,), beta=2.0))  # fmt: skip
    assert not isinstance(cert, str)
    assert dict(cert.plan) == {"n0": ("ge", 1), "n1": ("ge", 1)}
    assert [c.name for c in cert.checks] == ["jvp = derivative", "vjp = adjoint"]


def _far_border_mask(B: Any, x: Any, g: Any) -> Any:
    """The padding mask of ``g`` as if the input were one cell longer on every spatial axis:
    the padded cell just past the end counts as an input cell."""
    from torchlean_ir.ops._windows import valid_mask

    longer = tuple(n + 1 for n in g.size)
    return valid_mask(longer, g.K, g.S, g.P, g.O, B.static_arrays(*g.size, *g.O))


def test_a_max_pool_vjp_whose_mask_is_wrong_at_the_far_border_is_not_certified() -> None:
    from torchlean_ir.ops import pool

    def wrong(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
        g = pool._geometry(args[0].shape, attrs)
        onehot = B.first_max_onehot(g.windows(B, args[0]), axis=-1,
                                    valid=_far_border_mask(B, args[0], g))  # fmt: skip
        return (g.unwindows(B, onehot * B.expand_dims(ct, -1)),)

    attrs = {"kernel": (3, 3), "stride": 1, "padding": 1}
    with _vjp("max_pool2d_pad", wrong):
        why = K.sized_certificate(_pool_sig("max_pool2d_pad", (2, 5, 5), **attrs))
        assert isinstance(why, str) and ("did not pass" in why or "not proved" in why), why
        b = tl.GraphBuilder("f64")
        x = b.param("x", (2, 7, 6))
        report = verify.verify_graph(b.build(b.sum(b.apply("max_pool2d_pad", x, **attrs))),
                                     method="tensor", end_to_end="never")  # fmt: skip
        assert report.verdict == "mismatch"


def test_a_smooth_max_pool_vjp_whose_mask_is_wrong_at_the_far_border_is_not_certified() -> None:
    from torchlean_ir.ops import pool

    def wrong(B: Any, args: tuple, out: Any, ct: Any, **attrs: Any) -> tuple:
        g = pool._geometry(args[0].shape, attrs)
        w = B.softmax(g.windows(B, args[0]) * attrs["beta"], axis=-1,
                      valid=_far_border_mask(B, args[0], g))  # fmt: skip
        return (g.unwindows(B, w * B.expand_dims(ct, -1)),)

    attrs = {"kernel": (3,), "stride": (1,), "padding": (1,), "beta": 2.0}
    with _vjp("smooth_max_pool", wrong):
        why = K.sized_certificate(_pool_sig("smooth_max_pool", (2, 6), **attrs))
        assert isinstance(why, str) and ("did not pass" in why or "not proved" in why), why


# -- the decision with symbolic bounds ------------------------------------------------------------


def test_a_bracket_with_a_symbolic_bound_narrows_a_free_index() -> None:
    from verify._tsplit import _narrowed

    n = T.size_symbol("_Nt8")
    q = T.fresh("_qt", 0, Dim(n), bound=False)
    # q >= n - 1 (the far border of an axis of length n): q is n - 1
    assert _narrowed(q, [n - 1], []) == n - 1
    # q <= n - 2: a fresh index below n - 1, the bound kept as a fact
    offset, lo, hi = _narrowed(q, [], [n - 1])
    assert (offset, lo) == (0, 0) and se.expand(hi - (n - 1)) == 0
    # q >= 1 and q >= n - 1, which no size orders: still n - 1, one below q's bound n
    assert _narrowed(q, [se.Integer(1), n - 1], []) == n - 1
    # nothing narrower than q's own range
    assert _narrowed(q, [se.Integer(0)], [n]) is None


def test_a_sum_drops_a_symbolic_bound_that_another_is_tighter_than_for_every_size() -> None:
    from verify._tcanonical import canonical

    n = T.size_symbol("_Nt9")
    m = 2 * Dim(n)
    one = T.ssum(lambda k: T.leaf_read("v", (k,), (m,)) * T.ge(2 * n - k), 0, m)
    other = T.ssum(lambda k: T.leaf_read("v", (k,), (m,)), 0, m)
    assert canonical(one) == canonical(other)  # k <= 2n follows from k <= 2n - 1


def test_a_3d_conv_with_one_strided_axis_is_proved_for_every_spatial_size() -> None:
    K._SIZED.clear()
    b = tl.GraphBuilder("f64")
    W, bias, x = b.param("W", (2, 1, 2, 2, 2)), b.param("b", (2,)), b.param("x", (1, 3, 3, 3))
    y = b.apply("conv", W, bias, x, stride=(1, 2, 1), padding=(0, 1, 0))
    cert = K.sized_certificate(Signature.of(b.build(b.sum(y)), 0))
    assert not isinstance(cert, str)
    plan = dict(cert.plan)  # W (n0, 1, n1, n2, n3), b (n0,), x (1, n4, n5, n6)
    assert plan["n5"][:3] == ("mod", 2, 1)  # the strided spatial size: odd, every one
    assert plan["n4"][0] == plan["n6"][0] == "ge" and plan["n0"] == ("ge", 1)


def test_a_flatten_is_proved_for_every_outer_size_with_the_inner_ones_fixed() -> None:
    # (c, 5, 5) -> (25 c,): with c and 5 both symbolic the flat index would be c-strided, not
    # linear; the sizes met together are made concrete innermost first, so c stays symbolic
    K._SIZED.clear()

    def sig(c: int) -> Signature:
        b = tl.GraphBuilder("f64")
        x = b.param("x", (c, 5, 5))
        return Signature.of(b.build(b.sum(b.apply("flatten", x))), 0)

    cert = K.sized_certificate(sig(16))
    assert not isinstance(cert, str)
    assert cert.pattern == (("n0", "n1", "n2"),)
    assert dict(cert.plan) == {"n0": ("ge", 1), "n1": ("eq", 5), "n2": ("eq", 5)}
    proofs = len(K._SIZED)
    checks = K.reuse(sig(120))
    assert checks is not None and len(K._SIZED) == proofs  # the same certificate
    assert all("proved with symbolic sizes" in c.how and "n0=120" in c.how for c in checks)


def test_a_flatten_vjp_that_swaps_the_inner_axes_is_not_certified() -> None:
    def wrong(B: Any, args: tuple, out: Any, ct: Any) -> tuple:
        return (B.swapaxes(B.reshape(ct, args[0].shape), 1, 2),)  # (c, 5, 5): shapes agree

    b = tl.GraphBuilder("f64")
    x = b.param("x", (16, 5, 5))
    sig = Signature.of(b.build(b.sum(b.apply("flatten", x))), 0)
    with _vjp("flatten", wrong):
        why = K.sized_certificate(sig)
        assert isinstance(why, str) and ("did not pass" in why or "not proved" in why), why


# -- case splits with symbolic bounds hold at every size ------------------------------------------

_bounds = st.lists(st.tuples(st.integers(-1, 2), st.integers(-4, 4)), max_size=3)


@settings(max_examples=300, deadline=None)
@given(lows=_bounds, highs=_bounds)
def test_a_narrowed_index_keeps_every_value_the_region_allows_at_every_size(
    lows: list, highs: list
) -> None:
    """``_narrowed`` rewrites a free index ``q < n`` inside a case whose brackets say
    ``q >= a n + b`` (each of ``lows``) and ``q < a n + b`` (each of ``highs``): at every
    size, each value the case allows must be one the rewrite can take (a value left out is a
    case the proof never looks at: a false VERIFIED)."""
    from verify._tsplit import _narrowed

    n = T.size_symbol("_Nh_n")
    q = T.fresh("_qh", 0, Dim(n), bound=False)
    lo = [se.expand(a * n + b) for a, b in lows]
    hi = [se.expand(a * n + b) for a, b in highs]
    got = _narrowed(q, lo, hi)
    for nv in range(1, 9):
        at = {n: se.Integer(nv)}

        def v(e: Any, at: dict = at) -> int:
            return int(se.expand(se.sympify(e).xreplace(at)))

        allowed = [x for x in range(nv)
                   if all(x >= v(b) for b in lo) and all(x < v(b) for b in hi)]  # fmt: skip
        if got is None:
            continue  # the range kept as it is: every value still taken
        if isinstance(got, tuple):
            offset, t_lo, t_hi = got
            top = None if t_hi is None else v(t_hi)
            taken = {v(offset) + t for t in range(t_lo, nv + 10 if top is None else top)}
        else:
            taken = {v(got)}
        assert set(allowed) <= taken, (nv, allowed, got)


@settings(max_examples=200, deadline=None)
@given(bounds=st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 3)), min_size=1, max_size=4),
       upper=st.booleans())  # fmt: skip
def test_a_dropped_sum_bound_is_implied_by_a_kept_one_at_every_size(
    bounds: list, upper: bool
) -> None:
    n = T.size_symbol("_Nh_m")
    exprs = [se.expand(a * n + b) for a, b in bounds]
    kept = T._tightest(exprs, min if upper else max)
    for nv in range(1, 9):
        at = {n: se.Integer(nv)}
        vals = [int(se.expand(e.xreplace(at))) for e in exprs]
        kept_vals = [int(se.expand(e.xreplace(at))) for e in kept]
        # the kept bounds bound the index exactly as all of them do
        assert (min if upper else max)(kept_vals) == (min if upper else max)(vals)
