"""The tensor factories that layers below the op library call, without importing it.

A few places below ``jgrad.ops`` need a new tensor: ``Tensor(data)`` and unpickling a tensor (the
factories' conversion rules, ``as_array``), autograd's implicit ``ones`` seed of
``backward()`` on a ``GradientEdge`` and the zeros a custom ``Function`` gets for an undefined gradient
(``materialize_grads``), a generator's state as a tensor (``random.Generator.get_state``), and the
gradient placeholders of ``make_graphed_callables``. Those factories are ops: they go through
``_dispatch`` like any other op, so a capture or a tiered segment records them. The op library sits
above autograd (``ops -> _dispatch -> autograd``), so instead of importing it those layers call the
functions this table holds, and ``jgrad.ops.creation`` fills the table in when it is imported
(``jgrad/__init__.py`` imports the op library before any of these can run).

Imports nothing.
"""
from __future__ import annotations


def _missing(*args, **kwargs):
    raise RuntimeError("jgrad.ops.creation is not imported yet: import jgrad first")


zeros = ones = tensor = empty_like = as_array = _missing


def install(**factories) -> None:
    """Called once by ``jgrad.ops.creation``: ``install(zeros=..., ones=..., tensor=..., empty_like=..., as_array=...)``."""
    unknown = set(factories) - {"zeros", "ones", "tensor", "empty_like", "as_array"}
    if unknown:
        raise TypeError(f"unknown factories: {sorted(unknown)}")
    globals().update(factories)
