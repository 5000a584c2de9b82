"""scaled_dot_product_attention against PyTorch: masks, causal, scale, GQA, layouts, dropout, errors."""
import numpy as np
import pytest
import torch

import jgrad as jg
import jgrad.nn.functional as F
from _vs_torch import compare, rand

TF = torch.nn.functional


def _qkv(q, k, v, seed=0):
    return [rand(q, seed), rand(k, seed + 1), rand(v, seed + 2)]


@pytest.mark.parametrize("shapes,kw", [
    (((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8)), {}),
    (((2, 3, 5, 8), (2, 3, 4, 8), (2, 3, 4, 8)), {"is_causal": True}),   # L > S: top-left aligned
    (((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)), {"is_causal": True, "scale": 0.3}),   # value head size 6
    (((2, 4, 4, 8), (2, 2, 5, 8), (2, 2, 5, 8)), {"enable_gqa": True}),
    (((3, 4, 8), (3, 5, 8), (3, 5, 8)), {}),                              # no heads dim
    (((4, 8), (5, 8), (5, 6)), {}),                                        # unbatched
    (((2, 2, 3, 4, 8), (2, 2, 3, 5, 8), (2, 2, 3, 5, 8)), {}),            # two batch dims
    (((2, 4, 4, 8), (2, 1, 5, 8), (2, 1, 5, 8)), {}),                     # broadcast key/value heads
])
def test_sdpa_matches_torch(shapes, kw):
    compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
            lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kw), _qkv(*shapes))


def test_sdpa_masks_and_fully_masked_rows():
    rng = np.random.default_rng(3)
    keep = rng.random((4, 5)) > 0.4
    keep[1] = False                          # a row that attends to nothing gives zeros, as in PyTorch
    bias = rng.standard_normal((3, 4, 5))
    bias[0, 2] = -np.inf
    bias[1, 1, 1] = -np.inf
    qkv = _qkv((2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), seed=4)
    for mask, kw in ((keep, {}), (bias, {}), (keep, {"is_causal": True})):
        compare(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw),
                lambda q, k, v, m: TF.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw), qkv + [mask],
                what=f"mask {mask.dtype} {kw}")


def test_sdpa_float32_uses_jax_attention_and_matches():
    qkv = [a.astype(np.float32) for a in _qkv((2, 4, 16, 32), (2, 4, 16, 32), (2, 4, 16, 32), seed=5)]
    for kw in ({"is_causal": True}, {}):
        compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw),
                lambda q, k, v: TF.scaled_dot_product_attention(q, k, v, **kw), qkv, rtol=2e-5, atol=2e-6)


def test_sdpa_dropout_draws_from_the_generator():
    q, k, v = (jg.tensor(a) for a in _qkv((2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 4), seed=6))

    def run(seed, p=0.5):
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, generator=jg.Generator().manual_seed(seed))

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.allclose(a.numpy(), c.numpy())
    with jg.execution_mode("auto"):
        np.testing.assert_array_equal(run(1).numpy(), a.numpy())
    np.testing.assert_array_equal(run(1, 1.0).numpy(), np.zeros((2, 2, 6, 4)))
    # the dropped weights, rescaled by 1/(1-p), keep the mean: E[out] = out without dropout
    big = [jg.tensor(x).expand(400, 1, 6, 4) for x in _qkv((1, 1, 6, 4), (1, 1, 6, 4), (1, 1, 6, 4), seed=7)]
    mean = F.scaled_dot_product_attention(*big, dropout_p=0.3).mean(0).numpy()
    np.testing.assert_allclose(mean, F.scaled_dot_product_attention(*[b[:1] for b in big]).numpy()[0], atol=0.12)


def test_sdpa_dropout_gradient():
    q = jg.tensor(rand((1, 2, 3, 4), 8), requires_grad=True)
    out = F.scaled_dot_product_attention(q, q, q, dropout_p=0.4, generator=jg.Generator().manual_seed(0))
    out.sum().backward()
    assert q.grad.shape == (1, 2, 3, 4) and np.isfinite(q.grad.numpy()).all()


def test_sdpa_errors():
    q, k = jg.ones(1, 4, 2, 8), jg.ones(1, 2, 3, 8)
    with pytest.raises(RuntimeError, match="enable_gqa=True"):
        F.scaled_dot_product_attention(q, k, k)
    with pytest.raises(RuntimeError, match="must divide the number of heads in query"):
        F.scaled_dot_product_attention(jg.ones(1, 3, 2, 8), k, k, enable_gqa=True)
    with pytest.raises(RuntimeError, match="same embedding size"):
        F.scaled_dot_product_attention(jg.ones(1, 2, 2, 8), jg.ones(1, 2, 3, 4), jg.ones(1, 2, 3, 4))
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \[3, 3\]"):
        F.scaled_dot_product_attention(jg.ones(1, 2, 2, 8), k, k, attn_mask=jg.ones(3, 3, dtype=jg.bool))
    with pytest.raises(RuntimeError, match="same dtype"):
        F.scaled_dot_product_attention(jg.ones(2, 8), jg.ones(3, 8, dtype=jg.float64), jg.ones(3, 8))


def test_cudnn_attempt_falls_back_to_xla_where_cudnn_refuses():
    """The GPU path asks jax for cuDNN's kernel; where cuDNN is unavailable (here: no GPU) jax refuses while
    tracing and XLA's attention runs: same numbers as PyTorch."""
    import jax
    import jax.numpy as jnp
    from jgrad.ops.attention import _sdpa_fwd

    x = rand((2, 4, 16, 32), 9).astype(np.float32)
    fused = jax.jit(lambda q: _sdpa_fwd(q, q, q, None, None, dropout_p=0.0, is_causal=True, scale=0.2, gqa=False,
                                        precision="highest", fused=True))
    out = np.asarray(fused(jnp.asarray(x, jnp.bfloat16)), np.float32)
    xb = torch.tensor(x).to(torch.bfloat16).float()
    ref = TF.scaled_dot_product_attention(xb, xb, xb, is_causal=True, scale=0.2).numpy()
    np.testing.assert_allclose(out, ref, atol=3e-2)
