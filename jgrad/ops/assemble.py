"""Ops that build a new tensor from others (none is a view): ``diag diag_embed diagflat tile hstack vstack dstack
column_stack row_stack atleast_1d/2d/3d meshgrid cartesian_prod fliplr flipud rot90 diff take argwhere`` and the
indexed writes ``index_fill index_copy masked_scatter scatter_reduce``.

Most are compositions of the shape ops (``cat``, ``reshape``, ``expand``...), so their gradients are those ops'
own; the rest are jax forwards differentiated with ``jax.vjp``.

Imports ``_dispatch``, ``_checks``, ``_dtype``, ``_tensor``, ``ops._registry``, ``ops.indexing`` and ``ops.shape``.
"""
from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..core import _dtype
from ..runtime._checks import check_range
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import expect_tensor, parse_size, tensor_method, wrap_dim
from .indexing import _check_index, _scatter_index, _scatter_src, nonzero
from .shape import cat, stack

__all__ = ["diag", "diag_embed", "diagflat", "tile", "hstack", "vstack", "dstack", "column_stack", "row_stack",
           "atleast_1d", "atleast_2d", "atleast_3d", "meshgrid", "cartesian_prod", "fliplr", "flipud", "rot90",
           "diff", "take", "argwhere", "index_fill", "index_copy", "masked_scatter", "scatter_reduce"]


def _diag_fwd(a, diagonal):
    return jnp.diag(a, diagonal)


DIAG = Op("DiagBackward0", _diag_fwd)


@tensor_method()
def diag(input, diagonal=0):
    """A 1-D tensor as the ``diagonal``-th diagonal of a square matrix, or a matrix's ``diagonal``-th diagonal."""
    expect_tensor(input, "diag")
    if input.ndim not in (1, 2):
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.ndim}D")
    return call(DIAG, input, diagonal=int(diagonal))


def _diag_embed_fwd(a, offset):
    n = a.shape[-1] + abs(offset)
    i = jnp.arange(a.shape[-1])
    rows, cols = (i, i + offset) if offset >= 0 else (i - offset, i)
    return jnp.zeros(a.shape[:-1] + (n, n), a.dtype).at[..., rows, cols].set(a)


DIAG_EMBED = Op("DiagEmbedBackward0", _diag_embed_fwd)


@tensor_method()
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """Matrices whose ``offset``-th diagonals (in dims ``dim1``, ``dim2``) are the last dim of ``input``."""
    out = call(DIAG_EMBED, input, offset=int(offset))
    n = out.ndim
    d1, d2 = wrap_dim(dim1, n), wrap_dim(dim2, n)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    if (d1, d2) != (n - 2, n - 1):
        out = out.movedim((n - 2, n - 1), (d1, d2))
    return out


@tensor_method()
def diagflat(input, offset=0):
    """``diag(input.flatten(), offset)``."""
    return diag(input.reshape(-1), offset)


@tensor_method()
def tile(input, dims):
    """``input`` repeated ``dims`` times along each dim (``dims`` shorter than ``input.ndim`` is padded with 1s)."""
    dims = parse_size((dims,), "tile", "dims")
    if len(dims) < input.ndim:
        dims = (1,) * (input.ndim - len(dims)) + tuple(dims)
    return input.repeat(*dims)


def _tensors(tensors, name):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
                        f"{type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{name} expects a non-empty TensorList")
    return list(tensors)


def _atleast(n, tensors):
    one = len(tensors) == 1 and isinstance(tensors[0], Tensor)
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tensors[0]
    out = []
    for t in tensors:
        if t.ndim >= n:
            out.append(t)
        elif n == 1 or t.ndim == 0:
            out.append(t.reshape((1,) * n))
        elif n == 2:
            out.append(t.reshape(1, -1))
        else:  # 3-D from 1-D (1, N, 1) or 2-D (M, N, 1)
            out.append(t.reshape(1, -1, 1) if t.ndim == 1 else t.unsqueeze(-1))
    return out[0] if one else tuple(out)


def atleast_1d(*tensors):
    return _atleast(1, tensors)


def atleast_2d(*tensors):
    return _atleast(2, tensors)


def atleast_3d(*tensors):
    return _atleast(3, tensors)


def hstack(tensors):
    """Concatenate along dim 1 (dim 0 for 1-D tensors)."""
    ts = [atleast_1d(t) for t in _tensors(tensors, "hstack")]
    return cat(ts, 0 if ts and ts[0].ndim == 1 else 1)


