"""``torch.nn.utils.parametrizations``: ``weight_norm``, ``spectral_norm`` and ``orthogonal`` as parametrizations.

PyTorch's modules and formulas: weight norm ``v * g / ||v||`` (the norm over every dim but ``dim``),
spectral norm ``W / sigma`` with ``sigma = u^T W v`` from power iteration on buffers ``_u``/``_v`` (run
under ``no_grad`` in training mode), and the orthogonal maps ``matrix_exp``, ``cayley`` and
``householder`` (with ``use_trivialization``, a ``base`` buffer). The Householder product and the
Householder QR (``geqrf``) the last one needs are written here in ``jax.numpy`` (jax has no public
``geqrf``); the product's gradient comes from ``jax.vjp``.

Imports ``_dispatch``, ``_tensor``, ``autograd.grad_mode``, the op library, ``nn.functional``, ``nn.module``,
``nn.conv`` and ``nn.utils.parametrize``.
"""
from __future__ import annotations

from enum import Enum, auto

import jax.numpy as jnp

from ...runtime._dispatch import Op, call
from ...core._dtype import finfo
from ...core._tensor import Tensor
from ...autograd.grad_mode import no_grad
from ... import ops as _ops
from .. import functional as F
from ..module import Module
from . import parametrize

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


# ---- Householder helpers (real matrices) ---------------------------------------------------------------
def _householder_product_fwd(a, tau):
    m, n = a.shape[-2:]
    q = jnp.broadcast_to(jnp.eye(m, n, dtype=a.dtype), a.shape[:-2] + (m, n))
    rows = jnp.arange(m)
    for i in reversed(range(tau.shape[-1])):
        v = jnp.where(rows == i, 1, jnp.where(rows > i, a[..., :, i], 0)).astype(a.dtype)  # (..., m)
        proj = jnp.einsum("...m,...mn->...n", v, q)
        q = q - tau[..., i, None, None] * v[..., :, None] * proj[..., None, :]
    return q


def _geqrf_fwd(a):
    m, n = a.shape[-2:]
    rows = jnp.arange(m)
    taus = []
    for j in range(min(m, n)):
        alpha = a[..., j, j]
        below = jnp.where(rows > j, a[..., :, j], 0)
        xnorm = jnp.sqrt((below * below).sum(-1))
        beta = -jnp.where(alpha >= 0, 1, -1) * jnp.sqrt(alpha * alpha + xnorm * xnorm)
        zero = xnorm == 0
        tau = jnp.where(zero, 0, (beta - alpha) / jnp.where(zero, 1, beta))
        scale = jnp.where(zero, 0, 1 / jnp.where(zero, 1, alpha - beta))
        v = jnp.where(rows == j, 1, below * scale[..., None])
        w = jnp.einsum("...m,...mn->...n", v, a)  # apply H = I - tau v v^T to the columns after j
        upd = a - tau[..., None, None] * v[..., :, None] * w[..., None, :]
        cols = jnp.arange(n)
        a = jnp.where(cols > j, upd, a)
        col = jnp.where(rows == j, jnp.where(zero, alpha, beta)[..., None], jnp.where(rows > j, v, a[..., :, j]))
        a = jnp.where(cols == j, col[..., :, None], a)
        taus.append(tau)
    return a, jnp.stack(taus, -1)


_HOUSEHOLDER = Op("LinalgHouseholderProductBackward0", _householder_product_fwd)
_GEQRF = Op("GeqrfBackward0", _geqrf_fwd, num_outputs=2, differentiable=False)


