"""interop.jax: to_jax/from_jax zero copy, functionalize under jit/grad/vmap against jax.grad of the same
math written in jax.numpy, and compare_grad (including that it catches a wrong gradient)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from interop.jax import GradReport, compare_grad, from_jax, functionalize, to_jax


def ptr(x):
    return (x._data if isinstance(x, jg.Tensor) else x).unsafe_buffer_pointer()


RNG = np.random.default_rng(1)
X = jnp.asarray(RNG.standard_normal((5, 4)))
W = jnp.asarray(RNG.standard_normal((4, 3)) * 0.5)
B = jnp.asarray(RNG.standard_normal(3) * 0.1)


# ---- arrays ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.complex64,
                                   jnp.complex128, jnp.uint8, jnp.int8, jnp.int16, jnp.int32, jnp.int64,
                                   jnp.bool_])
def test_to_from_jax_zero_copy(dtype):
    a = jnp.arange(6).reshape(2, 3).astype(dtype)
    t = from_jax(a)
    assert ptr(t) == ptr(a) and t.dtype.np == a.dtype and t.shape == (2, 3)
    assert to_jax(t) is t._data
    assert ptr(to_jax(t)) == ptr(a)


def test_to_from_jax_zero_d_empty_and_devices():
    for a in (jnp.asarray(3.5), jnp.zeros((0, 2))):
        t = from_jax(a)
        assert t.shape == a.shape and to_jax(t).shape == a.shape
    a = jax.device_put(jnp.arange(3.0), jax.devices("cpu")[2])
    t = from_jax(a)
    assert t.device == jg.device("cpu:2") and ptr(t) == ptr(a)
    u = from_jax(a, device="cpu:1")
    assert u.device == jg.device("cpu:1") and ptr(u) != ptr(a)
    with pytest.raises(BufferError):
        from_jax(a, device="cpu:1", copy=False)
    assert ptr(from_jax(a, copy=True)) != ptr(a)
    p = from_jax(jnp.ones(2), requires_grad=True)
    assert p.requires_grad and p.is_leaf
    with pytest.raises(TypeError):
        from_jax(np.ones(2))
    with pytest.raises(TypeError):
        from_jax(jg.ones(2))


def test_to_jax_detaches_and_is_immutable_from_jgrad():
    t = jg.arange(4.0, requires_grad=True) * 1
    a = to_jax(t)
    assert isinstance(a, jax.Array)
    u = t.detach()
    u.add_(1)                       # rebinds u's storage: a keeps its values
    np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))


@pytest.mark.x64  # its jax reference is float64
def test_from_jax_inside_jit_traces_jgrad_ops():
    @jax.jit
    def f(a):
        t = from_jax(a)
        return to_jax_traced(jg.tanh(t) * 2 + 1)

    def to_jax_traced(t):
        return t._data

    np.testing.assert_allclose(f(X), np.tanh(np.asarray(X)) * 2 + 1, rtol=1e-12)


# ---- functionalize -----------------------------------------------------------------------------------------
def mlp_jg(x, w, b):
    h = jg.tanh(x @ w + b)
    return (h * h).mean() + jg.relu(h).sum() * 0.1


def mlp_jnp(x, w, b):
    h = jnp.tanh(x @ w + b)
    return (h * h).mean() + jax.nn.relu(h).sum() * 0.1


@pytest.mark.x64  # its jax reference is float64
def test_functionalize_values_and_grad_eager():
    f = functionalize(mlp_jg)
    np.testing.assert_allclose(f(X, W, B), mlp_jnp(X, W, B), rtol=1e-12)
    got = jax.grad(f, argnums=(0, 1, 2))(X, W, B)
    want = jax.grad(mlp_jnp, argnums=(0, 1, 2))(X, W, B)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


@pytest.mark.x64  # its jax reference is float64
def test_functionalize_under_jit():
    f = functionalize(mlp_jg)
    np.testing.assert_allclose(jax.jit(f)(X, W, B), mlp_jnp(X, W, B), rtol=1e-12)
    got = jax.jit(jax.grad(f, argnums=(1, 2)))(X, W, B)
    want = jax.grad(mlp_jnp, argnums=(1, 2))(X, W, B)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
    v, g = jax.jit(jax.value_and_grad(f, argnums=1))(X, W, B)
    np.testing.assert_allclose(v, mlp_jnp(X, W, B), rtol=1e-12)


@pytest.mark.x64  # its jax reference is float64
def test_functionalize_under_vmap():
    f = functionalize(mlp_jg)
    xs = jnp.stack([X, 2 * X, -X])
    np.testing.assert_allclose(jax.vmap(f, in_axes=(0, None, None))(xs, W, B),
                               jax.vmap(mlp_jnp, in_axes=(0, None, None))(xs, W, B), rtol=1e-12)
    # per-example gradients: vmap(grad), and jit(vmap(grad))
    pe = jax.vmap(jax.grad(f, argnums=1), in_axes=(0, None, None))
    want = jax.vmap(jax.grad(mlp_jnp, argnums=1), in_axes=(0, None, None))(xs, W, B)
    np.testing.assert_allclose(pe(xs, W, B), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(jax.jit(pe)(xs, W, B), want, rtol=1e-10, atol=1e-12)
    # grad of a vmapped loss: the unbatched weight's cotangent is summed over the batch
    loss = lambda w: jax.vmap(f, in_axes=(0, None, None))(xs, w, B).sum()  # noqa: E731
    loss_ref = lambda w: jax.vmap(mlp_jnp, in_axes=(0, None, None))(xs, w, B).sum()  # noqa: E731
    np.testing.assert_allclose(jax.grad(loss)(W), jax.grad(loss_ref)(W), rtol=1e-10, atol=1e-12)


def test_functionalize_higher_order_and_jacrev():
    f = functionalize(lambda x: (jg.sin(x) * x).sum())
    ref = lambda x: (jnp.sin(x) * x).sum()  # noqa: E731
    x = X[0]
    np.testing.assert_allclose(jax.hessian(f)(x), jax.hessian(ref)(x), rtol=1e-10, atol=1e-12)
    g = functionalize(lambda x: jg.exp(x) * 2)
    np.testing.assert_allclose(jax.jacrev(g)(x), jax.jacrev(lambda x: jnp.exp(x) * 2)(x), rtol=1e-12)
    with pytest.raises(TypeError, match="custom_vjp"):       # forward mode is a documented limit
        jax.jvp(f, (x,), (x,))


@pytest.mark.x64  # its jax reference is float64
def test_functionalize_runs_hooks_and_custom_functions():
    def with_hook(x):
        y = x * 3
        y.register_hook(lambda g: g * 2)       # jgrad semantics: the gradient through y is doubled
        return y.sum()

    for tr in (lambda f: f, jax.jit):
        np.testing.assert_allclose(tr(jax.grad(functionalize(with_hook)))(X), np.full(X.shape, 6.0))

    class Cube(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x * x

    f = functionalize(lambda x: Cube.apply(x).sum())
    want = jax.grad(lambda x: (x ** 3).sum())(X)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(X), want, rtol=1e-12)


def test_functionalize_fn_that_differentiates_internally():
    def grad_norm(x):
        y = (x ** 3).sum()
        (g,) = jg.autograd.grad(y, x, create_graph=True)
        return (g * g).sum()

    ref = lambda x: (jax.grad(lambda z: (z ** 3).sum())(x) ** 2).sum()  # noqa: E731
    f = functionalize(grad_norm)
    # jgrad adds a small float sum in a fixed tree on the CPU (Note [Tree sums]), jnp.sum in XLA's order: a last bit
    np.testing.assert_allclose(f(X), ref(X), rtol=1e-12 if X.dtype == jnp.float64 else 1e-6)
    np.testing.assert_allclose(jax.jit(jax.grad(f))(X), jax.grad(ref)(X), rtol=1e-10)


def test_functionalize_pytrees_multiple_outputs_ints_and_static_kwargs():
    def fn(params, idx, *, scale):
        h = params["w"] * params["b"] * scale
        return {"loss": h.sum(), "h": h, "idx": idx + 1}

    f = functionalize(fn)
    p = {"w": X, "b": X + 1}
    out = f(p, jnp.arange(3), scale=2.0)
    assert out["idx"].dtype == jnp.arange(3).dtype
    np.testing.assert_array_equal(out["idx"], np.arange(3) + 1)

    def loss(p):
        o = f(p, jnp.arange(3), scale=2.0)
        return o["loss"] + (o["h"] ** 2).sum()

    def loss_ref(p):
        h = p["w"] * p["b"] * 2.0
        return h.sum() + (h ** 2).sum()

    got, want = jax.jit(jax.grad(loss))(p), jax.grad(loss_ref)(p)
    for k in p:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-12)
    # a python scalar argument is differentiable too; integer arguments get no gradient
    gx, gc = jax.grad(functionalize(lambda x, c: (x * c).sum()), argnums=(0, 1))(X, 2.0)
    np.testing.assert_allclose(gx, np.full(X.shape, 2.0))
    np.testing.assert_allclose(gc, float(X.sum()), rtol=1e-10, atol=1e-12)


def test_functionalize_identity_and_unused_inputs():
    f = functionalize(lambda x, y: x)
    gx, gy = jax.grad(lambda x, y: f(x, y).sum(), argnums=(0, 1))(X, W)
    np.testing.assert_array_equal(gx, np.ones(X.shape))
    np.testing.assert_array_equal(gy, np.zeros(W.shape))


def test_functionalize_accepts_tensors_and_float32():
    f = functionalize(lambda x: (x * x).sum())
    t = jg.tensor(np.asarray(X, np.float32), requires_grad=True)
    assert float(f(t)) == pytest.approx(float((np.asarray(X, np.float32) ** 2).sum()), rel=1e-6)
    g = jax.grad(f)(X.astype(jnp.float32))
    assert g.dtype == jnp.float32
    np.testing.assert_allclose(g, 2 * np.asarray(X, np.float32), rtol=1e-6)


def test_functionalize_untraceable_fn_works_eagerly_only():
    def with_item(x):
        scale = 2.0 if x.sum().item() > -1e9 else 1.0
        return (x * x).sum() * scale

    f = functionalize(with_item)
    np.testing.assert_allclose(jax.grad(f)(X), 4 * np.asarray(X), rtol=1e-12)
    with pytest.raises(jax.errors.ConcretizationTypeError):
        jax.jit(jax.grad(f))(X)


# ---- compare_grad ------------------------------------------------------------------------------------------
def mlp2_jg(x, w1, b1, w2, b2, y):
    h = jg.relu(x @ w1 + b1)
    out = jg.tanh(h) @ w2 + b2
    return ((out - y) ** 2).mean()


def mlp2_jnp(x, w1, b1, w2, b2, y):
    h = jax.nn.relu(x @ w1 + b1)
    out = jnp.tanh(h) @ w2 + b2
    return ((out - y) ** 2).mean()


def mlp_args(dtype=np.float64):
    r = np.random.default_rng(3)
    return [r.standard_normal(s).astype(dtype) * sc for s, sc in
            (((8, 4), 1.0), ((4, 16), 0.5), ((16,), 0.1), ((16, 2), 0.3), ((2,), 0.1), ((8, 2), 1.0))]


def test_compare_grad_on_an_mlp_against_jax_fn():
    rep = compare_grad(mlp2_jg, *mlp_args(), jax_fn=mlp2_jnp)
    assert isinstance(rep, GradReport) and rep.ok, str(rep)
    assert [r.name for r in rep.rows] == ["x", "w1", "b1", "w2", "b2", "y"]
    for r in rep.rows:
        assert r.abs_jax < 1e-12 and r.abs_fd < 1e-7 and r.rel_fd < 1e-5
    assert rep.value_err < 1e-12
    assert rep.reference == "jax.grad(jax_fn)"
    rep.assert_ok()
    text = str(rep)
    for word in ("input", "shape", "abs err vs jax", "rel err vs fd", "w1", "(4, 16)", "float64"):
        assert word in text
    htm = rep._repr_html_()
    assert htm.startswith("<div") and "<table>" in htm and "<td>w1</td>" in htm
    assert rep["w2"].shape == (16, 2) and rep[0].name == "x"


@pytest.mark.x64  # its jax reference is float64
def test_compare_grad_functionalize_reference_float32_and_tensors():
    args = [jg.tensor(a) for a in mlp_args(np.float32)]
    rep = compare_grad(mlp2_jg, *args)
    assert rep.ok, str(rep)
    assert rep.reference == "jax.grad(functionalize(fn))"
    assert all(r.dtype == "float32" for r in rep.rows)


def test_compare_grad_non_scalar_output_and_subsampled_fd():
    rep = compare_grad(lambda x: jg.sin(x) * x, np.linspace(-2, 2, 3000).reshape(60, 50), fd_max_elements=100,
                       jax_fn=lambda x: jnp.sin(x) * x)
    assert rep.ok, str(rep)
    assert rep.cotangent == "random"
    assert "finite differences on 100 of 3000 elements" in str(rep)
    rep = compare_grad(lambda x: jg.sin(x).sum(), np.ones(3), fd=False)
    assert rep.ok and rep.rows[0].abs_fd is None and "fd=False" in str(rep)


def test_compare_grad_catches_a_wrong_backward():
    class BadSquare(jg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x          # wrong: should be 2x

    x = np.linspace(0.5, 1.5, 6)
    rep = compare_grad(lambda x: BadSquare.apply(x).sum(), x, jax_fn=lambda x: (x * x).sum())
    assert not rep.ok and not rep.rows[0].ok_jax and not rep.rows[0].ok_fd
    assert "MISMATCH" in str(rep) and "NO" in str(rep)
    with pytest.raises(AssertionError, match="gradient mismatch"):
        rep.assert_ok()
    # without jax_fn, jax.grad goes through jgrad's (wrong) backward; finite differences still catch it
    rep2 = compare_grad(lambda x: BadSquare.apply(x).sum(), x)
    assert rep2.rows[0].ok_jax and not rep2.rows[0].ok_fd and not rep2.ok


def test_compare_grad_errors():
    with pytest.raises(ValueError, match="no floating"):
        compare_grad(lambda i: i * 2, np.arange(3))
    with pytest.raises(TypeError, match="one Tensor"):
        compare_grad(lambda x: (x, x), np.ones(2))
