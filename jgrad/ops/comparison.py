"""Comparisons and logic (never differentiable): ``eq ne lt le gt ge``, ``logical_*``, ``bitwise_*``,
``isnan isinf isfinite``, ``allclose isclose equal``, and the operators ``== != < <= > >= & | ^ ~``.

Imports ``_dispatch``, ``_dtype``, ``_tensor``, ``ops._registry`` and the elementwise helpers of
``ops.pointwise`` (``_promote``, ``_binary``, ``_unary_fn``, ``_binop``). Bitwise ops refuse floating operands as
PyTorch's kernels do (after the shapes broadcast, naming the promoted type).
"""
from __future__ import annotations

import builtins

import jax.numpy as jnp

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, expect_tensor, refuse, scalar_type_name, tensor_method
from ..core import _dtype
from .pointwise import _binary, _binop, _check_operand, _promote, _unary_fn

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
           "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite", "allclose",
           "isclose", "equal"]


def _cmp(name, fn):
    return Op(name, lambda a, b: fn(*_promote(a, b)), differentiable=False)


EQ, NE = _cmp("eq", jnp.equal), _cmp("ne", jnp.not_equal)
LT, LE = _cmp("lt", jnp.less), _cmp("le", jnp.less_equal)
GT, GE = _cmp("gt", jnp.greater), _cmp("ge", jnp.greater_equal)


def _logical(fn):
    def fwd(a, b):
        broadcast_shapes(jnp.shape(a), jnp.shape(b))  # PyTorch's wording, not JAX's ValueError
        return fn(a, b)
    return fwd


LOGICAL_AND = Op("logical_and", _logical(jnp.logical_and), differentiable=False)
LOGICAL_OR = Op("logical_or", _logical(jnp.logical_or), differentiable=False)
LOGICAL_XOR = Op("logical_xor", _logical(jnp.logical_xor), differentiable=False)
LOGICAL_NOT = Op("logical_not", jnp.logical_not, differentiable=False)
BITWISE_AND = Op("bitwise_and", lambda a, b: jnp.bitwise_and(*_promote(a, b)), differentiable=False)
BITWISE_OR = Op("bitwise_or", lambda a, b: jnp.bitwise_or(*_promote(a, b)), differentiable=False)
BITWISE_XOR = Op("bitwise_xor", lambda a, b: jnp.bitwise_xor(*_promote(a, b)), differentiable=False)
BITWISE_NOT = Op("bitwise_not", jnp.invert, differentiable=False)
ISNAN = Op("isnan", jnp.isnan, differentiable=False)
ISINF = Op("isinf", jnp.isinf, differentiable=False)
ISFINITE = Op("isfinite", jnp.isfinite, differentiable=False)


def eq(a, b):
    return _binary(EQ, "eq", a, b)


def ne(a, b):
    return _binary(NE, "ne", a, b)


def lt(a, b):
    return _binary(LT, "lt", a, b)


def le(a, b):
    return _binary(LE, "le", a, b)


def gt(a, b):
    return _binary(GT, "gt", a, b)


def ge(a, b):
    return _binary(GE, "ge", a, b)


def _allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return jnp.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