def _make_orthogonal(a):
    """The Q of ``a``'s QR with R's diagonal made positive (PyTorch: geqrf, householder_product, sign fix)."""
    from ... import linalg
    q, r = linalg.qr(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sgn().unsqueeze(-2)


def _is_orthogonal(q):
    n, k = q.shape[-2], q.shape[-1]
    eye = _ops.eye(k, dtype=q.dtype, device=q.device)
    eps = 10.0 * n * finfo(q.dtype).eps
    return bool(_ops.allclose(q.mT @ q, eye, atol=eps))


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True) -> None:
        super().__init__()
        if weight.is_complex() and orthogonal_map == _OrthMaps.householder:
            raise ValueError("The householder parametrization does not support complex tensors.")
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            X = X.tril()
            if n != k:
                X = _ops.cat([X, X.new_zeros(n, n - k).expand(*X.shape[:-2], -1, -1)], dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = _ops.matrix_exp(A)
            else:
                from ... import linalg
                eye = _ops.eye(n, dtype=A.dtype, device=A.device)
                Q = linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(diagonal=-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = call(_HOUSEHOLDER, A, tau)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).int().unsqueeze(-2)
        if hasattr(self, "base") and self.base is not None:
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q):
        with no_grad():
            if Q.shape != self.shape:
                raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. Got a tensor of shape "
                                 f"{Q.shape}.")
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError("It is not possible to assign to the matrix exponential or the Cayley "
                                              "parametrizations when use_trivialization=False.")
                A, tau = call(_GEQRF, Q)
                d = A.diagonal(dim1=-2, dim2=-1)
                sign = d.sgn() * _ops.where(tau == 0.0, -1.0, 1.0).to(d.dtype)
                eye = _ops.eye(n, k, dtype=A.dtype, device=A.device)
                A = A.tril(-1) + A.triu(1) + eye * sign.unsqueeze(-2)
                return A.mT if transpose else A
            if n == k:
                Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()
            else:
                N = _ops.randn(*(tuple(Q.shape[:-2]) + (n, n - k)), dtype=Q.dtype, device=Q.device)
                Q = _make_orthogonal(_ops.cat([Q, N], dim=-1))
            self.base = Q
            eye = _ops.eye(*Q_init.shape[-2:], dtype=Q_init.dtype, device=Q_init.device)
            return (-eye).expand(*Q_init.shape).clone()


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Constrain ``module.<name>`` to orthogonal (or unitary) matrices."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of {weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] or weight.is_complex() else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError('orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
                         f"Got: {orthogonal_map}")
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


# ---- weight norm --------------------------------------------------------------------------------------
def norm_except_dim(v, pow=2, dim=0):
    """The ``pow``-norm of ``v`` over every dim but ``dim`` (kept as size-1 dims); ``dim=-1``: the whole norm."""
    if dim == -1:
        return v.norm(pow)
    dims = [d for d in range(v.ndim) if d != dim % v.ndim]
    return (v.abs() ** pow).sum(dim=dims, keepdim=True) ** (1.0 / pow)


def _weight_norm(v, g, dim=0):
    return v * (g / norm_except_dim(v, 2, dim))


class _WeightNorm(Module):
    def __init__(self, dim=0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name: str = "weight", dim=0):
    """Reparametrize ``module.<name>`` as magnitude ``original0`` (g) times direction ``original1`` (v)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


# ---- spectral norm ------------------------------------------------------------------------------------
class _SpectralNorm(Module):
    def __init__(self, weight, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12) -> None:
        super().__init__()
        ndim = weight.ndim
        if dim >= ndim or dim < -ndim:
            raise IndexError(f"Dimension out of range (expected to be in range of [-{ndim}, {ndim - 1}] but got {dim})")
        if n_power_iterations <= 0:
            raise ValueError(f"Expected n_power_iterations to be positive, but got "
                             f"n_power_iterations={n_power_iterations}")
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight.detach())
            h, w = weight_mat.shape
            u = weight_mat.new_empty(h).normal_(0, 1)
            v = weight_mat.new_empty(w).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight):
        if self.dim != 0:
            weight = weight.permute(self.dim, *(d for d in range(weight.ndim) if d != self.dim))
        return weight.flatten(1)

    def _power_method(self, weight_mat, n_power_iterations: int) -> None:
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(weight_mat @ self._v, dim=0, eps=self.eps))
                self._v.copy_(F.normalize(weight_mat.mT @ self._u, dim=0, eps=self.eps))

    def forward(self, weight):
        if weight.ndim == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat.detach(), self.n_power_iterations)
        u, v = self._u.clone(), self._v.clone()
        sigma = (u * (weight_mat @ v)).sum()
        return weight / sigma

    def right_inverse(self, value):
        return value


def spectral_norm(module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None):
    """Divide ``module.<name>`` by its spectral norm (estimated by power iteration in training mode)."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        from ..conv import ConvTranspose1d, ConvTranspose2d, ConvTranspose3d
        dim = 1 if isinstance(module, (ConvTranspose1d, ConvTranspose2d, ConvTranspose3d)) else 0
    parametrize.register_parametrization(module, name, _SpectralNorm(weight, n_power_iterations, dim, eps))
    return module
