"""In-place ops and the version counter: PyTorch's leaf error, history rebasing on non-leaves,
and the saved-tensor version check ("modified by an inplace operation").

Scenarios ported from PyTorch's test/test_autograd.py (upstream test named in each comment),
written fresh against jgrad; gradients are checked against jax.grad.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import autograd as A

F64 = jg.float64


def npy(t):
    return np.asarray(t.detach().numpy())


def leaf(data, dtype=F64):
    return jg.tensor(data, dtype=dtype, requires_grad=True)


def test_version_counter_bumps_on_every_inplace_op():
    # test_version_counter / test_inplace_not_requires_grad
    x = jg.tensor([1.0, -2.0, 3.0], dtype=F64)
    assert x._version == 0
    ops = [lambda t: t.add_(1), lambda t: t.sub_(1), lambda t: t.mul_(2), lambda t: t.div_(2),
           lambda t: t.clamp_(-1, 1), lambda t: t.fill_(0.5), lambda t: t.copy_(jg.ones(3, dtype=F64)),
           lambda t: t.zero_(), lambda t: t.__setitem__(0, 4.0)]
    for i, op in enumerate(ops, 1):
        out = op(x)
        assert x._version == i
        if out is not None:
            assert out is x
    y = x + 1  # out-of-place ops do not bump
    assert x._version == len(ops) and y._version == 0
    # detach() shares the version counter (and history is not shared)
    d = x.detach()
    d.add_(1)
    assert x._version == len(ops) + 1 == d._version
    np.testing.assert_allclose(npy(x), npy(d))  # and the values: detach() is a view of the same memory


def test_inplace_on_leaf_requiring_grad_raises():
    # test_inplace_on_leaf / leaf check of VariableType
    a = leaf([1.0, 2.0])
    for op in (lambda t: t.add_(1), lambda t: t.mul_(2), lambda t: t.zero_()):
        with pytest.raises(RuntimeError, match=r"^a leaf Variable that requires grad is being used in an in-place "
                                               r"operation\.$"):
            op(a)
    # t[0] = v writes through a view (t[0].copy_(v)): PyTorch's message names the view
    with pytest.raises(RuntimeError, match=r"^a view of a leaf Variable that requires grad is being used in an "
                                           r"in-place operation\.$"):
        a[0] = 1.0
    assert a._version == 0
    with jg.no_grad():  # allowed without grad mode (what optimizers do)
        a.mul_(2)
    assert a._version == 1 and a.is_leaf and a.grad_fn is None
    np.testing.assert_allclose(npy(a), [2.0, 4.0])


@pytest.mark.x64  # its jax reference is float64
def test_inplace_on_nonleaf_rebases_history():
    # test_inplace_on_nonleaf (history rebase): grad_fn changes, gradient correct
    xv = np.array([0.5, 1.0, 1.5])
    x = leaf(xv)
    w = leaf(2.0)
    y = x * 2
    first = y.grad_fn
    y.mul_(x)
    second = y.grad_fn
    y.sin_()
    y.add_(w * w)
    assert first.name() == "MulBackward0" and second is not first
    assert y.grad_fn.name() == "AddBackward0" and y.grad_fn is not second
    assert y.grad_fn.next_functions[0][0].name() == "SinBackward0"
    assert not y.is_leaf and y._version == 3
    y.sum().backward()

    def f(x, w):
        return jnp.sum(jnp.sin(x * 2 * x) + w * w)

    gx, gw = jax.grad(f, argnums=(0, 1))(xv, 2.0)
    np.testing.assert_allclose(npy(x.grad), gx, rtol=1e-12)
    np.testing.assert_allclose(float(w.grad), gw, rtol=1e-12)


def test_setitem_rebases_history():
    xv = np.array([1.0, 2.0, 3.0, 4.0])
    x, v = leaf(xv), leaf(5.0)
    y = x * 2  # (x.exp() would save its output: writing y afterwards is an error, as in PyTorch)
    y[1] = v * v
    y[2:] = y[2:] * 3  # reading y[2:] saves nothing that the write after it changes
    z = y[0] * y[3]    # saves two views of y, which share its version counter
    y = y * 1          # a new tensor: writing it leaves the saved views alone
    y[0] = 0.0
    (y.sum() + z).backward()

    def f(x, v):
        y = x * 2
        y = y.at[1].set(v * v)
        y = y.at[2:].set(y[2:] * 3)
        z = y[0] * y[3]
        y = y.at[0].set(0.0)
        return y.sum() + z

    gx, gv = jax.grad(f, argnums=(0, 1))(xv, 5.0)
    np.testing.assert_allclose(npy(x.grad), gx, rtol=1e-12)
    np.testing.assert_allclose(float(v.grad), gv, rtol=1e-12)
    y = x * 2
    z = y[0] * y[3]
    y[0] = 0.0  # writes the memory z's saved views read: backward refuses, as PyTorch's
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (y.sum() + z).backward()


def test_inplace_into_a_tensor_that_did_not_require_grad():
    # the in-place result requires grad once an argument does
    base = jg.zeros(3, dtype=F64)
    w = leaf([1.0, 2.0, 3.0])
    base.add_(w * 2)
    assert base.requires_grad and base.grad_fn is not None and base._version == 1
    (base * base).sum().backward()
    np.testing.assert_allclose(npy(w.grad), 8 * np.array([1.0, 2.0, 3.0]))


def test_saved_tensor_modified_inplace_raises_with_shape_and_versions():
    # test_inplace_saved / test_anomaly_grad_warnings' error: SavedVariable::unpack
    a = jg.tensor(np.ones((2, 3)), dtype=jg.float32, requires_grad=True)
    d1 = a + 1
    d2 = d1 ** 2  # saves d1 (version 0)
    d1 += 1  # d1 -> version 1
    msg = (r"one of the variables needed for gradient computation has been modified by an inplace operation: "
           r"\[jgrad\.float32 \[2, 3\]\], which is output 0 of AddBackward0, is at version 1; expected version 0 "
           r"instead\. Hint: enable anomaly detection")
    with pytest.raises(RuntimeError, match=msg):
        A.grad(d2.sum(), a)

    # a saved output (exp saves its result)
    b = leaf([1.0, 2.0])
    e = b.exp()
    e.mul_(2)
    e.mul_(2)
    with pytest.raises(RuntimeError, match=r"\[jgrad\.float64 \[2\]\], which is output 0 of ExpBackward0, is at "
                                           r"version 2; expected version 0 instead"):
        e.sum().backward()

    # a saved leaf, modified under no_grad (as an optimizer step would)
    c = leaf([1.0, 2.0])
    out = (c * c).sum()
    with jg.no_grad():
        c.add_(1)
    with pytest.raises(RuntimeError, match=r"\[jgrad\.float64 \[2\]\] is at version 1; expected version 0 instead"):
        out.backward()

    # through a detached alias sharing the version counter
    d = leaf([3.0])
    s = d * 1
    t = s * s
    s.detach().zero_()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        t.backward()


def test_saved_custom_function_tensor_modified_inplace():
    class Square(A.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return 2 * g * x

    a = leaf([1.0, 2.0])
    b = a * 1
    out = Square.apply(b)
    b.add_(1)
    with pytest.raises(RuntimeError, match=r"is at version 1; expected version 0 instead"):
        out.sum().backward()


@pytest.mark.x64  # its jax reference is float64
def test_inplace_does_not_disturb_unrelated_saved_values():
    # a value an in-place op overwrote but which was saved by the in-place op itself is fine
    xv = np.array([0.3, 0.7])
    x = leaf(xv)
    y = x * 1
    y.mul_(y)  # d(y*y)/dy needs the old y: saved by the op, not checked against y's version
    y.exp_()
    y.sum().backward()
    np.testing.assert_allclose(npy(x.grad), jax.grad(lambda v: jnp.sum(jnp.exp(v * v)))(xv), rtol=1e-12)


# ---- copy_: PyTorch's casting and broadcasting; nothing else that holds the old array sees the new values ----------
def test_copy_casts_and_broadcasts_like_pytorch():
    rng = np.random.default_rng(0)
    x = jg.zeros(8, 16)
    for k in range(3):
        src = rng.standard_normal((8, 16)).astype(np.float32)
        assert x.copy_(jg.tensor(src)) is x and x._version == k + 1
        np.testing.assert_array_equal(x.numpy(), src)
    i = jg.zeros(4, dtype=jg.int32)
    i.copy_(jg.tensor([1.7, -2.2, 3.0, 4.9]))       # float -> int truncates toward zero, as torch does
    assert i.numpy().tolist() == [1, -2, 3, 4]
    b = jg.zeros(3, 4)
    b.copy_(jg.tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(b.numpy(), np.tile([1.0, 2.0, 3.0, 4.0], (3, 1)))
    s = jg.zeros(())
    s.copy_(jg.tensor(5.0))
    assert s.item() == 5.0


def test_copy_leaves_other_holders_of_the_old_array_intact():
    x = jg.zeros(2, 3)
    x.copy_(jg.ones(2, 3))
    held = x._value                                 # a user's reference to the jax array
    d = x.detach()                                  # a view of x's memory
    x.copy_(jg.full((2, 3), 7.0))
    assert not held.is_deleted()
    np.testing.assert_array_equal(np.asarray(held), np.ones((2, 3)))
    np.testing.assert_array_equal(d.numpy(), np.full((2, 3), 7.0))   # the view sees the write
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 7.0))
    x.copy_(x)                                      # the source is the target itself
    np.testing.assert_array_equal(x.numpy(), np.full((2, 3), 7.0))


def test_copy_never_writes_into_memory_shared_with_numpy():
    from interop.numpy import empty_aligned, from_numpy
    a = empty_aligned((4,), np.float32)
    a[:] = np.arange(4.0)
    t = from_numpy(a)                               # zero copy on the CPU: the tensor's array is NumPy's memory
    for v in (1.0, 2.0):
        t.copy_(jg.full((4,), v))
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0] and t.numpy().tolist() == [2.0] * 4
    view = t.numpy()                                # a zero-copy view of the tensor's array (CPU)
    t.copy_(jg.full((4,), 5.0))
    assert view.tolist() == [2.0] * 4 and t.numpy().tolist() == [5.0] * 4


def test_copy_errors_are_pytorchs_and_leave_the_tensor_intact():
    x = jg.tensor([1.0, 2.0, 3.0])
    with pytest.raises((ValueError, TypeError, RuntimeError)):
        x.copy_(jg.tensor([1.0, 2.0]))              # shapes do not broadcast
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0, 3.0])
    assert x._version == 0
    w = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        w.copy_(jg.tensor([3.0, 4.0], dtype=F64))
    with jg.no_grad():
        w.copy_(jg.tensor([3.0, 4.0], dtype=F64))  # what load_state_dict does
    np.testing.assert_array_equal(npy(w), [3.0, 4.0])


def test_copy_into_a_saved_tensor_is_caught_by_the_version_check():
    a = leaf([1.0, 2.0])
    b = a * 1.0
    c = b.sin()                                     # saves b
    with jg.no_grad():
        b.copy_(jg.tensor([5.0, 6.0], dtype=F64))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
