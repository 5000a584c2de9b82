"""jgrad.distributions against torch.distributions: log_prob, entropy, cdf/icdf and moments with their
gradients in the parameters, kl_divergence (registry dispatch included), shapes, expand, enumerate_support,
argument validation and its errors; sampling: shapes, reproducibility under jg.manual_seed, moments, and
rsample's gradients (the reparameterization, and for gamma draws PyTorch's implicit gradient)."""
import numpy as np
import pytest

import jgrad as jg
from jgrad import distributions as JD

torch = pytest.importorskip("torch")
TD = torch.distributions
from _math_helpers import compare, rand, spd  # noqa: E402
from _op_helpers import _THOROUGH as THOROUGH  # noqa: E402

R = np.random.default_rng(0)
LOC, SCALE = rand((3,), 1), R.uniform(0.5, 2.0, (3,))
POS2, UNIT = R.uniform(0.5, 3.0, (3,)), R.uniform(0.1, 0.9, (3,))
SIMPLEX = np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]])
COV = spd((2, 3, 3), 2)
EVENT = np.array([[0.1, 0.7, 0.2], [0.3, 0.3, 0.4]])
# The comparisons use parameters of shape (3,) (batch or event) wherever they can: every op compiles a kernel per
# shape, and shared shapes share kernels across the distributions.


def _summary(d, value, cdf=True):
    out = [d.log_prob(value), d.entropy(), d.mean, d.variance, d.stddev]
    if cdf:
        out += [d.cdf(value), d.icdf(d.cdf(value).detach())]
    return tuple(out)


# name -> (jgrad builder, torch builder, parameter arrays, value, with cdf/icdf). The formulas are compositions of
# jgrad's ops, whose gradients are tested op by op; here the gradients in the parameters are compared for the
# names in GRAD (every op on the way compiles a kernel per shape and mask: CPU seconds), the others' values,
# and everything with JGRAD_TEST_THOROUGH=1.
GRAD = {"Normal", "Dirichlet", "MVN_scale_tril"}
VALUES = {"Laplace", "Uniform", "Exponential", "Gamma", "Beta", "Bernoulli_logits", "Categorical",
          "OneHotCategorical", "MVN_precision", "Independent"}
CASES = {
    "Normal": (JD.Normal, TD.Normal, [LOC, SCALE], LOC + 0.3, True),
    "Laplace": (JD.Laplace, TD.Laplace, [LOC, SCALE], LOC + 0.3, True),
    "Uniform": (JD.Uniform, TD.Uniform, [LOC, LOC + SCALE], LOC + SCALE / 3, True),
    "Exponential": (JD.Exponential, TD.Exponential, [POS2], UNIT, True),
    "Gamma": (JD.Gamma, TD.Gamma, [POS2, SCALE], UNIT * 2, False),
    "Beta": (JD.Beta, TD.Beta, [POS2, SCALE + 0.5], UNIT, False),
    "Dirichlet": (JD.Dirichlet, TD.Dirichlet, [SIMPLEX[0] * 4], EVENT[0], False),
    "Bernoulli_probs": (lambda p: JD.Bernoulli(probs=p), lambda p: TD.Bernoulli(probs=p), [UNIT],
                        np.array([1.0, 0.0, 1.0]), False),
    "Bernoulli_logits": (lambda p: JD.Bernoulli(logits=p), lambda p: TD.Bernoulli(logits=p), [LOC],
                         np.array([1.0, 0.0, 1.0]), False),
    "Categorical": (lambda p: JD.Categorical(probs=p), lambda p: TD.Categorical(probs=p), [SIMPLEX], np.array([2, 0]),
                    False),
    "OneHotCategorical": (lambda p: JD.OneHotCategorical(logits=p), lambda p: TD.OneHotCategorical(logits=p),
                          [np.log(SIMPLEX[0])], np.eye(3)[2], False),
    "MVN_scale_tril": (lambda m, L: JD.MultivariateNormal(m, scale_tril=L), lambda m, L: TD.MultivariateNormal(
        m, scale_tril=L), [rand((3,), 3), np.linalg.cholesky(COV)], rand((2, 3), 4), False),
    "MVN_covariance": (lambda m, c: JD.MultivariateNormal(m, covariance_matrix=c), lambda m, c: TD.MultivariateNormal(
        m, covariance_matrix=c), [rand((3,), 3), COV[0]], rand((3,), 4), False),
    "MVN_precision": (lambda m, c: JD.MultivariateNormal(m, precision_matrix=c), lambda m, c: TD.MultivariateNormal(
        m, precision_matrix=c), [rand((3,), 3), COV[0]], rand((3,), 4), False),
    "Independent": (lambda m, s: JD.Independent(JD.Normal(m, s), 1), lambda m, s: TD.Independent(TD.Normal(m, s), 1),
                    [LOC, SCALE], LOC, False),
}


