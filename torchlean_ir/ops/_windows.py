"""Sliding windows over the spatial axes of a channels-first array ``(C, spatial...)``.

Convolution and pooling rules are written with two backend-generic moves:

* :func:`window_view` - for one kernel offset ``k``, the strided slice
  ``xp[:, k_1 : k_1 + s_1 (O_1 - 1) + 1 : s_1, ...]`` of the padded input: the input cell that
  offset ``k`` of every window reads, an array ``(C, O...)``;
* :func:`place` - its transpose: put an ``(C, O...)`` array back at those cells of a zero array of
  the padded shape (zero-insertion by stacking, then ``pad``).

Summing over the offsets (row-major, so stacking them gives each window in row-major order)
builds conv, its adjoints and every pooling rule from static slices, ``stack``, ``reshape``,
``pad`` and ``einsum``: plain enough for the symbolic backend, where each output element is a
flat sum over its window.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._errors import ShapeError

Ints = tuple[int, ...]


def out_size(n: int, k: int, s: int, p: int) -> int:
    """Windows along one axis: ``floor((n + 2p - k) / s) + 1``."""
    return (n + 2 * p - k) // s + 1


def offsets(kernel: Ints) -> Iterator[Ints]:
    """Kernel offsets in row-major order."""
    return itertools.product(*(range(k) for k in kernel))


def window_view(xp: Any, off: Ints, stride: Ints, out: Ints) -> Any:
    """The cells ``off`` of every window: ``xp[:, off_i :: s_i][:, :O_i]`` as ``(C, O...)``."""
    idx = tuple(slice(k, k + s * (o - 1) + 1, s) for k, s, o in zip(off, stride, out, strict=True))
    return xp[(slice(None), *idx)]


def stack(B: Any, xs: Sequence[Any], axis: int) -> Any:
    """``B.stack`` spelled as a concatenation of expanded arrays: the lowered jaxpr then uses
    only ``broadcast_in_dim`` / ``concatenate`` (JAX 0.10 traces ``jnp.stack`` to a ``stack``
    primitive, which the verifier's jaxpr interpreter does not read yet)."""
    return B.concatenate([B.expand_dims(x, axis) for x in xs], axis=axis)


def _dilate(B: Any, a: Any, axis: int, step: int) -> Any:
    """Insert ``step - 1`` zeros between consecutive entries along ``axis``."""
    n = a.shape[axis]
    if step == 1 or n <= 1:
        return a
    z = B.zeros_like(a)
    stacked = stack(B, [a] + [z] * (step - 1), axis + 1)
    long = B.reshape(stacked, a.shape[:axis] + (n * step,) + a.shape[axis + 1 :])
    keep = [slice(None)] * a.ndim
    keep[axis] = slice(0, (n - 1) * step + 1)
    return long[tuple(keep)]


def place(B: Any, a: Any, off: Ints, stride: Ints, full: Ints) -> Any:
    """The transpose of :func:`window_view`: ``a`` ``(C, O...)`` written at the cells ``off`` of
    every window of a zero array ``(C, full...)``."""
    for i, (k, s, f) in enumerate(zip(off, stride, full, strict=True)):
        ax = i + 1
        a = _dilate(B, a, ax, s)
        widths = [(0, 0)] * a.ndim
        widths[ax] = (k, f - k - a.shape[ax])
        a = B.pad(a, widths)
    return a


def tiles(kernel: Ints, stride: Ints) -> bool:
    """Windows that tile the input (stride = kernel): no cell is in two windows."""
    return tuple(kernel) == tuple(stride)


def windows(B: Any, xp: Any, kernel: Ints, stride: Ints, out: Ints) -> Any:
    """Every window of the padded input: ``(C, O..., prod(kernel))``, row-major in the window.

    Windows that tile the input (stride = kernel, the usual 2x2 / stride 2 pool) are a reshape
    and a transpose of the input cropped to ``O * kernel`` cells per axis: one gather-free
    relayout instead of a slice per kernel offset (the pooling VJP about 2x faster on CPU). The
    values and their order are the same either way."""
    if tiles(kernel, stride):
        d = len(kernel)
        pairs = list(zip(out, kernel, strict=True))
        crop = xp[(slice(None), *(slice(0, o * k) for o, k in pairs))]
        split = B.reshape(crop, (xp.shape[0], *(n for pair in pairs for n in pair)))
        # (C, O1, K1, O2, K2, ...) -> (C, O1, O2, ..., K1, K2, ...)
        axes = (0, *(1 + 2 * i for i in range(d)), *(2 + 2 * i for i in range(d)))
        return B.reshape(B.transpose(split, axes), (xp.shape[0], *out, math.prod(kernel)))
    return stack(B, [window_view(xp, off, stride, out) for off in offsets(kernel)], -1)


def unwindows(B: Any, w: Any, kernel: Ints, stride: Ints, full: Ints) -> Any:
    """The transpose of :func:`windows`: sum each window slot back onto the padded input (for
    tiling windows, the inverse relayout, then zeros for the cells no window covers)."""
    if tiles(kernel, stride):
        d = len(kernel)
        out = tuple(w.shape[1 : 1 + d])
        split = B.reshape(w, (w.shape[0], *out, *kernel))
        # (C, O1, O2, ..., K1, K2, ...) -> (C, O1, K1, O2, K2, ...)
        axes = (0, *(a for i in range(d) for a in (1 + i, 1 + d + i)))
        covered = tuple(o * k for o, k in zip(out, kernel, strict=True))
        cells = B.reshape(B.transpose(split, axes), (w.shape[0], *covered))
        rest = [(0, 0)] + [(0, f - c) for f, c in zip(full, covered, strict=True)]
        return B.pad(cells, rest) if any(r for _, r in rest) else cells
    acc = None
    for j, off in enumerate(offsets(kernel)):
        term = place(B, w[..., j], off, stride, full)
        acc = term if acc is None else acc + term
    return acc


def pad_spatial(B: Any, x: Any, padding: Ints, value: float = 0.0) -> Any:
    """Pad the spatial axes (not the channel axis) by ``padding`` on both sides."""
    if not any(padding):
        return x
    return B.pad(x, [(0, 0)] + [(p, p) for p in padding], value)


def crop_spatial(x: Any, padding: Ints, size: Ints) -> Any:
    """The inverse of :func:`pad_spatial` (drops ``padding`` cells on each side)."""
    if not any(padding):
        return x
    return x[(slice(None), *(slice(p, p + n) for p, n in zip(padding, size, strict=True)))]


def valid_mask(size: Ints, kernel: Ints, stride: Ints, padding: Ints, out: Ints,
               xp: Any = np) -> Any:  # fmt: skip
    """Static ``(1, O..., prod(kernel))`` mask: True where a window cell lies in the input (not in
    the padding). ``xp`` is the array module that builds it from the sizes (the backend's
    :meth:`~torchlean_ir.backends.NumpyBackend.static_arrays`: NumPy, or the verifier's
    tensor level for symbolic sizes); only ``arange``, ``logical_and``, comparisons with
    scalars, arithmetic with integers and ``reshape`` are used."""
    d = len(size)
    mask: Any = None
    for i, (n, k, s, p, o) in enumerate(zip(size, kernel, stride, padding, out, strict=True)):
        pos = xp.arange(o).reshape(o, 1) * s + xp.arange(k).reshape(1, k) - p  # input coords
        shape = [1] * (2 * d)
        shape[i], shape[d + i] = o, k
        m = xp.logical_and(pos >= 0, pos < n).reshape(shape)  # (O_i, K_i) on axes i, d + i
        mask = m if mask is None else xp.logical_and(mask, m)
    return mask.reshape((1, *out, math.prod(kernel)))


def spatial_letters(d: int) -> str:
    """``d`` einsum letters for the spatial axes (disjoint from the channel letters)."""
    letters = "pqrstuvwxyz"
    if d > len(letters):
        raise ShapeError(f"at most {len(letters)} spatial dims are supported, got {d}")
    return letters[:d]


def per_dim(value: int | Sequence[int], d: int) -> Ints:
    """A scalar attribute repeated over ``d`` dims, or a tuple kept as it is."""
    if isinstance(value, int):
        return (value,) * d
    return tuple(value)
