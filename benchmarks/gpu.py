"""GPU benchmark: float32 precision, Adam training steps, the front end and a full GPT-2-small
training step, ours against hand-written JAX, PyTorch eager and ``torch.compile`` (issue 29).

Every figure is a ratio of timings taken side by side in one run (medians of interleaved
repeats, ``_report.interleaved``; each timed chunk is a few steps followed by one wait for the
device: ``jax.block_until_ready`` on the parameters, ``torch.cuda.synchronize``). Sections:

``precision``
    The compiled value-and-gradient (``compiler.compile(graph).batched(over=..., grads="mean")
    .value_and_grad``) of the MLP 784-256-256-10, batch 1024, float32, against a float64
    reference (the same graph compiled with ``dtype="f64"`` on the CPU): per parameter
    ``max|g32 - g64| / max|g64|``, the worst over parameters; for ``matmul_precision="float32"``
    (the default), ``"tf32"`` and ``"bf16"`` (opt-in), a hand-written ``jax.jit`` loss at JAX's
    default precision and at ``float32``, and PyTorch with TF32 off and on.
``train``
    One Adam step: MLP 784-256-256-10 batch 1024, LeNet-5 batch 512, a GPT-2-small block (d 768,
    12 heads, n 128, MLP 3072) batch 16. Ours (``compiler.TrainStep`` on the batched graph,
    ``optax.adam(1e-3)``), a hand-written ``jax.jit`` Adam step (``_compiler_models``' JAX loss,
    optax, parameters donated, traced at ``jax.default_matmul_precision("float32")``), PyTorch
    eager with TF32 off. For the MLP also the labels passed as NumPy arrays vs device arrays,
    for ours and hand-written JAX alike.
``frontend``
    The same MLP: ``torchlean.ScalarTrainer`` with ``Options(backend="compiled")`` vs
    ``compiler.TrainStep`` on the trainer's graph (target 1.2x; also with a learning rate that
    changes at every step), ``Options(backend="eager")`` vs PyTorch eager (target 2x), with
    device-array and NumPy inputs, and the eager trainer's first step in a fresh process
    (target < 2 s). ``benchmarks/frontend_host_overhead.py`` measures the host's share alone.
``gpt2``
    A full GPT-2-small training step (12 layers, d 768, 12 heads, sequence 256, batch 8,
    vocabulary 50257, learned position embeddings, LM head tied to the token embeddings, tanh
    GELU, pre-LN, causal attention, next-token cross-entropy) in tokens/s: ours (a graph of one
    sequence, ``_compiler_models.gpt2``), hand-written JAX, PyTorch eager and ``torch.compile``
    (TF32 off), with the time of each side's first (compiling) step. The attention op of the IR
    has no query/key/value biases: no side has them (the model is otherwise GPT-2's).

On a machine without a GPU everything runs on the CPU (and says so); ``--quick`` shrinks every
size (MLP 64-32-32-10 batch 32, GPT-2 2 layers d 64 seq 32 vocab 256, ...) so that the whole
script runs on a CPU in a couple of minutes. ``torch.compile`` is skipped with a note where it
fails or where ``--budget`` seconds are nearly spent. Where ``symengine`` (imported by
``torchlean_ir`` for the verifier's symbolic backend, used by nothing here) is not installed, an
empty module stands in for it and the output says so. Progress lines go to stdout as the run
goes; after each measurement the section so far is written (``DIR/gpu.md``, the raw numbers in
``DIR/gpu.json`` with ``--out DIR``; ``docs/benchmarks.md`` unless ``--no-write``), so a run
cut short still leaves its results.

    python benchmarks/gpu.py [--quick] [--out DIR] [--sections precision,train,frontend,gpt2]
                             [--no-write] [--budget SECONDS]
    python benchmarks/gpu.py --install DIR     # splice DIR/gpu.md into docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

# The symbolic backend of torchlean_ir (the verifier's) imports symengine when the package is
# imported; nothing measured here uses it. A GPU image without it still runs the benchmark:
# an empty module stands in (any use would fail loudly), and the run says so.
try:
    import symengine  # noqa: F401
except ImportError:
    import types

    sys.modules["symengine"] = types.ModuleType("symengine")
    SYMENGINE_STUB = True
else:
    SYMENGINE_STUB = False

# Before JAX starts: PyTorch runs in this process too, so JAX must not take most of the GPU's
# memory up front (its default is 75%).
os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.45")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from _compiler_models import GPT2_SMALL, Bench, gpt2, lenet5, mlp, transformer  # noqa: E402
from _report import DOC, in_fresh_process, interleaved, machine, table  # noqa: E402

import compiler  # noqa: E402

NAME = "gpu"
TITLE = "GPU: float32 precision, training steps, front end, GPT-2-small"
SECTIONS = ("precision", "train", "frontend", "gpt2")
LR = 1e-3
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[gpu.py {time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


# -- sizes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    quick: bool
    mlp_dims: tuple[int, ...]
    mlp_batch: int
    lenet_batch: int
    block: dict[str, int]  # transformer(seq, dim, heads, ff)
    block_batch: int
    gpt: dict[str, int]  # gpt2(layers, dim, heads, seq, vocab)
    gpt_batch: int
    repeats: int  # interleaved repeats per timing
    chunk_s: float  # target duration of one timed chunk of steps
    gpt_repeats: int


FULL = Config(
    quick=False,
    mlp_dims=(784, 256, 256, 10),
    mlp_batch=1024,
    lenet_batch=512,
    block={"seq": 128, "dim": 768, "heads": 12, "ff": 3072},
    block_batch=16,
    gpt=dict(GPT2_SMALL),
    gpt_batch=8,
    repeats=7,
    chunk_s=0.05,
    gpt_repeats=5,
)
QUICK = Config(
    quick=True,
    mlp_dims=(64, 32, 32, 10),
    mlp_batch=32,
    lenet_batch=8,
    block={"seq": 16, "dim": 32, "heads": 4, "ff": 128},
    block_batch=4,
    gpt={"layers": 2, "dim": 64, "heads": 4, "seq": 32, "vocab": 256},
    gpt_batch=2,
    repeats=3,
    chunk_s=0.01,
    gpt_repeats=3,
)


# -- devices ---------------------------------------------------------------------------------


@dataclass
class Env:
    """Where each side runs: JAX's device (ours, hand-written JAX) and PyTorch's."""

    jax_device: Any
    ours: str  # "gpu" or "cpu": what we pass to compile / Options
    torch: Any = None  # the torch module, or None when it is not installed
    torch_device: str = "cpu"

    @property
    def on_gpu(self) -> bool:
        return self.ours == "gpu"

    @property
    def cuda(self) -> bool:
        return self.torch_device == "cuda"

    def put(self, tree: Any) -> Any:
        """Arrays on JAX's device (committed)."""
        return jax.device_put(tree, self.jax_device)

    def block(self, tree: Any) -> None:
        jax.block_until_ready(tree)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def describe(self) -> str:
        d = self.jax_device
        kind = getattr(d, "device_kind", d.platform)
        out = f"JAX {jax.__version__} on {d.platform} ({kind})"
        if self.torch is None:
            return out + "; PyTorch not installed (its columns are empty)"
        t = self.torch
        where = t.cuda.get_device_name(0) if self.cuda else "cpu, one thread"
        cuda = f", CUDA {t.version.cuda}" if self.cuda else ""
        return out + f"; PyTorch {t.__version__} on {self.torch_device} ({where}{cuda})"


