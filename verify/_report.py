"""The verification report: small frozen records, a verdict, JSON and a readable table.

A :class:`Report` holds one :class:`NodeReport` per node (the checks of its op signature, shared
with every node of the same signature) and the graph-level checks (wiring, end to end). Every
:class:`Check` names its method: ``exact`` (proved), ``probabilistic`` (random rational points at
>= 50 digits, or a sample of elements), or ``not verified``. The verdict is ``verified`` only when
every check passed exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Method = Literal["exact", "probabilistic", "not verified"]
Result = Literal["pass", "fail", "undecided"]
Verdict = Literal["verified", "mismatch", "undecided"]
Link = Literal["rule", "lowering", "compiled", "wiring", "end-to-end", "function"]

#: Exit codes of ``torchlean-verify`` by verdict (2 is bad input or usage).
EXIT_CODES: dict[str, int] = {"verified": 0, "mismatch": 1, "undecided": 3}

#: Version of the ``--json`` schema (docs/verification.md).
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Counterexample:
    """A concrete point where a check fails: inputs (exact values, by name), the element that
    differs, the value the reference (or the derivative) gives and the value checked."""

    check: str
    element: str
    inputs: dict[str, str]
    expected: str
    got: str
    evidence: str
    node: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "node": self.node,
            "element": self.element,
            "inputs": dict(self.inputs),
            "expected": self.expected,
            "got": self.got,
            "evidence": self.evidence,
        }

    def describe(self) -> str:
        where = f"node {self.node}: " if self.node is not None else ""
        shown = list(self.inputs.items())
        ins = ", ".join(f"{k} = {v}" for k, v in shown[:12])
        if len(shown) > 12:
            ins += f", ... ({len(shown)} inputs)"
        return (
            f"{where}{self.check}: {self.element} expected {self.expected}, got {self.got} "
            f"at {ins or 'any input'} ({self.evidence})"
        )


@dataclass(frozen=True)
class Check:
    """One check and its outcome."""

    link: Link
    name: str
    method: Method
    result: Result
    coverage: str = ""
    how: str = ""
    counterexample: Counterexample | None = None
    seconds: float = 0.0
    #: how the elements were covered: ``"tensor"`` (one symbolic element for all),
    #: ``"elements"`` (element by element), or ``""`` (not element-wise: wiring)
    level: str = ""

    @property
    def label(self) -> str:
        """The method with its level, e.g. ``exact (tensor)``."""
        return f"{self.method} ({self.level})" if self.level else self.method

    def to_json(self) -> dict[str, Any]:
        return {
            "link": self.link,
            "name": self.name,
            "method": self.method,
            "level": self.level,
            "result": self.result,
            "coverage": self.coverage,
            "how": self.how,
            "seconds": round(self.seconds, 4),
            "counterexample": None
            if self.counterexample is None
            else self.counterexample.to_json(),
        }


def worst(values: Iterable[Any], order: tuple[Any, ...]) -> Any:
    """The first of ``order`` (worst first) among ``values``; the last (the best) if none is."""
    present = set(values)
    return next((v for v in order if v in present), order[-1])


def combine_method(checks: Iterable[Check]) -> Method:
    """The weakest method among the checks (``not verified`` < ``probabilistic`` < ``exact``)."""
    return worst((c.method for c in checks), ("not verified", "probabilistic", "exact"))


def combine_result(checks: Iterable[Check]) -> Result:
    return worst((c.result for c in checks), ("fail", "undecided", "pass"))


@dataclass(frozen=True)
class NodeReport:
    """The checks that cover one node: its op signature's rule and lowering checks."""

    node: int
    op: str
    signature: str
    checks: tuple[Check, ...]
    shared_with: int | None = None  # the first node of the same signature (results reused)

    @property
    def result(self) -> Result:
        return combine_result(self.checks)

    @property
    def method(self) -> Method:
        if self.result == "fail":
            return next(c.method for c in self.checks if c.result == "fail")
        return combine_method(self.checks)

    @property
    def label(self) -> str:
        """The method with the levels it rests on, e.g. ``exact (tensor)``."""
        levels = sorted({c.level for c in self.checks if c.level})
        return f"{self.method} ({', '.join(levels)})" if levels else self.method

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op": self.op,
            "signature": self.signature,
            "result": self.result,
            "method": self.method,
            "label": self.label,
            "shared_with": self.shared_with,
            "checks": [c.to_json() for c in self.checks],
        }


