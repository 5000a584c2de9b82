"""DLPack for jgrad, re-exported: the protocol itself lives in ``jgrad/runtime/_dlpack.py``.

DLPack is how a jgrad tensor shares its buffer, so it is tensor behaviour and lives in jgrad:
``Tensor.__dlpack__`` / ``__dlpack_device__`` and ``jg.from_dlpack``. This module keeps the names
``interop.dlpack.*`` and ``interop.from_dlpack`` working; ``jgrad/runtime/_dlpack.py`` documents the export,
import, mutation and stream contracts, and docs/interop.md explains them for users.

Imports ``jgrad.runtime._dlpack`` only.
"""
from jgrad.runtime._dlpack import (ALIGNMENT, UnsupportedDTypeError, aligned, buffer_pointer,  # noqa: F401
                                   export_tensor, from_dlpack, is_tracer, tensor_dlpack_device)

__all__ = ["from_dlpack", "export_tensor", "tensor_dlpack_device", "UnsupportedDTypeError", "ALIGNMENT"]
