"""A fused bias-GELU as a ``torch.autograd.Function`` with a hand-written backward, proved.

    z = x + b,   y = z / 2 * (1 + tanh(C (z + A z^3))),   C = sqrt(2 / pi), A = 0.044715

``BiasGelu.backward`` writes the derivative out by hand (as fused kernels do):

    dy/dz = (1 + t) / 2 + z / 2 * (1 - t^2) * C * (1 + 3 A z^2),   t = tanh(C (z + A z^3))

and returns ``g * dy/dz`` for ``x`` and its sum over the rows for ``b``. ``BiasGeluWrong`` is
its buggy twin: the chain rule through ``A z^3`` forgets the factor 3 (``1 + A z^2``). The
verifier reads the joint forward/backward graph that AOTAutograd traces (the user's backward
in it) and proves the first's gradients exact for every element, and refutes the twin, naming
the element and the input values.

``SmallModel`` (Linear -> BiasGelu -> Linear -> MSE loss) is proved too: its joint graph holds
PyTorch's own backward of ``Linear`` and of the loss, and the user's backward in the middle.

Run ``python examples/functions/bias_gelu_torch.py`` (needs the ``torch`` extra).

A note on constants: the check is in real arithmetic, each float constant read as the exact
number it is. The backward multiplies by ``3`` and by ``A`` as two factors; a constant folded
by hand in floating point (``3 * 0.044715`` evaluated by Python, ``0.134145``) is not exactly
three times ``A``, and the proof reports that difference (about 1e-10 in float32, 1e-19 in
float64, far below rounding) as a mismatch.
"""

from __future__ import annotations

import math
from typing import Any

import torch

C = math.sqrt(2.0 / math.pi)
A = 0.044715


def _tanh_part(z: torch.Tensor) -> torch.Tensor:
    return torch.tanh(C * (z + A * z**3))


class BiasGelu(torch.autograd.Function):
    """``gelu_tanh(x + b)`` with a hand-written backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, b)
        z = x + b
        return 0.5 * z * (1 + _tanh_part(z))

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, b = ctx.saved_tensors
        z = x + b
        t = _tanh_part(z)
        dz = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * C * (1 + 3 * (A * z * z))
        gz = g * dz
        return gz, gz.sum(0)


class BiasGeluWrong(torch.autograd.Function):
    """The buggy twin: the factor 3 of ``d(A z^3)/dz`` is missing."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, b)
        z = x + b
        return 0.5 * z * (1 + _tanh_part(z))

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, b = ctx.saved_tensors
        z = x + b
        t = _tanh_part(z)
        dz = 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * C * (1 + A * z * z)  # bug: 3 A z^2
        gz = g * dz
        return gz, gz.sum(0)


class SmallModel(torch.nn.Module):
    """Linear -> bias-GELU (the Function) -> Linear, with its MSE loss against ``y``."""

    def __init__(self, n_in: int = 2, hidden: int = 4, n_out: int = 1) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(n_in, hidden, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(hidden))
        self.fc2 = torch.nn.Linear(hidden, n_out)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = BiasGelu.apply(self.fc1(x), self.bias)
        return torch.nn.functional.mse_loss(self.fc2(h), y)


def example_inputs(rows: int = 8, cols: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` and ``b`` for the Function, both requiring grad (the gradients checked)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=gen).requires_grad_()
    b = torch.randn(cols, generator=gen).requires_grad_()
    return x, b


def model_and_inputs(batch: int = 4) -> tuple[SmallModel, torch.Tensor, torch.Tensor]:
    """The small model and a batch ``(x, y)``. The batch times the outputs is a power of two:
    PyTorch's MSE backward multiplies by the float ``2 / N``, which is exactly ``2 / N`` only
    then (otherwise the check reports the rounding of that constant)."""
    torch.manual_seed(0)
    model = SmallModel()
    return model, torch.randn(batch, 2), torch.randn(batch, 1)


def main() -> None:
    import verify

    for fn in (BiasGelu.apply, BiasGeluWrong.apply):
        print(verify.verify_autograd(fn, *example_inputs()))
        print()
    print(verify.verify_autograd(*model_and_inputs()))


if __name__ == "__main__":
    main()
