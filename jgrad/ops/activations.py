"""Activation kernels of ``nn.functional`` (``relu`` is in ``ops.pointwise``): ``gelu silu softplus leaky_relu elu
selu celu hardtanh logsigmoid hardsigmoid hardswish softshrink hardshrink threshold prelu``. Each gives PyTorch's
values and gradients where its kernels define them: at the kinks (0 at hardtanh's and hardsigmoid's clip
points), at NaN (as PyTorch's vectorized CPU kernels compute it) and for signed zeros; integer inputs are
refused where PyTorch's kernel has none (``"silu_cpu" not implemented for 'Long'``).

Imports ``_dispatch``, ``ops._registry`` and ``ops.pointwise``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime._dispatch import Op, call
from ._registry import expect_tensor, refuse, tensor_method
from .pointwise import _float_promote


def _gelu(a, approximate="none"):
    return jax.nn.gelu(a, approximate=approximate == "tanh")


def _softplus(a, beta=1.0, threshold=20.0):
    return jnp.where(a * beta > threshold, a, jax.nn.softplus(a * beta) / beta)


def _gelu_fwd(a, approximate="none"):
    return _gelu(_float_promote(a), approximate)


def _gelu_bwd(ctx, g):
    """PyTorch's formulas (``GeluBackward``): ``Φ(x) + x φ(x)``, or the tanh approximation's derivative."""
    x = _float_promote(ctx.saved[0]).astype(g.dtype)
    if ctx.attrs.get("approximate", "none") == "tanh":
        beta, kappa = np.sqrt(2 / np.pi), 0.044715
        t = jnp.tanh(beta * (x + kappa * x ** 3))
        return (g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * beta * (1 + 3 * kappa * x * x)),)
    cdf = 0.5 * (1 + jax.scipy.special.erf(x / np.sqrt(2)))
    pdf = jnp.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
    return (g * (cdf + x * pdf),)


GELU = Op("GeluBackward0", _gelu_fwd, _gelu_bwd, save=(0,))
SILU = Op("SiluBackward0", lambda a: jax.nn.silu(_float_promote(a)))


def _softplus_bwd(ctx, g):
    a = ctx.saved[0].astype(g.dtype)
    beta, threshold = ctx.attrs.get("beta", 1.0), ctx.attrs.get("threshold", 20.0)
    z = jnp.exp(a * beta)
    return (jnp.where(a * beta > threshold, g, g * z / (z + 1)),)  # PyTorch's formula (signs of zero kept)


SOFTPLUS = Op("SoftplusBackward0", lambda a, beta=1.0, threshold=20.0: _softplus(_float_promote(a), beta, threshold),
              _softplus_bwd, save=(0,))
LEAKY_RELU = Op("LeakyReluBackward0", lambda a, negative_slope=0.01: jnp.where(a > 0, a, a * negative_slope))


def _elu_fwd(a, alpha=1.0, scale=1.0, input_scale=1.0):
    """PyTorch's elu kernel (elu, selu and celu are this with other constants)."""
    a = _float_promote(a)
    neg = jnp.expm1(jnp.where(a > 0, 0, a) * input_scale) * (alpha * scale)
    return jnp.where(a > 0, a * scale, neg)


def _elu_bwd(ctx, g):
    a = ctx.saved[0]
    alpha, scale, inp = (ctx.attrs.get(k, 1.0) for k in ("alpha", "scale", "input_scale"))
    # x > 0 takes the linear slope; anything else (NaN included: NaN) the exponential's, as PyTorch's kernel
    return (jnp.where(a > 0, g * scale, g * (alpha * scale * inp) * jnp.exp(jnp.where(a > 0, 0, a) * inp)),)


ELU = Op("EluBackward0", _elu_fwd, _elu_bwd, save=(0,))


def _logsigmoid(a):
    a = _float_promote(a)
    return jnp.minimum(a, 0) - jnp.log1p(jnp.exp(-jnp.abs(a)))  # PyTorch's formula (logsigmoid(inf) is +0.0)


def _logsigmoid_bwd(ctx, g):
    a = ctx.saved[0].astype(g.dtype)
    neg = a < 0
    z = jnp.exp(-jnp.abs(a))
    return (g * (neg.astype(g.dtype) - jnp.where(neg, 1, -1).astype(g.dtype) * (z / (1 + z))),)  # PyTorch's


LOGSIGMOID = Op("LogSigmoidBackward0", _logsigmoid, _logsigmoid_bwd, save=(0,))


def _hardtanh_fwd(a, min_val=-1.0, max_val=1.0):
    if a.dtype == jnp.bool_:
        raise RuntimeError("Bool inputs not supported for hardtanh")
    lo, hi = jnp.asarray(min_val).astype(a.dtype), jnp.asarray(max_val).astype(a.dtype)  # integers: bounds cast
    return jnp.where(a < lo, lo, jnp.where(a > hi, hi, a))  # -0.0 and NaN pass, as PyTorch's


def _hardtanh_bwd(ctx, g):
    a = ctx.saved[0]
    lo, hi = ctx.attrs.get("min_val", -1.0), ctx.attrs.get("max_val", 1.0)
    return (jnp.where((a > lo) & (a < hi), g, jnp.zeros((), g.dtype)),)  # 0 at the clip points and at NaN


HARDTANH = Op("HardtanhBackward0", _hardtanh_fwd, _hardtanh_bwd, save=(0,))



def silu(input):
    expect_tensor(input, "silu")
    refuse("silu_cpu", input, "bi")
    return call(SILU, input)


def logsigmoid(input):
    expect_tensor(input, "logsigmoid")
    refuse("log_sigmoid_cpu", input, "bi")
    return call(LOGSIGMOID, input)


def gelu(input, approximate="none"):
    expect_tensor(input, "gelu")
    refuse("GeluKernelImpl", input, "bi")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return call(GELU, input, approximate=approximate)


def softplus(input, beta=1.0, threshold=20.0):
    expect_tensor(input, "softplus")
    refuse("softplus_cpu", input, "bi")
    return call(SOFTPLUS, input, beta=beta, threshold=threshold)


def leaky_relu(input, negative_slope=0.01):
    expect_tensor(input, "leaky_relu")
    refuse("leaky_relu_cpu", input, "bi")
    return call(LEAKY_RELU, input, negative_slope=negative_slope)


def hardtanh(input, min_val=-1.0, max_val=1.0):
    expect_tensor(input, "hardtanh")
    if input.dtype.name == "uint8" and (min_val < 0 or max_val < 0):
        raise RuntimeError("cannot do hardtanh on an unsigned type with negative limits")
    return call(HARDTANH, input, min_val=min_val, max_val=max_val)



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
    if input.dtype.name == "uint8" and value < 0:
        raise RuntimeError("value cannot be converted to type uint8_t without overflow")
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


tensor_method("hardshrink")(hardshrink)
tensor_method("prelu")(prelu)
