"""matmul, mm, bmm, einsum, linear; float32 matmul precision as PyTorch sets it.

Imports ``_dispatch``, ``_tensor`` and ``ops._registry``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..runtime import _dispatch
from ..runtime._dispatch import Op, call, clear_kernel_caches
from ..core._tensor import Tensor
from ._registry import broadcast_shapes, expect_tensor, scalar_type_name, tensor_method

_PRECISIONS = {"highest": jax.lax.Precision.HIGHEST, "high": jax.lax.Precision.HIGH,
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


def _matmul_op(name):
    return Op(name, _mm, _matmul_bwd, save=(0, 1))


# PyTorch names the node after the kernel matmul dispatches to
MATMUL_OPS = {(1, 1): _matmul_op("DotBackward0"), (2, 1): _matmul_op("MvBackward0"),
              (2, 2): _matmul_op("MmBackward0"), (1, 2): _matmul_op("SqueezeBackward4")}
MATMUL_ND = _matmul_op("UnsafeViewBackward0")
BMM = _matmul_op("BmmBackward0")
LINEAR = Op("AddmmBackward0", _linear_fwd, _linear_bwd, save=(0, 1))
LINEAR_NOBIAS = Op("MmBackward0", _linear_fwd, _linear_bwd, save=(0, 1))
EINSUM = Op("EinsumBackward0", lambda *ops, equation: jnp.einsum(equation, *ops, precision=_prec()))


def _prod(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# C++ type names, as in PyTorch's "expected m1 and m2 to have the same dtype, but got: float != double"
_CPP_NAMES = {"float32": "float", "float64": "double", "float16": "c10::Half", "bfloat16": "c10::BFloat16",
              "int64": "long int", "int32": "int", "int16": "short int", "int8": "signed char",
              "uint8": "unsigned char", "bool": "bool", "complex64": "c10::complex<float>",
              "complex128": "c10::complex<double>"}


def _autocast(op, *args):
    """The arguments as an open autocast region casts them for ``op``: PyTorch casts before its kernels check
    their dtypes, so ``linear(bf16, f32)`` inside ``autocast`` is fine."""
    hook = _dispatch.autocast_hook[0]
    return args if hook is None else hook(op, args)


def _check_same_dtype(a, b, batched=False):
    """PyTorch's matmul kernels do not promote: mixed dtypes are an error."""
    if a.dtype is b.dtype:
        return
    sparse = [t for t in (a, b) if getattr(t, "_sparse_call", None) is not None]  # ops.sparse_coo, ops.sparse_csr
    if len(sparse) == 2:
        raise RuntimeError(f"mat1 dtype {scalar_type_name(a.dtype)} does not match mat2 dtype "
                           f"{scalar_type_name(b.dtype)}")
    if sparse:  # PyTorch's sparse kernels name the sparse operand's type first
        dense = b if sparse[0] is a else a
        raise RuntimeError(f"expected scalar type {scalar_type_name(sparse[0].dtype)} but found "
                           f"{scalar_type_name(dense.dtype)}")
    if a.ndim == 1 and b.ndim == 1:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found {scalar_type_name(a.dtype)} "
                           f"and {scalar_type_name(b.dtype)}")
    if batched:
        raise RuntimeError(f"expected scalar type {scalar_type_name(a.dtype)} but found {scalar_type_name(b.dtype)}")
    raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_CPP_NAMES[a.dtype.name]} != "
                       f"{_CPP_NAMES[b.dtype.name]}")


def _check_matmul(a, b):
    """PyTorch's checks and wording for each matmul case (1-D, 2-D, batched)."""
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.ndim}D and {b.ndim}D")
    _check_same_dtype(a, b, batched=b.ndim > 2)
    k1, k2 = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    if a.ndim == 1 and b.ndim == 1:
        if k1 != k2:
            raise RuntimeError(f"inconsistent tensor size, expected tensor [{k1}] and src [{k2}] to have the same "
                               f"number of elements, but got {k1} and {k2} elements respectively")
    elif b.ndim == 1:
        if k1 != k2:
            rows = _prod(a.shape[:-1])
            raise RuntimeError(f"size mismatch, got input ({rows}), mat ({rows}x{k1}), vec ({k2})")
    elif b.ndim == 2:
        if k1 != k2:
            rows = _prod(a.shape[:-1])
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({rows}x{k1} and {k2}x{b.shape[-1]})")
    else:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
        if k1 != k2:
            n = _prod(batch)
            raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{n}, {k1}] but "
                               f"got: [{n}, {k2}].")


