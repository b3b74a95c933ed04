"""Fuzz target: the builder's public calls with arguments of every kind.

Every call returns its value or raises a ``TorchleanError`` whose one-line message ends with the
caller's ``file:line`` (here: this file); never a raw ``ValueError`` / ``TypeError`` /
``OverflowError``. What is built checks, saves and loads back (or is refused by ``save`` with
the reader's message, writing nothing), and evaluates and compiles to the reference's values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import torchlean_ir as tl

from ._harness import assert_one_line, exercise, fuzz, time_bound

HERE = str(Path(__file__).resolve())

NAMES = ["x", "y", "w.1", "a_b", "", "1x", "x y", "x" * 300, "\n", 3, None, b"x", "é"]
SHAPES = [(), (3,), (2, 3), (1, 1, 2), 4, [2, 2], (0,), (-1,), (1.5,), "ab", None, (2**70,),
          (True,), [2, [3]], (1,) * 9, np.int64(3), (np.int64(2), 2)]  # fmt: skip
FLAGS = [True, False, np.bool_(True), 1, 0, "yes", None, np.array([1, 2]), 2.0]
INDEX_SIZES = [None, 0, 1, 3, -1, "x", 2**70, 2.0, True]
INDEX_VALUES = [None, 0, 2, 2**63 - 1, 2**63, 2**64, -1, 1.5, "x", [0, 1, 2], [[1]], [], True,
                np.uint64(2**63), np.array([1, 2, 3]), [0, 2**63]]  # fmt: skip
CONSTS = [1.5, 0, -0.0, [1.0, 2.0], np.ones((2, 2)), np.ones(70), "", "1.5", {}, None, 10**400,
          1 + 2j, [np.nan], [1e39], np.array([True]), [[1], [2, 3]], np.float32(2), [],
          float("inf"), np.array(["a"]), np.array([1], dtype=object)]  # fmt: skip
SCALARS = [0.0, 1.0, -2.5, 3, np.float32(0.5), float("nan"), float("inf"), 10**400, True, "2",
           None, 1e-320, np.int64(7)]  # fmt: skip
ATTR_VALUES = [0, 1, -1, 2, 3, 2**63, 10**30, 0.5, -1e30, float("nan"), float("inf"), True,
               "x", (1,), (2, 2), (0,), (-1,), (1, 2, 3), (), [1, 2], None, np.ones(2),
               np.array([True, False]), 1e-5, (2**40,), "f32", "f64"]  # fmt: skip
OPS = sorted(tl.all_ops())


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``: its value, or None when it raised the library's error, which must
    be one line ending in this file's line (the call site)."""
    with time_bound(getattr(fn, "__name__", "call")):
        try:
            return fn(*args, **kwargs)
        except tl.TorchleanError as e:
            message = str(e)
            assert_one_line(message, type(e).__name__)
            assert f", at {HERE}:" in message, message
            return None


@fuzz(120)
@given(st.data())
def test_builder_calls(data: st.DataObject) -> None:
    draw = data.draw
    b = _call(tl.GraphBuilder, draw(st.sampled_from(["f32", "f64", "f32", "nat", 3, None])))
    if b is None:
        return
    other = tl.GraphBuilder()
    stranger = other.input("s", (3,))
    vars_: list[Any] = []
    indices: list[Any] = []
    for _ in range(draw(st.integers(1, 25))):
        action = draw(st.integers(0, 8))
        if action == 0:
            kind = draw(st.sampled_from(["input", "param"]))
            v = _call(
                getattr(b, kind),
                draw(st.sampled_from(NAMES)),
                draw(st.sampled_from(SHAPES)),
                requires_grad=draw(st.sampled_from(FLAGS)),
            )
        elif action == 1:
            v = _call(
                b.index,
                draw(st.sampled_from(NAMES)),
                draw(st.sampled_from(INDEX_SIZES)),
                value=draw(st.sampled_from(INDEX_VALUES)),
            )
            if v is not None:
                indices.append(v)
            continue
        elif action == 2:
            v = _call(b.const, draw(st.sampled_from(CONSTS)))
        elif action == 3:
            v = _call(b.full, draw(st.sampled_from(SHAPES)), draw(st.sampled_from(SCALARS)))
        elif action in (4, 5, 6):
            pool = [*vars_, *indices, stranger, 3, "x", None]
            args = draw(st.lists(st.sampled_from(pool), max_size=4)) if pool else []
            op = draw(st.sampled_from([*OPS, "nosuch", ""]))
            keys = list(tl.get_op(op).attrs) if tl.has_op(op) else ["c"]
            attrs = {
                k: draw(st.sampled_from(ATTR_VALUES))
                for k in draw(st.lists(st.sampled_from([*keys, "bogus"]), max_size=4))
            }
            v = _call(b.apply, op, *args, **attrs)
        elif action == 7 and vars_:
            a = draw(st.sampled_from(vars_))
            other_arg = draw(st.sampled_from([*vars_, *SCALARS, "s", stranger, None]))
            op = draw(st.sampled_from(["add", "sub", "mul", "truediv", "matmul", "radd", "rsub",
                                       "rmul", "rtruediv", "neg", "bool"]))  # fmt: skip
            if op == "neg":
                v = _call(a.__neg__)
            elif op == "bool":
                v = _call(a.__bool__)
                assert v is None
                continue
            else:
                v = _call(getattr(a, f"__{op}__"), other_arg)
        else:
            continue
        if v is not None:
            assert isinstance(v, tl.Var), v
            vars_.append(v)
    outs = draw(st.lists(st.sampled_from([*vars_, stranger, 1]), min_size=0, max_size=3))
    g = _call(b.build, *outs)
    if g is None:
        return
    assert tl.check(g) is g
    text = _call_format(g)
    if text is not None:
        assert tl.loads(text) == g
        exercise(g, np.random.default_rng(0))


def _call_format(g: tl.GraphData) -> str | None:
    """``dumps`` under the default limits, or None when the reader would refuse the file (then
    with the reader's message)."""
    try:
        return tl.dumps(g, limits=tl.DEFAULT_LIMITS)
    except tl.GraphFormatError as e:
        assert_one_line(str(e))
        try:
            tl.loads(tl.dumps(g))
        except tl.GraphFormatError as reader:
            assert str(reader) == str(e)
            return None
        raise AssertionError(f"dumps refused what loads accepts: {e}") from None
