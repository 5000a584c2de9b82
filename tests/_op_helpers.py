"""Shared helpers of the op tests: run a jgrad op and its pure-jax reference on the same
data, and compare forward values and vector-Jacobian products (jgrad's backward against
``jax.vjp``). Never compares jgrad with itself."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import jgrad as jg
from jgrad.core._dtype import x64_scope

# Few examples, no deadline, no shrinking: every new shape compiles kernels (XLA), which is slow-ish.
# CI runs the suite in a few minutes on 2 cores; JGRAD_TEST_THOROUGH=1 draws twice as many examples.
_THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"
SETTINGS = settings(max_examples=4 if _THOROUGH else 2, deadline=None, derandomize=True,
                    phases=[Phase.explicit, Phase.reuse, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FEW = settings(SETTINGS, max_examples=2 if _THOROUGH else 1)  # long parametrized lists (each op has fixed cases)


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def broadcast_pair(max_dims=3, max_side=4):
    """Two mutually broadcastable shapes (as a tuple of two shapes)."""
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=max_dims, max_side=max_side).map(
        lambda s: s.input_shapes)


seeds = st.integers(0, 2 ** 16)


def rand(shape, seed=0, low=-2.0, high=2.0, dtype=np.float64):
    return np.asarray(np.random.default_rng(seed).uniform(low, high, shape), dtype=dtype)


def away_from(x, points, gap=0.05):
    """Push values at least ``gap`` away from kinks/poles at ``points`` (finite differences)."""
    x = np.asarray(x)
    for p in points:
        close = np.abs(x - p) < gap
        x = np.asarray(np.where(close, p + np.where(x >= p, gap, -gap) * 2, x))
    return x


def to_jg(arrays, requires_grad=True):
    return [jg.tensor(a, requires_grad=requires_grad and np.issubdtype(np.asarray(a).dtype, np.floating))
            if isinstance(a, np.ndarray) else a for a in arrays]


def assert_close(actual, expected, rtol=1e-6, atol=1e-8, what=""):
    a = actual.detach().numpy() if isinstance(actual, jg.Tensor) else np.asarray(actual)
    e = np.asarray(expected)
    assert a.shape == e.shape, f"{what}: shape {a.shape} != {e.shape}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=what)


def check_op(jg_fn, jax_fn, arrays, *, diff=None, rtol=1e-6, atol=1e-8, seed=0, check_dtype=True):
    """Forward value and every input gradient of ``jg_fn`` against ``jax_fn`` (``jax.vjp``).

    ``arrays``: NumPy arrays (tensor inputs) and Python scalars (passed as is).
    ``diff``: indices of the inputs to differentiate (default: every floating array).
    """
    if diff is None:
        diff = [i for i, a in enumerate(arrays) if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)]
    tensors = [jg.tensor(a, requires_grad=i in diff) if isinstance(a, np.ndarray) else a
               for i, a in enumerate(arrays)]
    out = jg_fn(*tensors)

    def partial(*d):
        full = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in arrays]
        for j, i in enumerate(diff):
            full[i] = d[j]
        return jax_fn(*full)

    # The reference runs with JAX's 64-bit types on, in this thread only (jgrad's own x64 scope): the suite runs
    # without JAX_ENABLE_X64, as users do, and a float64 reference must stay float64.
    with x64_scope():
        if diff:
            ref, grads_ref = _reference(partial, [jnp.asarray(arrays[i]) for i in diff], seed)
        else:
            ref = jax.jit(partial)()
    assert_close(out, ref, rtol, atol, "forward")
    if check_dtype:
        assert out.dtype.np == ref.dtype, f"dtype {out.dtype} != {ref.dtype}"
    if not diff:
        return out
    assert out.requires_grad and out.grad_fn is not None
    cot = _cotangent(ref, seed)
    grads = jg.autograd.grad(out, [tensors[i] for i in diff], jg.tensor(cot), allow_unused=True)
    for i, g, r in zip(diff, grads, grads_ref):
        if g is None:
            g = np.zeros(arrays[i].shape, arrays[i].dtype)
        assert_close(g, r, rtol, atol, f"grad of input {i}")
        assert tuple(g.shape) == arrays[i].shape
    return out


def _cotangent(ref, seed):
    return rand(ref.shape, seed + 1).astype(ref.dtype)


def _reference(fn, primals, seed):
    """Forward and ``jax.vjp`` of ``fn`` in one jitted call (one compile instead of one per primitive)."""
    shape_dtype = jax.eval_shape(fn, *primals)
    cot = jnp.asarray(_cotangent(shape_dtype, seed))

    def both(*p):
        out, vjp = jax.vjp(fn, *p)
        return out, vjp(cot)

    return jax.jit(both)(*primals)


def gradcheck(fn, *arrays, diff=None, **kw):
    """``jg.autograd.gradcheck`` in float64 on NumPy arrays (all floating ones differentiated)."""
    ts = [jg.tensor(np.asarray(a, np.float64), requires_grad=diff is None or i in diff)
          if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)
          else (jg.tensor(a) if isinstance(a, np.ndarray) else a) for i, a in enumerate(arrays)]
    assert jg.autograd.gradcheck(fn, ts, **kw)
