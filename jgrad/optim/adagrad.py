"""``Adagrad``, with PyTorch's update formula (learning-rate decay, initial accumulator value, weight decay).

Imports ``ops.creation`` and ``optim._fused``.
"""
from __future__ import annotations

import jax.numpy as jnp

from ..ops.creation import full_like, zeros
from ._fused import FusedOptimizer, check_hyperparameters, f64, fused_op
from .optimizer import _scalar_dtype

__all__ = ["Adagrad"]


def _update(p, g, st, s, *, maximize, wd_on):
    g = -g if maximize else g
    step = st["step"] + 1
    st["step"] = step
    if wd_on:
        g = g + s["weight_decay"] * p
    clr = s["lr"] / (1 + (f64(step) - 1) * s["lr_decay"])              # computed on the host in PyTorch
    acc = st["sum"] + 1.0 * g * g                                       # state_sum.addcmul_(grad, grad, value=1)
    st["sum"] = acc
    std = jnp.sqrt(acc) + s["eps"]
    return p + (-clr).astype(p.dtype) * (g / std), st                  # param.addcdiv_(grad, std, value=-clr)


_SCALARS = ("lr", "lr_decay", "eps", "weight_decay")
ADAGRAD_STEP = fused_op("adagrad_step", _update, _SCALARS)


class Adagrad(FusedOptimizer):
    """Adagrad (Duchi et al.), with PyTorch's update rule::

        g = grad (negated if maximize) + weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        sum += g * g;  p -= clr * g / (sqrt(sum) + eps)

    Its state is created at construction (``sum`` filled with the constructor's ``initial_accumulator_value``),
    as PyTorch's.
    """

    _op = ADAGRAD_STEP
    _SCALARS = _SCALARS
    _SETSTATE_DEFAULTS = (("foreach", None), ("maximize", False), ("differentiable", False), ("fused", None))

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        check_hyperparameters(("learning rate", lr), ("lr_decay value", lr_decay), ("weight_decay value", weight_decay),
                              ("initial_accumulator_value value", initial_accumulator_value), ("epsilon value", eps))
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                                  "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
                                  "maximize": maximize, "differentiable": differentiable, "fused": fused})
        # PyTorch fills every group's ``sum`` with the constructor's value, whatever a group says.
        for group in self.param_groups:
            for p in group["params"]:
                self.state[p].update(self._new_state(p, {"initial_accumulator_value": initial_accumulator_value}))

    def _state_keys(self, group):
        return ("step", "sum")

    def _new_state(self, p, group):
        return {"step": zeros((), dtype=_scalar_dtype(), device=p._device),
                "sum": full_like(p, group["initial_accumulator_value"])}

    def share_memory(self) -> None:
        """Accepted for PyTorch programs: jgrad's state lives in this process (nothing to share)."""

    def _scalars(self, group):
        return {"lr": group["lr"], "lr_decay": group["lr_decay"], "eps": group["eps"],
                "weight_decay": group["weight_decay"]}