def make_env() -> Env:
    ours = "gpu" if compiler.gpu_available() else "cpu"
    env = Env(compiler.resolve_device(ours), ours)
    try:
        import torch
    except ImportError:
        return env
    env.torch = torch
    if not torch.cuda.is_available():
        # beside JAX's thread pool on a small CPU machine, PyTorch's own pool oversubscribes
        # the cores (steps 10-100x slower): one thread
        torch.set_num_threads(1)
    else:
        env.torch_device = "cuda"
        # float32 means float32 on PyTorch's side too
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    return env


# -- results ---------------------------------------------------------------------------------


@dataclass
class Results:
    """The sections measured so far (markdown and raw numbers), written after every change."""

    cfg: Config
    env: Env
    out: Path | None
    write_doc: bool
    budget: float
    markdown: dict[str, str] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    pending: list[str] = field(default_factory=list)

    def left(self) -> float:
        """Seconds of the budget left."""
        return self.budget - (time.perf_counter() - T0)

    def update(self, section: str, markdown: str, raw: dict[str, Any]) -> None:
        self.markdown[section] = markdown
        self.raw[section] = raw
        self.save()

    def body(self) -> str:
        cfg = self.cfg
        head = (
            f"Run on {datetime.date.today().isoformat()}: {self.env.describe()}"
            + (" (`--quick`: tiny sizes, few repeats; not the figures of record)" if cfg.quick
               else "")
            + (". symengine is not installed here: an empty module stood in for it (only the "
               "verifier's symbolic backend uses it)" if SYMENGINE_STUB else "")
            + ". Each timing is the median of interleaved repeats of chunks of steps, each "
            "chunk ending with one wait for the device (`jax.block_until_ready`, "
            "`torch.cuda.synchronize`); float32 everywhere at full float32 precision unless a "
            "row says otherwise (JAX traced at `default_matmul_precision('float32')`, PyTorch "
            "with TF32 off)."
        )  # fmt: skip
        parts = [head]
        titles = {
            "precision": "Precision of float32 gradients",
            "train": "Adam training step",
            "frontend": "Front end (torchlean)",
            "gpt2": "GPT-2-small training step",
        }
        for s in SECTIONS:
            if s in self.markdown:
                parts.append(f"### {titles[s]}\n\n{self.markdown[s].strip()}")
        if self.pending:
            parts.append("_Incomplete run: not measured (yet): " + ", ".join(self.pending) + "._")
        return "\n\n".join(parts)

    def section_text(self) -> str:
        """The section as ``_report.write_section`` writes it (markers, title, stamp)."""
        begin, end = f"<!-- BEGIN {NAME} -->", f"<!-- END {NAME} -->"
        stamp = datetime.date.today().isoformat()
        return (
            f"{begin}\n## {TITLE}\n\n"
            f"_Run by `benchmarks/{NAME}.py` on {stamp}; machine: {machine()}._\n\n"
            f"{self.body().strip()}\n{end}"
        )

    def save(self) -> None:
        text = self.section_text()
        if self.out is not None:
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / f"{NAME}.md").write_text(text + "\n")
            meta = {
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "device": self.env.describe(),
                "jax_device_kind": getattr(self.env.jax_device, "device_kind", ""),
                "torch_device": self.env.torch_device,
                "machine": machine(),
                "quick": self.cfg.quick,
                "elapsed_s": time.perf_counter() - T0,
                "pending": self.pending,
            }
            doc = {"meta": meta, "sections": self.raw}
            (self.out / f"{NAME}.json").write_text(json.dumps(doc, indent=1, default=float))
        if self.write_doc:
            install_text(text)


