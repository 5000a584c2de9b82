"""``jg.compile`` (torch.compile's contract on capture): guards and recompiles, the recompile limit, host reads
falling back to eager (``fullgraph=True`` raising), a train step against PyTorch, ``Module.compile``, errors.

Expectations come from NumPy, from PyTorch (where installed) or from the same function run uncompiled (the
contract is "the results of eager mode", which is how PyTorch tests torch.compile). Every capture compiles an
XLA executable (~0.15 s on a 2-core CPU), so the tests count their compiles and most run in one execution
mode: the capture records the same program in both.
"""
import functools
import warnings

import numpy as np
import pytest

import jgrad as jg
from jgrad import compiler, nn
from jgrad.nn import functional as F


def _np(t):
    return np.asarray(t.detach().numpy())


def _programs(cf):
    return cf.cache_info["programs"]


@pytest.fixture(autouse=True)
def _limit():
    old = compiler.config.recompile_limit
    yield
    compiler.config.recompile_limit = old


SCALE = 2.0


@pytest.mark.one_execution_mode
def test_every_guard_recompiles_and_matches_eager():
    """Each guard changed alone compiles one new program, whose result is the uncompiled function's. In "auto"
    mode: the warm-up call is recorded, and each capture reads pending results as inputs."""
    with jg.execution_mode("auto"):
        _guards()


def _guards():
    def f(x, k):
        return x * SCALE + k

    cf = jg.compile(f)
    x = jg.randn(4, 3)
    np.testing.assert_allclose(_np(cf(x, 1)), _np(x) * 2 + 1)  # the first call warms up (eagerly)
    assert _programs(cf) == 0
    xr = x.detach().requires_grad_()
    cases = [  # (what changes, arguments)
        ("nothing: compiles at the second call", (x, 1)),
        ("shape", (jg.randn(5, 3), 1)),
        ("dtype", (x.to(jg.float64), 1)),
        ("device", (x.to("cpu:1"), 1)),
        ("requires_grad", (xr, 1)),
        ("python scalar", (x, 3)),
    ]
    for n, (what, args) in enumerate(cases, 1):
        out = cf(*args)
        assert _programs(cf) == n, what
        np.testing.assert_allclose(_np(out), _np(args[0]) * 2 + args[1], rtol=1e-6, err_msg=what)
        assert out.dtype == args[0].dtype and out.device == args[0].device, what
    assert cf(xr, 1).requires_grad and _programs(cf) == 6  # cached
    with jg.no_grad():  # grad mode
        assert not cf(xr, 1).requires_grad
    assert _programs(cf) == 7
    global SCALE
    SCALE = 3.0  # a global scalar the function reads
    try:
        np.testing.assert_allclose(_np(cf(x, 1)), _np(x) * 3 + 1, rtol=1e-6)
        assert _programs(cf) == 8
    finally:
        SCALE = 2.0
    y = jg.randn(4, 3)  # a tensor's values are not guarded: the same program runs on new values
    np.testing.assert_allclose(_np(cf(y, 1)), _np(y) * 2 + 1, rtol=1e-6)
    assert _programs(cf) == 8 and cf.cache_info["calls"] == 11


@pytest.mark.one_execution_mode
def test_recompile_limit_warns_once_then_runs_eagerly():
    compiler.config.cache_size_limit = 2  # PyTorch's older name of recompile_limit
    assert compiler.config.recompile_limit == 2

    def f(x):
        return x.exp() - 1

    cf = jg.compile(f)
    xs = [jg.randn(n) for n in (1, 2, 3, 4)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in xs:
            np.testing.assert_allclose(_np(cf(x)), np.expm1(_np(x)), rtol=1e-5, atol=1e-6)
    hits = [w for w in caught if "hit config.recompile_limit (2)" in str(w.message)]
    assert len(hits) == 1 and "'test_recompile_limit_warns_once_then_runs_eagerly.<locals>.f'" in str(hits[0].message)
    assert _programs(cf) == 2
    cf(xs[1])  # a cached program still replays
    assert _programs(cf) == 2
    compiler.config.recompile_limit = 1
    strict = jg.compile(f, fullgraph=True)
    strict(xs[0])
    strict(xs[0])
    with pytest.raises(compiler.FailOnRecompileLimitHit, match="fullgraph=True"):
        strict(xs[1])


def _mlp_and_data(seed=0):
    """tests/test_execution.py's MLP shapes (6-16-3, batch 5): the suite compiles their kernels once."""
    rng = np.random.default_rng(seed)
    w1, b1 = rng.standard_normal((16, 6)).astype(np.float32) * 0.3, rng.standard_normal(16).astype(np.float32) * 0.1
    w2, b2 = rng.standard_normal((3, 16)).astype(np.float32) * 0.3, rng.standard_normal(3).astype(np.float32) * 0.1
    xs = [rng.standard_normal((5, 6)).astype(np.float32) for _ in range(4)]
    ys = [rng.standard_normal((5, 3)).astype(np.float32) for _ in range(4)]
    return (w1, b1, w2, b2), xs, ys


def _jg_mlp(weights):
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    with jg.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(jg.tensor(w))
    return model


@functools.lru_cache(maxsize=None)
def _eager_reference(seed):
    """The uncompiled training run of ``_mlp_and_data(seed)`` (losses, parameters), in eager mode."""
    weights, xs, ys = _mlp_and_data(seed)
    with jg.execution_mode("eager"):
        losses, params, _, _ = _jg_train(weights, xs, ys, compiled=False)
    return losses, params


def _jg_train(weights, xs, ys, compiled, read_item=False):
    model = _jg_mlp(weights)
    opt = jg.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1)
    seen = []

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if read_item:
            seen.append(loss.item())  # a host read inside: that call runs eagerly
        return loss

    run = jg.compile(step) if compiled else step
    losses = [float(run(jg.tensor(x), jg.tensor(y))) for x, y in zip(xs, ys)]
    return losses, [_np(p) for p in model.parameters()], run, seen


