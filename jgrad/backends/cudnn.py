"""``jgrad.backends.cudnn`` (``torch.backends.cudnn``): ``import torch.backends.cudnn as cudnn`` and its flags.

``enabled``, ``benchmark``, ``deterministic`` and ``benchmark_limit`` are recorded and read back: XLA picks
its GPU convolution algorithms itself when it compiles (it autotunes them), and its determinism is an XLA
flag set before the backend starts (``--xla_gpu_deterministic_ops``), so these flags change nothing.
``allow_tf32`` is jgrad's float32 precision, which governs convolutions and matmuls alike (True: ``"high"``,
False: ``"highest"``, the default; PyTorch's cuDNN convolutions default to TF32).
``is_available()`` is whether JAX sees a GPU (XLA's GPU convolutions are cuDNN's).

Imports ``_device`` and ``ops.linalg``.
"""
from __future__ import annotations

import contextlib
import sys
import types

from ..core import _device
from ..ops import linalg as _linalg

__all__ = ["is_available", "version", "flags", "enabled", "benchmark", "deterministic", "allow_tf32",
           "benchmark_limit"]

enabled = True
benchmark = False
deterministic = False
benchmark_limit = 10


def is_available() -> bool:
    return bool(_device._devices("gpu"))


def version():
    """cuDNN's version as PyTorch reports it (e.g. 90100), from jaxlib's CUDA plugin; None without a GPU."""
    if not is_available():
        return None
    try:
        from jax._src.lib import cuda_versions
        return cuda_versions.cudnn_get_version() if cuda_versions is not None else None
    except (ImportError, AttributeError):
        return None


@contextlib.contextmanager
def flags(enabled=False, benchmark=False, benchmark_limit=10, deterministic=False, allow_tf32=True):
    """Set the flags inside a ``with`` block and restore them after (``torch.backends.cudnn.flags``)."""
    mod = sys.modules[__name__]
    saved = (mod.enabled, mod.benchmark, mod.benchmark_limit, mod.deterministic, mod.allow_tf32)
    mod.enabled, mod.benchmark, mod.benchmark_limit, mod.deterministic = enabled, benchmark, benchmark_limit, \
        deterministic
    mod.allow_tf32 = allow_tf32
    try:
        yield
    finally:
        mod.enabled, mod.benchmark, mod.benchmark_limit, mod.deterministic, mod.allow_tf32 = saved


class _CudnnModule(types.ModuleType):
    """This module's class: ``allow_tf32`` is a property over jgrad's float32 precision."""

    @property
    def allow_tf32(self):
        return _linalg.get_float32_matmul_precision() != "highest"

    @allow_tf32.setter
    def allow_tf32(self, value):
        _linalg.set_float32_matmul_precision("high" if value else "highest")


sys.modules[__name__].__class__ = _CudnnModule
