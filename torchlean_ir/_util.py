"""Small internal helpers."""

from __future__ import annotations

import gc
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
