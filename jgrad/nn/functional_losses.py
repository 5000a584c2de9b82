"""The losses and distances of ``torch.nn.functional`` beyond those in ``nn.functional`` itself, and
``embedding_bag``: each a composition of jgrad ops written as PyTorch's reference formula, so values and
gradients follow PyTorch's (``nn.functional`` re-exports them).

Imports the op library (``jgrad.ops``), the door (``_dispatch``: ``embedding_bag``'s and ``multilabel_margin_loss``'s
kernels), ``_checks`` (``embedding_bag``'s index check) and ``autograd``; ``nn.functional`` imports it (and its
``_reduction``, the deprecated ``size_average``/``reduce`` flags).
"""
from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp

from .. import ops as _ops
from ..autograd import no_grad
from ..runtime._checks import check_range
from ..runtime._dispatch import Op, call

__all__ = ["soft_margin_loss", "poisson_nll_loss", "gaussian_nll_loss", "hinge_embedding_loss",
           "margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss", "multilabel_soft_margin_loss",
           "multi_margin_loss", "multilabel_margin_loss", "pairwise_distance", "embedding_bag"]


def _reduce(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduction(size_average, reduce, reduction):
    """PyTorch's ``_Reduction.legacy_get_string``: map the deprecated flags onto ``reduction``."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    ret = "mean" if (size_average and reduce) else ("sum" if reduce else "none")
    warnings.warn(f"size_average and reduce args will be deprecated, please use reduction='{ret}' instead.",
                  UserWarning, stacklevel=3)
    return ret


def _legacy(size_average, reduce, reduction):
    return _reduction(size_average, reduce, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``log(1 + exp(-target * input))``."""
    reduction = _legacy(size_average, reduce, reduction)
    return _reduce(_ops.softplus(-target * input), reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """Poisson negative log likelihood (``exp(input) - target * input`` for log-rate inputs)."""
    reduction = _legacy(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        t = target
        stirling = t * t.log() - t + 0.5 * (2 * math.pi * t).log()
        loss = loss + _ops.where(t > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log likelihood ``0.5 * (log(var) + (input - target)**2 / var)``; ``var`` is clamped at
    ``eps`` without its gradient being affected (as PyTorch)."""
    if isinstance(var, (int, float)):
        var = _ops.full_like(input, float(var))
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if (var < 0).any():
        raise ValueError("var has negative entry/entries")
    var = var.clone()
    with no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """``input`` where ``target`` is 1, ``max(0, margin - input)`` where it is -1."""
    reduction = _legacy(size_average, reduce, reduction)
    zeros = _ops.zeros_like(input)
    margin_clamp = (margin - input).clamp(min=0)
    out = _ops.where(target != 1, margin_clamp, zeros) + _ops.where(target != -1, input, zeros)
    return _reduce(out, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """``max(0, -target * (input1 - input2) + margin)``."""
    reduction = _legacy(size_average, reduce, reduction)
    if not (input1.ndim == input2.ndim == target.ndim):
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {list(input1.shape)}, input2: {list(input2.shape)}, target: "
                           f"{list(target.shape)} ")
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0), reduction)


def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """``1 - cos(x1, x2)`` where ``target`` is 1, ``max(0, cos(x1, x2) - margin)`` where it is -1."""
    reduction = _legacy(size_average, reduce, reduction)
    eps = 1e-12
    prod = (input1 * input2).sum(-1)
    mag1 = (input1 * input1).sum(-1) + eps
    mag2 = (input2 * input2).sum(-1) + eps
    cos = prod / (mag1 * mag2).sqrt()
    zeros = _ops.zeros_like(cos)
    pos = 1 - cos
    neg = (cos - margin).clamp(min=0)
    out = _ops.where(target == 1, pos, zeros) + _ops.where(target == -1, neg, zeros)
    return _reduce(out, reduction)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """``||x1 - x2 + eps||_p`` over the last dim."""
    return (x1 - x2 + eps).norm(p, -1, keepdim=keepdim)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """``max(d(a, p) - d(a, n) + margin, 0)`` with ``d`` the pairwise p-norm distance."""
    reduction = _legacy(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = _ops.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0), reduction)


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """Per-class logistic loss averaged over the classes."""
    reduction = _legacy(size_average, reduce, reduction)
    loss = -(target * _ops.logsigmoid(input) + (1 - target) * _ops.logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = loss.sum(-1) / input.shape[-1]
    return _reduce(loss, reduction)


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """``sum_{i != y} max(0, margin - x[y] + x[i])**p / C`` per sample."""
    reduction = _legacy(size_average, reduce, reduction)
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    x = input if input.ndim == 2 else input.reshape(1, -1)
    y = target.reshape(-1, 1)
    picked = x.gather(1, y)
    z = (margin - picked + x).clamp(min=0)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight[target.reshape(-1)].reshape(-1, 1)
    mask = _ops.ones_like(x).scatter(1, y, 0.0)
    loss = (z * mask).sum(1) / x.shape[1]
    if input.ndim < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """``sum_{j in targets} sum_{i not in targets} max(0, 1 - (x[j] - x[i])) / C`` per sample; each row of
    ``target`` lists class indices, ended by the first -1."""
    reduction = _legacy(size_average, reduce, reduction)
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = target if target.ndim == 2 else target.reshape(1, -1)
    out = call(_MULTILABEL_MARGIN, x, t)
    if input.ndim < 2:
        out = out.reshape(())
    return _reduce(out, reduction)


def _multilabel_margin_fwd(x, t):
    c = x.shape[1]
    valid = jnp.cumprod(t >= 0, axis=1).astype(bool)  # the targets before the first -1
    safe = jnp.where(valid, t, 0)
    is_target = jnp.zeros(x.shape, bool).at[jnp.arange(x.shape[0])[:, None], safe].max(valid)
    xj = jnp.take_along_axis(x, safe, axis=1)  # (N, T)
    margins = jnp.clip(1 - (xj[:, :, None] - x[:, None, :]), 0)  # (N, T, C)
    keep = valid[:, :, None] & ~is_target[:, None, :]
    return jnp.sum(jnp.where(keep, margins, 0), axis=(1, 2)) / c


_MULTILABEL_MARGIN = Op("MultilabelMarginLossBackward0", _multilabel_margin_fwd)


def _bag_fwd(w, idx, offsets, psw, mode, n_bags, padding_idx):
    n = idx.shape[0]
    seg = jnp.searchsorted(offsets, jnp.arange(n), side="right") - 1
    rows = jnp.take(w, idx, axis=0)
    keep = jnp.ones((n,), bool) if padding_idx is None else idx != padding_idx
    if psw is not None:
        rows = rows * psw[:, None]
    seg = jnp.where(keep, seg, n_bags)  # padding rows go to a bag that is dropped
    if mode == "max":
        out = jax.ops.segment_max(rows, seg, num_segments=n_bags + 1)[:n_bags]
        counts = jax.ops.segment_sum(jnp.ones((n,), w.dtype), seg, num_segments=n_bags + 1)[:n_bags]
        return jnp.where(counts[:, None] > 0, out, jnp.zeros((), w.dtype))
    out = jax.ops.segment_sum(rows, seg, num_segments=n_bags + 1)[:n_bags]
    if mode == "mean":
        counts = jax.ops.segment_sum(jnp.ones((n,), w.dtype), seg, num_segments=n_bags + 1)[:n_bags]
        out = out / jnp.maximum(counts, 1)[:, None]
    return out


_EMBEDDING_BAG = Op("EmbeddingBagBackward0", _bag_fwd)


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sums, means or maxima of bags of embeddings: rows of a 2-D ``input``, or the slices of a 1-D ``input``
    starting at ``offsets``."""
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, but got {mode}")
    if max_norm is not None:
        raise NotImplementedError("embedding_bag(max_norm=...) renormalizes the weight in place; jgrad does not "
                                  "implement it")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                                  "on GitHub.")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences. However, found offsets of type Tensor")
        b, length = input.shape
        offsets = _ops.arange(0, b * length, length, device=input.device)
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif input.ndim == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    n_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    check_range(input, 0, weight.shape[0], lambda bad: IndexError("index out of range in self"), "embedding_bag")
    return call(_EMBEDDING_BAG, weight, input, offsets, per_sample_weights, mode=mode, n_bags=n_bags,
                padding_idx=padding_idx)