@pytest.mark.one_execution_mode  # numerics of jgrad's ops; "auto" mode reruns them with the same values
@pytest.mark.parametrize("name", sorted(n for n in CASES if THOROUGH or n in GRAD | VALUES))
def test_distribution_vs_torch(name):
    jb, tb, params, value, cdf = CASES[name]
    other = "MVN" in name or name in ("Categorical", "OneHotCategorical")

    def run(lib, build):
        return lambda *p: (_other if other else _summary)(build(*p), lib.tensor(value), cdf)
    compare(run(jg, jb), run(torch, tb), params, rtol=1e-6, atol=1e-9, what=name, grad=THOROUGH or name in GRAD)


def _other(d, value, _cdf):
    out = (d.log_prob(value), d.entropy())
    if isinstance(d, (JD.MultivariateNormal, TD.MultivariateNormal)):
        mats = (d.covariance_matrix, d.precision_matrix, d.scale_tril) if "scale_tril" not in d.__dict__ else ()
        return out + (d.mean, d.variance) + mats
    return out + (d.probs, d.logits)


KL_PAIRS = {
    "Normal": (lambda a, b: (JD.Normal(a, b), JD.Normal(b - 1, a.abs() + 0.5)),
               lambda a, b: (TD.Normal(a, b), TD.Normal(b - 1, a.abs() + 0.5)), [LOC, SCALE]),
    "Laplace_Exponential_Gamma": (
        lambda a, b: (JD.Laplace(a, b), JD.Laplace(b, b + 1), JD.Exponential(b), JD.Exponential(b * 2),
                      JD.Gamma(b, b + 1), JD.Gamma(b + 1, b)),
        lambda a, b: (TD.Laplace(a, b), TD.Laplace(b, b + 1), TD.Exponential(b), TD.Exponential(b * 2),
                      TD.Gamma(b, b + 1), TD.Gamma(b + 1, b)), [LOC, SCALE]),
    "Uniform": (lambda a, b: (JD.Uniform(a, a + b), JD.Uniform(a - 1, a + b + 1)),
                lambda a, b: (TD.Uniform(a, a + b), TD.Uniform(a - 1, a + b + 1)), [LOC, SCALE]),
    "Beta_Dirichlet": (lambda a, b: (JD.Beta(a, b), JD.Beta(b, a), JD.Dirichlet(a * b), JD.Dirichlet(a + b)),  # (3,)
                       lambda a, b: (TD.Beta(a, b), TD.Beta(b, a), TD.Dirichlet(a * b), TD.Dirichlet(a + b)),
                       [POS2, SCALE]),
    "Bernoulli_Categorical": (
        lambda p, s: (JD.Bernoulli(p), JD.Bernoulli(1 - p), JD.Categorical(s), JD.Categorical(s.flip(-1)),
                      JD.OneHotCategorical(s), JD.OneHotCategorical(s.flip(-1))),
        lambda p, s: (TD.Bernoulli(p), TD.Bernoulli(1 - p), TD.Categorical(s), TD.Categorical(s.flip(-1)),
                      TD.OneHotCategorical(s), TD.OneHotCategorical(s.flip(-1))), [UNIT, SIMPLEX[0]]),
    "MVN_Independent": (
        lambda m, c, s: (JD.MultivariateNormal(m, c), JD.MultivariateNormal(m * 0, c[0] + 1e-1 * c[1]),
                         JD.Independent(JD.Normal(m, s), 1), JD.Independent(JD.Normal(s, m.abs() + 1), 1)),
        lambda m, c, s: (TD.MultivariateNormal(m, c), TD.MultivariateNormal(m * 0, c[0] + 1e-1 * c[1]),
                         TD.Independent(TD.Normal(m, s), 1), TD.Independent(TD.Normal(s, m.abs() + 1), 1)),
        [rand((3,), 5), COV, SCALE]),
}


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("name", sorted(KL_PAIRS))
def test_kl_divergence_vs_torch(name):
    jb, tb, params = KL_PAIRS[name]

    def kls(lib, build):
        def f(*p):
            ds = build(*p)
            return tuple(lib.distributions.kl_divergence(ds[i], ds[i + 1]) for i in range(0, len(ds), 2))
        return f
    compare(kls(jg, jb), kls(torch, tb), params, rtol=1e-6, atol=1e-9, what=name,
            grad=THOROUGH or name in ("Beta_Dirichlet", "MVN_Independent"))


