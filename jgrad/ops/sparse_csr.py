"""CSR sparse tensors on ``jax.experimental.sparse.BCSR``: ``sparse_csr_tensor``, ``Tensor.to_sparse_csr``,
``crow_indices``/``col_indices``/``values``/``_nnz``, ``layout == sparse_csr``, ``is_sparse_csr``, CSR @ dense
with gradients, conversions to and from COO, and PyTorch's repr.

A CSR tensor is a ``SparseCsrTensor``: a 2-D ``Tensor`` without dense storage (as ``ops.sparse_coo``'s COO tensor)
whose contents are a BCSR's parts: ``_sp_values`` (a jgrad tensor (nnz,), differentiable: the values' history is
the tensor's), the compressed row indices and the column indices. Both are kept on the host (``_crow``, and
``_idx``: the (row, col) pair of every entry, int64, what COO calls its indices) and on the device (the accessors'
tensors in the caller's index dtype, int32 or int64, and int64 copies the kernels read). ``to_dense`` is
``BCSR.todense`` and ``CSR @ dense`` is ``bcsr_dot_general``; their gradients are formulas over the (row, col)
pairs. Any op meeting a CSR tensor reaches ``csr_call`` through the dispatcher's sparse door: products,
conversions, ``sum()``, ``dense + csr`` and the elementwise ops that keep zero zero run; the others raise
PyTorch's errors ("unsupported tensor layout: SparseCsr" for an elementwise op that moves zero, "Could not run
'aten::...' with arguments from the 'SparseCsrCPU' backend" for the rest). Only 2-D CSR tensors exist (no batch
or dense dimensions), and there is no CSC layout, so ``t()`` is refused.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry``, ``ops.creation``, ``ops.conversion``,
``ops.linalg``, ``ops.pointwise``, ``ops.reduction``, ``ops.sparse_coo`` and ``ops.sparse_dispatch``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from ..core import _dtype
from ..core._tensor import Tensor
from ..runtime._dispatch import Op, _x64, call
from ._registry import tensor_method
from .conversion import CAST, TRANSFER, _transfer
from .creation import as_tensor, tensor
from .linalg import BMM, LINEAR, LINEAR_NOBIAS, MATMUL_ND, MATMUL_OPS
from .pointwise import ADD, ADD_ALPHA, MUL
from .reduction import SUM, SUM_DIM
from .sparse_coo import (NO_STORAGE, SparseCooTensor, _add_suffixes, _from_parts, _part, _sparse_ops, _suffixes,
                         layout, sparse_coo)
from .sparse_dispatch import _DENSE_SP, _SP_SP, _aten, _inplace, _keeps_zero, _scalar_name, _sparse_sparse

__all__ = ["sparse_csr", "sparse_csr_tensor", "SparseCsrTensor", "csr_sparse_mm"]

sparse_csr = layout("sparse_csr")

_MATMULS = set(MATMUL_OPS.values()) | {MATMUL_ND, BMM, LINEAR, LINEAR_NOBIAS}
_UNORDERED = ("`col_indices[..., crow_indices[..., i - 1]:crow_indices[..., i]] for all i = 1, ..., nrows are "
              "sorted and distinct along the last dimension values` is not satisfied.")


def _bcsr(v, crow, idx, shape):
    """The BCSR of values ``v`` at columns ``idx[1]`` with row pointers ``crow``, inside a kernel."""
    return jsparse.BCSR((v, idx[1], crow), shape=shape)


def _to_dense_bwd(ctx, g):
    return g[ctx.saved[2][0], ctx.saved[2][1]], None, None


def _csr_dense(v, crow, idx, d, *, shape):
    return jsparse.bcsr_dot_general(_bcsr(v, crow, idx, shape), d, dimension_numbers=(([1], [0]), ([], [])),
                                    precision=jax.lax.Precision.HIGHEST)


def _csr_dense_bwd(ctx, g):
    """d(S @ D): to the values, (g @ D^T) at the (row, col) pairs; to D, S^T @ g (each value's row of g, added
    at its column)."""
    v, _, idx, d = ctx.saved
    need_v, need_d = ctx.needs_input_grad[0], ctx.needs_input_grad[3]
    rows, cols = idx[0], idx[1]
    gv = gd = None
    if need_v:
        gv = (g[rows] * d[cols]).sum(-1) if d.ndim == 2 else g[rows] * d[cols]
    if need_d:
        gd = jnp.zeros_like(d).at[cols].add(v[:, None] * g[rows] if d.ndim == 2 else v * g[rows])
    return gv, None, None, gd


_TO_DENSE = Op("ToDenseBackward0", lambda v, crow, idx, *, shape: _bcsr(v, crow, idx, shape).todense(),
               _to_dense_bwd, save=(0, 1, 2), edge_args=(0,))
_CSR_DENSE = {n: Op(n, _csr_dense, _csr_dense_bwd, save=(0, 1, 2, 3), edge_args=(0, 3))
              for n in ("MmBackward0", "MvBackward0", "SparseAddmmBackward0")}
for _op in _CSR_DENSE.values():  # one function under three node names: one set of compiled kernels
    _op._kernels, _op._bwd_kernels = _CSR_DENSE["MmBackward0"]._kernels, _CSR_DENSE["MmBackward0"]._bwd_kernels
_GATHER = Op("ToSparseCsrBackward0", lambda a, i: a[tuple(i)], edge_args=(0,))
# The values pass through these unchanged; the node names the step as PyTorch's graph does
_NAMED = {n: Op(n, lambda v: v) for n in ("SparseCompressedTensorBackward0", "ToSparseCsrBackward0",
                                           "ToSparseBackward1")}


class SparseCsrTensor(Tensor):
    """A 2-D CSR sparse tensor (see the module docstring)."""

    __slots__ = ()

    @property
    def _value(self):
        raise RuntimeError(NO_STORAGE)

    def _stale_data(self):
        raise RuntimeError(NO_STORAGE)

    @property
    def _alias(self):
        return None

    @_alias.setter
    def _alias(self, value):
        pass

    def _sparse_call(self, op, args, attrs, inplace):
        """The dispatcher's door for an op with a CSR input; ``args`` None: a view, which PyTorch refuses."""
        if args is None:
            raise NotImplementedError(_not_implemented(_aten(op), self))
        return csr_call(op, args, attrs, inplace)

    is_sparse = property(lambda self: False)
    is_sparse_csr = property(lambda self: True)
    layout = property(lambda self: sparse_csr)
    requires_grad_ = SparseCooTensor.requires_grad_  # the values carry autograd, as a COO tensor's
    item = SparseCooTensor.item

    @property
    def grad(self):
        """A CSR leaf's gradient: CSR on its pattern (the gradient of its values)."""
        g = self._sp_values._grad
        return None if g is None else self._with_values(g)

    @grad.setter
    def grad(self, new):
        if new is not None:
            raise RuntimeError("jgrad: assigning .grad of a sparse tensor is not supported (only None).")
        self._sp_values._grad = None

    def _with_values(self, values):
        """This pattern with other values (same nnz)."""
        same = values._device is self._sp_values._device
        return _from_csr(values, self._crow, self._idx, self.shape, self._index_dtype,
                         self._dev_parts if same else None)

    def detach(self):
        return self._with_values(self._sp_values.detach())

    # ---- the CSR accessors -------------------------------------------------
    def crow_indices(self):
        return self._dev_parts[0]

    def col_indices(self):
        return self._dev_parts[1]

    def values(self):
        return self._sp_values

    def _nnz(self):
        return int(self._idx.shape[1])

    def sparse_dim(self):
        return 2

    def dense_dim(self):
        return 0

    @property
    def _bcsr(self):
        """This tensor as a ``jax.experimental.sparse.BCSR`` (indices in JAX's default integer type)."""
        it = jax.dtypes.canonicalize_dtype(jnp.int64)
        dev = self._sp_values._value.device
        return jsparse.BCSR((self._sp_values._value, jax.device_put(self._idx[1].astype(it), dev),
                             jax.device_put(self._crow.astype(it), dev)), shape=tuple(self.shape))

    # ---- conversions ---------------------------------------------------------
    def to_dense(self, dtype=None, *, masked_grad=None):
        out = call(_TO_DENSE, self._sp_values, self._dev_parts[2], self._dev_parts[3], shape=tuple(self.shape))
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, layout=None, blocksize=None, dense_dim=None, *, sparse_dim=None):
        """The COO form (coalesced, the same values); ``to_sparse(layout=sparse_csr)`` is this tensor."""
        if isinstance(layout, int):
            sparse_dim, layout = layout, None
        if layout is sparse_csr:
            return self
        if sparse_dim is not None and sparse_dim != 2 or layout not in (None, sparse_coo):
            raise RuntimeError("sparse_compressed_to_sparse: conversion from SparseCsr to Sparse with sparse_dim "
                               "argument !=2 is not supported" if layout is None else
                               f"to_sparse: layout {layout} is not supported by jgrad (only sparse_coo and "
                               f"sparse_csr).")
        vals = call(_NAMED["ToSparseBackward1"], self._sp_values) if self._sp_values._req else self._sp_values
        return _from_parts(vals, self._idx, self.shape, True, self._dev_parts[3])

    def _coo(self):
        """The COO tensor of the same values (no node: an internal step)."""
        return _from_parts(self._sp_values, self._idx, self.shape, True, self._dev_parts[3])

    def to_sparse_coo(self):
        return self.to_sparse()

    def to_sparse_csr(self, dense_dim=None):
        return self

    # ---- what PyTorch refuses on a CSR tensor --------------------------------
    def numpy(self, *, force=False):
        raise TypeError("can't convert SparseCsr layout tensor to numpy. Use Tensor.to_dense() first.")

    def tolist(self):
        raise RuntimeError(NO_STORAGE)

    def view(self, *shape):
        raise NotImplementedError(_not_implemented("view", self))

    def expand(self, *sizes):
        raise RuntimeError("expand is unsupported for SparseCsr tensors")

    def _no_strides(self, *args, **kwargs):
        raise RuntimeError("Sparse CSR tensors do not have is_contiguous")

    reshape = flatten = contiguous = is_contiguous = _no_strides

    def _coo_only(name):  # noqa: N805  (a factory run in the class body)
        def method(self):
            raise RuntimeError(f"{name} expected sparse coordinate tensor layout but got SparseCsr")
        method.__name__ = name
        return method

    indices, coalesce, is_coalesced = _coo_only("indices"), _coo_only("coalesce"), _coo_only("is_coalesced")
    del _coo_only

    def transpose(self, dim0, dim1):
        raise RuntimeError("jgrad has no sparse_csc layout, which PyTorch's transpose of a CSR tensor returns: "
                           "call to_sparse() first to transpose the COO form.")

    def t(self):
        return self.transpose(0, 1)

    def __getitem__(self, index):
        """``s[i]`` with an int: row ``i``, a 1-D COO tensor (PyTorch's)."""
        if not isinstance(index, int) or isinstance(index, bool):
            raise NotImplementedError(_not_implemented("index", self))
        return self.to_sparse()[index]

    def __setitem__(self, index, value):
        raise NotImplementedError(_not_implemented("index_put_", self))

    def __repr__(self):
        parts = self._dev_parts
        text = ("tensor(" + _part(parts[0], "crow_indices=") + ",\n       " + _part(parts[1], "col_indices=")
                + ",\n       " + _part(self._sp_values, "values="))
        return _add_suffixes(text, _suffixes(self), 7, force=False)

    __str__ = __repr__


