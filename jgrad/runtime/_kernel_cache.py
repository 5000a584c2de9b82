"""Bounds on the ops' compiled kernels (``_dispatch.Op.kernel`` and ``Op.backward_kernel``).

An op's kernel is one ``jax.jit`` function per set of static attributes, and JAX keeps one compiled
executable in it per input shape: a loop whose batch size changes every step compiles every kernel it
runs once per size and used to keep them all (about 15-25 MB per shape for a small MLP's training step on
a CPU). Two knobs bound that:

- ``max_executables``: the compiled executables kept over all kernels. Past it, kernels forget theirs
  (``clear_cache``; JAX drops a jit's executables all at once): first those not called within the last
  ``in_use_seconds`` (5-10 s: the kernels of code that no longer runs, another model in the same notebook),
  the ones holding the most first; then, if that was not enough, the ones in use that hold the most (those
  whose shapes churn). A shape that comes back compiles again. Counted every ``check_every`` XLA compiles (JAX
  reports each through ``jax.monitoring``), so a kernel that is only hit costs one attribute store a call.
  (Until 2026-11-27 the kernels holding the most went first, in use or not.)
- ``max_keys_per_op``: kernels kept per op (one per set of static attributes); the oldest goes first.

The kernel functions stay (a tiered segment's structure names them): only their executables go.

New shapes (``Kernel``, Note [New shapes]): an op's kernel is a ``Kernel``, a ``jax.jit`` function that runs
the first calls of a new input shape without compiling when its arrays are small and on a CPU.

Imports ``_kernel_interp`` and ``core._dtype``; ``_dispatch`` makes ``Kernel``s and calls ``made``.

Note [New shapes]
~~~~~~~~~~~~~~~~~
Why: XLA compiles every kernel once per input shape; on a 2-core CPU one op's compile takes 20-300 ms
(trace ~2 ms, lowering ~9 ms, the backend the rest) where running it takes 0.05-0.5 ms, so a loop whose
shapes change (an episode of a new length, a sequence that grows by one token) spent nearly all its time
compiling kernels it ran once. XLA's cheaper optimization levels do not help: a one-op compile is mostly
fixed cost (``benchmarks/diagnostics/new_shapes.py``; 10-60 ms at any level).

What: a call whose input shapes (and dtypes) this kernel has not compiled for, with every array on a CPU
and at most ``interpret_max_elements`` elements in all, is traced (JAX caches the trace, so a later
compile reuses it) and its jaxpr is evaluated with NumPy (``_kernel_interp``; a jaxpr holding a
primitive it does not know, random bits or 16-bit floats compiles as before). Interpreted calls of a
shape are timed; once they have cost ``compile_payback`` times the expected compile time (the mean of
the compiles measured so far, ``compile_prior`` before the first), the shape compiles in a background
thread (one compile at a time; its calls stay interpreted meanwhile) and runs compiled from then on: a
hot kernel gets XLA's code, a shape used a few times never compiles.
A call with tracers (a kernel inlined into a segment's or a capture's executable), or any call while a JAX
trace is active (``jgrad.func`` tracing a function that reads a closure tensor), is ``jax.jit``'s, as before:
the work is staged into the trace, where the trace cache can see which tensors it read. By default only programs whose every bit equals the compiled kernel's are interpreted (Note [Exact
programs] in ``_kernel_interp``: no float sums or dots, no multiply feeding an add, which XLA fuses into one
rounding; no transcendentals, whose bits XLA's own kernels change with the length), so a value never depends
on whether its shape had
compiled yet; ``interpret_inexact = True`` also interprets the rest with NumPy, at last-bit differences.

Note [Kernel calls]
~~~~~~~~~~~~~~~~~~~
Every eager op and backward node calls a ``Kernel``; once its shape has compiled, the call is jax.jit's C++ dispatch
(the floor, ~8-15 us on the 2-core CPU) plus what ``Kernel.__call__`` adds before it. Two things keep that small:
- The shape key is each array's ``aval`` (JAX interns them: one attribute read, hashed and compared by identity) or
  each Python scalar's type, built without a loop for one or two arguments; a backward kernel's arguments, flat
  tuples of leaves, are keyed without ``tree_flatten``. Anything else (tracers, NumPy arrays, nested containers)
  takes the slower path with its old checks.
- jax.jit turns a Python scalar argument into a device array at every call (~6 us). Inside jgrad's x64 scope, with
  no JAX trace active and an array argument on one device, a kernel passes each scalar instead as a cached 0-d
  uncommitted array on that device with the aval jax.jit gives the scalar (int64 and float64 weakly typed, bool
  strong): the same trace, the same program, the same placement (an uncommitted input goes where the call runs) and
  the same bits. Its calls, background compiles and traces all pass them so (``_jit_call``), so a shape compiles
  one executable; a backward kernel does the same for the scalars among its saved values (``_tree_scalar_arrays``).
  Floats are keyed by value, zeros and NaNs by their bits; the cache holds at most 1024 values.
"""
from __future__ import annotations

