"""Tiered execution ("auto" mode): the API, the tiers, and semantics that must not change.

These tests set the execution mode themselves (``one_execution_mode``); the rest of the suite runs
once per mode (tests/conftest.py).
"""
import gc
import os
import subprocess
import sys
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jgrad as jg
from jgrad.runtime import _backward_plan, _segment
from jgrad.core import _host_copies
from jgrad import nn

pytestmark = pytest.mark.one_execution_mode


@pytest.fixture
def tiers(monkeypatch):
    """Auto mode with compiles in the foreground (deterministic counts) and fresh statistics."""
    monkeypatch.setattr(_segment, "background_compile", False)
    jg.graphs.segment_cache_clear()
    with jg.execution_mode("auto"):
        yield jg.graphs.segment_cache_info


def _np(t):
    return np.asarray(t.detach().numpy() if t.requires_grad else t.numpy())


# ---- the API --------------------------------------------------------------------------------
def test_mode_api_and_context_manager():
    assert jg.get_execution_mode() == "eager"
    with jg.execution_mode("auto"):
        assert jg.get_execution_mode() == "auto"
        with jg.execution_mode("eager"):
            assert jg.get_execution_mode() == "eager"
        assert jg.get_execution_mode() == "auto"
    assert jg.get_execution_mode() == "eager"
    jg.set_execution_mode("auto")
    try:
        assert jg.get_execution_mode() == "auto"
    finally:
        jg.set_execution_mode("eager")


@pytest.mark.parametrize("bad", ["lazy", "AUTO ", 1, None])
def test_bad_mode_is_a_clear_error(bad):
    with pytest.raises(ValueError, match="execution mode must be 'auto' or 'eager'"):
        jg.set_execution_mode(bad)
    with pytest.raises(ValueError, match="execution mode must be 'auto' or 'eager'"):
        jg.execution_mode(bad)
    assert jg.get_execution_mode() == "eager"


