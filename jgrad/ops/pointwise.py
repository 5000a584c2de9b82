"""Elementwise ops: arithmetic with PyTorch's type promotion, unary math, where, clamp,
clone, in-place arithmetic and Python's arithmetic operators on ``Tensor``.

The helpers every elementwise family uses live here too: ``_promote`` (PyTorch's result type),
``_check_operand``, ``_binary``, ``_unary_fn`` and ``_binop`` (a Python operator as a Tensor method).
Comparisons and logic are in ``comparison.py``; casts, device transfers and ``copy_`` in ``conversion.py``.

Imports ``_dispatch`` (``Op``, ``call``...), ``_tensor``, ``_dtype`` and ``ops._registry``; ``ops.indexing``
at the call of ``where(condition)`` alone (``nonzero``; indexing imports this module's helpers).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._checks import check_values
from ..runtime._dispatch import Op, call, call_inplace, call_keyed
from ..core._tensor import Tensor
from ._registry import (broadcast_shapes, expect_tensor, host_values, refuse, scalar_type_name, tensor_method,
                        type_name)

__all__ = ["add", "sub", "mul", "div", "true_divide", "divide", "multiply", "subtract", "floor_divide", "pow",
           "maximum", "minimum", "remainder", "fmod", "atan2", "neg", "negative", "abs", "absolute", "exp", "log",
           "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tan", "tanh", "asin", "acos",
           "atan", "arcsin", "arccos", "arctan", "sinh", "cosh", "sigmoid", "relu", "erf", "reciprocal",
           "square", "sign", "floor", "ceil", "round", "trunc", "clamp", "clip", "where", "clone"]

_Number = (int, float, bool, complex)


def _promote(*xs):
    """Cast operands to PyTorch's result type (decided at trace time).

    Also checks that the shapes broadcast, so a mismatch fails with PyTorch's wording.
    """
    broadcast_shapes(*(jnp.shape(x) for x in xs))
    dt = _dtype.result_type(*xs)
    return tuple(jnp.asarray(x, dt) if isinstance(x, _Number) else x.astype(dt) for x in xs)


def _float_promote(x):
    """Integer inputs of float functions (exp, sin, ...) compute in the default dtype."""
    return x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(_dtype.get_default_dtype().np)


def _check_operand(x, opname, arg="other"):
    if isinstance(x, np.generic):  # NumPy scalars act as Python numbers (wrapped numbers in PyTorch)
        return x.item()
    if not isinstance(x, (Tensor,) + _Number):
        raise TypeError(f"{opname}(): argument '{arg}' must be Tensor, not {type_name(x)}")
    return x


def _is_integral(x):
    """Whether a tensor or Python scalar is of an integral type (bool included), as PyTorch's integer rules see it."""
    if isinstance(x, Tensor):
        return not (x.dtype.is_floating_point or x.dtype.is_complex)
    return isinstance(x, int)


_ZERO_DIV = "ZeroDivisionError"  # PyTorch's whole message for integer division by zero on the CPU


def _check_int_division(a, b):
    """PyTorch raises ``RuntimeError("ZeroDivisionError")`` for an integer ``//``, ``%``, ``fmod`` or rounding
    ``div`` by zero on the CPU. A Python-scalar divisor is checked at once; a tensor divisor only where its
    values are already on the host (a CPU tensor holding an array, not a pending result in "auto" mode or a
    GPU tensor): reading those costs no device sync. Float division is never checked (it gives inf/nan)."""
    if not (_is_integral(a) and _is_integral(b)):
        return
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        broadcast_shapes(tuple(a.shape), tuple(b.shape))  # PyTorch reports a shape mismatch first
    if isinstance(b, Tensor):
        if b.dtype is _dtype.bool or not _host_has_zero(b):
            return
    elif b != 0:
        return
    raise RuntimeError(_ZERO_DIV)


def _host_has_zero(t):
    v = host_values(t)
    if v is None:  # on the device or pending: checked beside the kernel, reported at the next host sync
        check_values(t, "nonzero", lambda _: RuntimeError(_ZERO_DIV), "integer division")
        return False
    return not v.all()


