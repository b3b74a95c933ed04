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

The large-size mutants (``LARGE_MUTANTS``: 1024x1024 gradients, 64-channel convolutions,
attention with n = 128, d = 768) get the same checkers, except ``gradcheck`` in its default mode:
it builds the numerical Jacobian column by column, two forward evaluations per input element
(two million for a 1024x1024 matrix), which is infeasible, so its cell reads ``n/a`` past
:data:`GRADCHECK_MAX` input elements. Its ``fast_mode`` (a random projection of the Jacobian)
and ``check_grads`` (random tangents) run at every size. ``--large-only`` runs only those.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any
from unittest import mock

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
from tests.verify.mutants import LARGE_MUTANTS, MUTANTS, Mutant, applied  # noqa: E402

#: Past this many input elements gradcheck's default mode (a finite difference per element) is
#: not run: the element method's limit, about 2 minutes of gradcheck here.
GRADCHECK_MAX = 60000

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
        # When fast mode finds a mismatch it recomputes the full Jacobian in slow mode only to
        # word its error message (hours at 1024x1024); the detection is already made, so the
        # message is skipped.
        gc = sys.modules["torch.autograd.gradcheck"]
        try:
            with mock.patch.object(gc, "_run_slow_mode_and_get_error", lambda *a, **k: ""):
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


def run_checkers(m: Mutant) -> dict[str, tuple[bool | None, float, str]]:
    """Per checker: (found a problem, or None when not run; seconds; the cell of the table), on
    the graph as it is now (mutated or not)."""
    graph = m.graph()
    out: dict[str, tuple[bool | None, float, str]] = {}
    t = time.perf_counter()
    report = verify.verify_graph(graph)
    secs = time.perf_counter() - t
    failed = [c for _, c in report.failures() if c.result == "fail"]
    levels = sorted({c.level for c in failed if c.level})
    if report.verdict == "mismatch":
        cell = "**yes**" + (f" ({', '.join(levels)})" if levels else "")
    else:
        cell = "no" if report.verdict == "verified" else report.verdict
    out["verify"] = (report.verdict == "mismatch", secs, cell)
    h = Harness(graph, m.index)
    n_in = sum(int(np.size(v)) for v in h.primal())
    for name, fn in (
        ("gradcheck", lambda: h.gradcheck(False)),
        ("gradcheck fast", lambda: h.gradcheck(True)),
        ("check_grads", h.check_grads),
    ):
        if name == "gradcheck" and n_in > GRADCHECK_MAX:
            out[name] = (None, 0.0, "n/a")
            continue
        t = time.perf_counter()
        found = fn()
        out[name] = (found, time.perf_counter() - t, "**yes**" if found else "no")
    return out


CHECKERS = ("verify", "gradcheck", "gradcheck fast", "check_grads")


class Tally:
    """Detections, false alarms, runs and seconds per checker over one group of mutants."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.n = 0
        self.found = dict.fromkeys(CHECKERS, 0)
        self.alarms = dict.fromkeys(CHECKERS, 0)
        self.ran = dict.fromkeys(CHECKERS, 0)
        self.secs = dict.fromkeys(CHECKERS, 0.0)

    def add(self, res: dict, clean: dict) -> None:
        self.n += 1
        for c in CHECKERS:
            if res[c][0] is None:
                continue
            self.ran[c] += 1
            self.found[c] += bool(res[c][0])
            self.alarms[c] += bool(clean[c][0])
            self.secs[c] += res[c][1]

    def cells(self, what: str) -> list[str]:
        out = []
        for c in CHECKERS:
            if not self.ran[c]:
                out.append("n/a")
            elif what == "found":
                out.append(f"**{self.found[c]}/{self.n}**")
            elif what == "alarms":
                out.append(f"{self.alarms[c]}/{self.ran[c]}")
            else:
                out.append(f"{self.secs[c]:.1f}")
        return out

    def rows(self) -> list[list[str]]:
        return [[f"**detected** ({self.label})", "", "", *self.cells("found")],
                [f"false alarms ({self.label}, unmutated graphs)", "", "", *self.cells("alarms")],
                [f"seconds ({self.label})", "", "", *self.cells("secs")]]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a subset of the mutants")
    ap.add_argument("--large-only", action="store_true",
                    help="only the large-size mutants (printed, not written)")  # fmt: skip
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    small = [] if args.large_only else MUTANTS[::3] if args.quick else MUTANTS
    groups = [("small", small), ("large-size", LARGE_MUTANTS[::3] if args.quick else LARGE_MUTANTS)]
    rows: list[list[str]] = []
    tallies = []
    for label, mutants in groups:
        tally = Tally(label)
        for m in mutants:
            with applied(m):
                res = run_checkers(m)
            clean = run_checkers(m)  # the same graph without the bug: false alarms
            tally.add(res, clean)
            rows.append([m.name, m.where, m.note or "-", *(res[c][2] for c in CHECKERS)])
            print(f"{m.name:55s}", *(f"{c}={res[c][2]}" for c in CHECKERS),
                  f"({res['verify'][1]:.1f} s)", flush=True)  # fmt: skip
        if mutants:
            tallies.append(tally)
    for tally in tallies:
        rows += tally.rows()
    body = table(["mutant", "where", "only at", "torchlean-verify", "gradcheck", "gradcheck fast",
                  "check_grads"], rows)  # fmt: skip
    print(body)
    if args.no_write or args.large_only:
        return
    note = (
        "Finite-difference checkers run at seeded random normal inputs (float64; an "
        "out-of-range index value included); torchlean-verify needs no inputs, and its cell "
        "names the level that found the bug (tensor: one symbolic element for all; elements: "
        "element by element). Large-size mutants: `gradcheck` (default mode, a finite "
        f"difference per input element) is not run past {GRADCHECK_MAX} input elements "
        "(`n/a`); `gradcheck fast` (a random projection) and `check_grads` (random tangents) "
        "run at every size. " + ("Quick run: every third mutant. " if args.quick else "")
    )
    _write_doc(note.rstrip() + "\n\n" + body)
    summary = table(
        ["checker", *(f"detected ({t.label})" for t in tallies),
         *(f"false alarms ({t.label})" for t in tallies), "seconds"],
        [[c, *(f"{t.found[c]}/{t.n}" if t.ran[c] else "n/a" for t in tallies),
          *(f"{t.alarms[c]}/{t.ran[c]}" if t.ran[c] else "n/a" for t in tallies),
          f"{sum(t.secs[c] for t in tallies):.1f}"] for c in CHECKERS],
    )  # fmt: skip
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
