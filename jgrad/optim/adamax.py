"""``Adamax`` (Adam with the infinity norm), with PyTorch's update formula.

Imports ``ops.creation`` and ``optim._fused``.
"""
from __future__ import annotations

import math

import jax.numpy as jnp

from ..ops.creation import zeros, zeros_like
from ._fused import FusedOptimizer, check_betas, check_hyperparameters, f64, fused_op, lerp, one_minus_pow
from .optimizer import _scalar_dtype

__all__ = ["Adamax"]


def _update(p, g, st, s, *, maximize, wd_on):
    g = -g if maximize else g
    step = st["step"] + 1
    st["step"] = step
    if wd_on:
        g = g + s["weight_decay"] * p
    m = lerp(st["exp_avg"], g, s["one_minus_beta1"])                   # exp_avg.lerp_(grad, 1 - beta1)
    u = jnp.maximum(st["exp_inf"] * s["beta2"], jnp.abs(g) + s["eps"])  # max(exp_inf * beta2, |g| + eps)
    st["exp_avg"], st["exp_inf"] = m, u
    clr = s["lr"] / one_minus_pow(s["log_beta1"], f64(step))           # lr / (1 - beta1**t), on the host in PyTorch
    return p + (-clr).astype(p.dtype) * (m / u), st                    # param.addcdiv_(exp_avg, exp_inf, value=-clr)


_SCALARS = ("lr", "one_minus_beta1", "beta2", "log_beta1", "eps", "weight_decay")
ADAMAX_STEP = fused_op("adamax_step", _update, _SCALARS)


def log_beta(beta: float) -> float:
    return math.log(beta) if beta > 0 else -math.inf


class Adamax(FusedOptimizer):
    """Adamax (Kingma & Ba), with PyTorch's update rule::

        g = grad (negated if maximize) + weight_decay * p
        m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
        p -= lr / (1 - beta1**t) * m / u
    """

    _op = ADAMAX_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("foreach", None), ("maximize", False), ("differentiable", False), ("capturable", False))

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        check_hyperparameters(("learning rate", lr), ("epsilon value", eps))
        check_betas(betas)
        check_hyperparameters(("weight_decay value", weight_decay))
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                                  "capturable": capturable})

    def _state_keys(self, group):
        return ("step", "exp_avg", "exp_inf")

    def _new_state(self, p, group):
        return {"step": zeros((), dtype=_scalar_dtype(), device=p._device), "exp_avg": zeros_like(p),
                "exp_inf": zeros_like(p)}

    def _scalars(self, group):
        beta1, beta2 = (float(b) for b in group["betas"])
        return {"lr": group["lr"], "one_minus_beta1": 1 - beta1, "beta2": beta2, "log_beta1": log_beta(beta1),
                "eps": group["eps"], "weight_decay": group["weight_decay"]}
