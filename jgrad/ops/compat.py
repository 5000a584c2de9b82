"""PyTorch names that real programs meet first: legacy tensor types, memory formats, ``Tensor.__format__``, the
layout/backend predicates, ``is_complex``/``is_floating_point``, ``broadcast_tensors``/``broadcast_shapes``.

Legacy types (``FloatTensor``, ``LongTensor``, ...; ``jgrad.cuda.FloatTensor`` for GPUs) are PyTorch's legacy
constructors: ``FloatTensor(2, 3)`` is an uninitialized (in jgrad: zero) tensor of that size,
``FloatTensor([1, 2])`` a tensor of that data and dtype, ``FloatTensor(t)`` returns ``t`` when its dtype and
device match; ``isinstance(t, FloatTensor)`` is true for float32 tensors on the CPU, as in PyTorch. Memory
formats are accepted where PyTorch takes them (jgrad lays new tensors out row-major whatever the format;
``is_contiguous(memory_format)`` reads a tensor's strides, ``ops.shape``).

Imports ``_tensor``, ``_dtype``, ``ops._registry``, ``ops.creation`` and ``ops.shape``.
"""
from __future__ import annotations

import numpy as np

from ..core import _dtype
from ..core._tensor import Tensor
from ._registry import broadcast_shapes as _broadcast_shapes, tensor_method
from .creation import empty, tensor

__all__ = ["memory_format", "contiguous_format", "preserve_format", "channels_last", "channels_last_3d",
           "is_complex", "is_floating_point", "broadcast_tensors", "broadcast_shapes", "FloatTensor",
           "DoubleTensor", "HalfTensor", "BFloat16Tensor", "ByteTensor", "CharTensor", "ShortTensor", "IntTensor",
           "LongTensor", "BoolTensor"]


# ---- memory formats --------------------------------------------------------------------------------------------
class memory_format:
    """A memory format (``jgrad.contiguous_format``, ``preserve_format``, ``channels_last``, ...)."""

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return f"jgrad.{self._name}"

    def __reduce__(self):
        return self._name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


# ---- predicates and formatting -------------------------------------------------------------------------------
def is_complex(input) -> bool:
    """Whether ``input``'s dtype is complex (``torch.is_complex``)."""
    _check_tensor(input, "is_complex")
    return input.dtype.is_complex


def is_floating_point(input) -> bool:
    """Whether ``input``'s dtype is a floating-point dtype (``torch.is_floating_point``)."""
    _check_tensor(input, "is_floating_point")
    return input.dtype.is_floating_point


def _check_tensor(input, name):
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")


def _device_is(kind):
    return property(lambda self: self._device.type == kind)


for _name, _value in (("is_sparse", False), ("is_sparse_csr", False), ("is_quantized", False), ("is_meta", False),
                      ("is_mkldnn", False), ("is_xpu", False), ("is_mps", False), ("is_nested", False)):
    tensor_method(_name)(property(lambda self, _value=_value: _value))
tensor_method("is_cpu")(_device_is("cpu"))


@tensor_method("__format__")
def _format(self, format_spec):
    """``format(t, '+.2f')``: a 0-d tensor formats as its Python number, as PyTorch's; any other tensor only
    with an empty spec (its ``str``)."""
    if self.ndim == 0:
        return self.item().__format__(format_spec)
    return object.__format__(self, format_spec)


# ---- broadcasting ----------------------------------------------------------------------------------------------
def broadcast_shapes(*shapes):
    """The shape that ``shapes`` (ints or sequences of ints) broadcast to, as a tuple."""
    return _broadcast_shapes(*[(s,) if isinstance(s, int) else tuple(s) for s in shapes])


def broadcast_tensors(*tensors):
    """Expand every tensor to their common broadcast shape (differentiable, as ``expand``)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    shape = _broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(t if tuple(t.shape) == shape else t.expand(*shape) for t in tensors)


# ---- legacy tensor types ---------------------------------------------------------------------------------------
def _invalid(args, kwargs):
    got = ", ".join([type(a).__name__ for a in args] + [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
    return TypeError(f"new() received an invalid combination of arguments - got ({got}), but expected one of: "
                     "(*, device), (Tensor other), (tuple of ints size, *, device), (object data, *, device)")


class _LegacyTensorType(type):
    """The metaclass of ``FloatTensor`` & co: construction as PyTorch's ``new()``, ``isinstance`` by dtype and
    device type."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype is cls.dtype and obj._device.type == cls._device_type

    def __repr__(cls):
        return f"<class '{cls.__module__}.{cls.__name__}'>"

    def __call__(cls, *args, **kwargs):
        if set(kwargs) - {"device"}:
            raise _invalid(args, kwargs)
        device = kwargs.get("device")
        if device is None:
            device = cls._device_type
        if not args:
            return empty(0, dtype=cls.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], Tensor):
            t = args[0]
            if t.dtype is not cls.dtype or t._device.type != cls._device_type:
                raise TypeError(f"expected {cls.dtype} on {cls._device_type} (got {t.dtype} on {t._device.type})")
            return t
        if all(type(a) is int or isinstance(a, np.integer) for a in args):
            return empty(*[int(a) for a in args], dtype=cls.dtype, device=device)
        if len(args) == 1 and isinstance(args[0], tuple) and type(args[0]).__name__ == "Size":
            return empty(tuple(args[0]), dtype=cls.dtype, device=device)
        if len(args) == 1:
            data = args[0]
            if isinstance(data, (str, bytes)):
                raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
            if isinstance(data, (bool, float, complex)):
                raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
            return tensor(data, dtype=cls.dtype, device=device)
        raise _invalid(args, kwargs)


_LEGACY = (("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
           ("BFloat16Tensor", "bfloat16"), ("ByteTensor", "uint8"), ("CharTensor", "int8"),
           ("ShortTensor", "int16"), ("IntTensor", "int32"), ("LongTensor", "int64"), ("BoolTensor", "bool"))


def _legacy_types(device_type, module):
    return {name: _LegacyTensorType(name, (), {"dtype": getattr(_dtype, dt), "_device_type": device_type,
                                               "is_cuda": device_type == "gpu", "is_sparse": False,
                                               "__module__": module})
            for name, dt in _LEGACY}


globals().update(_legacy_types("cpu", "jgrad"))
cuda_tensor_types = _legacy_types("gpu", "jgrad.cuda")
