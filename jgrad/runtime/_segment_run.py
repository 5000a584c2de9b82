"""How a recorded segment runs: op by op (the first tier) or as one compiled executable, and where its
outputs come back (one flat array per dtype on accelerators, sliced when read).

Imports ``_recorder`` (the Buffer), ``_compile`` (the progress line and XLA options shared with capture),
``_compile_priority`` and ``_dtype``; used by the ``_segment`` modules: ``_segment_barrier`` runs and compiles
segments with it (the knobs, ``pack_outputs``..., are ``_segment``'s, passed in), ``_segment`` records packed inputs
and dynamic scalars with it.
Also the worker that runs background compiles one at a time (``CompileWorker``) and the executables kept
(``ExecutableLRU``).
"""
from __future__ import annotations

import collections
import sys
import threading
import warnings
import weakref

import jax

from ..core import _host_copies
from . import _compile_priority
from ._warm import warm
from ._compile import _Progress, compiler_options
from ..core._recorder import _tree_unflatten
from ..core._dtype import x64_scope
from ..core._device import device as _Device  # a plain device (a mesh is a MeshDevice, a subclass)

_weakref = weakref.ref
_tree_leaves = jax.tree_util.tree_leaves


#: At most this many 0-d results of a segment come back a second time, in pinned host memory (_host_copies).
MAX_HOST_COPIES = 4


class Layout:
    """Where each live buffer of a compiled segment comes back: its own output, or a place in a flat array; and
    which 0-d results come back a second time in pinned host memory (``host``, read by ``item()``)."""

    __slots__ = ("separate", "separate_idx", "groups", "group_idx", "where", "host", "host_idx")

    def __init__(self, live, device, pack_outputs, pack_max_bytes, host_copies=False):
        pack = pack_outputs if pack_outputs is not None else device.type != "cpu"
        by_dtype = {}
        self.separate = []
        for pos, b in enumerate(live):
            if pack and b.ndim > 0 and 0 < b.size * b.dtype.itemsize <= pack_max_bytes and not b.aval.weak_type:
                by_dtype.setdefault(b.dtype.str, []).append(pos)
            else:
                self.separate.append(pos)
        self.groups = [g for g in by_dtype.values() if len(g) > 1]
        self.separate += [g[0] for g in by_dtype.values() if len(g) == 1]
        self.separate_idx = [live[p].index for p in self.separate]
        self.group_idx = [[live[p].index for p in g] for g in self.groups]
        self.where = {}
        for gi, g in enumerate(self.groups):
            off = 0
            for p in g:
                self.where[live[p].index] = (gi, off)
                off += live[p].size
        self.host = [p for p in self.separate if live[p].ndim == 0][:MAX_HOST_COPIES] if host_copies else []
        self.host_idx = [live[p].index for p in self.host]

    def drop_host_copies(self):
        self.host, self.host_idx = [], []

    def bind(self, outs, live):
        """(value per live buffer, None where packed; the _Pack or None) of one call's outputs."""
        vals = [None] * len(live)
        for p, v in zip(self.separate, outs):
            vals[p] = v
        n_out = len(self.separate) + len(self.groups)
        for p, h in zip(self.host, outs[n_out:]):
            _host_copies.register(vals[p], h)
        if not self.groups:
            return vals, None
        return vals, Pack(outs[len(self.separate):n_out], self.where, [live[p] for g in self.groups for p in g])


class Pack:
    """Outputs of one compiled run that came back as one flat array per dtype.

    A buffer in it keeps ``_val`` None and ``packed`` this pack: a later segment takes the flat as its input
    and slices inside its executable (``("s", ...)`` refs); a read (``Buffer.value``) slices just that buffer.
    Once every buffer of the pack is gone, the next segment that reads the flat donates it.
    """

    __slots__ = ("flats", "where", "refs")

    def __init__(self, flats, where, buffers):
        self.flats, self.where = flats, where
        self.refs = [_weakref(b) for b in buffers]

    def dead(self, spare=None):
        """Whether no tensor can read a buffer of the pack (``spare``: id -> references that do not count)."""
        for r in self.refs:
            b = r()
            if b is not None and (not spare or sys.getrefcount(b) - 2 > spare.get(id(b), 0)):
                return False
        return True

    def read(self, b):
        g, off = self.where[b.index]
        with x64_scope():
            return _slicer(off, b.size, b.shape)(self.flats[g])


