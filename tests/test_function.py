"""Custom autograd Functions: ctx.save_for_backward / saved_tensors / needs_input_grad /
mark_dirty / mark_non_differentiable / set_materialize_grads, setup_context, once_differentiable,
non-tensor inputs and outputs, gradcheck.

Scenarios ported from PyTorch's test/test_autograd.py (upstream test named in each comment),
written fresh against jgrad; values are checked against jax.grad / NumPy.
"""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import autograd as A
from jgrad.autograd import Function, gradcheck, gradgradcheck, once_differentiable

F64 = jg.float64


def npy(t):
    return np.asarray(t.detach().numpy())


def leaf(data):
    return jg.tensor(data, dtype=F64, requires_grad=True)


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


class MyFunction(Function):
    # test_function
    @staticmethod
    def forward(ctx, tensor1, pyscalar, tensor2):
        ctx.pyscalar = pyscalar
        ctx.save_for_backward(tensor1, tensor2)
        return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

    @staticmethod
    def backward(ctx, grad_output):
        var1, var2 = ctx.saved_tensors
        assert isinstance(var1, jg.Tensor) and isinstance(var2, jg.Tensor)
        return grad_output + grad_output * var2, None, grad_output * ctx.pyscalar + grad_output * var1


def test_function_save_for_backward_and_create_graph():
    # test_function (_function_test)
    xv, yv = rnd(5, 5, seed=1), rnd(5, 5, seed=2)
    x, y = leaf(xv), leaf(yv)
    result = MyFunction.apply(x, 2, y)
    assert result.grad_fn.name() == "MyFunctionBackward"
    go = jg.ones((), dtype=F64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the (warn-once) create_graph reference-cycle warning
        result.sum().backward(go, create_graph=True)
    np.testing.assert_allclose(npy(x.grad), yv + 1)
    np.testing.assert_allclose(npy(y.grad), xv + 2)
    assert x.grad.grad_fn is not None and y.grad.grad_fn is not None
    # the gradient is itself differentiable: d(sum x.grad)/dy = 1 per element
    gy, = A.grad(x.grad.sum(), y)
    np.testing.assert_allclose(npy(gy), np.ones((5, 5)))
    x.grad = None
    y.grad = None


def test_needs_input_grad_and_non_tensor_inputs():
    seen = []

    class F(Function):
        @staticmethod
        def forward(ctx, a, k, b, c):
            seen.append(ctx.needs_input_grad)
            return a * k + b * c

        @staticmethod
        def backward(ctx, g):
            return g * 2, None, g, None

    a, b = leaf([1.0]), jg.tensor([2.0], dtype=F64)
    out = F.apply(a, 2.0, b, b)
    assert seen == [(True, False, False, False)]
    out.sum().backward()
    np.testing.assert_allclose(npy(a.grad), [2.0])
    assert b.grad is None

    class BadNonTensor(Function):
        @staticmethod
        def forward(ctx, a, k):
            return a * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match="returned a gradient different than None at position 2, but the "
                                           "corresponding forward input was not a Variable"):
        BadNonTensor.apply(a, 3.0).sum().backward()

    class TooFew(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match=r"function TooFewBackward returned an incorrect number of gradients "
                                           r"\(expected 2, got 1\)"):
        TooFew.apply(a, leaf([3.0])).sum().backward()


def test_saved_tensors_of_inputs_outputs_and_none():
    # test_save_none_for_backward / saving an output
    class Exp(Function):
        @staticmethod
        def forward(ctx, x, unused):
            y = x.exp()
            ctx.save_for_backward(None, y, unused)
            return y

        @staticmethod
        def backward(ctx, g):
            none, y, unused = ctx.saved_tensors
            assert none is None and unused is None
            return g * y, None

    xv = rnd(4, seed=3)
    x = leaf(xv)
    Exp.apply(x, None).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.exp(xv))
    # double backward through the saved output: d2/dx2 exp = exp
    x2 = leaf(xv)
    g, = A.grad(Exp.apply(x2, None).sum(), x2, create_graph=True)
    gg, = A.grad(g.sum(), x2)
    np.testing.assert_allclose(npy(gg), np.exp(xv))

    class SaveNonTensor(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x

    with pytest.raises(TypeError, match="save_for_backward can only save variables, but argument 1 is of type int"):
        SaveNonTensor.apply(leaf([1.0]))


def test_once_differentiable():
    # test_once_differentiable
    class MyFn(Function):
        @staticmethod
        def forward(ctx, tensor1, pyscalar, tensor2):
            ctx.pyscalar = pyscalar
            ctx.save_for_backward(tensor1, tensor2)
            return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

        @staticmethod
        @once_differentiable
        def backward(ctx, grad_output):
            assert not jg.is_grad_enabled()
            t1, t2 = ctx.saved_tensors
            return grad_output + grad_output * t2, None, grad_output * ctx.pyscalar + grad_output * t1

    xv, yv = rnd(3, seed=4), rnd(3, seed=5)
    x, y = leaf(xv), leaf(yv)
    go = jg.ones((), dtype=F64, requires_grad=True)
    gx, gy = A.grad(MyFn.apply(x, 2, y).sum(), (x, y), go, create_graph=True)
    np.testing.assert_allclose(npy(gx), yv + 1)
    np.testing.assert_allclose(npy(gy), xv + 2)
    assert gx.requires_grad and gx.grad_fn is not None  # a DelayedError node
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was marked with "
                                           "@once_differentiable"):
        gx.sum().backward()
    # without create_graph nothing is recorded
    g2, = A.grad(MyFn.apply(x, 2, y).sum(), x)
    assert not g2.requires_grad


