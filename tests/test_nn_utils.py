"""torch.nn.utils against PyTorch: clip_grad_norm_, clip_grad_value_, get_total_norm, clip_grads_with_norm_,
parameters_to_vector, vector_to_parameters, rnn.pad_sequence."""
import math

import numpy as np
import pytest
import torch

import jgrad as jg
from _vs_torch import rand


def _params_with_grads(seed=0, scale=1.0):
    shapes = [(3, 4), (5,), (2, 2, 2)]
    values = [rand(s, seed + i) for i, s in enumerate(shapes)]
    grads = [rand(s, seed + 10 + i) * scale for i, s in enumerate(shapes)]
    jp = [jg.nn.Parameter(jg.tensor(v)) for v in values]
    tp = [torch.nn.Parameter(torch.tensor(v)) for v in values]
    for p, q, g in zip(jp, tp, grads):
        p.grad, q.grad = jg.tensor(g), torch.tensor(g)
    return jp, tp


@pytest.mark.parametrize("norm_type", [2.0, 1, math.inf, 3.0, "inf"])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    jp, tp = _params_with_grads()
    before = [p.grad._version for p in jp]
    total_j = jg.nn.utils.clip_grad_norm_(jp, max_norm, norm_type)
    total_t = torch.nn.utils.clip_grad_norm_(tp, max_norm, norm_type)
    np.testing.assert_allclose(total_j.item(), total_t.item(), rtol=1e-12)
    for p, q, v in zip(jp, tp, before):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12)
        assert p.grad._version == v + 1    # updated in place


def test_clip_grad_norm_details():
    p = jg.nn.Parameter(jg.ones(3))
    assert jg.nn.utils.clip_grad_norm_(p, 1.0).item() == 0.0           # no gradients: a zero norm, nothing done
    p.grad = jg.tensor([3.0, 4.0, 0.0])
    assert jg.nn.utils.clip_grad_norm_(p, 1.0).item() == pytest.approx(5.0)  # a single tensor is accepted
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8, 0.0], rtol=1e-5)
    p.grad = jg.tensor([float("nan"), 1.0, 0.0])
    with pytest.raises(RuntimeError, match="is non-finite, so it cannot be clipped"):
        jg.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
    jp, tp = _params_with_grads(3)
    total = jg.nn.utils.get_total_norm([p.grad for p in jp], 2.0)
    np.testing.assert_allclose(total.item(), torch.nn.utils.get_total_norm([q.grad for q in tp], 2.0).item())
    jg.nn.utils.clip_grads_with_norm_(jp, 1.0, total)
    torch.nn.utils.clip_grads_with_norm_(tp, 1.0, torch.nn.utils.get_total_norm([q.grad for q in tp], 2.0))
    for a, b in zip(jp, tp):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_clip_grad_value():
    jp, tp = _params_with_grads(5, scale=2.0)
    jg.nn.utils.clip_grad_value_(jp, 0.7)
    torch.nn.utils.clip_grad_value_(tp, 0.7)
    for a, b in zip(jp, tp):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_parameters_to_vector_and_back():
    jp, tp = _params_with_grads(7)
    jv, tv = jg.nn.utils.parameters_to_vector(jp), torch.nn.utils.parameters_to_vector(tp)
    np.testing.assert_array_equal(jv.detach().numpy(), tv.detach().numpy())
    (jv * jg.arange(jv.shape[0], dtype=jg.float64)).sum().backward()   # differentiable, as torch's
    np.testing.assert_array_equal(jp[1].grad.numpy(), np.arange(12, 17) + rand(5, 18))
    new = rand(jv.shape[0], 19)
    versions = [p._version for p in jp]
    jg.nn.utils.vector_to_parameters(jg.tensor(new), jp)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), tp)
    for a, b, v in zip(jp, tp, versions):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
        assert a.requires_grad and a._version == v
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: builtins.list"):
        jg.nn.utils.vector_to_parameters([1.0], jp)


def test_pad_sequence():
    seqs = [rand((2, 3), 20), rand((4, 3), 21), rand((1, 3), 22)]
    for kw in ({}, {"batch_first": True, "padding_value": -1.0}, {"padding_side": "left"}):
        j = jg.nn.utils.rnn.pad_sequence([jg.tensor(s) for s in seqs], **kw)
        t = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], **kw)
        np.testing.assert_array_equal(j.numpy(), t.numpy())
    back = jg.nn.utils.rnn.unpad_sequence(jg.nn.utils.rnn.pad_sequence([jg.tensor(s) for s in seqs]), [2, 4, 1])
    for a, s in zip(back, seqs):
        np.testing.assert_array_equal(a.numpy(), s)


def test_init_trunc_normal_and_orthogonal():
    w = jg.empty(200, 50)
    jg.nn.init.trunc_normal_(w, mean=0.5, std=2.0, a=-1.0, b=3.0, generator=jg.Generator().manual_seed(0))
    t = torch.nn.init.trunc_normal_(torch.empty(200, 50), mean=0.5, std=2.0, a=-1.0, b=3.0,
                                    generator=torch.Generator().manual_seed(0))
    x = w.numpy()
    assert x.min() >= -1.0 and x.max() <= 3.0
    np.testing.assert_allclose([x.mean(), x.std()], [t.mean().item(), t.std().item()], atol=0.05)   # 10^4 draws
    for shape, gain in (((6, 4), 1.0), ((3, 2, 4), 2.0)):
        q = jg.nn.init.orthogonal_(jg.empty(*shape, dtype=jg.float64), gain=gain).numpy().reshape(shape[0], -1)
        small = q @ q.T if q.shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(small, gain ** 2 * np.eye(min(q.shape)), atol=1e-10)
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions are supported"):
        jg.nn.init.orthogonal_(jg.empty(3))
