"""Saved-tensor hooks, inference mode and grad-mode decorators, scenario by scenario against PyTorch.

Each scenario is written once over a library argument (``torch`` or ``jgrad``) and run with both; what it
returns (gradients, hook call counts, flags, error class and message) must be equal. The scenarios follow
PyTorch's test_autograd.py (saved tensor hooks, inference mode) in their own words.
"""
import numpy as np
import pytest

import jgrad as jg

torch = pytest.importorskip("torch")

X = np.array([[0.5, -1.25, 2.0], [1.5, 0.25, -0.75], [1.0, -0.5, 0.75], [-2.0, 0.125, 1.25]], np.float32)


def _np(t):
    return t.detach().numpy().copy() if t is not None else None


def _err(fn):
    """(exception class name, message) of what ``fn()`` raises, the library's name normalised."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the scenario compares whatever is raised
        # torch 2.11 wrote "can not" where 2.13 (the pin, jgrad's wording) writes "cannot"
        return type(e).__name__, str(e).replace("jgrad", "torch").replace("jg.", "torch.").replace("can not", "cannot")
    return None


def _same(a, b):
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    else:
        assert a == b, (a, b)


def _hooks_basic(L):
    calls = []
    G = L.autograd.graph
    a = L.tensor(X, requires_grad=True)
    with G.saved_tensors_hooks(lambda x: calls.append("pack") or x, lambda x: calls.append("unpack") or x):
        y = (a * a).sin()  # mul saves both inputs (the same leaf), sin its input
    n_packed = len(calls)
    y.sum().backward()
    return n_packed, len(calls) - n_packed, _np(a.grad)


def _hooks_nested_inner_wins(L):
    G = L.autograd.graph
    a, b = L.tensor(X, requires_grad=True), L.tensor(X[::-1].copy(), requires_grad=True)
    with G.saved_tensors_hooks(lambda x: 3 * x, lambda x: 3 * x):
        with G.saved_tensors_hooks(lambda x: 5 * x, lambda x: 5 * x):
            y = a * a
        z = b * b
    (y.sum() + z.sum()).backward()
    return _np(a.grad), _np(b.grad)


def _hooks_store_elsewhere(L):
    """pack returns a key, unpack looks it up: backward sees only what the store holds."""
    G = L.autograd.graph
    store = {}

    def pack(x):
        store[len(store)] = x.detach().clone()
        return len(store) - 1

    a = L.tensor(X, requires_grad=True)
    with G.saved_tensors_hooks(pack, lambda k: store[k]):
        y = a.exp() * a[:, 1:2]  # a saved output (exp) and a view of a leaf
    y.sum().backward()
    return len(store), _np(a.grad)


def _hooks_double_backward(L):
    G = L.autograd.graph
    a = L.tensor(X, requires_grad=True)
    with G.saved_tensors_hooks(lambda x: x, lambda x: x):
        y = a * a * a
        g, = L.autograd.grad(y.sum(), a, create_graph=True)
        g.sum().backward()
    return _np(g), _np(a.grad)


def _hooks_custom_function(L):
    G = L.autograd.graph

    class Cube(L.autograd.Function):  # saves an input and its output
        @staticmethod
        def forward(ctx, x):
            out = x ** 3
            ctx.save_for_backward(x, out)
            return out

        @staticmethod
        def backward(ctx, g):
            x, out = ctx.saved_tensors
            return 3 * g * out / x

    calls = []
    a = L.tensor(X, requires_grad=True)
    with G.saved_tensors_hooks(lambda x: calls.append("p") or x * 2, lambda x: calls.append("u") or x):
        y = Cube.apply(a)
    y.sum().backward()
    with G.saved_tensors_hooks(lambda x: x, lambda x: x):  # create_graph through the unpacked output
        g, = L.autograd.grad(Cube.apply(a).sum(), a, create_graph=True)
        gg, = L.autograd.grad(g.sum(), a)
    return calls, _np(a.grad), _np(gg)


def _save_on_cpu(L):
    a = L.tensor(X, requires_grad=True)
    with L.autograd.graph.save_on_cpu(pin_memory=False):
        y = (a.tanh() * a).sum()
    y.backward()
    return _np(a.grad)


def _hook_errors(L):
    G = L.autograd.graph
    a = L.tensor(X, requires_grad=True)
    out = []
    with G.saved_tensors_hooks(lambda x: x, lambda x: 1):
        y = a.sin()
    out.append(_err(lambda: y.sum().backward()))

    def modify(x):
        x.mul_(2)
        return x

    with G.saved_tensors_hooks(modify, lambda x: x):
        out.append(_err(lambda: (a * 1).sin()))

    with G.disable_saved_tensors_hooks("no hooks here"):
        out.append(_err(lambda: G.saved_tensors_hooks(lambda x: x, lambda x: x).__enter__()))
    with G.saved_tensors_hooks(lambda x: x, lambda x: x):
        out.append(_err(lambda: G.disable_saved_tensors_hooks("still hooked").__enter__()))

    @G.disable_saved_tensors_hooks("decorated")
    def f():
        with G.saved_tensors_hooks(lambda x: x, lambda x: x):
            pass

    out.append(_err(f))
    with G.saved_tensors_hooks(lambda x: x, lambda x: x):  # usable again once the disabling block is left
        a.sin().sum().backward()
    return out


def _allow_mutation(L):
    G = L.autograd.graph
    out = []
    with G.allow_mutation_on_saved_tensors() as ctx:
        a = L.tensor(X, requires_grad=True)
        b = a.clone()
        y = (b * b).sum()
        b.mul_(10)
        b[1:].add_(1)  # through a view too
        y.backward()  # the values saved before the writes
        out += [_np(a.grad), _np(b), type(ctx).__name__]
        z = (b * b).sum()
        out.append(_err(lambda: G.allow_mutation_on_saved_tensors().__enter__()))
    out.append(_err(lambda: z.backward()))
    return out


HOOK_SCENARIOS = [_allow_mutation, _hooks_basic, _hooks_nested_inner_wins, _hooks_store_elsewhere, _hooks_double_backward,
                  _hooks_custom_function, _save_on_cpu, _hook_errors]


def test_saved_tensors_hooks_as_torch():
    for scenario in HOOK_SCENARIOS:
        _same(scenario(jg), scenario(torch))


def _inference_state(L):
    out = [L.is_inference_mode_enabled()]
    with L.inference_mode():
        out += [L.is_inference_mode_enabled(), L.is_grad_enabled()]
        with L.inference_mode(False):
            out += [L.is_inference_mode_enabled(), L.is_grad_enabled()]
        out.append(L.is_inference_mode_enabled())
    with L.no_grad():
        with L.inference_mode(mode=False):
            out.append(L.is_grad_enabled())

    @L.inference_mode
    def bare():
        return L.is_inference_mode_enabled(), L.ones(2).is_inference()

    @L.inference_mode(False)
    def off():
        return L.is_inference_mode_enabled()

    @L.inference_mode()
    def gen():
        yield L.is_inference_mode_enabled()
        yield L.is_grad_enabled()

    out += [bare(), off(), list(gen()), L.is_inference_mode_enabled(), L.is_grad_enabled()]
    return out


def _grad_mode_decorators(L):
    out = []
    for cm in (L.no_grad, L.enable_grad):  # without parentheses
        f = cm(lambda: L.is_grad_enabled())
        with L.set_grad_enabled(cm is L.no_grad):
            out.append(f())

    @L.set_grad_enabled(False)  # as a decorator it changes only the calls
    def g():
        return L.is_grad_enabled()

    out += [L.is_grad_enabled(), g()]

    @L.no_grad()
    def gen():
        yield L.is_grad_enabled()
        return 5

    it = gen()
    out.append(next(it))
    try:
        next(it)
    except StopIteration as stop:
        out.append(stop.value)
    return out


def _inference_tensors(L):
    w = L.tensor(X, requires_grad=True)
    with L.inference_mode():
        x = L.tensor(X) * 2
        y = w * 2  # a normal tensor in, an inference tensor out, no history
        flags = [x.is_inference(), y.is_inference(), y.requires_grad, w.is_inference()]
        x.add_(1)  # in-place on an inference tensor inside inference mode is fine
    z = x + 1
    flags += [z.is_inference(), z.requires_grad, x.clone().is_inference(), L.is_inference(x), L.is_inference(w)]
    (w * x.clone()).sum().backward()  # a clone is a normal tensor
    (w + x).sum().backward()  # add saves nothing: an inference tensor may take part
    value = _np(x)
    # (PyTorch writes x before it raises on the in-place add; jgrad raises first: nothing read after it)
    errs = [_err(lambda: w * x), _err(lambda: x.add_(1)), _err(lambda: L.is_inference(1))]
    return flags, errs, value, _np(w.grad)


def _inference_existing_graph(L):
    s = L.tensor(X, requires_grad=True)
    a = s.clone()
    out = a * a
    with L.inference_mode():
        a.add_(2)  # a normal tensor written in inference mode: its version moves on
    err = _err(lambda: out.backward(L.ones_like(out)))
    return err[0], err[1].split(":")[0], a.is_inference()


@pytest.mark.one_execution_mode  # marking and refusing happen where tensors are made and written, in any mode
def test_inference_mode_as_torch():
    for scenario in (_inference_state, _grad_mode_decorators, _inference_tensors, _inference_existing_graph):
        _same(scenario(jg), scenario(torch))
