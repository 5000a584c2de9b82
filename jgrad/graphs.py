"""Whole-graph capture (PyTorch's CUDA graphs API) onto cached ``jax.jit`` executables.

    >>> g = jg.Graph()
    >>> static_x = jg.ones(3)
    >>> with jg.graph(g):
    ...     static_y = static_x * 2
    >>> static_x.copy_(jg.full((3,), 4.0)); g.replay(); static_y
    tensor([8., 8., 8.])

Between ``capture_begin`` and ``capture_end`` nothing runs: every op on the
capturing stream is recorded. ``capture_end`` compiles the recording into one
XLA executable (cached by its structure, so capturing the same step again
never recompiles), and ``replay`` runs it: it reads the captured inputs
afresh, rebinds every captured output and every tensor written in place, and
advances the random generators it drew from.

Imports ``_capture`` (the recording), ``_compile`` (the executable and its cache), ``_recorder``,
``_segment``, ``_checks`` (captured checks are re-armed by each replay), ``_dispatch`` (the sanitizer's
view of a replay) and ``streams``. Never the op library, nor the tools above it: ``jgrad.profiler`` observes
replays through ``replay_observers``, and ``jgrad.runtime._graphed`` installs ``make_graphed_callables``.
"""
from __future__ import annotations

import itertools
import operator
import time

from .runtime import _capture, _checks, _compile, _dispatch, _segment, _view_writes
from .core import _recorder
from .core._recorder import Buffer as _Buffer
from .runtime._capture import CaptureError  # noqa: F401
from .runtime._compile import cache_clear, cache_info  # noqa: F401
from .runtime._segment import SegmentCacheInfo, StructureInfo, segment_cache_clear, segment_cache_info  # noqa: F401
from .streams import Stream, active_captures, current_stream, default_stream, stream as _stream_ctx
from .streams import _current_for
from .core._dtype import x64_scope
from .streams import _tls
from .core._device import device as _device, get_default_device as _get_default_device

__all__ = ["Graph", "graph", "graph_pool_handle", "make_graphed_callables", "CaptureError", "cache_info",
           "cache_clear"]

_graph_ids = itertools.count()


class _PoolHandle:
    """A memory-pool id: graphs given the same pool are recorded as sharing it."""

    __slots__ = ("id",)

    def __init__(self):
        self.id = next(_pool_ids)

    def __repr__(self):
        return f"<jgrad graph pool {self.id}>"


_pool_ids = itertools.count()

# Called after each replay with (span name, stream, start ns, end ns): jgrad.profiler adds ``record_span`` while
# a profile is active (the tools sit above capture).
replay_observers: list = []


def graph_pool_handle() -> _PoolHandle:
    """A handle to pass as ``pool=`` to several captures so that they share one pool.

    XLA owns the memory of every executable, so sharing is bookkeeping:
    ``Graph.pool()`` reports the handle a graph was captured with.
    """
    return _PoolHandle()


