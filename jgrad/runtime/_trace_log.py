"""What a ``jgrad.func`` trace read and did: the record its trace cache (``jgrad.func._trace_cache``) needs.

While a transform traces a function at the top level, a ``Recorder`` is active on that thread. The door
(``_dispatch._call``) and ``jgrad.func``'s ``array_of`` report every tensor whose concrete array enters the trace
(``read``): the array becomes a constant of the jaxpr, and a cached trace re-reads the tensor on the next call,
so an in-place update between calls is seen. Whatever the cache cannot replay marks the trace ``impure``: a
random draw on the concrete generator, a module hook, a host read (``item()``, ``bool(t)``, ``nonzero()``: the
trace then depends on a value), a backward pass of the engine. Recorders nest (a transform called on concrete tensors inside another's
trace): what an inner trace read and did is also the outer one's.

Imports ``streams`` (its host-sync hooks), ``autograd.engine`` (its fast paths) and jax: the runtime layer
(docs/design.md, "The house").
"""
from __future__ import annotations

import threading

import jax

from .. import streams as _streams
from ..autograd import engine as _engine

__all__ = ["Recorder", "active", "read", "impure", "push", "pop"]

#: How many recorders are active on any thread: the door's test (one load) before it asks this thread's.
active = [0]
_tls = threading.local()
_lock = threading.Lock()


class Recorder:
    """The concrete tensors a trace read (``reads``: (tensor, array) pairs) and the first impurity it hit."""

    __slots__ = ("reads", "impure", "parent")

    def __init__(self, parent):
        self.reads = []
        self.impure = None
        self.parent = parent


def read(tensor, array):
    """The door's hook: ``tensor``'s concrete ``array`` enters the trace being recorded on this thread."""
    rec = getattr(_tls, "rec", None)
    if rec is not None and not isinstance(array, jax.core.Tracer):
        rec.reads.append((tensor, array))


def impure(why: str) -> None:
    """The trace being recorded on this thread did something a cached trace would not repeat."""
    rec = getattr(_tls, "rec", None)
    while rec is not None:
        if rec.impure is None:
            rec.impure = why
        rec = rec.parent


def push() -> Recorder:
    rec = _tls.rec = Recorder(getattr(_tls, "rec", None))
    with _lock:
        active[0] += 1
    return rec


def pop(rec: Recorder) -> None:
    """End ``rec``: its reads and impurity are the enclosing recorder's too."""
    _tls.rec = parent = rec.parent
    with _lock:
        active[0] -= 1
    if parent is not None:
        parent.reads.extend(rec.reads)
        if parent.impure is None:
            parent.impure = rec.impure


def _on_host_sync(what, stream):
    if active[0]:
        impure(what)


def _on_backward(*args):
    """First of the engine's ``fast_paths``: a backward pass while tracing (``is_grads_batched``'s vmap, a
    ``backward()`` inside the function) frees buffers, accumulates ``.grad`` and runs hooks: never cached."""
    if active[0]:
        impure("a backward pass")
    return NotImplemented


_streams._sync_hooks.append(_on_host_sync)
_engine.fast_paths.insert(0, _on_backward)
