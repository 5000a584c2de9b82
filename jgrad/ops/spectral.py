"""``torch.fft`` on ``jnp.fft``: fft/ifft/rfft/irfft/hfft/ihfft, their 2-D and n-D forms, fftfreq, rfftfreq,
fftshift and ifftshift, with ``n``/``s``, ``dim`` and ``norm`` as PyTorch takes them.

Dtypes as PyTorch's: integer and bool inputs compute in the default floating dtype, a float32 input gives
complex64 and float64 complex128; half precision is refused (JAX has no complex32). Gradients are ``jax.vjp``
of the transform in PyTorch's conjugate convention (``complex_ops.wirtinger_op``).

Imports ``_dispatch``, ``_tensor``, ``_dtype``, ``_device`` and ``ops`` (``_registry``, ``complex_ops``).
"""
from __future__ import annotations

import jax.numpy as jnp

from ..core import _dtype
from ..core._device import device as _device, get_default_device
from ..runtime._dispatch import Op, call, call_factory
from ._registry import as_index, check_new_shape, expect_tensor, scalar_type_name, wrap_dim
from .complex_ops import wirtinger_op

__all__ = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
           "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = (None, "backward", "ortho", "forward")


def _transform(kind, x, s, axes, norm, real_dtype):
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(real_dtype)
    if kind in ("irfftn", "hfft") and not jnp.issubdtype(x.dtype, jnp.complexfloating):
        x = x.astype(jnp.result_type(x.dtype, jnp.complex64))
    if kind == "hfft":
        return jnp.fft.hfft(x, s[0], axes[0], norm)
    if kind == "ihfft":
        return jnp.fft.ihfft(x, s[0], axes[0], norm)
    return getattr(jnp.fft, kind)(x, s, axes, norm)


FFT_OPS = {k: wirtinger_op(name, lambda x, s, axes, norm, real_dtype, _k=k: _transform(_k, x, s, axes, norm,
                                                                                          real_dtype))
           for k, name in (("fftn", "FftC2CBackward0"), ("ifftn", "FftC2CBackward0"), ("rfftn", "FftR2CBackward0"),
                           ("irfftn", "FftC2RBackward0"), ("hfft", "FftC2RBackward0"), ("ihfft", "FftR2CBackward0"))}


def _check_input(x, name, real_only):
    expect_tensor(x, name)
    if x.dtype in (_dtype.float16, _dtype.bfloat16):
        raise RuntimeError(f"Unsupported dtype {scalar_type_name(x.dtype)}")
    if real_only and x.dtype.is_complex:
        raise RuntimeError(f"{name} expects a real input tensor, but got {scalar_type_name(x.dtype)}")


def _check_norm(norm):
    if norm not in _NORMS:
        raise RuntimeError(f'Invalid normalization mode: "{norm}"')
    return norm or "backward"


def _points(n):
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    return n


def _one_dim(x, n, dim, name, c2r=False, real_only=False):
    _check_input(x, name, real_only)
    if x.ndim == 0:
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    d = wrap_dim(dim, x.ndim)
    if n is not None:
        n = _points(as_index(n, name, "n"))
    elif c2r:
        n = _points(2 * (x.shape[d] - 1))
    else:
        n = _points(x.shape[d])
    return n, d


def _run(kind, x, s, axes, norm):
    return call(FFT_OPS[kind], x, s=tuple(s), axes=tuple(axes), norm=_check_norm(norm),
                real_dtype=_dtype.get_default_dtype().np)


def _fft1(kind, name, c2r=False, real_only=False):
    def f(input, n=None, dim=-1, norm=None):
        n, d = _one_dim(input, n, dim, name, c2r, real_only)
        return _run(kind if kind in ("hfft", "ihfft") else kind + "n", input, (n,), (d,), norm)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.fft.{name}``: the one-dimensional transform of ``input`` along ``dim``."
    return f


fft, ifft = _fft1("fft", "fft"), _fft1("ifft", "ifft")
rfft, irfft = _fft1("rfft", "rfft", real_only=True), _fft1("irfft", "irfft", c2r=True)
hfft, ihfft = _fft1("hfft", "hfft", c2r=True), _fft1("ihfft", "ihfft", real_only=True)


