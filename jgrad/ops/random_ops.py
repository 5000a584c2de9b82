"""Random factories and dropout, driven by ``jgrad.random`` generators (JAX PRNG keys).

Imports ``_dispatch``, ``_tensor``, ``_device``, ``_dtype``, ``random`` (the generators) and
``ops._registry``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..core._device import device as _device, get_default_device
from ..runtime import _bounds
from ..runtime._dispatch import Op, call, call_inplace
from ..core._tensor import Tensor
from ..random import _generator_for
from .creation import full
from ._registry import as_index, check_new_shape, parse_size, scalar_type_name, tensor_method


def _key(k):
    return jax.random.wrap_key_data(k)


RAND = Op("rand", lambda k, shape, dtype: jax.random.uniform(_key(k), shape, dtype), differentiable=False)
RANDN = Op("randn", lambda k, shape, dtype: jax.random.normal(_key(k), shape, dtype), differentiable=False)
RANDINT = Op("randint", lambda k, shape, low, high, dtype: jax.random.randint(_key(k), shape, low, high, dtype),
             differentiable=False)
RANDPERM = Op("randperm", lambda k, n, dtype: jax.random.permutation(_key(k), n).astype(dtype),
              differentiable=False)
BERNOULLI = Op("bernoulli", lambda k, p: jax.random.bernoulli(_key(k), p).astype(p.dtype), differentiable=False)
UNIFORM_ = Op("uniform_", lambda a, k, lo, hi: jax.random.uniform(_key(k), a.shape, a.dtype, lo, hi),
              lambda ctx, g: (None, None, None, None), save=())
NORMAL = Op("normal", lambda k, shape, dtype, mean, std: mean + std * jax.random.normal(_key(k), shape, dtype),
            differentiable=False)
NORMAL_ = Op("normal_", lambda a, k, mean, std: mean + std * jax.random.normal(_key(k), a.shape, a.dtype),
             lambda ctx, g: (None, None, None, None), save=())
TRUNC_NORMAL_ = Op("trunc_normal_", lambda a, k, mean, std, lo, hi: (mean + std * jax.random.truncated_normal(
    _key(k), (lo - mean) / std, (hi - mean) / std, a.shape, a.dtype)).astype(a.dtype),
    lambda ctx, g: (None,) * 6, save=())


def _key_tensor(generator, device):
    gen = _generator_for(generator, device)
    return Tensor._make(gen.next_key(), gen.device)


def _new_shape(size, dt, name):
    if not size:
        raise TypeError(f'{name}() missing 1 required positional arguments: "size"')
    return check_new_shape(parse_size(size, name), dt.itemsize, name)


def _dev(device):
    return _device(device) if device is not None else get_default_device()


def _req(t, requires_grad):
    return t.requires_grad_(True) if requires_grad else t


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Uniform samples on [0, 1)."""
    dt = _dtype.canonical(dtype)
    shape = _new_shape(size, dt, "rand")  # checked before a key is drawn: a refused call leaves the generator as it was
    return _req(call(RAND, _key_tensor(generator, _dev(device)), shape=shape, dtype=dt.np), requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    """Standard normal samples."""
    dt = _dtype.canonical(dtype)
    shape = _new_shape(size, dt, "randn")
    return _req(call(RANDN, _key_tensor(generator, _dev(device)), shape=shape, dtype=dt.np), requires_grad)


def randint(low=0, high=None, size=None, *, generator=None, dtype=None, device=None):
    """``randint(high, size)`` or ``randint(low, high, size)``: integers in [low, high)."""
    if size is None:
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    dt = _dtype.canonical(dtype) if dtype is not None else _dtype._index_dtype()
    shape = check_new_shape(parse_size(size, "randint", varargs=False), dt.itemsize, "randint")
    out = call(RANDINT, _key_tensor(generator, _dev(device)), shape=shape, low=int(low), high=int(high),
               dtype=dt.np)
    return _bounds.mark(out, int(low), int(high))


def randperm(n, *, generator=None, dtype=None, device=None):
    dt = _dtype.canonical(dtype) if dtype is not None else _dtype._index_dtype()
    n = as_index(n, "randperm", "n")
    check_new_shape((n,), dt.itemsize, "randperm")
    return _bounds.mark(call(RANDPERM, _key_tensor(generator, _dev(device)), n=n, dtype=dt.np), 0, n)


def rand_like(t, *, dtype=None, device=None, generator=None):
    return rand(t.shape, dtype=dtype or t.dtype, device=device or t.device, generator=generator)


def randn_like(t, *, dtype=None, device=None, generator=None):
    return randn(t.shape, dtype=dtype or t.dtype, device=device or t.device, generator=generator)


def randint_like(t, low=0, high=None, *, dtype=None, device=None, generator=None):
    """Integers in [low, high) in ``t``'s shape and dtype (a floating dtype holds whole numbers, as PyTorch's)."""
    dt = _dtype.canonical(dtype or t.dtype)
    if dt.is_floating_point or dt.is_complex:
        ints = randint(low, high, t.shape, dtype=_dtype.int64, device=device or t.device, generator=generator)
        return ints.to(dt)
    return randint(low, high, t.shape, dtype=dt, device=device or t.device, generator=generator)


def bernoulli(input, p=None, *, generator=None):
    """0/1 samples with the probabilities in ``input``, or with probability ``p`` in ``input``'s shape."""
    probs = input.detach() if p is None else _full_like(input, p)
    return call(BERNOULLI, _key_tensor(generator, input._device), probs)


def _full_like(t, value):
    return full(t.shape, float(value), dtype=t.dtype, device=t.device)


@tensor_method("bernoulli_")
def bernoulli_(self, p=0.5, *, generator=None):
    """Fill ``self`` with 0/1 samples, each 1 with probability ``p`` (a float or a tensor of probabilities)."""
    probs = p.detach().to(self.dtype).expand(self.shape) if isinstance(p, Tensor) else _full_like(self, p)
    return self.copy_(call(BERNOULLI, _key_tensor(generator, self._device), probs))


def normal(mean=0.0, std=1.0, size=None, *, generator=None, dtype=None, device=None):
    """Normal samples: scalar ``mean`` and ``std`` with a ``size`` (one kernel), or tensors broadcast together
    (``mean + std * N(0, 1)``, differentiable in both, as ``torch.normal``)."""
    if isinstance(mean, Tensor) or isinstance(std, Tensor):
        ref = mean if isinstance(mean, Tensor) else std
        shape = jnp.broadcast_shapes(tuple(getattr(mean, "shape", ())), tuple(getattr(std, "shape", ())))
        noise = randn(shape, dtype=ref.dtype, device=ref.device, generator=generator)
        return mean + std * noise
    if size is None:
        raise TypeError("normal() with scalar mean and std needs 'size'")
    dt = _dtype.canonical(dtype)
    shape = check_new_shape(parse_size(size, "normal", varargs=False), dt.itemsize, "normal")
    return call(NORMAL, _key_tensor(generator, _dev(device)), shape=shape, dtype=dt.np, mean=float(mean),
                std=float(std))


@tensor_method("uniform_")
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    return call_inplace(UNIFORM_, self, _key_tensor(generator, self._device), from_, to)


@tensor_method("normal_")
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    for name, v, pos in (("mean", mean, 1), ("std", std, 2)):
        if isinstance(v, Tensor):
            raise TypeError(f"normal_(): argument '{name}' (position {pos}) must be float, not Tensor")
    return call_inplace(NORMAL_, self, _key_tensor(generator, self._device), mean, std)


POISSON = Op("PoissonBackward0", lambda k, rates: jax.random.poisson(_key(k), rates, rates.shape).astype(rates.dtype),
             lambda ctx, g: (None, jnp.zeros_like(g)), save=())


def poisson(input, generator=None):
    """Poisson samples with the rates in ``input`` (its gradient is zero, as PyTorch's)."""
    if not input.is_floating_point():
        raise NotImplementedError(f"\"poisson_cpu\" not implemented for '{scalar_type_name(input.dtype)}'")
    return call(POISSON, _key_tensor(generator, input._device), input)


# SELU's fixed point: a dropped unit is set to SELU's negative saturation -scale * alpha, and an affine map keeps
# the mean and variance of a unit-normal input (Klambauer et al., 2017).
_SELU_SATURATION = -1.0507009873554805 * 1.6732632423543772


def _alpha_dropout(input, p, training, mask_lead, generator):
    """Dropped units take SELU's saturation value; ``a`` and ``b`` restore the input's mean and variance. The mask
    is drawn over the first ``mask_lead`` dims (all: elementwise; 2: whole channels)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    a = ((1.0 - p) * (1.0 + p * _SELU_SATURATION ** 2)) ** -0.5
    b = -a * _SELU_SATURATION * p
    mask_shape = tuple(input.shape[:mask_lead]) + (1,) * (input.ndim - mask_lead)
    keep = (rand(mask_shape, generator=generator, dtype=input.dtype, device=input.device) >= p).to(input.dtype)
    return (input * keep + _SELU_SATURATION * (1.0 - keep)) * a + b


def alpha_dropout(input, p, train=None):
    """``torch.alpha_dropout``: dropout for SELU networks (``nn.functional.alpha_dropout`` with ``training=train``)."""
    _need_train(train, "alpha_dropout")
    return _alpha_dropout(input, p, train, input.ndim, None)


def feature_alpha_dropout(input, p, train=None):
    """``torch.feature_alpha_dropout``: alpha dropout of whole channels (one draw per sample and channel)."""
    _need_train(train, "feature_alpha_dropout")
    return _alpha_dropout(input, p, train, min(2, input.ndim), None)


def _need_train(train, name):
    if train is None:  # PyTorch's binding requires it, in its own words
        raise TypeError(f'{name}() missing 1 required positional arguments: "train"')


def _dropout_fwd(x, k, p):
    keep = jax.random.bernoulli(_key(k), 1.0 - p, x.shape)
    return jnp.where(keep, x / (1.0 - p), jnp.zeros((), x.dtype)).astype(x.dtype)


DROPOUT = Op("NativeDropoutBackward0", _dropout_fwd)


def dropout(input, p=0.5, training=True, inplace=False, *, generator=None):
    """Zero each element with probability ``p`` and scale the rest by ``1/(1-p)``."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    key = _key_tensor(generator, input._device)  # a DTensor draws from its mesh's generator
    if inplace:
        return call_inplace(DROPOUT, input, key, float(p))
    return call(DROPOUT, input, key, float(p))


def _multinomial_fwd(k, p, n, replacement, out_dtype):
    key = _key(k)
    logits = jnp.where(p > 0, jnp.log(jnp.where(p > 0, p, 1)), -jnp.inf)
    if replacement:
        shape = (n,) + p.shape[:-1]
        draws = jax.random.categorical(key, logits, axis=-1, shape=shape)
        return jnp.moveaxis(draws, 0, -1).astype(out_dtype)
    # Without replacement: the Gumbel-top-k trick (the k largest perturbed log-weights are a draw of k
    # categories without replacement, in the order they would have been drawn one at a time).
    gumbel = jax.random.gumbel(key, p.shape, logits.dtype)
    _, idx = jax.lax.top_k(logits + gumbel, n)
    return idx.astype(out_dtype)


MULTINOMIAL = Op("multinomial", _multinomial_fwd, differentiable=False)


@tensor_method()
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """``num_samples`` category indices per row of the non-negative weights ``input`` (1-D or 2-D).

    Rows need not sum to one. Draws come from ``generator`` (default: the device's default
    generator). Without replacement a row gives distinct categories of non-zero weight.
    """
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{scalar_type_name(input.dtype)}")
    if input.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    n = int(num_samples)
    if n <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and n > input.shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    out = call(MULTINOMIAL, _key_tensor(generator, input.device), input.detach(), n=n,
               replacement=bool(replacement), out_dtype=_dtype._index_dtype().np)
    return _bounds.mark(out, 0, input.shape[-1])  # argmax/top_k indices: in range whatever the weights


tensor_method("bernoulli")(bernoulli)