def install_text(section: str) -> None:
    """Put ``section`` (with its markers) into ``docs/benchmarks.md`` in place of the old one."""
    begin, end = f"<!-- BEGIN {NAME} -->", f"<!-- END {NAME} -->"
    text = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    if begin in text and end in text:
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        text = pre + section.strip() + post
    else:
        text = text.rstrip() + "\n\n" + section.strip() + "\n"
    DOC.write_text(text)


# -- timing ----------------------------------------------------------------------------------

Step = tuple[Callable[[], Any], Callable[[], Any]]  # (one step, wait for its results)

#: The loss of the latest step of each training-step closure (by ``id`` of its ``run``), kept
#: on the device: read only after a wait, to check that every side trains the same model.
LAST_LOSS: dict[int, Any] = {}


def last_loss(step: Step) -> float | None:
    v = LAST_LOSS.get(id(step[0]))
    return None if v is None else float(v)


def first_step(step: Step) -> float:
    """Wall time of a first step (tracing and compiling included), waited for."""
    t0 = time.perf_counter()
    step[0]()
    step[1]()
    return time.perf_counter() - t0


def time_steps(
    steps: dict[str, Step], cfg: Config, repeats: int | None = None, chunk_s: float | None = None
) -> dict[str, Any]:
    """Median seconds per step of each side, timed in alternation: each side runs chunks of
    ``n`` steps (``n`` chosen so a chunk lasts about ``cfg.chunk_s``) and waits for the device
    at the end of each chunk. The steps must have been run once (compiled)."""
    chunks, numbers = {}, {}
    for k, (run, wait) in steps.items():
        t0 = time.perf_counter()
        for _ in range(2):
            run()
        wait()
        per = max((time.perf_counter() - t0) / 2, 1e-6)
        n = max(1, min(200, round((chunk_s or cfg.chunk_s) / per)))
        numbers[k] = n

        def chunk(run: Callable[[], Any] = run, wait: Callable[[], Any] = wait, n: int = n) -> None:
            for _ in range(n):
                run()
            wait()

        chunks[k] = chunk
    res = interleaved(chunks, repeats=repeats or cfg.repeats, number=1, warmup=1)
    return {k: {"s": res[k][0] / numbers[k], "steps_per_chunk": numbers[k]} for k in steps}


def ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:.3f}" if s < 0.01 else f"{s * 1e3:.2f}"


def ratio(a: float | None, b: float | None) -> str:
    return "" if a is None or b is None else f"{a / b:.2f}"


# -- the three sides of a training step ------------------------------------------------------


def ours_step(env: Env, bench: Bench, index_kind: str = "device", copies: int = 4) -> Step:
    """``compiler.TrainStep`` on the batched graph, Adam. Data on the device; the index inputs
    as device arrays or as NumPy arrays (``index_kind``), a few distinct copies in turn (as a
    training loop gives a new label array every step)."""
    bg = compiler.compile(bench.graph, device=env.ours).batched(over=bench.over, grads="mean")
    step = compiler.TrainStep(bg, optax.adam(LR))
    box = [step.init(bench.params)]
    data = env.put(dict(bench.data))
    index = {k: bench.index[k] for k in bg.index_names}
    cycle = itertools.cycle(_copies(env, index, index_kind, copies))

    def run() -> None:
        box[0], LAST_LOSS[key] = step(box[0], data, next(cycle) or None)

    key = id(run)

    return run, lambda: env.block(box[0].params)


def _copies(env: Env, index: dict[str, np.ndarray], kind: str, n: int) -> list[dict[str, Any]]:
    out = [{k: np.array(v, np.int32) for k, v in index.items()} for _ in range(n)]
    return [env.put(c) for c in out] if kind == "device" else out


@contextlib.contextmanager
def _no_ctx() -> Iterator[None]:
    yield


def hand_step(
    env: Env, bench: Bench, index_kind: str = "device", precision: str | None = "float32"
) -> Step:
    """A hand-written ``jax.jit`` Adam step (value_and_grad of the JAX loss, optax, parameters
    and optimizer state donated), traced at ``precision`` (``None``: JAX's default)."""
    tx = optax.adam(LR)

    def step(params: Any, opt_state: Any, data: Any, index: Any) -> Any:
        ctx = jax.default_matmul_precision(precision) if precision else _no_ctx()
        with ctx:
            loss, grads = jax.value_and_grad(bench.jax_loss)(params, data, index)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

    jitted = jax.jit(step, donate_argnums=(0, 1))
    params = env.put({k: np.array(v) for k, v in bench.params.items()})
    box = [params, jax.jit(tx.init)(params)]
    data = env.put(dict(bench.data))
    cycle = itertools.cycle(_copies(env, bench.index, index_kind, 4))

    def run() -> None:
        box[0], box[1], LAST_LOSS[key] = jitted(box[0], box[1], data, next(cycle))

    key = id(run)

    return run, lambda: env.block(box[0])


def torch_step(env: Env, bench: Bench, compiled: bool = False) -> Step:
    """PyTorch: ``zero_grad`` / the loss / ``backward`` / ``torch.optim.Adam.step`` (eager), on
    CUDA when there is one; with ``compiled``, the loss (forward and, through AOTAutograd, its
    backward) under ``torch.compile`` (default mode), the optimizer eager."""
    torch = env.torch
    dev = env.torch_device
    params = {k: torch.tensor(v, device=dev, requires_grad=True) for k, v in bench.params.items()}
    data = {k: torch.tensor(v, device=dev) for k, v in bench.data.items()}
    index = {k: torch.tensor(v, dtype=torch.int64, device=dev) for k, v in bench.index.items()}
    opt = torch.optim.Adam(params.values(), lr=LR)
    loss_fn = torch.compile(bench.torch_loss) if compiled else bench.torch_loss

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(params, data, index)
        loss.backward()
        opt.step()
        LAST_LOSS[key] = loss.detach()

    key = id(run)

    return run, env.sync


