"""``RMSprop``, with PyTorch's update formula (centered variant, momentum, weight decay).

Imports ``ops.creation`` and ``optim._fused``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.creation import zeros, zeros_like
from ._fused import FusedOptimizer, check_hyperparameters, fused_op, lerp
from .optimizer import _scalar_dtype

__all__ = ["RMSprop"]


def _update(p, g, st, s, *, maximize, wd_on, momentum_on, centered):
    g = -g if maximize else g
    st["step"] = st["step"] + 1
    if wd_on:
        g = g + s["weight_decay"] * p                                    # grad.add(param, alpha=weight_decay)
    sq = st["square_avg"] * s["alpha"] + s["one_minus_alpha"] * g * g    # mul_(alpha).addcmul_(g, g, 1 - alpha)
    st["square_avg"] = sq
    if centered:
        ga = lerp(st["grad_avg"], g, s["one_minus_alpha"])
        st["grad_avg"] = ga
        avg = jnp.sqrt(sq + (-1.0 * ga) * ga) + s["eps"]                # square_avg.addcmul(ga, ga, value=-1).sqrt_()
    else:
        avg = jnp.sqrt(sq) + s["eps"]
    if momentum_on:
        buf = st["momentum_buffer"] * s["momentum"] + g / avg           # buf.mul_(momentum).addcdiv_(grad, avg)
        st["momentum_buffer"] = buf
        return p + s["neg_lr"] * buf, st
    return p + s["neg_lr"] * (g / avg), st                              # param.addcdiv_(grad, avg, value=-lr)


_SCALARS = ("neg_lr", "alpha", "one_minus_alpha", "eps", "weight_decay", "momentum")
RMSPROP_STEP = fused_op("rmsprop_step", _update, _SCALARS)


class RMSprop(FusedOptimizer):
    """RMSprop (Hinton), with PyTorch's update rule::

        g = grad (negated if maximize) + weight_decay * p
        v = alpha * v + (1 - alpha) * g * g
        avg = sqrt(v - g_avg**2) + eps, g_avg = lerp(g_avg, g, 1 - alpha)  (centered)  |  sqrt(v) + eps
        buf = momentum * buf + g / avg;  p -= lr * buf     (momentum > 0)  |  p -= lr * g / avg
    """

    _op = RMSPROP_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("momentum", 0), ("centered", False), ("foreach", None), ("maximize", False),
                          ("differentiable", False), ("capturable", False))

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        check_hyperparameters(("learning rate", lr), ("epsilon value", eps), ("momentum value", momentum),
                              ("weight_decay value", weight_decay), ("alpha value", alpha))
        super().__init__(params, {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps, "centered": centered,
                                  "weight_decay": weight_decay, "capturable": capturable, "foreach": foreach,
                                  "maximize": maximize, "differentiable": differentiable})

    def _state_keys(self, group):
        return (("step", "square_avg") + (("momentum_buffer",) if group["momentum"] > 0 else ())
                + (("grad_avg",) if group["centered"] else ()))

    def _new_state(self, p, group):
        state = {"step": zeros((), dtype=_scalar_dtype(), device=p._device), "square_avg": zeros_like(p)}
        if group["momentum"] > 0:
            state["momentum_buffer"] = zeros_like(p)
        if group["centered"]:
            state["grad_avg"] = zeros_like(p)
        return state

    def _scalars(self, group):
        alpha = float(group["alpha"])
        return {"neg_lr": -float(group["lr"]), "alpha": alpha, "one_minus_alpha": 1 - alpha, "eps": group["eps"],
                "weight_decay": group["weight_decay"], "momentum": group["momentum"]}

    def _flags(self, group):
        return {"maximize": bool(group["maximize"]), "wd_on": group["weight_decay"] != 0,
                "momentum_on": group["momentum"] > 0, "centered": bool(group["centered"])}
