"""Choosing the device a graph is compiled for."""

from __future__ import annotations

from typing import Any

import jax

from ._errors import DeviceError

_ALIASES = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu"}


def resolve_device(device: Any = "cpu") -> jax.Device:
    """A ``jax.Device`` from ``"cpu"``, ``"gpu"`` / ``"cuda"`` (optionally ``":<index>"``) or a
    ``jax.Device``; :class:`DeviceError` when JAX has no such device."""
    if isinstance(device, jax.Device):
        return device
    if not isinstance(device, str):
        raise DeviceError(f"device must be 'cpu', 'gpu' or a jax.Device, got {device!r}")
    name, _, num = device.strip().lower().partition(":")
    platform = _ALIASES.get(name)
    if platform is None or (num and not num.isdigit()):
        raise DeviceError(f"device must be 'cpu', 'gpu', 'gpu:<n>' or a jax.Device, got {device!r}")
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    if not devices:
        hint = " (install JAX's CUDA plugin: pip install -e '.[cuda]')" if platform == "gpu" else ""
        raise DeviceError(f"device {device!r} requested, but JAX has no {platform} device{hint}")
    k = int(num) if num else 0
    if k >= len(devices):
        raise DeviceError(
            f"device {device!r} requested, but JAX has {len(devices)} {platform} devices"
        )
    return devices[k]


def gpu_available() -> bool:
    """Whether JAX can see a GPU (the CUDA plugin is installed and a device is present)."""
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False
