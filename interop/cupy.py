"""CuPy <-> jgrad through DLPack: zero copy between CuPy arrays and jgrad tensors on the same GPU.

CuPy is optional: importing ``interop`` or ``jgrad`` never imports it, and
these functions raise ``ImportError`` naming the package to install when it is
missing (``pip install cupy-cuda12x``, or ``cupy-cuda13x`` for CUDA 13).

``to_cupy(t)``: a ``cupy.ndarray`` sharing a GPU tensor's buffer (the DLPack
stream handshake makes CuPy's current stream wait for it). A CPU tensor is
copied to the current CuPy device when ``copy`` is None/True (CuPy arrays live
on the GPU) and refused with ``BufferError`` when ``copy=False``.

``from_cupy(x)``: a jgrad tensor sharing ``x``'s memory; non-contiguous views
are copied (``copy=None``/``True``) or refused (``copy=False``).

Mutation semantics are those of jgrad's DLPack protocol (``jgrad/runtime/_dlpack.py``): jgrad's in-place ops never
write into the shared buffer (``t.add_(1)`` leaves a ``to_cupy(t)`` array as it
was); CuPy can, and jgrad then sees the change, which is unsafe because JAX
assumes immutability: pass ``copy=True`` for arrays CuPy will modify.

Imports ``jgrad.runtime._dlpack`` and ``interop.numpy``; cupy at the call (``_cupy()``), never at import.
"""
from __future__ import annotations

from jgrad.runtime._dlpack import _exportable, from_dlpack

__all__ = ["to_cupy", "from_cupy"]

_EXTRA = 'pip install cupy-cuda12x (or cupy-cuda13x to match your CUDA); jgrad does not install it for you'


def _cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError(f"interop.cupy needs CuPy, which is not installed: {_EXTRA}") from e
    return cupy


def to_cupy(t, *, copy=None):
    """A ``cupy.ndarray`` sharing the buffer of GPU tensor ``t`` (``copy=True``: a private copy)."""
    cupy = _cupy()
    what = "interop.cupy.to_cupy()"
    _exportable(t, what, allow_requires_grad=True)
    src = t.detach() if t._req else t
    if t.device.type != "gpu":
        if copy is False:
            raise BufferError(f"{what}: the tensor is on {t.device}; CuPy arrays live on the GPU, so this needs "
                              "a host-to-device copy. Pass copy=None or copy=True, or move the tensor first "
                              "(t.to('gpu')).")
        from .numpy import to_numpy
        return cupy.asarray(to_numpy(src))
    out = cupy.from_dlpack(src)
    return out.copy() if copy else out


def from_cupy(x, *, device=None, copy=None):
    """A jgrad tensor sharing the memory of the ``cupy.ndarray`` ``x`` (copied only where ``copy`` allows)."""
    cupy = _cupy()
    if not isinstance(x, cupy.ndarray):
        raise TypeError(f"interop.cupy.from_cupy(): expected a cupy.ndarray, got {type(x).__name__}")
    return from_dlpack(x, device=device, copy=copy)
