"""``jgrad.autograd.forward_ad``: dual tensors' tangents against ``jax.jvp`` of the same functions in jax.numpy and
against finite differences, views and in-place ops as PyTorch's (Note [Forward Grad View/inplace]), forward over
reverse and reverse over forward, custom Functions' ``jvp``, levels and PyTorch's errors.

The scenarios of PyTorch's ``TestAutogradForwardMode`` (test/test_autograd.py) are ported as scenarios: default
level, nesting, packing and unpacking (memory and version shared, backward through them, ``detach``), the
in-place updates of differentiable and non-differentiable views, and cleanup on exit.
"""
import gc
import os
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
import jgrad.autograd.forward_ad as fwAD
from jgrad.runtime import _dispatch
from jgrad.nn import functional as NF

one_mode = pytest.mark.one_execution_mode
TOL = dict(rtol=2e-5, atol=2e-5)


def close(a, b, **tol):
    np.testing.assert_allclose(np.asarray(a.detach().numpy() if isinstance(a, jg.Tensor) else a), np.asarray(b),
                               **(tol or TOL))


def _conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _inplace_jg(a, b):
    c = a.clone()
    c.mul_(b)
    c[0].add_(1.0)       # through a view: the base's tangent is written
    c.t()[1].sin_()      # a column, through a transpose
    return c


def _inplace_jnp(a, b):
    c = a * b
    c = c.at[0].add(1.0)
    return c.at[:, 1].set(jnp.sin(c[:, 1]))


# (jgrad function, the same in jax.numpy, input shapes)
CASES = {
    "elementwise": (lambda a, b: (a.sin() * b.exp() + a / (1 + b ** 2)).tanh(),
                    lambda a, b: jnp.tanh(jnp.sin(a) * jnp.exp(b) + a / (1 + b ** 2)), [(3, 4), (3, 4)]),
    "matmul": (lambda a, b: a @ b.t(), lambda a, b: a @ b.T, [(3, 4), (5, 4)]),
    "reductions": (lambda a, b: jg.stack([a.mean(), a.amax(), b.logsumexp(1).sum()]),
                   lambda a, b: jnp.stack([a.mean(), a.max(), jax.nn.logsumexp(b, 1).sum()]), [(3, 4), (3, 4)]),
    "softmax": (lambda a, b: NF.softmax(a * b, dim=-1), lambda a, b: jax.nn.softmax(a * b, -1), [(3, 4), (3, 4)]),
    "conv": (lambda x, w: NF.conv2d(x, w), _conv, [(1, 2, 5, 5), (3, 2, 3, 3)]),
    "indexing": (lambda a, b: a[1:, ::2] * b[jg.tensor([2, 0])][:, 1:3],
                 lambda a, b: a[1:, ::2] * b[jnp.array([2, 0])][:, 1:3], [(3, 4), (3, 4)]),
    "views": (lambda a, b: a.t().reshape(-1) + b.view(12), lambda a, b: a.T.reshape(-1) + b.reshape(12),
              [(3, 4), (3, 4)]),
    "inplace": (_inplace_jg, _inplace_jnp, [(3, 4), (3, 4)]),
}


def _inputs(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _dual_run(fn, xs, ts):
    with fwAD.dual_level():
        duals = [fwAD.make_dual(jg.tensor(x), jg.tensor(t)) for x, t in zip(xs, ts)]
        out = fn(*duals)
        p, t = fwAD.unpack_dual(out)
        return p, t


# CI's budget: two of the cases run with JGRAD_TEST_THOROUGH=1 only (each op compiles its kernel and its jvp's)
_CI_CASES = [n for n in CASES if os.environ.get("JGRAD_TEST_THOROUGH") == "1" or n not in ("reductions", "views")]


def test_tangents_equal_jax_jvp_over_ops():
    args = {name: (_inputs(CASES[name][2], 0), _inputs(CASES[name][2], 1)) for name in _CI_CASES}
    # one executable for every reference (a jit per case would compile as much again)
    refs = jax.jit(lambda a: {n: jax.jvp(CASES[n][1], tuple(xs), tuple(ts)) for n, (xs, ts) in a.items()})(args)
    for name in _CI_CASES:
        p, t = _dual_run(CASES[name][0], *args[name])
        assert t is not None, name
        close(p, refs[name][0])
        close(t, refs[name][1], rtol=1e-4, atol=1e-4)


def test_tangents_equal_finite_differences():
    fn, _, shapes = CASES["elementwise"]   # float32, the shapes of the case above: its kernels are reused
    (x, y), (v, w) = _inputs(shapes, 3), _inputs(shapes, 4)
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(jg.tensor(x), jg.tensor(v)), fwAD.make_dual(jg.tensor(y), jg.tensor(w)))
        tan = fwAD.unpack_dual(out).tangent
    x, y, v, w = (a.astype(np.float64) for a in (x, y, v, w))
    eps = 1e-3
    plus = np.tanh(np.sin(x + eps * v) * np.exp(y + eps * w) + (x + eps * v) / (1 + (y + eps * w) ** 2))
    minus = np.tanh(np.sin(x - eps * v) * np.exp(y - eps * w) + (x - eps * v) / (1 + (y - eps * w) ** 2))
    close(tan, (plus - minus) / (2 * eps), rtol=1e-3, atol=1e-4)


