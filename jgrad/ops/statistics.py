"""``unique``, ``bincount``, ``histc``, ``quantile`` and ``nanquantile`` with PyTorch's signatures, dtypes and errors.

``unique`` and ``bincount`` have results whose size depends on the values, so they read their input on the
host (a synchronization, as ``nonzero``); neither is differentiable in PyTorch. ``histc`` and the quantiles
run on the device; a quantile is differentiable (through the sort), as in PyTorch.

Imports ``_dispatch``, ``_tensor``, ``_dtype`` and ``ops`` (``_registry``, ``creation``).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import as_index, expect_tensor, scalar_type_name, tensor_method, wrap_dim
from .creation import tensor as _tensor

__all__ = ["unique", "unique_consecutive", "bincount", "histc", "quantile", "nanquantile"]


@tensor_method()
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):  # noqa: A002
    """The distinct values (or slices along ``dim``) of ``input``, sorted, with the inverse indices and counts on
    request. A host synchronization: the result's size depends on the values."""
    expect_tensor(input, "unique")
    d = None if dim is None else wrap_dim(dim, input.ndim)
    input._host_sync("unique()")
    a = np.asarray(input.detach()._value)
    if d is None:
        vals, inv, counts = np.unique(a.reshape(-1), return_inverse=True, return_counts=True, equal_nan=False)
        inv = inv.reshape(a.shape)
    else:
        vals, inv, counts = np.unique(a, return_inverse=True, return_counts=True, axis=d)
        inv = inv.reshape(-1)
    idx = _dtype._index_dtype().np
    out = [_tensor(vals, dtype=input.dtype, device=input.device)]
    if return_inverse:
        out.append(_tensor(inv.astype(idx), device=input.device))
    if return_counts:
        out.append(_tensor(counts.astype(idx), device=input.device))
    return out[0] if len(out) == 1 else tuple(out)


@tensor_method()
def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    """``input`` with each run of equal consecutive values (or slices along ``dim``) kept once, with the inverse
    indices and run lengths on request. A host synchronization, as ``unique``."""
    expect_tensor(input, "unique_consecutive")
    d = None if dim is None else wrap_dim(dim, input.ndim)
    input._host_sync("unique_consecutive()")
    a = np.asarray(input.detach()._value)
    flat = a.reshape(-1) if d is None else np.moveaxis(a, d, 0).reshape(a.shape[d], -1)
    n = flat.shape[0]
    if n:
        differs = flat[1:] != flat[:-1]
        starts = np.concatenate([[True], differs if d is None else differs.any(axis=1)])
    else:
        starts = np.zeros(0, bool)
    run = np.cumsum(starts) - 1  # which run each position belongs to
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, n))
    vals = flat[first] if d is None else np.moveaxis(np.take(a, first, axis=d), d, d)
    idx = _dtype._index_dtype().np
    out = [_tensor(vals, dtype=input.dtype, device=input.device)]
    if return_inverse:
        out.append(_tensor(run.reshape(a.shape if d is None else (n,)).astype(idx), device=input.device))
    if return_counts:
        out.append(_tensor(counts.astype(idx), device=input.device))
    return out[0] if len(out) == 1 else tuple(out)


BINCOUNT = Op("bincount", lambda x, w, length, out_dtype: jnp.bincount(
    x, None if w is None else w.astype(out_dtype), length=length).astype(out_dtype), differentiable=False)
_BINCOUNT_INPUT = "bincount only supports 1-d non-negative integral inputs."


@tensor_method()
def bincount(input, weights=None, minlength=0):
    """Occurrences of each non-negative integer in the 1-D ``input`` (summed ``weights`` when given). A host
    synchronization: the length is ``max(input) + 1`` (at least ``minlength``)."""
    expect_tensor(input, "bincount")
    if input.dtype.is_floating_point or input.dtype.is_complex or input.dtype is _dtype.bool:
        raise NotImplementedError(f"\"bincount_cpu\" not implemented for '{scalar_type_name(input.dtype)}'")
    if input.ndim != 1:
        raise RuntimeError(_BINCOUNT_INPUT)
    if weights is not None and (weights.ndim != 1 or weights.shape[0] != input.shape[0]):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    minlength = as_index(minlength, "bincount", "minlength")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    input._host_sync("bincount()")
    a = np.asarray(input._value)
    if a.size and a.min() < 0:
        raise RuntimeError(_BINCOUNT_INPUT)
    length = max(int(a.max()) + 1 if a.size else 0, minlength)
    if weights is None:
        out_dtype = _dtype._index_dtype()
    else:
        out_dtype = weights.dtype if weights.dtype in (_dtype.float32, _dtype.float64) else _dtype.float64
    return call(BINCOUNT, input, None if weights is None else weights.detach(), length=length, out_dtype=out_dtype.np)


