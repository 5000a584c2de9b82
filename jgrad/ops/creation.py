"""Tensor factories: tensor, zeros, ones, full, arange, linspace, eye, *_like."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._device import MeshDevice as _MeshDevice, device as _device, from_jax as _device_from_jax, get_default_device
from .._dispatch import Op, call_factory
from .._tensor import Tensor
from ._registry import tensor_method


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


def _as_array(data, dtype=None, device=None, copy=False):
    with _dtype.x64_scope():
        return _as_array_x64(data, dtype, device, copy)


def _as_array_x64(data, dtype, device, copy):
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
    return jax.device_put(arr, dev._placement)


def tensor(data, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Build a tensor from data (lists, scalars, NumPy or JAX arrays, tensors).

    Like ``torch.tensor`` it never shares host memory with ``data`` (JAX arrays are immutable,
    so those are not copied)."""
    arr = _as_array(data, dtype, device, copy=True)
    t = Tensor._make(arr, _target_device(device))
    if requires_grad:
        t.requires_grad_(True)
    return t


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``torch.as_tensor``: like ``tensor`` but may share memory with a NumPy array (see interop.numpy)."""
    return Tensor._make(_as_array(data, dtype, device), _target_device(device))


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


FULL = Op("full", lambda value, shape, dtype: jnp.full(shape, value, dtype), differentiable=False)


def _filled(shape, value, dtype, device, requires_grad, like=None):
    dt = _dtype.canonical(dtype) if dtype is not None else None
    if dt is None:
        dt = _dtype.get_default_dtype() if isinstance(value, float) or value is None else (
            _dtype.bool if isinstance(value, bool) else _dtype._index_dtype() if isinstance(value, int)
            else _dtype.get_default_dtype())
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
    return _filled(_shape(size), 0.0 if dtype is None else 0, dtype, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_shape(size), 1.0 if dtype is None else 1, dtype, device, requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Zeros: XLA has no uninitialised buffers."""
    return _filled(_shape(size), None, dtype, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _filled(_shape((size,)), fill_value, dtype, device, requires_grad)


def _like(t, dtype, device):
    # t._device: the *_like of a DTensor is a DTensor on its mesh (t.device is only the mesh's local device)
    return (dtype if dtype is not None else t.dtype), (device if device is not None else t._device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, 0, d, dv, requires_grad, like=t)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, 1, d, dv, requires_grad, like=t)


def empty_like(t, dtype=None, device=None, requires_grad=False):
    return zeros_like(t, dtype, device, requires_grad)


def full_like(t, fill_value, dtype=None, device=None, requires_grad=False):
    d, dv = _like(t, dtype, device)
    return _filled(t.shape, fill_value, d, dv, requires_grad, like=t)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = _dtype.get_default_dtype() if any(isinstance(v, float) for v in (start, end, step)) else _dtype._index_dtype()
    dev = _target_device(device)
    dt = _dtype.canonical(dtype)
    with _dtype.x64_scope():
        arr = jax.device_put(np.arange(start, end, step).astype(dt.np), dev.jax_device)
    return tensor(arr, device=dev, requires_grad=requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = _dtype.canonical(dtype)
    arr = np.linspace(start, end, int(steps)).astype(dt.np)
    return tensor(arr, device=device, requires_grad=requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    dt = _dtype.canonical(dtype)
    return tensor(np.eye(n, m if m is not None else n, dtype=dt.np), device=device, requires_grad=requires_grad)


def from_numpy(a: np.ndarray) -> Tensor:
    """A CPU tensor from a NumPy array (jax copies host memory it does not own)."""
    return tensor(a, dtype=_dtype.from_np(a.dtype))


# new_*: a DTensor's are DTensors on its mesh (replicated), as PyTorch's DTensor ops give.
@tensor_method()
def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype or self.dtype, device or self._device, requires_grad)


@tensor_method()
def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
    return zeros(*size, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)


@tensor_method()
def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
    return ones(*size, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)


@tensor_method()
def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
    return full(size, fill_value, dtype=dtype or self.dtype, device=device or self._device, requires_grad=requires_grad)


@tensor_method()
def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
    return new_zeros(self, *size, dtype=dtype, device=device, requires_grad=requires_grad)


def _device_of(arr):
    return _device_from_jax(next(iter(arr.devices())))
