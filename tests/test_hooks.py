"""Hooks and their order (NOTE [Hooks ordering], PR 85849 / 92604 in seed 002):
tensor pre-hooks -> retains_grad hooks -> grad_fn pre-hooks -> node -> post-hooks.

Scenarios ported from PyTorch's test/test_autograd.py (upstream test named in each
comment), written fresh against jgrad; values are checked against NumPy.
"""
import numpy as np
import pytest

import jgrad as jg
from jgrad import autograd as A
from jgrad.autograd import Function

F64 = jg.float64


def npy(t):
    return np.asarray(t.detach().numpy())


def leaf(data):
    return jg.tensor(data, dtype=F64, requires_grad=True)


class Mul2(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


MUL2 = {"op": lambda x: x * 2, "custom": Mul2.apply}


class DoubleMul(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, g1, g2):
        return g1 * 2 + g2 * 3


def _halves(x):
    return tuple(x.chunk(2))  # one SplitBackward0 node with two outputs


# ---- tensor hooks ------------------------------------------------------------------------
def test_tensor_hooks_count_modify_and_remove():
    # test_hooks
    x = leaf(np.ones((5, 5)))
    y = jg.ones(5, 5, dtype=F64) * 4
    y.requires_grad_(True)
    counter = [0]

    def bw_hook(inc, grad):
        assert isinstance(grad, jg.Tensor)
        counter[0] += inc

    z = x ** 2 + x * 2 + x * y + y
    x.register_hook(lambda g: bw_hook(0, g))
    test = z.register_hook(lambda g: bw_hook(1, g))
    z.backward(jg.ones(5, 5, dtype=F64), retain_graph=True)
    assert counter[0] == 1
    test2 = z.register_hook(lambda g: bw_hook(2, g))
    z.backward(jg.ones(5, 5, dtype=F64), retain_graph=True)
    assert counter[0] == 4
    test2.remove()
    z.backward(jg.ones(5, 5, dtype=F64), retain_graph=True)
    assert counter[0] == 5
    test.remove()
    z.register_hook(lambda g: g.mul(2))
    with jg.no_grad():
        y.grad.zero_()
    z.backward(jg.ones(5, 5, dtype=F64), retain_graph=True)
    np.testing.assert_allclose(npy(y.grad), (npy(x) + 1) * 2)
    y.register_hook(lambda g: g.mul(2))
    with jg.no_grad():
        y.grad.zero_()
    z.backward(jg.ones(5, 5, dtype=F64))
    np.testing.assert_allclose(npy(y.grad), (npy(x) + 1) * 4)
    # the handle is a context manager too
    w = leaf([1.0])
    calls = []
    with w.register_hook(lambda g: calls.append(1)):
        (w * 2).sum().backward()
    (w * 2).sum().backward()
    assert calls == [1]


def test_leaf_hooks_run_before_accumulation():
    x = leaf([1.0, 2.0])
    seen = []

    def hook(g):
        seen.append(None if x.grad is None else npy(x.grad).copy())
        return g * 10

    x.register_hook(hook)
    (x * 3).sum().backward()
    (x * 3).sum().backward()
    assert seen[0] is None
    np.testing.assert_allclose(seen[1], [30.0, 30.0])
    np.testing.assert_allclose(npy(x.grad), [60.0, 60.0])


def test_hook_return_value_checks():
    # python_hook.cpp check_single_result
    x = leaf([1.0, 2.0])
    y = x * 2
    y.register_hook(lambda g: jg.ones(3, dtype=F64))
    with pytest.raises(RuntimeError, match="has changed the size of value"):
        y.sum().backward()
    x2 = leaf([1.0])
    y2 = x2 * 2
    y2.register_hook(lambda g: 3.0)
    with pytest.raises(TypeError):
        y2.sum().backward()
    with pytest.raises(RuntimeError, match="cannot register a hook on a tensor that doesn't require gradient"):
        jg.ones(2).register_hook(lambda g: g)
    x3 = leaf([1.0])
    y3 = x3 * 2
    y3.register_hook(lambda g: g.to(jg.float32))
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        y3.sum().backward()
    x4 = leaf([1.0])
    y4 = x4 * 2

    def two(gs):
        return gs + gs

    y4.grad_fn.register_prehook(two)
    with pytest.raises(RuntimeError, match=r"hook 'two' has returned an incorrect number of values \(got 2, but "
                                           r"expected 1\)"):
        y4.sum().backward()
    x5 = leaf([1.0])
    y5, _ = DoubleMul.apply(x5)
    y5.grad_fn.register_prehook(lambda gs: (gs[0], jg.ones(1, dtype=F64)))  # gs[1] is None: y5's sibling unused
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None value"):
        y5.sum().backward()


def test_hook_none_on_outputs_of_custom_function():
    # test_hook_none
    class NoneGradientFunction(Function):
        @staticmethod
        def forward(ctx, x, y):
            assert ctx.needs_input_grad == (True, False)
            return x * 1, y * 1

        @staticmethod
        def backward(ctx, grad_x, grad_y):
            return grad_x, None

    was_called = [False]

    def hook(grad):
        assert grad is not None
        was_called[0] = True

    x = leaf(np.ones((5, 5)))
    y = jg.ones(5, 5, dtype=F64)
    rx, ry = NoneGradientFunction.apply(x, y)
    rx.register_hook(hook)
    ry.register_hook(hook)
    (rx + ry).sum().backward()
    assert was_called[0]


def test_grad_nonleaf_register_hook():
    # test_grad_nonleaf_register_hook
    x = leaf(np.zeros(5))
    parts = x.unbind()
    hook_results = [None]

    def hook(grad):
        hook_results[0] = grad

    parts[0].register_hook(hook)
    # retain_graph: jgrad's unbind saves its input (PyTorch's UnbindBackward saves nothing)
    parts[0].backward(retain_graph=True)
    assert float(hook_results[0]) == 1.0
    expected = np.array([1.0, 0, 0, 0, 0])
    np.testing.assert_array_equal(npy(x.grad), expected)
    for i in range(1, 5):
        hook_results[0] = None
        parts[i].backward(retain_graph=True)
        assert hook_results[0] is None  # the hook only sees part 0's gradient
        expected[i] = 1.0
        np.testing.assert_array_equal(npy(x.grad), expected)


# ---- grad_fn pre-hooks and post-hooks -----------------------------------------------------------
@pytest.mark.parametrize("kind", ["op", "custom"])
def test_grad_fn_prehooks_and_posthooks(kind):
    # test_grad_fn_prehooks
    mul2 = MUL2[kind]
    a = leaf([1.0])
    b = mul2(a)
    post_counter, pre_counter = [0], [0]

    def posthook(grad_inputs, grad_outputs):
        assert pre_counter[0] == 3
        np.testing.assert_allclose(npy(grad_outputs[0]), [8.0])
        np.testing.assert_allclose(npy(grad_inputs[0]), [16.0])
        post_counter[0] += 1
        return grad_inputs

    def prehook(grad_outputs):
        pre_counter[0] += 1
        return (grad_outputs[0] * 2,)

    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_hook(posthook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda g: None)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(lambda g: g)
    b.grad_fn.register_prehook(lambda g: None)
    b.sum().backward()
    assert post_counter[0] == 2 and pre_counter[0] == 3
    np.testing.assert_allclose(npy(a.grad), [16.0])

    # a post-hook's return value replaces the node's outputs; `x * 2` has an edge for the 2 too
    # (MulBackward0's next_functions are ((AccumulateGrad, 0), (None, 0)), as in PyTorch)
    a2 = leaf([1.0, 1.0])
    b2 = mul2(a2)
    n_in = len(b2.grad_fn.next_functions)
    assert n_in == (2 if kind == "op" else 1)
    seen = []

    def replace(gi, go):
        seen.append(len(gi))
        assert all(g is None for g in gi[1:])
        return (gi[0] + 100,) + tuple(gi[1:])

    b2.grad_fn.register_hook(replace)
    b2.sum().backward()
    assert seen == [n_in]
    np.testing.assert_allclose(npy(a2.grad), [102.0, 102.0])


def test_grad_fn_prehooks_multiple_outputs():
    # test_grad_fn_prehooks_multiple_outputs
    class DoubleMul2(Function):
        @staticmethod
        def forward(ctx, x, a, y):
            ctx.a = a
            return a * x * 2, a, a * y * 2

        @staticmethod
        def backward(ctx, g1, _a, g2):
            return ctx.a * g1 * 2, None, ctx.a * g2 * 2

    counter = [0]

    def prehook(grad_output):
        g1, ga, g2 = grad_output
        assert ga is None
        counter[0] += 1
        return (g1 * 2, None, g2 * 2)

    a, b = leaf(np.ones((3, 3))), leaf(np.ones((3, 3)))
    k = 3
    c, _, d = DoubleMul2.apply(a, k, b)
    c.grad_fn.register_prehook(prehook)
    (c + d).sum().backward()
    assert counter[0] == 1
    np.testing.assert_allclose(npy(a.grad), np.full((3, 3), 4.0 * k))
    np.testing.assert_allclose(npy(b.grad), np.full((3, 3), 4.0 * k))

    # an op with two outputs: the prehook sees (and scales) both
    x = leaf(np.arange(4.0))
    lo, hi = _halves(x)
    lo.grad_fn.register_prehook(lambda gs: tuple(g * 2 for g in gs))
    (lo * 1 + hi * 3).sum().backward()
    np.testing.assert_allclose(npy(x.grad), [2.0, 2.0, 6.0, 6.0])


@pytest.mark.parametrize("kind", ["op", "custom"])
def test_grad_fn_prehooks_remove_hooks(kind):
    # test_grad_fn_prehooks_remove_hooks
    mul2 = MUL2[kind]
    a = leaf(np.ones((3, 3)))
    b = mul2(a)
    counter = [0]

    def prehook(g):
        counter[0] += 1

    handle = b.grad_fn.register_prehook(prehook)
    b.grad_fn.register_prehook(prehook)
    handle.remove()
    b.sum().backward()
    np.testing.assert_allclose(npy(a.grad), np.full((3, 3), 2.0))
    assert counter[0] == 1

    # removed during backward: hooks registered first run first
    a = leaf(np.ones((3, 3)))
    b = mul2(a)
    counter = [0]

    def prehook1(g):
        handle2.remove()
        handle3.remove()  # removing twice is fine

    def prehook2(g):
        counter[0] += 1

    b.grad_fn.register_prehook(prehook1)
    handle2 = b.grad_fn.register_prehook(prehook2)
    handle3 = b.grad_fn.register_prehook(prehook2)
    handle3.remove()
    b.sum().backward()
    np.testing.assert_allclose(npy(a.grad), np.full((3, 3), 2.0))
    assert counter[0] == 1  # the hooks were snapshotted before the node ran (_call_hooks)


# ---- ordering ---------------------------------------------------------------------------------------
def test_prehook_ordering():
    # test_prehook_ordering: tensor pre-hooks before grad_fn pre-hooks; tensor pre-hooks of
    # inputs= of grad() run although the AccumulateGrad node itself does not
    log = []

    def hook1(g):
        log.append(1)
        return g * 3

    def hook2(gs):
        log.append(2)
        return tuple(g * 2 for g in gs)

    a = leaf(1.0)
    b = a.clone()
    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)
    acc = b.grad_fn.next_functions[0][0]
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)

    b.sum().backward(retain_graph=True)
    assert log == [1, 2, 2, 1, 1, 2]
    assert float(a.grad) == 3 * 2 * 2 * 3 * 3 * 2

    log.clear()
    ga, = A.grad(b.sum(), inputs=(a,), retain_graph=True)
    assert log == [1, 2, 2, 1, 1]
    assert float(ga) == 3 * 2 * 2 * 3 * 3  # the captured gradient saw the tensor pre-hooks

    log.clear()
    b.sum().backward(inputs=(b,))
    assert log == [1, 2, 2]
    # retains_grad hooks run after the tensor pre-hooks but before grad_fn pre-hooks
    assert float(b.grad) == 3


