"""What the engine needs from streams (engine.cpp's Note [Streaming backwards]).

Kept apart so the engine reads as engine.cpp does; ``jgrad.streams`` installs
the real behaviour through ``install``. Until a program uses a stream, every
tensor's and node's stream is None and these are no-ops.

Imports nothing; ``jgrad.streams`` installs into it.
"""
from __future__ import annotations

import contextlib

_NULL = contextlib.nullcontext()
_impl = None


def install(impl) -> None:
    global _impl
    _impl = impl


def node_stream(fn):
    if _impl is None or fn._stream is None:
        return _NULL
    return _impl.node_stream(fn)


def sync_for_accumulation(var, producer, consumer):
    if _impl is None or (producer is None and consumer is None):
        return var
    return _impl.sync_for_accumulation(var, producer, consumer)


def accumulation_stream(consumer):
    if _impl is None or consumer is None:
        return _NULL
    return _impl.accumulation_stream(consumer)


def stash_current_streams(task):
    if _impl is not None:
        _impl.stash_current_streams(task)


def sync_leaf_streams(task):
    if _impl is not None and task.caller_current_streams is not None:
        _impl.sync_leaf_streams(task)


def caller_streams(task):
    if _impl is None or task.caller_current_streams is None:
        return _NULL
    return _impl.caller_streams(task)


from .. import streams as _streams  # noqa: E402  (the streams sit below the engine; their behaviour is installed here)

install(_streams._EngineStreams)
