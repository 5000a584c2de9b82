"""Tensor factories: tensor, zeros, ones, full, arange, linspace, eye, *_like.

Imports ``_dispatch``, ``_tensor``, ``_device``, ``_dtype``, ``ops._registry`` and ``_factories``, which
it fills in.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype, _factories
from ..core._device import (MeshDevice as _MeshDevice, device as _device, from_jax as _device_from_jax,
                            get_default_device, put_host as _put_host)
from ..runtime import _bounds
from ..runtime._dispatch import Op, call_factory
from ..core._tensor import Tensor
from ._registry import as_index, check_new_shape, parse_size, tensor_method, type_name


def _target_device(device):
    return _device(device) if device is not None else get_default_device()


# bool < int < float < complex, as PyTorch infers a dtype from nested Python data
_CATEGORY = ((bool, 1), (int, 2), (float, 3), (complex, 4))


def _leaf_category(data):
    """The highest category among the leaves of nested Python data; None for other leaves."""
    if isinstance(data, (list, tuple)):
        cats = [_leaf_category(d) for d in data]
        if any(c is None for c in cats):
            return None
        return max(cats, default=3)  # torch.tensor([]) is a float tensor
    for typ, cat in _CATEGORY:
        if type(data) is typ:
            return cat
    return None  # NumPy scalars/arrays, tensors: NumPy decides from their dtypes


def _infer_dtype(data):
    """PyTorch's inference: floats -> default dtype, ints -> int64, bools -> bool, complex -> complex."""
    cat = _leaf_category(data)
    if cat is None:
        return None
    if cat == 4:
        return _dtype.complex128 if _dtype.get_default_dtype() is _dtype.float64 else _dtype.complex64
    return (None, _dtype.bool, _dtype._index_dtype(), _dtype.get_default_dtype())[cat]


def _as_array(data, dtype=None, device=None, copy=False, host=None):
    with _dtype.x64_scope():
        return _as_array_x64(data, dtype, device, copy, host)


def _as_array_x64(data, dtype, device, copy, host=None):
    """Convert data (Tensor, jax/NumPy array, nested lists, scalar) to a jax.Array on a device.

    ``copy=True``: never share host memory with ``data`` (jax aliases 64-byte-aligned NumPy
    buffers on the CPU, so a later write into the NumPy array would change the tensor)."""
    dev = _target_device(device)
    if isinstance(data, Tensor):
        arr = data._value
    elif isinstance(data, jax.Array):
        # A weakly typed jax array (jnp.asarray(2.0)) would promote like a Python scalar: make it strong.
        arr = jnp.asarray(data, data.dtype) if data.weak_type else data
    else:
        if dtype is None:
            dtype = _infer_dtype(data)
        arr = np.asarray(data)
    if dtype is not None:
        dt = _dtype.canonical(dtype)
        if arr.dtype != dt.np:
            arr = arr.astype(dt.np)
    else:
        _dtype.from_np(arr.dtype)  # unsupported dtypes fail here, clearly
    if copy and isinstance(arr, np.ndarray) and (arr is data or arr.base is not None):
        arr = arr.copy()  # a view of the caller's memory (an ndarray, a buffer, a torch tensor)
    if host is not None and isinstance(arr, np.ndarray):
        host.append(arr)
    return _put_host(arr, dev._placement)


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Build a tensor from data (lists, scalars, NumPy or JAX arrays, tensors).

    Like ``torch.tensor`` it never shares host memory with ``data`` (JAX arrays are immutable,
    so those are not copied)."""
    host = []  # (the host copy, when one was made)
    arr = _as_array(data, dtype, device, copy=True, host=host)
    t = Tensor._make(arr, _target_device(device))
    if host:  # integer data's range: its index checks are then done (Note [Known bounds])
        _bounds.from_host(t, host[0])
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``torch.as_tensor``: like ``tensor`` but may share memory with a NumPy array (see interop.numpy)."""
    return Tensor._make(_as_array(data, dtype, device), _target_device(device))


def _shape(size, name):
    """The shape of a factory's ``*size`` arguments (PyTorch's parsing and type errors)."""
    if not size:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')
    return parse_size(size, name)


