"""``jax.export`` artifacts run in a fresh process that imports only jax and numpy (neither the
graph nor this package's op code) and give the same numbers, under the contract of
docs/compiler.md ("Export: what numbers to expect"):

- an artifact gives bit-identical results wherever it is deserialized and run on the same
  platform (here: in this process and in a fresh one);
- an artifact exported with fixed shapes is the module the in-process compilation runs, so it
  is bit-identical to ``cg.forward`` / ``cg.value_and_vjp``;
- an artifact with a symbolic batch size is a different (shape-polymorphic) module, which XLA
  may fuse and reassociate differently: it agrees with the in-process ``batched`` call within
  ``SYMBOLIC_BATCH_ULPS`` units in the last place of the largest magnitude of each result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np

import compiler

from .models import MODELS

# The stated bound for symbolic-batch artifacts against the in-process batched call: a few
# reassociated float32 sums (a batch mean of 7 samples, a softmax row) differ by at most a few
# ulps of the largest term. Observed: 1 ulp (attention block, float32).
SYMBOLIC_BATCH_ULPS = 4


def ulps_apart(got: np.ndarray, want: np.ndarray) -> float:
    """Largest |got - want| in units of the last place of ``want``'s largest magnitude."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.size == 0:
        return 0.0
    unit = np.spacing(np.max(np.abs(want)).astype(want.dtype))
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))) / unit)


RUNNER = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import jax
    jax.config.update("jax_enable_x64", True)  # the float64 artifacts take float64 arguments
    manifest = json.load(open("manifest.json"))
    for name in manifest:
        with open(name + ".bin", "rb") as f:
            exported = jax.export.deserialize(f.read())
        args = np.load(name + ".args.npz")
        flat = [args[f"a{k}"] for k in range(len(args.files))]
        leaves = jax.tree_util.tree_leaves(exported.call(*flat))
        np.savez(name + ".got.npz", *[np.asarray(v) for v in leaves])
    loaded = sorted(m for m in ("torchlean_ir", "compiler") if m in sys.modules)
    assert not loaded, loaded
    print("ran", len(manifest))
    """
)


def _write(tmp: Path, name: str, blob: bytes, args: list, expected: list) -> None:
    (tmp / f"{name}.bin").write_bytes(blob)
    np.savez(tmp / f"{name}.args.npz", **{f"a{k}": np.asarray(a) for k, a in enumerate(args)})
    np.savez(tmp / f"{name}.want.npz", *[np.asarray(v) for v in expected])
    # the same artifact, deserialized and run here: the fresh process must match it bit for bit
    leaves = jax.tree_util.tree_leaves(jax.export.deserialize(blob).call(*args))
    np.savez(tmp / f"{name}.here.npz", *[np.asarray(v) for v in leaves])


def test_exported_artifacts_run_in_a_fresh_process(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    names = []
    for model in MODELS:
        dtypes = [("f32", np.float32)] + ([("f64", np.float64)] if model is MODELS[0] else [])
        for dtype, np_dtype in dtypes:
            g = model.build(dtype)
            cg = compiler.compile(g)
            x, idx = model.sample(rng)
            x = {k: v.astype(np_dtype) for k, v in x.items()}
            leaves = [x[n] for n in cg.leaf_names]
            index = [np.asarray(idx[n], np.int32) for n in cg.index_names]
            name = f"{model.name}_{dtype}_vjp"
            out, grads = cg.value_and_vjp(x, np_dtype(1.5), idx)
            want = [out, *(grads[n] for n in cg.grad_names)]
            _write(tmp_path, name, cg.export_bytes("vjp"), [*leaves, np_dtype(1.5), *index], want)
            names.append(name)
            # batched over the inputs, exported with a symbolic batch size, run at 7 samples
            inputs = [leaf.name for leaf in g.leaves if leaf.kind == "input"] + list(idx)
            bg = cg.batched(over=inputs, grads="mean")
            samples = [model.sample(rng) for _ in range(7)]
            xs = {
                n: np.stack([s[n] for s, _ in samples]).astype(np_dtype) if n in inputs else x[n]
                for n in cg.leaf_names
            }
            idxs = {n: np.stack([i[n] for _, i in samples]) for n in idx}
            vals, bgrads = bg.value_and_grad(xs, idxs)
            name = f"{model.name}_{dtype}_batched"
            args = [xs[n] for n in cg.leaf_names] + [np.ones(7, np_dtype)]
            args += [np.asarray(idxs[n], np.int32) for n in cg.index_names]
            want = [vals, *(bgrads[n] for n in cg.grad_names)]
            _write(tmp_path, name, bg.export_bytes("vjp"), args, want)
            names.append(name)
            # the same, exported at the fixed batch size 7: the in-process module, bit for bit
            name = f"{model.name}_{dtype}_batch7"
            _write(tmp_path, name, bg.export_bytes("vjp", batch_size=7), args, want)
            names.append(name)
        if model is MODELS[1]:
            out = cg.forward(x, idx)
            _write(tmp_path, "forward", cg.export_bytes("forward"), [*leaves, *index], [out])
            names.append("forward")
    (tmp_path / "manifest.json").write_text(json.dumps(names))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"ran {len(names)}"
    for name in names:
        want = np.load(tmp_path / f"{name}.want.npz")
        here = np.load(tmp_path / f"{name}.here.npz")
        got = np.load(tmp_path / f"{name}.got.npz")
        assert len(got.files) == len(want.files) == len(here.files), name
        for k in want.files:
            # same artifact, same platform: bit for bit, in any process
            np.testing.assert_array_equal(got[k], here[k], err_msg=f"{name} {k}")
            if name.endswith("_batched"):
                # symbolic batch size: a different module from the in-process compilation
                ulps = ulps_apart(got[k], want[k])
                assert ulps <= SYMBOLIC_BATCH_ULPS, f"{name} {k}: {ulps} ulps apart"
            else:
                # fixed shapes: the module the in-process compilation runs
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name} {k}")


def test_ulps_apart_measures_in_units_of_the_largest_magnitude() -> None:
    want = np.array([1.0, 0.5, 0.0], np.float32)
    assert ulps_apart(want, want) == 0.0
    one_ulp = np.array([np.nextafter(np.float32(1.0), np.float32(2.0)), 0.5, 0.0], np.float32)
    assert ulps_apart(one_ulp, want) == 1.0
    off = want + np.array([0, 0, 5 * np.spacing(np.float32(1.0))], np.float32)
    assert ulps_apart(off, want) == 5.0
    assert ulps_apart(off, want) > SYMBOLIC_BATCH_ULPS


def test_export_signature_and_symbolic_batch() -> None:
    model = MODELS[1]
    cg = compiler.compile(model.build("f32"))
    exp = cg.export("vjp")
    n = len(cg.leaf_names)
    assert len(exp.in_avals) == n + 1 + len(cg.index_names)
    assert str(exp.in_avals[n + 1].dtype) == "int32"
    bg = cg.batched(over=("x", "label"))
    bexp = bg.export("forward")
    assert "batch" in str(bexp.in_avals[cg.leaf_names.index("x")].shape)
    fixed = bg.export("forward", batch_size=4)
    assert fixed.in_avals[cg.leaf_names.index("x")].shape == (4, 8)
    assert isinstance(jax.export.deserialize(bg.export_bytes("vjp")), jax.export.Exported)
