"""Stochastic weight averaging (``torch.optim.swa_utils``): ``AveragedModel``, ``SWALR``, ``update_bn`` and the
averaging functions.

``AveragedModel`` keeps a deep copy of a model and averages the model's parameters into it; the default
(equal-weight SWA) and the EMA update are one fused kernel per device (``_dispatch.call_foreach``, the
weight a dynamic scalar), as PyTorch's ``_foreach_lerp_``. ``SWALR`` anneals each group's learning rate to
``swa_lr``; ``update_bn`` recomputes BatchNorm statistics with one pass over a loader.

Imports ``_dispatch``, ``grad_mode``, ``ops.creation``, ``nn`` (``Module``, ``_BatchNorm``),
``optim._fused`` and ``optim.lr_scheduler``.
"""
from __future__ import annotations

import itertools
import math
from copy import deepcopy

import numpy as np

from ..runtime._dispatch import Op, call_foreach
from ..autograd.grad_mode import no_grad
from ..nn.module import Module
from ..nn.normalization import _BatchNorm
from ..ops.creation import tensor
from ..core import _dtype
from ._fused import lerp
from .lr_scheduler import LRScheduler

__all__ = ["AveragedModel", "update_bn", "SWALR", "get_ema_multi_avg_fn", "get_swa_multi_avg_fn", "get_ema_avg_fn",
           "get_swa_avg_fn"]


def _lerp_kernel(*arrays, n):
    avgs, currents, weight = arrays[:n], arrays[n:2 * n], arrays[2 * n]
    return tuple(lerp(a, c.astype(a.dtype), weight) for a, c in zip(avgs, currents))


LERP_ALL = Op("swa_lerp", _lerp_kernel, differentiable=False)


def _lerp_all(averaged, current, weight: float):
    """``torch._foreach_lerp_(averaged, current, weight)``: one fused kernel per device."""
    with no_grad():
        buckets = {}
        for a, c in zip(averaged, current):
            buckets.setdefault(a._device, []).append((a, c))
        for pairs in buckets.values():
            call_foreach(LERP_ALL, [a for a, _ in pairs], *[c for _, c in pairs], float(weight), n=len(pairs))


def _check_decay(decay):
    if decay < 0.0 or decay > 1.0:
        raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")


def get_ema_multi_avg_fn(decay=0.999):
    """``multi_avg_fn`` of an exponential moving average: ``ema = decay * ema + (1 - decay) * p``."""
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _):
        if ema_param_list[0].is_floating_point() or ema_param_list[0].is_complex():
            _lerp_all(ema_param_list, current_param_list, 1 - decay)
            return
        with no_grad():
            for p_ema, p_model in zip(ema_param_list, current_param_list):
                p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def _swa_weight(num_averaged) -> float:
    """``1 / (num_averaged + 1)`` as PyTorch computes it from the long counter: in the default float dtype."""
    n = int(num_averaged)
    return float(np.asarray(1.0 / (n + 1), _dtype.get_default_dtype().np))


def get_swa_multi_avg_fn():
    """``multi_avg_fn`` of an equal-weight average: ``avg += (p - avg) / (num_averaged + 1)``."""
    def swa_update(averaged_param_list, current_param_list, num_averaged):
        if averaged_param_list[0].is_floating_point() or averaged_param_list[0].is_complex():
            _lerp_all(averaged_param_list, current_param_list, _swa_weight(num_averaged))
            return
        with no_grad():
            for a, c in zip(averaged_param_list, current_param_list):
                a.copy_(a + (c - a) / (num_averaged + 1))

    return swa_update


def get_ema_avg_fn(decay=0.999):
    """``avg_fn`` of an exponential moving average (one parameter at a time)."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """``avg_fn`` of an equal-weight average (one parameter at a time)."""
    def swa_update(averaged_param, current_param, num_averaged):
        return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


class AveragedModel(Module):
    """A running average of a model's parameters (SWA by default, any ``avg_fn``/``multi_avg_fn``).

    ``forward`` runs the averaged copy (``self.module``); ``update_parameters(model)`` folds the model's
    current parameters in (and copies its buffers unless ``use_buffers``, which averages them too).
    """

    def __init__(self, model: Module, device=None, avg_fn=None, multi_avg_fn=None, use_buffers=False):
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=_dtype.long, device=device))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def update_parameters(self, model: Module) -> None:
        """Fold ``model``'s parameters (and buffers, with ``use_buffers``) into the average."""
        mine = (itertools.chain(self.module.parameters(), self.module.buffers()) if self.use_buffers
                else self.parameters())
        theirs = itertools.chain(model.parameters(), model.buffers()) if self.use_buffers else model.parameters()
        n = int(self.n_averaged)
        pairs = [(a, m.detach().to(a.device)) for a, m in zip(mine, theirs)]
        with no_grad():
            if n == 0:
                for a, m in pairs:
                    a.copy_(m)
            elif self.avg_fn is not None:
                for a, m in pairs:
                    a.copy_(self.avg_fn(a.detach(), m, self.n_averaged.to(a.device)))
            else:
                fn = self.multi_avg_fn if self.multi_avg_fn is not None else get_swa_multi_avg_fn()
                for group in _by_device_and_dtype(pairs):
                    fn([a for a, _ in group], [m for _, m in group], self.n_averaged.to(group[0][0].device))
            if not self.use_buffers:
                for b_swa, b_model in zip(self.module.buffers(), model.buffers()):
                    b_swa.copy_(b_model.detach().to(b_swa.device))
            self.n_averaged.add_(1)


def _by_device_and_dtype(pairs):
    groups = {}
    for a, m in pairs:
        groups.setdefault((a._device, a.dtype), []).append((a, m))
    return list(groups.values())


def update_bn(loader, model: Module, device=None) -> None:
    """Recompute the running statistics of every BatchNorm layer of ``model`` with one pass over ``loader``
    (a batch is its first element when it is a list or tuple); each layer's momentum is restored after."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None                                 # a cumulative average over the whole pass
    with no_grad():
        for batch in loader:
            if isinstance(batch, (list, tuple)):
                batch = batch[0]
            if device is not None:
                batch = batch.to(device)
            model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each param group's learning rate to ``swa_lr`` over ``anneal_epochs`` steps (``"cos"`` or
    ``"linear"``), then hold it there."""

    def __init__(self, optimizer, swa_lr, anneal_epochs=10, anneal_strategy="cos", last_epoch=-1):
        if isinstance(swa_lr, (list, tuple)):
            if len(swa_lr) != len(optimizer.param_groups):
                raise ValueError(f"swa_lr must have the same length as optimizer.param_groups. swa_lr has "
                                 f"{len(swa_lr)} values, param_groups has {len(optimizer.param_groups)}.")
            swa_lrs = list(swa_lr)
        else:
            swa_lrs = [swa_lr] * len(optimizer.param_groups)
        for value, group in zip(swa_lrs, optimizer.param_groups):
            group["swa_lr"] = value
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self):
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_alpha = self.anneal_func(max(0, min(1, (step - 1) / max(1, self.anneal_epochs))))
        prev_lrs = [self._get_initial_lr(group["lr"], group["swa_lr"], prev_alpha)
                    for group in self.optimizer.param_groups]
        alpha = self.anneal_func(max(0, min(1, step / max(1, self.anneal_epochs))))
        return [group["swa_lr"] * alpha + lr * (1 - alpha) for group, lr in zip(self.optimizer.param_groups, prev_lrs)]

    def _set_anneal_func(self, anneal_strategy):
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self):
        """Every attribute but the optimizer and the annealing function (restored from its name)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
