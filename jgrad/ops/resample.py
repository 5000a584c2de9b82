"""Resampling (``torch.nn.functional``): ``interpolate`` (nearest, nearest-exact, linear, bilinear, bicubic,
trilinear, area), ``grid_sample`` and ``affine_grid``.

``interpolate`` is separable: each spatial axis is resampled in turn by gathering its source taps and
weighting them, with PyTorch's source-index formulas (``area_pixel_compute_source_index``: half-pixel
centres, or ``align_corners``; a given ``scale_factor`` sets the scale as ``1 / scale_factor`` unless
``recompute_scale_factor``) and its bicubic kernel (``A = -0.75``). ``jax.image.resize`` is not used:
its bicubic kernel is Keys' ``A = -0.5`` and it antialiases when downsampling, so its values are not
PyTorch's. ``antialias=True`` (bilinear, bicubic) is PyTorch's: one normalised filter matrix per axis, the
filter widened by the scale when downsampling. The taps and weights are NumPy constants of the kernel (they depend only on the shapes);
gradients come from ``jax.vjp`` (a scatter-add of the weighted taps). ``area`` is PyTorch's adaptive
average pooling, written as one averaging matrix per axis.

``grid_sample`` gathers the 2**d (bilinear), 1 (nearest) or 4**2 (bicubic) taps of every output point
from the flattened spatial dims, with PyTorch's unnormalisation, padding modes and rounding (nearest:
half to even); gradients to the input and to the grid come from ``jax.vjp``.

Imports ``_dispatch``, ``_tensor`` and ``ops._registry``.
"""
from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear", "grid_sample", "affine_grid"]

_A = -0.75  # PyTorch's bicubic convolution coefficient
_LINEAR = {"linear": 3, "bilinear": 4, "trilinear": 5}


# ---- per-axis taps (NumPy, at trace time) -------------------------------------------------------------
def _scale(n_in, n_out, align_corners, scale):
    """PyTorch's ``area_pixel_compute_scale``."""
    if align_corners:
        return (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else n_in / n_out


def _source(scale, dst, align_corners, cubic):
    """PyTorch's ``area_pixel_compute_source_index``, in ``dst``'s precision (its kernels' accumulation type:
    float64 for float64 inputs, float32 otherwise)."""
    ft = dst.dtype.type
    scale = ft(scale)
    if align_corners:
        return scale * dst
    src = scale * (dst + ft(0.5)) - ft(0.5)
    return src if cubic else np.maximum(src, ft(0))


def _cubic_weights(t):
    def cc1(x):  # |x| <= 1
        return ((_A + 2) * x - (_A + 3)) * x * x + 1

    def cc2(x):  # 1 < |x| < 2
        return ((_A * x - 5 * _A) * x + 8 * _A) * x - 4 * _A

    return np.stack([cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)], -1)


def _taps(mode, n_in, n_out, align_corners, scale, ft):
    """``(index (n_out, k), weight (n_out, k) or None)`` of one axis, computed in precision ``ft``."""
    dst = np.arange(n_out, dtype=ft)
    if mode in ("nearest", "nearest-exact"):  # nearest is in float32 whatever the input (PyTorch's kernels)
        dst = dst.astype(np.float32)
        s = np.float32(1.0 / scale if scale is not None and scale > 0 else n_in / n_out)
        src = np.floor((dst + np.float32(0.5)) * s if mode == "nearest-exact" else dst * s)
        return np.minimum(src.astype(np.int64), n_in - 1)[:, None], None
    s = _scale(n_in, n_out, align_corners, scale)
    if mode == "cubic":
        src = _source(s, dst, align_corners, True)
        i0 = np.floor(src)
        idx = np.clip(i0.astype(np.int64)[:, None] + np.arange(-1, 3), 0, n_in - 1)
        return idx, _cubic_weights(src - i0)
    src = _source(s, dst, align_corners, False)
    i0 = src.astype(np.int64)
    i1 = i0 + (i0 < n_in - 1)
    l1 = src - i0
    return np.stack([i0, i1], -1), np.stack([1 - l1, l1], -1)


