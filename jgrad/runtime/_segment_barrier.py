"""The barrier: what running a pending segment does (Note [The barrier]). Which tier runs it (op by op, or its
structure's compiled executable, compiled in the background once it pays), which inputs it donates and which
gradients ``zero_grad`` let go of it writes its results into, binding the tensors to their values, and letting go
of the segment. ``Barrier`` is the half of ``_segment.Segment`` that does this; the recording half is in
``_segment``.

Imports ``_recorder`` (the Buffer), ``_segment_run`` (how the steps run and compile; the compile worker and the
executables kept), ``_segment_fail`` (rolling back, the gate of in-place writes, Ctrl-C), ``_segment_info`` (the
counts; why a structure was new), ``_device``, ``_dtype`` (the x64 scope), ``_host_copies`` and ``_idmap``. Used by
``_segment`` alone, which builds ``Segment`` on ``Barrier`` and installs itself as ``knobs``: the knobs
(``compile_after``, ``background_compile``, ``donate_inputs``...) are ``_segment``'s attributes, where programs and
tests set them, and the barrier reads them there when it runs. The state both halves share (the lock, each device's
pending segment, the counts) lives here, below them both; ``_segment`` re-exports it under the same names.

Note [The barrier]
~~~~~~~~~~~~~~~~~~
(How a segment is recorded, and what the barriers are: Note [Tiered execution] in ``_segment``.)

What completes the key: the trie node a segment reached is the structure of what it recorded. At the barrier the
key is completed by which buffers are still referenced (weak references: a tensor, a saved tensor, a ``.grad``, a
generator key, a pending device-side check hold them) and which packed inputs may be donated, and which gradients
``zero_grad`` let go of go to it as donated, unread inputs (``recycle``: XLA writes results of their shape into
them, so a training step allocates and frees no gradient); dead intermediates never leave the executable, so XLA
fuses them away, and a segment whose results nobody holds does not run at all.

Tiers: a structure seen for the first time runs op by op (each step's own cached ``jax.jit``
kernel, as eager mode would have run it, outside ``jax.default_device`` as there: JAX keys compiled
kernels by it; a dynamic scalar as the Python number eager mode passes; on a CPU, the device-side checks and the
gate of in-place writes as their host forms, ``_segment_run.host_forms``, which read the computed values). When
the same structure (trie node and live outputs) has reached a barrier ``compile_after`` times and its op-by-op
runs have cost ``compile_payback`` times its expected compile time (the ski-rental rule: compiles never cost a
program more than the runs they replace already did), it is compiled as one executable, in the background by one
worker thread, one compile at a time (the barrier still runs op by op), and from then on runs as that executable. A
structure that never repeats never compiles. Counts, per structure too, with why each was new
(``_segment_info.why_new``): ``jgrad.graphs.segment_cache_info()``. Compiled executables are bounded
(``max_executables``, least recently run dropped first).

Outputs on accelerators (``_segment_run.Layout``, ``Pack``): every output of an executable costs host time per
call, so outputs up to ``pack_max_bytes`` come back as one flat array per dtype. A later segment that
reads one takes the flat as its input and slices it inside its executable; once every buffer of a
pack is gone, the next reader donates the flat, so parameters and optimizer state updated every step
keep one device address (XLA's CUDA graphs are not re-recorded) and cost one argument, not one each.
"""
from __future__ import annotations

import sys
import threading
import time
import warnings

import jax

from ..core import _host_copies
from ..core._device import device as _Device  # a plain device (a mesh is a MeshDevice, a subclass)
from ..core._dtype import x64_scope
from ..core._idmap import IdWeakMap
from ..core._recorder import NO_HOLDERS, Buffer
from . import _segment_fail as _fail, _segment_info as _info, _segment_run as _run
from ._segment_info import SegmentCacheInfo

try:
    from jax._src.array import ArrayImpl as _ArrayImpl