def _not_implemented(aten, t):
    backend = "SparseCsrCUDA" if t.device.type == "gpu" else "SparseCsrCPU"
    return (f"Could not run 'aten::{aten}' with arguments from the '{backend}' backend. This could be because the "
            f"operator doesn't exist for this backend, or was omitted during the selective/custom build process "
            f"(if using custom build).")


def _from_csr(values, crow, idx, shape, index_dtype=_dtype.int64, dev_parts=None):
    """The CSR tensor of ``values`` (a jgrad tensor (nnz,)) with row pointers ``crow`` and the (row, col) pairs
    ``idx`` (2, nnz), host int64 arrays; ``dev_parts``: their device tensors (crow, col in ``index_dtype``;
    crow, idx int64 for kernels), made here when None."""
    t = SparseCsrTensor._make(None, values._device, values._stream, values._req, values._grad_fn, values._output_nr)
    t._aval = jax.ShapeDtypeStruct(tuple(int(s) for s in shape), values._value.dtype if values._data is not None
                                   else values.dtype.np)
    t._sp_values, t._crow, t._idx, t._index_dtype = values, crow, idx, index_dtype
    if dev_parts is None:
        dev = values.device
        crow64, idx64 = tensor(crow, device=dev), tensor(idx, device=dev)
        if index_dtype is _dtype.int64:
            dev_parts = (crow64, tensor(idx[1], device=dev), crow64, idx64)
        else:
            dev_parts = (tensor(crow, dtype=index_dtype, device=dev), tensor(idx[1], dtype=index_dtype, device=dev),
                         crow64, idx64)
    t._dev_parts = dev_parts
    return t


