"""DLPack, the protocol of jgrad tensors: ``Tensor.__dlpack__`` / ``__dlpack_device__`` and ``from_dlpack``.

A jgrad ``Tensor`` holds an immutable ``jax.Array``; DLPack hands that buffer
to (or takes one from) any other library without copying wherever both sides
are on the same device. Zero copy is checked by buffer pointers in the tests
(``jax.Array.unsafe_buffer_pointer()``, ``ndarray.__array_interface__['data']``,
``torch.Tensor.data_ptr()``).

Export (``Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)``)
    Follows the array-API protocol and delegates to the ``jax.Array``'s own
    ``__dlpack__``. As in PyTorch, a tensor that requires grad is refused
    (``BufferError``: call ``t.detach()`` first; the ``interop.<lib>.to_<lib>``
    helpers detach for you). ``copy=True`` always copies; ``copy=False`` never
    does and raises ``BufferError`` where a copy would be needed (another
    ``dl_device``).

Import (``jg.from_dlpack(obj, *, device=None, copy=None)``, also ``interop.from_dlpack``)
    Accepts any producer: NumPy, PyTorch, JAX, CuPy arrays, jgrad tensors, or
    anything with ``__dlpack__`` and ``__dlpack_device__``. The result is a
    jgrad tensor on the producer's device (or ``device``), without history.
    Zero copy needs what XLA can alias: a compact layout (row-major, or a
    permutation of it, as a transposed torch tensor) and, on the CPU, a data
    pointer aligned to 64 bytes. Other inputs (slices with steps, broadcast
    views, NumPy's 16-byte-aligned allocations, torch's conjugate/negative
    views, another ``device``) are copied when ``copy`` is None or True, and
    raise ``BufferError`` saying what and what to do when ``copy=False``.
    ``interop.numpy.empty_aligned`` makes NumPy arrays that import zero copy.

Mutation semantics (the contract, tested in tests/test_interop_*.py)
    * jgrad never writes into a buffer it exported. In-place ops
      (``add_``, ``copy_``, ``__setitem__``, optimizer steps) rebind the
      tensor to a new buffer and bump ``t._version``; the other side keeps the
      values it was given (``x = to_torch(t); t.add_(1)`` leaves ``x`` as it
      was). JAX also refuses to donate a buffer that DLPack still references.
    * If the *other* side writes into a buffer it shares with jgrad (an
      exported buffer, or one jgrad imported zero copy), jgrad sees the new
      values: nothing stops it, but JAX assumes its arrays never change, so
      this is unsafe (values cached by JAX or read by asynchronous work may be
      either). Treat shared buffers as read-only, or pass ``copy=True`` on
      whichever side will mutate. NumPy views that jgrad exports are
      read-only for that reason; PyTorch and CuPy have no read-only tensors.

Streams (the DLPack handshake)
    Export: the consumer passes its stream. An integer CUDA/ROCm stream handle
    is handed to JAX, which makes that stream wait for the buffer to be ready
    (no host sync); ``-1`` means "no synchronization" and ``None`` (and any
    value on the CPU, where DLPack has no streams) makes JAX block the host
    until the buffer is ready. A ``jgrad.Stream`` may be passed too: it
    ``wait_stream``\\ s the current stream of the tensor's device. Whatever
    the consumer, the export is a read of the tensor on the current stream of
    its device, so the stream sanitizer raises ``StreamRaceError`` when the
    tensor was written on another stream that the current one did not wait
    for (PyTorch records its event on the current stream too). A host-blocking
    export is a host sync (an error during graph capture).
    Import: jgrad passes the stream JAX uses for external ready events to the
    producer (JAX's ``from_dlpack`` does this), so the producer's pending work
    is ordered before any jgrad work that reads the buffer; the new tensor is
    recorded as written on jgrad's current stream of its device.

Where it sits: DLPack is tensor behaviour, so it lives in jgrad (``Tensor.__dlpack__`` calls
``export_tensor``; ``jg.from_dlpack`` is ``from_dlpack``), and ``interop/`` builds its per-library
adapters on it (``interop.numpy``, ``interop.torch``, ``interop.cupy``, ``interop.jax``;
``interop.dlpack`` re-exports this module's public names). NumPy arrays take their own path in
(``_import_numpy``: ``jax.device_put`` aliases aligned host memory, where NumPy's ``__dlpack__``
refuses bfloat16 and read-only arrays); ``interop.numpy.from_numpy`` uses it too.

Imports ``_dispatch`` (an export is a host sync), ``_segment`` (an import of memory another library may
write runs pending work at once), ``streams``, ``_recorder``, ``_tensor``, ``_device`` and ``_dtype``;
never ``interop``, torch or cupy (a producer's own library is used only through the object it passed).
"""
from __future__ import annotations