_NEG_POW = "Integers to negative integer powers are not allowed."


def _check_int_pow(base, exponent):
    """An integral tensor to a negative Python-integer power: PyTorch's error (a tensor exponent is not checked:
    such elements give PyTorch's integer results, see ``_int_pow``)."""
    if type(exponent) is int and exponent < 0 and isinstance(base, Tensor) and _is_integral(base):
        raise RuntimeError(_NEG_POW)


# ---- binary arithmetic ---------------------------------------------------------
def _add_fwd(a, b):
    a, b = _promote(a, b)
    return a + b


def _add_bwd(ctx, g):
    return g, g


def _add_alpha_fwd(a, b, alpha):
    a, b = _promote(a, b)
    return a + b * jnp.asarray(alpha, a.dtype)


def _add_alpha_bwd(ctx, g):
    return g, g * ctx.saved[2], None


_BOOL_SUB = ("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying to invert a "
             "mask, use the `~` or `logical_not()` operator instead.")
_BOOL_NEG = ("Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, "
             "use the `~` or `logical_not()` operator instead.")


def _sub_fwd(a, b):
    if jnp.result_type(a) == jnp.bool_ or jnp.result_type(b) == jnp.bool_:  # sub() checks first (PyTorch's words)
        raise RuntimeError(_BOOL_SUB)
    a, b = _promote(a, b)
    return a - b


def _neg_fwd(a):
    if a.dtype == jnp.bool_:
        raise RuntimeError(_BOOL_NEG)
    return jnp.negative(a)


def _sub_bwd(ctx, g):
    return g, -g


def _mul_fwd(a, b):
    a, b = _promote(a, b)
    return a * b


def _mul_bwd(ctx, g):
    a, b = ctx.saved
    return (g * jnp.conj(b) if ctx.needs_input_grad[0] else None,
            g * jnp.conj(a) if ctx.needs_input_grad[1] else None)


def _div_fwd(a, b, rounding_mode=None):
    a, b = _promote(a, b)
    if rounding_mode is None:
        if not jnp.issubdtype(a.dtype, jnp.inexact):
            a, b = a.astype(_dtype.get_default_dtype().np), b.astype(_dtype.get_default_dtype().np)
        return a / b
    if rounding_mode == "trunc":
        if jnp.issubdtype(a.dtype, jnp.inexact):
            return jnp.trunc(a / b).astype(a.dtype)
        return jax.lax.div(*jnp.broadcast_arrays(a, b))
    if rounding_mode == "floor":
        return _floor_div_float(a, b) if jnp.issubdtype(a.dtype, jnp.inexact) else jnp.floor_divide(a, b)
    raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                       f"'{rounding_mode}'")


