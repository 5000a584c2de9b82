"""``SGD``: stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

Imports ``_dispatch``, ``grad_mode``, ``ops.creation`` and ``optim.optimizer``.
"""
from __future__ import annotations

from ..runtime._dispatch import Op, call_foreach
from ..autograd.grad_mode import no_grad
from ..ops.creation import zeros_like
from .optimizer import Optimizer

__all__ = ["SGD"]


def _sgd_kernel(*arrays, n, momentum_on, first, nesterov, maximize, wd_on):
    """One fused SGD step over ``n`` parameters (PyTorch's ``_single_tensor_sgd``).

    ``arrays``: params[n], momentum buffers[n if momentum_on], grads[n], then the
    scalars neg_lr, weight_decay, momentum, one_minus_dampening.
    """
    k = n * (2 if momentum_on else 1)
    params, bufs = arrays[:n], arrays[n:k]
    grads = arrays[k:k + n]
    neg_lr, wd, momentum, one_minus_damp = arrays[k + n:]
    new_params, new_bufs = [], []
    for i in range(n):
        p, g = params[i], grads[i]
        g = -g if maximize else g
        if wd_on:
            g = g + wd * p                                   # grad.add(param, alpha=weight_decay)
        if momentum_on:
            buf = g if first else bufs[i] * momentum + one_minus_damp * g   # buf.mul_(m).add_(g, alpha=1-d)
            new_bufs.append(buf)
            g = g + momentum * buf if nesterov else buf
        new_params.append(p + neg_lr * g)                   # param.add_(grad, alpha=-lr)
    return tuple(new_params + new_bufs)


SGD_STEP = Op("sgd_step", _sgd_kernel, differentiable=False)


class SGD(Optimizer):
    """Stochastic gradient descent, with PyTorch's update rule::

        g = grad (negated if maximize) + weight_decay * p
        buf = g  (first step)  |  momentum * buf + (1 - dampening) * g
        g = g + momentum * buf (nesterov)  |  buf
        p = p - lr * g
    """

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0, dampening: float = 0,
                 weight_decay: float = 0, nesterov: bool = False, *, maximize: bool = False, foreach=None,
                 differentiable: bool = False, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if differentiable:
            raise NotImplementedError("SGD(differentiable=True) is not supported by jgrad.")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening, "weight_decay": weight_decay,
                    "nesterov": nesterov, "maximize": maximize, "foreach": foreach,
                    "differentiable": differentiable, "fused": fused}
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)

    def __setstate__(self, state):
        super().__setstate__(state)
        for group in self.param_groups:
            for key, value in (("nesterov", False), ("maximize", False), ("foreach", None),
                               ("differentiable", False), ("fused", False)):
                group.setdefault(key, value)

    def step(self, closure=None):
        """Update every parameter that has a gradient; returns ``closure()``'s loss if given."""
        loss = self._closure_loss(closure)
        self._check_grads()
        with no_grad():
            for group in self.param_groups:
                self._step_group(group)
        return loss

    def _step_group(self, group):
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        momentum_on = group["momentum"] != 0
        for bucket in self._by_device(params):
            if not momentum_on:
                self._run(group, bucket, [], first=False)
                continue
            fresh = [p for p in bucket if self.state[p].get("momentum_buffer") is None]
            old = [p for p in bucket if self.state[p].get("momentum_buffer") is not None]
            if old:
                self._run(group, old, [self.state[p]["momentum_buffer"] for p in old], first=False)
            if fresh:
                bufs = [zeros_like(p) for p in fresh]   # overwritten with the gradient (grad.clone())
                for p, b in zip(fresh, bufs):
                    self.state[p]["momentum_buffer"] = b
                self._run(group, fresh, bufs, first=True)

    @staticmethod
    def _run(group, params, bufs, first):
        momentum = float(group["momentum"])
        call_foreach(SGD_STEP, list(params) + bufs, *[p.grad for p in params],
                     -float(group["lr"]), float(group["weight_decay"]), momentum, 1.0 - float(group["dampening"]),
                     n=len(params), momentum_on=momentum != 0, first=first, nesterov=bool(group["nesterov"]),
                     maximize=bool(group["maximize"]), wd_on=group["weight_decay"] != 0)
