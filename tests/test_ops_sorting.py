"""sort, argsort, msort, topk, kthvalue, searchsorted, bucketize and multinomial against PyTorch."""
import numpy as np
import pytest
import torch

import jgrad as jg
from _vs_torch import compare, rand, same_error


def _ties(shape, seed=0):
    """Values with many ties and a NaN (stable order and NaN placement matter)."""
    a = np.random.default_rng(seed).integers(0, 4, shape).astype(np.float64)
    a.flat[1] = np.nan
    return a


@pytest.mark.parametrize("dim,descending", [(-1, False), (0, True), (1, False)])
def test_sort_values_indices_and_gradient(dim, descending):
    compare(lambda x: jg.sort(x, dim=dim, descending=descending),
            lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), [rand((3, 5, 4))])


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable_with_ties_and_nan_largest(descending):
    a = _ties((4, 7))
    compare(lambda x: x.sort(1, descending), lambda x: x.sort(dim=1, descending=descending, stable=True), [a],
            grad=False)
    compare(lambda x: jg.argsort(x, dim=1, descending=descending),
            lambda x: torch.argsort(x, dim=1, descending=descending, stable=True), [a], grad=False)


def test_sort_integers_bool_and_0d_and_msort():
    a = np.random.default_rng(1).integers(-5, 5, (6, 3))
    compare(lambda x: jg.sort(x, 0), lambda x: torch.sort(x, dim=0, stable=True), [a])
    compare(lambda x: jg.sort(x), lambda x: torch.sort(x, stable=True), [a > 0])
    compare(lambda x: jg.sort(x), lambda x: torch.sort(x), [np.array(2.5)])
    compare(jg.msort, torch.msort, [rand((5, 3))])


@pytest.mark.parametrize("k,dim,largest", [(2, -1, True), (3, 0, False), (1, 1, True), (0, -1, True)])
def test_topk(k, dim, largest):
    compare(lambda x: jg.topk(x, k, dim, largest), lambda x: torch.topk(x, k, dim, largest), [rand((4, 5, 6))])


def test_topk_integers_and_method():
    a = np.random.default_rng(2).permutation(30).reshape(5, 6).astype(np.int64) - 15
    compare(lambda x: x.topk(2, largest=False), lambda x: x.topk(2, largest=False), [a])
    compare(lambda x: x.topk(3), lambda x: x.topk(3), [a.astype(np.int32)])


@pytest.mark.parametrize("k,dim,keepdim", [(1, -1, False), (3, 0, True), (4, 1, False)])
def test_kthvalue(k, dim, keepdim):
    compare(lambda x: jg.kthvalue(x, k, dim, keepdim), lambda x: torch.kthvalue(x, k, dim, keepdim),
            [rand((4, 5, 3), seed=3)])


def test_sorting_errors_are_pytorchs():
    x, t = jg.tensor(rand((3, 4))), torch.tensor(rand((3, 4)))
    same_error(lambda: x.topk(5), lambda: t.topk(5))
    same_error(lambda: x.topk(-1), lambda: t.topk(-1))
    same_error(lambda: x.kthvalue(5), lambda: t.kthvalue(5))
    same_error(lambda: x.kthvalue(0, 0), lambda: t.kthvalue(0, 0))
    same_error(lambda: x.sort(dim=2), lambda: t.sort(dim=2))


@pytest.mark.parametrize("right", [False, True])
def test_searchsorted_1d_and_nd(right):
    seq = np.sort(np.random.default_rng(4).integers(0, 10, 8)).astype(np.float64)
    vals = np.random.default_rng(5).integers(-1, 11, (3, 4)).astype(np.float64)
    compare(lambda s, v: jg.searchsorted(s, v, right=right), lambda s, v: torch.searchsorted(s, v, right=right),
            [seq, vals], grad=False)
    seq2 = np.sort(np.random.default_rng(6).standard_normal((2, 3, 5)), axis=-1)
    vals2 = np.random.default_rng(7).standard_normal((2, 3, 4))
    side = "right" if right else "left"
    compare(lambda s, v: jg.searchsorted(s, v, side=side, out_int32=True),
            lambda s, v: torch.searchsorted(s, v, side=side, out_int32=True), [seq2, vals2], grad=False)


