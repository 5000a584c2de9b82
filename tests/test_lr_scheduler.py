"""jgrad.optim.lr_scheduler against torch.optim.lr_scheduler: the learning rates of every step, to the bit."""
import warnings

import pytest
import torch

import jgrad as jg

S, TS = jg.optim.lr_scheduler, torch.optim.lr_scheduler


def _opts(kind="sgd", groups=2):
    jp = [jg.nn.Parameter(jg.zeros(2)) for _ in range(groups)]
    tp = [torch.nn.Parameter(torch.zeros(2)) for _ in range(groups)]
    lrs = [0.1, 0.03][:groups]
    if kind == "sgd":
        return (jg.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(jp, lrs)], lr=0.1, momentum=0.9),
                torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(tp, lrs)], lr=0.1, momentum=0.9))
    return (jg.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(jp, lrs)]),
            torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(tp, lrs)]))


def _trace(opt, sched, steps, extra=None):
    out = [list(sched.get_last_lr())]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(list(sched.get_last_lr()) + ([g[extra] for g in opt.param_groups] if extra else []))
    return out


CASES = {
    "LambdaLR": lambda m, o: m.LambdaLR(o, lambda e: 0.95 ** e),
    "LambdaLR-per-group": lambda m, o: m.LambdaLR(o, [lambda e: 1.0 / (e + 1), lambda e: 0.5 ** (e // 3)]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.9),
    "StepLR": lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    "MultiStepLR": lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.3),
    "ConstantLR": lambda m, o: m.ConstantLR(o, factor=0.5, total_iters=4),
    "LinearLR": lambda m, o: m.LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=6),
    "ExponentialLR": lambda m, o: m.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda m, o: m.CosineAnnealingLR(o, T_max=5, eta_min=0.001),
    "SequentialLR": lambda m, o: m.SequentialLR(o, [m.LinearLR(o, start_factor=0.1, total_iters=3),
                                                    m.CosineAnnealingLR(o, T_max=8)], milestones=[3]),
    "OneCycleLR": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=14),
    "OneCycleLR-linear-3phase": lambda m, o: m.OneCycleLR(o, max_lr=0.8, epochs=2, steps_per_epoch=7,
                                                          anneal_strategy="linear", three_phase=True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_schedule_matches_torch(name):
    jo, to = _opts()
    js, ts = CASES[name](S, jo), CASES[name](TS, to)
    extra = "momentum" if name.startswith("OneCycle") else None
    assert _trace(jo, js, 13, extra) == _trace(to, ts, 13, extra)   # exact: the same float operations


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_onecycle_cycles_adam_beta1_and_cosine_restarts():
    jo, to = _opts("adamw", 1)
    js, ts = S.OneCycleLR(jo, max_lr=0.01, total_steps=10), TS.OneCycleLR(to, max_lr=0.01, total_steps=10)
    for _ in range(9):
        jo.step()
        to.step()
        js.step()
        ts.step()
        assert jo.param_groups[0]["betas"] == to.param_groups[0]["betas"]
    jo, to = _opts()
    js, ts = S.CosineAnnealingLR(jo, T_max=3), TS.CosineAnnealingLR(to, T_max=3)
    assert _trace(jo, js, 10) == _trace(to, ts, 10)   # past T_max: back up (PyTorch's recursive form)
    with pytest.raises(ValueError, match="Tried to step 11 times"):
        js = S.OneCycleLR(_opts()[0], max_lr=0.1, total_steps=10)
        for _ in range(11):
            js.step()


def test_reduce_lr_on_plateau():
    jo, to = _opts()
    js = S.ReduceLROnPlateau(jo, factor=0.5, patience=1, cooldown=1, min_lr=[0.01, 0.02])
    ts = TS.ReduceLROnPlateau(to, factor=0.5, patience=1, cooldown=1, min_lr=[0.01, 0.02])
    for metric in [1.0, 0.9, 0.95, 0.97, 0.99, 0.99, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]:
        js.step(jg.tensor(metric))
        ts.step(torch.tensor(metric))
        assert js.get_last_lr() == ts.get_last_lr()


@pytest.mark.filterwarnings("ignore:Detected call of")
def test_state_dict_resume_and_epoch_argument():
    jo, _ = _opts()
    js = S.StepLR(jo, step_size=2, gamma=0.5)
    for _ in range(3):
        jo.step()
        js.step()
    state = js.state_dict()
    assert "optimizer" not in state and state["last_epoch"] == 3
    jo2, _ = _opts()
    jo2.load_state_dict(jo.state_dict())
    js2 = S.StepLR(jo2, step_size=2, gamma=0.5, last_epoch=2)
    js2.load_state_dict(state)
    jo.step(), js.step(), jo2.step(), js2.step()
    assert js2.get_last_lr() == js.get_last_lr()
    with pytest.raises(KeyError, match="initial_lr"):
        S.StepLR(_opts()[0], step_size=2, last_epoch=4)
    jo, to = _opts()
    js, ts = S.StepLR(jo, 3), TS.StepLR(to, 3)
    with pytest.warns(UserWarning, match="epoch parameter"):
        js.step(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ts.step(7)
    assert js.get_last_lr() == ts.get_last_lr()   # the closed form


def test_warnings_and_errors_are_pytorchs():
    jo, _ = _opts()
    js = S.StepLR(jo, 2)
    with pytest.warns(UserWarning, match=r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`"):
        js.step()
    with pytest.raises(TypeError, match="list is not an Optimizer"):
        S.StepLR([], 2)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        S.LambdaLR(_opts()[0], [lambda e: 1.0])
    with pytest.raises(ValueError, match="expects number of schedulers provided to be one more"):
        o = _opts()[0]
        S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(o, 3)], milestones=[])
    with pytest.raises(ValueError, match="You must define either total_steps OR"):
        S.OneCycleLR(_opts()[0], max_lr=0.1)
