"""``jgrad.accelerator`` (``torch.accelerator``): the device-agnostic accelerator API, on the GPUs (else the
TPUs) JAX sees.

``is_available()`` / ``current_accelerator()`` / ``device_count()`` are the first lines of current PyTorch
examples (``device = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else "cpu"``):
``current_accelerator()`` is a jgrad ``device`` ("gpu"; PyTorch's "cuda") or None. The current device index,
streams, ``synchronize`` and the memory statistics are those of ``jgrad.cuda`` for that kind of device.
Without an accelerator, everything that needs one raises PyTorch's ``RuntimeError("Cannot access accelerator
device when none is available.")``.

Imports ``_accelerators``, ``_device`` and ``streams``.
"""
from __future__ import annotations

from .core import _accelerators as _acc
from .core import _device
from . import streams as _streams

__all__ = ["is_available", "current_accelerator", "device_count", "current_device_index", "current_device_idx",
           "set_device_index", "set_device_idx", "device_index", "current_stream", "set_stream", "synchronize",
           "memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "get_memory_info"]


def _kind():
    for kind in ("gpu", "tpu"):
        if _acc.count(kind):
            return kind
    return None


def _need():
    kind = _kind()
    if kind is None:
        raise RuntimeError("Cannot access accelerator device when none is available.")
    return kind


def is_available() -> bool:
    """Whether JAX sees a GPU or a TPU."""
    return _kind() is not None


def current_accelerator(check_available: bool = False):
    """The accelerator's device (``device('gpu')`` for a GPU), or None when JAX sees none."""
    kind = _kind()
    return None if kind is None else _device.device(kind)


def device_count() -> int:
    kind = _kind()
    return 0 if kind is None else _acc.count(kind)


def current_device_index() -> int:
    return _acc.current_index(_need())


current_device_idx = current_device_index


def set_device_index(device) -> None:
    _acc.set_index(_need(), device)


set_device_idx = set_device_index


class device_index:
    """Context manager: make accelerator ``device`` current inside (None: no change)."""

    def __init__(self, device, /):
        self.idx = device
        self.prev = None

    def __enter__(self):
        if self.idx is not None:
            self.prev = current_device_index()
            set_device_index(self.idx)

    def __exit__(self, *exc):
        if self.idx is not None:
            set_device_index(self.prev)
        return False


def current_stream(device=None):
    return _streams.current_stream(_acc.device_of(_need(), device))


def set_stream(stream) -> None:
    _streams.set_stream(stream)


def synchronize(device=None) -> None:
    """Wait for all work on the accelerator (the current device when None)."""
    _streams.synchronize(_acc.device_of(_need(), device))


def memory_stats(device_index=None) -> dict:
    return _acc.memory_stats(_need(), device_index)


def memory_allocated(device_index=None) -> int:
    return memory_stats(device_index).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device_index=None) -> int:
    return memory_stats(device_index).get("allocated_bytes.all.peak", 0)


def memory_reserved(device_index=None) -> int:
    return memory_stats(device_index).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device_index=None) -> int:
    return memory_stats(device_index).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device_index=None) -> None:
    _acc.reset_peak(_need(), device_index)


reset_accumulated_memory_stats = reset_peak_memory_stats


def empty_cache() -> None:
    """Accepted: XLA's allocator keeps its pool and offers no call to return it."""
    _need()


def get_memory_info(device_index=None) -> tuple:
    """``(free, total)`` bytes as XLA's allocator sees them."""
    return _acc.mem_get_info(_need(), device_index)
