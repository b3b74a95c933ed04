"""Optimizer updates over parameters: SGD, and Adam / AdamW through optax with the moment
estimates kept per parameter.

The update math is optax's (``optax.adam``, ``optax.adamw``), run in one jitted call over all the
parameters of a step. Hyperparameters are arguments of the jitted function, so changing the
learning rate between steps never recompiles. Values that live on the host (the eager CPU path)
go through JAX and come back as NumPy; values with a device-resident mirror stay on the device.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

import numpy as np

from torchlean_ir import TorchleanError

from ._param import Param

Kind = Literal["adam", "adamw"]


def _check_hyper(lr: float, b1: float, b2: float, eps: float, wd: float = 0.0) -> None:
    if (lr, b1, b2, eps, wd) == _LAST_GOOD[0]:
        return  # the values of the last step, checked then
    _check_values(lr, b1, b2, eps, wd)
    _LAST_GOOD[0] = (lr, b1, b2, eps, wd)


#: the last hyperparameters that passed the check (a training loop repeats them)
_LAST_GOOD: list[tuple[Any, ...] | None] = [None]


def _check_values(lr: float, b1: float, b2: float, eps: float, wd: float) -> None:
    for name, v in (("lr", lr), ("eps", eps), ("weight_decay", wd)):
        if not _finite(v) or v < 0:
            raise TorchleanError(f"{name} must be a finite non-negative number, got {v!r}")
    for name, v in (("b1", b1), ("b2", b2)):
        if not 0 <= v < 1:
            raise TorchleanError(f"{name} must be in [0, 1), got {v!r}")


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(v)  # a Python call per number, not a NumPy ufunc dispatch
    except TypeError:
        return bool(np.isfinite(v))


def _transform(kind: Kind, lr: Any, b1: Any, b2: Any, eps: Any, wd: Any) -> Any:
    import optax

    if kind == "adam":
        return optax.adam(lr, b1=b1, b2=b2, eps=eps)
    return optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=wd)


def _init_state(kind: Kind, value: Any) -> Any:
    # The state (count, mu, nu) does not depend on the hyperparameters.
    return _transform(kind, 1e-3, 0.9, 0.999, 1e-8, 0.0).init(value)


def _update(kind: Kind, params: tuple, grads: tuple, states: tuple, hyper: tuple) -> tuple:
    import optax

    tx = _transform(kind, *hyper)
    new_p, new_s = [], []
    for p, g, s in zip(params, grads, states, strict=True):
        updates, s2 = tx.update(g, s, p)
        new_p.append(optax.apply_updates(p, updates))
        new_s.append(s2)
    return tuple(new_p), tuple(new_s)


def _init_all(kind: Kind, params: tuple) -> tuple:
    return tuple(_init_state(kind, p) for p in params)


_UPDATE_JIT: Any = None
_INIT_JIT: Any = None
#: hyperparameters on a device, by (values, dtype, device)
_HYPER: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _init_jit() -> Any:
    """The fresh states of several params in one jitted call: one executable instead of one
    per moment shape, and states placed (committed) where the params are, as the update's own
    outputs are, so the update is not compiled a second time at its second step."""
    global _INIT_JIT
    if _INIT_JIT is None:
        import jax

        _INIT_JIT = jax.jit(_init_all, static_argnums=0)
    return _INIT_JIT


def _update_jit() -> Any:
    global _UPDATE_JIT
    if _UPDATE_JIT is None:
        import jax

        # The moment estimates are the optimizer's own (nothing else holds them): donated, the
        # update writes them in place instead of allocating new ones every step.
        _UPDATE_JIT = jax.jit(partial(_update), static_argnums=0, donate_argnums=3)
    return _UPDATE_JIT


def _x64(arrays: Sequence[Any]) -> contextlib.AbstractContextManager[Any]:
    """JAX's 64-bit mode for the duration of an update on float64 values."""
    if any(getattr(a, "dtype", None) == np.float64 for a in arrays):
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


class Optimizer:
    """Optimizer state of one session or trainer: per-parameter optax states for Adam and
    AdamW (kept separately, so switching between them starts fresh moments)."""

    def __init__(self) -> None:
        self._states: dict[tuple[Kind, int], tuple[Param, Any]] = {}

    def reset(self) -> None:
        """Forget every moment estimate."""
        self._states.clear()

    def state(self, kind: Kind, param: Param) -> Any:
        """The optax state of ``param`` for ``kind`` (``None`` before its first step)."""
        entry = self._states.get((kind, id(param)))
        return None if entry is None or entry[0] is not param else entry[1]

    @staticmethod
    def sgd(pairs: Sequence[tuple[Param, Any]], lr: float, *, on_device: bool) -> None:
        """``p <- p - lr * g`` for every ``(param, grad)``."""
        _check_hyper(lr, 0.0, 0.0, 0.0)
        for p, g in pairs:
            if on_device:
                with _x64([p._device]):
                    p._set_device(p._device - lr * g)
            else:
                p._set_host(p.value - lr * np.asarray(g))

    def adam(
        self,
        kind: Kind,
        pairs: Sequence[tuple[Param, Any]],
        *,
        lr: float,
        b1: float,
        b2: float,
        eps: float,
        weight_decay: float = 0.0,
        on_device: bool,
    ) -> None:
        """One Adam (``kind="adam"``) or AdamW (``"adamw"``) step for every ``(param, grad)``."""
        _check_hyper(lr, b1, b2, eps, weight_decay)
        if not pairs:
            return
        params = tuple(p._device if on_device else p.value for p, _ in pairs)
        grads = tuple(g for _, g in pairs)
        with _x64(params):
            import jax
            import jax.numpy as jnp

            dtype = params[0].dtype
            states: list[Any] = [self.state(kind, p) for p, _ in pairs]
            fresh = [k for k, s in enumerate(states) if s is None]
            if fresh:
                made = _init_jit()(kind, tuple(jnp.asarray(params[k]) for k in fresh))
                if hasattr(params[0], "devices"):  # committed to the params' device
                    made = jax.device_put(made, next(iter(params[0].devices())))
                for k, s in zip(fresh, made, strict=True):
                    states[k] = s
            values = (lr, b1, b2, eps, weight_decay)
            if on_device and hasattr(params[0], "devices"):
                # on the device, uploaded once per set of values (not five transfers a step)
                device = next(iter(params[0].devices()))
                key = (values, np.dtype(dtype), device)
                hyper = _HYPER.get(key)
                if hyper is None:
                    if len(_HYPER) > 64:
                        _HYPER.clear()  # a schedule changes them every step: keep few
                    hyper = _HYPER[key] = jax.device_put(
                        tuple(np.asarray(h, dtype=dtype) for h in values), device
                    )
            else:
                # NumPy scalars: the jitted call takes them as they are
                hyper = tuple(np.asarray(h, dtype=dtype) for h in values)
            new_p, new_s = _update_jit()(kind, params, grads, tuple(states), hyper)
        for (p, _), v, s in zip(pairs, new_p, new_s, strict=True):
            self._states[(kind, id(p))] = (p, s)
            if on_device:
                p._set_device(v)
            else:
                p._set_host(np.asarray(v, dtype=np.float64))
