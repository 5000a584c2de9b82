"""``from_jax(fn)``: any jax function of arrays becomes a jgrad op (backward from ``jax.vjp``).

Imports ``_dispatch`` and ``ops._registry``.
"""
from __future__ import annotations

import functools

from ..runtime._dispatch import Op, call
from ._registry import static


def from_jax(fn=None, *, name=None):
    """Wrap a jax function ``fn(*arrays, **static_kwargs)`` as a differentiable jgrad op.

    Positional arguments are tensors (or Python scalars), keyword arguments
    are static (hashable) and part of the compiled kernel's cache key. The
    backward is ``jax.vjp`` of ``fn``, compiled per ``needs_input_grad`` mask.

    >>> import jax.numpy as jnp, jgrad as jg
    >>> softclip = jg.ops.from_jax(lambda x, *, c: c * jnp.tanh(x / c))
    >>> y = softclip(jg.randn(3, requires_grad=True), c=2.0)
    """
    if fn is None:
        return functools.partial(from_jax, name=name)
    op = Op(name or f"{getattr(fn, '__name__', 'jax_fn').capitalize()}Backward0", fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return call(op, *args, **{k: static(v) for k, v in kwargs.items()})

    wrapper.op = op
    return wrapper
