"""Patches and pixel rearrangement (``torch.nn.functional``): ``unfold`` (im2col), ``fold`` (col2im),
``pixel_shuffle``, ``pixel_unshuffle``, ``bilinear``.

``unfold`` takes one strided slice of the padded input per kernel offset (exact: no matmul), in PyTorch's
order (channel, then kernel rows, then kernel columns). ``fold`` is its adjoint: the transpose of the
linear map ``unfold`` (``jax.linear_transpose``), which sums the overlapping blocks as col2im does.

Imports ``_dispatch`` and ``ops.linalg`` (the matmul precision of ``bilinear``).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ..runtime._dispatch import Op, call
from . import linalg

__all__ = ["unfold", "fold", "pixel_shuffle", "pixel_unshuffle", "bilinear"]


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return v * 2
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a tuple of 2 ints, got {v}")
    return v


def _blocks(size, k, d, p, s):
    return [(size[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(2)]


def _im2col(x, *, kernel, dilation, padding, stride):
    n, c, h, w = x.shape
    xp = jnp.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    oh, ow = _blocks((h, w), kernel, dilation, padding, stride)
    cols = []
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            r0, c0 = i * dilation[0], j * dilation[1]
            cols.append(xp[:, :, r0:r0 + stride[0] * (oh - 1) + 1:stride[0], c0:c0 + stride[1] * (ow - 1) + 1:stride[1]])
    cols = jnp.stack(cols, 2)  # (N, C, kh * kw, oh, ow)
    return cols.reshape(n, c * kernel[0] * kernel[1], oh * ow)


def _col2im(cols, *, output_size, kernel, dilation, padding, stride):
    n, ck, _ = cols.shape
    c = ck // (kernel[0] * kernel[1])
    x = jax.ShapeDtypeStruct((n, c) + tuple(output_size), cols.dtype)
    (out,) = jax.linear_transpose(
        lambda a: _im2col(a, kernel=kernel, dilation=dilation, padding=padding, stride=stride), x)(cols)
    return out


UNFOLD = Op("Im2ColBackward0", _im2col)
FOLD = Op("Col2ImBackward0", _col2im)


def _check_positive(name, v):
    if min(v) <= 0:
        raise RuntimeError(f"{name} should be greater than zero, but got {name.split('_')[0]}_height: {v[0]} "
                           f"{name.split('_')[0]}_width: {v[1]}")


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Sliding blocks of ``input`` (N, C, H, W) as columns (N, C * kh * kw, L) (im2col)."""
    k, d, p, s = (_pair(kernel_size, "kernel_size"), _pair(dilation, "dilation"), _pair(padding, "padding"),
                  _pair(stride, "stride"))
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported (got {input.ndim}D)")
    _check_positive("kernel_size", k)
    _check_positive("stride", s)
    _check_positive("dilation", d)
    batched = input.ndim == 4
    x = input if batched else input.unsqueeze(0)
    oh, ow = _blocks(x.shape[2:], k, d, p, s)
    if oh < 1 or ow < 1:
        raise RuntimeError(f"Given input with spatial size ({x.shape[2]}, {x.shape[3]}), kernel_size ({k[0]}, {k[1]}), "
                           f"dilation ({d[0]}, {d[1]}), padding ({p[0]}, {p[1]}), calculated shape of the array of "
                           f"sliding blocks as ({oh}, {ow}), but its components must be at least one.")
    out = call(UNFOLD, x, kernel=k, dilation=d, padding=p, stride=s)
    return out if batched else out.squeeze(0)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Sum the columns (N, C * kh * kw, L) back into an image (N, C, *output_size) (col2im)."""
    o, k, d, p, s = (_pair(output_size, "output_size"), _pair(kernel_size, "kernel_size"), _pair(dilation, "dilation"),
                     _pair(padding, "padding"), _pair(stride, "stride"))
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input Tensors are supported "
                                  f"(got {input.ndim}D)")
    batched = input.ndim == 3
    x = input if batched else input.unsqueeze(0)
    kk = k[0] * k[1]
    if x.shape[1] % kk:
        raise RuntimeError(f"Expected size of input's dimension 1 to be divisible by the product of kernel_size, but "
                           f"got input.size(1)={x.shape[1]} and kernel_size=({k[0]}, {k[1]})")
    oh, ow = _blocks(o, k, d, p, s)
    if oh * ow != x.shape[2]:
        raise RuntimeError(f"Given output_size=({o[0]}, {o[1]}), kernel_size=({k[0]}, {k[1]}), dilation=({d[0]}, "
                           f"{d[1]}), padding=({p[0]}, {p[1]}), stride=({s[0]}, {s[1]}), expected size of input's "
                           f"dimension 2 to match the calculated number of sliding blocks {oh} * {ow} = {oh * ow}, "
                           f"but got input.size(2)={x.shape[2]}.")
    out = call(FOLD, x, output_size=o, kernel=k, dilation=d, padding=p, stride=s)
    return out if batched else out.squeeze(0)


def _shuffle_fwd(x, *, r):
    *b, c, h, w = x.shape
    x = x.reshape(tuple(b) + (c // (r * r), r, r, h, w))
    n = len(b)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2))
    return x.reshape(tuple(b) + (c // (r * r), h * r, w * r))


def _unshuffle_fwd(x, *, r):
    *b, c, h, w = x.shape
    x = x.reshape(tuple(b) + (c, h // r, r, w // r, r))
    n = len(b)
    x = jnp.transpose(x, tuple(range(n)) + (n, n + 2, n + 4, n + 1, n + 3))
    return x.reshape(tuple(b) + (c * r * r, h // r, w // r))


PIXEL_SHUFFLE = Op("PixelShuffleBackward0", _shuffle_fwd)
PIXEL_UNSHUFFLE = Op("PixelUnshuffleBackward0", _unshuffle_fwd)


def pixel_shuffle(input, upscale_factor):
    """(*, C * r**2, H, W) -> (*, C, H * r, W * r)."""
    r = int(upscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    if input.shape[-3] % (r * r):
        raise RuntimeError("pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={input.shape[-3]} is not divisible by {r * r}")
    return call(PIXEL_SHUFFLE, input, r=r)


def pixel_unshuffle(input, downscale_factor):
    """(*, C, H * r, W * r) -> (*, C * r**2, H, W)."""
    r = int(downscale_factor)
    if input.ndim < 3:
        raise RuntimeError(f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
                           f"{input.ndim} dimension(s)")
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    if input.shape[-2] % r:
        raise RuntimeError("pixel_unshuffle expects height to be divisible by downscale_factor, but "
                           f"input.size(-2)={input.shape[-2]} is not divisible by {r}")
    if input.shape[-1] % r:
        raise RuntimeError("pixel_unshuffle expects width to be divisible by downscale_factor, but "
                           f"input.size(-1)={input.shape[-1]} is not divisible by {r}")
    return call(PIXEL_UNSHUFFLE, input, r=r)


def _bilinear_fwd(x1, x2, w, b):
    y = jnp.einsum("...i,oij,...j->...o", x1, w, x2, precision=linalg._prec())
    return y if b is None else y + b


BILINEAR = Op("BilinearBackward0", _bilinear_fwd)


def bilinear(input1, input2, weight, bias=None):
    """``y = x1^T A x2 + b`` over the last dims: ``weight`` (out, in1, in2)."""
    if input1.shape[:-1] != input2.shape[:-1]:
        raise RuntimeError(f"bilinear(): input batch dimensions do not match: got {list(input1.shape[:-1])} and "
                           f"{list(input2.shape[:-1])}")
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1] or input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input sizes do not match the weight: input1 {list(input1.shape)}, input2 "
                           f"{list(input2.shape)}, weight {list(weight.shape)}")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{weight.shape[0]}")
    return call(BILINEAR, input1, input2, weight, bias)
