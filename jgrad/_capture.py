"""Capture: record kernels instead of running them; compile the trace once; replay it.

While a stream captures, ``_dispatch`` hands every kernel call on it to
``Capture.record``. Outputs are ``Buffer``s: shape and dtype now, a value only
after the graph replays (the memory of a CUDA graph's pool). At ``end`` the
recorded steps become one pure function, ``jax.jit``-compiled and cached by
its structure. Its inputs are the tensors the capture read that existed
before it (read afresh at each replay), the generators it drew from, and
buffers of other graphs; its outputs are the buffers still referenced when the
capture ends (tensors, saved tensors, ``.grad``s, optimizer state) and the new
generator keys. Tensors written in place keep their old values until the
first replay, as memory would; their arrays are donated to the executable.
"""
from __future__ import annotations

import math
import operator
import threading
import time
import warnings
import weakref

import jax
import numpy as np

from ._dtype import x64_scope


_tree_flatten = jax.tree_util.tree_flatten
_tree_unflatten = jax.tree_util.tree_unflatten


def _unregister(cap):
    from .streams import active_captures  # streams imports the tensor module, which imports this one
    if cap in active_captures:
        active_captures.remove(cap)


class CaptureError(RuntimeError):
    """Something a graph capture cannot record; the capture is abandoned, jgrad stays usable."""


def aval_info(aval):
    """((shape, numpy dtype), jgrad dtype or None, differentiable) of a jax aval, cached per aval.

    What recording a node reads of every input and output: reading it off a jax aval each time
    (Python properties, ``jnp.issubdtype``) costs more than the rest of recording an op.
    """
    info = _INFO.get(aval)
    if info is None:
        from . import _dtype
        dt = np.dtype(aval.dtype)
        try:
            jg_dtype = _dtype.from_np(dt)
        except TypeError:  # a dtype jgrad has no name for (a uint32 generator key)
            jg_dtype = None
        info = _INFO[aval] = ((tuple(aval.shape), dt), jg_dtype, bool(jax.numpy.issubdtype(dt, jax.numpy.inexact)))
    return info


_INFO: dict = {}


def buffer_proto(aval):
    """What every Buffer of this aval holds besides its owner: made once, copied into each (``Buffer.made``)."""
    info = aval_info(aval)
    shape = info[0][0]
    return (aval, shape, info[0][1], len(shape), math.prod(shape), info)


class Buffer:
    """A captured array: known shape and dtype, a value once its graph has replayed."""

    __slots__ = ("aval", "shape", "dtype", "ndim", "size", "info", "_val", "packed", "owner", "index", "holders",
                 "__weakref__")

    def __init__(self, aval, owner, index):
        self.aval, self.shape, self.dtype, self.ndim, self.size, self.info = buffer_proto(aval)
        self._val = None
        self.packed = None  # the Packed this buffer is one of, when its graph packs it
        self.owner = owner
        self.index = index
        self.holders = []  # weakrefs of the tensors bound to this buffer

    @classmethod
    def made(cls, proto, owner, index):
        """A Buffer from ``buffer_proto(aval)`` (the recording hot path: no aval is read)."""
        b = object.__new__(cls)
        b.aval, b.shape, b.dtype, b.ndim, b.size, b.info = proto
        b._val = b.packed = None
        b.owner, b.index, b.holders = owner, index, []
        return b

    @property
    def value(self):
        """The array of the last replay (None before the first); packed outputs are split on first read."""
        if self._val is None:
            if self.owner.segment:
                # A barrier; when another thread is running this segment, flush() waits for it (its lock).
                self.owner.flush()
                if self._val is None and self.packed is not None:
                    v = self._val = self.packed.read(self)  # came back packed: slice it out
                    for r in self.holders:
                        t = r()
                        if t is not None and t._data is self:
                            t._data = v
                    self.holders = []
            elif self.packed is not None and self.packed.flats is not None:
                self.packed.unpack()
        return self._val

    def __repr__(self):
        if self.owner.segment:
            return f"<pending buffer {list(self.shape)} {self.dtype} of a tiered segment on {self.owner.device}>"
        return f"<captured buffer {list(self.shape)} {self.dtype} of {self.owner.graph_name}>"

    def missing(self, what="This tensor"):
        """The error for reading a buffer that has no value."""
        shape = f"shape {list(self.shape)}, dtype {self.dtype}"
        if getattr(self.owner, "failed", None):
            return RuntimeError(f"{what} ({shape}) has no value: the pending work that computes it failed when it "
                                f"ran ({self.owner.failed}).")
        if self.owner.segment:
            return RuntimeError(f"{what} ({shape}) has no value: the pending work that computes it did not run.")
        if self.owner.abandoned:
            return RuntimeError(f"{what} ({shape}) was created during a graph capture that was abandoned "
                                f"({self.owner.abandoned}); it never gets a value. Recreate it outside the capture.")
        if self.owner.failed_replay:
            return RuntimeError(f"{what} ({shape}) has no value: the last replay of {self.owner.graph_name} failed "
                                f"({self.owner.failed_replay}). Fix the cause and replay() again.")
        return RuntimeError(f"{what} ({shape}) was created during the capture of {self.owner.graph_name} and has "
                            "no value until that graph is replayed: call replay() first, then read it.")