class Graph:
    """A captured graph (``torch.cuda.CUDAGraph``): capture_begin / capture_end, then replay."""

    def __init__(self):
        self._id = next(_graph_ids)
        self._cap = None
        self._plan = None
        self._pool = None
        # Outputs other than in-place updates and 0-d values come back packed, split on first read
        # (_recorder.Packed). None: on accelerators only (on the CPU the packing copy cost more than the
        # outputs it saved: small MLP replay 4.5 -> 5.6 ms). make_graphed_callables turns it off: the
        # engine reads all of its outputs.
        self._pack_outputs = None

    def __repr__(self):
        state = "capturing" if self._cap is not None and self._cap.active else (
            "captured" if self._plan is not None else "empty")
        return f"<jgrad.Graph {self._id} {state}>"

    def capture_begin(self, pool=None, capture_error_mode="global", check_input_liveness=False) -> None:
        """Begin capturing the work of the current stream (use ``jg.graph``, which picks a side stream).

        The stream is the current stream of the default device or, when that one is the
        default stream, the one non-default current stream of another device (so
        ``with jg.stream(jg.Stream("gpu:0")): g.capture_begin()`` captures on the GPU).
        """
        _check_capture_error_mode(capture_error_mode)
        _segment.flush_all()  # a capture beginning is a barrier of tiered execution
        s = _capturing_stream()
        if self._plan is not None or (self._cap is not None and self._cap.active):
            raise RuntimeError("This Graph instance already owns a captured graph. To capture a new graph, "
                               "create a new instance or call reset() first.")
        if s is default_stream(s.device):
            raise CaptureError("Graphs must be captured on a non-default stream. (However, after capture, it's ok "
                               "to replay them on the default stream.) Use `with jg.graph(g):`, which captures on "
                               "a side stream, or make a jg.Stream() current first.")
        if active_captures:
            other = active_captures[0]
            raise CaptureError(f"Cannot begin a capture while the capture of {other.graph_name} is under way on "
                               f"{other.origin}: only one capture may be under way at a time in the process.")
        if s._capture is not None:
            raise CaptureError(f"{s} is already part of a capture.")
        if pool is not None and not isinstance(pool, _PoolHandle):
            raise TypeError(f"pool must come from jg.graph_pool_handle() or Graph.pool(), got {type(pool).__name__}")
        self._pool = pool if pool is not None else graph_pool_handle()
        cap = _capture.Capture(f"Graph {self._id}", s)
        s._capture = cap
        active_captures.append(cap)
        self._cap = cap

    def capture_end(self) -> None:
        """End the capture and compile it (or find it in the executable cache); then ``replay`` works."""
        cap = self._cap
        if cap is None:
            raise RuntimeError("capture_end() was called without capture_begin().")
        outputs, gens, key_outs = cap.end(current_stream(cap.origin.device))
        written = {id(t) for t, _ in cap.written.values()}
        donated = [i for i, (kind, obj) in enumerate(cap.inputs)
                   if (kind == "tensor" and id(obj) in written) or kind == "rng"]
        first, rest = _aliasing_order(cap, outputs, donated, dict(zip(map(id, gens), key_outs)))
        pack = self._pack_outputs if self._pack_outputs is not None else cap.origin.device.type != "cpu"
        state = [(i, b) for i, b in first if pack and _capture.pack_state and _state_packable(cap, i, b)]
        state.sort(key=lambda ib: ib[1].dtype.str)  # grouped by dtype (a stable sort keeps the order)
        in_state = {id(b) for _, b in state}
        first = [b for _, b in first if id(b) not in in_state]
        packed = [b for b in rest if pack and _capture.packable(b)]
        packed.sort(key=lambda b: b.dtype.str)
        in_pack = {id(b) for b in packed}
        outputs = first + [b for b in rest if id(b) not in in_pack]
        compiled, donated, kept, split, state_split = _compile.compile_plan(cap, outputs, donated, packed, state)
        n_state = len(_compile._dtype_groups([b for _, b in state]))
        pos = {id(b): n_state + i for i, b in enumerate(outputs)}
        state_pack = _recorder.PackedState(state_split, [b for _, b in state], [cap.inputs[i][1] for i, _ in state]) \
            if state else None
        self._plan = _Plan(cap, compiled, donated, kept, outputs, [(g, pos[id(k)]) for g, k in zip(gens, key_outs)],
                           packed, split, len(first), state_pack)

    def replay(self) -> None:
        """Run the captured work once, on the current stream."""
        plan = self._plan
        if plan is None:
            raise RuntimeError("replay() was called on a graph that has not been captured: capture it with "
                               "`with jg.graph(g): ...` (or capture_begin()/capture_end()) first.")
        plan.run(_current_for(plan.cap.origin.device))
        _checks.rearm(plan.cap.checks)

    def reset(self) -> None:
        """Forget the captured graph (abandoning a capture under way); the instance can capture again."""
        if self._cap is not None and self._cap.active:
            self._cap.abandon("Graph.reset() was called")
        self._cap = None
        self._plan = None

    def pool(self) -> _PoolHandle:
        """The pool handle this graph was captured with (pass it to another capture to share it)."""
        if self._pool is None:
            raise RuntimeError("pool() is only available after capture_begin().")
        return self._pool

    def _abandon(self, why):
        if self._cap is not None and self._cap.active:
            self._cap.abandon(why)
        self._cap = None


def _state_packable(cap, i, b):
    """Whether donated input ``i``, updated to ``b``, may travel in the graph's flat state arrays."""
    kind, t = cap.inputs[i]
    a = cap._input_arrays[i]
    return kind == "tensor" and _capture.packable(b) and tuple(a.shape) == b.shape and a.dtype == b.dtype


def _aliasing_order(cap, outputs, donated, key_of):
    """``outputs`` split in two: (input index, new value) of each donated input, in the donated inputs' order,
    and the rest.

    jax pairs a donated argument with the first not-yet-paired output of the same shape and dtype. If a
    parameter's buffer went to, say, another layer's gradient, XLA would have to copy the parameter at entry
    (it is still read afterwards); in this order every donated buffer is reused for its own update.
    """
    present = {id(b): b for b in outputs}
    first = {}
    for i in donated:
        kind, obj = cap.inputs[i]
        b = cap.final.get(id(obj)) if kind == "tensor" else key_of.get(id(obj))
        if b is not None and id(b) in present:
            first.setdefault(id(b), (i, b))
    return list(first.values()), [b for b in outputs if id(b) not in first]