def _floor_div_float(a, b):
    """PyTorch's ``div_floor_floating`` (so infinities give NaN and zeros keep the quotient's sign, as there)."""
    a, b = jnp.broadcast_arrays(a, b)
    mod = jnp.fmod(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fl = jnp.floor(div)
    fl = jnp.where(div - fl > 0.5, fl + 1, fl)
    out = jnp.where(div != 0, fl, jnp.copysign(jnp.zeros_like(div), a / b))
    return jnp.where(b == 0, a / b, out)


def _div_bwd(ctx, g):
    a, b = ctx.saved
    if ctx.attrs.get("rounding_mode") is not None:
        return jnp.zeros_like(g), jnp.zeros_like(g)
    ga = g / b if ctx.needs_input_grad[0] else None
    gb = -g * a / (b * b) if ctx.needs_input_grad[1] else None
    return ga, gb


def _pow_fwd(a, b):
    a, b = _promote(a, b)
    if a.dtype == jnp.bool_:  # bool ** Python bool (a bool tensor ** a bool tensor is refused at the op)
        return a | ~b  # int ** 0.5 -> float, 2.0 ** int_tensor -> default float
    if jnp.issubdtype(a.dtype, jnp.integer):
        return _int_pow(a, b)
    return a ** b


def _int_pow(a, b):
    """Integer powers as PyTorch computes them: a negative exponent gives 1 for a base of 1, +-1 for -1, else 0
    (``jnp.power`` returns garbage there)."""
    out = _int_pow_nonneg(a, jnp.maximum(b, 0))
    if not jnp.issubdtype(b.dtype, jnp.signedinteger):
        return out
    one = jnp.ones((), a.dtype)
    neg = jnp.where(a == 1, one, jnp.where(a == -1, jnp.where(b % 2 == 0, one, -one), jnp.zeros((), a.dtype)))
    return jnp.where(b < 0, neg, out)


def _int_pow_nonneg(a, e):
    """``a ** e`` for integers ``e >= 0`` by square-and-multiply: overflow wraps modulo 2**bits, as PyTorch's
    (``jnp.power`` gives other values once it overflows)."""
    a, e = jnp.broadcast_arrays(a, e.astype(a.dtype))

    def step(_, state):
        result, base, e = state
        result = jnp.where(e & 1, result * base, result)
        return result, base * base, e >> 1
    return jax.lax.fori_loop(0, a.dtype.itemsize * 8, step, (jnp.ones_like(a), a, e))[0]


def _pow_bwd(ctx, g):
    a, b = _promote(*ctx.saved)
    ga = gb = None
    if ctx.needs_input_grad[0]:
        # b * a**(b-1), written so that b == 0 gives 0 even where a == 0 (no 0 * inf)
        ga = jnp.where(b == 0, 0, g * b * a ** jnp.where(b == 0, 1, b - 1))
    if ctx.needs_input_grad[1]:
        gb = g * jnp.where((a == 0) & (b >= 0), 0, a ** b * jnp.log(a))
    return ga, gb


def _extremum_bwd(lose_a):
    """PyTorch's maximum/minimum backward: half to each at a tie, nothing to the operand that lost; with a NaN
    neither lost, so both get the whole gradient."""
    def bwd(ctx, g):
        a, b = _promote(*ctx.saved)
        full = jnp.where(a == b, g / 2, g)
        zero = jnp.zeros((), g.dtype)
        return jnp.where(lose_a(a, b), zero, full), jnp.where(lose_a(b, a), zero, full)
    return bwd


_maximum_bwd = _extremum_bwd(lambda x, y: x < y)
_minimum_bwd = _extremum_bwd(lambda x, y: x > y)


ADD = Op("AddBackward0", _add_fwd, _add_bwd, save=())
ADD_ALPHA = Op("AddBackward0", _add_alpha_fwd, _add_alpha_bwd, save=(2,))
SUB = Op("SubBackward0", _sub_fwd, _sub_bwd, save=())
MUL = Op("MulBackward0", _mul_fwd, _mul_bwd, save=(0, 1))
DIV = Op("DivBackward0", _div_fwd, _div_bwd, save=(0, 1))
POW = Op("PowBackward0", _pow_fwd, _pow_bwd, save=(0, 1))
MAXIMUM = Op("MaximumBackward0", lambda a, b: jnp.maximum(*_promote(a, b)), _maximum_bwd, save=(0, 1))
MINIMUM = Op("MinimumBackward0", lambda a, b: jnp.minimum(*_promote(a, b)), _minimum_bwd, save=(0, 1))


def _mod_bwd(rounding):
    """PyTorch's: ``g`` to the dividend, ``-g * (a / b rounded)`` to the divisor (floor for remainder, trunc for
    fmod)."""
    def bwd(ctx, g):
        a, b = _promote(*ctx.saved)
        q = _floor_div_float(a, b) if rounding == "floor" else jnp.trunc(a / b)
        return (g if ctx.needs_input_grad[0] else None, -g * q if ctx.needs_input_grad[1] else None)
    return bwd


REMAINDER = Op("RemainderBackward0", lambda a, b: jnp.remainder(*_promote(a, b)), _mod_bwd("floor"), save=(0, 1))
REMAINDER_SCALAR = Op("RemainderBackward1", lambda a, b: jnp.remainder(*_promote(a, b)),
                      lambda ctx, g: _no_derivative("remainder")(ctx, g), save=())
FMOD = Op("FmodBackward0", lambda a, b: jnp.fmod(*_promote(a, b)), _mod_bwd("trunc"), save=(0, 1))
ATAN2 = Op("Atan2Backward0", lambda a, b: jnp.arctan2(*_promote(*map(_float_promote_any, (a, b)))))


def _float_promote_any(x):
    return x if isinstance(x, _Number) else _float_promote(x)


def _check_bool_sub(a, b):
    if isinstance(a, Tensor) and a.dtype is _dtype.bool and isinstance(b, Tensor) and b.dtype is _dtype.bool:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                           "`logical_xor()` operator instead.")
    if (isinstance(a, Tensor) and a.dtype is _dtype.bool) or (isinstance(b, Tensor) and b.dtype is _dtype.bool):
        raise RuntimeError(_BOOL_SUB)


