"""Background compiles run below the program's priority, XLA's own compile threads included (Note [Compile priority]
in jgrad/runtime/_compile_priority.py). Linux only: elsewhere a thread has no nice value of its own."""
import os
import sys
import threading

import jax
import jax.numpy as jnp
import pytest

from jgrad.runtime import _compile_priority, _segment_run

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")


def _nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)


def _fresh_function(n):
    def f(x):  # a new function each call: jax compiles it afresh
        for i in range(n):
            x = jnp.sin(x) * (i + 1.0) + jnp.tanh(x[::-1])
        return x
    return f


@pytest.mark.cpu_only("XLA:CPU's compile threads; a GPU compile runs elsewhere")
def test_a_background_compile_nices_its_thread_and_the_threads_xla_compiles_on(monkeypatch):
    monkeypatch.setattr(_compile_priority, "_niced", set())  # (threads niced by earlier compiles: found again)
    monkeypatch.setattr(_compile_priority, "share", 0.05)  # (a parallel test run leaves each thread less of the wall)
    main = _nice(os.getpid())
    seen = {}

    def compile_in_background():
        with _compile_priority.compiling(5):
            seen["worker"] = _nice(threading.get_native_id())
            jax.jit(_fresh_function(60)).lower(jnp.ones((64,))).compile()

    t = threading.Thread(target=compile_in_background)
    t.start()
    t.join()
    assert seen["worker"] == min(19, main + 5)
    assert _nice(os.getpid()) == main  # the program's own thread keeps its priority
    found = _compile_priority._niced
    # jaxlib compiles on threads of its own (the calling thread waits for them): some ran this compile
    assert found, "no thread besides the caller ran the compile"
    python = {th.native_id for th in threading.enumerate()}
    for tid in found:
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        assert tid not in python and not name.startswith("tf_"), (tid, name)
        assert _nice(tid) >= min(19, main + 5)


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
