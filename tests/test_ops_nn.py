"""NN ops: softmax, log_softmax, cross_entropy, nll_loss, mse_loss, l1/bce losses, layer_norm,
embedding. Values and gradients against pure-jax references (``jax.vjp``), hypothesis shapes,
gradcheck in float64; PyTorch (CPU) only as the reference of loss semantics (weights, smoothing)."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jgrad as jg
from jgrad.ops import nn_ops
from _op_helpers import SETTINGS, check_op, gradcheck, rand, seeds, shapes


def _softmax(a, d):
    e = jnp.exp(a - jnp.max(a, axis=d, keepdims=True))
    return e / jnp.sum(e, axis=d, keepdims=True)


def _log_softmax(a, d):
    m = jnp.max(a, axis=d, keepdims=True)
    return a - m - jnp.log(jnp.sum(jnp.exp(a - m), axis=d, keepdims=True))


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3), seed=seeds, data=st.data())
def test_softmax_log_softmax(shape, seed, data):
    x = rand(shape, seed) * 3
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    check_op(lambda t: jg.softmax(t, d), lambda a: _softmax(a, d), [x])
    check_op(lambda t: t.softmax(dim=d), lambda a: _softmax(a, d), [x])
    check_op(lambda t: jg.log_softmax(t, d), lambda a: _log_softmax(a, d), [x])
    check_op(lambda t: t.log_softmax(d), lambda a: _log_softmax(a, d), [x])


def test_softmax_gradcheck_dtype_and_stability():
    gradcheck(lambda t: jg.softmax(t, 1), rand((2, 3), 1))
    gradcheck(lambda t: jg.log_softmax(t, 0), rand((2, 3), 1))
    x = rand((2, 3), 2, dtype=np.float32)
    check_op(lambda t: jg.softmax(t, 1, dtype=jg.float64), lambda a: _softmax(a.astype(jnp.float64), 1), [x])
    big = jg.tensor([1000.0, 1000.0, -1000.0])
    assert np.allclose(jg.softmax(big, 0).numpy(), [0.5, 0.5, 0.0])
    assert np.allclose(jg.log_softmax(big, 0).numpy()[:2], [-np.log(2)] * 2)
    with pytest.raises(NotImplementedError, match="softmax_lastdim_kernel_impl"):  # PyTorch has no integer kernel
        jg.softmax(jg.tensor([1, 2]), 0)
    assert jg.softmax(jg.tensor([1, 2]), 0, dtype=jg.float32).dtype is jg.float32
    x = jg.ones(2, 3, requires_grad=True)
    assert jg.softmax(x, 1).grad_fn.name() == "SoftmaxBackward0"
    assert jg.log_softmax(x, 1).grad_fn.name() == "LogSoftmaxBackward0"


@pytest.mark.parametrize("ndim,implicit", [(1, 0), (2, 1), (3, 0), (4, 1)])
def test_softmax_implicit_dim_follows_pytorch(ndim, implicit):
    x = rand((2,) * ndim, 3)
    with pytest.warns(UserWarning, match="Implicit dimension choice for softmax has been deprecated"):
        out = jg.softmax(jg.tensor(x))
    np.testing.assert_allclose(out.numpy(), _softmax(x, implicit), rtol=1e-6)


def test_softmax_dim_out_of_range():
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 3\)"):
        jg.ones(2, 3).softmax(3)


# ---- losses --------------------------------------------------------------------------
def _ce_ref(x, t, w=None, ignore=-100, reduction="mean", smoothing=0.0):
    """Cross entropy from logits with class indices, written from PyTorch's documented formula."""
    c = x.shape[1] if x.ndim > 1 else x.shape[0]
    cls = 1 if x.ndim > 1 else 0
    logp = _log_softmax(x, cls)
    logp = jnp.moveaxis(logp, cls, -1)
    w = jnp.ones(c, x.dtype) if w is None else w
    valid = t != ignore
    tt = jnp.where(valid, t, 0)
    wt = jnp.where(valid, w[tt], 0.0)
    nll = -jnp.take_along_axis(logp, tt[..., None], -1)[..., 0] * wt
    smooth = -jnp.sum(logp * w, -1) * valid
    loss = (1 - smoothing) * nll + smoothing / c * smooth
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(wt)


@st.composite
def ce_case(draw):
    n, c = draw(st.integers(1, 4)), draw(st.integers(2, 4))
    extra = draw(st.sampled_from([(), (2,), (2, 3)]))
    return (n, c) + extra, (n,) + extra