def _check_alpha(input, other, alpha):
    if isinstance(alpha, float) and _is_integral(input) and _is_integral(other):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def add(input, other, *, alpha=1):
    """``input + alpha * other`` with PyTorch's type promotion."""
    expect_tensor(input, "add")
    if alpha != 1:
        _check_alpha(input, other, alpha)
    if alpha == 1:
        return call(ADD, input, _check_operand(other, "add"))
    return call(ADD_ALPHA, input, _check_operand(other, "add"), alpha)


def sub(input, other, *, alpha=1):
    expect_tensor(input, "sub")
    _check_bool_sub(input, other)
    if alpha != 1:
        _check_alpha(input, other, alpha)
    if alpha == 1:
        return call(SUB, input, _check_operand(other, "sub"))
    return call(ADD_ALPHA, input, _check_operand(other, "sub"), -alpha)


def mul(input, other):
    expect_tensor(input, "mul")
    return call(MUL, input, _check_operand(other, "mul"))


def _check_rounding(rounding_mode):
    if rounding_mode not in (None, "trunc", "floor"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                           f"'{rounding_mode}'")


def div(input, other, *, rounding_mode=None):
    expect_tensor(input, "div")
    other = _check_operand(other, "div")
    _check_rounding(rounding_mode)
    if rounding_mode is None:
        return call(DIV, input, other)
    _check_int_division(input, other)
    return call(DIV, input, other, rounding_mode=rounding_mode)


true_divide = divide = div
multiply, subtract = mul, sub


def _no_derivative(name):
    def bwd(ctx, g):
        raise RuntimeError(f"derivative for aten::{name} is not implemented")
    return bwd


FLOOR_DIVIDE = Op("FloorDivideBackward0", lambda a, b: _div_fwd(a, b, "floor"), _no_derivative("floor_divide"),
                  save=())


def floor_divide(input, other):
    """``input // other`` (rounded toward -inf); PyTorch has no derivative for it."""
    expect_tensor(input, "floor_divide")
    other = _check_operand(other, "floor_divide")
    _check_int_division(input, other)
    return call(FLOOR_DIVIDE, input, other)


def pow(input, exponent):  # noqa: A001 - PyTorch's name
    input, exponent = _check_operand(input, "pow", "input"), _check_operand(exponent, "pow", "exponent")
    if not isinstance(input, Tensor):
        expect_tensor(exponent, "pow", "exponent", pos=None)
    _check_int_pow(input, exponent)
    _check_bool_pow(input, exponent)
    return call(POW, input, exponent)


def _check_bool_pow(base, exponent):
    if isinstance(base, Tensor) and isinstance(exponent, Tensor) and base.dtype is _dtype.bool and \
            exponent.dtype is _dtype.bool:
        broadcast_shapes(tuple(base.shape), tuple(exponent.shape))  # PyTorch reports a shape mismatch first
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")


def _binary(op, name, input, other):
    expect_tensor(input, name)
    return call(op, input, _check_operand(other, name))


def _tensors_only(op, name, input, other):
    """Binary ops whose ``other`` must be a tensor in PyTorch (``maximum(x, 2)`` is a TypeError)."""
    expect_tensor(input, name)
    expect_tensor(other, name, "other", pos=None)
    return call(op, input, other)


