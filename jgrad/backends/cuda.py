"""``jgrad.backends.cuda`` (``torch.backends.cuda``): ``matmul.allow_tf32`` reads and sets jgrad's float32
matmul precision (True: ``"high"``, TF32 on NVIDIA GPUs; False: ``"highest"``), as PyTorch's flag and
``torch.set_float32_matmul_precision`` are one setting. The reduced-precision-reduction flags are recorded:
XLA chooses its reductions itself.

Imports ``_device`` and ``ops.linalg``.
"""
from __future__ import annotations

import importlib.util

from ..core import _device
from ..ops import linalg as _linalg

__all__ = ["matmul", "is_built"]


class _MatmulFlags:
    """``torch.backends.cuda.matmul``: ``allow_tf32``, ``allow_fp16_reduced_precision_reduction``,
    ``allow_bf16_reduced_precision_reduction``; any other name is an AttributeError, as PyTorch's."""

    _FLAGS = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")

    def __init__(self):
        object.__setattr__(self, "_flags", {"allow_fp16_reduced_precision_reduction": True,
                                            "allow_bf16_reduced_precision_reduction": True})

    def __getattr__(self, name):
        if name == "allow_tf32":
            return _linalg.get_float32_matmul_precision() != "highest"
        if name in self._FLAGS:
            return self._flags[name]
        raise AttributeError(f"Unknown attribute {name}")

    def __setattr__(self, name, value):
        if name == "allow_tf32":
            _linalg.set_float32_matmul_precision("high" if value else "highest")
        elif name in self._FLAGS:
            self._flags[name] = bool(value)
        else:
            raise AttributeError(f"Unknown attribute {name}")


matmul = _MatmulFlags()


def is_built() -> bool:
    """Whether JAX can use GPUs here: it sees one, or a CUDA plugin of jaxlib is installed."""
    return bool(_device._devices("gpu")) or any(
        importlib.util.find_spec(m) is not None for m in ("jax_cuda13_plugin", "jax_cuda12_plugin"))
