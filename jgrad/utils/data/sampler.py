"""Samplers (``torch.utils.data.sampler``): iterators over dataset indices, drawn lazily.

A sampler is an iterator, never a list: ``DataLoader`` pulls only the indices a batch needs, so
``RandomSampler(ds, replacement=True, num_samples=int(1e10))`` (minGPT's endless loader) costs nothing up
front. Random samplers take one 64-bit seed per pass from a jgrad ``Generator`` (the one given, else the
default generator, so ``jg.manual_seed`` fixes the order) and draw the indices on the host from NumPy's
PCG64 seeded with it: the same seed gives the same indices, and no device work or host read happens per
batch. The indices are not PyTorch's (its generator is another algorithm).

Imports ``_dtype`` and the op library (``random_ops.randint``, for the seed).
"""
from __future__ import annotations

import itertools

import numpy as np
from ...ops.random_ops import randint as _randint
from ...ops.creation import tensor as _tensor_of
from ...core import _dtype

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]

_CHUNK = 32  # indices drawn at a time with replacement (PyTorch's chunk)


def _host_rng(generator) -> np.random.Generator:
    """A NumPy generator seeded by one draw from ``generator`` (the default jgrad generator when None)."""
    seed = int(_randint(0, 2 ** 62, (), generator=generator).item())
    return np.random.Generator(np.random.PCG64(seed))


class Sampler:
    """Base class: an iterable of indices (``__iter__``), usually with ``__len__``. ``Sampler[int]`` works in
    class definitions, as with PyTorch's generic class."""

    def __class_getitem__(cls, item):
        return cls

    def __init__(self, data_source=None) -> None:
        pass

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``."""

    def __init__(self, data_source) -> None:
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """Random indices: a fresh permutation per pass, or ``num_samples`` draws with ``replacement=True``."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None) -> None:
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not isinstance(self.replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={self.replacement}")
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        rng = _host_rng(self.generator)
        if self.replacement:
            for _ in range(self.num_samples // _CHUNK):
                yield from rng.integers(0, n, _CHUNK).tolist()
            yield from rng.integers(0, n, self.num_samples % _CHUNK).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from rng.permutation(n).tolist()
        yield from rng.permutation(n)[:self.num_samples % n].tolist()

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order (a new one per pass)."""

    def __init__(self, indices, generator=None) -> None:
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        for i in _host_rng(self.generator).permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices of ``range(len(weights))`` drawn with probability proportional to ``weights``."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None) -> None:
        if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")
        if not isinstance(replacement, bool):
            raise ValueError(f"replacement should be a boolean value, but got replacement={replacement}")
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"weights should be a 1d sequence but given weights have shape {tuple(w.shape)}")
        self.weights = _tensor_of(w, dtype=_dtype.float64)
        self._w = w
        self.num_samples = num_samples
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        w = self._w
        if (w < 0).any() or not np.isfinite(w).all() or w.sum() == 0:
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not self.replacement and self.num_samples > np.count_nonzero(w):
            raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
        draws = _host_rng(self.generator).choice(len(w), self.num_samples, replace=self.replacement, p=w / w.sum())
        yield from draws.tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` indices pulled from ``sampler`` as they are needed."""

    def __init__(self, sampler, batch_size: int, drop_last: bool) -> None:
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size
