"""``jgrad.utils.checkpoint`` against ``torch.utils.checkpoint`` and the uncheckpointed run.

Gradients through a checkpointed function (both forms) must equal PyTorch's, checkpointed and not. The
function must run exactly as often as in PyTorch (once more, in backward). Dropout must draw the forward's
mask again when ``preserve_rng_state``. The non-reentrant form must not keep the activations, and the
argument errors and warnings must follow PyTorch's.
"""
import gc
import weakref

import numpy as np
import pytest

import jgrad as jg
import jgrad.utils.checkpoint as jc

torch = pytest.importorskip("torch")
tc = pytest.importorskip("torch.utils.checkpoint")

R = np.random.RandomState(0)
X = R.randn(4, 3).astype(np.float32)
W = R.randn(3, 3).astype(np.float32)


def _close(a, b):
    """float32 equality at the scale of the result (a sum of products loses digits to cancellation)."""
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max())))


def _grads(L, ck, reentrant):
    x, w = L.tensor(X, requires_grad=True), L.tensor(W, requires_grad=True)
    calls = [0]

    def f(x, w, scale=1.0):
        calls[0] += 1
        return (x @ w).tanh().sin() * x[:, :1] * scale  # a view of an input inside

    if ck is None:
        y = f(x, w)
    elif reentrant:
        y = ck.checkpoint(f, x, w, 2.0, use_reentrant=True)
    else:
        y = ck.checkpoint(f, x, w, scale=2.0, use_reentrant=False)
    (y * y).sum().backward()
    return calls[0], x.grad.detach().numpy(), w.grad.detach().numpy()


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_gradients_as_torch(reentrant):
    mine, theirs = _grads(jg, jc, reentrant), _grads(torch, tc, reentrant)
    assert mine[0] == theirs[0] == 2
    for a, b in zip(mine[1:], theirs[1:]):
        _close(a, b)


def _sequential(L, ck, reentrant):
    L.manual_seed(0)
    layers = [L.nn.Linear(3, 3), L.nn.Tanh(), L.nn.Linear(3, 3), L.nn.Sigmoid(), L.nn.Linear(3, 3)]  # X's shapes
    model = L.nn.Sequential(*layers)
    with L.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(L.tensor(np.linspace(-1, 1, p.numel(), dtype=np.float32).reshape(tuple(p.shape)) * (i + 1)))
    x = L.tensor(X, requires_grad=True)
    y = ck.checkpoint_sequential(model, 2, x, use_reentrant=reentrant) if ck else model(x)
    y.pow(2).sum().backward()
    return [x.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]


@pytest.mark.one_execution_mode  # both modes' checkpoint paths run in test_checkpoint_gradients_as_torch
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_sequential_as_torch(reentrant):
    for a, b in zip(_sequential(jg, jc, reentrant), _sequential(torch, None, reentrant)):
        _close(a, b)


@pytest.mark.parametrize("reentrant", [True, False])
def test_dropout_replays_its_mask(reentrant):
    """The recomputation's dropout mask is the forward's: the gradient is what the forward output implies."""
    x = jg.tensor(np.abs(X) + 1, requires_grad=True)
    w = jg.tensor(W[0], requires_grad=True)

    def f(x, w):
        return jg.nn.functional.dropout(x, 0.5, training=True) * w

    for preserve in (True, False):
        jg.manual_seed(3)
        y = jc.checkpoint(f, x, w, use_reentrant=reentrant, preserve_rng_state=preserve)
        kept = (y.detach().numpy() != 0).astype(np.float32)  # 1 where the forward kept x (x, w nonzero)
        x.grad = w.grad = None
        y.sum().backward()
        expected = kept * 2 * W[0]
        if preserve:
            np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6)
            np.testing.assert_allclose(w.grad.numpy(), (kept * 2 * (np.abs(X) + 1)).sum(0), rtol=1e-5)
        else:  # a fresh draw: 12 elements at p=0.5 give the same mask with probability 2**-12
            assert not np.allclose(x.grad.numpy(), expected)


@pytest.mark.one_execution_mode
def test_non_reentrant_keeps_no_activation():
    """Eager mode, where an activation is a jax array a weak reference can watch: without checkpoint the
    graph keeps tanh's output alive; under checkpoint it is gone after the forward and backward still works."""
    alive = []

    def f(x, w):
        h = (x @ w).tanh()
        alive.append(weakref.ref(h._data))
        return h.sin()

    for ck in (False, True):
        x, w = jg.tensor(X, requires_grad=True), jg.tensor(W, requires_grad=True)
        y = jc.checkpoint(f, x, w, use_reentrant=False) if ck else f(x, w)
        gc.collect()
        assert (alive[-1]() is None) == ck
        y.sum().backward()
        t = np.tanh(X @ W)
        np.testing.assert_allclose(w.grad.numpy(), X.T @ (np.cos(t) * (1 - t ** 2)), rtol=1e-5, atol=1e-6)


