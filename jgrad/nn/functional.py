"""``jgrad.nn.functional``: the functional ops of ``torch.nn.functional``.

Everything here is an op of ``jgrad.ops`` (one XLA-compiled kernel each) or
a short composition of them. ``inplace=True`` writes the input: through its
in-place kernel (relu, dropout) or by writing the result into it
(``ops.inplace.write``). More losses, distances and ``embedding_bag`` are in
``nn.functional_losses``, re-exported here.

Imports the op library (``jgrad.ops`` and its families) and nothing else of jgrad.
"""
from __future__ import annotations

import warnings

import numpy as np

from .. import ops as _ops
from ..ops import attention as _attention, conv as _conv, normalization as _norm
from ..ops import activations as _act, linalg as _linalg, nn_ops as _nn, pointwise as _pw, random_ops as _rand
from ..ops import shape as _shape
from ..ops import patches as _patches, resample as _resample
from ..ops._registry import expect_tensor as _expect_tensor
from ..ops.inplace import write as _write
from ..core._dtype import finfo as _finfo
from .functional_losses import _reduction



def linear(input, weight, bias=None):
    """``input @ weight.T + bias``."""
    _expect_tensor(input, "linear", "input", 1)
    _expect_tensor(weight, "linear", "weight", 2)
    if bias is not None:
        _expect_tensor(bias, "linear", "bias", 3)
    return _linalg.linear(input, weight, bias)


embedding = _nn.embedding
layer_norm = _nn.layer_norm
one_hot = _nn.one_hot
pad = _shape.pad
softplus = _act.softplus
logsigmoid = _act.logsigmoid
gelu = _act.gelu
tanh = _pw.tanh
sigmoid = _pw.sigmoid
scaled_dot_product_attention = _attention.scaled_dot_product_attention
conv1d, conv2d, conv3d = _conv.conv1d, _conv.conv2d, _conv.conv3d
conv_transpose1d, conv_transpose2d, conv_transpose3d = (_conv.conv_transpose1d, _conv.conv_transpose2d,
                                                        _conv.conv_transpose3d)
max_pool1d, max_pool2d, max_pool3d = _conv.max_pool1d, _conv.max_pool2d, _conv.max_pool3d
avg_pool1d, avg_pool2d, avg_pool3d = _conv.avg_pool1d, _conv.avg_pool2d, _conv.avg_pool3d
adaptive_avg_pool1d, adaptive_avg_pool2d = _conv.adaptive_avg_pool1d, _conv.adaptive_avg_pool2d
adaptive_max_pool1d, adaptive_max_pool2d = _conv.adaptive_max_pool1d, _conv.adaptive_max_pool2d
batch_norm, instance_norm = _norm.batch_norm, _norm.instance_norm
group_norm, rms_norm = _norm.group_norm, _norm.rms_norm
interpolate, grid_sample, affine_grid = _resample.interpolate, _resample.grid_sample, _resample.affine_grid
upsample, upsample_nearest, upsample_bilinear = _resample.upsample, _resample.upsample_nearest, _resample.upsample_bilinear
unfold, fold, bilinear = _patches.unfold, _patches.fold, _patches.bilinear
pixel_shuffle, pixel_unshuffle = _patches.pixel_shuffle, _patches.pixel_unshuffle

__all__ = ["linear", "embedding", "layer_norm", "one_hot", "pad", "softplus", "logsigmoid", "gelu", "tanh",
           "sigmoid", "relu", "relu6", "silu", "elu", "leaky_relu", "hardtanh", "softsign", "softmin", "softmax",
           "log_softmax", "dropout", "normalize", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
           "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
           "scaled_dot_product_attention", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
           "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d", "batch_norm",
           "instance_norm", "group_norm", "rms_norm", "relu_", "mish", "hardswish", "hardsigmoid", "glu",
           "dropout1d", "dropout2d", "dropout3d", "cosine_similarity", "kl_div", "selu", "celu", "threshold",
           "softshrink", "hardshrink", "tanhshrink", "prelu"]
__all__ += ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "grid_sample", "affine_grid",
            "unfold", "fold", "pixel_shuffle", "pixel_unshuffle", "bilinear", "gumbel_softmax"]  # issue 30
__all__ += ["alpha_dropout", "feature_alpha_dropout", "local_response_norm"]  # issue 26


# ---- activations ---------------------------------------------------------------
def _maybe_inplace(input, out, inplace):
    """``inplace=True``: write ``out`` into ``input`` (PyTorch's checks; the version counter is bumped)."""
    return _write(input, out) if inplace else out


def _src(input, inplace):
    """What an ``inplace=True`` activation computes from: a copy when the input requires grad (the write bumps its
    version, which would stale what the op saved of it)."""
    return input.clone() if inplace and input.requires_grad else input


