"""``torch.linalg.norm``, ``vector_norm``, ``matrix_norm``, ``cross`` and ``multi_dot``, with PyTorch's checks
and wording; real and complex inputs (a norm of a complex tensor is real).

The 2-norm and the Frobenius norm are written so that their gradient at zero is zero (PyTorch's subgradient)
rather than NaN; the spectral and nuclear norms go through the SVD (``jnp.linalg.norm``).

Imports ``_dispatch``, ``_tensor``, ``_dtype`` and ``ops`` (``_registry``, ``complex_ops``, ``linalg``).
"""
from __future__ import annotations

import warnings

import jax.numpy as jnp

from ..core import _dtype
from ..runtime._dispatch import call
from ._registry import broadcast_shapes, expect_tensor, norm_dim, scalar_type_name, type_name, wrap_dim
from .complex_ops import wirtinger_op
from .linalg import _CPP_NAMES

_INF = float("inf")


def _abs2(x):
    return jnp.real(x) ** 2 + jnp.imag(x) ** 2 if jnp.issubdtype(x.dtype, jnp.complexfloating) else x * x


def _safe_sqrt(sq):
    nz = sq != 0
    return jnp.where(nz, jnp.sqrt(jnp.where(nz, sq, 1)), 0).astype(sq.dtype)


def _vector_norm_fwd(x, ord, dim, keepdim, dtype):
    if dtype is not None:
        x = x.astype(dtype)
    if ord == 2:
        return _safe_sqrt(jnp.sum(_abs2(x), axis=dim, keepdims=keepdim))
    a = jnp.abs(x)
    if ord == _INF:
        return jnp.max(a, axis=dim, keepdims=keepdim)
    if ord == -_INF:
        return jnp.min(a, axis=dim, keepdims=keepdim)
    if ord == 0:
        return jnp.sum(a != 0, axis=dim, keepdims=keepdim).astype(a.dtype)
    if ord == 1:
        return jnp.sum(a, axis=dim, keepdims=keepdim)
    return jnp.sum(a ** ord, axis=dim, keepdims=keepdim) ** (1.0 / ord)


VECTOR_NORM = wirtinger_op("LinalgVectorNormBackward0", _vector_norm_fwd)


def _check_norm_dtype(x, dtype, name):
    if not (x.dtype.is_floating_point or x.dtype.is_complex):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got "
                           f"{scalar_type_name(x.dtype)}")
    if dtype is None:
        return None
    d = _dtype.canonical(dtype)
    if x.dtype.is_complex and not d.is_complex:
        raise RuntimeError(f"{name}: dtype should be complex for complex input. Got {scalar_type_name(d)}")
    return d.np


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The ``ord``-norm of ``x`` over ``dim`` (all dimensions when None) as a vector norm."""
    expect_tensor(x, "linalg_vector_norm", "input")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' must be Number, not {type_name(ord)}")
    dt = _check_norm_dtype(x, dtype, "linalg.vector_norm")
    dims = norm_dim(dim, x.ndim, "linalg_vector_norm") if dim is not None and dim != () else None
    if x.ndim == 0:
        dims = None
    if ord < 0 and x.numel() == 0 and dims is None or (ord == _INF and x.numel() == 0 and dims is None):
        raise RuntimeError(f"linalg.vector_norm cannot compute the {ord} norm on an empty tensor because the "
                           "operation does not have an identity")
    return call(VECTOR_NORM, x, ord=float(ord), dim=dims, keepdim=bool(keepdim), dtype=dt)


def _matrix_norm_fwd(a, ord, dim, keepdim, dtype):
    if dtype is not None:
        a = a.astype(dtype)
    if ord == "fro":
        return _safe_sqrt(jnp.sum(_abs2(a), axis=dim, keepdims=keepdim))
    return jnp.linalg.norm(a, ord=ord, axis=dim, keepdims=keepdim)


MATRIX_NORM = wirtinger_op("LinalgMatrixNormBackward0", _matrix_norm_fwd)
_MATRIX_ORDS = ("fro", "nuc", _INF, -_INF, 1, -1, 2, -2)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The matrix ``ord``-norm ('fro', 'nuc', inf, -inf, 1, -1, 2, -2) over the two dimensions ``dim``."""
    expect_tensor(A, "linalg_matrix_norm", "input")
    if A.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    dt = _check_norm_dtype(A, dtype, "linalg.matrix_norm")
    if isinstance(ord, str):
        if ord not in ("fro", "nuc"):
            raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    elif isinstance(ord, bool) or not isinstance(ord, (int, float)) or ord not in _MATRIX_ORDS:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim}")
    d = (wrap_dim(dim[0], A.ndim), wrap_dim(dim[1], A.ndim))
    if d[0] == d[1]:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    return call(MATRIX_NORM, A, ord=ord if isinstance(ord, str) else float(ord), dim=d, keepdim=bool(keepdim),
                dtype=dt)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """A vector norm (``dim`` of one dimension, or a 1-D input) or a matrix norm (two dimensions, or a 2-D
    input with ``ord`` given); with neither ``ord`` nor ``dim``, the 2-norm of the flattened input."""
    expect_tensor(A, "linalg_norm", "input")
    if dim is not None:
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        if len(dims) == 1:
            return vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
        if len(dims) == 2:
            return matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
        raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {list(dims)}")
    if ord is None:
        return vector_norm(A, 2, None, keepdim, dtype=dtype)
    if A.ndim not in (1, 2) and not isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                           f"{A.ndim}D.")
    if isinstance(ord, str) or A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
    return vector_norm(A, ord, None, keepdim, dtype=dtype)


