"""Helpers the op families share: Tensor-method registration and attribute hygiene."""
from __future__ import annotations

from .._tensor import Tensor

TENSOR_METHODS: dict = {}


def tensor_method(*names):
    """Attach the decorated function to ``Tensor`` under ``names`` (first arg is self)."""
    def deco(fn):
        for n in names or (fn.__name__,):
            TENSOR_METHODS[n] = fn
            setattr(Tensor, n, fn)
        return fn
    return deco


def static(value):
    """Make an attribute hashable for the kernel cache (lists become tuples)."""
    if isinstance(value, list):
        return tuple(static(v) for v in value)
    if isinstance(value, tuple):
        return tuple(static(v) for v in value)
    return value


def norm_dim(dim, ndim):
    """Normalise ``dim`` (int, sequence or None) to a sorted tuple of non-negative axes."""
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    out = []
    for d in dims:
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(ndim, 1)}, "
                             f"{max(ndim, 1) - 1}], but got {d})")
        out.append(d % max(ndim, 1))
    return tuple(sorted(set(out)))


def wrap_dim(d, ndim):
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n