import jax
import numpy as np

from . import _dispatch, _segment
from ..core import _dtype
from .. import streams as _streams
from ..core._device import _devices, device as _jg_device, from_jax as _device_from_jax
from ..core._recorder import _settled
from ..core import _tensor
from ..core._tensor import Tensor

__all__ = ["from_dlpack", "export_tensor", "tensor_dlpack_device", "UnsupportedDTypeError", "ALIGNMENT"]

#: XLA's CPU client aliases host memory only at this alignment (bytes).
ALIGNMENT = 64

# DLDeviceType codes (dlpack.h)
_kDLCPU, _kDLCUDA, _kDLCUDAHost, _kDLROCM = 1, 2, 3, 10
_DL_NAMES = {1: "CPU", 2: "CUDA", 3: "CUDAHost", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI", 10: "ROCm",
             11: "ROCmHost", 13: "CUDAManaged", 14: "OneAPI", 15: "WebGPU", 16: "Hexagon", 17: "MAIA"}


class UnsupportedDTypeError(BufferError, TypeError):
    """The buffer's dtype has no jgrad dtype (``uint16`` ...): no copy can fix that."""


# ---- small helpers --------------------------------------------------------------------------------------
def _check_copy(copy):
    if copy is not None and not isinstance(copy, bool):
        raise ValueError(f"copy must be None, True or False, got {copy!r}")


