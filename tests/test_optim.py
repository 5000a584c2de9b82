"""jgrad.optim against torch.optim on identical data (float32 and float64), against hand-computed
steps, and its bookkeeping: param groups, state created like PyTorch's, state_dict round trips,
errors worded like PyTorch's, one fused kernel per step, no recompilation for a new lr."""
import math

import numpy as np
import pytest
import torch

import jgrad as jg
from jgrad import nn, optim
from jgrad.optim import adam as adam_mod, sgd as sgd_mod


def npy(t):
    return np.asarray(t.detach().numpy())


def _problem(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return dict(W=rng.standard_normal((4, 3)).astype(dtype), B=rng.standard_normal(4).astype(dtype),
                X=rng.standard_normal((6, 3)).astype(dtype), Y=rng.standard_normal((6, 4)).astype(dtype))


def _loss(lib, w, b, d):
    x, y = lib.tensor(d["X"]), lib.tensor(d["Y"])
    lin = jg.linear if lib is jg else torch.nn.functional.linear
    return ((lin(x, w, b) - y) ** 2).mean() + (w ** 4).sum() * 0.01


def _run(make, steps, dtype, groups=False, seed=0):
    """Run the same optimizer on jgrad and torch; returns the (jgrad, torch) params and optimizers."""
    d = _problem(dtype, seed)
    out = {}
    for lib, mod in ((jg, optim), (torch, torch.optim)):
        w, b = lib.tensor(d["W"], requires_grad=True), lib.tensor(d["B"], requires_grad=True)
        params = [{"params": [w]}, {"params": [b], "lr": 0.03}] if groups else [w, b]
        opt = make(mod, params)
        for _ in range(steps):
            opt.zero_grad()
            _loss(lib, w, b, d).backward()
            opt.step()
        out[lib.__name__] = ([w, b], opt)
    return out["jgrad"], out["torch"]


def _assert_same(j, t, tol):
    for a, b in zip(j[0], t[0]):
        np.testing.assert_allclose(npy(a), b.detach().numpy(), rtol=tol, atol=tol)


SGD_CASES = {
    "nesterov_wd": dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "dampening_maximize": dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1, maximize=True),
    "plain": dict(lr=0.2),
}
ADAM_CASES = {
    "Adam": ("Adam", dict(lr=0.05)),
    "Adam_wd_amsgrad": ("Adam", dict(lr=0.05, betas=(0.8, 0.95), weight_decay=0.1, amsgrad=True)),
    "Adam_maximize": ("Adam", dict(lr=0.01, eps=1e-6, maximize=True)),
    "AdamW": ("AdamW", dict(lr=0.05)),
    "AdamW_amsgrad": ("AdamW", dict(lr=0.05, betas=(0.5, 0.9), weight_decay=0.3, amsgrad=True)),
}


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd_matches_torch(case, dtype, tol):
    kw = SGD_CASES[case]
    for steps in (1, 4):
        j, t = _run(lambda mod, p: mod.SGD(p, **kw), steps, dtype)
        _assert_same(j, t, tol)


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-6), (np.float64, 1e-12)])
@pytest.mark.parametrize("case", list(ADAM_CASES))
def test_adam_matches_torch(case, dtype, tol):
    name, kw = ADAM_CASES[case]
    for steps in (1, 5):
        j, t = _run(lambda mod, p: getattr(mod, name)(p, **kw), steps, dtype)
        _assert_same(j, t, tol)


def test_param_groups_with_their_own_lr_match_torch():
    j, t = _run(lambda mod, p: mod.SGD(p, lr=0.1, momentum=0.5), 3, np.float64, groups=True)
    _assert_same(j, t, 1e-12)
    j, t = _run(lambda mod, p: mod.Adam(p, lr=0.1), 3, np.float64, groups=True)
    _assert_same(j, t, 1e-12)
    assert [g["lr"] for g in j[1].param_groups] == [g["lr"] for g in t[1].param_groups] == [0.1, 0.03]


