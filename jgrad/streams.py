"""Streams and events with PyTorch's semantics, and a happens-before sanitizer.

JAX orders device work by data dependencies, so jgrad's streams do not
reorder anything: they make PyTorch's contract observable. Every op stamps
its outputs with the current stream of its device; ``Stream.synchronize``,
``Stream.query`` and ``Event`` are real (they wait for, or report on, the
JAX work issued on the stream); and the sanitizer checks every tensor access
against vector clocks, raising ``StreamRaceError`` where a PyTorch program
would race.

Vector clocks: each stream has one (``_vc``: stream id -> time). An op on
stream S ticks S's own entry; ``record``/``wait_event``/``wait_stream`` join
clocks; the host has a clock too, which ``synchronize`` joins and which every
stream inherits when the host issues work on it. An access on S is ordered
after a write at (W, t) iff ``S._vc[W] >= t``.

Imports ``_device``: the streams sit in the bottom layer, under the engine, which installs their
behaviour (``_EngineStreams``) into ``autograd.streams_bridge``. They never import the door, the recorder,
the engine or the op library: tiered
execution's barrier and the deferred checks reach it through hooks they install (``_barrier``,
``_sync_hooks``).
"""
from __future__ import annotations

import itertools
import os
import sys
import threading
import time
import weakref

from .core._device import device as _device, get_default_device

_ids = itertools.count(1)
_PRUNE_EVERY = 1024

# Tiered execution (jgrad.runtime._segment installs it): run the pending work of a device (None: of every device)
# before the host waits on, or asks about, a stream's work. Streams never import the dispatch layer.
_barrier = [lambda device: None]


class StreamRaceError(RuntimeError):
    """Two accesses to a tensor on different streams with no synchronization between them."""


class Stream:
    """An ordered queue of work on one device (``torch.cuda.Stream``); every device has them."""

    __slots__ = ("id", "device", "priority", "_vc", "_pending", "_prune_at", "_host_epoch", "_capture", "_out_meta",
                 "__weakref__")

    def __init__(self, device=None, priority=0, *, _id=None):
        self.device = _device(device) if device is not None else get_default_device()
        self.priority = int(priority)
        self.id = next(_ids) if _id is None else _id
        self._vc = {self.id: 0}
        self._pending = []
        self._prune_at = _PRUNE_EVERY  # _pending's length that prunes it next (_prune)
        self._host_epoch = -1
        self._capture = None
        # jax aval -> the InputMetadata that nodes recorded on this stream share for outputs of
        # that shape and dtype (filled by the dispatcher; InputMetadata is never mutated).
        self._out_meta = {}

    def __repr__(self):
        return f"<jgrad.Stream device={self.device} id={self.id} priority={self.priority}>"

    def __eq__(self, other):
        return self is other

    __hash__ = object.__hash__

    def __enter__(self):
        self._ctx = stream(self)
        return self._ctx.__enter__()

    # -- work tracking ------------------------------------------------------------
    def _issued(self, arrays):
        p = self._pending
        for a in arrays:
            p.append(weakref.ref(a))
        if len(p) > self._prune_at:
            _prune(self)

    def _live(self):
        out = [r() for r in self._pending]
        return [a for a in out if a is not None]

    # -- PyTorch API ----------------------------------------------------------------
    def wait_event(self, event: "Event") -> None:
        """Make work issued on this stream from now on wait for ``event``."""
        _check_capture_join(self, event)
        if event._vc is not None:
            _join(self._vc, event._vc)

    def wait_stream(self, stream: "Stream") -> None:
        """Make work issued on this stream from now on wait for all work queued on ``stream``."""
        if stream is self:
            return
        self.wait_event(stream.record_event())

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = Event() if event is None else event
        event.record(self)
        return event

    def synchronize(self) -> None:
        """Block the host until all work issued on this stream so far has finished."""
        _host_sync_hook("Stream.synchronize()", self)
        _barrier[0](self.device)
        for a in self._live():
            a.block_until_ready()
        self._pending = []
        _host_join(self._vc)

    def query(self) -> bool:
        """Whether all work issued on this stream so far has finished."""
        _barrier[0](self.device)
        live = self._live()
        if all(a.is_ready() for a in live):
            self._pending = []
            return True
        return False


def _prune(s) -> None:
    """Drop the entries of ``s._pending`` whose arrays are gone. The next prune comes once the list has doubled past
    what stayed alive: a program holding many results (a long graph's saved tensors) pruned a list of >1024 live
    entries at every op (30 -> 150 us an op at 3000 live outputs on the 2-core CPU); now each op pays O(1)."""
    kept = [r for r in s._pending if r() is not None]
    s._pending = kept
    s._prune_at = max(_PRUNE_EVERY, 2 * len(kept))


