"""``RAdam`` (rectified Adam), with PyTorch's update formula.

Imports ``ops.creation``, ``optim._fused`` and ``optim.adamax`` (``log_beta``).
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.creation import zeros, zeros_like
from ._fused import FusedOptimizer, check_betas, check_hyperparameters, f64, fused_op, lerp, one_minus_pow
from .adamax import log_beta
from .optimizer import _scalar_dtype

__all__ = ["RAdam"]


def _update(p, g, st, s, *, maximize, wd_on, decoupled):
    g = -g if maximize else g
    step = st["step"] + 1
    st["step"] = step
    if wd_on:
        if decoupled:
            p = p * s["decay"]
        else:
            g = g + s["weight_decay"] * p
    m = lerp(st["exp_avg"], g, s["one_minus_beta1"])
    v = st["exp_avg_sq"] * s["beta2"] + s["one_minus_beta2"] * g * g
    st["exp_avg"], st["exp_avg_sq"] = m, v
    # PyTorch computes these on the host, in double, and branches on rho_t there.
    t = f64(step)
    bc1 = one_minus_pow(s["log_beta1"], t)
    bc2 = one_minus_pow(s["log_beta2"], t)
    rho_inf = s["rho_inf"]
    rho_t = rho_inf - 2 * t * jnp.exp(t * s["log_beta2"]) / bc2
    rect = jnp.sqrt(jnp.maximum((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t), 0))
    avg = m / bc1.astype(p.dtype) * s["lr"]                             # exp_avg / bias_correction1 * lr
    adaptive = jnp.sqrt(bc2).astype(p.dtype) / (jnp.sqrt(v) + s["eps"])  # bias_correction2**0.5 / (sqrt(v) + eps)
    update = jnp.where(rho_t > 5.0, avg * adaptive * rect.astype(p.dtype), avg)
    return p - update, st


_SCALARS = ("lr", "one_minus_beta1", "beta2", "one_minus_beta2", "log_beta1", "log_beta2", "rho_inf", "eps",
            "weight_decay", "decay")
RADAM_STEP = fused_op("radam_step", _update, _SCALARS)


class RAdam(FusedOptimizer):
    """RAdam (Liu et al.), with PyTorch's update rule::

        g = grad (negated if maximize) [+ weight_decay * p]   (decoupled_weight_decay: p *= 1 - lr * weight_decay)
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g;  m_hat = m / (1 - beta1**t)
        rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t),  rho_inf = 2 / (1 - beta2) - 1
        p -= lr * m_hat * r_t * sqrt(1 - beta2**t) / (sqrt(v) + eps)   (rho_t > 5)  |  p -= lr * m_hat
    """

    _op = RADAM_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("foreach", None), ("maximize", False), ("differentiable", False),
                          ("decoupled_weight_decay", False), ("capturable", False))

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        check_hyperparameters(("learning rate", lr), ("epsilon value", eps))
        check_betas(betas)
        check_hyperparameters(("weight_decay value", weight_decay))
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "decoupled_weight_decay": decoupled_weight_decay, "differentiable": differentiable})

    def _state_keys(self, group):
        return ("step", "exp_avg", "exp_avg_sq")

    def _new_state(self, p, group):
        return {"step": zeros((), dtype=_scalar_dtype(), device=p._device), "exp_avg": zeros_like(p),
                "exp_avg_sq": zeros_like(p)}

    def _scalars(self, group):
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        return {"lr": lr, "one_minus_beta1": 1 - beta1, "beta2": beta2, "one_minus_beta2": 1 - beta2,
                "log_beta1": log_beta(beta1), "log_beta2": log_beta(beta2), "rho_inf": 2 / (1 - beta2) - 1,
                "eps": group["eps"], "weight_decay": wd, "decay": 1 - lr * wd}

    def _flags(self, group):
        return {"maximize": bool(group["maximize"]), "wd_on": group["weight_decay"] != 0,
                "decoupled": bool(group["decoupled_weight_decay"])}
