"""``torch.linalg``'s functions built on the SVD and on products: pinv, lstsq, matrix_rank, matrix_power,
matrix_exp, solve_triangular, vecdot, diagonal (batched over the leading dimensions), with PyTorch's checks.

Tolerances (pinv, matrix_rank, lstsq) follow PyTorch: a singular value counts when it exceeds
``max(atol, rtol * largest)``; without either, ``rtol`` is ``eps * max(m, n)``; with only ``atol > 0``,
``rtol`` is 0. Gradients are ``jax.vjp`` of the forward in PyTorch's convention (``complex_ops``); pinv's
is JAX's own stable formula (``jnp.linalg.pinv``'s custom JVP), and lstsq's goes through it.

Imports ``_dispatch``, ``_tensor``, ``_dtype`` and ``ops`` (``_registry``, ``complex_ops``, ``decompositions``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import as_index_or, broadcast_shapes, expect_tensor, scalar_type_name
from .complex_ops import wirtinger_op
from .decompositions import LSTSQ, check_float, check_matrix, hermitian as _hermitian


def _rtol(a, atol, rtol):
    """The per-matrix relative cutoff ``max(rtol, atol / largest singular value)`` (the largest held constant)."""
    m, n = a.shape[-2:]
    eps = jnp.finfo(a.dtype).eps
    if rtol is None:
        rtol = 0.0 if (atol is not None and atol > 0) else eps * max(m, n)
    r = jnp.full(a.shape[:-2], rtol, jnp.finfo(a.dtype).dtype)
    if atol is not None:
        smax = jax.lax.stop_gradient(jnp.linalg.svd(a, compute_uv=False)[..., 0]) if min(m, n) else 1.0
        r = jnp.maximum(r, atol / jnp.where(smax > 0, smax, 1))
    return r


def _pinv_fwd(a, atol, rtol, hermitian):
    if 0 in a.shape[-2:]:
        return jnp.zeros(a.shape[:-2] + a.shape[-2:][::-1], a.dtype)
    if hermitian:  # PyTorch reads the lower triangle (through eigh)
        a = _hermitian(a)
    return jnp.linalg.pinv(a, rtol=_rtol(a, atol, rtol), hermitian=hermitian)


def _mH(x):
    return jnp.conj(jnp.swapaxes(x, -1, -2))


def _pinv_bwd(ctx, g):
    # PyTorch's formula (pinv_backward), the same with hermitian=True; products of the smaller dimension first.
    a, p = ctx.saved[0], ctx.outputs[0]
    ph, gh = _mH(p), _mH(g)
    if a.shape[-2] <= a.shape[-1]:
        k = gh @ p
        kph = k @ ph
        return (-_mH(p @ k) + kph - (a @ p) @ kph + (ph @ p) @ (gh - k @ a),)
    k = p @ gh
    phk = ph @ k
    return (-_mH(k @ p) + phk - phk @ (p @ a) + (gh - a @ k) @ p @ ph,)


PINV = Op("LinalgPinvBackward0", _pinv_fwd, _pinv_bwd, save=(0,), save_outputs=True)


def _tol(v, name):
    if v is None:
        return None
    if isinstance(v, Tensor):
        if v.ndim:
            raise RuntimeError(f"{name}: jgrad takes a number (or a 0-d tensor) for atol/rtol, got a tensor of "
                               f"shape {list(v.shape)}")
        v = v.item()
    return float(v)


def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None):
    """The Moore-Penrose pseudoinverse; ``rcond`` is the older name of ``rtol``."""
    expect_tensor(A, "pinv")
    if A.ndim < 2 or not (A.dtype.is_floating_point or A.dtype.is_complex) or A.dtype in (
            _dtype.float16, _dtype.bfloat16):
        raise RuntimeError(f"linalg.pinv({scalar_type_name(A.dtype)}{{{list(A.shape)}}}): expected a tensor with 2 "
                           "or more dimensions of float, double, cfloat or cdouble types")
    if rcond is not None:
        rtol = rcond
    return call(PINV, A, atol=_tol(atol, "linalg.pinv"), rtol=_tol(rtol, "linalg.pinv"), hermitian=bool(hermitian))


def _singular_values(a, hermitian):
    if hermitian:
        return jnp.sort(jnp.abs(jnp.linalg.eigvalsh(_hermitian(a), symmetrize_input=False)), axis=-1)[..., ::-1]
    return jnp.linalg.svd(a, compute_uv=False)


def _rank_fwd(a, atol, rtol, hermitian):
    if 0 in a.shape[-2:]:
        return jnp.zeros(a.shape[:-2], jnp.int64)
    s = _singular_values(a, hermitian)
    cut = _rtol(a, atol, rtol)[..., None] * s[..., :1]
    return jnp.sum(s > cut, axis=-1).astype(jnp.int64)


MATRIX_RANK = Op("linalg_matrix_rank", _rank_fwd, differentiable=False)


def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
    """The number of singular values above ``max(atol, rtol * largest)``; ``tol`` is the older name of ``atol``."""
    expect_tensor(A, "matrix_rank")
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    if not (A.dtype.is_floating_point or A.dtype.is_complex):
        raise RuntimeError("This function doesn't handle types other than float and double")
    if tol is not None:
        atol = tol
    return call(MATRIX_RANK, A.detach(), atol=_tol(atol, "linalg.matrix_rank"), rtol=_tol(rtol, "linalg.matrix_rank"),
                hermitian=bool(hermitian))


def _lstsq_fwd(a, b, vector, rcond, driver):
    m, n = a.shape[-2:]
    bb = b[..., None] if vector else b
    x = jnp.linalg.pinv(a, rtol=_rtol(a, None, rcond)) @ bb if m and n else jnp.zeros(
        jnp.broadcast_shapes(a.shape[:-2], bb.shape[:-2]) + (n, bb.shape[-1]), a.dtype)
    batch = jnp.broadcast_shapes(a.shape[:-2], bb.shape[:-2])
    real = jnp.finfo(a.dtype).dtype
    empty = jnp.zeros((0,), real)
    if driver != "gelsy" and m > n:
        res = jnp.sum(jnp.abs(a @ x - bb) ** 2, axis=-2)
        res = res[..., 0] if vector else res
    else:
        res = empty
    rank = _rank_fwd(a, None, rcond, False) if driver != "gels" else jnp.zeros((0,), jnp.int64)
    sv = jnp.linalg.svd(a, compute_uv=False) if driver in ("gelsd", "gelss") else empty
    x = jnp.broadcast_to(x, batch + x.shape[-2:])
    return (x[..., 0] if vector else x), res, rank, sv


LSTSQ_OP = wirtinger_op("LinalgLstsqBackward0", _lstsq_fwd, num_outputs=4)


def lstsq(A, B, rcond=None, *, driver=None):
    """Least-squares solutions of ``A X = B`` as ``(solution, residuals, rank, singular_values)``; which of the last
    three are computed depends on ``driver`` as in PyTorch ('gelsy', the CPU default, when None)."""
    expect_tensor(A, "lstsq")
    expect_tensor(B, "lstsq", "other", pos=2)
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    check_float(A, "torch.linalg.lstsq")
    if A.dtype is not B.dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's "
                           f"dtype {scalar_type_name(A.dtype)} and other's dtype {scalar_type_name(B.dtype)}")
    if driver is None:
        driver = "gelsy"
    if driver not in ("gels", "gelsy", "gelsd", "gelss"):
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = B.ndim == A.ndim - 1
    if B.shape[-1 if vector else -2] != A.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)" if not vector else
                           "torch.linalg.lstsq: input.size(-2) should match other.size(-1)")
    broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-1 if vector else -2]))
    return LSTSQ(*call(LSTSQ_OP, A, B, vector=vector, rcond=_tol(rcond, "linalg.lstsq"), driver=driver))


def _matrix_power_fwd(a, n):
    if n == 0:
        return jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return jnp.linalg.matrix_power(a, n)


MATRIX_POWER = wirtinger_op("LinalgMatrixPowerBackward0", _matrix_power_fwd)
_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)


def _expm(a):
    """The matrix exponential by scaling and squaring with the degree-13 Pade approximant (Higham 2005), batched;
    lighter to compile than ``jax.scipy.linalg.expm``, which builds every degree."""
    n = a.shape[-1]
    norm1 = jnp.max(jnp.sum(jnp.abs(a), axis=-2), axis=-1)
    s = jnp.clip(jnp.ceil(jnp.log2(jnp.maximum(norm1, 1e-300) / 5.371920351148152)), 0, 64).astype(jnp.int32)
    a = a / (2.0 ** s).astype(a.dtype)[..., None, None]
    b, eye = _PADE13, jnp.eye(n, dtype=a.dtype)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = jnp.linalg.solve(v - u, v + u)

    def square(i, r):  # only as many squarings as the largest scaling needs; each matrix stops at its own
        return jax.lax.cond(i < jnp.max(s), lambda r: jnp.where((i < s)[..., None, None], r @ r, r), lambda r: r, r)
    return jax.lax.fori_loop(0, 64, square, r)


def _matrix_exp_bwd(ctx, g):
    # The adjoint of the Frechet derivative is the top-right block of exp([[A^H, G], [0, A^H]]) (PyTorch's way).
    a, = ctx.saved
    n, ah = a.shape[-1], jnp.conj(jnp.swapaxes(a, -1, -2))
    top = jnp.concatenate([ah, g], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(ah), ah], axis=-1)
    return (_expm(jnp.concatenate([top, bottom], axis=-2))[..., :n, n:],)


MATRIX_EXP = Op("LinalgMatrixExpBackward0", _expm, _matrix_exp_bwd, save=(0,))


def matrix_power(A, n):
    """``A`` to the integer power ``n`` (a negative ``n`` inverts first; ``n = 0`` gives the identity)."""
    n = as_index_or(n, "linalg_matrix_power", "n", "int", pos=2)
    check_matrix(A, "linalg.matrix_power", square=True, floating=False)
    if n < 0:
        check_float(A, "linalg.inv")
    return call(MATRIX_POWER, A, n=n)


def matrix_exp(A):
    """The matrix exponential of each square matrix."""
    check_matrix(A, "linalg.matrix_exp", square=True, floating=False)
    check_float(A, "linalg.matrix_exp", low_precision=False)
    return call(MATRIX_EXP, A)


def _solve_triangular_fwd(a, b, upper, left, unitriangular):
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    return jax.lax.linalg.triangular_solve(a, b, left_side=left, lower=not upper, unit_diagonal=unitriangular)


SOLVE_TRIANGULAR = wirtinger_op("LinalgSolveTriangularBackward0", _solve_triangular_fwd)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """The solution of a triangular system ``A X = B`` (``X A = B`` with ``left=False``); only the ``upper`` or
    lower triangle of ``A`` is read."""
    check_matrix(A, "linalg.solve_triangular", square=True)
    expect_tensor(B, "solve_triangular", "B", pos=2)
    if B.ndim < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    if A.dtype is not B.dtype:
        raise RuntimeError(f"linalg.solve_triangular: Expected A and B to have the same dtype, but found A of type "
                           f"{scalar_type_name(A.dtype)} and B of type {scalar_type_name(B.dtype)} instead")
    n, k = A.shape[-1], (B.shape[-2] if left else B.shape[-1])
    if n != k:
        eq = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation {eq} "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    broadcast_shapes(tuple(A.shape[:-2]), tuple(B.shape[:-2]))
    return call(SOLVE_TRIANGULAR, A, B, upper=bool(upper), left=bool(left), unitriangular=bool(unitriangular))


VECDOT = wirtinger_op("LinalgVecdotBackward0", lambda x, y, dim: jnp.sum(jnp.conj(x) * y, axis=dim))


def vecdot(x, y, *, dim=-1):
    """``sum(conj(x) * y, dim)`` with broadcasting."""
    expect_tensor(x, "vecdot", "x")
    expect_tensor(y, "vecdot", "y", pos=2)
    if x.dtype is not y.dtype:
        raise RuntimeError(f"linalg.vecdot: Expected x and y to have the same dtype, but found x of type "
                           f"{scalar_type_name(x.dtype)} and y of type {scalar_type_name(y.dtype)} instead")
    shape = broadcast_shapes(tuple(x.shape), tuple(y.shape))
    from ._registry import wrap_dim
    return call(VECDOT, x, y, dim=wrap_dim(dim, len(shape)) - len(shape))


DIAGONAL = Op("DiagonalBackward0", lambda a, offset, dim1, dim2: jnp.diagonal(a, offset, dim1, dim2))


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonals of the matrices of ``A`` (a new tensor in jgrad, a view in PyTorch)."""
    expect_tensor(A, "diagonal", "A")
    from ._registry import wrap_dim
    d1, d2 = wrap_dim(dim1, A.ndim), wrap_dim(dim2, A.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return call(DIAGONAL, A, offset=int(offset), dim1=d1, dim2=d2)
