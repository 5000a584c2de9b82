"""Device-side checks of values (indices in range, divisors not zero, probabilities in [0, 1]): CUDA's device-side
asserts, without the broken context.

Ops call ``check_range`` and ``check_values``; this module imports ``_dispatch`` (the check is an op) and
``_segment`` (it installs the gate of a thread's writes, ``_segment.check_gate``), and is used by the op
library and by ``graphs`` (a replay re-arms the checks it captured). ``streams`` and ``_dispatch`` reach it
through the host-sync hook it installs, never by import.

Note [Deferred checks]
~~~~~~~~~~~~~~~~~~~~~~
Why: JAX's indexing never fails. An index out of range is clamped, wrapped or dropped (gather,
scatter, take), or gives NaN, where PyTorch raises. Checking on the host would cost a device-to-host
sync per op, which is what asynchronous dispatch and tiered execution exist to avoid. So, as CUDA's
device-side asserts do, the check is computed on the device beside the op's result: a small kernel
(fused into the segment's executable in "auto" mode, into the graph in a capture) that gives
``[ok, first bad value]``, and the flag is read at the next host synchronization.

When it is reported: at the next host read of a value (``item``, ``tolist``, ``numpy``, ``bool``,
printing, a copy to the CPU), ``synchronize()`` of a stream, an event or the device, or a DLPack export,
by the thread that issued the op (each thread has its own pending checks: another thread's reads never
raise it, and the issuing thread's next read always does). Index tensors whose values already sit in
host memory (a CPU tensor that is not pending work, or a view of one's storage, even one "auto" mode
recorded) are checked at the op, with NumPy, and raise there, as PyTorch's CPU kernels do: no flag, so no
gate of the step's writes (which cost a hot LSTM language model step half its time). The error is
PyTorch's (its type and wording), followed by where the op was issued and where the failure was noticed.

What a failed check gates: in "auto" mode each thread keeps, per device, one flag that is 0 once any of
its pending checks failed (each check records ``RANGE_CHECK_AND``/``VALUE_CHECK_AND``, its flag and the AND
into the thread's in one step; a replay's re-armed checks record ``CHECK_OK_AND``); at a barrier the
segment chooses, on the device, between each in-place write of that thread and the value it replaces
(``_segment_fail.gate``), so the step whose index was bad changes no parameter, ``.grad``, optimizer
state or generator key, and neither does any later step of that thread until the failure is reported.
A captured graph does the same inside its executable (``_compile._gate_of``). No host sync: the choice
is made by the device.

What is left usable: the op's result holds clamped values (an embedding reads the nearest row; the
kernels of ``gather``/``index_select`` give NaN rows), the pending checks are cleared when one is
reported, and every tensor, parameter and graph stays usable.
"""
from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

from ..core import _dtype
from ..core._recorder import Buffer as _Buffer
from . import _bounds, _segment
from .. import streams
from ._dispatch import Op, call
from ..core._tensor import Tensor


def _range_flag(idx, low, high, ignore):
    """``[1, 0]`` when every index is in ``[low, high)`` (or equals ``ignore``), else ``[0, first bad value]``."""
    i = idx.reshape(-1).astype(jnp.int64)
    bad = (i < low) | (i >= high)
    if ignore is not None:
        bad = bad & (i != ignore)
    if i.size == 0:
        return jnp.array([1, 0], jnp.int64)
    first = jnp.argmax(bad)
    return jnp.stack([1 - jnp.any(bad).astype(jnp.int64), i[first]])


RANGE_CHECK = Op("range_check", _range_flag, differentiable=False)

_PREDICATES = {
    # kind -> (which values are bad, on the device)
    "nonzero": lambda v: v == 0,
    "unit_interval": lambda v: ~((v >= 0) & (v <= 1)),  # NaN fails it too
}


def _bad_values(kind, v):
    """Which values of ``v`` (a jax or NumPy array) are bad for ``kind``: a name of ``_PREDICATES``, or
    ``(constraint type, its parameters)`` for a distribution's array-generic constraint (``require_constraint``),
    checked in the same step as the AND into the thread's flag."""
    if type(kind) is tuple:
        c = object.__new__(kind[0])
        c.__dict__.update(kind[1])
        return ~c.check(v)
    return _PREDICATES[kind](v)


