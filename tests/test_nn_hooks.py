"""Module hooks of jgrad.nn: forward pre-hooks, forward hooks, full backward pre-hooks and full
backward hooks (built on an identity custom Function around a module's inputs and outputs, as
PyTorch's torch/utils/hooks.py BackwardHook). Scenarios are ported from PyTorch's
test/nn/test_module_hooks.py and test/test_nn.py (upstream test named in each comment), written
fresh against jgrad; where a scenario can run on both, the event logs and gradients are compared
with torch's."""
import warnings
from functools import partial

import numpy as np
import pytest
import torch

import jgrad as jg
from jgrad import nn
from jgrad.nn import functional as F

F64 = jg.float64


from _torch_pairs import npy, pair  # noqa: E402


def close(a, b, tol=1e-10):
    np.testing.assert_allclose(npy(a), npy(b), rtol=tol, atol=tol)


# ---- forward hooks -------------------------------------------------------------------------
class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq1 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])
        self.seq2 = nn.Sequential(*[nn.Linear(10, 10) for _ in range(2)])

    def forward(self, x):
        return self.seq2(self.seq1(x))


class _ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = _Net()
        self.net2 = _Net()

    def forward(self, x):
        return self.net2(self.net1(x))


def _record(fired, expected_module, hook_id, module, *args):
    fired.append(hook_id)
    assert module is expected_module
    assert all(len(a) == 1 for a in args if isinstance(a, tuple))


@pytest.mark.parametrize("kind, prepends, expected", [
    # test_module_hooks.py: test_forward_hooks / test_forward_pre_hooks /
    # test_full_backward_hooks / test_full_backward_pre_hooks
    ("register_forward_hook", (False, True, False, False, True), [4, 1, 0, 2, 3]),
    ("register_forward_pre_hook", (True, False, False, False, True), [4, 0, 1, 2, 3]),
    ("register_full_backward_hook", (False, False, False, True, True), [4, 3, 0, 1, 2]),
    ("register_full_backward_pre_hook", (True, True, False, False, False), [1, 0, 2, 3, 4]),
])
def test_hook_registration_order_with_prepend(kind, prepends, expected):
    fired = []
    model = _ToyModel()
    target = model.net1
    for i, prepend in enumerate(prepends):
        getattr(target, kind)(partial(_record, fired, target, i), prepend=prepend)
    x = jg.randn(10, 10)
    forward = "forward" in kind
    out = model(x)
    assert fired == (expected if forward else [])
    out.sum().backward()
    assert fired == expected
    model(x).sum().backward()
    assert fired == expected + expected


def test_mixed_hooks_fire_in_order():
    # test_module_hooks.py: test_mixed_hooks
    fired = []
    model = _ToyModel()
    model.register_forward_pre_hook(partial(_record, fired, model, 0))
    model.register_forward_hook(partial(_record, fired, model, 1))
    model.register_full_backward_pre_hook(partial(_record, fired, model, 2))
    model.register_full_backward_hook(partial(_record, fired, model, 3))
    out = model(jg.randn(10, 10))
    assert fired == [0, 1]
    out.sum().backward()
    assert fired == [0, 1, 2, 3]


class _KwargModel(nn.Module):
    def forward(self, x, bias=None):
        return x + bias if bias is not None else x


def test_kwarg_hooks_and_removal():
    # test_module_hooks.py: test_kwarg_hooks / test_remove_kwarg_hooks
    fired = []

    def pre(module, args, kwargs):
        fired.append(0)
        kwargs["bias"] = 2 * kwargs["bias"]
        return args, kwargs

    def post(module, args, kwargs, out):
        fired.append(1)
        return out + kwargs["bias"]

    x, bias = jg.ones(3, 3), jg.ones(3, 3)
    model = _KwargModel()
    h_post = model.register_forward_hook(post, with_kwargs=True)
    h_pre = model.register_forward_pre_hook(pre, with_kwargs=True)
    np.testing.assert_array_equal(npy(model(x, bias=bias)), np.full((3, 3), 5.0))
    assert fired == [0, 1]
    h_post.remove()
    assert h_post.id not in model._forward_hooks_with_kwargs
    np.testing.assert_array_equal(npy(model(x, bias=bias)), np.full((3, 3), 3.0))
    h_pre.remove()
    np.testing.assert_array_equal(npy(model(x, bias=bias)), np.full((3, 3), 2.0))
    assert fired == [0, 1, 0] and not model._forward_pre_hooks
    model.register_forward_pre_hook(lambda m, a, k: 5, with_kwargs=True)
    with pytest.raises(RuntimeError, match="forward pre-hook must return None or a tuple of \\(new_args, new_kwargs"):
        model(x, bias=bias)