# -- section 1: precision --------------------------------------------------------------------


def _rel_err(grads: dict[str, Any], ref: dict[str, Any]) -> tuple[float, str]:
    """Worst over parameters of ``max|g - ref| / max|ref|``, and the parameter."""
    worst, name = -1.0, ""
    for k, r in ref.items():
        r = np.asarray(r, np.float64)
        g = np.asarray(grads[k], np.float64)
        e = float(np.max(np.abs(g - r)) / max(float(np.max(np.abs(r))), 1e-300))
        if e > worst:
            worst, name = e, k
    return worst, name


def section_precision(res: Results) -> None:
    cfg, env = res.cfg, res.env
    bench = mlp(cfg.mlp_batch, dims=cfg.mlp_dims)
    log(f"precision: {bench.name}, batch {cfg.mlp_batch}: float64 reference on the CPU")
    ref = compiler.compile(bench.graph, dtype="f64", device="cpu")
    ref = ref.batched(over=bench.over, grads="mean")
    leaves64 = {k: np.asarray(v, np.float64) for k, v in {**bench.params, **bench.data}.items()}
    v64, g64 = ref.value_and_grad(leaves64, dict(bench.index))
    g64 = {k: np.asarray(g64[k]) for k in bench.params}
    leaves = env.put({k: np.asarray(v) for k, v in {**bench.params, **bench.data}.items()})
    index = env.put({k: np.asarray(v, np.int32) for k, v in bench.index.items()})
    rows, raw = [], {}

    def add(label: str, how: str, fn: Callable[[], dict[str, Any]]) -> None:
        try:
            e, p = _rel_err(fn(), g64)
            raw[label] = {"max_rel_err": e, "worst_param": p}
            rows.append([label, how, f"{e:.1e}", p])
        except Exception as exc:  # a mode the platform lacks: say so, go on
            raw[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            rows.append([label, how, "failed", f"{type(exc).__name__}: {str(exc)[:80]}"])
        log(f"precision: {label}: {rows[-1][2]}")

    for prec in ("float32", "tf32", "bf16"):

        def ours(prec: str = prec) -> dict[str, Any]:
            cg = compiler.compile(bench.graph, device=env.ours, matmul_precision=prec)
            _, g = cg.batched(over=bench.over, grads="mean").value_and_grad(leaves, index)
            return {k: jax.device_get(g[k]) for k in bench.params}

        label = f"ours, matmul_precision={prec!r}" + (" (default)" if prec == "float32" else "")
        add(label, "`compiler.compile(...).batched(...).value_and_grad`", ours)
    p32 = {k: leaves[k] for k in bench.params}
    d32 = {k: leaves[k] for k in bench.data}
    for prec in (None, "float32"):

        def hand(prec: str | None = prec) -> dict[str, Any]:
            ctx = jax.default_matmul_precision(prec) if prec else _no_ctx()
            with ctx:  # the jit traces here, at this precision
                f = jax.jit(jax.value_and_grad(bench.jax_loss))
                _, g = f(p32, d32, index)
            return jax.device_get(g)

        what = (
            "JAX's default precision" if prec is None else "`default_matmul_precision('float32')`"
        )
        add(f"hand-written jax.jit, {'default' if prec is None else prec}", what, hand)
    if env.torch is not None:
        torch = env.torch
        for tf32 in (False, True):

            def tgrads(tf32: bool = tf32) -> dict[str, Any]:
                old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
                torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
                try:
                    dev = env.torch_device
                    p = {k: torch.tensor(v, device=dev, requires_grad=True)
                         for k, v in bench.params.items()}  # fmt: skip
                    d = {k: torch.tensor(v, device=dev) for k, v in bench.data.items()}
                    i = {k: torch.tensor(v, dtype=torch.int64, device=dev)
                         for k, v in bench.index.items()}  # fmt: skip
                    bench.torch_loss(p, d, i).backward()
                    return {k: v.grad.cpu().numpy() for k, v in p.items()}
                finally:
                    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old

            label = f"PyTorch {env.torch_device}, TF32 {'on' if tf32 else 'off'}"
            add(label, "`allow_tf32` (matmul and cuDNN)", tgrads)
    body = (
        f"Gradient of the batch-mean loss of the {bench.name} (ReLU, cross-entropy), batch "
        f"{cfg.mlp_batch}, float32, against a float64 reference (the same graph compiled with "
        "`dtype='f64'` on the CPU, the same float32 inputs): per parameter "
        "max|g32 - g64| / max|g64|, the worst over the parameters (float32 rounding alone is "
        "about 1e-7; TF32 keeps a 10-bit mantissa, about 1e-3 per product).\n\n"
        + table(["computed by", "how", "worst relative error", "worst parameter"], rows)
    )
    raw["reference_loss_f64"] = float(np.mean(v64))
    res.update("precision", body, raw)


# -- section 2: Adam training step table -----------------------------------------------------


def section_train(res: Results) -> None:
    cfg, env = res.cfg, res.env
    models = [
        ("mlp", lambda: mlp(cfg.mlp_batch, dims=cfg.mlp_dims), cfg.mlp_batch),
        ("lenet5", lambda: lenet5(cfg.lenet_batch), cfg.lenet_batch),
        ("block", lambda: transformer(cfg.block_batch, **cfg.block), cfg.block_batch),
    ]
    rows, raw, notes = [], {}, []
    label_rows: list[list[object]] = []
    tname = f"PyTorch eager {env.torch_device}" + (", TF32 off" if env.cuda else "")
    for key, make, batch in models:
        bench = make()
        name = bench.name if key != "block" else (
            f"GPT-2-small-style block (d {cfg.block['dim']}, {cfg.block['heads']} heads, "
            f"n {cfg.block['seq']}, MLP {cfg.block['ff']})"
        )  # fmt: skip
        if not bench.available:
            rows.append([f"{name}, batch {batch}", "pending", "", "", "", ""])
            notes.append(f"{name}: {bench.why_not}")
            continue
        log(f"train: {name}, batch {batch}: compiling")
        steps: dict[str, Step] = {"ours": ours_step(env, bench), "jax": hand_step(env, bench)}
        if env.torch is not None:
            steps["torch"] = torch_step(env, bench)
        if key == "mlp":
            steps["ours, NumPy labels"] = ours_step(env, bench, "numpy")
            steps["jax, NumPy labels"] = hand_step(env, bench, "numpy")
        first = {k: first_step(s) for k, s in steps.items()}
        losses = {k: last_loss(s) for k, s in steps.items()}
        log(
            f"train: {name}: first steps (s): "
            + ", ".join(f"{k} {v:.2f}" for k, v in first.items())
        )
        log(f"train: {name}: their losses: {losses}")
        t = time_steps(steps, cfg)
        s = {k: v["s"] for k, v in t.items()}
        raw[key] = {"name": name, "batch": batch, "first_step_s": first, "first_loss": losses,
                    "timings": t}  # fmt: skip
        ts = s.get("torch")
        rows.append([
            f"{name}, batch {batch}", ms(s["ours"]), ms(s["jax"]),
            f"**{ratio(s['ours'], s['jax'])}**", ms(ts),
            f"{ratio(ts, s['ours'])}x" if ts else "",
        ])  # fmt: skip
        log(f"train: {name}: " + ", ".join(f"{k} {ms(v)} ms" for k, v in s.items()))
        if key == "mlp":
            variants = (
                ("device arrays (`jax.device_put`)", "ours", "jax"),
                ("NumPy arrays", "ours, NumPy labels", "jax, NumPy labels"),
            )
            for lab, o, h in variants:
                label_rows.append([lab, ms(s[o]), ms(s[h]), f"**{ratio(s[o], s[h])}**"])
        res.update("train", _train_body(cfg, tname, rows, label_rows, notes), raw)
        del steps


def _train_body(
    cfg: Config, tname: str, rows: list[list[object]], label_rows: list[list[object]],
    notes: list[str],
) -> str:  # fmt: skip
    headers = ["Adam training step", "ours (`compiler.TrainStep`) ms", "hand-written `jax.jit` ms",
               "ours / JAX", f"{tname} ms", "PyTorch / ours"]  # fmt: skip
    text = (
        "One Adam step (lr 1e-3): forward, backward and update. *ours*: `compiler.TrainStep("
        "compiled.batched(over=..., grads='mean'), optax.adam(1e-3))`, one jitted call with "
        "donated parameters; *hand-written*: `jax.jit` of `value_and_grad` of the batched JAX "
        "loss of `benchmarks/_compiler_models.py` plus `optax.adam`, parameters and state "
        "donated, traced at `default_matmul_precision('float32')`; *PyTorch*: eager "
        "`zero_grad` / loss / `backward` / `torch.optim.Adam.step` (default, foreach). Labels "
        "as device arrays on both JAX sides. The block is `_compiler_models.transformer` "
        "(pre-LN, `x + MHA(LN(x))`, `+ fc2(GELU(fc1(LN(.))))`, mean squared error against a "
        "target, no causal mask).\n\n" + table(headers, rows)
    )
    if label_rows:
        text += (
            "\n\nIndex inputs of the MLP: labels given as device arrays or as NumPy arrays (a "
            "few distinct arrays in turn, as a training loop gives a new batch each step), ours "
            "and hand-written JAX alike (transfer against transfer).\n\n"
            + table(
                ["labels passed as", "ours ms", "hand-written JAX ms", "ours / JAX"], label_rows
            )
        )
    if notes:
        text += "\n\n" + "\n".join(f"- {n}" for n in notes)
    return text


# -- section 3: front end --------------------------------------------------------------------


def _tl_mlp(dims: tuple[int, ...], opts: Any) -> Any:
    from torchlean import nn

    rng = opts.rng("init")
    layers: list[Any] = []
    for k, (i, o) in enumerate(itertools.pairwise(dims)):
        layers.append(nn.Linear(i, o, rng=rng))
        if k < len(dims) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _tl_trainer(dims: tuple[int, ...], backend: str, device: str) -> tuple[Any, Any]:
    from torchlean import NatInput, Options, ScalarTrainer

    opts = Options(backend=backend, device=device, dtype="f32")
    model = _tl_mlp(dims, opts)

    def loss(ops, image, label):  # type: ignore[no-untyped-def]
        return ops.cross_entropy(model(ops, image), label)

    return ScalarTrainer(loss, model.parameters(), [(dims[0],), NatInput()], opts), model


def _mlp_batch(dims: tuple[int, ...], batch: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, dims[0])).astype(np.float32)
    return x, rng.integers(0, dims[-1], size=batch).astype(np.int32)