def _host_index(x, name):
    if isinstance(x, Tensor):
        if x.dtype not in (_dtype.int32, _dtype.int64):
            raise RuntimeError(f"{name} must be an int32 or int64 tensor, but got {x.dtype}")
        return np.asarray(x.tolist(), np.int64).reshape(x.shape), x.dtype
    return np.asarray(x, np.int64), _dtype.int64


def _check_csr(crow, col, values, size):
    """PyTorch's invariants of a CSR tensor (always checked: BCSR would read out of bounds silently)."""
    if crow.ndim != 1 or col.ndim != 1 or values.ndim != 1:
        raise RuntimeError(f"jgrad's CSR tensors are 2-D with scalar values (no batch or dense dimensions): "
                           f"crow_indices, col_indices and values must be 1-D, got {crow.ndim}-D, {col.ndim}-D and "
                           f"{values.ndim}-D")
    nnz = values.shape[0]
    size = (crow.shape[0] - 1, int(col.max()) + 1 if col.size else 0) if size is None else tuple(int(s) for s in size)
    if len(size) != 2:
        raise RuntimeError(f"tensor dimensionality must be sum of batch, base, and dense dimensionalities (=0 + 2 + 0)"
                           f" but got {len(size)}")
    if crow.shape[0] != size[0] + 1:
        raise RuntimeError(f"crow_indices.shape[-1] must be equal to the number of rows + 1 (={size[0] + 1}), but "
                           f"got {crow.shape[0]}")
    if col.shape[0] != nnz:
        raise RuntimeError(f"col_indices.shape[-1] must be equal to nnz (={nnz}) as defined by values.shape[0], but "
                           f"got {col.shape[0]}")
    if crow[0] != 0:
        raise RuntimeError("`crow_indices[..., 0] == 0` is not satisfied.")
    if crow[-1] != nnz:
        raise RuntimeError("`crow_indices[..., -1] == nnz` is not satisfied.")
    steps = np.diff(crow)
    if steps.size and (steps.min() < 0 or steps.max() > size[1]):
        raise RuntimeError("`0 <= crow_indices[..., 1:] - crow_indices[..., :-1] <= ncols` is not satisfied.")
    if nnz and (col.min() < 0 or col.max() >= size[1]):
        raise RuntimeError("`0 <= col_indices < ncols` is not satisfied.")
    rows = np.repeat(np.arange(size[0]), steps)
    if nnz > 1 and np.any((np.diff(col) <= 0) & (rows[1:] == rows[:-1])):
        raise RuntimeError(_UNORDERED)
    return size, np.stack([rows, col]).astype(np.int64).reshape(2, -1)


