"""``parse_graph(text)``: read the text form of a graph (the printer's output) back.

``parse_graph(format_graph(g)) == g`` for every graph. The grammar (whitespace, newlines included,
is free between tokens)::

    graph   := "graph" "(" [leaf ("," leaf)*] [";" [index ("," index)*]] ")"
               "{" node* "return" value ("," value)* "}"
    leaf    := VALUE ":" type ("param" | "input") ["grad" | "nograd"]
    index   := INDEX ":" "nat" dims ["=" (INT | "[" [INT ("," INT)*] "]")]
    node    := VALUE ":" type "=" OP "(" [value ("," value)*] [";" INDEX ("," INDEX)*] ")"
               ["{" NAME "=" attr ("," NAME "=" attr)* "}"]
    type    := ("f32" | "f64") dims          dims := "[" [INT ("," INT)*] "]"
    attr    := INT | FLOAT | "inf" | "-inf" | "True" | "False" | STRING
             | "(" [attr ("," attr)* [","]] ")" | literal
    literal := ("f32" | "f64" | "bool") dims ("[" [scalar ("," scalar)*] "]" | B64)

``VALUE`` is ``%`` and a name (a leaf's name, or any fresh name for a node: the printer uses the
value id), ``INDEX`` is ``#`` and a name, ``B64`` is ``b64"..."`` (little-endian bytes),
``STRING`` a quoted string with Python escapes. Nothing is evaluated. The parsed graph is run
through :func:`~torchlean_ir.check`; every error is a one-line :class:`GraphParseError`
``line:column: message``.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from ._attrs import AttrError, ConstArray, make_attrs
from ._check import check
from ._errors import GraphCheckError, GraphParseError, UnknownOpError
from ._format import DEFAULT_LIMITS, Limits
from ._graph import Context, GraphData, IndexInput, Leaf, Node, valid_name
from ._registry import get_op
from ._types import NAT_MAX, DType, IndexType, TensorType, shape_size
from ._util import clip, gc_paused

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<num>-?(?:inf(?![A-Za-z0-9_.])|\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+|\d+))
  | (?P<b64>b64"[A-Za-z0-9+/=]*")
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<index>\#[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")
  | (?P<punct>\.\.\.|[(){}\[\],;:=])
  | (?P<bad>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "r": "\r", "t": "\t", "0": "\0"}
_MAX_NESTING = 16


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num, b64, value, index, name, str, punct, eof
    text: str
    pos: int


def _describe(t: _Tok) -> str:
    if t.kind == "eof":
        return "end of input"
    text = t.text if len(t.text) <= 30 else t.text[:27] + "..."
    return repr(text)


class _Parser:
    def __init__(self, text: str, source: str | None, limits: Limits) -> None:
        self.text = text
        self.source = source
        self.limits = limits
        self._scan = 0  # where the next token starts being looked for
        self.tok = self._lex()  # the current token; lexed one at a time, on demand

    # -- errors and tokens ---------------------------------------------------------------------
    def where(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, col

    def fail(self, pos: int, message: str) -> NoReturn:
        line, col = self.where(pos)
        raise GraphParseError(clip(message, 300), line=line, column=col, source=self.source)

    def _lex(self) -> _Tok:
        """The next token from ``self._scan`` on (whitespace skipped). Lexing on demand, an error
        early in a huge text is reported without reading the rest."""
        text, pos = self.text, self._scan
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            assert m is not None  # the last alternative matches any character
            kind = m.lastgroup
            pos = m.end()
            if kind == "ws":
                continue
            if kind == "bad":
                self.fail(m.start(), f"unexpected character {m.group()!r}")
            self._scan = pos
            return _Tok(kind, m.group(), m.start())  # type: ignore[arg-type]
        self._scan = pos
        return _Tok("eof", "", len(text))

    def next(self) -> _Tok:
        t = self.tok
        if t.kind != "eof":
            self.tok = self._lex()
        return t

    def at(self, text: str) -> bool:
        t = self.tok
        return t.text == text and t.kind in ("punct", "name")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> _Tok:
        if not self.at(text):
            self.fail(self.tok.pos, f"expected {what or repr(text)}, got {_describe(self.tok)}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> _Tok:
        if self.tok.kind != kind:
            self.fail(self.tok.pos, f"expected {what}, got {_describe(self.tok)}")
        return self.next()

    def bound(self, items: list[Any], what: str) -> None:
        """Refuse one more entry in a list that holds ``max_items`` already."""
        if len(items) >= self.limits.max_items:
            self.fail(self.tok.pos, f"more than {self.limits.max_items} {what} (the limit)")

    # -- small pieces --------------------------------------------------------------------------
    def nat(self, what: str, hi: int | None = None) -> int:
        t = self.tok
        if t.kind != "num" or not t.text.isdigit() or len(t.text) > 400:
            self.fail(t.pos, f"expected {what} (a non-negative integer), got {_describe(t)}")
        v = int(t.text)
        if hi is not None and v > hi:
            self.fail(t.pos, f"{what} {_describe(t)} exceeds {hi}")
        self.next()
        return v

    def number(self) -> int | float:
        t = self.next()
        text = t.text
        if len(text) > 400:
            self.fail(t.pos, f"number with {len(text)} characters is too long")
        if "inf" in text or "." in text or "e" in text or "E" in text:
            f = float(text)
            if math.isinf(f) and "inf" not in text:
                self.fail(t.pos, f"number {_describe(t)} is out of range (write inf or -inf)")
            return f
        return int(text)

    def dims(self) -> tuple[int, ...]:
        start = self.expect("[", "'[' (a shape)").pos
        dims: list[int] = []
        if not self.accept("]"):
            dims.append(self.nat("a dimension"))
            while self.accept(","):
                dims.append(self.nat("a dimension"))
            self.expect("]", "',' or ']'")
        if len(dims) > self.limits.max_rank:
            self.fail(start, f"rank {len(dims)} exceeds the limit {self.limits.max_rank}")
        if math.prod(dims) > self.limits.max_elements:
            self.fail(
                start,
                f"{math.prod(dims)} elements exceed the limit {self.limits.max_elements}",
            )
        return tuple(dims)

    def float_type(self) -> TensorType:
        t = self.tok
        if t.kind != "name" or t.text not in ("f32", "f64"):
            self.fail(t.pos, f"expected a type 'f32[...]' or 'f64[...]', got {_describe(t)}")
        self.next()
        return TensorType(self.dims(), DType(t.text))

    def name_after_sigil(self, t: _Tok, what: str) -> str:
        name = t.text[1:]
        if not valid_name(name):
            self.fail(t.pos, f"invalid {what} name {name!r} (an identifier, dots allowed)")
        return name

    # -- attribute values ----------------------------------------------------------------------
    def attr_value(self, depth: int = 0) -> Any:
        t = self.tok
        if depth > _MAX_NESTING:
            self.fail(t.pos, f"attribute value nested deeper than {_MAX_NESTING}")
        if t.kind == "num":
            return self.number()
        if t.kind == "str":
            self.next()
            return self.string(t)
        if t.kind == "name" and t.text in ("True", "False"):
            self.next()
            return t.text == "True"
        if t.kind == "name" and t.text in ("f32", "f64", "bool"):
            return self.literal()
        if self.accept("("):
            items: list[Any] = []
            while not self.accept(")"):
                items.append(self.attr_value(depth + 1))
                if not self.accept(","):
                    self.expect(")", "',' or ')'")
                    break
            return tuple(items)
        self.fail(t.pos, f"expected an attribute value, got {_describe(t)}")

    def string(self, t: _Tok) -> str:
        body, out, k = t.text[1:-1], [], 0
        while k < len(body):
            c = body[k]
            if c != "\\":
                out.append(c)
                k += 1
                continue
            e = body[k + 1]
            if e in _ESCAPES:
                out.append(_ESCAPES[e])
                k += 2
                continue
            width = {"x": 2, "u": 4, "U": 8}.get(e)
            digits = body[k + 2 : k + 2 + width] if width else ""
            if (
                not width
                or len(digits) != width
                or not all(ch in "0123456789abcdefABCDEF" for ch in digits)
            ):
                self.fail(t.pos + 1 + k, f"invalid escape in string: {body[k : k + 2]!r}")
            code = int(digits, 16)
            if code > 0x10FFFF:
                self.fail(t.pos + 1 + k, f"invalid code point \\{e}{digits}")
            out.append(chr(code))
            k += 2 + width
        return "".join(out)

    def literal(self) -> ConstArray:
        t = self.next()
        dtype = DType(t.text)
        shape = self.dims()
        n = shape_size(shape)
        if self.tok.kind == "b64":
            b = self.next()
            try:
                raw = base64.b64decode(b.text[4:-1], validate=True)
            except (binascii.Error, ValueError):
                self.fail(b.pos, "invalid base64 in a tensor literal")
            itemsize = np.dtype(dtype.numpy_name).itemsize
            if len(raw) != n * itemsize:
                self.fail(
                    b.pos,
                    f"expected {n * itemsize} bytes for {t.text}{list(shape)}, got {len(raw)}",
                )
            try:
                return ConstArray(dtype, shape, raw)
            except AttrError as e:
                self.fail(b.pos, str(e))
        start = self.expect("[", "'[' (the literal's elements) or b64\"...\"").pos
        if self.at("..."):
            self.fail(
                self.tok.pos, "abbreviated literal (printed with short=True) cannot be parsed"
            )
        values: list[Any] = []
        if not self.accept("]"):
            values.append(self.scalar(dtype))
            while self.accept(","):
                values.append(self.scalar(dtype))
            self.expect("]", "',' or ']'")
        if len(values) != n:
            self.fail(start, f"expected {n} elements for shape {list(shape)}, got {len(values)}")
        with np.errstate(over="ignore"):
            arr = np.asarray(values, dtype=dtype.numpy_name).reshape(shape)
        return ConstArray.from_numpy(arr, dtype)

    def scalar(self, dtype: DType) -> Any:
        t = self.tok
        if dtype == DType.BOOL:
            if t.kind == "name" and t.text in ("True", "False"):
                self.next()
                return t.text == "True"
            self.fail(t.pos, f"expected True or False, got {_describe(t)}")
        if t.kind != "num":
            self.fail(t.pos, f"expected a number, got {_describe(t)}")
        return float(self.number())

    # -- the graph -----------------------------------------------------------------------------
    def graph(self) -> GraphData:
        self.expect("graph", "'graph'")
        self.expect("(")
        leaves: list[Leaf] = []
        index_inputs: list[IndexInput] = []
        values: dict[str, int] = {}
        indices: dict[str, int] = {}
        if self.tok.kind == "value":
            leaves.append(self.leaf(values))
            while self.accept(","):
                leaves.append(self.leaf(values))
        if self.accept(";") and self.tok.kind == "index":
            index_inputs.append(self.index_input(indices, values))
            while self.accept(","):
                index_inputs.append(self.index_input(indices, values))
        self.expect(
            ")", "',', ';' or ')'" if leaves or index_inputs else "a leaf '%name', ';' or ')'"
        )
        self.expect("{")
        nodes: list[Node] = []
        node_pos: list[int] = []
        while self.tok.kind == "value":
            if len(nodes) >= self.limits.max_nodes:
                self.fail(self.tok.pos, f"more than {self.limits.max_nodes} nodes (the limit)")
            node_pos.append(self.tok.pos)
            nodes.append(self.node(values, indices, len(leaves) + len(nodes), index_inputs))
        self.expect("return", "a node '%name: type = op(...)' or 'return'")
        outputs = [self.use(values)]
        while self.accept(","):
            self.bound(outputs, "outputs")
            outputs.append(self.use(values))
        self.expect("}", "',' or '}'")
        if self.tok.kind != "eof":
            self.fail(self.tok.pos, f"expected end of input after '}}', got {_describe(self.tok)}")
        graph = GraphData(Context(tuple(leaves), tuple(index_inputs)), tuple(nodes), tuple(outputs))
        try:
            check(graph)
        except GraphCheckError as e:
            pos = node_pos[e.node] if e.node is not None and e.node < len(node_pos) else 0
            self.fail(pos, e.detail if e.node is not None else str(e))
        return graph

    def leaf(self, values: dict[str, int]) -> Leaf:
        t = self.expect_kind("value", "a leaf '%name'")
        name = self.name_after_sigil(t, "leaf")
        if name in values:
            self.fail(t.pos, f"%{name} is declared twice")
        self.expect(":")
        typ = self.float_type()
        kt = self.tok
        if kt.kind != "name" or kt.text not in ("param", "input"):
            self.fail(kt.pos, f"expected 'param' or 'input', got {_describe(kt)}")
        self.next()
        requires_grad = kt.text == "param"
        if self.accept("grad"):
            requires_grad = True
        elif self.accept("nograd"):
            requires_grad = False
        if len(values) >= self.limits.max_leaves:
            self.fail(t.pos, f"more than {self.limits.max_leaves} leaves (the limit)")
        values[name] = len(values)
        return Leaf(name, typ, kt.text, requires_grad)  # type: ignore[arg-type]

    def index_input(self, indices: dict[str, int], values: dict[str, int]) -> IndexInput:
        t = self.expect_kind("index", "an index input '#name'")
        name = self.name_after_sigil(t, "index input")
        if name in indices or name in values:
            self.fail(t.pos, f"the name {name!r} is declared twice")
        self.expect(":")
        self.expect("nat", "'nat' (index inputs are naturals)")
        shape_pos = self.tok.pos
        shape = self.dims()
        if len(shape) > 1:
            self.fail(shape_pos, f"an index input is a nat scalar or vector, got rank {len(shape)}")
        value: tuple[int, ...] | None = None
        if self.accept("="):
            if not shape:
                value = (self.nat("the index value", NAT_MAX),)
            else:
                start = self.expect("[", "'[' (the index values)").pos
                vals: list[int] = []
                if not self.accept("]"):
                    vals.append(self.nat("an index value", NAT_MAX))
                    while self.accept(","):
                        vals.append(self.nat("an index value", NAT_MAX))
                    self.expect("]", "',' or ']'")
                if len(vals) != shape[0]:
                    self.fail(start, f"expected {shape[0]} index values, got {len(vals)}")
                value = tuple(vals)
        indices[name] = len(indices)
        return IndexInput(name, IndexType(shape), value)

    def use(self, values: dict[str, int]) -> int:
        t = self.expect_kind("value", "a value '%name'")
        v = values.get(t.text[1:])
        if v is None:
            self.fail(t.pos, f"{t.text} is not defined (values must be defined before use)")
        return v

    def node(
        self,
        values: dict[str, int],
        indices: dict[str, int],
        vid: int,
        index_inputs: list[IndexInput],
    ) -> Node:
        t = self.next()
        binder = t.text[1:]
        if binder in values:
            self.fail(t.pos, f"{t.text} is already defined")
        self.expect(":")
        typ = self.float_type()
        self.expect("=", "'=' (a node is '%name: type = op(...)')")
        op_tok = self.expect_kind("name", "an op name")
        try:
            op = get_op(op_tok.text)
        except UnknownOpError as e:
            self.fail(op_tok.pos, str(e))
        self.expect("(")
        args: list[int] = []
        index_args: list[int] = []
        if self.tok.kind == "value":
            args.append(self.use(values))
            while self.accept(","):
                self.bound(args, "arguments")
                args.append(self.use(values))
        if self.accept(";"):
            while True:
                self.bound(index_args, "index arguments")
                it = self.expect_kind("index", "an index input '#name'")
                k = indices.get(it.text[1:])
                if k is None:
                    self.fail(it.pos, f"{it.text} is not a declared index input")
                index_args.append(k)
                if not self.accept(","):
                    break
        self.expect(")", "',', ';' or ')'")
        given: dict[str, Any] = {}
        if self.accept("{"):
            while True:
                nt = self.expect_kind("name", "an attribute name")
                if nt.text in given:
                    self.fail(nt.pos, f"attribute {nt.text!r} is given twice")
                self.expect("=")
                vpos = self.tok.pos
                value = self.attr_value()
                if nt.text not in op.attrs:
                    allowed = ", ".join(sorted(op.attrs)) or "none"
                    self.fail(
                        nt.pos, f"unknown attribute {nt.text!r} of {op.name} (allowed: {allowed})"
                    )
                try:
                    make_attrs(op.name, {nt.text: op.attrs[nt.text]}, {nt.text: value})
                except AttrError as e:
                    self.fail(vpos, str(e))
                given[nt.text] = value
                if not self.accept(","):
                    break
            self.expect("}", "',' or '}'")
        try:
            attrs = make_attrs(op.name, op.attrs, given)
        except AttrError as e:
            self.fail(op_tok.pos, str(e))
        values[binder] = vid
        return Node(op.name, tuple(args), typ, attrs, tuple(index_args))


def parse_graph(
    text: str, *, source: str | None = None, limits: Limits = DEFAULT_LIMITS
) -> GraphData:
    """Parse the text form of a graph (as printed by :func:`format_graph`) and check it.

    ``source`` (a file name) prefixes error positions. Raises :class:`GraphParseError`.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_graph expects a str, got {type(text).__name__}")
    if len(text) > limits.max_bytes:
        raise GraphParseError(
            f"text of {len(text)} characters exceeds the limit {limits.max_bytes}",
            line=1,
            column=1,
            source=source,
        )
    with gc_paused():
        return _Parser(text, source, limits).graph()
