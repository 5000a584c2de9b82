"""A kernel's new shapes run without an XLA compile until they prove hot (Note [New shapes], jgrad/runtime/_kernel_cache.py).

Values are checked against NumPy / ``jax.grad`` and against the kernel compiled the normal way (``Kernel.jit``),
the compile counts through JAX's own monitoring events.
"""
import collections
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad.runtime import _kernel_cache

pytestmark = pytest.mark.one_execution_mode

_events = collections.Counter()
jax.monitoring.register_event_duration_secs_listener(
    lambda name, d, **kw: _events.update([name]) if name == "/jax/core/compile/backend_compile_duration" else None)


def _compiles():
    return _events["/jax/core/compile/backend_compile_duration"]


@pytest.fixture
def knobs():
    names = ("interpret_max_elements", "compile_payback", "compile_after", "background_compile", "interpret_inexact",
             "_verify")
    saved = [getattr(_kernel_cache, n) for n in names]
    _kernel_cache.interpret_max_elements = 1 << 18
    _kernel_cache.interpret_inexact = _kernel_cache._verify = False
    yield
    _kernel_cache.wait_compiles()
    for n, v in zip(names, saved):
        setattr(_kernel_cache, n, v)


def _kernel_of(op_name):
    from jgrad.runtime import _dispatch
    return [fn for op in _dispatch._ALL_OPS if op.name == op_name for fn in op._kernels.values()]


@pytest.mark.cpu_only("a new shape runs without compiling on a CPU only (Note [New shapes])")
def test_new_lengths_run_without_compiling_and_match(knobs):
    """REINFORCE's episode end at lengths never seen, NumPy's sums allowed (``interpret_inexact``): no XLA compile,
    values and gradients as jax computes them."""
    _kernel_cache.compile_payback = _kernel_cache.compile_after = 1e9  # never hot here
    _kernel_cache.interpret_inexact = True
    rng = np.random.RandomState(0)
    w_np = rng.standard_normal((4, 2)).astype(np.float32)
    for n in (37, 41):  # lengths no other test uses
        obs_np = rng.standard_normal((n, 4)).astype(np.float32)
        ret_np = rng.standard_normal(n).astype(np.float32)
        w = jg.tensor(w_np, requires_grad=True)
        obs, returns = jg.tensor(obs_np), jg.tensor(ret_np)
        jg.log_softmax(obs[:2] @ w, dim=1)  # kernels of shapes every length shares compile here
        before, interpreted = _compiles(), _kernel_cache.stats["interpreted"]
        log_probs = jg.log_softmax(obs @ w, dim=1)[:, 0]
        parts = [log_probs[i:i + 1] for i in range(n)]
        r = (returns - returns.mean()) / (returns.std() + 1e-7)
        loss = jg.cat([-lp * r[i] for i, lp in enumerate(parts)]).sum()
        loss.backward()
        new_compiles = _compiles() - before
        assert _kernel_cache.stats["interpreted"] > interpreted

        def ref(w):
            lp = jax.nn.log_softmax(obs_np @ w, axis=1)[:, 0]
            rr = (ret_np - ret_np.mean()) / (jnp.std(ret_np, ddof=1) + 1e-7)
            return (-lp * rr).sum()
        np.testing.assert_allclose(loss.item(), ref(w_np), rtol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), jax.grad(ref)(w_np), rtol=1e-4, atol=1e-6)
        if n == 41:  # (the first length may compile kernels of shapes every length shares, if earlier tests
            # dropped them): the second compiled nothing that depends on the length
            assert new_compiles == 0, new_compiles


@pytest.mark.cpu_only("a new shape runs without compiling on a CPU only (Note [New shapes])")
def test_small_full_sums_at_new_lengths_run_without_compiling_with_the_compiled_bits(knobs):
    """Note [Tree sums] (jgrad/ops/reduction.py): a full ``sum``, ``mean``, ``var`` and ``std`` of a float vector add
    in a fixed tree, so at lengths never seen they run interpreted in the default exact mode, with no XLA compile;
    and each such call equals, bit for bit, the kernel compiled for that length (``_verify`` compiles it aside)."""
    _kernel_cache.compile_payback = _kernel_cache.compile_after = 1e9  # never hot here
    rng = np.random.RandomState(5)

    def run(n, dtype):
        t = jg.tensor((rng.standard_normal(n) * 3 + 1).astype(dtype))
        return [t.sum(), t.mean(), t.var(), t.std(correction=0), t.sum(0, keepdim=True), (t * t).mean()]

    for dtype in (np.float32, np.float64):
        run(5, dtype)  # kernels every length shares compile here
        for n in (53, 59):  # lengths no other test uses
            before, interpreted = _compiles(), _kernel_cache.stats["interpreted"]
            run(n, dtype)
            assert _compiles() == before, (dtype, n)
            assert _kernel_cache.stats["interpreted"] - interpreted == 7, (dtype, n)  # the six and the product
    _kernel_cache._verify = True
    for dtype in (np.float32, np.float64):
        for n in (2, 3, 61, 67, 128, 1024):
            run(n, dtype)


