"""Helpers of the distributions, as ``torch.distributions.utils``: ``broadcast_all``, ``probs_to_logits``,
``logits_to_probs``, ``clamp_probs``, ``lazy_property``; and ``require``, the value check behind ``validate_args``.

Imports the op library, ``_dtype``, ``_tensor``, ``_checks`` and ``ops._registry``.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..core import _dtype
from .. import ops as _ops
from . import constraints
from ..runtime import _bounds
from ..runtime._checks import check_values
from ..core._tensor import Tensor
from ..ops._registry import broadcast_shapes, host_values

__all__ = ["broadcast_all", "probs_to_logits", "logits_to_probs", "clamp_probs", "lazy_property", "require",
           "require_constraint"]


def broadcast_all(*values):
    """Tensors and numbers broadcast to one shape; numbers become tensors of the tensors' dtype (the default
    floating dtype when there are none)."""
    if not all(isinstance(v, (Tensor, numbers.Number)) for v in values):
        raise ValueError("Input arguments must all be instances of numbers.Number, torch.Tensor or objects "
                         "implementing __torch_function__.")
    tensors = [v for v in values if isinstance(v, Tensor)]
    dt = tensors[0].dtype if tensors else _dtype.get_default_dtype()
    dev = tensors[0].device if tensors else None
    values = [v if isinstance(v, Tensor) else _ops.tensor(float(v), dtype=dt, device=dev) for v in values]
    shape = broadcast_shapes(*(tuple(v.shape) for v in values))
    return tuple(v if tuple(v.shape) == shape else v.expand(*shape) for v in values)


def clamp_probs(probs):
    """Probabilities kept inside ``[eps, 1 - eps]`` of their dtype."""
    eps = _dtype.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def probs_to_logits(probs, is_binary=False):
    """Logits of probabilities (binary: of the event's probability against its complement)."""
    ps = clamp_probs(probs)
    if is_binary:
        return ps.log() - (-ps).log1p()
    return ps.log()


def logits_to_probs(logits, is_binary=False):
    """Probabilities of logits (binary: the sigmoid; else the softmax over the last dimension)."""
    if is_binary:
        return logits.sigmoid()
    return _ops.softmax(logits, dim=-1)


class lazy_property:
    """A property computed once, on first access, and cached on the instance (PyTorch's)."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        self.__doc__ = wrapped.__doc__

    def __get__(self, instance, obj_type=None):
        if instance is None:
            return self
        value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def require(valid, make_error, op):
    """Raise ``make_error(True)`` unless every element of the bool tensor ``valid`` is True. Values already in host
    memory are checked now (as PyTorch does); values on a device or pending are checked beside the kernel and
    reported at the next host synchronization, with ``make_error(False)`` (it cannot print them)."""
    v = host_values(valid)
    if v is not None:
        if not v.all():
            raise make_error(True)
        return
    check_values(valid.to(_dtype.int8), "nonzero", lambda _: make_error(False), op)


def require_constraint(constraint, value, make_error, op):
    """``require(constraint.check(value), ...)`` in one step where the constraint allows it.

    A constraint whose ``check`` reads the same on NumPy, jax and jgrad arrays (``array_generic``) and whose
    parameters are Python numbers is checked with NumPy when ``value`` is in host memory (no kernel: PyTorch's
    checks cost a few us each there; jgrad's ops are one dispatch each), else on the device by one kernel computing
    the whole check and its AND into the thread's flag (``Categorical``'s simplex check was ~7 ops and a cast).
    A value whose known bounds satisfy an integer constraint (a sample jgrad drew) is not checked again. Other
    constraints go op by op."""
    params = _number_params(constraint)
    if params is None or not isinstance(value, Tensor):
        return require(constraint.check(value), make_error, op)
    if value._bounds is not None and _known_within(constraint, value):
        return
    host = host_values(value)
    if host is not None:
        if host.size <= 16 and host.dtype.kind in "iub" and type(constraint).event_dim == 0:
            # A few integers (a discrete sample): checked one by one in Python (~1 us; NumPy's ops ~5 us). Floats
            # stay with NumPy, which compares them in their own precision.
            ok = all(constraint.check(v) for v in host.ravel().tolist())
        else:
            ok = np.all(constraint.check(host))
        if not ok:
            raise make_error(True)
        return
    check_values(value, (type(constraint), params), lambda _: make_error(False), op)


def _known_within(constraint, value):
    """Whether ``value``'s known bounds (a sample a jgrad op drew in range: Note [Known bounds] in
    ``jgrad.runtime._bounds``) satisfy ``constraint``, an integer interval or lower bound."""
    kind = type(constraint)
    if kind is constraints._IntegerInterval:
        return _bounds.within(value, constraint.lower_bound, constraint.upper_bound + 1)
    if kind is constraints._IntegerGreaterThan:
        return _bounds.within(value, constraint.lower_bound, math.inf)
    return False


def _number_params(constraint):
    """The constraint's parameters as a sorted tuple when it is array-generic and they are all Python numbers."""
    if not type(constraint).__dict__.get("array_generic", False):  # a subclass may check with tensor methods
        return None
    params = tuple(sorted(vars(constraint).items()))
    if not all(type(v) in (int, float, bool) for _, v in params):
        return None  # a tensor bound (Uniform(low, high)'s support): op by op
    return params