@SETTINGS
@given(case=ce_case(), reduction=st.sampled_from(["mean", "sum", "none"]), weighted=st.booleans(),
       smoothing=st.sampled_from([0.0, 0.2]), seed=seeds)
def test_cross_entropy_class_indices(case, reduction, weighted, smoothing, seed):
    xshape, tshape = case
    c = xshape[1]
    x = rand(xshape, seed) * 2
    t = np.random.default_rng(seed).integers(0, c, tshape)
    t.flat[0] = 0  # at least one valid target when ignoring class c-1
    ignore = c - 1 if seed % 2 else -100
    w = rand((c,), seed + 5) + 3.0 if weighted else None
    arrays = [x, t] + ([w] if weighted else [])

    def jfn(xt, tt, wt=None):
        return jg.cross_entropy(xt, tt, weight=wt, reduction=reduction, ignore_index=ignore,
                                label_smoothing=smoothing)

    check_op(jfn, lambda a, b, ww=None: _ce_ref(a, b, ww, ignore, reduction, smoothing), arrays, seed=seed)


def test_cross_entropy_probabilities_and_unbatched():
    x = rand((3, 4), 1)
    p = np.random.default_rng(0).dirichlet(np.ones(4), 3)
    check_op(jg.cross_entropy, lambda a, b: -jnp.sum(b * _log_softmax(a, 1)) / 3, [x, p])
    check_op(lambda a, b: jg.cross_entropy(a, b, reduction="none"), lambda a, b: -jnp.sum(b * _log_softmax(a, 1), 1),
             [x, p])
    check_op(lambda a: jg.cross_entropy(a, jg.tensor(2)), lambda a: -_log_softmax(a, 0)[2], [rand((4,), 1)])
    gradcheck(lambda a: jg.cross_entropy(a, jg.tensor([0, 3, 1])), x)
    gradcheck(jg.cross_entropy, x, p)


def test_cross_entropy_matches_pytorch_semantics():
    torch = pytest.importorskip("torch")
    x = rand((4, 3, 2), 7)
    t = np.array([[0, 1], [2, 2], [1, 0], [0, 2]])
    w = np.array([0.5, 2.0, 1.0])
    for kw in ({}, {"reduction": "sum"}, {"ignore_index": 2}, {"label_smoothing": 0.3},
               {"label_smoothing": 0.1, "ignore_index": 0, "reduction": "none"}):
        xt = torch.tensor(x, requires_grad=True)
        ref = torch.nn.functional.cross_entropy(xt, torch.tensor(t), weight=torch.tensor(w), **kw)
        ref.sum().backward()
        xj = jg.tensor(x, requires_grad=True)
        out = jg.cross_entropy(xj, jg.tensor(t), weight=jg.tensor(w), **kw)
        out.sum().backward()
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10, err_msg=str(kw))
        np.testing.assert_allclose(xj.grad.numpy(), xt.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=str(kw))


def test_nll_loss():
    logp = np.asarray(_log_softmax(rand((3, 4), 2), 1))
    t = np.array([1, 0, 3])
    check_op(lambda a, b: nn_ops.nll_loss(a, b), lambda a, b: -jnp.mean(a[jnp.arange(3), b]), [logp, t])
    check_op(lambda a, b: nn_ops.nll_loss(a, b, reduction="sum"), lambda a, b: -jnp.sum(a[jnp.arange(3), b]),
             [logp, t])


@SETTINGS
@given(shape=shapes(max_dims=3), reduction=st.sampled_from(["mean", "sum", "none"]), seed=seeds)
def test_mse_loss(shape, reduction, seed):
    red = {"mean": jnp.mean, "sum": jnp.sum, "none": lambda v: v}[reduction]
    check_op(lambda a, b: jg.mse_loss(a, b, reduction=reduction), lambda a, b: red((a - b) ** 2),
             [rand(shape, seed), rand(shape, seed + 1)])


def test_mse_loss_gradcheck_and_broadcast_warning():
    gradcheck(jg.mse_loss, rand((2, 3), 1), rand((2, 3), 2))
    with pytest.warns(UserWarning, match="Using a target size"):
        out = jg.mse_loss(jg.tensor(rand((2, 3), 1)), jg.tensor(rand((3,), 2)))
    np.testing.assert_allclose(out.item(), np.mean((rand((2, 3), 1) - rand((3,), 2)) ** 2))
    assert jg.mse_loss(jg.ones(2, requires_grad=True), jg.zeros(2)).grad_fn.name() == "MseLossBackward0"