def test_forward_pre_hook_and_forward_hook_rewrite_values():
    # test_nn.py: test_hook_forward_preforward_writable
    module = nn.Sigmoid()
    x = np.random.default_rng(9).standard_normal((5, 5))
    jx, tx = pair(x, requires_grad=True)
    for m, xx, lib in ((module, jx, jg), (torch.nn.Sigmoid(), tx, torch)):
        relu = F.relu if lib is jg else torch.nn.functional.relu
        m.register_forward_pre_hook(lambda mod, inp, relu=relu: relu(inp[0]))
        m.register_forward_hook(lambda mod, inp, out: -out)
        out = m(xx)
        out.backward(lib.ones(5, 5, dtype=out.dtype) * 2)
    close(jx.grad, tx.grad)
    expected = -(1 / (1 + np.exp(-np.maximum(x, 0))))
    close(module(jx), expected)


def test_hook_removable_during_call_and_always_call():
    # test_module_hooks.py: test_module_forward_preforward_hook_removable / test_always_called_forward_hooks
    module = nn.Sigmoid()
    handles = []
    handles.append(module.register_forward_pre_hook(lambda m, i: handles[0].remove()))
    handles.append(module.register_forward_pre_hook(lambda m, i: handles[1].remove()))
    assert len(handles[0].hooks_dict_ref()) == 2
    module(jg.ones(2))
    assert len(handles[0].hooks_dict_ref()) == 0

    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    called = []
    f = Failing()
    f.register_forward_hook(lambda m, a, o: called.append("always"), always_call=True)
    f.register_forward_hook(lambda m, a, o: called.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        f(jg.ones(1))
    assert called == ["always"]


# ---- full backward hooks -------------------------------------------------------------------
def _hooks_counter_scenario(lib, register):
    """test_nn.py: _test_hooks (counts forward/backward hook calls, removal)."""
    module = lib.nn.Sigmoid()
    x = lib.ones(5, 5, dtype=lib.float64, requires_grad=True)
    counter = {"forwards": 0, "backwards": 0}
    log = []

    def fw_hook(inc, h_module, inp, output):
        assert isinstance(inp, tuple) and h_module is module
        counter["forwards"] += inc

    def bw_hook(inc, h_module, *grads):
        assert all(isinstance(g, tuple) for g in grads) and h_module is module
        np.testing.assert_allclose(grads[-1][0].detach().numpy(), 2.0)  # grad_output
        counter["backwards"] += inc

    test_fwd = module.register_forward_hook(lambda *a: fw_hook(1, *a))
    module(x)
    module(x)
    log.append(dict(counter))
    test_bwd = getattr(module, register)(lambda *a: bw_hook(1, *a))
    out = module(x)
    g = lib.ones(5, 5, dtype=lib.float64) * 2
    out.backward(g, retain_graph=True)
    out.backward(g, retain_graph=True)
    log.append(dict(counter))
    test2_fwd = module.register_forward_hook(lambda *a: fw_hook(2, *a))
    test2_bwd = getattr(module, register)(lambda *a: bw_hook(2, *a))
    module(x).backward(g)
    log.append(dict(counter))
    test2_bwd.remove()
    module(x).backward(g)
    test2_fwd.remove()
    module(x).backward(g)
    log.append(dict(counter))
    test_fwd.remove()
    test_bwd.remove()
    module(x).backward(g)
    log.append(dict(counter))
    return log, x.grad.detach().numpy()


@pytest.mark.parametrize("register", ["register_full_backward_hook", "register_full_backward_pre_hook"])
def test_hooks_counting_matches_torch(register):
    jlog, jgrad_ = _hooks_counter_scenario(jg, register)
    tlog, tgrad = _hooks_counter_scenario(torch, register)
    assert jlog == tlog
    assert jlog[-1] == {"forwards": 10, "backwards": 7}
    np.testing.assert_allclose(jgrad_, tgrad, rtol=1e-12)


def _nested_order_scenario(lib):
    """Forward and backward hooks of every module of a nested model: the full event log."""
    n = lib.nn
    lib.manual_seed(0)
    model = n.Sequential(n.Linear(3, 4), n.Tanh(), n.Sequential(n.Linear(4, 2), n.Sigmoid())).double()
    log = []

    def shapes(gs):
        return [None if g is None else tuple(g.shape) for g in gs]

    for name, m in model.named_modules():
        name = name or "root"
        m.register_forward_pre_hook(lambda mod, a, name=name: log.append(("fpre", name)))
        m.register_forward_hook(lambda mod, a, o, name=name: log.append(("fwd", name)))
        m.register_full_backward_pre_hook(lambda mod, go, name=name: log.append(("bpre", name, shapes(go))))
        m.register_full_backward_hook(lambda mod, gi, go, name=name: log.append(("bwd", name, shapes(gi),
                                                                                 shapes(go))))
    x = lib.ones(5, 3, dtype=lib.float64, requires_grad=True)
    model(x).sum().backward()
    return log


def test_nested_hook_order_and_arguments_match_torch():
    assert _nested_order_scenario(jg) == _nested_order_scenario(torch)


def _two_io_scenario(lib):
    log = []

    class M(lib.nn.Module):
        def forward(self, x, y):
            return x * y, x + y

    def vals(gs):
        return [None if g is None else g.tolist() for g in gs]

    m = M()
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("bpre", vals(go))))
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("bwd", vals(gi), vals(go))))
    x = lib.tensor([1.0, 2.0], dtype=lib.float64, requires_grad=True)
    y = lib.tensor([3.0, 4.0], dtype=lib.float64)
    a, b = m(x, y)
    (a.sum() * 2 + b.sum()).backward()
    log.append(("x.grad", x.grad.tolist()))
    return log


