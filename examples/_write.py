"""Shared command line of the example scripts: ``python3 examples/<name>.py [--out DIR]``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import torchlean_ir as tl

GRAPHS = Path(__file__).resolve().parent / "graphs"
#: The models at training size (their own test and benchmark; see examples/models/README.md).
MODELS = Path(__file__).resolve().parent / "models"


def write_example(
    name: str,
    build: Callable[[], tl.GraphData],
    doc: str,
    argv: Sequence[str] | None,
    out: Path = GRAPHS,
) -> Path:
    """Build the graph, check it and write ``<out>/<name>.json`` (default ``examples/graphs``,
    or ``out``)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    parser.add_argument("--out", type=Path, default=out, help="output directory")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{name}.json"
    tl.save(build(), path)
    print(f"wrote {path}")
    return path
