"""Background compiles at a lower priority, XLA's own compile threads included (Note [Compile priority]).

``compiling(nice)`` wraps one background compile in the thread that runs it: the thread runs at ``nice`` above the
main thread's nice value, and the threads jaxlib compiles on are found and niced the same way, once.
Used by ``_segment_run.CompileWorker`` (segments) and ``_kernel_cache`` (kernels); imports nothing of jgrad.

Note [Compile priority]
~~~~~~~~~~~~~~~~~~~~~~~
A background compile should take only what the program leaves of the machine, so the thread that compiles runs
at a higher nice value. That alone did not help: jaxlib hands the compile to threads of its own (the IFRT
compiler's executor, XLA CPU's parallel fusion compiler, LLVM's workers), started with the client by the main
thread, at the program's priority; the compiling thread only waits for them. REINFORCE in "auto" mode on a
2-core CPU (2026-11-27): during a 1.8 s segment compile those threads ran for ~2.1 CPU-seconds, the main thread
got 62% of a core, and 99 of 1043 calls of the hot executable stalled for 1-6 ms (a scheduler time slice each).
Nicing those threads by hand: 16-19 stalled calls.

Which threads those are is read off what they do (``/proc/self/task/*/schedstat``, ns of CPU per thread), as no
name tells them apart from XLA's eager-mode dispatch threads, which run the program's own kernels (LBFGS eager:
~30% of the wall each) and must keep its priority:
- a *candidate* ran, during a background compile, for at least ``share`` of its wall time and ``min_seconds``,
  and is neither a Python thread nor one of XLA's named pools (``tf_*``);
- a *program thread* ran for ``min_seconds`` in a quiet stretch: between background compiles, at least
  ``quiet_seconds`` long, with no XLA compile in it (jax's compile events); it is never niced;
- a candidate seen idle in a quiet stretch is a compile thread: it is niced, once (and set back, where allowed,
  if a later quiet stretch shows it busy).
So the first background compiles of a process run at the program's priority, until a quiet stretch has been
seen; a compile thread kept busy by foreground compiles is never niced (it is taken for the program's). Where
other work shares the cores a compile thread may run for less than ``share`` of the wall and stay as it is.
Linux only; elsewhere, or where ``setpriority`` is refused, compiles run at the program's priority.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time

#: A non-Python thread that ran for at least this share of a background compile's wall time (and
#: ``min_seconds``) may be one of XLA's compile threads.
share = 0.25
min_seconds = 0.02
#: A stretch between background compiles this long, with no XLA compile in it, tells the program's threads (busy
#: there) from XLA's compile threads (idle there).
quiet_seconds = 0.05

_LINUX = sys.platform.startswith("linux")
_lock = threading.Lock()
_niced: set = set()       # native thread ids niced
_candidates: set = set()  # busy during a background compile, not yet seen idle in a quiet stretch
_idle: set = set()        # seen idle in a quiet stretch
_program: set = set()     # seen busy in a quiet stretch: never niced
_compiles = collections.deque(maxlen=64)  # (start, end) of the latest XLA compiles, any thread
_state = {"in_flight": 0, "since": None, "listening": False}  # since: (time, per-thread seconds) at the last end


def lower(tid, nice):
    """Set native thread ``tid``'s nice value to the main thread's plus ``nice`` (a thread has its own on Linux)."""
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + nice))
    except (OSError, AttributeError):  # not permitted, gone, or no such call: it keeps the program's priority
        pass


def _run_seconds():
    """{native thread id: (seconds run so far, name)} of this process's threads ({} where /proc has no tasks)."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except (OSError, ValueError, IndexError):  # the thread ended, or no schedstat in this kernel
            continue
        out[int(tid)] = (ns * 1e-9, name)
    return out


def _on_event(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        end = time.perf_counter()
        _compiles.append((end - duration, end))


def _listen():
    if not _state["listening"]:
        _state["listening"] = True
        import jax.monitoring
        jax.monitoring.register_event_duration_secs_listener(_on_event)


def _ran(after, before, tid):
    return after[tid][0] - before.get(tid, (0.0, ""))[0]


def _classify_quiet(t0, before, t1, after):
    """The stretch from ``t0`` (``before``) to ``t1`` (``after``) had no background compile: if it had no compile
    at all and was long enough, note which threads ran in it and which did not."""
    if t1 - t0 < quiet_seconds or any(end > t0 and start < t1 for start, end in list(_compiles)):
        return
    for tid in after:
        if tid in before:
            (_program if _ran(after, before, tid) >= min_seconds else _idle).add(tid)
    for tid in _niced & _program:  # niced before its program work showed: back to the program's priority
        _niced.discard(tid)
        lower(tid, 0)


class compiling:
    """``with compiling(nice):`` around one background compile, in the thread that runs it."""

    def __init__(self, nice):
        self.nice = nice if _LINUX else 0

    def __enter__(self):
        if self.nice > 0:
            _listen()
            lower(threading.get_native_id(), self.nice)
            self.t0, self.before = time.perf_counter(), _run_seconds()
            with _lock:
                since, _state["in_flight"] = _state["since"], _state["in_flight"] + 1
                if _state["in_flight"] == 1 and since is not None:
                    _classify_quiet(since[0], since[1], self.t0, self.before)
        return self

    def __exit__(self, *exc):
        if self.nice > 0:
            t1, after = time.perf_counter(), _run_seconds()
            python = {t.native_id for t in threading.enumerate()}
            with _lock:
                for tid, (_, name) in after.items():
                    if tid not in python and not name.startswith("tf_") and tid not in _niced:
                        ran = _ran(after, self.before, tid)
                        if ran >= min_seconds and ran >= share * (t1 - self.t0):
                            _candidates.add(tid)
                _state["in_flight"] -= 1
                if _state["in_flight"] == 0:
                    _state["since"] = (t1, after)
                ready = (_candidates & _idle) - _program
                _candidates.difference_update(ready | _program)
                _niced.update(ready)
            for tid in ready:
                lower(tid, self.nice)
        return False
