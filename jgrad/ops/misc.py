"""Everyday ops of PyTorch programs not covered by the other families: cumulative sums and
products, ``lerp``/``addcmul``/``addcdiv``/``outer``/``xlogy``, and indexing helpers
(``masked_select``, ``repeat_interleave``, ``take_along_dim``, ``movedim``, ``index_add``).

Ops whose output shape depends on data (``masked_select``, ``repeat_interleave`` with a tensor of
repeats) read it on the host first, as PyTorch does on a GPU: a barrier in tiered execution.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry`` and ``ops.pointwise``;
``ops.creation`` and ``ops.indexing`` at the call.
"""
from __future__ import annotations

import builtins

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call, call_inplace
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, tensor_method, wrap_dim
from .pointwise import _promote


def _int_to_long(a, dtype):
    """PyTorch accumulates bool and integer inputs of cumsum/cumprod in int64."""
    if dtype is not None:
        return a.astype(dtype)
    if a.dtype == jnp.bool_ or jnp.issubdtype(a.dtype, jnp.integer):
        return a.astype(_dtype._index_dtype().np)
    return a


CUMSUM = Op("CumsumBackward0", lambda a, dim, dtype: jnp.cumsum(_int_to_long(a, dtype), axis=dim),
            lambda ctx, g: (jnp.flip(jnp.cumsum(jnp.flip(g, ctx.attrs["dim"]), axis=ctx.attrs["dim"]),
                                     ctx.attrs["dim"]),), save=())
# jax differentiates its cumulative product through the scan's multiplications: right at zeros too
CUMPROD = Op("CumprodBackward0", lambda a, dim, dtype: jnp.cumprod(_int_to_long(a, dtype), axis=dim))
LOGCUMSUMEXP = Op("LogcumsumexpBackward0", lambda a, dim: jax.lax.cumlogsumexp(a, axis=dim))


@tensor_method()
def cumsum(input, dim, *, dtype=None):
    """Cumulative sum along ``dim`` (bool and integer inputs accumulate in int64)."""
    dt = _dtype.canonical(dtype).np if dtype is not None else None
    if input.ndim == 0:
        wrap_dim(dim, 0)
        return call(CUMSUM, input.reshape(1), dim=0, dtype=dt).reshape(())
    return call(CUMSUM, input, dim=wrap_dim(dim, input.ndim), dtype=dt)


@tensor_method()
def cumprod(input, dim, *, dtype=None):
    """Cumulative product along ``dim`` (bool and integer inputs accumulate in int64)."""
    dt = _dtype.canonical(dtype).np if dtype is not None else None
    if input.ndim == 0:
        wrap_dim(dim, 0)
        return call(CUMPROD, input.reshape(1), dim=0, dtype=dt).reshape(())
    return call(CUMPROD, input, dim=wrap_dim(dim, input.ndim), dtype=dt)


@tensor_method()
def logcumsumexp(input, dim):
    """``log(cumsum(exp(input), dim))``, computed stably."""
    if input.ndim == 0:
        wrap_dim(dim, 0)
        return input.clone()
    return call(LOGCUMSUMEXP, input, dim=wrap_dim(dim, input.ndim))


# ---- pointwise with several operands ------------------------------------------------------
def _lerp_fwd(a, b, w):
    a, b, w = _promote(a, b, w)
    return jnp.where(jnp.abs(w) < 0.5, a + w * (b - a), b - (b - a) * (1 - w))  # PyTorch's CPU formula


LERP = Op("LerpBackward0", _lerp_fwd)
def _addcmul_fwd(a, t1, t2, value):
    x, y, z = _promote(a, t1, t2)
    if not jnp.issubdtype(x.dtype, jnp.inexact):  # PyTorch casts value to the integer type
        value = int(value)
    return x + jnp.asarray(value, x.dtype) * y * z


ADDCMUL = Op("AddcmulBackward0", _addcmul_fwd)
ADDCDIV = Op("AddcdivBackward0", lambda a, t1, t2, value: (lambda x, y, z: x + value * y / z)(*_promote(a, t1, t2)))
def _outer_fwd(a, b):
    dt = _dtype.result_type(a, b)
    return a.astype(dt)[:, None] * b.astype(dt)[None, :]