def _errors(L, ck):
    x = L.tensor(X, requires_grad=True)
    out = []
    with pytest.warns(UserWarning, match="use_reentrant parameter should be passed explicitly"):
        ck.checkpoint(lambda a: a * 2, x)
    with pytest.raises(ValueError) as e:
        ck.checkpoint(lambda a, b=1: a * b, x, b=2, use_reentrant=True)
    out.append(str(e.value))
    with pytest.warns(UserWarning) as w:
        ck.checkpoint(lambda a: a * 2, L.tensor(X), use_reentrant=True)
    out.append(any("None of the inputs have requires_grad=True" in str(r.message) for r in w))
    flip = [0]

    def unsteady(a):  # saves fewer tensors the second time it runs
        flip[0] += 1
        return a.sin().cos() if flip[0] == 1 else a.sin()

    y = ck.checkpoint(unsteady, x, use_reentrant=False)
    with pytest.raises(RuntimeError) as e:
        y.sum().backward()
    out.append((type(e.value).__name__, str(e.value).split("\n\n")[0]))
    return out


@pytest.mark.one_execution_mode
def test_checkpoint_errors_as_torch():
    assert _errors(jg, jc) == _errors(torch, tc)


def _contexts(L, ck):
    """What context_fn's managers see: the forward runs under the first, the recomputation under the second."""
    log = []

    class Ctx:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            log.append(f"enter {self.name}")

        def __exit__(self, *exc):
            log.append(f"exit {self.name}")

    def f(x):
        log.append("run")
        return x.sin().sum()

    x = L.tensor(X, requires_grad=True)
    y = ck.checkpoint(f, x, use_reentrant=False, context_fn=lambda: (Ctx("fwd"), Ctx("recompute")))
    log.append("backward")
    y.backward()
    with pytest.raises(ValueError) as e:
        ck.checkpoint(f, x, use_reentrant=True, context_fn=lambda: (Ctx("a"), Ctx("b")))
    log.append(str(e.value))
    with pytest.raises(ValueError) as e:
        ck.checkpoint(f, x, use_reentrant=False, determinism_check="strict")
    log.append(str(e.value))
    return log, x.grad.numpy()


def _determinism(L, ck, check):
    """A closed-over tensor saved by a mul is (1, 3) in the recomputation, (4, 3) in the forward: the same
    values, broadcast."""
    x = L.tensor(X, requires_grad=True)
    runs = [0]

    def f(a):
        runs[0] += 1
        w = L.tensor(W[:1]).expand(4, 3).clone() if runs[0] == 1 else L.tensor(W[:1])
        return (a * w).sum()

    ck.checkpoint(f, x, use_reentrant=False, determinism_check=check).backward()
    return x.grad.numpy()


@pytest.mark.one_execution_mode
def test_context_fn_and_determinism_check_as_torch():
    (mine, g1), (theirs, g2) = _contexts(jg, jc), _contexts(torch, tc)
    assert mine == theirs
    _close(g1, g2)
    errors = []
    for L, ck in ((jg, jc), (torch, tc)):
        with pytest.raises(RuntimeError) as e:
            _determinism(L, ck, "default")
        errors.append((type(e.value).__name__, str(e.value).split("\n")))
    assert errors[0][0] == errors[1][0] == "CheckpointError" and errors[0][1][0] == errors[1][1][0]
    # which tensors an op saves, and in which order, is jgrad's choice (mul saves its inputs in order): w is 1
    dev = jg.get_default_device()  # the GPU test mode's default device is a GPU
    assert errors[0][1][1:3] == ["tensor at position 1:", "saved metadata: {'shape': (4, 3), 'dtype': "
                                 f"jgrad.float32, 'device': {dev!r}}}"]
    _close(_determinism(jg, jc, "none"), _determinism(torch, tc, "none"))


@pytest.mark.one_execution_mode
@pytest.mark.parametrize("reentrant", [True, False])
def test_recomputation_behind_an_optimization_barrier_in_auto_mode(reentrant):
    """In "auto" mode the forward, the recomputation and the backward are one segment, and the recomputation's
    inputs go through jax.lax.optimization_barrier in it (XLA's CSE would otherwise be free to merge the second
    tanh into the first); results and gradients are the eager ones. (XLA's CPU compiler removes the barrier in
    its cse_barrier_expander pass before CSE, so the CPU executable still merges them.)"""
    from jgrad.runtime import _segment, _segment_run
    import jax

    eager = _grads(jg, jc, reentrant)
    seen = []
    with jg.execution_mode("auto"):
        x, w = jg.tensor(X, requires_grad=True), jg.tensor(W, requires_grad=True)

        def f(x, w, scale=1.0):
            return (x @ w).tanh().sin() * x[:, :1] * scale

        y = jc.checkpoint(f, x, w, 2.0, use_reentrant=True) if reentrant else \
            jc.checkpoint(f, x, w, scale=2.0, use_reentrant=False)
        (y * y).sum().backward()
        seg = _segment._open.get(x._device)
        assert seg is not None and seg.steps
        run = _segment_run.runner(seg.steps, seg.n_buffers)
        text = jax.jit(lambda *ins: run(ins)).lower(*[_segment_run.spec(a) for a in seg.inputs]).as_text()
        seen.append((text.count("optimization_barrier"), text.count("call @TanhBackward0_forward(")))
        # the barrier also takes the gradient reaching the region (so the recomputation waits for backward):
        # x, w and y's gradient, three operands
        barriers = [ln for ln in text.splitlines() if "optimization_barrier" in ln and "=" in ln]
        auto = (x.grad.numpy(), w.grad.numpy())
    assert seen[0][0] >= 1 and seen[0][1] == 2, seen
    assert any(ln.split(":")[-1].count("tensor<") >= 3 for ln in barriers), barriers
    for a, b in zip(auto, eager[1:]):
        _close(a, b)
