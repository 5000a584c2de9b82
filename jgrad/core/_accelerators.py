"""What ``jgrad.cuda`` and ``jgrad.accelerator`` share: the current device of a kind, and memory statistics.

The current device of a kind ("gpu", "tpu") is the one an index-less device string names (``_device``'s
``_current_index``); ``set_device`` changes it for the process. Memory statistics come from JAX's
``Device.memory_stats()`` (XLA's allocator) under PyTorch's names: ``memory_allocated`` is
``bytes_in_use``, ``memory_reserved`` is the allocator's pool (``pool_bytes``, else ``bytes_reserved``), the
peaks are XLA's. XLA cannot reset its peaks, so ``reset_peak_memory_stats`` remembers the peak at that
moment: a later peak above it is reported as it is, and below it the larger of the memory in use at the
reset and now (a peak reached and released in between, smaller than the old one, is not seen). A device
whose backend keeps no statistics (the CPU) reports nothing: ``{}`` and zeros, as PyTorch's CUDA functions
do before CUDA is initialized.

Imports ``_device`` only.
"""
from __future__ import annotations

from . import _device as _dev

_PEAK_KEYS = {"allocated": ("bytes_in_use", "peak_bytes_in_use"), "reserved": ("pool_bytes", "peak_pool_bytes")}
_resets: dict = {}  # (device, what) -> (peak at the reset, in use at the reset)


def count(kind: str) -> int:
    return len(_dev._devices(kind))


def no_device_error(kind: str) -> RuntimeError:
    if kind == "gpu":
        return RuntimeError("No CUDA GPUs are available")
    return RuntimeError("Cannot access accelerator device when none is available.")


def current_index(kind: str) -> int:
    if not count(kind):
        raise no_device_error(kind)
    return _dev._current_index.get(kind, 0)


def set_index(kind: str, index) -> None:
    """Make device ``index`` of ``kind`` the current one (a negative index does nothing, as PyTorch's)."""
    index = as_index(kind, index)
    if index < 0:
        return
    n = count(kind)
    if not n:
        raise no_device_error(kind)
    if index >= n:
        prefix = "CUDA error: invalid device ordinal" if kind == "gpu" else "invalid device index"
        raise RuntimeError(f"{prefix} (device {index} asked for; JAX sees {n} {kind} device(s) in this process)")
    _dev._current_index[kind] = index


def as_index(kind: str, d) -> int:
    """A device argument (an int, a string or a device; None: the current device) as an index of ``kind``."""
    if d is None:
        return current_index(kind)
    if isinstance(d, int):
        return d
    d = _dev.device(d)
    if d.type != kind:
        raise ValueError(f"Expected a {'cuda' if kind == 'gpu' else kind} device, but got: {d}")
    return d.index


def device_of(kind: str, d=None) -> "_dev.device":
    """The jgrad device of ``kind`` that ``d`` names (the current one when None)."""
    index = as_index(kind, d)
    if index >= count(kind):
        raise no_device_error(kind) if not count(kind) else RuntimeError(
            f"Invalid device argument: {kind} device {index} does not exist ({count(kind)} device(s))")
    return _dev._intern(kind, index)


def _raw_stats(dev) -> dict:
    """XLA's allocator statistics of ``dev`` ({} where the backend keeps none)."""
    return dict(dev.jax_device.memory_stats() or {})


def _current(stats, what):
    now_key, _ = _PEAK_KEYS[what]
    if what == "reserved" and now_key not in stats:
        return stats.get("bytes_reserved", 0)
    return stats.get(now_key, 0)


def _peak(dev, stats, what):
    _, peak_key = _PEAK_KEYS[what]
    peak = stats.get(peak_key, _current(stats, what))
    reset = _resets.get((dev, what))
    if reset is None:
        return peak
    peak_at_reset, in_use_at_reset = reset
    return peak if peak > peak_at_reset else max(in_use_at_reset, _current(stats, what))


def memory_stats(kind: str, d=None) -> dict:
    """PyTorch's keys (``allocated_bytes.all.current``/``peak``, ``reserved_bytes.all.current``/``peak``,
    ``allocation.all.allocated``), then XLA's own statistics under their names."""
    if not count(kind):
        return {}
    dev = device_of(kind, d)
    stats = _raw_stats(dev)
    if not stats:
        return {}
    out = {"allocated_bytes.all.current": _current(stats, "allocated"),
           "allocated_bytes.all.peak": _peak(dev, stats, "allocated"),
           "reserved_bytes.all.current": _current(stats, "reserved"),
           "reserved_bytes.all.peak": _peak(dev, stats, "reserved")}
    if "num_allocs" in stats:
        out["allocation.all.allocated"] = stats["num_allocs"]
    out.update(stats)
    return out


def reset_peak(kind: str, d=None) -> None:
    if not count(kind):
        return
    dev = device_of(kind, d)
    stats = _raw_stats(dev)
    for what, (_, peak_key) in _PEAK_KEYS.items():
        _resets[(dev, what)] = (stats.get(peak_key, _current(stats, what)), _current(stats, what))


def mem_get_info(kind: str, d=None) -> tuple:
    """``(free, total)`` bytes the allocator may still use, from XLA's ``bytes_limit``."""
    dev = device_of(kind, d)
    stats = _raw_stats(dev)
    total = stats.get("bytes_limit", 0)
    return total - stats.get("bytes_in_use", 0), total
