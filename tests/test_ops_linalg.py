"""matmul / mm / bmm / einsum / linear / dot: values and gradients against jax, batch broadcasting
drawn by hypothesis, PyTorch's shape errors, and float32 matmul precision in the compiled kernels."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jgrad as jg
from jgrad.ops import linalg
from _op_helpers import SETTINGS, check_op, gradcheck, rand, seeds

HI = jax.lax.Precision.HIGHEST


@st.composite
def matmul_shapes(draw):
    """Shapes of a and b for matmul: 1-D, 2-D or batched with broadcastable batch dims."""
    n, k, m = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3)).input_shapes
    a = draw(st.sampled_from([(k,), (n, k), batch[0] + (n, k)]))
    b = draw(st.sampled_from([(k,), (k, m), batch[1] + (k, m)]))
    return a, b


@SETTINGS
@given(shp=matmul_shapes(), seed=seeds)
def test_matmul_broadcast_value_and_grad(shp, seed):
    a, b = rand(shp[0], seed), rand(shp[1], seed + 1)
    ref = lambda x, y: jnp.matmul(x, y, precision=HI)  # noqa: E731
    check_op(jg.matmul, ref, [a, b], seed=seed)
    check_op(lambda x, y: x @ y, ref, [a, b], seed=seed)


@SETTINGS
@given(n=st.integers(1, 3), k=st.integers(1, 3), m=st.integers(1, 3), bsz=st.integers(1, 3), seed=seeds)
def test_mm_bmm(n, k, m, bsz, seed):
    ref = lambda x, y: jnp.matmul(x, y, precision=HI)  # noqa: E731
    check_op(jg.mm, ref, [rand((n, k), seed), rand((k, m), seed + 1)])
    check_op(lambda x, y: x.mm(y), ref, [rand((n, k), seed), rand((k, m), seed + 1)])
    check_op(jg.bmm, ref, [rand((bsz, n, k), seed), rand((bsz, k, m), seed + 1)])


def test_matmul_gradcheck():
    gradcheck(jg.matmul, rand((2, 3), 1), rand((3, 2), 2))
    gradcheck(jg.matmul, rand((2, 1, 2, 3), 1), rand((3, 3, 2), 2))
    gradcheck(jg.matmul, rand((3,), 1), rand((2, 3, 2), 2))
    gradcheck(jg.matmul, rand((2, 3), 1), rand((3,), 2))
    gradcheck(jg.bmm, rand((2, 2, 3), 1), rand((2, 3, 1), 2))


def test_matmul_float32_and_dot():
    a, b = rand((4, 5), 1, dtype=np.float32), rand((5, 3), 2, dtype=np.float32)
    check_op(jg.matmul, lambda x, y: jnp.matmul(x, y, precision=HI), [a, b], rtol=1e-5, atol=1e-5)
    check_op(jg.dot, lambda x, y: jnp.dot(x, y, precision=HI), [rand((4,), 1), rand((4,), 2)])
    check_op(lambda x, y: x.dot(y), lambda x, y: jnp.dot(x, y, precision=HI), [rand((4,), 1), rand((4,), 2)])


def test_matmul_node_names():
    x = jg.ones(2, 3, requires_grad=True)
    assert (x @ jg.ones(3, 4)).grad_fn.name() == "MmBackward0"
    assert (x @ jg.ones(3)).grad_fn.name() == "MvBackward0"
    assert (jg.ones(3, requires_grad=True) @ jg.ones(3)).grad_fn.name() == "DotBackward0"
    assert jg.bmm(jg.ones(1, 2, 3, requires_grad=True), jg.ones(1, 3, 4)).grad_fn.name() == "BmmBackward0"
    assert jg.linear(x, jg.ones(4, 3), jg.ones(4)).grad_fn.name() == "AddmmBackward0"


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
    ("ij->ji", [(2, 3)]),
    ("ii->i", [(3, 3)]),
    ("ij->", [(2, 3)]),
    ("i,j->ij", [(2,), (3,)]),
    ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),
    ("ijk,ik->j", [(2, 3, 2), (2, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUMS)
def test_einsum_value_and_grad(eq, shapes):
    arrays = [rand(s, i) for i, s in enumerate(shapes)]
    check_op(lambda *t: jg.einsum(eq, *t), lambda *a: jnp.einsum(eq, *a, precision=HI), arrays)
    check_op(lambda *t: jg.einsum(eq, list(t)), lambda *a: jnp.einsum(eq, *a, precision=HI), arrays)


def test_einsum_gradcheck():
    gradcheck(lambda a, b: jg.einsum("bij,bjk->bik", a, b), rand((2, 2, 3), 1), rand((2, 3, 2), 2))


@SETTINGS
@given(lead=st.sampled_from([(), (2,), (2, 3)]), fin=st.integers(1, 3), fout=st.integers(1, 3),
       bias=st.booleans(), seed=seeds)
def test_linear(lead, fin, fout, bias, seed):
    x, w, b = rand(lead + (fin,), seed), rand((fout, fin), seed + 1), rand((fout,), seed + 2)
    if bias:
        check_op(jg.linear, lambda x, w, b: jnp.matmul(x, w.T, precision=HI) + b, [x, w, b], seed=seed)
    else:
        check_op(jg.linear, lambda x, w: jnp.matmul(x, w.T, precision=HI), [x, w], seed=seed)


def test_linear_gradcheck():
    gradcheck(jg.linear, rand((2, 3), 1), rand((4, 3), 2), rand((4,), 3))
    gradcheck(lambda x, w: jg.linear(x, w), rand((2, 2, 3), 1), rand((1, 3), 2))


@pytest.mark.x64  # its jax reference is float64
def test_only_requested_gradient_is_computed():
    # autograd.grad(inputs=[x]) must not need the weight gradient; values still match jax
    x, w = rand((2, 3), 1), rand((4, 3), 2)
    tx, tw = jg.tensor(x, requires_grad=True), jg.tensor(w, requires_grad=True)
    (gx,) = jg.autograd.grad(jg.linear(tx, tw).sum(), [tx])
    np.testing.assert_allclose(gx.numpy(), jax.grad(lambda a: jnp.sum(a @ w.T))(x))
    assert tw.grad is None


@pytest.mark.parametrize("fn,match", [
    (lambda: jg.ones(2, 3) @ jg.ones(4, 5), r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"),
    (lambda: jg.mm(jg.ones(2, 3), jg.ones(4, 5)), r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"),
    (lambda: jg.ones(2, 2, 3) @ jg.ones(4, 5), r"mat1 and mat2 shapes cannot be multiplied \(4x3 and 4x5\)"),
    (lambda: jg.ones(3) @ jg.ones(4, 5), r"mat1 and mat2 shapes cannot be multiplied \(1x3 and 4x5\)"),
    (lambda: jg.ones(2, 3) @ jg.ones(4), r"size mismatch, got input \(2\), mat \(2x3\), vec \(4\)"),
    (lambda: jg.ones(3) @ jg.ones(4), r"inconsistent tensor size, expected tensor \[3\] and src \[4\]"),
    (lambda: jg.ones(2, 2, 3) @ jg.ones(2, 4, 5),
     r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: \[2, 4\]."),
    (lambda: jg.ones(2, 2, 3) @ jg.ones(3, 3, 4),
     r"The size of tensor a \(2\) must match the size of tensor b \(3\) at non-singleton dimension 0"),
    (lambda: jg.bmm(jg.ones(2, 2, 3), jg.ones(3, 3, 5)),
     r"Expected size for first two dimensions of batch2 tensor to be: \[2, 3\] but got: \[3, 3\]."),
    (lambda: jg.bmm(jg.ones(2, 3), jg.ones(2, 3, 5)), "batch1 must be a 3D tensor"),
    (lambda: jg.mm(jg.ones(3), jg.ones(3, 5)), "self must be a matrix"),
    (lambda: jg.mm(jg.ones(2, 3), jg.ones(3)), "mat2 must be a matrix"),
    (lambda: jg.matmul(jg.tensor(1.0), jg.ones(3)), "both arguments to matmul need to be at least 1D"),
    (lambda: jg.linear(jg.ones(2, 3), jg.ones(5, 4)), r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"),
    (lambda: jg.einsum("ij,jk->ik", jg.ones(2, 3), jg.ones(4, 5)),
     "einsum\\(\\): subscript j has size 4 for operand 1 which does not broadcast with previously seen size 3"),
    (lambda: jg.einsum("ij,jk->ik", jg.ones(2, 3)), "fewer operands were provided than specified"),
    (lambda: jg.einsum("ijk->ij", jg.ones(2, 3)), "the number of subscripts in the equation \\(3\\) does not match"),
    (lambda: jg.ones(2, 2) @ jg.ones(2, 2, dtype=jg.float64),
     "expected m1 and m2 to have the same dtype, but got: float != double"),
    (lambda: jg.ones(2) @ jg.ones(2, dtype=jg.float64),
     "dot : expected both vectors to have same dtype, but found Float and Double"),
    (lambda: jg.bmm(jg.ones(1, 2, 2), jg.ones(1, 2, 2, dtype=jg.float64)),
     "expected scalar type Float but found Double"),
    (lambda: jg.linear(jg.ones(2, 2), jg.ones(2, 2), jg.ones(2, dtype=jg.float64)),
     "self and mat2 must have the same dtype, but got Double and Float"),
    (lambda: jg.einsum("ij,jk", jg.ones(2, 2), jg.ones(2, 2, dtype=jg.float64)),
     "expected scalar type Float but found Double"),
])

def test_shape_errors(fn, match):
    with pytest.raises(RuntimeError, match=match):
        fn()


def test_integer_matmul():
    assert (jg.tensor([[1, 2]]) @ jg.tensor([[3], [4]])).tolist() == [[11]]
    assert jg.matmul(jg.tensor([1, 2]), jg.tensor([3, 4])).dtype is jg.int64


# ---- float32 matmul precision ------------------------------------------------------------
def _dot_precisions(jitted, *args):
    """The precision configs of every dot in the kernel's lowered StableHLO."""
    text = jitted.lower(*args).as_text()
    return [line.split("precision = ")[1].split("]")[0] + "]" for line in text.splitlines()
            if "dot_general" in line and "precision = " in line]


