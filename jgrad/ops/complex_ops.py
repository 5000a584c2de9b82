"""Complex numbers: ``real``/``imag`` (as values), ``view_as_real``/``view_as_complex``, ``conj``, ``angle``,
``sgn``, ``polar``, ``complex``, ``is_complex``; and ``wirtinger_op``, the op builder the math families
(linalg, fft, special) use so that a gradient derived with ``jax.vjp`` follows PyTorch's convention.

Note [Conjugate Wirtinger gradients]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
For a real loss L of a complex z = x + iy, PyTorch's gradient is dL/dx + i dL/dy (the conjugate
Wirtinger derivative, times 2), so gradient descent is ``z -= lr * z.grad``. JAX's cotangents are the
conjugates of those (``jax.grad(lambda z: abs(z) ** 2)(z)`` is ``2 * conj(z)``). A backward derived with
``jax.vjp`` is therefore conjugated on the way in and on the way out: PyTorch's vjp is
``conj(jax_vjp(conj(g)))``. On real values both conjugations are the identity, so the same formula serves
real and complex inputs, and mixed ones (``rfft``: real in, complex out).

``real``, ``imag``, ``view_as_real`` and ``conj`` return new tensors here, not views of their input (an
in-place op through them does not reach the input); see docs/differences.md.

Imports ``_dispatch``, ``_tensor``, ``_dtype``, ``ops._registry`` and ``ops.pointwise`` (its sign).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import expect_tensor, scalar_type_name, tensor_method
from .pointwise import _sign as _real_sign

__all__ = ["real", "imag", "view_as_real", "view_as_complex", "conj", "conj_physical", "resolve_conj",
           "resolve_neg", "is_conj", "angle", "sgn", "polar", "complex", "is_complex", "is_floating_point"]


def wirtinger_vjp(forward):
    """A backward formula for ``forward`` from ``jax.vjp``, in PyTorch's convention (Note [Conjugate Wirtinger
    gradients]); integer outputs get float0 cotangents."""
    def backward(ctx, *grads):
        primals = list(ctx.saved)
        idx = [i for i, need in enumerate(ctx.needs_input_grad) if need]

        def partial(*diff):
            full = list(primals)
            for j, i in enumerate(idx):
                full[i] = diff[j]
            return forward(*full, **ctx.attrs)

        out, vjp = jax.vjp(partial, *[primals[i] for i in idx])
        outs = out if isinstance(out, tuple) else (out,)
        cts = tuple(jnp.conj(g) if jnp.issubdtype(o.dtype, jnp.inexact) else np.zeros(o.shape, jax.dtypes.float0)
                    for g, o in zip(grads, outs))
        res = vjp(cts if isinstance(out, tuple) else cts[0])
        full = [None] * len(primals)
        for j, i in enumerate(idx):
            full[i] = jnp.conj(res[j])
        return full
    return backward


def wirtinger_op(name, forward, **kw):
    """An ``Op`` whose backward is ``jax.vjp`` of ``forward`` in PyTorch's convention; every input is saved."""
    op = Op(name, forward, **kw)  # no formula: the door saves every input ("all")
    op.backward = wirtinger_vjp(forward)
    return op


def _sgn(z):
    if not jnp.issubdtype(z.dtype, jnp.complexfloating):
        return _real_sign(z)  # PyTorch's sign: 0 for NaN
    nz = z != 0
    return jnp.where(nz, z / jnp.where(nz, jnp.abs(z), 1).astype(z.dtype), 0).astype(z.dtype)  # differentiable


_NO_COMPLEX32 = ("{}: jgrad has no complex32 (JAX has no 16-bit complex type); convert the {} tensor to float32 "
                 "first")
REAL = wirtinger_op("RealBackward0", jnp.real)
IMAG = wirtinger_op("ImagBackward0", jnp.imag)
VIEW_AS_REAL = wirtinger_op("ViewAsRealBackward0", lambda z: jnp.stack([jnp.real(z), jnp.imag(z)], axis=-1))
VIEW_AS_COMPLEX = wirtinger_op("ViewAsComplexBackward0", lambda x: jax.lax.complex(x[..., 0], x[..., 1]))
CONJ = Op("ConjBackward0", jnp.conj, lambda ctx, g: (jnp.conj(g),), save=())
def _angle(z):
    if jnp.iscomplexobj(z):
        return jnp.angle(z)
    x = z if jnp.issubdtype(z.dtype, jnp.inexact) else z.astype(_dtype.get_default_dtype().np)
    # PyTorch's real angle: pi below zero, 0 at +-0.0, NaN kept; a constant (its gradient is 0)
    return jax.lax.stop_gradient(jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0).astype(x.dtype)))