def test_backward_hook_values_with_two_inputs_and_outputs_match_torch():
    assert _two_io_scenario(jg) == _two_io_scenario(torch)


def test_backward_hooks_rewrite_gradients():
    # test_module_hooks.py: test_full_backward_pre_hooks (second half), test_backward_hooks_interaction;
    # test_nn.py: test_hook_backward_writeable
    a = jg.ones(2, requires_grad=True)
    model = nn.Linear(2, 2)
    model.register_full_backward_pre_hook(lambda m, go: (go[0] * 0,))
    model(a).sum().backward()
    np.testing.assert_array_equal(npy(a.grad), [0.0, 0.0])

    module = nn.Sigmoid()
    seen = []
    module.register_full_backward_pre_hook(lambda m, go: (go[0] * 0.5,))

    def bw_hook(m, grad_in, grad_out):
        seen.append(npy(grad_out[0]))
        return tuple(g * 2 for g in grad_in)

    module.register_full_backward_hook(bw_hook)
    x = np.random.default_rng(10).standard_normal((5, 5))
    jx = jg.tensor(x, requires_grad=True)
    module(jx).backward(jg.ones(5, 5, dtype=F64))
    np.testing.assert_array_equal(seen[0], np.full((5, 5), 0.5))
    s = 1 / (1 + np.exp(-x))
    close(jx.grad, s * (1 - s) * 0.5 * 2)


