"""Normalization ops (``torch.nn.functional``): batch_norm, instance_norm, group_norm, rms_norm.

(``layer_norm`` lives in ``nn_ops``.) Each is one XLA kernel with a ``jax.vjp`` gradient. In
training, ``batch_norm`` and ``instance_norm`` update the running statistics they are given in
place, as PyTorch does, with one fused kernel outside autograd (``_dispatch.call_foreach``):
``running = (1 - momentum) * running + momentum * batch_statistic``, the variance unbiased.

Imports ``_dispatch`` and ``grad_mode``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from ..runtime._dispatch import Op, call, call_foreach
from ..autograd.grad_mode import no_grad


def _affine(y, w, b, channel_axis):
    shape = [1] * y.ndim
    shape[channel_axis] = -1
    if w is not None:
        y = y * w.reshape(shape)
    if b is not None:
        y = y + b.reshape(shape)
    return y


def _bn_train_fwd(x, w, b, eps):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = _affine((x - mean) * jax.lax.rsqrt(var + eps), w, b, 1)
    n = x.size // x.shape[1]
    return y.astype(x.dtype), mean.reshape(-1), (var * (n / max(n - 1, 1))).reshape(-1)


def _bn_eval_fwd(x, mean, var, w, b, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var = mean.reshape(shape).astype(x.dtype), var.reshape(shape).astype(x.dtype)
    return _affine((x - mean) * jax.lax.rsqrt(var + eps), w, b, 1).astype(x.dtype)


def _running_update(running_mean, running_var, mean, var, momentum):
    m = jnp.asarray(momentum, running_mean.dtype)
    return ((1 - m) * running_mean + m * mean.astype(running_mean.dtype),
            (1 - m) * running_var + m * var.astype(running_var.dtype))


BATCH_NORM_TRAIN = Op("NativeBatchNormBackward0", _bn_train_fwd, num_outputs=3)
BATCH_NORM_EVAL = Op("NativeBatchNormBackward0", _bn_eval_fwd)
RUNNING_STATS = Op("running_stats_update", _running_update, differentiable=False)


def _update_running(running_mean, running_var, mean, var, momentum):
    if running_mean is None and running_var is None:
        return
    if running_mean is None or running_var is None:
        raise RuntimeError("batch_norm: running_mean and running_var must be both given or both None.")
    with no_grad():
        call_foreach(RUNNING_STATS, [running_mean, running_var], mean.detach(), var.detach(), float(momentum))


def _check_channels(input, name, *params):
    if input.ndim < 2:
        raise ValueError(f"{name}: expected an input of at least 2 dimensions (N, C, ...), got shape "
                         f"{list(input.shape)}.")
    c = input.shape[1]
    for pname, p in params:
        if p is not None and tuple(p.shape) != (c,):
            raise RuntimeError(f"{name}: expected {pname} of shape [{c}] (one value per channel of the input of "
                               f"shape {list(input.shape)}), got {list(p.shape)}.")


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """Normalize each channel (dim 1) over the batch and spatial dims, then scale and shift.

    ``training``: batch statistics (biased variance), and the running ones updated in place;
    otherwise the running statistics.
    """
    _check_channels(input, "batch_norm", ("weight", weight), ("bias", bias), ("running_mean", running_mean),
                    ("running_var", running_var))
    if training:
        if input.numel() // input.shape[1] <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size "
                             f"torch.Size({list(input.shape)})")
        y, mean, var = call(BATCH_NORM_TRAIN, input, weight, bias, eps=float(eps))
        _update_running(running_mean, running_var, mean, var, momentum)
        return y
    if running_mean is None or running_var is None:
        raise RuntimeError("running_mean and running_var must be defined in evaluation mode")
    return call(BATCH_NORM_EVAL, input, running_mean, running_var, weight, bias, eps=float(eps))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True,
                  momentum=0.1, eps=1e-5):
    """Normalize each channel of each sample over its spatial dims (``use_input_stats``), then scale and shift."""
    _check_channels(input, "instance_norm", ("weight", weight), ("bias", bias))
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected an input of at least 3 dimensions (N, C, L...), got shape "
                         f"{list(input.shape)}.")
    n, c = input.shape[:2]
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return call(BATCH_NORM_EVAL, input, running_mean, running_var, weight, bias, eps=float(eps))
    if math.prod(input.shape[2:]) <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"torch.Size({list(input.shape)})")
    # PyTorch's formulation: batch norm of the input seen as one sample of N * C channels
    folded = input.reshape(1, n * c, *input.shape[2:])
    y, mean, var = call(BATCH_NORM_TRAIN, folded, None, None, eps=float(eps))
    y = y.reshape(input.shape)
    if weight is not None or bias is not None:
        y = call(AFFINE, y, weight, bias)
    if running_mean is not None or running_var is not None:
        with no_grad():  # the running statistics average the per-instance ones over the batch
            mean, var = mean.reshape(n, c).mean(0), var.reshape(n, c).mean(0)
        _update_running(running_mean, running_var, mean, var, momentum)
    return y


AFFINE = Op("AffineBackward0", lambda y, w, b: _affine(y, w, b, 1))


def _group_norm_fwd(x, w, b, groups, eps):
    n = x.shape[0]
    g = x.reshape(n, groups, -1)
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=-1, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
    return _affine(y, w, b, 1).astype(x.dtype)


GROUP_NORM = Op("NativeGroupNormBackward0", _group_norm_fwd)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalize each group of ``C / num_groups`` channels of each sample, then scale and shift per channel."""
    _check_channels(input, "group_norm", ("weight", weight), ("bias", bias))
    if input.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(input.shape)} and num_groups={num_groups}")
    return call(GROUP_NORM, input, weight, bias, groups=int(num_groups), eps=float(eps))


def _rms_norm_fwd(x, w, ndims, eps):
    axes = tuple(range(x.ndim - ndims, x.ndim))
    y = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=axes, keepdims=True) + eps)
    return (y * w if w is not None else y).astype(x.dtype)


RMS_NORM = Op("RmsNormBackward0", _rms_norm_fwd)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """``input / sqrt(mean(input**2 over the last dims) + eps) * weight`` (eps: the dtype's machine epsilon)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    if eps is None:
        eps = float(jnp.finfo(input.dtype.np).eps)
    return call(RMS_NORM, input, weight, ndims=len(shape), eps=float(eps))
