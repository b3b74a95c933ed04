"""PyTorch's backward proved: a ``torch.autograd.Function``'s hand-written ``backward`` and a
small model's joint forward/backward graph (AOTAutograd, core ATen), through
:func:`verify.verify_autograd` and :func:`torchlean_ir.interop.joint_from_torch`.

The shipped example (``examples/functions/bias_gelu_torch.py``) verifies exactly, its buggy
twin is refuted with the element named, and what does not import (an unsupported ATen op in
the backward, a read of uninitialised memory) is refused with the op named, never VERIFIED.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import verify  # noqa: E402
from torchlean_ir.interop import InteropError, joint_from_torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _example() -> ModuleType:
    name = "bias_gelu_torch_example"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, ROOT / "examples" / "functions" / "bias_gelu_torch.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _exact(report: Any) -> None:
    assert report.verdict == "verified", str(report)
    checks = report.all_checks
    assert checks and all(c.method == "exact" and c.result == "pass" for c in checks), str(report)


def test_bias_gelu_function_verifies() -> None:
    ex = _example()
    report = verify.verify_autograd(ex.BiasGelu.apply, *ex.example_inputs())
    _exact(report)
    assert report.graph == "BiasGelu.apply"
    assert any("output 1 = grad x, output 2 = grad b" in n for n in report.notes)
    assert any("grad_out" in n for n in report.notes)  # the VJP for every cotangent


def test_bias_gelu_twin_is_refuted_with_the_element() -> None:
    ex = _example()
    report = verify.verify_autograd(ex.BiasGeluWrong.apply, *ex.example_inputs())
    assert report.verdict == "mismatch", str(report)
    failed = [c for c in report.all_checks if c.result == "fail"]
    assert failed and failed[0].counterexample is not None
    text = str(report)
    assert "output 1 = grad x[" in text  # the element of the gradient of x
    assert "x[" in text and "b[" in text  # and the input values


def test_small_model_joint_graph_verifies() -> None:
    ex = _example()
    model, x, y = ex.model_and_inputs()
    report = verify.verify_autograd(model, x, y)
    _exact(report)
    notes = " ".join(report.notes)
    for p in ("fc1.weight", "fc2.weight", "fc2.bias", "grad bias"):
        assert p in notes


def test_joint_graph_maps_the_signature() -> None:
    """The loss first, then one gradient output per parameter, each mapped to its leaf."""
    ex = _example()
    model, x, y = ex.model_and_inputs()
    joint = joint_from_torch(model, x, y)
    assert joint.loss == 0 and joint.cotangents == ()
    by_source = {joint.source_names[leaf]: leaf for leaf in joint.grads.values()}
    assert set(by_source) == {"bias", "fc1.weight", "fc2.weight", "fc2.bias"}
    shapes = {e.name: e.type.shape for e in joint.graph.leaves}
    types = joint.graph.output_types
    assert types[0].shape == ()
    for pos, leaf in joint.grads.items():
        assert types[pos].shape == shapes[leaf]
    assert "x" in joint.values and "y" in joint.values  # inputs without grad: leaves, no grads


class _Sign(torch.autograd.Function):
    """|x| with a backward that calls aten.sign, which nothing maps."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.abs()

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * torch.sign(x)


def test_unsupported_op_in_the_backward_is_refused() -> None:
    x = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(InteropError, match=r"aten\.sign \(node sign\): ATen op aten\.sign is not "
                       "supported") as e:  # fmt: skip
        verify.verify_autograd(_Sign.apply, x)
    assert "\n" not in str(e.value)


class _Relu(torch.autograd.Function):
    """ReLU with a hand-written backward ``g * (x > 0)`` (aten.gt, then a float aten.mul)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * (x > 0)


class _ReluWrongSide(_Relu):
    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return g * (x < 0)


class _ReluUnmasked(_Relu):
    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        return g


def test_relu_model_joint_graph_verifies() -> None:
    """PyTorch decomposes threshold_backward into aten.le and aten.where: ``where(r <= 0, 0,
    g)`` with r = relu(h) (saved, detached: compared as itself) imports as ``g * step(r)`` and
    is proved, for every weight, bias and cotangent."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1))
    joint = joint_from_torch(model, torch.randn(2, 3))
    assert "step" in [n.op for n in joint.graph.nodes]
    report = verify.verify_autograd(model, torch.randn(2, 3))
    _exact(report)
    notes = " ".join(report.notes)
    for p in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert p in notes


def test_relu_function_with_a_mask_verifies() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    _exact(verify.verify_autograd(_Relu.apply, x))