@one_mode
def test_tangents_in_auto_execution_mode():
    fn, ref, shapes = CASES["inplace"]
    xs, ts = _inputs(shapes, 4), _inputs(shapes, 5)
    with jg.execution_mode("auto"):
        p, t = _dual_run(fn, xs, ts)
        p, t = p.numpy(), t.numpy()
    rp, rt = jax.jvp(ref, tuple(xs), tuple(ts))
    close(p, rp)
    close(t, rt)


def test_views_share_the_tangent_and_inplace_updates_it():
    x, t = jg.randn(3, 4), jg.randn(3, 4)
    t0 = t.numpy().copy()
    with fwAD.dual_level():
        d = fwAD.make_dual(x, t)
        row, col = d[0], d.t()
        assert row._is_view() and col._is_view()
        close(fwAD.unpack_dual(row).tangent, t0[0])
        close(fwAD.unpack_dual(col).tangent, t0.T)
        d.mul_(2)                        # the dual's tangent is updated in place: t itself, and its views
        assert fwAD.unpack_dual(d).tangent is t
        close(t, 2 * t0)
        close(fwAD.unpack_dual(row).tangent, 2 * t0[0])
        col[1].add_(d[2, 1])             # through a view of a view: a column of the base's tangent
        expect = 2 * t0
        expect[:, 1] += 2 * t0[2, 1]
        close(fwAD.unpack_dual(d).tangent, expect)
        # a view made before its base gets a tangent (by an in-place op) sees it
        y = jg.zeros(3, 4)
        yv = y[1]
        y.add_(d)
        close(fwAD.unpack_dual(yv).tangent, expect[1])
        # an in-place view op changes the tangent's shape with the tensor's, in place (PyTorch's)
        d.t_()
        assert fwAD.unpack_dual(d).tangent is t and tuple(t.shape) == (4, 3)
        close(fwAD.unpack_dual(d * 1.0).tangent, expect.T)


def test_pytorch_view_inplace_scenarios():
    foo, bar = jg.rand(2), jg.ones(2)
    with fwAD.dual_level():
        # make_dual's result is not a forward-differentiable view of the primal: its tangent stays its own
        dual = fwAD.make_dual(foo, bar)
        view = dual.narrow(0, 0, 1)
        view *= 2
        assert fwAD.unpack_dual(foo).tangent is None
        close(fwAD.unpack_dual(dual).tangent, [2.0, 1.0])
        close(fwAD.unpack_dual(view).tangent, [2.0])
        # a tensor without a tangent gets one from an in-place op
        baz = jg.rand(2)
        baz += dual
        close(fwAD.unpack_dual(baz).tangent, [2.0, 1.0])
        # writing a view of it gives the base a zero tangent with the view's part filled in
        baz = jg.rand(2)
        baz[0] = dual[0]
        close(fwAD.unpack_dual(baz).tangent, [2.0, 0.0])
        # detach() is not a forward-differentiable view: the base gets nothing
        baz = jg.rand(2)
        det = baz.detach()
        det += dual
        assert fwAD.unpack_dual(baz).tangent is None
        # the unpacked primal and tangent are aliases: writing them changes neither part of the dual
        p, t = fwAD.unpack_dual(dual)
        assert fwAD.unpack_dual(p).tangent is None
        p *= 2
        close(fwAD.unpack_dual(dual).tangent, [2.0, 1.0])
        close(fwAD.unpack_dual(dual).primal, foo)