@pytest.mark.one_execution_mode
def test_sampling_shapes_seed_moments_and_rsample_gradients():
    # Every new shape of a draw compiles its PRNG kernel (about a second of CPU; the gamma sampler several), so the
    # draws share shapes: (N, 3) for the moments; the gamma family's draws fit one bucket of 64 elements.
    n = 2000 if not THOROUGH else 20000
    loc, scale = jg.tensor(LOC, requires_grad=True), jg.tensor(SCALE, requires_grad=True)
    moments = [JD.Normal(loc, scale), JD.Laplace(loc, scale), JD.Uniform(loc, loc + scale), JD.Exponential(scale),
               JD.Categorical(jg.tensor(np.tile([[0.0, 0.4, 0.6]], (3, 1)))),  # category 0 is never drawn
               JD.MultivariateNormal(jg.tensor(LOC), jg.tensor(COV[0])),
               JD.Independent(JD.Normal(loc, scale), 1)]
    small = [JD.Gamma(jg.tensor(SIMPLEX * 4), 2.0), JD.Beta(scale, scale + 1), JD.Dirichlet(jg.tensor(SIMPLEX * 4)),
             JD.OneHotCategorical(jg.tensor(SIMPLEX))] + ([JD.Bernoulli(jg.tensor(UNIT))] if THOROUGH else [])
    for d in moments + small:
        size = n if d in moments or THOROUGH else 4
        jg.manual_seed(7)
        a = d.sample((size,))
        jg.manual_seed(7)
        b = d.sample((size,))
        assert tuple(a.shape) == (size,) + d.batch_shape + d.event_shape, type(d).__name__
        np.testing.assert_array_equal(a, b)  # reproducible from the seed
        assert a.grad_fn is None
        if isinstance(d, JD.Categorical):
            assert (a.numpy() != 0).all()
        if size == n:
            x = a.double()
            mean = d.probs.detach() @ jg.arange(3, dtype=jg.float64) if isinstance(d, JD.Categorical) else d.mean
            var = (d.probs.detach() @ jg.arange(3, dtype=jg.float64) ** 2 - mean ** 2 if isinstance(
                d, JD.Categorical) else d.variance).detach().numpy()
            se = np.sqrt(var / n)  # the sample mean's standard error: within 5 of them
            assert (np.abs(x.mean(0).numpy() - mean.detach().numpy()) <= 5 * se + 1e-9).all(), type(d).__name__
            np.testing.assert_allclose(x.var(0), var, rtol=0.25, atol=0.01, err_msg=type(d).__name__)
    # rsample is differentiable: the reparameterization of N(loc, scale) ...
    x = JD.Normal(loc, scale).rsample((n,))
    gl, gs = jg.autograd.grad(x.sum(), [loc, scale])
    np.testing.assert_allclose(gl, np.full(3, float(n)))
    np.testing.assert_allclose(gs, ((x - loc) / scale).detach().sum(0), rtol=1e-10)
    # ... and gamma draws' implicit gradient, as PyTorch's _standard_gamma_grad at the same draws
    alpha = jg.tensor(POS2, requires_grad=True)
    g = JD.Gamma(alpha, 1.0).rsample()
    (ga,) = jg.autograd.grad(g.sum(), alpha)
    expected = torch._standard_gamma_grad(torch.tensor(POS2), torch.tensor(g.detach().numpy()))
    np.testing.assert_allclose(ga, expected.numpy(), rtol=1e-4)  # two approximations of the same derivative
    (gs,) = jg.autograd.grad(small[1].rsample((2,)).sum(), scale)  # Beta: through two gamma draws
    assert np.isfinite(gs.numpy()).all() and (gs.numpy() != 0).all()


