"""Capture: record the kernels of a stream that captures instead of running them.

While a stream captures, ``_dispatch`` hands every kernel call on it to ``Capture.record``. Outputs are
``Buffer``s (``jgrad.core._recorder``): shape and dtype now, a value only after the graph replays (the memory
of a CUDA graph's pool). At ``end`` the capture hands its outputs to ``graphs.Graph``, which has the
recorded steps compiled into one pure function (``jgrad.runtime._compile.compile_plan``, cached by structure).
Its inputs are the tensors the capture read that existed before it (read afresh at each replay), the
generators it drew from, and buffers of other graphs; its outputs are the buffers still referenced
when the capture ends (tensors, saved tensors, ``.grad``s, optimizer state) and the new generator
keys. Tensors written in place keep their old values until the first replay, as memory would; their
arrays are donated to the executable. Whether a graph packs what it writes in place
(``pack_state``) and which outputs may come back packed (``pack_max_bytes``, ``packable``) are
decided here, read by ``graphs`` at each capture's end.

Imports ``_recorder``, ``_tensor``, ``streams`` (the list of captures under way) and ``random`` (a
generator's key split); none of them imports this module. Used by ``_dispatch`` (``CaptureError``,
``concrete``; it hands kernel calls to ``Capture.record``) and ``graphs`` (``Graph`` owns a Capture).
"""
from __future__ import annotations

import threading
import weakref

import jax

from ..core._recorder import Buffer, Recorder, _settled, _tree_flatten
from ..core._tensor import Tensor
from ..random import _split
from ..streams import active_captures

_identity = jax.jit(lambda x: x)


def _unregister(cap):
    if cap in active_captures:
        active_captures.remove(cap)


class CaptureError(RuntimeError):
    """Something a graph capture cannot record; the capture is abandoned, jgrad stays usable."""


#: Largest output (bytes) that comes back packed. Packing copies the output into the flat array on the
#: device, saving the ~5 us of host time a separate output costs; above ~1 MiB the copy costs more GPU
#: time than that (the seed MLP's 32 MiB weight gradient: ~30 us per replay on an H100).
pack_max_bytes = 1 << 20


#: Whether tensors a packing graph writes in place (parameters, optimizer state) travel as flat arrays
#: (``PackedState``); the same size rule as outputs. Off: one argument and one output per tensor.
pack_state = True


def packable(b):
    """Whether output ``b`` (not an in-place update or a key) may come back packed: not 0-d, not weak,
    at most ``pack_max_bytes``."""
    return 0 < b.size and b.size * b.dtype.itemsize <= pack_max_bytes and b.ndim > 0 and not b.aval.weak_type


def concrete(tree, capture=None):
    """``tree`` with every Buffer replaced by its value; a clear error when it has none."""
    def get(x):
        if type(x) is not Buffer:
            return x
        if x.owner.active and x.owner is not capture:
            raise CaptureError(f"A kernel on a stream that is not part of the capture of {x.owner.graph_name} "
                               f"reads a tensor being captured (shape {list(x.shape)}, dtype {x.dtype}). Make "
                               "that stream join the capture first (side.wait_stream(capturing_stream)).")
        if x.value is None:
            raise x.missing("A tensor this op reads")
        return x.value
    return jax.tree_util.tree_map(get, tree)


