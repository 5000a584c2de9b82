"""``jgrad.sparse`` (``torch.sparse``): ``mm`` and ``sum`` over COO tensors, which jgrad keeps dense-backed
(``jgrad.ops.sparse_coo``; docs/differences.md).

Imports ``ops.sparse_coo``.
"""
from __future__ import annotations

from .ops.sparse_coo import mm

__all__ = ["mm", "sum"]


def sum(input, dim=None, dtype=None):  # noqa: A001  (torch.sparse.sum)
    """The sum of a sparse tensor's values (over ``dim``): a dense tensor."""
    dense = input.to_dense()
    out = dense.sum(dtype=dtype) if dim is None else dense.sum(dim, dtype=dtype)
    return out