def test_other_losses():
    x, y = rand((3, 2), 1), (rand((3, 2), 2) > 0).astype(np.float64)
    p = 1 / (1 + np.exp(-x))
    check_op(nn_ops.l1_loss, lambda a, b: jnp.mean(jnp.abs(a - b)), [x, rand((3, 2), 3)])
    check_op(nn_ops.binary_cross_entropy, lambda a, b: -jnp.mean(b * jnp.log(a) + (1 - b) * jnp.log1p(-a)), [p, y],
             diff=[0])
    check_op(nn_ops.binary_cross_entropy_with_logits,
             lambda a, b: jnp.mean(jnp.logaddexp(0, a) - b * a), [x, y], diff=[0])


# ---- layer_norm / embedding ------------------------------------------------------------
def _ln_ref(x, w, b, nd, eps=1e-5):
    axes = tuple(range(x.ndim - nd, x.ndim))
    mu = jnp.mean(x, axes, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axes, keepdims=True)
    y = (x - mu) / jnp.sqrt(var + eps)
    return y * w + b if w is not None else y


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=4), affine=st.booleans(), seed=seeds, data=st.data())
def test_layer_norm(shape, affine, seed, data):
    nd = data.draw(st.integers(1, len(shape)))
    norm_shape = shape[len(shape) - nd:]
    x = rand(shape, seed) * 2
    if affine:
        check_op(lambda a, w, b: jg.layer_norm(a, norm_shape, w, b), lambda a, w, b: _ln_ref(a, w, b, nd),
                 [x, rand(norm_shape, seed + 1), rand(norm_shape, seed + 2)], rtol=1e-5, atol=1e-7)
    else:
        check_op(lambda a: jg.layer_norm(a, list(norm_shape), eps=1e-3), lambda a: _ln_ref(a, None, None, nd, 1e-3),
                 [x], rtol=1e-5, atol=1e-7)


def test_layer_norm_gradcheck_and_errors():
    gradcheck(lambda a, w, b: jg.layer_norm(a, 3, w, b), rand((2, 3), 1), rand((3,), 2), rand((3,), 3))
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\], but "
                                           r"got input of size\[2, 3\]"):
        jg.layer_norm(jg.ones(2, 3), (4,))


@SETTINGS
@given(ishape=shapes(min_dims=0, max_dims=2, max_side=4), seed=seeds, pad=st.sampled_from([None, 1, -1]))
def test_embedding(ishape, seed, pad):
    w = rand((5, 3), seed)
    idx = np.random.default_rng(seed).integers(0, 5, ishape)  # repeats accumulate into the weight gradient
    padrow = None if pad is None else pad % 5

    def ref(weight, i):
        if padrow is not None:  # the padding row gets no gradient
            weight = jnp.where((jnp.arange(5) == padrow)[:, None], jax.lax.stop_gradient(weight), weight)
        return weight[i]

    check_op(lambda wt, i: jg.embedding(i, wt, padding_idx=pad), ref, [w, idx])


def test_embedding_gradcheck_and_errors():
    gradcheck(lambda w: jg.embedding(jg.tensor([[0, 2], [2, 1]]), w), rand((3, 2), 1))
    with pytest.raises(RuntimeError, match="Expected tensor for argument #1 'indices'"):
        jg.embedding(jg.ones(2), jg.ones(3, 2))
    assert jg.embedding(jg.tensor([0]), jg.ones(3, 2, requires_grad=True)).grad_fn.name() == "EmbeddingBackward0"


def test_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"Expected input batch_size \(2\) to match target batch_size \(3\)."):
        jg.cross_entropy(jg.ones(2, 3), jg.tensor([0, 1, 2]))
    with pytest.raises(RuntimeError, match="Expected target size"):
        jg.cross_entropy(jg.ones(2, 3, 4), jg.tensor([[0, 1, 2], [0, 1, 2]]))


def test_one_hot():
    out = nn_ops.one_hot(jg.tensor([0, 2, 1]), 4)
    assert out.tolist() == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]] and out.dtype is jg.int64
    assert nn_ops.one_hot(jg.tensor([1, 2])).shape == (2, 3)


def test_softmax_no_warning_with_dim():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jg.softmax(jg.ones(2, 3), dim=1)
