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


# PyTorch's ScalarType names, which its error messages use ("Got: Long").
_SCALAR_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16",
                 "int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
                 "bool": "Bool", "complex64": "ComplexFloat", "complex128": "ComplexDouble"}


def scalar_type_name(dt) -> str:
    """PyTorch's name of a dtype in error messages (``jg.int64`` -> ``Long``)."""
    name = getattr(dt, "name", None) or str(dt)
    return _SCALAR_NAMES.get(name, name)


def broadcast_shapes(*shapes):
    """``jnp.broadcast_shapes`` with PyTorch's error wording (called at trace time)."""
    out = []
    for i in range(1, max((len(s) for s in shapes), default=0) + 1):
        size = 1
        for k, s in enumerate(shapes):
            d = s[-i] if i <= len(s) else 1
            if d != 1 and size != 1 and d != size:
                first = next(j for j, t in enumerate(shapes) if i <= len(t) and t[-i] == size)
                names = "abcdefghijklmnopqrstuvwxyz"
                raise RuntimeError(f"The size of tensor {names[first]} ({size}) must match the size of tensor "
                                   f"{names[k]} ({d}) at non-singleton dimension "
                                   f"{max(len(t) for t in shapes) - i}")
            if d != 1:
                size = d
        out.append(size)
    return tuple(reversed(out))
