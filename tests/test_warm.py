"""How a compiled executable is made ready: ``warm`` calls a new CPU executable once on zeros, in the compiling
thread, so that the program's first call does not pay XLA's one-time loading (Note [Warm executables] in
jgrad/runtime/_warm.py). Segments here; a kernel's background compile in tests/test_new_shapes.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad.core._dtype import x64_scope
from jgrad.runtime import _segment, _segment_run, _warm

CPU = jg.device("cpu")
pytestmark = pytest.mark.cpu_only("warming is for CPU executables; the GPU test mode compiles for the GPU")


def _compiled(fn, *specs, donate=()):
    """(the executable, the jaxpr it was compiled from)"""
    traced = jax.jit(fn, donate_argnums=donate).trace(*specs)
    return traced.lower().compile(), traced.jaxpr


class _Counting:
    """An executable that counts its calls and records the arguments it got."""

    def __init__(self, exe):
        self.exe, self.calls = exe, []

    def as_text(self):
        return self.exe.as_text()

    def __call__(self, *args):
        self.calls.append(args)
        return self.exe(*args)


def test_warm_calls_a_cpu_executable_once_on_zeros_of_its_input_specs():
    specs = [jax.ShapeDtypeStruct((3, 4), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)]
    exe, jaxpr = _compiled(lambda x, i: x * i + 1.0, *specs, donate=(0,))
    exe = _Counting(exe)
    assert _warm.warm(exe, specs, CPU, 1 << 20, jaxpr)
    (args,) = exe.calls
    assert [(a.shape, a.dtype) for a in args] == [((3, 4), np.float32), ((), np.int32)]
    assert all(not np.asarray(a).any() for a in args if not a.is_deleted())  # (a donated input is gone)
    # the executable still runs the program's own inputs afterwards
    np.testing.assert_array_equal(exe.exe(jnp.ones((3, 4), jnp.float32), jnp.int32(2)), np.full((3, 4), 3.0))


def test_warm_makes_a_dynamic_scalar_as_the_weakly_typed_number_it_was():
    with x64_scope():
        lr = jax.device_put(0.1)  # as _segment_run.device_scalar makes one
    spec = _segment_run.spec(lr)
    assert spec.weak_type
    with x64_scope():
        exe, jaxpr = _compiled(lambda x, a: x - a * x, jax.ShapeDtypeStruct((2,), jnp.float64), spec)
        exe = _Counting(exe)
        assert _warm.warm(exe, [jax.ShapeDtypeStruct((2,), jnp.float64), spec], CPU, 1 << 20, jaxpr)
    assert len(exe.calls) == 1


@pytest.mark.parametrize("why", ["loop", "nested loop", "callback", "too big", "off", "not an executable"])
def test_warm_skips_what_zeros_could_hang_or_reach_the_host_with(why):
    spec = jax.ShapeDtypeStruct((4,), jnp.float32)
    max_bytes = 1 << 20

    def loop(x):  # zeros might never end a loop that runs until its data says so
        return jax.lax.while_loop(lambda v: v.sum() < 10.0, lambda v: v + 1.0, x)

    if why == "loop":
        exe, jaxpr = _compiled(loop, spec)
    elif why == "nested loop":  # (inside a kernel's own jit, as a segment's steps are)
        exe, jaxpr = _compiled(lambda x: jax.jit(loop)(x) * 2.0, spec)
    elif why == "callback":  # a host callback's effects would happen on made-up data
        exe, jaxpr = _compiled(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((4,), jnp.float32), x), spec)
    else:
        exe, jaxpr = _compiled(lambda x: x + 1.0, spec)
        max_bytes = {"too big": 8, "off": 0}.get(why, max_bytes)
    counting = _Counting(exe)
    if why == "not an executable":  # (its call raises: warming is given up, nothing else happens)
        def broken(*a):
            counting.calls.append(a)
            raise TypeError("not callable with these")
        assert not _warm.warm(broken, [spec], CPU, max_bytes, jaxpr)
        assert len(counting.calls) == 1
        return
    assert not _warm.warm(counting, [spec], CPU, max_bytes, jaxpr)
    assert counting.calls == []


def test_warm_call_runs_the_jit_on_the_programs_own_inputs_once():
    """A kernel's warm-up (``warm_call``): its jax.jit, called on the inputs that asked for the compile (a pytree: a
    backward kernel's tuple of saved values), so that the jit's own cache knows the signature; loops run (those
    inputs end them), host callbacks, inputs over the cap and a cap of 0 do not."""
    calls = []

    def fn(pair, v):
        calls.append(1)  # (runs when jax traces it: a call that does not trace adds nothing)
        return pair[0] * pair[1] + v

    jitted = jax.jit(fn)
    args = ((jnp.ones((2, 3), jnp.float32), jnp.float32(2.0)), jnp.ones(3, jnp.float32))
    traced = jitted.trace(*args)
    traced.lower().compile()
    assert _warm.warm_call(jitted, args, 1 << 20, traced.jaxpr)
    assert jitted._cache_size() == 1  # the jit's own dispatch cache holds the signature now
    loop = jax.jit(lambda x: jax.lax.while_loop(lambda v: v.sum() < 10.0, lambda v: v + 1.0, x))
    x = jnp.ones(4, jnp.float32)
    assert _warm.warm_call(loop, (x,), 1 << 20, loop.trace(x).jaxpr)
    effect = jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((4,), jnp.float32), x))
    assert not _warm.warm_call(effect, (x,), 1 << 20, effect.trace(x).jaxpr)
    assert effect._cache_size() == 0
    add = jax.jit(lambda x: x + 1.0)
    assert not _warm.warm_call(add, (x,), 8, add.trace(x).jaxpr)
    assert not _warm.warm_call(add, (x,), 0, add.trace(x).jaxpr)
    assert not _warm.warm_call(add, (2.0,), 1 << 20, add.trace(2.0).jaxpr)  # (no array to tell the device by)
    assert add._cache_size() == 0


def test_a_background_compiled_segment_is_warm_before_its_first_run(monkeypatch):
    """The barrier's compile warms the executable before any barrier can use it, and results stay eager mode's."""
    warmed = []
    real = _segment_run.warm
    monkeypatch.setattr(_segment_run, "warm", lambda *a: warmed.append(real(*a)) or warmed[-1])
    monkeypatch.setattr(_segment, "compile_payback", 0)
    x = jg.tensor(np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32), requires_grad=True)

    def step():
        y = (x.tanh() * 2.0 + x.sin()).sum()
        y.backward()
        g = x.grad.clone()
        x.grad = None
        return y.item(), g.numpy()

    eager = step()
    jg.graphs.segment_cache_clear()
    with jg.execution_mode("auto"):
        for _ in range(4):
            got = step()
            _segment.wait_compiles()
    info = jg.graphs.segment_cache_info()
    assert info.compiles >= 1 and info.compiled_runs >= 1
    assert warmed and all(warmed)
    assert np.isclose(got[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], eager[1], rtol=1e-6)