def is_tracer(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def buffer_pointer(arr) -> int:
    """The address of a single-device ``jax.Array``'s buffer."""
    return arr.unsafe_buffer_pointer()


def _jg_dtype(np_dtype, what):
    try:
        dt = _dtype.from_np(np.dtype(np_dtype))
    except TypeError:
        raise UnsupportedDTypeError(
            f"{what}: jgrad has no dtype for {np.dtype(np_dtype).name}; supported: "
            f"{', '.join(d.name for d in _dtype.ALL)}. Convert it on the producer's side first "
            f"(e.g. x.astype(np.int32) / x.to(torch.int32)).") from None
    return dt


def _single_device(arr, what):
    devs = arr.devices()
    if len(devs) != 1:
        raise BufferError(f"{what}: the jax.Array is sharded over {len(devs)} devices; DLPack exchanges one "
                          "buffer. Gather it onto one device first: jax.device_put(a, jax.devices()[0]).")
    return next(iter(devs))


def _current(dev):
    return _streams.current_stream(dev)


def _wrap_imported(arr, what):
    """A new jgrad tensor around an imported array: written on the current stream of its device."""
    _jg_dtype(arr.dtype, what)
    dev = _device_from_jax(_single_device(arr, what))
    s = _current(dev)
    t = Tensor._make(arr, dev, s)
    if _streams.sanitizer_enabled():
        _streams.check_access((), (), s, what)      # the import is an op on s (ticks its clock)
        _streams.record_new((t,), s, what)
    return t


def _target(device):
    return None if device is None else _jg_device(device)


def _place(arr, target, copy, what, external=False):
    """Put a (shared) jax array where it was asked to go, copying only as ``copy`` allows.

    ``external``: ``arr`` aliases memory another library may write to, so a copy
    must have finished before we return (JAX copies asynchronously).
    """
    src = _single_device(arr, what)
    if target is not None and target.jax_device != src:
        if copy is False:
            raise BufferError(f"{what}: the data is on {_device_from_jax(src)} but device={target} was asked "
                              "for, which needs a copy; pass copy=None or copy=True to allow it.")
        out = jax.device_put(arr, target.jax_device)
    elif copy:
        out = jax.device_put(arr, src, may_alias=False)
    else:
        return arr
    if external:
        out.block_until_ready()
    return out


# ---- export ---------------------------------------------------------------------------------------------
def _exportable(t, what, *, allow_requires_grad=False):
    """The jax.Array behind ``t`` after the checks every export makes (no sanitizer access yet)."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: expected a jgrad Tensor, got {type(t).__name__}")
    if t._req and not allow_requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    arr = t._data = _settled(t._fresh()._data)  # pending tiered work runs first: an export is a barrier
    if arr is None:
        raise BufferError(f"{what}: this tensor (shape {list(t.shape)}) is being captured into a jgrad.Graph "
                          "and has no data until replay; export it after capture_end()/replay().")
    if is_tracer(arr):
        raise BufferError(f"{what}: this tensor is traced by JAX (inside jax.jit/vmap/grad or a functionalized "
                          "function) and has no buffer to share.")
    return arr


def _export_access(t, what, blocking, consumer=None):
    """The stream side of an export: capture check, sanitizer read, the consumer's wait."""
    if blocking:
        _dispatch.host_sync(None, what)      # a host sync: an error while a capture is under way
    cur = _current(t._device)
    if _streams.sanitizer_enabled():
        if blocking:
            _streams.host_read(t, what)      # a read on the current stream, then the host knows it is done
        else:
            _streams.check_access((t,), (), cur, what)
    if consumer is not None and consumer is not cur:
        consumer.wait_stream(cur)


def _jax_stream(t, stream):
    """Translate the consumer's ``stream`` into what JAX takes; returns (jax_stream, jgrad_consumer)."""
    if stream is None:
        return None, None
    if isinstance(stream, _streams.Stream):
        if stream.device is not t._device:
            raise BufferError(f"__dlpack__: stream {stream} is on {stream.device} but the tensor is on {t._device}")
        return None, stream
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise TypeError(f"__dlpack__: stream must be None, an int (a CUDA/ROCm stream handle, 1 legacy "
                        f"default, 2 per-thread default, -1 no synchronization) or a jgrad.Stream; got "
                        f"{type(stream).__name__}")
    if t._device.type == "cpu" or stream == -1:
        return None, None       # DLPack has no CPU streams; JAX's CPU export waits for the buffer itself
    if stream == 0:
        raise ValueError("__dlpack__: stream=0 is ambiguous in DLPack (use 1 for the legacy default stream, "
                         "2 for the per-thread default stream, or the stream's handle)")
    return stream, None


def export_tensor(t, *, stream=None, max_version=None, dl_device=None, copy=None):
    """``Tensor.__dlpack__``: a DLPack capsule sharing ``t``'s buffer (see the module docstring)."""
    _check_copy(copy)
    what = "Tensor.__dlpack__()"
    arr = _exportable(t, what)
    jstream, consumer = _jax_stream(t, stream)
    if dl_device is not None:
        own = tuple(int(v) for v in arr.__dlpack_device__())
        want = (int(dl_device[0]), int(dl_device[1]))
        if want == own:
            dl_device = None
        elif copy is False:
            raise BufferError(f"{what}: dl_device={want} differs from the tensor's DLPack device {own}, which "
                              "needs a copy; pass copy=None or copy=True.")
    _export_access(t, what, blocking=jstream is None, consumer=consumer)
    try:
        return arr.__dlpack__(stream=jstream, max_version=max_version, dl_device=dl_device, copy=copy)
    except BufferError:
        raise
    except (ValueError, RuntimeError) as e:     # JaxRuntimeError is a RuntimeError
        raise BufferError(f"{what}: JAX could not export this buffer: {e}") from e


def tensor_dlpack_device(t):
    """``Tensor.__dlpack_device__``: ``(DLDeviceType, device id)`` of ``t``'s buffer."""
    arr = _settled(t._fresh()._data)
    if arr is not None and not is_tracer(arr) and hasattr(arr, "__dlpack_device__"):
        return arr.__dlpack_device__()
    dev = t._device
    if dev.type == "cpu":
        return (_dl_type(_kDLCPU), 0)
    jd = dev.jax_device
    kind = _kDLROCM if "rocm" in jd.client.platform_version.lower() else _kDLCUDA
    return (_dl_type(kind), jd.local_hardware_id)


def _dl_type(code):
    try:
        from jax._src.typing import DLDeviceType
        return DLDeviceType(code)
    except Exception:       # pragma: no cover - older jax
        return code


# ---- import ---------------------------------------------------------------------------------------------
def from_dlpack(obj, *, device=None, copy=None):
    """A jgrad tensor sharing ``obj``'s buffer (any DLPack producer: NumPy, PyTorch, JAX, CuPy, jgrad).

    ``device``: where the result goes (default: the producer's device); another
    device means a copy. ``copy``: None copies only if needed, True always,
    False never (``BufferError`` where a copy would be needed, saying why).
    The result has no autograd history and ``requires_grad=False``.
    """
    _check_copy(copy)
    with _dtype.x64_scope():  # 64-bit producers import as 64-bit (jgrad's x64 rule, docs/porting.md)
        return _from_dlpack(obj, _target(device), copy)


def _from_dlpack(obj, target, copy):
    what = "from_dlpack()"
    if isinstance(obj, Tensor):
        arr = _exportable(obj, what)
        _export_access(obj, what, blocking=False)
        return _wrap_imported(_place(arr, target, copy, what), what)
    if isinstance(obj, jax.Array):
        if is_tracer(obj):
            raise BufferError(f"{what}: got a JAX tracer (inside jax.jit/vmap/grad), which has no buffer. Use "
                              "interop.jax.from_jax(a) to wrap a traced value in a tensor.")
        return _wrap_imported(_place(obj, target, copy, what), what)
    if isinstance(obj, (np.ndarray, np.generic)):
        return _import_numpy(obj, target, copy, what)
    if _tname(obj) == "PyCapsule":
        raise TypeError(f"{what}: pass the array itself (an object with __dlpack__ and __dlpack_device__), not "
                        "a raw DLPack capsule: a capsule carries no stream handshake.")
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"{what}: expected an object with __dlpack__ and __dlpack_device__ (a NumPy, PyTorch, "
                        f"JAX or CuPy array, or a jgrad Tensor), got {_tname(obj)}")
    return _import_generic(obj, target, copy, what)


