"""Finite-difference checks of jgrad's gradients (``torch.autograd.gradcheck``).

Imports ``_dtype`` (the x64 scope: float64 inputs stay float64 without JAX_ENABLE_X64), ``_tensor`` and
``grad_mode``; ``jgrad.autograd.grad`` at the call (the package imports this
module).
"""
from __future__ import annotations

import warnings

import numpy as np

from ..core._dtype import x64_scope
from ..core._tensor import Tensor
from .grad_mode import enable_grad, no_grad


class GradcheckError(RuntimeError):
    """Raised by gradcheck when analytical and numerical Jacobians disagree."""


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _eval(func, inputs):
    with no_grad():
        return tuple(np.array(o._value, dtype=np.complex128 if o.dtype.is_complex else np.float64)
                     for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor))


def _on_device(arr, dtype, device):
    """A tensor of ``arr`` (a copy, of ``dtype``) on ``device``. Inside jgrad's x64 scope: without it JAX would
    make a float64 array float32 and the finite differences would lose their precision."""
    from jax import device_put
    with x64_scope():
        # A copy: device_put may alias a NumPy buffer on the CPU, and the caller keeps perturbing
        # `arr` in place (an output that is the input itself would otherwise see both steps).
        return Tensor._make(device_put(np.array(arr, dtype, copy=True), device.jax_device), device)


def _replace(inputs, i, arr):
    out = list(inputs)
    t = inputs[i]
    out[i] = _on_device(arr, t.dtype.np, t.device)
    return tuple(out)


def _numerical_jacobians(func, inputs, diff_idx, eps):
    jacs = {}
    for i in diff_idx:
        base = np.array(inputs[i]._value)
        flat = base.reshape(-1).copy()
        cols = []
        for j in range(flat.size):
            orig = flat[j]
            flat[j] = orig + eps
            plus = _eval(func, _replace(inputs, i, flat.reshape(base.shape)))
            flat[j] = orig - eps
            minus = _eval(func, _replace(inputs, i, flat.reshape(base.shape)))
            flat[j] = orig
            cols.append([(p - m).reshape(-1) / (2 * eps) for p, m in zip(plus, minus)])
        for o in range(len(cols[0]) if cols else 0):
            jacs[(o, i)] = np.stack([c[o] for c in cols], axis=1) if cols else np.zeros((0, 0))
    return jacs


def _analytical_jacobians(func, inputs, diff_idx):
    from . import grad
    outputs = [o for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor)]
    jacs = {}
    for oi, out in enumerate(outputs):
        n_out = out.numel()
        rows = {i: [] for i in diff_idx}
        for k in range(n_out):
            onehot = np.zeros(n_out, out.dtype.np)
            onehot[k] = 1
            g = _on_device(onehot.reshape(out.shape), out.dtype.np, out.device)
            if not out._req:
                grads = [None] * len(diff_idx)
            else:
                grads = grad(out, [inputs[i] for i in diff_idx], g, retain_graph=True, allow_unused=True)
            for i, gi in zip(diff_idx, grads):
                rows[i].append(np.zeros(inputs[i].numel()) if gi is None else np.asarray(gi._value).reshape(-1))
        for i in diff_idx:
            jacs[(oi, i)] = np.stack(rows[i], axis=0) if rows[i] else np.zeros((0, inputs[i].numel()))
    return jacs


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, **_ignored) -> bool:
    """Compare the Jacobians from backward with central finite differences.

    Use float64 inputs (they work without ``JAX_ENABLE_X64``: jgrad's x64 scope); returns True or raises
    ``GradcheckError`` naming the output, the input and both Jacobians.
    """
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t._req]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of the them "
                         "have requires_grad=True.")
    for i in diff_idx:
        if inputs[i].dtype.name not in ("float64", "complex128"):
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point or complex. "
                          "This check will likely fail if all the inputs are not of double precision floating "
                          "point or complex. ", UserWarning, stacklevel=2)
    numerical = _numerical_jacobians(func, inputs, diff_idx, eps)
    analytical = _analytical_jacobians(func, inputs, diff_idx)
    for (o, i), a in analytical.items():
        n = numerical.get((o, i))
        if n is None:
            continue
        if a.shape != n.shape or not np.allclose(a, n, rtol=rtol, atol=atol):
            if not raise_exception:
                return False
            raise GradcheckError(f"Jacobian mismatch for output {o} with respect to input {i},\n"
                                 f"numerical:{n}\nanalytical:{a}\n")
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
                  **_ignored) -> bool:
    """gradcheck of the first derivative (through ``create_graph=True``)."""
    from . import grad
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t._req]
    outs = [o for o in _as_tuple(func(*inputs)) if isinstance(o, Tensor)]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = [_on_device(rng.standard_normal(o.shape), o.dtype.np, o.device) for o in outs]
    grad_outputs = _as_tuple(grad_outputs)

    def first(*args):
        # gradcheck evaluates this under no_grad on perturbed copies that do not require grad;
        # like PyTorch's new_func, restore requires_grad and compute the first derivative
        # with grad mode on (create_graph), so it can be evaluated and differentiated.
        with enable_grad():
            args = tuple(a.detach().requires_grad_(True) if i in diff_idx and not a._req else a
                         for i, a in enumerate(args))
            res = _as_tuple(func(*args))
            res = [o for o in res if isinstance(o, Tensor)]
            d = [args[i] for i in diff_idx]
            return grad(res, d, grad_outputs, create_graph=True, allow_unused=True, materialize_grads=True)

    return gradcheck(first, inputs, eps=eps, atol=atol, rtol=rtol, raise_exception=raise_exception)