@pytest.mark.one_execution_mode
def test_api_shapes_expand_support_and_constraints():
    n = JD.Normal(jg.tensor(LOC), jg.tensor(SCALE))
    e = n.expand((2, 3))
    assert e.batch_shape == (2, 3) and e.sample().shape == (2, 3) and JD.Normal(0.0, 1.0).batch_shape == ()
    ind = JD.Independent(e, 1)
    assert (ind.batch_shape, ind.event_shape) == ((2,), (3,)) and ind.expand((4, 2)).batch_shape == (4, 2)
    m = JD.MultivariateNormal(jg.zeros(3, dtype=jg.float64), scale_tril=jg.tensor(np.linalg.cholesky(COV)))
    assert (m.batch_shape, m.event_shape) == ((2,), (3,)) and m.expand((5, 2)).rsample().shape == (5, 2, 3)
    for jd, td in ((JD.Bernoulli(jg.tensor(UNIT)), TD.Bernoulli(torch.tensor(UNIT))),
                   (JD.Categorical(jg.tensor(SIMPLEX)), TD.Categorical(torch.tensor(SIMPLEX))),
                   (JD.OneHotCategorical(jg.tensor(SIMPLEX)), TD.OneHotCategorical(torch.tensor(SIMPLEX)))):
        for expand in (True, False):
            np.testing.assert_array_equal(jd.enumerate_support(expand), td.enumerate_support(expand).numpy())
        assert repr(jd.support) == repr(td.support)
        assert {k: repr(v) for k, v in jd.arg_constraints.items()} == {
            k: repr(v) for k, v in td.arg_constraints.items()}
    for c, values in (("positive", (np.log(SIMPLEX),)), ("simplex", (SIMPLEX, np.log(SIMPLEX))),
                      ("lower_cholesky", (COV, np.linalg.cholesky(COV))), ("positive_definite", (COV, -COV))):
        jc, tc = getattr(JD.constraints, c), getattr(TD.constraints, c)
        for v in values:
            np.testing.assert_array_equal(jc.check(jg.tensor(v)), tc.check(torch.tensor(v)).numpy(), err_msg=c)


@pytest.mark.one_execution_mode
def test_validation_errors():
    # the values are on the host: checked at once and printed as PyTorch prints them
    bad = [(lambda L, T: L.Normal(T([0.0]), T([-1.0])), "Expected parameter scale (Tensor of shape (1,))"),
           (lambda L, T: L.Normal(T([0.0]), T([1.0])).log_prob(T([np.nan])), "Expected value argument"),
           (lambda L, T: L.Uniform(T([1.0]), T([0.0])), "Expected parameter low (Tensor of shape (1,))"),
           (lambda L, T: L.Categorical(T(SIMPLEX)).log_prob(T([3, 0])), "Expected value argument"),
           (lambda L, T: L.Categorical(T(SIMPLEX)).log_prob(T([0, -1])), "Expected value argument"),
           (lambda L, T: L.Bernoulli(), "Either `probs` or `logits` must be specified, but not both."),
           (lambda L, T: L.MultivariateNormal(T([0.0])), "Exactly one of covariance_matrix or precision_matrix"),
           (lambda L, T: L.Independent(L.Normal(T([0.0]), T([1.0])), 2), "Expected reinterpreted_batch_ndims <= "),
           (lambda L, T: L.Normal(T([0.0, 1, 2]), T([1.0, 1, 1])).log_prob(T([[0.0, 1.0]])),
            "Value is not broadcastable")]
    for fn, start in bad:
        with pytest.raises(ValueError) as theirs:
            fn(TD, torch.tensor)
        with pytest.raises(ValueError) as ours:
            fn(JD, jg.tensor)
            jg.synchronize()
        assert str(ours.value).startswith(start) and str(theirs.value).startswith(start), (ours.value, theirs.value)
    JD.Normal(jg.tensor([0.0]), jg.tensor([-1.0]), validate_args=False)  # no check
    with jg.execution_mode("auto"):  # pending values: checked on the device, reported at the next host read
        d = JD.Normal(jg.tensor([0.0]) * 2, jg.tensor([1.0]) - 2)
        with pytest.raises(ValueError, match=r"Expected parameter scale .* but found invalid values \(on the device\)"):
            d.scale.numpy()


