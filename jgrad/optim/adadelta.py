"""``Adadelta``, with PyTorch's update formula.

Imports ``ops.creation`` and ``optim._fused``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.creation import zeros, zeros_like
from ._fused import FusedOptimizer, check_hyperparameters, fused_op
from .optimizer import _scalar_dtype

__all__ = ["Adadelta"]


def _update(p, g, st, s, *, maximize, wd_on):
    g = -g if maximize else g
    st["step"] = st["step"] + 1
    if wd_on:
        g = g + s["weight_decay"] * p
    sq = st["square_avg"] * s["rho"] + s["one_minus_rho"] * g * g      # square_avg.mul_(rho).addcmul_(g, g, 1 - rho)
    std = jnp.sqrt(sq + s["eps"])
    delta = jnp.sqrt(st["acc_delta"] + s["eps"]) / std * g               # acc_delta.add(eps).sqrt_().div_(std).mul_(g)
    st["square_avg"] = sq
    st["acc_delta"] = st["acc_delta"] * s["rho"] + s["one_minus_rho"] * delta * delta
    return p + s["neg_lr"] * delta, st


_SCALARS = ("neg_lr", "rho", "one_minus_rho", "eps", "weight_decay")
ADADELTA_STEP = fused_op("adadelta_step", _update, _SCALARS)


class Adadelta(FusedOptimizer):
    """Adadelta (Zeiler), with PyTorch's update rule::

        g = grad (negated if maximize) + weight_decay * p
        v = rho * v + (1 - rho) * g * g
        delta = sqrt(u + eps) / sqrt(v + eps) * g;  u = rho * u + (1 - rho) * delta * delta
        p -= lr * delta
    """

    _op = ADADELTA_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("foreach", None), ("maximize", False), ("differentiable", False), ("capturable", False))

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        check_hyperparameters(("learning rate", lr))
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_hyperparameters(("epsilon value", eps), ("weight_decay value", weight_decay))
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                                  "maximize": maximize, "capturable": capturable, "foreach": foreach,
                                  "differentiable": differentiable})

    def _state_keys(self, group):
        return ("step", "square_avg", "acc_delta")

    def _new_state(self, p, group):
        return {"step": zeros((), dtype=_scalar_dtype(), device=p._device), "square_avg": zeros_like(p),
                "acc_delta": zeros_like(p)}

    def _scalars(self, group):
        rho = float(group["rho"])
        return {"neg_lr": -float(group["lr"]), "rho": rho, "one_minus_rho": 1 - rho, "eps": group["eps"],
                "weight_decay": group["weight_decay"]}
