"""Rule certificates with symbolic sizes: an op's rules proved for every size of a pattern.

The rules run at tensor level on argument shapes whose sizes are symbols
(:class:`verify._dims.Dim`), and the rule checks (``forward = sym``, ``jvp = derivative``,
``vjp = adjoint``) quantify over the size symbols as over the element indices. A rule that
looks at a size's value raises :class:`verify._dims.SizeDependent`; that size is then made less
general (every size of one residue when the rule divided it, at least the signature's, then
fixed) and the proof runs again. The certificate is keyed by op, attributes, dtypes, the rules'
fingerprint (:func:`verify._certify._rules_fingerprint`) and the size pattern, and covers every
signature its plan allows; kink points are drawn per shape, so an op's ``kinks`` check runs at
each signature. ``docs/verification.md`` ("For every size: symbolic sizes") says what is proved
and trusted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import symengine as se

import torchlean_ir as tl

from . import _certify
from . import terms as T
from ._attempt import tensor_attempt
from ._certify import _attrs_key, _rules_fingerprint
from ._dims import Dim, SizeDependent
from ._report import Check
from ._sig import Signature
from ._tbackend import TENSOR
from ._tchecks import (
    NotTensor,
    Partial,
    _run,
    as_t,
    check_signature_tensor,
    kinks_check_tensor,
    setup,
)

#: CPU seconds the proofs with symbolic sizes of one signature may take together (once per op,
#: attributes, size pattern and plan); past it there is no certificate and the signature is
#: proved at its own shape.
SIZED_BUDGET_S = 30.0


#: How one named size is proved: ``("ge", lo)`` every size ``>= lo``; ``("mod", m, r, lo)``
#: every size ``m u + r`` with ``u >= lo`` (a rule divides it by a stride ``m``); ``("eq", v)``
#: the size ``v`` only.
Mode = tuple[Any, ...]


def _covers(mode: Mode, value: int) -> bool:
    if mode[0] == "ge":
        return value >= mode[1]
    if mode[0] == "mod":
        _, m, r, lo = mode
        return value % m == r and value // m >= lo
    return value == mode[1]


AttrPattern = tuple[tuple[str, tuple[Any, ...]], ...]


def shape_attrs(sig: Signature, values: dict[str, int]
                ) -> tuple[AttrPattern, dict[str, int]] | None:  # fmt: skip
    """The attributes of kind ``shape`` (a target shape) with each size other than 1 (and -1,
    "the rest") named like the arguments' sizes, new values getting new names; and the values
    with those added. ``None`` for an empty axis."""
    op = tl.get_op(sig.op)
    names = {v: n for n, v in values.items()}
    values = dict(values)
    out = []
    for name, v in sorted(dict(sig.attrs).items()):
        spec = op.attrs.get(name)
        if spec is None or spec.kind != "shape" or not isinstance(v, tuple | list):
            continue
        row: list[Any] = []
        for d in v:
            d = int(d)
            if d == 0:
                return None
            if d in (1, -1):
                row.append(d)
                continue
            if d not in names:
                names[d] = f"n{len(names)}"
                values[names[d]] = d
            row.append(names[d])
        out.append((name, tuple(row)))
    return tuple(out), values


def _symbol(name: str, mode: Mode) -> Any:
    """The size symbol of ``name`` under ``mode`` (``None`` for a fixed size); its name carries
    the mode, so a symbol always means one range."""
    base = f"_N{name[1:]}"
    if mode[0] == "ge":
        return T.size_symbol(base + ("" if mode[1] == 1 else f"_ge{mode[1]}"), mode[1])
    if mode[0] == "mod":
        _, m, r, lo = mode
        return T.size_symbol(f"{base}_m{m}r{r}" + ("" if lo == 1 else f"_ge{lo}"), lo)
    return None


def _size(name: str, mode: Mode) -> Any:
    """The shape entry of ``name`` under ``mode``: a :class:`verify._dims.Dim` or an int."""
    if mode[0] == "eq":
        return mode[1]
    u = _symbol(name, mode)
    return Dim(u) if mode[0] == "ge" else Dim(mode[1] * u + mode[2])


def _value_of_symbol(mode: Mode, value: int) -> int:
    """The value of ``name``'s symbol when the size is ``value``."""
    return value if mode[0] == "ge" else (value - mode[2]) // mode[1]