def test_register_kl_dispatch():
    class MyNormal(JD.Normal):
        pass

    p, q = MyNormal(jg.tensor([0.0]), jg.tensor([1.0])), JD.Normal(jg.tensor([1.0]), jg.tensor([2.0]))
    np.testing.assert_allclose(JD.kl_divergence(p, q), TD.kl_divergence(TD.Normal(0.0, 1.0), TD.Normal(1.0, 2.0)),
                               rtol=1e-6)  # the subclass uses Normal's formula ...

    @JD.register_kl(MyNormal, JD.Normal)
    def _kl(a, b):
        return a.loc * 0 + 42.0
    assert JD.kl_divergence(p, q).item() == 42.0  # ... until a more specific pair is registered
    with pytest.raises(NotImplementedError):
        JD.kl_divergence(q, JD.Gamma(1.0, 1.0))


@pytest.mark.one_execution_mode
def test_array_generic_constraints_agree_with_pytorch_on_host_device_and_op_by_op():
    """Validation checks the constraints marked ``array_generic`` with NumPy (host values) or in one kernel
    (pending values); both must say what PyTorch's check says, as the op-by-op form does."""
    from jgrad.distributions import utils

    names = ["simplex", "real", "positive", "nonnegative", "boolean", "one_hot", "unit_interval",
             "nonnegative_integer", "positive_integer"]
    made = [("integer_interval", (0, 2)), ("integer_interval", (-1, 1)), ("greater_than", (-1.5,)),
            ("greater_than_eq", (1,)), ("less_than", (3,)), ("interval", (-1.0, 0.5)), ("half_open_interval", (0, 1))]
    pairs = [(getattr(JD.constraints, n), getattr(TD.constraints, n)) for n in names] + [
        (getattr(JD.constraints, n)(*a), getattr(TD.constraints, n)(*a)) for n, a in made]
    values = [np.array([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]]), np.array([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]),
              np.array([[-1.0, 0.5, 1.5], [2.0, 3.0, np.nan]]), np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 1.0]]),
              np.array([[0.5, 0.5000001, -1e-9]]), np.array([[1, 2, 0]])]
    for c, tc in pairs:
        assert type(c).__dict__.get("array_generic"), c
        for v in values:
            want = bool(tc.check(torch.tensor(v)).all())
            results = []
            for mode in ("eager", "auto"):  # host values, then pending ones (one kernel, reported at the sync)
                try:
                    with jg.execution_mode(mode):
                        t = jg.tensor(v)
                        utils.require_constraint(c, t if mode == "eager" else t + 0,
                                                 lambda now: ValueError(f"invalid ({now})"), "test")
                        jg.synchronize()
                    results.append(True)
                except ValueError:
                    results.append(False)
            assert results == [want, want], (c, v, results, want)
            assert bool(c.check(jg.tensor(v)).all()) == want, (c, v)  # the op-by-op form


@pytest.mark.one_execution_mode
def test_categorical_log_prob_with_and_without_broadcasting_vs_torch():
    """One value per distribution gathers directly; other shapes broadcast as PyTorch does. Values and the
    gradients in the logits agree with PyTorch's either way."""
    logits = np.log(SIMPLEX)
    for value in (np.array([2, 0]), np.array([[1, 2], [0, 0], [2, 1]]), np.array(1), np.array([[1], [2]])):
        outs = []
        for lib in (jg, torch):
            p = lib.tensor(logits, requires_grad=True)
            lp = lib.distributions.Categorical(logits=p).log_prob(lib.tensor(value))
            (lp * lib.arange(lp.numel()).reshape(lp.shape)).sum().backward()
            outs.append((np.asarray(lp.detach().numpy()), np.asarray(p.grad.numpy())))
        np.testing.assert_allclose(outs[0][0], outs[1][0], rtol=1e-6)
        np.testing.assert_allclose(outs[0][1], outs[1][1], rtol=1e-6, atol=1e-12)
