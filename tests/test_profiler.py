"""jg.profiler: backward node spans, user spans, Chrome trace, timeline, table."""
import json
import threading

import pytest

import jgrad as jg
from jgrad.autograd import engine


def _graph():
    x = jg.randn(3, 4, requires_grad=True)
    w = jg.randn(4, 2, requires_grad=True)
    return x, w, (x @ w).relu().sum()


@pytest.mark.cpu_only("CPU work runs on the calling thread; a GPU's backward runs on its device thread")
def test_events_name_every_backward_node_in_order():
    _, _, y = _graph()
    with jg.profiler.profile() as prof:
        y.backward()
    names = [e.name for e in prof.events]
    assert names[:3] == ["SumBackward0", "ReluBackward0", "MmBackward0"]
    assert sorted(names[3:]) == ["AccumulateGrad", "AccumulateGrad"]
    for e in prof.events:
        assert e.kind == "node" and e.end_ns >= e.start_ns and e.thread == threading.current_thread().name
        assert e.stream == "cpu default" and e.device == "cpu"
    assert prof not in engine.node_observers


def test_sync_true_and_device_threads_and_streams():
    s = jg.Stream("cpu:1")
    x = jg.randn(4, device="cpu:1", requires_grad=True)
    s.wait_stream(jg.current_stream("cpu:1"))
    with jg.stream(s):
        h = x * 3
    jg.current_stream("cpu:1").wait_stream(s)
    y = h.exp().sum()
    with jg.profiler.profile(sync=True) as prof:
        y.backward()
    by = {e.name: e for e in prof.events}
    assert by["MulBackward0"].stream == f"cpu:1 stream {s.id}" and by["MulBackward0"].stream_id == s.id
    assert by["ExpBackward0"].stream == "cpu:1 default"
    assert all(e.thread.startswith("jgrad-autograd") for e in prof.events)


@pytest.mark.cpu_only("CPU work runs on the calling thread; a GPU's backward runs on its device thread")
def test_chrome_trace_has_one_x_event_per_node(tmp_path):
    s = jg.Stream()
    x = jg.randn(5, requires_grad=True)
    s.wait_stream(jg.current_stream())
    with jg.stream(s):
        h = x.sin()
    jg.current_stream().wait_stream(s)
    y = (h * 2).sum()
    with jg.profiler.profile() as prof:
        y.backward()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(prof.events) == 4  # Sum, Mul, Sin, AccumulateGrad
    assert sorted(e["name"] for e in xs) == sorted(e.name for e in prof.events)
    for e in xs:
        assert e["dur"] >= 0 and e["ts"] >= 0 and e["args"]["thread"] == "MainThread"
    assert len({e["tid"] for e in xs}) == 2  # one row per stream
    assert len({e["pid"] for e in xs}) == 1  # one process per device
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"cpu default", f"cpu stream {s.id}"}


@pytest.mark.cpu_only("CPU work runs on the calling thread; a GPU's backward runs on its device thread")
def test_timeline_draws_with_agg(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    _, _, y = _graph()
    with jg.profiler.profile() as prof:
        with jg.profiler.record_function("my backward"):
            y.backward()
    ax = prof.timeline()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["cpu default (user)", "cpu default"]
    assert len(ax.patches) == len(prof.events) == 6
    ax.figure.savefig(tmp_path / "t.png")
    plt.close(ax.figure)
    _, ax2 = plt.subplots()
    assert prof.timeline(ax=ax2) is ax2
    plt.close(ax2.figure)


@pytest.mark.cpu_only("CPU work runs on the calling thread; a GPU's backward runs on its device thread")
def test_record_function_and_record_span_and_table():
    with jg.profiler.profile() as prof:
        with jg.profiler.record_function("step"):
            _, _, y = _graph()
            y.backward()
        jg.profiler.record_span("replay g", jg.current_stream(), 10, 30)
    user = [e for e in prof.events if e.kind == "user"]
    assert [e.name for e in user] == ["step"] and user[0].stream == "cpu default"
    rep = [e for e in prof.events if e.kind == "replay"]
    assert rep[0].duration_ns == 20
    table = prof.table()
    assert "AccumulateGrad" in table and "step" in table and "replay g" in table
    rows = {r["name"]: r for r in prof.key_averages()}
    assert rows["AccumulateGrad"]["count"] == 2


def test_nothing_recorded_outside_the_context():
    jg.profiler.record_span("ignored", None, 0, 1)  # no active profile: a no-op
    with jg.profiler.record_function("ignored too"):
        pass
    _, _, y = _graph()
    with jg.profiler.profile() as prof:
        pass
    y.backward()
    jg.profiler.record_span("late", None, 0, 1)
    with jg.profiler.record_function("late too"):
        pass
    assert prof.events == []
    assert prof not in engine.node_observers and not jg.profiler._active


def test_observer_removed_when_the_block_raises():
    x = jg.randn(3, requires_grad=True)
    y = x.exp().sum()
    y.grad_fn.register_prehook(lambda g: (_ for _ in ()).throw(ValueError("boom")))
    with pytest.raises(ValueError, match="boom"):
        with jg.profiler.profile() as prof:
            y.backward()
    assert prof not in engine.node_observers and not jg.profiler._active
    failed = [e for e in prof.events if e.error]
    assert [e.name for e in failed] == ["SumBackward0"]
    with pytest.raises(RuntimeError, match="only once at a time"):
        with prof:
            with prof:
                pass
    assert prof not in engine.node_observers


def test_nested_profiles_and_reentrant_backward_both_record():
    x = jg.randn(3, requires_grad=True)
    inner_x = jg.randn(2, requires_grad=True)

    def hook(g):
        with jg.enable_grad():
            (inner_x * 2).sum().backward()  # a reentrant backward inside a hook
        return None

    y = (x * x).sum()
    y.register_hook(hook)
    with jg.profiler.profile() as outer:
        with jg.profiler.profile() as inner:
            y.backward()
    assert [e.name for e in outer.events] == [e.name for e in inner.events]
    names = [e.name for e in outer.events]
    assert names.count("MulBackward0") == 2 and names.count("AccumulateGrad") == 2
    outer_sum = next(e for e in outer.events if e.name == "SumBackward0" and e.task_id is not None)
    nested = [e for e in outer.events if e.task_id != outer_sum.task_id]
    assert all(outer_sum.start_ns <= e.start_ns and e.end_ns <= outer_sum.end_ns for e in nested)


@pytest.mark.one_execution_mode
def test_a_graph_replay_is_a_span_of_the_active_profile_only():
    g, x = jg.Graph(), jg.ones(3)
    with jg.graph(g):
        y = x * 2
    with jg.profiler.profile() as prof:
        g.replay()
    rep = [e for e in prof.events if e.kind == "replay"]
    assert len(rep) == 1 and rep[0].duration_ns >= 0 and y.tolist() == [2.0, 2.0, 2.0]
    assert jg.graphs.replay_observers == []  # nothing observes replays once no profile is active
    g.replay()
