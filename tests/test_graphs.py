"""Whole-graph capture: PyTorch's CUDA-graph tests (test_cuda.py, the docs) ported to jgrad.

Every expectation is computed eagerly with NumPy or with an un-captured run of
the same code, never from a replay.
"""
import numpy as np
import pytest

import jgrad as jg
from jgrad import nn
from jgrad.graphs import CaptureError


def _np(t):
    return np.asarray(t.detach().numpy())


def test_docs_basic_example_outputs_6_then_8():
    g = jg.Graph()
    static_input = jg.empty(5)
    with jg.graph(g):
        static_output = static_input * 2
    static_input.copy_(jg.full((5,), 3.0))
    g.replay()
    np.testing.assert_array_equal(_np(static_output), np.full(5, 6.0))
    static_input.copy_(jg.full((5,), 4.0))
    g.replay()
    np.testing.assert_array_equal(_np(static_output), np.full(5, 8.0))


def test_reading_a_captured_tensor_before_replay_raises():
    g = jg.Graph()
    x = jg.ones(3)
    with jg.graph(g):
        y = x + 1
    with pytest.raises(RuntimeError, match="no value until that graph is replayed"):
        y.numpy()
    with pytest.raises(RuntimeError, match="no value until that graph is replayed"):
        y * 3  # an eager op on it, before replay
    assert "replay the graph first" in repr(y)
    g.replay()
    np.testing.assert_array_equal(_np(y * 3), np.full(3, 6.0))


def test_in_place_writes_wait_for_replay_and_chain():
    g = jg.Graph()
    state = jg.zeros(4)
    inc = jg.arange(4.0)
    with jg.graph(g):
        state.add_(inc)
        state.mul_(2)
    np.testing.assert_array_equal(_np(state), np.zeros(4))  # nothing ran during capture
    expected = np.zeros(4)
    for _ in range(3):
        g.replay()
        expected = (expected + np.arange(4.0)) * 2
        np.testing.assert_array_equal(_np(state), expected)


def _mlp(seed, dropout=0.0):
    jg.manual_seed(seed)
    layers = [nn.Linear(8, 16), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(16, 4))
    return nn.Sequential(*layers)


