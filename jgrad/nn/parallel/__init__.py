"""``jgrad.nn.parallel``: ``DistributedDataParallel`` on JAX's SPMD (``torch.nn.parallel``)."""
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