class _Plan:
    """What replay needs: the executable, where its inputs come from and where its outputs go."""

    __slots__ = ("cap", "compiled", "donated", "kept", "outputs", "gens", "consts", "span_name", "packed", "pack",
                 "donated_tensors", "kept_tensors", "new_outputs", "state", "n_state")

    def __init__(self, cap, compiled, donated, kept, outputs, gens, packed, split, n_updates, state=None):
        self.cap, self.compiled, self.packed = cap, compiled, packed
        self.new_outputs = outputs[n_updates:]  # not in-place updates of donated inputs: fresh arrays each call
        self.pack = _recorder.Packed(split, packed) if packed else None
        self.state = state  # in-place-updated tensors travelling as flat arrays (_recorder.PackedState)
        self.n_state = len(_compile._dtype_groups(state.buffers)) if state is not None else 0
        # (kind, object) per argument: 0 a tensor's storage, 1 another graph's buffer, 2 a generator key.
        codes = {"tensor": 0, "buffer": 1, "rng": 2}
        self.donated = [(codes[cap.inputs[i][0]], cap.inputs[i][1]) for i in donated]
        self.kept = [(codes[cap.inputs[i][0]], cap.inputs[i][1]) for i in kept]
        # When every argument is a tensor (the usual case), replay reads them in one pass.
        self.donated_tensors = _all_tensors(self.donated)
        self.kept_tensors = _all_tensors(self.kept)
        self.outputs, self.gens = outputs, gens
        self.span_name = f"replay {cap.graph_name}"
        # Scalars go to the device once (weak types kept), not at every replay.
        import jax
        where = cap.origin.device._placement  # a mesh's device (jgrad.distributed): replicated over the mesh
        self.consts = [c if isinstance(c, jax.Array) else jax.device_put(c, where) for c in cap.consts]

    def _read(self, sources, tensors):
        if tensors is not None:
            out = list(map(_storage, tensors))
            kinds = set(map(type, out))
            if _Buffer not in kinds and type(None) not in kinds:
                return out
        out = [obj._fresh()._data if kind == 0 else (obj if kind == 1 else obj._key) for kind, obj in sources]
        for i, d in enumerate(out):
            if type(d) is _Buffer:
                if d.value is None:
                    raise d.missing(f"An input of {self.cap.graph_name}")
                out[i] = d.value
        return out

    def run(self, s):
        if active_captures:
            raise CaptureError(f"Cannot replay {self.cap.graph_name} while a capture is under way (replaying "
                               "inside a capture is not supported).")
        t0 = time.perf_counter_ns()
        if _dispatch._sanitizing[0]:  # the replay reads its inputs and writes every output on s
            reads = [obj for kind, obj in self.cap.inputs if kind == "tensor"]
            state = self.state.buffers if self.state is not None else []
            writes = {id(t): t for b in self.outputs + self.packed + state for t in (r() for r in b.holders)
                      if t is not None}
            _dispatch.check_access(reads, list(writes.values()), s, f"replay of {self.cap.graph_name}")
        args = self._arguments()
        self._release()
        try:
            with x64_scope():
                outs = self.compiled(*args)
        except BaseException as e:
            self.cap.failed_replay = f"{type(e).__name__}: {e}"
            if self.state is not None:  # not run (a bad argument, say): the state is not lost
                self.state.restore(args[0])
            raise
        self.cap.failed_replay = None
        self._bind(outs, s)
        storages = self.cap.__dict__.get("storages")
        if storages:  # the graph writes memory that views share: the views it did not bind read the new values
            _view_writes.rebound(storages)
        if replay_observers:
            t1 = time.perf_counter_ns()
            for observe in list(replay_observers):  # a profile on another thread may end meanwhile
                observe(self.span_name, s, t0, t1)

    def _arguments(self):
        """The executable's arguments: (state flats, other donated values, kept values, constants)."""
        return (self.state.argument() if self.state is not None else [],
                self._read(self.donated, self.donated_tensors), self._read(self.kept, self.kept_tensors), self.consts)

    def _release(self):
        """Drop the previous replay's new outputs before the next call.

        XLA re-records an executable's CUDA graphs whenever one of its buffers comes at another device
        address than in the previous call (66-95 us for the small MLP on an H100, more than half a
        replay). An output still held while the next call allocates lands elsewhere, so the addresses
        alternate and every replay paid that update. Released first, the memory is reused in place.
        A value somebody else still holds (say a detached alias) stays valid; that call just pays the update.
        """
        for b in self.new_outputs:
            b._val = None
            for r in b.holders:
                t = r()
                if t is not None:
                    t._data = b
        if self.pack is not None:
            self.pack.flats = None

    def _bind(self, outs, s):
        """Rebind the captured outputs' tensors, the packed outputs and the generators to one call's results."""
        n = self.n_state
        if n:
            self.state.refill(outs[:n], s)
        for b, v in zip(self.outputs, outs[n:] if n else outs):
            b._val = v
            for r in b.holders:
                t = r()
                if t is not None:
                    t._data, t._stream = v, s
        if self.pack is not None:
            self.pack.refill(outs[n + len(self.outputs):], s)
        for gen, k in self.gens:
            gen._key = outs[k]
        if outs:  # one execution: its outputs are ready together, so the stream tracks one
            s._issued(outs[-1:])