def _value_flag(a, kind):
    """``[1, 0]`` when no value of ``a`` is bad for ``kind``, else ``[0, 0]``."""
    if a.size == 0:
        return jnp.array([1, 0], jnp.int64)
    return jnp.stack([1 - jnp.any(_bad_values(kind, a)).astype(jnp.int64), jnp.zeros((), jnp.int64)])


VALUE_CHECK = Op("value_check", _value_flag, differentiable=False)


def _and_ok(ok, flag):
    return flag, jnp.minimum(ok, flag[0])


# In "auto" mode a check and the AND into its thread's flag are one step (half the recording of two ops; a GAN's
# three binary_cross_entropy calls a step record six checks): ``(ok, x) -> (flag, min(ok, flag[0]))``.
RANGE_CHECK_AND = Op("range_check_and", lambda ok, idx, low, high, ignore: _and_ok(ok, _range_flag(idx, low, high,
                                                                                                   ignore)),
                     differentiable=False, num_outputs=2)
VALUE_CHECK_AND = Op("value_check_and", lambda ok, a, kind: _and_ok(ok, _value_flag(a, kind)),
                     differentiable=False, num_outputs=2)


class PendingCheck:
    """A flag on the device and how to report it: PyTorch's exception (for the first bad value)."""

    __slots__ = ("flag", "make_error", "op", "site")

    def __init__(self, flag, make_error, op, site):
        self.flag, self.make_error, self.op, self.site = flag, make_error, op, site

    def error(self, bad, noticed):
        e = self.make_error(bad)
        msg = (f"{e.args[0] if e.args else ''} ({self.op} issued at {self.site}; noticed at {noticed}: values on "
               "the device are checked beside the kernel and reported at the next host synchronization, like "
               "CUDA's device-side asserts)")
        return type(e)(msg)


_lock = threading.Lock()


class _ThreadChecks:
    """One thread's checks not yet reported (in issue order), and per device the tensor that is 0 once one of
    them failed ("auto" mode: the gate of that thread's in-place writes)."""

    __slots__ = ("pending", "ok", "held")

    def __init__(self):
        self.pending, self.ok = [], {}
        self.held = {}  # per device, the flag the current one was made from: kept, so never donated (below)


_threads: dict = {}   # thread id -> _ThreadChecks: a report goes to the thread that issued the op


def _mine(create=True):
    tid = threading.get_ident()
    st = _threads.get(tid)
    if st is None and create:
        st = _threads[tid] = _ThreadChecks()
    return st


_SMALL = 64  # arrays of up to this many elements are checked in Python


def check_range(index: Tensor, low: int, high: int, make_error, op: str, ignore=None) -> None:
    """Check that every value of ``index`` is in ``[low, high)`` (``ignore`` excepted).

    ``make_error(bad_value)`` returns PyTorch's exception. Host values are checked now; values on a
    device or still pending are checked beside the kernel and reported at the next host sync.
    """
    if index._bounds is not None and _bounds.within(index, low, high):  # made in range (Note [Known bounds])
        return
    d = index._fresh()._data
    a = host_values(index)
    if a is not None:
        if ignore is None and a.size <= _SMALL:  # a few indices: Python's min/max cost ~1 us, NumPy's ops ~5 us
            flat = a.ravel().tolist()
            if not flat or (low <= min(flat) and max(flat) < high):
                return
        bad = (a < low) | (a >= high)
        if ignore is not None:
            bad &= a != ignore
        if bad.any():
            raise make_error(int(a[bad].flat[0]))
        return
    if _is_tracer(d):
        return  # inside a jax transformation (functionalize): nothing can be reported
    _issue(RANGE_CHECK, RANGE_CHECK_AND, dict(low=int(low), high=int(high), ignore=ignore), _range_bad, index,
           make_error, op)