def _area_matrix(n_in, n_out):
    """Adaptive average pooling along one axis as an (n_out, n_in) matrix (PyTorch's bins)."""
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -(-((i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def _aa_filter(x, cubic):
    x = np.abs(x)
    if not cubic:
        return np.maximum(0.0, 1.0 - x)
    a = -0.5  # the antialiasing kernels use Keys' -0.5 (PIL's), not the -0.75 of plain bicubic
    return np.where(x < 1, ((a + 2) * x - (a + 3)) * x * x + 1, np.where(x < 2, (((x - 5) * x + 8) * x - 4) * a, 0.0))


def _aa_matrix(n_in, n_out, align_corners, scale, cubic):
    """PyTorch's antialiased resampling along one axis as an (n_out, n_in) matrix: the filter widened by the
    scale when downsampling, each row normalised (``_compute_weights_aa``)."""
    s = _scale(n_in, n_out, align_corners, scale)
    support = (2.0 if cubic else 1.0) * (s if s >= 1.0 else 1.0)
    inv = 1.0 / s if s >= 1.0 else 1.0
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        center = s * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), n_in)
        w = _aa_filter((np.arange(lo, hi) - center + 0.5) * inv, cubic)
        m[i, lo:hi] = w / w.sum() if w.sum() != 0 else w
    return m


def _resample_axis(x, axis, mode, n_out, align_corners, scale):
    n_in = x.shape[axis]
    if mode in ("area", "aa-linear", "aa-cubic"):
        m = _area_matrix(n_in, n_out) if mode == "area" else _aa_matrix(n_in, n_out, align_corners, scale,
                                                                         mode == "aa-cubic")
        m = jnp.asarray(m, x.dtype)
        y = jnp.tensordot(x, m, axes=([axis], [1]), precision=jax.lax.Precision.HIGHEST)
        return jnp.moveaxis(y, -1, axis)
    idx, w = _taps(mode, n_in, n_out, align_corners, scale, np.float64 if x.dtype == np.float64 else np.float32)
    if w is None:
        return jnp.take(x, idx[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = n_out
    out = None
    for k in range(idx.shape[1]):
        term = jnp.take(x, idx[:, k], axis=axis) * jnp.asarray(w[:, k], x.dtype).reshape(shape)
        out = term if out is None else out + term
    return out


def _interp_fwd(x, *, mode, size, align_corners, scales, antialias=False):
    axis_mode = "cubic" if mode == "bicubic" else ("linear" if mode in _LINEAR else mode)
    if antialias:
        axis_mode = "aa-" + axis_mode
    for i, n in enumerate(size):
        x = _resample_axis(x, 2 + i, axis_mode, n, align_corners, scales[i] if scales else None)
    return x


_INTERP_NAMES = {"nearest": "UpsampleNearest{}DBackward0", "nearest-exact": "UpsampleNearestExact{}DBackward0",
                 "linear": "UpsampleLinear1DBackward0", "bilinear": "UpsampleBilinear2DBackward0",
                 "bicubic": "UpsampleBicubic2DBackward0", "trilinear": "UpsampleTrilinear3DBackward0",
                 "area": "AdaptiveAvgPool{}DBackward0"}
_INTERP_OPS: dict = {}


def _interp_op(mode, nd):
    key = (mode, nd)
    op = _INTERP_OPS.get(key)
    if op is None:
        op = _INTERP_OPS[key] = Op(_INTERP_NAMES[mode].format(nd), _interp_fwd)
    return op


def _is_int(x):
    return isinstance(x, numbers.Integral) or (isinstance(x, Tensor) and x.ndim == 0 and not x.is_floating_point())


def _sizes(input, size, scale_factor, recompute_scale_factor, mode):
    """PyTorch's argument handling of ``interpolate``: (output sizes, scale factors or None)."""
    dim = input.ndim - 2
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError("Input and output must have the same number of spatial dimensions, but got input "
                                 f"with spatial dimensions of {list(input.shape[2:])} and output size of {size}. "
                                 "Please provide input tensor in (N, C, d1, d2, ...,dK) format and output size in "
                                 "(o1, o2, ...,oK) format.")
            if not all(_is_int(s) for s in size):
                raise TypeError("expected size to be one of int or Tuple[int] or Tuple[int, int] or Tuple[int, int, "
                                f"int], but got size with types {[type(s) for s in size]}")
            out = [int(s) for s in size]
        else:
            out = [int(size)] * dim
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        return out, None
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    if isinstance(scale_factor, (list, tuple)):
        if len(scale_factor) != dim:
            raise ValueError("Input and scale_factor must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(input.shape[2:])} and scale_factor of shape "
                             f"{scale_factor}. Please provide input tensor in (N, C, d1, d2, ...,dK) format and "
                             "scale_factor in (s1, s2, ...,sK) format.")
        scales = [float(s) for s in scale_factor]
    else:
        scales = [float(scale_factor)] * dim
    out = [int(math.floor(float(n) * s)) for n, s in zip(input.shape[2:], scales)]
    if mode == "area" or recompute_scale_factor:
        return out, None
    return out, scales


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dims of ``(N, C, *spatial)`` (``torch.nn.functional.interpolate``)."""
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                             "bicubic | trilinear")
    elif align_corners is None:
        align_corners = False
    out, scales = _sizes(input, size, scale_factor, recompute_scale_factor, mode)
    if antialias:
        if not (mode in ("bilinear", "bicubic") and input.ndim == 4):
            raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos modes and requires a "
                             "4-D tensor as input")
    nd = input.ndim
    need = _LINEAR.get(mode, 4 if mode == "bicubic" else None)
    if mode not in _INTERP_NAMES or nd not in (3, 4, 5) or (need is not None and need != nd):
        if need is not None and nd in (3, 4, 5) and mode != "bicubic":
            raise NotImplementedError(f"Got {nd}D input, but {mode} mode needs {need}D input")
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {nd}D) for the modes: "
                                  "nearest | linear | bilinear | bicubic | trilinear | lanczos | area | nearest-exact "
                                  f"(got {mode})")
    if mode not in ("nearest", "nearest-exact") and not input.is_floating_point():
        raise RuntimeError(f'"upsample_{mode}" not implemented for \'{_dtname(input)}\'')
    if any(n <= 0 for n in out):
        raise RuntimeError(f"Input and output sizes should be greater than 0, but got input ({', '.join(map(str, input.shape[2:]))}) "
                           f"and output ({', '.join(map(str, out))})")
    return call(_interp_op(mode, nd - 2), input, mode=mode, size=tuple(out),
                align_corners=bool(align_corners) if align_corners is not None else None,
                scales=tuple(scales) if scales else None, antialias=bool(antialias))


def _dtname(t):
    return {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}.get(
        t.dtype.name, t.dtype.name)


def _deprecated(name):
    import warnings
    warnings.warn(f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.", UserWarning,
                  stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated alias of ``interpolate``."""
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode="nearest")``."""
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """Deprecated: ``interpolate(..., mode="bilinear", align_corners=True)``."""
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)


# ---- grid_sample ---------------------------------------------------------------------------------------
def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(x, lo2, hi2):
    """PyTorch's ``reflect_coordinates`` over [lo2 / 2, hi2 / 2]."""
    if lo2 == hi2:
        return jnp.zeros_like(x)
    mn, span = lo2 / 2, (hi2 - lo2) / 2
    x = jnp.abs(x - mn)
    extra = jnp.fmod(x, span)
    flips = jnp.floor(x / span)
    return jnp.where(flips % 2 == 0, extra + mn, span - extra + mn)


def _pad_coord(x, size, padding_mode, align_corners):
    if padding_mode == "border":
        return jnp.clip(x, 0, size - 1)
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return jnp.clip(x, 0, size - 1)
    return x


def _gather(flat, idx_list, sizes, valid):
    """``flat`` (N, C, P) at integer coordinates ``idx_list`` (each (N, *out)); zero where not ``valid``."""
    lin = jnp.zeros_like(idx_list[0])
    for i, s in zip(idx_list, sizes):
        lin = lin * s + jnp.clip(i, 0, s - 1)
    n, c = flat.shape[:2]
    out_shape = lin.shape[1:]
    vals = jnp.take_along_axis(flat, lin.reshape(n, 1, -1), axis=2).reshape((n, c) + out_shape)
    return jnp.where(valid[:, None], vals, jnp.zeros((), flat.dtype))


def _in_bounds(idx_list, sizes):
    ok = None
    for i, s in zip(idx_list, sizes):
        c = (i >= 0) & (i < s)
        ok = c if ok is None else ok & c
    return ok


def _grid_sample_fwd(x, grid, *, mode, padding_mode, align_corners):
    sizes = x.shape[2:]
    nd = len(sizes)
    flat = x.reshape(x.shape[:2] + (-1,))
    # grid's last dim is (x, y[, z]): x indexes the last spatial dim
    coords = [_unnormalize(grid[..., nd - 1 - d], sizes[d], align_corners) for d in range(nd)]
    if mode == "bicubic":
        base = [jnp.floor(c) for c in coords]
        ts = [c - b for c, b in zip(coords, base)]
        ws = [_cubic_weights_jnp(t) for t in ts]
        out = 0
        for ky in range(4):
            for kx in range(4):
                raw = [base[0] - 1 + ky, base[1] - 1 + kx]
                pos = [_pad_coord(r, s, padding_mode, align_corners) for r, s in zip(raw, sizes)]
                idx = [p.astype(jnp.int32) for p in pos]
                v = _gather(flat, idx, sizes, _in_bounds(idx, sizes))
                out = out + v * (ws[0][ky] * ws[1][kx])[:, None]
        return out
    coords = [_pad_coord(c, s, padding_mode, align_corners) for c, s in zip(coords, sizes)]
    if mode == "nearest":
        idx = [jnp.round(c).astype(jnp.int32) for c in coords]
        return _gather(flat, idx, sizes, _in_bounds(idx, sizes))
    lo = [jnp.floor(c) for c in coords]
    out = 0
    for corner in range(2 ** nd):
        bits = [(corner >> (nd - 1 - d)) & 1 for d in range(nd)]
        idx = [(lo[d] + bits[d]).astype(jnp.int32) for d in range(nd)]
        w = 1
        for d in range(nd):
            frac = coords[d] - lo[d]
            w = w * (frac if bits[d] else 1 - frac)
        out = out + _gather(flat, idx, sizes, _in_bounds(idx, sizes)) * w[:, None]
    return out


def _cubic_weights_jnp(t):
    def cc1(v):
        return ((_A + 2) * v - (_A + 3)) * v * v + 1

    def cc2(v):
        return ((_A * v - 5 * _A) * v + 8 * _A) * v - 4 * _A

    return [cc2(t + 1), cc1(t), cc1(1 - t), cc2(2 - t)]


GRID_SAMPLE = {2: Op("GridSampler2DBackward0", _grid_sample_fwd), 3: Op("GridSampler3DBackward0", _grid_sample_fwd)}


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) or (N, C, D, H, W) at the normalised coordinates of ``grid`` (N, *out, d)."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or 'bicubic', but "
                         f"got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError("nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
                         f"'reflection', but got: '{padding_mode}'")
    nd = input.ndim - 2
    if nd not in (2, 3) or grid.ndim != input.ndim:
        raise RuntimeError(f"grid_sampler(): expected 4D or 5D input and grid with same number of dimensions, but got "
                           f"input with sizes {list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[0] != input.shape[0]:
        raise RuntimeError("grid_sampler(): expected grid and input to have same batch size, but got input with sizes "
                           f"{list(input.shape)} and grid with sizes {list(grid.shape)}")
    if grid.shape[-1] != nd:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {nd} in last dimension, but got grid with "
                           f"sizes {list(grid.shape)}")
    if mode == "bicubic" and nd != 2:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sampler(): expected input and grid to have the same dtype, but input has "
                           f"{input.dtype} and grid has {grid.dtype}")
    return call(GRID_SAMPLE[nd], input, grid, mode=mode, padding_mode=padding_mode, align_corners=bool(align_corners))


