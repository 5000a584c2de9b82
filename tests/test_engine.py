"""The backward engine (engine.cpp): accumulation, grad()/backward(inputs=), pruning,
retain_graph, create_graph, ready-queue order, validate_outputs, errors, final callbacks,
reentrant backward, Python threads, device threads and gradient trimming.

Scenarios are ported from PyTorch's test/test_autograd.py (the upstream test is named in
each test's comment) and written fresh against jgrad. Values are checked against jax.grad
or NumPy, never against jgrad itself.
"""
import sys
import threading
import traceback
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import autograd as A
from jgrad.autograd import Function, once_differentiable
from jgrad.autograd import engine as engine_mod

F64 = jg.float64
pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")


def npy(t):
    return np.asarray(t.detach().numpy())


def leaf(data, dtype=F64, device=None):
    return jg.tensor(data, dtype=dtype, device=device, requires_grad=True)


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# ---- accumulation into .grad -----------------------------------------------------------
@pytest.mark.x64  # its jax reference is float64
def test_backward_accumulates_into_grad_and_matches_jax():
    # test_backward / test_multi_backward / test_dependent_backward
    xv, yv = rnd(5, 5, seed=1), rnd(5, 5, seed=2) ** 2 + 0.5
    gv = rnd(5, 5, seed=3)
    x, y = leaf(xv), leaf(yv)

    def f(x, y):
        return x + x * y + 4 * y ** 2 * x / y

    out = f(x, y)
    out.backward(jg.tensor(gv, dtype=F64))
    jx, jy = jax.grad(lambda x, y: jnp.sum(f(x, y) * gv), argnums=(0, 1))(xv, yv)
    np.testing.assert_allclose(npy(x.grad), jx, rtol=1e-10)
    np.testing.assert_allclose(npy(y.grad), jy, rtol=1e-10)
    # a second backward through a new graph accumulates
    f(x, y).backward(jg.tensor(gv, dtype=F64))
    np.testing.assert_allclose(npy(x.grad), 2 * jx, rtol=1e-10)
    np.testing.assert_allclose(npy(y.grad), 2 * jy, rtol=1e-10)

    # several roots at once; y**2 and y**3 depend on each other (test_dependent_backward)
    z = leaf(rnd(10, seed=4))
    a = z ** 2
    b = a ** 3
    ga, gb = rnd(10, seed=5), rnd(10, seed=6)
    A.backward([a, b], [jg.tensor(ga, dtype=F64), jg.tensor(gb, dtype=F64)])
    zv = rnd(10, seed=4)
    np.testing.assert_allclose(npy(z.grad), 2 * zv * ga + 6 * zv ** 5 * gb, rtol=1e-10)


def test_accumulate_in_place_without_create_graph_out_of_place_with():
    # test_accumulate_grad and test_accumulate_grad_tensor_reference
    for create_graph in (False, True):
        x = leaf(rnd(5, 5))
        y = x + 2
        y.backward(jg.ones(5, 5, dtype=F64), retain_graph=True)
        g_first = x.grad
        snapshot = npy(g_first).copy()
        y.backward(jg.ones(5, 5, dtype=F64), create_graph=create_graph)
        np.testing.assert_allclose(npy(x.grad), 2 * snapshot)
        # in place (same object, updated) only without create_graph
        assert (x.grad is g_first) is (not create_graph)
        np.testing.assert_allclose(npy(g_first), 2 * snapshot if not create_graph else snapshot)

    # a gradient the caller holds is never aliased into .grad
    p = leaf([1.5, 1.5])
    g = jg.tensor([1.0, 2.0], dtype=F64)
    p.backward(g)
    assert p.grad is not g
    p.backward(g)
    np.testing.assert_allclose(npy(g), [1.0, 2.0])
    np.testing.assert_allclose(npy(p.grad), [2.0, 4.0])


def test_accumulate_grad_with_zero_numel_grad():
    # test_accumulate_grad_with_zero_numel_grad
    a = leaf(np.zeros((4, 0)))
    b = leaf(rnd(4, 1))
    c = a + b
    assert c.shape == (4, 0)
    c.sum().backward()
    np.testing.assert_array_equal(npy(b.grad), np.zeros((4, 1)))
    assert a.grad.shape == (4, 0)


def test_create_graph_accumulates_history_hessian_vector():
    # test_hessian_vector / test_grad
    xv, yv = rnd(2, 2, seed=7), rnd(2, 2, seed=8)
    x, y = leaf(xv), leaf(yv)
    z = x ** 2 + y * x + y ** 2
    z.backward(jg.ones(2, 2, dtype=F64), create_graph=True)
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv)
    np.testing.assert_allclose(npy(y.grad), xv + 2 * yv)
    assert x.grad.grad_fn is not None
    grad_sum = 2 * x.grad + y.grad
    x_hv, = A.grad(grad_sum, x, jg.ones(2, 2, dtype=F64), create_graph=True)
    np.testing.assert_allclose(npy(x_hv), np.full((2, 2), 5.0))
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv)  # grad() leaves .grad alone
    grad_sum.backward(jg.ones(2, 2, dtype=F64))
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv + 5)
    np.testing.assert_allclose(npy(y.grad), xv + 2 * yv + 4)
    x.grad = None
    y.grad = None


# ---- grad(inputs=) vs backward(inputs=) ------------------------------------------------
@pytest.mark.x64  # its jax reference is float64
def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    # test_grad_nonleaf
    yv = rnd(2, 2, seed=9)
    x_init = leaf(rnd(2, 2, seed=10))
    y = leaf(yv)
    x = x_init
    for _ in range(3):
        gx, = A.grad(x ** 2 + y * x + y ** 2, x, jg.ones(2, 2, dtype=F64), create_graph=True)
        np.testing.assert_allclose(npy(gx), 2 * npy(x) + yv, rtol=1e-12)
        assert y.grad is None and x_init.grad is None
        x = x + 0.05 * gx
    x.backward(jg.ones(2, 2, dtype=F64))
    assert y.grad is not None and x_init.grad is not None
    # compare the whole unrolled chain with jax.grad

    def chain(x0, y):
        x = x0
        for _ in range(3):
            x = x + 0.05 * (2 * x + y)
        return x.sum()

    jx, jy = jax.grad(chain, argnums=(0, 1))(rnd(2, 2, seed=10), yv)
    np.testing.assert_allclose(npy(x_init.grad), jx, rtol=1e-10)
    np.testing.assert_allclose(npy(y.grad), jy, rtol=1e-10)