def vstack(tensors):
    """Concatenate along dim 0, 1-D tensors as rows."""
    return cat([atleast_2d(t) for t in _tensors(tensors, "vstack")], 0)


def row_stack(tensors):
    """``vstack``."""
    return cat([atleast_2d(t) for t in _tensors(tensors, "vstack")], 0)


def dstack(tensors):
    """Concatenate along dim 2 (depth), after ``atleast_3d``."""
    return cat([atleast_3d(t) for t in _tensors(tensors, "dstack")], 2)


def column_stack(tensors):
    """1-D (and 0-d) tensors as columns, concatenated with the others along dim 1."""
    ts = [t.reshape(-1, 1) if t.ndim <= 1 else t for t in _tensors(tensors, "column_stack")]
    return cat(ts, 1)


def meshgrid(*tensors, indexing=None):
    """Coordinate grids of 1-D (or 0-d) tensors; ``indexing`` "ij" (the default, with PyTorch's warning) or "xy"."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
                      UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {indexing}")
    if not tensors:
        raise RuntimeError("torch.meshgrid expects a non-empty TensorList")
    for t in tensors:
        if t.ndim > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: {t}")
    if len({t.dtype for t in tensors}) > 1:
        raise RuntimeError("torch.meshgrid: Expected all tensors in the tensor list to have the same dtype.")
    ts = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(ts) >= 2
    if swap:
        ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    out = [t.reshape(tuple(-1 if j == i else 1 for j in range(len(ts)))).expand(*shape) for i, t in enumerate(ts)]
    if swap:  # "xy": the grids of the first two inputs over the swapped dims
        out[0], out[1] = out[1], out[0]
    return tuple(out)


def cartesian_prod(*tensors):
    """Every combination of the elements of 1-D tensors, one per row."""
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1)


@tensor_method()
def fliplr(input):
    if input.ndim < 2:
        raise RuntimeError("Input must be >= 2-d.")
    return input.flip(1)


@tensor_method()
def flipud(input):
    if input.ndim < 1:
        raise RuntimeError("Input must be >= 1-d.")
    return input.flip(0)


ROT90 = Op("Rot90Backward0", lambda a, k, dims: jnp.rot90(a, k, dims))


@tensor_method()
def rot90(input, k=1, dims=(0, 1)):
    """Rotate by 90 degrees ``k`` times in the plane of ``dims``."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.ndim < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.ndim}")
    d = (wrap_dim(dims[0], input.ndim), wrap_dim(dims[1], input.ndim))
    if d[0] == d[1]:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d[0]} and dim1 = {d[1]}")
    return call(ROT90, input, k=int(k) % 4, dims=d)


@tensor_method()
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """The ``n``-th forward difference along ``dim`` (``prepend``/``append`` concatenated first)."""
    if input.ndim == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    d = wrap_dim(dim, input.ndim)
    parts = [p for p in (prepend, input, append) if p is not None]
    x = cat(parts, d) if len(parts) > 1 else input
    for _ in range(n):
        m = x.shape[d]
        if m == 0:
            break
        a, b = x.narrow(d, 1, m - 1), x.narrow(d, 0, m - 1)
        x = (a ^ b) if x.dtype is _dtype.bool else a - b
    return x


TAKE = Op("TakeBackward0", lambda a, idx: jnp.take(a.reshape(-1), idx))


@tensor_method()
def take(input, index):
    """Elements of the flattened ``input`` at ``index`` (a tensor of ``index``'s shape)."""
    if index.dtype.is_floating_point or index.dtype is _dtype.bool:
        raise RuntimeError(f"take(): Expected a long tensor for index, but got {index.dtype}")
    n = input.numel()
    check_range(index, -n, n, lambda bad: IndexError(f"out of range: tried to access index {bad} on a tensor of "
                                                      f"{n} elements."), "take")
    return call(TAKE, input, index)


@tensor_method()
def argwhere(input):
    """The indices of the non-zero elements, one row each (``nonzero``)."""
    return nonzero(input)


# ---- indexed writes -----------------------------------------------------------------------------
def _index_dim(input, dim, index, name):
    if index.ndim > 1:
        raise IndexError(f"{name}(): Index is supposed to be a vector")
    if index.dtype.is_floating_point or index.dtype is _dtype.bool:
        raise IndexError(f"{name}(): Expected dtype int64 for index")
    d = wrap_dim(dim, input.ndim)
    size = input.shape[d] if input.ndim else 1
    check_range(index, -size, size, lambda bad: IndexError(f"index {bad} is out of bounds for dimension {d} with "
                                                           f"size {size}"), name)
    return d


