"""jgrad.special and the top-level aliases (lgamma, digamma, polygamma, erfinv, i0, sinc, mvlgamma ...),
unique, bincount, histc, quantile and nanquantile against PyTorch (values, dtypes, gradients where PyTorch
has them, the Bessel functions against SciPy and an identity) and PyTorch's errors."""
import numpy as np
import pytest

import jgrad as jg
from jgrad import special as S

torch = pytest.importorskip("torch")
scipy_special = pytest.importorskip("scipy.special")
from _math_helpers import compare  # noqa: E402
from _op_helpers import _THOROUGH as THOROUGH  # noqa: E402
from _vs_torch import same_error  # noqa: E402

RNG = np.random.default_rng(0)
UNIT = RNG.uniform(0.05, 0.95, (2, 3))
POS = RNG.uniform(0.6, 3.0, (2, 3))
REAL = RNG.uniform(-2.5, 2.5, (2, 3))

# name -> (input, gradient compared); each compiles its own kernels (a fraction of a second of CPU apiece), so the
# names that re-export jgrad's elementwise ops run with JGRAD_TEST_THOROUGH=1 only, and a few gradients too
UNARY = {"erfcx": (REAL, False), "erfinv": (UNIT * 2 - 1, True), "logit": (UNIT, True), "gammaln": (POS, True),
         "digamma": (POS, True), "psi": (POS, False), "i0e": (REAL, True), "i1": (REAL, True),
         "ndtri": (UNIT, True), "log_ndtr": (REAL, True), "sinc": (REAL, True), "entr": (UNIT, False),
         "modified_bessel_i0": (REAL, False)}
if THOROUGH:
    UNARY.update({"erf": (REAL, True), "erfc": (REAL, True), "expit": (REAL, True), "i0": (REAL, True),
                  "i1e": (REAL, True), "ndtr": (REAL, True), "exp2": (REAL, True), "expm1": (REAL, True),
                  "log1p": (POS, True), "spherical_bessel_j0": (REAL, False)})


@pytest.mark.one_execution_mode  # numerics of the kernels; "auto" mode reruns them with the same values
def test_special_vs_torch():
    for name, (x, differentiable) in UNARY.items():
        compare(getattr(S, name), getattr(torch.special, name), [x], grad=differentiable or (
            THOROUGH and name not in ("modified_bessel_i0", "spherical_bessel_j0")), rtol=1e-6, atol=1e-9, what=name)
    for n in (0, 2):
        compare(lambda t: S.polygamma(n, t), lambda t: torch.special.polygamma(n, t), [POS], rtol=1e-6, what="pg")
    compare(lambda t: S.multigammaln(t, 3), lambda t: torch.special.multigammaln(t, 3),
            [np.concatenate([POS[0] + 1, [0.99]])], what="mvlgamma")
    compare(lambda t: S.logit(t, eps=0.2), lambda t: torch.special.logit(t, eps=0.2), [UNIT], what="logit eps")
    compare(S.xlog1py, torch.special.xlog1py, [np.array([0.0, 1.5, -2.0]), np.array([3.0, 0.5, 1.0])])
    compare(lambda q: S.zeta(2.5, q), lambda q: torch.special.zeta(2.5, q), [POS], rtol=1e-6, what="zeta")
    if THOROUGH:  # values of JAX's functions (their kernels take seconds to compile)
        compare(lambda a, x: (S.gammainc(a, x), S.gammaincc(a, x)), lambda a, x: (torch.special.gammainc(
            a, x), torch.special.gammaincc(a, x)), [POS, UNIT * 3], grad=False, rtol=1e-6, what="gammainc")
    # the top-level and Tensor-method aliases (on the inputs above: their kernels are compiled already), and
    # integer inputs computed in the default dtype
    compare(lambda t: (jg.lgamma(t), t.lgamma(), jg.digamma(t), t.digamma(), jg.polygamma(2, t), t.polygamma(2),
                       jg.mvlgamma(t + 1, 3), t.sinc(), jg.sinc(t)),
            lambda t: (torch.lgamma(t), t.lgamma(), torch.digamma(t), t.digamma(), torch.polygamma(2, t),
                       t.polygamma(2), torch.mvlgamma(t + 1, 3), t.sinc(), torch.sinc(t)), [POS], rtol=1e-6)
    compare(lambda t: (jg.erfinv(t), t.erfinv(), jg.logit(t), t.logit()), lambda t: (
        torch.erfinv(t), t.erfinv(), torch.logit(t), t.logit()), [UNIT], rtol=1e-6)
    compare(lambda t: (jg.i0(t), t.i0(), jg.erfc(t), t.erfc(), jg.exp2(t)), lambda t: (
        torch.i0(t), t.i0(), torch.erfc(t), t.erfc(), torch.exp2(t)), [REAL], rtol=1e-6)
    compare(lambda t: t.logit(), lambda t: t.logit(), [np.array([1.5, 0.5, -0.25])], what="logit outside [0, 1]")
    compare(jg.lgamma, torch.lgamma, [np.array([1, 2, 5])], rtol=1e-5, atol=1e-6, what="int")  # float32


