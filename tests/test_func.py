"""``jgrad.func`` (torch.func's transforms) against JAX's transforms of the same functions in jax.numpy.

Each transform runs as JAX's transform of the function's jgrad ops, so the checks are: the values equal
``jax.grad``/``jax.vjp``/``jax.jvp``/``jax.jacrev``/``jax.jacfwd``/``jax.hessian``/``jax.vmap`` of the same
function written in jax.numpy, transforms nest, ``vmap`` is one traced call (real batching), the module
helpers equal ``torch.func``'s, and bad input gets PyTorch's errors. The transforms leave "auto" mode for
their trace, so most tests run once; ``test_transforms_of_pending_inputs`` runs in both modes.
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jgrad as jg
from jgrad import func as F

one_mode = pytest.mark.one_execution_mode
TOL = dict(rtol=1e-5, atol=1e-5)


def J(fn):
    """A jax reference, compiled as one executable (eager jax would compile every primitive on its own)."""
    return jax.jit(fn)


def close(a, b):
    np.testing.assert_allclose(np.asarray(a.numpy() if isinstance(a, jg.Tensor) else a), np.asarray(b), **TOL)


def tree_close(a, b):
    la = jax.tree_util.tree_leaves(a, is_leaf=lambda x: isinstance(x, jg.Tensor))
    lb = jax.tree_util.tree_leaves(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert tuple(x.shape) == tuple(np.shape(y))
        close(x, y)


# one function, twice: jgrad ops and jax.numpy
def f_jg(x, y):
    return (x.sin() * y).sum() + (x * x).mean() * y.tanh().sum()


def f_jx(x, y):
    return (jnp.sin(x) * y).sum() + (x * x).mean() * jnp.tanh(y).sum()


def g_jg(x, y):  # vector-valued
    return (x.exp() * y).cumsum(0) + x.sum() * y


def g_jx(x, y):
    return jnp.cumsum(jnp.exp(x) * y, 0) + x.sum() * y


THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"


@jax.jit
def _references(xa, ya, ct, tx, ty):
    """Every jax reference of the next test, compiled as one executable."""
    _, pull = jax.vjp(g_jx, xa, ya)
    jv = jax.jvp(g_jx, (xa, ya), (tx, ty))
    return dict(
        grad=jax.grad(f_jx, argnums=(0, 1))(xa, ya), value=f_jx(xa, ya), vjp=(g_jx(xa, ya), pull(ct)), jvp=jv,
        lin=jax.jvp(lambda a: g_jx(a, ya), (xa,), (tx,))[1],
        jacrev=jax.jacrev(g_jx, argnums=(0, 1))(xa, ya), jacfwd=jax.jacfwd(g_jx, argnums=1)(xa, ya),
        jac0=jax.jacrev(g_jx)(xa, ya), hessian=jax.hessian(f_jx)(xa, ya),
        rev_fwd=jax.jacrev(jax.jacfwd(lambda a: g_jx(a, ya)))(xa),
        fwd_rev=jax.jacfwd(jax.jacrev(lambda a: g_jx(a, ya)))(xa),
        grad_grad=jax.grad(lambda a: jax.grad(f_jx)(a, ya).sum())(xa))


@one_mode
def test_grad_vjp_jvp_jacobians_match_jax():
    x, y, ct, tx, ty = (jg.randn(4) for _ in range(5))
    ref = _references(*(t.numpy() for t in (x, y, ct, tx, ty)))
    tree_close(F.grad(f_jg, argnums=(0, 1))(x, y), ref["grad"])
    # a dict of tensors as the differentiated argument, argnums counted from the end, aux of any leaves
    g, (v, aux) = F.grad_and_value(lambda a, p: (f_jg(a, p["y"]), {"s": a.sum(), "n": 3}), argnums=-1,
                                   has_aux=True)(x, {"y": y})
    close(g["y"], ref["grad"][1])
    close(v, ref["value"])
    close(aux["s"], x.numpy().sum())
    assert aux["n"] == 3
    out, pull = F.vjp(g_jg, x, y)
    tree_close((out, pull(ct)), ref["vjp"])
    tree_close(F.jvp(g_jg, (x, y), (tx, ty)), ref["jvp"])
    _, jvp_fn = F.linearize(lambda a: g_jg(a, y), x)
    close(jvp_fn(tx), ref["lin"])
    tree_close(F.jacrev(g_jg, argnums=(0, 1))(x, y), ref["jacrev"])
    j, aux = F.jacfwd(lambda a, b: (g_jg(a, b), b.cos()), argnums=1, has_aux=True)(x, y)
    close(j, ref["jacfwd"])
    close(aux, np.cos(y.numpy()))
    close(F.jacrev(g_jg, chunk_size=3)(x, y), ref["jac0"])
    close(F.hessian(f_jg)(x, y), ref["hessian"])
    # nesting: reverse over forward, grad of grad; forward over reverse is hessian's own
    close(F.jacrev(F.jacfwd(lambda a: g_jg(a, y)))(x), ref["rev_fwd"])
    close(F.grad(lambda a: F.grad(f_jg)(a, y).sum())(x), ref["grad_grad"])
    if THOROUGH:
        close(F.jacfwd(F.jacrev(lambda a: g_jg(a, y)))(x), ref["fwd_rev"])
        close(F.grad(f_jg)(x, y), ref["grad"][0])
    # the results are new tensors, and the inputs are untouched
    assert not g["y"].requires_grad and x.grad_fn is None


def loss_jg(p, a):
    return (a @ p).tanh().pow(2).sum()


def loss_jx(p, a):
    return (jnp.tanh(a @ p) ** 2).sum()


@jax.jit
def _vmap_references(xa, wa, za, pa):
    return dict(
        h=jax.vmap(lambda a, b, c: (jnp.tanh(a * b) + jnp.sin(c), a @ b), in_axes=(0, None, 1))(xa, wa, za),
        softmax=jax.vmap(jax.nn.softmax)(xa),
        per_sample=jax.vmap(jax.grad(loss_jx), in_axes=(None, 0))(pa, xa),
        jac=jax.vmap(jax.jacrev(lambda a: jnp.sin(a) * a.sum()))(xa),
        hess=jax.vmap(jax.hessian(lambda a: jnp.exp(a).sum() * a.sum()))(xa),
        grad_vmap=jax.grad(lambda a: (jax.vmap(lambda r: jnp.sin(r).sum())(a) ** 2).sum())(xa))


@one_mode
def test_vmap_matches_jax_and_batches_in_one_trace():
    xb, w, z, pw = jg.randn(5, 4), jg.randn(4), jg.randn(4, 5), jg.randn(4, 3)
    xa, wa, za = xb.numpy(), w.numpy(), z.numpy()
    ref = _vmap_references(xa, wa, za, pw.numpy())
    calls = []

    def h(a, b, c):
        calls.append(1)
        return (a * b).tanh() + c.sin(), (a @ b)

    tree_close(F.vmap(h, in_dims=(0, None, 1))(xb, w, z), ref["h"])
    assert len(calls) == 1  # one trace for the whole batch: JAX's batching, not a loop over examples
    # negative in_dims, out_dims per output, nested trees of inputs, keyword arguments not batched
    out = F.vmap(lambda d, k=1.0: (d["a"] * k, d["b"].sum()), in_dims=({"a": -1, "b": 0},), out_dims=(1, 0))(
        {"a": z, "b": xb}, k=2.0)
    tree_close(out, (2.0 * za, xa.sum(1)))
    # chunks give the same result; nested vmap is a batch of batches
    close(F.vmap(lambda a: a.softmax(0), chunk_size=3)(xb), ref["softmax"])
    close(F.vmap(F.vmap(lambda a, b: a * b, in_dims=(0, None)), in_dims=(0, None))(xb, w), xa[:, :, None] * wa)
    # per-example gradients, Jacobians and Hessians: transforms under vmap, and vmap under grad
    close(F.vmap(F.grad(loss_jg), in_dims=(None, 0))(pw, xb), ref["per_sample"])
    close(F.vmap(F.jacrev(lambda a: a.sin() * a.sum()))(xb), ref["jac"])
    close(F.vmap(F.hessian(lambda a: a.exp().sum() * a.sum()))(xb), ref["hess"])
    close(F.grad(lambda a: F.vmap(lambda r: r.sin().sum())(a).pow(2).sum())(xb), ref["grad_vmap"])


@one_mode
def test_vmap_randomness():
    x = jg.zeros(6, 3)
    noisy = lambda a: a + jg.randn(3)  # noqa: E731
    with pytest.raises(RuntimeError, match="vmap: called random operation while in randomness error mode"):
        F.vmap(noisy)(x)
    same = F.vmap(noisy, randomness="same")(x).numpy()
    assert np.all(same == same[0])
    diff = F.vmap(noisy, randomness="different")(x).numpy()
    assert len({tuple(r) for r in diff}) == 6
    drop = F.vmap(lambda a: jg.nn.functional.dropout(a + 1.0, 0.5), randomness="different")(jg.zeros(64, 8)).numpy()
    assert set(np.unique(drop)) <= {0.0, 2.0} and 0.3 < (drop == 0).mean() < 0.7
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        F.vmap(noisy, randomness="some")


@one_mode
def test_functional_call_and_ensembles_match_torch_func():
    torch = pytest.importorskip("torch")
    m = jg.nn.Sequential(jg.nn.Linear(3, 4), jg.nn.Tanh(), jg.nn.Linear(4, 2))
    tm = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    params = {k: v.detach() for k, v in m.named_parameters()}
    tparams = {k: torch.tensor(v.numpy()) for k, v in params.items()}
    x, y = jg.randn(6, 3), jg.randn(6, 2)
    tx, ty = torch.tensor(x.numpy()), torch.tensor(y.numpy())

    def loss(fc, mod, p, a, b):
        return ((fc(mod, p, (a.unsqueeze(0),)) - b.unsqueeze(0)) ** 2).mean()

    g = F.vmap(F.grad(lambda p, a, b: loss(F.functional_call, m, p, a, b)), in_dims=(None, 0, 0))(params, x, y)
    tg = torch.func.vmap(torch.func.grad(lambda p, a, b: loss(torch.func.functional_call, tm, p, a, b)),
                         in_dims=(None, 0, 0))(tparams, tx, ty)
    assert set(g) == set(tg)
    for k in g:
        close(g[k], tg[k].numpy())
    # the module is its own again afterwards, even after an error inside the call
    with pytest.raises(RuntimeError):
        F.functional_call(m, params, (jg.randn(2, 5),))
    assert all(v is p for (_, v), p in zip(m.named_parameters(), m.parameters()))
    assert m[0].weight.requires_grad and m[0].weight is dict(m.named_parameters())["0.weight"]
    # strict names what is missing, as PyTorch does
    with pytest.raises(RuntimeError, match="Missing key"):
        F.functional_call(m, {"0.weight": params["0.weight"]}, (x,), strict=True)
    # an ensemble: stack_module_state + vmap over the stacked parameters
    models = [jg.nn.Linear(3, 2) for _ in range(4)]
    sp, sb = F.stack_module_state(models)
    assert sp["weight"].shape == (4, 2, 3) and sp["weight"].requires_grad and sp["weight"].is_leaf
    out = F.vmap(lambda p, b, a: F.functional_call(models[0], (p, b), (a,)), in_dims=(0, 0, None))(sp, sb, x)
    for k, mk in enumerate(models):
        close(out[k], mk(x).detach().numpy())
    # tied weights: one value serves both names
    tied = jg.nn.Sequential(jg.nn.Linear(3, 3, bias=False), jg.nn.Linear(3, 3, bias=False))
    tied[1].weight = tied[0].weight
    w = jg.eye(3)
    close(F.functional_call(tied, {"0.weight": w}, (x,)), x.numpy())


@one_mode
def test_transform_errors_as_pytorch():
    x = jg.randn(3)
    with pytest.raises(RuntimeError, match="Expected f\\(\\*args\\) to return a scalar Tensor, got tensor with 1 dims"):
        F.grad(lambda a: a * 2)(x)
    with pytest.raises(RuntimeError, match="Got argnums=2, but only 1 positional inputs"):
        F.grad(lambda a: a.sum(), argnums=2)(x)
    with pytest.raises(RuntimeError, match="output of function f should be a tuple"):
        F.grad(lambda a: a.sum(), has_aux=True)(x)
    with pytest.raises(ValueError, match="Expected all tensors to have the same size in the mapped dimension"):
        F.vmap(lambda a, b: a + b)(jg.randn(3), jg.randn(4))
    with pytest.raises(ValueError, match="expected in_dim to satisfy -1 <= in_dim < 1"):
        F.vmap(lambda a: a, in_dims=1)(x)
    with pytest.raises(ValueError, match="cannot vmap over non-Tensor arguments"):
        F.vmap(lambda a, b: a * b, in_dims=(0, 0))(x, 2.0)
    with pytest.raises(RuntimeError, match="Expected primals and tangents to have the same shape"):
        F.jvp(lambda a: a, (x,), (jg.randn(4),))
    with pytest.raises(ValueError, match="chunk_size"):
        F.jacrev(lambda a: a, chunk_size=0)


def test_transforms_of_pending_inputs(_execution_mode):
    # In "auto" mode the inputs are pending results of a segment: the transform reads them first.
    a = jg.randn(8, 4) * 2.0
    w = (jg.randn(4) + 1.0).requires_grad_()
    per = F.vmap(F.grad(lambda p, r: (r @ p).sin()), in_dims=(None, 0))(w, a)
    ref = J(jax.vmap(jax.grad(lambda p, r: jnp.sin(r @ p)), in_axes=(None, 0)))(w.detach().numpy(), a.numpy())
    close(per, ref)
    (w * 3).sum().backward()  # the tape around the transform is untouched
    close(w.grad, np.full(4, 3.0))
