"""Views in the runtime: lazy reads, the storage's life, "auto" segments, capture and replay, the sanitizer.

The semantics against PyTorch are in tests/test_views.py; these tests hold what PyTorch has no
counterpart for (how jgrad carries views through its execution modes), with NumPy as the reference.
"""
import numpy as np
import pytest

import jgrad as jg
from jgrad.streams import StreamRaceError, sanitizer


def _np(t):
    return np.asarray(t.detach().numpy())


def test_a_view_of_a_large_tensor_runs_no_kernel_until_read_and_then_reads_the_newest_memory(monkeypatch):
    from jgrad.runtime import _views
    monkeypatch.setattr(_views, "EAGER_VIEW_MAX", 4)  # this 12-element tensor counts as large
    x = jg.tensor(np.arange(12.0).reshape(3, 4))
    v = x.t()[1:3]            # a chain of two views: in eager mode nothing runs yet
    # ("auto" mode records the view's read at once: a recorded step reads its views, and a compiled segment
    # drops a read nobody uses)
    assert (v._data is None) == (jg.get_execution_mode() == "eager")
    assert v.shape == (2, 3) and v.dtype is x.dtype
    x.add_(100.0)             # written before the view was ever read
    np.testing.assert_array_equal(_np(v), (np.arange(12.0).reshape(3, 4) + 100).T[1:3])


def test_a_view_of_a_small_tensor_is_read_when_made_and_then_follows_writes():
    x = jg.tensor(np.arange(12.0).reshape(3, 4))
    v = x.t()[1:3]
    assert v._data is not None                 # computed at once, in both modes
    rows = list(jg.tensor(np.arange(6.0).reshape(3, 2)))
    assert all(r._data is not None for r in rows)  # unbind's rows: one op for all of them
    many = list(jg.tensor(np.arange(100.0)))       # more than 64 rows: lazy in eager mode (one read kernel for all)
    assert (many[0]._data is None) == (jg.get_execution_mode() == "eager")
    assert [float(r) for r in many[::33]] == [0.0, 33.0, 66.0, 99.0]
    x.add_(100.0)             # the write reaches the view made before it
    assert v._data is None    # stale: read again from the storage when next used
    np.testing.assert_array_equal(_np(v), (np.arange(12.0).reshape(3, 4) + 100).T[1:3])
    v.mul_(2.0)               # and a write through it reaches the base
    np.testing.assert_array_equal(_np(x)[:, 1:3], 2 * (np.arange(12.0).reshape(3, 4) + 100)[:, 1:3])


def test_a_storage_is_dropped_once_nothing_else_aliases_it():
    x = jg.ones(4)
    v = x[1:]
    v.fill_(2.0)
    assert x._alias is not None
    del v
    jg.synchronize()          # ("auto" mode: the pending step's record of v lets go of it at its barrier)
    x.mul_(3.0)               # the write finds no other live member: x is plain again
    assert x._alias is None
    np.testing.assert_array_equal(_np(x), [3.0, 6.0, 6.0, 6.0])


@pytest.mark.one_execution_mode
def test_slices_at_new_offsets_reuse_one_structure_in_auto_mode(monkeypatch):
    from jgrad.runtime import _segment
    monkeypatch.setattr(_segment, "background_compile", False)  # deterministic counts
    src = jg.tensor(np.arange(64.0))

    def step(i):
        return (src[i:i + 8] * 2.0).sum().item()  # a barrier every step: one segment per step

    with jg.execution_mode("auto"):
        seen = [step(i) for i in range(12)]
        info_before = jg.graphs.segment_cache_info()
        seen += [step(i) for i in range(12, 20)]
        info = jg.graphs.segment_cache_info()
    np.testing.assert_allclose(seen, [2 * np.arange(i, i + 8).sum() for i in range(20)])
    assert info.structures == info_before.structures  # a new offset is data, not a new structure
    assert info.compiled_runs - info_before.compiled_runs == 8