class Packed:
    """A graph's packed outputs: a flat array per dtype each replay, split into the buffers' values when read.

    Every output of an executable costs host time at each call (about 6 us on an H100, more than a small
    kernel), so outputs that are often never read between replays (gradients the captured optimizer already
    used, activations) come back as one array per dtype. A replay whose previous outputs nobody read touches
    none of the buffers: their tensors still hold the buffer, whose value is split from the newest flats.
    """

    __slots__ = ("flats", "split", "buffers", "stream", "fresh")

    def __init__(self, split, buffers):
        self.flats, self.split, self.buffers, self.stream = None, split, buffers, None
        self.fresh = True  # every tensor of the pack holds its buffer and no buffer holds a value
        for b in buffers:
            b.packed = self

    def refill(self, flats, stream):
        """Take a replay's flat arrays: the buffers' tensors read them (split) when first used."""
        if not self.fresh or stream is not self.stream:
            for b in self.buffers:
                b._val = None
                for r in b.holders:
                    t = r()
                    if t is not None:
                        t._data, t._stream = b, stream
        self.flats, self.stream, self.fresh = flats, stream, True

    def unpack(self):
        with x64_scope():
            values = self.split(self.flats)
        self.flats, self.fresh = None, False
        for b, v in zip(self.buffers, values):
            b._val = v
            for r in b.holders:  # later ops on these tensors take the array, not the buffer
                t = r()
                if t is not None and t._data is b:
                    t._data = v
        if values:
            self.stream._issued(values[-1:])


class PackedState(Packed):
    """Tensors a graph writes in place (parameters, optimizer state) that travel as one flat array per dtype.

    The flat a replay returns is donated to the next replay as it is, as long as every one of the tensors
    still holds its buffer (nobody read or rebound it since); a read splits it as for ``Packed``, and the
    next replay then concatenates the tensors' current values afresh (one small executable). A small MLP's
    16 parameters as one argument and one output instead of 16 of each: see ``Graph._pack_outputs``.
    """

    __slots__ = ("tensors",)

    def __init__(self, split, buffers, tensors):
        super().__init__(split, buffers)
        self.tensors = tensors

    def argument(self):
        """The flat arrays to donate to the next call (this pack lets go of them)."""
        flats = self.flats
        if flats is None or any(t._data is not b for t, b in zip(self.tensors, self.buffers)):
            values = [t._value for t in self.tensors]  # a read: may split this pack (or another graph's)
            with x64_scope():
                flats = _concat_groups(values, [b.dtype for b in self.buffers])
            self.fresh = False  # the next refill rebinds every tensor, including any rebound meanwhile
        self.flats = None
        return flats

    def restore(self, flats):
        """Take back the flats of a call that failed before running (they were not donated)."""
        if self.flats is None and not any(f.is_deleted() for f in flats):
            self.flats = flats


