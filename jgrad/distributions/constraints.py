"""``torch.distributions.constraints``: the regions a parameter or a sample must lie in. ``check(value)`` returns a
bool tensor (computed by jgrad's ops), reduced over the constraint's ``event_dim`` rightmost dimensions.

Imports the op library (``ops``) and ``_dtype``.
"""
from __future__ import annotations

from ..core import _dtype
from .. import ops as _ops
from ..ops import decompositions as _dec, matrix_functions as _mf, norms as _norms

__all__ = ["Constraint", "boolean", "cat", "corr_cholesky", "dependent", "dependent_property", "greater_than",
           "greater_than_eq", "half_open_interval", "independent", "integer_interval", "interval", "is_dependent",
           "less_than", "lower_cholesky", "lower_triangular", "nonnegative", "nonnegative_integer", "one_hot",
           "positive", "positive_definite", "positive_integer", "positive_semidefinite", "real", "real_vector",
           "simplex", "square", "stack", "symmetric", "unit_interval"]


class Constraint:
    """A region of valid values; ``is_discrete`` and ``event_dim`` as PyTorch's."""

    is_discrete = False
    event_dim = 0
    # True on a class (not inherited) whose ``check`` reads the same for NumPy, jax and jgrad arrays (operators,
    # ``abs``, ``.all``/``.sum``): validation then checks host values with NumPy and device values in one kernel
    # (``utils.require_constraint``).
    array_generic = False

    def check(self, value):
        raise NotImplementedError  # every concrete constraint below defines it (the base is abstract, as PyTorch's)

    def __repr__(self):
        return self.__class__.__name__[1:] + "()"


class _Dependent(Constraint):
    """A placeholder for a constraint that depends on other parameters; it cannot be checked."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete, self._event_dim = is_discrete, event_dim

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, x):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class _DependentProperty(property, _Dependent):
    """A property of a distribution that is also a dependent constraint (``support`` of ``Uniform``)."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return _DependentProperty(fn, is_discrete=self._is_discrete, event_dim=self._event_dim)


class _IndependentConstraint(Constraint):
    """``base`` over ``reinterpreted_batch_ndims`` more rightmost dimensions."""

    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        self.base_constraint, self.reinterpreted_batch_ndims = base_constraint, reinterpreted_batch_ndims

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        if result.ndim < self.reinterpreted_batch_ndims:
            expected = self.base_constraint.event_dim + self.reinterpreted_batch_ndims
            raise ValueError(f"Expected value.dim() >= {expected} but got {value.ndim}")
        for _ in range(self.reinterpreted_batch_ndims):
            result = result.all(-1)
        return result

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}({self.base_constraint!r}, {self.reinterpreted_batch_ndims})"


class _Boolean(Constraint):
    is_discrete = True
    array_generic = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    array_generic = True
    event_dim = 1

    def check(self, value):
        return ((value == 0) | (value == 1)).all(-1) & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    is_discrete = True
    array_generic = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (value % 1 == 0) & (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _IntegerGreaterThan(Constraint):
    is_discrete = True
    array_generic = True

    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return (value % 1 == 0) & (value >= self.lower_bound)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound})"


class _Real(Constraint):
    array_generic = True
    def check(self, value):
        return value == value  # False only for NaN


class _GreaterThan(Constraint):
    array_generic = True
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return self.lower_bound < value

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound})"


class _GreaterThanEq(_GreaterThan):
    array_generic = True
    def check(self, value):
        return self.lower_bound <= value


class _LessThan(Constraint):
    array_generic = True
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(upper_bound={self.upper_bound})"


class _Interval(Constraint):
    array_generic = True
    def __init__(self, lower_bound, upper_bound):
        self.lower_bound, self.upper_bound = lower_bound, upper_bound

    def check(self, value):
        return (self.lower_bound <= value) & (value <= self.upper_bound)

    def __repr__(self):
        return f"{self.__class__.__name__[1:]}(lower_bound={self.lower_bound}, upper_bound={self.upper_bound})"


