"""Issue 30: ``autocast`` (PyTorch's CPU op lists, nesting, disabling, gradients) and ``amp.GradScaler``, against
PyTorch's CPU autocast and scaler."""
import numpy as np
import pytest

import jgrad as jg

torch = pytest.importorskip("torch")


def _region(lib, x, w, y):
    X, W = lib.tensor(x), lib.tensor(w, requires_grad=True)
    F = lib.nn.functional
    with lib.autocast("cpu", dtype=lib.bfloat16):
        h = F.linear(X, W)                 # lower list: bfloat16
        outs = [h, h.softmax(-1), X @ W.t(), h.exp()]
        loss = F.cross_entropy(h, lib.tensor(y))  # float32 list
        with lib.autocast("cpu", enabled=False):
            outs.append(F.linear(X, W))    # a disabled region inside: float32
            assert not lib.is_autocast_enabled("cpu")
        assert lib.is_autocast_enabled("cpu") and lib.get_autocast_dtype("cpu") == lib.bfloat16
        outs += [F.mse_loss(h, lib.zeros(4, 3)), lib.cat([h, X[:, :3]])]  # float32 list; promote
        # a bfloat16 input meets float32 weights: the cast comes before the dtype check, as in PyTorch
        outs += [F.linear(h, W.t()[:3]), h @ W[:, :3], lib.bmm(h[None], W[None, :, :3])]
    loss.backward()
    return [str(o.dtype).split(".")[1] for o in outs + [loss, W.grad]], [o.float().detach().numpy() for o in outs] + [
        loss.detach().numpy(), W.grad.numpy()]


@pytest.mark.cpu_only("the CPU autocast op lists and dtype (bfloat16 on CPU, float16 on a GPU)")
def test_autocast_casts_as_pytorch_cpu():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    y = rng.integers(0, 3, 4)
    (jd, jv), (td, tv) = _region(jg, x, w, y), _region(torch, x, w, y)
    assert jd == td
    for a, b in zip(jv, tv):
        np.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)
    assert not jg.is_autocast_enabled("cpu")

    @jg.autocast("cpu")
    def f(a):
        return a @ a

    assert f(jg.ones(2, 2)).dtype == jg.bfloat16 and (jg.ones(2, 2) @ jg.ones(2, 2)).dtype == jg.float32


def _train(lib, xs, w0):
    model = lib.nn.Linear(3, 1, bias=False)
    with lib.no_grad():
        model.weight.copy_(lib.tensor(w0))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    scaler = lib.amp.GradScaler("cpu", init_scale=2.0 ** 4, growth_interval=2)
    scales, skipped = [], []
    for x in xs:
        opt.zero_grad()
        loss = model(lib.tensor(x)).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        before = model.weight.detach().clone()
        scaler.step(opt)
        skipped.append(bool((model.weight.detach() == before).all()))
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, skipped, model.weight.detach().numpy(), scaler.state_dict()


@pytest.mark.one_execution_mode
def test_grad_scaler_skips_backs_off_and_grows_as_pytorch():
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(5)]
    xs[1][0, 0] = np.inf  # an inf gradient: the step is skipped and the scale backs off
    ours, theirs = _train(jg, xs, rng.standard_normal((1, 3)).astype(np.float32)), None
    rng = np.random.default_rng(1)
    xs2 = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(5)]
    xs2[1][0, 0] = np.inf
    theirs = _train(torch, xs2, rng.standard_normal((1, 3)).astype(np.float32))
    assert ours[0] == theirs[0] and ours[1] == theirs[1]
    np.testing.assert_allclose(ours[2], theirs[2], rtol=1e-6)
    assert ours[3] == theirs[3]
    s = jg.amp.GradScaler("cpu")
    opt = jg.optim.SGD([jg.nn.Parameter(jg.ones(1))], lr=0.1)
    s.scale(opt.param_groups[0]["params"][0].sum()).backward()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_(opt)


@pytest.mark.one_execution_mode
def test_cuda_amp_spellings():
    from jgrad.cuda.amp import GradScaler, autocast
    with pytest.warns(FutureWarning, match="torch.amp.GradScaler"):
        scaler = GradScaler(init_scale=8.0)
    assert scaler.is_enabled() == jg.cuda.is_available()
    with pytest.warns(FutureWarning, match="torch.amp.autocast"):
        region = autocast(dtype=jg.bfloat16)
    with region:
        assert jg.is_autocast_enabled("cuda") and jg.get_autocast_dtype("cuda") == jg.bfloat16
    assert not jg.is_autocast_enabled("cuda")
