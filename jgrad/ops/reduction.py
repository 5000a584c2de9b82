"""Reductions with PyTorch's ``dim``/``keepdim``: sum mean var std prod max min amax amin
argmax argmin logsumexp norm all any, plus sum_to_size (the broadcast-gradient reducer).

Imports ``_dispatch``, ``_dtype``, ``_tensor`` and ``ops._registry``; ``ops.pointwise`` at the call.
"""
from __future__ import annotations

import builtins
import collections

import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime import _bounds
from ..runtime._dispatch import Op, call
from ._registry import expect_tensor, norm_dim, scalar_type_name, tensor_method, type_name, wrap_dim
from ..core._tensor import Tensor
from ..runtime._dispatch import sum_to

return_types_max = collections.namedtuple("max", ["values", "indices"])
return_types_min = collections.namedtuple("min", ["values", "indices"])


def _restore(g, in_shape, dim, keepdim):
    """Broadcast a reduced gradient back to the input's shape."""
    if dim is not None and not keepdim:
        g = jnp.expand_dims(g, dim)
    return jnp.broadcast_to(g, in_shape)


def _int_accumulator(a, dtype):
    """PyTorch sums and multiplies bool and integer tensors in int64."""
    if dtype is None and (a.dtype == jnp.bool_ or jnp.issubdtype(a.dtype, jnp.integer)):
        return _dtype._index_dtype().np
    return dtype


# Note [Tree sums]
# ~~~~~~~~~~~~~~~
# Why: XLA compiles a kernel per input shape (20-300 ms on a 2-core CPU), and a float sum cannot run in the NumPy
# interpreter of new shapes (Note [Exact programs] in ``runtime._kernel_interp``): XLA's order of additions is its
# own. So a loop whose lengths change (REINFORCE's per-episode ``returns.mean()``, ``returns.std()`` and the loss's
# ``sum``) compiled three kernels at every new length: a third of a 20-episode eager run after warm-up.
# What: on the CPU, a full ``sum``, ``mean``, ``var`` or ``std`` of 2 to ``TREE_SUM_MAX`` float32/float64 elements
# adds them in a fixed binary tree (``_tree_sum``): padded with +0.0 to a power of two above the count (adding +0.0
# changes nothing but a -0.0 total, which becomes +0.0 as in PyTorch), then halved by elementwise adds. Each add is
# one IEEE rounding, so the interpreter computes the compiled kernel's bits and a new length runs without a compile.
# ``var``/``std`` accumulate in float64, as PyTorch's CPU kernels do for float32; ``maximum`` with 0 of the squares
# (and ``maximum(m, minimum(m, 0))`` of the mean, an identity) stops XLA contracting a multiply into the adds that
# follow (one rounding where NumPy makes two). The order differs from ``jnp.sum``'s in the last bits only. Other
# devices keep XLA's reduction (a fused tree is one thread's work on a GPU).
#: Full reductions of at most this many float32/float64 elements add as a fixed tree on the CPU (Note [Tree sums]).
TREE_SUM_MAX = 1024


def _tree_ok(a, dim, dtype=None):
    return (2 <= a.size <= TREE_SUM_MAX and a.dtype in (jnp.float32, jnp.float64)
            and (dtype is None or dtype == a.dtype)  # (np.dtype(None) is float64: no ``in (None, ...)``)
            and (dim is None or len(dim) == a.ndim) and jax.default_backend() == "cpu")


def _tree_sum(x):
    """The elements of ``x`` added in a fixed binary tree (Note [Tree sums]); a 0-d result."""
    x = x.reshape(-1)
    n = x.shape[0]
    x = jnp.pad(x, (0, (1 << n.bit_length()) - n))
    while x.shape[0] > 1:
        h = x.shape[0] // 2
        x = x[:h] + x[h:]
    return x.reshape(())


def _full_shape(out, a, keepdim):
    return out.reshape((1,) * a.ndim) if keepdim else out