class CompileWorker:
    """Background compiles, run one after the other by one worker thread (started when none runs): compiles never
    take more than one core from the program, however many structures turn hot at once. Also what compiles cost:
    the seconds per op measured so far (``expected_seconds``)."""

    def __init__(self, nice=lambda: 0):
        self.jobs, self.lock, self.worker, self.threads = [], threading.Lock(), None, set()
        self.seconds, self.ops = 0.0, 0
        self.nice = nice  # () -> how much to lower the compiles' priority (Linux: nice values; _compile_priority)

    def submit(self, job):
        with self.lock:
            self.jobs.append(job)
            if self.worker is None:
                t = self.worker = threading.Thread(target=self._work, name="jgrad-segment-compile", daemon=True)
                self.threads.add(t)
                t.start()

    def _work(self):
        while True:
            with self.lock:
                if not self.jobs:
                    self.threads.discard(self.worker)
                    self.worker = None
                    return
                job = self.jobs.pop(0)
            with _compile_priority.compiling(self.nice()):
                job()

    def wait(self):
        """Until every submitted compile has run."""
        while True:
            t = self.worker
            if t is None or t is threading.current_thread():
                return
            t.join()

    def drop_queued(self):
        with self.lock:
            self.jobs.clear()

    def measured(self, seconds, ops):
        self.seconds += seconds
        self.ops += ops

    def expected_seconds(self, ops, prior):
        """A compile of ``ops`` steps: ``prior`` (seconds at 0 ops, per op) until compiles were measured, then the
        measured rate per op (the prior weighing as one 100-op compile)."""
        base, per_op = prior
        if self.ops:
            per_op = (self.seconds + 100 * per_op) / (self.ops + 100)
        return base + per_op * ops


class ExecutableLRU:
    """The structures (``_segment_barrier._Entry``) holding compiled executables, least recently run first."""

    def __init__(self):
        self.entries = collections.OrderedDict()
        self.lock = threading.Lock()

    def touch(self, entry):
        with self.lock:
            if entry in self.entries:
                self.entries.move_to_end(entry)

    def add(self, entry, bound):
        """Keep ``entry``'s executables; drop the least recently run past ``bound``; how many were dropped."""
        dropped = 0
        with self.lock:
            self.entries[entry] = None
            self.entries.move_to_end(entry)
            while len(self.entries) > max(1, bound):
                old, _ = self.entries.popitem(last=False)
                old.variants, old.seen = [], 0  # compiles again once it repeats
                dropped += 1
        return dropped

    def forget(self, entry):
        with self.lock:
            self.entries.pop(entry, None)

    def clear(self):
        with self.lock:
            self.entries.clear()


_SLICERS: dict = {}


def _slicer(off, size, shape):
    fn = _SLICERS.get((off, size, shape))
    if fn is None:
        if len(_SLICERS) > 4096:  # packs whose layout changes every step
            _SLICERS.clear()
        fn = _SLICERS[(off, size, shape)] = jax.jit(lambda flat: jax.lax.slice(flat, (off,), (off + size,)).reshape(shape))
    return fn


_SCALAR_ARRAYS: dict = {}


def device_scalar(x, device, leaves=None, at=0, dynamic=None):
    """A dynamic Python scalar as a (weakly typed) array on ``device``, made once per value: passing the Python
    number to an executable would copy it to the device at every call. Committed to a plain device: an
    executable's call takes a slower path for every uncommitted argument (a GPT step's 134 inputs, 18 of them
    scalars: 0.94 ms against 0.35 ms all committed, on a CPU). On a mesh it stays uncommitted, as the Python
    number would be, so that it goes where the executable runs.

    ``leaves`` (a step's argument leaves, ``x`` at ``at``): on a miss, the Python scalars among ``leaves[at:]`` at
    positions in ``dynamic`` (None: all) are made too, in one transfer: an optimizer's first step passes 9 new
    values at once (one transfer of 9 costs ~0.35 ms on a CPU, 9 of one ~0.8 ms)."""
    key = (type(x), repr(x), device)
    a = _SCALAR_ARRAYS.get(key)
    if a is None:
        xs = [x]
        if leaves is not None:
            xs += [y for i, y in enumerate(leaves[at + 1:], at + 1)
                   if type(y) in _PY_SCALARS and (dynamic is None or i in dynamic)]
        _make_scalars(xs, device)
        a = _SCALAR_ARRAYS[key]
    return a