def test_backward_hook_invalid_outputs():
    # test_nn.py: test_hook_invalid_outputs
    module = nn.Sigmoid()
    x = jg.randn(5, 5, requires_grad=True)
    with module.register_full_backward_hook(lambda m, gi, go: gi[:-1]):
        with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of grad_input, got 0, "
                                               "but expected 1"):
            module(x).sum().backward()
    with module.register_full_backward_hook(lambda m, gi, go: gi + (jg.randn(2, 2),)):
        with pytest.raises(RuntimeError, match="got 2, but expected 1"):
            module(x).sum().backward()
    with module.register_full_backward_pre_hook(lambda m, go: ()):
        with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number of grad_output, got 0, "
                                               "but expected 1"):
            module(x).sum().backward()
    with module.register_full_backward_pre_hook(lambda m, go: go + (jg.randn(2, 2),)):
        with pytest.raises(RuntimeError, match="got 2, but expected 1"):
            module(x).sum().backward()
    assert not module._backward_hooks and not module._backward_pre_hooks


def test_backward_hook_when_no_input_requires_grad():
    # test_nn.py: test_hook_no_requires_grad / test_hook_requires_grad
    mod = nn.Linear(2, 3)
    inp = jg.rand(1, 2)
    state = {"ret": None, "called": 0}

    def hook(m, grad_input, grad_output):
        state["called"] += 1
        assert all(g is None for g in grad_input)
        assert all(tuple(g.shape) == (1, 3) for g in grad_output)
        return {"none": None, "grad_input": grad_input, "invalid": (inp,)}[state["ret"] or "none"]

    mod.register_full_backward_hook(hook)
    mod(inp).sum().backward()
    state["ret"] = "grad_input"
    mod(inp).sum().backward()
    assert state["called"] == 2
    state["ret"] = "invalid"
    with pytest.raises(RuntimeError, match="where no input requires gradient should always return None"):
        mod(inp).sum().backward()

    class ThreeArgs(nn.Module):
        def forward(self, a, b, c):
            assert a.requires_grad and not b.requires_grad and c.requires_grad
            return a.sum() + b.sum() + c.sum()

    t = jg.rand(2, requires_grad=True)
    m3 = ThreeArgs()
    m3.register_full_backward_hook(lambda m, gi, go: None)
    m3(t, t.detach(), t)


def test_backward_hook_extra_non_tensor_input_and_output():
    # test_nn.py: test_hook_extra_input / test_hook_last_arg_requires_grad
    class MyModule(nn.Module):
        def forward(self, non_tensor, tensor):
            return tensor.clone(), non_tensor

    seen = []

    def hook(m, grad_input, grad_output):
        seen.append(1)
        assert grad_input[0] is None and isinstance(grad_input[1], jg.Tensor)
        assert isinstance(grad_output[0], jg.Tensor) and grad_output[1] is None

    mod = MyModule()
    mod.register_full_backward_hook(hook)
    out, flag = mod(True, jg.rand(2, requires_grad=True))
    assert flag is True
    out.sum().backward()
    assert seen == [1]
    loss = nn.L1Loss()
    loss.register_full_backward_hook(lambda m, gi, go: None)
    inp = jg.rand(1, requires_grad=True)
    loss(inp.detach(), inp).backward()


def test_backward_hook_warns_for_dict_output():
    # test_module_hooks.py: test_bw_hook_warning_for_non_tensor_or_tuple
    counter = {"forward": 0, "backward": 0}

    class DictModule(nn.Module):
        def forward(self, d):
            return {"x": F.softmax(d["x"], dim=0)}

    model = DictModule()
    model.register_forward_pre_hook(lambda m, i: counter.__setitem__("forward", counter["forward"] + 1))
    model.register_forward_hook(lambda m, i, o: counter.__setitem__("forward", counter["forward"] + 1))
    bw = lambda m, *g: counter.__setitem__("backward", counter["backward"] + 1)  # noqa: E731
    model.register_full_backward_pre_hook(bw)
    model.register_full_backward_hook(bw)
    x = jg.ones(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        model({"x": x})["x"].sum().backward()
    assert counter == {"forward": 2, "backward": 0}
    assert sum("should be a Tensor or a tuple of Tensors" in str(x.message) for x in w) == 1