def maximum(input, other):
    return _tensors_only(MAXIMUM, "maximum", input, other)


def minimum(input, other):
    return _tensors_only(MINIMUM, "minimum", input, other)


def remainder(input, other):
    if not isinstance(input, Tensor):  # remainder(Scalar, Tensor)
        input = _check_operand(input, "remainder", "input")
        expect_tensor(other, "remainder", "other", pos=None)
    else:
        other = _check_operand(other, "remainder")
    _check_int_division(input, other)
    return call(REMAINDER if isinstance(input, Tensor) else REMAINDER_SCALAR, input, other)


def fmod(input, other):
    expect_tensor(input, "fmod")
    other = _check_operand(other, "fmod")
    _check_int_division(input, other)
    return call(FMOD, input, other)


def atan2(input, other):
    return _tensors_only(ATAN2, "atan2", input, other)


# ---- unary math ------------------------------------------------------------------
def _sign(a):
    """PyTorch's sign: 0 for NaN (and for -0.0), bool stays bool."""
    if a.dtype == jnp.bool_ or jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return a if a.dtype == jnp.bool_ else (a > 0).astype(a.dtype)
    return (a > 0).astype(a.dtype) - (a < 0).astype(a.dtype)


def _relu_fwd(a):
    if a.dtype == jnp.bool_:
        raise RuntimeError("Boolean inputs not supported for relu")
    return jnp.where(a < 0, jnp.zeros((), a.dtype), a)  # relu(-0.0) is -0.0 and relu(nan) nan, as PyTorch's


def _abs_fwd(a):
    if a.dtype == jnp.bool_:
        raise NotImplementedError("\"abs_cpu\" not implemented for 'Bool'")
    return jnp.abs(a)


def _unary(name, fwd, bwd=None, save=(0,), save_outputs=False, float_only=True):
    f = (lambda a: fwd(_float_promote(a))) if float_only else fwd
    return Op(name, f, bwd, save=save if bwd is not None else None, save_outputs=save_outputs)


NEG = _unary("NegBackward0", _neg_fwd, lambda ctx, g: (-g,), save=(), float_only=False)
def _abs_bwd(ctx, g):
    z = ctx.saved[0]
    if jnp.iscomplexobj(z):  # PyTorch's complex convention: g * sgn(z), z / |z| (0 at 0)
        return (g * jnp.where(z == 0, 0, z / jnp.where(z == 0, 1, jnp.abs(z))),)
    return (g * _sign(z).astype(g.dtype),)


ABS = _unary("AbsBackward0", lambda a: _abs_fwd(a), _abs_bwd, float_only=False)
EXP = _unary("ExpBackward0", jnp.exp, lambda ctx, g: (g * ctx.outputs[0],), save=(), save_outputs=True)
LOG = _unary("LogBackward0", jnp.log, lambda ctx, g: (g / ctx.saved[0],))
LOG2 = _unary("Log2Backward0", jnp.log2, lambda ctx, g: (g / (ctx.saved[0] * jnp.log(2.0)),))
LOG10 = _unary("Log10Backward0", jnp.log10, lambda ctx, g: (g / (ctx.saved[0] * jnp.log(10.0)),))
LOG1P = _unary("Log1PBackward0", jnp.log1p, lambda ctx, g: (g / (1 + ctx.saved[0]),))
EXPM1 = _unary("Expm1Backward0", jnp.expm1, lambda ctx, g: (g * (ctx.outputs[0] + 1),), save=(), save_outputs=True)
SQRT = _unary("SqrtBackward0", jnp.sqrt, lambda ctx, g: (g / (2 * ctx.outputs[0]),), save=(), save_outputs=True)
RSQRT = _unary("RsqrtBackward0", jax.lax.rsqrt, lambda ctx, g: (-0.5 * g * ctx.outputs[0] ** 3,), save=(),
               save_outputs=True)
