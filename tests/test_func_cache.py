"""``jgrad.func``'s trace cache: a repeated transform call reuses its trace, and is never stale.

Each check compares a call against JAX's transform of the same function in jax.numpy (the values a fresh
trace gives), and counts traces through ``jgrad.func.trace_cache_info()``: a call the cache serves adds a hit,
not a trace. What must be seen on the next call: a closure tensor updated in place (directly or through a
view), a rebound closure variable, a rebound global, a module's rebound parameter and its ``training`` flag,
new argument tensors (differentiated or not) and a new input shape. What must never be cached: a trace that
drew random numbers, read a value on the host, ran a module hook or a backward pass.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import func as F

pytestmark = pytest.mark.one_execution_mode  # the transforms trace in eager mode whatever the mode is
TOL = dict(rtol=1e-5, atol=1e-5)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a.numpy() if isinstance(a, jg.Tensor) else a), np.asarray(b), **TOL)


def counts():
    info = F.trace_cache_info()
    return info["traces"], info["hits"]


class Calls:
    """Counts the traces (or hits) a block of calls added."""

    def __enter__(self):
        self.start = counts()
        return self

    def __exit__(self, *exc):
        end = counts()
        self.traces, self.hits = end[0] - self.start[0], end[1] - self.start[1]


SCALE = 2.0  # a global the functions below read


def _loss_jx(w, b, x, scale):
    return (jnp.tanh(x @ w + b) ** 2).sum() * scale


@jax.jit
def _per_sample_ref(w, b, xs, scale):
    return jax.vmap(jax.grad(_loss_jx), in_axes=(None, None, 0, None))(w, b, xs, scale)


def test_cached_calls_match_jax_and_see_every_change():
    global SCALE
    F.clear_trace_cache()
    w, b = jg.randn(4, 3), jg.randn(3)
    xs = jg.randn(5, 4)

    def make(bias):
        def loss(wp, x):
            return ((x @ wp + bias).tanh() ** 2).sum() * SCALE
        return F.vmap(F.grad(loss), in_dims=(None, 0))

    per = make(b)

    def ref(wv, bv, xv, scale=SCALE):
        return _per_sample_ref(wv.numpy(), bv.numpy(), xv.numpy(), scale)

    with Calls() as c:
        first = per(w, xs)
        second = per(w, xs)
    assert (c.traces, c.hits) == (1, 1)
    close(first, ref(w, b, xs))
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    # a closure tensor updated in place (as an optimizer step does), and one written through a view
    with Calls() as c:
        with jg.no_grad():
            b.mul_(2)
        close(per(w, xs), ref(w, b, xs))
        with jg.no_grad():
            b[:2].add_(1.0)
        close(per(w, xs), ref(w, b, xs))
    assert (c.traces, c.hits) == (0, 2)
    # new argument tensors, a new input shape, a new closure (the same code: one trace per structure)
    w2, xs2, b2 = jg.randn(4, 3), jg.randn(7, 4), jg.randn(3)
    with Calls() as c:
        close(per(w2, xs), ref(w2, b, xs))
        close(per(w2, xs2), ref(w2, b, xs2))
        close(make(b)(w, xs), ref(w, b, xs))   # made again, same closure: served by the cache
        close(make(b2)(w, xs), ref(w, b2, xs))  # another closure tensor: traced
    assert (c.traces, c.hits) == (2, 2)
    # a rebound global
    try:
        SCALE = 3.0
        with Calls() as c:
            close(per(w, xs), ref(w, b, xs, 3.0))
        assert c.traces == 1
    finally:
        SCALE = 2.0
    # the HVP (jvp of grad, forward over reverse) and a Jacobian, cached, against JAX's
    v = jg.randn(4, 3)
    hvp = lambda: F.jvp(F.grad(lambda wp: ((xs @ wp + b).tanh() ** 2).sum()), (w,), (v,))[1]  # noqa: E731
    ref_hvp = jax.jit(lambda wp, bv, xv, t: jax.jvp(jax.grad(lambda q: _loss_jx(q, bv, xv, 1.0)), (wp,), (t,))[1])(
        w.numpy(), b.numpy(), xs.numpy(), v.numpy())
    jac = F.jacrev(lambda a, bb: (a.sin() * bb).cumsum(0))

    def ref_jac(a, bb):  # d cumsum(sin(a) * bb)_i / d a_k = [k <= i] cos(a_k) bb_k
        return np.tril(np.ones((4, 4))) * (np.cos(a) * bb)[None, :]

    with Calls() as c:
        close(hvp(), ref_hvp)
        close(hvp(), ref_hvp)
        close(jac(xs[0], xs[1]), ref_jac(xs[0].numpy(), xs[1].numpy()))
        close(jac(xs[2], xs[3]), ref_jac(xs[2].numpy(), xs[3].numpy()))  # a non-differentiated argument too
    assert (c.traces, c.hits) == (2, 2)
    # the same tensor twice is another key than two tensors (each argument is read from its own position)
    g2 = F.grad(lambda a, bb: (a * bb).sum())
    r0, r1, r2, r3 = xs[0], xs[1], xs[2], xs[3]
    with Calls() as c:
        close(g2(r0, r1), r1.numpy())
        close(g2(r2, r2), r2.numpy())
        close(g2(r3, r1), r1.numpy())
        close(g2(r3, r3), r3.numpy())
    assert (c.traces, c.hits) == (2, 2)
    # a closure view (its base written in place), aux outputs and vjp's pullback, served by the cache
    tail = b[1:]
    gv = F.grad_and_value(lambda a: ((a[:2] * tail).sum(), {"t": a * 2, "k": "aux"}), has_aux=True)
    pull_of = lambda a: F.vjp(lambda q: q.sin() * tail, a)  # noqa: E731
    with Calls() as c:
        for r in (r0, r1):  # the second call reads the view after a write to its base
            g, (val, aux) = gv(r)
            close(g, np.concatenate([b.numpy()[1:], [0.0, 0.0]]))
            close(val, (r.numpy()[:2] * b.numpy()[1:]).sum())
            close(aux["t"], 2 * r.numpy())
            assert aux["k"] == "aux"
            out, pull = pull_of(r[:2])
            close(out, np.sin(r.numpy()[:2]) * b.numpy()[1:])
            close(pull(jg.ones(2))[0], np.cos(r.numpy()[:2]) * b.numpy()[1:])
            with jg.no_grad():
                b.add_(1.0)
    assert (c.traces, c.hits) == (3, 3)  # grad_and_value, vjp and its pullback
    # tensors the function makes from the closure's: a detached alias, a slice, a constant (stays constant)
    inner = F.grad(lambda a: (a * w.detach()[0] * w[1:2, 0] * jg.tensor([1.0, 2.0, 3.0])).sum())
    with Calls() as c:
        for _ in range(2):
            close(inner(b), w.numpy()[0] * w.numpy()[1, 0] * np.array([1.0, 2.0, 3.0]))
            with jg.no_grad():
                w.mul_(-1.5)
    assert (c.traces, c.hits) == (1, 1)
    F.clear_trace_cache()
    assert F.trace_cache_info()["size"] == 0
    with Calls() as c:
        per(w, xs)
    assert c.traces == 1


def test_modules_and_what_is_never_cached():
    m = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.Dropout(0.5), jg.nn.Linear(4, 1))
    m.eval()
    x = jg.randn(6, 3)
    per = F.vmap(F.grad(lambda a: m(a[None]).sum()), randomness="different")

    def ref():  # in eval mode the model is affine: every example's gradient is W2 @ W0
        g = m[2].weight.detach().numpy() @ m[0].weight.detach().numpy()
        return np.broadcast_to(g, (6, 3))

    with Calls() as c:
        close(per(x), ref())
        close(per(x), ref())
        with jg.no_grad():  # an optimizer-like step on the module's own parameters
            m[0].weight.sub_(0.1 * jg.ones(4, 3))
        close(per(x), ref())
        m[0].weight = jg.nn.Parameter(jg.randn(4, 3))  # a rebound parameter
        close(per(x), ref())
    assert (c.traces, c.hits) == (2, 2)
    # a module's training flag read by its forward (no randomness): each mode its own trace
    class Scale(jg.nn.Module):
        def forward(self, a):
            return a * (2.0 if self.training else 3.0)

    sc = Scale()
    gs = F.grad(lambda a: sc(a).sum())
    with Calls() as c:
        close(gs(x), np.full((6, 3), 2.0))
        sc.eval()
        close(gs(x), np.full((6, 3), 3.0))
        sc.train()
        close(gs(x), np.full((6, 3), 2.0))
    assert (c.traces, c.hits) == (2, 1)
    # training mode: dropout draws inside vmap ('different'): new values on every call, never cached
    m.train()
    with Calls() as c:
        a, b = per(x).numpy(), per(x).numpy()
    assert c.traces == 2 and c.hits == 0 and not np.array_equal(a, b)
    # a value read on the host while tracing, and a module hook: never cached
    n = jg.tensor(2.0)
    g = F.grad(lambda a: a.sum() * float(n))
    with Calls() as c:
        close(g(x), np.full((6, 3), 2.0))
        n.fill_(5.0)
        close(g(x), np.full((6, 3), 5.0))
    assert (c.traces, c.hits) == (2, 0)
    # a backward pass inside the trace (is_grads_batched runs the engine under vmap): it runs on every call
    xg = jg.randn(3, requires_grad=True)
    y = (xg * xg).sum()
    hooked = []
    xg.register_hook(lambda grad: hooked.append(1))
    go = jg.ones(2)
    with Calls() as c:
        for _ in range(2):
            gb = jg.autograd.grad(y, xg, go, retain_graph=True, is_grads_batched=True)[0]
            close(gb, np.broadcast_to(2 * xg.detach().numpy(), (2, 3)))
    assert c.hits == 0 and len(hooked) == 2
    m.eval()
    seen = []
    h = m[0].register_forward_hook(lambda mod, i, o: seen.append(1))
    try:
        with Calls() as c:
            per(x), per(x)
        assert c.traces == 2 and len(seen) == 2
    finally:
        h.remove()


G_TENSOR = None  # a global the function below reads: rebound to another tensor in one case


class _Holder:
    def __init__(self):
        self.s = 2.0

    def loss(self, a):
        return (a * self.s).sum()


def _cases():
    """(name, loss of ``a`` whose gradient is ``scale * ones``, a change after which the scale is 3.0, whether the
    change must trace again): each change reaches what the trace cache's first-level check remembers."""
    cases = []

    def cell():
        s = 2.0

        def f(a):
            return (a * s).sum()

        def change():
            nonlocal s
            s = 3.0
        return f, change
    cases.append(("closure cell rebound", cell, True))

    def cell_tensor():
        box = [jg.tensor(2.0)]
        t = box[0]

        def f(a):
            return (a * t).sum()

        def change():
            nonlocal t
            t = jg.tensor(3.0)
        return f, change
    cases.append(("closure cell rebound to another tensor", cell_tensor, True))

    def global_tensor():
        global G_TENSOR
        G_TENSOR = jg.tensor(2.0)

        def f(a):
            return (a * G_TENSOR).sum()

        def change():
            global G_TENSOR
            G_TENSOR = jg.tensor(3.0)
        return f, change
    cases.append(("global rebound to another tensor", global_tensor, True))

    def mapping():
        cfg = {"s": 2.0}
        return (lambda a: (a * cfg["s"]).sum()), (lambda: cfg.__setitem__("s", 3.0))
    cases.append(("dict mutated in place", mapping, True))

    def renamed_key():
        cfg = {"x": 3.0, "s": 2.0}

        def f(a):
            return (a * cfg.get("s", 3.0)).sum()

        def change():
            cfg["t"] = cfg.pop("s")  # the same values (the same objects) in the same order, another key
        return f, change
    cases.append(("dict key replaced", renamed_key, True))

    def int_key():
        cfg = {1: 2.0}

        def f(a):
            return (a * cfg.get(1, 3.0)).sum()

        def change():
            cfg[2] = cfg.pop(1)
        return f, change
    cases.append(("dict key (not a string) replaced", int_key, True))

    def seq():
        lst = [2.0]
        return (lambda a: (a * lst[0]).sum()), (lambda: lst.__setitem__(0, 3.0))
    cases.append(("list mutated in place", seq, True))

    def array():
        arr = np.array([2.0], dtype=np.float32)
        return (lambda a: (a * float(arr[0])).sum()), (lambda: arr.__setitem__(0, 3.0))
    cases.append(("small NumPy array written", array, True))

    def attribute():
        obj = _Holder()
        return (lambda a: (a * obj.s).sum()), (lambda: setattr(obj, "s", 3.0))
    cases.append(("object attribute rebound", attribute, True))

    def bound_method():
        obj = _Holder()
        return obj.loss, (lambda: setattr(obj, "s", 3.0))
    cases.append(("bound method's instance attribute", bound_method, True))

    def defaults():
        def f(a, s=2.0):
            return (a * s).sum()
        return f, (lambda: setattr(f, "__defaults__", (3.0,)))
    cases.append(("defaults replaced", defaults, True))

    def kwdefaults():
        def f(a, *, s=2.0):
            return (a * s).sum()
        return f, (lambda: f.__kwdefaults__.__setitem__("s", 3.0))
    cases.append(("keyword defaults mutated in place", kwdefaults, True))

    def code():
        def f(a):
            return (a * 2.0).sum()

        def g(a):
            return (a * 3.0).sum()
        return f, (lambda: setattr(f, "__code__", g.__code__))
    cases.append(("code replaced", code, True))

    def partial():
        import functools
        p = functools.partial(lambda a, s: (a * s).sum(), s=2.0)
        return p, (lambda: p.keywords.__setitem__("s", 3.0))
    cases.append(("partial's keywords mutated", partial, True))

    def set_data():
        t = jg.tensor(2.0)
        return (lambda a: (a * t).sum()), (lambda: setattr(t, "data", jg.tensor(3.0)))
    cases.append(("tensor.data replaced (same shape: re-read, no trace)", set_data, False))

    def dtype_data():
        t = jg.tensor(2.0)
        return (lambda a: (a * t).sum()), (lambda: setattr(t, "data", jg.tensor(3.0, dtype=jg.float64)))
    cases.append(("tensor.data replaced by another dtype", dtype_data, True))

    def submodule():
        class Mul(jg.nn.Module):
            def __init__(self, s):
                super().__init__()
                self.s = jg.nn.Parameter(jg.tensor(s))

            def forward(self, a):
                return a * self.s
        m = jg.nn.Sequential(Mul(2.0))
        return (lambda a: m(a).sum()), (lambda: m.__setitem__(0, Mul(3.0)) if hasattr(m, "__setitem__")
                                        else setattr(m, "0", Mul(3.0)))
    cases.append(("submodule replaced", submodule, True))
    return cases