class Event:
    """A marker in a stream: ``record``, ``wait``, ``query``, ``synchronize``, ``elapsed_time``."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self.blocking = blocking
        self._vc = None
        self._arrays = None
        self._stream = None
        self._time = None
        self._done = None
        self._capture_mark = None

    def __repr__(self):
        state = "unrecorded" if self._vc is None else f"recorded on {self._stream}"
        return f"<jgrad.Event {state}>"

    def record(self, stream: Stream | None = None) -> None:
        """Capture the current state of ``stream`` (the current stream when None)."""
        stream = current_stream() if stream is None else stream
        if stream._capture is None:
            _barrier[0](stream.device)  # the event marks work issued so far: pending work runs first
        self._stream = stream
        self._vc = dict(stream._vc)
        self._arrays = [weakref.ref(a) for a in stream._live()]
        self._capture_mark = None
        if stream._capture is not None:
            stream._capture.on_event_record(self, stream)
        if self.enable_timing:
            self._time, self._done = None, threading.Event()
            threading.Thread(target=self._stamp, daemon=True, name="jgrad-event-timer").start()

    def _stamp(self):
        for a in self._live():
            a.block_until_ready()
        self._time = time.perf_counter()
        self._done.set()

    def _live(self):
        return [a for a in (r() for r in self._arrays or ()) if a is not None]

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (the current stream when None) wait for this event."""
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self) -> bool:
        return all(a.is_ready() for a in self._live())

    def synchronize(self) -> None:
        """Block the host until the work captured by this event has finished."""
        _host_sync_hook("Event.synchronize()", self._stream)
        for a in self._live():
            a.block_until_ready()
        if self._done is not None:
            self._done.wait()
        if self._vc is not None:
            _host_join(self._vc)

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and ``end_event`` (both recorded, with timing)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._vc is None or end_event._vc is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        if not (self._done.is_set() and end_event._done.is_set()):
            raise RuntimeError("Both events must be completed before calculating elapsed time: call "
                               "end_event.synchronize() first.")
        return (end_event._time - self._time) * 1000.0


# ---- current and default streams (thread-local, per device) ---------------------------
class _StreamTLS(threading.local):
    def __init__(self):
        self.current = {}


_tls = _StreamTLS()
_defaults: dict = {}
# How many (thread, device) entries of _tls.current exist in all threads. While it is 0 no
# thread has a current stream other than the default, and the per-op lookup skips the
# thread-local. A thread counts its own entry before making it and after removing it, so it
# never reads 0 while it has one; a count left by a thread that died only costs the fast path.
_overrides = [0]
_overrides_lock = threading.Lock()
_defaults_lock = threading.Lock()


def default_stream(device=None) -> Stream:
    """The default stream of ``device`` (the default device when None)."""
    dev = _device(device) if device is not None else get_default_device()
    s = _defaults.get(dev)
    if s is None:
        with _defaults_lock:
            s = _defaults.get(dev)
            if s is None:
                s = _defaults[dev] = Stream(dev, _id=-(len(_defaults) + 1))
    return s


def current_stream(device=None) -> Stream:
    """The stream ops on ``device`` go to in this thread."""
    dev = _device(device) if device is not None else get_default_device()
    s = _tls.current.get(dev)
    return s if s is not None else default_stream(dev)


def _current_for(dev) -> Stream:
    """``current_stream`` for a jgrad device object (the per-op fast path)."""
    s = _tls.current.get(dev) if _overrides[0] else None
    if s is None:
        s = _defaults.get(dev)
        if s is None:
            s = default_stream(dev)
    return s


def set_stream(s: Stream) -> None:
    """Make ``s`` the current stream of its device in this thread."""
    _set_current(s.device, s)


def _set_current(dev, s) -> None:
    """Make ``s`` current for ``dev`` in this thread (None: back to the default stream)."""
    current = _tls.current
    if s is None:
        if current.pop(dev, None) is not None:
            with _overrides_lock:
                _overrides[0] -= 1
        return
    if dev not in current:
        with _overrides_lock:
            _overrides[0] += 1
    current[dev] = s


class stream:
    """Context manager making ``s`` current for its device (``None`` does nothing); nestable."""

    def __init__(self, s: Stream | None):
        self.s = s

    def __enter__(self):
        s = self.s
        if s is None:
            return None
        self.prev = _tls.current.get(s.device)
        _set_current(s.device, s)
        return s

    def __exit__(self, *exc):
        s = self.s
        if s is None:
            return
        _set_current(s.device, self.prev)