def test_environment_variable_sets_the_default(monkeypatch):
    # the reading itself, in this process (each value); then once in a fresh interpreter, where it sets the default
    for value, want in (("auto", "auto"), ("eager", "eager"), (" Auto ", "auto"), ("", "eager")):
        monkeypatch.setenv("JGRAD_EXECUTION", value)
        assert _segment._mode_from_env() == want
    monkeypatch.setenv("JGRAD_EXECUTION", "fast")
    with pytest.raises(ValueError, match="JGRAD_EXECUTION must be 'auto' or 'eager', got 'fast'"):
        _segment._mode_from_env()
    code = "import jgrad as jg; print(jg.get_execution_mode())"
    env = {k: v for k, v in os.environ.items() if k != "JGRAD_EXECUTION"}
    out = subprocess.run([sys.executable, "-c", code], env=env | {"JGRAD_EXECUTION": " Auto "}, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.strip() == "auto", out.stderr


def test_switching_to_eager_runs_pending_work():
    with jg.execution_mode("auto"):
        y = jg.arange(4.0) * 3
        assert type(y._data).__name__ == "Buffer"  # recorded, not run
    assert isinstance(y._data, jax.Array)  # the switch was a barrier
    np.testing.assert_array_equal(y.numpy(), [0.0, 3.0, 6.0, 9.0])


# ---- the tiers ------------------------------------------------------------------------------
def _loop_body(x, w):
    return ((x @ w).tanh() * 2 + 1).sum()


def test_repeated_loop_compiles_once_then_hits(tiers):
    x, w = jg.randn(4, 3), jg.randn(3, 5)
    jg.synchronize()
    start = tiers()
    values = [_loop_body(x, w).item() for _ in range(6)]
    info = tiers()
    assert info.compiles - start.compiles == 1
    # op by op until seen compile_after times; that run compiles (here in the foreground) and runs compiled
    assert info.interpreted - start.interpreted == _segment.compile_after - 1
    assert info.compiled_runs - start.compiled_runs == 6 - _segment.compile_after + 1
    want = float(jnp.sum(jnp.tanh(x._value @ w._value) * 2 + 1))
    np.testing.assert_allclose(values, want, rtol=1e-5)


def test_structure_seen_once_never_compiles(tiers):
    x = jg.randn(5, 5)
    before = tiers()
    v = ((x * 2).exp().sum(0) - 1).numpy()
    after = tiers()
    assert after.compiles == before.compiles and after.interpreted == before.interpreted + 1
    np.testing.assert_allclose(v, np.exp(2 * x.numpy()).sum(0) - 1, rtol=1e-6)


def test_shapes_that_change_every_step_stay_correct(tiers):
    before = tiers()
    for n in range(1, 9):
        a = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
        t = jg.tensor(a, requires_grad=True)
        loss = (t * t).sum()
        loss.backward()
        np.testing.assert_allclose(t.grad.numpy(), 2 * a)
        assert loss.item() == pytest.approx(float((a * a).sum()))
    assert tiers().compiles == before.compiles  # no shape was seen twice


def test_cache_info_counts_and_clear(tiers):
    x = jg.ones(3)
    for _ in range(3):
        (x + 1).sum().item()
    info = tiers()
    assert info.segments >= 3 and info.ops >= 6 and info.structures >= 1
    assert 0.0 <= info.hit_rate <= 1.0 and "hit_rate" in repr(info)
    jg.graphs.segment_cache_clear()
    assert tiers().segments == 0 and tiers().compiles == 0


def test_size_cap_runs_a_long_segment(tiers, monkeypatch):
    monkeypatch.setattr(_segment, "max_steps", 10)
    y = jg.ones(3)
    for _ in range(25):
        y = y + 1
    assert tiers().segments >= 2  # cut twice on the way, no barrier needed
    np.testing.assert_array_equal(y.numpy(), [26.0, 26.0, 26.0])


def test_optimizer_step_is_a_soft_barrier(tiers):
    p = jg.nn.Parameter(jg.ones(3))
    opt = jg.optim.SGD([p], lr=0.5)
    (p * 2).sum().backward()
    assert _segment._open  # forward and backward are pending
    opt.step()
    assert not _segment._open  # the step's end ran them
    np.testing.assert_allclose(p.detach().numpy(), [0.0, 0.0, 0.0])


def _mlp_run(mode, steps=8, optimizer="adam", pack=None, monkeypatch=None):
    jg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 3))
    opt = jg.optim.Adam(model.parameters(), lr=0.01) if optimizer == "adam" else \
        jg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((5, 6), dtype=np.float32), rng.standard_normal((5, 3), dtype=np.float32))
            for _ in range(steps)]
    losses = []
    with jg.execution_mode(mode):
        for xv, yv in data:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(model(jg.tensor(xv)), jg.tensor(yv))
            loss.backward()
            opt.step()
            losses.append(loss)
        values = [l.item() for l in losses] + [float(x) for p in model.parameters() for x in _np(p).ravel()]
    return np.array(values)


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("pack", [False, True], ids=["unpacked", "packed-as-on-gpu"])
def test_training_loop_equals_eager_mode(tiers, monkeypatch, optimizer, pack):
    monkeypatch.setattr(_segment, "pack_outputs", pack)
    monkeypatch.setattr(_segment, "host_copies", pack)  # both as on a GPU, or neither
    eager = _mlp_run("eager", optimizer=optimizer)
    auto = _mlp_run("auto", optimizer=optimizer)
    np.testing.assert_allclose(auto, eager, rtol=2e-5, atol=1e-6)  # XLA fusion may round differently
    assert tiers().compiled_runs > 0  # the later steps ran compiled


def test_packed_outputs_are_read_and_their_flat_donated(tiers, monkeypatch):
    monkeypatch.setattr(_segment, "pack_outputs", True)
    p = jg.nn.Parameter(jg.ones(4))
    opt = jg.optim.SGD([p], lr=0.25)
    packs = []  # not the buffers: holding one would keep its pack alive (and undonated)
    for _ in range(6):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
        d = p._data
        if type(d).__name__ == "Buffer" and d._val is None and d.packed is not None:
            packs.append(d.packed)
        del d
    assert packs, "no output came back packed"
    flats = [f for pk in packs[:-1] for f in pk.flats]
    assert any(f.is_deleted() for f in flats), "no dead pack was donated to the next run"
    np.testing.assert_allclose(p.detach().numpy(), np.full(4, 0.5 ** 6), rtol=1e-6)  # p <- p - 0.25 * 2p


def _hot_loss(steps=6, read=True):
    """A parameter trained a few steps in auto mode (``read``: each step's loss read, but the last one's); the last
    step's loss and the parameter."""
    p = jg.nn.Parameter(jg.arange(4.0))
    opt = jg.optim.SGD([p], lr=0.125)
    for i in range(steps):
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        opt.step()  # a barrier: the loss came back from the step's executable
        if read and i < steps - 1:
            loss.item()
    return loss, p