def test_sgd_one_step_by_hand():
    # p=1, g=2(p)=2 at p=1 for loss p**2; momentum 0.9, nesterov, wd 0.1, lr 0.1:
    # g' = 2 + 0.1*1 = 2.1; buf = 2.1; g'' = 2.1 + 0.9*2.1 = 3.99; p = 1 - 0.399 = 0.601
    p = jg.tensor([1.0], dtype=jg.float64, requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)
    (p ** 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(npy(p), [0.601], rtol=1e-14)
    np.testing.assert_allclose(npy(opt.state[p]["momentum_buffer"]), [2.1], rtol=1e-14)
    # second step: g = 2*0.601 + 0.0601 = 1.2621 (+ the old grad 2, not zeroed) = 3.2621
    # buf = 0.9*2.1 + 3.2621 = 5.1521; g'' = 3.2621 + 0.9*5.1521 = 7.89899; p = 0.601 - 0.789899
    (p ** 2).sum().backward()
    opt.step()
    np.testing.assert_allclose(npy(p), [0.601 - 0.789899], rtol=1e-12)


def test_adam_one_step_by_hand():
    # The first Adam step moves each coordinate by lr * g / (|g| + eps*sqrt(1-b2)) ~ lr * sign(g).
    p = jg.tensor([1.0, -2.0, 0.5], dtype=jg.float64, requires_grad=True)
    g = np.array([0.3, -4.0, 0.0])
    p.grad = jg.tensor(g)
    optim.Adam([p], lr=0.1, eps=1e-8).step()
    m, v = 0.1 * g, 0.001 * g * g
    expect = np.array([1.0, -2.0, 0.5]) - 0.1 / 0.1 * m / (np.sqrt(v) / math.sqrt(0.001) + 1e-8)
    np.testing.assert_allclose(npy(p), expect, rtol=1e-12)
    np.testing.assert_allclose(npy(p), [0.9, -1.9, 0.5], atol=1e-7)


def test_state_is_created_like_torch():
    j, t = _run(lambda mod, p: mod.Adam(p, lr=0.1, amsgrad=True), 2, np.float32)
    for jp, tp in zip(*[x[0] for x in (j, t)]):
        js, ts = j[1].state[jp], t[1].state[tp]
        assert list(js) == list(ts) == ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
        for k in js:
            assert js[k].shape == tuple(ts[k].shape) and js[k].dtype.name == str(ts[k].dtype).split(".")[1]
            np.testing.assert_allclose(npy(js[k]), ts[k].numpy(), rtol=1e-5, atol=1e-7)
        assert js["step"].item() == 2.0 and not js["exp_avg"].requires_grad
    j, t = _run(lambda mod, p: mod.SGD(p, lr=0.1, momentum=0.9), 1, np.float32)
    assert list(j[1].state[j[0][0]]) == list(t[1].state[t[0][0]]) == ["momentum_buffer"]
    j, t = _run(lambda mod, p: mod.SGD(p, lr=0.1), 1, np.float32)
    assert len(j[1].state) == len(t[1].state) == 0


def test_param_groups_and_defaults_match_torch():
    for name, kw in (("SGD", {"lr": 0.1}), ("Adam", {}), ("AdamW", {})):
        j = getattr(optim, name)([jg.zeros(1, requires_grad=True)], **kw)
        t = getattr(torch.optim, name)([torch.zeros(1, requires_grad=True)], **kw)
        assert j.defaults == t.defaults
        jg_group = {k: v for k, v in j.param_groups[0].items() if k != "params"}
        t_group = {k: v for k, v in t.param_groups[0].items() if k != "params"}
        assert jg_group == t_group
        assert repr(j) == repr(t)


def test_state_dict_round_trip_continues_identically():
    d = _problem(np.float64, 1)

    def make(lib, params):
        return (optim if lib is jg else torch.optim).Adam(params, lr=0.05, amsgrad=True)

    def train(opt, w, b, steps):
        for _ in range(steps):
            opt.zero_grad()
            _loss(jg, w, b, d).backward()
            opt.step()

    w, b = jg.tensor(d["W"], requires_grad=True), jg.tensor(d["B"], requires_grad=True)
    opt = make(jg, [w, b])
    train(opt, w, b, 3)
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"] and list(sd["state"]) == [0, 1]
    assert sd["param_groups"][0]["params"] == [0, 1]
    w2, b2 = jg.tensor(npy(w), requires_grad=True), jg.tensor(npy(b), requires_grad=True)
    opt2 = make(jg, [w2, b2])
    opt2.load_state_dict(sd)
    assert opt2.state[w2]["exp_avg"] is not opt.state[w]["exp_avg"]   # loaded state is a copy
    train(opt, w, b, 2)
    train(opt2, w2, b2, 2)
    np.testing.assert_array_equal(npy(w2), npy(w))
    np.testing.assert_array_equal(npy(b2), npy(b))
    # the same state, loaded into torch, continues like jgrad's
    tw, tb = torch.tensor(d["W"], requires_grad=True), torch.tensor(d["B"], requires_grad=True)
    topt = make(torch, [tw, tb])
    for _ in range(3):
        topt.zero_grad()
        _loss(torch, tw, tb, d).backward()
        topt.step()
    tsd = topt.state_dict()
    assert tsd["param_groups"] == opt.state_dict()["param_groups"]
    assert list(tsd["state"][0]) == list(sd["state"][0])


def test_load_state_dict_errors_match_torch():
    for lib, mod in ((jg, optim), (torch, torch.optim)):
        a, b = lib.zeros(1, requires_grad=True), lib.zeros(1, requires_grad=True)
        one = mod.SGD([a, b], lr=0.1)
        two = mod.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
        with pytest.raises(ValueError, match="loaded state dict has a different number of parameter groups"):
            one.load_state_dict(two.state_dict())
        with pytest.raises(ValueError, match="loaded state dict contains a parameter group that doesn't match "
                                             "the size of optimizer's group"):
            mod.SGD([a], lr=0.1).load_state_dict(one.state_dict())


def test_constructor_errors_match_torch():
    for lib, mod in ((jg, optim), (torch, torch.optim)):
        p = lib.zeros(2, requires_grad=True)
        cases = [
            (lambda: mod.SGD([p], lr=-1.0), ValueError, "Invalid learning rate: -1.0"),
            (lambda: mod.SGD([p], lr=0.1, momentum=-0.5), ValueError, "Invalid momentum value: -0.5"),
            (lambda: mod.SGD([p], lr=0.1, weight_decay=-1), ValueError, "Invalid weight_decay value: -1"),
            (lambda: mod.SGD([p], lr=0.1, nesterov=True), ValueError,
             "Nesterov momentum requires a momentum and zero dampening"),
            (lambda: mod.Adam([p], betas=(1.0, 0.9)), ValueError, "Invalid beta parameter at index 0: 1.0"),
            (lambda: mod.Adam([p], betas=(0.9, -0.1)), ValueError, "Invalid beta parameter at index 1: -0.1"),
            (lambda: mod.Adam([p], eps=-1.0), ValueError, "Invalid epsilon value: -1.0"),
            (lambda: mod.Adam([], lr=0.1), ValueError, "optimizer got an empty parameter list"),
            (lambda: mod.SGD(p, lr=0.1), TypeError,
             "params argument given to the optimizer should be an iterable of Tensors or dicts"),
            (lambda: mod.SGD([p * 2], lr=0.1), ValueError, "can't optimize a non-leaf Tensor"),
            (lambda: mod.SGD([{"params": [p]}, {"params": [p]}], lr=0.1), ValueError,
             "some parameters appear in more than one parameter group"),
            (lambda: mod.SGD([p, 3], lr=0.1), TypeError, "optimizer can only optimize Tensors, but one of the params"
                                                         " is int"),
            (lambda: mod.SGD([{"params": {p}}], lr=0.1), TypeError,
             "optimizer parameters need to be organized in ordered"),
        ]
        for fn, exc, msg in cases:
            with pytest.raises(exc, match=msg.replace("(", "\\(").replace(")", "\\)")):
                fn()


def test_named_parameters_are_accepted_like_torch():
    for lib, mod in ((jg, optim), (torch, torch.optim)):
        model = (nn if lib is jg else torch.nn).Linear(2, 1)
        opt = mod.SGD(model.named_parameters(), lr=0.1)
        assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
        assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
        with pytest.raises(ValueError, match="all optimizer params should be with/without names"):
            mod.SGD([("w", model.weight), model.bias], lr=0.1)


def test_zero_grad_and_skipping_params_without_grad():
    a, b = jg.ones(2, requires_grad=True), jg.ones(2, requires_grad=True)
    opt = optim.SGD([a, b], lr=0.5, momentum=0.9)
    (a * 3).sum().backward()
    opt.step()
    np.testing.assert_array_equal(npy(a), [-0.5, -0.5])
    np.testing.assert_array_equal(npy(b), [1.0, 1.0])      # no grad: untouched, no state
    assert b not in opt.state
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(npy(a.grad), [0.0, 0.0])
    opt.zero_grad()
    assert a.grad is None


def test_step_closure_and_step_hooks():
    p = jg.tensor([2.0], requires_grad=True)
    opt = optim.SGD([p], lr=0.25)
    calls = []
    h1 = opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("pre"))
    opt.register_step_post_hook(lambda o, args, kwargs: calls.append("post"))

    def closure():
        opt.zero_grad()
        loss = (p ** 2).sum()
        loss.backward()
        calls.append("closure")
        return loss

    loss = opt.step(closure)
    assert loss.item() == 4.0 and calls == ["pre", "closure", "post"]
    np.testing.assert_allclose(npy(p), [1.0])
    h1.remove()
    opt.step(closure)
    assert calls[3:] == ["closure", "post"]