import atexit
import os
import struct as _struct
import threading
import time

import jax
import numpy as np

from ..core._device import single_sharding
from ..core._dtype import _X64_STATE, x64_scope
from . import _compile_priority, _kernel_interp
from ._warm import warm_call

try:
    from jax._src.array import ArrayImpl as _Array
except ImportError:  # pragma: no cover - another jax layout: every call takes jax.jit's path
    _Array = None
try:
    from jax._src import core as _jax_core

    def _tracing():
        """Whether a JAX trace (make_jaxpr, a transform) is active on this thread: a kernel called there on
        concrete arrays (a closure tensor's view inside ``jgrad.func``) is staged into the trace, as jax.jit does,
        not evaluated on the side."""
        return type(_jax_core.trace_ctx.trace) is not _jax_core.EvalTrace
except (ImportError, AttributeError):  # pragma: no cover - another jax layout: never interpret under a trace test
    _jax_core = None

    def _tracing():
        return False

#: Compiled executables kept over all op kernels (forward and backward) before the largest caches are cleared.
max_executables = 512
#: Kernels (sets of static attributes) kept per op and direction; the oldest is dropped past it.
max_keys_per_op = 1024
#: How many XLA compiles pass between two counts of the executables.
check_every = 16

#: Interpret (NumPy on the host) a kernel's calls at a new shape when its arrays hold at most this many
#: elements in all and live on one CPU device (0: always compile).
interpret_max_elements = 1 << 18
#: False (the default): only programs that compute the compiled kernel's exact bits are interpreted
#: (Note [Exact programs] in ``_kernel_interp``: no float sums, no multiply feeding an add), so a result never
#: depends on whether its shape had compiled yet. True: NumPy's float sums, dots and transcendentals too, which
#: interprets more kernels and may differ from the compiled kernel in the last bits.
interpret_inexact = False
#: A shape compiles once its interpreted calls have cost ``compile_payback`` times the expected compile time
#: (the ski-rental rule), or at its ``compile_after``-th call (None: never by count). Compiling every shape
#: that recurs at its 2nd call made first runs slower on the 2-core CPU (an LSTM LM's first 40 steps in "auto"
#: mode 11.2 s against 8.8 s): the compiles compete with the program for the two cores. The count rule catches
#: what the cost rule misses in a loop: an interpreted call costs ~100 us where the compiled one costs ~15, so a
#: kernel run once a step would stay interpreted for hundreds of steps before its calls added up to a compile
#: (a GAN's eager step 9-11 ms with ~45 such kernels, 5.3-5.8 ms with them compiled).
compile_after = 16
compile_payback = 1.0
#: Compile hot shapes in a background thread (one at a time; the calls meanwhile are interpreted); False:
#: at the call that makes the shape hot.
background_compile = True
#: Expected seconds of one kernel's compile before any was measured.
compile_prior = 0.05
#: Background kernel compiles run at this much lower priority (nice values, Linux; Note [Compile priority] in
#: ``_compile_priority``): on busy cores the program's threads run first. 0: the program's priority.
compile_nice = 10
#: A kernel compiled in the background is called once more, in that thread, on the inputs that asked for it, before
#: the program's next call (Note [Warm executables] in ``_warm``), when they take at most this many bytes; 0: never.
warm_max_bytes = 1 << 28
#: Counts: calls interpreted, shapes that compiled after being interpreted, shapes never interpretable.
stats = {"interpreted": 0, "promoted": 0, "compiled_new": 0}
_measured = [0, 0.0]  # compiles timed after interpretation, their seconds
#: A kernel called within the last ``in_use_seconds`` (to twice that) counts as in use when executables are dropped.
in_use_seconds = 5.0
_epoch = 0  # advanced by ``enforce`` once ``in_use_seconds`` have passed; a kernel's ``_used`` is the one it was called in
_epoch_started = [0.0]

