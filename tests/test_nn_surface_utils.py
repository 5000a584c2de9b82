"""Issue 30: ``nn.utils.parametrize``, ``parametrizations.{weight_norm, spectral_norm, orthogonal}`` and the
hook-based ``nn.utils.weight_norm`` / ``spectral_norm``, against PyTorch (weights copied, same buffers)."""
import os

import numpy as np
import pytest

import jgrad as jg
from jgrad import nn

torch = pytest.importorskip("torch")
P, PZ, U = jg.nn.utils.parametrize, jg.nn.utils.parametrizations, jg.nn.utils
TP, TPZ, TU = torch.nn.utils.parametrize, torch.nn.utils.parametrizations, torch.nn.utils
pytestmark = pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")


def _copy(jm, tm):
    with torch.no_grad():
        for (n, p), (n2, q) in zip(jm.named_parameters(), tm.named_parameters()):
            assert n == n2
            q.copy_(torch.tensor(p.detach().numpy()))


def _close(a, b, tol=1e-5, what=""):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=tol, atol=tol, err_msg=what)


def _same_step(jm, tm, x, tol=1e-5, steps=1):
    """Forward (``steps`` times: power iterations advance) and backward of both; outputs and grads agree."""
    for _ in range(steps):
        jo, to = jm(jg.tensor(x)), tm(torch.tensor(x))
        _close(jo, to, tol, "output")
    jo.sum().backward()
    to.sum().backward()
    jn = [n for n, _ in jm.named_parameters()]
    assert jn == [n for n, _ in tm.named_parameters()]
    assert list(jm.state_dict()) == list(tm.state_dict())
    for (n, p), (_, q) in zip(jm.named_parameters(), tm.named_parameters()):
        _close(p.grad, q.grad, tol, n)


def _pair(cls, *args):
    jm, tm = getattr(nn, cls)(*args), getattr(torch.nn, cls)(*args)
    _copy(jm, tm)
    return jm, tm


@pytest.mark.one_execution_mode
def test_parametrizations_weight_and_spectral_norm_match_torch():
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    jm, tm = _pair("Linear", 4, 3)
    PZ.weight_norm(jm)
    TPZ.weight_norm(tm)
    assert type(jm).__name__ == type(tm).__name__ == "ParametrizedLinear"
    _same_step(jm, tm, x)
    if os.environ.get("JGRAD_TEST_THOROUGH") != "1":  # CI: the hook-based spectral norm's test has the algorithm
        return
    jm, tm = _pair("Linear", 4, 3)
    PZ.spectral_norm(jm)
    TPZ.spectral_norm(tm)
    for b in ("_u", "_v"):  # PyTorch's random start vectors
        getattr(jm.parametrizations.weight[0], b).copy_(jg.tensor(getattr(tm.parametrizations.weight[0], b).numpy()))
    _same_step(jm, tm, x, steps=2)
    jm.eval(), tm.eval()
    _close(jm(jg.tensor(x)), tm(torch.tensor(x)))
    # a state dict of PyTorch's loads as it is
    jm.load_state_dict({k: jg.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    _close(jm.weight, tm.weight)


@pytest.mark.skipif(os.environ.get("JGRAD_TEST_THOROUGH") != "1", reason="compiles QR and Householder kernels (slow)")
@pytest.mark.one_execution_mode
def test_orthogonal_every_map_matches_torch():
    rng = np.random.default_rng(1)
    cases = [((3, 5), None), ((4, 4), None), ((4, 4), "cayley"), ((5, 3), "matrix_exp"), ((5, 3), "householder")]
    for shape, mp in cases:
        jm, tm = _pair("Linear", shape[1], shape[0])
        PZ.orthogonal(jm, orthogonal_map=mp)
        TPZ.orthogonal(tm, orthogonal_map=mp)
        w = jm.weight.detach().numpy()
        gram = w @ w.T if shape[0] < shape[1] else w.T @ w
        np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-5)
        # the same original (and base) give the same weight and gradient
        o = rng.standard_normal(shape).astype(np.float32)
        jm.parametrizations.weight.original.data = jg.tensor(o)
        with torch.no_grad():
            tm.parametrizations.weight.original.copy_(torch.tensor(o))
        if getattr(tm.parametrizations.weight[0], "base", None) is not None:
            jm.parametrizations.weight[0].base = jg.tensor(tm.parametrizations.weight[0].base.numpy())
        _close(jm.weight, tm.weight, 1e-4, f"{shape} {mp}")
        (jm.weight * jg.arange(float(o.size)).reshape(shape)).sum().backward()
        (tm.weight * torch.arange(float(o.size)).reshape(shape)).sum().backward()
        _close(jm.parametrizations.weight.original.grad, tm.parametrizations.weight.original.grad, 1e-4, "grad")
    q = np.linalg.qr(rng.standard_normal((4, 4)))[0].astype(np.float32)
    jm = PZ.orthogonal(nn.Linear(4, 4))
    jm.weight = jg.tensor(q)  # right_inverse: assigning an orthogonal matrix stores it
    np.testing.assert_allclose(jm.weight.detach().numpy(), q, atol=1e-5)


class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).mT

    def right_inverse(self, A):
        return A.triu()