_PY_SCALARS = (int, float, bool, complex)


def _make_scalars(xs, device):
    if len(_SCALAR_ARRAYS) > 4096:  # a value that changes every step (a learning-rate schedule)
        _SCALAR_ARRAYS.clear()
    new = {}
    for y in xs:
        k = (type(y), repr(y), device)
        if k not in _SCALAR_ARRAYS:
            new[k] = y
    with jax.default_device(device.jax_device), x64_scope():
        # (a transfer of the numbers, weakly typed as jnp.asarray makes them, with no kernel to compile)
        if type(device) is _Device:
            arrays = jax.device_put(list(new.values()), device.jax_device)
        else:
            arrays = [jax.numpy.asarray(y) for y in new.values()]
    _SCALAR_ARRAYS.update(zip(new, arrays))


#: id(kernel) -> (kernel, what runs in its place when a segment runs op by op on a CPU: the same result, read off values the host
#: holds already): the gate of in-place writes (the writes themselves while the checks passed, with no select) and the
#: device-side checks (``_checks``).
host_forms: dict = {}


#: id(kernel) -> (kernel, a function of a step's argument leaves giving its outputs' (avals, tree) without tracing
#: the kernel, or None where it cannot tell): a new structure's recording asks it before ``jax.eval_shape``.
shape_forms: dict = {}


def add_shape_form(kernel, form):
    """``form`` gives ``kernel``'s output avals at recording (kept while ``kernel`` lives: its id is the key)."""
    if len(shape_forms) > 4096:  # kernels of ever new static attributes: those added here go (3-tuples), the
        for k in [k for k, v in shape_forms.items() if len(v) > 2]:  # ones a module set itself stay (the gate's)
            del shape_forms[k]
    shape_forms[id(kernel)] = (kernel, form, False)


_SDS: dict = {}


def shape_struct(shape, dtype, weak_type=False):
    """``jax.ShapeDtypeStruct(shape, dtype, weak_type=...)`` (what ``jax.eval_shape`` gives), made once: a shape
    form's answer costs a dict look-up, not ~5 us of construction."""
    key = (shape, dtype, weak_type)
    a = _SDS.get(key)
    if a is None:
        if len(_SDS) > 4096:
            _SDS.clear()
        a = _SDS[key] = jax.ShapeDtypeStruct(shape, dtype, weak_type=weak_type)
    return a


ONE_LEAF = jax.tree_util.tree_structure(0)  # the tree of a kernel returning one array


def add_host_form(kernel, form, permanent=False):
    """``form`` runs in place of ``kernel`` op by op on a CPU (kept while ``kernel`` lives: its id is the key)."""
    if len(host_forms) > 4096:  # kernels of ever new static attributes (a check's bounds): the transient ones go
        for k in [k for k, v in host_forms.items() if not v[2]]:
            del host_forms[k]
    host_forms[id(kernel)] = (kernel, form, permanent)


