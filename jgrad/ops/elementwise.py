"""More elementwise ops with PyTorch's names, dtypes and refusals: inverse hyperbolic functions, ``exp2 erfc
sinc deg2rad rad2deg frac logit signbit positive sgn fix isposinf isneginf isreal nan_to_num``, and the binary
``float_power fmax fmin hypot logaddexp logaddexp2 copysign ldexp clamp_min clamp_max`` and bit shifts
(``bitwise_left_shift``/``<<``, ``bitwise_right_shift``/``>>``), ``isin``, and PyTorch's comparison aliases.

PyTorch refuses some dtypes in its kernels (``"hypot_cpu" not implemented for 'Long'``); ``_registry.refuse``
raises that error at the op, before anything is compiled.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry`` and the helpers of ``ops.pointwise``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, expect_tensor, refuse, scalar_type_name, tensor_method
from .pointwise import CLAMP, _check_operand, _rounding, _sign, _float_promote, _promote, _Number, _unary_fn

__all__ = ["asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "exp2", "erfc", "sinc", "deg2rad", "rad2deg",
           "frac", "logit", "signbit", "positive", "sgn", "fix", "isposinf", "isneginf", "isreal", "nan_to_num",
           "float_power", "fmax", "fmin", "hypot", "logaddexp", "logaddexp2", "copysign", "ldexp", "clamp_min",
           "clamp_max", "bitwise_left_shift", "bitwise_right_shift", "isin", "arctan2", "greater", "greater_equal",
           "less", "less_equal", "not_equal"]


# ---- unary ------------------------------------------------------------------------------------
def _float_unary(name, fn):
    return Op(name, lambda a: fn(_float_promote(a)))


def _sinc(a):
    """sin(pi a) / (pi a), NaN at +-inf as PyTorch's on every device (XLA's GPU sinc gives 0 there)."""
    return jnp.where(jnp.isinf(a), jnp.nan, jnp.sinc(a)).astype(a.dtype)


def _sinc_bwd(ctx, g):
    # PyTorch's formula written out (not jax.vjp, whose result at infinity differs between JAX releases and
    # devices): (pi a cos(pi a) - sin(pi a)) / (pi a^2), 0 at 0, NaN at +-inf
    a = _float_promote(ctx.saved[0]).astype(g.dtype)
    at_zero = a == 0
    pa = jnp.where(at_zero, 1, jnp.pi * a)
    d = (pa * jnp.cos(pa) - jnp.sin(pa)) / (pa * jnp.where(at_zero, 1, a))
    d = jnp.where(jnp.isinf(a), jnp.nan, jnp.where(at_zero, 0, d))
    return (g * d.astype(g.dtype),)


def _logit(a, eps=None):
    a = _float_promote(a)
    if eps is not None:
        a = jnp.clip(a, eps, 1 - eps)
    return jnp.log(a / (1 - a))


ASINH = _float_unary("AsinhBackward0", jnp.arcsinh)
ACOSH = _float_unary("AcoshBackward0", jnp.arccosh)
ATANH = _float_unary("AtanhBackward0", jnp.arctanh)
EXP2 = _float_unary("Exp2Backward0", jnp.exp2)
ERFC = _float_unary("ErfcBackward0", jax.scipy.special.erfc)
SINC = Op("SincBackward0", lambda a: _sinc(_float_promote(a)), _sinc_bwd, save=(0,))
DEG2RAD = _float_unary("Deg2RadBackward0", lambda a: a * jnp.asarray(np.pi / 180, a.dtype))
RAD2DEG = _float_unary("Rad2DegBackward0", lambda a: a * jnp.asarray(180 / np.pi, a.dtype))
FRAC = Op("FracBackward0", lambda a: a - jnp.trunc(a), lambda ctx, g: (g,), save=())
def _logit_bwd(ctx, g):
    a = _float_promote(ctx.saved[0]).astype(g.dtype)
    eps = ctx.attrs.get("eps")
    d = g / (a * (1 - a))
    if eps is not None:  # 0 outside [eps, 1 - eps], as PyTorch's
        d = jnp.where((a < eps) | (a > 1 - eps), jnp.zeros((), g.dtype), d)
    else:  # NaN outside [0, 1], as PyTorch's
        d = jnp.where((a < 0) | (a > 1), jnp.full((), jnp.nan, g.dtype), d)
    return (d,)


LOGIT = Op("LogitBackward0", _logit, _logit_bwd, save=(0,))
SIGNBIT = Op("signbit", lambda a: jnp.signbit(a) if jnp.issubdtype(a.dtype, jnp.floating) else a < 0,
             differentiable=False)
SGN = Op("SgnBackward0", lambda a: _sign(a),
         lambda ctx, g: (jnp.zeros_like(g),), save=())
FIX = Op("TruncBackward0", _rounding("trunc", jnp.trunc), lambda ctx, g: (jnp.zeros_like(g),), save=())
ISPOSINF = Op("isposinf", lambda a: jnp.isposinf(a) if jnp.issubdtype(a.dtype, jnp.floating) else
              jnp.zeros(a.shape, bool), differentiable=False)
ISNEGINF = Op("isneginf", lambda a: jnp.isneginf(a) if jnp.issubdtype(a.dtype, jnp.floating) else
              jnp.zeros(a.shape, bool), differentiable=False)
ISREAL = Op("isreal", lambda a: jnp.isreal(a), differentiable=False)


def _nan_to_num(a, nan=0.0, posinf=None, neginf=None):
    if not jnp.issubdtype(a.dtype, jnp.floating):
        return a
    info = jnp.finfo(a.dtype)
    out = jnp.where(jnp.isnan(a), jnp.asarray(nan, a.dtype), a)
    out = jnp.where(jnp.isposinf(a), jnp.asarray(info.max if posinf is None else posinf, a.dtype), out)
    return jnp.where(jnp.isneginf(a), jnp.asarray(info.min if neginf is None else neginf, a.dtype), out)


def _nan_to_num_bwd(ctx, g):
    a = ctx.saved[0]
    return (jnp.where(jnp.isfinite(a), g, jnp.copysign(jnp.zeros((), g.dtype), g)),)  # grad * isfinite, signs kept


NAN_TO_NUM = Op("NanToNumBackward0", _nan_to_num, _nan_to_num_bwd, save=(0,))

asinh, acosh, atanh = _unary_fn(ASINH, "asinh"), _unary_fn(ACOSH, "acosh"), _unary_fn(ATANH, "atanh")
arcsinh, arccosh, arctanh = _unary_fn(ASINH, "arcsinh"), _unary_fn(ACOSH, "arccosh"), _unary_fn(ATANH, "arctanh")
exp2, erfc, sinc = _unary_fn(EXP2, "exp2"), _unary_fn(ERFC, "erfc"), _unary_fn(SINC, "sinc")
deg2rad, rad2deg = _unary_fn(DEG2RAD, "deg2rad"), _unary_fn(RAD2DEG, "rad2deg")
signbit, isreal = _unary_fn(SIGNBIT, "signbit"), _unary_fn(ISREAL, "isreal")
isposinf, isneginf = _unary_fn(ISPOSINF, "isposinf"), _unary_fn(ISNEGINF, "isneginf")
sgn, fix = _unary_fn(SGN, "sgn"), _unary_fn(FIX, "fix")


def frac(input):
    """``input - trunc(input)`` (floating inputs only, as PyTorch)."""
    expect_tensor(input, "frac")
    refuse("frac_cpu", input, "bi")
    return call(FRAC, input)


def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given."""
    expect_tensor(input, "logit")
    return call(LOGIT, input, eps=None if eps is None else float(eps))


