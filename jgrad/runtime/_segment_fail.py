"""What a tiered segment that fails leaves behind: nothing lost (Note [Transactional segments]).

Imports ``_recorder`` and ``_segment_run``; ``streams`` (it names where a barrier was). Used by
``_segment_barrier`` (rolling back, the gate, Ctrl-C) and ``_segment`` (what the journal notes).

Note [Transactional segments]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Why: in "auto" mode the tensors a step writes (parameters, ``.grad``s, optimizer state, generator keys) are
rebound to pending buffers when the ops are recorded, and get their values when the segment runs at a
barrier. A barrier that fails (an out-of-memory, a kernel's error, Ctrl-C) used to leave every one of them
without a value: the model was lost. Eager mode never had that problem, since each op's write lands (or
not) at the op.

The journal: the first time a segment rebinds a tensor that existed before it (``_recorder._Holders``
sees the tensor join a buffer while it holds other storage), the segment notes what the tensor held: its
storage, version, ``grad_fn``, output number, ``requires_grad`` and stream, and the thread that wrote it.
Generators' keys are noted the same way (``_Gens``). Nothing is copied: the old arrays are kept alive,
which the segment mostly did anyway (the ops read them), and donation counts the journal's references as
its own (``Segment._donatable``).

A failure before the segment's results are bound rolls back: every journaled tensor and generator gets
what it held before the segment's first write, tensors the segment created keep the values computed
before the failure (the op-by-op tier computes in order) and otherwise have no value (reading one raises
the failure), and the error gets a note naming the op that failed and where the barrier was. The compiled
tier that fails (an out-of-memory at the call, an input it cannot take) runs the segment op by op
instead, once its inputs are intact.

Ctrl-C: while the op-by-op tier runs, or a compile in the foreground, KeyboardInterrupt rolls back like
any failure. From the call of a compiled executable until its results are bound, the interrupt waits
(``interrupts_wait``): the executable may have consumed donated inputs, so its results are the only
copy of the state, and the step completes before KeyboardInterrupt is raised at the barrier. Background
compiles run in their own threads, which a signal never interrupts.

Failures the device reports asynchronously (a kernel that faults after it was dispatched) surface at the
next read, as CUDA's do in PyTorch: telling them apart at the barrier would cost a sync per step.
"""
from __future__ import annotations

import _signal  # (signal's functions without its enum conversions: a barrier swaps the handler twice)
import signal
import threading
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _recorder
from ..core._recorder import NO_HOLDERS, Buffer
from . import _kernel_cache, _segment_run as _run
from ..streams import _user_site

_weakref = weakref.ref
_main_thread = threading.main_thread


class Earlier:
    """What a journaled tensor held when that was an earlier buffer of the same segment: its index and
    prototype, not the buffer (kept alive, it would be an output of the segment)."""

    __slots__ = ("index", "proto")

    def __init__(self, b):
        self.index, self.proto = b.index, (b.aval, b.shape, b.dtype, b.ndim, b.size, b.info)

    def buffer(self, seg):
        """A stand-in of the buffer, for a step the barrier records (its ref is the index)."""
        return Buffer.made(self.proto, seg, self.index)


class State:
    """How far one run of a segment got: the step being run op by op and the values so far; bound once its
    results are bound (then nothing rolls back)."""

    __slots__ = ("vals", "at", "bound", "compiled")

    def __init__(self):
        self.vals, self.at, self.bound, self.compiled = None, None, False, False


_SIGINT = int(signal.SIGINT)


class interrupts_wait:
    """Ctrl-C waits until the block ends, then is raised (main thread, Python's or a Python handler only).

    Swaps the SIGINT handler for one that notes the signal: the block must not be abandoned half way."""

    __slots__ = ("prev", "hit")

    def __enter__(self):
        self.prev = None
        self.hit = False
        if threading.current_thread() is _main_thread():
            h = _signal.getsignal(_SIGINT)
            if callable(h):
                self.prev = h
                _signal.signal(_SIGINT, self._note)
        return self

    def _note(self, signum, frame):
        self.hit = True

    def __exit__(self, kind, exc, tb):
        if self.prev is not None:
            _signal.signal(_SIGINT, self.prev)
            if self.hit and kind is None:
                self.prev(signal.SIGINT, None)  # Python's handler raises KeyboardInterrupt here
        return False


