"""Neural-network ops (``jgrad.nn.functional``): softmax, log_softmax, losses, layer_norm,
embedding. Gradients come from ``jax.vjp`` of each jax forward unless a formula is given.

Imports ``_dispatch``, ``_checks`` (deferred index checks), ``_dtype`` and ``ops._registry``;
``ops.creation`` at the call.
"""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp

from ..core import _dtype
from ..runtime._checks import check_range, check_values
from ..runtime._dispatch import Op, call
from ._registry import broadcast_shapes, expect_tensor, host_values, refuse, scalar_type_name, tensor_method, wrap_dim
from ..autograd import is_grad_enabled


def _softmax_bwd(ctx, g):
    y = ctx.outputs[0]
    d = ctx.attrs["dim"]
    return (y * (g - jnp.sum(g * y, axis=d, keepdims=True)),)


def _log_softmax_bwd(ctx, g):
    y = ctx.outputs[0]
    d = ctx.attrs["dim"]
    return (g - jnp.exp(y) * jnp.sum(g, axis=d, keepdims=True),)


SOFTMAX = Op("SoftmaxBackward0", lambda a, dim: jax.nn.softmax(a, axis=dim), _softmax_bwd, save=(),
             save_outputs=True)
LOG_SOFTMAX = Op("LogSoftmaxBackward0", lambda a, dim: jax.nn.log_softmax(a, axis=dim), _log_softmax_bwd,
                 save=(), save_outputs=True)


def _float_input(t, dtype):
    if dtype is not None:
        return t.to(dtype)
    return t if t.dtype.is_floating_point else t.to(_dtype.get_default_dtype())


def _softmax_dim(name, dim, ndim):
    """PyTorch's legacy implicit dim (0 for 0-, 1- and 3-D inputs, else 1), with its warning."""
    if dim is not None:
        return wrap_dim(dim, ndim)
    import warnings
    implicit = 0 if ndim in (0, 1, 3) else 1
    warnings.warn(f"Implicit dimension choice for {name} has been deprecated. Change the call to include dim=X "
                  "as an argument.", UserWarning, stacklevel=3)
    return implicit


def _softmax(op, name, input, dim, dtype):
    expect_tensor(input, name)
    d = _softmax_dim(name, dim, input.ndim)
    if dtype is None and not (input.dtype.is_floating_point or input.dtype.is_complex) and input.numel():
        last = input.ndim <= 1 or d == input.ndim - 1
        refuse(f"{name}_lastdim_kernel_impl" if last else f"{name}_kernel_impl", input, "bi")
    if dtype is None and not input.numel() and not input.dtype.is_floating_point:
        return input.clone()  # nothing to compute: PyTorch returns the empty input's dtype
    input = _float_input(input, dtype)
    if input.ndim == 0:  # a 0-d tensor is its own (only) class
        return call(op, input.reshape(1), dim=0).reshape(())
    return call(op, input, dim=d)


@tensor_method()
def softmax(input, dim=None, dtype=None):
    return _softmax(SOFTMAX, "softmax", input, dim, dtype)


@tensor_method()
def log_softmax(input, dim=None, dtype=None):
    return _softmax(LOG_SOFTMAX, "log_softmax", input, dim, dtype)


def _reduce(loss, reduction, weight_sum=None):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    if reduction == "mean":
        if weight_sum is None:
            return jnp.mean(loss)
        # every target ignored: the loss is 0/0 = NaN, as PyTorch's, but the gradient is 0 (PyTorch's formula
        # never divides the ignored terms' zero weights by the zero total)
        safe = jnp.where(weight_sum == 0, jnp.ones((), weight_sum.dtype), weight_sum)
        return jnp.where(weight_sum == 0, jnp.full((), jnp.nan, loss.dtype), jnp.sum(loss) / safe)
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _mse_fwd(a, b, reduction):
    return _reduce((a - b) ** 2, reduction)


def _mse_bwd(ctx, g):
    a, b = ctx.saved
    reduction = ctx.attrs["reduction"]
    diff = a - b
    scale = 2.0 / diff.size if reduction == "mean" else 2.0
    # the target's gradient is the same formula with the arguments swapped (not a negation), as PyTorch's: a
    # zero difference gives +0.0 to both
    return (g * scale * diff if ctx.needs_input_grad[0] else None,
            g * scale * (b - a) if ctx.needs_input_grad[1] else None)


