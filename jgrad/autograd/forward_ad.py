"""``jgrad.autograd.forward_ad`` (``torch.autograd.forward_ad``): forward-mode AD with dual tensors.

Inside ``dual_level()``, ``make_dual(x, t)`` is a tensor on ``x``'s memory whose tangent is ``t``. Every op
that reads a dual tensor gives its outputs tangents: ``jax.jvp`` of the op's kernel (one rule for every op,
in ``jgrad.runtime._forward_ad``, which installs itself into the op door while a level is active). ``unpack_dual``
returns the primal and the tangent. As in PyTorch, one level exists at a time, and leaving it forgets
every tangent made in it.

Imports ``_tensor`` only; the dispatch rule (above the door) is installed as ``_impl`` by ``jgrad.runtime._forward_ad``.
"""
from __future__ import annotations

from typing import NamedTuple

from ..core._tensor import Tensor

__all__ = ["UnpackedDualTensor", "enter_dual_level", "exit_dual_level", "make_dual", "unpack_dual", "dual_level"]

_current_level = -1
_impl = None  # jgrad.runtime._forward_ad (installed when jgrad loads)


def enter_dual_level():
    """Enter a new forward grad level (the only one: nesting raises, as in PyTorch) and return its index."""
    global _current_level
    if _current_level >= 0:
        raise RuntimeError("Nested forward mode AD is not supported at the moment")
    _impl.activate()
    _current_level = 0
    return _current_level


def exit_dual_level(*, level=None):
    """Exit the forward grad level ``level`` (the current one by default); every tangent made in it is deleted."""
    global _current_level
    if level is None:
        level = _current_level
    if level != _current_level:
        raise RuntimeError("Trying to exit a forward AD level that was not the last one that was created. This is "
                           "not supported.")
    if level < 0:
        raise RuntimeError("Dual level must be a positive number.")
    _impl.deactivate()
    _current_level = level - 1


def _check_level(level):
    if level is None:
        level = _current_level
    if level != _current_level or level < 0:
        raise RuntimeError("Trying to create a dual Tensor for forward AD but no level exists, make sure to "
                           "enter_dual_level() first.")
    return level


def make_dual(tensor, tangent, *, level=None):
    """A tensor on ``tensor``'s memory (sharing its version counter) whose tangent is ``tangent``, kept as-is.

    Backward-differentiable: gradients flow back to ``tensor``. ``tangent`` must have ``tensor``'s size."""
    _check_level(level)
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"Expected primal to be floating point or complex, but got: {tensor.dtype}")
    if not (tangent.is_floating_point() or tangent.is_complex()):
        raise ValueError(f"Expected tangent to be floating point or complex, but got: {tangent.dtype}")
    return _impl.make_dual(tensor, tangent)


class UnpackedDualTensor(NamedTuple):
    """What ``unpack_dual`` returns: ``(primal, tangent)``."""

    primal: Tensor
    tangent: Tensor | None


def unpack_dual(tensor, *, level=None):
    """``(primal, tangent)`` of ``tensor``: ``primal`` a tensor on its memory without the tangent (with its
    autograd history), ``tangent`` the tangent as-is (None when it has none, or outside a level)."""
    if level is None:
        level = _current_level
    if level < 0:
        return UnpackedDualTensor(tensor, None)
    if level != _current_level:
        return UnpackedDualTensor(tensor, None)
    return UnpackedDualTensor(*_impl.unpack_dual(tensor))


class dual_level:
    """Context manager (and decorator) for forward AD: enters a level on entry, exits it (deleting its tangents)
    on exit. Only one level may be active, as in PyTorch."""

    def __enter__(self):
        return enter_dual_level()

    def __exit__(self, *exc):
        exit_dual_level()

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with dual_level():
                return fn(*args, **kwargs)
        return wrapper