@pytest.mark.one_execution_mode
def test_register_cached_and_remove_parametrizations():
    m = nn.Linear(3, 3)
    w0 = m.weight.detach().numpy().copy()
    P.register_parametrization(m, "weight", Symmetric())
    sym = np.triu(w0) + np.triu(w0, 1).T
    np.testing.assert_allclose(m.weight.detach().numpy(), sym)
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight") and not P.is_parametrized(m, "bias")
    assert P.type_before_parametrizations(m) is nn.Linear
    with P.cached():
        assert m.weight is m.weight  # computed once inside the block
    assert m.weight is not m.weight
    a = np.arange(9.0, dtype=np.float32).reshape(3, 3)
    m.weight = jg.tensor(a)  # through right_inverse
    np.testing.assert_allclose(m.weight.detach().numpy(), np.triu(a) + np.triu(a, 1).T)
    m(jg.ones(2, 3)).sum().backward()
    assert m.parametrizations.weight.original.grad is not None
    P.remove_parametrizations(m, "weight", leave_parametrized=False)
    assert type(m) is nn.Linear and isinstance(m.weight, nn.Parameter)
    np.testing.assert_allclose(m.weight.detach().numpy(), np.triu(a))
    with pytest.raises(ValueError, match="does not have a parametrization"):
        P.remove_parametrizations(m, "weight")
    with pytest.raises(ValueError, match="may not change the shape"):
        P.register_parametrization(m, "weight", nn.Linear(3, 2))  # a module that changes the shape


@pytest.mark.one_execution_mode
def test_hook_based_weight_and_spectral_norm_match_torch():
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    jm, tm = _pair("Linear", 4, 3)
    with pytest.warns(FutureWarning):
        U.weight_norm(jm)
    TU.weight_norm(tm)
    _same_step(jm, tm, x)
    U.remove_weight_norm(jm)
    TU.remove_weight_norm(tm)
    _close(jm.weight, tm.weight)
    assert [n for n, _ in jm.named_parameters()] == ["bias", "weight"]
    jm, tm = _pair("Linear", 4, 3)
    U.spectral_norm(jm)
    TU.spectral_norm(tm)
    jm.weight_u.copy_(jg.tensor(tm.weight_u.numpy()))
    jm.weight_v.copy_(jg.tensor(tm.weight_v.numpy()))
    _same_step(jm, tm, x, steps=3)
    U.remove_spectral_norm(jm)
    TU.remove_spectral_norm(tm)
    _close(jm.weight, tm.weight)
    with pytest.raises(ValueError, match="spectral_norm of 'weight' not found"):
        U.remove_spectral_norm(jm)