@dataclass(frozen=True)
class Report:
    """The outcome of verifying one graph."""

    graph: str
    dtype: str
    nodes: tuple[NodeReport, ...]
    graph_checks: tuple[Check, ...]
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the precision of the compiled matrix products and convolutions (``compiler._precision``)
    matmul_precision: str = "float32"
    #: what was verified: ``"graph"`` (nodes are graph nodes) or ``"function"`` (a JAX
    #: function, :func:`verify.verify_function`: nodes are its custom rules)
    subject: str = "graph"

    @property
    def all_checks(self) -> list[Check]:
        seen: set[int] = set()
        out = []
        for n in self.nodes:
            for c in n.checks:
                if id(c) not in seen:
                    seen.add(id(c))
                    out.append(c)
        return out + list(self.graph_checks)

    @property
    def verdict(self) -> Verdict:
        checks = self.all_checks
        r = combine_result(checks)
        if r == "fail":
            return "mismatch"
        if r == "undecided" or combine_method(checks) != "exact":
            return "undecided"
        return "verified"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def counterexamples(self) -> list[Counterexample]:
        """The counterexamples of the failed checks, each with the (first) node it concerns."""
        if self.subject == "function":  # a custom rule is named by its label, not a number
            labels = {n.node: n.signature.split(": (")[0] for n in self.nodes}
            return [
                replace(c.counterexample, check=f"{labels[node]}: {c.counterexample.check}")
                if node is not None else c.counterexample
                for node, c in self.failures()
                if c.counterexample is not None
            ]  # fmt: skip
        return [
            replace(c.counterexample, node=node)
            for node, c in self.failures()
            if c.counterexample is not None
        ]

    def failures(self) -> list[tuple[int | None, Check]]:
        out: list[tuple[int | None, Check]] = []
        done: set[int] = set()
        for n in self.nodes:
            for c in n.checks:
                if c.result != "pass" and id(c) not in done:
                    done.add(id(c))
                    out.append((n.node, c))
        out += [(None, c) for c in self.graph_checks if c.result != "pass"]
        return out

    def where(self, node: int | None) -> str:
        """How a failure names what it concerns: a node, or a function's custom rule by label."""
        if self.subject == "function":
            return "function" if node is None else self.nodes[node].signature.split(": (")[0]
        return f"node {node}" if node is not None else "graph"

    def summary(self) -> str:
        """One line: the verdict and what it rests on."""
        checks = self.all_checks
        counts = {m: sum(c.method == m for c in checks) for m in ("exact", "probabilistic")}
        nv = sum(c.method == "not verified" for c in checks)
        sigs = len({n.signature for n in self.nodes})
        failed = sum(c.result == "fail" for c in checks)
        failures = f", {failed} failed" if failed else ""  # how each was decided follows
        units = (f"{len(self.nodes)} custom rules" if self.subject == "function"
                 else f"{len(self.nodes)} nodes ({sigs} signatures)")  # fmt: skip
        text = (
            f"{self.verdict.upper()}: {units}, "
            f"{len(checks)} checks{failures}: {counts['exact']} exact, {counts['probabilistic']} "
            f"probabilistic, {nv} not verified; {self.seconds:.2f} s"
        )
        if self.verdict == "mismatch":
            ce = self.counterexamples
            if ce:
                text += "\n" + ce[0].describe()
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "torchlean-verify-report",
            "version": SCHEMA_VERSION,
            "subject": self.subject,
            "graph": self.graph,
            "dtype": self.dtype,
            "matmul_precision": self.matmul_precision,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "summary": self.summary().splitlines()[0],
            "notes": list(self.notes),
            "nodes": [n.to_json() for n in self.nodes],
            "graph_checks": [c.to_json() for c in self.graph_checks],
            "counterexamples": [c.to_json() for c in self.counterexamples],
        }

    def dumps(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_json(), indent=indent)

    def __str__(self) -> str:
        return render_text(self)


def render_text(report: Report, *, max_rows: int = 60) -> str:
    """A plain-text table (one row per signature), the notes, the failures and the verdict."""
    if report.subject == "function":
        lines = [f"function {report.graph} ({report.dtype})"]
    else:
        lines = [f"graph {report.graph} ({report.dtype}, matmul precision "
                 f"{report.matmul_precision})"]  # fmt: skip
    firsts = [n for n in report.nodes if n.shared_with is None]
    for n in firsts[:max_rows]:
        same = [m.node for m in report.nodes if m.shared_with == n.node]
        nodes = f"{n.node}" + (f" (+{len(same)})" if same else "")
        if report.subject == "function":
            lines.append(f"  {n.op:<15} {n.signature:<40} {n.result:<9} {n.label}")
            continue
        lines.append(f"  node {nodes:<10} {n.signature:<40} {n.result:<9} {n.label}")
    if len(firsts) > max_rows:
        lines.append(f"  ... {len(firsts) - max_rows} more signatures")
    for c in report.graph_checks:
        lines.append(f"  {c.link:<15} {c.name:<40} {c.result:<9} {c.method}  {c.coverage}")
    lines += [f"  note: {note}" for note in report.notes]
    for node, c in report.failures():
        lines.append(f"  {c.result.upper()} {report.where(node)}: {c.name}: {c.how}")
        if c.counterexample is not None:
            lines.append("    counterexample: " + c.counterexample.describe())
    lines.append(report.summary().splitlines()[0])
    return "\n".join(lines)