_storage = operator.attrgetter("_data")


def _all_tensors(sources):
    """The tensors of ``sources`` when every one is a tensor argument, else None."""
    return [obj for _, obj in sources] if all(kind == 0 for kind, _ in sources) else None


def _capturing_stream():
    s = current_stream()
    if s is default_stream(s.device):
        others = [o for o in _tls.current.values() if o is not default_stream(o.device)]
        if len(others) == 1:
            return others[0]
    return s


def _capture_device():
    """Where ``jg.graph`` captures by default: the default device, or the first GPU when that is the CPU.

    PyTorch's ``torch.cuda.graph`` always captures CUDA work; jgrad's default device is the CPU
    even on a GPU machine, so a GPU, when there is one, is what a capture is for.
    """
    dev = _get_default_device()
    if dev.type == "cpu":
        import jax
        try:
            if jax.devices("gpu"):
                return _device("gpu:0")
        except RuntimeError:
            pass
    return dev


def _check_capture_error_mode(mode):
    """PyTorch's modes of CUDA stream capture (which calls are unsafe during one): accepted, nothing to set."""
    if mode not in ("default", "global", "thread_local", "relaxed"):
        raise ValueError(f"capture_error_mode must be one of 'default', 'global', 'thread_local' or 'relaxed', got "
                         f"{mode!r}")


class graph:
    """Capture the work of the block into ``g`` on a side stream (``torch.cuda.graph``).

    Args:
        g: the ``jg.Graph`` to capture into.
        pool: a pool handle (``jg.graph_pool_handle()`` or ``other_graph.pool()``) to share.
        stream: the stream to capture on; by default a side stream (one per device, shared by all
            captures) of the default device, or of the first GPU when the default device is the CPU.
    """

    _default_capture_streams: dict = {}

    def __init__(self, cuda_graph: Graph, pool=None, stream: Stream | None = None, capture_error_mode: str = "global",
                 enable_annotations: bool = False, check_input_liveness: bool = False):
        g = cuda_graph  # PyTorch's parameter name
        if not isinstance(g, Graph):
            raise TypeError(f"jg.graph() expects a jg.Graph, got {type(g).__name__}")
        _check_capture_error_mode(capture_error_mode)  # CUDA's stream-capture mode: nothing to relax in XLA
        self.g, self.pool, self.capture_stream = g, pool, stream

    def __enter__(self):
        s = self.capture_stream
        if s is None:
            dev = _capture_device()
            s = graph._default_capture_streams.get(dev)
            if s is None:
                s = graph._default_capture_streams[dev] = Stream(dev)
        s.wait_stream(current_stream(s.device))
        self._ctx = _stream_ctx(s)
        self._ctx.__enter__()
        try:
            self.g.capture_begin(self.pool)
        except BaseException:
            self._ctx.__exit__(None, None, None)
            raise
        return self.g

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is not None:
                self.g._abandon(f"{exc_type.__name__} raised inside the capture")
            else:
                self.g.capture_end()
        finally:
            self._ctx.__exit__(exc_type, exc, tb)
        return False


def make_graphed_callables(callables, sample_args):
    """Graphed versions of callables (functions or Modules): forward and backward each one replay.

    See ``jgrad.graphs`` and PyTorch's ``torch.cuda.make_graphed_callables``:
    the same arguments, constraints and error messages.
    """
    return _graphed_impl[0](callables, sample_args)


# make_graphed_callables builds on Graph: jgrad.runtime._graphed installs it when it loads.
_graphed_impl: list = [None]
