"""Verification power: which injected bugs each checker finds.

The mutants of ``tests/verify/mutants.py`` (wrong rules, wrong lowerings, a wrong tape) are run
through four checkers, side by side on the same graphs:

* **torchlean-verify** (``verify.verify_graph``): symbolic, exact;
* **torch.autograd.gradcheck** (float64, default tolerances), whose analytical gradient is our
  compiled tape VJP wrapped in a ``torch.autograd.Function``;
* the same in ``fast_mode`` (random projections);
* **jax.test_util.check_grads** (order 1, forward and reverse), whose JVP / VJP are our
  compiled ones through ``jax.custom_jvp`` / ``jax.custom_vjp``.

The finite-difference checkers are evaluated at seeded random normal inputs (what a user would
do), with index values that include an out-of-range one. Each checker is also run on the
unmutated graphs (false alarms). The table goes into ``docs/verification.md`` and a summary into
``docs/benchmarks.md``. ``--quick`` runs a subset.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from _report import table, write_section  # noqa: E402

import compiler  # noqa: E402
import torchlean_ir as tl  # noqa: E402
import verify  # noqa: E402
from tests.verify.mutants import MUTANTS, Mutant, applied  # noqa: E402

DOC = os.path.join(ROOT, "docs", "verification.md")
BEGIN, END = "<!-- BEGIN verify_power -->", "<!-- END verify_power -->"


class Harness:
    """The compiled functions of one graph as flat functions of the leaves with requires_grad
    (other leaves and index values fixed): what the finite-difference checkers see."""

    def __init__(self, graph: tl.GraphData, index: dict[str, Any], seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.graph = graph
        self.cg = compiler.compile(graph, dtype="f64")
        self.values = [rng.normal(size=leaf.type.shape) for leaf in graph.leaves]
        self.grad = [i for i, leaf in enumerate(graph.leaves) if leaf.requires_grad]
        runtime = [ix for ix in graph.index_inputs if ix.value is None]
        self.index = [np.asarray(index[ix.name], dtype=np.int32) for ix in runtime]
        self.fwd = self.cg.traceable("forward").fn
        self.jvp_fn = self.cg.traceable("jvp").fn
        self.vjp_fn = self.cg.traceable("vjp").fn

    def full(self, grad_values: Any) -> list[Any]:
        vals: list[Any] = list(self.values)
        for i, v in zip(self.grad, grad_values, strict=True):
            vals[i] = v
        return vals

    def primal(self) -> list[np.ndarray]:
        return [self.values[i] for i in self.grad]

    # -- torch ----------------------------------------------------------------------------
    def torch_function(self) -> Any:
        import torch

        h = self

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *xs: Any) -> Any:
                ctx.save_for_backward(*xs)
                vals = [x.detach().numpy() for x in xs]
                (out,) = h.fwd(*h.full(vals), *h.index)
                return torch.as_tensor(np.array(out, dtype=np.float64))

            @staticmethod
            def backward(ctx: Any, ct: Any) -> Any:
                vals = [x.detach().numpy() for x in ctx.saved_tensors]
                _, grads = h.vjp_fn(*h.full(vals), ct.detach().numpy(), *h.index)
                return tuple(torch.as_tensor(np.array(g, dtype=np.float64)) for g in grads)

        return Fn.apply

    def gradcheck(self, fast: bool) -> bool:
        """True when gradcheck finds the bug (reports a mismatch)."""
        import torch

        xs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in self.primal()]
        try:
            ok = torch.autograd.gradcheck(
                self.torch_function(), xs, fast_mode=fast, raise_exception=False
            )
        except Exception:
            return True
        return not ok

    # -- jax -------------------------------------------------------------------------------
    def check_grads(self) -> bool:
        """True when check_grads (forward and reverse) finds the bug."""
        from jax.test_util import check_grads

        h = self

        @jax.custom_vjp
        def f_rev(*xs: Any) -> Any:
            return h.fwd(*h.full(xs), *h.index)[0]

        def f_rev_fwd(*xs: Any) -> Any:
            return f_rev(*xs), xs

        def f_rev_bwd(xs: Any, ct: Any) -> Any:
            _, grads = h.vjp_fn(*h.full(xs), ct, *h.index)
            return tuple(grads)

        f_rev.defvjp(f_rev_fwd, f_rev_bwd)

        @jax.custom_jvp
        def f_fwd(*xs: Any) -> Any:
            return h.fwd(*h.full(xs), *h.index)[0]

        @f_fwd.defjvp
        def f_fwd_jvp(xs: Any, ts: Any) -> Any:
            outs, touts = h.jvp_fn(*h.full(xs), *ts, *h.index)
            return outs[0], touts[0]

        args = tuple(h.primal())
        try:
            check_grads(f_rev, args, order=1, modes=("rev",))
            check_grads(f_fwd, args, order=1, modes=("fwd",))
        except Exception:  # a mismatch, or a mutated rule JAX cannot even trace: caught
            return True
        return False


def run_checkers(m: Mutant) -> dict[str, tuple[bool, float]]:
    """Per checker: (found a problem, seconds), on the graph as it is now (mutated or not)."""
    graph = m.graph()
    out: dict[str, tuple[bool, float]] = {}
    t = time.perf_counter()
    report = verify.verify_graph(graph)
    out["verify"] = (report.verdict == "mismatch", time.perf_counter() - t)
    h = Harness(graph, m.index)
    for name, fn in (
        ("gradcheck", lambda: h.gradcheck(False)),
        ("gradcheck fast", lambda: h.gradcheck(True)),
        ("check_grads", h.check_grads),
    ):
        t = time.perf_counter()
        out[name] = (fn(), time.perf_counter() - t)
    return out


CHECKERS = ("verify", "gradcheck", "gradcheck fast", "check_grads")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset of the mutants")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    mutants = MUTANTS[::3] if args.quick else MUTANTS
    rows, found, alarms = [], dict.fromkeys(CHECKERS, 0), dict.fromkeys(CHECKERS, 0)
    secs = dict.fromkeys(CHECKERS, 0.0)
    for m in mutants:
        with applied(m):
            res = run_checkers(m)
        clean = run_checkers(m)  # the same graph without the bug: false alarms
        for c in CHECKERS:
            found[c] += res[c][0]
            alarms[c] += clean[c][0]
            secs[c] += res[c][1]
        rows.append(
            [m.name, m.where, m.note or "-", *("**yes**" if res[c][0] else "no" for c in CHECKERS)]
        )
        print(f"{m.name:45s}", *(f"{c}={'Y' if res[c][0] else '-'}" for c in CHECKERS), flush=True)
    n = len(mutants)
    rows.append(["**detected**", "", "", *(f"**{found[c]}/{n}**" for c in CHECKERS)])
    rows.append(
        ["false alarms (unmutated graphs)", "", "", *(f"{alarms[c]}/{n}" for c in CHECKERS)]
    )
    rows.append(["seconds (all mutants)", "", "", *(f"{secs[c]:.1f}" for c in CHECKERS)])
    body = table(["mutant", "where", "only at", "torchlean-verify", "gradcheck", "gradcheck fast",
                  "check_grads"], rows)  # fmt: skip
    print(body)
    if args.no_write:
        return
    note = (
        "Finite-difference checkers run at seeded random normal inputs (float64; an "
        "out-of-range index value included); torchlean-verify needs no inputs. "
        + ("Quick run: every third mutant. " if args.quick else "")
    )
    _write_doc(note.rstrip() + "\n\n" + body)
    summary = table(
        ["checker", "detected", "false alarms", "seconds"],
        [[c, f"{found[c]}/{n}", f"{alarms[c]}/{n}", f"{secs[c]:.1f}"] for c in CHECKERS],
    )
    write_section("verify_power", "Verification power (mutants found)",
                  f"{note}Full table in `docs/verification.md`.\n\n{summary}")  # fmt: skip


def _write_doc(body: str) -> None:
    from _report import machine

    stamp = time.strftime("%Y-%m-%d")
    section = (f"{BEGIN}\n_Run by `benchmarks/verify_power.py` on {stamp}; machine: "
               f"{machine()}._\n\n{body.strip()}\n{END}")  # fmt: skip
    text = "# Verification\n"
    if os.path.exists(DOC):
        with open(DOC) as f:
            text = f.read()
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        text = pre + section + post
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    with open(DOC, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
