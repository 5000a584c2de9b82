"""matmul, mm, bmm, einsum, linear; float32 matmul precision as PyTorch sets it."""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._dispatch import Op, call, clear_kernel_caches
from ._registry import tensor_method

_PRECISIONS = {"highest": jax.lax.Precision.HIGHEST, "high": jax.lax.Precision.DEFAULT,
               "medium": jax.lax.Precision.DEFAULT}
_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """'highest' (full float32, PyTorch's default), 'high' (TF32 allowed) or 'medium'."""
    if precision not in _PRECISIONS:
        raise RuntimeError(f"Invalid precision {precision!r}: expected one of 'highest', 'high', 'medium'")
    if precision != _precision[0]:
        _precision[0] = precision
        clear_kernel_caches()  # the precision is baked into compiled kernels


def get_float32_matmul_precision() -> str:
    return _precision[0]


def _prec():
    return _PRECISIONS[_precision[0]]


def _mm(a, b):
    return jnp.matmul(a, b, precision=_prec())


def _mt(x):
    return jnp.swapaxes(x, -1, -2)


def _matmul_bwd(ctx, g):
    a, b = ctx.saved
    need_a, need_b = ctx.needs_input_grad
    if a.ndim == 1 and b.ndim == 1:
        return (g * b if need_a else None, g * a if need_b else None)
    if a.ndim == 1:
        return (_mm(g[..., None, :], _mt(b))[..., 0, :] if need_a else None,
                a[:, None] * g[..., None, :] if need_b else None)
    if b.ndim == 1:
        return (g[..., :, None] * b if need_a else None,
                _mm(_mt(a), g[..., :, None])[..., 0] if need_b else None)
    return (_mm(g, _mt(b)) if need_a else None, _mm(_mt(a), g) if need_b else None)


def _linear_fwd(x, w, b=None):
    y = jnp.matmul(x, w.T, precision=_prec())
    return y + b if b is not None else y


def _linear_bwd(ctx, g):
    x, w, _ = ctx.saved
    need_x, need_w, need_b = ctx.needs_input_grad
    gx = _mm(g, w) if need_x else None
    gw = None
    if need_w:
        g2 = g.reshape(-1, g.shape[-1])
        x2 = x.reshape(-1, x.shape[-1])
        gw = _mm(g2.T, x2)
    gb = g.reshape(-1, g.shape[-1]).sum(0) if need_b else None
    return gx, gw, gb


MATMUL = Op("MmBackward0", _mm, _matmul_bwd, save=(0, 1))
LINEAR = Op("AddmmBackward0", _linear_fwd, _linear_bwd, save=(0, 1))
EINSUM = Op("EinsumBackward0", lambda *ops, equation: jnp.einsum(equation, *ops, precision=_prec()))


@tensor_method("matmul", "__matmul__")
def matmul(input, other):
    if input.ndim == 0 or other.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {input.ndim}D and "
                           f"{other.ndim}D")
    k1 = input.shape[-1]
    k2 = other.shape[-2] if other.ndim > 1 else other.shape[0]
    if k1 != k2:
        rows = input.shape[-2] if input.ndim > 1 else 1
        cols = other.shape[-1] if other.ndim > 1 else 1
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k1} and {k2}x{cols})")
    return call(MATMUL, input, other)


@tensor_method()
def mm(input, mat2):
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {input.ndim}D and {mat2.ndim}D")
    return matmul(input, mat2)


@tensor_method()
def bmm(input, mat2):
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor and batch2 must be a 3D tensor, got {input.ndim}D and "
                           f"{mat2.ndim}D")
    if input.shape[0] != mat2.shape[0]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{input.shape[0]}, "
                           f"{input.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}].")
    return matmul(input, mat2)


Tensor_rmatmul = None


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``torch.nn.functional.linear``)."""
    if input.shape[-1] != weight.shape[-1]:
        rows = 1
        for s in input.shape[:-1]:
            rows *= s
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{input.shape[-1]} and "
                           f"{weight.shape[-1]}x{weight.shape[0]})")
    return call(LINEAR, input, weight, bias)


def einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return call(EINSUM, *operands, equation=equation)


def dot(input, other):
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    return matmul(input, other)


tensor_method("dot")(dot)
