"""``optimization_barrier``: tensors XLA may not treat as equal to their inputs (``jax.lax.optimization_barrier``).

Activation checkpointing routes the recomputed region's inputs through it in "auto" mode and in capture,
where the forward and the recomputation land in one executable: without it XLA's common-subexpression
elimination would merge the recomputation with the forward (the same ops on the same arrays), the
activations would stay alive until backward, and the memory would not fall. ``jax.checkpoint`` uses the
same barrier for the same reason.

Imports ``_dispatch`` and ``_tensor``.
"""
from __future__ import annotations

import jax

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor

__all__ = ["optimization_barrier"]

# The gradient passes through unchanged; nothing is saved (a checkpoint's recomputation counts saved tensors).
BARRIER = Op("OptimizationBarrierBackward0", lambda *a: jax.lax.optimization_barrier(tuple(a)),
             lambda ctx, *g: g, save=(), num_outputs=-1)


def optimization_barrier(*tensors):
    """The tensors' values, through one ``jax.lax.optimization_barrier`` (a tuple, one tensor per input)."""
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"optimization_barrier(): expected Tensors, got {type(t).__name__}")
    out = call(BARRIER, *tensors)
    return out if isinstance(out, tuple) else (out,)