def test_first_level_check_sees_every_change():
    """The key's first-level check (``_guards``) reuses the last walk of the function only when nothing it read
    changed: each kind of change below must give the new gradient (3.0) on the next call."""
    a = jg.ones(3)
    for name, make, traces in _cases():
        f, change = make()
        g = F.grad(f)
        with Calls() as c:
            close(g(a), np.full(3, 2.0))
            close(g(a), np.full(3, 2.0))
        assert (c.traces, c.hits) == (1, 1), name
        change()
        with Calls() as c:
            assert np.allclose(g(a).numpy(), 3.0), name
            close(g(a), np.full(3, 3.0))
        assert (c.traces, c.hits) == ((1, 1) if traces else (0, 2)), name
    # a requires_grad flag flipped on a closure tensor is another key (the result is the same)
    t = jg.tensor(2.0)
    g = F.grad(lambda a: (a * t).sum())
    with Calls() as c:
        g(a), g(a)
        t.requires_grad_(True)
        close(g(a), np.full(3, 2.0))
    assert (c.traces, c.hits) == (2, 1)


def test_first_level_check_never_matches_a_new_object_at_an_old_address():
    """A tensor replaced by a new one (which may be allocated where the old one was) is read anew."""
    d = {"w": jg.tensor([1.0, 2.0])}
    g = F.grad(lambda a: (a * d["w"]).sum())
    a = jg.ones(2)
    for k in range(4):
        close(g(a), [1.0 + k, 2.0 + k])
        d["w"] = None
        d["w"] = jg.tensor([2.0 + k, 3.0 + k])