@pytest.mark.one_execution_mode
def test_train_step_matches_pytorch_and_eager():
    """MLP + AdamW: zero_grad, forward, backward() and step() inside the compiled function."""
    torch = pytest.importorskip("torch")
    weights, xs, ys = _mlp_and_data(0)
    losses, params, run, _ = _jg_train(weights, xs, ys, compiled=True)
    assert _programs(run) == 1 and run.cache_info["calls"] == 4  # a warm-up, then one program replayed
    eager_losses, eager_params = _eager_reference(0)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for a, b in zip(params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    tm = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p, w in zip(tm.parameters(), weights):
            p.copy_(torch.tensor(w))
    topt = torch.optim.AdamW(tm.parameters(), lr=0.05, weight_decay=0.1)
    t_losses = []
    for x, y in zip(xs, ys):
        topt.zero_grad()
        loss = torch.nn.functional.mse_loss(tm(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        topt.step()
        t_losses.append(loss.item())
    np.testing.assert_allclose(losses, t_losses, rtol=1e-5)
    for a, p in zip(params, tm.parameters()):
        np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.one_execution_mode
def test_host_read_falls_back_to_eager_and_fullgraph_raises():
    weights, xs, ys = _mlp_and_data(0)
    losses, params, run, seen = _jg_train(weights, xs, ys, compiled=True, read_item=True)
    ref_losses, ref_params = _eager_reference(0)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    np.testing.assert_allclose(seen, ref_losses, rtol=1e-5)  # every call read its own loss
    for a, b in zip(params, ref_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert run.cache_info == {"programs": 0, "eager": 1, "calls": 4}

    def branchy(x):
        return x * 2 if bool(x.sum() > 0) else x - 1

    x = jg.ones(3)
    np.testing.assert_allclose(_np(jg.compile(branchy)(x)), [2, 2, 2])
    lin = nn.Linear(3, 3)
    opt = jg.optim.SGD(lin.parameters(), lr=0.1)
    before = [_np(p).copy() for p in lin.parameters()]

    def step(x):
        opt.zero_grad()
        lin(x).sum().backward()
        opt.step()
        print(x.sum())  # a host read: printing a tensor

    strict = jg.compile(step, fullgraph=True)
    with pytest.raises(compiler.Unsupported, match=r"fullgraph=True.*Tensor.__format__|fullgraph=True.*Tensor"):
        strict(x)
    for b, p in zip(before, lin.parameters()):  # nothing ran
        np.testing.assert_array_equal(b, _np(p))
        assert p.grad is None
    np.testing.assert_allclose(_np(lin(x)), before[0] @ np.ones(3) + before[1], rtol=1e-6)


@pytest.mark.one_execution_mode
def test_module_compile_gradients_match_pytorch():
    """Module.compile() and jg.compile(module): outputs and gradients (inputs and parameters) as PyTorch's,
    two calls before one backward (each call keeps its own saved values), and the training flag guarded."""
    torch = pytest.importorskip("torch")
    weights, xs, ys = _mlp_and_data(2)
    model = _jg_mlp(weights)
    om = jg.compile(model)
    assert isinstance(om, nn.Module) and om._orig_mod is model
    assert list(om.state_dict()) == ["_orig_mod." + k for k in model.state_dict()]
    model.compile()
    tm = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    with torch.no_grad():
        for p, w in zip(tm.parameters(), weights):
            p.copy_(torch.tensor(w))
    for call in (om, model):
        for p in model.parameters():
            p.grad = None
        tx = [torch.tensor(x, requires_grad=True) for x in xs[:2]]
        jx = [jg.tensor(x, requires_grad=True) for x in xs[:2]]
        for _ in range(2):  # the warm-up call, then the compiled program
            outs = [call(a) for a in jx]
        assert outs[0].grad_fn is not None
        (outs[0].square().sum() + outs[1].sum()).backward()
        tm.zero_grad()
        t_outs = [tm(a) for a in tx]
        (t_outs[0].square().sum() + t_outs[1].sum()).backward()
        for a, b in zip(outs, t_outs):
            np.testing.assert_allclose(_np(a), b.detach().numpy(), rtol=1e-5, atol=1e-6)
        for a, b in zip(jx, tx):
            np.testing.assert_allclose(_np(a.grad), b.grad.numpy(), rtol=1e-5, atol=1e-6)
        for p, q in zip(model.parameters(), tm.parameters()):
            np.testing.assert_allclose(_np(p.grad), q.grad.numpy(), rtol=1e-4, atol=1e-5)
    both = jg.compile(lambda a: (model(a).sum(), model[0].bias))  # a parameter returned stays itself
    for _ in range(2):
        total, bias = both(jx[0])
    assert bias is model[0].bias and bias.is_leaf and bias.requires_grad and total.grad_fn is not None
    cf = model._compiled_call_impl
    n = _programs(cf)
    model.eval()
    with jg.no_grad():
        out = model(jg.tensor(xs[0]))
    assert not out.requires_grad and _programs(cf) == n + 1
    np.testing.assert_allclose(_np(out), tm(torch.tensor(xs[0])).detach().numpy(), rtol=1e-5, atol=1e-6)
    model.train()
    model[0].weight = nn.Parameter(jg.zeros(16, 6))  # a parameter replaced: its identity is guarded
    with jg.no_grad():
        np.testing.assert_allclose(_np(model(jg.tensor(xs[0]))), _np(model[2](jg.tanh(model[0](jg.tensor(xs[0]))))),
                                   rtol=1e-6)
    assert _programs(cf) == n + 2
    # a submodule replaced, and a parameter written straight into a submodule's dict: each a new program
    model[2] = nn.Linear(16, 3)
    model[0]._parameters["bias"] = nn.Parameter(jg.ones(16))
    for k in (3, 4):
        with jg.no_grad():
            if k == 4:
                model[2]._parameters["bias"] = nn.Parameter(jg.full((3,), 2.0))
            np.testing.assert_allclose(_np(model(jg.tensor(xs[0]))),
                                       _np(model[2](jg.tanh(model[0](jg.tensor(xs[0]))))), rtol=1e-6)
        assert _programs(cf) == n + k


@pytest.mark.one_execution_mode
def test_inplace_argument_views_and_failed_compile(monkeypatch):
    """A write into an argument reaches it and its views; a compile that fails warns, runs eagerly, and leaves
    jgrad usable."""
    def bump(x):
        x.add_(1)
        return x * 2

    cf = jg.compile(bump)
    base = jg.zeros(2, 3)
    for k in range(1, 4):
        row = base[1]  # a view: the write goes through to base
        out = cf(row)
        np.testing.assert_array_equal(_np(base), [[0, 0, 0], [k, k, k]])
        np.testing.assert_array_equal(_np(out), [2 * k] * 3)
    assert _programs(cf) == 1
    from jgrad.runtime import _compile

    def broken(*args, **kwargs):
        raise RuntimeError("XLA compilation failed (simulated)")

    monkeypatch.setattr(_compile, "compile_plan", broken)
    lin = nn.Linear(3, 1)
    opt = jg.optim.SGD(lin.parameters(), lr=0.5)

    def step(x):
        opt.zero_grad()
        loss = lin(x).sum()
        loss.backward()
        opt.step()
        return loss

    cs = jg.compile(step)
    x = jg.ones(2, 3)
    w0 = _np(lin.weight).copy()
    cs(x)
    with pytest.warns(UserWarning, match="compiling the captured call failed.*simulated"):
        cs(x)
    assert cs.cache_info == {"programs": 0, "eager": 1, "calls": 2}
    np.testing.assert_allclose(_np(lin.weight), w0 - 2 * 0.5 * 2, rtol=1e-6)  # both steps ran, eagerly
    cs(x)
    np.testing.assert_allclose(_np(lin.weight), w0 - 3 * 0.5 * 2, rtol=1e-6)


@pytest.mark.one_execution_mode
def test_bad_arguments():
    f = lambda x: x  # noqa: E731
    with pytest.raises(RuntimeError, match="Unrecognized mode=fast, should be one of: default"):
        jg.compile(f, mode="fast")
    with pytest.raises(compiler.InvalidBackend, match="Invalid backend: 'nope'"):
        jg.compile(f, backend="nope")
    with pytest.raises(compiler.InvalidBackend, match="custom backend callable"):
        jg.compile(f, backend=lambda gm, inputs: gm)
    with pytest.raises(AssertionError, match="Expected enable to be a bool"):
        jg.compile(f, dynamic="yes")
    with pytest.raises(AssertionError, match="A callable function is expected"):
        jg.compile(3)
    with pytest.raises(TypeError, match="fullgraph must be a bool"):
        jg.compile(f, fullgraph="yes")
    assert jg.compile(f, disable=True) is f
    deco = jg.compile(mode="reduce-overhead")
    g = deco(lambda x: x + 1)
    assert isinstance(g, compiler.CompiledFunction)
    np.testing.assert_array_equal(_np(jg.compile(f, backend="eager")(jg.ones(2))), [1, 1])
    assert not compiler.is_compiling()
