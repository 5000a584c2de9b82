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