def _tree_var(a, correction):
    """The variance of all of ``a``, in float64, by tree sums (Note [Tree sums])."""
    x = a.reshape(-1).astype(jnp.float64)
    n = x.shape[0]
    m = _tree_sum(x) / n
    d = x - jnp.maximum(m, jnp.minimum(m, 0))
    return _tree_sum(jnp.maximum(d * d, 0)) / (n - correction if n > correction else 0)


def _sum_fwd(a, dim=None, keepdim=False, dtype=None):
    if _tree_ok(a, dim, dtype):
        return _full_shape(_tree_sum(a), a, keepdim)
    return jnp.sum(a, axis=dim, keepdims=keepdim, dtype=_int_accumulator(a, dtype))


def _sum_bwd(ctx, g):
    shape = ctx.in_avals[0][0]
    return (_restore(g, shape, ctx.attrs.get("dim"), ctx.attrs.get("keepdim", False)),)


def _mean_fwd(a, dim=None, keepdim=False, dtype=None):
    if dtype is None and not jnp.issubdtype(a.dtype, jnp.inexact):
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be either a floating point or complex "
            f"dtype. Got: {scalar_type_name(_dtype.from_np(a.dtype))}")
    if _tree_ok(a, dim, dtype):
        return _full_shape(_tree_sum(a) / a.size, a, keepdim)
    return jnp.mean(a, axis=dim, keepdims=keepdim, dtype=dtype)


def _mean_bwd(ctx, g):
    shape = ctx.in_avals[0][0]
    dim = ctx.attrs.get("dim")
    n = 1
    for i, s in enumerate(shape):
        if dim is None or i in dim:
            n *= s
    return (_restore(g, shape, dim, ctx.attrs.get("keepdim", False)) / n,)


# PyTorch names the full reduction ...Backward0 and the one over dims ...Backward1
SUM, SUM_DIM = Op("SumBackward0", _sum_fwd, _sum_bwd, save=()), Op("SumBackward1", _sum_fwd, _sum_bwd, save=())
MEAN, MEAN_DIM = Op("MeanBackward0", _mean_fwd, _mean_bwd, save=()), Op("MeanBackward1", _mean_fwd, _mean_bwd, save=())
def _var_fwd(a, dim=None, correction=1, keepdim=False):
    """PyTorch's variance: the divisor is ``max(N - correction, 0)`` (so inf, not NaN, when it is 0 or less)."""
    if _tree_ok(a, dim):
        return _full_shape(_tree_var(a, correction).astype(a.dtype), a, keepdim)
    n = a.size if dim is None else int(np.prod([a.shape[d] for d in dim]))
    mean = jnp.mean(a, axis=dim, keepdims=True)
    sq = jnp.sum(jnp.square(jnp.abs(a - mean)), axis=dim, keepdims=keepdim)
    return sq / jnp.asarray(n - correction if n > correction else 0, sq.dtype)


def _std_fwd(a, dim=None, correction=1, keepdim=False):
    """``sqrt(var)``, computed on the input scaled by its largest magnitude: the squares of float32 values above
    ~1e19 overflow, PyTorch's (whose accumulation is wider) do not. The scale carries no gradient. A small full
    reduction on the CPU needs no scale: it accumulates in float64 (Note [Tree sums])."""
    if _tree_ok(a, dim):
        return _full_shape(jnp.sqrt(_tree_var(a, correction)).astype(a.dtype), a, keepdim)
    scale = jax.lax.stop_gradient(jnp.max(jnp.abs(a), axis=dim, keepdims=True)) if a.size else jnp.ones((), a.dtype)
    scale = jnp.where((scale == 0) | ~jnp.isfinite(scale), jnp.ones((), a.dtype), scale)
    out = jnp.sqrt(_var_fwd(a / scale, dim, correction, True)) * scale
    if keepdim:
        return out
    return jnp.squeeze(out, dim) if dim is not None else out.reshape(())