def test_scalar_results_are_read_from_their_pinned_host_copy(tiers, monkeypatch):
    monkeypatch.setattr(_segment, "host_copies", True)
    loss, p = _hot_loss()
    assert tiers().compiled_runs > 0
    host = _host_copies.lookup(loss._value)
    assert host is not None and host.sharding.memory_kind == "pinned_host"
    want = float(np.sum(np.arange(4.0) ** 2) * 0.75 ** 10)  # p <- p - 0.125 * 2p, 5 updates before the last loss
    assert loss.item() == pytest.approx(want, rel=1e-6) and loss.tolist() == loss.item()
    assert float(np.asarray(loss._value)) == loss.item()  # the device array says the same
    d = loss.detach()
    d.add_(1.0)  # in place: a new array, which has no host copy; the reads follow the new value
    assert _host_copies.lookup(d._value) is None and d.item() == pytest.approx(want + 1.0, rel=1e-6)
    assert loss.item() == pytest.approx(want + 1.0, rel=1e-6)  # detach() shares loss's memory
    n = _host_copies.count()
    del loss, host, d
    assert _host_copies.count() < n  # forgotten with its array


def test_host_copies_that_do_not_compile_are_dropped(tiers, monkeypatch):
    from jgrad.runtime import _segment_run

    monkeypatch.setattr(_segment, "host_copies", True)
    real = _segment_run.compile_segment

    def no_pinned_host(steps, n, specs, layout, *args):
        if layout.host:
            raise RuntimeError("pinned_host is not a memory kind of this device")
        return real(steps, n, specs, layout, *args)

    monkeypatch.setattr(_segment_run, "compile_segment", no_pinned_host)
    loss, p = _hot_loss()
    info = tiers()
    assert info.compiled_runs > 0 and info.compile_failures == 0
    assert _host_copies.lookup(loss._value) is None
    assert loss.item() == pytest.approx(float(np.sum(np.arange(4.0) ** 2) * 0.75 ** 10), rel=1e-6)


def test_results_nobody_reads_get_no_host_copy(tiers, monkeypatch):
    monkeypatch.setattr(_segment, "host_copies", True)
    loss, p = _hot_loss(read=False)  # a step that never reads its loss does not pay for the copy
    assert tiers().compiled_runs > 0
    assert _host_copies.lookup(loss._value) is None
    assert loss.item() == pytest.approx(float(np.sum(np.arange(4.0) ** 2) * 0.75 ** 10), rel=1e-6)


# ---- semantics that must not change -----------------------------------------------------------
def test_random_draws_equal_eager_mode(tiers):
    draws = {}
    for mode in ("eager", "auto"):
        with jg.execution_mode(mode):
            jg.manual_seed(123)
            a = [jg.rand(3) for _ in range(4)] + [jg.randn(2, 2), jg.normal(1.0, 2.0, (3,))]
            x = jg.ones(100)
            d = nn.functional.dropout(x, 0.5)
            draws[mode] = [t.numpy().copy() for t in a + [d]]
    for e, a in zip(draws["eager"], draws["auto"]):
        np.testing.assert_array_equal(a, e)


