"""Background compiles run below the program's priority, XLA's own compile threads included (Note [Compile priority]
in jgrad/runtime/_compile_priority.py). Linux only: elsewhere a thread has no nice value of its own."""
import collections
import os
import sys
import threading
import time

import jax
import jax.numpy as jnp
import pytest

from jgrad.runtime import _compile_priority, _kernel_cache, _segment, _segment_run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)


def _fresh_function(n):
    def f(x):  # a new function each call: jax compiles it afresh
        for i in range(n):
            x = jnp.sin(x) * (i + 1.0) + jnp.tanh(x[::-1])
        return x
    return f


@pytest.fixture
def fresh_state(monkeypatch):
    """What _compile_priority learnt about this process's threads, forgotten for the test (and restored after)."""
    for name in ("_niced", "_candidates", "_idle", "_program"):
        monkeypatch.setattr(_compile_priority, name, set())
    monkeypatch.setattr(_compile_priority, "_state", {"in_flight": 0, "since": None,
                                                      "listening": _compile_priority._state["listening"]})
    monkeypatch.setattr(_compile_priority, "_compiles", collections.deque(maxlen=64))
    monkeypatch.setattr(_compile_priority, "share", 0.05)  # (a parallel test run leaves each thread less of the wall)
    _kernel_cache.wait_compiles()  # (an earlier test's background compile would make no stretch quiet)
    _segment.wait_compiles()


def _compile_in_background(nice, n=60):
    seen = {}

    def work():
        with _compile_priority.compiling(nice):
            seen["worker"] = _nice(threading.get_native_id())
            jax.jit(_fresh_function(n)).lower(jnp.ones((64,))).compile()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return seen["worker"]


@pytest.mark.cpu_only("XLA:CPU's compile threads; a GPU compile runs elsewhere")
def test_background_compiles_nice_their_thread_and_then_the_threads_xla_compiles_on(fresh_state):
    main = _nice(os.getpid())
    assert _compile_in_background(5) == min(19, main + 5)
    # jaxlib compiles on threads of its own (the calling thread waits for them): they are candidates, not yet
    # niced, as no quiet stretch has shown them idle outside compiles
    assert _compile_priority._candidates and not _compile_priority._niced
    time.sleep(2 * _compile_priority.quiet_seconds)  # a quiet stretch: no compile, the compile threads idle
    _compile_in_background(5)
    found = _compile_priority._niced
    assert found
    assert _nice(os.getpid()) == main  # the program's own thread keeps its priority
    python = {th.native_id for th in threading.enumerate()}
    for tid in found:
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        assert tid not in python and not name.startswith("tf_"), (tid, name)
        assert _nice(tid) >= min(19, main + 5)


def test_a_quiet_stretch_tells_the_programs_threads_from_idle_ones(fresh_state):
    before = {1: (0.0, "a"), 2: (1.0, "b"), 3: (2.0, "c")}
    after = {1: (0.5, "a"), 2: (1.0001, "b"), 3: (2.0, "c"), 4: (9.0, "new")}
    _compile_priority._compiles.append((10.0, 10.4))
    _compile_priority._classify_quiet(10.2, before, 11.0, after)  # an XLA compile overlapped it: no verdict
    assert not _compile_priority._program and not _compile_priority._idle
    _compile_priority._classify_quiet(11.0, before, 11.01, after)  # too short: no verdict
    assert not _compile_priority._program and not _compile_priority._idle
    _compile_priority._classify_quiet(11.0, before, 12.0, after)
    assert _compile_priority._program == {1} and _compile_priority._idle == {2, 3}  # (4 was born in it: no verdict)


def test_the_segment_compile_worker_runs_its_jobs_at_the_lower_priority():
    main = _nice(os.getpid())
    seen = []
    worker = _segment_run.CompileWorker(lambda: 3)
    worker.submit(lambda: seen.append(_nice(threading.get_native_id())))
    worker.wait()
    assert seen == [min(19, main + 3)]


def test_nice_zero_leaves_every_thread_alone():
    main = _nice(os.getpid())
    seen = []

    def job():
        with _compile_priority.compiling(0):
            seen.append(_nice(threading.get_native_id()))

    t = threading.Thread(target=job)
    t.start()
    t.join()
    assert seen == [main]
