"""``Adam`` and ``AdamW`` (decoupled weight decay), with PyTorch's update formulas.

Imports ``_dispatch``, ``grad_mode``, ``ops.creation`` and ``optim.optimizer``.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..runtime._dispatch import Op, call_foreach
from ..autograd.grad_mode import no_grad
from ..ops.creation import zeros, zeros_like
from .optimizer import Optimizer, _scalar_dtype

__all__ = ["Adam", "AdamW"]


def _lerp(a, b, w):
    """``a.lerp_(b, w)`` as PyTorch's CPU kernel computes it."""
    return jnp.where(w < 0.5, a + w * (b - a), b - (b - a) * (1 - w))


def _adam_one(p, g, m, v, vmax, step, s, *, amsgrad, maximize, wd_on, decoupled):
    """One parameter's Adam update; ``s`` holds the dynamic scalars."""
    g = -g if maximize else g
    step = step + 1
    if wd_on:
        if decoupled:
            p = p * s["decay"]                               # param.mul_(1 - lr * weight_decay)
        else:
            g = g + s["wd"] * p                              # grad.add(param, alpha=weight_decay)
    m = _lerp(m, g, s["one_minus_beta1"])                    # exp_avg.lerp_(grad, 1 - beta1)
    v = v * s["beta2"] + s["one_minus_beta2"] * g * g        # exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
    # 1 - beta**step, accurately in the step's precision (PyTorch computes it in double on the host).
    t = step.astype(jnp.promote_types(step.dtype, p.dtype))
    bc1 = -jnp.expm1(t * s["log_beta1"])
    bc2 = -jnp.expm1(t * s["log_beta2"])
    step_size = s["lr"] / bc1
    if amsgrad:
        vmax = jnp.maximum(vmax, v)
    denom = jnp.sqrt(vmax if amsgrad else v) / jnp.sqrt(bc2) + s["eps"]
    p = p + (-step_size).astype(p.dtype) * (m / denom)      # param.addcdiv_(exp_avg, denom, value=-step_size)
    return p, m, v, vmax, step


_SCALARS = ("lr", "beta2", "one_minus_beta1", "one_minus_beta2", "log_beta1", "log_beta2", "eps", "wd", "decay")


def _adam_kernel(*arrays, n, amsgrad, maximize, wd_on, decoupled):
    """One fused Adam step over ``n`` parameters.

    ``arrays``: params, exp_avgs, exp_avg_sqs, [max_exp_avg_sqs], steps (n each),
    grads (n), then the scalars named in ``_SCALARS``.
    """
    groups = 5 if amsgrad else 4
    cols = [arrays[i * n:(i + 1) * n] for i in range(groups + 1)]
    params, ms, vs = cols[0], cols[1], cols[2]
    vmaxs = cols[3] if amsgrad else [None] * n
    steps, grads = cols[groups - 1], cols[groups]
    s = dict(zip(_SCALARS, arrays[(groups + 1) * n:]))
    out = [[] for _ in range(groups)]
    for i in range(n):
        p, m, v, vmax, step = _adam_one(params[i], grads[i], ms[i], vs[i], vmaxs[i], steps[i], s, amsgrad=amsgrad,
                                        maximize=maximize, wd_on=wd_on, decoupled=decoupled)
        for col, value in zip(out, (p, m, v, vmax, step) if amsgrad else (p, m, v, step)):
            col.append(value)
    return tuple(x for col in out for x in col)


ADAM_STEP = Op("adam_step", _adam_kernel, differentiable=False)


def _log(beta: float) -> float:
    return math.log(beta) if beta > 0 else -math.inf


class Adam(Optimizer):
    """Adam (Kingma & Ba), with PyTorch's update rule::

        g = grad (negated if maximize) [+ weight_decay * p]      (AdamW: p *= 1 - lr * weight_decay)
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)   (amsgrad: max of v so far)
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None, decoupled_weight_decay: bool = False):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError(f"{type(self).__name__}(differentiable=True) is not supported by jgrad.")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "amsgrad": amsgrad,
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in (("amsgrad", False), ("maximize", False), ("foreach", None), ("capturable", False),
                               ("differentiable", False), ("decoupled_weight_decay", False), ("fused", None)):
                group.setdefault(key, value)

    def _init_state(self, p, amsgrad):
        state = self.state[p]
        if len(state) == 0:
            state["step"] = zeros((), dtype=_scalar_dtype(), device=p._device)  # a DTensor's: on its mesh
            state["exp_avg"] = zeros_like(p)
            state["exp_avg_sq"] = zeros_like(p)
            if amsgrad:
                state["max_exp_avg_sq"] = zeros_like(p)
        return state

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

    def _scalars(self, group):
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        values = {"lr": lr, "beta2": beta2, "one_minus_beta1": 1 - beta1, "one_minus_beta2": 1 - beta2,
                  "log_beta1": _log(beta1), "log_beta2": _log(beta2), "eps": float(group["eps"]), "wd": wd,
                  "decay": 1 - lr * wd}
        return [values[k] for k in _SCALARS]

    def _run(self, group, params):
        amsgrad = bool(group["amsgrad"])
        states = [self._init_state(p, amsgrad) for p in params]
        keys = ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if amsgrad else []) + ["step"]
        targets = list(params) + [st[k] for k in keys for st in states]
        call_foreach(ADAM_STEP, targets, *[p.grad for p in params], *self._scalars(group), n=len(params),
                     amsgrad=amsgrad, maximize=bool(group["maximize"]), wd_on=group["weight_decay"] != 0,
                     decoupled=bool(group["decoupled_weight_decay"]))


class AdamW(Adam):
    """Adam with decoupled weight decay (``p *= 1 - lr * weight_decay`` before the Adam update)."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            group["decoupled_weight_decay"] = True