def _histc_fwd(x, bins, lo, hi):
    if lo == hi:  # the data's range, widened by 1 each side when it is a single value (PyTorch)
        lo_, hi_ = jnp.min(x), jnp.max(x)
        same = lo_ == hi_
        lo_, hi_ = jnp.where(same, lo_ - 1, lo_), jnp.where(same, hi_ + 1, hi_)
    else:
        lo_, hi_ = jnp.asarray(lo, x.dtype), jnp.asarray(hi, x.dtype)
    inside = (x >= lo_) & (x <= hi_)
    idx = jnp.clip(jnp.floor((x - lo_) * bins / (hi_ - lo_)).astype(jnp.int64), 0, bins - 1)
    return jnp.zeros(bins, x.dtype).at[jnp.where(inside, idx, bins).reshape(-1)].add(1, mode="drop")


HISTC = Op("histc", _histc_fwd, differentiable=False)


@tensor_method()
def histc(input, bins=100, min=0, max=0):  # noqa: A002
    """A histogram of ``bins`` equal bins over ``[min, max]`` (the data's range when they are equal); values
    outside are ignored."""
    expect_tensor(input, "histc")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"\"histogram_cpu\" not implemented for '{scalar_type_name(input.dtype)}'")
    bins = as_index(bins, "histc", "bins")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError("torch.histc: max must be larger than min")
    if min == max and input.numel():
        # the data's range bounds the bins: PyTorch reads it on the host (a sync on a GPU, as its .item() there)
        input._host_sync("histc()")
        v = np.asarray(input.detach()._value)
        if not np.isfinite([v.min(), v.max()]).all():
            raise RuntimeError(f"torch.histc: range of [{v.min():g}, {v.max():g}] is not finite")
    return call(HISTC, input.detach(), bins=bins, lo=float(min), hi=float(max))


_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_fwd(x, q, dim, keepdim, interpolation, nan):
    fn = jnp.nanquantile if nan else jnp.quantile
    ndim = x.ndim
    if dim is None:
        x = x.reshape(-1)
    axis = 0 if dim is None else dim
    out = fn(x, q, axis=axis, method=interpolation, keepdims=keepdim and dim is not None)
    if not nan:  # PyTorch: any NaN in a reduced slice gives NaN
        out = jnp.where(jnp.isnan(x).any(axis=axis, keepdims=keepdim and dim is not None), jnp.nan, out)
    if keepdim and dim is None:  # every dimension kept, of size 1
        out = out.reshape(jnp.shape(q) + (1,) * ndim)
    return out


QUANTILE = Op("QuantileBackward0", _quantile_fwd)


def _check_q(input, q, name):
    if not isinstance(q, Tensor):
        q = float(q)
        if not 0 <= q <= 1:
            raise RuntimeError(f"{name}() q must be in the range [0, 1] but got {q}")
        return q
    if q.ndim > 1:
        raise RuntimeError(f"{name}() q must be a scalar or 1D tensor")
    if q.dtype is not input.dtype:
        raise RuntimeError(f"{name}() q tensor must be same dtype as the input tensor")
    # PyTorch reads q's range on the host (a sync on a GPU too, its .item())
    q._host_sync(f"{name}()")
    v = np.asarray(q.detach()._value)
    if not ((v >= 0) & (v <= 1)).all():
        raise RuntimeError(f"{name}() q values must be in the range [0, 1]")
    return q


def _quantile(input, q, dim, keepdim, interpolation, nan):
    name = "quantile"  # PyTorch's messages name quantile() for nanquantile too
    expect_tensor(input, "nanquantile" if nan else name)
    if input.dtype not in (_dtype.float32, _dtype.float64):
        raise RuntimeError(f"{name}() input tensor must be either float or double dtype")
    q = _check_q(input, q, name)
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{name}() interpolation must be one of linear, lower, higher, midpoint or nearest, but "
                           f"got {interpolation}")
    if input.numel() == 0:
        raise RuntimeError(f"{name}() input tensor must be non-empty")
    d = None if dim is None else wrap_dim(dim, input.ndim)
    return call(QUANTILE, input, q, dim=d, keepdim=bool(keepdim), interpolation=interpolation, nan=nan)


@tensor_method()
def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The ``q``-quantiles (a number or a 1-D tensor, prepended as a dimension) over ``dim`` (all when None)."""
    return _quantile(input, q, dim, keepdim, interpolation, False)


@tensor_method()
def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear"):
    """``quantile`` ignoring NaNs (a slice of NaNs only gives NaN)."""
    return _quantile(input, q, dim, keepdim, interpolation, True)
