"""Op-table rows for the ops of TorchLean's ``Ops`` interface beyond the core tier (issue 6).

``tests/op_cases.py`` appends :data:`PARITY_CASES` to ``CASES`` and :data:`PARITY_KINKS` to
``KINKS``, so every table-driven test (adjoint identity, finite differences, JAX and symbolic
backends against the reference, kink conventions, ONNX and PyTorch oracles, the verifier's
soundness checks) covers these ops too. Shapes are small on purpose.
"""

from __future__ import annotations

import numpy as np

from .op_cases import KinkCase, OpCase


def small(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform in [-1, 1]: keeps attention scores and conv sums of moderate size."""
    return rng.uniform(-1.0, 1.0, size=shape)


def wide(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Uniform in [-30, 30]: reaches the tails of softplus (safe_log)."""
    return rng.uniform(-30.0, 30.0, size=shape)


_ATT = {i: small for i in range(5)}
_CAUSAL = np.tril(np.ones((3, 3), dtype=bool))
_BLOCKED_ROW = np.array([[False, False, False], [True, True, False], [True, False, True]])

PARITY_CASES: list[OpCase] = [
    # -- layout ----------------------------------------------------------------------------
    OpCase("transpose3d_first_to_last", ((2, 3, 4),)),
    OpCase("transpose3d_last_to_first", ((2, 3, 4),)),
    OpCase("transpose3d_last_two", ((2, 3, 4),)),
    OpCase("concat_vectors", ((3,), (2,))),
    # -- gathers and scatter-adds ----------------------------------------------------------
    OpCase("gather_scalar", ((5,),), {"index": 3}),
    OpCase("gather_row", ((3, 4),), {"index": 2}),
    OpCase("gather_vec_nat", ((5,),), index=((4, [4, 0, 0, 2]),)),
    OpCase("gather_vec_nat", ((3,),), index=((3, [1, 9, 3]),), label="oob"),
    OpCase("scatter_add_vec", ((4,), ()), {"index": 1}),
    OpCase("scatter_add_row", ((3, 2), (2,)), {"index": 2}),
    # -- activations -----------------------------------------------------------------------
    OpCase("safe_log", ((6,),), {"eps": 1e-6}),
    OpCase("safe_log", ((6,),), {"eps": 0.5}, samplers={0: wide}, label="wide"),
    OpCase("gelu", ((6,),)),
    OpCase("silu", ((2, 3),)),
    # -- convolution -----------------------------------------------------------------------
    OpCase(
        "conv2d",
        ((3, 2, 3, 3), (3,), (2, 5, 5)),
        {"stride": 1, "padding": 1},
        samplers={0: small, 2: small},
    ),
    OpCase(
        "conv2d",
        ((2, 1, 2, 3), (2,), (1, 5, 6)),
        {"stride": 2, "padding": 0},
        samplers={0: small, 2: small},
        label="s2",
    ),
    OpCase("conv", ((2, 3, 3), (2,), (3, 7)), {"stride": (2,), "padding": (1,)}, label="1d"),
    OpCase(
        "conv2d",
        ((4, 3, 2, 2), (4,), (6, 4, 5)),
        {"stride": 1, "padding": 1, "groups": 2},
        samplers={0: small, 2: small},
        label="groups",
    ),
    OpCase(
        "conv2d",
        ((3, 1, 3, 3), (3,), (3, 5, 5)),
        {"stride": 2, "padding": 1, "groups": 3},
        samplers={0: small, 2: small},
        label="depthwise",
    ),
    OpCase(
        "conv2d",
        ((2, 2, 2, 2), (2,), (2, 4, 5)),
        {"stride": 2, "padding": 0},
        samplers={0: small, 2: small},
        label="patches",
    ),
    OpCase(
        "conv",
        ((4, 1, 3), (4,), (2, 7)),
        {"stride": (2,), "padding": (1,), "groups": 2},
        label="1d-groups",
    ),
    OpCase(
        "conv",
        ((2, 1, 2, 2, 2), (2,), (1, 3, 3, 3)),
        {"stride": (1, 2, 1), "padding": (0, 1, 0)},
        label="3d",
    ),
    OpCase(
        "conv_transpose",
        ((2, 3, 3), (3,), (2, 4)),
        {"stride": (2,), "padding": (1,)},
        label="1d",
    ),
    OpCase(
        "conv_transpose",
        ((1, 2, 2, 2, 2), (2,), (1, 2, 2, 2)),
        {"stride": (1, 2, 1), "padding": (0, 0, 1)},
        label="3d",
    ),
    OpCase(
        "conv_transpose2d",
        ((2, 3, 3, 3), (3,), (2, 3, 3)),
        {"stride": 2, "padding": 1},
        samplers={0: small, 2: small},
    ),
    # -- pooling ---------------------------------------------------------------------------
    OpCase("max_pool", ((2, 7),), {"kernel": (3,), "stride": (2,), "padding": (1,)}, label="1d"),
    OpCase(
        "max_pool",
        ((1, 3, 4, 3),),
        {"kernel": (2, 2, 2), "stride": (1, 2, 1), "padding": (0, 1, 1)},
        label="3d",
    ),
    OpCase("max_pool2d", ((2, 4, 5),), {"kernel": (2, 2), "stride": 2}),
    OpCase("max_pool2d_pad", ((2, 4, 4),), {"kernel": (3, 3), "stride": 2, "padding": 1}),
    # Windows that tile the input (stride = kernel) take a reshape path in the rules
    # (torchlean_ir/ops/_windows.py): cropped edges, padding, non-square and 3-D tiles.
    OpCase(
        "max_pool",
        ((1, 5, 7),),
        {"kernel": (2, 3), "stride": (2, 3), "padding": (0, 0)},
        label="tiled",
    ),
    OpCase(
        "max_pool",
        ((1, 4, 4, 2),),
        {"kernel": (2, 2, 2), "stride": (2, 2, 2), "padding": (0, 0, 0)},
        label="tiled-3d",
    ),
    OpCase(
        "max_pool2d_pad", ((2, 4, 4),), {"kernel": (2, 2), "stride": 2, "padding": 1}, label="tiled"
    ),
    OpCase("avg_pool", ((2, 7),), {"kernel": (3,), "stride": (2,), "padding": (1,)}, label="1d"),
    OpCase(
        "avg_pool",
        ((1, 3, 4, 3),),
        {"kernel": (2, 2, 2), "stride": (1, 2, 1), "padding": (0, 1, 1)},
        label="3d",
    ),
    OpCase("avg_pool2d", ((2, 4, 5),), {"kernel": (2, 3), "stride": 1}),
    OpCase("avg_pool2d_pad", ((1, 5, 5),), {"kernel": (3, 3), "stride": 2, "padding": 1}),
    OpCase(
        "avg_pool2d_pad", ((1, 5, 5),), {"kernel": (2, 2), "stride": 2, "padding": 1}, label="tiled"
    ),
    OpCase(
        "smooth_max_pool",
        ((2, 6),),
        {"kernel": (3,), "stride": (1,), "padding": (1,), "beta": 2.0},
        label="1d",
    ),
    OpCase(
        "smooth_max_pool",
        ((1, 4, 4),),
        {"kernel": (2, 2), "stride": (2, 2), "padding": (1, 1), "beta": -1.5},
        label="neg-beta",
    ),
    OpCase("smooth_max_pool2d", ((2, 4, 4),), {"kernel": (2, 2), "stride": 1, "beta": 3.0}),
    OpCase("global_avg_pool2d", ((3, 2, 4),)),
    # -- normalisation and attention -------------------------------------------------------
    # eps = 2^-12: exact in float32, the type of ONNX float attributes (the oracle reads it so)
    OpCase("batchnorm_channel_first", ((2, 3, 3), (2,), (2,)), {"eps": 2.0**-12}),
    OpCase(
        "multi_head_attention",
        ((4, 4), (4, 4), (4, 4), (4, 4), (3, 4)),
        {"heads": 2},
        samplers=_ATT,
    ),
    OpCase(
        "multi_head_attention",
        ((4, 4), (4, 4), (4, 4), (4, 4), (3, 4)),
        {"heads": 2, "mask": _CAUSAL},
        samplers=_ATT,
        label="causal",
    ),
    OpCase(
        "multi_head_attention",
        ((4, 6), (4, 6), (4, 6), (6, 4), (3, 4)),
        {"heads": 3, "mask": _BLOCKED_ROW},
        samplers=_ATT,
        label="blocked-row",
    ),
    # -- interop (issue 13): ops that imported models need -------------------------------
    # eps = 2^-10: exact in float32 (ONNX stores epsilon as a float32 attribute)
    OpCase(
        "batchnorm_eval",
        ((2, 3, 3), (2,), (2,), (2,), (2,)),
        {"eps": 2.0**-10},
        samplers={3: small},
    ),
    OpCase("batchnorm_eval", ((3,), (3,), (3,), (3,), (3,)), {"eps": 2.0**-10}, label="1d"),
    # -- randomness ------------------------------------------------------------------------
    OpCase("rand_uniform", (), {"shape": (2, 3), "seed": 42}),
    OpCase("bernoulli_mask", ((),), {"shape": (3, 4), "seed": 7}),
]


def _a(rows: object) -> np.ndarray:
    return np.asarray(rows, dtype=np.float64)


PARITY_KINKS: list[KinkCase] = [
    # Both windows of [[1,3,3],[3,0,2]] hold a tie for the maximum 3; the first in row-major
    # window order is x[0,1] in each, so it takes both cotangents.
    KinkCase(
        "max_pool2d",
        (_a([[[1, 3, 3], [3, 0, 2]]]),),
        {"kernel": (2, 2), "stride": 1},
        (_a([[[1, 2, 4], [8, 16, 32]]]),),
        _a([[[2, 2]]]),
        _a([[[1, 10]]]),
        (_a([[[0, 11, 0], [0, 0, 0]]]),),
        "first max wins a tie",
    ),
    # All values negative: were padding 0 it would win every border window. Padded cells never
    # win; the middle window ties x[0,0] and x[1,1] at -1 and the first one wins.
    KinkCase(
        "max_pool2d_pad",
        (_a([[[-1, -2], [-3, -1]]]),),
        {"kernel": (2, 2), "stride": 1, "padding": 1},
        (_a([[[1, 2], [4, 8]]]),),
        _a([[[1, 1, 2], [1, 1, 8], [4, 8, 8]]]),
        _a([[[1, 2, 3], [4, 5, 6], [7, 8, 9]]]),
        (_a([[[12, 3], [7, 23]]]),),
        "padding never wins",
    ),
    # All cells equal to the (zero) padding value: the first input cell of each window wins.
    KinkCase(
        "max_pool",
        (_a([[0, 0, 0]]),),
        {"kernel": (3,), "stride": (1,), "padding": (1,)},
        (_a([[1, 2, 4]]),),
        _a([[1, 1, 2]]),
        _a([[1, 10, 100]]),
        (_a([[11, 100, 0]]),),
        "all tie, padding never wins",
    ),
]
