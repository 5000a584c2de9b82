"""``jgrad.autograd.functional`` and ``autograd.grad(..., is_grads_batched=True)`` against PyTorch's.

The six functions run on the tape as PyTorch's do (``vectorize=True`` through the batched backward,
``strategy="forward-mode"`` through ``jgrad.func.jacfwd``), so each is compared with
``torch.autograd.functional`` on the same functions, tuple inputs and outputs included, and PyTorch's
strict-mode errors are checked by message.
"""
import os
import re

import jax
import numpy as np
import pytest

import jgrad as jg

torch = pytest.importorskip("torch")
THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"
AF = jg.autograd.functional
TF = torch.autograd.functional


def T(x):
    return torch.tensor(x.detach().numpy())


def check(a, b):
    la = jax.tree_util.tree_leaves(a, is_leaf=lambda x: isinstance(x, jg.Tensor))
    lb = jax.tree_util.tree_leaves(b, is_leaf=lambda x: isinstance(x, torch.Tensor))
    assert len(la) == len(lb)
    for x, y in zip(la, lb):
        assert tuple(x.shape) == tuple(y.shape)
        np.testing.assert_allclose(x.detach().numpy(), y.detach().numpy(), rtol=1e-5, atol=1e-5)


def f2(x, y):  # two inputs, two outputs
    return x.exp() * y, (x * y).sum(0).tanh()


def s2(x, y):  # two inputs, a scalar
    return (x.exp() * y).sum() + (x * y).sin().sum()


@pytest.mark.one_execution_mode  # the tape's products; the batched backward leaves "auto" mode anyway
def test_functional_matches_torch():
    a, b, va, vb = jg.randn(3), jg.randn(2, 3), jg.randn(3), jg.randn(2, 3)
    ta, tb = T(a), T(b)
    for vec in (False, True):
        check(AF.jacobian(f2, (a, b), vectorize=vec), TF.jacobian(f2, (ta, tb), vectorize=vec))
    for vec in (True, False) if THOROUGH else (True,):  # the loop over rows compiles many small kernels
        check(AF.hessian(s2, (a, b), vectorize=vec), TF.hessian(s2, (ta, tb), vectorize=vec))
    check(AF.jacobian(f2, (a, b), vectorize=True, strategy="forward-mode"),
          TF.jacobian(f2, (ta, tb), vectorize=True, strategy="forward-mode"))
    check(AF.hessian(s2, (a, b), vectorize=True, outer_jacobian_strategy="forward-mode"),
          TF.hessian(s2, (ta, tb), vectorize=True, outer_jacobian_strategy="forward-mode"))
    check(AF.jacobian(lambda x: x.sin(), a), TF.jacobian(lambda x: x.sin(), ta))  # a tensor, not a tuple
    vo = (jg.randn(2, 3), jg.randn(3))
    check(AF.vjp(f2, (a, b), vo), TF.vjp(f2, (ta, tb), tuple(map(T, vo))))
    check(AF.jvp(f2, (a, b), (va, vb)), TF.jvp(f2, (ta, tb), (T(va), T(vb))))
    check(AF.hvp(s2, (a, b), (va, vb)), TF.hvp(s2, (ta, tb), (T(va), T(vb))))
    check(AF.vhp(s2, (a, b), (va, vb)), TF.vhp(s2, (ta, tb), (T(va), T(vb))))
    # create_graph: the products stay differentiable (third derivatives of x**3 * y)
    ar, tr = a.clone().requires_grad_(), ta.clone().requires_grad_()
    AF.hvp(lambda x: (x.pow(3) * b[0]).sum(), ar, va, create_graph=True)[1].sum().backward()
    TF.hvp(lambda x: (x.pow(3) * tb[0]).sum(), tr, T(va), create_graph=True)[1].sum().backward()
    check(ar.grad, tr.grad)
    if THOROUGH:
        ar.grad = None
        tr.grad = None
        AF.jacobian(lambda x: x.pow(3), ar, create_graph=True, vectorize=True).sum().backward()
        TF.jacobian(lambda x: x.pow(3), tr, create_graph=True, vectorize=True).sum().backward()
        check(ar.grad, tr.grad)


@pytest.mark.one_execution_mode
def test_functional_strict_and_argument_errors_as_torch():
    a = jg.randn(3)
    ta = T(a)
    cases = [
        lambda M, x: M.jacobian(lambda t: t.detach() * 2, x, strict=True),  # output independent of input
        lambda M, x: M.vjp(lambda t: t * 2, x, strict=True),                   # v None, 3 outputs
        lambda M, x: M.hessian(lambda t: (t * 2).sum(), x, strict=True),       # a linear function
        lambda M, x: M.jvp(lambda t: t, (x,), (x[:2],)),                       # v of the wrong size
        lambda M, x: M.jacobian(lambda t: t, x, strategy="sideways"),
        lambda M, x: M.jacobian(lambda t: t, x, strict=True, vectorize=True),
        lambda M, x: M.hvp(lambda t: t, x, x),                                 # not a scalar
    ]
    for case in cases:
        with pytest.raises(Exception) as want:
            case(TF, ta)
        with pytest.raises(type(want.value)) as got:
            case(AF, a)
        assert re.split("[.:]", str(got.value))[0] == re.split("[.:]", str(want.value))[0]


@pytest.mark.one_execution_mode  # the batched pass leaves "auto" mode for its trace
def test_grad_is_grads_batched():
    x = jg.randn(3, requires_grad=True)
    z = jg.randn(2, requires_grad=True)
    tx, tz = T(x).requires_grad_(), T(z).requires_grad_()
    go, gz = jg.randn(5, 3), jg.randn(5, 2)
    out = [x.sin() * x.sum(), z.exp()]
    tout = [tx.sin() * tx.sum(), tz.exp()]
    check(jg.autograd.grad(out, [x, z], [go, gz], is_grads_batched=True, retain_graph=True),
          torch.autograd.grad(tout, [tx, tz], [T(go), T(gz)], is_grads_batched=True, retain_graph=True))
    # create_graph keeps the batched gradient differentiable
    (g,) = jg.autograd.grad(out[0], x, go, is_grads_batched=True, create_graph=True)
    (tg,) = torch.autograd.grad(tout[0], tx, T(go), is_grads_batched=True, create_graph=True)
    check(jg.autograd.grad(g.sum(), x), torch.autograd.grad(tg.sum(), tx))
    # unused inputs, and PyTorch's shape error
    w = jg.randn(2, requires_grad=True)
    assert jg.autograd.grad(out[1], [z, w], gz, is_grads_batched=True, allow_unused=True, retain_graph=True)[1] is None
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        jg.autograd.grad(out[1], [z, w], gz, is_grads_batched=True)
    with pytest.raises(RuntimeError, match="we interpret the first dimension of each grad_output as the batch"):
        jg.autograd.grad(out[1], z, jg.randn(5, 3), is_grads_batched=True)