def _errors(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None


@pytest.mark.parametrize("case", ["shape", "matmul", "dtype-inplace", "leaf-inplace", "device", "version",
                                  "second-backward", "int-requires-grad"])
def test_errors_are_raised_at_the_op_as_in_eager_mode(case):
    def make():
        a = jg.randn(3, 4)
        w = jg.randn(4, requires_grad=True)
        return a, w

    def run():
        a, w = make()
        if case == "shape":
            return a + jg.ones(5)
        if case == "matmul":
            return a @ jg.ones(3, 3)
        if case == "dtype-inplace":
            return jg.ones(3, dtype=jg.int32).add_(jg.ones(3) * 0.5)
        if case == "leaf-inplace":
            return w.mul_(2)
        if case == "device":
            return a + jg.ones(3, 4, device="cpu:1")
        if case == "version":
            y = w * 1.0
            z = (y * y).sum()
            y.add_(1)
            return z.backward()
        if case == "second-backward":
            z = (w.exp()).sum()
            z.backward()
            return z.backward()
        if case == "int-requires-grad":
            return jg.ones(2, dtype=jg.int32).requires_grad_()

    with jg.execution_mode("eager"):
        want = _errors(run)
    assert want is not None
    with jg.execution_mode("auto"):
        got = _errors(run)
        assert got == want
        # the recorder is usable after the error
        np.testing.assert_allclose((jg.ones(2) * 3).numpy(), [3.0, 3.0])


def test_hooks_functions_and_anomaly_see_values():
    seen = []

    class Square(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            seen.append(("forward", x.detach().numpy().tolist()))  # reading a value inside: a barrier
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            seen.append(("backward", g.numpy().tolist()))
            return 2 * x * g

    with jg.execution_mode("auto"):
        x = jg.tensor([1.0, 2.0], requires_grad=True)
        y = Square.apply(x + 1)
        y.register_hook(lambda g: seen.append(("hook", g.numpy().tolist())))
        with jg.autograd.detect_anomaly():
            (y * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [12.0, 18.0])
    assert seen == [("forward", [2.0, 3.0]), ("hook", [3.0, 3.0]), ("backward", [3.0, 3.0])]


def test_capture_works_inside_auto_mode(tiers):
    x = jg.ones(3) * 2  # pending when the capture begins
    g = jg.Graph()
    with jg.graph(g):
        y = (x * 3).exp()
    g.replay()
    np.testing.assert_allclose(y.numpy(), np.exp(np.full(3, 6.0)), rtol=1e-6)
    x.copy_(jg.zeros(3))
    g.replay()
    np.testing.assert_allclose(y.numpy(), np.ones(3), rtol=1e-6)


def test_streams_and_sanitizer_keep_their_meaning():
    from jgrad.streams import StreamRaceError
    with jg.execution_mode("auto"), jg.streams.sanitizer():
        s = jg.Stream()
        x = jg.ones(4)
        with jg.stream(s):
            with pytest.raises(StreamRaceError):
                x * 2  # read on s with no wait after x was made on the default stream
        s.wait_stream(jg.current_stream())
        with jg.stream(s):
            y = x * 2
        jg.current_stream().wait_stream(s)
        np.testing.assert_array_equal(y.numpy(), np.full(4, 2.0))
        assert s.query() is True


# ---- the backward fast path (Note [Backward plans]) ------------------------------------------
def _net_grads(mode, hook=False, inputs=None, retain=False):
    jg.manual_seed(0)
    x = jg.randn(4, 3, requires_grad=True)
    w1 = jg.randn(5, 3, requires_grad=True)
    w2 = jg.randn(2, 5, requires_grad=True)
    calls = []
    with jg.execution_mode(mode):
        h = jg.linear(x, w1).relu()
        if hook:
            h.register_hook(lambda g: calls.append(1))
        y = jg.linear(h * h + h, w2).sum()  # h used twice: gradients summed
        if inputs == "grad":
            gx, gw2 = jg.autograd.grad(y, [x, w2], retain_graph=retain)
            return [gx.numpy(), gw2.numpy()], calls
        y.backward(retain_graph=retain)
        out = [t.grad.numpy() for t in (x, w1, w2)]
        if retain:
            y.backward()
            out += [t.grad.numpy() for t in (x, w1, w2)]
        return out, calls


@pytest.mark.parametrize("variant", [{}, {"hook": True}, {"inputs": "grad"}, {"retain": True}])
def test_backward_plans_give_the_engine_s_results(variant):
    plans_before = len(_backward_plan._plans)
    eager, eager_calls = _net_grads("eager", **variant)
    auto, auto_calls = _net_grads("auto", **variant)
    for e, a in zip(eager, auto):
        np.testing.assert_allclose(a, e, rtol=1e-6)
    assert eager_calls == auto_calls  # a hook makes the engine run node by node: it still runs once
    if not variant.get("hook"):
        assert len(_backward_plan._plans) >= plans_before  # planned (or found planned)


def test_backward_plan_is_reused_and_leaves_accumulate(tiers):
    w = jg.ones(3, requires_grad=True)
    for k in range(1, 4):
        (w * float(k)).sum().backward()  # .grad accumulates: 1, then 1+2, then 1+2+3
    np.testing.assert_allclose(w.grad.numpy(), [6.0, 6.0, 6.0])
    n = len(_backward_plan._plans)
    (w * 5.0).sum().backward()
    assert len(_backward_plan._plans) == n


_IDX = np.array([2, 0, 2])
# Graphs whose plans cover broadcasting, reductions, matmul, dtype changes (c is float64) and integer inputs with no
# gradient; the last has several roots with their own seeds (a's gradient: a kernel's output plus a seed, summed in
# the plan; b's: its seed alone).
_SHAPE_CASES = {
    "broadcast": lambda a, b, c, w: ((a * b + c.float()) / (b.exp() + 1)).sum(),
    "reductions": lambda a, b, c, w: a.max(dim=1).values.mean() + (a * a).sum(0, keepdim=True).sqrt().sum(),
    "matmul": lambda a, b, c, w: (a @ w).relu().logsumexp(dim=1).sum(),
    "dtypes": lambda a, b, c, w: ((a.double() * c).sum(1).float() + a.to(jg.float16).sum(1).float()).sum() + c.sum(),
    "integers": lambda a, b, c, w: ((a * jg.tensor([[1, 2, 3]])).sum() + a.index_select(0, jg.tensor(_IDX)).sum()
                                    + jg.embedding(jg.tensor(_IDX), w.t()).sum()),
    "seeds": lambda a, b, c, w: [a * 2, a, b],
}


def _plan_shape_mismatches(seen):
    """Each case's plan: (case, what) where an aval known without tracing differs from ``jax.eval_shape``'s.

    Fresh leaves each time (no ``.grad`` accumulates in place: its segment would keep the work alive, to run)."""
    from jgrad.core._dtype import x64_scope
    from jgrad.core._recorder import _as_aval
    avals = lambda tree: jax.tree_util.tree_map(_as_aval, tree)  # noqa: E731
    rng = np.random.default_rng(1)
    bad = []
    for name, fn in _SHAPE_CASES.items():
        del seen[:]
        _backward_plan._plans.clear()
        leaves = [jg.tensor(rng.standard_normal(s).astype(dt), requires_grad=True)
                  for s, dt in (((4, 3), np.float32), ((3,), np.float32), ((4, 1), np.float64), ((3, 5), np.float32))]
        seeds = [jg.ones(4, 3), jg.full((4, 3), 0.5), jg.ones(3)] if name == "seeds" else None
        jg.autograd.backward(fn(*leaves), seeds)
        (plan, nodes, (saved, saved_out)), = seen
        assert plan.steps, name
        with x64_scope():
            for j, ((r, _, _, _), kernel) in enumerate(zip(plan.steps, plan.kernels)):
                g = tuple(jax.ShapeDtypeStruct(m.shape, m.dtype.np) for m in nodes[r].input_metadata)
                if plan.out_avals[j] != jax.eval_shape(kernel, avals(saved[j]), avals(saved_out[j]), g):
                    bad.append((name, nodes[r].name()))
            seed_avals = [_as_aval(t._data) for t in (seeds or [jg.ones(())])]
            for weak in (False, True):  # a weakly typed seed (a Python number's array) stays weak alone
                s = [jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=weak) for x in seed_avals]
                args = (avals(saved), avals(saved_out), s)
                derived = plan.fn.eval_shape(*args)
                if derived is None or derived != jax.eval_shape(plan.fn, *args):
                    bad.append((name, f"backward_pass, weak seeds: {weak}"))
    del seen[:]
    return bad


def test_backward_plan_shapes_equal_eval_shape(monkeypatch):
    """A plan's avals, known without tracing (each node's kernel through its own trace cache; the plan's results
    from its kernels' avals and the seeds'), are what ``jax.eval_shape`` gives."""
    seen = []
    arguments = _backward_plan._Plan.arguments

    def spy(self, nodes):
        args = arguments(self, nodes)
        seen.append((self, nodes, args))
        return args

    monkeypatch.setattr(_backward_plan._Plan, "arguments", spy)
    with jg.execution_mode("auto"):
        bad = _plan_shape_mismatches(seen)
        gc.collect()  # (leaves and their nodes hold each other: then no result is alive, and nothing has to run)
    assert bad == []


def test_backward_plan_declines_what_the_engine_must_report():
    with jg.execution_mode("auto"):
        w = jg.ones(3, requires_grad=True)
        y = w * 2
        z = (y * y).sum()
        y.mul_(3)  # y was saved by z's node
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()
        z2 = (w * w).sum()
        z2.backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            z2.backward()


# ---- eager mode: a repeated backward runs its plan kernel by kernel -------------------------------
def _plan_runs(monkeypatch):
    """Each eager plan run, from now on: True when it ran, False when it left the pass to the engine."""
    runs = []
    real = _backward_plan._Plan.run

    def spy(self, *args):
        res = real(self, *args)
        runs.append(res is not NotImplemented)
        return res

    monkeypatch.setattr(_backward_plan._Plan, "run", spy)
    _backward_plan._seen.clear()
    _backward_plan._plans.clear()
    return runs


@pytest.mark.parametrize("variant", ["backward", "grad", "retain"])
def test_eager_mode_runs_a_repeated_backward_through_its_plan(monkeypatch, variant):
    """The second backward of a structure in eager mode runs its plan (Note [Backward plans]): the engine's results
    bit for bit (the same kernels, the same sums in the same order), which are jax.grad's."""
    runs = _plan_runs(monkeypatch)
    rng = np.random.default_rng(3)
    vals = [rng.standard_normal(s).astype(np.float32) for s in ((4, 3), (5, 3), (2, 5))]

    def grads():
        x, w1, w2 = [jg.tensor(v, requires_grad=True) for v in vals]
        h = jg.linear(x, w1).relu()
        y = jg.linear(h * h + h, w2).sum()  # h read twice: its gradient is a sum
        if variant == "grad":  # h's gradient is returned and flows on to x
            return [g.numpy() for g in jg.autograd.grad(y, [x, h, w2])]
        y.backward(retain_graph=variant == "retain")
        if variant == "retain":
            y.backward()  # the same graph again: its plan, the saved tensors kept
        return [t.grad.numpy() for t in (x, w1, w2)]

    with jg.execution_mode("eager"):
        monkeypatch.setattr(_backward_plan, "eager_plans", False)
        engine = grads()
        assert runs == []
        monkeypatch.setattr(_backward_plan, "eager_plans", True)
        planned = [grads() for _ in range(3)]
    assert runs == [True] * (5 if variant == "retain" else 2)  # the first sighting ran the engine

    def f(x, w1, w2):
        h = jax.nn.relu(x @ w1.T)
        return ((h * h + h) @ w2.T).sum()

    ref = jax.grad(f, argnums=(0, 1, 2))(*vals)
    h = jax.nn.relu(vals[0] @ vals[1].T)
    gh = jax.grad(lambda h: ((h * h + h) @ vals[2].T).sum())(h)
    ref = [ref[0], gh, ref[2]] if variant == "grad" else [2 * r if variant == "retain" else r for r in ref]
    for got in planned:
        for g, e, r in zip(got, engine, ref):
            assert g.tobytes() == e.tobytes()
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_eager_plan_frees_what_the_engine_frees(monkeypatch):
    """Without retain_graph a plan's pass frees each node's saved tensors, as the engine does: an activation the
    program let go of is gone after backward, a second backward is PyTorch's error, and .grad accumulates."""
    runs = _plan_runs(monkeypatch)
    with jg.execution_mode("eager"):
        w = jg.ones(3, requires_grad=True)
        for _ in range(3):
            h = (w * 2.0).exp()  # saved by exp (its output) and by h * h
            gone = weakref.ref(h._data)
            y = (h * h).sum()
            del h
            y.backward()
            assert gone() is None
            with pytest.raises(RuntimeError, match="backward through the graph a second time"):
                y.backward()
    assert runs == [True, True]
    np.testing.assert_allclose(w.grad.numpy(), 3 * 4 * np.exp(4.0) * np.ones(3), rtol=1e-6)


def test_eager_plan_of_a_graph_recorded_in_auto_mode(monkeypatch):
    """A graph recorded in "auto" mode and differentiated in eager mode before it ran: the plan reads its saved
    values (running the segment), as the engine does, and gives jax.grad's gradients."""
    runs = _plan_runs(monkeypatch)
    v = np.array([0.5, -1.0, 0.25], np.float32)
    w = jg.tensor(v, requires_grad=True)
    for _ in range(3):
        with jg.execution_mode("auto"):
            h = (w * 3).tanh()
            y = (h * h).sum()
        with jg.execution_mode("eager"):
            y.backward()
    assert runs == [True, True]
    ref = jax.grad(lambda w: (jnp.tanh(w * 3) ** 2).sum())(v)
    np.testing.assert_allclose(w.grad.numpy(), 3 * np.asarray(ref), rtol=1e-5)


def test_eager_plan_leaves_to_the_engine_what_users_can_observe(monkeypatch):
    """An in-place write to a saved tensor, a hook or anomaly mode sends a repeated structure to the engine, which
    reports or runs them as PyTorch does."""
    runs = _plan_runs(monkeypatch)
    with jg.execution_mode("eager"):
        w = jg.ones(3, requires_grad=True)
        for modified in (False, False, True):
            y = w * 2
            z = (y * y).sum()
            if modified:
                y.mul_(3)  # y was saved by y * y
                with pytest.raises(RuntimeError, match="modified by an inplace operation"):
                    z.backward()
            else:
                z.backward()
        calls = []
        for _ in range(3):
            h = w * 3
            h.register_hook(lambda g: calls.append(g.numpy().copy()))
            (h * h).sum().backward()
        with jg.autograd.detect_anomaly(check_nan=True):
            for _ in range(2):
                (w * 5).sum().backward()
    assert runs == [True, False]  # the second clean pass; the modified one, declined before any kernel ran
    assert len(calls) == 3 and all((c == np.full(3, 6.0)).all() for c in calls)
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 2 * 8.0 + 3 * 18.0 + 2 * 5.0))


