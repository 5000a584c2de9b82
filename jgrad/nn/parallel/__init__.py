"""``jgrad.nn.parallel``: ``DistributedDataParallel`` on JAX's SPMD, ``data_parallel``/``DataParallel`` over the
devices of one process (``torch.nn.parallel``).

Imports ``nn.parallel.distributed`` and ``nn.parallel.data_parallel``.
"""
from .data_parallel import DataParallel, data_parallel
from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel", "DataParallel", "data_parallel"]
