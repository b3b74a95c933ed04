"""Small internal helpers."""

from __future__ import annotations

import contextlib
import gc
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a bulk pass allocates many small containers.

    Reading or encoding a graph allocates a few objects per node and frees almost none of them
    as cycles; with the collector running, every full collection re-traverses the whole graph,
    which makes 100,000-node graphs several times slower than linear. Reference counting still
    frees everything as usual; the collector resumes (if it was on) when the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def short_repr(v: object, limit: int = 60) -> str:
    """A one-line ``repr`` of at most ``limit`` characters, computed in bounded time (a long
    tuple or list shows its first items only)."""
    if isinstance(v, tuple | list) and len(v) > limit:
        head = ", ".join(short_repr(x, limit) for x in v[:limit])
        text = ("(" if isinstance(v, tuple) else "[") + head + ", ..."
    elif isinstance(v, str | bytes) and len(v) > 4 * limit:
        text = repr(v[: 4 * limit])
    elif isinstance(v, int) and v.bit_length() > 4 * limit:
        text = f"<an integer of {len(str(abs(v))) if v.bit_length() < 10_000 else 'many'} digits>"
    else:
        text = repr(v)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` all or nothing: into a new file next to it, renamed over it
    once complete. On any failure (a full disk, an interruption) the temporary file is removed
    and ``path`` is as it was. A symbolic link is written through (its target is replaced); a
    new file gets the usual permissions (``0o666`` less the umask). A path that is not a regular
    file (``/dev/stdout``, a pipe) is written directly."""
    target = os.path.realpath(os.fspath(path))
    if os.path.exists(target) and not os.path.isfile(target):
        with open(target, "wb") as f:
            f.write(data)
        return
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if os.path.exists(target):
            os.chmod(tmp, os.stat(target).st_mode & 0o7777)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def clip(text: str, limit: int = 200) -> str:
    """``text`` cut to at most ``limit`` characters (with ``...``): a message that quotes user
    input (a 5000-character name, a node with 100,000 arguments) stays readable."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