# ---- property: any chain of elementwise ops gives eager mode's values ---------------------------
_UNARY = {"exp": (jg.exp, np.exp), "tanh": (jg.tanh, np.tanh), "neg": (lambda t: -t, np.negative),
          "sq": (lambda t: t * t, np.square), "sin": (jg.sin, np.sin)}
_BINARY = {"add": (lambda a, b: a + b, np.add), "mul": (lambda a, b: a * b, np.multiply),
           "sub": (lambda a, b: a - b, np.subtract)}


@settings(max_examples=int(os.environ.get("JGRAD_TEST_EXAMPLES", "12")), deadline=None)
@given(shape=st.sampled_from([(3,), (2, 3), (4, 1)]),
       program=st.lists(st.one_of(st.tuples(st.just("u"), st.sampled_from(sorted(_UNARY))),
                                  st.tuples(st.just("b"), st.sampled_from(sorted(_BINARY)), st.integers(0, 5))),
                        min_size=1, max_size=8),
       repeats=st.integers(1, 3))
def test_any_elementwise_program_matches_eager_values_and_grads(shape, program, repeats):
    rng = np.random.default_rng(len(program))
    x0 = (rng.standard_normal(shape) * 0.5).astype(np.float64)

    def run(mode):
        with jg.execution_mode(mode):
            out = None
            for _ in range(repeats):  # repeated: the later runs may be compiled
                x = jg.tensor(x0, requires_grad=True)
                vals = [x]
                for step in program:
                    if step[0] == "u":
                        vals.append(_UNARY[step[1]][0](vals[-1]))
                    else:
                        vals.append(_BINARY[step[1]][0](vals[-1], vals[step[2] % len(vals)]))
                vals[-1].sum().backward()
                out = (vals[-1].detach().numpy(), x.grad.numpy())
            return out

    e, a = run("eager"), run("auto")
    np.testing.assert_allclose(a[0], e[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(a[1], e[1], rtol=1e-10, atol=1e-12)


def test_ops_on_memory_another_library_writes_run_at_once():
    from interop.numpy import empty_aligned, from_numpy
    a = empty_aligned((4,), np.float32)
    a[:] = [1.0, 2.0, 3.0, 4.0]
    with jg.execution_mode("auto"):
        t = from_numpy(a)                      # zero copy: NumPy may write this memory
        y = t * 10                             # must read the values of now, as in eager mode
        a[:] = 0.0
        np.testing.assert_array_equal(y.numpy(), [10.0, 20.0, 30.0, 40.0])


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_capture_after_compiled_packed_segments_reads_the_parameters_afresh(tiers, monkeypatch, optimizer):
    # A capture whose parameters come from a compiled segment's packed outputs must take them as inputs read
    # at every replay: it once baked their values in as constants (found by the GPU test mode).
    monkeypatch.setattr(_segment, "pack_outputs", True)
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((5, 6), dtype=np.float32), rng.standard_normal((5, 3), dtype=np.float32))
               for _ in range(4)]

    def run(mode):
        with jg.execution_mode(mode):
            for _ in range(2):  # the same init twice: the second one runs compiled, its outputs packed
                jg.manual_seed(0)
                model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
                jg.synchronize()
            opt = jg.optim.Adam(model.parameters(), lr=0.01) if optimizer == "adam" else \
                jg.optim.SGD(model.parameters(), lr=0.1)
            sx, sy = jg.zeros(5, 6), jg.zeros(5, 3)
            g = jg.Graph()
            with jg.graph(g):
                loss = nn.functional.mse_loss(model(sx), sy)
                loss.backward()
                opt.step()
            losses = []
            for xv, yv in batches:
                sx.copy_(jg.tensor(xv))
                sy.copy_(jg.tensor(yv))
                g.replay()
                losses.append(loss.detach().clone())
            return [l.item() for l in losses] + [float(v) for p in model.parameters() for v in _np(p).ravel()]

    np.testing.assert_allclose(run("auto"), run("eager"), rtol=1e-5, atol=1e-6)


