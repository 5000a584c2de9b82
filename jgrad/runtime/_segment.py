"""Tiered execution ("auto" mode): ops record into a pending segment; a barrier runs it.

This module is the recording half and the entry points: the execution mode, ``Segment.record`` and the structure
trie it walks, each device's pending segment, the calls barriers make (``flush_all``, ``step_boundary``...), the
knobs and the counts. What a barrier does with a segment is ``_segment_barrier``, the other half of ``Segment``.

Imports ``_recorder`` (the recorder core it shares with capture), ``_segment_barrier`` (the barrier, and the state
it shares with this module: the lock, each device's pending segment, the counts), ``_segment_run`` (packed inputs,
dynamic scalars on the device, kernels' shape forms), ``_segment_fail`` (what the journal keeps for a failing
segment), ``_segment_info`` (the counts; which scalars vary), ``_device`` and ``streams`` (it installs the barrier
hook there); nothing of the op library. It installs itself into ``_segment_barrier`` as the module of the knobs.
``_dispatch`` (its ``OpNode`` too), ``_backward_plan`` and ``random`` call ``record``/``segment_for``; ``streams``
reaches the barrier through that hook.

Note [Tiered execution]
~~~~~~~~~~~~~~~~~~~~~~~
Why: in "eager" mode every op and every backward node is one XLA dispatch (~50 us of host time
on a GPU machine, ~5-10 us on a CPU). In "auto" mode ``_dispatch`` records the kernel call instead
(``Segment.record``) and hands back tensors whose storage is a ``Buffer``: shape and dtype at once,
a value later. Everything PyTorch checks at the op (shapes through ``jax.eval_shape``, dtypes,
devices, version counters, leaf in-place) still runs at the op's line; only the kernels wait.

One recorder: capture (``_capture.Capture``) and segments are both ``Recorder``s (``jgrad/core/_recorder.py``) of
the same steps (kernel, argument tree, refs, output buffer indices, stream) producing the same ``Buffer``s, with
shapes from the same cached ``_eval_shape``, and they share the factories' eager rule, the x64
scope and the XLA options. What differs is what an argument becomes: a capture's inputs are tensors
read afresh at every replay (so it keeps tensor slots, constants and stream regions); a segment's
inputs are the arrays the ops read when recorded, and it runs once.

What the key holds: a segment walks a trie while it records. Each step moves from the current
trie node to the child keyed by (kernel, argument tree, refs, stream index, avals of arrays the
segment sees for the first time). A ref names a buffer of this segment by its index (``i >= 0``),
an input by the order it first appeared in (``~k``; a dynamic scalar or a view's offsets, arrays cached per
value, take a new slot at each read, so that two equal values are not a different structure), a Python
scalar by type and value (frozen, as a CUDA graph freezes kernel arguments, until seen varying: a step
that differs from one recorded at the same trie node only in a scalar's value makes that argument of
that kernel a dynamic input from then on, ``_dynamic_args``; optimizers' hyperparameters are dynamic
from the start: ``call_foreach`` passes them as inputs, cached on the device, so a learning-rate
schedule is not a new structure), or a slice of a packed input (Note [The barrier]). So the trie node
reached *is* the structure of everything recorded so far, found incrementally: no walk over the segment at the
barrier. The node also remembers its step's output avals, so a repeated structure skips ``eval_shape``. What the barrier
adds to the key (the buffers still referenced, the inputs it may donate), the tiers and packed outputs: Note [The
barrier] in ``_segment_barrier``.

What the barriers are: reading a value (``item``, ``tolist``, ``numpy``, ``bool``, ``repr``,
``__array__``, DLPack and interop exports, a captured graph's replay reading an input), stream
and device ``synchronize``/``query``, events' ``synchronize``/``query``/``elapsed_time``, a
capture beginning, switching to eager mode, an op reading a tensor of another device's pending
segment, an op reading memory another library may write (``mark_external``: it runs at once), the
end of an optimizer's ``step()`` (a soft barrier: a training loop that reads nothing still runs one
segment per step, the same structure every time), and the size cap ``max_steps``. Hooks, custom
Functions and anomaly mode see tensors; reading one of their values is a barrier like any other.

Failures: a segment journals what each tensor and generator it rebinds held before (``_recorder._Holders``,
``journal``), and a run that fails before its results are bound puts it back (Note [Transactional segments]
in ``_segment_fail``); a thread's failed device-side checks keep its in-place writes from happening (a gate
step recorded at the barrier).

The backward pass: when no user code can run during it, the engine's fast path records the whole
pass as one step (Note [Backward plans], ``_backward_plan``); otherwise each node's kernel is
recorded as the engine runs it.

Streams: jgrad's streams are bookkeeping over JAX's data-ordered dispatch, so a segment holds the
work of every stream of its device in recorded order; the sanitizer checks accesses at the op as
in eager mode. A capture records on its own (``Capture``), after a barrier at its start.
"""
from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import weakref

