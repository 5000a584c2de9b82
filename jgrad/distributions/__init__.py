"""``jgrad.distributions``: ``torch.distributions`` under its names, on jgrad's ops (so ``log_prob``, ``entropy``
and ``rsample`` are differentiable through jgrad's autograd) and jgrad's generators (draws are reproducible
under ``jg.manual_seed``; they are not PyTorch's numbers). docs/math.md lists what is covered.

Imports the op library, ``autograd`` and its own modules; nothing above the op library.
"""
from . import constraints
from .continuous import Beta, Dirichlet, Exponential, Gamma, Laplace, Normal, Uniform
from .discrete import Bernoulli, Categorical, OneHotCategorical
from .distribution import Distribution
from .kl import kl_divergence, register_kl
from .multivariate import Independent, MultivariateNormal

__all__ = ["Bernoulli", "Beta", "Categorical", "Dirichlet", "Distribution", "Exponential", "Gamma", "Independent",
           "Laplace", "MultivariateNormal", "Normal", "OneHotCategorical", "Uniform", "constraints",
           "kl_divergence", "register_kl"]