def relu(input, inplace: bool = False):
    """``max(input, 0)``."""
    return input.relu_() if inplace else _pw.relu(input)


def relu_(input):
    """``relu(input)`` in place."""
    return input.relu_()


def relu6(input, inplace: bool = False):
    """``min(max(input, 0), 6)``."""
    return _maybe_inplace(input, _act.hardtanh(_src(input, inplace), 0.0, 6.0), inplace)


def silu(input, inplace: bool = False):
    """``input * sigmoid(input)``."""
    return _maybe_inplace(input, _act.silu(_src(input, inplace)), inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    return _maybe_inplace(input, _act.elu(_src(input, inplace), alpha), inplace)


def selu(input, inplace: bool = False):
    """``scale * elu(input, alpha)`` with the self-normalizing constants."""
    return _maybe_inplace(input, _act.selu(_src(input, inplace)), inplace)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    return _maybe_inplace(input, _act.celu(_src(input, inplace), alpha), inplace)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    return _maybe_inplace(input, _act.leaky_relu(_src(input, inplace), negative_slope), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    return _maybe_inplace(input, _act.hardtanh(_src(input, inplace), min_val, max_val), inplace)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    """``value`` where ``input <= threshold``, else ``input``."""
    return _maybe_inplace(input, _act.threshold(_src(input, inplace), threshold, value), inplace)


def mish(input, inplace: bool = False):
    """``input * tanh(softplus(input))``."""
    _act._float_act("mish", input, "mish_cpu")
    x = _src(input, inplace)
    return _maybe_inplace(input, x * _act.softplus(x).tanh(), inplace)


def hardsigmoid(input, inplace: bool = False):
    """``relu6(input + 3) / 6``."""
    return _maybe_inplace(input, _act.hardsigmoid(_src(input, inplace)), inplace)


def hardswish(input, inplace: bool = False):
    """``input * relu6(input + 3) / 6``."""
    return _maybe_inplace(input, _act.hardswish(_src(input, inplace)), inplace)


softshrink, hardshrink, prelu = _act.softshrink, _act.hardshrink, _act.prelu


def tanhshrink(input):
    """``input - tanh(input)``."""
    return input - input.tanh()


def glu(input, dim: int = -1):
    """``a * sigmoid(b)`` where ``a, b`` are the two halves of ``input`` along ``dim``."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    size = input.shape[dim]
    if size % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim % input.ndim} is size {size}")
    a, b = input.chunk(2, dim)
    return a * b.sigmoid()


def softsign(input):
    """``input / (1 + |input|)``."""
    return input / (input.abs() + 1)


def softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``exp(input) / exp(input).sum(dim)``, computed stably."""
    return _nn.softmax(input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    """``log(softmax(input, dim))``, computed stably."""
    return _nn.log_softmax(input, dim, dtype)


def softmin(input, dim=None, _stacklevel: int = 3, dtype=None):
    return _nn.softmax(-input, dim, dtype)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """Zero each element with probability ``p`` (training only) and scale the rest by ``1/(1-p)``."""
    return _rand.dropout(input, p, training, inplace, generator=generator)


def _channel_dropout(input, p, training, batched_ndim, name, generator):
    """Zero whole channels: one Bernoulli draw per (sample, channel), broadcast over the spatial dims."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if input.ndim not in (batched_ndim - 1, batched_ndim):
        raise RuntimeError(f"{name}: Expected {batched_ndim - 1}D or {batched_ndim}D input, but received a "
                           f"{input.ndim}D input.")
    if not training or p == 0.0:
        return input
    lead = 2 if input.ndim == batched_ndim else 1
    mask_shape = tuple(input.shape[:lead]) + (1,) * (input.ndim - lead)
    if p == 1.0:
        return input * 0.0
    keep = _rand.rand(tuple(mask_shape), generator=generator, dtype=input.dtype, device=input.device) >= p
    return input * keep.to(input.dtype) / (1.0 - p)


def alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *, generator=None):
    """Dropout that keeps a SELU network's self-normalization: dropped units take SELU's negative saturation
    value, and an affine map restores the input's mean and variance."""
    out = _rand._alpha_dropout(input, p, training, input.ndim, generator)
    return input.copy_(out) if inplace and out is not input else out


def feature_alpha_dropout(input, p: float = 0.5, training: bool = False, inplace: bool = False, *,
                          generator=None):
    """``alpha_dropout`` of whole channels: one draw per (sample, channel)."""
    out = _rand._alpha_dropout(input, p, training, min(2, input.ndim), generator)
    return input.copy_(out) if inplace and out is not input else out


def local_response_norm(input, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
    """Divide each element by ``(k + alpha * mean of squares over the `size` neighbouring channels) ** beta``
    (AlexNet's normalization across channels; the window is zero-padded at the ends)."""
    if input.ndim < 3:
        raise ValueError(f"Expected 3D or higher dimensionality input (got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input
    n, c = input.shape[0], input.shape[1]
    # channels become a spatial axis of length C, pooled with a window of `size` (front-padded by size // 2)
    squares = (input * input).reshape(n, 1, c, -1)
    squares = pad(squares, (0, 0, size // 2, (size - 1) // 2))
    mean_sq = avg_pool2d(squares, (size, 1), stride=1).reshape(input.shape)
    return input / (mean_sq * alpha + k) ** beta


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """Zero whole channels of ``(N, C, L)`` with probability ``p`` and scale the rest by ``1/(1-p)``."""
    return _channel_dropout(input, p, training, 3, "dropout1d", generator)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` and scale the rest by ``1/(1-p)``."""
    return _channel_dropout(input, p, training, 4, "dropout2d", generator)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False, *, generator=None):
    """Zero whole channels of ``(N, C, D, H, W)`` with probability ``p`` and scale the rest by ``1/(1-p)``."""
    return _channel_dropout(input, p, training, 5, "dropout3d", generator)


def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim`` (x1 and x2 broadcast first)."""
    if tuple(x1.shape) != tuple(x2.shape):
        shape = np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape))
        x1, x2 = x1.expand(*shape), x2.expand(*shape)
    n1 = x1.norm(2, dim, keepdim=True).clamp(min=eps)
    n2 = x2.norm(2, dim, keepdim=True).clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    """KL divergence ``target * (log(target) - input)`` with ``input`` log-probabilities."""
    reduction = _reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = _ops.xlogy(target, target) - target * input
    if reduction == "mean":
        warnings.warn("reduction: 'mean' divides the total loss by both the batch size and the support size."
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                      "'mean' will be changed to behave the same as 'batchmean' in the next major release.",
                      UserWarning, stacklevel=2)
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _weighted(loss, reduction)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    """``input / max(||input||_p along dim, eps)``."""
    if out is not None:
        raise TypeError("normalize(): out= is not supported by jgrad")
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps)
    return input / denom


# ---- losses ----------------------------------------------------------------------
def _check_reduction(reduction):
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean squared error."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if weight is not None:
        return _weighted(((input - target) ** 2) * weight, reduction)
    return _nn.mse_loss(input, target, reduction=reduction)


def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    """Mean absolute error."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if weight is not None:
        return _weighted((input - target).abs() * weight, reduction)
    return _nn.l1_loss(input, target, reduction=reduction)


def _weighted(loss, reduction):
    return loss if reduction == "none" else (loss.sum() if reduction == "sum" else loss.mean())


def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``."""
    _check_reduction(reduction)
    if weight is None:
        return _nn.huber_loss(input, target, reduction, delta)
    d = (input - target).abs()
    loss = _ops.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    return _weighted(loss * weight, reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if beta == 0.0:
        return l1_loss(input, target, reduction=reduction)
    return _nn.smooth_l1_loss(input, target, reduction, beta)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    """Cross entropy of logits ``input`` (class dim 1) against class indices or class probabilities."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    return _nn.cross_entropy(input, target, weight, ignore_index=ignore_index, reduction=reduction,
                             label_smoothing=label_smoothing)


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    """Negative log likelihood of log-probabilities ``input`` at class indices ``target``."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if target.dtype.is_floating_point:
        raise RuntimeError(f"expected scalar type Long but found {target.dtype}")
    if input.ndim >= 2 and target.ndim >= 1 and target.shape[0] != input.shape[0]:
        raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                         f"({target.shape[0]}).")
    return _nn.nll_loss(input, target, weight, ignore_index=ignore_index, reduction=reduction)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    """Binary cross entropy of probabilities ``input`` (log clamped at -100, as PyTorch)."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if target.shape != input.shape:
        raise ValueError(f"Using a target size ({list(target.shape)}) that is different to the input size "
                         f"({list(input.shape)}) is deprecated. Please ensure they have the same size.")
    return _nn.binary_cross_entropy(input, target, weight, reduction=reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    """Binary cross entropy of logits ``input``, computed stably."""
    reduction = _reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size "
                         f"({list(input.shape)})")
    return _nn.binary_cross_entropy_with_logits(input, target, weight, reduction=reduction, pos_weight=pos_weight)


def gumbel_softmax(logits, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1):
    """Samples of the Gumbel-softmax distribution over ``dim``; ``hard``: one-hot values with the soft sample's
    gradient (straight-through)."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.", UserWarning, stacklevel=2)
    u = _ops.rand_like(logits)
    gumbels = -(-u.clamp_min(_finfo(logits.dtype).tiny).log()).log()  # -log(Exp(1)), as PyTorch's
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = _ops.zeros_like(logits).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


from .functional_losses import *  # noqa: E402,F401,F403  (more losses, distances and embedding_bag)
from .functional_losses import __all__ as _more  # noqa: E402

__all__ += _more
