"""Order statistics and NaN-aware reductions: ``median nanmedian nansum nanmean var_mean std_mean count_nonzero
cummax cummin``.

``median``/``nanmedian`` give the lower of the two middle values, as PyTorch; with ``dim`` they return
``(values, indices)`` and the gradient goes to the element at the index (without ``dim`` it is shared by the
elements equal to the median, PyTorch's ``evenly_distribute_backward``). ``cummax``/``cummin`` scan with
PyTorch's rule: a later element equal to the running extreme takes its place, and NaN wins.

Imports ``_dispatch``, ``_dtype``, ``ops._registry`` and ``ops.reduction``; ``ops.creation`` at the call.
"""
from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ._registry import expect_tensor, scalar_type_name, tensor_method, wrap_dim
from .reduction import _dims, _nonempty, mean, std, sum, var

__all__ = ["median", "nanmedian", "nansum", "nanmean", "var_mean", "std_mean", "count_nonzero", "cummax", "cummin"]

return_types_median = collections.namedtuple("median", ["values", "indices"])
return_types_nanmedian = collections.namedtuple("nanmedian", ["values", "indices"])
return_types_cummax = collections.namedtuple("cummax", ["values", "indices"])
return_types_cummin = collections.namedtuple("cummin", ["values", "indices"])
_LONG = jnp.int64


