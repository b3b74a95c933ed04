"""Rule certificates for every size (``verify/_certify.py``): which ops get one, that they are
refused for anything but elementwise rules proved without the probe's ranges, that a changed
rule is proved again (and a wrong one is not certified), and that verify_graph reuses them."""

from __future__ import annotations

from typing import Any

import pytest

import torchlean_ir as tl
import verify
from tests.op_cases import CASES
from verify import _certify as K
from verify._sig import Signature

from .mutants import MUTANTS, applied

#: The registry ops with a certificate at the op table's attributes (docs/verification.md lists
#: them): a change of this set, either way, fails here.
CERTIFIED = {"abs", "add", "clamp", "erf", "exp", "inv", "log", "max", "min", "mul", "pow", "relu",
             "rsqrt", "safe_log", "scale", "sigmoid", "silu", "sqrt", "step", "sub",
             "tanh"}  # fmt: skip


def _signatures() -> dict[str, list[Signature]]:
    out: dict[str, list[Signature]] = {}
    for case in CASES:
        g = case.graph()
        for j in range(len(g.nodes)):
            sig = Signature.of(g, j)
            out.setdefault(sig.op, []).append(sig)
    return out


def test_the_certified_ops_are_the_elementwise_ones_listed() -> None:
    got = {op for op, sigs in _signatures().items()
           if any(not isinstance(K.certificate(s), str) for s in sigs)}  # fmt: skip
    assert got == CERTIFIED


@pytest.mark.parametrize(
    ("op", "why"),
    [("softmax", "reads .ndim"), ("reduce_sum", "calls B.sum"), ("slice", "not subscriptable"),
     ("matmul", "not an elementwise signature"), ("softplus", "used the probe's index ranges")],
)  # fmt: skip
def test_a_certificate_is_refused_with_its_reason(op: str, why: str) -> None:
    reasons = [K.certificate(s) for s in _signatures()[op]]
    assert all(isinstance(r, str) for r in reasons)
    assert any(why in r for r in reasons), reasons


def _mul_graph(shape: tuple[int, ...]) -> tl.GraphData:
    b = tl.GraphBuilder("f64")
    x, y = b.param("x", shape), b.param("y", shape)
    return b.build(b.sum(b.apply("tanh", x * y)))


def test_verify_graph_reuses_the_certificate_at_any_shape() -> None:
    for shape in [(3,), (64, 48), (2, 3, 4, 5)]:
        report = verify.verify_graph(_mul_graph(shape), method="tensor", end_to_end="never")
        assert report.verdict == "verified"
        rules = [c for c in report.all_checks if c.link == "rule"]
        certified = [c for c in rules if "certificate" in c.how]
        assert certified and all((c.result, c.method, c.level) == ("pass", "exact", "tensor")
                                 for c in certified)  # fmt: skip
        # tanh and mul: elementwise; the sum: proved with symbolic sizes (test_sized_certify)
        every_shape = [c for c in certified if "for every shape" in c.how]
        sized = [c for c in certified if "proved with symbolic sizes" in c.how]
        assert every_shape and sized
        assert len(every_shape) + len(sized) == len(certified)


def test_a_proxy_refuses_everything_but_elementwise_use() -> None:
    from verify._tensor import leaf

    x = K._Elem(leaf("x", (3,)))
    B = K._ElemBackend()
    uses = [lambda: x.shape, lambda: len(x), lambda: x[0], lambda: bool(x > 0),
            lambda: B.sum(x), lambda: B.full((3,), 1.0)]  # fmt: skip
    for use in uses:
        with pytest.raises((K.NotElementwise, TypeError)):
            use()
    assert isinstance(B.exp(x * 2 + 1), K._Elem)


def test_a_changed_rule_is_proved_again_and_a_wrong_one_gets_no_certificate() -> None:
    sig = next(s for s in _signatures()["tanh"])
    assert not isinstance(K.certificate(sig), str)
    mutant = next(m for m in MUTANTS if m.name == "tanh vjp 0.05% scale error")
    with applied(mutant):
        assert isinstance(K.certificate(sig), str)  # a new fingerprint: proved again, fails
        report = verify.verify_graph(mutant.graph(), method="tensor", end_to_end="never")
        assert report.verdict == "mismatch"
    assert not isinstance(K.certificate(sig), str)


def test_the_fingerprint_follows_called_helpers_and_closures() -> None:
    def helper(v: Any) -> Any:
        return v + 1

    def rule(v: Any) -> Any:
        return helper(v)

    before = K._fingerprint(rule)

    def helper2(v: Any) -> Any:  # same name bound in the closure's scope, other code
        return v + 2

    def rule2(v: Any) -> Any:
        return helper2(v)

    assert K._fingerprint(rule2) != before
    scale = 2.0
    a = K._fingerprint(lambda v: v * scale)
    scale = 3.0
    assert K._fingerprint(lambda v: v * scale) != a