@jax.jit
def _concat_flat(values):
    return jax.numpy.concatenate([v.ravel() for v in values])


def _concat_groups(values, dtypes):
    """One flat array per run of equal dtypes (the state's buffers are sorted by dtype)."""
    flats, start = [], 0
    for k in range(1, len(values) + 1):
        if k == len(values) or dtypes[k] != dtypes[start]:
            flats.append(_concat_flat(values[start:k]))
            start = k
    return flats


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


def abstract(tree):
    """``tree`` with every Buffer replaced by its ShapeDtypeStruct (for make_jaxpr/eval_shape)."""
    return jax.tree_util.tree_map(lambda x: x.aval if type(x) is Buffer else x, tree)


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


def _settled(x):
    """A tiered segment's buffer as its value (running the segment if it is pending); anything else as is.

    A capture reads tensors afresh at every replay, so it must see arrays, not a segment's buffers."""
    if type(x) is Buffer and x.owner.segment:
        v = x.value
        return v if v is not None else x
    return x


def _aval_key(x):
    if type(x) is Buffer:
        a = x.aval
        return (a.shape, a.dtype, a.weak_type)
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        return (x.shape, np.dtype(x.dtype), bool(getattr(x, "weak_type", False)))
    return (type(x),)


def _layout(x):
    """A sharded array's NamedSharding (a DTensor's layout over its mesh), else None."""
    sh = getattr(x, "sharding", None) if isinstance(x, jax.Array) else None
    return sh if isinstance(sh, jax.sharding.NamedSharding) else None


def _as_aval(x):
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type)
    return x.aval if type(x) is Buffer else x


_shape_cache: dict = {}


def _eval_shape(fn, treedef, leaves):
    key = (fn, treedef, tuple(_aval_key(x) for x in leaves))
    hit = _shape_cache.get(key)
    if hit is None:
        args = _tree_unflatten(treedef, [_as_aval(x) for x in leaves])
        with x64_scope():
            out = jax.eval_shape(fn, *args)
        hit = _shape_cache[key] = _tree_flatten(out)
    return hit


class Recorder:
    """What capture and tiered segments share: steps of kernels on Buffers (see ``jgrad._segment``).

    A step is ``(fn, treedef, refs, out indices, stream)``; a ref is ``("b", i)`` (buffer ``i`` of this
    recorder), ``("i", k)`` (input ``k``), ``("c", k)`` (constant ``k``) or ``("l", type, value)`` (a
    Python scalar frozen into the step). Subclasses decide what an array argument becomes (``_ref``).
    """

    segment = False   # a tiered segment (jgrad._segment), not a capture
    pending = False   # a tiered segment not yet run (reading one of its buffers runs it)
    active = False    # a capture under way
    abandoned = None
    failed_replay = None

    def _append(self, fn, treedef, leaves, refs, stream):
        """Record ``fn`` on ``leaves`` (already turned into ``refs``); return its outputs as Buffers."""
        out_leaves, out_tree = _eval_shape(fn, treedef, leaves)
        outs = [self._new_buffer(a) for a in out_leaves]
        self.steps.append((fn, treedef, refs, tuple(b.index for b in outs), stream))
        return _tree_unflatten(out_tree, outs)

    def _new_buffer(self, aval):
        b = Buffer(aval, self, len(self.avals))
        self.avals.append(aval)
        self.buffers.append(weakref.ref(b))
        return b


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
        self.checks = []                # device-side checks recorded (jgrad._checks), re-armed at each replay

    # ---- recording ------------------------------------------------------------
    def record(self, fn, args, stream, tensors=()):
        """Record ``fn(*args)`` on ``stream``; return its outputs as Buffers (same tree)."""
        from ._tensor import Tensor
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
        from .random import _split
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


# ---- the compiled plan ------------------------------------------------------------------
_identity = jax.jit(lambda x: x)

#: Seconds a compile may take before a progress line goes to stderr (None: never).
progress_after = 2.0

