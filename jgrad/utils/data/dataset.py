"""Datasets (``torch.utils.data.dataset``): map-style ``Dataset``, ``IterableDataset``, ``TensorDataset``,
``ConcatDataset``, ``Subset`` and ``random_split``.

Imports ``_dtype`` and the op library: ``random_split`` draws its permutation with ``random_ops.randperm``.
"""
from __future__ import annotations

import math

import numpy as np
from ...ops.random_ops import randperm as _randperm
from ...ops.creation import tensor as _tensor_of
from ...core import _dtype

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset", "random_split"]


class Dataset:
    """A map-style dataset: ``__getitem__(index)`` and ``__len__`` (``Dataset[T]`` works, as PyTorch's generic)."""

    def __class_getitem__(cls, item):
        return cls

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset:
    """A dataset that is an iterable of samples (``__iter__``); ``IterableDataset[T]`` works too."""

    def __class_getitem__(cls, item):
        return cls

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    """Samples are the ``index``-th rows of each tensor (all with the same first dimension)."""

    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def _batch(self, indices):
        """``default_collate([self[i] for i in indices])`` as one gather per tensor, the indices a tensor (data):
        indexing row by row compiles a kernel per new integer index."""
        out = []
        for t in self.tensors:
            idx = _tensor_of(indices, dtype=_dtype.int64, device=t._device)
            out.append(t[idx])
        return tuple(out)

    def __len__(self):
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    """The samples of several datasets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        k = int(np.searchsorted(self.cumulative_sizes, index, side="right"))
        start = 0 if k == 0 else int(self.cumulative_sizes[k - 1])
        return self.datasets[k][index - start]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self):
        return len(self.indices)


def _permutation(n, generator):
    return _randperm(n, generator=generator).tolist()


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random subsets of the given lengths (or fractions summing to 1)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = _permutation(n, generator)
    out, start = [], 0
    for size in lengths:
        out.append(Subset(dataset, perm[start:start + size]))
        start += size
    return out