def _median_index(a, axis, ignore_nan):
    """The index along ``axis`` of the lower median (NaN: the first NaN, unless ``ignore_nan``)."""
    order = jnp.argsort(a, axis=axis, stable=True)  # NaNs sort last, in their original order
    n = a.shape[axis]
    if jnp.issubdtype(a.dtype, jnp.inexact):
        nans = jnp.isnan(a).sum(axis=axis, keepdims=True)
        if ignore_nan:
            k = jnp.maximum((n - nans - 1) // 2, 0)
        else:
            k = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    else:
        k = jnp.full(a.shape[:axis] + (1,) + a.shape[axis + 1:], (n - 1) // 2)
    return jnp.take_along_axis(order, k.astype(order.dtype), axis=axis)


def _median_dim_fwd(a, dim, keepdim, ignore_nan):
    if a.ndim == 0:
        return a, jnp.zeros((), _LONG)
    idx = _median_index(a, dim, ignore_nan)
    vals = jnp.take_along_axis(a, idx, axis=dim)
    if not keepdim:
        vals, idx = jnp.squeeze(vals, dim), jnp.squeeze(idx, dim)
    return vals, idx.astype(_LONG)


def _select_bwd(ctx, g, _gi):
    """The gradient of a (values, indices) reduction: to the element at each index."""
    a, = ctx.saved
    if a.ndim == 0:
        return (g,)
    dim, keepdim = ctx.attrs["dim"], ctx.attrs.get("keepdim", False)
    idx = ctx.outputs[1]
    if not keepdim:
        g, idx = jnp.expand_dims(g, dim), jnp.expand_dims(idx, dim)
    out = jnp.zeros(a.shape, g.dtype)
    return (jnp.put_along_axis(out, idx, g, axis=dim, inplace=False),)


def _median_all_fwd(a, ignore_nan):
    flat = a.reshape(-1)
    return jnp.take(flat, _median_index(flat, 0, ignore_nan))[0]


def _median_all_bwd(ctx, g):
    a, = ctx.saved
    out = ctx.outputs[0]
    mask = (a == out) | (jnp.isnan(a) & jnp.isnan(out)) if jnp.issubdtype(a.dtype, jnp.inexact) else a == out
    return (jnp.where(mask, g / mask.sum().astype(g.dtype), jnp.zeros((), g.dtype)),)


MEDIAN_DIM = Op("MedianBackward1", _median_dim_fwd, _select_bwd, save=(0,), save_outputs=True, num_outputs=2)
NANMEDIAN_DIM = Op("NanmedianBackward1", _median_dim_fwd, _select_bwd, save=(0,), save_outputs=True,
                   num_outputs=2)
MEDIAN_ALL = Op("MedianBackward0", _median_all_fwd, _median_all_bwd, save=(0,), save_outputs=True)
NANMEDIAN_ALL = Op("NanmedianBackward0", _median_all_fwd, _median_all_bwd, save=(0,), save_outputs=True)


def _median(input, dim, keepdim, name, ignore_nan):
    expect_tensor(input, name)
    if input.dtype is _dtype.bool or input.dtype.is_complex:
        raise NotImplementedError(f"\"{name}_out\" not implemented for '{scalar_type_name(input.dtype)}'" if dim
                                  is not None else f"\"{name}_cpu\" not implemented for "
                                  f"'{scalar_type_name(input.dtype)}'")
    if dim is None:
        if input.numel() == 0:  # NaN, or the type's lowest value for integers (PyTorch's empty result)
            from .creation import full
            fill = float("nan") if input.dtype.is_floating_point else int(np.iinfo(input.dtype.np).min)
            return full((), fill, dtype=input.dtype, device=input.device)
        return call(NANMEDIAN_ALL if ignore_nan else MEDIAN_ALL, input, ignore_nan=ignore_nan)
    d = wrap_dim(dim, input.ndim, name)
    _nonempty(input, d, name)
    vals, idx = call(NANMEDIAN_DIM if ignore_nan else MEDIAN_DIM, input, dim=d, keepdim=bool(keepdim),
                     ignore_nan=ignore_nan)
    return (return_types_nanmedian if ignore_nan else return_types_median)(vals, idx)


@tensor_method()
def median(input, dim=None, keepdim=False):
    """The lower median of all elements, or ``(values, indices)`` along ``dim``; NaN if a NaN is there."""
    return _median(input, dim, keepdim, "median", False)


@tensor_method()
def nanmedian(input, dim=None, keepdim=False):
    """``median`` ignoring NaN (NaN only where every element is NaN)."""
    return _median(input, dim, keepdim, "nanmedian", True)


NAN_TO_ZERO = Op("NansumBackward0", lambda a: jnp.where(jnp.isnan(a), jnp.zeros((), a.dtype), a))


@tensor_method()
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    """``sum`` treating NaN as zero."""
    expect_tensor(input, "nansum")
    if input.dtype.is_floating_point:
        input = call(NAN_TO_ZERO, input)
    return sum(input, dim, keepdim, dtype=dtype)


@tensor_method()
def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    """``mean`` of the non-NaN elements."""
    expect_tensor(input, "nanmean")
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"nanmean(): expected input to have floating point or complex dtype but got "
                           f"{scalar_type_name(input.dtype)}")
    count = (~input.isnan()).sum(dim, keepdim)
    return nansum(input, dim, keepdim, dtype=dtype) / count


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(var, mean)`` over ``dim``."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim if dim is None or not isinstance(dim, (list, tuple)) or dim else None, keepdim))


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """``(std, mean)`` over ``dim``."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim if dim is None or not isinstance(dim, (list, tuple)) or dim else None, keepdim))


COUNT_NONZERO = Op("count_nonzero", lambda a, dim: jnp.sum(a != 0, axis=dim).astype(_LONG), differentiable=False)


@tensor_method()
def count_nonzero(input, dim=None):
    """The number of non-zero elements (over ``dim``), as int64."""
    expect_tensor(input, "count_nonzero")
    return call(COUNT_NONZERO, input, dim=_dims(input, dim, "count_nonzero"))


def _scan_fwd(a, dim, is_max):
    if a.ndim == 0:
        return a, jnp.zeros((), _LONG)
    idx = jax.lax.broadcasted_iota(_LONG, a.shape, dim)
    inexact = jnp.issubdtype(a.dtype, jnp.inexact)

    def combine(x, y):
        (va, ia), (vb, ib) = x, y
        better = (vb >= va) if is_max else (vb <= va)
        if inexact:
            better = jnp.isnan(vb) | (~jnp.isnan(va) & better)
        return jnp.where(better, vb, va), jnp.where(better, ib, ia)

    _, idx = jax.lax.associative_scan(combine, (a, idx), axis=dim)
    return jnp.take_along_axis(a, idx, axis=dim), idx  # the elements themselves (XLA's select would make -0.0 +0.0)


def _scan_bwd(ctx, g, _gi):
    a, = ctx.saved
    if a.ndim == 0:
        return (g,)
    dim = ctx.attrs["dim"]
    idx = ctx.outputs[1]
    out = jnp.zeros(a.shape, g.dtype)
    grids = jnp.indices(a.shape, sparse=True)
    where = tuple(idx if i == dim else grids[i] for i in range(a.ndim))
    return (out.at[where].add(g),)


CUMMAX = Op("CummaxBackward0", _scan_fwd, _scan_bwd, save=(0,), save_outputs=True, num_outputs=2)
CUMMIN = Op("CumminBackward0", _scan_fwd, _scan_bwd, save=(0,), save_outputs=True, num_outputs=2)


@tensor_method()
def cummax(input, dim):
    """``(values, indices)`` of the running maximum along ``dim``."""
    expect_tensor(input, "cummax")
    d = wrap_dim(dim, input.ndim, "cummax")
    return return_types_cummax(*call(CUMMAX, input, dim=d, is_max=True))


@tensor_method()
def cummin(input, dim):
    """``(values, indices)`` of the running minimum along ``dim``."""
    expect_tensor(input, "cummin")
    d = wrap_dim(dim, input.ndim, "cummin")
    return return_types_cummin(*call(CUMMIN, input, dim=d, is_max=False))