#: XLA options for captured executables on a GPU (per executable: JAX's global config is left alone).
#: XLA runs sequences of at least ``xla_gpu_graph_min_graph_size`` kernels as one CUDA graph (a "command
#: buffer"); its default, 5, leaves the short runs between a capture's non-capturable ops to be launched
#: one by one. Set to None to compile with XLA's defaults.
gpu_compiler_options = {"xla_gpu_graph_min_graph_size": 1}

#: Added on a GPU when a capture has side-stream regions (compute_on('gpu_stream:N') calls). By default
#: XLA records a command buffer's kernels one after the other in its schedule, so a region on another
#: stream does not overlap inside the CUDA graph; "CONCURRENT" gives the graph only the data
#: dependencies as edges. Two chains of 20 128x128 matmuls on an H100: 77 us on two streams vs 100 us on
#: one (with XLA's default scheduling: 99 vs 102 us; RESULTS.md).
side_stream_compiler_options = {"xla_gpu_command_buffer_scheduling_mode": "CONCURRENT"}


def compiler_options(on_gpu: bool, side_stream_regions: bool):
    """The XLA options a capture compiles with (None: XLA's defaults)."""
    if not on_gpu:
        return None
    options = dict(gpu_compiler_options or {})
    if side_stream_regions:
        options.update(side_stream_compiler_options)
    return options or None


class _Progress:
    """Long compiles say so: a line on stderr after ``progress_after`` seconds, then every 10 s."""

    def __init__(self, what):
        self.what = what
        self.done = threading.Event()
        self.spoke = False

    def __enter__(self):
        if progress_after is not None:
            self.t0 = time.perf_counter()
            threading.Thread(target=self._tick, daemon=True, name="jgrad-compile-progress").start()
        return self

    def _tick(self):
        import sys
        wait = progress_after
        while not self.done.wait(wait):
            self.spoke = True
            print(f"jgrad: {self.what}... {time.perf_counter() - self.t0:.0f} s", file=sys.stderr, flush=True)
            wait = 10.0

    def __exit__(self, *exc):
        self.done.set()
        if self.spoke:
            import sys
            print(f"jgrad: {self.what}: done in {time.perf_counter() - self.t0:.1f} s", file=sys.stderr, flush=True)
        return False


class CacheInfo:
    __slots__ = ("hits", "misses", "compile_seconds", "size")

    def __init__(self, hits=0, misses=0, compile_seconds=0.0, size=0):
        self.hits, self.misses, self.compile_seconds, self.size = hits, misses, compile_seconds, size

    def __repr__(self):
        return (f"CacheInfo(hits={self.hits}, misses={self.misses}, compile_seconds={self.compile_seconds:.3f}, "
                f"size={self.size})")

    def _asdict(self):
        return {"hits": self.hits, "misses": self.misses, "compile_seconds": self.compile_seconds, "size": self.size}


_cache: dict = {}
_stats = CacheInfo()
_cache_lock = threading.Lock()


def cache_info() -> CacheInfo:
    """Hits, misses, total compile time and size of the executable cache of captured graphs."""
    return CacheInfo(_stats.hits, _stats.misses, _stats.compile_seconds, len(_cache))


def cache_clear() -> None:
    """Forget every cached executable (the statistics start again)."""
    with _cache_lock:
        _cache.clear()
        _stats.hits = _stats.misses = 0
        _stats.compile_seconds = 0.0


def _on_stream(fn, k, n_out):
    """``fn`` (whose own kernels' jits are inlined) annotated to run on XLA GPU stream ``k``.

    compute_on's API differs across jax versions. The region must hold no further call: XLA (jaxlib
    0.11.2) rejects a stream-annotated call that reaches its work through a nested call ("No
    ExecutionStreamId found for call-start"), so the function transform gets ``fn`` itself.
    """
    import inspect
    from jax.experimental.compute_on import compute_on
    params = inspect.signature(compute_on).parameters
    if "out_memory_spaces" not in params:        # jax <= 0.10: a context manager that annotates jit calls
        return compute_on(f"gpu_stream:{k}")(jax.jit(fn))
    spaces = [jax.memory.Space.Device] * n_out   # newer jax: a function transform
    return compute_on(fn, compute_type=f"gpu_stream:{k}", out_memory_spaces=spaces)