def test_full_order_on_one_node():
    # NOTE [Hooks ordering]: tensor pre-hooks, retains_grad, grad_fn pre-hooks, node, post-hooks,
    # and every later hook sees the previous one's replacement.
    log = []
    a = leaf([1.0])
    b = a * 5
    c = b * 1  # its node is b's consumer; b's hooks live on b.grad_fn
    node = b.grad_fn

    def tensor_hook(tag, factor):
        def h(g):
            log.append((tag, float(g)))
            return g * factor
        return h

    node.register_prehook(lambda gs: log.append(("pre", float(gs[0]))) or (gs[0] + 1,))
    node.register_hook(lambda gi, go: log.append(("post", float(gi[0]), float(go[0]))))
    b.register_hook(tensor_hook("t1", 2))
    b.retain_grad()
    b.register_hook(tensor_hook("t2", 3))  # registered after retain_grad, still runs before it
    c.sum().backward()
    assert log == [("t1", 1.0), ("t2", 2.0), ("pre", 6.0), ("post", 35.0, 7.0)]
    assert float(b.grad) == 6.0  # the retains_grad hook saw both tensor hooks, not the grad_fn pre-hook
    assert float(a.grad) == 35.0


def test_retains_grad_can_always_observe_tensor_prehook():
    # test_retains_grad_can_always_observe_tensor_prehook
    def tensor_prehook(g):
        return g * 2

    a = leaf(1.0)
    b = a.clone()
    b.register_hook(tensor_prehook)
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert float(b.grad) == 4

    a = leaf(1.0)
    b = a.clone()
    b.retain_grad()
    b.register_hook(tensor_prehook)
    b.clone().backward()
    assert float(b.grad) == 2


