"""Random draws the distributions need beyond ``rand``/``randn``: standard gamma draws whose gradient in the
concentration is the implicit reparameterization one (``jax.random.gamma``'s, as ``torch._standard_gamma``'s), and
categorical draws from logits. Both take a key from a ``jgrad.random`` generator (the default one unless given),
so ``jg.manual_seed`` makes them reproducible; the values differ from PyTorch's (another PRNG).

Imports ``_dispatch``, ``_tensor``, ``_dtype`` and ``ops`` (``_registry``, ``random_ops``).
"""
from __future__ import annotations

import jax

from ..core import _dtype
from ..runtime import _bounds
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import expect_tensor
from .random_ops import _key_tensor


def _key(k):
    return jax.random.wrap_key_data(k)


def _gamma_bwd(ctx, g):
    # The implicit reparameterization gradient d(draw)/d(concentration), at the saved draws (no resampling).
    return None, g * jax.lax.random_gamma_grad(ctx.saved[1], ctx.outputs[0])


STANDARD_GAMMA = Op("StandardGammaBackward0", lambda k, alpha: jax.random.gamma(_key(k), alpha, alpha.shape,
                                                                                  alpha.dtype),
                    _gamma_bwd, save=(1,), save_outputs=True)


def standard_gamma(concentration: Tensor, *, generator=None) -> Tensor:
    """Gamma(concentration, 1) draws of the concentration's shape, differentiable in the concentration (implicit
    reparameterization, as ``torch._standard_gamma``).

    The sampler (a rejection loop) is costly to compile, so it runs on the flattened concentration padded to a
    power of two: one kernel serves every shape of up to that many elements."""
    expect_tensor(concentration, "_standard_gamma")
    if not concentration.dtype.is_floating_point:
        raise RuntimeError(f"_standard_gamma: expected a floating point tensor, got {concentration.dtype}")
    from .creation import ones
    from .shape import cat
    shape, n = tuple(concentration.shape), concentration.numel()
    flat = concentration.reshape(-1)
    bucket = max(64, 1 << max(n - 1, 0).bit_length())
    if bucket > n:
        flat = cat([flat, ones(bucket - n, dtype=concentration.dtype, device=concentration.device)])
    draws = call(STANDARD_GAMMA, _key_tensor(generator, concentration._device), flat)
    return draws.narrow(0, 0, n).reshape(shape)


def _categorical_fwd(k, param, shape, is_probs):
    if is_probs:  # a category of probability 0 is never drawn (its log is -inf, not log(eps))
        param = jax.numpy.where(param > 0, jax.numpy.log(jax.numpy.where(param > 0, param, 1)), -jax.numpy.inf)
    draws = jax.random.categorical(_key(k), param, axis=-1, shape=shape + param.shape[:-1])
    return draws.astype(_dtype._index_dtype().np)


CATEGORICAL = Op("categorical", _categorical_fwd, differentiable=False)


def categorical(param: Tensor, sample_shape=(), *, is_probs=False, generator=None) -> Tensor:
    """Category indices drawn from unnormalized log-probabilities (or, with ``is_probs``, non-negative weights)
    over the last dimension, of shape ``sample_shape + param.shape[:-1]``."""
    out = call(CATEGORICAL, _key_tensor(generator, param._device), param.detach(), shape=tuple(sample_shape),
               is_probs=bool(is_probs))
    return _bounds.mark(out, 0, param.shape[-1])  # argmax of logits plus noise: in range even for NaN