def _block_params(model: Any) -> None:
    jax.block_until_ready([p._device for p in model.parameters() if p._device is not None])


def trainer_step(
    env: Env, dims: tuple[int, ...], batch: int, backend: str, inputs: str, schedule: bool = False
) -> Step:
    """``ScalarTrainer.adam_step(x, y, lr=1e-3, batched=True)``; inputs as device arrays (the
    JAX paths) or NumPy arrays; with ``schedule``, a learning rate that differs at every step;
    waits on the parameters' device mirrors."""
    trainer, model = _tl_trainer(dims, backend, env.ours)
    x, y = _mlp_batch(dims, batch)
    if inputs == "device":
        x, y = env.put(x), env.put(y)
    count = itertools.count()

    def run() -> None:
        lr = LR / (1.0 + 1e-4 * next(count)) if schedule else LR
        trainer.adam_step(x, y, lr=lr, batched=True)

    return run, lambda: _block_params(model)


def trainstep_on_trainer_graph(env: Env, dims: tuple[int, ...], batch: int) -> Step:
    """``compiler.TrainStep`` on the graph a compiled ``ScalarTrainer`` records (same model)."""
    trainer, model = _tl_trainer(dims, "compiled", env.ours)
    g = trainer.graph
    over = [leaf.name for leaf in g.leaves if leaf.kind == "input"]
    over += [ix.name for ix in g.index_inputs]
    bg = compiler.compile(g, device=env.ours).batched(over=over, grads="mean")
    step = compiler.TrainStep(bg, optax.adam(LR))
    box = [step.init({p.name: np.asarray(p.value, np.float32) for p in model.parameters()})]
    x, y = _mlp_batch(dims, batch)
    (xname,) = [leaf.name for leaf in g.leaves if leaf.kind == "input"]
    (yname,) = [ix.name for ix in g.index_inputs]
    data, index = env.put({xname: x}), env.put({yname: y})

    def run() -> None:
        box[0], _ = step(box[0], data, index)

    return run, lambda: env.block(box[0].params)