import jax

from ..core._recorder import Buffer, Recorder, _eval_shape, _tree_flatten, _tree_unflatten
from ..core._recorder import buffer_proto
from ..core._device import device as _Device  # a plain device (a mesh is a MeshDevice, a subclass)
from . import _segment_barrier, _segment_fail as _fail, _segment_info as _info, _segment_run as _run
from ._segment_barrier import Barrier, _ArrayImpl
# The state the barrier shares with the recording, under the names programs, tests and ``_dispatch`` use (the
# barrier's module holds it: it is below this one).
from ._segment_barrier import _Entry, _compiler, _executables, _external, _listed, _lock, _open, _stats  # noqa: F401
from ._segment_barrier import check_gate  # noqa: F401 - installed by ``_checks``
from ._segment_info import SegmentCacheInfo, StructureInfo  # noqa: F401 - re-exported by graphs
from ._segment_stretch import Stretches
from .. import streams

_made = Buffer.made
_copysign = math.copysign
_get_ident = threading.get_ident
_weakref = weakref.ref

_MODES = ("auto", "eager")


def _mode_from_env():
    mode = os.environ.get("JGRAD_EXECUTION", "").strip().lower() or "eager"
    if mode not in _MODES:
        raise ValueError(f"JGRAD_EXECUTION must be 'auto' or 'eager', got {mode!r}.")
    return mode


#: The hot-path flag ``_dispatch`` reads: [True] while ops are recorded ("auto" mode, outside an eager stretch).
auto = [_mode_from_env() == "auto"]
_user_auto = [auto[0]]  # the mode the program chose (``get_execution_mode``)

# ---- the knobs: read when a segment records or runs (the barrier reads them here, ``_segment_barrier.knobs``), so
# setting one on this module acts at once ----------------------------------------------------------------------
#: A structure is compiled when it reaches a barrier this many times (the first time runs op by op).
compile_after = 2
#: Segments with fewer steps run op by op always (one kernel compiled again as one executable gains nothing).
min_steps = 2
#: The size cap: a segment this long runs at once (a loop that never reads a value is cut here).
max_steps = 4096
#: Compile in a background thread (the barrier that starts a compile runs op by op meanwhile). One compile runs at
#: a time; False compiles in the foreground, at the ``compile_after``-th barrier of a structure.
background_compile = True
#: Background compiles are weighed against what they save: a structure compiles once its op-by-op runs have
#: cost ``compile_payback`` times its expected compile time (estimated from the compiles measured so far). A
#: program then never spends more time compiling than it spent running what it compiles (the ski-rental rule):
#: a short program, or one whose structures stop repeating, is not made slower than eager mode by compiles it
#: cannot use. 0 compiles at the ``compile_after``-th barrier.
compile_payback = 1.0
#: Background compiles run at this much lower priority (a thread's nice value, Linux): on a machine whose cores are
#: busy (the program's own threads, XLA's, other processes) a compile takes only what the program leaves, so that
#: compiling does not slow the program it is for (it then finishes later). 0: the program's priority.
compile_nice = 10
#: A segment compiled on a CPU is called once on zeros by the compiling thread, so that the program's first call of
#: it does not pay XLA's one-time loading of its kernels (Note [Warm executables] in ``_warm``), unless its
#: inputs exceed this many bytes. 0: never.
warm_max_bytes = 1 << 28
#: What a compile is expected to cost before any was measured: seconds at 0 ops, and per op (2-core CPU).
compile_prior = (0.3, 0.02)
#: Gradients ``zero_grad`` let go of that one segment keeps to write its results into (``Segment.recycle``).
max_spares = 1024
#: Trie nodes kept before the structure cache starts afresh (shapes that change every step grow it).
max_structures = 50_000