class Gens(list):
    """The generators whose key a segment advanced; the first time each joins, what its key was before."""

    __slots__ = ("seg", "old", "lock")

    def append(self, gen):
        with self.lock:  # (another thread may be running the segment)
            old = self.old
            seg = self.seg
            if gen not in old and seg.pending:
                key = gen._key
                for step in reversed(seg.steps):  # the split that made the key read the key before it
                    if type(key) is Buffer and key.owner is seg and key.index in step[3]:
                        old[gen] = (step[2][0], threading.get_ident())
                        break
            list.append(self, gen)


def ref_value(seg, r):
    """The value a ref of ``seg`` names before the segment ran: an input, or a slice of a packed input."""
    if type(r) is int:
        return seg.inputs[~r] if r < 0 else None  # r >= 0: a buffer of this segment (it has no value yet)
    if r[0] == "s":
        return _run._slicer(r[2], r[3], r[4])(seg.inputs[r[1]])
    return None


# ---- the gate: checks that fail keep the writes from happening -------------------------------------------
def _gate_body(ok, news, olds):
    keep = ok != 0
    return tuple(jnp.where(keep, n, o) for n, o in zip(news, olds))


_gate_body.__name__ = "gate of the in-place writes by the device-side checks"
# A Kernel as the ops' are: a structure's first runs op by op interpret it rather than compile it (Note [New shapes])
_gate = _kernel_cache.Kernel(_gate_body, tree=True)


def _gate_on_host(ok, news, olds):
    # Op by op on a CPU the flag is computed already and its read costs no transfer: while every check passed (the
    # common case) the writes are the values, as the select would give them; else the select. The select's outputs
    # are arrays of their own, so one written to two tensors (a view and its base) is two arrays here too: shared,
    # the next segment would read it as one input, another structure than after a compiled run.
    if not isinstance(ok, jax.Array) or not np.asarray(ok) or any(
            getattr(n, "dtype", None) != getattr(o, "dtype", None) for n, o in zip(news, olds)):
        return _gate(ok, news, olds)  # (a failed check; a write of another dtype, which the select promotes)
    out, seen, again = list(news), {id(x) for x in olds}, []
    for i, x in enumerate(out):
        if id(x) in seen:
            again.append(i)
        seen.add(id(x))
    if again:
        for i, c in zip(again, jax.device_put([out[i] for i in again], may_alias=False)):
            out[i] = c
    return tuple(out)


_run.add_host_form(_gate, _gate_on_host, permanent=True)
_TUPLES: dict = {}  # n -> the tree of a tuple of n leaves


def _gate_shapes(leaves):
    """The gate's outputs are its writes' avals when each write has the aval of what it replaces (the select
    changes nothing then): found without tracing the kernel, which costs ~25 ms a new structure for some tens of
    writes (jax's checks of the call). None: trace it."""
    n = (len(leaves) - 1) // 2
    news, olds = leaves[1:1 + n], leaves[1 + n:]
    if len(olds) != n or not all(type(x) is Buffer for x in news):
        return None
    for x, o in zip(news, olds):
        a = x.aval
        if _recorder._aval_key(o) != (a.shape, a.dtype, a.weak_type):
            return None
    tree = _TUPLES.get(n)
    if tree is None:
        tree = _TUPLES[n] = jax.tree_util.tree_structure((0,) * n)
    return [x.aval for x in news], tree


_run.shape_forms[id(_gate)] = (_gate, _gate_shapes)