def _var_bwd(ctx, g, std=False):
    """PyTorch's: ``2 (x - mean) / (N - correction)`` times the gradient (for std, divided by ``2 std``); the
    divisor is not clamped at 0 as the forward's is."""
    a = ctx.saved[0]
    dim, c, keepdim = ctx.attrs.get("dim"), ctx.attrs.get("correction", 1), ctx.attrs.get("keepdim", False)
    n = a.size if dim is None else int(np.prod([a.shape[d] for d in dim]))
    if std:
        g = g / (2 * ctx.outputs[0])
    g = _restore(g, a.shape, dim, keepdim)
    return (g * 2 * (a - jnp.mean(a, axis=dim, keepdims=True)) / jnp.asarray(n - c, a.dtype),)


VAR = Op("VarBackward0", _var_fwd, _var_bwd, save=(0,))
STD = Op("StdBackward0", _std_fwd, lambda ctx, g: _var_bwd(ctx, g, std=True), save=(0,), save_outputs=True)
def _prod_bwd(ctx, g):
    """PyTorch's prod backward: ``g * prod / x`` without zeros; with one zero only that element gets the product of
    the others; with two or more every gradient is 0 (whatever else the slice holds, NaN included)."""
    a = ctx.saved[0]
    dim, keepdim = ctx.attrs.get("dim"), ctx.attrs.get("keepdim", False)
    g = _restore(g, a.shape, dim, keepdim).astype(a.dtype)
    out = _restore(ctx.outputs[0], a.shape, dim, keepdim).astype(a.dtype)
    zero = a == 0
    nz = _restore(jnp.sum(zero, axis=dim, keepdims=keepdim), a.shape, dim, keepdim)
    others = _restore(jnp.prod(jnp.where(zero, jnp.ones((), a.dtype), a), axis=dim, keepdims=keepdim), a.shape, dim,
                      keepdim)
    no_zero = g * out / jnp.where(zero, jnp.ones((), a.dtype), a)
    return (jnp.where(nz == 0, no_zero, jnp.where((nz == 1) & zero, g * others, jnp.zeros((), a.dtype))),)


PROD = Op("ProdBackward0", lambda a, dim=None, keepdim=False, dtype=None:
          jnp.prod(a, axis=dim, keepdims=keepdim, dtype=_int_accumulator(a, dtype)), _prod_bwd, save=(0,),
          save_outputs=True)
LOGSUMEXP = Op("LogsumexpBackward0", lambda a, dim=None, keepdim=False: jax.scipy.special.logsumexp(
    a if jnp.issubdtype(a.dtype, jnp.inexact) else a.astype(_dtype.get_default_dtype().np), axis=dim,
    keepdims=keepdim))


def _amax_bwd_factory(fn):
    def bwd(ctx, g):
        a = ctx.saved[0]
        dim, keepdim = ctx.attrs.get("dim"), ctx.attrs.get("keepdim", False)
        out = fn(a, axis=dim, keepdims=True)
        mask = a == out
        count = mask.sum(axis=dim, keepdims=True).astype(g.dtype)
        g = _restore(g, a.shape, dim, keepdim) / count
        # PyTorch's grad * mask / count: signs of zero kept, NaN for a slice whose maximum is NaN (count 0)
        zero = jnp.where(count == 0, jnp.full((), jnp.nan, g.dtype), jnp.copysign(jnp.zeros((), g.dtype), g))
        return (jnp.where(mask, g, zero),)
    return bwd


AMAX = Op("AmaxBackward0", lambda a, dim=None, keepdim=False: jnp.max(a, axis=dim, keepdims=keepdim),
          _amax_bwd_factory(jnp.max), save=(0,))
AMIN = Op("AminBackward0", lambda a, dim=None, keepdim=False: jnp.min(a, axis=dim, keepdims=keepdim),
          _amax_bwd_factory(jnp.min), save=(0,))


def _max_dim_fwd(a, dim, keepdim=False, is_max=True):
    if a.ndim == 0:  # max(0-d, dim=0): the value itself, at index 0
        return a, jnp.zeros((), _dtype._index_dtype().np)
    idx = (jnp.argmax if is_max else jnp.argmin)(a, axis=dim, keepdims=True)
    vals = jnp.take_along_axis(a, idx, axis=dim)
    if not keepdim:
        vals, idx = jnp.squeeze(vals, dim), jnp.squeeze(idx, dim)
    return vals, idx.astype(_dtype._index_dtype().np)


