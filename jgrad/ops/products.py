"""Products beyond matmul: ``mv vdot inner tensordot cross kron trace`` and the fused ``addmm addmv addbmm
baddbmm addr`` (``beta * input + alpha * product``; with ``beta=0`` the input is ignored, NaN included, as
PyTorch's BLAS calls do). Gradients are ``jax.vjp`` of the jax forward, or the matmul ops' own.

Imports ``_dispatch``, ``_tensor``, ``ops._registry`` and ``ops.linalg`` (matmul and its checks).
"""
from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, expect_tensor, scalar_type_name, tensor_method, wrap_dim
from .linalg import _prec, bmm, matmul, mm

__all__ = ["mv", "vdot", "inner", "tensordot", "cross", "kron", "trace", "addmm", "addmv", "addbmm", "baddbmm",
           "addr", "dist", "cdist"]


def _same_dtype(name, *ts):
    if len({t.dtype for t in ts}) > 1:
        raise RuntimeError(f"{name} input tensors must have the same dtype, but got "
                           + ", ".join(scalar_type_name(t.dtype) for t in ts[:-1]) + f", and "
                           f"{scalar_type_name(ts[-1].dtype)}")


@tensor_method()
def mv(input, vec):
    """Matrix-vector product."""
    expect_tensor(input, "mv")
    expect_tensor(vec, "mv", "vec", pos=2)
    if input.ndim != 2 or vec.ndim != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {vec.ndim}, {input.ndim}, {vec.ndim}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({input.shape[0]}), mat ({input.shape[0]}x{input.shape[1]}), "
                           f"vec ({vec.shape[0]})")
    if input.dtype is not vec.dtype:
        names = (scalar_type_name(vec.dtype), scalar_type_name(input.dtype), scalar_type_name(vec.dtype))
        raise RuntimeError(f"addmv input tensors must have the same dtype, but got {names[0]}, {names[1]}, and "
                           f"{names[2]}")
    return matmul(input, vec)


@tensor_method()
def vdot(input, other):
    """The dot product of two 1-D tensors (real tensors: ``dot``)."""
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    if input.shape[0] != other.shape[0]:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{input.shape[0]}] and src [{other.shape[0]}] "
                           f"to have the same number of elements, but got {input.shape[0]} and {other.shape[0]} "
                           "elements respectively")
    return matmul(input, other)


INNER = Op("InnerBackward0", lambda a, b: jnp.inner(a, b, precision=_prec()))
TENSORDOT = Op("TensordotBackward0", lambda a, b, axes: jnp.tensordot(a, b, axes, precision=_prec()))
CROSS = Op("LinalgCrossBackward0", lambda a, b, dim: jnp.cross(*jnp.broadcast_arrays(a, b), axis=dim))
KRON = Op("KronBackward0", jnp.kron)
TRACE = Op("TraceBackward0", lambda a: jnp.trace(a, dtype=jnp.int64 if not jnp.issubdtype(a.dtype, jnp.inexact)
                                                  else None))


@tensor_method()
def inner(input, other):
    """Sum of products over the last dims (``input @ other.T`` for matrices)."""
    if input.dtype is not other.dtype:
        raise RuntimeError("both inputs should have same dtype")
    if input.ndim and other.ndim and input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    return call(INNER, input, other)


def tensordot(a, b, dims=2, out=None):
    """Contract ``dims`` trailing dims of ``a`` with leading dims of ``b`` (or the dims listed)."""
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        da, db = dims
        da, db = ([da], [db]) if isinstance(da, int) else (list(da), list(db))
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    da = [wrap_dim(d, a.ndim) for d in da]
    db = [wrap_dim(d, b.ndim) for d in db]
    for x, y in zip(da, db):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size {a.shape[x]} in dim {x - a.ndim if isinstance(dims, int) else x} "
                               f"and second has size {b.shape[y]} in dim {y}")
    return call(TENSORDOT, a, b, axes=(tuple(da), tuple(db)))