ALLCLOSE = Op("allclose", _allclose, differentiable=False)
ISCLOSE = Op("isclose", lambda a, b, rtol=1e-05, atol=1e-08, equal_nan=False:
             jnp.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan), differentiable=False)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> builtins.bool:
    expect_tensor(a, "allclose")
    expect_tensor(b, "allclose", "other", pos=None)
    return builtins.bool(isclose(a, b, rtol, atol, equal_nan).all())


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    expect_tensor(a, "isclose")
    expect_tensor(b, "isclose", "other", pos=None)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"{scalar_type_name(a.dtype)} did not match {scalar_type_name(b.dtype)}")
    broadcast_shapes(tuple(a.shape), tuple(b.shape))
    return call(ISCLOSE, a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def equal(a, b) -> builtins.bool:
    expect_tensor(a, "equal")
    expect_tensor(b, "equal", "other", pos=None)
    return a.shape == b.shape and builtins.bool(call(EQ, a, b).all())


def _tensor_pair(op, name, a, b):
    expect_tensor(a, name)
    expect_tensor(b, name, "other", pos=None)
    return call(op, a, b)


def logical_and(a, b):
    return _tensor_pair(LOGICAL_AND, "logical_and", a, b)


def logical_or(a, b):
    return _tensor_pair(LOGICAL_OR, "logical_or", a, b)


def logical_xor(a, b):
    return _tensor_pair(LOGICAL_XOR, "logical_xor", a, b)


def _bitwise(op, name, a, b):
    """Integers and bool only: PyTorch's kernels refuse floats (``"bitwise_and_cpu" not implemented for 'Float'``)."""
    expect_tensor(a, name)
    b = _check_operand(b, name)
    if isinstance(b, Tensor):
        broadcast_shapes(tuple(a.shape), tuple(b.shape))  # PyTorch reports a shape mismatch first
    dt = _dtype.from_np(_dtype.result_type(_Proxy(a), b if not isinstance(b, Tensor) else _Proxy(b)))
    if dt.is_floating_point or dt.is_complex:  # the kernel runs in the promoted type, which it lacks
        raise NotImplementedError(f"\"{name}_cpu\" not implemented for '{scalar_type_name(dt)}'")
    return call(op, a, b)


class _Proxy:
    """A tensor's shape and dtype as ``_dtype.result_type`` reads operands."""

    def __init__(self, t):
        self.ndim, self.dtype = t.ndim, t.dtype.np


def bitwise_and(a, b):
    return _bitwise(BITWISE_AND, "bitwise_and", a, b)


def bitwise_or(a, b):
    return _bitwise(BITWISE_OR, "bitwise_or", a, b)


def bitwise_xor(a, b):
    return _bitwise(BITWISE_XOR, "bitwise_xor", a, b)


def bitwise_not(a):
    expect_tensor(a, "bitwise_not")
    refuse("bitwise_not_cpu", a, "f")
    return call(BITWISE_NOT, a)


logical_not = _unary_fn(LOGICAL_NOT, "logical_not")
isnan, isinf, isfinite = _unary_fn(ISNAN, "isnan"), _unary_fn(ISINF, "isinf"), _unary_fn(ISFINITE, "isfinite")


for _name, _fn in dict(
        logical_not=logical_not, isnan=isnan, isinf=isinf, isfinite=isfinite, bitwise_not=bitwise_not, eq=eq,
        ne=ne, lt=lt, le=le, gt=gt, ge=ge, logical_and=logical_and, logical_or=logical_or,
        logical_xor=logical_xor, bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor,
        allclose=allclose, isclose=isclose, equal=equal,
).items():
    tensor_method(_name)(getattr(_fn, "_method", _fn))


# ---- operators -------------------------------------------------------------------------
for _name, _op in (("eq", EQ), ("ne", NE), ("lt", LT), ("le", LE), ("gt", GT), ("ge", GE)):
    setattr(Tensor, f"__{_name}__", _binop(_op))


def _bit_operator(fn, reflected=False):
    def method(self, other):
        if not isinstance(other, (Tensor, int, bool, float)):
            return NotImplemented
        return fn(other, self) if reflected and isinstance(other, Tensor) else fn(self, other)
    return method


for _name, _fn in (("and", bitwise_and), ("or", bitwise_or), ("xor", bitwise_xor)):
    setattr(Tensor, f"__{_name}__", _bit_operator(_fn))
    setattr(Tensor, f"__r{_name}__", _bit_operator(_fn, True))
Tensor.__invert__ = lambda self: bitwise_not(self)  # logical not on bool tensors
Tensor.__hash__ = object.__hash__  # tensors hash by identity, though == is elementwise (as in PyTorch)