def sparse_csr_tensor(crow_indices, col_indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None):
    """A 2-D CSR tensor: row ``i``'s entries are ``values[crow[i]:crow[i+1]]`` at ``col_indices[...]``."""
    crow, crow_dt = _host_index(crow_indices, "crow_indices")
    col, col_dt = _host_index(col_indices, "col_indices")
    if crow_dt is not col_dt:
        raise RuntimeError(f"crow_indices and col_indices must have the same dtype, bot got {_scalar_name(crow_dt)} "
                           f"and {_scalar_name(col_dt)}, respectively")
    values = values if isinstance(values, Tensor) else as_tensor(values, dtype=dtype, device=device)
    if dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    if device is not None:
        values = values.to(device)
    size, idx = _check_csr(crow, col, values, size)
    if requires_grad:
        values = values.detach().requires_grad_(True)
    elif values._req:
        values = call(_NAMED["SparseCompressedTensorBackward0"], values)
    return _from_csr(values, crow, idx, size, crow_dt)


def _crow_of(rows, nrows):
    return np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=nrows))]).astype(np.int64)


@tensor_method()
def to_sparse_csr(self, dense_dim=None):
    """The CSR form of a 2-D strided or COO tensor (a COO tensor is coalesced first)."""
    if isinstance(self, SparseCooTensor):
        return _coo_to_csr(self, True)
    if self.ndim != 2 or dense_dim:
        raise RuntimeError(f"to_sparse_csr: jgrad makes 2-D CSR tensors without dense dimensions, got a "
                           f"{self.ndim}-D tensor" + (f" and dense_dim={dense_dim}" if dense_dim else ""))
    nz = np.asarray(self.detach().numpy()) != 0  # which entries are non-zero: a host read, as nnz is data
    idx = np.stack(np.nonzero(nz)).astype(np.int64).reshape(2, -1)
    crow, dev = _crow_of(idx[0], self.shape[0]), self.device
    crow_t, idx_t = tensor(crow, device=dev), tensor(idx, device=dev)
    return _from_csr(call(_GATHER, self, idx_t), crow, idx, self.shape, _dtype.int64,
                     (crow_t, tensor(idx[1], device=dev), crow_t, idx_t))