def test_accumulate_grad_posthooks_can_observe_tensor_prehook():
    # test_accumulate_grad_posthooks_can_observe_tensor_prehook
    a = leaf(1.0)
    calls = []

    def posthook(grad_inputs, grad_outputs):
        assert float(grad_outputs[0]) == 2.0
        assert len(grad_inputs) == 0
        calls.append("post")

    def prehook(grad_outputs):
        assert float(grad_outputs[0]) == 2.0 and len(grad_outputs) == 1
        calls.append("pre")

    b = a.clone()
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(posthook)
    acc.register_prehook(prehook)
    a.register_hook(lambda g: g * 2)
    b.backward()
    assert calls == ["pre", "post"]


def test_accumulate_grad_posthooks_should_not_execute():
    # test_accumulate_grad_posthooks_should_not_execute
    def boom(*args):
        raise RuntimeError("must not run")

    a = leaf(1.0)
    a.register_hook(boom)
    b = leaf(1.0)
    c = a.clone()
    c.grad_fn.next_functions[0][0].register_hook(boom)
    (a + b + c).sum().backward(inputs=[b])
    assert float(b.grad) == 1.0 and a.grad is None


def test_hook_edge_case_when_called_with_grad():
    # test_hook_edge_case_when_called_with_grad: grad() runs the tensor hooks of a captured
    # input but not the grad_fn pre-hooks or post-hooks of its node
    a = leaf(1.0)
    b = a * 2
    c = b * 2
    counts = {"tensor": 0, "pre": 0, "post": 0}

    def bump(key):
        def h(*args):
            counts[key] += 1
        return h

    a.register_hook(bump("tensor"))
    b.register_hook(bump("tensor"))
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(bump("post"))
    acc.register_prehook(bump("pre"))
    b.grad_fn.register_hook(bump("post"))
    b.grad_fn.register_prehook(bump("pre"))

    def run(f):
        for k in counts:
            counts[k] = 0
        f()
        return dict(counts)

    assert run(lambda: A.grad(c, inputs=(b,), retain_graph=True)) == {"tensor": 1, "pre": 0, "post": 0}
    assert run(lambda: A.grad(c, inputs=(a, b), retain_graph=True)) == {"tensor": 2, "pre": 1, "post": 1}
    assert run(lambda: c.backward(retain_graph=True)) == {"tensor": 2, "pre": 2, "post": 2}
    assert run(lambda: c.backward(inputs=(a, b), retain_graph=True)) == {"tensor": 2, "pre": 2, "post": 2}


