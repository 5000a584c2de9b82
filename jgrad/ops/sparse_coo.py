"""COO sparse tensors on ``jax.experimental.sparse.BCOO``: ``sparse_coo_tensor``, ``Tensor.to_sparse`` /
``to_dense``, ``is_sparse``, ``layout`` (``strided``, ``sparse_coo``), ``indices``/``values``/``coalesce``/``_nnz``.

A sparse tensor is a ``SparseCooTensor``: a ``Tensor`` with no dense storage (``_data`` is None, its shape and
dtype in ``_aval``) whose contents are a BCOO's two parts, ``_sp_values`` (a jgrad tensor (nnz, *dense dims),
differentiable: the values' history is the sparse tensor's) and the indices, kept on the host (``_sp_idx``,
int64 (sparse_dim, nnz), PyTorch's layout; BCOO's is its transpose) and on the device (``_sp_idx_t``). Kernels
rebuild the ``BCOO`` from those arrays inside ``jax.jit`` (``_bcoo``), so ``to_dense`` is ``BCOO.todense`` and
``sparse @ dense`` is ``bcoo_dot_general``; their gradients (to the dense side, and to the values) are
``jax.vjp`` of those functions. Any op that meets a sparse tensor reaches ``_sparse_call`` (the dispatcher's
door calls it when an input has no dense storage; ``ops.sparse_dispatch``): the ops PyTorch runs on sparse
tensors run there, the others raise PyTorch's "Could not run 'aten::...' with arguments from the 'SparseCPU'
backend". Reading the storage directly (``numpy()``, views) is PyTorch's error for a tensor without storage.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry`` and ``ops.creation``.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from ..core import _dtype
from ..core._format import _format_array
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
        _LAYOUTS[name] = self

    def __repr__(self):
        return f"jgrad.{self.name}"

    def __reduce__(self):
        return _layout_named, (self.name,)  # unpickles as the same object (one per layout)


_LAYOUTS: dict = {}


def _layout_named(name):
    return _LAYOUTS[name]


layout_type = layout
strided = layout("strided")
sparse_coo = layout("sparse_coo")

NO_STORAGE = "Cannot access data pointer of Tensor that doesn't have storage"


def _bcoo(values, indices, shape):
    """The BCOO of ``values`` (nnz, *dense) at ``indices`` (sparse_dim, nnz), inside a kernel."""
    return jsparse.BCOO((values, indices.T), shape=shape)


_TO_DENSE = Op("ToDenseBackward0", lambda v, i, *, shape: _bcoo(v, i, shape).todense(),
               lambda ctx, g: (g[tuple(ctx.saved[1])], None), save=(1,), edge_args=(0,))
_GATHER = Op("ToSparseBackward1", lambda a, i: a[tuple(i)], edge_args=(0,))
_COALESCE = Op("CoalesceBackward0", lambda v, inv, *, n: jax.ops.segment_sum(v, inv, num_segments=n),
               edge_args=(0,))
_NAMED = Op("SparseCooTensorWithDimsAndTensorsBackward0", lambda v: v)  # the sparse tensor's node, as PyTorch's


# The ops on sparse tensors (``ops.sparse_dispatch``, which builds on this module) install themselves here.
_sparse_ops = {}


class SparseCooTensor(Tensor):
    """A COO sparse tensor (see the module docstring)."""

    __slots__ = ()

    # ---- what a tensor without dense storage answers -----------------------
    @property
    def _value(self):
        raise RuntimeError(NO_STORAGE)

    def _stale_data(self):
        raise RuntimeError(NO_STORAGE)

    @property
    def _alias(self):  # no storage to share: a view (``jgrad.runtime._views``) is refused by ``_sparse_call``
        return None

    @_alias.setter
    def _alias(self, value):
        pass

    def _sparse_call(self, op, args, attrs, inplace):
        """The dispatcher's door for an op with a sparse input (``ops.sparse_dispatch``); ``args`` None: a view
        of this tensor, which PyTorch refuses too (but for the ones this class defines)."""
        if args is None:
            raise NotImplementedError(_not_implemented(_sparse_ops["aten"](op), self))
        return _sparse_ops["call"](op, args, attrs, inplace)

    @property
    def is_sparse(self):
        return True

    @property
    def layout(self):
        return sparse_coo

    # ---- autograd: the values carry it ------------------------------------
    def requires_grad_(self, requires_grad: bool = True):
        v = self._sp_values
        if v._grad_fn is None and requires_grad and not v._req:
            v = self._sp_values = v.detach()  # a new leaf: the caller's values tensor is not changed
        v.requires_grad_(requires_grad)
        self._req = v._req
        return self

    @property
    def grad(self):
        """A sparse leaf's gradient: sparse, on its indices (the gradient of its values)."""
        g = self._sp_values._grad
        if g is None or self._sp_coalesced:
            return None if g is None else _from_parts(g, self._sp_idx, self.shape, True, self._sp_idx_t)
        # Repeated indices each got the matrix's gradient there: keep one of each (PyTorch's coalesced gradient)
        sdim = self.sparse_dim()
        lin = np.ravel_multi_index(tuple(self._sp_idx), tuple(self.shape[:sdim]))
        _, first = np.unique(lin, return_index=True)
        return _from_parts(g[tensor(first, device=g.device)], self._sp_idx[:, first], self.shape, True)

    @grad.setter
    def grad(self, new):
        if new is not None:
            raise RuntimeError("jgrad: assigning .grad of a sparse tensor is not supported (only None).")
        self._sp_values._grad = None

    def detach(self):
        return _from_parts(self._sp_values.detach(), self._sp_idx, self.shape, self._sp_coalesced, self._sp_idx_t)

    # ---- the COO accessors -------------------------------------------------
    def sparse_dim(self):
        return int(self._sp_idx.shape[0])

    def dense_dim(self):
        return self.ndim - self.sparse_dim()

    def is_coalesced(self):
        return self._sp_coalesced

    def _nnz(self):
        return int(self._sp_idx.shape[1])

    def _indices(self):
        return self._sp_idx_t

    def _values(self):
        return self._sp_values

    def indices(self):
        """The indices (sparse_dim, nnz) of a coalesced tensor."""
        self._need_coalesced("indices")
        return self._sp_idx_t

    def values(self):
        """The values (nnz, *dense dims) of a coalesced tensor (differentiable)."""
        self._need_coalesced("values")
        return self._sp_values

    def _need_coalesced(self, what):
        if not self._sp_coalesced:
            raise RuntimeError(f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first")

    @property
    def _bcoo(self):
        """This tensor as a ``jax.experimental.sparse.BCOO``: its values array, and its indices in JAX's default
        integer type (int32 unless JAX's x64 mode is on), so that the BCOO works in the caller's JAX."""
        idx = jnp.asarray(self._sp_idx.T, dtype=jax.dtypes.canonicalize_dtype(jnp.int64))
        return jsparse.BCOO((self._sp_values._value, jax.device_put(idx, self._sp_values._value.device)),
                            shape=tuple(self.shape))

    def coalesce(self):
        """Sorted, unique indices; the values of repeated indices summed (differentiable)."""
        if self._sp_coalesced:
            return self
        return _coalesced(self._sp_values, self._sp_idx, self.shape)

    def to_dense(self, dtype=None, *, masked_grad=None):
        out = call(_TO_DENSE, self._sp_values, self._sp_idx_t, shape=tuple(self.shape))
        return out if dtype is None else out.to(dtype)

    def to_sparse(self, *args, **kwargs):
        """This tensor; ``to_sparse(layout=sparse_csr)``: its CSR form (``ops.sparse_csr``)."""
        layout = kwargs.get("layout", args[0] if args and isinstance(args[0], layout_type) else None)
        if layout is not None and layout is not sparse_coo:
            return _sparse_ops[f"to_{layout.name}"](self)
        return self

    # ---- what PyTorch refuses on a tensor without storage ------------------
    def numpy(self, *, force=False):
        raise TypeError("can't convert Sparse layout tensor to numpy. Use Tensor.to_dense() first.")

    def tolist(self):
        raise RuntimeError(NO_STORAGE)

    def item(self):
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self.to_dense().item()

    def view(self, *shape):
        raise NotImplementedError(_not_implemented("view", self))

    def reshape(self, *shape):
        raise RuntimeError("reshape is not implemented for sparse tensors")

    def expand(self, *sizes):
        raise RuntimeError("expand is unsupported for Sparse tensors")

    def flatten(self, start_dim=0, end_dim=-1):
        raise RuntimeError("reshape is not implemented for sparse tensors")

    def contiguous(self, memory_format=None):
        raise RuntimeError("unsupported memory format option Contiguous")

    def __getitem__(self, index):
        """``s[i]`` with an int ``i`` selects along the first sparse dim (sparse while sparse dims remain)."""
        if not isinstance(index, int) or isinstance(index, bool) or self.sparse_dim() < 2:
            raise NotImplementedError(_not_implemented("index", self))
        n = self.shape[0]
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of bounds for dimension 0 with size {n}")
        keep = np.nonzero(self._sp_idx[0] == index % n)[0]
        vals = self._sp_values[tensor(keep, device=self._sp_values.device)]
        return _from_parts(vals, self._sp_idx[1:, keep], self.shape[1:], self._sp_coalesced)

    def __setitem__(self, index, value):
        raise NotImplementedError(_not_implemented("index_put_", self))

    # ---- layout changes PyTorch keeps sparse -------------------------------
    def transpose(self, dim0, dim1):
        """The same values with two sparse dimensions' index rows swapped (PyTorch's, uncoalesced)."""
        s = self.sparse_dim()
        d0, d1 = (d + self.ndim if d < 0 else d for d in (dim0, dim1))
        if d0 == d1:
            return self
        if d0 >= s or d1 >= s:
            raise RuntimeError(f"transpose: dimensions {d0} and {d1} must both be sparse dimensions (the first "
                               f"{s}) of a sparse tensor in jgrad")
        perm = list(range(s))
        perm[d0], perm[d1] = d1, d0
        shape = list(self.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        idx = self._sp_idx[perm]
        return _from_parts(self._sp_values, idx, tuple(shape), False)

    def permute(self, *dims):
        """A permutation of the sparse dimensions among themselves (PyTorch's, uncoalesced)."""
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        perm = [d + self.ndim if d < 0 else d for d in dims]
        s = self.sparse_dim()
        if sorted(perm) != list(range(self.ndim)):
            raise RuntimeError(f"permute(sparse_coo): dims {list(dims)} are not a permutation of {self.ndim} dims")
        if perm[s:] != list(range(s, self.ndim)):
            raise RuntimeError("permute(sparse_coo): jgrad permutes the sparse dimensions only")
        if perm == list(range(self.ndim)):
            return self
        return _from_parts(self._sp_values, self._sp_idx[perm[:s]], tuple(self.shape[p] for p in perm), False)

    def unsqueeze(self, dim):
        """A new sparse dimension of size 1 at ``dim`` (among the sparse dims)."""
        d = dim + self.ndim + 1 if dim < 0 else dim
        if not 0 <= d <= self.ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-self.ndim - 1}, {self.ndim}], "
                             f"but got {dim})")
        if d > self.sparse_dim():
            raise RuntimeError("unsqueeze: jgrad inserts a sparse tensor's new dimension among its sparse dims")
        idx = np.insert(self._sp_idx, d, 0, axis=0)
        return _from_parts(self._sp_values, idx, self.shape[:d] + (1,) + self.shape[d:], self._sp_coalesced)

    def t(self):
        if self.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 sparse and 0 dense dimensions, but got "
                               f"{self.sparse_dim()} sparse and {self.dense_dim()} dense dimensions")
        return self if self.ndim < 2 else self.transpose(0, 1)

    def __repr__(self):
        return _format(self)

    __str__ = __repr__


