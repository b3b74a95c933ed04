"""Exception hierarchy.

Every error a user can cause derives from :class:`TorchleanError` and has a one-line
``str()`` that names what went wrong and where (node index, JSON path, argument, call site).
"""

from __future__ import annotations


class TorchleanError(Exception):
    """Base class of every error raised for bad user input."""


class ShapeError(TorchleanError):
    """An op was applied to arguments whose shapes (or dtypes) its shape rule rejects."""


class AttrError(TorchleanError):
    """An op attribute is missing, unknown or of the wrong kind."""


class GraphCheckError(TorchleanError):
    """A graph failed :func:`torchlean_ir.check` (bad reference, bad attribute, wrong shape)."""

    def __init__(self, message: str, *, node: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        #: The message without the ``node j (`...`):`` prefix.
        self.detail = message if detail is None else detail


class GraphFormatError(TorchleanError):
    """A graph file is malformed, truncated, ill-typed or over a size limit."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class GraphParseError(GraphFormatError):
    """The text form of a graph (see :func:`torchlean_ir.parse_graph`) could not be parsed.

    ``str()`` is one line, ``line:column: message``; :attr:`line` and :attr:`column` are 1-based.
    """

    def __init__(self, message: str, *, line: int, column: int, source: str | None = None) -> None:
        where = f"{line}:{column}" if source is None else f"{source}:{line}:{column}"
        super().__init__(f"{where}: {message}", path=where)
        self.line = line
        self.column = column
        self.message = message


class EvalError(TorchleanError):
    """Bad values passed to an interpreter (missing leaf, wrong shape, bad index value)."""


class UnknownOpError(TorchleanError):
    """An op name that is not in the registry."""
