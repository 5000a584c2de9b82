"""``jgrad.utils.data`` (``torch.utils.data``): datasets, lazily drawn samplers and a single-process DataLoader.

The module paths are PyTorch's: ``dataset``, ``sampler``, ``dataloader`` and ``distributed`` (``from
torch.utils.data.dataloader import DataLoader`` works with its import pointed at jgrad).

Imports its modules.
"""
from . import dataloader, dataset, distributed, sampler  # noqa: F401
from .dataloader import DataLoader, default_collate, get_worker_info
from .distributed import DistributedSampler
from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import (BatchSampler, RandomSampler, Sampler, SequentialSampler, SubsetRandomSampler,
                      WeightedRandomSampler)

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset", "random_split", "DataLoader",
           "default_collate", "get_worker_info", "Sampler", "SequentialSampler", "RandomSampler",
           "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler", "DistributedSampler"]