def host_values(t):
    """The values of ``t`` as NumPy when they sit in host memory now, else None (a GPU tensor, a pending result of
    "auto" mode, a captured buffer: those are checked on the device). In host memory: a CPU tensor's array that is
    not pending work (reading it waits for its producer, no transfer), or a view whose storage is such an array
    ("auto" mode records the view, yet its elements are there: a language model's ``source[i:i + n]``), read
    through the view's geometry. Value checks that PyTorch makes on the CPU use it (index ranges here;
    ``binary_cross_entropy``'s range, integer division by zero and distributions' constraints in the ops)."""
    if t._device.type != "cpu":
        return None
    d = t._data
    if isinstance(d, jax.Array) and not _is_tracer(d):
        return np.asarray(d)
    alias = t._alias
    if alias is None:
        return None
    root = alias.storage.root._data
    if not isinstance(root, jax.Array) or _is_tracer(root):
        return None  # (a pending write to the storage: its new elements are not there yet)
    flat = np.asarray(root).reshape(-1)  # the root is contiguous: an element's address is its flat index
    g = alias.geom
    if not g.steps:
        return flat.reshape(g.shape)
    return np.lib.stride_tricks.as_strided(flat[g.offset:], g.shape, [s * flat.itemsize for s in g.strides],
                                           writeable=False)


def check_values(t: Tensor, kind, make_error, op: str) -> None:
    """Check the values of ``t`` on the device (``kind``: "nonzero", "unit_interval" or a distribution's
    ``(constraint type, parameters)``) and report a failure at the next host sync, as ``check_range`` does for
    indices; the caller checks host values itself."""
    if _is_tracer(t._data):
        return
    _issue(VALUE_CHECK, VALUE_CHECK_AND, {"kind": kind}, _value_bad, t, make_error, op)


def _issue(check, check_and, attrs, bad, t, make_error, op):
    """Record ``check`` of ``t``'s values and register its flag; in "auto" mode (no capture) as one step with the
    AND into the thread's flag that gates its writes (``check_and``)."""
    dev = t._device
    if _segment.auto[0] and streams._current_for(dev)._capture is None:
        st = _mine()
        prev = _thread_ok(st, dev)
        _shape_form(check_and, attrs, _flag_and_ok_shapes)
        flag, ok = call(check_and, prev, t, **attrs)  # (not differentiable: no node, so no detach's alias)
        _on_host(check_and, attrs, bad, fused=True)
        pending = PendingCheck(flag, make_error, op, streams._user_site())
        with _lock:
            st.pending.append(pending)
        st.held[dev], st.ok[dev] = prev, ok  # (held: see _pend)
        return
    _shape_form(check, attrs, _flag_shapes)
    flag = call(check, t, **attrs)
    _on_host(check, attrs, bad)
    _register(PendingCheck(flag, make_error, op, streams._user_site()), flag)


def _register(check, flag):
    cap = flag._stream._capture if flag._stream is not None else None
    if cap is not None:
        with _lock:
            cap.checks.append(check)  # re-armed at every replay (graphs.Graph.replay)
        return
    _pend([check])


CHECK_OK_AND = Op("check_ok_and", lambda ok, flag: jnp.minimum(ok, flag[0]), differentiable=False)


# ---- the checks of a segment run op by op on a CPU --------------------------------------------------------------
# There the values are computed already and in host memory, so the checks read them with NumPy (a few us) instead of
# running each check's kernel (one more dispatch each, or NumPy through the kernel interpreter while the check's
# shape has not compiled: 0.1-0.5 ms each on the 2-core CPU, which eager mode, checking host values at the op, never
# pays). A check that passes returns one cached flag; one that fails runs its kernel, which gives the report.
def _range_bad(a, low, high, ignore):
    i = a.reshape(-1)
    bad = (i < low) | (i >= high)
    if ignore is not None:
        bad &= i != ignore
    return bad.any()


def _value_bad(a, kind):
    return bool(np.any(_bad_values(kind, a)))


_Single = jax.sharding.SingleDeviceSharding
_PASS: dict = {}  # (sharding, committed, shape) -> the flag of a check that passed


def _passing(like, size):
    """The flag of a passed check (``[1, 0]``; size 0: the 0-d 1 of ``CHECK_OK_AND``), placed as ``like``."""
    key = (like.sharding, like.committed, size)
    f = _PASS.get(key)
    if f is None:  # (made under the segment's x64 scope: int64, as the kernel's)
        f = _PASS[key] = jax.device_put(np.array([1, 0], np.int64) if size else np.int64(1),
                                        like.sharding if like.committed else None)
    return f