class _Slot:
    __slots__ = ("view",)  # the key walks an object without a __dict__ by identity only: it never reads the view


@pytest.mark.parametrize("requires_grad", [False, True])
def test_stale_view_read_inside_a_transform_keeps_a_concrete_array(requires_grad):
    """A view made stale by a write to its base, first read inside a transform (its key did not read it), is
    regenerated in the trace, and made stale again when the trace ends: it never keeps a tracer, and reads
    its base's value afterwards."""
    base_np = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    base = jg.tensor(base_np, requires_grad=requires_grad)
    holder = _Slot()
    holder.view = base[:, 1:]
    g = F.grad(lambda a: (a * holder.view).sum())
    calls = Calls().__enter__()
    for scale in (2.0, -3.0):
        with jg.no_grad():
            base.mul_(scale)  # the view is stale now
        base_np = base_np * scale
        close(g(jg.ones(2, 2)), base_np[:, 1:])
        assert not isinstance(holder.view._data, jax.core.Tracer)  # stale again, or concrete
        np.testing.assert_array_equal((holder.view * 1.0).detach().numpy(), base_np[:, 1:])
        np.testing.assert_array_equal(holder.view.detach().numpy(), base_np[:, 1:])
        assert isinstance(holder.view._data, jax.Array) and not isinstance(holder.view._data, jax.core.Tracer)
    calls.__exit__()
    assert (calls.traces, calls.hits) == (1, 1)  # the second call re-reads the view's storage