def _coo_to_csr(s, named):
    """The CSR form of COO ``s`` (coalesced first); ``named``: under a ``ToSparseCsrBackward0`` node."""
    if s.sparse_dim() != 2 or s.dense_dim():
        raise RuntimeError("coo_to_sparse_csr: conversion from Sparse to SparseCsr for input tensors with "
                           "sparse_dim()!=2 is not supported")
    c = s.coalesce()
    vals = call(_NAMED["ToSparseCsrBackward0"], c._sp_values) if named and c._sp_values._req else c._sp_values
    return _from_csr(vals, _crow_of(c._sp_idx[0], s.shape[0]), c._sp_idx, s.shape)


def _strided_refusal(name):
    def method(self):
        raise RuntimeError(f"{name} expected sparse row compressed tensor layout but got Strided")
    method.__name__ = name
    return method


tensor_method("crow_indices")(_strided_refusal("crow_indices"))
tensor_method("col_indices")(_strided_refusal("col_indices"))


# ---- ops on CSR tensors (the dispatcher's sparse door) --------------------------------------------------------
def csr_call(op, args, attrs, inplace):
    """Run ``op`` on ``args``, some of them CSR (see the module docstring)."""
    first = next(a for a in args if isinstance(a, SparseCsrTensor))
    if inplace is not None:
        return _inplace(op, args, attrs, inplace, first, _on_values, _not_implemented)
    if op in _MATMULS:
        return _matmul(op, args[0], args[1])
    if op in (ADD, ADD_ALPHA):
        return _add(op, args, attrs)
    if op is MUL and all(isinstance(a, Tensor) and a.ndim for a in args) and not all(
            isinstance(a, SparseCsrTensor) for a in args):
        sp, dense = (args[0], args[1]) if args[0] is first else (args[1], args[0])
        if getattr(dense, "_sparse_call", None) is None and tuple(dense.shape) == tuple(sp.shape):
            picked = call(_GATHER, dense, sp._dev_parts[3])
            return sp._with_values(sp._sp_values * picked if sp is args[0] else picked * sp._sp_values)
    if op is SUM:
        return first._sp_values.sum(dtype=None if attrs.get("dtype") is None else
                                    _dtype.from_np(jnp.dtype(attrs["dtype"])))
    if op is SUM_DIM and not attrs.get("keepdim"):
        raise RuntimeError("reduction operations on CSR tensors with keepdim=False is unsupported")
    if op is TRANSFER:
        return _from_csr(_transfer(first._sp_values, attrs["device"]), first._crow, first._idx, first.shape,
                         first._index_dtype)
    if op is CAST:
        return first._with_values(call(op, first._sp_values, *args[1:], **attrs))
    out = _on_values(op, args, attrs, first)
    if out is not None:
        return out
    if _pointwise(op, args, attrs):
        raise RuntimeError("unsupported tensor layout: SparseCsr")
    raise NotImplementedError(_not_implemented(_aten(op), first))