@pytest.mark.parametrize("wrong", [_ReluWrongSide, _ReluUnmasked], ids=["x<0", "unmasked"])
def test_wrong_relu_backward_is_refuted_with_the_element(wrong: Any) -> None:
    x = torch.randn(2, 3, requires_grad=True)
    report = verify.verify_autograd(wrong.apply, x)
    assert report.verdict == "mismatch", str(report)
    (failed,) = [c for c in report.all_checks if c.result == "fail"]
    assert failed.counterexample is not None
    text = str(report)
    assert "output 1 = grad x[" in text and "x[" in text and "grad_out[" in text


def test_where_between_runtime_tensors_verifies() -> None:
    """``where(x >= y, x, 2 y)``: two runtime sides, ties to x (ge: 1 - step(y - x))."""
    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    fn = lambda x, y: torch.where(x >= y, x, y * 2).sum()  # noqa: E731
    _exact(verify.verify_autograd(fn, x, y))


def test_comparison_values_at_ties_match_torch() -> None:
    """The imported graph gives PyTorch's values at the ties (x == c) of every comparison."""
    import numpy as np

    import compiler

    x = torch.tensor([-1.0, 0.0, 0.5, 2.0], requires_grad=True)
    for op in (torch.gt, torch.ge, torch.lt, torch.le):

        def fn(x: Any, op: Any = op) -> Any:
            return (torch.where(op(x, 0.5), x * 3, x * x) + x * op(x, 0.0)).sum()

        joint = joint_from_torch(fn, x)
        cg = compiler.compile(joint.graph)
        outs = cg.forward({n: joint.values[n] for n in [e.name for e in joint.graph.leaves]})
        xt = x.detach().clone().requires_grad_(True)
        loss = fn(xt)
        loss.backward()
        assert np.allclose(float(outs[0]), float(loss.detach())), op
        assert np.allclose(np.asarray(outs[1]), xt.grad.numpy()), op