@pytest.mark.one_execution_mode
def test_bessel_against_scipy():
    x = np.concatenate([np.linspace(-40, 40, 33), [0.0, 24.99, 25.0, 25.01]])
    np.testing.assert_allclose(S.bessel_j0(jg.tensor(x)), scipy_special.j0(x), atol=1e-13)  # PyTorch's own is only ~1e-7 exact
    xt = jg.tensor(x, requires_grad=True)
    j1 = S.bessel_j1(xt)
    np.testing.assert_allclose(j1.detach(), scipy_special.j1(x), atol=1e-13)
    np.testing.assert_allclose(S.bessel_j0(jg.tensor(x)), torch.special.bessel_j0(torch.tensor(x)), atol=1e-6)
    (g1,) = jg.autograd.grad(j1.sum(), xt)  # J1' = J0 - J1 / x (1/2 at 0)
    safe = np.where(x == 0, 1, x)
    np.testing.assert_allclose(g1, np.where(x == 0, 0.5, scipy_special.j0(x) - scipy_special.j1(x) / safe),
                               atol=1e-12)
    assert S.bessel_j0(jg.tensor([1.0], dtype=jg.float32)).dtype is jg.float32


@pytest.mark.one_execution_mode
def test_unique_bincount_histc_quantile_vs_torch():
    v = np.array([3, 1, 2, 1, 3, 3])
    m = np.array([[1, 2], [1, 2], [0, 1]])
    f = np.array([1.0, np.nan, np.nan, -0.5])
    for kw in ({}, {"return_inverse": True}, {"return_counts": True, "sorted": False},
               {"return_inverse": True, "return_counts": True}):
        compare(lambda t: jg.unique(t, **kw), lambda t: torch.unique(t, **kw), [v], what=str(kw))
    compare(lambda t: t.unique(dim=0, return_inverse=True, return_counts=True),
            lambda t: t.unique(dim=0, return_inverse=True, return_counts=True), [m], what="dim")
    compare(lambda t: jg.unique(t), lambda t: torch.unique(t), [f], grad=False, what="nan")
    for w in (None, np.array([1.0, 2, 3, 4, 5, 6], np.float32), np.array([1, 2, 3, 4, 5, 6])):
        compare(lambda t, *ws: jg.bincount(t, *ws, minlength=7), lambda t, *ws: torch.bincount(t, *ws, minlength=7),
                [v] + ([] if w is None else [w]), grad=False, what="bincount")
    x = RNG.standard_normal((4, 5))
    for args in ((10,), (4, -1.0, 1.0), (3, 0, 0)):
        compare(lambda t: jg.histc(t, *args), lambda t: torch.histc(t, *args), [x], grad=False, what="histc")
    compare(lambda t: jg.histc(t, 4), lambda t: torch.histc(t, 4), [np.ones(3, np.float32)], what="histc same")
    q = np.array([0.1, 0.5, 0.9])
    compare(lambda t, qq: (jg.quantile(t, qq, dim=1, keepdim=True), jg.quantile(t, 0.3)),
            lambda t, qq: (torch.quantile(t, qq, dim=1, keepdim=True), torch.quantile(t, 0.3)), [x, q],
            what="quantile")
    xn = x.copy()
    xn[1, 2] = np.nan
    for interp in ("nearest",) + (("lower", "higher", "midpoint") if THOROUGH else ()):
        compare(lambda t: (jg.quantile(t, 0.4, 0, interpolation=interp),
                           t.nanquantile(0.4, 1, interpolation=interp)),
                lambda t: (torch.quantile(t, 0.4, 0, interpolation=interp), t.nanquantile(0.4, 1,
                                                                                         interpolation=interp)),
                [xn], grad=False, what=interp)


def test_special_and_stats_errors_match_torch():
    fl, i = np.array([1.0, 2.0]), np.array([0, 2, 2])
    cases = [
        lambda L, T: L.polygamma(-1, T(fl)), lambda L, T: L.mvlgamma(T(fl), 0),
        lambda L, T: L.bincount(T(np.array([0, -2]))), lambda L, T: L.bincount(T(np.array([[0, 2]]))),
        lambda L, T: L.bincount(T(fl)), lambda L, T: L.bincount(T(i), weights=T(fl)),
        lambda L, T: L.bincount(T(i), minlength=-1), lambda L, T: L.histc(T(i)),
        lambda L, T: L.histc(T(fl), bins=0), lambda L, T: L.histc(T(fl), min=3, max=1),
        lambda L, T: L.histc(T(np.array([1.0, np.inf])), bins=4), lambda L, T: L.quantile(T(fl), 1.5),
        lambda L, T: L.quantile(T(fl), T(np.array([0.5, 1.5]))), lambda L, T: L.quantile(T(i), 0.5),
        lambda L, T: L.quantile(T(fl), T(np.array([0.5], np.float32))),
        lambda L, T: L.quantile(T(fl), 0.5, interpolation="foo"),
        lambda L, T: L.quantile(T(fl), T(np.array([[0.5]]))), lambda L, T: L.nanquantile(T(np.ones(0)), 0.5),
        lambda L, T: L.unique(T(np.ones((1, 2))), dim=3),
    ]
    for fn in cases:
        same_error(lambda: fn(jg, jg.tensor), lambda: fn(torch, torch.tensor))