@pytest.fixture
def restore_precision():
    yield
    jg.set_float32_matmul_precision("highest")


def test_precision_default_and_set_get(restore_precision):
    assert jg.get_float32_matmul_precision() == "highest"
    jg.set_float32_matmul_precision("high")
    assert jg.get_float32_matmul_precision() == "high"
    jg.set_float32_matmul_precision("medium")
    assert jg.get_float32_matmul_precision() == "medium"
    jg.set_float32_matmul_precision("highest")
    assert jg.get_float32_matmul_precision() == "highest"
    with pytest.raises(RuntimeError):
        jg.set_float32_matmul_precision("ultra")
    assert jg.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("mode,expect", [("highest", "[HIGHEST, HIGHEST]"), ("high", "[HIGH, HIGH]"),
                                         ("medium", "[DEFAULT, DEFAULT]")])
def test_compiled_kernels_honour_precision(mode, expect, restore_precision):
    jg.set_float32_matmul_precision(mode)
    a = jnp.ones((2, 3), jnp.float32)
    b = jnp.ones((3, 4), jnp.float32)
    g = jnp.ones((2, 4), jnp.float32)
    mm = linalg.MATMUL_OPS[(2, 2)]
    assert _dot_precisions(mm.kernel((), {}), a, b) == [expect]
    # the backward kernel (both gradients) and linear / einsum forward kernels too
    bwd = mm.backward_kernel((), {}, (True, True), (((2, 3), a.dtype), ((3, 4), b.dtype)))
    assert _dot_precisions(bwd, (a, b), (), (g,)) == [expect, expect]
    assert _dot_precisions(linalg.LINEAR.kernel((), {}), a, b.T, jnp.ones(4, jnp.float32)) == [expect]
    key = (("equation", "ij,jk->ik"),)
    assert set(_dot_precisions(linalg.EINSUM.kernel(key, {"equation": "ij,jk->ik"}), a, b)) == {expect}


