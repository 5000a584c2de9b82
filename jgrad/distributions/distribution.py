"""``Distribution``: PyTorch's base class of probability distributions (shapes, sampling, ``log_prob``, moments,
``expand``, argument validation).

Shapes are tuples (PyTorch's ``torch.Size`` is a tuple too). Validation (``validate_args``, on by default as in
PyTorch) checks parameters at construction and values at ``log_prob``: values in host memory at once, values on
a device at the next host synchronization (``utils.require``).

Imports ``_tensor``, ``autograd`` (``no_grad``), ``distributions.constraints`` and ``distributions.utils``.
"""
from __future__ import annotations

import warnings

from ..autograd import no_grad
from . import constraints
from .utils import lazy_property, require_constraint
from ..core._tensor import Tensor

__all__ = ["Distribution"]


def _shape(s):
    return tuple(int(d) for d in s)


class Distribution:
    """The base of every distribution: ``batch_shape``, ``event_shape``, ``sample``/``rsample``, ``log_prob``,
    ``entropy``, ``mean``/``variance``/``stddev``, ``expand``, ``support``, ``arg_constraints``."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value: bool) -> None:
        """Turn argument validation on or off for every distribution created afterwards."""
        if value not in (True, False):
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape, self._event_shape = _shape(batch_shape), _shape(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            try:
                arg_constraints = self.arg_constraints
            except NotImplementedError:
                arg_constraints = {}
                warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                              "`arg_constraints = {}` or initialize the distribution with `validate_args=False` to "
                              "turn off validation.")
            for param, constraint in arg_constraints.items():
                if constraints.is_dependent(constraint):
                    continue
                if param not in self.__dict__ and isinstance(getattr(type(self), param), lazy_property):
                    continue  # skip checking lazily-constructed args
                value = getattr(self, param)
                require_constraint(constraint, value, lambda now, p=param, v=value, c=constraint: ValueError(
                    f"Expected parameter {p} ({type(v).__name__} of shape {tuple(v.shape)}) of distribution "
                    f"{self!r} to satisfy the constraint {c!r}, but found invalid values" + (f":\n{v}" if now else
                                                                                           " (on the device)")),
                    f"{type(self).__name__}()")
        super().__init__()

    def expand(self, batch_shape, _instance=None):
        """A new distribution with its batch dimensions expanded to ``batch_shape``."""
        raise NotImplementedError(f"{type(self).__name__}.expand")  # each distribution of jgrad defines it

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def arg_constraints(self) -> dict:
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError(f"{self.__class__} does not implement mean")

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError(f"{self.__class__} does not implement variance")

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """Draws of shape ``sample_shape + batch_shape + event_shape``, without gradient."""
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        """Reparameterized draws: differentiable in the parameters."""
        raise NotImplementedError(f"{type(self).__name__} does not support rsample (has_rsample is False)")

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning)
        return self.sample((n,))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return self.entropy().exp()

    def _extended_shape(self, sample_shape=()):
        return _shape(sample_shape) + self._batch_shape + self._event_shape

    def _validate_sample(self, value):
        if not isinstance(value, Tensor):
            raise ValueError("The value argument to log_prob must be a Tensor")
        event_dim_start = value.ndim - len(self._event_shape)
        if tuple(value.shape[event_dim_start:]) != self._event_shape:
            raise ValueError(f"The right-most size of value must match event_shape: {tuple(value.shape)} vs "
                             f"{self._event_shape}.")
        actual, expected = tuple(value.shape), self._batch_shape + self._event_shape
        for i, j in zip(reversed(actual), reversed(expected)):
            if i != 1 and j != 1 and i != j:
                raise ValueError(f"Value is not broadcastable with batch_shape+event_shape: {actual} vs {expected}.")
        support = self.support
        require_constraint(support, value, lambda now: ValueError(
            f"Expected value argument ({type(value).__name__} of shape {actual}) to be within the support "
            f"({support!r}) of the distribution {self!r}, but found invalid values" + (f":\n{value}" if now else
                                                                                       " (on the device)")),
            f"{type(self).__name__}.log_prob")

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a custom "
                                      "__init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def __repr__(self):
        names = [k for k, _ in self.arg_constraints.items() if k in self.__dict__]
        args = ", ".join(f"{p}: {_param_repr(self.__dict__[p])}" for p in names)
        return self.__class__.__name__ + "(" + args + ")"


def _param_repr(t):
    # PyTorch prints a one-element parameter (a 0-d one as a number) and the shape of the others (a torch.Size
    # there, a tuple here)
    if t.numel() != 1:
        return str(tuple(t.shape))
    return str(t.item()) if t.ndim == 0 else repr(t)