# ---- retain_grad ---------------------------------------------------------------------------------------
def test_retain_grad():
    # test_retain_grad
    inp = leaf(np.array([[0.5, 1.0, 2.0]]))
    h1 = inp * 3
    out = (h1 * h1).sum()
    h1.retain_grad()
    h1.retain_grad()  # several calls are fine
    assert h1.retains_grad
    out.backward(retain_graph=True)
    np.testing.assert_allclose(npy(h1.grad), npy(h1) * 2)
    out.backward(retain_graph=True)
    np.testing.assert_allclose(npy(h1.grad), npy(h1) * 4)  # accumulated
    with jg.no_grad():
        inp.grad.zero_()
    inp.retain_grad()  # a no-op on leaves
    inp.retain_grad()
    assert not inp.retains_grad
    out.backward()
    np.testing.assert_allclose(npy(inp.grad), npy(inp) * 18)
    with pytest.raises(RuntimeError, match="can't retain_grad on Tensor that has requires_grad=False"):
        jg.ones(2).retain_grad()


def test_retain_grad_keeps_history_under_create_graph():
    x = leaf([1.0, 2.0])
    y = x * x
    y.retain_grad()
    z = (y * x).sum()  # dz/dy = x depends on x
    gx, = A.grad(z, x, create_graph=True)
    assert y.grad.grad_fn is not None
    np.testing.assert_allclose(npy(y.grad), [1.0, 2.0])
    gy2, = A.grad(y.grad.sum(), x)
    np.testing.assert_allclose(npy(gy2), [1.0, 1.0])