def _platform_of(dl_type, obj, what):
    code = int(dl_type)
    name = _DL_NAMES.get(code, str(code))
    if code == _kDLCPU:
        return "cpu"
    if code in (_kDLCUDA, _kDLCUDAHost, _kDLROCM):
        if not _devices("gpu"):
            raise BufferError(f"{what}: this {_tname(obj)} is on a {name} device but JAX has no GPU backend "
                              "here. Install JAX with GPU support (pip install 'jax[cuda13]'), or move the data "
                              "to the host first (x.cpu() / cupy.asnumpy(x)).")
        return "gpu"
    raise BufferError(f"{what}: jgrad cannot import buffers on DLPack device {name} ({_tname(obj)}); "
                      "JAX exchanges CPU, CUDA and ROCm buffers. Move the data to the host first (x.cpu()).")


def _import_generic(obj, target, copy, what):
    if _module_of(obj) == "torch":
        obj = _resolve_torch_bits(obj, copy, what)
    dl_type, _ = obj.__dlpack_device__()
    platform = _platform_of(dl_type, obj, what)
    try:
        # device and copy=True are applied below: jax's from_dlpack(copy=True) aliases CPU buffers anyway
        arr = jax.dlpack.from_dlpack(obj, copy=False if copy is False else None)
    except BufferError as e:
        fixed = _producer_fixup(obj, e, copy, what)
        if fixed is None:
            raise
        return from_dlpack(fixed, device=target, copy=None if copy else copy)
    except (ValueError, RuntimeError, TypeError) as e:
        msg = str(e)
        if "striding" in msg or "strides" in msg:
            if copy is False:
                raise BufferError(
                    f"{what}: this {_tname(obj)} is not contiguous ({_first_line(msg)}); XLA needs a "
                    "compact layout, so importing it needs a copy. Pass copy=None or copy=True to allow it, or "
                    "make it contiguous first (x.contiguous() / np.ascontiguousarray(x)).") from None
            return from_dlpack(_compact_copy(obj, platform, what), device=target, copy=None)
        if "aligned" in msg:
            raise BufferError(
                f"{what}: this {_tname(obj)}'s data pointer is not aligned to {ALIGNMENT} bytes, which XLA "
                "needs to alias host memory, so importing it needs a copy. Pass copy=None or copy=True to allow "
                "it (or allocate aligned memory, e.g. interop.numpy.empty_aligned).") from None
        if "requires a copy" in msg:
            raise BufferError(f"{what}: {_first_line(msg)}") from None
        raise BufferError(f"{what}: JAX could not import this {_tname(obj)}: {_first_line(msg)}") from e
    if platform == "cpu":
        arr.block_until_ready()   # where JAX had to copy (misaligned), the copy is done before the source changes
    placed = _place(arr, target, copy, what, external=True)
    if placed is arr:  # shared with the producer, who may write it: "auto" mode runs ops reading it at once
        _segment.mark_external(placed)
    return _wrap_imported(placed, what)


def _tname(obj):
    t = type(obj)
    mod = t.__module__.split(".")[0]
    return t.__name__ if mod == "builtins" else f"{mod}.{t.__name__}"


def _first_line(msg):
    return msg.strip().splitlines()[0] if msg.strip() else msg


def _module_of(obj):
    return type(obj).__module__.split(".")[0]