@tensor_method()
def cross(input, other, dim=None):
    """The cross product of 3-vectors along ``dim`` (default: the first dim of size 3, with PyTorch's warning)."""
    if input.ndim != other.ndim:
        raise RuntimeError(f"linalg.cross: inputs must have the same number of dimensions.")
    shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\nPlease either pass the dim "
                      "explicitly or simply use torch.linalg.cross.\nThe default value of dim will change to agree "
                      "with that of linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    d = wrap_dim(dim, len(shape))
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[d]} and "
                           f"{other.shape[d]}")
    return call(CROSS, input, other, dim=d)


@tensor_method()
def kron(input, other):
    """The Kronecker product."""
    return call(KRON, input, other)


@tensor_method()
def trace(input):
    """The sum of a matrix's diagonal (integer inputs sum in int64)."""
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim}")
    return call(TRACE, input)


# ---- beta * input + alpha * product --------------------------------------------------------------
def _check_alpha(input, alpha, beta):
    if not (input.dtype.is_floating_point or input.dtype.is_complex) and isinstance(alpha, float):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _combine(input, prod, beta, alpha, shape):
    if not (input.dtype.is_floating_point or input.dtype.is_complex):  # integer results: the scalars are integers
        beta, alpha = int(beta), int(alpha)
    out = prod if alpha == 1 else prod * alpha
    if beta != 0:
        if tuple(input.shape) != tuple(shape):
            try:
                broadcast_shapes(tuple(input.shape), tuple(shape))
                ok = broadcast_shapes(tuple(input.shape), tuple(shape)) == tuple(shape)
            except RuntimeError:
                ok = False
            if not ok:
                raise RuntimeError(f"The expanded size of the tensor ({shape[-1]}) must match the existing size "
                                   f"({input.shape[-1]}) at non-singleton dimension {len(shape) - 1}.  Target sizes: "
                                   f"{list(shape)}.  Tensor sizes: {list(input.shape)}")
        out = out + (input if beta == 1 else input * beta)
    elif tuple(input.shape) != tuple(shape):
        broadcast_shapes(tuple(input.shape), tuple(shape))
    return out


@tensor_method()
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``."""
    _check_alpha(input, alpha, beta)
    if mat1.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mat1 must be a matrix, got {mat1.ndim}-D tensor" if mat1.ndim != 2 else
                           f"mat2 must be a matrix, got {mat2.ndim}-D tensor")
    p = mm(mat1, mat2)
    return _combine(input, p, beta, alpha, p.shape)


@tensor_method()
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    _check_alpha(input, alpha, beta)
    p = mv(mat, vec)
    return _combine(input, p, beta, alpha, p.shape)


@tensor_method()
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_i(batch1[i] @ batch2[i])``."""
    _check_alpha(input, alpha, beta)
    p = bmm(batch1, batch2).sum(0, dtype=batch1.dtype)  # integers keep their type (sum would widen them)
    return _combine(input, p, beta, alpha, p.shape)


@tensor_method()
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` per batch."""
    _check_alpha(input, alpha, beta)
    p = bmm(batch1, batch2)
    return _combine(input, p, beta, alpha, p.shape)


@tensor_method()
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    _check_alpha(input, alpha, beta)
    if vec1.ndim != 1 or vec2.ndim != 1:
        raise RuntimeError(f"addr: Expected 1-D argument vec1, but got {vec1.ndim}-D" if vec1.ndim != 1 else
                           f"addr: Expected 1-D argument vec2, but got {vec2.ndim}-D")
    p = vec1.outer(vec2)
    return _combine(input, p, beta, alpha, p.shape)


@tensor_method()
def dist(input, other, p=2):
    """``norm(input - other, p)`` (the two broadcast)."""
    return (input - other).norm(p)


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each pair of rows of ``x1`` (…, P, M) and ``x2`` (…, R, M): (…, P, R)."""
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values")
    return (x1.unsqueeze(-2) - x2.unsqueeze(-3)).norm(p, -1)