ANGLE = wirtinger_op("AngleBackward0", _angle)
SGN = wirtinger_op("SgnBackward0", _sgn)
POLAR = wirtinger_op("PolarBackward0", lambda r, t: jax.lax.complex(r * jnp.cos(t), r * jnp.sin(t)))
COMPLEX = wirtinger_op("ComplexBackward0", lambda re, im: jax.lax.complex(re, im))


def _real(self):
    if not self.dtype.is_complex:
        return self  # PyTorch returns the tensor itself
    return call(REAL, self)


def _imag(self):
    if not self.dtype.is_complex:
        raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")
    return call(IMAG, self)


def real(input):
    """The real part of a complex tensor (a new tensor; the input itself when it is real)."""
    return _real(expect_tensor(input, "real"))


def imag(input):
    """The imaginary part of a complex tensor (a new tensor)."""
    return _imag(expect_tensor(input, "imag"))


Tensor.real = property(_real)
Tensor.imag = property(_imag)


@tensor_method()
def view_as_real(input):
    """A complex tensor as a real one with a last dimension of 2 (real, imaginary); a new tensor in jgrad."""
    expect_tensor(input, "view_as_real")
    if not input.dtype.is_complex:
        raise RuntimeError("view_as_real is only supported for complex tensors")
    return call(VIEW_AS_REAL, input)


@tensor_method()
def view_as_complex(input):
    """A float32/float64 tensor whose last dimension is 2 as a complex tensor; a new tensor in jgrad."""
    expect_tensor(input, "view_as_complex")
    if input.dtype is _dtype.float16:
        raise RuntimeError(_NO_COMPLEX32.format("view_as_complex", "Half"))
    if input.dtype not in (_dtype.float32, _dtype.float64):
        raise RuntimeError(f"view_as_complex is only supported for half, float and double tensors, but got a tensor "
                           f"of scalar type: {scalar_type_name(input.dtype)}")
    if input.ndim == 0:
        raise RuntimeError("Input tensor must have one or more dimensions")
    if input.shape[-1] != 2:
        raise RuntimeError("Tensor must have a last dimension of size 2")
    return call(VIEW_AS_COMPLEX, input)


@tensor_method()
def conj(input):
    """The complex conjugate (the input itself when it is real, as PyTorch's lazy ``conj``)."""
    expect_tensor(input, "conj")
    return call(CONJ, input) if input.dtype.is_complex else input


@tensor_method()
def conj_physical(input):
    expect_tensor(input, "conj_physical")
    return call(CONJ, input) if input.dtype.is_complex else input


@tensor_method()
def resolve_conj(input):
    """The input itself: jgrad's ``conj`` is never lazy, so there is no conjugate bit to resolve."""
    return input


resolve_neg = resolve_conj
tensor_method("resolve_neg")(resolve_conj)


@tensor_method()
def is_conj(input) -> bool:
    """Always False: jgrad's ``conj`` computes the conjugate (no lazy conjugate bit)."""
    return False


@tensor_method()
def angle(input):
    """The argument of each element (for real input: 0 or pi, in the default floating dtype for integers)."""
    expect_tensor(input, "angle")
    return call(ANGLE, input)


@tensor_method()
def sgn(input):
    """``z / abs(z)`` (0 where z is 0); for real input, ``sign``."""
    expect_tensor(input, "sgn")
    return call(SGN, input)


def polar(abs, angle):  # noqa: A002 - PyTorch's names
    """The complex tensor ``abs * (cos(angle) + i sin(angle))``."""
    _check_parts(abs, angle, "polar")
    return call(POLAR, abs, angle)


def complex(real, imag):  # noqa: A001 - PyTorch's name
    """The complex tensor ``real + i imag`` of two floating tensors of the same dtype."""
    _check_parts(real, imag, "complex")
    return call(COMPLEX, real, imag)


def _check_parts(a, b, name):
    expect_tensor(a, name, "real" if name == "complex" else "abs")
    expect_tensor(b, name, "imag" if name == "complex" else "angle", pos=2)
    if a.dtype is not b.dtype:
        raise RuntimeError(f"Expected object of scalar type {scalar_type_name(a.dtype)} but got scalar type "
                           f"{scalar_type_name(b.dtype)} for second argument")
    if a.dtype not in (_dtype.float32, _dtype.float64, _dtype.float16):
        raise RuntimeError(f"Expected both inputs to be Half, Float or Double tensors but got "
                           f"{scalar_type_name(a.dtype)} and {scalar_type_name(b.dtype)}")
    if a.dtype is _dtype.float16:
        raise RuntimeError(_NO_COMPLEX32.format(name, "Half"))


def is_complex(input) -> bool:
    return expect_tensor(input, "is_complex").dtype.is_complex


def is_floating_point(input) -> bool:
    return expect_tensor(input, "is_floating_point").dtype.is_floating_point
