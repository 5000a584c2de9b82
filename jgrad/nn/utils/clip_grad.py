"""Gradient clipping: ``clip_grad_norm_``, ``clip_grad_value_``, ``get_total_norm``, ``clip_grads_with_norm_``.

As PyTorch's foreach path: the total norm is one kernel over every gradient, and the scaling (or
clamping) of the gradients one more, updating each ``.grad`` in place (``_dispatch.call_foreach``:
no history, versions bumped). Nothing is read on the host unless ``error_if_nonfinite=True``.

Imports ``_dispatch``, ``_tensor``, ``grad_mode`` and ``ops.creation``.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ...runtime._dispatch import Op, call, call_foreach
from ...core._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ...ops.creation import tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "get_total_norm", "clip_grads_with_norm_"]


def _vector_norm(x, p):
    x = jnp.abs(x.reshape(-1))
    if p == math.inf:
        return jnp.max(x, initial=0.0)
    if p == -math.inf:
        return jnp.min(x)
    if p == 0:
        return jnp.sum(x != 0).astype(x.dtype)
    if p == 1:
        return jnp.sum(x)
    if p == 2:
        return jnp.sqrt(jnp.sum(x * x))
    return jnp.sum(x ** p) ** (1.0 / p)


def _total_norm(*grads, norm_type):
    dtype = jnp.result_type(*grads)
    return _vector_norm(jnp.stack([_vector_norm(g, norm_type).astype(dtype) for g in grads]), norm_type)


def _scale(*arrays):
    *grads, total, max_norm = arrays
    coef = jnp.minimum(max_norm / (total + 1e-6), 1.0)
    return tuple((g * coef.astype(g.dtype)).astype(g.dtype) for g in grads)


def _clamp(*arrays):
    *grads, value = arrays
    return tuple(jnp.clip(g, -value, value).astype(g.dtype) for g in grads)


TOTAL_NORM = Op("total_norm", _total_norm, differentiable=False)
SCALE_GRADS = Op("clip_grads_with_norm", _scale, differentiable=False)
CLAMP_GRADS = Op("clip_grad_value", _clamp, differentiable=False)


def _params(parameters):
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def _grads(parameters):
    return [p.grad for p in _params(parameters) if p.grad is not None]


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The ``norm_type``-norm of the norms of ``tensors`` (the norm of their concatenation), a 0-d tensor."""
    tensors = _params(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        total = call(TOTAL_NORM, *[t.detach() for t in tensors], norm_type=norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, so "
                           "it cannot be clipped. To disable this error and scale the gradients by the non-finite "
                           "norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None) -> None:
    """Scale the gradients of ``parameters`` by ``min(1, max_norm / (total_norm + 1e-6))``, in place."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        call_foreach(SCALE_GRADS, grads, total_norm, float(max_norm))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Rescale the gradients of ``parameters`` in place so their total ``norm_type``-norm is at most ``max_norm``.

    Returns the total norm before clipping (a 0-d tensor).
    """
    parameters = _params(parameters)
    total = get_total_norm(_grads(parameters), norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters, clip_value, foreach=None) -> None:
    """Clamp every gradient of ``parameters`` to ``[-clip_value, clip_value]``, in place."""
    grads = _grads(parameters)
    if not grads:
        return
    with no_grad():
        call_foreach(CLAMP_GRADS, grads, float(clip_value))