def _region_runner(steps, stream_index, on_gpu):
    """The trace as a function of (env); side-stream regions run under compute_on on GPU."""
    def run_steps(env, group):
        for fn, treedef, refs, outs, _ in group:
            args = _tree_unflatten(treedef, [r[2] if r[0] == "l" else env[r] for r in refs])
            res = jax.tree_util.tree_leaves(fn(*args))
            for i, v in zip(outs, res):
                env[("b", i)] = v

    if not on_gpu or len(stream_index) < 2:
        return lambda env: run_steps(env, steps)

    from jax.experimental.compute_on import compute_on
    groups, cur = [], []
    for st in steps:
        if cur and cur[-1][4] is not st[4]:
            groups.append(cur)
            cur = []
        cur.append(st)
    if cur:
        groups.append(cur)

    def region(group):
        k = stream_index[group[0][4]]
        if k == 0:
            return lambda env: run_steps(env, group)
        needed = sorted({r for st in group for r in st[2] if r[0] != "l"} - {("b", i) for st in group for i in st[3]},
                        key=repr)
        produced = [("b", i) for st in group for i in st[3]]

        def body_fn(vals):
            env = dict(zip(needed, vals))
            with jax.disable_jit():  # the kernels' own jits inlined: see _on_stream
                run_steps(env, group)
            return [env[p] for p in produced]

        body = _on_stream(body_fn, k, len(produced))

        def apply(env):
            for p, v in zip(produced, body([env[n] for n in needed])):
                env[p] = v
        return apply

    parts = [region(g) for g in groups]

    def run_all(env):
        for p in parts:
            p(env)
    return run_all


def compile_plan(cap, outputs, donated, packed=(), state=()):
    """The cached (executable, donated, kept, split, state_split) for this capture.

    ``state`` is a list of (donated input index, its update buffer), sorted by dtype: those inputs arrive as
    one flat array per dtype and their updates leave the same way, first. The executable takes
    (state flats, other donated values, kept values, constants) and returns the state flats, ``outputs`` one
    by one, then ``packed`` (grouped by dtype, in order) as one flat array per dtype; ``split`` and
    ``state_split`` turn flats back into the buffers' values (None when nothing is packed).
    """
    steps = tuple((fn, treedef, refs, outs, st) for fn, treedef, refs, outs, st in cap.steps)
    stream_index = {}
    for st in [cap.origin] + [s for s in cap.streams if s is not cap.origin]:
        stream_index.setdefault(st, len(stream_index))
    dev = cap.origin.device
    on_gpu = dev.type != "cpu"
    in_keys = tuple(_aval_key(a) for a in cap._input_arrays) + tuple(_layout(a) for a in cap._input_arrays)
    key = (tuple((fn, treedef, refs, outs, stream_index[st]) for fn, treedef, refs, outs, st in steps),
           tuple((tuple(a.shape), np.dtype(a.dtype), a.weak_type) for a in cap.avals),
           in_keys, tuple(_aval_key(c) for c in cap.consts), tuple(b.index for b in outputs),
           tuple(b.index for b in packed), tuple((i, b.index) for i, b in state), tuple(donated), str(dev), on_gpu,
           tuple(sorted((compiler_options(on_gpu, len(stream_index) > 1) or {}).items())))
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _stats.hits += 1
            return hit
    n_in = len(cap.inputs)
    kept = [i for i in range(n_in) if i not in set(donated)]
    in_state = {i for i, _ in state}
    donated = [i for i in donated if i not in in_state]
    out_idx = [b.index for b in outputs]
    groups = _dtype_groups(packed)
    state_groups = _dtype_groups(state, dtype=lambda ib: ib[1].dtype)
    try:
        entry, dt = _compile(cap, steps, stream_index, on_gpu, donated, kept, out_idx, groups, state_groups)
    except Exception as e:  # noqa: BLE001 - stream annotations are an optimisation: fall back, loudly
        if not (on_gpu and len(stream_index) > 1):
            raise
        warnings.warn(f"Compiling the side-stream regions of {cap.graph_name} (compute_on regions, concurrent "
                      f"command-buffer scheduling) failed ({type(e).__name__}: {e}); they run inlined on one "
                      "stream instead.", RuntimeWarning)
        entry, dt = _compile(cap, steps, stream_index, False, donated, kept, out_idx, groups, state_groups)
    with _cache_lock:
        _stats.misses += 1
        _stats.compile_seconds += dt
        _cache[key] = entry
    return entry


