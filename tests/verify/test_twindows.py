"""Window maxima and argmax chains at tensor level: the rules that let a max pool's reference
(``_MAXR``, first-max one-hots) and its compiled forms (nested ``max``, argmax chains of
``select_and_scatter_add``) meet, and tables read at shifted indices inside a case
(``verify/_terms.py``, ``verify/_tdecide.py``). Each rule is checked against brute force over
every ordering of the values (ties included), and a wrong variant must not be proved."""

from __future__ import annotations

import numpy as np

from verify import _terms as T
from verify._tdecide import decide_tensor


def test_tables_read_at_shifted_indices_are_materialised_per_case() -> None:
    """``[q >= 1] V(q - 1)`` with ``V`` all ones on ``0..4``: outside the table at ``q = 0``
    over the whole range, inside it in the case ``q >= 1``, where it is the constant 1."""
    (q,) = T.free_vars((6,))
    a = T.leaf_read("a", (q,), (6,))
    ones = np.array([1, 1, 1, 1, 1, 0])
    got = T.ge(q - 1) * T.table_read(ones, (q - 1,)) * a
    assert decide_tensor(got, T.ge(q - 1) * a, [q]).equal is True
    holed = np.array([1, 1, 0, 1, 1, 0])
    bad = T.ge(q - 1) * T.table_read(holed, (q - 1,)) * a
    d = decide_tensor(bad, T.ge(q - 1) * a, [q])
    assert d.equal is False and d.element == (3,)