def test_retain_grad_inplace():
    # test_retain_grad_inplace: the hook moves to the new grad_fn, .grad is w.r.t. the latest version
    a = leaf([1.0]).clone()
    a.retain_grad()
    old = a.grad_fn
    a.mul_(2)
    assert a.grad_fn is not old
    assert not old._retains_grad_hooks and a.grad_fn._retains_grad_hooks
    a.sum().backward()
    np.testing.assert_allclose(npy(a.grad), [1.0])

    a = leaf([1.0]).clone()
    a.retain_grad()
    a.mul_(2)
    a.mul_(2)  # several times
    (a * 5).sum().backward()
    np.testing.assert_allclose(npy(a.grad), [5.0])

    # the base did not require grad: nothing to move
    x = jg.zeros(4)
    x.add_(jg.randn(4, requires_grad=True))
    assert x.requires_grad and x.grad_fn is not None


# (chunk's outputs are views made by one op: PyTorch refuses to write them in place, tests/test_views.py)
@pytest.mark.parametrize("fn", [DoubleMul.apply], ids=["custom"])
def test_retains_grad_inplace_multiple_outputs(fn):
    # test_retains_grad_inplace_multiple_outputs
    b = leaf(np.arange(1.0, 5.0))
    first, second = fn(b)
    first.retain_grad()
    second.retain_grad()
    first.mul_(2)
    (first + second * 3).sum().backward()
    gfirst, gsecond = first.grad, second.grad

    a = b.detach().requires_grad_(True)
    first, second = fn(a)
    first.mul_(2)
    out = (first + second * 3).sum()
    e_first, e_second = A.grad(out, inputs=(first, second))
    np.testing.assert_allclose(npy(gfirst), npy(e_first))
    np.testing.assert_allclose(npy(gsecond), npy(e_second))
    np.testing.assert_allclose(npy(gfirst), np.ones(npy(gfirst).shape))
    np.testing.assert_allclose(npy(gsecond), np.full(npy(gsecond).shape, 3.0))


# ---- tensor hooks and in-place -----------------------------------------------------------------------
def test_tensor_hooks_inplace():
    # test_tensor_hooks_inplace: a hook registered before an in-place op sees the gradient of
    # the old value, one registered after sees the new value's
    count1, count2 = [0], [0]

    def fn1(grad):
        count1[0] += 1
        np.testing.assert_allclose(npy(grad), [4.0])  # x2 from mul_, x2 from fn2
        return grad * 2

    def fn2(grad):
        count2[0] += 1
        np.testing.assert_allclose(npy(grad), [1.0])
        return grad * 2

    a = leaf([1.0])
    b = a.clone()
    b.register_hook(fn1)
    b.mul_(2)
    b.register_hook(fn2)
    b.sum().backward()
    assert count1 == [1] and count2 == [1]
    np.testing.assert_allclose(npy(a.grad), [8.0])

    count3 = [0]

    def fn3(grad):
        count3[0] += 1
        np.testing.assert_allclose(npy(grad), [4.0])
        return grad * 2

    a = leaf([1.0])
    b = a.clone()
    b.register_hook(fn3)
    b.mul_(2)
    b.mul_(2)
    b.sum().backward()
    assert count3 == [1]
    np.testing.assert_allclose(npy(a.grad), [8.0])


@pytest.mark.parametrize("fn", [DoubleMul.apply], ids=["custom"])
def test_tensor_hooks_inplace_multiple_outputs(fn):
    # test_tensor_hooks_inplace_multiple_outputs
    counts = [0, 0, 0]
    b = leaf(np.arange(1.0, 5.0))
    out1, out2 = fn(b)
    shape = out1.shape

    def fn0(grad):
        counts[0] += 1
        np.testing.assert_allclose(npy(grad), np.full(shape, 2.0))

    def fn1(grad):
        counts[1] += 1
        np.testing.assert_allclose(npy(grad), np.full(shape, 3.0))

    def fn2(grad):
        counts[2] += 1
        np.testing.assert_allclose(npy(grad), np.ones(shape))

    h1 = out1.register_hook(fn0)
    h2 = out2.register_hook(fn1)
    out1.mul_(2)
    h3 = out1.register_hook(fn2)
    (out1 + out2 * 3).sum().backward()
    assert counts == [1, 1, 1]
    for h in (h1, h2, h3):
        h.remove()