def test_a_step_that_may_donate_less_runs_compiled_on_copies(tiers, monkeypatch):
    # What a step may donate depends on what else holds the old arrays at that moment (on a GPU it flickered
    # by one input between steps); such a step still runs its compiled executable, on a copy of what is held.
    monkeypatch.setattr(_segment, "pack_outputs", False)  # (packed outputs make the next step another structure)
    p = jg.nn.Parameter(jg.ones(4))
    opt = jg.optim.SGD([p], lr=0.25)

    def step():
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()

    for _ in range(3):
        step()
    info = tiers()
    held = p._value                        # one step holds the array the executable would donate
    step()
    after = tiers()
    assert after.compiled_runs == info.compiled_runs + 1 and after.interpreted == info.interpreted
    assert after.copied_runs == info.copied_runs + 1 and after.compiles == info.compiles
    np.testing.assert_array_equal(np.asarray(held), np.full(4, 0.5 ** 3))   # not written by the run
    del held
    step()
    assert tiers().copied_runs == after.copied_runs and tiers().compiled_runs == after.compiled_runs + 1
    np.testing.assert_allclose(p.detach().numpy(), np.full(4, 0.5 ** 5), rtol=1e-6)


def test_old_values_of_tensors_rebound_in_place_are_donated_unless_held(tiers):
    p = jg.nn.Parameter(jg.ones(4))
    opt = jg.optim.SGD([p], lr=0.25)
    first = p._value                       # a reference to the first array (interop holds such): never donated
    before = jg.graphs.segment_cache_info().donated_runs
    for _ in range(5):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()
    assert jg.graphs.segment_cache_info().donated_runs > before
    np.testing.assert_array_equal(np.asarray(first), np.ones(4))
    np.testing.assert_allclose(p.detach().numpy(), np.full(4, 0.5 ** 5), rtol=1e-6)
    alias = p.detach()                     # detach() shares p's memory: it follows the next update
    before = jg.graphs.segment_cache_info().donated_runs
    opt.zero_grad()
    (p * p).sum().backward()
    opt.step()
    np.testing.assert_allclose(alias.numpy(), np.full(4, 0.5 ** 6), rtol=1e-6)



