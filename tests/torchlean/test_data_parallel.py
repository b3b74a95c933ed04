"""The front end's compiled trainer, data parallel: ``ScalarTrainer(..., mesh=Mesh(devices,
("data",)))`` on 4 CPU devices forced by ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(set before JAX starts, so in a subprocess). After 8 Adam steps of a small classifier (float32)
the losses and parameters equal the single-device trainer's to float32 rounding: within 1e-6
relative and 1e-6 absolute (measured 2026-11-23: losses 1.1e-7 relative, parameters 1.5e-7
absolute; the per-device gradient sums are added in another order). The
trained parameters are replicated over the 4 devices; ``forward`` afterwards runs on one
device and agrees; a batch that does not split evenly, and a step without ``batched=True``,
are refused with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import torchlean_ir as tl
from torchlean import NatInput, Options, Param, ScalarTrainer, scalar_trainer

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, os
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    import jax, numpy as np
    from jax.sharding import Mesh
    import torchlean_ir as tl
    from torchlean import NatInput, Options, ScalarTrainer, nn

    assert len(jax.devices()) == 4, jax.devices()

    def model():
        rng = np.random.default_rng(0)
        return nn.Sequential(nn.Linear(6, 16, rng=rng), nn.Tanh(), nn.Linear(16, 3, rng=rng))

    def trainer(mesh):
        net = model()
        loss = lambda ops, x, y: ops.cross_entropy(net(ops, x), y)
        return ScalarTrainer(loss, net.parameters(), [(6,), NatInput()],
                             Options(backend="compiled"), mesh=mesh)

    rng = np.random.default_rng(1)
    batches = [(rng.normal(size=(32, 6)), rng.integers(0, 3, 32)) for _ in range(8)]
    one = trainer(None)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    dp = trainer(mesh)
    l1 = [float(one.adam_step(x, y, lr=0.05, batched=True)) for x, y in batches]
    l4 = [float(dp.adam_step(x, y, lr=0.05, batched=True)) for x, y in batches]
    specs = sorted({(str(p._device.sharding.spec), len(p._device.devices())) for p in dp.params})
    f1 = one.forward(*batches[0], batched=True)
    f4 = dp.forward(*batches[0], batched=True)

    def refusal(call):
        try:
            call()
        except tl.TorchleanError as e:
            return str(e)
        return None

    print(json.dumps({
        "l1": l1, "l4": l4, "f1": f1, "f4": f4,
        "p1": {k: v.tolist() for k, v in one.get_params().items()},
        "p4": {k: v.tolist() for k, v in dp.get_params().items()},
        "specs": [list(s) for s in specs],
        "uneven": refusal(lambda: dp.adam_step(rng.normal(size=(30, 6)),
                                               rng.integers(0, 3, 30), lr=0.05, batched=True)),
        "unbatched": refusal(lambda: dp.step(rng.normal(size=6), 1, lr=0.05)),
    }))
    """
)


@pytest.fixture(scope="module")
def run() -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_four_devices_equal_one(run: dict) -> None:
    l1, l4 = np.asarray(run["l1"]), np.asarray(run["l4"])
    assert l1.shape == (8,) and l1[-1] < l1[0]
    np.testing.assert_allclose(l4, l1, rtol=1e-6)
    assert run["p1"].keys() == run["p4"].keys()
    for k, v in run["p1"].items():
        np.testing.assert_allclose(np.asarray(run["p4"][k]), np.asarray(v), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(run["f4"], run["f1"], rtol=1e-6)


def test_params_replicated_over_the_mesh(run: dict) -> None:
    assert run["specs"] == [["P()", 4]]


def test_refusals(run: dict) -> None:
    assert run["uneven"] == (
        "data: batch size 30 does not split evenly over the 4 devices of mesh axis 'data' "
        "(use a multiple of 4)"
    )
    assert run["unbatched"] == (
        "ScalarTrainer: with a mesh, a training step splits the batch over the devices: "
        "call it with batched=True"
    )


def test_mesh_is_checked_when_the_trainer_is_built() -> None:
    from jax.sharding import Mesh

    w = Param(np.ones(2), name="w")

    def loss(ops, x):  # type: ignore[no-untyped-def]
        return ops.sum(ops.mul(ops.use(w), x))

    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    with pytest.raises(tl.TorchleanError, match=r"mesh= needs Options\(backend='compiled'\)"):
        ScalarTrainer(loss, [w], [(2,)], Options(backend="eager"), mesh=mesh)
    compiled = Options(backend="compiled")
    with pytest.raises(tl.TorchleanError, match=r"mesh must be a jax\.sharding\.Mesh, got list"):
        ScalarTrainer(loss, [w], [(2,)], compiled, mesh=[0])
    with pytest.raises(tl.TorchleanError, match="data_axis 'batch' is not an axis of the mesh"):
        scalar_trainer(loss, [w], [(2,)], compiled, mesh=mesh, data_axis="batch")


def test_one_device_mesh_equals_no_mesh() -> None:
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    xs, ys = np.arange(12.0).reshape(4, 3) / 10, np.array([0, 1, 1, 0])
    results = []
    for m in (None, mesh):
        w = Param(np.linspace(-1, 1, 6).reshape(2, 3), name="w")
        b = Param(np.zeros(2), name="b")

        def loss(ops, x, y, w=w, b=b):  # type: ignore[no-untyped-def]
            return ops.cross_entropy(ops.linear(ops.use(w), ops.use(b), x), y)

        tr = ScalarTrainer(loss, [w, b], [(3,), NatInput()], Options(backend="compiled"), mesh=m)
        losses = [tr.step(xs, ys, lr=0.5, batched=True) for _ in range(3)]
        results.append((losses, tr.get_params()["w"]))
    assert results[0][0] == results[1][0]
    np.testing.assert_array_equal(results[0][1], results[1][1])