_COMPILED = object()
_FRESH = object()  # compiled in the background, not yet in the jax.jit's own cache (counted at its next call)
_SCALARS = (int, float, bool)


class _Interpreted:
    __slots__ = ("prog", "in_dtypes", "out_avals", "out_tree", "spent", "calls", "queued")

    def __init__(self, prog, closed, out_tree):
        self.prog, self.out_tree, self.spent, self.calls, self.queued = prog, out_tree, 0.0, 0, False
        self.in_dtypes = [v.aval.dtype for v in closed.jaxpr.invars]
        self.out_avals = closed.out_avals


class Kernel:
    """An op's ``jax.jit`` kernel whose new shapes run without a compile until they prove hot (Note [New shapes]).

    Called with tracers (inlined into another jit) or with anything but concrete arrays and Python scalars, it
    is the ``jax.jit`` function itself; ``jit`` is that function.
    """

    __slots__ = ("jit", "tree", "_shapes", "_used", "__name__", "__qualname__", "__weakref__")

    def __init__(self, fn, tree=False):
        self.jit = jax.jit(fn)
        self.tree = tree  # arguments are pytrees (a backward kernel's saved values, outputs and grads)
        self._shapes = {}
        self._used = _epoch  # the epoch (``enforce``, ``in_use_seconds``) it was last called in
        self.__name__ = self.__qualname__ = getattr(fn, "__name__", "kernel")

    def __call__(self, *args):
        # The per-op hot path (Note [Kernel calls]): the key is each array's aval (one attribute, interned by JAX, so
        # hashed and compared by identity) or each scalar's type, built without a loop for one and two arguments.
        self._used = _epoch
        if self.tree:
            return self._call_tree(args)
        n = len(args)
        if n == 2:
            a, b = args
            ta, tb = type(a), type(b)
            key = (a.aval if ta is _Array else ta, b.aval if tb is _Array else tb)
            plain = ta is _Array and tb is _Array
        elif n == 1:
            a = args[0]
            ta = type(a)
            key = a.aval if ta is _Array else ta
            plain = ta is _Array
        else:
            key = tuple([a.aval if type(a) is _Array else type(a) for a in args])
            plain = False
        st = self._shapes.get(key)
        if st is _COMPILED:
            return self.jit(*args) if plain else self._jit_call(args)
        for a in args:
            t = type(a)
            if t is not _Array and t not in _SCALARS:  # a tracer, a NumPy array...: jax.jit's own path (and errors)
                return self.jit(*args)
        if _tracing():  # under a JAX trace a call on concrete arrays is staged into it
            return self.jit(*args)
        return self._new_shape(key, st, args, args)

    def _call_tree(self, args):
        key = _tree_key(args)  # where the Nones sit is part of it, as for jax.jit
        st = self._shapes.get(key)
        if st is _COMPILED:
            return self.jit(*(_tree_scalar_arrays(args) or args))
        leaves, treedef = jax.tree_util.tree_flatten(args)
        for a in leaves:
            t = type(a)
            if t is not _Array and t not in _SCALARS:
                return self.jit(*args)
        if _tracing():
            return self.jit(*args)
        if not _flat_tree(args):  # nested containers: keyed by the treedef and the leaves
            key = (treedef, *[a.aval if type(a) is _Array else type(a) for a in leaves])
            st = self._shapes.get(key)
            if st is _COMPILED:
                return self.jit(*args)
        return self._new_shape(key, st, args, leaves)

    def _jit_call(self, args):
        return self.jit(*self._as_called(args))

    def _as_called(self, args):
        """What jax.jit gets for these concrete arguments: Python scalars as cached 0-d arrays (Note [Kernel calls]).
        Every call, background compile and trace of a new shape passes them so: a shape has one executable."""
        return (_tree_scalar_arrays(args) if self.tree else _scalar_arrays(args)) or args

    def _new_shape(self, sig, st, args, leaves):
        if st is _FRESH:  # compiled in the background: this call puts the executable in the jax.jit's cache
            out = self._jit_call(args)
            self._shapes[sig] = _COMPILED
            _count_compile()
            return out
        if st is None:
            st = self._plan(sig, args, leaves)
            if st is _COMPILED:
                stats["compiled_new"] += 1
                return self._jit_call(args)
        elif not _eligible(leaves):
            return self._jit_call(args)
        st.calls += 1
        if not st.queued:
            expected = _measured[1] / _measured[0] if _measured[0] else compile_prior
            if (compile_after is not None and st.calls >= compile_after) or st.spent >= compile_payback * expected:
                st.queued = True
                if not background_compile:
                    return self._promote(sig, args)
                _submit(self, sig, self._as_called(args))
        t0 = time.perf_counter()
        try:
            out = _run(st, leaves)
        except Exception:  # noqa: BLE001 - anything the NumPy evaluation cannot do: compile, as before
            self._shapes[sig] = _COMPILED
            return self._jit_call(args)
        st.spent += time.perf_counter() - t0
        stats["interpreted"] += 1
        if _verify:
            _compare(self, args, out)
        return out

    def _plan(self, sig, args, leaves):
        if len(self._shapes) > 4096:
            self._shapes.clear()
        st = _COMPILED
        if interpret_max_elements > 0 and _Array is not None and _eligible(leaves):
            try:
                traced = self.jit.trace(*self._as_called(args))
            except Exception:  # noqa: BLE001 - the call raises the same error through jax.jit below
                traced = None
            prog = _interpretable(traced, len(leaves)) if traced is not None else None
            if prog is not None:
                st = _Interpreted(prog, traced.jaxpr, traced.out_tree)
        self._shapes[sig] = st
        return st

    def _promote(self, sig, args):
        """A shape that proved hot compiles now (``background_compile = False``)."""
        t0 = time.perf_counter()
        out = self._jit_call(args)
        _compiled(self, sig, time.perf_counter() - t0)
        return out

    def _cache_size(self):
        return self.jit._cache_size()

    def clear_cache(self):
        self._shapes.clear()
        self.jit.clear_cache()

    def __getattr__(self, name):  # lower, trace, eval_shape... of the jax.jit function
        return getattr(self.jit, name)


