"""COO sparse tensors, dense-backed: ``sparse_coo_tensor``, ``Tensor.to_sparse`` / ``to_dense``, ``is_sparse``,
``layout`` (``strided``, ``sparse_coo``), ``indices``/``values``/``coalesce``/``_nnz``, and ``sparse.mm``.

A sparse tensor here is a ``SparseCooTensor``: a ``Tensor`` whose storage holds the *dense* values, with the
COO description (indices and values) kept beside it. It reports ``layout == sparse_coo`` and
``is_sparse``, prints as PyTorch's, and answers ``indices()``, ``values()``, ``_nnz()`` and ``coalesce()``.
Every other op reads its dense values and returns an ordinary (strided) tensor: ``sparse @ dense`` is a dense
matmul, with gradients to the dense side and to the ``values`` it was built from. This is what a program
that builds an adjacency or scaling matrix sparsely and multiplies with it needs; it saves no memory or
time (XLA has no sparse kernels that jgrad uses), and ops that PyTorch keeps sparse (``s * 2``, ``s + s``)
or refuses on sparse tensors (``view``, indexing) give dense results here (docs/differences.md).

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry`` and ``ops.creation``.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import tensor_method
from .creation import as_tensor, tensor

__all__ = ["layout", "strided", "sparse_coo", "sparse_coo_tensor", "SparseCooTensor"]


class layout:
    """A tensor layout (``jgrad.strided``, ``jgrad.sparse_coo``), as ``torch.layout``."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"jgrad.{self.name}"

    def __reduce__(self):
        return self.name  # unpickles as the module attribute of that name (one object per layout)


strided = layout("strided")
sparse_coo = layout("sparse_coo")


def _scatter_fwd(values, indices, *, shape):
    return jnp.zeros(shape, values.dtype).at[tuple(indices)].add(values)


_SPARSE_COO = Op("SparseCooTensorWithDimsAndTensorsBackward0", _scatter_fwd, edge_args=(0,))
_TO_SPARSE = Op("ToSparseBackward0", lambda a: a)
_TO_DENSE = Op("ToDenseBackward0", lambda a: a)


class SparseCooTensor(Tensor):
    """A COO sparse tensor, dense-backed (see the module docstring). ``_coo``: (indices (S, nnz) int64 NumPy
    array, values tensor or None (read from the dense values), sparse_dim, coalesced)."""

    __slots__ = ()

    @property
    def is_sparse(self):
        return True

    @property
    def layout(self):
        return sparse_coo

    def sparse_dim(self):
        return self._coo[2]

    def dense_dim(self):
        return self.ndim - self._coo[2]

    def is_coalesced(self):
        return self._coo[3]

    def _indices(self):
        return tensor(self._coo[0], device=self.device)

    def _values(self):
        idx, vals = self._coo[0], self._coo[1]
        return vals if vals is not None else self._gather(idx)

    def _gather(self, idx):
        return self.to_dense()[tuple(tensor(i, device=self.device) for i in idx)]

    def _nnz(self):
        return int(self._coo[0].shape[1])

    def indices(self):
        """The indices (sparse_dim, nnz) of a coalesced tensor."""
        self._need_coalesced("indices")
        return self._indices()

    def values(self):
        """The values (nnz, *dense dims) of a coalesced tensor (differentiable)."""
        self._need_coalesced("values")
        return self._values()

    def _need_coalesced(self, what):
        if not self._coo[3]:
            raise RuntimeError(f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first")

    def coalesce(self):
        """Sorted, unique indices; the values of repeated indices summed."""
        if self._coo[3]:
            return self
        idx = self._coo[0]
        lin = np.ravel_multi_index(tuple(idx), self.shape[:self._coo[2]]) if idx.size else np.zeros(0, np.int64)
        uniq = np.unique(lin)
        new = np.stack(np.unravel_index(uniq, self.shape[:self._coo[2]])).astype(np.int64).reshape(len(idx), -1)
        return _as_sparse(call(_TO_SPARSE, self.to_dense()), new, None, self._coo[2], True)

    def to_dense(self, dtype=None, *, masked_grad=None):
        out = call(_TO_DENSE, self)
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, *args, **kwargs):
        return self

    def __repr__(self):
        body = (f"indices={self._indices()!r},\n       values={self._values()!r},\n       size={tuple(self.shape)}, "
                f"nnz={self._nnz()}")
        if self.dtype not in (_dtype.get_default_dtype(), _dtype.int64, _dtype.bool):
            body += f", dtype={self.dtype}"
        if self._grad_fn is not None:
            body += f", grad_fn=<{self._grad_fn.name()}>"
        elif self.requires_grad:
            body += ", requires_grad=True"
        return f"tensor({body}, layout=jgrad.sparse_coo)"

    __str__ = __repr__


