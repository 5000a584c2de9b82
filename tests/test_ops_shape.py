"""Shape ops: values and gradients against jax (``jax.vjp``), shapes drawn by hypothesis,
gradcheck in float64, and PyTorch's error wording."""
import math

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jgrad as jg
from _op_helpers import SETTINGS, check_op, gradcheck, rand, seeds, shapes


@st.composite
def shape_and_perm(draw):
    shape = draw(shapes(min_dims=1, max_dims=4, max_side=3))
    return shape, tuple(draw(st.permutations(range(len(shape)))))


@st.composite
def shape_and_reshape(draw):
    shape = draw(shapes(min_dims=0, max_dims=3))
    n = math.prod(shape)
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    a = draw(st.sampled_from(divisors))
    new = draw(st.sampled_from([(n,), (a, n // a), (n // a, -1), (-1,), (1, a, n // a)]))
    return shape, new


@SETTINGS
@given(spec=shape_and_reshape(), seed=seeds)
def test_reshape_view(spec, seed):
    shape, new = spec
    x = rand(shape, seed)
    check_op(lambda t: t.reshape(new), lambda a: jnp.reshape(a, new), [x])
    check_op(lambda t: t.view(*new), lambda a: jnp.reshape(a, new), [x])
    check_op(lambda t: jg.reshape(t, new), lambda a: jnp.reshape(a, new), [x])


@SETTINGS
@given(spec=shape_and_perm(), seed=seeds)
def test_permute_transpose(spec, seed):
    shape, perm = spec
    x = rand(shape, seed)
    check_op(lambda t: t.permute(*perm), lambda a: jnp.transpose(a, perm), [x])
    check_op(lambda t: jg.permute(t, perm), lambda a: jnp.transpose(a, perm), [x])
    d0, d1 = perm[0], -1
    check_op(lambda t: t.transpose(d0, d1), lambda a: jnp.swapaxes(a, d0, d1), [x])
    check_op(lambda t: jg.transpose(t, d1, d0), lambda a: jnp.swapaxes(a, d0, d1), [x])


def test_t_and_T():
    x = rand((2, 3), 1)
    check_op(lambda a: a.t(), lambda a: a.T, [x])
    check_op(jg.t, lambda a: a.T, [x])
    check_op(lambda a: a.T, lambda a: a.T, [x])
    check_op(lambda a: a.mT, lambda a: jnp.swapaxes(a, -1, -2), [rand((2, 3, 4), 1)])
    v = jg.ones(3, requires_grad=True)
    tv = v.t()
    assert tv is not v and tv.shape == (3,) and tv.grad_fn is not None  # a new tensor, as PyTorch's view
    assert jg.tensor(2.0).t().shape == ()
    assert jg.ones(2, 3, requires_grad=True).t().grad_fn.name() == "TBackward0"
    assert jg.ones(2, 3, requires_grad=True).transpose(0, 1).grad_fn.name() == "TransposeBackward0"
    assert jg.ones(2, 3, requires_grad=True).permute(1, 0).grad_fn.name() == "PermuteBackward0"
    with pytest.raises(RuntimeError, match="t\\(\\) expects a tensor with <= 2 dimensions, but self is 3D"):
        jg.ones(2, 3, 4).t()


@SETTINGS
@given(shape=shapes(min_dims=0, max_dims=4, max_side=3), seed=seeds, data=st.data())
def test_flatten_squeeze_unsqueeze(shape, seed, data):
    x = rand(shape, seed)
    n = len(shape)
    check_op(lambda t: t.flatten(), lambda a: jnp.reshape(a, (-1,)), [x])
    if n >= 2:
        s = data.draw(st.integers(0, n - 2))
        e = data.draw(st.integers(s, n - 1))
        new = shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:]
        check_op(lambda t: jg.flatten(t, s, e), lambda a: jnp.reshape(a, new), [x])
    check_op(lambda t: t.squeeze(), lambda a: jnp.squeeze(a), [x])
    if n:
        d = data.draw(st.integers(-n, n - 1))
        check_op(lambda t: t.squeeze(d), lambda a: jnp.squeeze(a, d) if a.shape[d] == 1 else a, [x])
    u = data.draw(st.integers(-n - 1, n))
    check_op(lambda t: t.unsqueeze(u), lambda a: jnp.expand_dims(a, u), [x])
    check_op(lambda t: jg.unsqueeze(t, u), lambda a: jnp.expand_dims(a, u), [x])


def test_squeeze_tuple_and_unflatten():
    x = rand((1, 3, 1, 2), 1)
    check_op(lambda t: t.squeeze((0, 2)), lambda a: jnp.squeeze(a, (0, 2)), [x])
    check_op(lambda t: t.unflatten(1, (3, 1)), lambda a: jnp.reshape(a, (1, 3, 1, 1, 2)), [x])
    check_op(lambda t: t.flatten(1), lambda a: jnp.reshape(a, (1, 6)), [x])
    assert jg.tensor(3.0).flatten().shape == (1,)


@SETTINGS
@given(shape=shapes(min_dims=0, max_dims=3, max_side=3), lead=st.sampled_from([(), (2,), (2, 1)]), seed=seeds,
       data=st.data())
def test_expand(shape, lead, seed, data):
    x = rand(tuple(1 if data.draw(st.booleans()) else s for s in shape), seed)
    target = lead + tuple(s if d != 1 else data.draw(st.sampled_from([1, 3])) for s, d in zip(shape, x.shape))
    check_op(lambda t: t.expand(*target), lambda a: jnp.broadcast_to(a, target), [x])
    sizes = lead + tuple(-1 for _ in shape)
    check_op(lambda t: t.expand(sizes), lambda a: jnp.broadcast_to(a, lead + x.shape), [x])
    check_op(lambda t: jg.broadcast_to(t, target), lambda a: jnp.broadcast_to(a, target), [x])
    check_op(lambda t: t.expand_as(jg.zeros(target)), lambda a: jnp.broadcast_to(a, target), [x])


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=3), n=st.integers(1, 3), seed=seeds, data=st.data())
def test_cat_stack(shape, n, seed, data):
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = [data.draw(st.integers(1, 3)) for _ in range(n)]
    parts = [rand(shape[:d % len(shape)] + (s,) + shape[d % len(shape) + 1:], seed + i) for i, s in enumerate(sizes)]
    check_op(lambda *ts: jg.cat(ts, d), lambda *a: jnp.concatenate(a, axis=d), parts)
    check_op(lambda *ts: jg.cat(list(ts), dim=d), lambda *a: jnp.concatenate(a, axis=d), parts)
    same = [rand(shape, seed + i) for i in range(n)]
    s = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_op(lambda *ts: jg.stack(ts, s), lambda *a: jnp.stack(a, axis=s), same)


def test_cat_stack_gradcheck_and_promotion():
    gradcheck(lambda a, b: jg.cat([a, b], 1), rand((2, 2), 1), rand((2, 3), 2))
    gradcheck(lambda a, b: jg.stack([a, b], -1), rand((2, 2), 1), rand((2, 2), 2))
    out = jg.cat([jg.tensor([1, 2]), jg.tensor([0.5])])
    assert out.dtype is jg.float32 and out.tolist() == [1.0, 2.0, 0.5]
    # PyTorch skips legacy empty 1-D tensors next to tensors of other ranks
    assert jg.cat([jg.ones(2, 3), jg.zeros(0)]).shape == (2, 3)
    assert jg.concat([jg.ones(1), jg.ones(2)]).shape == (3,)


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=5), seed=seeds, data=st.data())
def test_split_chunk_unbind(shape, seed, data):
    x = rand(shape, seed)
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[d]
    size = data.draw(st.integers(1, n))
    cuts = list(range(size, n, size))
    for k in range(len(cuts) + 1):
        check_op(lambda t: jg.split(t, size, d)[k], lambda a: jnp.split(a, cuts, axis=d)[k], [x])
    sections = [1, n - 1] if n > 1 else [1]
    check_op(lambda t: t.split(sections, dim=d)[-1], lambda a: jnp.split(a, [1] if n > 1 else [], axis=d)[-1], [x])
    chunks = data.draw(st.integers(1, 4))
    csize = -(-n // chunks)
    ccuts = list(range(csize, n, csize))
    out = jg.chunk(jg.tensor(x), chunks, d)
    assert len(out) == len(ccuts) + 1
    check_op(lambda t: t.chunk(chunks, d)[0], lambda a: jnp.split(a, ccuts, axis=d)[0], [x])
    check_op(lambda t: t.unbind(d)[-1], lambda a: jnp.take(a, n - 1, axis=d), [x])


def test_split_gradients_of_all_parts_and_gradcheck():
    x = rand((5, 2), 3)
    check_op(lambda t: jg.stack([p.sum(0) * (i + 1) for i, p in enumerate(t.split(2))]),
             lambda a: jnp.stack([p.sum(0) * (i + 1) for i, p in enumerate(jnp.split(a, [2, 4]))]), [x])
    gradcheck(lambda t: t.split([2, 3])[1], x)
    gradcheck(lambda t: t.chunk(2, 1)[0], x)


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=4), seed=seeds, data=st.data())
def test_gather(shape, seed, data):
    x = rand(shape, seed)
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    # the index may be smaller than the input in every dim (PyTorch's rule)
    ishape = tuple(data.draw(st.integers(1, s)) if i != d % len(shape) else data.draw(st.integers(1, 4))
                   for i, s in enumerate(shape))
    idx = np.random.default_rng(seed).integers(0, shape[d], ishape)
    block = tuple(slice(None) if i == d % len(shape) else slice(0, s) for i, s in enumerate(ishape))
    check_op(lambda t, i: jg.gather(t, d, i), lambda a, i: jnp.take_along_axis(a[block], i, axis=d), [x, idx])
    check_op(lambda t, i: t.gather(d, i), lambda a, i: jnp.take_along_axis(a[block], i, axis=d), [x, idx])