#: While no structure a program repeats is compiled or due to compile, run it as eager mode does between
#: recorded windows, crediting the time to those structures (Note [Eager stretches] in ``_segment_stretch``).
eager_stretches = True
#: Op-by-op runs a window holds before a stretch may start; the longest stretch, in barrier points.
min_window = 8
max_stretch = 256

#: Compiled executables kept: the least recently run is dropped first (its structure compiles again if it
#: repeats). A loop whose shapes change every step makes a new structure, and an executable, per shape.
max_executables = 128
#: Donate inputs nothing else can read (their memory is reused for the results): rebound tensors' old values
#: and dead packs.
donate_inputs = True

#: XLA options for compiled segments on accelerators (None: the capture's, ``_capture.compiler_options``).
gpu_compiler_options = None

#: Which outputs of a compiled segment come back packed (one flat array per dtype, sliced when read): None
#: packs on accelerators only. Every output costs host time per call (~2.5 us on a CPU, ~6 us on an H100,
#: more than a small kernel); a packed one costs a device copy instead, cheap on a GPU and not on a CPU,
#: where packing would also make the first compiled run's structure differ from the next one's.
pack_outputs = None
#: 0-d results (a loss, a metric) that the program reads also come back in pinned host memory, so that
#: ``item()`` reads them without a device-to-host copy (``_host_copies``): None on GPUs only (on a plain device,
#: not a mesh); True on any device; False never.
host_copies = None
#: Largest output (bytes) that is packed (the capture's rule: above ~1 MiB the copy costs more).
pack_max_bytes = 1 << 20

_compiling = _compiler.threads  # the worker thread while one runs
host_forms, add_host_form = _run.host_forms, _run.add_host_form  # (``_checks``: its kernels' host forms)


def set_execution_mode(mode: str) -> None:
    """Choose how ops run: ``"auto"`` (tiered: recorded, run at barriers, compiled once hot) or ``"eager"``."""
    if mode not in _MODES:
        raise ValueError(f"execution mode must be 'auto' or 'eager', got {mode!r}.")
    _stretches.abandon()
    if mode == "eager":
        flush_all()
    auto[0] = _user_auto[0] = mode == "auto"


def get_execution_mode() -> str:
    """The current execution mode, ``"auto"`` or ``"eager"``."""
    return "auto" if _user_auto[0] else "eager"


class execution_mode:
    """Context manager: run the block in ``mode`` (``"auto"`` or ``"eager"``), then restore the previous mode."""

    def __init__(self, mode: str):
        if mode not in _MODES:
            raise ValueError(f"execution mode must be 'auto' or 'eager', got {mode!r}.")
        self.mode = mode

    def __enter__(self):
        self.prev = get_execution_mode()
        set_execution_mode(self.mode)
        return self

    def __exit__(self, *exc):
        set_execution_mode(self.prev)
        return False


def flush_all() -> None:
    """Run every pending segment (a barrier for all devices)."""
    for seg in list(_open.values()):
        seg.flush()