SIN = _unary("SinBackward0", jnp.sin, lambda ctx, g: (g * jnp.cos(ctx.saved[0]),))
COS = _unary("CosBackward0", jnp.cos, lambda ctx, g: (-g * jnp.sin(ctx.saved[0]),))
TAN = _unary("TanBackward0", jnp.tan, lambda ctx, g: (g * (1 + ctx.outputs[0] ** 2),), save=(), save_outputs=True)
TANH = _unary("TanhBackward0", jnp.tanh, lambda ctx, g: (g * (1 - ctx.outputs[0] ** 2),), save=(), save_outputs=True)
SIGMOID = _unary("SigmoidBackward0", jax.nn.sigmoid,
                 lambda ctx, g: (g * ctx.outputs[0] * (1 - ctx.outputs[0]),), save=(), save_outputs=True)
RELU = _unary("ReluBackward0", lambda a: _relu_fwd(a), lambda ctx, g: (jnp.where(ctx.outputs[0] <= 0, 0, g),),
              save=(), save_outputs=True, float_only=False)
ASIN = _unary("AsinBackward0", jnp.arcsin)
ACOS = _unary("AcosBackward0", jnp.arccos)
ATAN = _unary("AtanBackward0", jnp.arctan)
SINH = _unary("SinhBackward0", jnp.sinh)
COSH = _unary("CoshBackward0", jnp.cosh)
ERF = _unary("ErfBackward0", jax.scipy.special.erf)
RECIPROCAL = _unary("ReciprocalBackward0", jnp.reciprocal,
                    lambda ctx, g: (-g * ctx.outputs[0] ** 2,), save=(), save_outputs=True)
SQUARE = _unary("PowBackward0", lambda a: jnp.square(a.astype(jnp.int64) if a.dtype == jnp.bool_ else a),
                lambda ctx, g: (2 * g * ctx.saved[0],), float_only=False)
SIGN = Op("SignBackward0", lambda a: _sign(a), lambda ctx, g: (jnp.zeros_like(g),), save=())


def _rounding(name, fn):
    """floor/ceil/trunc/round: integers pass through, bool is refused (``"floor_vml_cpu" not implemented for
    'Bool'``), as PyTorch's kernels."""
    def fwd(a, **kw):
        if a.dtype == jnp.bool_:
            raise NotImplementedError(f"\"{name}_vml_cpu\" not implemented for 'Bool'")
        return a if jnp.issubdtype(a.dtype, jnp.integer) else fn(a, **kw)
    return fwd


FLOOR = Op("FloorBackward0", _rounding("floor", jnp.floor), lambda ctx, g: (jnp.zeros_like(g),), save=())
CEIL = Op("CeilBackward0", _rounding("ceil", jnp.ceil), lambda ctx, g: (jnp.zeros_like(g),), save=())
ROUND = Op("RoundBackward0", _rounding("round", lambda a, decimals=0: jnp.round(a, decimals)),
           lambda ctx, g: (jnp.zeros_like(g),), save=())
TRUNC = Op("TruncBackward0", _rounding("trunc", jnp.trunc), lambda ctx, g: (jnp.zeros_like(g),), save=())


def _clamp_fwd(a, lo, hi):
    # PyTorch promotes with the bounds: clamp(int_tensor, min=1.5) is a float tensor
    dt = _dtype.result_type(*(x for x in (a, lo, hi) if x is not None))
    out = a.astype(dt)
    if lo is not None:
        out = jnp.maximum(out, jnp.asarray(lo).astype(dt))
    if hi is not None:
        out = jnp.minimum(out, jnp.asarray(hi).astype(dt))
    return out


def _clamp_bwd(ctx, g):
    a, lo, hi = ctx.saved
    keep = jnp.ones(a.shape, bool)
    if lo is not None:
        keep = keep & (a >= lo)
    if hi is not None:
        keep = keep & (a <= hi)
    crossed = (lo > hi) if lo is not None and hi is not None else False  # the result is max where min > max
    glo = jnp.where((a < lo) & ~crossed, g, 0) if ctx.needs_input_grad[1] else None
    ghi = jnp.where((a > hi) | crossed, g, 0) if ctx.needs_input_grad[2] else None
    return jnp.where(keep, g, 0), glo, ghi


CLAMP = Op("ClampBackward1", _clamp_fwd, _clamp_bwd, save=(0, 1, 2))


