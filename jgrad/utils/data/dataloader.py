"""``DataLoader`` and ``default_collate`` (``torch.utils.data.dataloader``), single-process.

``DataLoader`` batches a map-style dataset (``__getitem__``/``__len__``) through a sampler or iterates an
``IterableDataset``, collating samples with ``default_collate`` (tensors, NumPy arrays and numbers are
stacked into tensors, Python floats as float64 like PyTorch's; tuples, lists and dicts are collated per
field). Samplers are drawn lazily (``sampler.py``): a batch pulls only its own indices. ``num_workers > 0``
and ``pin_memory`` are accepted and ignored: the data is loaded in the calling process (XLA copies host data
to a device itself).

Imports ``_tensor``, ``_dtype``, the op library (``creation``, ``shape``) and
``utils.data.dataset``/``sampler``.
"""
from __future__ import annotations

import collections.abc
import itertools
import numbers

import numpy as np

from ...core._tensor import Tensor
from .dataset import IterableDataset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler
from ...ops.creation import tensor as _tensor_of
from ...ops.shape import stack as _stack
from ...core import _dtype

__all__ = ["DataLoader", "default_collate", "get_worker_info"]


def default_collate(batch):
    """Stack a list of samples into a batch: tensors, NumPy arrays and numbers become one tensor (a new first
    dimension); tuples, lists and dicts are collated field by field; strings stay a list."""
    first = batch[0]
    if isinstance(first, Tensor):
        return _stack(list(batch), 0)
    if isinstance(first, np.ndarray):
        if first.dtype.kind in "OSUV":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
                            f"found {first.dtype}")
        return _tensor_of(np.stack(batch))
    if isinstance(first, np.generic):
        return _tensor_of(np.asarray(batch))
    if isinstance(first, float):  # PyTorch collates Python floats as float64
        return _tensor_of(list(batch), dtype=_dtype.float64)
    if isinstance(first, numbers.Number):
        return _tensor_of(list(batch))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        cols = [default_collate(list(s)) for s in zip(*batch)]
        return tuple(cols) if isinstance(first, tuple) else cols
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(first).__name__}")


class DataLoader:
    """Batches of ``dataset``: ``for x, y in DataLoader(ds, batch_size=32, shuffle=True): ...``.

    As PyTorch's: ``shuffle=True`` is a ``RandomSampler(dataset, generator=generator)``, a ``batch_size`` wraps
    the sampler in a ``BatchSampler``, and each batch pulls only its own indices from the sampler.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and "
                             "batch_sampler options")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with "
                             "drop_last")
        if sampler is None and not self.iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self.iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.dataset, self.batch_size, self.drop_last, self.generator = dataset, batch_size, drop_last, generator
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.num_workers, self.pin_memory, self.timeout, self.worker_init_fn = num_workers, pin_memory, timeout, \
            worker_init_fn
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        self.collate_fn = collate_fn if collate_fn is not None else (
            default_collate if self._auto_collation else (lambda x: x))

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None or (self.iterable and self.batch_size is not None)

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __iter__(self):
        if self.iterable:
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for index in self.sampler:
                yield self.collate_fn(self.dataset[index])
            return
        whole_rows = type(self.dataset) is TensorDataset and self.collate_fn is default_collate
        for indices in self.batch_sampler:
            if whole_rows:  # the same batch as collating the rows, with one gather per tensor
                yield self.dataset._batch(list(indices))
            else:
                yield self.collate_fn([self.dataset[i] for i in indices])

    def _iter_iterable(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        it = iter(self.dataset)
        while True:
            chunk = list(itertools.islice(it, self.batch_size))
            if not chunk or (self.drop_last and len(chunk) < self.batch_size):
                return
            yield self.collate_fn(chunk)

    def __len__(self):
        if self.iterable:
            raise TypeError(f"object of type '{type(self).__name__}' has no len() for an IterableDataset")
        return len(self._index_sampler)


def get_worker_info():
    """None: jgrad loads data in the calling process (no worker processes)."""
    return None