class _MultiStream:
    """Make several streams current at once (one per device)."""

    def __init__(self, streams):
        self.ctxs = [stream(s) for s in streams]

    def __enter__(self):
        for c in self.ctxs:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.ctxs):
            c.__exit__(*exc)


def synchronize(device=None) -> None:
    """Block until all work on ``device`` (every device when None) has finished."""
    _host_sync_hook("jgrad.synchronize()", None)
    import jax
    dev = _device(device) if device is not None else None
    _barrier[0](dev)
    for arr in jax.live_arrays():
        if dev is None or dev.jax_device in arr.devices():
            arr.block_until_ready()
    for s in _all_streams():
        if dev is None or s.device is dev:
            s._pending = []
            _host_join(s._vc)


_streams_registry = weakref.WeakSet()


def _all_streams():
    return list(_defaults.values()) + list(_streams_registry)


_orig_init = Stream.__init__


def _registering_init(self, *a, **k):
    _orig_init(self, *a, **k)
    _streams_registry.add(self)


Stream.__init__ = _registering_init


# ---- clocks ------------------------------------------------------------------------
_host = {"vc": {}, "epoch": 0}


def _join(into: dict, other: dict) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def _host_join(vc: dict) -> None:
    _join(_host["vc"], vc)
    _host["epoch"] += 1


def _tick(s: Stream) -> int:
    """The host issues one op on ``s``: inherit what the host knows, advance ``s``."""
    if s._host_epoch != _host["epoch"]:
        _join(s._vc, _host["vc"])
        s._host_epoch = _host["epoch"]
    t = s._vc[s.id] = s._vc.get(s.id, 0) + 1
    return t


# ---- hooks capture uses -------------------------------------------------------------
# Captures under way register here (graphs -> streams, never the reverse): a host
# sync during capture is an error they raise.
active_captures: list = []


# Run at every host synchronization (a value read, synchronize()): jgrad.runtime._checks installs the report of
# pending device-side checks (Note [Deferred checks]). Streams never import the layers above them.
_sync_hooks: list = []


def _host_sync_hook(what, s):
    for cap in list(active_captures):
        cap.on_host_sync(what)
    for hook in _sync_hooks:
        hook(what, s)


def _check_capture_join(s, event):
    mark = event._capture_mark
    if mark is None or not mark[0].active:
        return
    cap = mark[0]
    if s._capture is None:
        cap.on_join(s, event)      # a side stream forks from the capture: its work is captured too
    elif s._capture is cap:
        cap.on_wait(s, event)      # a stream of the capture waits on another one (a rejoin)
    else:
        cap.fail(f"{s} is part of another capture and cannot wait on an event of {cap.graph_name}.")


# ---- the sanitizer ---------------------------------------------------------------
_san = [os.environ.get("JGRAD_STREAM_SANITIZER", "") not in ("", "0")]


class sanitizer:
    """Check every tensor access for stream races while active (``JGRAD_STREAM_SANITIZER=1``: always)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def __enter__(self):
        self.prev = _san[0]
        _san[0] = self.enabled
        return self

    def __exit__(self, *exc):
        _san[0] = self.prev


def sanitizer_enabled() -> bool:
    return _san[0]


class _Access:
    __slots__ = ("stream", "time", "site", "what")

    def __init__(self, stream, t, site, what):
        self.stream, self.time, self.site, self.what = stream, t, site, what


# Frames under these directories are library code: the sanitizer names the first frame outside them.
# jgrad's own; packages built on jgrad (interop/) add theirs with ``library_code``.
_PKG_DIRS = (os.path.dirname(os.path.abspath(__file__)),)


def library_code(directory: str) -> None:
    """Treat frames under ``directory`` as library code where the sanitizer names the user's line."""
    global _PKG_DIRS
    directory = os.path.abspath(directory)
    if directory not in _PKG_DIRS:
        _PKG_DIRS = _PKG_DIRS + (directory,)
        _LIBRARY_FILE.clear()


#: file name -> whether its frames are library code (``_user_site`` runs for every check an op issues)
_LIBRARY_FILE: dict = {}


def _user_site() -> str:
    f = sys._getframe(1)
    library = _LIBRARY_FILE
    while f is not None:
        fn = f.f_code.co_filename
        lib = library.get(fn)
        if lib is None:
            lib = library[fn] = fn.startswith(_PKG_DIRS) or "contextlib" in fn or "threading" in fn
        if not lib:
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def _state(vc: list):
    if len(vc) < 2:
        vc.append([None, []])
    return vc[1]


def _ordered(prev: _Access, s: Stream) -> bool:
    return prev.stream is s or s._vc.get(prev.stream.id, 0) >= prev.time