@tensor_method()
def matmul(input, other):
    if not isinstance(input, Tensor):
        expect_tensor(input, "matmul")
    if not isinstance(other, Tensor):
        expect_tensor(other, "matmul", "other", pos=None)
    op = MATMUL_OPS.get((input.ndim, other.ndim), MATMUL_ND)
    input, other = _autocast(op, input, other)
    _check_matmul(input, other)
    return call(op, input, other)


def _matmul_operator(self, other):
    return matmul(self, other) if isinstance(other, Tensor) else NotImplemented


Tensor.__matmul__ = _matmul_operator


Tensor.__rmatmul__ = lambda self, other: matmul(other, self) if isinstance(other, Tensor) else NotImplemented


@tensor_method()
def mm(input, mat2):
    if input.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if mat2.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    return matmul(input, mat2)


@tensor_method()
def bmm(input, mat2):
    if input.ndim != 3:
        raise RuntimeError("batch1 must be a 3D tensor")
    if mat2.ndim != 3:
        raise RuntimeError("batch2 must be a 3D tensor")
    if input.shape[0] != mat2.shape[0] or input.shape[2] != mat2.shape[1]:
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{input.shape[0]}, "
                           f"{input.shape[2]}] but got: [{mat2.shape[0]}, {mat2.shape[1]}].")
    input, mat2 = _autocast(BMM, input, mat2)
    _check_same_dtype(input, mat2, batched=True)
    return call(BMM, input, mat2)


def linear(input, weight, bias=None):
    """``input @ weight.T + bias`` (``torch.nn.functional.linear``)."""
    if input.shape[-1] != weight.shape[-1]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_prod(input.shape[:-1])}x{input.shape[-1]} "
                           f"and {weight.shape[-1]}x{weight.shape[0]})")
    input, weight, bias = _autocast(LINEAR if bias is not None else LINEAR_NOBIAS, input, weight, bias)
    _check_same_dtype(input, weight)
    if bias is not None and bias.dtype is not input.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {scalar_type_name(bias.dtype)} and "
                           f"{scalar_type_name(input.dtype)}")
    if bias is None:
        return call(LINEAR_NOBIAS, input, weight, None)
    return call(LINEAR, input, weight, bias)


def einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    einsum_check(equation, operands)
    for op in operands[1:]:
        if op.dtype is not operands[0].dtype:
            raise RuntimeError(f"expected scalar type {scalar_type_name(operands[0].dtype)} but found "
                               f"{scalar_type_name(op.dtype)}")
    if len(operands) == 1 and _sums_a_subscript(equation) and not operands[0].is_floating_point() \
            and not operands[0].is_complex():
        # one operand with a summed subscript is a sum in PyTorch, which widens integers and bool to int64
        operands = (operands[0].to(_dtype.int64),)
    return call(EINSUM, *operands, equation=equation)


def _sums_a_subscript(equation):
    eq = equation.replace(" ", "").replace("...", "")
    lhs, _, rhs = eq.partition("->")
    out = rhs if "->" in eq else "".join(c for c in lhs if lhs.count(c) == 1)
    return bool(set(lhs.replace(",", "")) - set(out))


def dot(input, other):
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D tensors")
    return matmul(input, other)


def einsum_check(equation, operands):
    """PyTorch's wording when a subscript's sizes disagree (jnp.einsum's own error is opaque)."""
    lhs = equation.replace(" ", "").split("->")[0].split(",")
    if len(lhs) != len(operands):
        raise RuntimeError("einsum(): more operands were provided than specified in the equation"
                           if len(operands) > len(lhs) else
                           "einsum(): fewer operands were provided than specified in the equation")
    seen = {}
    for k, (subs, op) in enumerate(zip(lhs, operands)):
        if "." in subs:
            continue
        if len(subs) != op.ndim:
            raise RuntimeError(f"einsum(): the number of subscripts in the equation ({len(subs)}) does not match "
                               f"the number of dimensions ({op.ndim}) for operand {k} and no ellipsis was given")
        for c, n in zip(subs, op.shape):
            if c in seen and n != seen[c] and 1 not in (n, seen[c]):
                raise RuntimeError(f"einsum(): subscript {c} has size {n} for operand {k} which does not broadcast "
                                   f"with previously seen size {seen[c]}")
            seen.setdefault(c, n)


tensor_method("dot")(dot)