def test_writes_through_views_in_auto_mode_match_numpy():
    ref = np.zeros((4, 5))
    with jg.execution_mode("auto"):
        x = jg.zeros(4, 5)
        for i in range(6):
            x[i % 4].add_(float(i))
            x.t()[i % 5].mul_(2.0)
            x.view(-1)[i:i + 3].sub_(1.0)
            ref[i % 4] += i
            ref.T[i % 5] *= 2.0
            ref.reshape(-1)[i:i + 3] -= 1.0
        np.testing.assert_allclose(_np(x), ref)


@pytest.mark.one_execution_mode
def test_captured_writes_through_views_replay_and_views_read_each_replay():
    g = jg.Graph()
    static = jg.zeros(3, 4)
    row = static[1]                   # made before the capture, read after replays
    col = static[:, 2]
    src = jg.ones(4)
    with jg.graph(g):
        static[1].add_(src)          # a write through a view, recorded
        out = static.sum()
    np.testing.assert_array_equal(_np(row), np.zeros(4))  # nothing ran yet
    for k in (1, 2, 3):
        g.replay()
        np.testing.assert_array_equal(_np(static)[1], np.full(4, float(k)))
        np.testing.assert_array_equal(_np(row), np.full(4, float(k)))
        np.testing.assert_array_equal(_np(col), [0.0, float(k), 0.0])
        assert out.item() == 4.0 * k


def test_a_write_through_a_view_on_another_stream_races_with_a_read_of_the_base():
    s = jg.Stream()
    with sanitizer():
        x = jg.zeros(4, 4)
        s.wait_stream(jg.current_stream())
        with jg.stream(s):
            x[0].fill_(1.0)              # writes x's memory on s
        with pytest.raises(StreamRaceError):
            x.sum()                      # the default stream reads it without waiting for s
        jg.current_stream().wait_stream(s)
        assert x.sum().item() == 4.0


def test_dot_data_write_is_seen_by_backward_and_detach_follows_writes():
    w = jg.tensor([1.0, 2.0], requires_grad=True)
    h = w * 3.0
    y = (h * h).sum()          # saves h
    h.data.mul_(2.0)           # no version bump: backward reads the new h
    y.backward()
    np.testing.assert_allclose(_np(w.grad), 2 * 3 * np.array([6.0, 12.0]))
    d = w.detach()
    with jg.no_grad():
        w.sub_(1.0)
    np.testing.assert_array_equal(_np(d), [0.0, 1.0])
    assert d._version == w._version == 1


def test_gradient_that_is_a_view_is_read_before_the_engine_uses_it():
    x = jg.ones(2, 3, requires_grad=True)
    big = jg.tensor(np.arange(12.0).reshape(4, 3))
    (x * 2.0).backward(big[1:3])   # a lazy view as the root gradient
    np.testing.assert_array_equal(_np(x.grad), 2 * np.arange(12.0).reshape(4, 3)[1:3])
    x.grad = None
    x.register_hook(lambda g: g.t().t())  # a hook that returns a view
    (x * 1.0).sum().backward()
    np.testing.assert_array_equal(_np(x.grad), np.ones((2, 3)))


def test_create_graph_through_copyslices_matches_jax():
    import jax
    import jax.numpy as jnp

    x0 = np.array([0.5, -1.0, 2.0])

    def f(x):
        y = x * x
        y = y.at[1].multiply(x[2])
        return (y ** 2).sum()

    x = jg.tensor(x0, requires_grad=True)
    y = x * x
    y[1].mul_(x[2])
    (g,) = jg.autograd.grad((y ** 2).sum(), x, create_graph=True)
    (h,) = jg.autograd.grad(g.sum(), x)
    np.testing.assert_allclose(_np(g), jax.grad(f)(jnp.asarray(x0)), rtol=1e-6)
    np.testing.assert_allclose(_np(h), jax.grad(lambda v: jax.grad(f)(v).sum())(jnp.asarray(x0)), rtol=1e-6)