def runner(steps, n_buffers, device=None):
    """The steps as a function of the inputs, returning every buffer's value; packed inputs are sliced once.

    A ref is an int (``i >= 0``: buffer ``i``; ``~k``: input ``k``), ``("l", type, value)`` (a Python
    scalar frozen into the step) or ``("s", k, offset, size, shape)`` (a slice of flat input ``k``).
    ``device`` (op by op): steps that read no array (factories) run under ``jax.default_device(device)``, as
    eager mode runs them; the others do not, as in eager mode: JAX keys its compiled kernels by the default
    device in effect, so a kernel called under it would compile again although eager mode had compiled it.
    """
    forms = host_forms if device is not None and device.platform == "cpu" else {}

    def run(ins, state=None):
        vals = [None] * n_buffers
        sliced = {}
        if state is not None:  # op by op: how far it got, if a step fails (_segment_fail.roll_back)
            state.vals = vals
        for at, (fn, treedef, refs, outs, _) in enumerate(steps):
            if state is not None:
                state.at = at
            args = []
            for r in refs:
                if type(r) is int:
                    args.append(vals[r] if r >= 0 else ins[~r])
                elif r[0] == "l":
                    args.append(r[2])
                else:
                    v = sliced.get(r)
                    if v is None:
                        v = sliced[r] = _slicer(r[2], r[3], r[4])(ins[r[1]])
                    args.append(v)
            if forms:
                form = forms.get(id(fn))
                if form is not None and form[0] is fn:
                    fn = form[1]
            if device is not None and not any(type(r) is int or r[0] == "s" for r in refs):
                with jax.default_device(device):
                    res = fn(*_tree_unflatten(treedef, args))
            else:
                res = fn(*_tree_unflatten(treedef, args))
            if len(outs) == 1 and type(res) is not tuple:
                vals[outs[0]] = res
            else:
                for i, v in zip(outs, _tree_leaves(res)):
                    vals[i] = v
        if state is not None:
            state.at = None
        return vals
    return run


def usable_spares(spares, live, external):
    """The arrays of ``spares`` (gradients ``zero_grad`` let go of) that nothing else holds and that a result among
    ``live`` of the same shape and dtype can be written into, in order.

    (One that no result could take is left out: it would only make the structure differ from the same work
    recorded without it, such as an evaluation step after ``zero_grad``.)"""
    room = {}
    for b in live:
        k = (b.shape, b.dtype)
        room[k] = room.get(k, 0) + 1
    getrefcount = sys.getrefcount
    external = external if len(external) else ()
    out = []
    for k in range(len(spares)):
        x = spares[k]
        # held by the segment's list, this loop and getrefcount's argument only
        if getrefcount(x) <= 3 and x not in external:
            a = x.aval
            a = (a.shape, a.dtype)
            if room.get(a, 0) > 0:
                room[a] -= 1
                out.append(x)
    return out


def spec(x):
    if isinstance(x, jax.Array):
        # An uncommitted array (a cached dynamic scalar) goes where the executable runs, a mesh included.
        return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=x.weak_type,
                                    sharding=x.sharding if x.committed else None)
    return x  # Python scalars and NumPy arrays: lowered from the value (its type and shape matter, not it)


def compile_segment(steps, n_buffers, specs, layout, donate, device, gpu_options=None, warm_max_bytes=0):
    """One executable running ``steps`` on inputs of ``specs``, returning ``layout``'s outputs; ``donate``: input
    positions XLA may write the outputs into. ``warm_max_bytes``: see ``warm``."""
    run_steps = runner(steps, n_buffers)
    separate, groups, host = layout.separate_idx, layout.group_idx, layout.host_idx

    def run(*ins):
        vals = run_steps(ins)
        return ([vals[i] for i in separate] + [jax.numpy.concatenate([vals[i].ravel() for i in g]) for g in groups]
                + [vals[i] for i in host])

    out_shardings = None
    if host:  # the host copies: the same values again, written to pinned host memory by the executable
        on_device = jax.sharding.SingleDeviceSharding(device.jax_device)
        out_shardings = ([on_device] * (len(separate) + len(groups))
                         + [on_device.with_memory_kind("pinned_host")] * len(host))

    with warnings.catch_warnings(), _Progress(f"compiling a segment of {len(steps)} ops"), \
            jax.default_device(device.jax_device), x64_scope():
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
        jitted = jax.jit(run, donate_argnums=donate, keep_unused=True) if out_shardings is None else \
            jax.jit(run, donate_argnums=donate, keep_unused=True, out_shardings=out_shardings)
        traced = jitted.trace(*specs)
        lowered = traced.lower()
        options = compiler_options(device.type != "cpu", False) if gpu_options is None else (
            gpu_options if device.type != "cpu" else None)
        exe = lowered.compile(compiler_options=options) if options else lowered.compile()
    if warm_max_bytes:
        warm(exe, specs, device, warm_max_bytes, traced.jaxpr)
    return exe