#: debugging: every interpreted call also runs compiled and the two must agree (bit for bit unless inexact);
#: ``JGRAD_VERIFY_INTERPRETED=1`` turns it on for a process.
_verify = os.environ.get("JGRAD_VERIFY_INTERPRETED", "") == "1"


def _compare(kernel, args, out):
    with jax.ensure_compile_time_eval():  # inside a segment's trace too: the kernel's own concrete result
        ref = kernel._jit_call(args)
    for a, b in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype or not _same(a, b):
            where = np.flatnonzero(~((a == b) & (np.signbit(a) == np.signbit(b)) | (np.isnan(a) & np.isnan(b)))
                                   if a.shape == b.shape and a.dtype.kind == "f" else np.zeros(1, int))[:5]
            ins = [np.asarray(x).ravel()[where] if np.ndim(x) and np.shape(x) == a.shape else x for x in
                   jax.tree_util.tree_leaves(args)]
            raise AssertionError(f"{kernel.__name__}: interpreted {a.ravel()[where]!r} != compiled "
                                 f"{b.ravel()[where]!r} at flat positions {where} (inputs there: {ins!r})")


def _same(a, b):
    if interpret_inexact:
        return np.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    if a.dtype.kind not in "fc":
        return np.array_equal(a, b)
    nan = np.isnan(a)  # every bit, signed zeros included; NaNs equal whatever their sign and payload
    return np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan], b[~nan]) and np.array_equal(
        np.signbit(a[~nan]), np.signbit(b[~nan]))