OUTER = Op("OuterBackward0", _outer_fwd)


def _xlogy_fwd(x, y):
    x, y = _promote(x, y)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x, y = x.astype(_dtype.get_default_dtype().np), y.astype(_dtype.get_default_dtype().np)
    return jax.scipy.special.xlogy(x, y)


def _xlogy_bwd(ctx, g):
    x, y = _promote(*ctx.saved)
    x, y = x.astype(g.dtype), y.astype(g.dtype)
    # PyTorch's: xlogy(grad, other), 0 where self == 0 and other <= 0
    gx = jnp.where((x == 0) & (y <= 0), jnp.zeros((), g.dtype), jax.scipy.special.xlogy(g, y)) \
        if ctx.needs_input_grad[0] else None
    gy = g * x / y if ctx.needs_input_grad[1] else None
    return gx, gy


XLOGY = Op("XlogyBackward0", _xlogy_fwd, _xlogy_bwd, save=(0, 1))


@tensor_method()
def lerp(input, end, weight):
    """``input + weight * (end - input)``."""
    return call(LERP, input, end, weight)


@tensor_method("lerp_")
def lerp_(input, end, weight):
    return call_inplace(LERP, input, end, weight)


@tensor_method()
def addcmul(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 * tensor2``."""
    return call(ADDCMUL, input, tensor1, tensor2, value=value)


@tensor_method("addcmul_")
def addcmul_(input, tensor1, tensor2, *, value=1):
    return call_inplace(ADDCMUL, input, tensor1, tensor2, value=value)


@tensor_method()
def addcdiv(input, tensor1, tensor2, *, value=1):
    """``input + value * tensor1 / tensor2``."""
    if not (tensor1.dtype.is_floating_point or tensor2.dtype.is_floating_point):
        raise RuntimeError("Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
                           "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can be "
                           "implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
                           "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
                           "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
                           "for all dtypes.")
    return call(ADDCDIV, input, tensor1, tensor2, value=value)


@tensor_method("addcdiv_")
def addcdiv_(input, tensor1, tensor2, *, value=1):
    if not (tensor1.dtype.is_floating_point or tensor2.dtype.is_floating_point):
        return addcdiv(input, tensor1, tensor2, value=value)  # PyTorch's error for integer division
    return call_inplace(ADDCDIV, input, tensor1, tensor2, value=value)


@tensor_method("outer", "ger")
def outer(input, vec2):
    """The outer product of two 1-D tensors."""
    if input.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"outer: Expected 1-D argument self, but got {input.ndim}-D" if input.ndim != 1 else
                           f"outer: Expected 1-D argument vec2, but got {vec2.ndim}-D")
    return call(OUTER, input, vec2)


@tensor_method()
def xlogy(input, other):
    """``input * log(other)``, and 0 where ``input`` is 0."""
    return call(XLOGY, input, other)


# ---- indexing ----------------------------------------------------------------------------------
@tensor_method()
def masked_select(input, mask):
    """The elements of ``input`` where the bool ``mask`` (broadcast with it) is True, as a 1-D tensor."""
    if mask.dtype is not _dtype.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    shape = broadcast_shapes(tuple(input.shape), tuple(mask.shape))
    if tuple(input.shape) != shape:
        input = input.expand(*shape)
    if tuple(mask.shape) != shape:
        mask = mask.expand(*shape)
    return input[mask] if input.ndim else input.reshape(1)[mask.reshape(1)]


REPEAT_INTERLEAVE = Op("RepeatInterleaveBackward0", lambda a, repeats, dim, total:
                       jnp.repeat(a, np.asarray(repeats) if isinstance(repeats, tuple) else repeats, axis=dim,
                                  total_repeat_length=total))


@tensor_method()
def repeat_interleave(input, repeats=None, dim=None, *, output_size=None):
    """Repeat each element ``repeats`` times along ``dim`` (flattened when None); a tensor of repeats is read
    on the host. ``repeat_interleave(repeats)`` alone gives the indices repeated by ``repeats``."""
    if repeats is None:  # torch.repeat_interleave(repeats_tensor)
        from .creation import arange
        counts = input
        return repeat_interleave(arange(counts.shape[0], device=counts.device), counts, 0)
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = wrap_dim(dim, input.ndim)
    size = input.shape[d] if input.ndim else 1
    if isinstance(repeats, Tensor):
        if repeats.ndim == 0 or repeats.numel() == 1:
            repeats = builtins.int(repeats.item())
        else:
            if repeats.ndim != 1 or repeats.shape[0] != size:
                raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) = "
                                   f"{repeats.shape[0] if repeats.ndim else 1} and input.size({d}) = {size}")
            repeats = tuple(builtins.int(r) for r in np.asarray(repeats.tolist()))
    if isinstance(repeats, builtins.int):
        if repeats < 0:
            raise RuntimeError("repeats can not be negative")
        total = repeats * size
    else:
        if builtins.any(r < 0 for r in repeats):
            raise RuntimeError("repeats can not be negative")
        total = builtins.sum(repeats)
    if output_size is not None and output_size != total:
        raise RuntimeError(f"allocated size does not match required size: output_size={output_size}, "
                           f"but repeats sum to {total}")
    return call(REPEAT_INTERLEAVE, input, repeats=repeats, dim=d, total=total)


@tensor_method()
def take_along_dim(input, indices, dim=None):
    """Values of ``input`` at ``indices`` along ``dim`` (of the flattened input when None)."""
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    d = wrap_dim(dim, input.ndim)
    shape = list(broadcast_shapes(tuple(input.shape[:d] + (1,) + input.shape[d + 1:]),
                                  tuple(indices.shape[:d] + (1,) + indices.shape[d + 1:])))
    shape_in, shape_idx = list(shape), list(shape)
    shape_in[d], shape_idx[d] = input.shape[d], indices.shape[d]
    if list(input.shape) != shape_in:
        input = input.expand(*shape_in)
    if list(indices.shape) != shape_idx:
        indices = indices.expand(*shape_idx)
    return input.gather(d, indices)


@tensor_method("movedim", "moveaxis")
def movedim(input, source, destination):
    """Move dims ``source`` to positions ``destination`` (ints or sequences of ints)."""
    src = (source,) if isinstance(source, builtins.int) else tuple(source)
    dst = (destination,) if isinstance(destination, builtins.int) else tuple(destination)
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({list(src)} dims) should contain "
                           f"the same number of dims as destination ({list(dst)} dims)")
    n = input.ndim
    src = [wrap_dim(s, n) for s in src]
    dst = [wrap_dim(s, n) for s in dst]
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in `source` or `destination`")
    order = [i for i in range(n) if i not in src]
    perm = [None] * n
    for s, t in zip(src, dst):
        perm[t] = s
    it = iter(order)
    perm = [p if p is not None else next(it) for p in perm]
    return input.permute(*perm)


moveaxis = movedim

def _index_add_fwd(a, idx, src, dim, alpha):
    at = (slice(None),) * dim + (idx,)
    if a.dtype == jnp.bool_:  # bool: an element becomes True if anything True is added to it
        return a.astype(jnp.int32).at[at].add((src * alpha).astype(jnp.int32)) != 0
    return a.at[at].add((src * alpha).astype(a.dtype))


INDEX_ADD = Op("IndexAddBackward0", _index_add_fwd)


@tensor_method()
def index_add(input, dim, index, source, *, alpha=1):
    """``input`` with ``alpha * source`` added at ``index`` along ``dim`` (repeated indices accumulate)."""
    return call(INDEX_ADD, input, index, source, dim=_index_dim(input, dim, index, "index_add"), alpha=alpha)


def _index_dim(input, dim, index, name):
    from .indexing import _check_values
    return _check_values(input, wrap_dim(dim, input.ndim), index, name)


@tensor_method("index_add_")
def index_add_(input, dim, index, source, *, alpha=1):
    return call_inplace(INDEX_ADD, input, index, source, dim=_index_dim(input, dim, index, "index_add_"),
                        alpha=alpha)
