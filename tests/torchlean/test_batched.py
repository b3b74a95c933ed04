"""Batched eager: an op with a batched argument maps over the batch, and per sample nothing
changes. For every row of the op tables and for the models and the examples, a batched eager
tape (NumPy and JAX array backends), the same code run one sample at a time (a fresh eager tape
per sample) and the compiled batched graph (``CompiledGraph.batched``) give the same values and
gradients (float64, 1e-10); the linked session records and runs the same batched program."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import compiler
import torchlean_ir as tl
from tests.seeds import rng_for
from torchlean import EagerSession, LinkedSession, NatInput, Options, Param, Session

from ..compiler.models import assert_close
from ..op_cases import CASES, OpCase
from .models import CASES as MODELS
from .models import Case

F64 = Options(dtype="f64")
BATCH = 3
REL = 1e-10
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _rng(key: str) -> np.random.Generator:
    return rng_for(str(key))


# -- every op of the registry -------------------------------------------------------------------


def _op_on_session(
    s: Session,
    case: OpCase,
    x: dict[str, np.ndarray],
    idx: dict[str, Any],
    batched: Sequence[str],
    seed: np.ndarray,
) -> tuple[np.ndarray, dict[str, np.ndarray | None], bool]:
    """Apply the case's op on ``s`` (the leaves and index inputs in ``batched`` carry the batch)
    and run backward with ``seed``: the value, each argument's gradient, whether it is batched."""
    args = [
        s.input(x[f"a{i}"], requires_grad=True, batched=f"a{i}" in batched)
        for i in range(len(case.shapes))
    ]
    nats = []
    for k, (size, _) in enumerate(case.index):
        v, b = idx[f"i{k}"], f"i{k}" in batched
        nats.append(s.nat(v, batched=b) if size is None else s.nat_vec(v, batched=b))
    out = s.apply(case.op, *args, *nats, **case.attrs)
    s.backward(out, seed)
    return out.numpy(), {f"a{i}": s.grad(a) for i, a in enumerate(args)}, out.batched


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_op_batched_eager_equals_looped_eager_and_compiled(case: OpCase) -> None:
    """Two batchings per op: the first argument and the index inputs batched, the other
    arguments shared (parameters), on both array backends; and every input batched (NumPy
    backend). Gradients of shared arguments are summed over the batch, batched ones are per
    sample."""
    rng = _rng(case.id + "eager-batch")
    g = case.graph("f64")
    names = [leaf.name for leaf in g.leaves]
    index_names = [ix.name for ix in g.index_inputs]
    if not names and not index_names:
        pytest.skip("the op takes no inputs: nothing to batch")
    samples = [case.sample(rng) for _ in range(BATCH)]
    idx1 = case.index_values()
    idxs = {k: np.stack([np.asarray(v)] * BATCH) for k, v in idx1.items()}
    patterns = [names[:1] + index_names]
    if len(names) > 1:
        patterns.append(names + index_names)
    for over in patterns:
        xs = {n: np.stack([s[n] for s in samples]) if n in over else samples[0][n] for n in names}
        per = [{n: xs[n][k] if n in over else xs[n] for n in names} for k in range(BATCH)]
        out_shape = tl.eval_graph(g, per[0], idx1)[0].shape
        seeds = rng.normal(size=(BATCH, *out_shape))
        cg = compiler.compile(g).batched(over=over, grads="sum")
        c_out, c_grads = cg.value_and_vjp(xs, seeds, idxs)
        # the per-sample loop runs the reference rules (NumPy); both array backends batch
        loop = [
            _op_on_session(EagerSession(F64), case, p, idx1, (), sd)
            for p, sd in zip(per, seeds, strict=True)
        ]
        l_out = np.stack([r[0] for r in loop])
        for backend in ("numpy", "jax") if over is patterns[0] else ("numpy",):
            where = f"{backend}, batched over {over}"
            s = EagerSession(F64, array_backend=backend)
            b_out, b_grads, is_batched = _op_on_session(s, case, xs, idxs, over, seeds)
            assert is_batched and s.batch_size == BATCH
            assert_close(b_out, l_out, REL, f"{where}: batched eager vs looped")
            assert_close(b_out, c_out, REL, f"{where}: batched eager vs compiled batched")
            for n in names:
                stacked = np.stack([r[1][n] for r in loop])
                want = stacked if n in over else stacked.sum(0)
                assert_close(b_grads[n], want, REL, f"{where}: grad {n} vs looped")
                assert_close(b_grads[n], c_grads[n], REL, f"{where}: grad {n} vs compiled")


