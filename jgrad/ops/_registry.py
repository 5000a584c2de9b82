"""Helpers the op families share: Tensor-method registration and attribute hygiene.

Imports ``_tensor`` only.
"""
from __future__ import annotations

import operator

import jax
import numpy as np

from ..core._tensor import Tensor
from ..runtime._checks import host_values  # noqa: F401  (the ops' value checks read host memory through it)

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


def type_name(x) -> str:
    """A value's type as PyTorch's argument errors name it (``str``, ``NoneType``, ``numpy.float64``, ``Tensor``)."""
    t = type(x)
    if isinstance(x, Tensor):
        return "Tensor"
    mod = t.__module__.split(".")[0]
    return t.__name__ if mod == "builtins" else f"{mod}.{t.__name__}"


def _op_prefix(name):
    return f"{name}(): " if name else ""


def as_index(d, name=None, arg="dim"):
    """An int argument (``int``, NumPy integer or an integer tensor of one element); ``bool`` and the rest are
    refused with PyTorch's ``TypeError``."""
    if type(d) is int:
        return d
    if isinstance(d, bool) or not hasattr(type(d), "__index__"):
        raise TypeError(f"{_op_prefix(name)}argument '{arg}' must be int, not {type_name(d)}")
    return operator.index(d)


def as_index_or(v, name, arg, expected, pos=1):
    """``as_index`` for an argument PyTorch types as ``expected`` (``"tuple of ints"`` or ``"int"``): its wording."""
    if type(v) is int:
        return v
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        where = f" (position {pos})" if pos else ""
        raise TypeError(f"{name}(): argument '{arg}'{where} must be {expected}, not {type_name(v)}")
    return operator.index(v)


def norm_dim(dim, ndim, name=None):
    """Normalise ``dim`` (int, sequence or None) to a sorted tuple of non-negative axes.

    A dimension named twice is an error, as in PyTorch (``sum(dim=(0, 0))``)."""
    if dim is None:
        return None
    if type(dim) is int:
        dims = (dim,)
    elif isinstance(dim, (tuple, list)):
        dims = dim
    elif hasattr(type(dim), "__index__") and not isinstance(dim, bool):
        dims = (operator.index(dim),)
    else:
        raise TypeError(f"{_op_prefix(name)}argument 'dim' must be tuple of ints, not {type_name(dim)}")
    n = max(ndim, 1)
    out = []
    for pos, d in enumerate(dims):
        if type(d) is not int:
            if isinstance(d, bool) or not hasattr(type(d), "__index__"):
                raise TypeError(f"{_op_prefix(name)}argument 'dim' must be tuple of ints, but found element of "
                                f"type {type_name(d)} at pos {pos}")
            d = operator.index(d)
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
        d %= n
        if d in out:
            raise RuntimeError(f"dim {d} appears multiple times in the list of dims")
        out.append(d)
    return tuple(sorted(out))


def wrap_dim(d, ndim, name=None, arg="dim"):
    if type(d) is not int:
        d = as_index(d, name, arg)
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
    return d % n


def expect_tensor(x, name, arg="input", pos=1):
    """PyTorch's ``TypeError`` for a non-tensor where a tensor is required (``exp(None)``)."""
    if not isinstance(x, Tensor):
        where = f" (position {pos})" if pos else ""
        raise TypeError(f"{name}(): argument '{arg}'{where} must be Tensor, not {type_name(x)}")
    return x


# ---- sizes ---------------------------------------------------------------------------
# XLA computes a buffer's byte size dimension by dimension (element size first) and aborts the process
# (SIGABRT, "overflow in static extent product") when a partial product passes 2**63 - 1; every size that
# reaches a kernel goes through ``check_extent`` first.
_MAX_BYTES = 2 ** 63 - 1


def _size_elem_error(name, arg, where, i, a):
    # PyTorch's parser: a bad first element is "found element ... at pos 0"; a later one fails to "unpack".
    if i == 0:
        return TypeError(f"{name}(): argument '{arg}'{where} must be tuple of ints, but found element of type "
                         f"{type_name(a)} at pos 0")
    return TypeError(f"{name}(): argument '{arg}' failed to unpack the object at pos {i + 1} with error "
                     f'"type must be tuple of ints,but got {type_name(a)}"')