def _not_implemented(aten, t):
    backend = "SparseCUDA" if t.device.type == "gpu" else "SparseCPU"
    return (f"Could not run 'aten::{aten}' with arguments from the '{backend}' backend. This could be because the "
            f"operator doesn't exist for this backend, or was omitted during the selective/custom build process "
            f"(if using custom build).")


def _from_parts(values, idx, shape, coalesced, idx_t=None):
    """The sparse tensor of ``values`` (a jgrad tensor) at host indices ``idx`` (sparse_dim, nnz)."""
    t = SparseCooTensor._make(None, values._device, values._stream, values._req, values._grad_fn, values._output_nr)
    t._aval = jax.ShapeDtypeStruct(tuple(int(s) for s in shape), values._value.dtype if values._data is not None
                                   else values.dtype.np)
    t._sp_values, t._sp_idx, t._sp_coalesced = values, idx, bool(coalesced)
    t._sp_idx_t = idx_t if idx_t is not None else tensor(idx, device=values.device)
    return t


def _coalesced(values, idx, shape):
    sdim = idx.shape[0]
    if idx.shape[1] == 0:
        return _from_parts(values, idx, shape, True)
    lin = np.ravel_multi_index(tuple(idx), tuple(shape[:sdim]))
    uniq, inv = np.unique(lin, return_inverse=True)
    new = np.stack(np.unravel_index(uniq, tuple(shape[:sdim]))).astype(np.int64).reshape(sdim, -1)
    vals = call(_COALESCE, values, tensor(inv.astype(np.int64), device=values.device), n=int(uniq.size))
    return _from_parts(vals, new, shape, True)