def test_interpreted_ops_match_numpy(knobs):
    """jgrad ops at new shapes, interpreted with NumPy's sums allowed: equal to NumPy (exact ops) or within a few
    ulps."""
    _kernel_cache.compile_payback = _kernel_cache.compile_after = 1e9
    _kernel_cache.interpret_inexact = True
    rng = np.random.RandomState(1)
    a_np, b_np = rng.standard_normal((3, 53)).astype(np.float32), rng.standard_normal((53, 5)).astype(np.float32)
    a, b = jg.tensor(a_np), jg.tensor(b_np)
    results = {
        "cat": jg.cat([a, a * 2.0], dim=1), "mul": a * a, "matmul": a @ b, "sum": a.sum(dim=1),
        "softmax": jg.softmax(a, dim=1), "where": jg.where(a > 0, a, -a), "view": a[:, 7:20].t() + 1.0,
        "argmax": a.argmax(dim=1), "int": (a * 10).long() // 3,
    }
    exact = {"cat", "mul", "where", "view", "argmax", "int"}
    ref = {"cat": np.concatenate([a_np, a_np * 2], 1), "mul": a_np * a_np, "matmul": a_np @ b_np,
           "sum": a_np.sum(1), "softmax": np.asarray(jax.nn.softmax(a_np, axis=1)), "where": np.abs(a_np),
           "view": a_np[:, 7:20].T + 1, "argmax": a_np.argmax(1),
           "int": np.floor_divide((a_np * 10).astype(np.int64), 3)}
    for name, out in results.items():
        if name in exact:
            np.testing.assert_array_equal(out.numpy(), ref[name], err_msg=name)
        else:
            np.testing.assert_allclose(out.numpy(), ref[name], rtol=2e-6, atol=1e-6, err_msg=name)