def _base_grid(n, align_corners, dtype):
    if align_corners:
        return jnp.linspace(-1, 1, n, dtype=dtype) if n > 1 else jnp.zeros((1,), dtype)
    return ((jnp.arange(n, dtype=dtype) * 2 + 1) / n - 1).astype(dtype)


def _affine_grid_fwd(theta, *, size, align_corners):
    spatial = size[2:]
    axes = [_base_grid(s, align_corners, theta.dtype) for s in spatial][::-1]  # x (last dim) first
    mesh = jnp.meshgrid(*axes, indexing="ij")  # indexed (x, y[, z])
    base = jnp.stack([*mesh, jnp.ones_like(mesh[0])], -1)  # (W, H[, D], d + 1)
    base = jnp.transpose(base, tuple(range(len(spatial)))[::-1] + (len(spatial),))  # (..., H, W, d + 1)
    grid = jnp.einsum("...k,njk->n...j", base, theta, precision=jax.lax.Precision.HIGHEST)
    return grid


AFFINE_GRID = Op("AffineGridGeneratorBackward0", _affine_grid_fwd)


def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, *spatial, d) of the affine maps ``theta`` (N, d, d + 1), for ``grid_sample``."""
    size = [int(s) for s in size]
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) == 4:
        if theta.ndim != 3 or tuple(theta.shape[-2:]) != (2, 3):
            raise ValueError("Expected a batch of 2D affine matrices of shape Nx2x3 for size "
                             f"{size}. Got {list(theta.shape)}.")
    elif len(size) == 5:
        if theta.ndim != 3 or tuple(theta.shape[-2:]) != (3, 4):
            raise ValueError("Expected a batch of 3D affine matrices of shape Nx3x4 for size "
                             f"{size}. Got {list(theta.shape)}.")
    else:
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
                                  f"respectively. Got size {size}.")
    if min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    if theta.shape[0] != size[0]:
        raise ValueError(f"Expected theta batch size {theta.shape[0]} to match size[0] {size[0]}")
    return call(AFFINE_GRID, theta, size=tuple(size), align_corners=bool(align_corners))
