"""The op declarations, one module per family. Importing this package registers every op.

Core tier: :mod:`.elementwise`, :mod:`.shape`, :mod:`.reduce`, :mod:`.linalg`, :mod:`.nn`,
:mod:`.index`.
"""

from . import elementwise, index, linalg, nn, reduce, shape

__all__ = ["elementwise", "index", "linalg", "nn", "reduce", "shape"]
