"""Convolution, pooling, normalization and recurrent layers against PyTorch's, with PyTorch's weights:
parameter names and shapes, outputs, gradients, running statistics, and a CNN / an LSTM training step."""
import numpy as np
import pytest
import torch

import jgrad as jg
import jgrad.nn as nn
from interop.torch import from_torch_state_dict
from _vs_torch import rand


def _twins(make_jg, make_torch):
    """A jgrad layer given the torch layer's weights (float64); names and shapes must agree."""
    torch.manual_seed(0)
    t = make_torch().double()
    j = make_jg().to(jg.float64)
    assert [(n, tuple(p.shape)) for n, p in j.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in t.named_parameters()]
    assert list(j.state_dict()) == list(t.state_dict())
    res = j.load_state_dict(from_torch_state_dict(t.state_dict(), copy=True))  # torch keeps writing its own
    assert not res.missing_keys and not res.unexpected_keys
    return j, t


def _run(j, t, x, rtol=1e-9, atol=1e-11):
    """Forward, and backward of the sum of squares of every output; compare outputs and all gradients."""
    jx, tx = jg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    jo, to = j(jx), t(tx)
    jo = jo if isinstance(jo, tuple) else (jo,)
    to = to if isinstance(to, tuple) else (to,)
    flat_j = [o for x in jo for o in (x if isinstance(x, tuple) else (x,))]
    flat_t = [o for x in to for o in (x if isinstance(x, tuple) else (x,))]
    for a, b in zip(flat_j, flat_t):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=rtol, atol=atol)
    sum(o.pow(2).sum() for o in flat_j if o.dtype.is_floating_point).backward()
    sum(o.pow(2).sum() for o in flat_t if o.dtype.is_floating_point).backward()
    np.testing.assert_allclose(jx.grad.numpy(), tx.grad.numpy(), rtol=rtol, atol=atol)
    for (n, p), (_, q) in zip(j.named_parameters(), t.named_parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=rtol, atol=atol, err_msg=n)


@pytest.mark.parametrize("make", [
    lambda m: m.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    lambda m: m.Conv2d(3, 5, (3, 2), padding="same", padding_mode="reflect", bias=False),
    lambda m: m.Conv2d(3, 5, 3, padding=1, padding_mode="circular"),
    lambda m: m.Conv1d(3, 4, 3, padding=2, dilation=2, padding_mode="replicate"),
    lambda m: m.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
], ids=["conv2d", "conv2d-reflect-same", "conv2d-circular", "conv1d-replicate", "convtranspose2d"])
def test_conv_layers(make):
    j, t = _twins(lambda: make(nn), lambda: make(torch.nn))
    x = rand((2, t.in_channels, 7) + ((6,) if isinstance(t, (torch.nn.Conv2d, torch.nn.ConvTranspose2d)) else ()), 1)
    _run(j, t, x)


def test_conv_default_init_bounds_and_repr():
    conv = nn.Conv2d(4, 8, 3)
    bound = 1 / np.sqrt(4 * 9)
    w = conv.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(conv.bias.detach().numpy()).max() <= bound
    assert repr(conv) == repr(torch.nn.Conv2d(4, 8, 3))
    assert repr(nn.ConvTranspose2d(4, 8, 3, stride=2)) == repr(torch.nn.ConvTranspose2d(4, 8, 3, stride=2))


def test_conv_transpose_output_size():
    j, t = _twins(lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), lambda: torch.nn.ConvTranspose2d(3, 2, 3, stride=2))
    x = rand((1, 3, 4, 4), 2)
    out_j = j(jg.tensor(x), output_size=(10, 9))
    out_t = t(torch.tensor(x), output_size=(10, 9))
    np.testing.assert_allclose(out_j.detach().numpy(), out_t.detach().numpy(), rtol=1e-10)