def test_kernel_interpreted_equals_its_compiled_self(knobs):
    """A ``Kernel`` of plain jax functions against ``Kernel.jit`` on the same arrays: by default only programs that
    give the compiled kernel's every bit are interpreted (Note [Exact programs]); with ``interpret_inexact`` the
    rest too, within a few ulps."""
    _kernel_cache.compile_payback = _kernel_cache.compile_after = 1e9
    rng = np.random.RandomState(2)
    cpu = jax.devices("cpu")[0]
    a = jax.device_put(rng.standard_normal((5, 71)).astype(np.float32), cpu)
    b = jax.device_put(rng.standard_normal(71).astype(np.float32), cpu)
    i = jax.device_put(np.array([3, 0, 4, 4], np.int32), cpu)
    exact_cases = {  # XLA rewrites these divisions as multiplies by a reciprocal; the interpreter does too
        "cat, slice, where": lambda x: jnp.where(x[:, :8] > 0, jnp.concatenate([x[:, 3:9], -x[:, :2]], 1), 0.5),
        "divide by a constant": lambda x: x / 3.0,
        "divide 0-d arrays by a constant": lambda x: tuple(x[i, 7 * i] / 3.0 for i in range(5)),
        "divide by a broadcast row": lambda x, y: x[:, :9] / (y[:9] + 2.0),
        "integer ops": lambda x: ((x * 7).astype(jnp.int32) // 3) % 5,
        "relu and its backward": lambda x: (jnp.maximum(x, 0), jnp.where(x > 0, x * 0.5, 0.0)),
        # iterating an index array is jax 0.11's ``unstack`` primitive (a slice and a squeeze each before)
        "dynamic slice at offsets read from an array": lambda x, idx: jax.lax.dynamic_slice(x, tuple(idx[:2]), (2, 3)),
        "iterate an empty array": lambda x, idx: (x[:, :3], *tuple(idx[:0])),  # (an unstack with no results)
    }
    inexact_cases = {  # a float sum, a multiply-add XLA fuses, a division XLA rewrites as a reciprocal square root,
        # a transcendental (XLA's exp rounds differently at different lengths)
        "exp": lambda x: jnp.exp(x) * 2.0,
        "gather, transpose, dot": lambda x, idx: x[idx] @ x.T,
        "log_softmax, max, sum": lambda x: jax.nn.log_softmax(x, axis=1).max(0) + x.sum(1).mean(),
        "multiply-add": lambda x, y: x * y + 1.0,
        "divide by a square root": lambda x, y: x / jnp.sqrt(jnp.abs(y)),
    }

    def run(fn):
        args = {1: (a,), 2: (a, b if "idx" not in fn.__code__.co_varnames else i)}[fn.__code__.co_argcount]
        k = _kernel_cache.Kernel(fn)
        n = _kernel_cache.stats["interpreted"]
        got, ref = k(*args), k.jit(*args)
        return _kernel_cache.stats["interpreted"] - n, jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(ref)

    for name, fn in exact_cases.items():
        interpreted, got, ref = run(fn)
        assert interpreted == 1, name
        for g, r in zip(got, ref):
            assert g.dtype == r.dtype and g.shape == r.shape, name
            np.testing.assert_array_equal(np.asarray(g), np.asarray(r), err_msg=name)
    for name, fn in inexact_cases.items():
        assert run(fn)[0] == 0, name  # compiled: its bits would not be XLA's
    _kernel_cache.interpret_inexact = True
    for name, fn in inexact_cases.items():
        interpreted, got, ref = run(fn)
        assert interpreted == 1, name
        for g, r in zip(got, ref):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=2e-6, atol=2e-6, err_msg=name)
    # under a JAX trace a call on concrete arrays is staged into the trace (as jax.jit does), never interpreted
    # on the side: jgrad.func's trace cache re-reads the tensors a trace read, so their uses must be in it
    k = _kernel_cache.Kernel(lambda x: x[:, :3] * 2.0)
    n = _kernel_cache.stats["interpreted"]
    jaxpr = jax.make_jaxpr(lambda y: k(a) + y)(np.ones((5, 3), np.float32))
    assert _kernel_cache.stats["interpreted"] == n and "mul" in str(jaxpr), jaxpr
    # a backward kernel takes pytrees: where a None sits is part of its signature
    k = _kernel_cache.Kernel(lambda saved, g: tuple(None if s is None else s * g[0] for s in saved), tree=True)
    one = k((a, None), (a,))
    other = k((None, a), (a,))
    assert one[1] is None and other[0] is None
    np.testing.assert_array_equal(np.asarray(one[0]), np.asarray(other[1]))


@pytest.mark.cpu_only("a new shape runs without compiling on a CPU only (Note [New shapes])")
def test_hot_shape_compiles_and_unsupported_kernels_compile(knobs):
    """A shape called again compiles (in the foreground, or in the background while its calls are interpreted) and
    runs compiled from then on; random bits, float16 and a bound of 0 compile at once."""
    _kernel_cache.compile_payback, _kernel_cache.compile_after, _kernel_cache.background_compile = 1e9, 2, False
    x = jg.tensor(np.arange(59, dtype=np.float32))
    sig = (x._data.aval, float)  # the kernel's key: the array's aval, the scalar's type (Note [Kernel calls])
    promoted = _kernel_cache.stats["promoted"]
    first = x * 3.0  # interpreted
    kern = [k for k in _kernel_of("MulBackward0") if sig in k._shapes]
    assert kern and kern[0]._shapes[sig] is not _kernel_cache._COMPILED
    before = _compiles()
    second = x * 3.0  # the second call: compiled in the foreground
    assert _kernel_cache.stats["promoted"] == promoted + 1 and _compiles() == before + 1
    assert kern[0]._shapes[sig] is _kernel_cache._COMPILED
    np.testing.assert_array_equal(first.numpy(), np.arange(59, dtype=np.float32) * 3)
    np.testing.assert_array_equal(second.numpy(), first.numpy())

    _kernel_cache.background_compile = True
    y = jg.tensor(np.arange(61, dtype=np.float32))
    outs = [y - 2.0, y - 2.0]  # interpreted; the second queues a background compile
    _kernel_cache.wait_compiles()
    before = _compiles()
    outs.append(y - 2.0)  # compiled: the background compile filled the jax.jit's cache
    assert _compiles() == before
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), np.arange(61, dtype=np.float32) - 2)

    _kernel_cache.compile_payback = _kernel_cache.compile_after = 1e9
    before = _compiles()
    h = jg.ones(61, dtype=jg.float16) * 2.0  # 16-bit floats: XLA only
    assert h.dtype is jg.float16 and h.tolist() == [2.0] * 61 and _compiles() > before
    _kernel_cache.interpret_max_elements = 0  # the knob off: every new shape compiles, as before
    before = _compiles()
    y = jg.tensor(np.arange(67, dtype=np.float32)) - 1.0
    assert _compiles() > before
    np.testing.assert_array_equal(y.numpy(), np.arange(67, dtype=np.float32) - 1)