def _dtype_groups(items, dtype=operator.attrgetter("dtype")):
    """[[item, ...] per dtype], in order: the items must arrive sorted by dtype."""
    groups = []
    for x in items:
        if groups and dtype(groups[-1][0]) == dtype(x):
            groups[-1].append(x)
        else:
            groups.append([x])
    return groups


def _splitter(groups, sharding):
    """The compiled inverse of packing: flat arrays -> the packed buffers' values."""
    def split(flats):
        out = []
        for flat, group in zip(flats, groups):
            at = 0
            for b in group:
                out.append(jax.lax.slice(flat, (at,), (at + b.size,)).reshape(b.shape))
                at += b.size
        return out
    specs = [jax.ShapeDtypeStruct((sum(b.size for b in g),), g[0].dtype, sharding=sharding) for g in groups]
    return jax.jit(split).lower(specs).compile()


def _compile(cap, steps, stream_index, on_gpu, donated, kept, out_idx, groups, state_groups):
    runner = _region_runner(steps, stream_index, on_gpu)
    packed_idx = [[b.index for b in g] for g in groups]
    state_idx = [[b.index for _, b in g] for g in state_groups]

    def run(state_flats, donated_vals, kept_vals, consts):
        env = {}
        for flat, group in zip(state_flats, state_groups):
            at = 0
            for i, b in group:
                env[("i", i)] = jax.lax.slice(flat, (at,), (at + b.size,)).reshape(b.shape)
                at += b.size
        for i, v in zip(donated, donated_vals):
            env[("i", i)] = v
        for i, v in zip(kept, kept_vals):
            env[("i", i)] = v
        for i, v in enumerate(consts):
            env[("c", i)] = v
        runner(env)
        def flat(g):
            return jax.numpy.concatenate([env[("b", i)].ravel() for i in g])
        return [flat(g) for g in state_idx] + [env[("b", i)] for i in out_idx] + [flat(g) for g in packed_idx]

    arrays = cap._input_arrays
    # Every argument lives on the capture's device (jax's default device may be another one); on a mesh's
    # device (jgrad.distributed), a DTensor's array keeps its layout and the rest is replicated.
    where = cap.origin.device._placement
    sharding = where if isinstance(where, jax.sharding.Sharding) else jax.sharding.SingleDeviceSharding(where)

    def spec(x):
        a = _as_aval(x)  # constants are arrays: Python scalars are literals of the plan
        return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False),
                                    sharding=_layout(x) or sharding)

    t0 = time.perf_counter()
    with warnings.catch_warnings(), _Progress(f"compiling the capture of {cap.graph_name} ({len(steps)} kernels)"), \
            x64_scope():
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
        state_specs = [jax.ShapeDtypeStruct((sum(b.size for _, b in g),), g[0][1].dtype, sharding=sharding)
                       for g in state_groups]
        lowered = jax.jit(run, donate_argnums=(0, 1)).lower(
            state_specs, [spec(arrays[i]) for i in donated], [spec(arrays[i]) for i in kept],
            [spec(c) for c in cap.consts])
        options = compiler_options(cap.origin.device.type != "cpu", on_gpu and len(stream_index) > 1)
        compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
        split = _splitter(groups, sharding) if groups else None
        state_split = _splitter([[b for _, b in g] for g in state_groups], sharding) if state_groups else None
    return (compiled, tuple(donated), tuple(kept), split, state_split), time.perf_counter() - t0
