"""Convolutions and pooling (``torch.nn.functional``): conv1d/2d/3d, conv_transpose1d/2d/3d,
max_pool1d/2d/3d, avg_pool1d/2d/3d, adaptive_avg_pool1d/2d, adaptive_max_pool1d/2d.

Layouts are PyTorch's: channels first, ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``;
weights ``(C_out, C_in / groups, *kernel)`` (transposed: ``(C_in, C_out / groups, *kernel)``).
Each call is one XLA kernel (``lax.conv_general_dilated``, ``lax.reduce_window``); gradients come
from ``jax.vjp``. Float32 convolutions follow ``jg.set_float32_matmul_precision`` as matmuls do.

Imports ``_dispatch``, ``_dtype`` and ``ops.linalg``.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime._dispatch import Op, call
from . import linalg
from ..core import _dtype

_SPATIAL = {1: "H", 2: "HW", 3: "DHW"}


def _tuple(value, n, name):
    if isinstance(value, int):
        return (value,) * n
    value = tuple(int(v) for v in value)
    if len(value) == 1:
        return value * n
    if len(value) != n:
        raise ValueError(f"{name} must be an int or a tuple of {n} ints, got {value}")
    return value


def _batched(input, nd, name):
    if input.ndim == nd + 2:
        return True
    if input.ndim == nd + 1:
        return False
    raise RuntimeError(f"Expected {nd + 1}D (unbatched) or {nd + 2}D (batched) input to {name}, but got input of "
                       f"size: {list(input.shape)}")


# ---- convolution --------------------------------------------------------------------------
def _conv_fwd(x, w, b, *, stride, padding, dilation, groups, lhs_dilation, batched):
    nd = w.ndim - 2
    if not batched:
        x = x[None]
    spec = "NC" + _SPATIAL[nd]
    dn = jax.lax.conv_dimension_numbers(x.shape, w.shape, (spec, "OI" + _SPATIAL[nd], spec))
    y = jax.lax.conv_general_dilated(x, w, stride, padding, lhs_dilation, dilation, dn, groups,
                                     precision=linalg._prec())
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y if batched else y[0]


CONV = Op("ConvolutionBackward0", _conv_fwd)


def _transpose_weight(w, groups):
    """A transposed convolution's weight (C_in, C_out/g, *k) as the direct convolution's (C_out, C_in/g, *k)."""
    cin, cout_g, k = w.shape[0], w.shape[1], w.shape[2:]
    w = w.reshape((groups, cin // groups, cout_g) + k)
    w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + k)
    return jnp.flip(w, tuple(range(2, w.ndim)))


def _conv_transpose_fwd(x, w, b, *, stride, padding, output_padding, dilation, groups, batched):
    nd = w.ndim - 2
    k = w.shape[2:]
    pads = tuple((dilation[i] * (k[i] - 1) - padding[i], dilation[i] * (k[i] - 1) - padding[i] + output_padding[i])
                 for i in range(nd))
    return _conv_fwd(x, _transpose_weight(w, groups), b, stride=(1,) * nd, padding=pads, dilation=dilation,
                     groups=groups, lhs_dilation=stride, batched=batched)


CONV_TRANSPOSE = Op("ConvolutionBackward0", _conv_transpose_fwd)


def _check_conv(input, weight, bias, nd, groups, transposed, name):
    batched = _batched(input, nd, name)
    if weight.ndim != nd + 2:
        raise RuntimeError(f"Expected {nd + 2}-dimensional weight for {name}, but got weight of size "
                           f"{list(weight.shape)}")
    if input.dtype != weight.dtype or (bias is not None and bias.dtype != input.dtype):
        other = weight if input.dtype != weight.dtype else bias
        raise RuntimeError(f"Input type ({input.dtype}) and {'weight' if other is weight else 'bias'} type "
                           f"({other.dtype}) should be the same")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    c_in = input.shape[1 if batched else 0]
    if not transposed:
        if weight.shape[0] % groups:
            raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by {groups} at dimension 0, "
                               f"but got weight of size [{list(weight.shape)}] instead")
        if c_in != weight.shape[1] * groups:
            raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, expected input"
                               f"{list(input.shape)} to have {weight.shape[1] * groups} channels, but got {c_in} "
                               "channels instead")
        c_out = weight.shape[0]
    else:
        if c_in != weight.shape[0] or c_in % groups:
            raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected input"
                               f"{list(input.shape)} to have {weight.shape[0]} channels, but got {c_in} channels "
                               "instead")
        c_out = weight.shape[1] * groups
    if bias is not None and tuple(bias.shape) != (c_out,):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{c_out} elements, but got bias of size {list(bias.shape)} instead")
    return batched


def _conv_padding(padding, input, weight, stride, dilation, nd):
    spatial = input.shape[-nd:]
    k = weight.shape[2:]
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding != "same":
            raise RuntimeError(f"Invalid padding string: '{padding}'")
        if any(s != 1 for s in stride):
            raise RuntimeError("padding='same' is not supported for strided convolutions")
        total = [dilation[i] * (k[i] - 1) for i in range(nd)]
        return tuple((t // 2, t - t // 2) for t in total)  # the odd one goes on the right, as PyTorch
    pad = _tuple(padding, nd, "padding")
    for i in range(nd):
        padded, eff = spatial[i] + 2 * pad[i], dilation[i] * (k[i] - 1) + 1
        if padded < eff:
            sizes = " x ".join(str(spatial[j] + 2 * pad[j]) for j in range(nd))
            ks = " x ".join(str(d) for d in k)
            raise RuntimeError(f"Calculated padded input size per channel: ({sizes}). Kernel size: ({ks}). Kernel "
                               "size can't be greater than actual input size")
    return tuple((p, p) for p in pad)


def _conv(nd, input, weight, bias, stride, padding, dilation, groups):
    name = f"conv{nd}d"
    batched = _check_conv(input, weight, bias, nd, groups, False, name)
    stride, dilation = _tuple(stride, nd, "stride"), _tuple(dilation, nd, "dilation")
    pads = _conv_padding(padding, input, weight, stride, dilation, nd)
    return call(CONV, input, weight, bias, stride=stride, padding=pads, dilation=dilation, groups=int(groups),
                lhs_dilation=(1,) * nd, batched=batched)


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation) over ``(N, C_in, L)``."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation) over ``(N, C_in, H, W)``; ``padding`` may be 'valid' or 'same'."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D convolution (cross-correlation) over ``(N, C_in, D, H, W)``."""
    return _conv(3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(nd, input, weight, bias, stride, padding, output_padding, groups, dilation):
    batched = _check_conv(input, weight, bias, nd, groups, True, f"conv_transpose{nd}d")
    stride, padding = _tuple(stride, nd, "stride"), _tuple(padding, nd, "padding")
    output_padding, dilation = _tuple(output_padding, nd, "output_padding"), _tuple(dilation, nd, "dilation")
    for i in range(nd):
        if output_padding[i] >= max(stride[i], dilation[i]):
            raise RuntimeError("output padding must be smaller than either stride or dilation, but got "
                               f"output_padding: {output_padding[i]}, stride: {stride[i]}, dilation: {dilation[i]}")
    return call(CONV_TRANSPOSE, input, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                dilation=dilation, groups=int(groups), batched=batched)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """1-D transposed convolution (the gradient of conv1d with respect to its input)."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """2-D transposed convolution (the gradient of conv2d with respect to its input)."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups, dilation)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """3-D transposed convolution (the gradient of conv3d with respect to its input)."""
    return _conv_transpose(3, input, weight, bias, stride, padding, output_padding, groups, dilation)


# ---- pooling --------------------------------------------------------------------------------
def _pool_geometry(input, nd, kernel_size, stride, padding, dilation, ceil_mode, name):
    """PyTorch's pooling output size, as (low, high) paddings that make reduce_window produce it."""
    batched = _batched(input, nd, name)
    k = _tuple(kernel_size, nd, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _tuple(stride, nd, "stride")
    p, d = _tuple(padding, nd, "padding"), _tuple(dilation, nd, "dilation")
    spatial = input.shape[-nd:]
    pads, out = [], []
    for i in range(nd):
        eff = d[i] * (k[i] - 1) + 1
        if p[i] > eff // 2 or p[i] < 0:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={p[i]}, "
                               f"kernel_size={k[i]} and dilation={d[i]}")
        span = spatial[i] + 2 * p[i] - eff
        n = (-(-span // s[i]) if ceil_mode else span // s[i]) + 1
        if ceil_mode and (n - 1) * s[i] >= spatial[i] + p[i]:
            n -= 1  # the last window must start inside the input or its left padding
        if n <= 0:
            given = "x".join(str(v) for v in input.shape[-nd - 1:])
            raise RuntimeError(f"Given input size: ({given}). Calculated output size: "
                               f"({input.shape[-nd - 1]}x{'x'.join('0' for _ in range(nd))}). Output size is too small")
        hi = max((n - 1) * s[i] + eff - spatial[i] - p[i], 0)
        pads.append((p[i], hi))
        out.append(n)
    return batched, k, s, tuple(pads), d


def _window(x, nd, k, s, d):
    lead = x.ndim - nd
    return (1,) * lead + k, (1,) * lead + s, (1,) * lead + d


def _max_init(dtype):
    """The identity of max as a NumPy constant (jax recognises the max monoid, and its gradient, by it)."""
    return np.array(-np.inf if jnp.issubdtype(dtype, jnp.inexact) else jnp.iinfo(dtype).min, dtype)


def _max_pool_fwd(x, *, nd, k, s, pads, d, return_indices, index_dtype):
    win, strides, dil = _window(x, nd, k, s, d)
    padding = ((0, 0),) * (x.ndim - nd) + pads
    init = _max_init(x.dtype)
    if all(v == 1 for v in d):
        values = jax.lax.reduce_window(x, init, jax.lax.max, win, strides, padding)
    else:  # jax has no gradient of a dilated max window: the maximum over the strided views of each tap
        values = jnp.max(_taps(jnp.pad(x, padding, constant_values=init), nd, k, s, d, pads, x.shape[-nd:]), axis=0)
    if not return_indices:
        return values
    # The flat index (within each channel's spatial plane) of each window's first maximum; NaN wins, as
    # in PyTorch. A variadic reduce_window over (value, index) pairs, outside differentiation.
    xs = jax.lax.stop_gradient(x)
    spatial = x.shape[-nd:]
    idx = jnp.broadcast_to(jnp.arange(math.prod(spatial), dtype=index_dtype).reshape(spatial), x.shape)

    def pick(a, b):
        (av, ai), (bv, bi) = a, b
        take_b = (bv > av) | ((bv == av) & (bi < ai)) | (jnp.isnan(bv) & ~jnp.isnan(av)) if jnp.issubdtype(
            av.dtype, jnp.inexact) else (bv > av) | ((bv == av) & (bi < ai))
        return jnp.where(take_b, bv, av), jnp.where(take_b, bi, ai)

    _, indices = jax.lax.reduce_window((xs, idx), (init, np.array(-1, index_dtype)), pick, win, strides, padding,
                                       window_dilation=dil)
    return values, indices


def _taps(xp, nd, k, s, d, pads, spatial):
    """The window elements of a padded ``xp`` as one stacked array: (prod(k), ..., *out)."""
    out = [(spatial[i] + pads[i][0] + pads[i][1] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    lead = xp.ndim - nd
    views = []
    for tap in np.ndindex(*k):
        start = (0,) * lead + tuple(tap[i] * d[i] for i in range(nd))
        limit = xp.shape[:lead] + tuple(tap[i] * d[i] + (out[i] - 1) * s[i] + 1 for i in range(nd))
        views.append(jax.lax.slice(xp, start, limit, (1,) * lead + s))
    return jnp.stack(views)


MAX_POOL = Op("MaxPoolBackward0", _max_pool_fwd)
MAX_POOL_INDICES = Op("MaxPoolWithIndicesBackward0", _max_pool_fwd, num_outputs=2)


def _max_pool(nd, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    _, k, s, pads, d = _pool_geometry(input, nd, kernel_size, stride, padding, dilation, ceil_mode,
                                      f"max_pool{nd}d")
    op = MAX_POOL_INDICES if return_indices else MAX_POOL
    return call(op, input, nd=nd, k=k, s=s, pads=pads, d=d, return_indices=bool(return_indices),
                index_dtype=_dtype._index_dtype().np)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Maximum over sliding windows of ``(N, C, L)`` (``return_indices``: also the flat index of each maximum)."""
    return _max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Maximum over sliding windows of ``(N, C, H, W)`` (``return_indices``: also the flat index of each maximum)."""
    return _max_pool(2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Maximum over sliding windows of ``(N, C, D, H, W)``."""
    return _max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool_fwd(x, *, nd, k, s, pads, divisor):
    win, strides, _ = _window(x, nd, k, s, (1,) * nd)
    padding = ((0, 0),) * (x.ndim - nd) + pads
    total = jax.lax.reduce_window(x, np.array(0, x.dtype), jax.lax.add, win, strides, padding)
    div = divisor.array if isinstance(divisor, _Const) else divisor
    return (total / jnp.asarray(div, x.dtype)).astype(x.dtype)


AVG_POOL = Op("AvgPoolBackward0", _avg_pool_fwd)


def _avg_divisor(spatial, k, s, pads, count_include_pad):
    """Each output window's divisor, as PyTorch counts it: the declared padding counts with
    ``count_include_pad``, the extra right padding of ``ceil_mode`` never does."""
    counts = np.ones(())
    for i in range(len(k)):
        lo, hi = pads[i]
        pos = np.arange(spatial[i] + lo + hi) - lo  # coordinates in the input
        inside = (pos < spatial[i] + lo) if count_include_pad else ((pos >= 0) & (pos < spatial[i]))
        per_window = np.lib.stride_tricks.sliding_window_view(inside.astype(np.float64), k[i])[::s[i]].sum(-1)
        counts = np.multiply.outer(counts, per_window)
    return counts


def _avg_pool(nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    _, k, s, pads, _ = _pool_geometry(input, nd, kernel_size, stride, padding, 1, ceil_mode, f"avg_pool{nd}d")
    if divisor_override is not None:
        if divisor_override == 0:
            raise RuntimeError("divisor must be not zero")
        divisor = float(divisor_override)
    else:
        counts = _avg_divisor(input.shape[-nd:], k, s, pads, count_include_pad)
        divisor = float(counts.flat[0]) if np.all(counts == counts.flat[0]) else _Const(counts)
    return call(AVG_POOL, input, nd=nd, k=k, s=s, pads=pads, divisor=divisor)


class _Const:
    """A NumPy constant as a hashable kernel attribute (compared by value)."""

    __slots__ = ("array", "_key")

    def __init__(self, array):
        self.array = np.asarray(array)
        self._key = (self.array.shape, self.array.tobytes())

    def __hash__(self):
        return hash(self._key)

    def __eq__(self, other):
        return isinstance(other, _Const) and self._key == other._key


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Average over sliding windows of ``(N, C, L)``."""
    return _avg_pool(1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average over sliding windows of ``(N, C, H, W)``."""
    return _avg_pool(2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average over sliding windows of ``(N, C, D, H, W)``."""
    return _avg_pool(3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


# ---- adaptive pooling ---------------------------------------------------------------------------
def _bins(size, out):
    """PyTorch's adaptive bins: [floor(i * size / out), ceil((i + 1) * size / out))."""
    return tuple(((i * size) // out, -(-((i + 1) * size) // out)) for i in range(out))


def _adaptive_avg_fwd(x, *, bins):
    nd = len(bins)
    for j, bj in enumerate(bins):
        axis = x.ndim - nd + j
        x = jnp.stack([jnp.mean(jax.lax.slice_in_dim(x, a, b, axis=axis), axis=axis) for a, b in bj], axis=axis)
    return x


def _adaptive_max_fwd(x, *, bins, return_indices, index_dtype):
    nd = len(bins)
    spatial = x.shape[-nd:]
    lead = x.shape[:-nd]
    vals, idxs = [], []
    for cell in np.ndindex(*[len(b) for b in bins]):
        box = tuple(slice(*bins[j][c]) for j, c in enumerate(cell))
        part = x[(Ellipsis,) + box].reshape(lead + (-1,))
        # the value at the first maximum (NaN counts as the maximum): the gradient goes to that one element, as
        # PyTorch's (jnp.max would share it among tied maxima)
        local = jnp.argmax(jax.lax.stop_gradient(part), axis=-1)
        vals.append(jnp.take_along_axis(part, local[..., None], axis=-1)[..., 0])
        if return_indices:
            sizes = [bins[j][c][1] - bins[j][c][0] for j, c in enumerate(cell)]
            coords = jnp.unravel_index(local, sizes)
            flat = sum(((coords[j] + bins[j][c][0]) * math.prod(spatial[j + 1:]) for j, c in enumerate(cell)),
                       start=jnp.zeros_like(local))
            idxs.append(flat.astype(index_dtype))
    shape = lead + tuple(len(b) for b in bins)
    values = jnp.stack(vals, axis=-1).reshape(shape)
    return (values, jnp.stack(idxs, axis=-1).reshape(shape)) if return_indices else values


ADAPTIVE_AVG = Op("AdaptiveAvgPoolBackward0", _adaptive_avg_fwd)
ADAPTIVE_MAX = Op("AdaptiveMaxPoolBackward0", _adaptive_max_fwd)
ADAPTIVE_MAX_INDICES = Op("AdaptiveMaxPoolBackward0", _adaptive_max_fwd, num_outputs=2)


def _adaptive_bins(input, nd, output_size, name):
    _batched(input, nd, name)
    spatial = input.shape[-nd:]
    if isinstance(output_size, (tuple, list)) and len(output_size) == nd:  # None keeps that dim's size
        output_size = tuple(spatial[i] if s is None else s for i, s in enumerate(output_size))
    sizes = _tuple(output_size, nd, "output_size") if not isinstance(output_size, int) else (output_size,) * nd
    for i in range(nd):
        if spatial[i] == 0:
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(input.shape)} with dimension {input.ndim - nd + i} being empty")
    return tuple(_bins(spatial[i], sizes[i]) for i in range(nd))


def adaptive_avg_pool1d(input, output_size):
    """Average over ``output_size`` adaptive bins of the last dim."""
    return call(ADAPTIVE_AVG, input, bins=_adaptive_bins(input, 1, output_size, "adaptive_avg_pool1d"))


def adaptive_avg_pool2d(input, output_size):
    """Average over ``output_size`` (h, w) adaptive bins of the last two dims."""
    return call(ADAPTIVE_AVG, input, bins=_adaptive_bins(input, 2, output_size, "adaptive_avg_pool2d"))


def _adaptive_max(nd, input, output_size, return_indices):
    bins = _adaptive_bins(input, nd, output_size, f"adaptive_max_pool{nd}d")
    op = ADAPTIVE_MAX_INDICES if return_indices else ADAPTIVE_MAX
    return call(op, input, bins=bins, return_indices=bool(return_indices), index_dtype=_dtype._index_dtype().np)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    """Maximum over ``output_size`` adaptive bins of the last dim."""
    return _adaptive_max(1, input, output_size, return_indices)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Maximum over ``output_size`` (h, w) adaptive bins of the last two dims."""
    return _adaptive_max(2, input, output_size, return_indices)
