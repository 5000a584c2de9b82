"""NumPy <-> jgrad, zero copy on the CPU.

``to_numpy(t)`` returns a **read-only** view of a CPU tensor's buffer (zero
copy; every jgrad dtype, bfloat16 included through ``ml_dtypes``). It stays
valid and unchanged when ``t`` is later modified in place: jgrad's in-place ops
rebind ``t`` to a new buffer. ``copy=True`` gives a private, writable array.

``from_numpy(a)`` returns a CPU tensor aliasing ``a`` when XLA can alias it:
C-contiguous, native byte order, and a data pointer aligned to 64 bytes.
NumPy only promises 16-byte alignment, so most arrays are copied (with
``copy=None``) or refused (``copy=False``: ``BufferError`` saying why);
``empty_aligned(shape, dtype)`` allocates arrays that import zero copy.

Mutation: if NumPy writes into an array jgrad imported zero copy, the tensor
sees the new values. JAX assumes its buffers never change, so this is unsafe:
pass ``copy=True`` to ``from_numpy`` for arrays you will keep writing to.

Imports ``jgrad.runtime._dlpack`` (the NumPy path of ``from_dlpack``), ``jgrad.runtime._dispatch`` (``to_numpy`` is a
host sync) and ``jgrad.core._device``.
"""
from __future__ import annotations

import numpy as np

from jgrad.runtime import _dispatch
from jgrad.core._device import device as _jg_device

from jgrad.runtime._dlpack import ALIGNMENT, _exportable, _import_numpy

__all__ = ["to_numpy", "from_numpy", "empty_aligned"]


def to_numpy(t, *, copy=None) -> np.ndarray:
    """The values of ``t`` as a NumPy array: a read-only zero-copy view of a CPU tensor.

    ``copy=True``: a fresh writable array. A tensor on an accelerator is copied to
    the host (``copy=False`` then raises ``BufferError``). The result carries no
    autograd history (``t`` may require grad).
    """
    what = "interop.numpy.to_numpy()"
    arr = _exportable(t, what, allow_requires_grad=True)
    _dispatch.host_sync(t, what)
    if t.device.type != "cpu":
        if copy is False:
            raise BufferError(f"{what}: the tensor is on {t.device}; NumPy arrays live in host memory, so this "
                              "needs a device-to-host copy. Pass copy=None or copy=True.")
        return np.array(arr)
    if copy:
        return np.array(arr, copy=True)
    out = np.asarray(arr)
    if out.flags.writeable:       # never hand out a writable alias of an immutable JAX buffer
        out = out.view()
        out.flags.writeable = False
    return out


def from_numpy(a, *, device=None, copy=None):
    """A jgrad tensor from a NumPy array, sharing its memory where XLA can (see the module docstring)."""
    if not isinstance(a, (np.ndarray, np.generic)):
        raise TypeError(f"interop.numpy.from_numpy(): expected a numpy.ndarray, got {type(a).__name__}")
    return _import_numpy(a, _jg_device(device) if device is not None else None, copy,
                         "interop.numpy.from_numpy()")


def empty_aligned(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array whose data is 64-byte aligned (imports into jgrad zero copy)."""
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(n + ALIGNMENT, np.uint8)
    off = (-buf.ctypes.data) % ALIGNMENT
    return buf[off:off + n].view(dtype).reshape(shape)