CROSS = wirtinger_op("LinalgCrossBackward0", lambda a, b, dim: jnp.cross(
    *jnp.broadcast_arrays(a, b), axis=dim))


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along ``dim``, broadcasting the other dimensions."""
    expect_tensor(input, "linalg_cross", "input")
    expect_tensor(other, "linalg_cross", "other", pos=2)
    if input.dtype is not other.dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(input.dtype)} but found "
                           f"{scalar_type_name(other.dtype)}")
    if input.ndim != other.ndim:
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    d = wrap_dim(dim, input.ndim)
    si, so = input.shape[d], other.shape[d]
    if si != 3 or so != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {si} and {so}")
    broadcast_shapes(tuple(input.shape), tuple(other.shape))
    return call(CROSS, input, other, dim=d)


def cross_legacy(input, other, dim=None):
    """``torch.cross``: without ``dim``, the first dimension of size 3 (with PyTorch's deprecation warning)."""
    if dim is None:
        shape = broadcast_shapes(tuple(input.shape), tuple(other.shape))
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError(f"cross(): no dimension of size 3 in the inputs of shapes {list(input.shape)} and "
                               f"{list(other.shape)}")
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. Please either pass the dim "
                      "explicitly or simply use torch.linalg.cross.", UserWarning, stacklevel=2)
    return cross(input, other, dim=dim)


MULTI_DOT = wirtinger_op("LinalgMultiDotBackward0", lambda *xs: jnp.linalg.multi_dot(xs))


def multi_dot(tensors):
    """The product of a chain of matrices in the cheapest order; the first and last may be vectors."""
    tensors = list(tensors)
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    for i, t in enumerate(tensors):
        expect_tensor(t, "multi_dot", "tensors")
        if t.dtype is not tensors[0].dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but tensor 0 is "
                               f"{_CPP_NAMES[tensors[0].dtype.name]} and tensor {i} {_CPP_NAMES[t.dtype.name]}")
        where = "the first tensor" if i == 0 else "the last tensor" if i == n - 1 else f"tensor {i}"
        if i in (0, n - 1) and t.ndim not in (1, 2):
            raise RuntimeError(f"multi_dot(): {where} must be 1D or 2D but got {t.ndim}D")
        if 0 < i < n - 1 and t.ndim != 2:
            raise RuntimeError(f"multi_dot(): {where} must be 2D but got {t.ndim}D")
    for i in range(n - 1):
        a, b = tensors[i], tensors[i + 1]
        if a.shape[-1] != b.shape[0]:
            sa = list(a.shape) if a.ndim == 2 or i else [1, a.shape[0]]
            sb = list(b.shape) if b.ndim == 2 or i + 1 < n - 1 else [b.shape[0], 1]
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes {sa} and {sb} cannot be "
                               "multiplied")
    return call(MULTI_DOT, *tensors)

