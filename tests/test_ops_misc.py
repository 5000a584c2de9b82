"""cumsum/cumprod/logcumsumexp, lerp/addcmul/addcdiv/outer/xlogy, masked_select, repeat_interleave,
take_along_dim, movedim, index_add, and the functional extras (mish, hardswish, glu, kl_div, ...) against PyTorch."""
import numpy as np
import pytest
import torch

import jgrad as jg
import jgrad.nn.functional as F
from _vs_torch import compare, rand, same_error

TF = torch.nn.functional


def test_cumulative_ops():
    x = rand((3, 4), 0)
    x[1, 2] = 0.0  # cumprod's gradient through a zero
    for name in ("cumsum", "cumprod", "logcumsumexp"):
        compare(lambda a: getattr(jg, name)(a, 1), lambda a: getattr(torch, name)(a, 1), [x], what=name)
        compare(lambda a: getattr(a, name)(-2), lambda a: getattr(a, name)(-2), [x], what=name)
    ints = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32)
    compare(lambda a: jg.cumsum(a, 0), lambda a: torch.cumsum(a, 0), [ints])          # int32 -> int64
    compare(lambda a: jg.cumprod(a, 1), lambda a: torch.cumprod(a, 1), [ints > 2])    # bool -> int64
    compare(lambda a: jg.cumsum(a, 0, dtype=jg.float64), lambda a: torch.cumsum(a, 0, dtype=torch.float64), [ints])
    compare(lambda a: jg.cumsum(a, 0), lambda a: torch.cumsum(a, 0), [np.array(2.5)])


def test_pointwise_with_several_operands():
    a, b, c = rand((3, 4), 1), rand((3, 4), 2), rand((4,), 3)
    compare(jg.lerp, torch.lerp, [a, b, rand((3, 4), 4)])
    compare(lambda x, y: jg.lerp(x, y, 0.3), lambda x, y: torch.lerp(x, y, 0.3), [a, b])
    compare(lambda x, y, z: jg.addcmul(x, y, z, value=0.5), lambda x, y, z: torch.addcmul(x, y, z, value=0.5),
            [a, b, c])
    compare(lambda x, y, z: x.addcdiv(y, z, value=-2), lambda x, y, z: x.addcdiv(y, z, value=-2),
            [a, b, np.abs(c) + 0.5])
    compare(jg.outer, torch.outer, [rand(3, 5), rand(4, 6)])
    y = np.abs(rand((3, 4), 7)) + 0.1
    x = a.copy()
    x[0, 0] = 0.0
    compare(jg.xlogy, torch.xlogy, [x, y])


def test_inplace_variants():
    a, b = jg.tensor(rand((2, 3), 8)), torch.tensor(rand((2, 3), 8))
    a.lerp_(jg.ones(2, 3, dtype=jg.float64), 0.25).addcmul_(a, a, value=0.1).addcdiv_(a, a + 3.0)
    b.lerp_(torch.ones(2, 3, dtype=torch.float64), 0.25).addcmul_(b, b, value=0.1).addcdiv_(b, b + 3.0)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    assert a._version == 3


def test_indexing_helpers():
    x = rand((3, 4), 9)
    mask = np.array([True, False, True, True])
    compare(jg.masked_select, torch.masked_select, [x, mask])
    compare(lambda a, m: a.masked_select(m), lambda a, m: a.masked_select(m), [x, x > 0])
    compare(lambda a: jg.repeat_interleave(a, 2), lambda a: torch.repeat_interleave(a, 2), [x])
    compare(lambda a, r: a.repeat_interleave(r, dim=0), lambda a, r: a.repeat_interleave(r, dim=0),
            [x, np.array([1, 0, 2])])
    compare(lambda r: jg.repeat_interleave(r), lambda r: torch.repeat_interleave(r), [np.array([2, 0, 3])])
    idx = np.array([[0, 3], [2, 2], [1, 0]])
    compare(lambda a, i: jg.take_along_dim(a, i, 1), lambda a, i: torch.take_along_dim(a, i, 1), [x, idx])
    compare(lambda a, i: jg.take_along_dim(a, i), lambda a, i: torch.take_along_dim(a, i), [x, np.array([0, 11])])
    y = rand((2, 3, 4), 10)
    compare(lambda a: jg.movedim(a, (0, 1), (2, 0)), lambda a: torch.movedim(a, (0, 1), (2, 0)), [y])
    compare(lambda a: a.moveaxis(-1, 0), lambda a: a.moveaxis(-1, 0), [y])
    compare(lambda a, i, s: a.index_add(1, i, s, alpha=2.0), lambda a, i, s: a.index_add(1, i, s, alpha=2.0),
            [x, np.array([0, 2, 0]), rand((3, 3), 11)])
    same_error(lambda: jg.tensor(x).repeat_interleave(jg.tensor([1, 2, 3])),
               lambda: torch.tensor(x).repeat_interleave(torch.tensor([1, 2, 3])))


@pytest.mark.parametrize("name,kw", [("mish", {}), ("hardswish", {}), ("hardsigmoid", {}), ("glu", {"dim": 1}),
                                     ("relu", {}), ("silu", {}), ("gelu", {"approximate": "tanh"})])
def test_activations(name, kw):
    compare(lambda a: getattr(F, name)(a, **kw), lambda a: getattr(TF, name)(a, **kw), [rand((3, 4), 12) * 4])


def test_losses_and_similarity():
    logp = np.log(np.random.default_rng(13).dirichlet(np.ones(5), 4))
    target = np.random.default_rng(14).dirichlet(np.ones(5), 4)
    target[0, 1] = 0.0
    for red in ("batchmean", "sum", "none"):
        compare(lambda a, b: F.kl_div(a, b, reduction=red), lambda a, b: TF.kl_div(a, b, reduction=red),
                [logp, target], what=red)
    with pytest.warns(UserWarning, match="batchmean"):
        compare(lambda a, b: F.kl_div(a, b, reduction="mean", log_target=True),
                lambda a, b: TF.kl_div(a, b, reduction="mean", log_target=True), [logp, np.log(target + 0.1)])
    compare(F.cosine_similarity, TF.cosine_similarity, [rand((3, 4), 15), rand((3, 4), 16)])
    compare(lambda a, b: F.cosine_similarity(a, b, dim=0), lambda a, b: TF.cosine_similarity(a, b, dim=0),
            [rand((3, 4), 15), rand((1, 4), 16)])


def test_channel_dropout():
    x = jg.ones(8, 16, 5, 5)
    out = F.dropout2d(x, 0.5).numpy()
    per_channel = out.reshape(8, 16, -1)
    assert ((per_channel == 0).all(-1) | (per_channel == 2.0).all(-1)).all()  # whole channels, scaled 1/(1-p)
    assert 0.25 < (per_channel[..., 0] == 0).mean() < 0.75
    np.testing.assert_array_equal(F.dropout2d(x, 0.5, training=False).numpy(), x.numpy())
    assert (F.dropout1d(jg.ones(4, 3), 1.0).numpy() == 0).all()   # unbatched (C, L)
    with pytest.raises(RuntimeError, match="Expected 3D or 4D input"):
        F.dropout2d(jg.ones(3), 0.5)
