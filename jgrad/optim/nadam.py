"""``NAdam`` (Adam with Nesterov momentum and momentum decay), with PyTorch's update formula.

Imports ``ops.creation``, ``optim._fused`` and ``optim.adamax`` (``log_beta``).
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.creation import ones, zeros, zeros_like
from ._fused import FusedOptimizer, check_betas, check_hyperparameters, f64, fused_op, lerp, one_minus_pow
from .adamax import log_beta
from .optimizer import _scalar_dtype

__all__ = ["NAdam"]


def _update(p, g, st, s, *, maximize, wd_on, decoupled):
    g = -g if maximize else g
    step = st["step"] + 1
    st["step"] = step
    t = f64(step)                                                       # PyTorch: the step as a host double
    bc2 = one_minus_pow(s["log_beta2"], t)
    if wd_on:
        if decoupled:
            p = p * s["decay"]                                          # param.mul_(1 - lr * weight_decay)
        else:
            g = g + s["weight_decay"] * p
    mu = s["beta1"] * (1.0 - 0.5 * jnp.power(0.96, t * s["momentum_decay"]))
    mu_next = s["beta1"] * (1.0 - 0.5 * jnp.power(0.96, (t + 1) * s["momentum_decay"]))
    mp = st["mu_product"] * mu.astype(st["mu_product"].dtype)          # mu_product *= mu (in its own dtype)
    st["mu_product"] = mp
    m = lerp(st["exp_avg"], g, s["one_minus_beta1"])
    v = st["exp_avg_sq"] * s["beta2"] + s["one_minus_beta2"] * g * g
    st["exp_avg"], st["exp_avg_sq"] = m, v
    denom = jnp.sqrt(v / bc2.astype(p.dtype)) + s["eps"]
    mp = mp.astype(jnp.float64)
    c_grad = -s["lr"] * (1.0 - mu) / (1.0 - mp)
    c_avg = -s["lr"] * mu_next / (1.0 - mp * mu_next)
    p = p + c_grad.astype(p.dtype) * (g / denom)                        # param.addcdiv_(grad, denom, value=...)
    return p + c_avg.astype(p.dtype) * (m / denom), st                  # param.addcdiv_(exp_avg, denom, value=...)


_SCALARS = ("lr", "beta1", "one_minus_beta1", "beta2", "one_minus_beta2", "log_beta2", "eps", "weight_decay",
            "decay", "momentum_decay")
NADAM_STEP = fused_op("nadam_step", _update, _SCALARS)


class NAdam(FusedOptimizer):
    """NAdam (Dozat), with PyTorch's update rule::

        g = grad (negated if maximize) [+ weight_decay * p]   (decoupled_weight_decay: p *= 1 - lr * weight_decay)
        mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay));  mu_product *= mu_t
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g;  d = sqrt(v / (1 - beta2**t)) + eps
        p -= lr * (1 - mu_t) / (1 - mu_product) * g / d + lr * mu_{t+1} / (1 - mu_product * mu_{t+1}) * m / d
    """

    _op = NADAM_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("maximize", False), ("foreach", None), ("capturable", False), ("differentiable", False),
                          ("decoupled_weight_decay", False))

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        check_hyperparameters(("learning rate", lr), ("epsilon value", eps))
        check_betas(betas)
        check_hyperparameters(("weight_decay value", weight_decay), ("momentum_decay value", momentum_decay))
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                                  "momentum_decay": momentum_decay, "decoupled_weight_decay": decoupled_weight_decay,
                                  "maximize": maximize, "foreach": foreach, "capturable": capturable,
                                  "differentiable": differentiable})

    def _state_keys(self, group):
        return ("step", "mu_product", "exp_avg", "exp_avg_sq")

    def _new_state(self, p, group):
        return {"step": zeros((), dtype=_scalar_dtype(), device=p._device),
                "mu_product": ones((), dtype=_scalar_dtype(), device=p._device),
                "exp_avg": zeros_like(p), "exp_avg_sq": zeros_like(p)}

    def _scalars(self, group):
        lr, wd = float(group["lr"]), float(group["weight_decay"])
        beta1, beta2 = (float(b) for b in group["betas"])
        return {"lr": lr, "beta1": beta1, "one_minus_beta1": 1 - beta1, "beta2": beta2, "one_minus_beta2": 1 - beta2,
                "log_beta2": log_beta(beta2), "eps": group["eps"], "weight_decay": wd, "decay": 1 - lr * wd,
                "momentum_decay": group["momentum_decay"]}

    def _flags(self, group):
        return {"maximize": bool(group["maximize"]), "wd_on": group["weight_decay"] != 0,
                "decoupled": bool(group["decoupled_weight_decay"])}
