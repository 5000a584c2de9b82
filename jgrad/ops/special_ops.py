"""``torch.special`` on ``jax.scipy.special``: the error and gamma families, Bessel functions, normal
distribution functions, ``logit``/``expit``, ``xlog1py``, ``entr``, ``zeta``, ``sinc``...; and their
top-level and Tensor-method forms (``lgamma``, ``digamma``, ``polygamma``, ``erfinv``, ``erfc``, ``i0``,
``sinc``, ``logit``, ``mvlgamma``).

Integer and bool inputs compute in the default floating dtype, as PyTorch's. Gradients come from
``jax.vjp`` of JAX's functions (JAX differentiates some that PyTorch does not: ``zeta`` in its first
argument, ``gammainc`` in ``a``, the Bessel functions). ``bessel_j0``/``bessel_j1`` are jgrad's own
(``jax.scipy.special.bessel_jn`` loses accuracy for large arguments).

Imports ``_dispatch``, ``_tensor``, ``_dtype`` and ``ops`` (``_registry``, ``pointwise``, ``misc``,
``nn_ops``, ``reduction``).
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np

from ..core import _dtype
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import as_index, expect_tensor, tensor_method
from .elementwise import SINC  # one sinc: NaN at +-inf with PyTorch's derivative, on every device
from .misc import xlogy  # noqa: F401  (torch.special.xlogy)
from .nn_ops import log_softmax, softmax  # noqa: F401
from .pointwise import _check_operand, _float_promote, _promote, erf, expm1, log1p, round, sigmoid  # noqa: F401
from .reduction import logsumexp  # noqa: F401


# ---- Bessel functions of the first kind, orders 0 and 1 -----------------------------------
_NODES = 2 * np.pi * np.arange(64) / 64


def _bessel_j(x, order):
    """J_0 or J_1: the trapezoidal rule on Bessel's integral (exact to rounding for |x| <= 25 with 64 nodes: the
    integrand is periodic) and Hankel's asymptotic expansion beyond (J_0 is even, J_1 odd). Each branch sees
    only its own arguments (``where``), so the gradient is exact at the seam too."""
    x = _float_promote(x)
    near = jnp.abs(x) <= 25.0
    t = jnp.asarray(_NODES, x.dtype)
    small = jnp.where(near, x, 0)[..., None]
    integral = jnp.mean(jnp.cos(order * t - small * jnp.sin(t)), axis=-1)
    big = jnp.where(near, 25.0, jnp.abs(x))
    mu, z8 = 4.0 * order * order, 8.0 * big
    p, q, term = jnp.ones_like(big), jnp.zeros_like(big), jnp.ones_like(big)
    for k in range(1, 12):  # terms of P and Q alternate; 11 terms reach double precision at x = 25
        term = term * (mu - (2 * k - 1) ** 2) / (k * z8)
        if k % 2:
            q = q + term * (-1) ** (k // 2)
        else:
            p = p + term * (-1) ** (k // 2)
    phase = big - (2 * order + 1) * math.pi / 4
    asym = jnp.sqrt(2.0 / (math.pi * big)) * (p * jnp.cos(phase) - q * jnp.sin(phase))
    if order == 1:
        asym = jnp.where(x < 0, -asym, asym)
    return jnp.where(near, integral, asym)


# ---- unary functions ---------------------------------------------------------------------
def _spherical_j0(x):
    nz = x != 0
    return jnp.where(nz, jnp.sin(x) / jnp.where(nz, x, 1), 1).astype(x.dtype)


def _digamma(x):
    # PyTorch's digamma at +-0.0: -inf at +0.0, +inf at -0.0 (JAX's gives NaN)
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x).astype(x.dtype), jss.digamma(x))


_UNARY = {
    # name: (PyTorch's node name, the function on a floating array)
    "erfc": ("ErfcBackward0", jss.erfc), "erfinv": ("ErfinvBackward0", jss.erfinv),
    "erfcx": ("SpecialErfcxBackward0", jss.erfcx), "gammaln": ("LgammaBackward0", jss.gammaln),
    "digamma": ("DigammaBackward0", _digamma), "i0": ("I0Backward0", jss.i0),
    "i0e": ("SpecialI0EBackward0", jss.i0e), "i1": ("SpecialI1Backward0", jss.i1),
    "i1e": ("SpecialI1EBackward0", jss.i1e), "ndtr": ("SpecialNdtrBackward0", jss.ndtr),
    "ndtri": ("SpecialNdtriBackward0", jss.ndtri), "log_ndtr": ("SpecialLogNdtrBackward0", jss.log_ndtr),
    "entr": ("SpecialEntrBackward0", jss.entr),
    "exp2": ("Exp2Backward0", jnp.exp2), "expit": ("SigmoidBackward0", jss.expit),
    "bessel_j0": ("SpecialBesselJ0Backward0", lambda x: _bessel_j(x, 0)),
    "bessel_j1": ("SpecialBesselJ1Backward0", lambda x: _bessel_j(x, 1)),
    "spherical_bessel_j0": ("SpecialSphericalBesselJ0Backward0", _spherical_j0),
}
UNARY_OPS = {k: Op(node, lambda a, _f=f: _f(_float_promote(a))) for k, (node, f) in _UNARY.items()}
UNARY_OPS["sinc"] = SINC


def _unary(name, public=None):
    op = UNARY_OPS[name]

    def f(input):
        if not isinstance(input, Tensor):
            expect_tensor(input, public or name)
        return call(op, input)
    f.__name__ = f.__qualname__ = public or name
    f.__doc__ = f"``torch.special.{name}`` of each element (computed in the default floating dtype for integers)."
    return f


erfc, erfinv, erfcx, gammaln, digamma = (_unary(n) for n in ("erfc", "erfinv", "erfcx", "gammaln", "digamma"))
i0, i0e, i1, i1e = (_unary(n) for n in ("i0", "i0e", "i1", "i1e"))
ndtr, ndtri, log_ndtr, sinc, entr, exp2, expit = (_unary(n) for n in ("ndtr", "ndtri", "log_ndtr", "sinc", "entr",
                                                                    "exp2", "expit"))
bessel_j0, bessel_j1, spherical_bessel_j0 = (_unary(n) for n in ("bessel_j0", "bessel_j1", "spherical_bessel_j0"))
lgamma, psi = _unary("gammaln", "lgamma"), _unary("digamma", "psi")
modified_bessel_i0, modified_bessel_i1 = _unary("i0", "modified_bessel_i0"), _unary("i1", "modified_bessel_i1")


# ---- functions with a parameter -----------------------------------------------------------
def _polygamma_fwd(x, n):
    x = _float_promote(x)
    return jss.polygamma(jnp.asarray(n, jnp.int32), x)


POLYGAMMA = Op("PolygammaBackward0", _polygamma_fwd)


def polygamma(n, input):
    """The ``n``-th derivative of the digamma function (``n >= 0``)."""
    n = as_index(n, "polygamma", "n")
    expect_tensor(input, "polygamma", pos=2)
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return call(POLYGAMMA, input, n=n)


def _logit_fwd(x, eps):
    x = _float_promote(x)
    if eps is not None:
        x = jnp.clip(x, eps, 1 - eps)
    return jnp.log(x / (1 - x))


def _logit_bwd(ctx, g):
    # PyTorch's: NaN outside [0, 1] without eps, 0 outside [eps, 1 - eps] with it.
    x, eps = _float_promote(ctx.saved[0]), ctx.attrs["eps"]
    d = g / (x * (1 - x))
    if eps is None:
        return (jnp.where((x < 0) | (x > 1), jnp.nan, d),)
    return (jnp.where((x < eps) | (x > 1 - eps), 0, d),)


LOGIT = Op("LogitBackward0", _logit_fwd, _logit_bwd, save=(0,))


def logit(input, eps=None):
    """``log(p / (1 - p))``, with ``p`` clamped to ``[eps, 1 - eps]`` when ``eps`` is given."""
    expect_tensor(input, "logit")
    return call(LOGIT, input, eps=None if eps is None else float(eps))


def _mvlgamma_fwd(x, p):
    return jss.multigammaln(_float_promote(x), p)


MVLGAMMA = Op("MvlgammaBackward0", _mvlgamma_fwd)


def multigammaln(input, p):
    """The multivariate log-gamma function of dimension ``p`` (inf where an element is at most ``(p - 1) / 2`` and
    a half-integer, as PyTorch's, which no longer checks the range)."""
    expect_tensor(input, "multigammaln")
    p = as_index(p, "mvlgamma", "p")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    return call(MVLGAMMA, input, p=p)


mvlgamma = multigammaln


# ---- binary functions -----------------------------------------------------------------------
def _float_pair(x, y):
    x, y = _promote(x, y)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x, y = x.astype(_dtype.get_default_dtype().np), y.astype(_dtype.get_default_dtype().np)
    return x, y


BINARY_OPS = {
    "xlog1py": Op("SpecialXlog1PyBackward0", lambda x, y: jss.xlog1py(*_float_pair(x, y))),
    "zeta": Op("SpecialZetaBackward0", lambda x, q: jss.zeta(*_float_pair(x, q))),
    "gammainc": Op("IgammaBackward0", lambda a, x: jss.gammainc(*_float_pair(a, x))),
    "gammaincc": Op("IgammacBackward0", lambda a, x: jss.gammaincc(*_float_pair(a, x))),
}


def _binary(name, first="input", second="other"):
    op = BINARY_OPS[name]

    def f(input, other):
        input, other = _check_operand(input, name, first), _check_operand(other, name, second)
        if not isinstance(input, Tensor) and not isinstance(other, Tensor):
            expect_tensor(input, name, first)
        return call(op, input, other)
    f.__name__ = f.__qualname__ = name
    return f


xlog1py, zeta, gammainc, gammaincc = (_binary(n) for n in ("xlog1py", "zeta", "gammainc", "gammaincc"))

for _name, _fn in dict(lgamma=lgamma, digamma=digamma, erfinv=erfinv, erfc=erfc, i0=i0, sinc=sinc, logit=logit,
                       mvlgamma=mvlgamma, exp2=exp2).items():
    tensor_method(_name)(_fn)
tensor_method("polygamma")(lambda self, n: polygamma(n, self))

__all__ = ["lgamma", "digamma", "polygamma", "erfinv", "erfc", "i0", "sinc", "logit", "mvlgamma", "exp2"]