except ImportError:  # pragma: no cover - jax moved it: plain arrays are then never donated
    _ArrayImpl = None
_clock = time.perf_counter

#: The module whose attributes are the knobs the barrier reads (``compile_after``, ``background_compile``,
#: ``donate_inputs``, ``pack_outputs``...): ``_segment``, which installs itself here when it loads.
knobs = None

_lock = threading.RLock()  # held while a segment records or runs (threads may share a device)
_open: dict = {}   # device -> its pending Segment
#: Installed by ``_checks``: [(thread id, device) -> the tensor that is 0 once a device-side check of that thread
#: failed and was not reported yet, or None (a segment's in-place writes by that thread are chosen by it);
#: () -> whether any thread has checks pending].
check_gate = [None, None]
#: Installed by ``_segment``: (entry, ran compiled, seconds of an op-by-op run) after each run (Note [Eager
#: stretches] in ``_segment_stretch``).
after_run = [lambda entry, compiled, seconds: None]
_external = IdWeakMap()  # arrays sharing memory another library may write (``_segment.mark_external``)

_stats = SegmentCacheInfo()
_listed: list = []  # the _Entry of each structure, in the order first seen (the latest ``knobs.max_listed``)
_executables = _run.ExecutableLRU()


# ---- background compiles: one at a time, each once it pays ---------------------------------
_compiler = _run.CompileWorker(lambda: knobs.compile_nice)


def _with_copies(entry, inputs, donatable):
    """(executable, its donation mask, the inputs to call it with) for a run that may donate fewer inputs than
    every compiled variant of its structure would: the variant that needs the fewest bytes copied, called with a
    copy of each input it would donate that something else still reads.

    Which inputs a step may donate depends on what else holds their arrays at that moment (a reference kept
    for one step, a pack with one buffer still alive), and on a GPU it flickers by one input or two between
    steps of a training loop. Before, such a run went op by op until its own variant had paid back a compile:
    a GPT-2-small step ran compiled once in ten. A device copy of the input costs far less."""
    can = set(donatable)

    def cost(variant):
        return sum(inputs[k].size * inputs[k].dtype.itemsize for k in variant[0] if k not in can)

    mask, exe = min(entry.variants, key=cost)
    inputs = list(inputs)
    held = [k for k in mask if k not in can and isinstance(inputs[k], jax.Array)]
    # (one call for all of them; each copy on its array's own device and sharding, asynchronous as the run is)
    for k, c in zip(held, jax.device_put([inputs[k] for k in held], may_alias=False)):
        inputs[k] = c
    _stats.copied_runs += 1
    return exe, mask, inputs


def _worth_compiling(entry):
    """Whether a structure seen ``compile_after`` times compiles now: always in the foreground; in the background
    once its op-by-op runs cost ``compile_payback`` times what its compile is expected to."""
    k = knobs
    if not k.background_compile or k.compile_payback <= 0:
        return True
    return entry.interp_seconds >= k.compile_payback * _compiler.expected_seconds(entry.weight, k.compile_prior)


def _weight(steps):
    """The ops a compile of ``steps`` costs: one a step, and a whole backward pass (one step) one per node."""
    return sum(getattr(s[0], "n_ops", 1) for s in steps)