def torch_mlp_step(env: Env, dims: tuple[int, ...], batch: int) -> Step:
    torch = env.torch
    torch.manual_seed(0)
    layers: list[Any] = []
    for k, (i, o) in enumerate(itertools.pairwise(dims)):
        layers.append(torch.nn.Linear(i, o))
        if k < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).to(env.torch_device)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = _mlp_batch(dims, batch)
    xt = torch.tensor(x, device=env.torch_device)
    yt = torch.tensor(y, dtype=torch.int64, device=env.torch_device)

    def run() -> None:
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(xt), yt).backward()
        opt.step()

    return run, env.sync


def _first_eager_step(dims: tuple[int, ...], batch: int, device: str, queue: Any) -> None:
    """In a fresh process: the eager trainer's first and second Adam steps (wall seconds, each
    waited for), after its construction; what the imports and construction took."""
    t0 = time.perf_counter()
    try:
        env = Env(compiler.resolve_device(device), device)
        trainer, model = _tl_trainer(dims, "eager", device)
        x, y = _mlp_batch(dims, batch)
        if device == "gpu":
            x, y = env.put(x), env.put(y)
        t1 = time.perf_counter()
        times = []
        for _ in range(3):
            t = time.perf_counter()
            trainer.adam_step(x, y, lr=LR, batched=True)
            _block_params(model)
            times.append(time.perf_counter() - t)
        queue.put({"setup_s": t1 - t0, "first_s": times[0], "second_s": times[1],
                   "third_s": times[2]})  # fmt: skip
    except Exception as exc:
        queue.put({"error": f"{type(exc).__name__}: {exc}"[:300]})