def _compiled(kernel, sig, seconds, fresh=False):
    _measured[0] += 1
    _measured[1] += seconds
    kernel._shapes[sig] = _FRESH if fresh else _COMPILED
    stats["promoted"] += 1


_jobs: list = []
_worker = [None]
_jobs_lock = threading.Lock()


def _submit(kernel, sig, args):
    with _jobs_lock:
        _jobs.append((kernel, sig, args))
        if _worker[0] is None:
            t = _worker[0] = threading.Thread(target=_work, name="jgrad-kernel-compile", daemon=True)
            t.start()


def _work():
    while True:
        with _jobs_lock:
            if not _jobs:
                _worker[0] = None
                return
            kernel, sig, args = _jobs.pop(0)
        t0 = time.perf_counter()
        seconds = None
        try:
            with x64_scope(), _compile_priority.compiling(compile_nice):  # (x64: kernels compile as they run)
                traced = kernel.jit.trace(*args)
                traced.lower().compile()  # fills the jax.jit's cache: its next call runs it
                seconds = time.perf_counter() - t0
                if warm_max_bytes:
                    warm_call(kernel.jit, args, warm_max_bytes, traced.jaxpr)
        except Exception:  # noqa: BLE001 - the main thread's call through jax.jit raises it, if it still does
            pass
        _compiled(kernel, sig, seconds if seconds is not None else time.perf_counter() - t0, fresh=True)


def wait_compiles() -> None:
    """Until the kernels' background compiles queued so far are done (tests, benchmarks)."""
    while True:
        with _jobs_lock:
            t = _worker[0]
        if t is None:
            return
        t.join()
        with _jobs_lock:
            if _worker[0] is t:  # it died without clearing its slot: nothing more will run
                _worker[0] = None


def _at_exit():
    # A compile thread still inside XLA when the interpreter exits can abort the process ("FATAL: exception not
    # rethrown"): let the running compile finish; the queued ones are dropped (the program that wanted them ended).
    with _jobs_lock:
        _jobs.clear()
    wait_compiles()


atexit.register(_at_exit)


def _tree_key(args):
    """A tree kernel's key without ``tree_flatten``: each argument's leaves' avals or types, then an end mark for a
    tuple's or a leaf's. Unchecked: the key of a nested container or a tracer is never stored (``_flat_tree``)."""
    key = []
    for g in args:
        if type(g) is tuple:  # a backward kernel's saved values, outputs, grads
            for a in g:
                key.append(a.aval if type(a) is _Array else type(a))
            key.append(_END)
        else:
            key.append(g.aval if type(g) is _Array else type(g))
            key.append(_LEAF)
    return tuple(key)


def _flat_tree(args):
    """Whether each argument is a leaf or a flat tuple of leaves: ``_tree_key`` then names its structure."""
    for g in args:
        for a in (g if type(g) is tuple else (g,)):
            if type(a) is not _Array and type(a) not in _TREE_LEAVES:
                return False
    return True


_END, _LEAF = object(), object()
_TREE_LEAVES = (int, float, bool, type(None))
_scalar_cache: dict = {}  # (type, value or its bits, device) -> a 0-d uncommitted array holding it