def flush_device(device) -> None:
    """Run the pending segment of ``device``, if any."""
    seg = _open.get(device)
    if seg is not None:
        seg.flush()


def recycle(arrays) -> None:
    """``arrays`` ((array, device) pairs: the gradients ``zero_grad(set_to_none=True)`` drops) are let go of: the
    pending segment of each device may write its results into their memory, if nothing else holds them at its
    barrier (auto mode, plain devices, no capture under way)."""
    if not (auto[0] and donate_inputs) or streams.active_captures:
        return
    by_device = {}
    for array, device in arrays:
        if type(array) is _ArrayImpl and type(device) is _Device:
            by_device.setdefault(device, []).append(array)
    for device, spares in by_device.items():
        segment_for(device).recycle(spares)


def step_boundary() -> None:
    """The end of an optimizer step: pending work runs (one segment per training step, read or not).

    A training loop that never reads a value would otherwise grow one segment up to ``max_steps``,
    cut wherever that falls, so that the cuts rarely repeat and nothing compiles.
    """
    if _stretches.active:
        _stretches.point()
    if _open:
        flush_all()


def _barrier(device) -> None:
    if _open:
        flush_all() if device is None else flush_device(device)


def mark_external(array) -> None:
    """``array`` aliases memory another library may write (a DLPack or NumPy import without a copy).

    An op recorded on it runs at once ("auto" mode flushes right after recording it), as in eager mode:
    recorded and run later, it would read what the other library wrote meanwhile.
    """
    _external[array] = True


def segment_for(device) -> "Segment":
    """The pending segment of ``device`` (a new one when none is pending)."""
    seg = _open.get(device)
    if seg is None:
        with _lock:
            seg = _open.get(device)
            if seg is None:
                seg = _open[device] = Segment(device)
    return seg


# ---- statistics ------------------------------------------------------------------------
#: Structures listed by ``segment_cache_info().per_structure`` (the latest ones).
max_listed = 1000


def segment_cache_info() -> SegmentCacheInfo:
    """Segments run, ops recorded, structures seen, runs op by op vs compiled, compiles and their time; and
    ``per_structure``: each structure's ops, runs, compiled runs, status and why it was new."""
    per = [StructureInfo(e.ops, e.seen_total, e.compiled_runs, e.status(), e.why) for e in list(_listed)]
    return SegmentCacheInfo(**{k: getattr(_stats, k) for k in _info._COUNTS}, per_structure=per)


def segment_cache_clear() -> None:
    """Forget every structure and compiled segment (statistics start again); waits for compiles under way."""
    global _root
    with _lock:
        for seg in list(_open.values()):
            seg.flush()
        _root = _Node()
        _node_count[0] = 0
        _executables.clear()
        _listed.clear()
        _dynamic_args.clear()
        _stretches.reset()
        auto[0] = _user_auto[0]
        for k in _info._COUNTS:
            setattr(_stats, k, 0)


def wait_compiles() -> None:
    """Block until background compiles started so far have finished (tests and benchmarks use it)."""
    _compiler.wait()


# ---- the structure trie ------------------------------------------------------------------
class _Node:
    """A structure prefix: its children by step key, its step's outputs (``buffer_proto`` each, and their
    tree), its plans by live outputs; its parent, step key and depth (for ``why_new``)."""

    __slots__ = ("children", "protos", "out_tree", "single", "plans", "parent", "key", "depth", "__weakref__")

    def __init__(self, protos=(), out_tree=None, parent=None, key=None):
        self.children = {}
        self.protos = protos
        self.out_tree = out_tree
        self.single = out_tree is not None and out_tree.num_leaves == 1 and out_tree.num_nodes == 1
        self.plans = None
        # (the parent weakly: a trie let go of, by _restart_trie or segment_cache_clear, is freed at once, with
        # the executables of its plans, not at the next collection of reference cycles)
        self.parent, self.key = (_weakref(parent) if parent is not None else None), key
        self.depth = parent.depth + 1 if parent is not None else 0