def section_frontend(res: Results) -> None:
    cfg, env = res.cfg, res.env
    dims, batch = cfg.mlp_dims, cfg.mlp_batch
    mname = f"MLP {'-'.join(map(str, dims))}"
    raw: dict[str, Any] = {}
    # on the CPU the eager trainer runs the NumPy rules: device arrays mean nothing to it
    eager_in = "device" if env.on_gpu else "numpy"
    log(f"frontend: {mname}, batch {batch}: building the trainers")
    steps: dict[str, Step] = {
        "ScalarTrainer compiled": trainer_step(env, dims, batch, "compiled", "device"),
        "ScalarTrainer compiled, NumPy inputs": trainer_step(env, dims, batch, "compiled",
                                                             "numpy"),
        "ScalarTrainer compiled, lr every step": trainer_step(env, dims, batch, "compiled",
                                                              "device", schedule=True),
        "TrainStep": trainstep_on_trainer_graph(env, dims, batch),
        "ScalarTrainer eager": trainer_step(env, dims, batch, "eager", eager_in),
    }  # fmt: skip
    if env.on_gpu:
        steps["ScalarTrainer eager, NumPy inputs"] = trainer_step(env, dims, batch, "eager",
                                                                  "numpy")  # fmt: skip
    if env.torch is not None:
        steps["PyTorch eager"] = torch_mlp_step(env, dims, batch)
    first = {k: first_step(s) for k, s in steps.items()}
    # the second step with a new rate compiles the step taking it as a vector: not timed
    first_step(steps["ScalarTrainer compiled, lr every step"])
    log("frontend: first steps (s): " + ", ".join(f"{k} {v:.2f}" for k, v in first.items()))
    t = time_steps(steps, cfg)
    s = {k: v["s"] for k, v in t.items()}
    raw.update(first_step_s=first, timings=t)
    log("frontend: " + ", ".join(f"{k} {ms(v)} ms" for k, v in s.items()))
    del steps
    # the eager first step in a fresh process (nothing cached, nothing compiled)
    log("frontend: eager first step in a fresh process")
    saved = {k: os.environ.get(k) for k in ("XLA_PYTHON_CLIENT_PREALLOCATE",)}
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"  # this process holds the GPU too
    try:
        fresh = in_fresh_process(_first_eager_step, (dims, batch, env.ours), budget=180)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    raw["fresh_process"] = fresh
    log(f"frontend: fresh process: {fresh}")
    tp = s.get("PyTorch eager")
    tname = f"PyTorch eager {env.torch_device}" + (", TF32 off" if env.cuda else "")
    rows = [
        ["ScalarTrainer, `backend='compiled'`", "device arrays", ms(s["ScalarTrainer compiled"]),
         "`compiler.TrainStep`, same graph", ms(s["TrainStep"]),
         f"**{ratio(s['ScalarTrainer compiled'], s['TrainStep'])}**", "1.2"],
        ["ScalarTrainer, `backend='compiled'`, a new lr every step", "device arrays",
         ms(s["ScalarTrainer compiled, lr every step"]), "`compiler.TrainStep`, same graph",
         ms(s["TrainStep"]), ratio(s["ScalarTrainer compiled, lr every step"], s["TrainStep"]),
         ""],
        ["ScalarTrainer, `backend='compiled'`", "NumPy arrays",
         ms(s["ScalarTrainer compiled, NumPy inputs"]), "`compiler.TrainStep`, device arrays",
         ms(s["TrainStep"]),
         ratio(s["ScalarTrainer compiled, NumPy inputs"], s["TrainStep"]), ""],
    ]  # fmt: skip
    for key, inputs in (("ScalarTrainer eager", eager_in),
                        ("ScalarTrainer eager, NumPy inputs", "numpy")):  # fmt: skip
        if key in s:
            label = "device arrays" if inputs == "device" else "NumPy arrays"
            rows.append(["ScalarTrainer, `backend='eager'`", label, ms(s[key]), tname, ms(tp),
                         f"**{ratio(s[key], tp)}**" if inputs == eager_in else ratio(s[key], tp),
                         "2" if inputs == eager_in else ""])  # fmt: skip
    if fresh is None:
        first_line = "the eager trainer's first step in a fresh process: no answer in 180 s."
    elif "error" in fresh:
        first_line = f"the eager trainer's first step in a fresh process failed: {fresh['error']}"
    else:
        first_line = (
            f"the eager trainer's first step in a fresh process: **{fresh['first_s']:.2f} s** "
            f"(target < 2 s), the second {fresh['second_s']:.3f} s, the third "
            f"{fresh['third_s']:.3f} s; building the trainer before them: "
            f"{fresh['setup_s']:.1f} s."
        )
    body = (
        f"`torchlean.ScalarTrainer` on the {mname}, batch {batch}, Adam "
        f"(`trainer.adam_step(x, y, lr=1e-3, batched=True)`; the schedule row passes "
        f"`lr=1e-3 / (1 + 1e-4 * i)` at step i), `Options(device='{env.ours}')`; "
        "timed in chunks of steps ending with a wait on the parameters' device mirrors. "
        "Inputs as device arrays (`jax.device_put`; PyTorch's already on its device) or as "
        "NumPy arrays (copied at every step)."
        + ("" if env.on_gpu else " On the CPU the eager trainer runs the NumPy reference rules "
           "(device arrays do not apply).")
        + "\n\n"
        + table(["ours", "inputs", "ms / step", "against", "ms / step", "ratio", "target"], rows)
        + "\n\n- First steps in this process (s): "
        + ", ".join(f"{k} {v:.2f}" for k, v in first.items())
        + f".\n- {first_line}"
    )  # fmt: skip
    res.update("frontend", body, raw)


# -- section 4: GPT-2-small ------------------------------------------------------------------


def section_gpt2(res: Results) -> None:
    cfg, env = res.cfg, res.env
    bench = gpt2(cfg.gpt_batch, **cfg.gpt)
    tokens = cfg.gpt_batch * cfg.gpt["seq"]
    n_params = sum(int(v.size) for v in bench.params.values())
    raw: dict[str, Any] = {"name": bench.name, "batch": cfg.gpt_batch, "tokens_per_step": tokens,
                           "params": n_params, "first_step_s": {}, "first_loss": {}}  # fmt: skip
    notes: list[str] = []
    tname = f"PyTorch eager {env.torch_device}" + (", TF32 off" if env.cuda else "")
    cname = f"`torch.compile` {env.torch_device}" + (", TF32 off" if env.cuda else "")
    labels = {"ours": "ours (`compiler.TrainStep`)", "jax": "hand-written `jax.jit`",
              "torch": tname, "torch.compile": cname}  # fmt: skip
    steps: dict[str, Step] = {}

    def add(key: str, make: Callable[[], Step]) -> None:
        log(f"gpt2: {key}: building and running the first step")
        try:
            st = make()
            raw["first_step_s"][key] = first_step(st)
            raw["first_loss"][key] = last_loss(st)
            steps[key] = st
            log(
                f"gpt2: {key}: first step {raw['first_step_s'][key]:.1f} s, "
                f"loss {raw['first_loss'][key]}"
            )
        except Exception as exc:
            msg = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
            notes.append(f"{labels[key]}: failed ({msg}); not in the table.")
            raw["first_step_s"][key] = None
            log(f"gpt2: {key}: failed: {msg}")
        res.update("gpt2", _gpt2_body(cfg, bench, raw, {}, labels, notes), raw)

    add("ours", lambda: ours_step(env, bench))
    add("jax", lambda: hand_step(env, bench))
    if env.torch is not None:
        add("torch", lambda: torch_step(env, bench))
        # on an H200 (16 cores) compiling GPT-2-small took 30 s; on a small CPU machine about
        # 2 minutes even at the --quick sizes
        need = 90 if env.cuda else 150
        if res.left() < need:
            notes.append(f"{cname}: skipped: {res.left():.0f} s of the `--budget` left (its "
                         f"compilation may need {need} s).")  # fmt: skip
        else:
            add("torch.compile", lambda: torch_step(env, bench, compiled=True))
    log("gpt2: timing")
    t = time_steps(steps, cfg, cfg.gpt_repeats, cfg.chunk_s * 3) if steps else {}
    raw["timings"] = t
    log("gpt2: " + ", ".join(f"{k} {ms(v['s'])} ms" for k, v in t.items()))
    res.update("gpt2", _gpt2_body(cfg, bench, raw, t, labels, notes), raw)


