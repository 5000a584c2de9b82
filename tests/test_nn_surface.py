"""Issue 30, the nn surface: resampling, patches, pixel shuffles and the vision layers, against PyTorch.

The op table (tests/_opinfo_table.py) sweeps each function's dtypes and variants on one or two samples; these
tests cover the modes and arguments (every interpolation mode, every grid_sample padding mode) in one loop
each, values and gradients.
"""
import os

import numpy as np
import pytest

import jgrad as jg
import jgrad.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
# CI checks a few cases of each family (every compile costs CI time); JGRAD_TEST_THOROUGH=1 every combination.
THOROUGH = os.environ.get("JGRAD_TEST_THOROUGH") == "1"


def _pair_run(jf, tf, arrays, seed=0):
    """Values and input gradients (of a random cotangent) of ``jf`` and ``tf`` on the same arrays."""
    js = [jg.tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    jo, to = jf(*js), tf(*ts)
    g = np.random.default_rng(seed).standard_normal(tuple(to.shape)).astype(arrays[0].dtype)
    jo.backward(jg.tensor(g))
    to.backward(torch.tensor(g))
    return (jo.detach().numpy(), [j.grad.numpy() for j in js]), (to.detach().numpy(), [t.grad.numpy() for t in ts])


def _check(jf, tf, arrays, tol=1e-5, what="", grads=True):
    if not grads:  # values only (the op table checks these ops' gradients)
        jv, tv = jf(*[jg.tensor(a) for a in arrays]).detach().numpy(), tf(*[torch.tensor(a) for a in arrays]).detach()
        np.testing.assert_allclose(jv, tv.numpy(), rtol=tol, atol=tol, err_msg=what)
        return
    (jv, jgs), (tv, tgs) = _pair_run(jf, tf, arrays)
    assert jv.shape == tv.shape, what
    np.testing.assert_allclose(jv, tv, rtol=tol, atol=tol, err_msg=what)
    for a, b in zip(jgs, tgs):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=what)


@pytest.mark.one_execution_mode
def test_interpolate_every_mode_matches_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    _check(lambda a: F.interpolate(a, size=(3, 12), mode="bilinear", antialias=True),  # the filter widened
           lambda a: TF.interpolate(a, size=(3, 12), mode="bilinear", antialias=True), [x], 2e-5, "antialias")
    _check(jg.nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2), [x], grads=False)
    if not THOROUGH:  # CI: the op table's interpolate entry sweeps bilinear and nearest
        return
    cases = [(m, ac, kw) for m, ac in [("nearest", None), ("nearest-exact", None), ("area", None), ("bilinear", False),
                                       ("bilinear", True), ("bicubic", False), ("bicubic", True)]
             for kw in (dict(size=(4, 11)), dict(scale_factor=1.7), dict(scale_factor=(0.5, 2.3)))]
    for mode, ac, kw in cases:
        _check(lambda a: F.interpolate(a, mode=mode, align_corners=ac, **kw),
               lambda a: TF.interpolate(a, mode=mode, align_corners=ac, **kw), [x], 2e-5, f"{mode} {ac} {kw}")
    _check(lambda a: F.interpolate(a, size=(3, 12), mode="bicubic", antialias=True),
           lambda a: TF.interpolate(a, size=(3, 12), mode="bicubic", antialias=True), [x], 2e-5, "antialias")
    x1, x3 = x[:, :, 0], x[:1, :2, :3, :4, None].repeat(3, -1)
    _check(lambda a: F.interpolate(a, scale_factor=2.5, mode="linear"),
           lambda a: TF.interpolate(a, scale_factor=2.5, mode="linear"), [x1])
    _check(lambda a: F.interpolate(a, size=(4, 3, 5), mode="trilinear", align_corners=True),
           lambda a: TF.interpolate(a, size=(4, 3, 5), mode="trilinear", align_corners=True), [x3])
    _check(lambda a: F.interpolate(a, scale_factor=1.5, recompute_scale_factor=True),
           lambda a: TF.interpolate(a, scale_factor=1.5, recompute_scale_factor=True), [x3])
    _check(jg.nn.UpsamplingBilinear2d(size=(3, 9)), torch.nn.UpsamplingBilinear2d(size=(3, 9)), [x])