FULL = Op("full", lambda value, shape, dtype: jnp.full(shape, value, dtype), differentiable=False)


def _filled(shape, value, dtype, device, requires_grad, name, like=None):
    dt = _dtype.canonical(dtype) if dtype is not None else None
    if dt is None:
        dt = _dtype.get_default_dtype() if isinstance(value, float) or value is None else (
            _dtype.bool if isinstance(value, bool) else _dtype._index_dtype() if isinstance(value, int)
            else _dtype.get_default_dtype())
    check_new_shape(shape, dt.itemsize, name)
    if isinstance(value, Tensor):
        value = value.item()
    dev = _target_device(device)
    if type(dev) is _MeshDevice:
        # On a mesh: laid out like `like` (zeros_like of a DTensor keeps its placements), else replicated.
        sharding = like._value.sharding if like is not None and like._device is dev else dev.sharding
        with _dtype.x64_scope():
            arr = jnp.full(shape, 0 if value is None else value, dt.np, device=sharding)
        t = Tensor._make(arr, dev)
    else:
        t = call_factory(FULL, dev, 0 if value is None else value, shape=shape, dtype=dt.np)
    if requires_grad:
        t.requires_grad_(True)
    return t


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_shape(size, "zeros"), 0.0 if dtype is None else 0, dtype, device, requires_grad, "zeros")


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_shape(size, "ones"), 1.0 if dtype is None else 1, dtype, device, requires_grad, "ones")


def empty(*args, size=None, dtype=None, device=None, requires_grad=False, memory_format=None, pin_memory=False,
          layout=None) -> Tensor:
    """Zeros: XLA has no uninitialised buffers. The size is positional or ``size=``, as PyTorch's; every memory
    format gives the same (row-major) tensor."""
    if size is not None:
        if args:
            raise TypeError("empty() got multiple values for argument 'size'")
        args = (size,)
    return _filled(_shape(args, "empty"), None, dtype, device, requires_grad, "empty")


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(parse_size(size, "full", varargs=False), fill_value, dtype, device, requires_grad, "full")


def _like(t, dtype, device):
    # t._device: the *_like of a DTensor is a DTensor on its mesh (t.device is only the mesh's local device)
    return (dtype if dtype is not None else t.dtype), (device if device is not None else t._device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, 0, d, dv, requires_grad, "zeros_like", like=t)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, 1, d, dv, requires_grad, "ones_like", like=t)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return zeros_like(t, dtype, device, requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, fill_value, d, dv, requires_grad, "full_like", like=t)


def _arange_number(v, arg, pos):
    """An ``arange`` bound or step: a Python number, a NumPy scalar or a one-element tensor (as a Python number)."""
    if isinstance(v, Tensor):
        if v.numel() != 1:
            raise TypeError(f"arange(): argument '{arg}' must be Number, not Tensor")
        return v.item()
    if isinstance(v, (int, float, np.integer, np.floating, np.bool_)):
        return v.item() if isinstance(v, np.generic) else v
    where = f" (position {pos})" if pos else ""
    raise TypeError(f"arange(): argument '{arg}'{where} must be Number, not {type_name(v)}")


