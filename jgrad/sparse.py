"""``jgrad.sparse`` (``torch.sparse``): ``mm`` and ``sum`` of COO tensors (``jgrad.ops.sparse_coo``: a BCOO's
values and indices; ``jgrad.ops.sparse_dispatch``: the ops on them) and ``mm`` of CSR ones (``ops.sparse_csr``).

Imports ``ops.sparse_coo``, ``ops.sparse_csr`` and ``ops.sparse_dispatch``.
"""
from __future__ import annotations

from .ops.sparse_coo import SparseCooTensor
from .ops.sparse_csr import SparseCsrTensor, csr_sparse_mm
from .ops.sparse_dispatch import _sum, sparse_mm
from .ops.reduction import SUM, SUM_DIM, _dims

__all__ = ["mm", "sum"]


def mm(mat1, mat2, reduce="sum"):
    """``torch.sparse.mm``: a COO ``mat1`` times a dense ``mat2`` is ``bcoo_dot_general``, a CSR one
    ``bcsr_dot_general`` (a dense result, gradients to ``mat2`` and to ``mat1``'s values); COO times COO is a
    coalesced COO result (gradients to both values); other operands are ``mat1 @ mat2``."""
    if reduce != "sum":
        raise RuntimeError(f"sparse.mm: reduce={reduce!r} is not supported by jgrad (only 'sum').")
    if isinstance(mat1, SparseCsrTensor):
        return csr_sparse_mm(mat1, mat2)
    return sparse_mm(mat1, mat2)


def sum(input, dim=None, dtype=None):  # noqa: A001  (torch.sparse.sum)
    """The sum of a sparse tensor's values: a dense 0-d tensor, or over ``dim`` a sparse one (dense once no
    sparse dimension remains)."""
    if isinstance(input, SparseCsrTensor):
        raise RuntimeError("coalesce expected sparse coordinate tensor layout but got SparseCsr")
    if not isinstance(input, SparseCooTensor):
        return input.sum(dtype=dtype) if dim is None else input.sum(dim, dtype=dtype)
    attrs = {"dtype": None if dtype is None else dtype.np, "keepdim": False,
             "dim": None if dim is None else _dims(input, dim, "sum", empty_is_all=True)}
    return _sum(SUM if dim is None else SUM_DIM, input, attrs)