MSE = Op("MseLossBackward0", _mse_fwd, _mse_bwd, save=(0, 1))


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """Mean squared error (``torch.nn.functional.mse_loss``)."""
    input, target = _same_size(input, target)
    return call(MSE, input, target, reduction=reduction)


def _same_size(input, target):
    """PyTorch's pointwise losses broadcast a target of another size, with a warning."""
    if input.shape == target.shape:
        return input, target
    warnings.warn(f"Using a target size ({list(target.shape)}) that is different to the input size "
                  f"({list(input.shape)}). This will likely lead to incorrect results due to broadcasting. "
                  "Please ensure they have the same size.", UserWarning, stacklevel=3)
    shape = broadcast_shapes(input.shape, target.shape)
    return input.expand(*shape), target.expand(*shape)


def _nll(logp, target, weight, ignore_index, reduction, label_smoothing, class_dim):
    n_classes = logp.shape[class_dim]
    logp_c = jnp.moveaxis(logp, class_dim, -1)
    valid = target != ignore_index
    safe_t = jnp.where(valid, target, 0)
    picked = jnp.take_along_axis(logp_c, safe_t[..., None], axis=-1)[..., 0]
    w = weight[safe_t] if weight is not None else jnp.ones_like(picked)
    w = jnp.where(valid, w, 0.0).astype(logp.dtype)
    loss = -picked * w
    if label_smoothing > 0.0:
        cw = weight if weight is not None else jnp.ones((n_classes,), logp.dtype)
        smooth = -(logp_c * cw).sum(-1) * jnp.where(valid, 1.0, 0.0)
        loss = (1 - label_smoothing) * loss + label_smoothing / n_classes * smooth
    return _reduce(loss, reduction, jnp.sum(w) if reduction == "mean" else None)


def _soft_target_ce(logp, target, weight, reduction, label_smoothing, class_dim):
    n = logp.shape[class_dim]
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / n
    wshape = [1] * logp.ndim
    wshape[class_dim] = n
    w = weight.reshape(wshape) if weight is not None else 1.0
    loss = -(logp * target * w).sum(class_dim)
    if reduction == "mean":
        return jnp.sum(loss) / (loss.size if loss.ndim else 1)
    return _reduce(loss, reduction)


def _ce_fwd(x, target, weight, ignore_index, reduction, label_smoothing):
    class_dim = 1 if x.ndim >= 2 else 0
    logp = jax.nn.log_softmax(x, axis=class_dim)
    if jnp.issubdtype(target.dtype, jnp.floating):
        return _soft_target_ce(logp, target.astype(x.dtype), weight, reduction, label_smoothing, class_dim)
    return _nll(logp, target, weight, ignore_index, reduction, label_smoothing, class_dim)


def _nll_fwd(logp, target, weight, ignore_index, reduction):
    class_dim = 1 if logp.ndim >= 2 else 0
    return _nll(logp, target, weight, ignore_index, reduction, 0.0, class_dim)