class _Entry:
    """One structure at a barrier (trie node and live outputs): how often seen, its executables once compiled (one
    per set of donated inputs it was compiled for) and its outputs' layout; what its op-by-op runs cost
    (``interp_seconds``, against which a compile is weighed) and why it was new."""

    __slots__ = ("seen", "variants", "thread", "failed", "layout", "scalars_read", "ops", "why", "seen_total",
                 "compiled_runs", "interp_seconds", "weight")

    def __init__(self, ops=0, why="", weight=None):
        self.seen, self.variants, self.thread, self.failed, self.layout = 0, [], None, None, None
        self.scalars_read = False  # a 0-d result was read on the host (_host_copies): compile host copies in
        self.ops, self.why = ops, why
        self.weight = ops if weight is None else weight  # ops as a compile weighs them (``_weight``)
        self.seen_total = self.compiled_runs = 0  # (``seen`` restarts when its executable is evicted)
        self.interp_seconds = 0.0

    def status(self):
        if self.variants:
            return "compiled"
        if self.thread is not None:
            return "compiling"
        return "failed" if self.failed else "op by op"

    def pick(self, donatable):
        """The executable donating the most inputs among those that donate only ``donatable`` ones (None, ())."""
        best = (None, ())
        for mask, exe in self.variants:
            if mask == donatable:  # (the hot case: it donates all it may, no variant donates more)
                return exe, mask
            if len(mask) >= len(best[1]) and set(mask) <= set(donatable):
                best = (exe, mask)
        return best


