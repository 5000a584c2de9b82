"""Activation kernels of ``nn.functional`` beyond ``ops.pointwise``'s: ``hardsigmoid hardswish softshrink
hardshrink threshold prelu selu celu``, each with PyTorch's gradient at its kinks (0 at hardsigmoid's ends,
the slope of the branch PyTorch picks at 0, the whole gradient at NaN where PyTorch's formula gives it), and
PyTorch's refusal of integer inputs where its kernel has none.

Imports ``_dispatch``, ``ops._registry`` and ``ops.pointwise``.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._dispatch import Op, call
from ._registry import expect_tensor, refuse
from .pointwise import ELU

_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _zero(g):
    return jnp.zeros((), g.dtype)


_ONE_SIXTH = float(np.float32(1 / 6))  # PyTorch's kernel multiplies by a float constant, in every dtype
HARDSIGMOID = Op("HardsigmoidBackward0", lambda a: jnp.clip(a + 3, 0, 6) / 6,
                 lambda ctx, g: (jnp.where((ctx.saved[0] > -3) & (ctx.saved[0] < 3), g * _ONE_SIXTH, _zero(g)),),
                 save=(0,))


def _hardswish_bwd(ctx, g):
    a = ctx.saved[0]
    return (jnp.where(a >= 3, g, jnp.where(a <= -3, _zero(g), g * (a / 3 + 0.5))),)  # NaN gives NaN


HARDSWISH = Op("HardswishBackward0", lambda a: a * jnp.clip(a + 3, 0, 6) / 6, _hardswish_bwd, save=(0,))


def _softshrink_fwd(a, lambd):
    zero = jnp.where(jnp.isnan(a), a, jnp.zeros((), a.dtype))  # NaN stays NaN
    return jnp.where(a > lambd, a - lambd, jnp.where(a < -lambd, a + lambd, zero))


def _shrink_bwd(ctx, g):
    a, lambd = ctx.saved[0], ctx.attrs["lambd"]
    return (jnp.where((a < -lambd) | (a > lambd), g, _zero(g)),)  # 0 at NaN, as PyTorch's


SOFTSHRINK = Op("SoftshrinkBackward0", _softshrink_fwd, _shrink_bwd, save=(0,))
HARDSHRINK = Op("HardshrinkBackward0", lambda a, lambd: jnp.where((a >= -lambd) & (a <= lambd),
                                                                   jnp.zeros((), a.dtype), a),
                _shrink_bwd, save=(0,))


def _threshold_fwd(a, threshold, value):
    return jnp.where(a <= threshold, jnp.asarray(value).astype(a.dtype), a)


THRESHOLD = Op("ThresholdBackward0", _threshold_fwd,
               lambda ctx, g: (jnp.where(ctx.saved[0] <= ctx.attrs["threshold"], _zero(g), g),), save=(0,))


def _prelu_fwd(a, w):
    if a.ndim >= 2 and w.size > 1:
        w = w.reshape((1, -1) + (1,) * (a.ndim - 2))
    return jnp.where(a > 0, a, w * a)


PRELU = Op("PreluKernelBackward0", _prelu_fwd)


def _float_act(name, input, kernel=None):
    expect_tensor(input, name)
    if kernel is not None:
        refuse(kernel, input, "bi")


def hardsigmoid(input):
    _float_act("hardsigmoid", input, "hardsigmoid_cpu")
    return call(HARDSIGMOID, input)


def hardswish(input):
    _float_act("hardswish", input, "hardswish_cpu")
    return call(HARDSWISH, input)


def softshrink(input, lambd=0.5):
    _float_act("softshrink", input, "softshrink_cpu")
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return call(SOFTSHRINK, input, lambd=float(lambd))


def hardshrink(input, lambd=0.5):
    _float_act("hardshrink", input, "hardshrink_cpu")
    return call(HARDSHRINK, input, lambd=float(lambd))


def threshold(input, threshold, value):
    expect_tensor(input, "threshold")
    refuse("threshold_cpu", input, "b")
    return call(THRESHOLD, input, threshold=threshold, value=value)


def elu(input, alpha=1.0, scale=1.0, input_scale=1.0):
    _float_act("elu", input, "elu_cpu")
    return call(ELU, input, alpha=float(alpha), scale=float(scale), input_scale=float(input_scale))


def selu(input):
    return elu(input, _SELU_ALPHA, _SELU_SCALE)


def celu(input, alpha=1.0):
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    return elu(input, alpha, 1.0, 1.0 / alpha)


def prelu(input, weight):
    """``max(0, x) + weight * min(0, x)``, ``weight`` per channel (dim 1) or one for all."""
    expect_tensor(input, "prelu")
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}")
    n = weight.numel()
    if n != 1:
        if input.ndim == 0:
            raise RuntimeError(f"Not allow zero-dim input tensor.")
        channels = input.shape[1] if input.ndim >= 2 else 1
        if n != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                               f"{n} and channel size = {channels}.")
    if input.dtype is not weight.dtype:
        raise RuntimeError(f"expected scalar type {input.dtype} but found {weight.dtype}")
    return call(PRELU, input, weight)