CROSS_ENTROPY = Op("NllLossBackward0", _ce_fwd)
NLL_LOSS = Op("NllLossBackward0", _nll_fwd)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Cross entropy from logits, with class indices or class probabilities as target."""
    if target.dtype.is_floating_point:
        if target.shape != input.shape:
            raise RuntimeError(f"Expected target size {list(input.shape)}, got {list(target.shape)}")
    else:
        expect = input.shape[:1] + input.shape[2:] if input.ndim >= 2 else ()
        if input.ndim >= 2 and target.ndim >= 1 and target.shape[0] != input.shape[0]:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                             f"({target.shape[0]}).")
        if tuple(target.shape) != tuple(expect):
            raise RuntimeError(f"Expected target size {list(expect)}, got {list(target.shape)}")
        _check_targets(input, target, ignore_index, "cross_entropy")
    return call(CROSS_ENTROPY, input, target, weight, ignore_index=ignore_index, reduction=reduction,
                label_smoothing=float(label_smoothing))


def _check_targets(input, target, ignore_index, name):
    if target.dtype not in (_dtype.int64, _dtype.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {scalar_type_name(target.dtype)}")
    n_classes = input.shape[1] if input.ndim >= 2 else input.shape[0]
    check_range(target, 0, n_classes, lambda bad: IndexError(f"Target {bad} is out of bounds."), name,
                ignore=ignore_index)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    _check_targets(input, target, ignore_index, "nll_loss")
    return call(NLL_LOSS, input, target, weight, ignore_index=ignore_index, reduction=reduction)


def _bce_terms(p, y):
    return y * jnp.clip(jnp.log(p), -100) + (1 - y) * jnp.clip(jnp.log1p(-p), -100)


def _bce_bwd(ctx, g):
    """PyTorch's formulas (``binary_cross_entropy_backward``): the input's gradient divides by
    ``max(p (1 - p), 1e-12)``, so it is finite at p = 0 and p = 1 (the clamped logs' derivative is not)."""
    p, y, w = ctx.saved
    reduction = ctx.attrs["reduction"]
    scale = 1.0 if w is None else w
    if reduction != "none":
        g = jnp.broadcast_to(g / p.size if reduction == "mean" else g, p.shape)
    need = ctx.needs_input_grad
    gp = g * scale * (p - y) / jnp.maximum((1 - p) * p, 1e-12) if need[0] else None
    gy = -g * scale * (jnp.log(p) - jnp.log1p(-p)) if need[1] else None  # -logit(p), unclamped as PyTorch's
    gw = -g * _bce_terms(p, y) if need[2] and w is not None else None
    return gp, gy, gw


BCE = Op("BinaryCrossEntropyBackward0", lambda p, y, w, reduction: _reduce(
    -(w if w is not None else 1.0) * _bce_terms(p, y), reduction), _bce_bwd, save=(0, 1, 2))
BCE_LOGITS = Op("BinaryCrossEntropyWithLogitsBackward0", lambda x, y, w, pw, reduction: _reduce(
    (w if w is not None else 1.0) * (
        (1 - y) * x + (1 + ((pw if pw is not None else 1.0) - 1) * y) * (jax.nn.softplus(-x))), reduction))


def _check_unit_interval(t, what):
    """PyTorch's range check of binary_cross_entropy (NaN fails it too): at the op where the values are already in
    host memory (``host_values``), else on the device, reported at the next host sync (``_checks``)."""
    v = host_values(t)
    if v is None:  # on the device or pending: checked beside the kernel, reported at the next host sync
        check_values(t, "unit_interval", lambda _: RuntimeError(f"all elements of {what} should be between 0 and 1"),
                     "binary_cross_entropy")
    elif v.size and not ((v >= 0) & (v <= 1)).all():
        raise RuntimeError(f"all elements of {what} should be between 0 and 1")


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    _check_unit_interval(input, "input")
    _check_unit_interval(target, "target")
    return call(BCE, input, target, weight, reduction=reduction)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    if pos_weight is not None and pos_weight.requires_grad:
        if is_grad_enabled():
            raise RuntimeError("The function 'binary_cross_entropy_with_logits' is not differentiable with respect "
                               "to argument 'pos_weight'. This input cannot have requires_grad True.")
    return call(BCE_LOGITS, input, target, weight, pos_weight, reduction=reduction)


def _l1_fwd(a, b, reduction):
    return _reduce(jnp.abs(a - b), reduction)


def _pairwise_bwd(ctx, g, slope):
    """A loss of ``d = input - target``: ``slope(d)`` is its derivative; the target's gradient is the formula with
    the arguments swapped (PyTorch's, so a zero slope gives +0.0 to both, never -0.0)."""
    a, b = ctx.saved
    reduction = ctx.attrs["reduction"]
    if reduction != "none":
        g = jnp.broadcast_to(g / a.size if reduction == "mean" else g, a.shape)
    need = ctx.needs_input_grad
    return (g * slope(a - b) if need[0] else None, g * slope(b - a) if need[1] else None)


def _l1_bwd(ctx, g):
    # PyTorch's l1_loss is |input - target| composed: the target's gradient is the negated input gradient
    a, b = ctx.saved
    reduction = ctx.attrs["reduction"]
    if reduction != "none":
        g = jnp.broadcast_to(g / a.size if reduction == "mean" else g, a.shape)
    gi = g * jnp.sign(a - b)
    return (gi if ctx.needs_input_grad[0] else None), (-gi if ctx.needs_input_grad[1] else None)


L1 = Op("L1LossBackward0", _l1_fwd, _l1_bwd, save=(0, 1))


def _huber_terms(d, delta):
    ad = jnp.abs(d)
    return jnp.where(ad < delta, 0.5 * d * d, delta * (ad - 0.5 * delta))


def _huber_slope(d, delta):
    return jnp.clip(d, -delta, delta)


HUBER = Op("HuberLossBackward0", lambda a, b, reduction, delta: _reduce(_huber_terms(a - b, delta), reduction),
           lambda ctx, g: _pairwise_bwd(ctx, g, lambda d: _huber_slope(d, ctx.attrs["delta"])), save=(0, 1))
SMOOTH_L1 = Op("SmoothL1LossBackward0",
               lambda a, b, reduction, beta: _reduce(_huber_terms(a - b, beta) / beta, reduction),
               lambda ctx, g: _pairwise_bwd(ctx, g, lambda d: _huber_slope(d, ctx.attrs["beta"]) / ctx.attrs["beta"]),
               save=(0, 1))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    input, target = _same_size(input, target)
    return call(L1, input, target, reduction=reduction)


def huber_loss(input, target, reduction="mean", delta=1.0):
    """``0.5 d^2`` where ``|d| < delta``, else ``delta (|d| - 0.5 delta)``, for ``d = input - target``."""
    input, target = _same_size(input, target)
    return call(HUBER, input, target, reduction=reduction, delta=float(delta))


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """``0.5 d^2 / beta`` where ``|d| < beta``, else ``|d| - 0.5 beta`` (``beta > 0``)."""
    input, target = _same_size(input, target)
    return call(SMOOTH_L1, input, target, reduction=reduction, beta=float(beta))


def _layer_norm_fwd(x, w, b, shape, eps):
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return y


LAYER_NORM = Op("NativeLayerNormBackward0", _layer_norm_fwd)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[input.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(map(str, shape))}], but got input of size{list(input.shape)}")
    return call(LAYER_NORM, input, weight, bias, shape=shape, eps=float(eps))