@pytest.mark.skipif(not THOROUGH, reason="CI: the op table's grid_sample and affine_grid entries")
@pytest.mark.one_execution_mode
def test_grid_sample_and_affine_grid_match_torch():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (2, 4, 3, 2)).astype(np.float32)  # some points outside: every padding mode
    cases = [("bilinear", "reflection", True)]
    if THOROUGH:  # bicubic's 16 taps compile slowly
        cases = [(m, p, ac) for m in ("bilinear", "nearest", "bicubic") for p in ("zeros", "border", "reflection")
                 for ac in (False, True)]
    for mode, pm, ac in cases:
        _check(lambda a, g: F.grid_sample(a, g, mode=mode, padding_mode=pm, align_corners=ac),
               lambda a, g: TF.grid_sample(a, g, mode=mode, padding_mode=pm, align_corners=ac), [x, grid],
               1e-4, f"{mode} {pm} {ac}")
    theta = rng.standard_normal((2, 2, 3)).astype(np.float32)
    _check(lambda t: F.affine_grid(t, (2, 3, 4, 5), align_corners=True),
           lambda t: TF.affine_grid(t, (2, 3, 4, 5), align_corners=True), [theta])
    if not THOROUGH:
        return
    x3 = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    g3 = rng.uniform(-1.3, 1.3, (1, 2, 3, 2, 3)).astype(np.float32)
    _check(lambda a, g: F.grid_sample(a, g, align_corners=False), lambda a, g: TF.grid_sample(a, g, align_corners=False),
           [x3, g3], 1e-5)


@pytest.mark.one_execution_mode
def test_patches_shuffles_and_bilinear_modules_match_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 7, 9)).astype(np.float32)
    g = THOROUGH  # CI: values (the op table checks these functions' gradients)
    _check(jg.nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)),
           torch.nn.Unfold((2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), [x], grads=g)
    if THOROUGH:
        _thorough_patches(rng, x)
    _check_bilinear(rng)


def _thorough_patches(rng, x):
    g = True
    cols = rng.standard_normal((2, 3 * 6, 4 * 2)).astype(np.float32)
    _check(jg.nn.Fold((5, 6), (2, 3), stride=(1, 2)), torch.nn.Fold((5, 6), (2, 3), stride=(1, 2)), [cols], grads=g)
    _check(lambda a: F.unfold(a, 3, padding=1), lambda a: TF.unfold(a, 3, padding=1), [x[0]], what="unbatched",
           grads=g)
    y = rng.standard_normal((2, 8, 3, 4)).astype(np.float32)
    _check(jg.nn.PixelShuffle(2), torch.nn.PixelShuffle(2), [y], grads=g)
    _check(jg.nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2), [x[:, :, :6, :8].copy()], grads=g)


def _check_bilinear(rng):
    jb, tb = jg.nn.Bilinear(5, 6, 3), torch.nn.Bilinear(5, 6, 3)
    bound = 1 / np.sqrt(5)
    assert float(jb.weight.abs().max()) <= bound and tuple(jb.weight.shape) == tuple(tb.weight.shape)
    with torch.no_grad():
        tb.weight.copy_(torch.tensor(jb.weight.detach().numpy()))
        tb.bias.copy_(torch.tensor(jb.bias.detach().numpy()))
    a1, a2 = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    _check(jb, tb, [a1, a2], 1e-5)
    assert jb.weight.grad is not None


@pytest.mark.one_execution_mode
def test_gumbel_softmax_soft_and_straight_through():
    jg.manual_seed(0)
    p = np.array([0.0, 1.0, 2.0], np.float32)
    logits = jg.tensor(np.tile(p, (3000, 1)), requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).detach().numpy(), 1.0, rtol=1e-5)
    hard = F.gumbel_softmax(logits, hard=True, dim=1)
    h = hard.detach().numpy()
    assert set(np.unique(h)) == {0.0, 1.0} and (h.sum(1) == 1).all()
    # the argmax of the samples follows softmax(logits) (PyTorch's draws differ, their law does not)
    np.testing.assert_allclose(h.mean(0), np.exp(p) / np.exp(p).sum(), atol=0.03)
    (hard * jg.tensor(np.arange(3.0, dtype=np.float32))).sum().backward()
    # straight-through: the gradient is the soft sample's (a softmax's: each row sums to 0), not zero
    np.testing.assert_allclose(logits.grad.numpy().sum(1), 0.0, atol=1e-5)
    assert np.abs(logits.grad.numpy()).max() > 0


@pytest.mark.one_execution_mode
def test_resampling_errors_are_pytorchs():
    cases = [(lambda m, x: m.interpolate(x, size=(2, 2), scale_factor=2), ValueError),
             (lambda m, x: m.interpolate(x, size=2, mode="nearest", align_corners=True), ValueError),
             (lambda m, x: m.interpolate(x, size=(2, 2, 2)), ValueError),
             (lambda m, x: m.pixel_shuffle(x, 2), RuntimeError),
             (lambda m, x: m.unfold(x, 5), RuntimeError),
             (lambda m, x: m.fold(x[0], (3, 3), 2), RuntimeError),
             (lambda m, x: m.grid_sample(x, x[..., :2], mode="cubic"), ValueError),
             (lambda m, x: m.grid_sample(x, x[..., :3]), RuntimeError)]
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for fn, exc in cases:
        with pytest.raises(exc) as theirs:
            fn(TF, torch.tensor(x))
        with pytest.raises(exc) as ours:
            fn(F, jg.tensor(x))
        assert str(ours.value).split(",")[0][:40] == str(theirs.value).split(",")[0][:40]
