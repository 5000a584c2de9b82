"""``torch.linalg``'s factorizations and solvers on ``jnp.linalg``/``jax.scipy.linalg``: inv, solve, det, slogdet,
cholesky, eigh, eigvalsh, qr, svd, svdvals, pinv, lstsq, matrix_rank, matrix_power, matrix_exp (batched over the
leading dimensions), with PyTorch's argument checks and wording.

Gradients are ``jax.vjp`` of the forward in PyTorch's convention (``complex_ops.wirtinger_op``), except inv and
solve, whose formulas reuse the saved result. Values that PyTorch checks by reading LAPACK's ``info`` (a
singular matrix for inv and solve, a matrix that is not positive-definite for cholesky) are checked beside the
kernel with ``_checks.check_range``: at once for a CPU tensor already computed, else at the next host
synchronization (Note [Deferred checks] in ``jgrad/runtime/_checks.py``).

Imports ``_dispatch``, ``_tensor``, ``_dtype``, ``_checks`` and ``ops`` (``_registry``, ``complex_ops``).
"""
from __future__ import annotations

from collections import namedtuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from ..core import _dtype
from ..runtime._checks import check_range
from ..runtime._dispatch import Op, call
from ._registry import broadcast_shapes, expect_tensor, scalar_type_name
from .complex_ops import wirtinger_op


class _LinAlgError(RuntimeError):
    """A matrix the factorization cannot handle (singular, not positive-definite): ``torch.linalg.LinAlgError``
    (whose class is named ``_LinAlgError`` in PyTorch too)."""


LinAlgError = _LinAlgError


SVD = namedtuple("linalg_svd", ["U", "S", "Vh"])
EIGH = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
QR = namedtuple("linalg_qr", ["Q", "R"])
SLOGDET = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
LSTSQ = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])


# ---- argument checks, worded as PyTorch's ---------------------------------------------
def check_float(A, name, low_precision=True):
    if not (A.dtype.is_floating_point or A.dtype.is_complex):
        raise RuntimeError(f"{name}: Expected a floating point or complex tensor as input. Got "
                           f"{scalar_type_name(A.dtype)}")
    if low_precision and A.dtype in (_dtype.float16, _dtype.bfloat16):
        raise RuntimeError(f"{name}: Low precision dtypes not supported. Got {scalar_type_name(A.dtype)}")


def check_matrix(A, name, arg="A", square=False, floating=True):
    expect_tensor(A, name.split(".")[-1], arg)
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor {arg} must have at least 2 dimensions.")
    if floating:
        check_float(A, name)
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")