def _embedding_fwd(w, idx, padding_idx, scale_grad_by_freq=False):
    return jnp.take(w, idx, axis=0, mode="clip")  # an index out of range (reported by its check) reads a clamped row


def _embedding_bwd(ctx, g):
    w_shape = ctx.in_avals[0][0]
    idx = ctx.saved[1]
    pad = ctx.attrs["padding_idx"]
    if pad is not None:
        g = jnp.where((idx == pad)[..., None], 0, g)
    flat = jnp.clip(idx.reshape(-1), 0, w_shape[0] - 1)
    g = g.reshape(-1, w_shape[1])
    if ctx.attrs.get("scale_grad_by_freq"):  # each row's gradient divided by how often its index occurs
        counts = jnp.zeros((w_shape[0],), g.dtype).at[flat].add(1)
        g = g / counts[flat][:, None]
    gw = jnp.zeros(w_shape, g.dtype).at[flat].add(g)
    return gw, None


EMBEDDING = Op("EmbeddingBackward0", _embedding_fwd, _embedding_bwd, save=(1,))


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of ``weight`` picked by the integer tensor ``input``."""
    if input.dtype.is_floating_point:
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {input.dtype} instead (while checking arguments for embedding)")
    if max_norm is not None:
        raise NotImplementedError("embedding(max_norm=...) renormalizes the weight in place; jgrad does not "
                                  "implement it")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    check_range(input, 0, weight.shape[0], lambda bad: IndexError("index out of range in self"), "embedding")
    if scale_grad_by_freq:
        return call(EMBEDDING, weight, input, padding_idx=padding_idx, scale_grad_by_freq=True)
    return call(EMBEDDING, weight, input, padding_idx=padding_idx)


def one_hot(tensor, num_classes=-1):
    from .creation import tensor as _t
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    check_range(tensor, 0, num_classes, lambda bad: RuntimeError(
        "Class values must be non-negative." if bad < 0 else "Class values must be smaller than num_classes."),
        "one_hot")
    return call(ONE_HOT, tensor, num_classes=num_classes)


ONE_HOT = Op("one_hot", lambda a, num_classes: jax.nn.one_hot(a, num_classes, dtype=a.dtype), differentiable=False)