def test_backward_with_inputs_only_accumulates_those():
    # test_backward_with_inputs / test_backward_with_scalar_input
    xv, yv = rnd(2, 2, seed=11), rnd(2, 2, seed=12)
    x, y = leaf(xv), leaf(yv)

    def fn():
        return x ** 2 + y * x + y ** 2

    ones = jg.ones(2, 2, dtype=F64)
    A.backward(fn(), ones, inputs=[x])
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv)
    assert y.grad is None
    A.backward(fn(), ones, inputs=y)
    np.testing.assert_allclose(npy(y.grad), xv + 2 * yv)
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv)
    with pytest.raises(RuntimeError, match="cannot be empty"):
        A.backward(fn(), ones, inputs=[])
    s = leaf(1.5)
    (s ** 2).backward(inputs=s)
    assert float(s.grad) == pytest.approx(3.0)


def test_backward_with_nonleaf_inputs():
    # test_backward_with_nonleaf_inputs
    xv, yv = rnd(2, 2, seed=13), rnd(2, 2, seed=14)
    x, y, z = leaf(xv), leaf(yv), leaf(rnd(2, 2, seed=15))
    x_nonleaf = x * 1
    out = x_nonleaf ** 2 + y * x_nonleaf + y ** 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the create_graph reference-cycle warning
        out.backward(jg.ones(2, 2, dtype=F64), create_graph=True, inputs=[x, y, x_nonleaf])
    np.testing.assert_allclose(npy(y.grad), xv + 2 * yv)
    np.testing.assert_allclose(npy(x.grad), 2 * xv + yv)
    np.testing.assert_allclose(npy(x_nonleaf.grad), 2 * xv + yv)
    assert x_nonleaf.retains_grad
    # backward has no allow_unused: an unused input just gets no gradient
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out.backward(jg.ones(2, 2, dtype=F64), create_graph=True, inputs=[z])
    assert z.grad is None


def test_grad_with_nonleaf_inputs_and_many_outputs():
    # test_grad_nonleaf_many_outputs
    x = leaf(rnd(4, 2, seed=16))
    a, b = x.chunk(2)
    called = []
    x.register_hook(lambda g: called.append(g))
    go = rnd(2, 2, seed=17)
    ga, gb = A.grad(a + 2 * b, [a, b], jg.tensor(go, dtype=F64), create_graph=True)
    np.testing.assert_allclose(npy(ga), go)
    np.testing.assert_allclose(npy(gb), 2 * go)
    assert called == [] and x.grad is None
    # both a non-leaf and a leaf on the same path (test_current_graph_task_execution_order)
    x2 = leaf(1.0)
    b2 = x2 * 2
    out = b2.sin()
    gx, gb2 = A.grad(out, (x2, b2))
    assert float(gb2) == pytest.approx(np.cos(2.0))
    assert float(gx) == pytest.approx(2 * np.cos(2.0))