def test_searchsorted_sorter_scalar_and_bucketize():
    seq = np.array([5.0, 1.0, 3.0, 3.0, 9.0])
    sorter = np.argsort(seq, kind="stable")
    vals = np.array([0.0, 3.0, 4.0, 10.0])
    compare(lambda s, v, o: jg.searchsorted(s, v, sorter=o), lambda s, v, o: torch.searchsorted(s, v, sorter=o),
            [seq, vals, sorter], grad=False)
    compare(lambda s: jg.searchsorted(s, 3.0), lambda s: torch.searchsorted(s, 3.0), [np.sort(seq)], grad=False)
    bounds = np.array([1, 3, 5, 7])
    x = np.array([[0, 1, 2], [5, 7, 9]])
    for right in (False, True):
        compare(lambda v, b: jg.bucketize(v, b, right=right), lambda v, b: torch.bucketize(v, b, right=right),
                [x, bounds], grad=False)
    compare(lambda b: jg.bucketize(4, b), lambda b: torch.bucketize(4, b), [bounds], grad=False)


def test_searchsorted_errors_are_pytorchs():
    jb, tb = jg.ones(2, 3), torch.ones(2, 3)
    same_error(lambda: jg.searchsorted(jb, jg.ones(3, 3)), lambda: torch.searchsorted(tb, torch.ones(3, 3)))
    same_error(lambda: jg.searchsorted(jg.ones(3), jg.ones(3), side="left", right=True),
               lambda: torch.searchsorted(torch.ones(3), torch.ones(3), side="left", right=True))
    same_error(lambda: jg.bucketize(jg.ones(3), jb), lambda: torch.bucketize(torch.ones(3), tb))


# ---- multinomial ------------------------------------------------------------------------------
def test_multinomial_with_replacement_frequencies():
    jg.manual_seed(0)
    p = np.array([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 2.0, 0.0]])  # rows need not sum to 1
    draws = jg.multinomial(jg.tensor(p), 4000, replacement=True)
    assert draws.shape == (2, 4000) and draws.dtype is jg.int64
    for row, probs in zip(draws.numpy(), p):
        freq = np.bincount(row, minlength=4) / row.size
        np.testing.assert_allclose(freq, probs / probs.sum(), atol=0.035)  # > 4 sigma at n=4000
        assert freq[probs == 0].sum() == 0


def test_multinomial_without_replacement():
    jg.manual_seed(1)
    p = jg.tensor([[0.0, 1.0, 5.0, 2.0, 0.0, 3.0]] * 3)
    s = p.multinomial(4).numpy()
    assert s.shape == (3, 4)
    for row in s:
        assert sorted(row) == [1, 2, 3, 5]   # every non-zero category once, no zero-weight category
    # the first draw follows the weights: category 2 (weight 5/11) most often
    first = jg.multinomial(jg.tensor([0.0, 1.0, 5.0, 2.0, 0.0, 3.0]).expand(2000, 6), 2)[:, 0].numpy()
    freq = np.bincount(first, minlength=6) / first.size
    np.testing.assert_allclose(freq, [0, 1 / 11, 5 / 11, 2 / 11, 0, 3 / 11], atol=0.05)


def test_multinomial_generator_and_modes_agree():
    p = jg.tensor([0.2, 0.3, 0.5])
    a = jg.multinomial(p, 5, True, generator=jg.Generator().manual_seed(7)).tolist()
    b = jg.multinomial(p, 5, True, generator=jg.Generator().manual_seed(7)).tolist()
    assert a == b
    with jg.execution_mode("auto"):
        c = jg.multinomial(p, 5, True, generator=jg.Generator().manual_seed(7)).tolist()
    assert c == a
    jg.manual_seed(3)
    d = jg.multinomial(p, 2).tolist()
    jg.manual_seed(3)
    assert jg.multinomial(p, 2).tolist() == d


def test_multinomial_errors_are_pytorchs():
    same_error(lambda: jg.multinomial(jg.ones(3), 4), lambda: torch.multinomial(torch.ones(3), 4))
    same_error(lambda: jg.multinomial(jg.ones(3, 3, 3), 1), lambda: torch.multinomial(torch.ones(3, 3, 3), 1))
    same_error(lambda: jg.multinomial(jg.ones(3), 0), lambda: torch.multinomial(torch.ones(3), 0))
    same_error(lambda: jg.multinomial(jg.ones(3, dtype=jg.long), 1),
               lambda: torch.multinomial(torch.ones(3, dtype=torch.long), 1))