def test_pytorch_packing_and_unpacking_scenarios():
    foo, bar = jg.rand(2), jg.ones(2)
    with fwAD.dual_level() as level:
        assert level == 0
        dual = fwAD.make_dual(foo, bar)
        assert dual.untyped_storage() == foo.untyped_storage()   # memory and version counter shared
        foo.add_(1)
        assert foo._version == dual._version
        p, t = fwAD.unpack_dual(dual)
        assert t is bar and p.untyped_storage() == foo.untyped_storage()
        assert fwAD.unpack_dual(foo).tangent is None
    assert fwAD.unpack_dual(dual).tangent is None                # the level's tangents are gone
    close(fwAD.unpack_dual(dual).primal, foo)
    with fwAD.dual_level():
        foo.requires_grad_()
        bar.requires_grad_()
        dual = fwAD.make_dual(foo, bar)
        p, t = fwAD.unpack_dual(dual)
        gfoo, gbar = jg.autograd.grad(p.sum(), (foo, bar), retain_graph=True, allow_unused=True)
        close(gfoo, [1.0, 1.0])
        assert gbar is None
        gfoo, gbar = jg.autograd.grad(t.sum(), (foo, bar), retain_graph=True, allow_unused=True)
        assert gfoo is None
        close(gbar, [1.0, 1.0])
        assert fwAD.unpack_dual(dual.detach() * 2).tangent is None
        with jg.no_grad():                                       # forward AD ignores grad mode
            p, t = fwAD.unpack_dual(dual * 3)
        assert not p.requires_grad and not t.requires_grad
        close(t, 3 * bar.detach().numpy())
        d2 = dual.clone()
        d2.detach_()
        assert fwAD.unpack_dual(d2 * 2).tangent is None
        i = dual.argmax()
        assert fwAD.unpack_dual(i).tangent is None                # integer outputs carry no tangent


def test_levels_and_errors():
    x = jg.rand(2)
    with pytest.raises(RuntimeError, match="no level exists, make sure to enter_dual_level"):
        fwAD.make_dual(x, jg.rand(2))
    with pytest.raises(RuntimeError, match="Dual level must be a positive number"):
        fwAD.exit_dual_level()
    assert fwAD.unpack_dual(x) == (x, None)
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="Nested forward mode AD is not supported at the moment"):
            fwAD.enter_dual_level()
        with pytest.raises(RuntimeError, match="Trying to exit a forward AD level that was not the last one"):
            fwAD.exit_dual_level(level=1)
        with pytest.raises(RuntimeError, match=r"different size .* Tensor is of size \[2\] while the given "
                                               r"forward gradient is of size \[3\]"):
            fwAD.make_dual(x, jg.rand(3))
        fwAD.make_dual(x, jg.rand(3)[1:])
        d = fwAD.make_dual(x, jg.rand(2))
        with pytest.raises(RuntimeError, match="already has a forward gradient at the same level 0"):
            fwAD.make_dual(d, jg.rand(2))
        with pytest.raises(ValueError, match="Expected primal to be floating point or complex, but got: "):
            fwAD.make_dual(jg.arange(2), jg.rand(2))
        with pytest.raises(ValueError, match="Expected tangent to be floating point or complex"):
            fwAD.make_dual(x, jg.arange(2))
        # the dual keeps its tangent alive, the level does not
        t = jg.rand(2)
        ref = weakref.ref(t)
        d = fwAD.make_dual(x, t)
        del t
        assert ref() is not None
        del d
        gc.collect()
        assert ref() is None
    assert _dispatch.forward_ad_hook is None          # nothing is left in the door: no cost outside a level
    lvl = fwAD.enter_dual_level()
    assert lvl == 0 and fwAD._current_level == 0
    fwAD.exit_dual_level(level=0)
    assert fwAD._current_level == -1


def _hv(a):
    return (jnp.exp(a) * a).sum()


def test_forward_over_reverse_and_reverse_over_forward():
    rng = np.random.default_rng(7)
    x, v = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
    ref_hvp = jax.jvp(jax.grad(_hv), (x,), (v,))[1]
    with fwAD.dual_level():
        xr = jg.tensor(x, requires_grad=True)
        d = fwAD.make_dual(xr, jg.tensor(v))
        y = (d.exp() * d).sum()             # exp saves its output: its tangent is saved with it
        (g,) = jg.autograd.grad(y, xr, create_graph=True)
        close(fwAD.unpack_dual(g).tangent, ref_hvp, rtol=1e-4, atol=1e-4)   # jvp of a backward pass: H v
        (gt,) = jg.autograd.grad(fwAD.unpack_dual(y).tangent, xr)          # grad of the tangent: H v too
        close(gt, ref_hvp, rtol=1e-4, atol=1e-4)


