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
``context_fn`` gives the two context managers the forward and the recomputation run under (non-reentrant
only), and ``determinism_check="default"`` compares each recomputed tensor's shape, dtype and device with
the forward's.

In "auto" mode and in capture the forward and the recomputation may be recorded into one executable, where
XLA would merge the recomputation's ops with the forward's (same ops, same arrays) and keep the activations
alive: the recomputation's tensor inputs go through ``ops.barrier.optimization_barrier`` first.

Imports ``autograd``, ``random``, ``core`` (``_device``, ``_tensor``), ``runtime._segment`` and ``streams`` (is
a recording under way) and ``ops.barrier``; ``nn`` at the call.
"""
from __future__ import annotations

import contextlib
import warnings

from .. import random as _random
from ..core._tensor import Tensor
from ..ops.barrier import optimization_barrier
from ..runtime import _segment
from ..streams import active_captures as _active_captures
from ..autograd import backward as _backward
from ..autograd import engine as _engine
from ..autograd.function import Function
from ..autograd.graph import saved_tensors_hooks
from ..autograd.grad_mode import enable_grad, is_grad_enabled as _grad_enabled, no_grad
from ..core._device import get_default_device as _get_default_device

__all__ = ["checkpoint", "checkpoint_sequential", "CheckpointError", "noop_context_fn"]


def noop_context_fn():
    """The default ``context_fn``: two context managers that do nothing."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def _default_meta_extractor(x):
    try:
        dtype = x.dtype
    except TypeError:  # a saved random key (uint32): no jgrad dtype, its array's
        dtype = (x._data if x._data is not None else x._aval).dtype
    return {"shape": tuple(x.shape), "dtype": dtype, "device": x.device}


_METADATA_FNS = {"default": _default_meta_extractor, "none": lambda _: None}


def _barrier(args, after=()):
    """``args`` with their tensors through an optimization barrier when a recording ("auto" mode, capture) would
    otherwise let XLA merge the recomputation into the forward; as they are in eager mode.

    ``after``: gradients that exist only once backward has reached this region. They join each barrier (their
    outputs are dropped), so the recomputation cannot start before they do: without them XLA may schedule it
    right after the forward, and the recomputed activations live as long as the ones checkpointing drops."""
    if not (_segment.auto[0] or _active_captures):
        return args
    after = [g for g in after if isinstance(g, Tensor)]
    out = list(args)
    for group in ([i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad],
                  [i for i, a in enumerate(args) if isinstance(a, Tensor) and not a.requires_grad]):
        if group:
            through = optimization_barrier(*[args[i] for i in group], *[g.detach() for g in after])
            for i, t in zip(group, through):
                out[i] = t
    return type(args)(out) if isinstance(args, tuple) else out


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
            outputs = ctx.run_function(*_barrier(inputs, grads))
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

    def __init__(self, fn, args, kwargs, rng, context, metadata_fn):
        self.fn, self.args, self.kwargs, self.rng = fn, args, kwargs, rng
        self.context, self.metadata_fn = context, metadata_fn
        self.count = 0
        self.meta = []
        self.values = None

    def pack(self, t):
        self.count += 1
        self.meta.append(self.metadata_fn(t))
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
            with _rng_restored(self.rng), enable_grad(), self.context, saved_tensors_hooks(keep, refuse):
                self.fn(*_barrier(self.args, _engine.node_inputs()), **self.kwargs)
        except _Done:
            pass
        if len(values) != self.count:
            raise CheckpointError(
                "torch.utils.checkpoint: A different number of tensors was saved during the original forward "
                f"and recomputation.\nNumber of tensors saved during forward: {self.count}\n"
                f"Number of tensors saved during recomputation: {len(values)}.")
        self._check_metadata(values)
        return values

    def _check_metadata(self, values):
        bad = [(i, m, self.metadata_fn(v)) for i, (m, v) in enumerate(zip(self.meta, values))
               if m != self.metadata_fn(v)]
        if bad:
            listed = "".join(f"tensor at position {i}:\nsaved metadata: {m}\nrecomputed metadata: {r}\n"
                             for i, m, r in bad)
            raise CheckpointError("torch.utils.checkpoint: Recomputed values for the following tensors have "
                                  f"different metadata than during the forward pass.\n{listed}.\n")


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn, determinism_check="default",
               **kwargs):
    """``function(*args, **kwargs)`` with its activations recomputed in backward instead of saved.

    ``use_reentrant`` should be passed (None warns and means True, as in PyTorch); ``preserve_rng_state=True``
    replays the forward's random state in the recomputation. Keyword arguments for ``function``, ``context_fn``
    (a callable returning the context managers of the forward and of the recomputation) and
    ``determinism_check`` ("default": recomputed shapes, dtypes and devices must match; "none") need
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
        if context_fn is not noop_context_fn:
            raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        return CheckpointFunction.apply(function, preserve, *args)
    metadata_fn = _METADATA_FNS.get(determinism_check) if isinstance(determinism_check, str) else None
    if metadata_fn is None:
        raise ValueError(f"determinism_check should be one of {list(_METADATA_FNS)}, but got {determinism_check}")
    forward_context, recompute_context = context_fn()
    if not _grad_enabled():
        return function(*args, **kwargs)  # nothing is saved: nothing to recompute (PyTorch runs it as it is)
    frame = _Recompute(function, args, kwargs, _rng_states(args) if preserve else None, recompute_context,
                       metadata_fn)
    with saved_tensors_hooks(frame.pack, frame.unpack), forward_context:
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