_root = _Node()
_node_count = [0]
#: (kernel, argument tree) -> the positions of its Python scalar arguments seen taking another value at the same
#: point of a structure: recorded as dynamic inputs from then on (``_segment_info.varying_scalars``).
_dynamic_args: dict = {}


def _by_value(x):
    """Whether ``x``, read again in a segment, is a new input all the same: a dynamic scalar (weakly typed) or a
    few ints (a view's offsets). Both are cached per value, so two that happen to be equal are one array: shared,
    they would make a structure that depends on the values. (A tensor read twice is one input, as it may be
    donated only once no other slot holds it.)"""
    aval = getattr(x, "aval", None)
    if aval is None:
        size = getattr(x, "size", 9)
        return size <= 8 and (getattr(x, "weak_type", False) or x.dtype.kind in "iub")
    by = _BY_VALUE.get(aval)
    if by is None:  # (an array's size is a Python property: per aval, once)
        if len(_BY_VALUE) > 4096:
            _BY_VALUE.clear()
        by = _BY_VALUE[aval] = aval.size <= 8 and (aval.weak_type or aval.dtype.kind in "iub")
    return by


_BY_VALUE: dict = {}
_SCALARS = (int, float, bool, complex)
_Tracer = jax.core.Tracer

#: What ``Segment.record`` returns for a call it did not record (a jax tracer among the arguments).
NOT_RECORDED = object()


def _input_aval(x):
    aval = getattr(x, "aval", None)
    if aval is not None:
        return aval
    if type(x) in _SCALARS:
        return type(x)
    return (type(x), getattr(x, "shape", None), str(getattr(x, "dtype", "")))