def _max_dim_bwd(ctx, g, _gi):
    a = ctx.saved[0]
    if a.ndim == 0:
        return (g,)
    dim, keepdim = ctx.attrs["dim"], ctx.attrs.get("keepdim", False)
    idx = (jnp.argmax if ctx.attrs.get("is_max", True) else jnp.argmin)(a, axis=dim, keepdims=True)
    if not keepdim:
        g = jnp.expand_dims(g, dim)
    out = jnp.zeros(a.shape, g.dtype)
    return (jnp.put_along_axis(out, idx, g, axis=dim, inplace=False),)


MAX_DIM = Op("MaxBackward0", _max_dim_fwd, _max_dim_bwd, save=(0,), num_outputs=2)
MIN_DIM = Op("MinBackward0", _max_dim_fwd, _max_dim_bwd, save=(0,), num_outputs=2)
def _evenly_bwd_factory(fn):
    """max()/min() over all elements: the gradient is shared evenly by the elements equal to the result, and by
    the NaNs when the result is NaN (PyTorch's ``evenly_distribute_backward``). amax/amin keep ``(a == out)``
    alone, as PyTorch's ``scale_grad_by_count`` does, so a NaN there makes the slice's gradient NaN."""
    def bwd(ctx, g):
        a = ctx.saved[0]
        out = fn(a)
        mask = (a == out) | (jnp.isnan(a) & jnp.isnan(out)) if jnp.issubdtype(a.dtype, jnp.inexact) else a == out
        return (jnp.where(mask, g / mask.sum().astype(g.dtype), jnp.zeros((), g.dtype)),)
    return bwd


MAX_ALL = Op("MaxBackward1", AMAX.forward, _evenly_bwd_factory(jnp.max), save=(0,))
MIN_ALL = Op("MinBackward1", AMIN.forward, _evenly_bwd_factory(jnp.min), save=(0,))
ARGMAX = Op("argmax", lambda a, dim=None, keepdim=False:
            jnp.argmax(a, axis=dim, keepdims=keepdim).astype(_dtype._index_dtype().np), differentiable=False)
ARGMIN = Op("argmin", lambda a, dim=None, keepdim=False:
            jnp.argmin(a, axis=dim, keepdims=keepdim).astype(_dtype._index_dtype().np), differentiable=False)


def _logical_reduce(fn):
    """all/any: a bool result, but uint8 for a uint8 input (PyTorch keeps that legacy)."""
    def fwd(a, dim=None, keepdim=False):
        out = fn(a, axis=dim, keepdims=keepdim)
        return out.astype(jnp.uint8) if a.dtype == jnp.uint8 else out
    return fwd


ALL = Op("all", _logical_reduce(jnp.all), differentiable=False)
ANY = Op("any", _logical_reduce(jnp.any), differentiable=False)


def _norm_fwd(a, p=2, dim=None, keepdim=False):
    if p == "fro":
        p = 2
    if p == 1:
        return jnp.sum(jnp.sign(a) * a, axis=dim, keepdims=keepdim)  # |x| whose gradient is sign(x): 0 at 0
    if p == float("inf"):
        return jnp.max(jnp.abs(a), axis=dim, keepdims=keepdim)
    if p == float("-inf"):
        return jnp.min(jnp.abs(a), axis=dim, keepdims=keepdim)
    if p == 0:
        return jnp.sum(a != 0, axis=dim, keepdims=keepdim).astype(a.dtype)
    if p == 2:
        # Written so its gradient at 0 is 0 (PyTorch's subgradient), not NaN.
        sq = jnp.sum(a * a, axis=dim, keepdims=keepdim)
        safe = jnp.where(sq == 0, 1.0, sq)
        return jnp.where(sq == 0, 0.0, jnp.sqrt(safe)).astype(a.dtype)
    return jnp.sum(jnp.abs(a) ** p, axis=dim, keepdims=keepdim) ** (1.0 / p)