def _unique_index(shape, n, d, seed):
    """An index along ``d`` with no repeats within a line (scatter's result is then defined)."""
    rng = np.random.default_rng(seed)
    lines = np.stack([rng.permutation(n)[:shape[d]] for _ in range(math.prod(shape) // shape[d])])
    return np.moveaxis(lines.reshape(tuple(s for i, s in enumerate(shape) if i != d) + (shape[d],)), -1, d)


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=4), seed=seeds, data=st.data())
def test_scatter_and_scatter_add(shape, seed, data):
    x = rand(shape, seed)
    d = data.draw(st.integers(0, len(shape) - 1))
    ishape = tuple(data.draw(st.integers(1, s)) for s in shape)
    idx = _unique_index(ishape, shape[d], d, seed)
    src = rand(tuple(s + 1 for s in ishape), seed + 3)  # src may be larger than the index (PyTorch's rule)
    full = np.indices(ishape, sparse=True)
    coords = tuple(idx if i == d else full[i] for i in range(len(shape)))
    sblock = tuple(slice(0, s) for s in ishape)
    check_op(lambda t, i, s: jg.scatter(t, d, i, s), lambda a, i, s: a.at[coords].set(s[sblock]), [x, idx, src])
    check_op(lambda t, i, s: t.scatter_add(d, i, s), lambda a, i, s: a.at[coords].add(s[sblock]), [x, idx, src])
    check_op(lambda t, i: t.scatter(d, i, 2.5), lambda a, i: a.at[coords].set(2.5), [x, idx])
    check_op(lambda t, i, s: (t * 1).scatter_(d, i, s), lambda a, i, s: a.at[coords].set(s[sblock]), [x, idx, src])


def test_scatter_add_duplicates_and_gradcheck():
    x = np.zeros((2, 3))
    idx = np.array([[0, 0, 2], [1, 1, 1]])
    src = np.arange(6.0).reshape(2, 3)
    out = jg.scatter_add(jg.tensor(x), 1, jg.tensor(idx), jg.tensor(src))
    assert out.tolist() == [[1.0, 0.0, 2.0], [0.0, 12.0, 0.0]]
    gradcheck(lambda t, s: t.scatter_add(1, jg.tensor(idx), s), x, src)
    gradcheck(lambda t, s: t.scatter(1, jg.tensor([[2, 0], [1, 0]]), s), x, src)
    gradcheck(lambda t: t.gather(1, jg.tensor([[0, 0], [2, 1]])), src)


@SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3, max_side=4), k=st.integers(1, 5), seed=seeds, data=st.data())
def test_index_select(shape, k, seed, data):
    x = rand(shape, seed)
    d = data.draw(st.integers(-len(shape), len(shape) - 1))
    idx = np.random.default_rng(seed).integers(0, shape[d], (k,))  # repeats accumulate in the gradient
    check_op(lambda t, i: jg.index_select(t, d, i), lambda a, i: jnp.take(a, i, axis=d), [x, idx])
    check_op(lambda t, i: t.index_select(d, i), lambda a, i: jnp.take(a, i, axis=d), [x, idx])


