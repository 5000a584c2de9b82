"""Helpers of the math-namespace tests (linalg, fft, special, complex): run a jgrad function and its PyTorch
counterpart on the same NumPy data, real or complex, and compare every output and the gradient of every
floating or complex input under the same random real loss. Never compares jgrad with itself."""
from __future__ import annotations

import numpy as np
import torch

import jgrad as jg


def _np(t):
    return np.asarray(t.detach().resolve_conj().numpy()) if isinstance(t, torch.Tensor) else np.asarray(
        t.detach().numpy())


def _outs(out):
    return [out] if isinstance(out, (jg.Tensor, torch.Tensor)) else list(out)


def _inexact(a):
    return isinstance(a, np.ndarray) and a.dtype.kind in "fc"


def _weighted_sum(*xs):
    n = len(xs) // 2
    return sum((o * c).sum() for o, c in zip(xs[:n], xs[n:]))


_jg_weighted_sum = jg.ops.from_jax(_weighted_sum)  # one kernel for the whole loss (fewer compiles than op by op)


def _loss(outs, cots, lib):
    outs = [lib.view_as_real(o.resolve_conj()) if o.dtype.is_complex else o for o in outs]
    if lib is jg:
        return _jg_weighted_sum(*outs, *[jg.tensor(c) for c in cots])
    return sum((o * torch.tensor(c)).sum() for o, c in zip(outs, cots))


def compare(jg_fn, torch_fn, arrays, *, rtol=1e-7, atol=1e-9, grad=True, seed=1, what=""):
    """Outputs (shape, dtype, values) and input gradients of ``jg_fn`` against ``torch_fn``. A complex output
    enters the loss through ``view_as_real``, so the gradients compared are PyTorch's conjugate Wirtinger ones."""
    diff = [k for k, a in enumerate(arrays) if grad and _inexact(a)]
    jin = [jg.tensor(a, requires_grad=k in diff) if isinstance(a, np.ndarray) else a for k, a in enumerate(arrays)]
    tin = [torch.tensor(a, requires_grad=k in diff) if isinstance(a, np.ndarray) else a for k, a in enumerate(arrays)]
    jout, tout = _outs(jg_fn(*jin)), _outs(torch_fn(*tin))
    assert len(jout) == len(tout), f"{what}: {len(jout)} outputs, torch has {len(tout)}"
    for i, (j, t) in enumerate(zip(jout, tout)):
        assert tuple(j.shape) == tuple(t.shape), f"{what}: output {i} shape {tuple(j.shape)} != {tuple(t.shape)}"
        assert j.dtype.name == str(t.dtype).split(".")[-1], f"{what}: output {i} dtype {j.dtype} != {t.dtype}"
        np.testing.assert_allclose(_np(j), _np(t), rtol=rtol, atol=atol, err_msg=f"{what}: output {i}")
    pairs = [(j, t) for j, t in zip(jout, tout)
             if t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)]
    if not diff or not pairs:
        return jout
    rng = np.random.default_rng(seed)
    cots = [rng.standard_normal(tuple(t.shape) + ((2,) if t.dtype.is_complex else ())).astype(
        _np(t).real.dtype) for _, t in pairs]
    gj = jg.autograd.grad(_loss([j for j, _ in pairs], cots, jg), [jin[k] for k in diff], allow_unused=True)
    gt = torch.autograd.grad(_loss([t for _, t in pairs], cots, torch), [tin[k] for k in diff], allow_unused=True)
    for k, a, b in zip(diff, gj, gt):
        a = np.zeros(arrays[k].shape) if a is None else _np(a)
        b = np.zeros(arrays[k].shape) if b is None else _np(b)
        np.testing.assert_allclose(a, b, rtol=rtol * 100, atol=atol * 100, err_msg=f"{what}: gradient of input {k}")
    return jout


def rand(shape, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def spd(shape, seed=0, dtype=np.float64):
    """Symmetric (Hermitian) positive-definite matrices."""
    a = rand(shape, seed, dtype)
    return a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])