NORM = Op("LinalgVectorNormBackward0", _norm_fwd)


def _dims(input, dim, name=None, empty_is_all=False):
    """Checked, sorted reduction dims; a 0-d tensor accepts dim 0/-1 and reduces nothing.

    ``empty_is_all``: an empty list of dims reduces every dim, as PyTorch's ``sum mean var std norm`` do
    (``all``/``any`` reduce none)."""
    if dim is None:
        return None
    dims = norm_dim(dim, input.ndim, name)
    if not dims and empty_is_all:
        return None
    return () if input.ndim == 0 else dims


def _nonempty(input, dims, name):
    """PyTorch's check of reductions that have no identity (max, amax, argmax...): no reduced dim of size 0."""
    if dims is None:
        if input.numel() == 0:
            if name in ("argmax", "argmin"):
                raise IndexError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0.")
            raise RuntimeError(f"{name}(): Expected reduction dim to be specified for input.numel() == 0. Specify "
                               "the reduction dim with the 'dim' argument.")
        return
    shape = input.shape
    for d in (dims,) if type(dims) is int else dims:
        if shape and shape[d] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {d} to have non-zero size.")


def _op(full, over_dims, dim):
    return full if dim is None else over_dims


@tensor_method()
def sum(input, dim=None, keepdim=False, *, dtype=None):  # noqa: A001
    expect_tensor(input, "sum")
    dt = _dtype.canonical(dtype).np if dtype is not None else None
    return call(_op(SUM, SUM_DIM, dim), input, dim=_dims(input, dim, "sum", empty_is_all=True), keepdim=keepdim, dtype=dt)


@tensor_method()
def mean(input, dim=None, keepdim=False, *, dtype=None):
    expect_tensor(input, "mean")
    if dtype is None and not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           f"complex dtype. Got: {scalar_type_name(input.dtype)}")
    dt = _dtype.canonical(dtype).np if dtype is not None else None
    return call(_op(MEAN, MEAN_DIM, dim), input, dim=_dims(input, dim, "mean", empty_is_all=True), keepdim=keepdim, dtype=dt)


def _check_var_dtype(input):
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError("std and var only support floating point and complex dtypes")


def _correction(unbiased, correction):
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _warn_dof(name, input, dims, correction):
    n = input.numel() if dims is None else int(np.prod([input.shape[d] for d in dims]))
    if n - correction <= 0 and input.numel():
        warnings.warn(f"{name}(): degrees of freedom is <= 0. Correction should be strictly less than the reduction "
                      "factor (input numel divided by output numel).", UserWarning, stacklevel=3)


@tensor_method()
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    expect_tensor(input, "var")
    _check_var_dtype(input)
    dims, c = _dims(input, dim, "var", empty_is_all=True), _correction(unbiased, correction)
    _warn_dof("var", input, dims, c)
    return call(VAR, input, dim=dims, correction=c, keepdim=keepdim)


@tensor_method()
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    expect_tensor(input, "std")
    _check_var_dtype(input)
    dims, c = _dims(input, dim, "std", empty_is_all=True), _correction(unbiased, correction)
    _warn_dof("std", input, dims, c)
    return call(STD, input, dim=dims, correction=c, keepdim=keepdim)


@tensor_method()
def prod(input, dim=None, keepdim=False, *, dtype=None):
    dt = _dtype.canonical(dtype).np if dtype is not None else None
    expect_tensor(input, "prod")
    return call(PROD, input, dim=_dims(input, dim, "prod"), keepdim=keepdim, dtype=dt)


@tensor_method()
def logsumexp(input, dim, keepdim=False):
    expect_tensor(input, "logsumexp")
    return call(LOGSUMEXP, input, dim=_dims(input, dim, "logsumexp", empty_is_all=True), keepdim=keepdim)


def _amax_amin(op, name, input, dim, keepdim):
    expect_tensor(input, name)
    dims = None if isinstance(dim, (tuple, list)) and len(dim) == 0 else _dims(input, dim, name)
    _nonempty(input, dims, name)
    return call(op, input, dim=dims, keepdim=keepdim)


