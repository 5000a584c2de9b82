"""RMSprop, Adagrad, Adadelta, Adamax, NAdam, RAdam, LBFGS and swa_utils against torch.optim on the same
parameters and gradients: trajectories over several steps, every state tensor, state_dicts loaded across the two
libraries, defaults and constructor errors."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import jgrad as jg  # noqa: E402
from conftest import TEST_DEVICE  # noqa: E402
from jgrad import optim  # noqa: E402


def npy(t):
    return np.asarray(t.detach().numpy())


def _problem(dtype):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(s).astype(dtype) for k, s in
            (("W", (4, 3)), ("B", (4,)), ("X", (6, 3)), ("Y", (6, 4)))}


def _loss(lib, w, b, d):
    lin = jg.linear if lib is jg else torch.nn.functional.linear
    return ((lin(lib.tensor(d["X"]), w, b) - lib.tensor(d["Y"])) ** 2).mean() + (w ** 4).sum() * 0.01


def _train(lib, opt, w, b, d, steps):
    for _ in range(steps):
        opt.zero_grad()
        _loss(lib, w, b, d).backward()
        opt.step()


def _to_jgrad(value):
    if isinstance(value, torch.Tensor):
        return jg.tensor(value.numpy())
    if isinstance(value, dict):
        return {k: _to_jgrad(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_jgrad(v) for v in value]
    return value


def _same_state(js, ts, tol):
    assert list(js) == list(ts)
    for k in ts:
        if isinstance(ts[k], torch.Tensor):
            assert js[k].shape == tuple(ts[k].shape) and js[k].dtype.name == str(ts[k].dtype).split(".")[1], k
            np.testing.assert_allclose(npy(js[k]), ts[k].numpy(), rtol=tol, atol=tol, err_msg=k)
        else:
            assert js[k] == ts[k], k


# Two param groups with different switches (the second group's hyperparameters override the first's).
CASES = {
    "RMSprop": (dict(lr=0.01), dict(alpha=0.9, momentum=0.9, centered=True, weight_decay=0.1, maximize=True)),
    "Adagrad": (dict(lr=0.1), dict(lr_decay=0.1, initial_accumulator_value=0.2, weight_decay=0.1)),
    "Adadelta": (dict(), dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1, maximize=True)),
    "Adamax": (dict(lr=0.05), dict(betas=(0.8, 0.9), weight_decay=0.1, maximize=True)),
    "NAdam": (dict(lr=0.05), dict(weight_decay=0.1, decoupled_weight_decay=True, momentum_decay=0.01)),
    "RAdam": (dict(lr=0.05, betas=(0.8, 0.9)), dict(weight_decay=0.1, decoupled_weight_decay=True)),
}


def _fresh(lib, arrays, name, kw, group):
    params = [lib.tensor(a, requires_grad=True) for a in arrays]
    mod = optim if lib is jg else torch.optim
    return params, getattr(mod, name)([{"params": [params[0]]}, {"params": [params[1]], **group}], **kw)


@pytest.mark.one_execution_mode  # the fused update goes through call_foreach, as SGD's and Adam's: one "auto" case
@pytest.mark.parametrize("name, mode", [(name, "eager") for name in CASES] + [("NAdam", "auto")])
def test_trajectory_state_and_state_dict_match_torch(name, mode, monkeypatch):
    """Four steps on both libraries (float32), every state tensor compared; then each library's state_dict
    loaded into the other's fresh optimizer, with a new learning rate: two more steps stay together, and the
    new learning rate compiles no new kernel. Each step is one fused update per param group."""
    from jgrad.optim import _fused
    updates = []
    real = _fused.call_foreach
    monkeypatch.setattr(_fused, "call_foreach", lambda op, *a, **k: updates.append(op) or real(op, *a, **k))
    with jg.execution_mode(mode):
        _trajectory(name, *CASES[name])
    assert len(updates) == 2 * (4 + 2) and {op.name for op in updates} == {f"{name.lower()}_step"}


def _trajectory(name, kw, group):
    d = _problem(np.float32)
    j, jopt = _fresh(jg, [d["W"], d["B"]], name, kw, group)
    t, topt = _fresh(torch, [d["W"], d["B"]], name, kw, group)
    assert jopt.defaults == topt.defaults and repr(jopt) == repr(topt)
    _train(jg, jopt, *j, d, 4)
    _train(torch, topt, *t, d, 4)
    for jp, tp in zip(j, t):
        np.testing.assert_allclose(npy(jp), tp.detach().numpy(), rtol=2e-6, atol=2e-6)
        _same_state(jopt.state[jp], topt.state[tp], 2e-6)
    jsd, tsd = jopt.state_dict(), topt.state_dict()
    assert jsd["param_groups"] == tsd["param_groups"]
    j2, jopt2 = _fresh(jg, [npy(p) for p in t], name, kw, group)
    t2, topt2 = _fresh(torch, [npy(p) for p in j], name, kw, group)
    jopt2.load_state_dict(_to_jgrad(tsd))
    topt2.load_state_dict({"state": {i: {k: torch.tensor(npy(v)) for k, v in s.items()}
                                     for i, s in jsd["state"].items()}, "param_groups": jsd["param_groups"]})
    for o in (jopt2, topt2):
        o.param_groups[1]["lr"] *= 0.5
    kernels = len(jopt2._op._kernels)
    _train(jg, jopt2, *j2, d, 2)
    _train(torch, topt2, *t2, d, 2)
    assert len(jopt2._op._kernels) == kernels
    for jp, tp in zip(j2, t2):
        np.testing.assert_allclose(npy(jp), tp.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_constructor_errors_match_torch():
    bad = [("RMSprop", dict(lr=-1.0)), ("RMSprop", dict(alpha=-0.5)), ("RMSprop", dict(momentum=-1)),
           ("Adagrad", dict(lr_decay=-1)), ("Adagrad", dict(initial_accumulator_value=-1)),
           ("Adagrad", dict(eps=-1)), ("Adadelta", dict(rho=1.5)), ("Adadelta", dict(weight_decay=-1)),
           ("Adamax", dict(betas=(1.0, 0.9))), ("Adamax", dict(betas=(0.9, -0.1))), ("NAdam", dict(momentum_decay=-1)),
           ("NAdam", dict(eps=-1)), ("RAdam", dict(weight_decay=-0.1)), ("LBFGS", dict(lr=-2))]
    for name, kw in bad:
        with pytest.raises(ValueError) as expected:
            getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kw)
        with pytest.raises(ValueError) as got:
            getattr(optim, name)([jg.zeros(2, requires_grad=True)], **kw)
        assert str(got.value) == str(expected.value)
    with pytest.raises(ValueError, match="LBFGS doesn't support per-parameter options"):
        optim.LBFGS([{"params": [jg.zeros(1, requires_grad=True)]}, {"params": [jg.zeros(1, requires_grad=True)]}])


def _lbfgs_closure(lib, opt, w, b, d, calls):
    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = _loss(lib, w, b, d)
        loss.backward()
        return loss
    return closure


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("line_search_fn, mode", [(None, "auto"), ("strong_wolfe", "eager")])
def test_lbfgs_matches_torch(line_search_fn, mode):
    """Closure semantics, the number of closure calls, the trajectory and the state (history, step size); then
    the state_dict moved across continues identically."""
    with jg.execution_mode(mode):
        _lbfgs_vs_torch(line_search_fn)


def _lbfgs_vs_torch(line_search_fn):
    d = _problem(np.float32)  # the trajectory tests' kernels; float64 agrees to the last bits too
    kw = dict(lr=0.8, max_iter=4, history_size=2, line_search_fn=line_search_fn)
    runs = {}
    for lib, mod in ((jg, optim), (torch, torch.optim)):
        w, b = lib.tensor(d["W"], requires_grad=True), lib.tensor(d["B"], requires_grad=True)
        opt = mod.LBFGS([w, b], **kw)
        calls = []
        closure = _lbfgs_closure(lib, opt, w, b, d, calls)
        losses = [float(opt.step(closure).detach()) for _ in range(2)]
        runs[lib.__name__] = (w, b, opt, closure, losses, calls)
    (jw, jb, jopt, jclosure, jl, jcalls), (tw, tb, topt, tclosure, tl, tcalls) = runs["jgrad"], runs["torch"]
    assert len(jcalls) == len(tcalls) and jcalls
    np.testing.assert_allclose(jl, tl, rtol=1e-5)
    np.testing.assert_allclose(npy(jw), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    js, ts = jopt.state[jw], topt.state[tw]
    assert list(js) == list(ts) and js["func_evals"] == ts["func_evals"] and js["n_iter"] == ts["n_iter"]
    assert len(js["old_dirs"]) == len(ts["old_dirs"]) == 2
    np.testing.assert_allclose(float(js["t"]), float(ts["t"]), rtol=1e-5)
    # (the search direction compounds rounding: on a GPU, compiled float32 steps differ from torch's CPU ones by
    # ~2e-5 there)
    np.testing.assert_allclose(npy(js["d"]), ts["d"].numpy(), rtol=1e-4, atol=1e-5 if TEST_DEVICE == "cpu" else 5e-5)
    # torch's state_dict into jgrad: the next step continues torch's trajectory
    jopt.load_state_dict(_to_jgrad(topt.state_dict()))
    with jg.no_grad():
        jw.copy_(jg.tensor(tw.detach().numpy()))
        jb.copy_(jg.tensor(tb.detach().numpy()))
    np.testing.assert_allclose(float(jopt.step(jclosure).detach()), float(topt.step(tclosure).detach()), rtol=1e-5)
    np.testing.assert_allclose(npy(jw), tw.detach().numpy(), rtol=1e-5, atol=1e-5)


def _swa_run(lib, make_avg):
    nn, su = lib.nn, (optim.swa_utils if lib is jg else torch.optim.swa_utils)
    lib.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    rng = np.random.default_rng(0)
    model.load_state_dict({k: lib.tensor(rng.standard_normal(tuple(v.shape)).astype(np.float32))
                           if v.dtype == lib.float32 else v for k, v in model.state_dict().items()})
    swa = su.AveragedModel(model, **make_avg(su))
    opt = lib.optim.SGD(model.parameters(), lr=0.1)
    sched = su.SWALR(opt, swa_lr=[0.05], anneal_epochs=3, anneal_strategy="linear")
    x = lib.tensor(rng.standard_normal((8, 3)).astype(np.float32))
    lrs = []
    for _ in range(4):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        sched.step()
        swa.update_parameters(model)
        lrs.append(opt.param_groups[0]["lr"])
    su.update_bn([(x[:4],), (x[4:],)], swa)
    return swa, lrs, sched.state_dict()


@pytest.mark.one_execution_mode  # its fused update is call_foreach's, which the optimizers test in both modes
def test_swa_utils_match_torch():
    for make in (lambda su: {"multi_avg_fn": su.get_ema_multi_avg_fn(0.9)},
                 lambda su: {"avg_fn": su.get_swa_avg_fn(), "use_buffers": True}):
        (jswa, jlrs, jsched), (tswa, tlrs, tsched) = _swa_run(jg, make), _swa_run(torch, make)
        assert jlrs == tlrs
        assert jsched == {k: v for k, v in tsched.items() if k != "_get_lr_called_within_step"}
        tsd = tswa.state_dict()
        for k, v in jswa.state_dict().items():
            np.testing.assert_allclose(npy(v), tsd[k].numpy(), rtol=1e-6, atol=1e-6, err_msg=k)
        x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_allclose(npy(jswa.eval()(jg.tensor(x))), tswa.eval()(torch.tensor(x)).detach().numpy(),
                                   rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"Invalid decay value 1.5 provided. Please provide a value in \[0,1\]"):
        optim.swa_utils.get_ema_avg_fn(1.5)
    with pytest.raises(ValueError, match="anneal_strategy must be one of 'cos' or 'linear', instead got exp"):
        optim.swa_utils.SWALR(optim.SGD([jg.zeros(1, requires_grad=True)], lr=0.1), 0.1, anneal_strategy="exp")