def _check_mm(a, b):
    if b.ndim == 1 and a.ndim == 2 and a.shape[1] != b.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({a.shape[0]}), mat ({a.shape[0]}x{a.shape[1]}), vec "
                           f"({b.shape[0]})")
    if a.ndim == 1 and b.ndim == 2 and a.shape[0] != b.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({b.shape[1]}), mat ({b.shape[1]}x{b.shape[0]}), vec "
                           f"({a.shape[0]})")
    if a.ndim == b.ndim == 2 and a.shape[1] != b.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a.shape[0]}x{a.shape[1]} and "
                           f"{b.shape[0]}x{b.shape[1]})")
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected scalar type {_scalar_name(a.dtype)} but found {_scalar_name(b.dtype)}")


def _matmul(op, a, b, name=None):
    """CSR @ dense (``bcsr_dot_general``), dense @ CSR (the COO kernel on the (row, col) pairs), CSR @ CSR (the
    COO product, converted)."""
    ca, cb = isinstance(a, SparseCsrTensor), isinstance(b, SparseCsrTensor)
    sa, sb = (getattr(x, "_sparse_call", None) is not None for x in (a, b))
    if op is LINEAR_NOBIAS or op is LINEAR or not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise NotImplementedError(_not_implemented(_aten(op), a if ca else b))
    if a.ndim not in (1, 2) or b.ndim not in (1, 2) or (ca and cb and b.ndim != 2):
        raise RuntimeError(f"matmul: jgrad multiplies a CSR tensor by a 1-D or 2-D tensor only, got "
                           f"{a.ndim}-D @ {b.ndim}-D")
    if sa and sb and not (ca and cb):
        raise RuntimeError(f"addmm: computation on CPU is not implemented for {'SparseCsr' if ca else 'Sparse'} + "
                           f"{'SparseCsr' if ca else 'Sparse'} @ {'SparseCsr' if cb else 'Sparse'}")
    _check_mm(a, b)
    if ca and cb:
        return _coo_to_csr(_sparse_sparse(_SP_SP["MmBackward0"], a._coo(), b._coo()), False)
    if ca:
        node = name or ("MvBackward0" if b.ndim == 1 else "MmBackward0")
        return call(_CSR_DENSE[node], a._sp_values, a._dev_parts[2], a._dev_parts[3], b, shape=tuple(a.shape))
    if a.ndim == 1:  # PyTorch's vector @ CSR: a one-row product, squeezed (its node SqueezeBackward4)
        return _matmul(op, a.unsqueeze(0), b).squeeze(0)
    return call(_DENSE_SP, a, b._sp_values, b._dev_parts[3], shape=tuple(b.shape))


def csr_sparse_mm(mat1, mat2):
    """``torch.sparse.mm`` with a CSR operand: CSR @ dense is PyTorch's ``SparseAddmmBackward0``."""
    if isinstance(mat1, SparseCsrTensor) and getattr(mat2, "_sparse_call", None) is None and mat2.ndim == 2:
        return _matmul(MATMUL_OPS[(2, 2)], mat1, mat2, "SparseAddmmBackward0")
    return mat1 @ mat2