def _host_indices(indices):
    if isinstance(indices, Tensor):
        if indices.is_floating_point() or indices.dtype == _dtype.bool:
            raise RuntimeError(f"indices must be an int64 tensor, got {indices.dtype}")
        return np.asarray(indices.tolist(), np.int64).reshape(indices.shape)
    return np.asarray(indices, np.int64)  # array-likes are read as int64, as PyTorch's argument parser does


def _check_coo(idx, values, size):
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
    for d in range(sdim):  # always checked: BCOO drops an index out of range silently
        if nnz and idx[d].max() >= size[d]:
            raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is {size[d]} but found index "
                               f"{int(idx[d].max())}")
    return size


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, requires_grad=False,
                      check_invariants=None, is_coalesced=None):
    """A COO tensor with ``values`` (nnz, *dense dims) at ``indices`` (sparse_dim, nnz) (a BCOO's parts)."""
    idx = _host_indices(indices)
    values = values if isinstance(values, Tensor) else as_tensor(values, dtype=dtype, device=device)
    if dtype is not None and values.dtype != dtype:
        values = values.to(dtype)
    if device is not None:
        values = values.to(device)
    size = _check_coo(idx, values, size)
    if requires_grad:
        values = values.detach().requires_grad_(True)  # the sparse tensor is a leaf, its values its storage
    elif values._req:
        values = call(_NAMED, values)
    return _from_parts(values, idx, size, bool(is_coalesced) or idx.shape[1] <= 1)


