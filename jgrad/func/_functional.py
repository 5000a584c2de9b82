"""The bridge of ``jgrad.func``: a jgrad function as a pure JAX function of arrays, and back.

Every jgrad op runs a ``jax.jit`` kernel, and jit kernels accept tracers, so tensors whose storage is a
tracer flow through jgrad's ops unchanged: calling a jgrad function on tensors that wrap (traced) arrays
*is* tracing it into JAX. ``jgrad.func`` wraps the arrays as tensors (``wrap``), applies JAX's transform,
and wraps the arrays it returns as tensors again. Nesting works because a transformed function is itself
a jgrad function of tensors (that wrap the outer transform's tracers).

``run`` traces a transform and compiles it once per traced structure: closed-over tensors become
arguments of the executable (never baked-in constants), and the ops run as one XLA executable. A call
that matches an earlier one reuses its trace (``_trace_cache``), with each of those tensors read again.
While a transform traces (``transform_scope``), the door runs eagerly (a tracer is never recorded into an
"auto"-mode segment), 64-bit types are on as for every kernel, a backward pass inside the function runs
on the calling thread (JAX's tracing state is per thread), and random draws advance the generator's
concrete state (``advance_outside_trace``), never a traced one.

Imports ``_tensor``, ``_recorder``, ``_dtype``, ``random``, ``autograd`` (grad mode), ``_trace_log`` and
``_trace_cache``: the library layer
(docs/design.md, "The house"); ``_segment`` and ``_views`` at the call. ``interop.jax.functionalize`` builds on
the same idea with a ``jax.custom_vjp`` whose backward is jgrad's own engine.
"""
from __future__ import annotations

import collections

import jax
import jax.numpy as jnp

from ..core import _dtype
from .. import random as _random
from ..core._device import get_default_device
from ..core._recorder import Buffer
from ..core._tensor import Tensor
from ..autograd.grad_mode import state as _state
from ..runtime import _segment
from ..runtime import _trace_log, _views
from . import _trace_cache

__all__ = ["array_of", "wrap", "is_tensor", "first_device", "transform_scope", "run", "outputs_to_arrays"]


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


def array_of(t: Tensor):
    """``t``'s array (a tracer inside a transform); a pending value is read first."""
    d = t._data
    if d is None or type(d) is Buffer:
        d = t._value
    if _trace_log.active[0]:  # a concrete array entering a trace: its cache re-reads the tensor (_trace_cache)
        _trace_log.read(t, d)
    return d


def wrap(a, device=None) -> Tensor:
    """A tensor (no history) around the array or tracer ``a``."""
    return Tensor._make(a, device if device is not None else get_default_device())


def first_device(leaves, devs):
    """The device results are put on: the first tensor argument's, else the default device."""
    return next((d for d in devs if d is not None), None) or get_default_device()


def advance_outside_trace(gen):
    """``gen``'s next key, computed on the concrete state even while a transform traces (under ``jax.jit``
    the split would otherwise be staged and the generator would keep a tracer)."""
    _trace_log.impure("a random draw")  # the key is baked into the trace: it is never cached
    with jax.ensure_compile_time_eval():
        return gen._advance()


class transform_scope:
    """What every transform call runs under: eager dispatch, jgrad's 64-bit scope, backward on this thread,
    random draws on the concrete generator state. (A class, not a generator: it runs on every call.)"""

    __slots__ = ("stack", "prev_mt", "x64", "eager")

    def __enter__(self):
        stack = getattr(_random._key_hooks, "stack", None)
        if stack is None:
            stack = _random._key_hooks.stack = []
        self.stack, self.prev_mt, self.x64, self.eager = stack, _state.multithreading_enabled, None, None
        _state.multithreading_enabled = False
        stack.append(advance_outside_trace)
        try:
            if _segment.auto[0]:  # leaving "auto" mode runs the pending work: the inputs are read before the trace
                eager = _segment.execution_mode("eager")
                eager.__enter__()
                self.eager = eager
            x64 = _dtype.x64_scope()
            x64.__enter__()
            self.x64 = x64
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        try:
            if self.x64 is not None:
                self.x64.__exit__(None, None, None)
        finally:
            try:
                if self.eager is not None:
                    self.eager.__exit__(None, None, None)
            finally:
                self.stack.pop()
                _state.multithreading_enabled = self.prev_mt
        return False


