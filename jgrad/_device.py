"""Devices: ``jg.device("cpu")``, ``jg.device("gpu:0")`` (``"cuda:0"`` is an alias).

A jgrad device names one JAX device. Virtual CPU devices (from
``--xla_force_host_platform_device_count``) are ``cpu:1``, ``cpu:2``, ...
"""
from __future__ import annotations

import functools

import jax

_ALIASES = {"cuda": "gpu", "rocm": "gpu", "gpu": "gpu", "cpu": "cpu", "tpu": "tpu"}


class device:
    """A device: ``type`` ('cpu', 'gpu', 'tpu') and ``index``."""

    __slots__ = ("type", "index", "_jax", "__weakref__")

    def __new__(cls, spec="cpu", index=None):
        if isinstance(spec, device):
            return spec
        if isinstance(spec, int) and index is None:
            spec, index = _default_accelerator(), spec
        if not isinstance(spec, str):
            raise TypeError(f"device() expects a string such as 'cpu' or 'gpu:0', got {spec!r}")
        kind, _, idx = spec.partition(":")
        if kind not in _ALIASES:
            raise RuntimeError(
                f"Expected one of cpu, gpu, cuda, tpu device type at start of device string: {spec}")
        if idx:
            if index is not None:
                raise RuntimeError(f"device string {spec!r} already has an index; do not pass index={index}")
            if not idx.isdigit():
                raise RuntimeError(f"Invalid device string: '{spec}'")
            index = int(idx)
        return _intern(_ALIASES[kind], 0 if index is None else int(index))

    def __repr__(self):
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return f"{self.type}:{self.index}" if self.type != "cpu" or self.index else "cpu"

    def __reduce__(self):
        return (device, (str(self),))

    @property
    def jax_device(self) -> jax.Device:
        """The JAX device this names (raises if it does not exist here)."""
        if self._jax is None:
            devs = _devices(self.type)
            if self.index >= len(devs):
                raise RuntimeError(
                    f"{self} is not available: JAX sees {len(devs)} {self.type} device(s). "
                    + ("Install jax with GPU support (pip install 'jax[cuda13]')." if self.type == "gpu" and not devs
                       else "Use an index below the device count."))
            self._jax = devs[self.index]
        return self._jax


@functools.lru_cache(maxsize=None)
def _intern(kind, index):
    d = object.__new__(device)
    d.type, d.index, d._jax = kind, index, None
    return d


@functools.lru_cache(maxsize=None)
def _devices(kind):
    try:
        return tuple(jax.devices(kind))
    except RuntimeError:
        return ()


def _default_accelerator():
    return "gpu" if _devices("gpu") else "cpu"


_BY_JAX: dict = {}


def from_jax(d: jax.Device) -> device:
    """The jgrad device naming JAX device ``d``."""
    try:
        return _BY_JAX[d]
    except KeyError:
        kind = "gpu" if d.platform in ("gpu", "cuda", "rocm") else d.platform
        out = _intern(kind, _devices(kind).index(d))
        out._jax = d
        _BY_JAX[d] = out
        return out


_default_device = [None]


def get_default_device() -> device:
    """The device new tensors go to: 'cpu', as in PyTorch, unless changed."""
    if _default_device[0] is None:
        _default_device[0] = device("cpu")
    return _default_device[0]


def set_default_device(d) -> None:
    """Set the device factories use when none is given (``torch.set_default_device``)."""
    _default_device[0] = device(d) if d is not None else None


def is_available(kind: str = "gpu") -> bool:
    """Whether JAX sees at least one device of this kind."""
    return bool(_devices(_ALIASES.get(kind, kind)))


def device_count(kind: str = "gpu") -> int:
    return len(_devices(_ALIASES.get(kind, kind)))
