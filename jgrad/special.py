"""``jgrad.special``: ``torch.special`` under its names, on ``jax.scipy.special`` (re-exports of
``ops.special_ops`` and of the elementwise, softmax and reduction ops PyTorch also lists there); docs/math.md.

Imports the op library only.
"""
from .ops.special_ops import (bessel_j0, bessel_j1, digamma, entr, erf, erfc, erfcx, erfinv, exp2, expit,  # noqa: F401
                              expm1, gammainc, gammaincc, gammaln, i0, i0e, i1, i1e, log1p, log_ndtr, log_softmax,
                              logit, logsumexp, modified_bessel_i0, modified_bessel_i1, multigammaln, ndtr, ndtri,
                              polygamma, psi, round, sinc, softmax, spherical_bessel_j0, xlog1py, xlogy, zeta)

__all__ = ["bessel_j0", "bessel_j1", "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1",
           "gammainc", "gammaincc", "gammaln", "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit",
           "logsumexp", "modified_bessel_i0", "modified_bessel_i1", "multigammaln", "ndtr", "ndtri", "polygamma",
           "psi", "round", "sinc", "softmax", "spherical_bessel_j0", "xlog1py", "xlogy", "zeta"]