def test_one_fused_kernel_per_group_and_device(monkeypatch):
    calls = []
    real = sgd_mod.call_foreach
    monkeypatch.setattr(sgd_mod, "call_foreach", lambda op, targets, *a, **k: calls.append(len(targets)) or
                        real(op, targets, *a, **k))
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        model(jg.ones(4, 3)).sum().backward()
        opt.step()
    assert calls == [12, 12]          # six params + six momentum buffers, in one kernel per step
    calls.clear()
    a = jg.ones(2, requires_grad=True)
    b = jg.ones(2, device="cpu:1", requires_grad=True)
    opt = optim.SGD([a, b], lr=0.1)
    (a.sum() + b.sum().to("cpu")).backward()
    opt.step()
    assert sorted(calls) == [1, 1] and b.device == jg.device("cpu:1")
    np.testing.assert_allclose(npy(b), [0.9, 0.9])


def test_lr_schedule_does_not_recompile():
    p = jg.ones(3, requires_grad=True)
    opt = optim.Adam([p], lr=0.1)
    sizes = []
    for step in range(4):
        for g in opt.param_groups:
            g["lr"] = 0.1 / (step + 1)
            g["betas"] = (0.9 - 0.01 * step, 0.999)
        p.grad = jg.ones(3)
        opt.step()
        key = (("n", 1), ("amsgrad", False), ("maximize", False), ("wd_on", False), ("decoupled", False))
        kernel = adam_mod.ADAM_STEP._kernels[key]
        sizes.append(kernel._cache_size())
    assert sizes[0] >= 1 and len(set(sizes)) == 1


def test_step_under_grad_mode_does_not_record_history():
    p = jg.ones(2, requires_grad=True)
    (p * 2).sum().backward()
    optim.SGD([p], lr=0.1).step()
    assert p.is_leaf and p.grad_fn is None and p.requires_grad
    np.testing.assert_allclose(npy(p), [0.8, 0.8], rtol=1e-6)
