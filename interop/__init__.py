"""interop: adapters between jgrad and other libraries (JAX, NumPy, PyTorch, CuPy), on DLPack.

    >>> import interop
    >>> t = interop.from_dlpack(np_or_torch_or_jax_or_cupy_array)   # zero copy on the same device
    >>> interop.jax.to_jax(t), interop.numpy.to_numpy(t), interop.torch.to_torch(t)
    >>> g = jax.grad(interop.jax.functionalize(jgrad_loss))          # a jgrad function as a jax function
    >>> print(interop.jax.compare_grad(jgrad_loss, x, w))             # jgrad vs jax.grad vs finite differences

Modules: ``jax``, ``numpy``, ``torch`` (optional), ``cupy`` (optional), one per library, and
``dlpack``, which re-exports the DLPack protocol of jgrad tensors (it lives in ``jgrad/runtime/_dlpack.py``;
``interop.from_dlpack`` is ``jgrad.from_dlpack``). Importing this package never imports torch or cupy.

Layering: interop depends on jgrad (its public API and the DLPack internals of ``jgrad.runtime._dlpack``);
jgrad never imports interop (``tests/test_layering.py`` checks it). Frames of this package count as
library code, not the user's, where the stream sanitizer names a source line.
"""
import os as _os

import jgrad  # (interop builds on jgrad; jgrad never imports interop)

jgrad.streams.library_code(_os.path.dirname(_os.path.abspath(__file__)))

from . import dlpack  # noqa: E402
from .dlpack import UnsupportedDTypeError, from_dlpack  # noqa: E402
from . import numpy, jax, torch, cupy  # noqa: E402  (torch/cupy import their libraries lazily)

del jgrad, _os

__all__ = ["from_dlpack", "UnsupportedDTypeError", "dlpack", "numpy", "jax", "torch", "cupy"]