def _scalar_arrays(args):
    """``args`` with each Python scalar as the cached 0-d array jax.jit would make of it (Note [Kernel calls]), or
    None: no scalar, no array to place them by, 64-bit types off, a JAX trace active, or a value without one."""
    dev = scalars = None
    for a in args:
        t = type(a)
        if t is _Array:
            if dev is None:  # the first array's device, when it has one: the scalars go there (uncommitted)
                dev = getattr(a._sharding, "_device", False)
        elif t in _SCALARS:
            scalars = True
        else:
            return None
    if not scalars or dev is None or dev is False or not _scalars_held or not _X64_STATE.value or _tracing():
        return None
    out = []
    for a in args:
        t = type(a)
        if t is not _Array:
            # -0.0 == 0.0 and a NaN equals nothing: a float zero or NaN is keyed by its bits
            k = (t, a, dev) if t is not float or (a != 0.0 and a == a) else (t, _struct.pack("<d", a), dev)
            a = _scalar_cache.get(k)
            if a is None:
                a = _scalar_array(args[len(out)], dev, k)
                if a is None:
                    return None
        out.append(a)
    return out


def _tree_scalar_arrays(args):
    """``_scalar_arrays`` of a tree kernel's arguments, or None: a backward kernel's Python scalars are among its
    saved values (``x * 2``'s 2, its first argument), which then cost no conversion per backward. Its first array
    places them, else its other arguments' first (its gradients: arrays or None)."""
    saved = args[0]
    if type(saved) is not tuple:
        return None
    for a in saved:
        if type(a) in _SCALARS:
            break
    else:
        return None
    place = next((a for a in saved if type(a) is _Array), None)
    if place is None:  # no saved array: a gradient's device
        place = next((a for g in args[1:] for a in (g if type(g) is tuple else (g,)) if type(a) is _Array), None)
        if place is None:
            return None
    held = _scalar_arrays([place] + [a for a in saved if a is not None])
    if held is None:
        return None
    it = iter(held[1:])
    return (tuple([None if a is None else next(it) for a in saved]),) + tuple(args[1:])


def _scalar_array(a, dev, k):
    try:
        aval = _jax_core.typeof(a)  # jax's own: int64 and float64 weakly typed, bool strong (64-bit types on)
        x = np.asarray(a, aval.dtype)
    except OverflowError:  # an int past int64: jax.jit raises its own error for it
        return None
    if len(_scalar_cache) >= 1024:  # values that change every call (a schedule's) stay bounded
        _scalar_cache.clear()
    s = _scalar_cache[k] = _put(aval, single_sharding(dev), [x], [dev], False, enable_x64=True)
    return s


def _eligible(leaves) -> bool:
    n, device = 0, None
    for a in leaves:
        if type(a) is _Array:
            n += a.size
            devices = a.sharding._device_assignment
            # one CPU device for every array: a sharded array (a DTensor's) keeps its sharding through XLA
            if n > interpret_max_elements or len(devices) != 1 or devices[0].platform != "cpu" or (
                    a.committed and device not in (None, devices[0])):
                return False
            if a.committed:
                device = devices[0]
    return True


def _interpretable(traced, n_leaves):
    """The kernel's ``_kernel_interp.Program`` for this shape, or None (it compiles)."""
    closed = traced.jaxpr
    if len(closed.jaxpr.invars) != n_leaves:
        return None
    if any(getattr(a, "weak_type", False) for a in closed.out_avals):
        return None
    if sum(int(a.size) for a in closed.out_avals) > interpret_max_elements:
        return None
    return _kernel_interp.plan(closed, exact=not interpret_inexact)


