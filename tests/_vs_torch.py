"""Run a jgrad function and its PyTorch counterpart on the same NumPy data; compare every output and
the gradient of every floating input under the same random cotangents. Never compares jgrad with itself."""
from __future__ import annotations

import numpy as np
import torch

import jgrad as jg


def _outputs(out):
    if isinstance(out, (jg.Tensor, torch.Tensor)):
        return [out]
    return list(out)


def _np(t):
    return np.asarray(t.detach().numpy()) if isinstance(t, (jg.Tensor, torch.Tensor)) else np.asarray(t)


def rand(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def compare(jg_fn, torch_fn, arrays, *, rtol=1e-7, atol=1e-9, grad=True, seed=1, what=""):
    """``jg_fn(*tensors)`` against ``torch_fn(*tensors)``; ``arrays`` are NumPy arrays (tensor inputs) and
    other values (passed as they are). Returns the jgrad outputs."""
    jin = [jg.tensor(a, requires_grad=grad and a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
           for a in arrays]
    tin = [torch.tensor(a, requires_grad=grad and a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
           for a in arrays]
    jout, tout = _outputs(jg_fn(*jin)), _outputs(torch_fn(*tin))
    assert len(jout) == len(tout), f"{what}: {len(jout)} outputs, torch has {len(tout)}"
    for i, (j, t) in enumerate(zip(jout, tout)):
        assert tuple(j.shape) == tuple(t.shape), f"{what}: output {i} shape {tuple(j.shape)} != {tuple(t.shape)}"
        assert str(j.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], f"{what}: output {i} dtype " \
            f"{j.dtype} != {t.dtype}"
        if t.dtype.is_floating_point:
            np.testing.assert_allclose(_np(j), _np(t), rtol=rtol, atol=atol, err_msg=f"{what}: output {i}")
        else:
            np.testing.assert_array_equal(_np(j), _np(t), err_msg=f"{what}: output {i}")
    diff = [k for k, a in enumerate(arrays) if grad and isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    pairs = [(j, t) for j, t in zip(jout, tout) if t.dtype.is_floating_point and t.requires_grad]
    if not diff or not pairs:
        return jout
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(tuple(t.shape)).astype(_np(t).dtype) for _, t in pairs]
    jl = sum((j * jg.tensor(c)).sum() for (j, _), c in zip(pairs, cots))
    tl = sum((t * torch.tensor(c)).sum() for (_, t), c in zip(pairs, cots))
    jg_grads = jg.autograd.grad(jl, [jin[k] for k in diff], allow_unused=True)
    t_grads = torch.autograd.grad(tl, [tin[k] for k in diff], allow_unused=True)
    for k, gj, gt in zip(diff, jg_grads, t_grads):
        gj = np.zeros(arrays[k].shape) if gj is None else _np(gj)
        gt = np.zeros(arrays[k].shape) if gt is None else _np(gt)
        np.testing.assert_allclose(gj, gt, rtol=rtol, atol=atol, err_msg=f"{what}: gradient of input {k}")
    return jout


def same_error(jg_call, torch_call, exc=Exception):
    """Both raise; jgrad's message is PyTorch's (returned)."""
    try:
        torch_call()
    except exc as e:
        expected, kind = str(e), type(e).__name__
    else:
        raise AssertionError("torch did not raise")
    try:
        jg_call()
    except exc as e:
        assert str(e) == expected, f"jgrad: {e!s}\ntorch: {expected}"
        assert type(e).__name__ == kind, f"jgrad raised {type(e).__name__}, torch {kind}"
        return expected
    raise AssertionError(f"jgrad did not raise (torch: {expected})")