#: str(jaxpr) -> the jitted evaluator of that traced structure (least recently used first).
_EXECUTABLES: collections.OrderedDict = collections.OrderedDict()
MAX_EXECUTABLES = 256


def run(fn, *args, cache=None, boxes=(), used=None):
    """``fn(*args)`` (``fn``: a JAX transform of a traced jgrad function), compiled as one executable.

    ``cache`` (a ``_trace_cache.CallKey`` or None) keys the trace: a call that matches an earlier one reuses its
    trace, with the arrays of the tensors it read re-read now (never stale constants); ``boxes`` (lists, or
    objects with a ``__dict__``) hold the Python state the trace leaves behind, restored on a cached call.
    Otherwise the function is traced, and compiled once per traced structure. Inside another transform (an
    argument is a tracer) it runs as it is: the outer one compiles the whole. ``used`` (a list), when given,
    receives ``[entry, flat arguments]`` when the call ran a cached entry (for the transform's ``_fastcall``).
    """
    flat, in_tree = jax.tree_util.tree_flatten(args)
    if any(isinstance(a, jax.core.Tracer) for a in flat):
        return fn(*args)
    key = None
    if cache is not None:
        key = (cache.key, in_tree, tuple([(a.shape, a.dtype, getattr(a, "weak_type", False)) for a in flat]))
        entry = _trace_cache.lookup(key)
        consts = entry.current_consts(cache.leaves) if entry is not None else None
        if consts is not None:
            _trace_cache._stats["hits"] += 1
            for box, state in zip(boxes, entry.boxes):
                restore(box, state)
            if used is not None:
                used[:] = entry, flat
            out = entry.exe(consts, flat)
            return jax.tree_util.tree_unflatten(entry.out_tree, out)
    rec = _trace_log.push()
    try:
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
    finally:
        _trace_log.pop(rec)
        _forget_traced_offsets()
    if rec.parent is None:  # the counter counts the traces a call made, not those nested in them
        _trace_cache._stats["traces"] += 1
    exe = _executable(closed.jaxpr)
    consts = list(closed.consts)
    out_tree = jax.tree_util.tree_structure(out_shape)
    if key is not None:
        kept = list(consts)  # what the entry keeps: the arrays it re-reads are dropped from it
        sources = None if rec.impure is not None else _trace_cache.sources_of(rec, kept, cache)
        if sources is None:
            _trace_cache._stats["uncached"] += 1
        else:
            entry = _trace_cache.Entry(exe, kept, sources, out_tree, [_snapshot(b) for b in boxes], cache.refs)
            _trace_cache.store(key, entry)
            if used is not None:
                used[:] = entry, flat
    return jax.tree_util.tree_unflatten(out_tree, exe(consts, flat))


def _executable(jaxpr):
    key = str(jaxpr)
    exe = _EXECUTABLES.get(key)
    if exe is None:
        exe = _EXECUTABLES[key] = jax.jit(lambda consts, xs: jax.core.eval_jaxpr(jaxpr, consts, *xs))
        if len(_EXECUTABLES) > MAX_EXECUTABLES:
            _EXECUTABLES.popitem(last=False)
    else:
        _EXECUTABLES.move_to_end(key)
    return exe


def _snapshot(box):
    return list(box) if isinstance(box, list) else dict(vars(box))


def restore(box, state):
    if isinstance(box, list):
        box[:] = state
    else:
        vars(box).update(state)


def _forget_traced_offsets():
    """Views made while tracing cache their offset arrays (``_views.offsets``) as tracers of that trace: drop
    them, so that later calls make concrete ones; views regenerated in the trace do not keep its tracers."""
    for k in [k for k, v in _views._OFFSETS.items() if isinstance(v, jax.core.Tracer)]:
        _views._OFFSETS.pop(k, None)
    _views.forget_traced_views()  # and views of concrete memory regenerated in the trace: stale again


def outputs_to_arrays(out, what):
    """A function's output tree with its tensors as arrays; other leaves must be numbers."""
    leaves, treedef = jax.tree_util.tree_flatten(out, is_leaf=is_tensor)
    arrs = []
    for x in leaves:
        if isinstance(x, Tensor):
            arrs.append(array_of(x))
        elif isinstance(x, (int, float, complex, bool)) or isinstance(x, (jax.Array, jax.core.Tracer)):
            arrs.append(jnp.asarray(x))
        else:
            raise ValueError(f"{what}: the function must return tensors (or a tree of them), got an output of type "
                             f"{type(x).__name__}.")
    return arrs, treedef