def positive(input):
    """``input`` itself (PyTorch's unary ``+``); refused for bool."""
    expect_tensor(input, "positive")
    if input.dtype is _dtype.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by ``nan``, ``posinf`` (default: the dtype's largest value) and ``neginf``."""
    expect_tensor(input, "nan_to_num")
    return call(NAN_TO_NUM, input, nan=float(nan), posinf=None if posinf is None else float(posinf),
                neginf=None if neginf is None else float(neginf))


# ---- binary ----------------------------------------------------------------------------------
def _float_pair(a, b):
    a, b = _promote(a, b)
    if not jnp.issubdtype(a.dtype, jnp.inexact):
        dt = _dtype.get_default_dtype().np
        a, b = a.astype(dt), b.astype(dt)
    return a, b


def _nan_pass_bwd(pick):
    """fmax/fmin: the gradient goes to the operand chosen (the non-NaN one), to both halves at a tie."""
    def bwd(ctx, g):
        a, b = _promote(*ctx.saved)
        ta = pick(a, b) | jnp.isnan(b)
        tb = pick(b, a) | jnp.isnan(a)
        ta, tb = ta & ~(jnp.isnan(a) & ~jnp.isnan(b)), tb & ~(jnp.isnan(b) & ~jnp.isnan(a))
        half = jnp.where(ta & tb, 0.5, 1.0).astype(g.dtype)
        zero = jnp.zeros((), g.dtype)  # a select, not g * False: an unchosen operand's zero is +0.0, as PyTorch's
        return jnp.where(ta, g * half, zero), jnp.where(tb, g * half, zero)
    return bwd


def _float_power_bwd(ctx, g):
    a, b = (jnp.asarray(x, jnp.float64) for x in ctx.saved)
    ga = jnp.where(b == 0, 0, g * b * a ** jnp.where(b == 0, 1, b - 1))
    gb = g * jnp.where((a == 0) & (b >= 0), 0, a ** b * jnp.log(a))
    return tuple(gr.astype(jnp.result_type(x)) if ctx.needs_input_grad[i] else None
                 for i, (gr, x) in enumerate(((ga, ctx.saved[0]), (gb, ctx.saved[1]))))


FLOAT_POWER = Op("PowBackward1", lambda a, b: jnp.power(jnp.asarray(a, jnp.float64), jnp.asarray(b, jnp.float64)),
                 _float_power_bwd, save=(0, 1))
FMAX = Op("FmaxBackward0", lambda a, b: jnp.fmax(*_promote(a, b)), _nan_pass_bwd(lambda x, y: x >= y), save=(0, 1))
FMIN = Op("FminBackward0", lambda a, b: jnp.fmin(*_promote(a, b)), _nan_pass_bwd(lambda x, y: x <= y), save=(0, 1))
def _hypot_bwd(ctx, g):
    a, b = _promote(*ctx.saved)
    h = ctx.outputs[0]
    safe = jnp.where(h == 0, 1, h)
    return (jnp.where(h == 0, 0, g * a / safe), jnp.where(h == 0, 0, g * b / safe))  # PyTorch's: 0 at the origin


def _logaddexp_bwd(exp):
    def bwd(ctx, g):
        a, b = _promote(*ctx.saved)
        return g / (1 + exp(b - a)), g / (1 + exp(a - b))  # PyTorch's formulas
    return bwd


def _copysign_bwd(ctx, g):
    a, _ = _float_pair(*ctx.saved)
    out = ctx.outputs[0]
    ratio = jnp.where(a == 0, 0, out / jnp.where(a == 0, 1, a))  # PyTorch's: result / self, 0 where self is 0
    return g * ratio, jnp.zeros_like(g) if ctx.needs_input_grad[1] else None


HYPOT = Op("HypotBackward0", lambda a, b: jnp.hypot(*_promote(a, b)), _hypot_bwd, save=(0, 1), save_outputs=True)
LOGADDEXP = Op("LogaddexpBackward0", lambda a, b: jnp.logaddexp(*_promote(a, b)), _logaddexp_bwd(jnp.exp),
               save=(0, 1))
LOGADDEXP2 = Op("Logaddexp2Backward0", lambda a, b: jnp.logaddexp2(*_promote(a, b)), _logaddexp_bwd(jnp.exp2),
                save=(0, 1))
COPYSIGN = Op("CopysignBackward0", lambda a, b: jnp.copysign(*_float_pair(a, b)), _copysign_bwd, save=(0, 1),
              save_outputs=True)
LDEXP = Op("MulBackward0", lambda a, b: (lambda x, y: x * jnp.exp2(y))(*_float_pair(a, b)))


def _shift(left):
    def fwd(a, b):
        a, b = _promote(a, b)
        bits = a.dtype.itemsize * 8
        big = (b >= bits) | (b < 0)  # PyTorch: shifting out every bit gives 0 (-1 for a negative >>)
        s = jnp.where(big, 0, b)
        if left:
            return jnp.where(big, jnp.zeros((), a.dtype), jnp.left_shift(a, s))
        out = jnp.right_shift(a, s)
        if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
            return jnp.where(big, jnp.zeros((), a.dtype), out)
        return jnp.where(big, jnp.where(a < 0, jnp.asarray(-1, a.dtype), jnp.zeros((), a.dtype)), out)
    return Op("lshift" if left else "rshift", fwd, differentiable=False)


LSHIFT, RSHIFT = _shift(True), _shift(False)


def _tensor_pair(name, input, other):
    """Binary ops whose ``other`` must be a tensor in PyTorch (``hypot(x, 2)`` is a TypeError)."""
    expect_tensor(input, name)
    expect_tensor(other, name, "other", pos=None)


def float_power(input, exponent):
    """``input ** exponent`` computed in float64."""
    input, exponent = _check_operand(input, "float_power", "input"), _check_operand(exponent, "float_power",
                                                                                   "exponent")
    if isinstance(input, Tensor) and isinstance(exponent, Tensor):
        broadcast_shapes(tuple(input.shape), tuple(exponent.shape))
    return call(FLOAT_POWER, input, exponent)


def fmax(input, other):
    """Elementwise maximum that ignores NaN (NaN only where both are NaN)."""
    _tensor_pair("fmax", input, other)
    return call(FMAX, input, other)


def fmin(input, other):
    _tensor_pair("fmin", input, other)
    return call(FMIN, input, other)


def _float_binary(op, name, kernel, input, other):
    """Float kernels: the shapes broadcast first, then the promoted type is refused if it is not floating."""
    _tensor_pair(name, input, other)
    broadcast_shapes(tuple(input.shape), tuple(other.shape))
    dt = _dtype.from_np(_dtype.result_type(_Proxy(input), _Proxy(other)))
    if not (dt.is_floating_point or dt.is_complex):
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{scalar_type_name(dt)}'")
    return call(op, input, other)


class _Proxy:
    """A tensor's rank and dtype as ``_dtype.result_type`` reads operands."""

    def __init__(self, t):
        self.ndim, self.dtype = t.ndim, t.dtype.np


def hypot(input, other):
    """``sqrt(input**2 + other**2)``."""
    return _float_binary(HYPOT, "hypot", "hypot_cpu", input, other)


def logaddexp(input, other):
    """``log(exp(input) + exp(other))``, computed stably."""
    return _float_binary(LOGADDEXP, "logaddexp", "logaddexp_cpu", input, other)


def logaddexp2(input, other):
    return _float_binary(LOGADDEXP2, "logaddexp2", "logaddexp2_cpu", input, other)


def copysign(input, other):
    """``|input|`` with the sign of ``other`` (a float result)."""
    expect_tensor(input, "copysign")
    return call(COPYSIGN, input, _check_operand(other, "copysign"))


def ldexp(input, other):
    """``input * 2 ** other``."""
    _tensor_pair("ldexp", input, other)
    return call(LDEXP, input, other)


def clamp_min(input, min):  # noqa: A002
    expect_tensor(input, "clamp_min")
    return call(CLAMP, input, _check_operand(min, "clamp_min", "min"), None)


def clamp_max(input, max):  # noqa: A002
    expect_tensor(input, "clamp_max")
    return call(CLAMP, input, None, _check_operand(max, "clamp_max", "max"))


def _check_shift(a, b, kernel):
    for x in (a, b):
        if isinstance(x, Tensor):
            refuse(kernel, x, "fb")
        elif isinstance(x, float):
            raise NotImplementedError(f"\"{kernel}\" not implemented for 'Float'")


def bitwise_left_shift(input, other):
    """``input << other`` (integers; shifting by the width or more gives 0)."""
    expect_tensor(input, "bitwise_left_shift")
    other = _check_operand(other, "bitwise_left_shift")
    _check_shift(input, other, "lshift_cpu")
    return call(LSHIFT, input, other)


def bitwise_right_shift(input, other):
    """``input >> other`` (arithmetic for signed integers)."""
    expect_tensor(input, "bitwise_right_shift")
    other = _check_operand(other, "bitwise_right_shift")
    _check_shift(input, other, "rshift_cpu")
    return call(RSHIFT, input, other)


def _isin_fwd(a, b, invert=False):
    dt = _dtype.result_type(a, b)
    hit = jnp.isin(a.astype(dt), jnp.ravel(b).astype(dt))
    return ~hit if invert else hit


ISIN = Op("isin", _isin_fwd, differentiable=False)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each of ``elements`` is in ``test_elements`` (a bool tensor of ``elements``' shape)."""
    for x in (elements, test_elements):
        if isinstance(x, Tensor) and x.dtype is _dtype.bool:
            raise RuntimeError("Unsupported input type encountered for isin(): Bool")
    if not isinstance(elements, Tensor):
        expect_tensor(test_elements, "isin", "test_elements", pos=None)
        from .creation import tensor
        elements = tensor(elements, device=test_elements.device)
    return call(ISIN, elements, _check_operand(test_elements, "isin", "test_elements"), invert=bool(invert))


from .comparison import ge, gt, le, lt, ne  # noqa: E402  (PyTorch's aliases)
from .pointwise import ATAN2, _tensors_only  # noqa: E402


def arctan2(input, other):
    return _tensors_only(ATAN2, "arctan2", input, other)


greater, greater_equal, less, less_equal, not_equal = gt, ge, lt, le, ne

def _float_power_(self, exponent):
    if self.dtype is not _dtype.float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {scalar_type_name(self.dtype)} but the "
                           "operation's result requires dtype Double")
    from .inplace import write
    return write(self, float_power(self.clone() if self.requires_grad else self, exponent))


tensor_method("float_power_")(_float_power_)


def _clamp_bound_(which):
    from .pointwise_inplace import clamp_

    def method(self, bound):
        return clamp_(self, **{which: bound})
    return method


tensor_method("clamp_min_")(_clamp_bound_("min"))
tensor_method("clamp_max_")(_clamp_bound_("max"))

for _name, _fn in dict(
        asinh=asinh, acosh=acosh, atanh=atanh, arcsinh=arcsinh, arccosh=arccosh, arctanh=arctanh, exp2=exp2,
        erfc=erfc, sinc=sinc, deg2rad=deg2rad, rad2deg=rad2deg, frac=frac, logit=logit, signbit=signbit,
        positive=positive, sgn=sgn, fix=fix, isposinf=isposinf, isneginf=isneginf, isreal=isreal,
        nan_to_num=nan_to_num, float_power=float_power, fmax=fmax, fmin=fmin, hypot=hypot, logaddexp=logaddexp,
        logaddexp2=logaddexp2, copysign=copysign, ldexp=ldexp, clamp_min=clamp_min, clamp_max=clamp_max,
        bitwise_left_shift=bitwise_left_shift, bitwise_right_shift=bitwise_right_shift, arctan2=arctan2,
        greater=greater, greater_equal=greater_equal, less=less, less_equal=less_equal, not_equal=not_equal,
).items():
    tensor_method(_name)(getattr(_fn, "_method", _fn))


def _shift_op(fn, reflected=False):
    def method(self, other):
        if isinstance(other, np.generic):
            other = other.item()
        if not isinstance(other, (Tensor,) + _Number):
            return NotImplemented
        return fn(other, self) if reflected else fn(self, other)
    return method


Tensor.__lshift__, Tensor.__rshift__ = _shift_op(bitwise_left_shift), _shift_op(bitwise_right_shift)
Tensor.__rlshift__ = _shift_op(lambda a, b: bitwise_left_shift(_as_tensor_like(a, b), b), True)
Tensor.__rrshift__ = _shift_op(lambda a, b: bitwise_right_shift(_as_tensor_like(a, b), b), True)


def _as_tensor_like(x, like):
    from .creation import tensor
    return x if isinstance(x, Tensor) else tensor(x, device=like.device)