def parse_size(args, name, arg="size", pos=1, varargs=True):
    """A shape from PyTorch-style size arguments: ``f(2, 3)``, ``f((2, 3))``, ``f([2, 3])``, ``f(torch.Size)``.

    ``varargs=False``: ``args`` is the one argument (``full(size, ...)``), which must be a sequence.
    Elements must be ints (NumPy integers and one-element integer tensors too); floats, strings, None and bools
    are refused with PyTorch's ``TypeError`` wording. Negative sizes are left to ``check_new_shape``.
    """
    if varargs and len(args) == 1 and not isinstance(args[0], (tuple, list)):
        args = args[0]  # f(n): one int
        if type(args) is int and -2 ** 63 <= args < 2 ** 63:
            return (args,)
    elif varargs and len(args) == 1:
        args = args[0]
    if not isinstance(args, (tuple, list)):
        one = None
        if varargs and not isinstance(args, bool) and hasattr(type(args), "__index__"):
            try:
                one = operator.index(args)  # a NumPy integer, a one-element integer tensor
            except TypeError:
                pass
        if one is None:
            where = f" (position {pos})" if pos else ""
            raise TypeError(f"{name}(): argument '{arg}'{where} must be tuple of ints, not {type_name(args)}")
        args = (one,)
    out = []
    for i, a in enumerate(args):
        if type(a) is not int:
            if isinstance(a, bool) or not hasattr(type(a), "__index__"):
                raise _size_elem_error(name, arg, f" (position {pos})" if pos else "", i, a)
            try:
                a = operator.index(a)
            except TypeError:
                raise _size_elem_error(name, arg, f" (position {pos})" if pos else "", i, a) from None
        if not -2 ** 63 <= a < 2 ** 63:
            raise TypeError(f"{name}(): argument '{arg}' failed to unpack the object at pos {i + 1} with error "
                            '"Overflow when unpacking long long"')
        out.append(a)
    return tuple(out)


def check_new_shape(shape, itemsize, name):
    """A tensor of ``shape`` is about to be made (a factory): PyTorch's errors for negative sizes and for sizes
    whose storage size overflows 64 bits (XLA would abort the process)."""
    for s in shape:
        if s < 0:
            if name == "zeros":
                raise RuntimeError("zeros: Dimension size must be non-negative.")
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: {list(shape)}")
    p = itemsize
    for s in shape:
        p *= s
        if p > _MAX_BYTES:
            raise RuntimeError(f"Storage size calculation overflowed with sizes={list(shape)}")
    return shape


def check_extent(shape, itemsize, name):
    """A view-like result of ``shape`` (``expand``, ``reshape``) that jgrad materializes: PyTorch's error when
    its element count overflows 64 bits, and a clear one where only its byte size does (PyTorch returns a view
    without storage; XLA cannot make the buffer and would abort the process)."""
    p = itemsize
    for s in shape:
        p *= s
        if p > _MAX_BYTES:
            n = 1
            for t in shape:
                n *= t
                if n > _MAX_BYTES:
                    raise RuntimeError("numel: integer multiplication overflow")
            raise RuntimeError(f"{name}(): XLA cannot make a tensor of shape {list(shape)} with {itemsize}-byte "
                               "elements: its byte size, computed dimension by dimension, overflows 64 bits. jgrad "
                               f"materializes the result of {name} (PyTorch returns a view without new storage).")
    return shape


from ..core._dtype import scalar_name as scalar_type_name  # noqa: E402  (PyTorch's dtype names: "Long")


def refuse(kernel, t, kinds):
    """PyTorch's ``NotImplementedError`` when ``t``'s dtype is one its kernel lacks (``kinds``: "b" bool, "i"
    integers, "f" floating): ``"frac_cpu" not implemented for 'Long'``. Non-tensors pass."""
    dt = getattr(t, "dtype", None) if isinstance(t, Tensor) else None
    if dt is None:
        return
    kind = "b" if dt.name == "bool" else "f" if (dt.is_floating_point or dt.is_complex) else "i"
    if kind in kinds:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dt)}'")


def broadcast_shapes(*shapes):
    """``jnp.broadcast_shapes`` with PyTorch's error wording: shapes fold left to right as in TensorIterator,
    so "tensor a" is the shape broadcast so far and "tensor b" the next operand's."""
    out = tuple(shapes[0]) if shapes else ()
    for s in shapes[1:]:
        if s == out:
            continue
        n = max(len(out), len(s))
        res = []
        for i in range(n - 1, -1, -1):
            off = n - 1 - i
            a = out[len(out) - 1 - off] if len(out) - 1 - off >= 0 else 1
            b = s[len(s) - 1 - off] if len(s) - 1 - off >= 0 else 1
            if a != b and a != 1 and b != 1:
                raise RuntimeError(f"The size of tensor a ({a}) must match the size of tensor b ({b}) at "
                                   f"non-singleton dimension {i}")
            res.append(a if b == 1 else b)
        out = tuple(reversed(res))
    return out