def _eager_and_replayed(make, dev=None, stream=None, steps=10, seed=7, pack=None):
    """Train ``make()``'s (model, optimizer) eagerly and by replaying a captured step, same data and seed.

    Returns the parameters of both runs and the captured loss tensor. ``pack=True`` packs the graph's
    outputs and in-place state as on an accelerator.
    """
    data = [(jg.randn(5, 8, device=dev), jg.randn(5, 4, device=dev)) for _ in range(steps)]
    model, opt = make()
    jg.manual_seed(seed)
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    eager = [_np(p) for p in model.parameters()]
    model, opt = make()
    static_x, static_y = jg.zeros(5, 8, device=dev), jg.zeros(5, 4, device=dev)
    opt.zero_grad(set_to_none=True)
    g = jg.Graph()
    g._pack_outputs = pack
    with jg.graph(g, stream=stream):
        static_loss = nn.functional.mse_loss(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    jg.manual_seed(seed)
    for x, y in data:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
    return eager, [_np(p) for p in model.parameters()], static_loss


@pytest.mark.parametrize("pack", [None, True], ids=["as-on-cpu", "packed-as-on-gpu"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_whole_network_capture_matches_eager(optimizer, pack):
    def make():
        model = _mlp(0, dropout=0.25)
        opt = (jg.optim.SGD(model.parameters(), lr=0.1) if optimizer == "sgd"
               else jg.optim.Adam(model.parameters(), lr=0.01))
        return model, opt

    eager, replayed, static_loss = _eager_and_replayed(make, pack=pack)
    for a, b in zip(eager, replayed):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)
    assert static_loss.grad_fn is not None and np.isfinite(_np(static_loss))


def test_rng_advances_between_replays_and_matches_eager_draws():
    jg.manual_seed(3)
    eager = [_np(jg.rand(4)) for _ in range(3)]
    g = jg.Graph()
    with jg.graph(g):
        r = jg.rand(4)
    jg.manual_seed(3)
    replays = []
    for _ in range(3):
        g.replay()
        replays.append(_np(r))
    for a, b in zip(eager, replays):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(replays[0], replays[1])
    # eager draws continue from where the replays left the generator
    after_replays = _np(jg.rand(4))
    jg.manual_seed(3)
    for _ in range(3):
        jg.rand(4)
    np.testing.assert_array_equal(after_replays, _np(jg.rand(4)))


def test_non_default_generator_is_threaded_too():
    gen = jg.Generator().manual_seed(11)
    eager = [_np(jg.randn(3, generator=gen)) for _ in range(2)]
    gen.manual_seed(11)
    g = jg.Graph()
    with jg.graph(g):
        r = jg.randn(3, generator=gen)
    got = []
    for _ in range(2):
        g.replay()
        got.append(_np(r))
    np.testing.assert_array_equal(np.stack(eager), np.stack(got))


def test_same_structure_never_compiles_twice():
    jg.graphs.cache_clear()  # the suite runs once per execution mode: the other run compiled these too

    def capture(value):
        g = jg.Graph()
        x = jg.full((6,), value)
        with jg.graph(g):
            y = (x * 3).exp().sum()
        return g, x, y

    g1, _, y1 = capture(1.0)
    before = jg.graphs.cache_info()
    g2, x2, y2 = capture(2.0)
    after = jg.graphs.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + 1
    g2.replay()
    np.testing.assert_allclose(_np(y2), 6 * np.exp(6.0), rtol=1e-6)
    g3 = jg.Graph()
    x3 = jg.full((7,), 1.0)  # another shape: a new executable
    with jg.graph(g3):
        (x3 * 3).exp().sum()
    assert jg.graphs.cache_info().misses == after.misses + 1


def test_pool_sharing():
    g1, g2 = jg.Graph(), jg.Graph()
    a = jg.ones(3)
    with jg.graph(g1):
        b = a + 1
    with jg.graph(g2, pool=g1.pool()):
        c = b * 10  # reads g1's output: g1 must replay first
    assert g2.pool() is g1.pool()
    with pytest.raises(RuntimeError, match="no value until that graph is replayed"):
        g2.replay()
    g1.replay()
    g2.replay()
    np.testing.assert_array_equal(_np(c), np.full(3, 20.0))
    a.fill_(5.0)
    g1.replay()
    g2.replay()
    np.testing.assert_array_equal(_np(c), np.full(3, 60.0))
    handle = jg.graph_pool_handle()
    g3 = jg.Graph()
    with jg.graph(g3, pool=handle):
        a * 2
    assert g3.pool() is handle


def _capture_then(fn):
    """Run ``fn`` inside a capture; return the CaptureError it raised."""
    g = jg.Graph()
    x = jg.ones(3)
    with pytest.raises(CaptureError) as info:
        with jg.graph(g):
            y = x * 2
            fn(y)
    return info.value


def _assert_usable():
    assert not jg.streams.active_captures
    g = jg.Graph()
    x = jg.ones(2)
    with jg.graph(g):
        y = x + 41
    g.replay()
    assert _np(y).tolist() == [42.0, 42.0]
    assert (jg.ones(2) * 2).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("sync", [
    ("Tensor.item()", lambda y: y.sum().item()),
    ("Tensor.numpy()", lambda y: y.numpy()),
    ("Tensor.tolist()", lambda y: y.tolist()),
    ("bool(Tensor)", lambda y: bool(y.sum())),
    ("jgrad.synchronize()", lambda y: jg.synchronize()),
    ("Event.synchronize()", lambda y: jg.current_stream().record_event().synchronize()),
    ("Stream.synchronize()", lambda y: jg.current_stream().synchronize()),
], ids=lambda p: p[0] if isinstance(p, tuple) else None)
def test_host_syncs_during_capture_raise_and_capture_recovers(sync):
    name, fn = sync
    err = _capture_then(fn)
    assert name in str(err)
    _assert_usable()


def test_capture_error_restores_state_written_in_place():
    p = jg.ones(3)
    g = jg.Graph()
    with pytest.raises(CaptureError):
        with jg.graph(g):
            p.add_(5)
            p.sum().item()
    assert _np(p).tolist() == [1.0, 1.0, 1.0]
    _assert_usable()


def test_capture_on_default_stream_through_raw_api_raises():
    g = jg.Graph()
    with pytest.raises(CaptureError, match="non-default stream"):
        g.capture_begin()
    _assert_usable()


def test_second_capture_while_one_is_under_way_raises():
    g1, g2 = jg.Graph(), jg.Graph()
    s2 = jg.Stream()
    x = jg.ones(2)
    with jg.graph(g1):
        y = x * 2
        with jg.stream(s2):
            with pytest.raises(CaptureError, match="only one capture"):
                g2.capture_begin()
    g1.replay()
    assert _np(y).tolist() == [2.0, 2.0]
    _assert_usable()


def test_work_on_a_stream_outside_the_capture_that_reads_captured_tensors_raises():
    other = jg.Stream()

    def fn(y):
        with jg.stream(other):
            y + 1
    err = _capture_then(fn)
    assert "not part of the capture" in str(err)
    _assert_usable()


def test_side_stream_branch_and_rejoin_is_captured():
    g = jg.Graph()
    a = jg.full((4,), 2.0)
    side = jg.Stream()
    with jg.graph(g):
        cap = jg.current_stream()
        side.wait_stream(cap)           # fork: side joins the capture
        with jg.stream(side):
            b = a * 10
        c = a + 1                       # meanwhile on the capturing stream
        cap.wait_stream(side)           # rejoin
        d = b + c
    g.replay()
    np.testing.assert_array_equal(_np(d), np.full(4, 23.0))
    a.fill_(1.0)
    g.replay()
    np.testing.assert_array_equal(_np(d), np.full(4, 12.0))


def test_side_stream_region_lowers_to_one_annotated_call_with_a_flat_body():
    """On GPU a side-stream region becomes compute_on('gpu_stream:N'); XLA (jaxlib 0.11.2) only compiles
    it when the annotated call reaches its work directly, not through a nested call. Checked on the
    lowered module, which the CPU can produce."""
    import re

    import jax
    import jax.numpy as jnp

    from jgrad.runtime._compile import _on_stream

    kernel = jax.jit(lambda a: jnp.tanh(a) * 2.0)  # an op's own cached jit, as in a captured trace

    def region(a):
        with jax.disable_jit():
            return [kernel(kernel(a))]

    text = jax.jit(lambda a: _on_stream(region, 1, 1)(a)[0] + 1.0).lower(jnp.ones(4)).as_text()
    calls = re.findall(r"call @(\S+)\(.*_xla_stream_annotation = \"1\"", text)
    assert len(calls) == 1, text
    body = text[text.index(f"func.func private @{calls[0]}("):]
    body = body[:body.index("\n  }")]
    assert "call @" not in body and body.count("stablehlo.tanh") == 2, body


def test_only_captures_with_side_stream_regions_compile_with_concurrent_command_buffers():
    # XLA serializes a CUDA graph's kernels by default: a region on another stream would not overlap.
    from jgrad.runtime import _compile

    assert _compile.compiler_options(on_gpu=False, side_stream_regions=True) is None
    one = _compile.compiler_options(on_gpu=True, side_stream_regions=False) or {}
    two = _compile.compiler_options(on_gpu=True, side_stream_regions=True)
    assert two["xla_gpu_command_buffer_scheduling_mode"] == "CONCURRENT"
    assert "xla_gpu_command_buffer_scheduling_mode" not in one
    assert one.items() <= two.items()


def test_side_stream_not_rejoined_raises_and_recovers():
    g = jg.Graph()
    a = jg.ones(4)
    side = jg.Stream()
    with pytest.raises(CaptureError, match="not rejoined"):
        with jg.graph(g):
            side.wait_stream(jg.current_stream())
            with jg.stream(side):
                a * 10
    _assert_usable()
    (a * 10).tolist()  # the side stream is usable eagerly again


def test_exception_inside_capture_abandons_it():
    g = jg.Graph()
    p = jg.zeros(2)
    with pytest.raises(ValueError):
        with jg.graph(g):
            p.add_(1)
            raise ValueError("user error")
    assert _np(p).tolist() == [0.0, 0.0]
    with pytest.raises(RuntimeError, match="not been captured"):
        g.replay()
    _assert_usable()


def test_graph_instance_cannot_capture_twice_without_reset():
    g = jg.Graph()
    x = jg.ones(2)
    with jg.graph(g):
        x * 2
    with pytest.raises(RuntimeError, match="already owns a captured graph"):
        with jg.graph(g):
            x * 3
    g.reset()
    with jg.graph(g):
        y = x * 3
    g.replay()
    assert _np(y).tolist() == [3.0, 3.0]


def test_replay_on_another_stream_and_sanitizer_sees_it():
    g = jg.Graph()
    x = jg.ones(3)
    with jg.graph(g):
        y = x * 2
    s = jg.Stream()
    with jg.streams.sanitizer():
        s.wait_stream(jg.current_stream())
        with jg.stream(s):
            g.replay()
        with pytest.raises(jg.StreamRaceError):
            y.numpy()  # read on the host without waiting for s: a race
        jg.current_stream().wait_stream(s)
        s.synchronize()
        assert _np(y).tolist() == [2.0, 2.0, 2.0]


def test_captured_backward_grads_are_outputs():
    w = jg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = jg.tensor([4.0, 5.0, 6.0])
    g = jg.Graph()
    with jg.graph(g):
        loss = (w * x).pow(2).sum()
        loss.backward()
    assert w.grad is not None
    with pytest.raises(RuntimeError, match="no value"):
        w.grad.numpy()
    g.replay()
    np.testing.assert_allclose(_np(w.grad), 2 * (np.array([1., 2., 3.]) * np.array([4., 5., 6.]))
                               * np.array([4., 5., 6.]))
    x.copy_(jg.tensor([1.0, 1.0, 1.0]))
    g.replay()
    np.testing.assert_allclose(_np(w.grad), 2 * np.array([1., 2., 3.]))


# ---- make_graphed_callables (test_graph_make_graphed_callables) -------------------------
def _sections(seed):
    jg.manual_seed(seed)
    s1 = nn.Sequential(nn.Linear(32, 24), nn.Dropout(0.1))
    s2 = nn.Sequential(nn.Linear(24, 8), nn.Dropout(0.2))
    return nn.Sequential(s1, s2)


def test_make_graphed_callables_two_modules_two_functions_with_dropout():
    model_graphed, model_control = _sections(5), _sections(6)
    model_graphed.load_state_dict(model_control.state_dict())
    opt_graphed = jg.optim.SGD(model_graphed.parameters(), lr=0.1)
    opt_control = jg.optim.SGD(model_control.parameters(), lr=0.1)
    x = jg.randn(16, 32)
    h = jg.randn(16, 24, requires_grad=True)
    y_pred = jg.randn(16, 8, requires_grad=True)
    y = jg.randn(16, 8)
    loss_fn_control = nn.functional.mse_loss
    relu_control = nn.functional.relu
    model_graphed[0], model_graphed[1], relu_graphed, loss_fn_graphed = jg.make_graphed_callables(
        (model_graphed[0], model_graphed[1], relu_control, loss_fn_control),
        ((x,), (h,), (y_pred,), (y_pred, y)))
    real_inputs = [jg.rand_like(x) for _ in range(10)]
    real_targets = [jg.rand_like(y) for _ in range(10)]
    for m, opt, relu, loss_fn in zip((model_graphed, model_control), (opt_graphed, opt_control),
                                     (relu_graphed, relu_control), (loss_fn_graphed, loss_fn_control)):
        jg.manual_seed(5)
        for data, target in zip(real_inputs, real_targets):
            opt.zero_grad(set_to_none=True)
            out = relu(m(data))
            loss = loss_fn(out, target)
            loss.backward()
            opt.step()
    for p, pc in zip(model_graphed.parameters(), model_control.parameters()):
        np.testing.assert_allclose(_np(p), _np(pc), rtol=1e-5, atol=1e-6)
    # Graphed in training mode: eval runs the original forward.
    model_graphed.eval()
    model_control.eval()
    np.testing.assert_allclose(_np(model_graphed(real_inputs[0])), _np(model_control(real_inputs[0])),
                               rtol=1e-5, atol=1e-6)


def test_make_graphed_callables_single_function_and_errors():
    def f(a, b):
        return (a * b).tanh()

    a = jg.randn(4, requires_grad=True)
    b = jg.randn(4, requires_grad=True)
    gf = jg.make_graphed_callables(f, (a, b))
    a2, b2 = jg.randn(4, requires_grad=True), jg.randn(4, requires_grad=True)
    out = gf(a2, b2)
    out.sum().backward()
    an, bn = _np(a2), _np(b2)
    np.testing.assert_allclose(_np(out), np.tanh(an * bn), rtol=1e-5)
    np.testing.assert_allclose(_np(a2.grad), (1 - np.tanh(an * bn) ** 2) * bn, rtol=1e-5)
    np.testing.assert_allclose(_np(b2.grad), (1 - np.tanh(an * bn) ** 2) * an, rtol=1e-5)

    m = nn.Linear(3, 3)
    m.register_forward_hook(lambda *args: None)
    with pytest.raises(RuntimeError, match="Modules must not have hooks registered"):
        jg.make_graphed_callables(m, (jg.randn(2, 3),))
    with pytest.raises(TypeError, match="sample_args for each callable must be a tuple of Tensors"):
        jg.make_graphed_callables(f, (a, 2.0))
    with pytest.raises(RuntimeError, match="does not require grad"):  # PyTorch fails in its warmup too
        jg.make_graphed_callables(lambda t: t.detach() * 2, (jg.randn(3, requires_grad=True),))
    _assert_usable()


def test_any_work_outside_the_capturing_streams_raises_instead_of_running_eagerly():
    other = jg.Stream()
    z = jg.ones(3)

    def fn(y):
        with jg.stream(other):
            z * 5  # reads nothing captured, but would silently run eagerly and not be replayed
    err = _capture_then(fn)
    assert "not part of the capture" in str(err) and "Mul" in str(err)
    _assert_usable()


def test_raw_api_captures_on_the_one_non_default_current_stream_of_another_device():
    dev = jg.device("cpu:1")
    s = jg.Stream(dev)
    x = jg.ones(3, device=dev)
    g = jg.Graph()
    with jg.stream(s):
        g.capture_begin()
        y = x * 7
        g.capture_end()
    g.replay()
    assert y.device == dev and _np(y).tolist() == [7.0, 7.0, 7.0]
    g2 = jg.Graph()
    with jg.graph(g2, stream=jg.Stream(dev)):
        w = x + 1
    g2.replay()
    assert _np(w).tolist() == [2.0, 2.0, 2.0]


def test_long_compiles_report_progress_on_stderr(monkeypatch, capsys):
    from jgrad.runtime import _compile
    monkeypatch.setattr(_compile, "progress_after", 0.0)
    jg.graphs.cache_clear()  # compiled afresh even when the other execution mode's run compiled it
    g = jg.Graph()
    x = jg.ones(5)
    with jg.graph(g):
        y = (x * 3.5).sin().exp()  # a structure no other test compiles
    err = capsys.readouterr().err
    assert "compiling the capture of Graph" in err and "done in" in err
    g.replay()
    np.testing.assert_allclose(_np(y), np.exp(np.sin(np.full(5, 3.5))), rtol=1e-6)


def test_capture_accumulating_into_existing_grads_with_momentum_matches_eager():
    def make():
        jg.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
        return m, jg.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    data = [(jg.randn(4, 6), jg.randn(4, 2)) for _ in range(5)]

    def step(m, o, x, y):
        o.zero_grad(set_to_none=False)  # grads are zeroed in place, not recreated
        nn.functional.mse_loss(m(x), y).backward()
        o.step()

    m, o = make()
    for x, y in data:
        step(m, o, x, y)
    eager = [_np(p) for p in m.parameters()]
    m, o = make()
    sx, sy = data[0][0].clone(), data[0][1].clone()
    step(m, o, sx, sy)  # one eager step: .grad and momentum buffers exist before the capture
    g = jg.Graph()
    with jg.graph(g):
        step(m, o, sx, sy)
    for x, y in data[1:]:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
    for a, p in zip(eager, m.parameters()):
        np.testing.assert_allclose(_np(p), a, rtol=1e-6, atol=1e-7)


def test_higher_order_gradients_inside_a_capture():
    w = jg.tensor([1.0, 2.0], requires_grad=True)
    x = jg.tensor([3.0, 4.0])
    g = jg.Graph()
    with jg.graph(g):
        y = (w ** 3 * x).sum()
        (gw,) = jg.autograd.grad(y, w, create_graph=True)
        (hw,) = jg.autograd.grad(gw.sum(), w)
    g.replay()
    np.testing.assert_allclose(_np(hw), 6 * np.array([1.0, 2.0]) * np.array([3.0, 4.0]))
    x.copy_(jg.tensor([1.0, -1.0]))
    g.replay()
    np.testing.assert_allclose(_np(hw), 6 * np.array([1.0, 2.0]) * np.array([1.0, -1.0]))


def test_captured_backward_on_a_device_with_its_own_engine_thread():
    # cpu:1 gets an autograd worker thread, as a GPU does: backward nodes are recorded from it.
    dev = jg.device("cpu:1")

    def make():
        model = _mlp(0, dropout=0.25).to(dev)
        return model, jg.optim.SGD(model.parameters(), lr=0.1)

    eager, replayed, _ = _eager_and_replayed(make, dev=dev, stream=jg.Stream(dev), steps=4, seed=3)
    for a, b in zip(eager, replayed):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def _packed(t):
    """Whether ``t`` still holds a packed replay output that nobody has read (see _recorder.Packed)."""
    from jgrad.core._recorder import Buffer
    return type(t._data) is Buffer and t._data.packed is not None and t._data._val is None


def test_packed_outputs_are_split_only_when_read_and_equal_jax_grad():
    import jax
    import jax.numpy as jnp

    jg.manual_seed(0)
    lin = nn.Linear(4, 3)
    w0, b0 = _np(lin.weight).copy(), _np(lin.bias).copy()
    x, y = jg.randn(5, 4), jg.randn(5, 3)
    g = jg.Graph()
    g._pack_outputs = True  # the default on accelerators; the CPU does not pack
    with jg.graph(g):
        out = lin(x)
        loss = ((out - y) ** 2).mean()
        loss.backward()
    g.replay()
    g.replay()  # unread outputs of the first replay are simply dropped
    assert _packed(lin.weight.grad) and _packed(out) and not _packed(loss)  # 0-d outputs come back as they are

    def f(w, b):
        return jnp.mean((jnp.asarray(_np(x)) @ w.T + b - jnp.asarray(_np(y))) ** 2)

    gw, gb = jax.grad(f, argnums=(0, 1))(jnp.asarray(w0), jnp.asarray(b0))
    np.testing.assert_allclose(_np(lin.weight.grad), np.asarray(gw), rtol=1e-5, atol=1e-6)
    # reading one output splits the replay's pack for every tensor bound to it; later ops take arrays
    assert not _packed(lin.bias.grad) and not _packed(out)
    np.testing.assert_allclose(_np(lin.bias.grad * 2), 2 * np.asarray(gb), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_np(out), _np(x) @ w0.T + b0, rtol=1e-5, atol=1e-6)
    g.replay()
    assert _packed(out)  # the next replay binds the tensors to its own pack


def _linear_sgd_graph(dtypes, momentum):
    """A captured SGD step over one Linear(3, 2) per dtype, loss sum(mean(lin(x)**2)), packed as on a GPU."""
    lins = [nn.Linear(3, 2, dtype=dt) for dt in dtypes]
    xs = [jg.randn(4, 3, dtype=dt) for dt in dtypes]
    params = [p for lin in lins for p in lin.parameters()]
    opt = jg.optim.SGD(params, lr=0.1, momentum=momentum)

    def loss():
        return sum((lin(x) ** 2).mean() for lin, x in zip(lins, xs))
    loss().backward()  # the docs' warm-up: the momentum buffers exist before the capture
    opt.step()
    opt.zero_grad(set_to_none=True)
    g = jg.Graph()
    g._pack_outputs = True
    with jg.graph(g):
        loss().backward()
        opt.step()
    return g, params, [_np(x) for x in xs], opt


def _momentum_buffers(opt, params):
    return [_np(opt.state[p]["momentum_buffer"]).copy() for p in params]


def _numpy_sgd(params, xs, steps, momentum, bufs=None):
    """The reference: the same steps in NumPy (PyTorch's SGD: buf = m * buf + grad, p -= lr * buf)."""
    params, bufs = [p.copy() for p in params], bufs
    for _ in range(steps):
        grads = []
        for (W, b), x in zip(zip(params[::2], params[1::2]), xs):
            d = 2 * (x @ W.T + b) / (x.shape[0] * W.shape[0])
            grads += [d.T @ x, d.sum(0)]
        bufs = grads if bufs is None or not momentum else [momentum * u + g_ for u, g_ in zip(bufs, grads)]
        params = [p - 0.1 * (u if momentum else g_) for p, u, g_ in zip(params, bufs, grads)]
    return params, bufs


def test_in_place_state_travels_as_one_flat_array_per_dtype_and_matches_numpy():
    # Parameters and momentum buffers written in place cost one donated argument and one output per dtype,
    # not one per tensor (each costs host time per call on a GPU).
    g, params, xs, opt = _linear_sgd_graph(("float32", "float64"), momentum=0.9)
    bufs = _momentum_buffers(opt, params)
    plan = g._plan
    assert plan.n_state == 2 and {id(t) for t in params} <= {id(t) for t in plan.state.tensors}
    assert len(plan.state.tensors) == 8  # 4 parameters, 4 momentum buffers
    start = [_np(p).copy() for p in params]
    for _ in range(3):
        g.replay()
        flats = plan.state.flats
        assert sorted(str(f.dtype) for f in flats) == ["float32", "float64"]
        assert all(_packed(p) for p in params)  # nobody read them: the next replay donates the same flats
    want, _ = _numpy_sgd(start, xs, 3, 0.9, bufs=bufs)
    for p, w in zip(params, want):
        np.testing.assert_allclose(_np(p), w, rtol=1e-5, atol=1e-6)
        assert str(_np(p).dtype) == str(w.dtype)


def test_packed_state_read_or_rebound_between_replays_is_taken_afresh():
    g, params, xs, _ = _linear_sgd_graph(("float32",), momentum=0.0)
    g.replay()
    now = [_np(p).copy() for p in params]          # a read splits the state
    assert not any(_packed(p) for p in params)
    g.replay()                                      # concatenated again from the (unchanged) values
    want, _ = _numpy_sgd(now, xs, 1, 0.0)
    assert all(_packed(p) for p in params)
    with jg.no_grad():
        params[0].copy_(jg.ones(2, 3))             # rebound; the bias is not read
    g.replay()
    want, _ = _numpy_sgd([np.ones((2, 3), np.float32), want[1]], xs, 1, 0.0)
    for p, w in zip(params, want):
        np.testing.assert_allclose(_np(p), w, rtol=1e-5, atol=1e-6)


def test_a_failed_replay_leaves_the_packed_state_usable():
    g, params, xs, opt = _linear_sgd_graph(("float32",), momentum=0.9)
    g.replay()
    plan = g._plan
    executable = plan.compiled

    def failing(*args):
        raise RuntimeError("INVALID_ARGUMENT: rejected before running (simulated)")

    plan.compiled = failing
    with pytest.raises(RuntimeError, match="simulated"):
        g.replay()
    plan.compiled = executable
    start = [_np(p).copy() for p in params]
    bufs = _momentum_buffers(opt, params)
    g.replay()
    want, _ = _numpy_sgd(start, xs, 1, 0.9, bufs=bufs)
    for p, w in zip(params, want):
        np.testing.assert_allclose(_np(p), w, rtol=1e-5, atol=1e-6)


def test_only_small_outputs_come_back_packed():
    # Packing copies an output on the device; for a large one that costs more than the output saves.
    from jgrad.runtime import _capture

    x = jg.ones(4)
    g = jg.Graph()
    g._pack_outputs = True
    n = _capture.pack_max_bytes // 4
    with jg.graph(g):
        small = x * 2
        large = jg.ones(n + 1) * 3
        edge = jg.ones(n) * 4
    assert _packed(small) and _packed(edge) and not _packed(large)
    g.replay()
    assert float(large.sum()) == 3.0 * (n + 1) and float(edge.sum()) == 4.0 * n
    np.testing.assert_array_equal(_np(small), np.full(4, 2.0))


def test_packed_outputs_read_the_latest_replay():
    x = jg.zeros(3)
    g = jg.Graph()
    g._pack_outputs = True
    with jg.graph(g):
        y = x * 2 + 1
        z = y * y
    for v in (1.0, 2.0):                 # unread between replays: the tensors keep the buffer
        x.fill_(v)
        g.replay()
    np.testing.assert_array_equal(_np(z), np.full(3, 25.0))
    assert not _packed(y)                # the read split the whole pack
    np.testing.assert_array_equal(_np(y), np.full(3, 5.0))
    x.fill_(3.0)
    g.replay()                           # read since the last replay: the tensors go back to the buffer
    assert _packed(y) and _packed(z)
    np.testing.assert_array_equal(_np(y), np.full(3, 7.0))
    np.testing.assert_array_equal(_np(z), np.full(3, 49.0))


def test_a_replay_loop_keeps_the_streams_work_list_bounded():
    # Each replay (and each read of a packed output) tells the stream about its work; a long loop of
    # replays and reads with no eager op in between must not grow that list without end.
    x = jg.zeros(3)
    for pack in (False, True):
        g = jg.Graph()
        g._pack_outputs = pack
        with jg.graph(g):
            y = x * 2 + 1
        s = jg.current_stream()
        for _ in range(3000):
            g.replay()
            if pack:
                y._data.packed.unpack()  # what the first read of a packed output does
        assert len(s._pending) <= 2100, (pack, len(s._pending))
        np.testing.assert_array_equal(_np(y), np.ones(3))


@pytest.mark.parametrize("pack", [False, True])
def test_replay_releases_the_previous_outputs_before_the_executable_runs(pack):
    # XLA re-records its CUDA graphs when an output lands at a new address; an output still alive while
    # the next call allocates always does. The previous outputs must be gone by the time the call runs.
    import weakref

    x = jg.zeros(3)
    g = jg.Graph()
    g._pack_outputs = pack
    with jg.graph(g):
        y = x * 2 + 1
        loss = (y * y).sum()
    plan = g._plan
    g.replay()
    previous = [weakref.ref(plan.pack.flats[0])] if pack else [weakref.ref(y._data)]
    previous.append(weakref.ref(loss._data))
    executable, alive_at_call = plan.compiled, []

    def watching(*args):
        alive_at_call.append([r() is not None for r in previous])
        return executable(*args)

    plan.compiled = watching
    x.fill_(2.0)
    g.replay()
    assert alive_at_call == [[False, False]]
    np.testing.assert_array_equal(_np(y), np.full(3, 5.0))
    assert float(loss) == 75.0


def test_an_alias_of_an_output_kept_by_the_user_survives_the_next_replay():
    x = jg.zeros(3)
    g = jg.Graph()
    with jg.graph(g):
        y = x + 1
    g.replay()
    kept = y.detach()
    x.fill_(5.0)
    g.replay()
    np.testing.assert_array_equal(_np(kept), np.ones(3))
    np.testing.assert_array_equal(_np(y), np.full(3, 6.0))


def test_a_failed_replay_says_so_when_its_outputs_are_read_and_the_next_replay_works():
    x = jg.zeros(3)
    g = jg.Graph()
    with jg.graph(g):
        y = x + 1
    g.replay()
    plan = g._plan
    executable = plan.compiled

    def failing(*args):
        raise RuntimeError("RESOURCE_EXHAUSTED: out of memory (simulated)")

    plan.compiled = failing
    with pytest.raises(RuntimeError, match="simulated"):
        g.replay()
    with pytest.raises(RuntimeError, match=r"last replay of Graph \d+ failed .*simulated.*replay\(\) again"):
        _np(y)
    plan.compiled = executable
    x.fill_(1.0)
    g.replay()
    np.testing.assert_array_equal(_np(y), np.full(3, 2.0))


def test_a_graph_reading_another_graphs_packed_output():
    g1, g2 = jg.Graph(), jg.Graph()
    g1._pack_outputs = True
    x = jg.zeros(3)
    with jg.graph(g1):
        y = x * 2 + 1
    with jg.graph(g2):
        z = y.sum(dim=0, keepdim=True) * 10
    for v in (1.0, 2.0):
        x.copy_(jg.full((3,), v))
        g1.replay()
        g2.replay()  # reads y, which g1 left packed
        np.testing.assert_allclose(_np(z), [30 * (2 * v + 1)])
        np.testing.assert_allclose(_np(y), np.full(3, 2 * v + 1))