@SETTINGS
@given(shape=shapes(min_dims=0, max_dims=3, max_side=3), seed=seeds, data=st.data())
def test_repeat_flip(shape, seed, data):
    x = rand(shape, seed)
    reps = tuple(data.draw(st.integers(1, 3)) for _ in range(len(shape) + data.draw(st.integers(0, 1))))
    check_op(lambda t: t.repeat(*reps), lambda a: jnp.tile(a, reps), [x])
    if shape:
        dims = tuple(data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True)))
        check_op(lambda t: t.flip(dims), lambda a: jnp.flip(a, dims), [x])
        check_op(lambda t: jg.flip(t, list(dims)), lambda a: jnp.flip(a, dims), [x])


PAD_CASES = [
    ((1, 2), "constant", 0.0, [(0, 0), (1, 2)]),
    ((1, 0, 0, 2), "constant", 1.5, [(0, 2), (1, 0)]),
    ((2, 1), "reflect", None, [(0, 0), (2, 1)]),
    ((1, 1, 1, 1), "replicate", None, [(1, 1), (1, 1)]),
    ((1, 2), "circular", None, [(0, 0), (1, 2)]),
    ((-1, 2), "constant", 0.0, None),
]


@pytest.mark.parametrize("pad,mode,value,widths", PAD_CASES)
def test_pad(pad, mode, value, widths):
    x = rand((3, 4), 1)
    jmode = {"replicate": "edge", "circular": "wrap"}.get(mode, mode)
    kw = {} if value is None else {"value": value}
    if widths is None:  # negative padding crops
        ref = lambda a: jnp.pad(a[:, 1:], [(0, 0), (0, 2)])  # noqa: E731
    elif mode == "constant":
        ref = lambda a: jnp.pad(a, widths, constant_values=value)  # noqa: E731
    else:
        ref = lambda a: jnp.pad(a, widths, mode=jmode)  # noqa: E731
    check_op(lambda t: jg.pad(t, pad, mode=mode, **kw), ref, [x])
    gradcheck(lambda t: jg.pad(t, pad, mode=mode, **kw), x)