class Capture(Recorder):
    """One capture under way (then its plan): the steps, inputs, constants and outputs."""

    def __init__(self, graph_name, stream):
        self.graph_name = graph_name
        self.origin = stream
        self.streams = {stream: 0}      # stream -> kernels recorded on it
        self.rejoined = {}              # side stream -> kernels of it the capture waited for
        self.steps = []                 # (fn, treedef, refs, out indices, stream)
        self.avals = []                 # aval of each buffer, by index
        self.buffers = []               # weakrefs of the buffers, by index
        self.inputs = []                # ("tensor", t) | ("buffer", buf) | ("rng", generator)
        self._input_arrays = []         # what each input held at capture (keeps ids valid)
        self._slot_of_array = {}
        self._slot_of_tensor = {}
        self._slot_of_buffer = {}
        self.consts = []
        self._const_of = {}
        self.written = {}               # id(tensor) -> (tensor, array before the capture)
        self.rng = {}                   # generator -> key before the capture
        self._aliases = {}              # input slot -> weakref of its alias buffer
        self.lock = threading.RLock()
        self.active = True
        self.abandoned = None           # why, once abandoned
        self.failed_replay = None       # the error of its graph's last replay, when that failed
        self.checks = []                # device-side checks recorded (jgrad.runtime._checks), re-armed at each replay

    # ---- recording ------------------------------------------------------------
    def record(self, fn, args, stream, tensors=()):
        """Record ``fn(*args)`` on ``stream``; return its outputs as Buffers (same tree)."""
        with self.lock:
            if not self.active:
                raise CaptureError(f"The capture of {self.graph_name} is no longer under way.")
            for t in tensors:
                if isinstance(t, Tensor) and (type(t._data) is not Buffer or t._data.owner.segment):
                    self._tensor_input(t)  # a tiered segment's result is an input like any array
            leaves, treedef = _tree_flatten(args)
            leaves = [_settled(x) for x in leaves]
            refs = tuple(self._ref(x) for x in leaves)
            self.streams[stream] = self.streams.get(stream, 0) + 1
            return self._append(fn, treedef, leaves, refs, stream)

    def _ref(self, x):
        if type(x) is Buffer:
            if x.owner is self:
                return ("b", x.index)
            if x.owner.active or x.owner.abandoned:
                raise x.missing("A tensor this capture reads")
            k = self._slot_of_buffer.get(id(x))
            if k is None:
                k = self._slot_of_buffer[id(x)] = self._add_input(("buffer", x), x)
            return ("i", k)
        if isinstance(x, jax.Array):
            k = self._slot_of_array.get(id(x))
            if k is not None:
                return ("i", k)
            k = self._const_of.get(id(x))
            if k is None:
                k = self._const_of[id(x)] = len(self.consts)
                self.consts.append(x)
            return ("c", k)
        if type(x) in (int, float, bool, complex):
            # A Python scalar is frozen into the graph, as a CUDA graph freezes kernel arguments
            # (and part of the cache key); it stays weakly typed, as in eager.
            return ("l", type(x).__name__, x)
        self.consts.append(x)
        return ("c", len(self.consts) - 1)

    def _add_input(self, what, array):
        self.inputs.append(what)
        self._input_arrays.append(array)
        return len(self.inputs) - 1

    def _tensor_input(self, t):
        if id(t) in self._slot_of_tensor:
            return
        arr = t._data = _settled(t._data)
        k = self._slot_of_array.get(id(arr))
        if k is None:
            k = self._slot_of_array[id(arr)] = self._add_input(("tensor", t), arr)
        self._slot_of_tensor[id(t)] = k

    def alias(self, array):
        """A buffer for what an input of this capture holds at each replay (saved tensors use it)."""
        k = self._slot_of_array.get(id(array))
        if k is None:
            return array  # a constant of the capture
        ref = self._aliases.get(k)
        b = ref() if ref is not None else None
        if b is None:
            b = self.record(_identity, (array,), self.origin)
            self._aliases[k] = weakref.ref(b)
        return b

    def write(self, t, new):
        """``t._data`` is about to become ``new`` (a Buffer of this capture)."""
        old = t._data
        if type(old) is not Buffer and id(t) not in self.written:
            self.written[id(t)] = (t, old)
        new.holders.append(weakref.ref(t))

    def next_key(self, gen, stream):
        """A generator draw during capture: the key becomes an input, its successor an output."""
        with self.lock:
            key = gen._key = _settled(gen._key)
            if type(key) is not Buffer:
                if gen in self.rng:
                    raise CaptureError("The generator was reseeded during the capture of "
                                       f"{self.graph_name}; seed it before capture_begin().")
                self.rng[gen] = key
                self._slot_of_array[id(key)] = self._add_input(("rng", gen), key)
            new, sub = self.record(_split, (key,), stream)
            gen._key = new
            return sub

    # ---- stream events ------------------------------------------------------------
    def on_event_record(self, event, stream):
        event._capture_mark = (self, stream, self.streams.get(stream, 0))

    def on_join(self, s, event):
        """A stream waited on an event of this capture: its work from now on is captured."""
        if s._capture is not None and s._capture is not self:
            self.fail(f"stream {s.id} waited on {self.graph_name}'s capture while being part of another capture")
        s._capture = self
        self.streams.setdefault(s, 0)

    def on_wait(self, s, event):
        """A capturing stream waited on an event recorded on another stream of this capture."""
        mark = getattr(event, "_capture_mark", None)
        if mark is not None and mark[0] is self:
            src, n = mark[1], mark[2]
            self.rejoined[src] = max(self.rejoined.get(src, 0), n)

    def on_host_sync(self, what):
        self.fail(f"{what} was called while {self.graph_name} was being captured. It needs the value of "
                  "work that is only recorded, not run, during capture (CUDA: operation not permitted when "
                  "stream is capturing). Move it out of the capture, or read the output after replay().")

    def fail(self, message):
        """Abandon the capture (restoring what it changed) and raise CaptureError."""
        self.abandon(message)
        raise CaptureError(message)

    def abandon(self, why):
        with self.lock:
            if not self.active:
                return
            self.active = False
            self.abandoned = why
            self._restore()
            for s in self.streams:
                if s._capture is self:
                    s._capture = None
            _unregister(self)

    def _restore(self):
        # Nothing ran: tensors written in place and generators keep their pre-capture values.
        for t, old in self.written.values():
            t._data = old
        for gen, key in self.rng.items():
            gen._key = key

    # ---- ending ---------------------------------------------------------------------
    def end(self, current):
        """Check the capture can end here, then stop recording; returns the plan's pieces."""
        with self.lock:
            if not self.active:
                raise CaptureError(f"The capture of {self.graph_name} is not under way ({self.abandoned}).")
            if current is not self.origin:
                self.fail(f"Capture must end on the same stream it began on: {self.graph_name} began on "
                          f"{self.origin} but capture_end() was called with {current} current.")
            for s, n in self.streams.items():
                if s is not self.origin and self.rejoined.get(s, 0) < n:
                    self.fail(f"Side stream {s} joined the capture of {self.graph_name} but its work was not "
                              f"rejoined into the capturing stream {self.origin} before capture_end(): call "
                              f"capturing_stream.wait_stream(side_stream) after the side stream's last op.")
            self.active = False
            for s in self.streams:
                if s._capture is self:
                    s._capture = None
            _unregister(self)
            # The outputs: buffers anything still refers to, and the generators' last keys.
            outputs = [b for b in (r() for r in self.buffers) if b is not None]
            for b in outputs:
                b.holders = [r for r in b.holders if (t := r()) is not None and t._data is b]
            gens = list(self.rng)
            key_outs = [g._key for g in gens]
            # The last value written into each pre-capture tensor (before _restore puts the old one back).
            self.final = {id(t): t._data for t, _ in self.written.values() if type(t._data) is Buffer}
            self._restore()
            del self.buffers
            return outputs, gens, key_outs