def _mH(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


# ---- singular and not-positive-definite inputs: LAPACK's info, checked beside the kernel ------------
def _first_zero_pivot(lu):
    """Per matrix: -1 when no diagonal element of U is zero, else ``batch_index * n + i`` (i the first zero)."""
    n = lu.shape[-1]
    zero = jnp.diagonal(lu, axis1=-2, axis2=-1) == 0
    first = jnp.argmax(zero, axis=-1)
    batch = jnp.arange(int(np.prod(lu.shape[:-2], dtype=np.int64))).reshape(lu.shape[:-2])
    return jnp.where(jnp.any(zero, axis=-1), batch * n + first, -1).astype(jnp.int64)


def _report(code, A, message, op):
    """Raise (CPU, computed) or defer a ``LinAlgError`` for the first matrix whose ``code`` is not -1."""
    n, batched = A.shape[-1], A.ndim > 2

    def make_error(bad):
        b, i = divmod(int(bad), n)
        prefix = f"(Batch element {b}): " if batched else ""
        return LinAlgError(message(prefix, i + 1))
    check_range(code, -1, 0, make_error, op)


def _inv_fwd(a):
    lu, piv = jsl.lu_factor(a)
    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return jsl.lu_solve((lu, piv), eye), _first_zero_pivot(lu)


def _inv_bwd(ctx, g, _g_code):
    inv_h = _mH(ctx.outputs[0])
    return (-(inv_h @ g @ inv_h),)


INV = Op("LinalgInvExBackward0", _inv_fwd, _inv_bwd, save=(), save_outputs=True, num_outputs=2)


def inv(A):
    """The inverse of each square matrix of ``A``; a singular one raises ``LinAlgError`` (see module docstring)."""
    check_matrix(A, "linalg.inv", square=True)
    out, code = call(INV, A)
    _report(code, A, lambda p, i: f"linalg.inv: {p}The diagonal element {i} is zero, the inversion could not be "
                                  "completed because the input matrix is singular.", "linalg.inv")
    return out


def _solve_fwd(a, b, vector, left):
    if not left:  # X A = B  <=>  A^T X^T = B^T
        a, b = jnp.swapaxes(a, -1, -2), jnp.swapaxes(b, -1, -2)
    lu, piv = jsl.lu_factor(a)
    bb = b[..., None] if vector else b
    bb = jnp.broadcast_to(bb, a.shape[:-2] + bb.shape[-2:]) if bb.ndim < a.ndim else bb
    lu_b = jnp.broadcast_to(lu, bb.shape[:-2] + lu.shape[-2:])
    piv_b = jnp.broadcast_to(piv, bb.shape[:-2] + piv.shape[-1:])
    x = jsl.lu_solve((lu_b, piv_b), bb)
    x = x[..., 0] if vector else x
    return (x if left else jnp.swapaxes(x, -1, -2)), _first_zero_pivot(lu)


def _solve_bwd(ctx, g, _g_code):
    a, _b = ctx.saved
    vector, left = ctx.attrs["vector"], ctx.attrs["left"]
    x = ctx.outputs[0]
    if not left:
        a, g, x = jnp.swapaxes(a, -1, -2), jnp.swapaxes(g, -1, -2), jnp.swapaxes(x, -1, -2)
    gv, xv = (g[..., None], x[..., None]) if vector else (g, x)
    gb = jnp.linalg.solve(jnp.broadcast_to(_mH(a), gv.shape[:-2] + a.shape[-2:]), gv)
    ga = -(gb @ _mH(xv))
    gb = gb[..., 0] if vector else gb
    if not left:
        ga, gb = jnp.swapaxes(ga, -1, -2), jnp.swapaxes(gb, -1, -2)
    return ga, gb


SOLVE = Op("LinalgSolveExBackward0", _solve_fwd, _solve_bwd, save=(0, 1), save_outputs=True, num_outputs=2)


def _is_vector_rhs(A, B):
    return B.ndim == 1 or (B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def solve(A, B, *, left=True):
    """The solution X of ``A X = B`` (``X A = B`` with ``left=False``); B may be a (batch of) vector(s)."""
    check_matrix(A, "linalg.solve", square=True)
    expect_tensor(B, "solve", "B", pos=2)
    if A.dtype is not B.dtype:
        raise RuntimeError(f"linalg.solve: Expected A and B to have the same dtype, but found A of type "
                           f"{scalar_type_name(A.dtype)} and B of type {scalar_type_name(B.dtype)} instead")
    vector = left and _is_vector_rhs(A, B)
    bm = tuple(B.shape) + (1,) if vector else tuple(B.shape)
    n = A.shape[-1]
    if (bm[-2] if left else bm[-1]) != n or len(bm) < 2:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation {eq} ({n}x{n} and "
                           f"{bm[-2]}x{bm[-1]})")
    broadcast_shapes(tuple(A.shape[:-2]), bm[:-2])
    x, code = call(SOLVE, A, B, vector=vector, left=bool(left))
    _report(code, A, lambda p, i: f"torch.linalg.solve: {p}The solver failed because the input matrix is singular.",
            "linalg.solve")
    return x


DET = wirtinger_op("LinalgDetBackward0", jnp.linalg.det)
SLOGDET_OP = wirtinger_op("LinalgSlogdetBackward0", lambda a: tuple(jnp.linalg.slogdet(a)), num_outputs=2)


def det(A):
    """The determinant of each square matrix of ``A``."""
    check_matrix(A, "linalg.det", square=True)
    return call(DET, A)


def slogdet(A):
    """``(sign, logabsdet)`` of the determinant (sign is complex for complex input)."""
    check_matrix(A, "linalg.slogdet", square=True)
    return SLOGDET(*call(SLOGDET_OP, A))


def _logdet_fwd(a):
    sign, logabs = jnp.linalg.slogdet(a)
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
        return jnp.log(sign) + logabs
    return jnp.where(sign < 0, jnp.nan, logabs)  # PyTorch: NaN for a negative determinant, -inf for zero


LOGDET = wirtinger_op("LogdetBackward0", _logdet_fwd)


def logdet(input):
    """``log(det(input))``: NaN where the determinant is negative."""
    check_matrix(input, "linalg.det", square=True)
    return call(LOGDET, input)


# ---- cholesky ----------------------------------------------------------------------
def _not_pd_order(a):
    """The order (1-based) of the first leading minor that is not positive-definite, from Gaussian elimination
    without pivoting (its pivots are the leading minors' ratios); only run when the factorization failed."""
    n = a.shape[-1]

    def body(k, carry):
        m, first = carry
        d = jnp.real(m[..., k, k])
        first = jnp.where((first == 0) & ~(d > 0), k + 1, first)
        col = m[..., :, k] / jnp.where(d > 0, d, 1).astype(m.dtype)[..., None]
        return m - col[..., :, None] * m[..., k, None, :], first

    _, first = jax.lax.fori_loop(0, n, body, (a, jnp.zeros(a.shape[:-2], jnp.int64)))
    return first


def hermitian(a, upper=False):
    """The Hermitian matrix PyTorch reads from one triangle of ``a`` (the lower, or the upper). Its gradient is the
    Hermitian part of the gradient, half to each triangle, as PyTorch's eigh-based backward formulas give
    (``(a + a^H) / 2`` carries the gradient; its value adds exactly 0)."""
    tri = jnp.triu(a) if upper else jnp.tril(a)
    herm = tri + _mH(jnp.triu(a, 1) if upper else jnp.tril(a, -1))
    sym = (a + _mH(a)) / 2
    return jax.lax.stop_gradient(herm) + (sym - jax.lax.stop_gradient(sym))


def _cholesky_fwd(a, upper):
    tri = jnp.triu(a) if upper else jnp.tril(a)
    herm = tri + _mH(jnp.triu(a, 1) if upper else jnp.tril(a, -1))
    low = jax.lax.linalg.cholesky(herm, symmetrize_input=False)
    failed = jnp.isnan(jnp.real(jnp.diagonal(low, axis1=-2, axis2=-1))).any(axis=-1)
    order = jax.lax.cond(jnp.any(failed), _not_pd_order, lambda m: jnp.zeros(m.shape[:-2], jnp.int64), herm)
    n = a.shape[-1]
    batch = jnp.arange(int(np.prod(a.shape[:-2], dtype=np.int64))).reshape(a.shape[:-2])
    code = jnp.where(failed & (order > 0), batch * n + order - 1, -1).astype(jnp.int64)
    return (_mH(low) if upper else low), code


def _cholesky_bwd(ctx, g, _g_code):
    # PyTorch's formula (FunctionsManual.cpp, cholesky_backward); for complex input its gradient is not Hermitian.
    upper = ctx.attrs["upper"]
    low = _mH(ctx.outputs[0]) if upper else ctx.outputs[0]
    g = _mH(g) if upper else g
    ga = jnp.tril(_mH(low) @ g)
    ga = 0.5 * (ga + _mH(jnp.tril(ga, -1)))
    ga = jax.lax.linalg.triangular_solve(_mH(low), ga, left_side=True, lower=False)
    return (jax.lax.linalg.triangular_solve(low, ga, left_side=False, lower=True),)


CHOLESKY = Op("LinalgCholeskyExBackward0", _cholesky_fwd, _cholesky_bwd, save=(), save_outputs=True, num_outputs=2)


def cholesky(A, *, upper=False):
    """The Cholesky factor L (``A = L L^H``), or U with ``upper=True``; a matrix that is not positive-definite
    raises ``LinAlgError`` (see module docstring)."""
    check_matrix(A, "linalg.cholesky", square=True)
    out, code = call(CHOLESKY, A, upper=bool(upper))
    _report(code, A, lambda p, i: f"linalg.cholesky: {p}The factorization could not be completed because the input "
                                  f"is not positive-definite (the leading minor of order {i} is not "
                                  "positive-definite).", "linalg.cholesky")
    return out


# ---- eigh, qr, svd ---------------------------------------------------------------------
EIGH_OP = wirtinger_op("LinalgEighBackward0", lambda a, UPLO: tuple(
    jnp.linalg.eigh(hermitian(a, UPLO == "U"), symmetrize_input=False)), num_outputs=2)
EIGVALSH = wirtinger_op("LinalgEighBackward0", lambda a, UPLO: jnp.linalg.eigh(
    hermitian(a, UPLO == "U"), symmetrize_input=False)[0])


def _check_eigh(A, UPLO, name):
    check_matrix(A, name, floating=False)
    if not (A.dtype.is_floating_point or A.dtype.is_complex) or A.dtype in (_dtype.float16, _dtype.bfloat16):
        raise NotImplementedError(f'"linalg_eigh_cpu" not implemented for \'{scalar_type_name(A.dtype)}\'')
    if A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.eigh: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")


def eigh(A, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of each Hermitian matrix, read from its ``UPLO`` triangle."""
    _check_eigh(A, UPLO, "linalg.eigh")
    return EIGH(*call(EIGH_OP, A, UPLO=UPLO))


def eigvalsh(A, UPLO="L"):
    _check_eigh(A, UPLO, "linalg.eigh")
    return call(EIGVALSH, A, UPLO=UPLO)


def _qr_fwd(a, mode):
    if mode == "r":
        return jnp.zeros((0,), a.dtype), jnp.linalg.qr(a, mode="r")
    return tuple(jnp.linalg.qr(a, mode=mode))


def _qr_bwd(ctx, gq, gr):
    a, = ctx.saved
    mode = ctx.attrs["mode"]
    if mode == "r":
        raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. Please "
                           "use linalg.qr(A, mode='reduced') if you are going to differentiate through linalg.qr.")
    if mode == "complete" and a.shape[-2] > a.shape[-1]:
        raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
    _, vjp = jax.vjp(lambda x: tuple(jnp.linalg.qr(x, mode="reduced")), a)
    return (jnp.conj(vjp((jnp.conj(gq), jnp.conj(gr)))[0]),)


QR_OP = Op("LinalgQrBackward0", _qr_fwd, _qr_bwd, save=(0,), num_outputs=2)


def qr(A, mode="reduced"):
    """``(Q, R)`` with ``A = Q R``; ``mode`` is 'reduced', 'complete' or 'r' (Q empty)."""
    check_matrix(A, "linalg.qr")
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           "or 'complete'")
    return QR(*call(QR_OP, A, mode=mode))


def _svd_bwd(ctx, gu, gs, gvh):
    # Only the first min(m, n) columns of U and rows of Vh have a gradient (the rest are any basis of the
    # complement), as in PyTorch: the reduced SVD's vjp.
    a, = ctx.saved
    k = min(a.shape[-2:])
    _, vjp = jax.vjp(lambda x: tuple(jnp.linalg.svd(x, full_matrices=False)), a)
    cts = (jnp.conj(gu[..., :, :k]), jnp.conj(gs), jnp.conj(gvh[..., :k, :]))
    return (jnp.conj(vjp(cts)[0]),)


SVD_OP = Op("LinalgSvdBackward0", lambda a, full_matrices: tuple(jnp.linalg.svd(a, full_matrices=full_matrices)),
            _svd_bwd, save=(0,), num_outputs=3)
SVDVALS = wirtinger_op("LinalgSvdBackward0", lambda a: jnp.linalg.svd(a, compute_uv=False))


def _check_driver(driver):
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with "
                           "cuSOLVER backend.")


def svd(A, full_matrices=True, *, driver=None):
    """``(U, S, Vh)`` with ``A = U diag(S) Vh``, singular values descending."""
    check_matrix(A, "linalg.svd")
    _check_driver(driver)
    return SVD(*call(SVD_OP, A, full_matrices=bool(full_matrices)))


def svdvals(A, *, driver=None):
    check_matrix(A, "linalg.svd")
    _check_driver(driver)
    return call(SVDVALS, A)