# -- models and examples: sum and mean, every session ------------------------------------------


def _example(name: str) -> Any:
    pytest.importorskip("sklearn")
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def _digits() -> Case:
    ex = _example("digits_cnn")
    model = ex.make_model(F64)
    X, _, y, _ = ex.load(0)
    return Case("digits", model.parameters(), ex.make_loss(model), ex.INPUTS, [X[:4], y[:4]])


def _diabetes() -> Case:
    ex = _example("regression_diabetes")
    model = ex.make_model(F64)
    X, _, y, _ = ex.load(0)
    return Case(
        "diabetes", model.parameters(), ex.make_loss(model), ex.INPUTS, [X[:4], y[:4, None]]
    )


def _transformer() -> Case:
    ex = _example("tiny_transformer")
    model = ex.Sorter(8, 6, 16, 2, F64)
    tokens, target = ex.data(4, 6, 8, np.random.default_rng(0))
    specs = ex.inputs(6, 8)
    return Case("sort", model.parameters(), ex.make_loss(model), specs, [tokens, np.eye(8)[target]])


EXAMPLE_CASES = [_digits, _diabetes, _transformer]


def _run(
    s: Session, case: Case, inputs: Sequence[Any], batched: bool, grads: str
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The loss (per sample when batched) and the params' and float inputs' gradients."""
    refs = {p.name: s.use(p) for p in case.params}
    args = []
    for i, (spec, v) in enumerate(zip(case.specs, inputs, strict=True)):
        if isinstance(spec, NatInput):
            args.append(
                s.nat(v, batched=batched) if spec.size is None else s.nat_vec(v, batched=batched)
            )
        else:
            args.append(s.input(v, requires_grad=True, batched=batched, name=f"x{i}"))
            refs[f"x{i}"] = args[-1]
    loss = case.loss(s, *args)
    assert loss.batched is batched
    s.backward(loss, grads=grads)
    return loss.numpy(), {k: s.grad(t) for k, t in refs.items()}  # type: ignore[misc]


SESSIONS: dict[str, Callable[[], Session]] = {
    "eager-numpy": lambda: EagerSession(F64, array_backend="numpy"),
    "eager-jax": lambda: EagerSession(F64, array_backend="jax"),
    "linked": lambda: LinkedSession(F64),
}
#: Which reductions each session is run with here (the op-table test covers every op on both
#: eager backends; the linked session's backward is ``CompiledGraph.batched`` itself). The
#: models' CNN and transformer are the examples' (``test_equivalence`` trains them batched).
REDUCTIONS = {"eager-numpy": ("sum", "mean"), "eager-jax": ("mean",), "linked": ("sum", "mean")}


@pytest.mark.parametrize("make", [MODELS[0], *EXAMPLE_CASES], ids=lambda f: f.__name__)
def test_models_batched_equal_looped_and_compiled(make: Callable[[], Case]) -> None:
    """The batched eager tapes and the linked session (the compiled batched graph of the
    recorded program) against a fresh eager tape per sample: per-sample losses, the params'
    gradients summed or averaged over the batch, the inputs' gradients per sample."""
    case = make()
    n = len(case.batch[0])
    loop = [_run(EagerSession(F64), case, case.sample(k), False, "sum") for k in range(n)]
    l_loss = np.array([r[0] for r in loop])
    for name, new in SESSIONS.items():
        for grads in REDUCTIONS[name]:
            got_loss, got = _run(new(), case, case.batch, True, grads)
            assert_close(got_loss, l_loss, REL, f"{name} ({grads}): loss vs looped")
            for k, g in got.items():
                stacked = np.stack([r[1][k] for r in loop])
                if k.startswith("x"):
                    want = stacked  # per sample, whatever the reduction
                else:
                    want = stacked.sum(0) / (n if grads == "mean" else 1)
                assert_close(g, want, REL, f"{name} ({grads}): grad {k} vs looped")


# -- the API ----------------------------------------------------------------------------------


@pytest.mark.parametrize("make", list(SESSIONS.values()), ids=list(SESSIONS))
def test_batched_values_and_flags(make: Callable[[], Session]) -> None:
    s = make()
    W = Param(np.arange(6.0).reshape(2, 3), name="W")
    w = s.use(W)
    x = s.input(np.ones((4, 3)), batched=True, shape=(3,))
    labels = s.nat(np.array([0, 1, 1, 0]), batched=True)
    assert x.shape == (3,) and x.batched and not w.batched and s.batch_size == 4
    y = s.matmul(w, s.reshape(x, shape=(3, 1)))
    z = s.sum(w)  # depends on no batched value
    loss = s.cross_entropy(s.reshape(y, shape=(2,)), labels)
    assert y.batched and loss.batched and not z.batched
    assert y.numpy().shape == (4, 2, 1) and loss.numpy().shape == (4,) and z.numpy().shape == ()
    np.testing.assert_array_equal(y.numpy()[:, :, 0], np.tile([3.0, 12.0], (4, 1)))
    with pytest.raises(TypeError, match=r"one element, got f64\[\] \(a batch of 4\)"):
        loss.item()
    assert s.read_nat(labels).tolist() == [0, 1, 1, 0]
    with pytest.raises(tl.TorchleanError, match=r"seed has shape \[\], the output is \[4\]"):
        s.backward(loss, np.ones(()))
    with pytest.raises(tl.TorchleanError, match="grads must be 'sum' or 'mean'"):
        s.backward(loss, grads="max")
    s.backward(z)  # an unbatched output in a batched session: no reduction at all
    np.testing.assert_array_equal(s.grad(w), np.ones((2, 3)))


@pytest.mark.parametrize("make", list(SESSIONS.values()), ids=list(SESSIONS))
def test_one_batch_per_tape(make: Callable[[], Session]) -> None:
    s = make()
    s.input(np.ones((4, 3)), batched=True)
    with pytest.raises(tl.TorchleanError, match=r"batch size 5, but this .* batch size is 4"):
        s.input(np.ones((5, 3)), batched=True)
    with pytest.raises(tl.TorchleanError, match="batch size 2"):
        s.nat(np.array([1, 2]), batched=True)
    with pytest.raises(tl.TorchleanError, match="needs a leading batch axis"):
        s.input(np.float64(1.0), batched=True)
    with pytest.raises(tl.TorchleanError, match="one non-negative int per sample"):
        s.nat(3, batched=True)
    with pytest.raises(tl.TorchleanError, match="one vector of non-negative ints per sample"):
        s.nat_vec(np.arange(3), batched=True)
    s.reset_tape()
    assert s.batch_size is None
    assert s.input(np.ones((5, 3)), batched=True).batched and s.batch_size == 5


def test_a_batched_nat_is_overwritten_per_sample() -> None:
    s = EagerSession(F64)
    ref = s.nat_vec(np.array([[0, 1], [1, 0]]), batched=True)
    s.set_nat_vec(ref, np.array([[1, 1], [0, 0]]))
    np.testing.assert_array_equal(s.read_nat_vec(ref), [[1, 1], [0, 0]])
    with pytest.raises(tl.TorchleanError, match="3 samples, the batch has 2"):
        s.set_nat_vec(ref, np.zeros((3, 2), dtype=int))


def test_trainer_and_predictor_run_the_batch_at_once() -> None:
    """``ScalarTrainer`` / ``Predictor`` with ``batched=True`` record one batched tape, not a
    loop: each op runs once."""
    from torchlean import Predictor, ScalarTrainer

    case = MODELS[0]()
    tr = ScalarTrainer(case.loss, case.params, case.specs, F64)
    tr.forward(*case.batch, batched=True)
    n_ops = tr.session._n_ops
    tr.forward(*case.sample(0))
    assert tr.session._n_ops == n_ops and tr.session.batch_size is None
    pred = Predictor(case.loss, case.params, case.specs, F64)
    batched = pred(*case.batch, batched=True)
    looped = [pred(*case.sample(k)) for k in range(len(case.batch[0]))]
    assert_close(batched, np.stack(looped), REL, "predictor")
