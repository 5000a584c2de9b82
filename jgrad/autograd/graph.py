"""``jgrad.autograd.graph``: introspection of the running backward; hooks on saved tensors.

Imports ``_tensor``, ``engine``, ``node`` and ``grad_mode``.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

from ..core._tensor import Tensor

from .engine import current_execution_order, current_graph_task_id  # noqa: F401
from .grad_mode import state as _state
from .node import GraphRoot, Node, gradient_edge as _gradient_edge  # noqa: F401


class GradientEdge(NamedTuple):
    """An edge of the graph: ``grad()``/``backward()`` accept it in ``inputs=`` like a tensor."""

    node: Node
    output_nr: int


def get_gradient_edge(tensor):
    """The (node, output_nr) a gradient for ``tensor`` flows into (``torch.autograd.graph``)."""
    edge = _gradient_edge(tensor)
    if edge is None:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that does not require "
                           "gradients")
    return GradientEdge(*edge)


class saved_tensors_hooks:
    """Context manager: every tensor saved for backward inside it is passed to ``pack_hook`` and the result kept;
    ``unpack_hook(packed)`` must give back a tensor of the same value each time backward (or ``ctx.saved_tensors``)
    reads it. Nested managers: the innermost pair applies. Thread-local, as PyTorch's."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if _state.saved_hooks_disabled is not None:
            raise RuntimeError(_state.saved_hooks_disabled)
        _state.saved_hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _state.saved_hooks.pop()


class save_on_cpu(saved_tensors_hooks):
    """Saved tensors are copied to the host at the forward and back to their device when backward reads them.

    ``pin_memory`` is accepted for PyTorch's signature: jax host arrays need no pinning (docs/differences.md)."""

    def __init__(self, pin_memory=False, device_type="cuda"):
        def pack_to_cpu(tensor):
            return tensor.device, tensor.cpu()

        def unpack_from_cpu(packed):
            device, tensor = packed
            return tensor.to(device)

        super().__init__(pack_to_cpu, unpack_from_cpu)


class disable_saved_tensors_hooks:
    """Context manager (and decorator) under which entering ``saved_tensors_hooks`` raises
    ``RuntimeError(error_message)``; entering it while hooks are active raises the same."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __enter__(self):
        if _state.saved_hooks:
            raise RuntimeError(self.error_message)
        self.prev = _state.saved_hooks_disabled
        _state.saved_hooks_disabled = self.error_message
        return self

    def __exit__(self, *exc):
        _state.saved_hooks_disabled = self.prev

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with disable_saved_tensors_hooks(self.error_message):
                return fn(*args, **kwargs)
        return wrapper


class _AllowMutationOnSavedContext:
    """What ``allow_mutation_on_saved_tensors`` yields; its graphs can run backward while it is open."""

    def __init__(self):
        self.open = True


@contextlib.contextmanager
def allow_mutation_on_saved_tensors():
    """Tensors saved for backward inside this block may be written in place later in it. Backward reads
    the values they had when they were saved, not the in-place error. jgrad keeps the saved value: an
    immutable jax array, not a copy. Graphs recorded inside must run backward before the block ends."""
    if getattr(_state, "mutation_ctx", None) is not None:
        raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
    ctx = _state.mutation_ctx = _AllowMutationOnSavedContext()

    def pack(t):
        return ctx, Tensor._make(t._data if t._data is not None else t._stale_data(), t._device, t._stream)

    def unpack(packed):
        c, t = packed
        if not c.open:
            raise AssertionError("Trying to backward outside of the 'allow_mutation_on_saved_tensors' context"
                                 "in which the graph was originally recorded.")
        return t

    try:
        with saved_tensors_hooks(pack, unpack):
            yield ctx
    finally:
        ctx.open = False
        _state.mutation_ctx = None