def _check_bounds(min, max):  # noqa: A002
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    for arg, v in (("min", min), ("max", max)):
        if v is not None and not isinstance(v, (Tensor,) + _Number + (np.generic,)):
            raise TypeError(f"clamp(): argument '{arg}' must be Number or Tensor, not {type_name(v)}")


def clamp(input, min=None, max=None):  # noqa: A002
    expect_tensor(input, "clamp")
    _check_bounds(min, max)
    return call(CLAMP, input, min, max)


clip = clamp


def _where_fwd(cond, a, b):
    a, b = _promote(a, b)
    return jnp.where(cond, a, b)


def _where_bwd(ctx, g):
    cond = ctx.saved[0]
    return None, jnp.where(cond, g, 0), jnp.where(cond, 0, g)


WHERE = Op("WhereBackward0", _where_fwd, _where_bwd, save=(0,))


def where(condition, input=None, other=None):
    """Elementwise select; ``where(condition)`` alone returns the indices of True entries."""
    expect_tensor(condition, "where", "condition", pos=None)
    if input is None and other is None:
        from .indexing import nonzero
        return nonzero(condition, as_tuple=True)
    if condition.dtype is not _dtype.bool and condition.dtype is not _dtype.uint8:
        raise RuntimeError(f"where expected condition to be a boolean tensor, but got a tensor with dtype "
                           f"{scalar_type_name(condition.dtype)}")
    input, other = _check_operand(input, "where", "input"), _check_operand(other, "where")
    cs = condition.shape  # the shapes broadcast as PyTorch's TensorIterator folds them (its wording), at the op
    xs = input.shape if isinstance(input, Tensor) else ()
    ys = other.shape if isinstance(other, Tensor) else ()
    if not (cs == xs == ys):
        broadcast_shapes(cs, xs, ys)
    return call(WHERE, condition, input, other)


CLONE = Op("CloneBackward0", lambda a: a, lambda ctx, g: (g,), save=())


def clone(input, *, memory_format=None):
    """A copy with its own version counter; differentiable."""
    expect_tensor(input, "clone")
    return call(CLONE, input)


# ---- public unary functions and Tensor methods --------------------------------------------
def _unary_fn(op, name):
    """``jg.<name>(input)``: a tensor is required (PyTorch's ``TypeError`` otherwise). The Tensor method
    (``f._method``) skips that check: its ``self`` is a tensor."""
    def f(input):
        if not isinstance(input, Tensor):
            expect_tensor(input, name)
        return call(op, input)

    def method(self):
        return call(op, self)

    f.__name__ = f.__qualname__ = name
    f._method = method
    return f


neg, negative = _unary_fn(NEG, "neg"), _unary_fn(NEG, "negative")
abs, absolute = _unary_fn(ABS, "abs"), _unary_fn(ABS, "absolute")  # noqa: A001
exp, log, log2, log10 = _unary_fn(EXP, "exp"), _unary_fn(LOG, "log"), _unary_fn(LOG2, "log2"), _unary_fn(LOG10, "log10")
log1p, expm1 = _unary_fn(LOG1P, "log1p"), _unary_fn(EXPM1, "expm1")
sqrt, rsqrt = _unary_fn(SQRT, "sqrt"), _unary_fn(RSQRT, "rsqrt")
sin, cos, tan, tanh = _unary_fn(SIN, "sin"), _unary_fn(COS, "cos"), _unary_fn(TAN, "tan"), _unary_fn(TANH, "tanh")
asin, acos, atan = _unary_fn(ASIN, "asin"), _unary_fn(ACOS, "acos"), _unary_fn(ATAN, "atan")
sinh, cosh = _unary_fn(SINH, "sinh"), _unary_fn(COSH, "cosh")
arcsin, arccos, arctan = _unary_fn(ASIN, "arcsin"), _unary_fn(ACOS, "arccos"), _unary_fn(ATAN, "arctan")
sigmoid, relu, erf = _unary_fn(SIGMOID, "sigmoid"), _unary_fn(RELU, "relu"), _unary_fn(ERF, "erf")
reciprocal, square = _unary_fn(RECIPROCAL, "reciprocal"), _unary_fn(SQUARE, "square")
sign, floor, ceil, trunc = (_unary_fn(SIGN, "sign"), _unary_fn(FLOOR, "floor"), _unary_fn(CEIL, "ceil"),
                            _unary_fn(TRUNC, "trunc"))


