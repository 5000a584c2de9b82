"""The top-level and Tensor-method forms of ``torch.linalg`` functions (``torch.det``, ``Tensor.inverse``,
``torch.svd`` with its ``V``, ``torch.qr`` with ``some``, ``torch.cross`` with ``dim=None`` ...).

Imports ``ops`` (``_registry``, ``decompositions``, ``matrix_functions``, ``norms``).
"""
from __future__ import annotations

from collections import namedtuple

import jax
import jax.numpy as jnp

from ..runtime._dispatch import Op, call
from ._registry import broadcast_shapes, expect_tensor, scalar_type_name, tensor_method
from . import decompositions as _d, matrix_functions as _m, norms as _n

__all__ = ["det", "logdet", "slogdet", "inverse", "pinverse", "cholesky", "matrix_power", "matrix_exp", "cross",
           "svd", "qr", "cholesky_inverse", "cholesky_solve"]

_SVD = namedtuple("svd", ["U", "S", "V"])
_QR = namedtuple("qr", ["Q", "R"])

det, slogdet, logdet = _d.det, _d.slogdet, _d.logdet
inverse, matrix_power, matrix_exp = _d.inv, _m.matrix_power, _m.matrix_exp
cross = _n.cross_legacy


def pinverse(input, rcond=1e-15):
    """``linalg.pinv`` with PyTorch's older default cutoff (``rcond=1e-15``, relative)."""
    return _m.pinv(input, rtol=rcond)


def cholesky(input, upper=False):
    return _d.cholesky(input, upper=upper)


def svd(input, some=True, compute_uv=True):
    """``(U, S, V)`` with ``input = U diag(S) V^H`` (V, not Vh); ``some=False`` gives the full U and V."""
    U, S, Vh = _d.svd(input, full_matrices=not some)
    V = Vh.mT.conj() if Vh.dtype.is_complex else Vh.mT
    if not compute_uv:  # PyTorch returns zero-filled U and V
        U, V = U.detach() * 0, V.detach() * 0
    return _SVD(U, S, V)


def qr(input, some=True):
    return _QR(*_d.qr(input, mode="reduced" if some else "complete"))


def _mH(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _cho_solve(b, low, upper):
    batch = jnp.broadcast_shapes(b.shape[:-2], low.shape[:-2])
    b, low = jnp.broadcast_to(b, batch + b.shape[-2:]), jnp.broadcast_to(low, batch + low.shape[-2:])
    solve = jax.lax.linalg.triangular_solve
    if upper:  # A = U^H U
        return solve(low, solve(low, b, left_side=True, lower=False, transpose_a=True, conjugate_a=True),
                     left_side=True, lower=False)
    return solve(low, solve(low, b, left_side=True, lower=True), left_side=True, lower=True, transpose_a=True,
                 conjugate_a=True)


def _cholesky_solve_bwd(ctx, g):
    # PyTorch's formula (cholesky_solve_backward): the factor's gradient is a full matrix.
    _, low = ctx.saved
    upper, x = ctx.attrs["upper"], ctx.outputs[0]
    gb = _cho_solve(g, low, upper)
    common = gb @ _mH(x)
    common = common + _mH(common)
    gl = -(low @ common) if upper else -(common @ low)
    return gb, gl


CHOLESKY_SOLVE = Op("CholeskySolveBackward0", _cho_solve, _cholesky_solve_bwd, save=(1,), save_outputs=True)


def cholesky_solve(B, L, upper=False):
    """The solution of ``A X = B`` given the Cholesky factor of ``A`` (lower, or upper with ``upper=True``)."""
    expect_tensor(B, "cholesky_solve")
    expect_tensor(L, "cholesky_solve", "input2", pos=2)
    if B.ndim < 2 or L.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead" if B.ndim < 2
                           else f"u should have at least 2 dimensions, but has {L.ndim} dimensions instead")
    if B.dtype is not L.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type "
                           f"{scalar_type_name(B.dtype)} and A of type {scalar_type_name(L.dtype)} instead.")
    _d.check_matrix(L, "cholesky_solve", arg="A", square=True)
    broadcast_shapes(tuple(B.shape[:-2]), tuple(L.shape[:-2]))
    return call(CHOLESKY_SOLVE, B, L, upper=bool(upper))


def cholesky_inverse(L, upper=False):
    """The inverse of ``A`` given its Cholesky factor."""
    from .creation import eye
    n = L.shape[-1]
    return cholesky_solve(eye(n, dtype=L.dtype, device=L.device).expand(*L.shape), L, upper)


for _name, _fn in dict(det=det, logdet=logdet, slogdet=slogdet, inverse=inverse, pinverse=pinverse,
                       cholesky=cholesky, matrix_power=matrix_power, matrix_exp=matrix_exp, cross=cross, svd=svd,
                       qr=qr, cholesky_solve=cholesky_solve, cholesky_inverse=cholesky_inverse).items():
    tensor_method(_name)(_fn)