def test_gradients_zero_grad_lets_go_of_are_written_into_unless_held(tiers, monkeypatch):
    # zero_grad(set_to_none=True) hands the old gradients to the next step's executable, which writes its results
    # into their memory (Segment.recycle: no allocation and no free per gradient); one the program still holds is
    # not given and keeps its values. The training itself matches PyTorch's.
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(_segment, "pack_outputs", False)
    rng = np.random.default_rng(3)
    w1, w2 = rng.standard_normal((8, 5), dtype=np.float32), rng.standard_normal((2, 8), dtype=np.float32)
    xv, yv = rng.standard_normal((4, 5), dtype=np.float32), rng.standard_normal((4, 2), dtype=np.float32)

    def train(lib, hold_at=None):
        params = [lib.tensor(w, requires_grad=True) for w in (w1, w2)]
        opt = lib.optim.SGD(params, lr=0.1)
        x, y, held, ptrs = lib.tensor(xv), lib.tensor(yv), None, []
        for i in range(8):
            if i == hold_at:
                held = [(p.grad, p.grad.numpy().copy()) for p in params]
            opt.zero_grad(set_to_none=True)
            ((lib.tanh(x @ params[0].T) @ params[1].T - y) ** 2).mean().backward()
            opt.step()
            if lib is jg:  # where the gradients and parameters live after each step
                ptrs.append({a.unsafe_buffer_pointer() for p in params for a in (p._value, p.grad._value)})
        return [p.detach().numpy() for p in params], held, ptrs

    expected, _, _ = train(torch)
    got, held, ptrs = train(jg, hold_at=3)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)
    for t, before in held:  # held across zero_grad and the steps after: never written into
        np.testing.assert_array_equal(t.numpy(), before)
    assert tiers().compiled_runs > 0
    assert ptrs[-1] == ptrs[-3], "the last steps allocated new memory instead of reusing the old gradients'"