def _scalar_str(v):
    """A number as PyTorch's messages print a Scalar (C++ stream formatting: 0.5, 1, 1e+20, nan, inf)."""
    return str(v) if isinstance(v, int) else "%g" % v


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, _arange_number(start, "end", 1)
    else:
        start, end = _arange_number(start, "start", None), _arange_number(end, "end", None)
    step = _arange_number(step, "step", None)
    if step == 0 or step != step:
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise RuntimeError(f"unsupported range: {_scalar_str(start)} -> {_scalar_str(end)}")
    if not ((step > 0 and end >= start) or (step < 0 and end <= start)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        dtype = _dtype.get_default_dtype() if any(isinstance(v, float) for v in (start, end, step)) else _dtype._index_dtype()
    dev = _target_device(device)
    dt = _dtype.canonical(dtype)
    n = math.ceil((end - start) / step) if not all(isinstance(v, int) for v in (start, end, step)) \
        else -(-(end - start) // step)
    check_new_shape((n,), dt.itemsize, "arange")
    with _dtype.x64_scope():
        try:
            host = np.arange(start, end, step)
        except MemoryError:
            raise RuntimeError(f"arange(): can't allocate memory: you tried to allocate {n * dt.itemsize} "
                               "bytes.") from None
        arr = jax.device_put(host.astype(dt.np), dev.jax_device)
    return tensor(arr, device=dev, requires_grad=requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    steps = as_index(steps, "linspace", "steps")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _dtype.canonical(dtype)
    check_new_shape((steps,), dt.itemsize, "linspace")
    arr = np.linspace(start, end, steps).astype(dt.np)
    return tensor(arr, device=device, requires_grad=requires_grad)


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False) -> Tensor:
    """``base ** linspace(start, end, steps)``."""
    steps = as_index(steps, "logspace", "steps")
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    dt = _dtype.canonical(dtype)
    check_new_shape((steps,), dt.itemsize, "logspace")
    arr = np.logspace(start, end, steps, base=base).astype(dt.np)
    return tensor(arr, device=device, requires_grad=requires_grad)


def _triangle_indices(row, col, offset, dtype, device, lower, name):
    row, col, offset = as_index(row, name, "row"), as_index(col, name, "col"), as_index(offset, name, "offset")
    if row < 0:
        raise RuntimeError(f"row must be non-negative, got{row}")
    if col < 0:
        raise RuntimeError(f"col must be non-negative, got{col}")
    dt = _dtype._index_dtype() if dtype is None else _dtype.canonical(dtype)
    if dt.is_floating_point or dt is _dtype.bool or dt.is_complex:
        raise RuntimeError(f"\"{name}\" not implemented for '{dt}'".replace("jgrad.", ""))
    r, c = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    return tensor(np.stack([r, c]).astype(dt.np).reshape(2, -1), device=device)


def tril_indices(row, col, offset=0, *, dtype=None, device=None) -> Tensor:
    """The (2, N) coordinates of the lower triangle of a ``row`` x ``col`` matrix, row by row."""
    return _triangle_indices(row, col, offset, dtype, device, True, "tril_indices")


def triu_indices(row, col, offset=0, *, dtype=None, device=None) -> Tensor:
    """The (2, N) coordinates of the upper triangle of a ``row`` x ``col`` matrix, row by row."""
    return _triangle_indices(row, col, offset, dtype, device, False, "triu_indices")


def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    if type(n) is not int:
        if isinstance(n, bool) or not hasattr(type(n), "__index__"):
            raise TypeError(f"eye(): argument 'n' (position 1) must be int, not {type_name(n)}")
        n = as_index(n, "eye", "n")
    m = n if m is None else as_index(m, "eye", "m")
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    dt = _dtype.canonical(dtype)
    check_new_shape((n, m), dt.itemsize, "eye")
    return tensor(np.eye(n, m, dtype=dt.np), device=device, requires_grad=requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A CPU tensor from a NumPy array (jax copies host memory it does not own)."""
    return tensor(a, dtype=_dtype.from_np(a.dtype))


# new_*: a DTensor's are DTensors on its mesh (replicated), as PyTorch's DTensor ops give.
@tensor_method()
def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype or self.dtype, device or self._device, requires_grad)


@tensor_method()
def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return _filled(_shape(size, "new_zeros"), 0, dtype or self.dtype, device or self._device, requires_grad,
                   "new_zeros")


@tensor_method()
def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return _filled(_shape(size, "new_ones"), 1, dtype or self.dtype, device or self._device, requires_grad,
                   "new_ones")


@tensor_method()
def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return _filled(parse_size(size, "new_full", varargs=False), fill_value, dtype or self.dtype,
                   device or self._device, requires_grad, "new_full")


@tensor_method()
def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return _filled(_shape(size, "new_empty"), 0, dtype or self.dtype, device or self._device, requires_grad,
                   "new_empty")


def _device_of(arr):
    return _device_from_jax(next(iter(arr.devices())))


# The factories autograd, random, graphs and the tensor class call without importing the op library.
_factories.install(zeros=zeros, ones=ones, tensor=tensor, empty_like=empty_like, as_array=_as_array)
