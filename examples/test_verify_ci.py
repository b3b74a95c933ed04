"""Verification in CI: a test file to copy into your own suite (docs/verification.md).

With torchlean-ir installed, its pytest plugin is active by itself (entry point ``pytest11``)::

    python3 -m pytest examples/test_verify_ci.py

Where it is not installed (a bare checkout on ``PYTHONPATH``), name the plugin:
``python3 -m pytest -p verify.pytest_plugin examples/test_verify_ci.py``.

Options: ``--verify-jobs N`` (processes for the proofs), ``--verify-dtype f64|f32`` (the
compilation the fixtures check).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import torchlean_ir as tl
import verify.testing as vt


def my_model() -> tl.GraphData:
    """Stands for your model: a one-hidden-layer classifier with an index label."""
    b = tl.GraphBuilder("f32")
    x = b.input("x", (6,))
    label = b.index("label")
    h = b.linear(b.param("W1", (8, 6)), b.param("b1", (8,)), x).tanh()
    logits = b.linear(b.param("W2", (3, 8)), b.param("b2", (3,)), h)
    return b.build(b.scale(b.gather_scalar_nat(b.log_softmax(logits), label), c=-1.0))


# -- plain functions: no plugin needed ---------------------------------------------------------


def test_my_model_backprop_is_proved() -> None:
    # A proof of all three links; raises VerificationError (the report and a counterexample)
    # unless the verdict is "verified".
    report = vt.assert_verifies(my_model())
    assert report.verdict == "verified"


def test_my_model_compiles_to_the_reference() -> None:
    # Numeric, not a proof: compiled forward / JVP / VJP against the reference interpreters on
    # random inputs (random labels, some out of range).
    vt.assert_compiled_matches_reference(my_model(), samples=3)


# -- the pytest plugin: a marker and fixtures ---------------------------------------------------


@pytest.mark.torchlean_graphs("examples/graphs/*.json")  # relative to the rootdir
def test_shipped_graph_is_proved(
    torchlean_graph: tl.GraphData, assert_verifies: Callable[..., object]
) -> None:
    assert_verifies(torchlean_graph)  # one test per file, e.g. [mlp_regression.json]


def test_custom_ops_are_proved(assert_op_verifies: Callable[..., object]) -> None:
    # examples/custom_op_plugin.py registers log_cosh and leaky_relu when imported (pytest puts
    # this file's folder on sys.path); in your suite, import your own plugin module.
    import custom_op_plugin  # noqa: F401

    assert_op_verifies("log_cosh", [(3,)])
    assert_op_verifies("leaky_relu", [(4,)], {"slope": 0.125})