class _HalfOpenInterval(_Interval):
    array_generic = True
    def check(self, value):
        return (self.lower_bound <= value) & (value < self.upper_bound)


class _Simplex(Constraint):
    array_generic = True
    event_dim = 1

    def check(self, value):
        return (value >= 0).all(-1) & (abs(value.sum(-1) - 1) < 1e-6)


class _Square(Constraint):
    event_dim = 2

    def check(self, value):
        return _ops.full(value.shape[:-2], value.shape[-2] == value.shape[-1], dtype=_dtype.bool, device=value.device)


class _Symmetric(_Square):
    # Decided from the shape first, so that checking a value needs no host synchronization.
    def check(self, value):
        if value.shape[-2] != value.shape[-1]:
            return super().check(value)
        return _ops.isclose(value, value.mT, atol=1e-6).all(-1).all(-1)


class _LowerTriangular(Constraint):
    event_dim = 2

    def check(self, value):
        return (value.tril() == value).reshape(*value.shape[:-2], -1).min(-1)[0]


class _LowerCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(*value.shape[:-2], -1).min(-1)[0]
        diag = _mf.diagonal(value)
        return lower & (diag > 0).min(-1)[0]


class _CorrCholesky(Constraint):
    event_dim = 2

    def check(self, value):
        tol = _dtype.finfo(value.dtype).eps * value.shape[-1] * 10
        row_norm = _norms.norm(value.detach(), dim=-1)
        unit = ((row_norm - 1.0).abs() <= tol).all(-1)
        return _LowerCholesky().check(value) & unit


class _PositiveSemidefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if value.shape[-2] != value.shape[-1]:
            return sym
        return sym & (_dec.eigvalsh(value) >= 0).all(-1)


class _PositiveDefinite(_Symmetric):
    def check(self, value):
        sym = super().check(value)
        if value.shape[-2] != value.shape[-1]:
            return sym
        return sym & (_dec.eigvalsh(value) > 0).all(-1)


class _Cat(Constraint):
    """Constraints on consecutive slices of ``dim``."""

    def __init__(self, cseq, dim=0, lengths=None):
        self.cseq, self.dim = list(cseq), dim
        self.lengths = list(lengths) if lengths is not None else [1] * len(self.cseq)

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        return max(c.event_dim for c in self.cseq)

    def check(self, value):
        checks, start = [], 0
        for c, length in zip(self.cseq, self.lengths):
            checks.append(c.check(value.narrow(self.dim, start, length)))
            start += length
        return _ops.cat(checks, self.dim)


class _Stack(Constraint):
    """Constraints on the slices of ``dim``."""

    def __init__(self, cseq, dim=0):
        self.cseq, self.dim = list(cseq), dim

    @property
    def is_discrete(self):
        return any(c.is_discrete for c in self.cseq)

    @property
    def event_dim(self):
        dim = max(c.event_dim for c in self.cseq)
        return dim + 1 if self.dim + dim < 0 else dim

    def check(self, value):
        return _ops.stack([c.check(value.select(self.dim, i)) for i, c in enumerate(self.cseq)], self.dim)


dependent = _Dependent()
dependent_property = _DependentProperty
independent = _IndependentConstraint
boolean = _Boolean()
one_hot = _OneHot()
nonnegative_integer = _IntegerGreaterThan(0)
positive_integer = _IntegerGreaterThan(1)
integer_interval = _IntegerInterval
real = _Real()
real_vector = independent(real, 1)
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
greater_than = _GreaterThan
greater_than_eq = _GreaterThanEq
less_than = _LessThan
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
lower_triangular = _LowerTriangular()
lower_cholesky = _LowerCholesky()
corr_cholesky = _CorrCholesky()
square = _Square()
symmetric = _Symmetric()
positive_semidefinite = _PositiveSemidefinite()
positive_definite = _PositiveDefinite()
cat = _Cat
stack = _Stack