@pytest.mark.cpu_only("kernels are interpreted, then warmed, on a CPU only (Notes [New shapes], [Warm executables])")
def test_a_background_compiled_kernel_is_warm_before_its_next_call(knobs, monkeypatch):
    """The kernel's background compile calls its jax.jit once more on the inputs that asked for it, in its own thread:
    the program's next call finds the executable loaded and the signature in the jit's cache (no compile), and the
    program's results are unchanged."""
    warmed = []
    real = _kernel_cache.warm_call
    monkeypatch.setattr(_kernel_cache, "warm_call", lambda *a: warmed.append(
        (threading.current_thread().name, real(*a))) or warmed[-1][1])
    _kernel_cache.compile_payback, _kernel_cache.compile_after = 1e9, 2
    _kernel_cache.background_compile = True
    y = jg.tensor(np.arange(71, dtype=np.float32))
    outs = [y * 5.0 - 1.0, y * 5.0 - 1.0]  # interpreted; the second call of each kernel queues its compile
    _kernel_cache.wait_compiles()
    assert warmed and all(ran for _, ran in warmed), warmed
    assert {name for name, _ in warmed} == {"jgrad-kernel-compile"}
    before = _compiles()
    outs.append(y * 5.0 - 1.0)  # compiled, warm: no compile here
    assert _compiles() == before
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), np.arange(71, dtype=np.float32) * 5 - 1)

    monkeypatch.setattr(_kernel_cache, "warm_max_bytes", 0)  # the knob off: compiled, not warmed
    warmed.clear()
    z = jg.tensor(np.arange(73, dtype=np.float32))
    outs = [z + 7.0, z + 7.0]
    _kernel_cache.wait_compiles()
    assert warmed == []
    np.testing.assert_array_equal((z + 7.0).numpy(), np.arange(73, dtype=np.float32) + 7)


def test_exit_lets_the_running_background_compile_finish_and_drops_the_queued(knobs):
    # the interpreter exiting while a compile thread is inside XLA can abort the process: at exit the running
    # compile is waited for and the queued ones are dropped
    import threading
    import time
    started, finished = threading.Event(), []

    class _Slow:
        def __init__(self, name):
            self.name = name
            self.jit = self
            self._shapes = {}
            self.jaxpr = None

        def trace(self, *args):
            return self

        def lower(self):
            return self

        def compile(self):
            started.set()
            time.sleep(0.2)
            finished.append(self.name)

    _kernel_cache.wait_compiles()
    measured, stats = list(_kernel_cache._measured), dict(_kernel_cache.stats)  # (the fake's 0.2 s is no compile)
    _kernel_cache._submit(_Slow("running"), ("sig",), ())
    assert started.wait(5)
    _kernel_cache._submit(_Slow("queued"), ("sig",), ())
    _kernel_cache._at_exit()
    assert finished == ["running"] and _kernel_cache._worker[0] is None and not _kernel_cache._jobs
    _kernel_cache._measured[:] = measured
    _kernel_cache.stats.update(stats)


def _bits_equal(got, ref):
    g, r = np.asarray(got), np.asarray(ref)
    assert g.dtype == r.dtype and g.shape == r.shape
    assert got.aval.weak_type == ref.aval.weak_type and got.committed == ref.committed
    assert got.devices() == ref.devices()
    assert g.tobytes() == r.tobytes(), (g, r)  # every bit: signed zeros, NaN payloads