def _dims_and_sizes(x, s, dim, name, c2r):
    """The transformed dimensions and their sizes, as PyTorch resolves ``s`` and ``dim`` (-1 in ``s``: keep)."""
    if s is not None and dim is not None and len(s) != len(dim):
        raise RuntimeError("When given, dim and shape arguments must have the same length")
    if s is not None and len(s) > x.ndim:
        raise RuntimeError(f"Got shape with {len(s)} values but input tensor only has {x.ndim} dimensions.")
    if dim is None:
        dims = list(range(x.ndim - len(s), x.ndim)) if s is not None else list(range(x.ndim))
    else:
        dims = [wrap_dim(d, x.ndim) for d in ((dim,) if isinstance(dim, int) else dim)]
    if len(set(dims)) != len(dims):
        raise RuntimeError("FFT dims must be unique")
    sizes = []
    for i, d in enumerate(dims):
        n = -1 if s is None else as_index(s[i], name, "s")
        if n == -1:
            n = 2 * (x.shape[d] - 1) if c2r and i == len(dims) - 1 else x.shape[d]
        sizes.append(_points(n))
    return sizes, dims


def _fftn(kind, name, default_dim=None, c2r=False, real_only=False):
    def f(input, s=None, dim=default_dim, norm=None):
        _check_input(input, name, real_only)
        sizes, dims = _dims_and_sizes(input, s, dim, name, c2r)
        return _run(kind, input, sizes, dims, norm)
    f.__name__ = f.__qualname__ = name
    f.__doc__ = f"``torch.fft.{name}``: the transform of ``input`` over ``dim`` (sizes ``s``)."
    return f


fft2, ifft2 = _fftn("fftn", "fft2", (-2, -1)), _fftn("ifftn", "ifft2", (-2, -1))
rfft2, irfft2 = _fftn("rfftn", "rfft2", (-2, -1), real_only=True), _fftn("irfftn", "irfft2", (-2, -1), c2r=True)
fftn, ifftn = _fftn("fftn", "fftn"), _fftn("ifftn", "ifftn")
rfftn, irfftn = _fftn("rfftn", "rfftn", real_only=True), _fftn("irfftn", "irfftn", c2r=True)

FFTFREQ = Op("fftfreq", lambda n, d, dtype, real: (jnp.fft.rfftfreq if real else jnp.fft.fftfreq)(n, d).astype(dtype),
             differentiable=False)


def _freq(name, n, d, dtype, device, requires_grad, real):
    n = as_index(n, name, "n")
    dt = _dtype.canonical(dtype)
    check_new_shape(((n // 2 + 1) if real and n >= 0 else n,), dt.itemsize, name)
    dev = _device(device) if device is not None else get_default_device()
    out = call_factory(FFTFREQ, dev, n=n, d=float(d), dtype=dt.np, real=real)
    return out.requires_grad_(True) if requires_grad else out


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """The sample frequencies of an n-point FFT with sample spacing ``d``."""
    return _freq("fftfreq", n, d, dtype, device, requires_grad, False)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False, layout=None, out=None):
    """The non-negative sample frequencies of an n-point ``rfft``."""
    return _freq("rfftfreq", n, d, dtype, device, requires_grad, True)


SHIFT = Op("RollBackward0", lambda x, axes, inverse: (jnp.fft.ifftshift if inverse else jnp.fft.fftshift)(x, axes),
           lambda ctx, g: ((jnp.fft.fftshift if ctx.attrs["inverse"] else jnp.fft.ifftshift)(g, ctx.attrs["axes"]),),
           save=())


def _shift(input, dim, name, inverse):
    expect_tensor(input, name)
    if dim is None:
        axes = tuple(range(input.ndim))
    else:
        axes = tuple(wrap_dim(d, input.ndim) for d in ((dim,) if isinstance(dim, int) else dim))
    return call(SHIFT, input, axes=axes, inverse=inverse)


def fftshift(input, dim=None):
    """Move the zero-frequency term to the centre of ``dim`` (all dimensions when None)."""
    return _shift(input, dim, "fftshift", False)


def ifftshift(input, dim=None):
    return _shift(input, dim, "ifftshift", True)