def test_other_shape_ops():
    x = rand((3, 4), 2)
    check_op(lambda t: t.narrow(1, 1, 2), lambda a: a[:, 1:3], [x])
    check_op(lambda t: t.select(0, -1), lambda a: a[-1], [x])
    check_op(lambda t: t.roll(1, 0), lambda a: jnp.roll(a, 1, 0), [x])
    check_op(lambda t: t.tril(), jnp.tril, [x])
    check_op(lambda t: t.triu(1), lambda a: jnp.triu(a, 1), [x])
    mask = x > 0
    check_op(lambda t: t.masked_fill(jg.tensor(mask), -1.0), lambda a: jnp.where(mask, -1.0, a), [x])
    t = jg.tensor(x)
    assert t.contiguous() is t  # as PyTorch: already contiguous
    check_op(lambda t: t.view_as(jg.zeros(4, 3)), lambda a: a.reshape(4, 3), [x])
    nz = jg.tensor([[0, 1], [2, 0]]).nonzero()
    assert nz.tolist() == [[0, 1], [1, 0]] and nz.dtype is jg.int64


@pytest.mark.parametrize("fn,exc,match", [
    (lambda: jg.ones(6).view(5), RuntimeError, r"shape '\[5\]' is invalid for input of size 6"),
    (lambda: jg.ones(6).reshape(4, -1), RuntimeError, r"shape '\[4, -1\]' is invalid for input of size 6"),
    (lambda: jg.ones(6).view(-1, -1), RuntimeError, "only one dimension can be inferred"),
    (lambda: jg.ones(2, 3).permute(0, 0), RuntimeError, r"permute\(\): duplicate dims are not allowed."),
    (lambda: jg.ones(2, 3).permute(0), RuntimeError, "number of dimensions in the tensor input does not match"),
    (lambda: jg.ones(2, 3).transpose(0, 5), IndexError,
     r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 5\)"),
    (lambda: jg.ones(2, 3).unsqueeze(3), IndexError,
     r"Dimension out of range \(expected to be in range of \[-3, 2\], but got 3\)"),
    (lambda: jg.ones(2, 3).squeeze(3), IndexError, "Dimension out of range"),
    (lambda: jg.ones(2, 3).flatten(1, 0), RuntimeError, "flatten\\(\\) has invalid args: start_dim cannot come after"),
    (lambda: jg.ones(2, 3).expand(3, 3), RuntimeError,
     r"The expanded size of the tensor \(3\) must match the existing size \(2\) at non-singleton dimension 0"),
    (lambda: jg.ones(2, 3).expand(2), RuntimeError, r"the number of sizes provided \(1\) must be greater or equal"),
    (lambda: jg.ones(3).expand(-1, 3), RuntimeError, "isn't allowed in a leading, non-existing dimension 0"),
    (lambda: jg.cat([jg.tensor(1.0), jg.tensor(2.0)]), RuntimeError,
     r"zero-dimensional tensor \(at position 0\) cannot be concatenated"),
    (lambda: jg.cat([jg.ones(2, 3), jg.ones(2, 4)]), RuntimeError,
     "Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor number 1"),
    (lambda: jg.cat([jg.ones(2, 3), jg.ones(3)]), RuntimeError, "Tensors must have same number of dimensions"),
    (lambda: jg.cat([]), ValueError, "expected a non-empty list of Tensors"),
    (lambda: jg.stack([jg.ones(2, 3), jg.ones(3)]), RuntimeError,
     r"stack expects each tensor to be equal size, but got \[2, 3\] at entry 0 and \[3\] at entry 1"),
    (lambda: jg.ones(5).split([2, 2]), RuntimeError, "split_with_sizes expects split_sizes to sum exactly to 5"),
    (lambda: jg.ones(3, 4).chunk(0), RuntimeError, "chunk expects `chunks` to be greater than 0, got: 0"),
    (lambda: jg.gather(jg.ones(3, 4), 1, jg.tensor([[0, 1], [2, 3], [1, 1], [0, 0]])), RuntimeError,
     r"Size does not match at dimension 0 expected index \[4, 2\] to be no larger than self \[3, 4\] apart from "
     r"dimension 1"),
    (lambda: jg.gather(jg.ones(3, 4), 1, jg.tensor([0, 1])), RuntimeError,
     "Index tensor must have the same number of dimensions as input tensor"),
    (lambda: jg.gather(jg.ones(3, 4), 1, jg.ones(3, 1)), RuntimeError, "Expected dtype int64 for index"),
    (lambda: jg.ones(3, 4).index_select(0, jg.tensor([[0]])), IndexError,
     r"index_select\(\): Index is supposed to be a vector"),
    (lambda: jg.ones(2, 3).repeat(2), RuntimeError,
     "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor"),
    (lambda: jg.pad(jg.ones(2, 3), (1, 2, 3)), RuntimeError, "Padding length must be divisible by 2"),
    (lambda: jg.pad(jg.ones(3), (1, 1, 1, 1)), RuntimeError, "Padding length should be less than or equal to two"),
])
def test_shape_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_view_node_names():
    x = jg.ones(2, 3, requires_grad=True)
    assert x.view(6).grad_fn.name() == "ViewBackward0"
    assert x.expand(2, 2, 3).grad_fn.name() == "ExpandBackward0"
    assert jg.cat([x, x]).grad_fn.name() == "CatBackward0"
    assert jg.stack([x, x]).grad_fn.name() == "StackBackward0"
    assert x.split(1)[0].grad_fn.name() == "SplitBackward0"
    assert x.flip(0).grad_fn.name() == "FlipBackward0"
    assert x.repeat(2, 1).grad_fn.name() == "RepeatBackward0"
    assert jg.pad(x, (1, 1)).grad_fn.name() == "ConstantPadNdBackward0"
    assert x.gather(0, jg.tensor([[0]])).grad_fn.name() == "GatherBackward0"
    assert x.index_select(0, jg.tensor([0])).grad_fn.name() == "IndexSelectBackward0"