def unshare_gated(out, out_idx, gated):
    """An op-by-op run's live values ``out`` (of buffers ``out_idx``): a write the gate passed on as the very array
    of another live buffer (``_gate_on_host``) gets its own copy, as the select would have given it."""
    gated, seen, again = set(gated), set(), []
    for pos in sorted(range(len(out)), key=lambda p: out_idx[p] in gated):  # (the gate's outputs last)
        if id(out[pos]) in seen and out_idx[pos] in gated:
            again.append(pos)
        seen.add(id(out[pos]))
    if again:
        for pos, c in zip(again, jax.device_put([out[p] for p in again], may_alias=False)):
            out[pos] = c


def gated_writes(seg):
    """{thread: [(tensor, its final buffer, what it held before, False) or (generator, ..., True)]} of the writes
    ``seg`` may gate: every in-place write, to a tensor made before it or by it."""
    out = {}
    for t, old, *_, tid in seg.journal_map.values():
        d = t._data
        if type(d) is Buffer and d.owner is seg and old is not None:
            out.setdefault(tid, []).append((t, d, old.buffer(seg) if type(old) is Earlier else old, False))
    for gen, (r, tid) in seg.gens.old.items():
        d = gen._key
        old = ref_value(seg, r)
        if type(d) is Buffer and d.owner is seg and old is not None:
            out.setdefault(tid, []).append((gen, d, old, True))
    return out


def gate(seg, ok_for):
    """Record, per writing thread whose device-side checks are pending, one step choosing on the device between
    each write and what it replaces: a failed check keeps the old values, with no host sync."""
    for tid, items in gated_writes(seg).items():
        ok = ok_for(tid, seg.device)
        if ok is None:
            continue
        stream = next(iter(seg.streams))
        outs = seg.record_step(_gate, [ok._data, [it[1] for it in items], [it[2] for it in items]], stream)
        for (t, _, _, is_gen), b in zip(items, outs):
            if is_gen:
                t._key = b
            else:
                b.holders.append(_weakref(t))  # journaled already: the holders see it rebound in this segment
                t._data = b


# ---- rolling back ------------------------------------------------------------------------------------
def step_name(seg, i):
    fn = seg.steps[i][0]
    return getattr(fn, "__name__", None) or type(fn).__name__


def roll_back(seg, e, state):
    """Put back what ``seg`` wrote (it failed with ``e`` before its results were bound); note where and why."""
    vals = state.vals
    if vals is not None:  # results computed before the failure: the tensors the segment made keep them
        for r in seg.buffers:
            b = r()
            if b is not None and b._val is None and vals[b.index] is not None:
                b._val = v = vals[b.index]
                for h in b.holders:
                    t = h()
                    if t is not None and t._data is b:
                        t._data = v
                b.holders = NO_HOLDERS
    lost = []
    for t, old, vc, fn, nr, req, stream, _ in seg.journal_map.values():
        if type(old) is Earlier:  # made by this segment: what was computed before the failure, if it was
            old = vals[old.index] if vals is not None else None
            if old is None:
                continue  # keeps the failure
        if isinstance(old, jax.Array) and old.is_deleted():
            lost.append(t)
            continue
        t._data = old
        t._vc[0], t._grad_fn, t._output_nr, t._req, t._stream = vc, fn, nr, req, stream
        if type(old) is Buffer:
            old.holders.append(_weakref(t))
    for gen, (r, _) in seg.gens.old.items():
        key = ref_value(seg, r)
        if key is not None:
            gen._key = key
    n = len(seg.steps)
    if state.at is not None:
        where = f"op {state.at + 1} of {n} ({step_name(seg, state.at)}), run op by op"
    elif state.compiled:
        where = f"the compiled executable of its {n} ops"
    else:
        where = f"its compile ({n} ops)"
    what = "was interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
    seg.failed = f"{type(e).__name__}: {e} (at {where})"
    note = (f"jgrad: the pending work of {seg.device} {what} at {where}, at the barrier at {_user_site()}. "
            "Every tensor that existed before that work holds what it held before it, and the generators their "
            "state; tensors the work created hold what was computed before the failure, or no value.")
    if lost:
        note += (f" {len(lost)} tensor(s) cannot be restored: the executable consumed their memory (donated "
                 "inputs) before it failed.")
    if hasattr(e, "add_note"):
        e.add_note(note)
