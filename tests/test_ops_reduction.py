"""Reductions with dim/keepdim: values and gradients against jax (``jax.vjp``), shapes and dims
drawn by hypothesis, gradcheck in float64, PyTorch's dtypes, node names and errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import jgrad as jg
from _op_helpers import SETTINGS, check_op, gradcheck, rand, seeds, shapes


@st.composite
def shape_dims(draw, min_dims=1):
    """A shape, a reduction spec (None, an int or a tuple of ints, possibly negative) and keepdim."""
    shape = draw(shapes(min_dims=min_dims, max_dims=3))
    n = len(shape)
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none" or n == 0:
        dim = None
    elif kind == "int":
        dim = draw(st.integers(-n, n - 1))
    else:
        dims = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
        dim = tuple(d - n if draw(st.booleans()) else d for d in dims)
    return shape, dim, draw(st.booleans())


def _kw(dim, keepdim):
    return {} if dim is None else {"dim": dim, "keepdim": keepdim}


REDUCTIONS = {
    # name: (jgrad method name, jax fn(x, axis, keepdims), extra jgrad kwargs)
    "sum": ("sum", lambda x, a, k: jnp.sum(x, axis=a, keepdims=k), {}),
    "mean": ("mean", lambda x, a, k: jnp.mean(x, axis=a, keepdims=k), {}),
    "prod": ("prod", lambda x, a, k: jnp.prod(x, axis=a, keepdims=k), {}),
    "amax": ("amax", lambda x, a, k: jnp.max(x, axis=a, keepdims=k), {}),
    "amin": ("amin", lambda x, a, k: jnp.min(x, axis=a, keepdims=k), {}),
    "logsumexp": ("logsumexp", lambda x, a, k: jax.scipy.special.logsumexp(x, axis=a, keepdims=k), {}),
    "var": ("var", lambda x, a, k: jnp.var(x, axis=a, keepdims=k, ddof=1), {}),
    "std": ("std", lambda x, a, k: jnp.std(x, axis=a, keepdims=k, ddof=1), {}),
    "var0": ("var", lambda x, a, k: jnp.var(x, axis=a, keepdims=k), {"correction": 0}),
    "std_unbiased_false": ("std", lambda x, a, k: jnp.std(x, axis=a, keepdims=k), {"unbiased": False}),
    "norm": ("norm", lambda x, a, k: jnp.sqrt(jnp.sum(x * x, axis=a, keepdims=k)), {}),
    "norm1": ("norm", lambda x, a, k: jnp.sum(jnp.abs(x), axis=a, keepdims=k), {"p": 1}),
    "norm3": ("norm", lambda x, a, k: jnp.sum(jnp.abs(x) ** 3, axis=a, keepdims=k) ** (1 / 3), {"p": 3}),
    "norm_inf": ("norm", lambda x, a, k: jnp.max(jnp.abs(x), axis=a, keepdims=k), {"p": float("inf")}),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@SETTINGS
@given(spec=shape_dims(), seed=seeds)
def test_reduction_value_and_grad(name, spec, seed):
    method, ref, extra = REDUCTIONS[name]
    shape, dim, keepdim = spec
    if name in ("var", "std", "var0", "std_unbiased_false"):
        n = np.prod([shape[d] for d in ((dim,) if isinstance(dim, int) else dim or range(len(shape)))])
        if n < 2:
            return  # variance of one element: NaN in both, and its gradient too
    x = rand(shape, seed)
    if name.startswith("norm") or name == "prod":
        x = np.where(np.abs(x) < 0.1, 0.5, x)  # away from 0, where |x| has its kink
    axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
    if name == "logsumexp" and dim is None:
        axis, dim = tuple(range(len(shape))), tuple(range(len(shape)))

    def fn(t):
        kw = dict(extra, **_kw(dim, keepdim))
        if name == "logsumexp":
            kw.setdefault("dim", dim)
        return getattr(t, method)(**kw)

    check_op(fn, lambda a: ref(a, axis, keepdim if dim is not None else False), [x], seed=seed)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "amax", "logsumexp", "var", "std", "norm"])
def test_reduction_functions_and_gradcheck(name):
    method, ref, _ = REDUCTIONS[name]
    x = rand((2, 3), 5) + 3.0
    fn = getattr(jg, method)
    check_op(lambda t: fn(t, dim=1), lambda a: ref(a, 1, False), [x])
    check_op(lambda t: fn(t, dim=0, keepdim=True), lambda a: ref(a, 0, True), [x])
    gradcheck(lambda t: fn(t, dim=1), x)
    gradcheck(lambda t: fn(t, dim=(0, 1)), x)


@SETTINGS
@given(spec=shape_dims(), seed=seeds)
def test_max_min_with_dim_values_indices_grad(spec, seed):
    shape, dim, keepdim = spec
    d = dim if isinstance(dim, int) else 0
    x = rand(shape, seed)
    for jfn, ref, aref in ((jg.max, jnp.max, np.argmax), (jg.min, jnp.min, np.argmin)):
        check_op(lambda t: jfn(t, d, keepdim=keepdim).values, lambda a: ref(a, axis=d, keepdims=keepdim), [x])
        out = jfn(jg.tensor(x), d, keepdim)
        idx = aref(x, axis=d)
        np.testing.assert_array_equal(out.indices.numpy(), np.expand_dims(idx, d) if keepdim else idx)
        assert out.indices.dtype is jg.int64 and not out.indices.requires_grad
        values, indices = out  # a named tuple, as PyTorch's
        assert values is out[0] and indices is out[1]


def test_max_min_full_reduction_and_binary_form():
    x = rand((3, 4), 2)
    check_op(jg.max, jnp.max, [x])
    check_op(lambda t: t.min(), jnp.min, [x])
    check_op(lambda a, b: jg.max(a, b), jnp.maximum, [x, rand((4,), 3)])
    check_op(lambda a, b: a.min(b), jnp.minimum, [x, rand((4,), 3)])
    gradcheck(lambda t: t.max(1).values, x)
    gradcheck(lambda t: t.max(), x)


def test_max_ties_full_reduction_distributes_evenly():
    # PyTorch's max()/amax gradient is shared evenly among tied maxima; max(dim) picks one index.
    x = jg.tensor([1.0, 3.0, 3.0], requires_grad=True)
    x.max().backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5]
    x.grad = None
    x.amax().backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5]
    x.grad = None
    x.max(0).values.backward()
    assert sorted(x.grad.tolist()) == [0.0, 0.0, 1.0]


@SETTINGS
@given(spec=shape_dims(), seed=seeds)
def test_argmax_argmin(spec, seed):
    shape, dim, keepdim = spec
    x = rand(shape, seed)
    d = dim if isinstance(dim, int) else None
    for fn, ref in ((jg.argmax, np.argmax), (jg.argmin, np.argmin)):
        out = fn(jg.tensor(x, requires_grad=True), dim=d, keepdim=keepdim if d is not None else False)
        expect = ref(x, axis=d)
        if d is not None and keepdim:
            expect = np.expand_dims(expect, d)
        np.testing.assert_array_equal(out.numpy(), expect)
        assert out.dtype is jg.int64 and not out.requires_grad and out.grad_fn is None


def test_prod_with_zeros_gradient():
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 1.0], [1.5, 2.0, -1.0]])
    check_op(lambda t: t.prod(1), lambda a: jnp.prod(a, axis=1), [x])
    check_op(lambda t: t.prod(), jnp.prod, [x[0]])
    gradcheck(lambda t: t.prod(1), x)


def test_norm_variants():
    x = rand((3, 4), 7)
    check_op(lambda t: t.norm(), lambda a: jnp.linalg.norm(a), [x])
    check_op(lambda t: jg.norm(t, "fro"), lambda a: jnp.linalg.norm(a, "fro"), [x])
    check_op(lambda t: jg.norm(t, 2, dim=1), lambda a: jnp.linalg.norm(a, axis=1), [x])
    check_op(lambda t: jg.norm(t, float("-inf"), dim=0), lambda a: jnp.min(jnp.abs(a), axis=0), [x])
    assert jg.norm(jg.tensor([0.0, 3.0, 0.0, -4.0]), 0).item() == 2.0
    z = jg.zeros(3, requires_grad=True)
    z.norm().backward()  # the 2-norm's subgradient at 0 is 0, as in PyTorch (not NaN)
    assert z.grad.tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got Long"):
        jg.tensor([1, 2]).norm()


def test_logsumexp_is_stable():
    x = jg.tensor([1000.0, 1000.0], dtype=jg.float64, requires_grad=True)
    out = x.logsumexp(0)
    assert abs(out.item() - (1000 + np.log(2))) < 1e-9
    out.backward()
    assert x.grad.tolist() == [0.5, 0.5]


def test_reduction_dtypes():
    assert jg.tensor([1, 2, 3], dtype=jg.int32).sum().dtype is jg.int64
    assert jg.tensor([True, True, False]).sum().item() == 2
    assert jg.tensor([True, True]).sum().dtype is jg.int64
    assert jg.tensor([2, 3], dtype=jg.int32).prod().dtype is jg.int64
    assert jg.tensor([1.0, 2.0]).sum(dtype=jg.float64).dtype is jg.float64
    assert jg.tensor([1, 2]).mean(dtype=jg.float32).item() == 1.5
    assert jg.tensor([1.0, 2.0], dtype=jg.float64).mean().dtype is jg.float64
    assert jg.tensor([True, False]).all().item() is False and jg.tensor([True, False]).any().item() is True
    assert jg.tensor([[1, 0], [1, 1]]).all(dim=1).tolist() == [False, True]
    assert jg.tensor([[1, 0], [0, 0]]).any(1, keepdim=True).tolist() == [[True], [False]]


def test_reduction_node_names():
    x = jg.ones(2, 3, requires_grad=True)
    assert x.sum().grad_fn.name() == "SumBackward0"
    assert x.sum(0).grad_fn.name() == "SumBackward1"
    assert x.mean().grad_fn.name() == "MeanBackward0"
    assert x.mean(1).grad_fn.name() == "MeanBackward1"
    assert x.max().grad_fn.name() == "MaxBackward1"
    assert x.max(0).values.grad_fn.name() == "MaxBackward0"
    assert x.min(0).values.grad_fn.name() == "MinBackward0"
    assert x.amax().grad_fn.name() == "AmaxBackward0"
    assert x.prod().grad_fn.name() == "ProdBackward0"
    assert x.std().grad_fn.name() == "StdBackward0"
    assert x.var().grad_fn.name() == "VarBackward0"
    assert x.logsumexp(1).grad_fn.name() == "LogsumexpBackward0"


def test_zero_dim_reductions():
    s = jg.tensor(3.0, requires_grad=True)
    assert s.sum(0).item() == 3.0 and s.sum(-1, keepdim=True).shape == ()
    v, i = s.max(0)
    assert v.item() == 3.0 and i.item() == 0
    (s.sum(0) * 2).backward()
    assert s.grad.item() == 2.0


def test_reduction_errors():
    x = jg.ones(2, 3)
    with pytest.raises(IndexError, match=r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"):
        x.sum(2)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.max(-3)
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.mean((0, 5))
    with pytest.raises(RuntimeError, match="mean\\(\\): could not infer output dtype. Input dtype must be either a "
                                           "floating point or complex dtype. Got: Long"):
        jg.tensor([1, 2]).mean()
    with pytest.raises(RuntimeError, match="Expected reduction dim to be specified for input.numel\\(\\) == 0"):
        jg.zeros(0).max()
    with pytest.raises(RuntimeError, match="std and var only support floating point and complex dtypes"):
        jg.tensor([1, 2]).var()


def test_std_var_unbiased_positional_and_correction():
    x = rand((4, 3), 9)
    np.testing.assert_allclose(jg.tensor(x).var(False).item(), np.var(x))
    np.testing.assert_allclose(jg.tensor(x).std(0, True).numpy(), np.std(x, axis=0, ddof=1))
    np.testing.assert_allclose(jg.tensor(x).var(1, correction=2).numpy(), np.var(x, axis=1, ddof=2))
    np.testing.assert_allclose(jg.var(jg.tensor(x), dim=1, keepdim=True).numpy(), np.var(x, 1, ddof=1, keepdims=True))


def test_sum_to_size():
    x = rand((2, 3, 4), 1)
    check_op(lambda t: t.sum_to_size(3, 1), lambda a: jnp.sum(a, axis=(0, 2), keepdims=True)[0], [x])
    check_op(lambda t: t.sum_to_size((1, 3, 4)), lambda a: jnp.sum(a, axis=0, keepdims=True), [x])


@SETTINGS
@given(n=st.integers(2, 1100), dtype=st.sampled_from([np.float32, np.float64]), seed=seeds,
       special=st.sampled_from([None, np.inf, -np.inf, np.nan, -0.0]), dim=st.sampled_from([None, 0, (0, 1)]))
def test_small_full_reductions_against_float64_numpy(n, dtype, seed, special, dim):
    """Full ``sum``/``mean``/``var``/``std`` of a few float elements (a fixed tree of adds on the CPU, Note [Tree sums]
    in jgrad/ops/reduction.py; XLA's reduction elsewhere and above ``TREE_SUM_MAX``) against NumPy in float64:
    within the rounding a sum of ``n`` terms allows, infinities and NaN where NumPy has them, over all axes given as
    ``None`` or as every dim, with ``keepdim``."""
    rng = np.random.RandomState(seed)
    x = (rng.standard_normal(n) * np.exp(rng.standard_normal() * 3) + rng.standard_normal() * 5).astype(dtype)
    if special is not None:
        x[rng.randint(n)] = special
    shape = (n,) if dim != (0, 1) else (1, n)
    t, x64 = jg.tensor(x.reshape(shape)), x.astype(np.float64)
    eps = np.finfo(dtype).eps
    with np.errstate(invalid="ignore"):
        refs = {"sum": x64.sum(), "mean": x64.mean(), "var": x64.var(ddof=1), "std": x64.std(ddof=1)}
        for name, ref in refs.items():
            kw = {} if dim is None else {"dim": dim, "keepdim": True}
            out = getattr(t, name)(**kw)
            assert out.dtype == t.dtype and out.shape == ((1,) * len(shape) if dim is not None else ())
            got = out.numpy().astype(np.float64).reshape(())
            scale = np.abs(x64).sum() / (n if name == "mean" else 1) if name in ("sum", "mean") else abs(ref)
            tol = 2 * eps * np.log2(2 * n) * scale if name in ("sum", "mean") else 4 * eps * scale
            if np.isfinite(ref):
                assert abs(got - ref) <= tol, (name, got, ref, tol)
            else:
                assert np.isnan(ref) and np.isnan(got) or got == ref, (name, got, ref)


def test_small_full_reductions_signed_zero_and_overflow_as_pytorch():
    """A sum of -0.0 is +0.0 (PyTorch's accumulator starts at +0.0); a float32 variance accumulates in float64, as
    PyTorch's CPU kernel does, so squares above float32's range stay finite; a float64 one overflows as PyTorch's
    (on the CPU)."""
    z = jg.tensor([-0.0, -0.0, -0.0])
    assert not np.signbit(z.sum().item()) and not np.signbit(z.mean().item())
    np.testing.assert_allclose(jg.tensor([1e30, -1e30]).std().item(), np.sqrt(2.0) * 1e30, rtol=1e-6)
    big = [3e25, 1e25, -2e25]
    np.testing.assert_allclose(jg.tensor(big, requires_grad=True).std().item(), np.std(big, ddof=1), rtol=1e-6)
    huge = jg.tensor([1e200, -1e200], dtype=jg.float64)
    if huge.device.type == "cpu":  # (XLA's reduction elsewhere scales by the largest magnitude: finite)
        assert huge.std().item() == np.inf