def _gpt2_body(
    cfg: Config, bench: Bench, raw: dict[str, Any], t: dict[str, Any], labels: dict[str, str],
    notes: list[str],
) -> str:  # fmt: skip
    tokens = raw["tokens_per_step"]
    ours = t.get("ours", {}).get("s")
    rows = []
    for key, label in labels.items():
        first = raw["first_step_s"].get(key)
        if key not in t and first is None:
            continue
        s = t.get(key, {}).get("s")
        loss = raw["first_loss"].get(key)
        rows.append([label, ms(s), f"{tokens / s:,.0f}" if s else "",
                     f"**{ratio(s, ours)}**" if s and ours and key != "ours" else "",
                     f"{first:.1f}" if first is not None else "",
                     f"{loss:.5f}" if loss is not None else ""])  # fmt: skip
    g = cfg.gpt
    return (
        f"{bench.name}, batch {raw['batch']} ({tokens} tokens per step, "
        f"{raw['params'] / 1e6:.1f} M parameters), one Adam step (lr 1e-3), float32. The same "
        "model on every side (`_compiler_models.gpt2`): token embeddings gathered by the token "
        f"ids plus learned position embeddings ({g['seq']} positions), {g['layers']} pre-LN "
        "blocks with causal multi-head attention and a tanh-GELU MLP (4x width), a final layer "
        "norm, the **LM head tied** to the token embeddings, the mean next-token cross-entropy. "
        "Not exactly GPT-2: the IR's `multi_head_attention` has no query/key/value biases, so"
        " no side has them (the output projection's bias is there, added after the op), and "
        f"the position table has the sequence's {g['seq']} rows, not 1024. Attention is "
        "written out (scores, mask, softmax) on the hand-written sides, no fused attention "
        "kernel. Ours is a graph of one sequence (token ids and flat label positions as index"
        " input vectors; `gather_rows_nat`, `multi_head_attention(mask=causal)`, "
        "`log_softmax`, `gather_vec_nat`) compiled and batched (`grads='mean'`) under "
        "`compiler.TrainStep`; `torch.compile` (default mode) compiles the loss, its backward"
        " through AOTAutograd, the optimizer runs eager. *first step*: wall time of the first"
        " step, compilation included.\n\n"
        + table(
            [
                "training step",
                "ms / step",
                "tokens / s",
                "their time / ours",
                "first step (s)",
                "loss of the first step",
            ],
            rows,
        )
        + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")
    )


# -- main ------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Results], None]] = {
    "precision": section_precision,
    "train": section_train,
    "frontend": section_frontend,
    "gpt2": section_gpt2,
}


def run(
    sections: list[str], *, quick: bool, out: Path | None, write_doc: bool, budget: float
) -> Results:
    cfg = QUICK if quick else FULL
    env = make_env()
    log(f"{env.describe()}; sections {', '.join(sections)}; budget {budget:.0f} s")
    if SYMENGINE_STUB:
        log("symengine is not installed: an empty module stands in (not used here)")
    res = Results(cfg, env, out, write_doc, budget, pending=list(sections))
    for s in sections:
        t0 = time.perf_counter()
        try:
            RUNNERS[s](res)
        except Exception as exc:  # keep what the other sections measure
            import traceback

            traceback.print_exc()
            res.raw.setdefault(s, {})["error"] = f"{type(exc).__name__}: {exc}"[:500]
            res.markdown[s] = (res.markdown.get(s, "") + f"\n\n_Section failed: "
                               f"{type(exc).__name__}: {str(exc)[:300]}_")  # fmt: skip
        res.pending.remove(s)
        res.raw.setdefault(s, {})["section_s"] = time.perf_counter() - t0
        res.save()
        log(f"{s}: done in {time.perf_counter() - t0:.1f} s")
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few repeats (CPU check)")
    ap.add_argument("--out", type=Path, help="write gpu.md and gpu.json (raw numbers) here")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {','.join(SECTIONS)}")  # fmt: skip
    ap.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run (default 420, --quick 110): torch.compile "
                    "is skipped when too little is left")  # fmt: skip
    ap.add_argument(
        "--install",
        type=Path,
        metavar="DIR",
        help="only put DIR/gpu.md (from an earlier run) into docs/benchmarks.md",
    )
    a = ap.parse_args(argv)
    if a.install is not None:
        install_text((a.install / f"{NAME}.md").read_text())
        print(f"installed {a.install / (NAME + '.md')} into {DOC}")
        return 0
    sections = [s.strip() for s in a.sections.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        ap.error(f"unknown sections {unknown}; choose from {', '.join(SECTIONS)}")
    budget = a.budget if a.budget is not None else (110.0 if a.quick else 420.0)
    res = run(sections, quick=a.quick, out=a.out, write_doc=not a.no_write, budget=budget)
    print(res.body(), flush=True)
    log(f"finished ({platform.node()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