def test_backward_kernels_pass_saved_scalars_as_cached_arrays(knobs):
    """A backward kernel's saved Python scalar (``x * 2``'s 2) reaches jax.jit as the cached 0-d array, placed by
    the saved array or else by a gradient (Note [Kernel calls]): no conversion per call, jax.jit's own result."""
    from jgrad.core._dtype import x64_scope

    _kernel_cache.interpret_max_elements = 0  # compiled at the first call
    with x64_scope():
        a = jnp.asarray(np.linspace(-1, 1, 5).astype(np.float32))

        def body(saved, outs, g):
            return (g[0] * saved[1] + (saved[0] if saved[0] is not None else 0), None)

        k, ref = _kernel_cache.Kernel(body, tree=True), jax.jit(body)
        passed = []
        real = k.jit
        k.jit = lambda *args: (passed.append(args[0]), real(*args))[1]
        for s in (2, 2.5, -0.0, float("nan"), True) * 2:
            for saved in ((a, s), (None, s)):
                got, want = k(saved, (), (a,))[0], ref(saved, (), (a,))[0]
                assert np.asarray(got).tobytes() == np.asarray(want).tobytes() and got.dtype == want.dtype
    assert len(passed) == 20 and not [x for saved in passed for x in saved if type(x) in (int, float, bool)]


def test_compiled_calls_key_on_avals_and_pass_scalars_as_jax_jit_would(knobs):
    """Past its first call a kernel is keyed by its arrays' avals and passes Python scalars as cached 0-d arrays
    (Note [Kernel calls]): every call, at a new shape, dtype, weak type or scalar value, gives jax.jit's own result
    for the raw arguments, bit for bit, with its dtype, weak type and placement; a shape keeps one executable."""
    from jgrad.core._dtype import x64_scope

    with x64_scope():  # as every jgrad kernel runs
        strong = jnp.asarray(np.linspace(-2, 2, 5))
        weak = jax.jit(lambda v: jnp.broadcast_to(v, (5,)))(1.5)  # float64[5], weakly typed
        arrays = [jnp.asarray(np.arange(5, dtype=np.float32)), jnp.asarray(np.arange(3, dtype=np.float32)),
                  jnp.asarray(np.arange(5, dtype=np.int32)), strong, weak]
        every = [3, -2 ** 62, True, 2.5, 0.0, -0.0, float("nan"), -float("inf"), 1e300]
        # every shape compiled at its first call (a scalar output too); then interpreted first, compiled when hot (its
        # 3rd call), where a strong and a weak float64[5] must not share an interpretation (its output's weak type)
        for interpret, scalars, fn in ((0, every, lambda a, s: (a * s, s)),
                                       (1 << 18, [2.5, -0.0, float("nan")], lambda a, s: (a * s,))):
            _kernel_cache.interpret_max_elements = interpret
            _kernel_cache.compile_payback, _kernel_cache.compile_after = 1e9, 3
            _kernel_cache.background_compile = False
            k, ref = _kernel_cache.Kernel(fn), jax.jit(lambda a, s, fn=fn: fn(a, s))  # (jax.jit caches by function)
            for s in scalars * 3:
                for a in arrays:
                    for got, want in zip(k(a, s), ref(a, s)):
                        _bits_equal(got, want)
            assert k._cache_size() == len({(a.aval, type(s)) for a in arrays for s in scalars})
        devs = jax.devices()
        if len(devs) > 1:  # placement: an array committed to another device; an uncommitted one while the default
            # device is another (the cached scalar sits on the first array's device; jax.jit moves it where it runs)
            other = jax.device_put(np.arange(5, dtype=np.float32), devs[1])
            for got, want in zip(k(other, 2.5), ref(other, 2.5)):
                _bits_equal(got, want)
            with jax.default_device(devs[1]):
                for got, want in zip(k(arrays[0], -0.0), ref(arrays[0], -0.0)):
                    _bits_equal(got, want)
        with pytest.raises(OverflowError):
            ref(arrays[0], 2 ** 70)
        with pytest.raises(OverflowError):
            k(arrays[0], 2 ** 70)
        # a tree kernel (a backward's saved values, outputs, grads) keyed without tree_flatten: a new structure, a
        # new weak type or a nested container still gives jax.jit's result
        _kernel_cache.interpret_max_elements = 1 << 18
        _kernel_cache.compile_after = 1e9
        def body(saved, g):
            return tuple(None if x is None else x * g[0] for x in saved)

        tree, tref = _kernel_cache.Kernel(body, tree=True), jax.jit(lambda saved, g: body(saved, g))
        for saved, g in [((strong, None), (strong,)), ((None, strong), (strong,)), ((strong, None), (weak,)),
                         ((weak, strong), (strong,)), ([strong, None], (strong,)), ((strong, None), (strong,))]:
            for got, want in zip(tree(saved, g), tref(saved, g)):
                assert (got is None) == (want is None)
                if got is not None:
                    _bits_equal(got, want)