def _generalise_less(mode: Mode, value: int, divisor: int | None) -> Mode | None:
    """The next, less general mode for a size whose value a rule depended on (``divisor``:
    it divided the size by that); ``None`` when it is already fixed."""
    if divisor is not None and divisor > 1 and mode[0] == "ge" and value // divisor >= 1:
        return ("mod", divisor, value % divisor, 1)
    if divisor is not None and divisor > 1 and mode[0] == "mod" and divisor % mode[1] == 0 and (
            divisor != mode[1]) and value // divisor >= 1:  # fmt: skip
        return ("mod", divisor, value % divisor, 1)
    if mode[0] == "ge" and mode[1] < value:
        return ("ge", value)
    if mode[0] == "mod" and mode[3] < value // mode[1]:
        return ("mod", mode[1], mode[2], value // mode[1])
    if mode[0] != "eq":
        return ("eq", value)
    return None


@dataclass(frozen=True)
class SizedCertificate:
    """The rule checks of ``op`` with ``attrs`` proved with symbolic sizes: for the argument
    shapes ``pattern`` (each entry ``1`` or a size's name), every size each name's mode in
    ``plan`` allows (:data:`Mode`)."""

    op: str
    attrs: tuple
    rules: str
    pattern: tuple[tuple[Any, ...], ...]
    plan: tuple[tuple[str, Mode], ...]
    #: Shape attributes (a target shape) with their sizes named like the arguments'.
    attr_pattern: AttrPattern
    out: tuple[Any, ...]  # the forward's shape in the size symbols
    checks: tuple[Check, ...]

    def covers(self, values: dict[str, int]) -> bool:
        """Whether the sizes ``values`` (by name) are among those proved."""
        return all(_covers(mode, values[n]) for n, mode in self.plan)

    def describe(self) -> str:
        parts = []
        for n, mode in self.plan:
            if mode[0] == "ge":
                parts.append(f"{n} >= {mode[1]}")
            elif mode[0] == "mod":
                _, m, r, lo = mode
                parts.append(f"{n} = {m} u + {r} (u >= {lo})")
            else:
                parts.append(f"{n} = {mode[1]}")
        return ", ".join(parts)


#: Proof attempts with symbolic sizes at most, per signature and pattern, besides one per size
#: name: each one a size's value decided makes that size less general
#: (:func:`_generalise_less`) for the next.
SIZED_ATTEMPTS = 8

#: Certificates, reasons there is none, or the sizes a rule depended on, by key and plan.
_SIZED: dict[tuple, Any] = {}


Position = tuple[int, int]  # (argument, axis)


def size_pattern(sig: Signature, refine: bool = False
                 ) -> tuple[tuple[tuple[Any, ...], ...], dict[str, int]] | None:  # fmt: skip
    """The argument shapes with every size other than 1 replaced by a size's name, and the
    values; ``None`` for an empty axis. Names are given in order of appearance, one per
    distinct value; with ``refine``, sizes of equal value get one name only where the shape
    rule ties them (:func:`_roles`: a 3x3 kernel beside a 3x3 image, or the two sides of a
    square matrix, get names of their own). A proof covers this signature and every other
    whose sizes with one name are equal."""
    where: dict[int, list[Position]] = {}
    for i, t in enumerate(sig.arg_types):
        for a, d in enumerate(t.shape):
            if d == 0:
                return None
            if d != 1:
                where.setdefault(d, []).append((i, a))
    group: dict[Position, int] = {}
    for v, places in where.items():
        for k, part in enumerate(_roles(sig, v, places) if refine else [places]):
            for p in part:
                group[p] = k
    names: dict[tuple[int, int], str] = {}
    out = []
    for i, t in enumerate(sig.arg_types):
        row: list[Any] = []
        for a, d in enumerate(t.shape):
            if d == 1:
                row.append(1)
                continue
            key = (d, group[(i, a)])
            if key not in names:
                names[key] = f"n{len(names)}"
            row.append(names[key])
        out.append(tuple(row))
    return tuple(out), {n: d for (d, _), n in names.items()}


def _roles(sig: Signature, value: int, places: list[Position]) -> list[list[Position]]:
    """``places`` (the axes of size ``value``) cut into the groups the shape rule ties: an axis
    whose size the rule lets change alone is a group of its own, two that change together a
    group of two (a matmul's contracted axes), the rest one group. The shape rule is the
    oracle (sizes ``2 value`` and ``value + 1`` tried); a group that is too fine only makes a
    proof fail, after which the signature's coarse pattern is tried."""
    if len(places) < 2:
        return [places]
    op = tl.get_op(sig.op)

    def accepts(changed: tuple[Position, ...]) -> bool:
        for new in (2 * value, value + 1):
            types = tuple(
                replace(t, shape=tuple(new if (i, a) in changed else d
                                       for a, d in enumerate(t.shape)))
                for i, t in enumerate(sig.arg_types))  # fmt: skip
            try:
                op.infer_type(types, sig.index_types, sig.attrs)
                return True
            except Exception:
                continue
        return False

    alone = [p for p in places if accepts((p,))]
    rest = [p for p in places if p not in alone]
    parts: list[list[Position]] = [[p] for p in alone]
    while rest:
        p = rest.pop(0)
        mate = next((q for q in rest if accepts((p, q))), None)
        if mate is None:
            parts.append([p])
            continue
        rest.remove(mate)
        parts.append([p, mate])
    singles = [part for part in parts if len(part) == 1 and part[0] not in alone]
    if singles:  # tied to several others at once: one group, as without refinement
        parts = [part for part in parts if part not in singles]
        parts.append([part[0] for part in singles])
    return sorted(parts)


def _patterns(sig: Signature) -> list[tuple[tuple[tuple[Any, ...], ...], dict[str, int]]]:
    """The size patterns to prove with, most general first (:func:`size_pattern`)."""
    out = []
    op = tl.get_op(sig.op)
    # a target shape attribute names its sizes by value, like the arguments' (shape_attrs)
    shaped = any(spec.kind == "shape" for spec in op.attrs.values())
    for refine in (False,) if shaped else (True, False):
        pat = size_pattern(sig, refine)
        if pat is None:
            return []
        if pat not in out:
            out.append(pat)
    return out


def sized_certificate(sig: Signature) -> SizedCertificate | str:
    """A certificate that covers ``sig``'s sizes, proved with symbolic sizes for its op,
    attributes and size pattern (once per plan; the role pattern first, then the coarse one,
    :func:`_patterns`), or why there is none."""
    op = tl.get_op(sig.op)
    if op.index_args or op.needs_position:
        return "index inputs or a position-dependent rule"
    patterns = _patterns(sig)
    if not patterns:
        return "an empty axis"
    why = ""
    end = time.process_time() + SIZED_BUDGET_S  # for every pattern and attempt together
    for pattern, values in patterns:
        found = _sized_for(sig, op, pattern, values, end)
        if not isinstance(found, str):
            return found
        why = why or found
    return why


def _sized_for(sig: Signature, op: tl.Op, pattern: tuple, values: dict[str, int],
               end: float) -> SizedCertificate | str:  # fmt: skip
    """:func:`sized_certificate` for one size pattern (CPU time until ``end``)."""
    if not values:
        return "no size other than 1"
    shaped = shape_attrs(sig, values)
    if shaped is None:
        return "an empty axis"
    attr_pattern, values = shaped
    plain = {k: v for k, v in dict(sig.attrs).items() if k not in dict(attr_pattern)}
    key = (sig.op, _attrs_key(plain), attr_pattern, _rules_fingerprint(op),
           tuple(t.dtype for t in sig.arg_types), pattern)  # fmt: skip
    for (k, _), hit in _SIZED.items():
        if k == key and isinstance(hit, SizedCertificate) and hit.covers(values):
            return hit
    modes: dict[str, Mode] = {n: ("ge", 1) for n in values}
    why = "no attempt"
    for _ in range(SIZED_ATTEMPTS + len(values)):
        left = end - time.process_time()
        if left <= 0:
            why = f"no proof with symbolic sizes within {SIZED_BUDGET_S:g} s"
            break
        if all(m[0] == "eq" for m in modes.values()):
            break  # every size fixed: a proof at this shape, not for every size
        plan = tuple(sorted(modes.items()))
        found = _SIZED.get((key, plan))
        if found is None:
            found = _prove_sized(op, sig, key, pattern, attr_pattern, plan, left)
            if not (isinstance(found, str) and "within" in found):
                _SIZED[(key, plan)] = found  # (a proof cut short may fit another time)
        if not isinstance(found, tuple):
            return found
        # the rules looked at these sizes' values: prove again with them less general
        symbols, divisor, fixed = found
        names = [n for n, m in plan if m[0] != "eq" and _symbol(n, m) in symbols]
        if not names:
            break
        step = names
        if len(names) > 1 and divisor is None and not fixed:
            # several sizes met in one decision (a reshape that merges them): the innermost
            # first, so that the outer ones may stay symbolic ((n0, 3) -> (3 n0,) is linear)
            step = [max(names, key=lambda n: int(n[1:]))]
        for n in step:
            # a size used as a Python integer (a kernel size in range()) can only be fixed
            nxt = ("eq", values[n]) if fixed else _generalise_less(modes[n], values[n], divisor)
            if nxt is not None:
                modes[n] = nxt
        why = f"the rules depend on the values of {', '.join(names)}"
    return f"not proved with symbolic sizes: {why}"


Attempt = SizedCertificate | str | tuple[frozenset, int | None, bool]


def _prove_sized(op: tl.Op, sig: Signature, key: tuple, pattern: tuple, attr_pattern: tuple,
                 plan: tuple, seconds: float) -> Attempt:  # fmt: skip
    """The certificate under ``plan``, why there is none, or the size symbols whose values a
    rule depended on with the divisor it used (the caller makes them less general)."""
    entry = {n: _size(n, mode) for n, mode in plan}
    syms = [_symbol(n, mode) for n, mode in plan if mode[0] != "eq"]
    shapes = [tuple(entry[d] if isinstance(d, str) else d for d in row) for row in pattern]
    attrs = {name: tuple(entry[d] if isinstance(d, str) else d for d in row)
             for name, row in attr_pattern}  # fmt: skip
    try:
        with T.budget(seconds):
            checks = check_signature_tensor(sig, kinks=False, shapes=shapes, sizes=syms,
                                            attrs=attrs)  # fmt: skip
            st = setup(sig, shapes=shapes, attrs=attrs)
            F = as_t(_run(op.symbolic, "symbolic forward", TENSOR, *st.X, **st.params))
    except SizeDependent as e:
        return e.symbols, e.divisor, e.fixed
    except (NotTensor, Partial) as e:
        return f"not proved with symbolic sizes: {e}"
    except T.OutOfTime:
        return f"not proved with symbolic sizes within {seconds:.3g} s"
    except Exception as e:  # the rules or the algebra refused the symbolic sizes
        return f"not proved with symbolic sizes: {type(e).__name__}: {e}"
    for c in checks:
        if (c.result, c.method) != ("pass", "exact"):
            return f"{c.name} did not pass exactly with symbolic sizes"
    out = tuple(d.expr if isinstance(d, Dim) else se.Integer(d) for d in F.shape)
    return SizedCertificate(sig.op, key[1], key[3], pattern, plan, attr_pattern, out,
                            tuple(checks))  # fmt: skip


def _values(sig: Signature, pattern: tuple) -> dict[str, int]:
    """The value of each name of ``pattern`` in ``sig``'s argument shapes."""
    return {n: int(d) for row, t in zip(pattern, sig.arg_types, strict=True)
            for n, d in zip(row, t.shape, strict=True) if isinstance(n, str)}  # fmt: skip


def reuse_sized(sig: Signature, kinks: bool) -> list[Check] | None:
    """The rule checks of ``sig`` from a certificate proved with symbolic sizes that covers it
    (the kinks check, if any, run at this shape), or ``None``."""
    cert = sized_certificate(sig)
    if isinstance(cert, str):
        return None
    values = _values(sig, cert.pattern)
    _, values = shape_attrs(sig, values)  # type: ignore[misc]
    sub = {_symbol(n, m): se.Integer(_value_of_symbol(m, values[n]))
           for n, m in cert.plan if m[0] != "eq"}  # fmt: skip
    try:
        want = tl.get_op(sig.op).infer_type(sig.arg_types, sig.index_types, sig.attrs).shape
    except Exception:
        return None
    got = tuple(se.expand(e.xreplace(sub)) for e in cert.out)
    if got != tuple(se.Integer(d) for d in want):
        return None  # the forward's shape is not the shape rule's here: prove at this shape
    here = ", ".join(f"{n}={values[n]}" for n, m in cert.plan if m[0] != "eq")
    shapes = " ".join("(" + ",".join(map(str, row)) + ")" for row in cert.pattern)
    shapes += "".join(f", {name}=(" + ",".join(map(str, row)) + ")"
                      for name, row in cert.attr_pattern)  # fmt: skip
    note = (f"certificate: proved with symbolic sizes, argument shapes {shapes} for every "
            f"{cert.describe()} (here {here})")  # fmt: skip
    checks = [replace(c, how=f"{c.how}; {note}", seconds=0.0) for c in cert.checks]
    if kinks and tl.get_op(sig.op).kinks_rule is not None:
        # kink points are drawn at a concrete shape: that check runs at this one
        try:
            kink = tensor_attempt(sig, "tensor", kinks_check_tensor, sig)
        except NotTensor:
            return None
        if kink is None:
            return None
        checks.append(kink)
    return checks


def reuse(sig: Signature, *, kinks: bool = True) -> list[Check] | None:
    """The rule checks of ``sig`` from its op's certificate (elementwise,
    :mod:`verify._certify`, else one proved with symbolic sizes), or ``None`` (no certificate,
    or the kinks rule gives another plan at this shape)."""
    cert = _certify.certificate(sig, kinks=kinks)
    if isinstance(cert, str):
        return reuse_sized(sig, kinks)
    return _certify.reuse(sig, cert)


def clear() -> None:
    """Forget every certificate (both kinds)."""
    _certify.clear()
    _SIZED.clear()


__all__ = [
    "Mode",
    "SizedCertificate",
    "clear",
    "reuse",
    "reuse_sized",
    "shape_attrs",
    "size_pattern",
    "sized_certificate",
]
