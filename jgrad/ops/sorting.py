"""Sorting and searching: sort, argsort, msort, topk, kthvalue, searchsorted, bucketize.

Sorts are stable (``stable=False`` gives the stable order too, which PyTorch allows). NaN sorts
as the largest value, as in PyTorch. Gradients of ``sort``/``topk``/``kthvalue`` flow to the
positions the indices name (PyTorch's ``value_selecting_reduction_backward``).

Imports ``_dispatch``, ``_dtype``, ``_tensor`` and ``ops._registry``; ``ops.creation`` at the call.
"""
from __future__ import annotations

import builtins
import collections

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import scalar_type_name, tensor_method, wrap_dim

return_types_sort = collections.namedtuple("sort", ["values", "indices"])
return_types_topk = collections.namedtuple("topk", ["values", "indices"])
return_types_kthvalue = collections.namedtuple("kthvalue", ["values", "indices"])


def _index_np():
    return _dtype._index_dtype().np


def _argsort(a, dim, descending):
    """Stable argsort along ``dim``; descending keeps equal elements in their original order."""
    if not descending:
        return jnp.argsort(a, axis=dim, stable=True)
    n = a.shape[dim]
    rev = jnp.flip(a, dim)  # stable ascending on the reversed array, reversed again: ties stay in order
    return (n - 1) - jnp.flip(jnp.argsort(rev, axis=dim, stable=True), dim)


def _scatter_back(g, idx, shape, dim, keepdim=True):
    """Gradient of values picked along ``dim`` at ``idx``: ``zeros(shape).scatter(dim, idx, g)``."""
    if not keepdim:
        g, idx = jnp.expand_dims(g, dim), jnp.expand_dims(idx, dim)
    return jnp.put_along_axis(jnp.zeros(shape, g.dtype), idx, g, axis=dim, inplace=False)


def _sort_fwd(a, dim, descending):
    if a.ndim == 0:
        return a, jnp.zeros((), _index_np())
    idx = _argsort(a, dim, descending)
    return jnp.take_along_axis(a, idx, axis=dim), idx.astype(_index_np())


def _select_bwd(ctx, g, _g_idx):
    shape = ctx.in_avals[0][0]
    idx = ctx.outputs[1]
    if not shape:
        return (g,)
    return (_scatter_back(g, idx, shape, ctx.attrs["dim"], ctx.attrs.get("keepdim", True)),)


SORT = Op("SortBackward0", _sort_fwd, _select_bwd, save=(), save_outputs=True, num_outputs=2)
ARGSORT = Op("argsort", lambda a, dim, descending: _sort_fwd(a, dim, descending)[1], differentiable=False)


def _topk_fwd(a, k, dim, largest, sorted):  # noqa: A002 - PyTorch's name
    if a.ndim == 0:
        return a, jnp.zeros((), _index_np())
    moved = jnp.moveaxis(a, dim, -1)
    if largest:
        key = moved
    elif jnp.issubdtype(a.dtype, jnp.inexact):
        key = -moved
    else:
        key = ~moved  # integers and bools: order-reversing without overflow
    _, idx = jax.lax.top_k(key, k)
    idx = jnp.moveaxis(idx, -1, dim)
    return jnp.take_along_axis(a, idx, axis=dim), idx.astype(_index_np())


TOPK = Op("TopkBackward0", _topk_fwd, _select_bwd, save=(), save_outputs=True, num_outputs=2)


def _kthvalue_fwd(a, k, dim, keepdim):
    if a.ndim == 0:
        return a, jnp.zeros((), _index_np())
    idx = jax.lax.slice_in_dim(_argsort(a, dim, False), k - 1, k, axis=dim)
    vals = jnp.take_along_axis(a, idx, axis=dim)
    if not keepdim:
        vals, idx = jnp.squeeze(vals, dim), jnp.squeeze(idx, dim)
    return vals, idx.astype(_index_np())


KTHVALUE = Op("KthvalueBackward0", _kthvalue_fwd, _select_bwd, save=(), save_outputs=True, num_outputs=2)


@tensor_method()
def sort(input, dim=-1, descending=False, stable=False):
    """Sorted values and their indices along ``dim`` (a ``(values, indices)`` named tuple)."""
    d = wrap_dim(dim, input.ndim)
    values, indices = call(SORT, input, dim=d, descending=builtins.bool(descending))
    return return_types_sort(values, indices)


