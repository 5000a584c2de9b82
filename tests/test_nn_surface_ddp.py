"""Issue 30: DistributedDataParallel as PyTorch programs write it, with a plain target (``mse_loss(ddp(x), y)``),
on the four virtual CPU devices of tests/conftest.py: the loss and gradients equal single-device training."""
import gc

import numpy as np
import pytest

import jgrad as jg
from jgrad import nn
from jgrad.distributed import init_device_mesh
from jgrad.distributed.tensor import DTensor, Replicate
from jgrad.nn.parallel import DistributedDataParallel as DDP


def _mlp():
    jg.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


@pytest.mark.one_execution_mode  # the join is in the device resolution both modes share (checked by hand in both)
@pytest.mark.cpu_only("a mesh of the 4 virtual CPU devices fed tensors made on the default device")
def test_ddp_with_plain_targets_equals_single_device():
    mesh = init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    rng = np.random.default_rng(0)
    x = jg.tensor(rng.standard_normal((16, 6)).astype(np.float32))
    y = jg.tensor(rng.standard_normal((16, 3)).astype(np.float32))
    labels = jg.tensor(rng.integers(0, 3, 16))
    weight = jg.tensor([1.0, 2.0, 3.0])  # a constant: replicated
    ref, ddp = _mlp(), DDP(_mlp(), device_mesh=mesh)
    losses, seen = [], []
    for model in (ref, ddp):
        out = model(x)
        loss = nn.functional.mse_loss(out, y) + nn.functional.cross_entropy(out, labels, weight=weight) \
            + ((out - y) ** 2 * weight).mean()
        loss.backward()
        losses.append(loss.item())
        pred = out.argmax(dim=1, keepdim=True)  # the accuracy idiom of PyTorch's examples
        seen.append((pred.eq(labels.view_as(pred)).sum().item(), repr(out), out.device, tuple(out.shape)))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    assert seen[1] == seen[0]  # a plain-looking output: it prints as the single-device one
    assert repr(loss).startswith("tensor(") and isinstance(out, DTensor)
    for p, q in zip(ref.parameters(), ddp.parameters()):
        assert isinstance(q.grad, DTensor) and q.grad.placements == (Replicate(),)
        np.testing.assert_allclose(q.grad.full_tensor().numpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(RuntimeError, match="got mixed torch.Tensor and DTensor"):
        nn.functional.mse_loss(ddp(x), y.clone().requires_grad_())  # its gradient would be a DTensor
    out = ddp(x).detach()
    del ddp, model
    gc.collect()
    with pytest.raises(RuntimeError, match="got mixed torch.Tensor and DTensor"):
        out - y  # no DDP over the mesh any more: PyTorch's DTensor rule again
    assert repr(out).startswith("DTensor(local_tensor=tensor(")