def _add(op, args, attrs):
    """CSR + CSR: CSR (the values added on one pattern, else the union of the patterns: the COO sum, coalesced);
    CSR + dense and dense + CSR: dense; no broadcasting, as PyTorch's."""
    a, b = args[0], args[1]
    ca, cb = isinstance(a, SparseCsrTensor), isinstance(b, SparseCsrTensor)
    sizes = [list(x.shape) if isinstance(x, Tensor) else [] for x in (a, b)]
    if ca and cb:
        if sizes[0] != sizes[1]:
            raise RuntimeError(f"torch.add: Expected input tensors to have the same shape, but got tensor `self` with "
                               f"shape {sizes[0]} and tensor `other` with shape {sizes[1]}")
        if np.array_equal(a._idx, b._idx):
            return a._with_values(call(op, a._sp_values, b._sp_values, *args[2:], **attrs))
        return _union_add(a, b, args[2] if op is ADD_ALPHA else 1)
    if sizes[0] != sizes[1]:
        other, csr = (sizes[1], sizes[0]) if ca else (sizes[0], sizes[1])
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size {other} while "
                           f"other has size {csr} (FYI: op2-sparse addition does not currently support broadcasting)")
    if getattr(b if ca else a, "_sparse_call", None) is not None:
        raise RuntimeError(f"add: computation on CPU is not implemented for {'SparseCsr' if ca else 'Sparse'} + "
                           f"{'Sparse' if ca else 'SparseCsr'}")
    return call(op, *(x.to_dense() if isinstance(x, SparseCsrTensor) else x for x in args), **attrs)


def _union(va, vb, pa, pb, *, n, alpha):
    out = jnp.zeros((n,), jnp.result_type(va, vb))
    return out.at[pa].add(va).at[pb].add(vb * alpha if alpha != 1 else vb)


_UNION_ADD = Op("AddBackward0", _union, edge_args=(0, 1))


def _union_add(a, b, alpha):
    """CSR + CSR of two patterns: the union (sorted row-major), each side's values added at their places."""
    n_cols = a.shape[1]
    lin_a, lin_b = a._idx[0] * n_cols + a._idx[1], b._idx[0] * n_cols + b._idx[1]
    lin = np.union1d(lin_a, lin_b)
    idx = np.stack([lin // n_cols, lin % n_cols]).astype(np.int64).reshape(2, -1)
    dev = a._sp_values.device
    vals = call(_UNION_ADD, a._sp_values, b._sp_values, tensor(np.searchsorted(lin, lin_a), device=dev),
                tensor(np.searchsorted(lin, lin_b), device=dev), n=int(lin.size), alpha=alpha)
    return _from_csr(vals, _crow_of(idx[0], a.shape[0]), idx, a.shape)


def _on_values(op, args, attrs, first):
    """``op`` on the values when ``first`` is its only tensor argument (but 0-d ones) and it keeps zero zero."""
    if any(isinstance(a, Tensor) and a is not first and (a.ndim or a._data is None) for a in args):
        return None
    if not _keeps_zero(op, args, attrs, first):
        return None
    vals = call(op, *(first._sp_values if a is first else a for a in args), **attrs)
    return first._with_values(vals) if tuple(vals.shape) == tuple(first._sp_values.shape) else None


_POINTWISE: dict = {}


def _pointwise(op, args, attrs):
    """Whether ``op`` is elementwise: on zeros of shape (2,) for its tensor arguments it gives shape (2,) (a
    reduction or an op that needs more dims does not)."""
    key = (op, tuple(attrs.items()), tuple(a.dtype if isinstance(a, Tensor) else type(a) for a in args))
    try:
        known = _POINTWISE.get(key)
    except TypeError:
        known, key = None, None
    if known is not None:
        return known
    akey = tuple(attrs.items())
    kernel = op._kernels.get(akey) or op.kernel(akey, attrs)
    try:
        with _x64():
            out = kernel(*(jnp.zeros((2,), a.dtype.np) if isinstance(a, Tensor) else a for a in args))
        known = not isinstance(out, tuple) and out.shape == (2,)
    except Exception:  # noqa: BLE001  (an op that needs dims a 0-d zero lacks: not elementwise)
        known = False
    if key is not None:
        _POINTWISE[key] = known
    return known


_sparse_ops.update(to_sparse_csr=to_sparse_csr)  # to_sparse(layout=sparse_csr) of a strided tensor