@pytest.mark.parametrize("mode,jax_name", [("highest", "float32"), ("high", "tensorfloat32")])
def test_precision_matches_jaxs_setting_of_the_same_name(mode, jax_name, restore_precision):
    # A benchmark against jax.jit "at the same precision" sets jax's default_matmul_precision by name.
    jg.set_float32_matmul_precision(mode)
    a = jnp.ones((2, 3), jnp.float32)
    b = jnp.ones((3, 4), jnp.float32)
    with jax.default_matmul_precision(jax_name):
        theirs = _dot_precisions(jax.jit(lambda x, y: x @ y), a, b)
    assert _dot_precisions(linalg.MATMUL_OPS[(2, 2)].kernel((), {}), a, b) == theirs


def test_eager_matmul_runs_the_kernel_of_the_current_precision(restore_precision):
    """After a precision change, the op's cached kernels are rebuilt (what eager calls then run)."""
    x = jg.ones(2, 3, requires_grad=True)
    (x @ jg.ones(3, 4)).sum().backward()
    mm = linalg.MATMUL_OPS[(2, 2)]
    a = jnp.ones((2, 3), jnp.float32)
    b = jnp.ones((3, 4), jnp.float32)
    jg.set_float32_matmul_precision("high")
    assert not mm._kernels and not mm._bwd_kernels  # compiled kernels bake the precision in: dropped
    y = jg.ones(2, 3, requires_grad=True)
    (y @ jg.ones(3, 4)).sum().backward()
    assert y.grad.tolist() == [[4.0] * 3] * 2
    (kernel,) = mm._kernels.values()
    assert _dot_precisions(kernel, a, b) == ["[HIGH, HIGH]"]
