"""jgrad.utils.data against torch.utils.data: datasets, batching, collation, shuffling, splits."""
import numpy as np
import pytest
import torch
import torch.utils.data as tud

import jgrad as jg
import jgrad.utils.data as jud


def _as_lists(batches):
    def conv(x):
        if isinstance(x, (jg.Tensor, torch.Tensor)):
            return (str(x.dtype).split(".")[-1], x.tolist())
        if isinstance(x, dict):
            return {k: conv(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [conv(v) for v in x]
        return x
    return [conv(b) for b in batches]


@pytest.mark.parametrize("batch_size,drop_last", [(3, False), (3, True), (10, False), (None, False)])
def test_tensor_dataset_batches_like_torch(batch_size, drop_last):
    x, y = np.arange(14.0).reshape(7, 2), np.arange(7)
    jl = jud.DataLoader(jud.TensorDataset(jg.tensor(x), jg.tensor(y)), batch_size=batch_size, drop_last=drop_last)
    tl = tud.DataLoader(tud.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=batch_size,
                        drop_last=drop_last)
    assert len(jl) == len(tl)
    assert _as_lists(jl) == _as_lists(tl)


def test_default_collate_structures_like_torch():
    samples = [{"a": np.full(2, i, dtype=np.float32), "b": (i, float(i) / 2, bool(i % 2)), "s": f"n{i}",
                "t": np.int64(i)} for i in range(4)]
    assert _as_lists(jud.DataLoader(samples, batch_size=2)) == _as_lists(tud.DataLoader(samples, batch_size=2))
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        jud.default_collate([[1, 2], [3]])


def test_shuffle_subset_split_concat_and_iterable():
    ds = jud.TensorDataset(jg.arange(10))
    a = [b[0].tolist() for b in jud.DataLoader(ds, batch_size=4, shuffle=True, generator=jg.Generator().manual_seed(3))]
    b = [b[0].tolist() for b in jud.DataLoader(ds, batch_size=4, shuffle=True, generator=jg.Generator().manual_seed(3))]
    assert a == b and sorted(sum(a, [])) == list(range(10)) and sum(a, []) != list(range(10))
    parts = jud.random_split(ds, [0.7, 0.3], generator=jg.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [7, 3]
    assert sorted(int(p[i][0]) for p in parts for i in range(len(p))) == list(range(10))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        jud.random_split(ds, [3, 3])
    both = jud.Subset(ds, [1, 3]) + jud.TensorDataset(jg.tensor([20, 21]))
    assert [int(both[i][0]) for i in range(len(both))] == [1, 3, 20, 21] and int(both[-1][0]) == 21

    class Count(jud.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    class TCount(tud.IterableDataset):
        def __iter__(self):
            return iter(range(5))

    assert _as_lists(jud.DataLoader(Count(), batch_size=2)) == _as_lists(tud.DataLoader(TCount(), batch_size=2))
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        jud.DataLoader(ds, sampler=[0, 1], shuffle=True)


def test_samplers_are_drawn_lazily_like_torch():
    """A DataLoader pulls only the indices of the batches it yields (PyTorch's count), so minGPT's
    ``RandomSampler(replacement=True, num_samples=int(1e10))`` works; samplers' lengths, batches and errors."""
    from jgrad.utils.data.dataloader import DataLoader  # PyTorch's module paths
    from jgrad.utils.data.sampler import RandomSampler

    class Counting:
        def __init__(self):
            self.pulled = 0

        def __iter__(self):
            for i in range(10 ** 6):
                self.pulled += 1
                yield i % 7

        def __len__(self):
            return 10 ** 6

    ds = jud.TensorDataset(jg.arange(7.0))
    tds = tud.TensorDataset(torch.arange(7.0))
    counts = []
    for loader_cls, data in ((DataLoader, ds), (tud.DataLoader, tds)):
        s = Counting()
        batch = next(iter(loader_cls(data, batch_size=2, sampler=s)))
        counts.append((s.pulled, batch[0].tolist()))
    assert counts[0] == counts[1] == (2, [0.0, 1.0])
    jl = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds, replacement=True, num_samples=int(1e10)))
    tl = tud.DataLoader(tds, batch_size=4, sampler=tud.RandomSampler(tds, replacement=True, num_samples=int(1e10)))
    assert len(jl) == len(tl) == 2_500_000_000
    it = iter(jl)
    batches = [next(it)[0].tolist() for _ in range(20)]
    assert all(len(b) == 4 and set(b) <= set(range(7)) for b in batches) and len({tuple(b) for b in batches}) > 1
    # without replacement, num_samples > len: whole permutations, then part of one; the same seed, the same order
    jg.manual_seed(5)
    a = list(jud.RandomSampler(range(7), num_samples=17))
    jg.manual_seed(5)
    assert a == list(jud.RandomSampler(range(7), num_samples=17))
    assert sorted(a[:7]) == sorted(a[7:14]) == list(range(7)) and len(set(a[14:])) == 3
    g = jg.Generator().manual_seed(1)
    sub = list(jud.SubsetRandomSampler([10, 20, 30, 40], generator=g))
    assert sorted(sub) == [10, 20, 30, 40]
    w = list(jud.WeightedRandomSampler([0.0, 1.0, 3.0, 0.0], 50))
    assert set(w) <= {1, 2} and len(w) == 50
    assert sorted(jud.WeightedRandomSampler([1.0, 1.0, 3.0, 0.0], 3, replacement=False)) == [0, 1, 2]
    for drop_last in (False, True):
        jb, tb = jud.BatchSampler(range(10), 3, drop_last), tud.BatchSampler(range(10), 3, drop_last)
        assert list(jb) == list(tb) and len(jb) == len(tb)
    for make in (lambda m: m.RandomSampler(range(3), replacement="yes"),
                 lambda m: m.RandomSampler(range(3), num_samples=0),
                 lambda m: m.WeightedRandomSampler([1.0], 0), lambda m: m.WeightedRandomSampler([[1.0]], 1),
                 lambda m: m.BatchSampler(range(3), 0, False), lambda m: m.BatchSampler(range(3), 2, "no")):
        with pytest.raises((TypeError, ValueError)) as expected:
            make(tud)
        with pytest.raises(expected.type, match=None) as got:
            make(jud)
        assert str(got.value) == str(expected.value)
    with pytest.raises(RuntimeError, match="cannot sample n_sample > prob_dist.size"):
        list(jud.WeightedRandomSampler([1.0, 0.0], 2, replacement=False))


@pytest.mark.one_execution_mode  # host-side index arithmetic only
def test_distributed_sampler_and_generic_classes_like_torch():
    """Each rank's share equals PyTorch's (padding, drop_last); a shuffled order is the same in every rank for a
    (seed, epoch) and changes with set_epoch; Sampler[int] / Dataset[T] subclass as PyTorch's generics do."""
    for n, replicas, drop_last in ((10, 3, False), (10, 3, True), (2, 3, False), (12, 4, False)):
        for rank in range(replicas):
            j = jud.DistributedSampler(list(range(n)), replicas, rank, shuffle=False, drop_last=drop_last)
            t = tud.DistributedSampler(list(range(n)), replicas, rank, shuffle=False, drop_last=drop_last)
            assert list(j) == list(t) and len(j) == len(t)
    shares = [jud.DistributedSampler(range(10), 2, r, seed=3) for r in range(2)]
    first = [list(s) for s in shares]
    assert sorted(first[0] + first[1]) == list(range(10)) and first[0] != [0, 2, 4, 6, 8]
    assert [list(s) for s in shares] == first
    for s in shares:
        s.set_epoch(1)
    assert [list(s) for s in shares] != first and sorted(sum((list(s) for s in shares), [])) == list(range(10))
    assert len(jud.DistributedSampler(range(10))) == 10  # one process: the whole dataset (rank 0 of 1)
    for bad in (dict(num_replicas=2, rank=2), dict(num_replicas=2, rank=-1)):
        _same = [pytest.raises(ValueError, m.DistributedSampler, range(4), **bad) for m in (jud, tud)]
        assert str(_same[0].value) == str(_same[1].value)

    class Ints(jud.Sampler[int]):
        def __iter__(self):
            return iter([2, 0])

    class Data(jud.Dataset[tuple]):
        def __getitem__(self, i):
            return (jg.tensor(float(i)),)

        def __len__(self):
            return 3

    assert [b[0].tolist() for b in jud.DataLoader(Data(), batch_size=2, sampler=Ints())] == [[2.0, 0.0]]