@tensor_method()
def to_sparse(self, layout=None, blocksize=None, dense_dim=None, *, sparse_dim=None):
    """The COO sparse form of ``self`` (its non-zeros; ``to_sparse(sparse_dim)`` keeps the last dims dense)."""
    if isinstance(layout, int):  # to_sparse(sparse_dim), PyTorch's older signature
        sparse_dim, layout = layout, None
    if layout not in (None, sparse_coo):
        convert = _sparse_ops.get(f"to_{getattr(layout, 'name', None)}")  # to_sparse_csr: ops.sparse_csr
        if convert is None:
            raise RuntimeError(f"to_sparse: layout {layout} is not supported by jgrad (only sparse_coo and "
                               f"sparse_csr).")
        return convert(self)
    sdim = self.ndim - (dense_dim or 0) if sparse_dim is None else int(sparse_dim)
    if not 0 <= sdim <= self.ndim:
        raise RuntimeError(f"sparse_dim argument must be in [0, {self.ndim}] range, but {sdim} is given")
    dense = np.asarray(self.detach().numpy())  # which entries are non-zero: a host read, as nnz is data
    nz = np.abs(dense).reshape(dense.shape[:sdim] + (-1,)).max(-1) != 0 if sdim < self.ndim else dense != 0
    idx = np.stack(np.nonzero(nz)).astype(np.int64).reshape(sdim, -1)
    idx_t = tensor(idx, device=self.device)
    return _from_parts(call(_GATHER, self, idx_t), idx, self.shape, True, idx_t)


