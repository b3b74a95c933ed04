"""The shipped models at the sizes people train (``examples/models``): each verified by the
default verifier, every check exact (``benchmarks/verify_models.py`` times them)."""

from __future__ import annotations

import os

import pytest

import torchlean_ir as tl
import verify

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _graph(name: str) -> tl.GraphData:
    return tl.load(os.path.join(ROOT, "examples", "models", f"{name}.json"))


@pytest.mark.parametrize(
    "name",
    [
        "mnist_mlp",
        "gpt2_block",
        pytest.param("lenet5", marks=pytest.mark.slow),
        pytest.param("resnet_block", marks=pytest.mark.slow),
    ],
)
def test_shipped_model_verifies_exactly(name: str) -> None:
    report = verify.verify_graph(_graph(name), name=name)
    assert report.verdict == "verified", str(report)
    assert report.exit_code == 0
    for c in report.all_checks:
        assert (c.result, c.method) == ("pass", "exact"), (c.name, c.how)
    # the large nodes are decided at tensor level, not by expanding elements
    big = [c for c in report.all_checks if c.link in ("rule", "compiled")]
    assert any(c.level == "tensor" for c in big)