class _Square(jg.autograd.Function):
    @staticmethod
    def forward(ctx, a, k):
        ctx.save_for_forward(a)
        ctx.save_for_backward(a)
        return a * a * k, a + 0

    @staticmethod
    def jvp(ctx, ta, tk):
        (a,) = ctx.saved_tensors
        assert tk is None and fwAD.unpack_dual(a).tangent is None   # primals, as PyTorch's jvp sees them
        return a * ta * 4.0, ta

    @staticmethod
    def backward(ctx, g, h):
        (a,) = ctx.saved_tensors
        return a * g * 4.0 + h, None


class _NoJvp(jg.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_custom_function_jvp():
    x, v = jg.rand(3, 4, requires_grad=True), jg.rand(3, 4)
    xn = x.detach().numpy()
    with fwAD.dual_level():
        d = fwAD.make_dual(x, v)
        y, z = _Square.apply(d, 2.0)
        close(fwAD.unpack_dual(y).tangent, 4 * xn * v.numpy())
        assert fwAD.unpack_dual(z).tangent is v
        y.sum().backward()                        # backward still works on the output
        close(x.grad, 4 * xn)
        with pytest.raises(NotImplementedError, match="You must implement the jvp function for custom "
                                                      "autograd.Function to use it with forward mode AD"):
            _NoJvp.apply(d)
        close(_NoJvp.apply(x), 2 * xn)                # no dual input: no jvp needed


@one_mode
def test_func_transforms_unaffected_by_a_dual_level():
    from jgrad import func as F
    x, v = jg.randn(4), jg.randn(4)
    with fwAD.dual_level():
        d = fwAD.make_dual(x, v)
        _, t = F.jvp(lambda a: a * a, (d,), (v,))       # the dual's own tangent plays no part
        close(t, 2 * x.numpy() * v.numpy())
        close(F.jacfwd(lambda a: a * a)(d), np.diag(2 * x.numpy()))
        assert fwAD.unpack_dual(d * d).tangent is not None


# More ops against PyTorch's own forward AD (JGRAD_TEST_THOROUGH=1: every op compiles its kernel and its jvp's).
def _more_ops(L):
    F = L.nn.functional
    return {
        "sort": lambda a: a.sort(1)[0], "max_dim": lambda a: a.max(1)[0], "median": lambda a: a.median(),
        "var": lambda a: a.var(1), "layer_norm": lambda a: F.layer_norm(a, (4,)),
        "inv": lambda a: L.linalg.inv(a + 4 * L.eye(4)), "det": lambda a: L.linalg.det(a),
        "cross_entropy": lambda a: F.cross_entropy(a, L.tensor([0, 1, 2, 3])), "svdvals": lambda a: L.linalg.svdvals(a),
        "topk": lambda a: a.topk(2)[0], "cumsum": lambda a: a.cumsum(0), "logsumexp": lambda a: a.logsumexp(0),
        "gather": lambda a: a.gather(1, L.tensor([[0], [1], [2], [3]])), "fft": lambda a: L.fft.fft(a).abs(),
        "matrix_exp": lambda a: L.linalg.matrix_exp(a * 0.1),
        "attention": lambda a: F.scaled_dot_product_attention(a[None], a[None], a[None]),
    }


@pytest.mark.skipif(os.environ.get("JGRAD_TEST_THOROUGH") != "1", reason="JGRAD_TEST_THOROUGH=1 (CI's budget)")
def test_tangents_equal_torch_forward_ad_over_more_ops():
    torch = pytest.importorskip("torch")
    tAD = pytest.importorskip("torch.autograd.forward_ad")
    x, t = _inputs([(4, 4), (4, 4)], 9)
    with fwAD.dual_level():
        d = fwAD.make_dual(jg.tensor(x), jg.tensor(t))
        mine = {n: fwAD.unpack_dual(f(d)).tangent.detach().numpy() for n, f in _more_ops(jg).items()}
    with tAD.dual_level():
        d = tAD.make_dual(torch.tensor(x), torch.tensor(t))
        theirs = {n: tAD.unpack_dual(f(d)).tangent.numpy() for n, f in _more_ops(torch).items()}
    for n in mine:
        close(mine[n], theirs[n], rtol=1e-4, atol=1e-5)