@tensor_method()
def to_sparse_coo(self):
    """``to_sparse()`` with the COO layout named."""
    return to_sparse(self)


@tensor_method()
def to_dense(self, dtype=None, *, masked_grad=None):
    """A strided tensor's dense form: itself (PyTorch's; a sparse tensor's is its values)."""
    return self if dtype is None else self.to(dtype)


tensor_method("layout")(property(lambda self: strided))


def _strided_refusal(name, expected="sparse coordinate tensor"):
    def method(self):
        raise RuntimeError(f"{name} expected {expected} layout but got Strided")
    method.__name__ = name
    return method


def _strided_missing(name):
    def method(self):
        backend = "CUDA" if self.device.type == "gpu" else "CPU"
        raise NotImplementedError(f"Could not run 'aten::{name}' with arguments from the '{backend}' backend. This "
                                  f"could be because the operator doesn't exist for this backend, or was omitted "
                                  f"during the selective/custom build process (if using custom build).")
    method.__name__ = name
    return method


# A strided tensor answers the COO accessors as PyTorch's does: sparse_dim 0, every dim dense, the rest refused
for _name in ("coalesce", "indices", "is_coalesced"):
    tensor_method(_name)(_strided_refusal(_name))
tensor_method("values")(_strided_refusal("values", "sparse tensor"))
for _name in ("_nnz", "_indices", "_values"):
    tensor_method(_name)(_strided_missing(_name))
tensor_method("sparse_dim")(lambda self: 0)
tensor_method("dense_dim")(lambda self: self.ndim)


def _add_suffixes(text, suffixes, indent, force=True):
    """torch._tensor_str._add_suffixes (``force``: the first suffix on a new line, as a COO tensor's)."""
    parts, last = [text], len(text) - text.rfind("\n") + 1
    for suffix in suffixes:
        if force or last + len(suffix) + 2 > 80:
            parts.append(",\n" + " " * indent + suffix)
            last, force = indent + len(suffix), False
        else:
            parts.append(", " + suffix)
            last += len(suffix) + 2
    return "".join(parts) + ")"


def _part(x, prefix):
    """One part of a sparse tensor's repr (``values=tensor([...])``), without its dtype (a suffix says it once),
    its lines wrapped where PyTorch wraps them (at its indent: ``tensor(`` + ``prefix`` + ``tensor(``)."""
    body = _format_array(np.asarray(x.detach().numpy()), 14 + len(prefix), x.dtype)
    return f"{prefix}tensor({body}" + (f", size={tuple(x.shape)})" if x.numel() == 0 else ")")


def _suffixes(t):
    """size, nnz, dtype, layout and autograd suffixes of a sparse tensor's repr."""
    suffixes = [f"size={tuple(t.shape)}", f"nnz={t._nnz()}"]
    if t.dtype not in (_dtype.get_default_dtype(), _dtype.int64, _dtype.bool):
        suffixes.append(f"dtype={t.dtype}")
    suffixes.append(f"layout={t.layout}")
    if t._grad_fn is not None:
        suffixes.append(f"grad_fn=<{t._grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return suffixes


def _format(t):
    """PyTorch's repr of a sparse COO tensor."""
    text = "tensor(" + _part(t._sp_idx_t, "indices=") + ",\n       " + _part(t._sp_values, "values=")
    return _add_suffixes(text, _suffixes(t), 7)