def test_function_returns_input():
    # test_function_returns_input
    class Same(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    for shape in [(1,), ()]:
        v = jg.ones(shape, dtype=F64, requires_grad=True)
        out = Same.apply(v)
        assert out is not v and out.grad_fn is not None and v.is_leaf
        out.backward()
        np.testing.assert_allclose(npy(v.grad), np.full(shape, 2.0))
        with jg.no_grad():
            v.grad.zero_()
        Same.apply(v.clone()).backward()
        np.testing.assert_allclose(npy(v.grad), np.full(shape, 2.0))


def test_function_returns_undefined_gradient():
    # test_function_returns_undefined_tensor: None propagates as None, not as zeros
    class NoGrad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return None

    x = jg.ones(1, dtype=F64, requires_grad=True)
    NoGrad.apply(x).backward()
    assert x.grad is None
    NoGrad.apply(x ** 2).backward()
    assert x.grad is None
    NoGrad.apply(x).sum().backward()
    assert x.grad is None
    assert A.grad(NoGrad.apply(x), x, allow_unused=True)[0] is None


def test_materialize_grads_default_and_disabled():
    # test_materialize_grads / test_dont_materialize_grads
    seen = []

    class Two(Function):
        @staticmethod
        def forward(ctx, x, materialize):
            ctx.set_materialize_grads(materialize)
            return x * 1, x * 2

        @staticmethod
        def backward(ctx, g0, g1):
            seen.append(g1)
            return g0 + (0 if g1 is None else g1 * 2), None

    x = leaf([1.0, 2.0])
    out0, _ = Two.apply(x, True)
    out0.sum().backward()
    np.testing.assert_array_equal(npy(seen[-1]), [0.0, 0.0])  # the unused output's grad: zeros
    out0, _ = Two.apply(x, False)
    out0.sum().backward()
    assert seen[-1] is None
    np.testing.assert_allclose(npy(x.grad), [2.0, 2.0])


def test_mark_non_differentiable():
    # test_mark_non_differentiable / test_set_materialize_non_diff_grads
    class MaxIdx(Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argmax()
            mask = x > 0
            ctx.mark_non_differentiable(idx, mask)
            ctx.save_for_backward(idx)
            return x.max(), idx, mask

        @staticmethod
        def backward(ctx, g, g_idx, g_mask):
            idx, = ctx.saved_tensors
            onehot = (jg.arange(3) == idx).to(F64)
            return g * onehot

    x = leaf([1.0, 5.0, -2.0])
    m, idx, mask = MaxIdx.apply(x)
    assert m.requires_grad and not idx.requires_grad and not mask.requires_grad
    assert idx.grad_fn is None
    m.backward()
    np.testing.assert_array_equal(npy(x.grad), [0.0, 1.0, 0.0])

    class Func(Function):
        @staticmethod
        def forward(ctx, x):
            out0, out1 = x.clone(), x.clone()
            ctx.mark_non_differentiable(out1)
            return out0, out1

        @staticmethod
        def backward(ctx, g0, g1):
            assert g1 is not None and float(g1) == 0.0  # materialized as zeros
            return g0

    a = leaf(1.0)
    Func.apply(a)[0].backward()
    assert float(a.grad) == 1.0


def test_mark_dirty():
    # test_mark_dirty / test_dirty_leaf error
    class Double_(Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    a = leaf([1.0, 2.0])
    b = a.clone()
    old_fn, v0 = b.grad_fn, b._version
    c = Double_.apply(b)
    assert c is b and b.grad_fn is not old_fn and b.grad_fn.name() == "Double_Backward"
    assert b._version > v0
    np.testing.assert_allclose(npy(b), [2.0, 4.0])
    (c * c).sum().backward()
    np.testing.assert_allclose(npy(a.grad), [8.0, 16.0])  # d/da (2a)^2 = 8a
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in an in-place operation."):
        Double_.apply(a)
    # a retained gradient follows the tensor to its new grad_fn
    r = a.clone()
    r.retain_grad()
    Double_.apply(r)
    (r * 3).sum().backward()
    np.testing.assert_allclose(npy(r.grad), [3.0, 3.0])


def test_setup_context_style():
    # test_custom_function_setup_context_simple / _multi_output / _multi_input
    class MySquare(Function):
        @staticmethod
        def forward(x):
            return x ** 2, float(x.item()) * 2

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, = inputs
            ctx.save_for_backward(x)
            ctx.two_x = output[1]

        @staticmethod
        def backward(ctx, g, _):
            x, = ctx.saved_tensors
            assert float(x) * 2 == ctx.two_x
            return g * 2 * x

    x = leaf(1.5)
    y, two_x = MySquare.apply(x)
    assert two_x == 3.0
    gx, = A.grad(y, x)
    assert float(gx) == 3.0

    class MyReshape(Function):
        @staticmethod
        def forward(x, shape, scale_forward, scale_backward):
            return x.reshape(shape) * scale_forward

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, shape, scale_forward, scale_backward = inputs
            ctx.scale_backward = scale_backward
            ctx.x_shape = x.shape

        @staticmethod
        def backward(ctx, g):
            return g.reshape(ctx.x_shape) * ctx.scale_backward, None, None, None

    xv = rnd(24, seed=6)
    x = leaf(xv)
    y = MyReshape.apply(x, (3, 8), 7, 11)
    np.testing.assert_allclose(npy(y), xv.reshape(3, 8) * 7)
    gx, = A.grad(y.sum(), x)
    np.testing.assert_allclose(npy(gx), np.full(24, 11.0))


def test_non_tensor_inputs_outputs_and_gradcheck():
    # test_custom_function_non_tensor_inputs_outputs
    class Mixed(Function):
        @staticmethod
        def forward(ctx, t1, t2, scale, t3):
            t4 = (t1 + t2 * t3) * scale
            t5 = (t1 * t2 + t3) * scale
            ctx.scale = scale
            ctx.save_for_backward(t1, t2, t3)
            return scale, t4, None, True, t5, "bar", t1

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            assert len(grads) == 7
            assert grads[0] is None and grads[2] is None and grads[3] is None and grads[5] is None
            scale = ctx.scale
            var1, var2, var3 = ctx.saved_tensors
            return (grads[1] * scale + grads[4] * var2 * scale + grads[6],
                    grads[1] * var3 * scale + grads[4] * var1 * scale,
                    None,
                    grads[1] * var2 * scale + grads[4] * scale)

    t1, t2 = leaf(rnd(10, seed=7)), leaf(rnd(10, seed=8))
    t3 = jg.tensor(rnd(10, seed=9), dtype=F64)
    scale = 3
    res = Mixed.apply(t1, t2, scale, t3)
    assert res[0] == scale and res[2] is None and res[3] is True and res[5] == "bar"
    np.testing.assert_allclose(npy(res[1]), (npy(t1) + npy(t2) * npy(t3)) * scale)
    np.testing.assert_allclose(npy(res[6]), npy(t1))
    A.backward([res[1].sum(), res[4].sum(), res[6].sum()])
    v1, v2, v3 = npy(t1), npy(t2), npy(t3)
    np.testing.assert_allclose(npy(t1.grad), scale + v2 * scale + 1)
    np.testing.assert_allclose(npy(t2.grad), v3 * scale + v1 * scale)
    assert t3.grad is None

    def foo(t1, t2, t3):
        r = Mixed.apply(t1, t2, scale, t3)
        return r[1], r[4], r[6]

    assert gradcheck(foo, (t1, t2, t3))


def test_gradcheck_of_custom_function_catches_a_wrong_backward():
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 3 * g * x * x

    class WrongCube(Cube):
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * g * x * x

    x = leaf(rnd(4, seed=10))
    assert gradcheck(Cube.apply, (x,))
    assert gradgradcheck(Cube.apply, (x,))
    assert not gradcheck(WrongCube.apply, (x,), raise_exception=False)
    with pytest.raises(A.GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        gradcheck(WrongCube.apply, (x,))


@pytest.mark.x64  # its jax reference is float64
def test_custom_function_double_backward_matches_jax():
    # a backward written with differentiable jgrad ops supports create_graph
    class Tanh(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.tanh()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors
            return g * (1 - y * y)

    xv = rnd(5, seed=11)
    x = leaf(xv)
    g, = A.grad((Tanh.apply(x) * x).sum(), x, create_graph=True)
    gg, = A.grad(g.sum(), x)
    f = lambda v: jnp.sum(jnp.tanh(v) * v)  # noqa: E731
    np.testing.assert_allclose(npy(g), jax.grad(f)(xv), rtol=1e-12)
    np.testing.assert_allclose(npy(gg), jax.grad(lambda v: jax.grad(f)(v).sum())(xv), rtol=1e-10)


def test_custom_function_exception():
    # test_custom_function_exception
    class SimulateBackwardError(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            raise Exception("Simulate error on backward pass")  # noqa: TRY002

    t1, t2 = leaf(rnd(3, 3)), leaf(rnd(3, 3, seed=1))
    tmp = (t1 + t2) * (t1 + t2)
    t3 = SimulateBackwardError.apply(tmp)
    with pytest.raises(Exception, match="Simulate error on backward pass"):
        t3.sum().backward()


def test_no_grad_apply_records_nothing():
    calls = []

    class F(Function):
        @staticmethod
        def forward(ctx, x):
            calls.append(jg.is_grad_enabled())
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = leaf([1.0])
    with jg.no_grad():
        y = F.apply(x)
    assert not y.requires_grad and y.grad_fn is None
    y2 = F.apply(x)
    assert y2.requires_grad
    assert calls == [False, False]  # forward itself never records history