def _resolve_torch_bits(obj, copy, what):
    """A torch conjugate or negative view (``x.conj()``, ``torch._neg_view``) holds the unresolved values and a
    lazy bit: torch's ``__dlpack__`` refuses the conjugate bit but exports a negative view's buffer as it is,
    which would import the wrong values. Both are resolved first (a copy made by torch), or refused where
    ``copy=False`` forbids the copy."""
    is_conj, is_neg = getattr(obj, "is_conj", None), getattr(obj, "is_neg", None)
    conj, neg = bool(is_conj and is_conj()), bool(is_neg and is_neg())
    if not (conj or neg):
        return obj
    if copy is False:
        bit = "conjugate" if conj else "negative"
        raise BufferError(f"{what}: this torch.Tensor is a {bit} view (its {bit} bit is set), whose buffer holds "
                          f"unresolved values; resolving it needs a copy. Pass copy=None or copy=True to allow "
                          f"it, or call x.resolve_conj() / x.resolve_neg() first.")
    return obj.resolve_conj().resolve_neg()


def _producer_fixup(obj, err, copy, what):
    """A producer-side copy for what its ``__dlpack__`` refuses (torch conj/neg views), if allowed."""
    msg = str(err)
    if _module_of(obj) == "torch" and ("conjugate" in msg or "negative" in msg):
        if copy is False:
            raise BufferError(f"{what}: {msg}. Resolving it needs a copy: pass copy=None or copy=True, or call "
                              "x.resolve_conj() / x.resolve_neg() first.") from None
        return obj.resolve_conj().resolve_neg()
    return None


def _compact_copy(obj, platform, what):
    """A contiguous copy of ``obj`` on its own device, made by its own library."""
    mod = _module_of(obj)
    if mod == "torch":
        return obj.resolve_conj().resolve_neg().contiguous()
    if mod == "cupy":
        import cupy
        return cupy.ascontiguousarray(obj)
    if platform == "cpu":
        return np.ascontiguousarray(np.from_dlpack(obj))
    raise BufferError(f"{what}: this {_tname(obj)} is not contiguous and jgrad does not know how to "
                      "make a contiguous copy of it on its device; make it contiguous first.")


def aligned(ptr: int) -> bool:
    return ptr % ALIGNMENT == 0


# ---- NumPy: aligned host memory, aliased by jax.device_put ----------------------------------------------
def _pointer(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _import_numpy(a, target, copy, what):
    """The NumPy path of ``from_dlpack``: ``jax.device_put`` aliases aligned host memory (any dtype,
    read-only arrays too, where NumPy's own ``__dlpack__`` refuses bfloat16 and read-only arrays)."""
    with _dtype.x64_scope():
        return _import_numpy_x64(a, target, copy, what)


def _import_numpy_x64(a, target, copy, what):
    if copy is not None and not isinstance(copy, bool):
        raise ValueError(f"copy must be None, True or False, got {copy!r}")
    if isinstance(a, np.generic):
        if copy is False:
            raise BufferError(f"{what}: a NumPy scalar ({type(a).__name__}) has no buffer to share; pass "
                              "copy=None or copy=True, or a 0-d array (np.asarray(x)).")
        a = np.asarray(a)
    dev = target if target is not None else _jg_device("cpu")
    problems = []
    if not a.dtype.isnative:
        problems.append(f"byte order {a.dtype.str!r} is not the machine's")
    _jg_dtype(a.dtype.newbyteorder("=") if not a.dtype.isnative else a.dtype, what)
    if dev.type != "cpu":
        problems.append(f"device={dev} is not host memory")
    if a.size:
        if not a.flags.c_contiguous:
            problems.append(f"not C-contiguous (strides {a.strides} for shape {a.shape})")
        if _pointer(a) % ALIGNMENT:
            problems.append(f"data pointer not aligned to {ALIGNMENT} bytes (NumPy only promises 16; use "
                            "interop.numpy.empty_aligned)")
    if copy is False and problems:
        raise BufferError(f"{what}: cannot share this array's memory: {'; '.join(problems)}. Importing it needs "
                          "a copy: pass copy=None or copy=True.")
    if copy:
        a = np.array(a, dtype=a.dtype.newbyteorder("="), order="C", copy=True)   # private: aliasing it is fine
    elif problems:
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("="))   # device_put copies what is misaligned
    arr = jax.device_put(a, dev.jax_device)
    arr.block_until_ready()       # a copy must be done before we return: the host array may change after
    if copy is False and a.size and buffer_pointer(arr) != _pointer(a):
        raise BufferError(f"{what}: JAX copied the array although it looked shareable; pass copy=None to allow.")
    if not copy and a.size and buffer_pointer(arr) == _pointer(a):
        _segment.mark_external(arr)  # NumPy may write it: "auto" mode runs ops reading it at once
    return _wrap_imported(arr, what)


_tensor.above.export_dlpack, _tensor.above.dlpack_device = export_tensor, tensor_dlpack_device