def test_grad_unreachable_inputs():
    # test_grad_unreachable / test_grad_unreachable_discovery
    x, y = leaf([1.0]), leaf([1.0])
    z, w = x * 2, y * 2  # both get grad accumulators
    gx, gy = A.grad(x * 2, [x, y], allow_unused=True)
    np.testing.assert_allclose(npy(gx), [2.0])
    assert gy is None
    fresh = leaf([1.0])  # no grad accumulator at all
    gx, gf = A.grad(x * 2, [x, fresh], allow_unused=True)
    assert gf is None
    with pytest.raises(RuntimeError, match="Set allow_unused=True"):
        A.grad(x * 2, [x, y], allow_unused=False)

    class MustNotRun(Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("This node should not be executed!")

    out = MustNotRun.apply(leaf([1.0]) * 2)
    u = leaf([1.0])
    assert A.grad(out, (u,), allow_unused=True) == (None,)
    out = MustNotRun.apply(leaf([1.0]) * 2)
    v = leaf([1.0])
    gu, gv = A.grad(out + v, (u, v), allow_unused=True)
    assert gu is None and float(gv) == 1.0
    out = MustNotRun.apply(leaf([1.0]) * 2)
    A.backward(out, inputs=(u,))  # allow_unused is implicitly True
    assert u.grad is None


def test_gradient_edges_as_inputs_and_outputs():
    # test_grad_to_node / test_grad_to_node_inplace / test_gradient_edge_output / test_backward_to_node
    G = A.graph
    x = leaf(rnd(2, seed=30))
    out = x.clone()
    edge = G.get_gradient_edge(x)
    assert edge.node is out.grad_fn.next_functions[0][0] and edge.output_nr == 0
    assert A.grad(out.sum(), edge)[0].tolist() == A.grad(out.sum(), x, retain_graph=False)[0].tolist() == [1, 1]

    y = leaf(rnd(2, seed=31)).clone()
    y_edge = G.get_gradient_edge(y)
    y *= 2  # the edge still names the value before the in-place op
    g_old, g_new = A.grad(y.sum(), (y_edge, y))
    np.testing.assert_array_equal(npy(g_old), [2.0, 2.0])
    np.testing.assert_array_equal(npy(g_new), [1.0, 1.0])

    z = leaf(rnd(2, seed=32))
    tmp = z * 3
    tmp_edge = G.get_gradient_edge(tmp)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        A.backward(tmp_edge, inputs=(z,))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        A.backward(tmp_edge, jg.ones(4, dtype=F64), inputs=(z,))
    A.backward(tmp_edge, jg.ones(2, dtype=F64), inputs=(z,))
    np.testing.assert_array_equal(npy(z.grad), [3.0, 3.0])

    u = leaf(rnd(2, seed=33)).clone()
    v = leaf(rnd(2, seed=34)).clone()
    with pytest.raises(RuntimeError, match="materialize_grads cannot be used when the given input is a GradientEdge"):
        A.grad(u.clone().sum(), (u, G.get_gradient_edge(v)), allow_unused=True, materialize_grads=True)


def test_calling_a_node_directly():
    # test_grad_fn_badcalls
    x = leaf([1.0])
    y = x * x
    with pytest.raises(TypeError, match="expected .* arguments, got .* instead"):
        y.grad_fn(x.detach(), x.detach())
    with pytest.raises(TypeError, match="expected .* arguments, got .* instead"):
        y.grad_fn()
    ga, gb = y.grad_fn(jg.ones(1, dtype=F64))  # one gradient per next function
    np.testing.assert_allclose(npy(ga), [1.0])
    np.testing.assert_allclose(npy(gb), [1.0])


def test_next_functions_follow_the_ops_inputs():
    # PyTorch: `x * 2` keeps an edge for the scalar, `x.clamp(0, 1)` has none for its bounds;
    # an op declares its graph inputs with Op(edge_args=...), the kernel stays positional.
    from jgrad.runtime._dispatch import Op, call

    x = leaf([0.5, 2.0])
    assert [(type(n).__name__ if n is not None else None, i) for n, i in (x * 2).grad_fn.next_functions] == \
        [("AccumulateGrad", 0), (None, 0)]
    clip = Op("ClipBackward0", lambda a, lo, hi: jnp.clip(a, lo, hi), edge_args=(0,))
    w = leaf([1.0, 3.0])
    y = call(clip, x * w, 0.0, 1.5)
    assert len(y.grad_fn.next_functions) == 1 and y.grad_fn.next_functions[0][0].name() == "MulBackward0"
    seen = []
    y.grad_fn.register_hook(lambda gi, go: seen.append(len(gi)))
    gx, gw = A.grad(y.sum(), (x, w))
    assert seen == [1]
    f = lambda x, w: jnp.sum(jnp.clip(x * w, 0.0, 1.5))  # noqa: E731
    jx, jw = jax.grad(f, argnums=(0, 1))(np.array([0.5, 2.0]), np.array([1.0, 3.0]))
    np.testing.assert_allclose(npy(gx), jx)
    np.testing.assert_allclose(npy(gw), jw)


def test_pruning_by_topological_nr():
    # engine.cpp compute_dependencies / init_to_execute: nothing created before the
    # earliest input (smaller topological_nr) is even traversed.
    a = leaf([1.0, 2.0])

    class Boom(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            raise AssertionError("pruned node ran")

    b = Boom.apply(a)
    c = b * 2
    d = c.sin()
    acc = jg.autograd.graph.get_gradient_edge(a)[0]
    assert acc.topological_nr == 0
    assert b.grad_fn.topological_nr == 1
    assert c.grad_fn.topological_nr == 2 and d.grad_fn.topological_nr == 3
    seen = {}

    def spy(g):
        task = engine_mod._tls.graph_task
        seen["nodes"] = set(task.nodes_in_graph)
        seen["deps"] = dict(task.dependencies)

    d.register_hook(spy)
    gc, = A.grad(d.sum(), c)
    np.testing.assert_allclose(npy(gc), np.cos(2 * np.array([1.0, 2.0])))
    assert c.grad_fn in seen["nodes"] and b.grad_fn in seen["nodes"]
    assert acc not in seen["nodes"]  # Boom's children were never expanded
    assert acc not in seen["deps"]


# ---- retain_graph ------------------------------------------------------------------------
def test_retain_graph_and_second_backward_error():
    # test_backward_twice_* / test_python_thread_in_middle's error text
    x = leaf([1.0, 2.0, 3.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(npy(x.grad), 4 * np.array([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError, match=r"Trying to backward through the graph a second time") as e:
        y.backward()
    assert "Specify retain_graph=True" in str(e.value)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        A.grad(y, x)
    # grad() frees too; retain_graph=None follows create_graph
    z = (x.exp() * 2).sum()
    A.grad(z, x, create_graph=True)
    A.grad(z, x)
    with pytest.raises(RuntimeError, match="Specify retain_graph=True"):
        A.grad(z, x)

    class Saver(Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * 2

        @staticmethod
        def backward(ctx, g):
            t, = ctx.saved_tensors
            return g * t

    s = Saver.apply(x).sum()
    s.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        s.backward()


# ---- create_graph to third order -----------------------------------------------------------
@pytest.mark.x64  # its jax reference is float64
def test_create_graph_third_order_matches_jax():
    W = rnd(4, 4, seed=20)
    xv = rnd(4, seed=21)

    def h(x, W):
        return jnp.sum(jnp.tanh(W @ x) * x) + jnp.sum(jnp.sin(x) * x ** 3)

    d1 = jax.grad(h)
    d2 = jax.grad(lambda x, W: d1(x, W).sum())
    d3 = jax.grad(lambda x, W: d2(x, W).sum())

    x = leaf(xv)
    w = jg.tensor(W, dtype=F64)
    y = ((w @ x).tanh() * x).sum() + (x.sin() * x ** 3).sum()
    g1, = A.grad(y, x, create_graph=True)
    g2, = A.grad(g1.sum(), x, create_graph=True)
    g3, = A.grad(g2.sum(), x)
    np.testing.assert_allclose(npy(g1), d1(xv, W), rtol=1e-10)
    np.testing.assert_allclose(npy(g2), d2(xv, W), rtol=1e-9)
    np.testing.assert_allclose(npy(g3), d3(xv, W), rtol=1e-8)
    assert g1.requires_grad and g2.requires_grad and not g3.requires_grad


# ---- ready queue order, execution order, task id ----------------------------------------
def _grad_fn_of(t):
    if t.requires_grad and t.grad_fn is None:
        return t.clone().grad_fn.next_functions[0][0]
    return t.grad_fn


def test_current_execution_order_predicts_the_run():
    # test_current_graph_task_execution_order
    predicted, actual = [None], []
    handles = []

    def hook(_):
        predicted[0] = A.graph.current_execution_order()

    def log_hooks(*tensors):
        for t in tensors:
            handles.append(t.register_hook(lambda g, t=t: actual.append(t)))

    t = leaf(1.0).clone().sin().exp()
    t.register_hook(hook)
    with A.set_multithreading_enabled(False):
        t.backward()
    assert [n.name() for n in predicted[0]] == ["ExpBackward0", "SinBackward0", "CloneBackward0", "AccumulateGrad"]

    # not exactly sequence_nr order
    a, b = leaf(1.0), leaf(2.0)
    c, d = b.sin(), a.cos()
    out = c * d
    log_hooks(a, b, c, d, out)
    out.register_hook(hook)
    with A.set_multithreading_enabled(False):
        out.backward()
    assert predicted[0] == [_grad_fn_of(x) for x in actual]
    actual.clear()

    # an AccumulateGrad with several inputs
    a = leaf(1.0)
    b, c = a.sin(), a.cos()
    out = b * c
    log_hooks(a, b, c, out)
    out.register_hook(hook)
    with A.set_multithreading_enabled(False):
        out.backward()
    assert predicted[0] == [_grad_fn_of(x) for x in actual]
    actual.clear()

    # several roots, grad(inputs=)
    a = leaf(1.0)
    b = a * 2
    out, out2, out3 = b.sin(), b.cos(), b.cos()
    out3.register_hook(hook)
    with A.set_multithreading_enabled(False):
        A.grad((out, out3, out2), inputs=(a,))
    assert [n.name() for n in predicted[0]] == ["CosBackward0", "CosBackward0", "SinBackward0", "MulBackward0",
                                                "AccumulateGrad"]
    # inputs= selects a subgraph
    a, b = leaf(1.0), leaf(1.0)
    out = (a * b).sin()
    out.register_hook(hook)
    with A.set_multithreading_enabled(False):
        A.grad((out,), inputs=(a,))
    assert [n.name() for n in predicted[0]] == ["SinBackward0", "MulBackward0", "AccumulateGrad"]

    with pytest.raises(RuntimeError, match="should only be called during the backward pass"):
        A.graph.current_execution_order()
    t = leaf(1.0).clone().sin().exp()
    t.register_hook(hook)
    with pytest.raises(RuntimeError, match="expects the current backward to be executed with multithreading disabled"):
        t.backward()
    for h in handles:
        h.remove()


def test_ready_queue_runs_highest_sequence_nr_first():
    # engine.cpp CompareNodeTaskTime: independent branches run newest first
    a, b, c = leaf(1.0), leaf(2.0), leaf(3.0)
    ra, rb, rc = a.sin(), b.cos(), c.exp()  # created in this order
    ran = []
    for node in (ra.grad_fn, rb.grad_fn, rc.grad_fn):
        node.register_prehook(lambda g, node=node: ran.append(node.name()))
    out = ra * 1.0 + rb * 1.0 + rc * 1.0
    assert ra.grad_fn.sequence_nr < rb.grad_fn.sequence_nr < rc.grad_fn.sequence_nr
    with A.set_multithreading_enabled(False):
        out.backward()
    assert ran == ["ExpBackward0", "CosBackward0", "SinBackward0"]


def test_current_graph_task_id():
    # test_current_graph_task_id
    ids = [-1]

    def hook(_):
        ids[0] = A.graph.current_graph_task_id()

    t = leaf(1.0).clone()
    t.register_hook(hook)
    t.backward(retain_graph=True)
    base = ids[0]
    t.backward(retain_graph=True)
    assert ids[0] - base == 1
    t.backward(retain_graph=True)
    assert ids[0] - base == 2
    assert A.graph.current_graph_task_id() == -1


# ---- validate_outputs -------------------------------------------------------------------
def _bad_fn(make_grad, name="Bad"):
    def backward(ctx, g):
        return make_grad(g)
    return type(name, (Function,), {"forward": staticmethod(lambda ctx, x: x * 2),
                                    "backward": staticmethod(backward)})


def test_validate_outputs_count_shape_dtype_device():
    # test_invalid_gradients and engine.cpp validate_outputs
    x = jg.tensor(rnd(5, 5), dtype=jg.float32, requires_grad=True)
    Bad = _bad_fn(lambda g: jg.randn(10))
    with pytest.raises(RuntimeError, match=r"^Function BadBackward returned an invalid gradient at index 0 - got "
                                           r"\[10\] but expected shape compatible with \[5, 5\]$"):
        Bad.apply(x).sum().backward()

    Two = _bad_fn(lambda g: (g, g), "Two")
    with pytest.raises(RuntimeError, match=r"function TwoBackward returned an incorrect number of gradients "
                                           r"\(expected 1, got 2\)"):
        Two.apply(x).sum().backward()
    # the engine's own count check, as a C++ node would hit it
    with pytest.raises(RuntimeError, match=r"^Function X returned an invalid number of gradients - expected 1, "
                                           r"but got 2$"):
        node = x.clone().grad_fn
        engine_mod.validate_outputs(node.next_edges, [None, None], lambda m: f"Function X returned an {m}")

    # broadcast reduction: a gradient the input's shape expands to is summed back
    Expand = _bad_fn(lambda g: g.expand(3, 5, 5), "Expand")
    x.grad = None
    Expand.apply(x).sum().backward()
    np.testing.assert_allclose(npy(x.grad), np.full((5, 5), 3.0))
    Keep = _bad_fn(lambda g: g.sum(0, keepdim=True), "Keep")  # [1, 5] does not expand to [5, 5] backwards
    with pytest.raises(RuntimeError, match=r"got \[1, 5\] but expected shape compatible with \[5, 5\]"):
        Keep.apply(x).sum().backward()

    # dtype: cast to the input's dtype (float64 and even int64 gradients)
    for make in (lambda g: g.to(jg.float64), lambda g: jg.ones(5, 5, dtype=jg.int64)):
        x.grad = None
        _bad_fn(make, "Cast").apply(x).sum().backward()
        assert x.grad.dtype is jg.float32
        np.testing.assert_allclose(npy(x.grad), np.ones((5, 5)))
    Cplx = _bad_fn(lambda g: g.to(jg.complex64), "Cplx")
    with pytest.raises(RuntimeError, match=r"Function CplxBackward returned an invalid gradient at index 0 - "
                                           r"expected dtype"):
        Cplx.apply(x).sum().backward()

    # device: only 0-dim gradients are moved
    Dev = _bad_fn(lambda g: g.to("cpu:1"), "Dev")
    with pytest.raises(RuntimeError, match=r"Function DevBackward returned an invalid gradient at index 0 - "
                                           rf"expected device {x.device} but got cpu:1"):
        Dev.apply(x).sum().backward()
    s = jg.tensor(2.0, dtype=jg.float32, requires_grad=True)
    _bad_fn(lambda g: g.to("cpu:1"), "Dev0").apply(s).backward()
    assert s.grad.device == s.device and float(s.grad) == 1.0


# ---- errors of backward()/grad() ----------------------------------------------------------
def test_backward_and_grad_argument_errors():
    # test_backward_badcalls / test_grad_badcalls / test_grad_empty_inputs / test_grad
    x = leaf(rnd(3))
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        A.grad(y, x)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape: grad_output\[0\] has a shape of \[2\] and "
                                           r"output\[0\] has a shape of \[3\]"):
        A.grad(y, x, jg.ones(2, dtype=F64))
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        y.backward(jg.ones(2, 2, dtype=F64))
    const = jg.ones(3)
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad and does not have a grad_fn"):
        const.sum().backward()
    with pytest.raises(RuntimeError, match="does not require grad"):
        A.grad((const * 2).sum(), const)
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors does not require grad"):
        A.grad(y.sum(), [x, const])
    with pytest.raises(ValueError, match="grad requires non-empty inputs."):
        A.grad(2 * x, [], grad_outputs=jg.ones(3, dtype=F64))
    unused = leaf([1.0])
    with pytest.raises(RuntimeError, match="One of the differentiated Tensors appears to not have been used in the "
                                           "graph. Set allow_unused=True if this is the desired behavior."):
        A.grad(y.sum(), [x, unused], retain_graph=True)
    gx, gu = A.grad(y.sum(), [x, unused], allow_unused=True, retain_graph=True)
    assert gu is None


def test_materialize_grads():
    # test_grad_materialize_grads / test_unused_grad_requires_grad_with_materialize
    x = leaf(0.5)
    a = leaf(1.0)
    y = x * a
    dydx = A.grad(y, x, create_graph=True)
    d2_none = A.grad(dydx, x, create_graph=True, allow_unused=True)
    d2 = A.grad(dydx, x, create_graph=True, allow_unused=True, materialize_grads=True)
    d3 = A.grad(d2, x, materialize_grads=True)
    assert d2_none[0] is None
    assert float(d2[0]) == 0.0 and float(d3[0]) == 0.0
    with pytest.raises(ValueError, match="Expected allow_unused to be True or not passed when"):
        A.grad(y, x, allow_unused=False, materialize_grads=True)
    u, v = leaf(np.ones(10)), leaf(np.ones(10))
    g = A.grad((u ** 2).sum(), (u, v), allow_unused=True, materialize_grads=True)
    assert not g[0].requires_grad and not g[1].requires_grad
    np.testing.assert_array_equal(npy(g[1]), np.zeros(10))


# ---- final callbacks ---------------------------------------------------------------------------
def test_queue_callback_only_during_backward_in_order_and_nested():
    # test_callback_adds_callback / Engine::queue_callback
    with pytest.raises(RuntimeError, match="^Final callbacks can only be installed during backward pass.$"):
        A.queue_callback(lambda: None)
    log = []
    seen_grad = []
    x = leaf([1.0, 2.0])

    def final():
        log.append("final")

    def adds():
        log.append("adds")
        A.queue_callback(final)

    class MyFunc(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            A.queue_callback(adds)
            A.queue_callback(lambda: log.append("second"))
            A.queue_callback(lambda: seen_grad.append(x.grad))
            log.append("backward")
            return g

    MyFunc.apply(x * 3).sum().backward()
    # callbacks run after every gradient is in, in order, including ones queued by callbacks
    assert log == ["backward", "adds", "second", "final"]
    np.testing.assert_allclose(npy(seen_grad[0]), [3.0, 3.0])


def test_callbacks_of_a_reentrant_backward_run_when_it_ends():
    # test_reentrant_with_callbacks
    log = []

    class Inner(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            A.queue_callback(lambda: log.append("inner-cb"))
            log.append("inner")
            return g

    class Outer(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            A.queue_callback(lambda: log.append("outer-cb"))
            with jg.enable_grad():
                Inner.apply(leaf([1.0])).sum().backward()
            log.append("outer")
            return g

    Outer.apply(leaf([1.0])).sum().backward()
    assert log == ["inner", "inner-cb", "outer", "outer-cb"]


def test_callback_errors_reach_the_caller():
    class Fn(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            A.queue_callback(lambda: 1 / 0)
            return g

    with pytest.raises(ZeroDivisionError):
        Fn.apply(leaf([1.0])).sum().backward()
    x = leaf([2.0])
    (x * x).sum().backward()  # still usable
    assert float(x.grad) == 4.0


# ---- reentrant backward -------------------------------------------------------------------------
class DeepReentrant(Function):
    # test_deep_reentrant
    @staticmethod
    def forward(ctx, x):
        with jg.enable_grad():
            ctx.x = jg.tensor(x.item(), dtype=F64, requires_grad=True) - 1
        return ctx.x.detach()

    @staticmethod
    def backward(ctx, g):
        if ctx.x.item() < 0:
            return g
        with jg.enable_grad():
            DeepReentrant.apply(ctx.x).sum().backward()
        return g


def test_deep_reentrant_backward_from_custom_function():
    # test_deep_reentrant: 1000 levels, past the per-thread depth limit into the worker pool
    limit = sys.getrecursionlimit()
    v = leaf(1000.0)
    DeepReentrant.apply(v).sum().backward()
    assert float(v.grad) == 1.0
    v2 = leaf(100.0)  # again, reusing the pool's workers
    DeepReentrant.apply(v2).sum().backward()
    assert float(v2.grad) == 1.0
    assert sys.getrecursionlimit() == limit


def test_deep_reentrant_backward_from_hooks():
    depth = [0]
    max_seen = [0]

    def make(level):
        t = leaf([1.0])
        y = t * 2

        def hook(g):
            depth[0] += 1
            max_seen[0] = max(max_seen[0], depth[0])
            if level > 0:
                with jg.enable_grad():  # hooks run with the backward's grad mode (off)
                    make(level - 1).sum().backward()
            depth[0] -= 1
            return g * 3

        y.register_hook(hook)
        return y

    root = leaf([1.0])
    out = make(999) * root
    out.sum().backward()
    assert max_seen[0] == 1000
    assert float(root.grad) == 2.0


def test_reentrant_tasks_have_priority():
    # test_reentrant_priority
    order = []

    class MyFunction(Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            order.append("MyFunction")
            return g

    class Reentrant(Function):
        @staticmethod
        def forward(ctx, x):
            with jg.enable_grad():
                ctx.x = jg.tensor(x.item(), dtype=F64, requires_grad=True) - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, g):
            order.append("Reentrant")
            if ctx.x.item() < 0:
                return g
            with jg.enable_grad():
                Reentrant.apply(ctx.x).backward()
            return g

    a = MyFunction.apply(leaf(6.0))
    b = Reentrant.apply(leaf(9.0))
    (a * b).backward()
    assert len(order) == 11 and order.count("Reentrant") == 10 and order[-1] == "MyFunction"


def test_grad_mode_restored_after_reentrant_grad():
    # test_grad_mode_restored_reentrant
    seen = []

    class MyFunction(Function):
        @staticmethod
        def forward(ctx, inp):
            return inp.clone()

        @staticmethod
        def backward(ctx, go):
            original = jg.is_grad_enabled()
            with jg.enable_grad():
                foo = leaf(np.ones(3) * 2)
                grad, = A.grad(foo ** 3, foo, grad_outputs=go)
                assert jg.is_grad_enabled()
            seen.append((original, jg.is_grad_enabled()))
            return grad

    inp = leaf(np.ones(3))
    MyFunction.apply(inp).sum().backward()
    np.testing.assert_allclose(npy(inp.grad), np.full(3, 12.0))
    MyFunction.apply(inp).sum().backward(create_graph=True)
    assert seen == [(False, False), (True, True)]
    inp.grad = None


def test_reentrant_child_error_reaches_the_caller():
    # test_reentrant_child_error
    class SimulateBackwardError(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            raise Exception("Simulate error on backward pass")  # noqa: TRY002

    a = leaf(rnd(3, 3))
    c = a * a
    b = leaf(rnd(3, 3))
    reentrant_root = SimulateBackwardError.apply(b * b).sum()

    class ReentrantFunc(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            reentrant_root.backward()
            return g

    with pytest.raises(Exception, match="Simulate error"):
        ReentrantFunc.apply(c).sum().backward()
    (a * 2).sum().backward()
    np.testing.assert_allclose(npy(a.grad), np.full((3, 3), 2.0))


# ---- Python threads --------------------------------------------------------------------------------
def _run_threads(fn, n, args=()):
    errors = []

    def run():
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors


def test_concurrent_backward_on_independent_graphs():
    # TestMultithreading.test_simple_backward
    results = {}

    def train(i):
        xv = rnd(5, 5, seed=100 + i)
        for _ in range(3):
            x = leaf(xv)
            y = (x + 3) * (x + 4) * 0.5
            y.sum().backward()
            np.testing.assert_allclose(npy(x.grad), xv + 3.5)
        results[i] = True

    errs = []
    threads = [threading.Thread(target=lambda i=i: errs.append(None) if train(i) else None) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 6


def test_concurrent_backward_shared_leaf_accumulates_every_gradient():
    # TestMultithreading.test_simple_backward_same_input
    x = leaf(np.ones((5, 5)))

    def train():
        for _ in range(5):
            y = (x + 3) * (x + 4) * 0.5
            y.sum().backward()

    assert _run_threads(train, 8) == []
    np.testing.assert_allclose(npy(x.grad), np.full((5, 5), 40 * 4.5))

    def train_grad():
        y = (x + 3) * (x + 4) * 0.5
        g, = A.grad(y.sum(), x)
        np.testing.assert_allclose(npy(g), np.full((5, 5), 4.5))

    assert _run_threads(train_grad, 8) == []


def test_concurrent_backward_through_one_shared_graph():
    # TestMultithreading.test_python_thread_in_middle
    outcome = []
    x = leaf(np.ones((5, 5)))
    shared = x + x ** 2

    def no_retain():
        y = shared + shared ** 2
        try:
            y.sum().backward()
            outcome.append("ok")
        except RuntimeError as e:
            assert "Specify retain_graph=True" in str(e)
            outcome.append("raised")

    assert _run_threads(no_retain, 5) == []
    assert outcome.count("ok") >= 1 and len(outcome) == 5

    xr = leaf(np.ones((5, 5)))
    shared_r = xr + xr ** 2

    def retain():
        (shared_r + shared_r ** 2).sum().backward(retain_graph=True)

    assert _run_threads(retain, 5) == []
    # d/dx (s + s^2) with s = x + x^2 at x = 1: (1 + 2s)(1 + 2x) = 5 * 3
    np.testing.assert_allclose(npy(xr.grad), np.full((5, 5), 5 * 15.0))


# ---- device threads --------------------------------------------------------------------------------
def test_device_work_runs_on_its_device_thread_with_the_callers_modes():
    seen = {}
    x = jg.tensor([1.0, 2.0], dtype=F64, device="cpu:1", requires_grad=True)
    y = x * 2

    def hook(g):
        seen["thread"] = threading.current_thread().name
        seen["grad_mode"] = jg.is_grad_enabled()
        seen["anomaly"] = A.is_anomaly_enabled()
        seen["task"] = A.graph.current_graph_task_id()

    y.register_hook(hook)
    y.sum().backward(retain_graph=True)
    assert seen["thread"] == "jgrad-autograd-cpu:1"
    assert seen["thread"] != threading.current_thread().name
    assert seen["grad_mode"] is False and seen["anomaly"] is False and seen["task"] >= 0
    np.testing.assert_allclose(npy(x.grad), [2.0, 2.0])
    assert x.grad.device == jg.device("cpu:1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with A.detect_anomaly():
            A.grad(y.sum(), x, create_graph=True)
    assert seen["grad_mode"] is True and seen["anomaly"] is True
    assert seen["thread"] == "jgrad-autograd-cpu:1"

    # multithreading disabled: everything on the calling thread
    with A.set_multithreading_enabled(False):
        assert not A.is_multithreading_enabled()
        A.grad(y.sum(), x)
    assert seen["thread"] == threading.current_thread().name
    assert A.is_multithreading_enabled()


@pytest.mark.x64  # its jax reference is float64
@pytest.mark.cpu_only("asserts which node runs on the calling thread, where CPU work runs")
def test_mixed_devices_hand_gradients_between_threads():
    names = {}
    x = jg.tensor([1.0, 2.0, 3.0], dtype=F64, requires_grad=True)  # cpu:0
    x1 = x.to("cpu:1")
    y = (x1 * x1).sin()
    z = y.to("cpu")
    for t, key in ((x1, "x1"), (y, "y"), (z, "z")):
        t.register_hook(lambda g, key=key: names.__setitem__(key, threading.current_thread().name))
    x.register_hook(lambda g: names.__setitem__("x", threading.current_thread().name))
    (z * 2).sum().backward()
    me = threading.current_thread().name
    assert names["z"] == me and names["x"] == me
    assert names["y"] == "jgrad-autograd-cpu:1" and names["x1"] == "jgrad-autograd-cpu:1"
    xv = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(npy(x.grad), jax.grad(lambda v: 2 * jnp.sum(jnp.sin(v * v)))(xv), rtol=1e-12)


def test_worker_exception_keeps_type_and_traceback_and_engine_stays_usable():
    # test_custom_function_propagates_errors_from_device_thread / test_preserve_backtrace
    class Foo(Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, g):
            raise ValueError("something")

    t = jg.tensor([1.0, 2.0], device="cpu:1", requires_grad=True)
    for _ in range(2):
        with pytest.raises(ValueError, match="something") as info:
            Foo.apply(t).sum().backward()
        tb = "".join(traceback.format_tb(info.value.__traceback__))
        assert 'raise ValueError("something")' in tb
    # the same from a hook on the device thread, and from the caller's own thread
    u = jg.tensor([1.0], device="cpu:1", requires_grad=True)
    v = u * 2
    v.register_hook(lambda g: {}["missing"])
    with pytest.raises(KeyError):
        v.sum().backward()
    with pytest.raises(ValueError, match="something"):
        Foo.apply(jg.tensor([1.0], requires_grad=True)).sum().backward()
    # afterwards both the device thread and the caller still work
    (t * 3).sum().backward()
    np.testing.assert_allclose(npy(t.grad), [3.0, 3.0])
    w = jg.tensor([1.0], requires_grad=True)
    (w * 5).sum().backward()
    assert float(w.grad) == 5.0


class _WarnInBackward(Function):
    @staticmethod
    def forward(ctx, t):
        return t.clone()

    @staticmethod
    def backward(ctx, g):
        warnings.warn(f"Warning from {threading.current_thread().name}", UserWarning)
        return g


def test_worker_warnings_are_reemitted_on_the_caller():
    # test_warning_in_backward (TestMultithreading) / PR 66235
    t = jg.tensor([1.0, 2.0], device="cpu:1", requires_grad=True)
    with pytest.warns(UserWarning, match="Warning from jgrad-autograd-cpu:1"):
        _WarnInBackward.apply(t).sum().backward()

    # replayed on the calling thread, through whatever showwarning the caller installed
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda msg, cat, *a, **k: got.append((str(msg), threading.current_thread().name))
        _WarnInBackward.apply(t).sum().backward()
    assert got == [("Warning from jgrad-autograd-cpu:1", threading.current_thread().name)]

    # warnings of a reentrant backward on a pool thread reach the outermost caller too
    with pytest.warns(UserWarning, match="Warning from jgrad-autograd-reentrant"):
        DeepWarn = _deep_warn_fn()
        DeepWarn.apply(leaf(40.0)).sum().backward()


def _deep_warn_fn():
    class DeepWarn(Function):
        @staticmethod
        def forward(ctx, x):
            with jg.enable_grad():
                ctx.x = jg.tensor(x.item(), dtype=F64, requires_grad=True) - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, g):
            if ctx.x.item() < 0:
                warnings.warn(f"Warning from {threading.current_thread().name}", UserWarning)
                return g
            with jg.enable_grad():
                DeepWarn.apply(ctx.x).sum().backward()
            return g

    return DeepWarn


def test_deep_reentrant_backward_on_a_device_thread():
    seen = set()

    class DeepDev(Function):
        @staticmethod
        def forward(ctx, x):
            with jg.enable_grad():
                ctx.x = jg.tensor([x.item()], dtype=F64, device="cpu:1", requires_grad=True) - 1
            return ctx.x.detach()

        @staticmethod
        def backward(ctx, g):
            seen.add(threading.current_thread().name)
            if ctx.x.item() < 0:
                return g
            with jg.enable_grad():
                DeepDev.apply(ctx.x).sum().backward()
            return g

    v = jg.tensor([60.0], dtype=F64, device="cpu:1", requires_grad=True)
    DeepDev.apply(v).sum().backward()
    np.testing.assert_allclose(npy(v.grad), [1.0])
    # first on the device thread, then (past the depth limit) on the reentrant worker pool
    assert "jgrad-autograd-cpu:1" in seen and "jgrad-autograd-reentrant" in seen
    assert threading.current_thread().name not in seen


def test_concurrent_python_threads_share_the_device_thread():
    def train(i):
        xv = np.arange(4.0) + i
        for _ in range(3):
            x = jg.tensor(xv, dtype=F64, device="cpu:1", requires_grad=True)
            (x.sin() * x).sum().backward()
            np.testing.assert_allclose(npy(x.grad), np.cos(xv) * xv + np.sin(xv), rtol=1e-12)

    errors = []
    threads = [threading.Thread(target=lambda i=i: _catch(errors, train, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []


def _catch(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as e:  # noqa: BLE001
        errors.append(e)


# ---- gradient trimming ------------------------------------------------------------------------------
def _count_primitive(jaxpr, name):
    n = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            n += 1
        for v in eqn.params.values():
            for sub in (v if isinstance(v, (tuple, list)) else (v,)):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    n += _count_primitive(inner, name)
    return n


@pytest.mark.x64  # its jax reference is float64
def test_grad_trimming_skips_the_weight_gradient_matmul(monkeypatch):
    # PR 82544: task_should_compute_output / exec_info trimming
    from jgrad.runtime._dispatch import Op
    from jgrad.ops.linalg import LINEAR

    runs = []
    real = Op.backward_kernel

    def recording(self, key, attrs, mask, in_avals):
        kernel = real(self, key, attrs, mask, in_avals)
        if self is not LINEAR:
            return kernel

        def run(*args):
            if not any(isinstance(leaf_, jax.core.Tracer) for leaf_ in jax.tree_util.tree_leaves(args)):
                # an execution (not jgrad tracing the kernel to see which saved values it reads)
                runs.append((mask, _count_primitive(jax.make_jaxpr(kernel)(*args).jaxpr, "dot_general")))
            return kernel(*args)
        return run

    monkeypatch.setattr(Op, "backward_kernel", recording)
    x = jg.tensor(rnd(8, 4), dtype=F64, requires_grad=True)
    w = jg.tensor(rnd(3, 4, seed=1), dtype=F64, requires_grad=True)
    b = jg.tensor(rnd(3, seed=2), dtype=F64, requires_grad=True)
    y = (jg.linear(x, w, b) ** 2).sum()

    gx, = A.grad(y, x, retain_graph=True)
    jg.synchronize()  # in "auto" execution mode the kernels run at a barrier
    assert runs == [((True, False, False), 1)]  # only the input-gradient matmul
    assert w.grad is None and b.grad is None
    yv = lambda xv: jnp.sum((xv @ rnd(3, 4, seed=1).T + rnd(3, seed=2)) ** 2)  # noqa: E731
    np.testing.assert_allclose(npy(gx), jax.grad(yv)(rnd(8, 4)), rtol=1e-12)

    runs.clear()
    y.backward(inputs=[w], retain_graph=True)
    jg.synchronize()
    assert runs == [((False, True, False), 1)]
    assert x.grad is None and w.grad is not None

    runs.clear()
    A.set_grad_trimming(False)
    try:
        g_untrimmed = A.grad(y, x, retain_graph=True)  # kept: "auto" mode never runs work whose result is dropped
    finally:
        A.set_grad_trimming(True)
    jg.synchronize()
    assert runs == [((True, True, True), 2)]  # both matmuls without trimming

    runs.clear()
    y.backward()
    jg.synchronize()
    assert runs == [((True, True, True), 2)]


@pytest.mark.x64  # its jax reference is float64
def test_identically_zero_higher_order_gradient_is_handed_on_detached():
    # PR 82544's Hessian of a ReLU net: d(ReLU backward)/d(input) is zero by construction. PyTorch's
    # formula hands on zeros that do not depend on the incoming gradient, so a third backward pass
    # does not run the second pass's matmuls; jgrad hands such an output on detached.
    xv, w1v, w2v = rnd(6, 3), rnd(4, 3, seed=1), rnd(2, 4, seed=2)
    x = jg.tensor(xv, dtype=F64, requires_grad=True)
    w1 = jg.tensor(w1v, dtype=F64, requires_grad=True)
    w2 = jg.tensor(w2v, dtype=F64, requires_grad=True)
    y = jg.linear(jg.relu(jg.linear(x, w1)), w2)
    dy, = A.grad(y, x, grad_outputs=jg.ones_like(y), create_graph=True)
    d2, = A.grad(dy, x, grad_outputs=jg.ones_like(dy), create_graph=True)

    def f(xv):
        return jnp.sum(jnp.maximum(xv @ w1v.T, 0) @ w2v.T)

    np.testing.assert_allclose(npy(dy), jax.grad(f)(xv), rtol=1e-12)
    np.testing.assert_array_equal(npy(d2), np.zeros_like(xv))  # jax.hessian's value, as a sum over outputs
    seen, todo = set(), [d2.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        assert not node.name().endswith("BackwardBackward"), node.name()  # no second-pass node behind d2
        todo.extend(e[0] for e in node.next_functions)
    d2.sum().backward()
    np.testing.assert_array_equal(npy(w1.grad), np.zeros_like(w1v))
