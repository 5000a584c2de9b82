"""The shared machinery of optimizers whose step is one per-parameter formula (RMSprop, Adagrad, Adadelta,
Adamax, NAdam, RAdam): the formula is fused over a group's parameters into one XLA kernel
(``_dispatch.call_foreach``), as ``SGD`` and ``Adam`` are, with every hyperparameter a dynamic scalar so a
learning-rate schedule never recompiles.

A subclass names its state tensors in PyTorch's order (``_state_keys``), creates them (``_new_state``),
lists its scalars (``_SCALARS`` and ``_scalars``) and its static switches (``_flags``), and gives the
per-parameter formula as ``_update(p, g, state, s, **flags) -> (p, state)``, a jax function that
``fused_op`` turns into one ``Op``. Step-dependent factors (bias corrections) are computed inside the
kernel from the ``step`` tensor, in float64 as PyTorch computes them on the host.

Imports ``_dispatch``, ``grad_mode`` and ``optim.optimizer``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..runtime._dispatch import Op, call_foreach
from ..autograd.grad_mode import no_grad
from .optimizer import Optimizer

__all__ = ["FusedOptimizer", "fused_op", "check_hyperparameters", "check_betas", "f64", "one_minus_pow", "lerp"]


def lerp(a, b, w):
    """``a.lerp_(b, w)`` as PyTorch's CPU kernel computes it."""
    return jnp.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


def f64(step):
    """The step count in float64: step-dependent factors are computed in double, as PyTorch computes them on
    the host (``1 - 0.999**t`` loses half its digits in float32), and cast to the parameter's dtype where they
    meet tensors. The kernels run with JAX's 64-bit types on (the x64 rule, docs/porting.md)."""
    return step.astype(jnp.float64)


def one_minus_pow(log_beta, t):
    """``1 - beta**t`` from ``log(beta)``, accurate where ``beta**t`` is close to 1."""
    return -jnp.expm1(t * log_beta)


def fused_op(name, update, scalar_names):
    """An ``Op`` applying ``update`` to ``n`` parameters at once.

    Its arrays are params[n], then each state key's tensors[n] (in ``keys`` order), grads[n], then the
    scalars named in ``scalar_names``; it returns the new params and state tensors in the same order.
    """
    def kernel(*arrays, n, keys, **flags):
        k = len(keys)
        cols = [arrays[i * n:(i + 1) * n] for i in range(k + 2)]
        s = dict(zip(scalar_names, arrays[(k + 2) * n:]))
        out = [[] for _ in range(k + 1)]
        for i in range(n):
            state = {key: cols[1 + j][i] for j, key in enumerate(keys)}
            p, state = update(cols[0][i], cols[k + 1][i], state, s, **flags)
            out[0].append(p)
            for j, key in enumerate(keys):
                out[1 + j].append(state[key])
        return tuple(x for col in out for x in col)

    return Op(name, kernel, differentiable=False)


def check_hyperparameters(*checks):
    """PyTorch's constructor checks, in its order: each ``(label, value)`` must be >= 0 (``Invalid <label>: <v>``)."""
    for label, value in checks:
        if not 0.0 <= value:
            raise ValueError(f"Invalid {label}: {value}")


def check_betas(betas):
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


class FusedOptimizer(Optimizer):
    """Base of the optimizers whose ``step`` is ``_update`` fused over each group and device."""

    _op: Op
    _SCALARS: tuple = ()
    _SETSTATE_DEFAULTS: tuple = (("foreach", None), ("maximize", False), ("differentiable", False))

    def __init__(self, params, defaults):
        if defaults.get("differentiable"):
            raise NotImplementedError(f"{type(self).__name__}(differentiable=True) is not supported by jgrad.")
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in self._SETSTATE_DEFAULTS:
                group.setdefault(key, value)

    def _flags(self, group) -> dict:
        return {"maximize": bool(group["maximize"]), "wd_on": group["weight_decay"] != 0}

    def step(self, closure=None):
        """Update every parameter that has a gradient; returns ``closure()``'s loss if given."""
        loss = self._closure_loss(closure)
        self._check_grads()
        with no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                for bucket in self._by_device(params):
                    self._run(group, bucket)
        return loss

    def _run(self, group, params):
        keys = self._state_keys(group)
        states = []
        for p in params:
            state = self.state[p]
            if len(state) == 0:
                state.update(self._new_state(p, group))
            states.append(state)
        targets = list(params) + [st[k] for k in keys for st in states]
        values = self._scalars(group)
        call_foreach(self._op, targets, *[p.grad for p in params], *[float(values[k]) for k in self._SCALARS],
                     n=len(params), keys=keys, **self._flags(group))