def _run(st, leaves):
    """The interpreted call: NumPy in, jax arrays out (on the device of the first committed input)."""
    sharding = None
    ins = []
    for a in leaves:
        if type(a) is _Array:
            if sharding is None and a.committed:
                sharding = a.sharding
            ins.append(np.asarray(a))
        else:
            ins.append(a)
    committed = sharding is not None
    if sharding is None:  # no committed input (a factory): JAX's default device, as jax.jit would place it
        sharding = _default_sharding()
    device = sharding._device_assignment[0]
    if device.platform != "cpu":
        raise _kernel_interp.Unsupported(device.platform)
    ins = [np.asarray(x, dt) if type(x) in _SCALARS else x for x, dt in zip(ins, st.in_dtypes)]
    outs = _kernel_interp.run(st.prog, ins)
    arrays = []
    prog = st.prog
    for k, (o, aval) in enumerate(zip(outs, st.out_avals)):
        slot = prog.out_slots[k]
        if slot in prog.in_slots:  # an input returned as it is: jax.jit forwards the same array, so do we
            a = leaves[prog.in_slots.index(slot)]
            if type(a) is _Array and a.committed == committed and a.dtype == aval.dtype:
                arrays.append(a)
                continue
        if not (o.flags.owndata and o.flags.c_contiguous):
            o = np.array(o)  # a view of an input's buffer (a reshape, a slice): the result gets its own memory
        arrays.append(_put(aval, sharding, [o], [device], committed, enable_x64=True))
    return jax.tree_util.tree_unflatten(st.out_tree, arrays)


def _default_sharding():
    dev = jax.config.jax_default_device
    if not isinstance(dev, jax.Device):
        dev = jax.devices()[0]
    return single_sharding(dev)


try:  # the C++ call under jax.device_put (9 us where jax.device_put costs ~180 us on a 2-core CPU)
    from jax._src.lib import xla_client as _xc
    _put = _xc.batched_device_put
    _scalars_held = _X64_STATE is not None and _Array is not None and hasattr(_jax_core, "typeof")
except (ImportError, AttributeError):  # pragma: no cover - another jax layout
    _scalars_held = False  # (jax.device_put would not keep a scalar's weak type)

    def _put(aval, sharding, xs, devices, committed, enable_x64=None):
        return jax.device_put(xs[0], sharding if committed else None)


_kernels: dict = {}  # jitted kernel -> (the op's cache dict, its key there)
_compiles = [0]
_lock = threading.Lock()


def made(fn, cache, key) -> None:
    """``fn`` was just stored as ``cache[key]`` (an op's kernels by static attributes)."""
    with _lock:
        _kernels[fn] = (cache, key)
        while len(cache) > max(1, max_keys_per_op):
            old_key = next(iter(cache))
            old = cache.pop(old_key)
            _kernels.pop(old, None)
            _clear(old)


def _on_event(name, duration, **kwargs) -> None:
    """JAX compiled something (a kernel for a new input shape, or one whose executable was dropped)."""
    if name == "/jax/core/compile/backend_compile_duration":
        _count_compile()


def _count_compile() -> None:
    _compiles[0] += 1
    if _compiles[0] % max(1, check_every) == 0:
        enforce()


def _size(fn) -> int:
    try:
        return fn._cache_size()
    except Exception:  # noqa: BLE001 - not a jax.jit function (a transfer's plain lambda)
        return 0


def _clear(fn) -> None:
    clear = getattr(fn, "clear_cache", None)
    if clear is not None:
        clear()


def executables() -> int:
    """Compiled executables the op kernels hold now."""
    return sum(_size(fn) for fn in list(_kernels))


def enforce() -> None:
    """Past ``max_executables``, clear kernels until a quarter is free: those not called within the last
    ``in_use_seconds`` first, then those in use; the ones holding the most executables first in each."""
    global _epoch
    now = time.perf_counter()
    if now - _epoch_started[0] >= in_use_seconds:
        _epoch, _epoch_started[0] = _epoch + 1, now
    sizes = [(_size(fn), fn) for fn in list(_kernels)]
    total = sum(n for n, _ in sizes)
    if total <= max_executables:
        return
    recent = _epoch - 1  # (called in this epoch or the one before: within the last 5-10 s)
    sizes.sort(key=lambda nf: (getattr(nf[1], "_used", -1) >= recent, -nf[0]))
    target = max_executables * 3 // 4
    for n, fn in sizes:
        if total <= target:
            break
        if n:
            _clear(fn)
            total -= n


def forget_all() -> None:
    """Every kernel was dropped (``_dispatch.clear_kernel_caches``)."""
    with _lock:
        _kernels.clear()


jax.monitoring.register_event_duration_secs_listener(_on_event)
