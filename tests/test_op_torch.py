"""Each op's forward and VJP against PyTorch autograd (float64), wherever the conventions agree.

``TORCH_OPS`` maps our op to the same computation in PyTorch for one row of the op table;
``NO_TORCH_EQUIVALENT`` lists the ops without one, with the reason; together they cover the
registry. At the non-smooth points (the ``KINKS`` rows) PyTorch agrees with our conventions
except where ``TORCH_DISAGREES`` says otherwise: those rows assert that PyTorch really does
differ, so ``docs/ops-notes.md`` stays true for the pinned ``torch==2.13.0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import torchlean_ir as tl  # noqa: E402

from .op_cases import CASES, KINKS, KinkCase, OpCase  # noqa: E402

TorchFn = Callable[[list[Any], dict[str, Any], dict[str, Any]], Any]


def _per_dim(v: Any, d: int) -> tuple[int, ...]:
    return (v,) * d if isinstance(v, int) else tuple(v)


def _conv(transpose: bool) -> TorchFn:
    def run(a: list[Any], attrs: dict[str, Any], idx: dict[str, Any]) -> Any:
        W, b, x = a
        d = x.ndim - 1
        fn = getattr(F, f"conv_transpose{d}d" if transpose else f"conv{d}d")
        stride, pad = _per_dim(attrs.get("stride", 1), d), _per_dim(attrs.get("padding", 0), d)
        if transpose:
            return fn(x[None], W, b, stride=stride, padding=pad)[0]
        return fn(x[None], W, b, stride=stride, padding=pad, groups=attrs.get("groups", 1))[0]

    return run


def _pool(kind: str) -> TorchFn:
    def run(a: list[Any], attrs: dict[str, Any], idx: dict[str, Any]) -> Any:
        (x,) = a
        d = x.ndim - 1
        kernel = tuple(attrs["kernel"])
        stride, pad = _per_dim(attrs["stride"], d), _per_dim(attrs.get("padding", 0), d)
        if kind == "max":
            return getattr(F, f"max_pool{d}d")(x[None], kernel, stride, pad)[0]
        if kind == "avg":
            fn = getattr(F, f"avg_pool{d}d")
            return fn(x[None], kernel, stride, pad, count_include_pad=True)[0]
        # smooth max: logsumexp over unfolded windows; padding that beta sends to -inf
        beta = attrs["beta"]
        fill = float("-inf") if beta > 0 else float("inf")
        xp = F.pad(x, [p for q in reversed(pad) for p in (q, q)], value=fill)
        for i in range(d):
            xp = xp.unfold(1 + i, kernel[i], stride[i])
        return torch.logsumexp(beta * xp.flatten(1 + d), dim=-1) / beta

    return run


def _attention(a: list[Any], attrs: dict[str, Any], idx: dict[str, Any]) -> Any:
    Wq, Wk, Wv, Wo, x = a
    heads = attrs["heads"]
    n = x.shape[0]
    q, k, v = ((x @ W).reshape(n, heads, -1).transpose(0, 1) for W in (Wq, Wk, Wv))
    mask = attrs.get("mask")
    mask = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return o.transpose(0, 1).reshape(n, -1) @ Wo


def _batchnorm_eval(a: list[Any], attrs: dict[str, Any], idx: dict[str, Any]) -> Any:
    # F.batch_norm(training=False) written out: torch does not differentiate it in the running
    # statistics, which are arguments (with gradients) here
    x, gamma, beta, mean, var = a
    c = (-1,) + (1,) * (x.ndim - 1)
    r = 1 / torch.sqrt(var + attrs["eps"])
    return (x - mean.reshape(c)) * (r * gamma).reshape(c) + beta.reshape(c)


def _index(a: Any) -> Any:
    return torch.as_tensor(np.asarray(a, dtype=np.int64))


TORCH_OPS: dict[str, TorchFn] = {
    # core tier
    "const": lambda a, at, ix: torch.as_tensor(np.asarray(at["value"], dtype=np.float64)),
    "detach": lambda a, at, ix: a[0].detach(),
    "add": lambda a, at, ix: a[0] + a[1],
    "sub": lambda a, at, ix: a[0] - a[1],
    "mul": lambda a, at, ix: a[0] * a[1],
    "scale": lambda a, at, ix: a[0] * at["c"],
    "abs": lambda a, at, ix: torch.abs(a[0]),
    "sqrt": lambda a, at, ix: torch.sqrt(a[0]),
    "rsqrt": lambda a, at, ix: torch.rsqrt(a[0]),
    "erf": lambda a, at, ix: torch.erf(a[0]),
    "pow": lambda a, at, ix: torch.pow(a[0], at["p"]),
    "clamp": lambda a, at, ix: torch.clamp(a[0], at["lo"], at["hi"]),
    "max": lambda a, at, ix: torch.maximum(a[0], a[1]),
    "min": lambda a, at, ix: torch.minimum(a[0], a[1]),
    "broadcast_to": lambda a, at, ix: a[0].expand(*at["shape"]),
    "reshape": lambda a, at, ix: a[0].reshape(at["shape"]),
    "flatten": lambda a, at, ix: a[0].reshape(-1),
    "transpose2d": lambda a, at, ix: a[0].T,
    "swap_adjacent_at_depth": lambda a, at, ix: a[0].transpose(at["depth"], at["depth"] + 1),
    "reduce_sum": lambda a, at, ix: a[0].sum(dim=at["axis"]),
    "reduce_mean": lambda a, at, ix: a[0].mean(dim=at["axis"]),
    "sum": lambda a, at, ix: a[0].sum(),
    "matmul": lambda a, at, ix: a[0] @ a[1],
    "bmm": lambda a, at, ix: torch.bmm(a[0], a[1]),
    "linear": lambda a, at, ix: F.linear(a[2], a[0], a[1]),
    "relu": lambda a, at, ix: torch.relu(a[0]),
    "step": lambda a, at, ix: (a[0] > 0).to(a[0].dtype),
    "sigmoid": lambda a, at, ix: torch.sigmoid(a[0]),
    "tanh": lambda a, at, ix: torch.tanh(a[0]),
    "exp": lambda a, at, ix: torch.exp(a[0]),
    "log": lambda a, at, ix: torch.log(a[0]),
    "inv": lambda a, at, ix: torch.reciprocal(a[0]),
    "softplus": lambda a, at, ix: F.softplus(a[0]),
    "softmax": lambda a, at, ix: torch.softmax(a[0], dim=-1),
    "log_softmax": lambda a, at, ix: torch.log_softmax(a[0], dim=-1),
    "mse_loss": lambda a, at, ix: F.mse_loss(a[0], a[1]),
    "layer_norm": lambda a, at, ix: F.layer_norm(a[0], a[1].shape, a[1], a[2], eps=at["eps"]),
    "concat": lambda a, at, ix: torch.cat(a, dim=0),
    "slice": lambda a, at, ix: a[0][at["start"] : at["start"] + at["length"]],
    "gather_scalar_nat": lambda a, at, ix: a[0][_index(ix["i0"])],
    "gather_rows_nat": lambda a, at, ix: a[0][_index(ix["i0"])],
    "nat_to_float": lambda a, at, ix: _index(ix["i0"]).double(),
    "nat_vec_to_float": lambda a, at, ix: _index(ix["i0"]).double(),
    # parity (issue 6)
    "transpose3d_first_to_last": lambda a, at, ix: a[0].permute(1, 2, 0),
    "transpose3d_last_to_first": lambda a, at, ix: a[0].permute(2, 0, 1),
    "transpose3d_last_two": lambda a, at, ix: a[0].transpose(1, 2),
    "concat_vectors": lambda a, at, ix: torch.cat(a),
    "gather_scalar": lambda a, at, ix: a[0][at["index"]],
    "gather_row": lambda a, at, ix: a[0][at["index"]],
    "gather_vec_nat": lambda a, at, ix: a[0][_index(ix["i0"])],
    "scatter_add_vec": lambda a, at, ix: a[0].index_add(0, _index([at["index"]]), a[1][None]),
    "scatter_add_row": lambda a, at, ix: a[0].index_add(0, _index([at["index"]]), a[1][None]),
    "safe_log": lambda a, at, ix: torch.log(F.softplus(a[0]) + at["eps"]),
    "gelu": lambda a, at, ix: F.gelu(a[0], approximate="tanh"),
    "silu": lambda a, at, ix: F.silu(a[0]),
    "conv": _conv(transpose=False),
    "conv2d": _conv(transpose=False),
    "conv_transpose": _conv(transpose=True),
    "conv_transpose2d": _conv(transpose=True),
    "max_pool": _pool("max"),
    "max_pool2d": _pool("max"),
    "max_pool2d_pad": _pool("max"),
    "avg_pool": _pool("avg"),
    "avg_pool2d": _pool("avg"),
    "avg_pool2d_pad": _pool("avg"),
    "smooth_max_pool": _pool("smooth"),
    "smooth_max_pool2d": _pool("smooth"),
    "global_avg_pool2d": lambda a, at, ix: a[0].mean(dim=(1, 2)),
    "batchnorm_channel_first": lambda a, at, ix: F.batch_norm(
        a[0][None], None, None, a[1], a[2], training=True, eps=at["eps"]
    )[0],
    "multi_head_attention": _attention,
    # interop (issue 13)
    "batchnorm_eval": _batchnorm_eval,
}

#: Ops PyTorch has no counterpart for, with the reason (kept next to the mapping on purpose).
NO_TORCH_EQUIVALENT: dict[str, str] = {
    "rand_uniform": "torch's generators are not SplitMix64 (and there is no gradient to compare)",
    "bernoulli_mask": "torch's generators are not SplitMix64 (and there is no gradient to compare)",
}


def _torch_cases() -> list[OpCase]:
    out = []
    for c in CASES:
        if c.op not in TORCH_OPS:
            continue
        # torch indexing raises on an out-of-range index where ours reads 0: in-range rows only
        gathered = bool(c.index) and bool(c.shapes)  # a conversion reads every natural
        if gathered and any(np.any(np.asarray(v) >= c.shapes[0][0]) for _, v in c.index):
            continue
        out.append(c)
    return out


def test_torch_mapping_is_documented() -> None:
    undocumented = sorted(set(tl.all_ops()) - set(TORCH_OPS) - set(NO_TORCH_EQUIVALENT))
    assert not undocumented, f"ops with neither a PyTorch mapping nor a reason: {undocumented}"


def _torch_vjp(
    case_op: str, args: list[np.ndarray], attrs: dict, idx: dict, ct: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in args]
    y = TORCH_OPS[case_op](ts, attrs, idx)
    grads = [np.zeros_like(a) for a in args]
    if ts and y.requires_grad:
        got = torch.autograd.grad(y, ts, torch.as_tensor(ct), allow_unused=True)
        grads = [
            np.zeros_like(a) if g is None else g.numpy() for a, g in zip(args, got, strict=True)
        ]
    return y.detach().numpy(), grads


@pytest.mark.parametrize("case", _torch_cases(), ids=lambda c: c.id)
def test_forward_and_vjp_match_torch(case: OpCase) -> None:
    rng = np.random.default_rng(11)
    g = case.graph()
    x = case.sample(rng)
    idx = case.index_values()
    (ours,) = tl.eval_graph(g, x, idx)
    ct = rng.normal(size=ours.shape)
    grads = tl.backprop_ctx(g, x, ct, idx)
    theirs, tgrads = _torch_vjp(case.op, list(x.values()), case.attrs, idx, ct)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-13)
    for k, tg in zip(x, tgrads, strict=True):
        np.testing.assert_allclose(grads[k], tg, rtol=1e-11, atol=1e-12, err_msg=k)


# -- the conventions at non-smooth points ----------------------------------------------------

#: KinkCase rows where PyTorch's derivative differs from ours, with what PyTorch does.
TORCH_DISAGREES: dict[str, str] = {
    "clamp": "torch.clamp passes the gradient (1) at the bounds; ours is 0 at or outside them",
    "sqrt": "torch.sqrt has derivative inf at 0 (and NaN below); ours is 0 for x <= 0",
}


@pytest.mark.parametrize("kink", KINKS, ids=lambda k: k.id)
def test_kink_conventions_against_torch(kink: KinkCase) -> None:
    args = [np.asarray(a) for a in kink.args]
    _, tgrads = _torch_vjp(kink.op, args, kink.attrs, {}, kink.ct)
    agrees = all(
        np.array_equal(tg, want) for tg, want in zip(tgrads, kink.expected_vjp, strict=True)
    )
    assert agrees == (kink.op not in TORCH_DISAGREES), (kink.op, tgrads, kink.expected_vjp)


def test_documented_disagreements_have_kink_rows() -> None:
    assert set(TORCH_DISAGREES) <= {k.op for k in KINKS}


def test_out_of_range_gather_reads_zero_where_torch_raises() -> None:
    x = torch.arange(3.0, dtype=torch.float64)
    with pytest.raises(IndexError):
        x[_index([1, 9])]
    b = tl.GraphBuilder("f64")
    g = b.build(b.gather_vec_nat(b.input("x", (3,)), b.index("i", 2)))
    np.testing.assert_array_equal(tl.eval_graph(g, [x.numpy()], {"i": [1, 9]})[0], [1.0, 0.0])


def test_pool_padding_beyond_half_the_kernel() -> None:
    """PyTorch rejects padding > kernel / 2; ours needs only padding < kernel for max pooling."""
    x = np.array([[1.0, -2.0, 3.0, 0.5]])
    with pytest.raises(RuntimeError, match="should be at most half"):
        F.max_pool1d(torch.as_tensor(x)[None], 3, 1, 2)
    b = tl.GraphBuilder("f64")
    g = b.build(b.max_pool(b.input("x", (1, 4)), kernel=(3,), stride=(1,), padding=(2,)))
    np.testing.assert_array_equal(tl.eval_graph(g, [x])[0], [[1.0, 1.0, 3.0, 3.0, 3.0, 0.5]])