@tensor_method()
def amax(input, dim=(), keepdim=False):
    return _amax_amin(AMAX, "amax", input, dim, keepdim)


@tensor_method()
def amin(input, dim=(), keepdim=False):
    return _amax_amin(AMIN, "amin", input, dim, keepdim)


def _max_min(input, dim, keepdim, is_max):
    if isinstance(dim, Tensor):
        from .pointwise import maximum, minimum
        return (maximum if is_max else minimum)(input, dim)
    name = "max" if is_max else "min"
    expect_tensor(input, name)
    if dim is None:
        _nonempty(input, None, name)
        return call(MAX_ALL if is_max else MIN_ALL, input, dim=None, keepdim=False)
    d = wrap_dim(dim, input.ndim, name)
    _nonempty(input, d, name)
    vals, idx = call(MAX_DIM if is_max else MIN_DIM, input, dim=d, keepdim=keepdim, is_max=is_max)
    return (return_types_max if is_max else return_types_min)(vals, idx)


@tensor_method()
def max(input, dim=None, keepdim=False):  # noqa: A001
    """``max(input)``, ``max(input, dim) -> (values, indices)``, or ``max(input, other)``."""
    return _max_min(input, dim, keepdim, True)


@tensor_method()
def min(input, dim=None, keepdim=False):  # noqa: A001
    return _max_min(input, dim, keepdim, False)


def _arg(op, name, input, dim, keepdim):
    expect_tensor(input, name)
    if input.dtype is _dtype.bool:
        raise RuntimeError(f"{name}(): does not support bool input")
    d = wrap_dim(dim, input.ndim, name) if dim is not None else None
    _nonempty(input, d, name)
    if input.ndim == 0:  # dim 0 or -1 of a 0-d tensor: the one element, index 0 (jnp.argmax has no axis 0 there)
        d = None
    size = input.shape[d] if d is not None else input.numel()
    return _bounds.mark(call(op, input, dim=d, keepdim=keepdim), 0, builtins.max(size, 1))  # in range even for NaN


@tensor_method()
def argmax(input, dim=None, keepdim=False):
    return _arg(ARGMAX, "argmax", input, dim, keepdim)


@tensor_method()
def argmin(input, dim=None, keepdim=False):
    return _arg(ARGMIN, "argmin", input, dim, keepdim)


@tensor_method()
def all(input, dim=None, keepdim=False):  # noqa: A001
    expect_tensor(input, "all")
    return call(ALL, input, dim=_dims(input, dim, "all"), keepdim=keepdim)


@tensor_method()
def any(input, dim=None, keepdim=False):  # noqa: A001
    expect_tensor(input, "any")
    return call(ANY, input, dim=_dims(input, dim, "any"), keepdim=keepdim)


@tensor_method()
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if not (input.dtype.is_floating_point or input.dtype.is_complex):
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor as input. Got "
                           f"{scalar_type_name(input.dtype)}")
    if p == "nuc":
        raise NotImplementedError("norm(p='nuc') (the nuclear norm) is not implemented in jgrad")
    if p != "fro" and (isinstance(p, bool) or not isinstance(p, (int, float))):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' must be Number, not {type_name(p)}")
    out = call(NORM, input, p=p, dim=_dims(input, dim, "norm", empty_is_all=True), keepdim=keepdim)
    return out.to(dtype) if dtype is not None else out


SUM_TO = Op("SumToBackward", lambda a, shape: _sum_to(a.astype(_int_accumulator(a, None) or a.dtype), shape),
            lambda ctx, g: (g,), save=())  # integers sum in int64, as sum does


def _sum_to(a, shape):
    return sum_to(a, shape)


@tensor_method()
def sum_to_size(input, *size):
    """Sum ``input`` down to ``size`` (which it must be expandable from)."""
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    if tuple(input.shape) == shape:
        return input
    return call(SUM_TO, input, shape=shape)
