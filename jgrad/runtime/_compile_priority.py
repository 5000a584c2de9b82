"""Background compiles at a lower priority, XLA's own compile threads included (Note [Compile priority]).

``compiling(nice)`` wraps one background compile in the thread that runs it: the thread runs at ``nice`` above the
main thread's nice value, and the threads jaxlib ran that compile on are found and niced the same way, once.
Used by ``_segment_run.CompileWorker`` (segments) and ``_kernel_cache`` (kernels); imports nothing of jgrad.

Note [Compile priority]
~~~~~~~~~~~~~~~~~~~~~~~
A background compile should take only what the program leaves of the machine, so the thread that compiles runs
at a higher nice value. That alone did not help: jaxlib hands the compile to threads of its own (the IFRT
compiler's executor, XLA CPU's parallel fusion compiler, LLVM's workers), started with the client by the main
thread, at the program's priority; the compiling thread only waits for them. REINFORCE in "auto" mode on a
2-core CPU (2026-11-27): during a 1.8 s segment compile those threads ran for ~2.1 CPU-seconds, the main thread
got 62% of a core, and 99 of 1043 calls of the hot executable stalled for 1-6 ms (a scheduler time slice each).
Nicing every such thread by hand: 16-19 stalled calls.

So each background compile is timed per thread (``/proc/self/task/*/schedstat``, ns). A thread that ran for at
least ``share`` of the compile's wall time and ``min_seconds``, that is not a Python thread, and that is not one
of XLA's named pools (``tf_*``: the executables' intra-op and dispatch threads, which the program waits on) is
taken for a compile thread and niced once. The first background compile of a process still competes at the
program's priority; the ones after it do not. Where other work shares the cores, a compile thread may run for
less than ``share`` of the wall and stay at the program's priority. The rule can also take a thread that runs the
program's own work, if that kept it busy for ``share`` of a compile: XLA's unnamed async-dispatch threads of eager
mode (LBFGS eager: ~30% each), or another library's native pool (OpenMP). Such a thread then yields only while the
cores are contended.
Linux only; elsewhere, or where ``setpriority`` is refused, compiles run at the program's priority.
"""
from __future__ import annotations

import os
import sys
import threading
import time

#: A non-Python thread that ran for at least this share of a background compile's wall time (and
#: ``min_seconds``) is one of XLA's compile threads.
share = 0.25
min_seconds = 0.02

_niced: set = set()  # native thread ids niced so far
_lock = threading.Lock()
_LINUX = sys.platform.startswith("linux")


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


class compiling:
    """``with compiling(nice):`` around one background compile, in the thread that runs it."""

    def __init__(self, nice):
        self.nice = nice if _LINUX else 0

    def __enter__(self):
        if self.nice > 0:
            lower(threading.get_native_id(), self.nice)
            self.t0, self.before = time.perf_counter(), _run_seconds()
        return self

    def __exit__(self, *exc):
        if self.nice > 0:
            wall = time.perf_counter() - self.t0
            python = {t.native_id for t in threading.enumerate()}
            for tid, (ran, name) in _run_seconds().items():
                if tid in python or tid in _niced or name.startswith("tf_"):
                    continue
                ran -= self.before.get(tid, (0.0, name))[0]
                if ran >= min_seconds and ran >= share * wall:
                    with _lock:
                        _niced.add(tid)
                    lower(tid, self.nice)
        return False
