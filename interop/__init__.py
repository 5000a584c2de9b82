"""interop: DLPack and conversions between jgrad and JAX / NumPy / PyTorch / CuPy.

    >>> import interop
    >>> t = interop.from_dlpack(np_or_torch_or_jax_or_cupy_array)   # zero copy on the same device
    >>> interop.jax.to_jax(t), interop.numpy.to_numpy(t), interop.torch.to_torch(t)
    >>> g = jax.grad(interop.jax.functionalize(jgrad_loss))          # a jgrad function as a jax function
    >>> print(interop.jax.compare_grad(jgrad_loss, x, w))             # jgrad vs jax.grad vs finite differences

Modules: ``dlpack`` (the protocol, the mutation and stream contracts),
``jax``, ``numpy``, ``torch`` (optional), ``cupy`` (optional). Importing this
package never imports torch or cupy.
"""
import jgrad  # noqa: F401  (first: jgrad's own __init__ imports interop.dlpack)

from . import dlpack
from .dlpack import UnsupportedDTypeError, from_dlpack
from . import numpy, jax, torch, cupy  # noqa: E402  (torch/cupy import their libraries lazily)

del jgrad

__all__ = ["from_dlpack", "UnsupportedDTypeError", "dlpack", "numpy", "jax", "torch", "cupy"]