class Barrier:
    """The barrier's half of ``_segment.Segment``: running what it recorded (its attributes are set there)."""

    __slots__ = ()

    def flush(self):
        """Run the recorded work: op by op the first times, as one cached executable once hot.

        A failure before the results are bound puts back what the segment wrote (Note [Transactional segments]
        in ``_segment_fail``); device-side checks that fail keep its in-place writes from happening."""
        with _lock:
            if not self.pending:
                return
            state = _fail.State()
            try:
                if check_gate[1] is not None and check_gate[1]() and (self.journal_map or self.gens.old):
                    _fail.gate(self, check_gate[0])
                self.pending = False
                if _open.get(self.device) is self:
                    del _open[self.device]
                live = [b for b in (r() for r in self.buffers) if b is not None]
                if live:
                    with x64_scope():
                        self._run(live, state)
            except BaseException as e:
                self.pending = False
                if _open.get(self.device) is self:
                    del _open[self.device]
                if not state.bound:
                    _fail.roll_back(self, e, state)
                    _stats.rolled_back += 1
                elif isinstance(e, KeyboardInterrupt) and hasattr(e, "add_note"):
                    e.add_note("jgrad: the pending work had run (its compiled executable was called) when the "
                               "interrupt came: every tensor holds its result.")
                self._drop()
                raise
            self._drop()

    def _bind(self, live, vals, pack, state):
        """Give the tensors their values (in a block Ctrl-C waits for: the state is either before or after)."""
        for b, v in zip(live, vals):
            if v is None:  # in the pack: holders keep the buffer, a read slices it out
                b.packed = pack
                continue
            b._val = v
            for r in b.holders:
                t = r()
                if t is not None and t._data is b:
                    t._data = v
            b.holders = NO_HOLDERS
        for gen in self.gens:
            k = gen._key
            if type(k) is Buffer and k.owner is self:
                gen._key = k.value
        if vals:
            last = [v for v in vals[-1:] if v is not None] or pack.flats[-1:]
            for s in self.streams:
                s._issued(last)
        state.bound = True

    def _drop(self):
        # Buffers keep their segment (owner): let go of what it holds.
        self.steps = self.inputs = self.buffers = self.gens = self.packs = None
        self._slot = self.journal_map = self.scalars = self.spares = None

    def _run(self, live, state):
        """Run the recorded steps once and bind ``live`` to their values."""
        out_idx = tuple(b.index for b in live)
        donate = self._donatable()
        spares = self._usable_spares(live)
        inputs = self.inputs
        if spares:
            n = len(inputs)
            inputs = inputs + spares
            donate += tuple(range(n, n + len(spares)))
            plan_key = (out_idx, tuple(x.aval for x in spares))
        else:
            plan_key = out_idx
        entry = self._entry(plan_key)
        entry.seen += 1
        entry.seen_total += 1
        _stats.segments += 1
        exe, mask = entry.pick(donate) if entry.variants else (None, ())
        if exe is None and entry.variants:
            exe, mask, inputs = _with_copies(entry, inputs, donate)
        if exe is None and entry.thread is None and entry.failed is None and entry.seen >= knobs.compile_after \
                and len(self.steps) >= knobs.min_steps and _worth_compiling(entry):
            # Compiled for what may be donated now; a later run that can donate less copies what it may not
            # give away, one that can donate more uses it (donating fewer inputs is always safe).
            self._start_compile(entry, live, donate, inputs)
            exe, mask = entry.pick(donate)
        if exe is not None and self._run_compiled(entry, exe, mask, inputs, live, state):
            after_run[0](entry, True, 0.0)
            return
        if spares:  # op by op: the gradients let go of are freed now, before the new ones are made (peak memory)
            self.spares = spares = inputs = None
        before = entry.interp_seconds
        self._run_op_by_op(entry, out_idx, live, state)
        after_run[0](entry, False, entry.interp_seconds - before)

    def _entry(self, plan_key):
        """The structure of this run (its trie node and ``plan_key``: live outputs, recycled arrays), new or seen."""
        node = self.node
        if node.plans is None:
            node.plans = {}
        entry = node.plans.get(plan_key)
        if entry is None:
            entry = node.plans[plan_key] = _Entry(len(self.steps), weight=_weight(self.steps))
            entry.why = _info.why_new(node, plan_key)
            _stats.structures += 1
            max_listed = knobs.max_listed
            if len(_listed) >= max_listed:
                del _listed[:max(1, max_listed // 2)]
            _listed.append(entry)
        return entry

    def _run_compiled(self, entry, exe, mask, inputs, live, state):
        """Call the structure's executable on ``inputs`` and bind ``live`` to its results; False (nothing bound)
        where the call failed and the run can go op by op instead (its inputs are intact)."""
        _executables.touch(entry)
        state.compiled = True
        with _fail.interrupts_wait():  # donated inputs are gone once it runs: its results are the state
            t0 = _clock()
            try:
                outs = exe(*inputs)
            except Exception as e:  # noqa: BLE001 - an out-of-memory; an input on another device than compiled
                if any(isinstance(x, jax.Array) and x.is_deleted() for x in self.inputs):
                    raise  # its inputs were consumed: nothing can run it again (the tensors are restored)
                if isinstance(e, jax.errors.JaxRuntimeError):  # it ran and failed (out of memory): this run
                    warnings.warn(f"jgrad: the compiled executable of a segment of {len(self.steps)} ops "
                                  f"failed ({type(e).__name__}: {e}); this run goes op by op.", RuntimeWarning,
                                  stacklevel=4)
                else:  # it cannot take these inputs (another device than compiled for): op by op from now on
                    entry.variants, entry.failed = [], f"{type(e).__name__}: {e}"
                    _executables.forget(entry)
            else:
                _stats.call_seconds += _clock() - t0
                _stats.compiled_runs += 1
                entry.compiled_runs += 1
                if mask:
                    _stats.donated_runs += 1
                vals, pack = entry.layout.bind(outs, live)
                self._bind(live, vals, pack, state)
                return True
        state.compiled = False
        return False

    def _run_op_by_op(self, entry, out_idx, live, state):
        """Run the steps op by op (``_interpret``) and bind ``live`` to their values."""
        _stats.interpreted += 1
        t0 = _clock()
        vals = self._interpret(out_idx, state)
        entry.interp_seconds += _clock() - t0
        if not entry.scalars_read and self._wants_host_copies():
            for b, v in zip(live, vals):
                if b.ndim == 0:
                    _host_copies.watch(v, entry)
        with _fail.interrupts_wait():
            self._bind(live, vals, None, state)

    def _wants_host_copies(self):
        host_copies = knobs.host_copies
        if host_copies is not None:
            return host_copies
        return self.device.type == "gpu" and type(self.device) is _Device

    def _donatable(self):
        """Input positions nothing can read after this run: a flat array whose pack's buffers are all gone, and an
        array that only this segment still holds (the old value of a tensor rebound in place: a parameter after
        the optimizer's update). XLA may then write the results into their memory."""
        if not knobs.donate_inputs:
            return ()
        packs = self.packs
        inputs = self.inputs
        out = []
        getrefcount = sys.getrefcount
        # The journal's references (what rebound tensors held, kept in case the run fails) do not count.
        spare = {}
        for entry in self.journal_map.values():
            spare[id(entry[1])] = spare.get(id(entry[1]), 0) + 1
        entry = None
        # Not on a mesh: a sharded array's shards are other Python objects on the same buffers (to_local,
        # collectives), which the reference count does not see.
        plain = type(self.device) is _Device
        external = _external if len(_external) else ()
        for k in range(len(inputs)):
            x = inputs[k]  # (not enumerate: its result tuple would hold x too)
            pack = packs.get(k) if packs else None
            if pack is not None:
                if pack.dead(spare):
                    out.append(k)
            # held by self.inputs, this loop and getrefcount's argument only: no tensor, saved tensor, NumPy
            # view or user reference can read it (memory another library shares is never donated)
            elif plain and getrefcount(x) <= 3 + spare.get(id(x), 0) and type(x) is _ArrayImpl \
                    and x not in external:
                out.append(k)
        return tuple(out)

    def _usable_spares(self, live):
        """The spares nothing else holds whose memory a result of their shape and dtype can take (``usable``)."""
        if not self.spares or not knobs.donate_inputs or type(self.device) is not _Device:
            return []
        return _run.usable_spares(self.spares, live, _external)

    def _interpret(self, out_idx, state):
        """Run each step's own kernel, in order: what eager mode would have done, one dispatch each.

        A dynamic scalar goes in as the Python number it was, as eager mode passes it: the kernel is then the one
        eager mode compiled (an array in its place is a new signature, run uncompiled until it pays a compile)."""
        ins = self.inputs
        if self.scalars:
            ins = list(ins)
            for k, py in self.scalars.items():
                ins[k] = py
        vals = _run.runner(self.steps, self.n_buffers, self.device.jax_device)(ins, state)
        out = [vals[i] for i in out_idx]
        last = self.steps[-1]
        if last[0] is _fail._gate and len(set(map(id, out))) < len(out):
            _fail.unshare_gated(out, out_idx, last[3])
        return out

    def _start_compile(self, entry, live, donate, inputs):
        steps, specs, device, n = self.steps, [_run.spec(x) for x in inputs], self.device, self.n_buffers
        if entry.layout is None:
            host = entry.scalars_read and self._wants_host_copies()
            entry.layout = _run.Layout(live, device, knobs.pack_outputs, knobs.pack_max_bytes, host)
        layout = entry.layout

        def compile_():
            return _run.compile_segment(steps, n, specs, layout, donate, device, knobs.gpu_compiler_options,
                                        knobs.warm_max_bytes)

        def work():
            t0 = time.perf_counter()
            try:
                try:
                    exe = compile_()
                except Exception:  # noqa: BLE001 - a platform without pinned host memory: without the copies
                    if not layout.host or entry.variants:
                        raise
                    layout.drop_host_copies()
                    exe = compile_()
            except Exception as e:  # noqa: BLE001 - the structure keeps running op by op
                entry.failed = f"{type(e).__name__}: {e}"
                _stats.compile_failures += 1
                warnings.warn(f"jgrad: compiling a segment of {len(steps)} ops failed ({entry.failed}); it keeps "
                              "running op by op.", RuntimeWarning, stacklevel=2)
            else:
                entry.variants.append((donate, exe))
                _stats.evicted += _executables.add(entry, knobs.max_executables)
                took = time.perf_counter() - t0
                _stats.compiles += 1
                _stats.compile_seconds += took
                _compiler.measured(took, entry.weight)
            finally:
                entry.thread = None

        entry.thread = True
        if not knobs.background_compile:
            work()
            return
        _compiler.submit(work)