def _race(tensor_desc, now: _Access, prev: _Access, kind):
    return StreamRaceError(
        f"Stream race on a tensor {tensor_desc}: {kind}. The {now.what} on {now.stream} at {now.site} is not "
        f"ordered after the {prev.what} on {prev.stream} at {prev.site}. Synchronize them first, e.g. "
        f"jgrad.current_stream().wait_stream(s) (or Event.record/wait, or synchronize()).")


def _desc(t):
    return f"(shape {list(t.shape)}, dtype {t.dtype})"


def check_access(reads, writes, s: Stream, opname: str) -> None:
    """Check and record one op on ``s`` reading ``reads`` and writing ``writes`` (tensors)."""
    t = _tick(s)
    site = _user_site()
    for x in reads:
        st = _state(x._vc)
        w = st[0]
        acc = _Access(s, t, site, f"read by {opname}")
        if w is not None and not _ordered(w, s):
            raise _race(_desc(x), acc, w, "read after write")
        st[1].append(acc)
    for x in writes:
        st = _state(x._vc)
        acc = _Access(s, t, site, f"write by {opname}")
        if st[0] is not None and not _ordered(st[0], s):
            raise _race(_desc(x), acc, st[0], "write after write")
        for r in st[1]:
            if not _ordered(r, s):
                raise _race(_desc(x), acc, r, "write after read")
        st[0], st[1][:] = acc, []


def record_new(outputs, s: Stream, opname: str) -> None:
    """Outputs of an op are fresh storage written on ``s``."""
    t = s._vc.get(s.id, 0)
    site = _user_site()
    for x in outputs:
        st = _state(x._vc)
        st[0], st[1][:] = _Access(s, t, site, f"write by {opname}"), []


def blocking_copy(out, src: Stream, dst: Stream, what: str) -> None:
    """A blocking device copy (``.cpu()``, ``.to(device)``): the source was read on ``src``, the host waited
    for it (PyTorch's blocking copy), and ``out`` is fresh storage on ``dst``, ordered after that wait."""
    if not _san[0]:
        return
    _host_join(src._vc)
    _tick(dst)
    record_new((out,), dst, what)


def host_read(t, what: str) -> None:
    """A host read (item/numpy/tolist): a read on the current stream, then its implicit sync."""
    if not _san[0] or t is None:
        return
    s = _current_for(t._device)
    check_access((t,), (), s, what)
    _host_join(s._vc)


# ---- Note [Streaming backwards], for the engine ------------------------------------
class _EngineStreams:
    """What engine.cpp does with streams, on jgrad streams (installed into the engine)."""

    @staticmethod
    def node_stream(fn):
        return _made_current(fn._stream)

    @staticmethod
    def sync_for_accumulation(var, producer, consumer):
        # InputBuffer::add: accumulate on the consumer's stream, synced with the producer's.
        if consumer is not None and producer is not None and consumer is not producer \
                and consumer.device is producer.device:
            consumer.wait_stream(producer)
        return var

    @staticmethod
    def accumulation_stream(consumer):
        return _NULL if consumer is None else _made_current(consumer)

    @staticmethod
    def stash_current_streams(task):
        task.caller_current_streams = dict(_tls.current)

    @staticmethod
    def sync_leaf_streams(task):
        # The caller's *current* stream (not the default stream) waits on every leaf stream.
        for leaf in task.leaf_streams:
            caller = task.caller_current_streams.get(leaf.device) or default_stream(leaf.device)
            if caller is not leaf:
                caller.wait_stream(leaf)

    @staticmethod
    def caller_streams(task):
        return _MultiStream(list(task.caller_current_streams.values()))


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


_NULL = _Null()


def _made_current(s):
    """``stream(s)`` for the engine's guard around a node's work, or what it amounts to when ``s`` is current."""
    cur = _tls.current.get(s.device)
    if cur is s:
        return _NULL
    if cur is None and _defaults.get(s.device) is s:
        # The common case: the stream is its device's default and no stream is set, so it is current already.
        # Making it current (and counting an override) only to undo that is the same, except that a stream a hook
        # set without restoring it is undone too: _RestoreDefault does that.
        return _restore_default(s.device)
    return stream(s)


class _RestoreDefault:
    """``stream(default)`` of one device entered while that default stream is current already: nothing to set
    on entry; on exit, a stream that code inside made current and left so is undone, as ``stream.__exit__``
    would (engine.cpp's stream guard around a node)."""

    __slots__ = ("device",)

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        if self.device in _tls.current:
            _set_current(self.device, None)
        return None


_RESTORE: dict = {}  # device -> its _RestoreDefault


def _restore_default(dev):
    r = _RESTORE.get(dev)
    if r is None:
        r = _RESTORE.setdefault(dev, _RestoreDefault(dev))
    return r