def test_an_evaluation_after_zero_grad_is_the_structure_it_is_without_it(tiers):
    # The dropped gradients go only to a run with results of their shape: an evaluation right after zero_grad is
    # the same structure as one while the gradients are alive (not a variant of its own, compiled apart).
    lin, x = nn.Linear(3, 2), jg.ones(4, 3)
    opt = jg.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()
    with jg.no_grad():
        lin(x).sum().item()  # the gradients alive
    seen = tiers().structures
    opt.zero_grad()
    with jg.no_grad():
        value = lin(x).sum().item()  # just after they were dropped
    assert tiers().structures == seen
    w, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    np.testing.assert_allclose(value, (np.ones((4, 3), np.float32) @ w.T + b).sum(), rtol=1e-5)


@pytest.mark.one_execution_mode
def test_a_step_s_new_dynamic_scalars_are_made_in_one_transfer(monkeypatch):
    # On a miss, device_scalar makes the step's later dynamic scalars too (one transfer): each array must be what a
    # transfer of that number alone gives (value, dtype, weak type, placement), and frozen scalars are left alone.
    from jgrad.core._dtype import x64_scope
    from jgrad.runtime import _segment_run
    monkeypatch.setattr(_segment_run, "_SCALAR_ARRAYS", {})
    dev = jg.device("cpu")
    leaves = [0.5, "x", 3, True, 1.5 - 2j, 0.25, 1, 1.0, 7]
    a = _segment_run.device_scalar(0.5, dev, leaves, 0, frozenset(range(8)))
    cached = {k[:2]: v for k, v in _segment_run._SCALAR_ARRAYS.items()}
    assert cached[(float, "0.5")] is a and (int, "7") not in cached  # (position 8 is not dynamic)
    with x64_scope():
        for x in leaves[:8]:
            if x == "x":
                continue
            got, want = cached[(type(x), repr(x))], jax.device_put(x, dev.jax_device)
            assert (got.dtype, got.weak_type, got.committed, got.sharding) == (
                want.dtype, want.weak_type, want.committed, want.sharding), x
            assert got.item() == x and type(got.item()) is type(x)
    assert _segment_run.device_scalar(1, dev) is cached[(int, "1")]  # a hit: no new array
    assert len({id(v) for v in cached.values()}) == len(cached) == 7  # 1, 1.0 and True: three arrays
