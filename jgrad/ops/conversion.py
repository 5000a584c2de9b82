"""Casts and device transfers: ``to``, ``cpu``, ``cuda``, ``type``, ``type_as``, ``float``/``double``/``half``/
``bfloat16``/``long``/``int``/``bool`` (``ToCopyBackward0`` nodes), and ``copy_`` (which casts and moves its source).

A transfer runs eagerly (``jax.device_put``): its output is stamped with the target device and its
current stream, after a blocking copy that read the source on the source's stream.

Imports ``_dispatch``, ``_tensor``, ``_dtype``, ``autograd.node`` (``InputMetadata``), ``ops._registry`` and
``ops.pointwise`` (``clone``), ``_device`` and ``streams`` (a transfer).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..runtime import _bounds
from ..runtime._dispatch import Op, call, call_inplace
from ..core._tensor import Tensor
from ..autograd.node import InputMetadata
from ._registry import broadcast_shapes, tensor_method
from .pointwise import clone
from ..core._device import device as _device
from ..streams import _current_for
from ..streams import _sync_hooks
from ..streams import blocking_copy


def _cast_bwd(ctx, g):
    return (g.astype(ctx.in_avals[0][1]),)


def _cast_fwd(a, dtype):
    if jnp.issubdtype(a.dtype, jnp.floating) and jnp.issubdtype(dtype, jnp.integer) and jnp.dtype(dtype).itemsize < 4:
        return a.astype(jnp.int64).astype(dtype)  # PyTorch's: through a wide integer, wrapping (-1.0 -> 255)
    return a.astype(dtype)


CAST = Op("ToCopyBackward0", _cast_fwd, _cast_bwd, save=())


def _cast(t, dt):
    dt = _dtype.canonical(dt)
    if t.dtype is dt:
        return t
    if t._req and not (dt.is_floating_point or dt.is_complex):
        return call(CAST, t.detach(), dtype=dt.np)
    out = call(CAST, t, dtype=dt.np)
    if t._bounds is not None:  # an integer cast that holds the range keeps it (Note [Known bounds])
        _bounds.inherit(out, t)
    return out


def _transfer(t, dev):
    dev = _device(dev)
    if dev is t._device:  # not t.device: a DTensor moved to one device (its mesh's local one too) is gathered there
        return t
    if dev.type == "cpu":  # a copy to the host waits for the source, as a value read does: checks report here
        for hook in _sync_hooks:
            hook("Tensor.to()", None)
    out = call(TRANSFER, t, device=dev, src=t._device)
    # The dispatcher stamps outputs with the inputs' device and stream; a transfer's output lives on `dev`,
    # written on its current stream after the (blocking) copy read the source on the source's stream.
    src_stream = out._stream
    out._device, out._stream = dev, _current_for(dev)
    if src_stream is not None:
        blocking_copy(out, src_stream, out._stream, "Tensor.to()")
    node = out._grad_fn
    if node is not None:  # InputMetadata is shared between nodes: replace it, never mutate it
        meta = node.input_metadata[0]
        node.input_metadata = (InputMetadata(meta.shape, meta.dtype, dev, out._stream),)
    return out


class _TransferOp(Op):
    """Device transfers run eagerly (``jax.device_put``); the backward moves the gradient back."""

    __slots__ = ()

    # Cached per key as every op's kernels are: in "auto" mode a recorded step's kernel is part of the segment's
    # structure, so a new function per call made every step reading a tensor back (`.cpu()`) a new structure.
    def kernel(self, key, attrs):
        fn = self._kernels.get(key)
        if fn is None:
            dev = attrs["device"]
            fn = self._kernels[key] = lambda a: jax.device_put(a, dev._placement)
        return fn

    def backward_kernel(self, key, attrs, mask, in_avals):
        k = (key, mask, in_avals)
        fn = self._bwd_kernels.get(k)
        if fn is None:
            src = attrs["src"]
            fn = self._bwd_kernels[k] = lambda saved, outs, grads: (jax.device_put(grads[0], src._placement),)
        return fn


TRANSFER = _TransferOp("ToCopyBackward0", lambda a, device, src: jax.device_put(a, device._placement),
                       lambda ctx, g: (g,), save=())


@tensor_method()
def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False):
    """``to(dtype)``, ``to(device)``, ``to(device, dtype)``, ``to(other_tensor)``."""
    for a in args:
        if isinstance(a, _dtype.dtype):
            dtype = a
        elif isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif a is not None:
            device = a
    out = self
    if device is not None:
        out = _transfer(out, device)
    if dtype is not None:
        out = _cast(out, dtype)
    if copy and out is self:
        out = clone(self)
    return out


@tensor_method()
def cpu(self):
    return to(self, device="cpu")


@tensor_method()
def cuda(self, device=None):
    return to(self, device=f"gpu:{device or 0}" if not isinstance(device, str) else device)


@tensor_method("type")
def _type(self, dtype=None):  # not named ``type``: that would shadow the builtin in this module
    if dtype is None:  # PyTorch's legacy type string ("torch.FloatTensor"), which ported programs compare with
        return f"torch.{'cuda.' if self._device.type == 'gpu' else ''}{_dtype.scalar_name(self.dtype)}Tensor"
    return _cast(self, dtype)


@tensor_method()
def type_as(self, other):
    return _cast(self, other.dtype)


for _name, _dt in (("float", _dtype.float32), ("double", _dtype.float64), ("half", _dtype.float16),
                   ("bfloat16", _dtype.bfloat16), ("long", _dtype.int64), ("int", _dtype.int32),
                   ("short", _dtype.int16), ("char", _dtype.int8), ("byte", _dtype.uint8), ("bool", _dtype.bool)):
    tensor_method(_name)(lambda self, _dt=_dt: _cast(self, _dt if _dt.itemsize < 8 or _dtype.x64_enabled()
                                                     else _dtype.canonical(_dt)))


COPY = Op("CopyBackwards", lambda a, src: jnp.broadcast_to(src.astype(a.dtype), a.shape),
          lambda ctx, g: (None, g), save=())


@tensor_method("copy_")
def copy_(self, src, non_blocking=False):
    """Copy ``src`` into this tensor (broadcasting, casting and moving devices as needed)."""
    if isinstance(src, Tensor) and tuple(src.shape) != tuple(self.shape):
        shape = broadcast_shapes(tuple(self.shape), tuple(src.shape))  # PyTorch's wording for a mismatch
        if shape != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(shape)}")
    if isinstance(src, Tensor) and src.device is not self.device:
        src = _transfer(src, self.device)
    return call_inplace(COPY, self, src)