def _on_host(op, attrs, bad, fused=False):
    """Give ``op``'s kernel for ``attrs`` its host form (``_segment_run.host_forms``): ``bad(values, **attrs)``.
    ``fused``: a check ANDed into the thread's flag (``(ok, x) -> (flag, ok')``), which passes while ``ok`` is 1."""
    kernel = op.kernel(tuple(attrs.items()), attrs)
    form = _segment.host_forms.get(id(kernel))
    if form is None or form[0] is not kernel:
        def on_host(*args, _kernel=kernel):
            # (one device's arrays only: a sharded flag is placed as XLA places the kernel's, not as its input)
            if not all(isinstance(a, jax.Array) and type(a.sharding) is _Single for a in args):
                return _kernel(*args)
            if fused:
                ok, x = args
                if not np.asarray(ok) or bad(np.asarray(x), **attrs):
                    return _kernel(*args)
                return _passing(x, 2), _passing(ok, 0)
            if bad(*map(np.asarray, args), **attrs):
                return _kernel(*args)
            return _passing(args[0], 0 if op is CHECK_OK_AND else 2)
        _segment.add_host_form(kernel, on_host)


def _ok_and_bad(ok, flag):
    return not ok or not flag[0]


def _pend(checks):
    """Checks of this thread to report at its next host sync; in "auto" mode they also gate its writes."""
    st = _mine()
    with _lock:
        st.pending.extend(checks)
    if not _segment.auto[0]:
        return
    for c in checks:  # 1 while every pending check of the thread passed: recorded beside them, no sync
        dev = c.flag._device
        # Always CHECK_OK_AND, from a constant 1 when nothing is pending: the step after a host sync then records
        # the same structure as the steps between syncs (an input either way), so it does not compile apart.
        # The previous flag is held one step longer: a segment never donates it, as it never donates the constant,
        # so the step after a sync and the others also donate the same inputs (one executable, not two).
        prev = st.held[dev] = _thread_ok(st, dev)
        _shape_form(CHECK_OK_AND, {}, _ok_and_shapes)
        st.ok[dev] = call(CHECK_OK_AND, prev, c.flag)
        _on_host(CHECK_OK_AND, {}, _ok_and_bad)


def _thread_ok(st, dev):
    """The thread's flag on ``dev``: 0 once one of its pending checks failed (a constant 1 while none is pending)."""
    ok = st.ok.get(dev)
    return ok if ok is not None else _passed(dev)


def _ok_and_shapes(leaves):
    """``CHECK_OK_AND``'s output aval at recording, without tracing its kernel (~2 ms for a new structure: eager
    mode never runs it): the 0-d flag of the two flags' integer dtype. None (trace it) for anything else."""
    if len(leaves) != 2:
        return None
    ok, flag = (getattr(x, "aval", None) for x in leaves)
    if ok is None or flag is None or ok.shape != () or flag.shape != (2,) or ok.dtype != flag.dtype or (
            ok.dtype.kind != "i" or ok.weak_type or flag.weak_type):
        return None
    for x, a in zip(leaves, (ok, flag)):
        if (getattr(a, "sharding", None) is not None if type(x) is _Buffer
                else type(getattr(x, "sharding", None)) is not _Single):
            return None  # (laid out over a mesh: the kernel's trace tells where its result lies)
    return [_segment._run.shape_struct((), ok.dtype)], _segment._run.ONE_LEAF


def _flag_shapes(leaves):
    """A range or value check's output aval at recording, without tracing its kernel (eager mode, which checks
    host values at the op, never runs it: ~18 ms a new structure for an LSTM LM's embedding): ``[ok, value]``,
    int64 (the kernels run under jgrad's 64-bit scope). None (trace it) for an input laid out over a mesh."""
    if len(leaves) != 1:
        return None
    x = leaves[0]
    a = getattr(x, "aval", None)
    if a is None or (getattr(a, "sharding", None) is not None if type(x) is _Buffer
                     else type(getattr(x, "sharding", None)) is not _Single):
        return None
    return [_segment._run.shape_struct((2,), np.dtype(np.int64))], _segment._run.ONE_LEAF