# ---- post-accumulate-grad hooks -------------------------------------------------------------------------
def test_post_accumulate_grad_hook_ordering():
    # test_post_accumulate_grad_hook_ordering: tensor prehook, acc prehook, post-acc hook, acc posthook
    tensor = jg.tensor(np.random.default_rng(0).random(3), dtype=F64, requires_grad=True)
    acc_grad = (tensor * 1).grad_fn.next_functions[0][0]
    tensor.register_hook(lambda g: g.sub(2.0))
    acc_grad.register_prehook(lambda go: (go[0].div(5.0),))

    def post_acc_grad_hook(t):
        t.grad.add_(0.5)

    tensor.register_post_accumulate_grad_hook(post_acc_grad_hook)

    def acc_grad_node_post_hook(grad_in, grad_out):
        tensor.grad = grad_out[0].mul(10)

    acc_grad.register_hook(acc_grad_node_post_hook)
    tensor.sum().backward()
    # ((1 - 2) / 5 + 0.5) * 10 = 3: the post-hook's grad_outputs alias the stored .grad
    np.testing.assert_allclose(npy(tensor.grad), [3.0, 3.0, 3.0])


def test_post_accumulate_grad_hooks():
    # test_post_accumulate_grad_hook_multiple_hooks / _multiple_tensors / _returns_not_None / _on_non_leaf
    t = leaf([1.0, 2.0, 3.0])
    ref = npy(t).copy()
    def hook1(x):
        x.sub_(x.grad)

    def hook2(x):
        x.mul_(4.0)

    t.register_post_accumulate_grad_hook(hook1)
    t.register_post_accumulate_grad_hook(hook2)
    t.sum().backward()
    np.testing.assert_allclose(npy(t), 4.0 * (ref - 1.0))  # both, in order

    t1, t2 = leaf([1.0, 2.0]), leaf([3.0])
    for t in (t1, t2):
        t.register_post_accumulate_grad_hook(hook1)
    t1.sum().backward()
    t2.sum().backward()
    np.testing.assert_allclose(npy(t1), [0.0, 1.0])
    np.testing.assert_allclose(npy(t2), [2.0])

    bad = leaf(np.ones((2, 3)))
    bad.register_post_accumulate_grad_hook(lambda x: x.grad)
    with pytest.raises(RuntimeError, match="hooks should return None."):
        bad.sum().backward()
    with pytest.raises(RuntimeError, match="post accumulate grad hooks cannot be registered on non-leaf tensors"):
        (leaf([1.0]) * 2).register_post_accumulate_grad_hook(lambda x: None)

    # removing the handle stops it
    p = leaf([1.0])
    calls = []
    h = p.register_post_accumulate_grad_hook(lambda x: calls.append(float(x.grad)))  # append -> None
    p.sum().backward()
    h.remove()
    p.sum().backward()
    assert calls == [1.0]


def _hook_tuple_none_case(lib, where):
    """One scenario: a node hook returns a tuple whose entry for one gradient is None."""
    a = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    b = lib.tensor([3.0, 4.0], dtype=lib.float64, requires_grad=True)
    y = a * b
    if where == "pre":
        y.grad_fn.register_prehook(lambda go: (None,))
    elif where == "post":
        y.grad_fn.register_hook(lambda gi, go: (None, gi[1] * 10))
    elif where == "post_chain":
        y.grad_fn.register_hook(lambda gi, go: (gi[0] * 2, gi[1] * 10))
        y.grad_fn.register_hook(lambda gi, go: (None, gi[1] + 1))
    elif where == "pre_two_outputs":
        p, q = (a * b).chunk(2)  # one SplitBackward0 node with two outputs
        p.grad_fn.register_prehook(lambda go: (None, go[1] * 10))
        y = lib.cat([p * 1, q * 2])
    y.sum().backward()
    return [None if t.grad is None else np.asarray(t.grad.detach().numpy()) for t in (a, b)]


@pytest.mark.parametrize("where", ["pre", "post", "post_chain", "pre_two_outputs"])
def test_node_hook_tuple_with_none_entry_drops_that_gradient(where):
    # PyTorch's _call_hooks: a None entry in a returned tuple makes that gradient undefined
    # (unlike a hook returning None, which keeps every gradient); checked against torch itself.
    torch = pytest.importorskip("torch")
    expected = _hook_tuple_none_case(torch, where)
    got = _hook_tuple_none_case(jg, where)
    for e, g in zip(expected, got):
        assert (e is None) == (g is None), (expected, got)
        if e is not None:
            np.testing.assert_allclose(g, e)
