"""Comparisons and logic (never differentiable): ``eq ne lt le gt ge``, ``logical_*``, ``bitwise_*``,
``isnan isinf isfinite``, ``allclose isclose equal``, and the operators ``== != < <= > >= & | ^ ~``.

Imports ``_dispatch``, ``_tensor`` and the elementwise helpers of ``ops.pointwise`` (``_promote``,
``_binary``, ``_unary_fn``, ``_binop``).
"""
from __future__ import annotations

import builtins

import jax.numpy as jnp

from .._dispatch import Op, call
from .._tensor import Tensor
from ._registry import tensor_method
from .pointwise import _binary, _binop, _promote, _unary_fn

__all__ = ["eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not",
           "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "isnan", "isinf", "isfinite", "allclose",
           "isclose", "equal"]


def _cmp(name, fn):
    return Op(name, lambda a, b: fn(*_promote(a, b)), differentiable=False)


EQ, NE = _cmp("eq", jnp.equal), _cmp("ne", jnp.not_equal)
LT, LE = _cmp("lt", jnp.less), _cmp("le", jnp.less_equal)
GT, GE = _cmp("gt", jnp.greater), _cmp("ge", jnp.greater_equal)
LOGICAL_AND = Op("logical_and", lambda a, b: jnp.logical_and(a, b), differentiable=False)
LOGICAL_OR = Op("logical_or", lambda a, b: jnp.logical_or(a, b), differentiable=False)
LOGICAL_XOR = Op("logical_xor", lambda a, b: jnp.logical_xor(a, b), differentiable=False)
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
    return builtins.bool(call(ALLCLOSE, a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return call(ISCLOSE, a, b, rtol=rtol, atol=atol, equal_nan=equal_nan)


def equal(a, b) -> builtins.bool:
    return a.shape == b.shape and builtins.bool(call(EQ, a, b).all())


def logical_and(a, b):
    return _binary(LOGICAL_AND, "logical_and", a, b)


def logical_or(a, b):
    return _binary(LOGICAL_OR, "logical_or", a, b)


def logical_xor(a, b):
    return _binary(LOGICAL_XOR, "logical_xor", a, b)


def bitwise_and(a, b):
    return _binary(BITWISE_AND, "bitwise_and", a, b)


def bitwise_or(a, b):
    return _binary(BITWISE_OR, "bitwise_or", a, b)


def bitwise_xor(a, b):
    return _binary(BITWISE_XOR, "bitwise_xor", a, b)


logical_not, bitwise_not = _unary_fn(LOGICAL_NOT, "logical_not"), _unary_fn(BITWISE_NOT, "bitwise_not")
isnan, isinf, isfinite = _unary_fn(ISNAN, "isnan"), _unary_fn(ISINF, "isinf"), _unary_fn(ISFINITE, "isfinite")


for _name, _fn in dict(
        logical_not=logical_not, isnan=isnan, isinf=isinf, isfinite=isfinite, bitwise_not=bitwise_not, eq=eq,
        ne=ne, lt=lt, le=le, gt=gt, ge=ge, logical_and=logical_and, logical_or=logical_or,
        logical_xor=logical_xor, bitwise_and=bitwise_and, bitwise_or=bitwise_or, bitwise_xor=bitwise_xor,
        allclose=allclose, isclose=isclose, equal=equal,
).items():
    tensor_method(_name)(getattr(_fn, "_method", _fn))


# ---- operators -------------------------------------------------------------------------
for _name, _op in (("eq", EQ), ("ne", NE), ("lt", LT), ("le", LE), ("gt", GT), ("ge", GE),
                   ("and", BITWISE_AND), ("or", BITWISE_OR), ("xor", BITWISE_XOR)):
    setattr(Tensor, f"__{_name}__", _binop(_op))
for _name, _op in (("and", BITWISE_AND), ("or", BITWISE_OR), ("xor", BITWISE_XOR)):
    setattr(Tensor, f"__r{_name}__", _binop(_op, True))
Tensor.__invert__ = lambda self: call(BITWISE_NOT, self)  # logical not on bool tensors
Tensor.__hash__ = object.__hash__  # tensors hash by identity, though == is elementwise (as in PyTorch)