def test_first_level_record_lives_with_the_transform():
    """The record of the function's last walk is the transform's: a tensor the function no longer reaches is
    freed after the next call, and everything once the transformed function is gone (no global table; no
    cycle either: reference counting frees them)."""
    import weakref

    class Box:
        pass

    holder = Box()
    holder.w = jg.tensor([1.0, 2.0])
    old = weakref.ref(holder.w)
    g = F.grad(lambda a: (a * holder.w).sum())
    a = jg.ones(2)
    close(g(a), [1.0, 2.0])
    holder.w = jg.tensor([3.0, 4.0])
    close(g(a), [3.0, 4.0])
    assert old() is None
    last = weakref.ref(holder.w)
    holder.w = None  # only the record of the last call holds the tensor now
    assert last() is not None
    del g
    assert last() is None


def test_a_repeated_call_runs_its_executable_without_a_key():
    """A transform's call that repeats its last one (same argument kinds, nothing the function reads changed)
    runs the cached executable at once (``trace_cache_info()["kept"]``, jgrad/func/_fastcall.py); each kind of
    change below takes the full path instead, and every result equals JAX's."""

    class Scaled(jg.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = jg.nn.Linear(4, 3)

        def forward(self, a):
            return self.lin(a) * (2.0 if self.training else 3.0)

    m = Scaled()
    params = {k: v.detach() for k, v in m.named_parameters()}

    def loss(p, xb, k):
        return (F.functional_call(m, p, (xb[None],)).tanh() ** 2).sum() * k

    def ref(xs, k, scale):
        w, b = params["lin.weight"].numpy(), params["lin.bias"].numpy()

        def jl(pw, pb, xb):
            return (jnp.tanh((xb[None] @ pw.T + pb) * scale) ** 2).sum() * k
        gw, gb = jax.vmap(jax.grad(jl, argnums=(0, 1)), in_axes=(None, None, 0))(w, b, xs.detach().numpy())
        return {"lin.weight": gw, "lin.bias": gb}

    per = F.vmap(F.grad(loss), in_dims=(None, 0, None))
    xs, xs2 = jg.randn(5, 4), jg.randn(5, 4)

    def check(out, xv, k, scale):
        for name, r in ref(xv, k, scale).items():
            close(out[name], r)

    def kept():
        return F.trace_cache_info()["kept"]

    def call(xv, k=1.0, scale=2.0, expect_kept=True):
        before = kept()
        check(per(params, xv, k), xv, k, scale)
        assert kept() - before == int(expect_kept)

    call(xs, expect_kept=False)  # traced
    call(xs)                     # the same call: kept
    call(xs2)                    # other tensors of the same kind: kept, their values read
    with jg.no_grad():
        params["lin.bias"].add_(0.5)  # an argument updated in place: kept, its new value read
    call(xs)
    call(xs, k=2.0, expect_kept=False)  # a number argument by value
    call(xs, k=2.0)
    m.eval()  # the function reads the module's training flag
    call(xs, k=2.0, scale=3.0, expect_kept=False)
    call(xs, k=2.0, scale=3.0)
    m.train()
    call(xs[:3], expect_kept=False)  # a new shape
    call(xs, expect_kept=False)      # back to the old one: full path (cache hit), kept again after
    call(xs)
    xs.requires_grad_(True)
    call(xs, expect_kept=False)
    F.clear_trace_cache()
    call(xs, expect_kept=False)
    with jg.autocast("cpu", dtype=jg.bfloat16, enabled=False):  # an autocast region: never cached
        before = F.trace_cache_info()["hits"]
        per(params, xs, 1.0)
        assert F.trace_cache_info()["hits"] == before
    call(xs, expect_kept=False)  # the uncached call was the last one: full path, kept again after
    call(xs)
    # grad's own kept call, with aux outputs restored, a Jacobian's, and jvp's of a transform (an HVP)
    gv = F.grad(lambda a: ((a * 2).sum(), {"a": a.sin(), "tag": 1}), has_aux=True)
    jr = F.jacrev(lambda a: a.sin() * a)
    g3 = F.grad(lambda a: (a ** 3).sum())
    for n in range(3):
        before = kept()
        a, t = jg.randn(3), jg.randn(3)
        g, aux = gv(a)
        close(g, np.full(3, 2.0))
        close(aux["a"], np.sin(a.numpy()))
        assert aux["tag"] == 1
        close(jr(a), np.diag(np.cos(a.numpy()) * a.numpy() + np.sin(a.numpy())))
        grad_a, hvp = F.jvp(g3, (a,), (t,))
        close(grad_a, 3 * a.numpy() ** 2)
        close(hvp, 6 * a.numpy() * t.numpy())
        assert kept() - before == (3 if n else 0)
