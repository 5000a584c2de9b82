"""``jgrad.cuda`` (``torch.cuda``): the GPUs JAX sees, under PyTorch's names.

``is_available``/``device_count`` ask JAX (``"cuda"`` device strings are jgrad's ``"gpu"``); the current
device (``current_device``/``set_device``/``device(i)``) is the one an index-less ``"cuda"`` names, for the
whole process. ``Stream`` is ``jgrad.Stream`` on the current GPU by default; ``Event``, ``graph``,
``CUDAGraph``, ``stream``, ``set_stream``, ``graph_pool_handle`` and ``make_graphed_callables`` are jgrad's
own (streams and capture work on every device). Seeds go to the GPUs' default generators; memory statistics
come from XLA's allocator (``jgrad.core._accelerators``). Without a GPU, the functions that need one raise
``RuntimeError("No CUDA GPUs are available")``; ``manual_seed``/``manual_seed_all`` do nothing and the
memory statistics are ``{}``/0, as PyTorch's are before CUDA starts.

Imports ``_accelerators``, ``_device``, ``random``, ``streams``, ``graphs`` and the legacy tensor types
(``ops.compat``).
"""
from __future__ import annotations

import numpy as np

from .core import _accelerators as _acc
from . import random as _random
from . import streams as _streams
from .graphs import Graph as CUDAGraph, graph, graph_pool_handle, make_graphed_callables  # noqa: F401
from .ops.compat import cuda_tensor_types as _tensor_types
from .streams import Event, set_stream, stream  # noqa: F401

__all__ = ["is_available", "device_count", "is_initialized", "init", "current_device", "set_device", "device",
           "device_of", "get_device_name", "get_device_capability", "get_device_properties", "is_bf16_supported",
           "synchronize", "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "graph",
           "CUDAGraph", "graph_pool_handle", "make_graphed_callables", "manual_seed", "manual_seed_all", "seed",
           "seed_all", "initial_seed", "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved", "memory_stats",
           "reset_peak_memory_stats", "reset_max_memory_allocated", "empty_cache", "mem_get_info"]

_GPU = "gpu"
globals().update(_tensor_types)  # FloatTensor, LongTensor, ...: GPU tensors of those dtypes (isinstance, construct)


def is_available() -> bool:
    """Whether JAX sees a GPU."""
    return _acc.count(_GPU) > 0


def device_count() -> int:
    return _acc.count(_GPU)


def is_initialized() -> bool:
    return is_available()


def init() -> None:
    """Start JAX's GPU backend (it starts on first use anyway); raises without a GPU."""
    if not is_available():
        raise _acc.no_device_error(_GPU)


def current_device() -> int:
    return _acc.current_index(_GPU)


def set_device(device) -> None:
    """Make ``device`` (an index, ``"cuda:1"`` or a device) the GPU an index-less ``"cuda"`` names."""
    _acc.set_index(_GPU, device)


class device:
    """Context manager: ``with jgrad.cuda.device(1): ...`` makes GPU 1 current inside (None or -1: no change)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _acc.as_index(_GPU, device)
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)

    def __exit__(self, *exc):
        if self.idx >= 0:
            set_device(self.prev)
        return False


class device_of(device):
    """``device`` of a tensor's GPU (no change for a CPU tensor)."""

    def __init__(self, obj):
        super().__init__(obj.device.index if obj.device.type == _GPU else None)


def _jax_device(d=None):
    return _acc.device_of(_GPU, d).jax_device


def get_device_name(device=None) -> str:
    return _jax_device(device).device_kind


def get_device_capability(device=None) -> tuple:
    """``(major, minor)`` of the GPU's compute capability, from JAX's ``compute_capability``."""
    cc = str(getattr(_jax_device(device), "compute_capability", "0.0"))
    major, _, minor = cc.partition(".")
    return int(major), int(minor or 0)


class _DeviceProperties:
    def __init__(self, d):
        jd = _jax_device(d)
        self.name = jd.device_kind
        self.major, self.minor = get_device_capability(d)
        self.total_memory = _acc.mem_get_info(_GPU, d)[1]
        self.multi_processor_count = getattr(jd, "core_count", 0)

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // 2 ** 20}MB, multi_processor_count={self.multi_processor_count})")


def get_device_properties(device=None) -> _DeviceProperties:
    return _DeviceProperties(device)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return is_available() and (including_emulation or get_device_capability() >= (8, 0))


def synchronize(device=None) -> None:
    """Wait for all work on the GPU (the current one when None)."""
    _streams.synchronize(_acc.device_of(_GPU, device))


class Stream(_streams.Stream):
    """``jgrad.Stream`` on a GPU: the current one unless ``device`` says otherwise."""

    def __init__(self, device=None, priority=0, **kwargs):
        if not is_available():
            raise RuntimeError("torch.cuda.Stream requires CUDA support (JAX sees no GPU)")
        super().__init__(_acc.device_of(_GPU, device), priority)


def current_stream(device=None):
    return _streams.current_stream(_acc.device_of(_GPU, device))


def default_stream(device=None):
    return _streams.default_stream(_acc.device_of(_GPU, device))


def _gpus():
    return [_acc.device_of(_GPU, i) for i in range(device_count())]


def manual_seed(seed) -> None:
    """Seed the current GPU's default generator (nothing without a GPU)."""
    if is_available():
        _random.default_generator(_acc.device_of(_GPU)).manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    """Seed every GPU's default generator (nothing without a GPU)."""
    for d in _gpus():
        _random.default_generator(d).manual_seed(int(seed))


def _entropy_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2 ** 63)  # as jgrad.seed() draws one


def seed() -> None:
    if is_available():
        _random.default_generator(_acc.device_of(_GPU)).manual_seed(_entropy_seed())


def seed_all() -> None:
    s = _entropy_seed()
    for d in _gpus():
        _random.default_generator(d).manual_seed(s)


def initial_seed() -> int:
    return _random.default_generator(_acc.device_of(_GPU)).initial_seed()


def get_rng_state(device="cuda"):
    return _random.default_generator(_acc.device_of(_GPU, device)).get_state()


def set_rng_state(new_state, device="cuda") -> None:
    _random.default_generator(_acc.device_of(_GPU, device)).set_state(new_state)


def get_rng_state_all() -> list:
    return [_random.default_generator(d).get_state() for d in _gpus()]


def set_rng_state_all(new_states) -> None:
    for d, s in zip(_gpus(), new_states):
        _random.default_generator(d).set_state(s)


def memory_stats(device=None) -> dict:
    return _acc.memory_stats(_GPU, device)


def memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=None) -> int:
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=None) -> int:
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None) -> None:
    _acc.reset_peak(_GPU, device)


reset_max_memory_allocated = reset_peak_memory_stats


def empty_cache() -> None:
    """Accepted: XLA's allocator keeps its pool and offers no call to return it to the driver."""


def mem_get_info(device=None) -> tuple:
    """``(free, total)`` bytes of the GPU as XLA's allocator sees them (its ``bytes_limit``)."""
    return _acc.mem_get_info(_GPU, device)