@tensor_method()
def argsort(input, dim=-1, descending=False, stable=False):
    """The indices that sort ``input`` along ``dim`` (stable)."""
    return call(ARGSORT, input, dim=wrap_dim(dim, input.ndim), descending=builtins.bool(descending))


@tensor_method()
def msort(input):
    """``sort(input, dim=0).values``."""
    return sort(input, 0).values


@tensor_method()
def topk(input, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's name
    """The ``k`` largest (``largest=False``: smallest) values along ``dim`` and their indices, sorted."""
    d = wrap_dim(dim, input.ndim)
    size = input.shape[d] if input.ndim else 1
    k = builtins.int(k)
    if not 0 <= k <= size:
        raise RuntimeError("selected index k out of range")
    values, indices = call(TOPK, input, k=k, dim=d, largest=builtins.bool(largest), sorted=True)
    return return_types_topk(values, indices)


@tensor_method()
def kthvalue(input, k, dim=-1, keepdim=False):
    """The ``k``-th smallest value (1-based) along ``dim`` and its index."""
    d = wrap_dim(dim, input.ndim, "kthvalue")
    size = input.shape[d] if input.ndim else 1
    k = builtins.int(k)
    if size == 0:
        raise IndexError(f"kthvalue(): Expected reduction dim {d} to have non-zero size.")
    if not 1 <= k <= size:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    values, indices = call(KTHVALUE, input, k=k, dim=d, keepdim=builtins.bool(keepdim))
    return return_types_kthvalue(values, indices)


# ---- searching -------------------------------------------------------------------------
def _searchsorted_fwd(seq, values, sorter, side, out_dtype):
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    dt = jnp.promote_types(seq.dtype, values.dtype)
    seq, values = seq.astype(dt), values.astype(dt)
    if seq.ndim == 1:
        out = jnp.searchsorted(seq, values, side=side)
    else:
        lead = seq.shape[:-1]
        flat = jax.vmap(lambda s, v: jnp.searchsorted(s, v, side=side))(
            seq.reshape(-1, seq.shape[-1]), values.reshape(-1, values.shape[-1]))
        out = flat.reshape(lead + values.shape[-1:])
    return out.astype(out_dtype)


SEARCHSORTED = Op("searchsorted", _searchsorted_fwd, differentiable=False)


def _as_values(values, like):
    if isinstance(values, Tensor):
        return values
    from .creation import tensor
    return tensor(values, device=like.device)


def _out_dtype(out_int32):
    return jnp.dtype(jnp.int32) if out_int32 else _index_np()


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None, sorter=None):
    """Indices where ``input`` would be inserted into the innermost dim of ``sorted_sequence`` to keep it sorted."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    values = _as_values(input, sorted_sequence)
    seq_shape, val_shape = tuple(sorted_sequence.shape), tuple(values.shape)
    if sorted_sequence.ndim == 0:
        raise RuntimeError("torch.searchsorted(): boundaries tensor should have positive dimension, but got 0 "
                           "dimension")
    if sorted_sequence.ndim != 1 and (len(val_shape) != len(seq_shape) or val_shape[:-1] != seq_shape[:-1]):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           "dimensions of boundaries tensor and input value tensor must match, but we got "
                           f"boundaries tensor {list(seq_shape)} and input value tensor {list(val_shape)}")
    if sorter is not None:
        if sorter.dtype not in (_dtype.int64, _dtype.int32):
            raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got "
                               f"{scalar_type_name(sorter.dtype)}")
        if tuple(sorter.shape) != seq_shape:
            raise RuntimeError(f"torch.searchsorted(): boundary and sorter must have the same size, but got "
                               f"boundary tensor {list(seq_shape)}and got sorter tensor {list(sorter.shape)}")
    return call(SEARCHSORTED, sorted_sequence, values, sorter, side="right" if right else "left",
                out_dtype=_out_dtype(out_int32))


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """The bucket of each element of ``input`` given 1-D sorted ``boundaries`` (``searchsorted`` with swapped roles)."""
    if boundaries.ndim != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})")
    values = _as_values(input, boundaries)
    return call(SEARCHSORTED, boundaries, values, None, side="right" if right else "left",
                out_dtype=_out_dtype(out_int32))


tensor_method("bucketize")(bucketize)