_TWO_LEAVES = jax.tree_util.tree_structure((0, 0))


def _flag_and_ok_shapes(leaves):
    """A fused check's output avals at recording (``RANGE_CHECK_AND``, ``VALUE_CHECK_AND``): the flag's, as
    ``_flag_shapes`` gives it, and the thread flag's, as ``_ok_and_shapes`` does. None (trace it) otherwise."""
    if len(leaves) != 2:
        return None
    flag = _flag_shapes(leaves[1:])
    ok = getattr(leaves[0], "aval", None)
    if flag is None or ok is None or ok.shape != () or ok.dtype != np.dtype(np.int64) or ok.weak_type or (
            getattr(ok, "sharding", None) is not None if type(leaves[0]) is _Buffer
            else type(getattr(leaves[0], "sharding", None)) is not _Single):
        return None
    return [flag[0][0], _segment._run.shape_struct((), ok.dtype)], _TWO_LEAVES


def _shape_form(op, attrs, form):
    """Give ``op``'s kernel for ``attrs`` its shape form (``_segment_run.shape_forms``), once per kernel."""
    kernel = op.kernel(tuple(attrs.items()), attrs)
    sf = _segment._run.shape_forms.get(id(kernel))
    if sf is None or sf[0] is not kernel:
        _segment._run.add_shape_form(kernel, form)


_PASSED: dict = {}


def _passed(dev):
    """A 0-d int64 1 on ``dev`` (no check failed yet), made once per device."""
    t = _PASSED.get(dev)
    if t is None:
        with _dtype.x64_scope():  # (a transfer: jnp.ones would compile a kernel for it)
            t = _PASSED[dev] = Tensor._make(jax.device_put(np.ones((), np.int64), dev._placement), dev)
    return t


def _gate_for(tid, device):
    """The gate of thread ``tid``'s in-place writes on ``device`` (``_segment.check_gate``), or None."""
    st = _threads.get(tid)
    return st.ok.get(device) if st is not None and st.pending else None


def _is_tracer(d):
    return isinstance(d, jax.core.Tracer)


def rearm(checks) -> None:
    """A replay made these captured flags anew: report them at the replaying thread's next host sync."""
    if checks:
        _pend(list(checks))


def verify(noticed: str) -> None:
    """Read every flag this thread has pending (one transfer) and raise the first failure's error; the thread's
    list is cleared. Other threads' checks are theirs to report."""
    st = _mine(create=False)
    if st is None or not st.pending:
        return
    checks = st.pending[:]
    flags = [c.flag._value for c in checks]  # pending work runs here (a barrier, in "auto" mode), still gated
    with _lock:
        del st.pending[:len(checks)]
        if not st.pending:
            st.ok.clear()
            st.held.clear()
            _threads.pop(threading.get_ident(), None)
    stacked = None
    with _dtype.x64_scope():
        # One transfer on an accelerator; on a CPU the flags are host memory already: a read each, and no stacking
        # kernel to compile for each count of flags (nor for flags on several devices).
        if len(flags) > 1 and not _on_cpu(flags[0]):
            try:
                stacked = _stack(flags)
            except ValueError:  # flags on several devices
                pass
        values = (np.asarray(stacked) if stacked is not None else np.stack([np.asarray(f) for f in flags]))
        values = values.reshape(-1, 2)
    for c, (ok, bad) in zip(checks, values):
        if not ok:
            raise c.error(int(bad), noticed)


@jax.jit
def _stack(flags):
    return jnp.stack(flags)


def _on_cpu(a):
    devs = getattr(a, "devices", None)
    return devs is not None and all(d.platform == "cpu" for d in devs())


def pending_count() -> int:
    """How many checks of this thread wait for its next host sync (tests use it)."""
    st = _mine(create=False)
    return len(st.pending) if st is not None else 0


def _on_host_sync(what, stream=None):
    if _threads:
        st = _mine(create=False)
        if st is not None and st.pending:
            verify(f"{what} at {streams._user_site()}")


def _install():
    streams._sync_hooks.append(_on_host_sync)
    _segment.check_gate[:] = [_gate_for, lambda: bool(_threads)]


_install()
