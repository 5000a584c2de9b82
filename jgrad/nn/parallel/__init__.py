"""``jgrad.nn.parallel``: ``DistributedDataParallel`` on JAX's SPMD (``torch.nn.parallel``).

Imports ``nn.parallel.distributed``.
"""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