def test_bare_comparison_is_refused_in_one_line() -> None:
    """A comparison read other than as where's condition or a float factor stays refused,
    with the op named."""
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(InteropError, match=r"aten\.gt \(node gt\): .*comparisons of runtime "
                       "floats") as e:  # fmt: skip
        joint_from_torch(lambda x: x.sum() + (x > 0).any().float(), x)
    assert "\n" not in str(e.value)

    class Bare(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x > 0  # the booleans as the model's output

    from torchlean_ir.interop import from_torch

    program = torch.export.export(Bare(), (torch.randn(2, 3),))
    with pytest.raises(InteropError, match=r"aten\.gt .*comparisons of runtime floats") as e:
        from_torch(program)
    assert "\n" not in str(e.value)


def test_where_of_a_non_finite_constant_is_refused() -> None:
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(InteropError, match=r"aten\.where .*non-finite constant"):
        joint_from_torch(lambda x: torch.where(x > 0, x, float("-inf")).exp().sum(), x)


class _DetachedMask(torch.autograd.Function):
    """``where(2 x.detach() > 0, x, 0)`` with a backward that masks the other side."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        return torch.where(x.detach() * 2 > 0, x, 0)

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (x,) = ctx.saved_tensors
        return torch.where(x * 2 < 0, g, 0)


def test_comparison_of_a_computed_detached_value() -> None:
    """``where(2 x.detach() > 0, x, 0)``: the step reads a detached value through another op.
    Its derivative there is 0, but the mask changes the value: the stopped value keeps it
    (never set to 0, which made both sides 0), so PyTorch's gradient is proved and a backward
    masking the wrong side is refuted with the element named."""
    x = torch.randn(2, 3, requires_grad=True)
    report = verify.verify_autograd(lambda x: torch.where(x.detach() * 2 > 0, x, 0).sum(), x)
    assert report.verdict == "verified", str(report)
    bad = verify.verify_autograd(lambda x: _DetachedMask.apply(x).sum(), x)
    assert bad.verdict == "mismatch", str(bad)
    (failed,) = [c for c in bad.all_checks if c.result == "fail"]
    assert failed.counterexample is not None and "grad x[" in failed.counterexample.element


class _Mse(torch.autograd.Function):
    """Mean squared error with the backward PyTorch's mse_loss has: 2 / N, or 1 / N (wrong)."""

    factor = 2.0

    @staticmethod
    def forward(ctx: Any, x: Any, y: Any) -> Any:
        ctx.save_for_backward(x, y)
        return ((x - y) ** 2).mean()

    @classmethod
    def backward(cls, ctx: Any, g: Any) -> Any:
        x, y = ctx.saved_tensors
        return g * (x - y) * (cls.factor / x.numel()), None


class _MseHalf(_Mse):
    factor = 1.0


def test_mse_loss_with_three_samples_verifies_with_the_proviso() -> None:
    """The joint graph holds 2/3 rounded to float32; the reference's 2/3 is exact: proved with
    the constants rounded alike, and the check says so."""
    torch.manual_seed(0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def forward(self, x: Any, y: Any) -> Any:
            return torch.nn.functional.mse_loss(self.lin(x).squeeze(-1), y)

    report = verify.verify_autograd(Model(), torch.randn(3, 4), torch.randn(3))
    _exact(report)
    (check,) = report.all_checks
    assert verify._functions.F32_PROVISO in check.how
    assert any(verify._functions.F32_PROVISO in n for n in report.notes)
    x = torch.randn(3, requires_grad=True)
    _exact(verify.verify_autograd(_Mse.apply, x, torch.randn(3)))
    bad = verify.verify_autograd(_MseHalf.apply, x, torch.randn(3))
    assert bad.verdict == "mismatch", str(bad)
    assert "output 1 = grad x[" in str(bad)


def test_closure_over_a_module_is_refused() -> None:
    model = torch.nn.Linear(3, 1)
    with pytest.raises(InteropError, match="neither an input nor a parameter of the module"):
        joint_from_torch(lambda x: model(x).sum(), torch.randn(2, 3, requires_grad=True))


def test_uninitialised_memory_read_is_refused() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(InteropError, match=r"aten\.add reads an uninitialised tensor"):
        joint_from_torch(lambda x: torch.empty_like(x) + x, x)


def test_nothing_differentiated_is_refused() -> None:
    with pytest.raises(InteropError, match="no parameter or input requires grad"):
        joint_from_torch(lambda x: (x * 2).sum(), torch.randn(2, 3))


class _TanhSaved(torch.autograd.Function):
    """tanh whose backward reads the saved output: 1 - y^2."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class _TanhWrongSign(_TanhSaved):
    @staticmethod
    def backward(ctx: Any, g: Any) -> Any:
        (y,) = ctx.saved_tensors
        return g * (1 + y * y)


def test_saved_output_backward_and_its_negation() -> None:
    x = torch.randn(2, 3, requires_grad=True)
    _exact(verify.verify_autograd(_TanhSaved.apply, x, argnames=["z"]))
    bad = verify.verify_autograd(_TanhWrongSign.apply, x)
    assert bad.verdict == "mismatch"


def test_layer_norm_backward_verifies() -> None:
    """PyTorch's decomposition of native_layer_norm_backward (reading the saved mean and rstd)
    proved against the derivative of layer norm, for the input, weight and bias."""
    torch.manual_seed(0)
    report = verify.verify_autograd(torch.nn.LayerNorm(4), torch.randn(2, 4, requires_grad=True))
    _exact(report)
    assert "grad input" in " ".join(report.notes)


def test_layer_norm_statistics_import() -> None:
    """native_layer_norm's saved mean and rstd (read by its backward) import, and the joint
    graph's compiled loss and gradients agree with PyTorch's autograd."""
    import numpy as np

    import compiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    x = torch.randn(2, 3)
    joint = joint_from_torch(model, x)  # its output contracted with grad_out
    grad_out = joint.values["grad_out"]
    cg = compiler.compile(joint.graph)
    leaves = [e.name for e in joint.graph.leaves]
    outs = cg.forward({n: joint.values[n] for n in leaves})
    loss = (model(x) * torch.from_numpy(grad_out)).sum()
    loss.backward()
    assert np.allclose(float(outs[0]), float(loss.detach()), rtol=1e-5)
    params = dict(model.named_parameters())
    for pos, leaf in joint.grads.items():
        src = joint.source_names[leaf]
        want = params[src].grad.numpy()
        assert np.allclose(np.asarray(outs[pos]), want, rtol=1e-4, atol=1e-6), src


def test_detach_that_changes_the_derivative_is_reported() -> None:
    """``x * x.detach()``: PyTorch's gradient is x, the loss's derivative 2x. AOTAutograd
    records the detach as aten.alias; it is read as a stopped value whose neutrality fails,
    named in the report: never VERIFIED."""
    x = torch.randn(2, 3, requires_grad=True)
    report = verify.verify_autograd(lambda x: (x * x.detach()).sum(), x)
    assert report.verdict == "mismatch"
    failed = [c.name for c in report.all_checks if c.result == "fail"]
    assert failed == ["detach 0 of the joint graph does not change the derivative"]


def test_derivative_neutral_detach_verifies() -> None:
    """A detached shift that cancels (exp(x - c) exp(c)) is proved not to change the
    derivative, and the gradient then verifies."""
    x = torch.randn(2, 3, requires_grad=True)

    def shifted(x: Any) -> Any:
        c = x.sum().detach()
        return (torch.exp(x - c) * torch.exp(c)).sum()

    report = verify.verify_autograd(shifted, x)
    _exact(report)
    assert any(c.name.startswith("detach 0 of the joint graph") for c in report.all_checks)
