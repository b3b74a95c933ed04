"""The op declarations, one module per family. Importing this package registers every op.

Core tier: :mod:`.elementwise`, :mod:`.shape`, :mod:`.reduce`, :mod:`.linalg`, :mod:`.nn`,
:mod:`.index`.

Parity with TorchLean's ``Ops`` interface: :mod:`.layout` (3-D transposes, concat_vectors),
:mod:`.gather` (static gathers / scatter-adds, gather_vec_nat), :mod:`.activations` (safe_log,
gelu, silu), :mod:`.conv`, :mod:`.pool`, :mod:`.norm` (batchnorm_channel_first),
:mod:`.attention` (multi_head_attention), :mod:`.randomness` (rand_uniform, bernoulli_mask).
"""

from . import (
    activations,
    attention,
    conv,
    elementwise,
    gather,
    index,
    layout,
    linalg,
    nn,
    norm,
    pool,
    randomness,
    reduce,
    shape,
)

__all__ = [
    "activations",
    "attention",
    "conv",
    "elementwise",
    "gather",
    "index",
    "layout",
    "linalg",
    "nn",
    "norm",
    "pool",
    "randomness",
    "reduce",
    "shape",
]