# ---- the segment -------------------------------------------------------------------------
class Segment(Recorder, Barrier):
    """The pending work of one device in auto mode: recorded here, run by its barrier (``_segment_barrier.Barrier``)."""

    segment = True

    def __init__(self, device):
        self.device = device
        self.pending = True
        self.failed = None
        self.steps = []         # (kernel, argument tree, refs, output buffer indices, stream)
        self.n_buffers = 0
        self.buffers = []       # weakrefs of the buffers, by index
        self.inputs = []        # the arrays (and dynamic scalars) the segment reads
        self.scalars = {}       # input index -> the Python number a dynamic scalar input was made from
        self._slot = {}         # id(array) -> input index
        self.streams = {}       # stream -> index (part of the key)
        self.packs = {}         # input index -> the _segment_run.Pack whose flat array that input is
        self.node = _root
        self.journal_map = {}   # id(tensor) -> what it held before this segment first rebound it (Segment.journal)
        self.spares = []        # arrays let go of before this barrier, given to the executable to write into (recycle)
        g = self.gens = _fail.Gens()  # generators whose key this segment advanced, and their keys before
        g.seg, g.old, g.lock = self, {}, _lock

    def record(self, fn, args, stream, dynamic_scalars=False, barrier=True):
        """Record ``fn(*args)`` (a pytree of arrays, Buffers and scalars); return its outputs as Buffers.

        Returns ``NOT_RECORDED`` (recording nothing) when an argument is a jax tracer: jgrad ops called
        inside a jax transformation (``interop.jax.functionalize``) are traced as in eager mode.
        """
        with _lock:
            if not self.pending:
                return segment_for(self.device).record(fn, args, stream, dynamic_scalars)
            leaves, treedef = _tree_flatten(args)
            n_in = len(self.inputs)
            dpos = _dynamic_args.get((fn, treedef)) if _dynamic_args else None  # scalars seen varying: inputs
            try:
                refs = self._refs(leaves, dynamic_scalars, dpos)
                if refs is NOT_RECORDED:
                    self._forget_inputs(n_in)
                    return NOT_RECORDED
                refs, new, run_now = refs
                st = self.streams.get(stream)
                if st is None:
                    st = self.streams[stream] = len(self.streams)
                key = (fn, treedef, refs, st, new)
                child = self.node.children.get(key)
                if child is None:
                    child = self._new_node(key, leaves, dpos)
                    if child is None:  # a scalar seen varying: recorded again, as an input
                        self._forget_inputs(n_in)
                        return self.record(fn, args, stream, dynamic_scalars, barrier)
            except BaseException:
                self._forget_inputs(n_in)  # the op raised at its line: the segment is as before it
                raise
            # The outputs are made first; then the step joins the segment in statements that run no Python code
            # (a signal's KeyboardInterrupt is raised only at a call or a loop): a segment never holds half a step.
            n = self.n_buffers
            if child.single:
                result = _made(child.protos[0], self, n)
                self.buffers.append(_weakref(result))
                self.steps.append((fn, treedef, refs, (n,), stream))
                self.n_buffers = n + 1
            else:
                outs = [_made(proto, self, i) for i, proto in enumerate(child.protos, n)]
                end = n + len(outs)
                self.buffers.extend(map(_weakref, outs))
                self.steps.append((fn, treedef, refs, tuple(range(n, end)), stream))
                self.n_buffers = end
                result = _tree_unflatten(child.out_tree, outs)
            self.node = child
            _stats.ops += 1
            if (run_now or len(self.steps) >= max_steps) and barrier:
                self.flush()
            return result

    def record_step(self, fn, args, stream):
        """``record`` of a step the barrier itself adds (the gate): it never ends in the barrier."""
        return self.record(fn, args, stream, barrier=False)

    def _refs(self, leaves, dynamic_scalars, dpos):
        """(refs, avals of the inputs first seen, whether it runs at once) of a step's argument ``leaves``, which
        become what the step reads (a value for another segment's buffer, an array for a dynamic scalar); inputs
        it reads first join the segment. ``NOT_RECORDED`` for a jax tracer among them (the caller forgets the
        inputs joined)."""
        refs = []
        new = ()
        run_now = False
        slot = self._slot
        inputs = self.inputs
        for j, x in enumerate(leaves):
            tx = type(x)
            if tx is Buffer:
                if x.owner is self:
                    refs.append(x.index)
                    continue
                pack = x.packed
                if x._val is None and type(pack) is _run.Pack and pack.flats is not None:
                    # An output of an earlier run that came back packed: its flat is the input, the
                    # executable slices it (the slice's place is part of the structure).
                    g, off = pack.where[x.index]
                    flat = pack.flats[g]
                    k = slot.get(id(flat))
                    if k is None:
                        k = slot[id(flat)] = len(inputs)
                        inputs.append(flat)
                        new += (_input_aval(flat),)
                        self.packs[k] = pack
                    refs.append(("s", k, off, x.size, x.shape))
                    continue
                v = x.value  # another device's pending segment runs here; a capture's buffer: its replay's
                if v is None:
                    raise x.missing("A tensor this op reads")
                leaves[j] = x = v
            elif tx in _SCALARS:
                if not dynamic_scalars and (dpos is None or j not in dpos):
                    # (-0.0 == 0.0: the sign goes in the key, or both would be one structure, one constant)
                    refs.append(("l", tx, x) if x != 0 or tx is not float or _copysign(1.0, x) > 0
                                else ("l", tx, x, "-"))
                    continue
                py, leaves[j] = x, _run.device_scalar(x, self.device, leaves, j, None if dynamic_scalars else dpos)
                x = leaves[j]
                if _by_value(x):  # (always: a weakly typed array; its own slot, its own number)
                    self.scalars[len(inputs)] = py
            k = slot.get(id(x))
            if k is None or _by_value(x):
                if isinstance(x, _Tracer):
                    return NOT_RECORDED
                if _external and x in _external:
                    run_now = True
                k = slot[id(x)] = len(inputs)
                inputs.append(x)
                new += (_input_aval(x),)
            refs.append(~k)
        return tuple(refs), new, run_now

    def _new_node(self, key, leaves, dpos):
        """The trie node of step ``key`` (with argument ``leaves``), first seen after this segment's node: its
        outputs' shapes and dtypes (and the op's shape errors) from ``eval_shape``. None when a Python scalar of it
        had another value here before: that argument is an input from now on, and the step is recorded again."""
        fn, treedef = key[0], key[1]
        parent = self.node
        varying = _info.varying_scalars(parent, key) if parent.children else None
        if varying:
            # A Python scalar that had another value here before is data, not structure (a learning
            # rate set by hand, an offset): from now on that argument of this kernel is a dynamic
            # input wherever it is recorded (the other parameters' updates at once, not one per epoch).
            _dynamic_args[(fn, treedef)] = (dpos or frozenset()) | varying
            return None
        sf = _run.shape_forms.get(id(fn)) if _run.shape_forms else None
        sf = sf[1](leaves) if sf is not None and sf[0] is fn else None
        out_leaves, out_tree = sf if sf is not None else _eval_shape(fn, treedef, leaves)
        if _node_count[0] >= max_structures:
            _restart_trie()
            parent = self.node
        child = parent.children[key] = _Node(tuple(map(buffer_proto, out_leaves)), out_tree, parent, key)
        _node_count[0] += 1
        return child

    def journal(self, t):
        """``t`` is about to be rebound to a buffer of this segment: note what it holds (Note [Transactional
        segments] in ``_segment_fail``), the first time only."""
        j = self.journal_map
        if j is None or id(t) in j:  # noted already (an in-place op in a loop: the common case, no lock)
            return
        with _lock:  # (another thread may be running this segment)
            j = self.journal_map
            if self.pending and id(t) not in j:
                d = t._data
                if type(d) is Buffer and d.owner is self:  # made by this segment: its index (a buffer kept alive
                    d = _fail.Earlier(d)                    # would be an output of the segment, never fused away)
                j[id(t)] = (t, d, t._vc[0], t._grad_fn, t._output_nr, t._req, t._stream, _get_ident())

    def recycle(self, arrays):
        """``arrays`` (gradients ``zero_grad`` lets go of) may give their memory to this segment's results."""
        with _lock:
            if not self.pending:
                return segment_for(self.device).recycle(arrays)
            spares = self.spares
            spares += arrays[:max(0, max_spares - len(spares))]

    def _forget_inputs(self, n):
        for k, x in enumerate(self.inputs[n:], n):
            if self._slot.get(id(x)) == k:
                del self._slot[id(x)]
            self.packs.pop(k, None)
            self.scalars.pop(k, None)
        del self.inputs[n:]

def _restart_trie():
    global _root
    _root = _Node()
    _node_count[0] = 0
    _listed.clear()
    for seg in _open.values():
        seg.node = _Node()  # its structure so far is forgotten: it will not match a cached plan


_stretches = Stretches(sys.modules[__name__], auto, _stats, _segment_barrier._worth_compiling,
                       _compiler.expected_seconds)


def _after_run(entry, compiled, seconds):
    _stretches.after_run(entry, compiled, seconds, bool(_open) or bool(streams.active_captures))


def _on_host_read(what, _tensor):
    if _stretches.active:
        _stretches.point()


def _install():
    _segment_barrier.knobs = sys.modules[__name__]  # the barrier reads the knobs where programs set them: here
    _segment_barrier.after_run[0] = _after_run
    streams._sync_hooks.append(_on_host_read)  # a host read is a barrier point of an eager stretch
    streams._barrier[0] = _barrier
    # A compile thread still inside XLA when the interpreter exits can crash it: let it finish (the compiles
    # still queued are dropped: the program that wanted them has ended).
    atexit.register(_at_exit)


def _at_exit():
    _compiler.drop_queued()
    _compiler.wait()


_install()
