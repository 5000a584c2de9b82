"""In-place arithmetic with fused kernels: ``add_ sub_ mul_ div_ pow_ clamp_ fill_ zero_`` and the in-place
unary math (``exp_ sin_ relu_ ...``), each the out-of-place op's kernel run through ``call_inplace``, and the
in-place ``+= -= *= /=`` operators. (Ops without a fused kernel get their ``_`` form from ``ops.inplace``.)

Imports ``_dispatch``, ``_tensor``, ``ops._registry`` and ``ops.pointwise``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..runtime._dispatch import Op, call_inplace
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, tensor_method
from .pointwise import (ABS, ADD, ADD_ALPHA, CEIL, CLAMP, COS, DIV, EXP, EXPM1, FLOOR, LOG, LOG1P, MUL, NEG, POW,
                        RECIPROCAL, RELU, RSQRT, SIGMOID, SIGN, SIN, SQRT, SQUARE, SUB, TANH, TRUNC, _check_alpha,
                        _check_bool_pow, _check_bool_sub, _check_bounds, _check_int_division, _check_int_pow,
                        _check_operand, _check_rounding)


def _check_inplace_other(other, name):
    return _check_operand(other, name)


@tensor_method("add_")
def add_(self, other, *, alpha=1):
    if alpha != 1:
        _check_alpha(self, other, alpha)
    if alpha == 1:
        return call_inplace(ADD, self, _check_inplace_other(other, "add_"))
    return call_inplace(ADD_ALPHA, self, other, alpha)


@tensor_method("sub_")
def sub_(self, other, *, alpha=1):
    _check_bool_sub(self, other)
    if alpha != 1:
        _check_alpha(self, other, alpha)
    if alpha == 1:
        return call_inplace(SUB, self, _check_inplace_other(other, "sub_"))
    return call_inplace(ADD_ALPHA, self, other, -alpha)


@tensor_method("mul_")
def mul_(self, other):
    return call_inplace(MUL, self, _check_inplace_other(other, "mul_"))


@tensor_method("div_")
def div_(self, other, *, rounding_mode=None):
    other = _check_operand(other, "div_")
    _check_rounding(rounding_mode)
    if rounding_mode is None:
        return call_inplace(DIV, self, other)
    _check_int_division(self, other)
    return call_inplace(DIV, self, other, rounding_mode=rounding_mode)


@tensor_method("pow_")
def pow_(self, exponent):
    exponent = _check_operand(exponent, "pow_", "exponent")
    if isinstance(exponent, Tensor) and tuple(exponent.shape) != tuple(self.shape):
        shape = broadcast_shapes(tuple(self.shape), tuple(exponent.shape))
        if shape != tuple(self.shape):  # PyTorch checks the output's shape first
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    _check_int_pow(self, exponent)
    _check_bool_pow(self, exponent)
    return call_inplace(POW, self, exponent)


_CPP_NAMES = {"int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char", "uint8": "unsigned char",
              "bool": "bool"}


@tensor_method("clamp_", "clip_")
def clamp_(self, min=None, max=None):  # noqa: A002
    _check_bounds(min, max)
    if self.dtype.name in _CPP_NAMES and any(isinstance(v, float) for v in (min, max)):
        raise RuntimeError(f"result type Float can't be cast to the desired output type {_CPP_NAMES[self.dtype.name]}")
    return call_inplace(CLAMP, self, min, max)


FILL = Op("FillBackward0", lambda a, v: jnp.broadcast_to(jnp.asarray(v, a.dtype), a.shape),
          lambda ctx, g: (None, g.sum() if ctx.needs_input_grad[1] else None), save=())
ZERO = Op("ZeroBackward0", lambda a: jnp.zeros_like(a), lambda ctx, g: (None,), save=())


@tensor_method("fill_")
def fill_(self, value):
    return call_inplace(FILL, self, value)


@tensor_method("zero_")
def zero_(self):
    return call_inplace(ZERO, self)


def _inplace_unary(op):
    return lambda self: call_inplace(op, self)


for _name, _op in (("neg_", NEG), ("abs_", ABS), ("exp_", EXP), ("log_", LOG), ("sqrt_", SQRT), ("sin_", SIN),
                   ("cos_", COS), ("tanh_", TANH), ("sigmoid_", SIGMOID), ("relu_", RELU), ("floor_", FLOOR),
                   ("ceil_", CEIL), ("reciprocal_", RECIPROCAL), ("rsqrt_", RSQRT),
                   ("log1p_", LOG1P), ("expm1_", EXPM1), ("square_", SQUARE), ("sign_", SIGN), ("trunc_", TRUNC)):
    tensor_method(_name)(_inplace_unary(_op))


def _inplace_accumulate(self, other):
    """``self += other`` without history (AccumulateGrad's in-place path)."""
    call_inplace(ADD, self, other)


Tensor._inplace_accumulate = _inplace_accumulate


Tensor.__iadd__ = lambda self, other: add_(self, other)
Tensor.__isub__ = lambda self, other: sub_(self, other)
Tensor.__imul__ = lambda self, other: mul_(self, other)
Tensor.__itruediv__ = lambda self, other: div_(self, other)
