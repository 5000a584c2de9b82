"""``jgrad.utils.checkpoint`` (``torch.utils.checkpoint``): activation checkpointing on the tape.

A checkpointed function's activations are not kept for backward. Backward runs the function again to get
them. There are two forms, as in PyTorch:

- ``use_reentrant=True``: a custom autograd Function. Its forward runs the function under ``no_grad`` and
  keeps only the inputs. Its backward reruns the function with grad enabled and runs a nested backward
  through the recomputed graph (a reentrant backward).
- ``use_reentrant=False``: saved-tensor hooks. During the forward, every tensor the function's ops save is
  replaced by its index. The first unpack in backward reruns the function once and collects what its ops
  save, in the same order. Each unpack then returns its tensor, so the original graph's nodes run on
  recomputed values.

With ``preserve_rng_state`` the recomputation sees the random state of the forward, so dropout draws the
same mask. The state is the default generator of every device an input is on, plus the default device.

Imports ``autograd``, ``random``, ``_device`` and ``_tensor``; ``nn`` at the call.
"""
from __future__ import annotations

import contextlib
import warnings

from .. import random as _random
from ..core._tensor import Tensor
from ..autograd import backward as _backward
from ..autograd.function import Function
from ..autograd.graph import saved_tensors_hooks
from ..autograd.grad_mode import enable_grad, no_grad
from ..core._device import get_default_device as _get_default_device

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError"]


def _rng_states(args):
    """The default generators of the devices in play and their keys (immutable arrays: kept, not copied)."""
    devices = {_get_default_device()} | {a.device for a in args if isinstance(a, Tensor)}
    gens = [_random.default_generator(d) for d in devices]
    return [(g, g._key) for g in gens]


@contextlib.contextmanager
def _rng_restored(states):
    """Run with the random state ``states`` (when given), then put the current one back (PyTorch's fork_rng)."""
    if states is None:
        yield
        return
    now = [(g, g._key) for g, _ in states]
    for g, key in states:
        with g._lock:
            g._key = key
    try:
        yield
    finally:
        for g, key in now:
            with g._lock:
                g._key = key


class CheckpointFunction(Function):
    """The reentrant checkpoint: keeps the inputs, reruns the function in backward."""

    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        ctx.run_function = run_function
        ctx.rng = _rng_states(args) if preserve_rng_state else None
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        with no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            inputs[i] = t.detach().requires_grad_(t.requires_grad)
        with _rng_restored(ctx.rng), enable_grad():
            outputs = ctx.run_function(*inputs)
        outputs = (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)
        pairs = [(o, g) for o, g in zip(outputs, grads) if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is not necessary")
        _backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)


class CheckpointError(RuntimeError):
    """The recomputation did not save what the forward saved."""


class _Done(Exception):
    """Raised from the recomputation's pack hook once every tensor the forward saved is back (early stop)."""


class _Recompute:
    """The non-reentrant checkpoint of one call: saved tensors become indices; the first unpack reruns the
    function and collects what it saves."""

    def __init__(self, fn, args, kwargs, rng):
        self.fn, self.args, self.kwargs, self.rng = fn, args, kwargs, rng
        self.count = 0
        self.values = None

    def pack(self, t):
        self.count += 1
        return self.count - 1

    def unpack(self, i):
        if self.values is None:
            self.values = self._rerun()
        return self.values[i]

    def _rerun(self):
        values = []

        def keep(t):
            values.append(t.detach())
            if len(values) == self.count:
                raise _Done  # everything backward needs is back: the rest of the function need not run

        def refuse(_):
            raise RuntimeError("torch.utils.checkpoint: a tensor saved during recomputation was read before the "
                               "recomputation finished.")

        try:
            with _rng_restored(self.rng), enable_grad(), saved_tensors_hooks(keep, refuse):
                self.fn(*self.args, **self.kwargs)
        except _Done:
            pass
        if len(values) != self.count:
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the original forward "
                f"and recomputation.\nNumber of tensors saved during forward: {self.count}\n"
                f"Number of tensors saved during recomputation: {len(values)}.")
        return values


def checkpoint(function, *args, use_reentrant=None, **kwargs):
    """``function(*args, **kwargs)`` with its activations recomputed in backward instead of saved.

    ``use_reentrant`` should be passed (None warns and means True, as in PyTorch); ``preserve_rng_state=True``
    replays the forward's random state in the recomputation. Keyword arguments for ``function`` need
    ``use_reentrant=False``."""
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. use_reentrant=False "
            "is recommended, but if you need to preserve the current default behavior, you can pass "
            "use_reentrant=True. Refer to docs for more details on the differences between the two variants.",
            stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if use_reentrant:
        if kwargs:
            raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        return CheckpointFunction.apply(function, preserve, *args)
    frame = _Recompute(function, args, kwargs, _rng_states(args) if preserve else None)
    with saved_tensors_hooks(frame.pack, frame.unpack):
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run ``functions`` (a list or an ``nn.Sequential``) in order on ``input``, in ``segments`` chunks; every
    chunk but the last is checkpointed."""
    if use_reentrant is None:
        warnings.warn(
            "torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
            "explicitly. use_reentrant=False is recommended, but if you need to preserve the current default "
            "behavior, you can pass use_reentrant=True.", stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    from ..nn import Sequential
    if isinstance(functions, Sequential):
        functions = list(functions.children())

    def run(start, end):
        def forward(x):
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant, preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