def _as_sparse(t, indices, values, sparse_dim, coalesced):
    t.__class__ = SparseCooTensor  # the op's result, history and all, is the sparse tensor
    t._coo = (indices, values, sparse_dim, coalesced)
    return t


def _host_indices(indices):
    if isinstance(indices, Tensor):
        if indices.is_floating_point() or indices.dtype == _dtype.bool:
            raise RuntimeError(f"indices must be an int64 tensor, got {indices.dtype}")
        return np.asarray(indices.tolist(), np.int64).reshape(indices.shape)
    return np.asarray(indices, np.int64)  # array-likes are read as int64, as PyTorch's argument parser does


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, requires_grad=False,
                      check_invariants=None, is_coalesced=None):
    """A COO tensor with ``values`` (nnz, *dense dims) at ``indices`` (sparse_dim, nnz) (dense-backed: see
    ``jgrad.ops.sparse_coo``)."""
    idx = _host_indices(indices)
    values = values if isinstance(values, Tensor) else as_tensor(values, dtype=dtype, device=device)
    if dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    if idx.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    sdim, nnz = idx.shape
    if values.ndim < 1 or values.shape[0] != nnz:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: {nnz}, nnz from "
                           f"values: {values.shape[0] if values.ndim else 0}")
    if nnz and idx.min() < 0:
        raise RuntimeError(f"found negative index {int(idx.min())} for dim {int(np.argmin(idx.min(1)))}")
    if size is None:
        size = tuple(int(m) + 1 for m in (idx.max(1) if nnz else np.full(sdim, -1))) + tuple(values.shape[1:])
    size = tuple(int(s) for s in size)
    if len(size) != sdim + values.ndim - 1:
        raise RuntimeError(f"number of dimensions must be sparse_dim ({sdim}) + dense_dim ({values.ndim - 1}), but "
                           f"got {len(size)}")
    for d in range(sdim):  # always checked: an index out of range would be dropped silently by the scatter
        if nnz and idx[d].max() >= size[d]:
            raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is {size[d]} but found index "
                               f"{int(idx[d].max())}")
    if device is not None:
        values = values.to(device)
    dense = call(_SPARSE_COO, values, tensor(idx, device=values.device), shape=size)
    if requires_grad:
        dense.requires_grad_(True)
    return _as_sparse(dense, idx, values, sdim, bool(is_coalesced) or nnz <= 1)


@tensor_method()
def to_sparse(self, layout=None, blocksize=None, dense_dim=None, *, sparse_dim=None):
    """The COO sparse form of ``self`` (its non-zeros; ``to_sparse(sparse_dim)`` keeps the last dims dense)."""
    if isinstance(layout, int):  # to_sparse(sparse_dim), PyTorch's older signature
        sparse_dim, layout = layout, None
    if layout not in (None, sparse_coo):
        raise RuntimeError(f"to_sparse: layout {layout} is not supported by jgrad (only sparse_coo).")
    sdim = self.ndim - (dense_dim or 0) if sparse_dim is None else int(sparse_dim)
    if not 0 <= sdim <= self.ndim:
        raise RuntimeError(f"sparse_dim argument must be in [0, {self.ndim}] range, but {sdim} is given")
    dense = np.asarray(self.detach().to_dense().numpy() if isinstance(self, SparseCooTensor) else self.detach().numpy())
    nz = np.abs(dense).reshape(dense.shape[:sdim] + (-1,)).max(-1) != 0 if sdim < self.ndim else dense != 0
    idx = np.stack(np.nonzero(nz)).astype(np.int64).reshape(sdim, -1)
    return _as_sparse(call(_TO_SPARSE, self), idx, None, sdim, True)


@tensor_method()
def to_dense(self, dtype=None, *, masked_grad=None):
    """A strided tensor's dense form: itself (PyTorch's; a sparse tensor's is its values)."""
    return self if dtype is None else self.to(dtype)


tensor_method("layout")(property(lambda self: strided))


def mm(mat1, mat2, reduce="sum"):
    """``torch.sparse.mm``: ``mat1 @ mat2`` with either side sparse (a dense result, gradients to both)."""
    if reduce != "sum":
        raise RuntimeError(f"sparse.mm: reduce={reduce!r} is not supported by jgrad (only 'sum').")
    return mat1.to_dense() @ mat2.to_dense()