def _at(a, dim, idx):
    return (slice(None),) * dim + (idx.reshape(-1),)


INDEX_FILL = Op("IndexFillBackward0", lambda a, idx, v, dim: a.at[_at(a, dim, idx)].set(jnp.asarray(v, a.dtype)))
INDEX_COPY = Op("IndexCopyBackward0", lambda a, idx, src, dim: a.at[_at(a, dim, idx)].set(src.astype(a.dtype)))


@tensor_method()
def index_fill(input, dim, index, value):
    """``input`` with the slices at ``index`` along ``dim`` set to ``value``."""
    return call(INDEX_FILL, input, index, value, dim=_index_dim(input, dim, index, "index_fill"))


@tensor_method()
def index_copy(input, dim, index, source):
    """``input`` with the slices at ``index`` along ``dim`` replaced by those of ``source``."""
    d = _index_dim(input, dim, index, "index_copy")
    if source.dtype is not input.dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, but got (self) "
                           f"{input.dtype.name.capitalize()} and (source) {source.dtype.name.capitalize()}")
    return call(INDEX_COPY, input, index, source, dim=d)


def _masked_scatter_fwd(a, mask, src):
    mask = jnp.broadcast_to(mask, a.shape).reshape(-1)
    pos = jnp.cumsum(mask) - 1
    vals = src.reshape(-1)[jnp.clip(pos, 0, max(src.size - 1, 0))].astype(a.dtype)
    return jnp.where(mask, vals, a.reshape(-1)).reshape(a.shape)


MASKED_SCATTER = Op("MaskedScatterBackward0", _masked_scatter_fwd)


@tensor_method()
def masked_scatter(input, mask, source):
    """``input`` with the positions where ``mask`` is True filled, in order, from ``source``."""
    if mask.dtype is not _dtype.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype "
                           f"{mask.dtype.name}")
    if source.dtype is not input.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got "
                           f"{input.dtype.name.capitalize()} and {source.dtype.name.capitalize()}")
    return call(MASKED_SCATTER, input, mask, source)


_REDUCERS = ("sum", "prod", "mean", "amax", "amin")


def _scatter_reduce_fwd(a, idx, src, dim, reduce, include_self):
    at = a.at[_scatter_index(idx, dim)]
    s = _scatter_src(src, idx, a.dtype)
    if reduce == "mean":
        ones = jnp.zeros(a.shape, a.dtype).at[_scatter_index(idx, dim)].add(jnp.ones_like(s))
        base = a if include_self else jnp.where(ones > 0, jnp.zeros_like(a), a)
        total = base.at[_scatter_index(idx, dim)].add(s)
        count = ones + (1 if include_self else 0)
        count = jnp.where(count == 0, 1, count)
        out = total / count if jnp.issubdtype(a.dtype, jnp.inexact) else jnp.floor_divide(total, count)
        return jnp.where(ones > 0, out, a).astype(a.dtype)
    identity = {"sum": 0, "prod": 1}
    if not include_self:
        hit = jnp.zeros(a.shape, bool).at[_scatter_index(idx, dim)].set(True)
        if reduce in identity:
            fill = jnp.asarray(identity[reduce], a.dtype)
        else:
            fill = jnp.asarray(-jnp.inf if reduce == "amax" else jnp.inf, a.dtype) \
                if jnp.issubdtype(a.dtype, jnp.inexact) else \
                jnp.asarray(jnp.iinfo(a.dtype).min if reduce == "amax" else jnp.iinfo(a.dtype).max, a.dtype)
        at = jnp.where(hit, fill, a).at[_scatter_index(idx, dim)]
    return {"sum": at.add, "prod": at.multiply, "amax": at.max, "amin": at.min}[reduce](s)


SCATTER_REDUCE = Op("ScatterReduceBackward0", _scatter_reduce_fwd)


@tensor_method()
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """Reduce the values of ``src`` into ``input`` at ``index`` along ``dim`` (``reduce``: sum, prod, mean, amax,
    amin); ``include_self=False`` leaves the input's own values out where something is scattered."""
    if reduce not in _REDUCERS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if src.dtype is not input.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype")
    d = _check_index(input, dim, index, "scatter_reduce", src)
    return call(SCATTER_REDUCE, input, index, src, dim=d, reduce=reduce, include_self=bool(include_self))