def round(input, *, decimals=0):  # noqa: A001 - PyTorch's name
    expect_tensor(input, "round")
    if decimals:
        refuse("round_cpu", input, "bi")
    return call(ROUND, input, decimals=int(decimals)) if decimals else call(ROUND, input)


@tensor_method("round_")
def round_(self, *, decimals=0):
    if decimals:
        refuse("round_cpu", self, "bi")
    return call_inplace(ROUND, self, decimals=int(decimals)) if decimals else call_inplace(ROUND, self)


for _name, _fn in dict(
        neg=neg, negative=neg, abs=abs, absolute=abs, exp=exp, log=log, log2=log2, log10=log10, log1p=log1p,
        expm1=expm1, sqrt=sqrt, rsqrt=rsqrt, sin=sin, cos=cos, tan=tan, tanh=tanh, asin=asin, acos=acos,
        atan=atan, arcsin=asin, arccos=acos, arctan=atan, sinh=sinh, cosh=cosh, sigmoid=sigmoid, relu=relu,
        erf=erf, reciprocal=reciprocal, square=square, sign=sign, floor=floor, ceil=ceil, round=round,
        trunc=trunc, add=add, sub=sub, mul=mul, div=div, true_divide=div, divide=div,
        multiply=mul, subtract=sub, floor_divide=floor_divide, pow=pow, maximum=maximum, minimum=minimum,
        remainder=remainder, fmod=fmod, atan2=atan2, clamp=clamp, clip=clamp,
        clone=clone, where=lambda self, cond, other: where(cond, self, other),
).items():
    tensor_method(_name)(getattr(_fn, "_method", _fn))


# ---- operators -------------------------------------------------------------------------
def _binop(op, reflected=False, check=None, **attrs):
    """A Python operator: NumPy scalars act as Python numbers; other types are NotImplemented. ``check(a, b)``
    runs before the dispatch (``//``, ``%`` and ``**``, whose integer forms PyTorch checks: division by zero,
    negative powers)."""
    key = tuple(attrs.items())
    operand_types = (Tensor,) + _Number

    def method(self, other):
        if isinstance(other, np.generic):
            other = other.item()
        if not isinstance(other, operand_types):
            return NotImplemented
        args = (other, self) if reflected else (self, other)
        if check is not None:
            check(*args)
        return call_keyed(op, args, key, attrs, None)
    return method


for _name, _op, _attrs in (("add", ADD, {}), ("mul", MUL, {}), ("truediv", DIV, {})):
    setattr(Tensor, f"__{_name}__", _binop(_op, **_attrs))
    setattr(Tensor, f"__r{_name}__", _binop(_op, True, **_attrs))
Tensor.__sub__, Tensor.__rsub__ = _binop(SUB, check=_check_bool_sub), _binop(SUB, True, check=_check_bool_sub)
for _name, _op, _check, _attrs in (("floordiv", FLOOR_DIVIDE, _check_int_division, {}),
                                   ("mod", REMAINDER, _check_int_division, {}), ("pow", POW, _check_int_pow, {})):
    setattr(Tensor, f"__{_name}__", _binop(_op, check=_check, **_attrs))
    setattr(Tensor, f"__r{_name}__", _binop(_op, True, check=_check, **_attrs))
Tensor.__rmod__ = _binop(REMAINDER_SCALAR, True, check=_check_int_division)  # Scalar % Tensor: no derivative
Tensor.__neg__ = lambda self: call(NEG, self)


def _pos(self):
    if self.dtype is _dtype.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


Tensor.__pos__ = _pos
Tensor.__abs__ = lambda self: call(ABS, self)
Tensor.__array_priority__ = 1000  # ndarray + Tensor defers to Tensor.__radd__, as with PyTorch
