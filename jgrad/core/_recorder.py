"""The recorder: ``Buffer`` (a recorded array) and ``Recorder`` (steps of kernels on Buffers).

Capture (``jgrad.runtime._capture``) and tiered execution (``jgrad.runtime._segment``) record the same way: a kernel call
becomes a step ``(fn, argument tree, refs, output buffer indices, stream)`` and its outputs are
``Buffer``s, whose shape and dtype are known at once (``shapes_of``: a kernel's own trace cache where it has
one, else ``jax.eval_shape``; cached per kernel and input avals) and
whose value comes later: when a capture's graph replays, or when a segment reaches a barrier. A tensor
whose ``_data`` is a Buffer is such a result; reading ``Buffer.value`` is what makes a pending segment
run (a barrier). Outputs of a compiled executable may come back packed, one flat array per dtype
(``Packed``, ``PackedState``), and are sliced out when first read.

Imports ``_dtype`` only (the x64 scope). ``_tensor`` imports ``Buffer`` from here (a tensor's storage may
be one); ``_capture``, ``_segment``, ``_segment_run``, ``_compile``, ``_dispatch``, ``_tape``,
``_backward_plan``, ``random``, ``graphs`` and ``_dlpack`` build on it.
"""
from __future__ import annotations

import math
import weakref

import jax
import numpy as np

from . import _dtype
from ._dtype import x64_scope


_tree_flatten = jax.tree_util.tree_flatten
_tree_unflatten = jax.tree_util.tree_unflatten

def aval_info(aval):
    """((shape, numpy dtype), jgrad dtype or None, differentiable) of a jax aval, cached per aval.

    What recording a node reads of every input and output: reading it off a jax aval each time
    (Python properties, ``jnp.issubdtype``) costs more than the rest of recording an op.
    """
    info = _INFO.get(aval)
    if info is None:
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
        """A Buffer of a tiered segment from ``buffer_proto(aval)`` (the recording hot path: no aval is read)."""
        b = object.__new__(cls)
        b.aval, b.shape, b.dtype, b.ndim, b.size, b.info = proto
        b._val = b.packed = None
        h = b.holders = _Holders()
        h.seg, h.index = owner, index
        b.owner, b.index = owner, index
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
                    self.holders = NO_HOLDERS
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


class _Bound:
    """The holders of a tiered segment's buffer once its value is bound: none are needed (a tensor on it reads
    ``_val``), so one added is not kept. One object for every bound buffer: a graph that lives across many ops keeps
    its saved buffers, and each object that reaches Python's oldest generation costs each full collection a visit
    (Note [Objects a live graph keeps] in jgrad/runtime/_tape.py)."""

    __slots__ = ()

    def append(self, ref):
        pass

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 0


#: The holders of every bound buffer.
NO_HOLDERS = _Bound()


class _Holders(list):
    """The holders of a tiered segment's buffer. A tensor added while it holds other storage is about to be
    rebound to this buffer (an in-place write, ``t.data = ...``, an optimizer's update): its segment first
    journals what the tensor held (``Segment.journal``), so that a segment that fails can put it back and a
    failed device-side check can keep the write from happening. (It keeps the segment and the buffer's index,
    not the buffer: a buffer in its own holders would be a reference cycle, and a dead buffer must die at
    once, for the barrier's liveness.)"""

    __slots__ = ("seg", "index")

    def append(self, ref, _append=list.append):
        t = ref()  # (alive: the caller holds it)
        d = t._data
        if d.__class__ is not Buffer or d.owner is not self.seg or d.index != self.index:
            self.seg.journal(t)
        _append(self, ref)


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


def abstract(tree):
    """``tree`` with every Buffer replaced by its ShapeDtypeStruct (for make_jaxpr/eval_shape)."""
    return jax.tree_util.tree_map(lambda x: x.aval if type(x) is Buffer else x, tree)


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
    if isinstance(x, (jax.Array, np.ndarray, np.generic, jax.ShapeDtypeStruct)):  # (an aval: a backward plan's)
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
#: Output shapes kept (per kernel and input shapes) before the cache starts afresh.
max_shape_entries = 20_000


_PY_SCALARS = (int, float, bool, complex)
#: A dynamic scalar's aval -> the Python number eager mode passes in its place (the same aval under x64).
_AS_PYTHON = {(np.dtype(np.float64), True): 0.0, (np.dtype(np.int64), True): 0, (np.dtype(np.complex128), True): 0j}
_default_device = []
_NamedSharding = jax.sharding.NamedSharding


def _eager_form(x):
    """``x`` as eager mode's call passed it, for a kernel's trace cache: a dynamic scalar (recorded as a weakly
    typed 0-d array, ``_segment_run.device_scalar``) is the Python number it was; a Buffer its aval; an array
    itself (JAX reads the aval it keeps, where a new ShapeDtypeStruct costs ~5 us to make and convert)."""
    if type(x) is Buffer:
        a = x.aval
    elif type(getattr(x, "sharding", None)) is _NamedSharding:  # laid out over a mesh: its aval, as before
        a = _as_aval(x)
    else:
        a = x
    if not a.shape and getattr(a, "weak_type", False):
        return _AS_PYTHON.get((np.dtype(a.dtype), True), a)
    return a


def _eval_shape(fn, treedef, leaves):
    key = (fn, treedef, tuple(_aval_key(x) for x in leaves))
    hit = _shape_cache.get(key)
    if hit is None:
        args = _tree_unflatten(treedef, [x if type(x) in _PY_SCALARS else _eager_form(x) for x in leaves])
        with x64_scope():
            if all(type(x) in _PY_SCALARS for x in leaves):
                # A factory: eager mode runs it under the device's default_device, part of JAX's trace-cache key.
                if not _default_device:
                    _default_device.append(jax.devices()[0])
                with jax.default_device(_default_device[0]):
                    out = shapes_of(fn, args)
            else:
                out = shapes_of(fn, args)
        if len(_shape_cache) >= max_shape_entries:  # shapes that change every step: start afresh
            _shape_cache.clear()
        hit = _shape_cache[key] = _tree_flatten(out)
    return hit


def shapes_of(fn, args):
    """``jax.eval_shape(fn, *args)``, without a new trace where ``fn`` can tell: a ``jax.jit`` function, or a
    kernel wrapping one (``.jit``), answers through its own trace cache (eager mode's first call of a kernel traced
    it for these shapes already: a GAN's first recorded step, 0.1-0.2 ms a kernel instead of ~0.7-1.6 ms, a new
    ``jit`` traced per call); a function with an ``eval_shape`` of its own (a backward plan's, Note [Backward
    plans]) answers from what it knows, or None when it cannot tell."""
    form = getattr(getattr(fn, "jit", fn), "eval_shape", None)
    if form is not None:
        try:
            out = form(*args)
            if out is not None:
                return out
        except Exception:  # noqa: BLE001 - whatever it cannot do, the general path does (or raises its error)
            pass
    return jax.eval_shape(fn, *args)


class Recorder:
    """What capture and tiered segments share: steps of kernels on Buffers (see ``jgrad.runtime._segment``).

    A step is ``(fn, treedef, refs, out indices, stream)``; a ref is ``("b", i)`` (buffer ``i`` of this
    recorder), ``("i", k)`` (input ``k``), ``("c", k)`` (constant ``k``) or ``("l", type, value)`` (a
    Python scalar frozen into the step). Subclasses decide what an array argument becomes (``_ref``).
    """

    segment = False   # a tiered segment (jgrad.runtime._segment), not a capture
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