@pytest.mark.parametrize("make", [
    lambda m: m.BatchNorm2d(3, momentum=0.2),
    lambda m: m.BatchNorm1d(3, momentum=None),
    lambda m: m.InstanceNorm1d(3, affine=True, track_running_stats=True),
    lambda m: m.GroupNorm(3, 6),
    lambda m: m.RMSNorm([5]),
], ids=["batchnorm2d", "batchnorm1d-cumulative", "instancenorm1d", "groupnorm", "rmsnorm"])
def test_norm_layers_train_and_eval(make):
    j, t = _twins(lambda: make(nn), lambda: make(torch.nn))
    shape = (4, 3, 5, 2) if isinstance(t, torch.nn.BatchNorm2d) else (4, 6 if isinstance(t, torch.nn.GroupNorm)
                                                                      else 3, 5)
    for step in range(2):
        j.zero_grad()
        t.zero_grad()
        _run(j, t, rand(shape, 3 + step))
    for (n, b), (_, c) in zip(j.named_buffers(), t.named_buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=1e-10, err_msg=n)
    j.eval()
    t.eval()
    j.zero_grad()
    t.zero_grad()
    _run(j, t, rand(shape, 9))


@pytest.mark.parametrize("make", [
    lambda m: m.LSTM(5, 6, bidirectional=True),
    lambda m: m.GRU(6, 6, num_layers=2, batch_first=True),   # both layers the same shapes: one kernel
    lambda m: m.LSTM(5, 6, proj_size=3, batch_first=True),
], ids=["lstm-bidirectional", "gru-batch-first", "lstm-proj"])
def test_recurrent_layers(make):
    j, t = _twins(lambda: make(nn), lambda: make(torch.nn))
    _run(j, t, rand((4, 3, t.input_size), 5))
    assert repr(j) == repr(t)


def test_recurrent_initial_state_unbatched_and_cells():
    j, t = _twins(lambda: nn.LSTM(5, 6), lambda: torch.nn.LSTM(5, 6))
    h0, c0 = rand((1, 3, 6), 6), rand((1, 3, 6), 7)
    x = rand((4, 3, 5), 8)
    jo, (jh, jc) = j(jg.tensor(x), (jg.tensor(h0), jg.tensor(c0)))
    to, (th, tc) = t(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
    for a, b in ((jo, to), (jh, th), (jc, tc)):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-10)
    _run(j, t, rand((4, 5), 9))   # unbatched (L, H_in)
    for name, kw in (("LSTMCell", {}), ("GRUCell", {}), ("RNNCell", {"nonlinearity": "relu", "bias": False})):
        jc_, tc_ = _twins(lambda: getattr(nn, name)(5, 6, **kw), lambda: getattr(torch.nn, name)(5, 6, **kw))
        _run(jc_, tc_, rand((3, 5), 10))
    with pytest.raises(RuntimeError, match=r"Expected hidden\[0\] size \(1, 3, 6\), got \(1, 2, 6\)"):
        j(jg.tensor(x), (jg.zeros(1, 2, 6, dtype=jg.float64), jg.zeros(1, 3, 6, dtype=jg.float64)))


def _cnn(m):
    return m.Sequential(m.Conv2d(1, 4, 3, padding=1), m.BatchNorm2d(4), m.ReLU(), m.MaxPool2d(2),
                        m.AdaptiveAvgPool2d(1), m.Flatten(), m.Linear(4, 3))


def test_cnn_training_steps_match_torch():
    """Two SGD(momentum) steps of a small CNN (conv, batch norm, pooling) with clipping."""
    j, t = _twins(lambda: _cnn(nn), lambda: _cnn(torch.nn))
    jo, to = jg.optim.SGD(j.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9)
    x, y = rand((4, 1, 8, 8), 11), np.array([0, 2, 1, 2])
    for _ in range(2):
        for model, opt, X, Y, lib in ((j, jo, jg.tensor(x), jg.tensor(y), jg),
                                      (t, to, torch.tensor(x), torch.tensor(y), torch)):
            opt.zero_grad()
            loss = lib.nn.functional.cross_entropy(model(X), Y)
            loss.backward()
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
    for (n, p), (_, q) in zip(j.state_dict().items(), t.state_dict().items()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-9, atol=1e-12, err_msg=n)
