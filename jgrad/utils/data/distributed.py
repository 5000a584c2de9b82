"""``DistributedSampler`` (``torch.utils.data.distributed``): each process's share of a dataset's indices.

As PyTorch's: every process draws the same order (seeded by ``seed + epoch``; ``set_epoch`` changes it),
pads it (or drops the tail, with ``drop_last``) to a multiple of ``num_replicas``, and takes every
``num_replicas``-th index from its ``rank``. The order comes from NumPy's PCG64 on the host, so it is the
same in every process and on every run, not PyTorch's order. Without ``num_replicas``/``rank`` it asks
``jgrad.distributed`` (one process: rank 0 of 1, where PyTorch requires ``init_process_group``).

Imports ``utils.data.sampler``; ``jgrad.distributed`` at the call.
"""
from __future__ import annotations

import math

import numpy as np

from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """This process's share of ``dataset``'s indices (``rank`` of ``num_replicas``)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False) -> None:
        if num_replicas is None or rank is None:
            from ... import distributed
            num_replicas = distributed.get_world_size() if num_replicas is None else num_replicas
            rank = distributed.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.epoch, self.drop_last, self.shuffle, self.seed = 0, drop_last, shuffle, seed
        if drop_last and len(dataset) % num_replicas != 0:
            self.num_samples = math.ceil((len(dataset) - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(len(dataset) / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.Generator(np.random.PCG64(self.seed + self.epoch)).permutation(n).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            padding = self.total_size - len(indices)
            indices += (indices * math.ceil(padding / len(indices)))[:padding] if padding > 0 else []
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass draw the order of ``epoch`` (call it at the start of every epoch)."""
        self.epoch = epoch
