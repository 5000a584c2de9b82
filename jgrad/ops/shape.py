"""Shape ops. The ops PyTorch documents as views return views: tensors on their input's storage
(``jgrad.runtime._views`` makes them, ``jgrad.runtime._view_writes`` carries writes through them); the others (``cat``,
``repeat``, ``flip``, a ``reshape`` no strides allow...) copy. Every op here is differentiable through its
formula or ``jax.vjp``. Indexing is in ``ops.indexing``.

Imports ``_dispatch``, ``_views``/``_view_writes``/``_layout`` (views), ``_dtype``, ``_tensor`` and
``ops._registry``.
"""
from __future__ import annotations

import builtins
import math

import jax.numpy as jnp
import numpy as np

from ..core import _dtype, _layout
from ..runtime import _bounds, _view_writes, _views
from ..runtime._dispatch import Op, call
from ..core._tensor import Tensor
from ._registry import (as_index_or, check_extent, expect_tensor, check_new_shape, norm_dim, parse_size, tensor_method,
                        type_name, wrap_dim)


def _infer_shape(shape, numel):
    inferred = False
    for i, s in enumerate(shape):
        if s == -1:
            if inferred:
                raise RuntimeError("only one dimension can be inferred")
            inferred = True
        elif s < 0:
            raise RuntimeError(f"invalid shape dimension {s} at index {i} of shape {list(shape)}")
    known = math.prod(s for s in shape if s != -1)
    if -1 in shape:
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
        shape = tuple(numel // known if s == -1 else s for s in shape)
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{list(shape)}' is invalid for input of size {numel}")
    return shape


RESHAPE = Op("ViewBackward0", lambda a, shape: jnp.reshape(a, shape),
             lambda ctx, g: (g.reshape(ctx.in_avals[0][0]),), save=())


def _reshape_view(input, shape, strides=None, name="ViewBackward0"):
    """A view of ``input`` with ``shape`` (its elements in the same order), or None where its strides allow
    none. ``strides`` overrides the geometry PyTorch gives (``squeeze``/``unsqueeze``)."""
    g = _views.geometry(input)
    if strides is None:
        strides = _layout.view_strides(g.shape, g.strides, shape)
        if strides is None:
            return None
    return _views.view(input, ("reshape", tuple(input.shape), tuple(shape)), (), name, shape, strides, g.offset)


def _reshape(input, shape, name):
    shape = _infer_shape(shape, input.numel())
    if not input.numel():  # the only case where a new shape's extent can overflow (its product is 0)
        check_extent(shape, input.dtype.itemsize, name)
    out = _reshape_view(input, shape)
    if out is not None:
        return out
    if name == "view":
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one dimension "
                           "spans across two contiguous subspaces). Use .reshape(...) instead.")
    return call(RESHAPE, input, shape=shape)  # PyTorch's reshape copies where no view exists


@tensor_method()
def reshape(input, *shape):
    return _reshape(input, parse_size(shape, "reshape", "shape"), "reshape")


@tensor_method()
def view(input, *shape):
    if len(shape) == 1 and not isinstance(shape[0], (builtins.int, tuple, list)) and _dtype_like(shape[0]):
        return _view_dtype(input, shape[0])
    return _reshape(input, parse_size(shape, "view"), "view")


def _dtype_like(x):
    return isinstance(x, (_dtype.dtype, np.dtype, type)) and not isinstance(x, Tensor)


def _view_dtype(input, dt):
    dt = _dtype.canonical(dt)
    if dt is input.dtype:
        return _views.view(input, ("reshape", input.shape, input.shape), (), "ViewBackward0", input.shape,
                           _views.geometry(input).strides, _views.geometry(input).offset)
    raise RuntimeError(f"Tensor.view({dt}) reinterprets memory as another dtype, which jgrad does not support: use "
                       f".to({dt}) for a converted copy.")


@tensor_method()
def view_as(input, other):
    return view(input, other.shape)


@tensor_method("reshape_as")
def reshape_as(input, other):
    return reshape(input, other.shape)


@tensor_method()
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, input.ndim, "flatten", "start_dim"), wrap_dim(end_dim, input.ndim, "flatten", "end_dim")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return input  # PyTorch returns the tensor itself
    shape = input.shape[:s] + (math.prod(input.shape[s:e + 1]),) + input.shape[e + 1:]
    return reshape(input, shape)


@tensor_method()
def unflatten(input, dim, sizes):
    d = wrap_dim(dim, input.ndim)
    sizes = _infer_shape(parse_size(sizes, "unflatten", "sizes", pos=None, varargs=False), input.shape[d])
    return view(input, input.shape[:d] + sizes + input.shape[d + 1:])


@tensor_method()
def squeeze(input, dim=None):
    g = _views.geometry(input)
    if dim is None:
        keep = [i for i, s in enumerate(input.shape) if s != 1]
        name = "SqueezeBackward0"
    else:
        dims = norm_dim(dim, input.ndim, "squeeze")
        keep = [i for i, s in enumerate(input.shape) if not (i in dims and s == 1)]
        name = "SqueezeBackward1" if isinstance(dim, builtins.int) else "SqueezeBackward2"
    shape = tuple(input.shape[i] for i in keep)
    return _reshape_view(input, shape, tuple(g.strides[i] for i in keep), name)


@tensor_method()
def unsqueeze(input, dim):
    d = wrap_dim(dim, input.ndim + 1, "unsqueeze")
    g = _views.geometry(input)
    stride = g.shape[d] * g.strides[d] if d < input.ndim else 1
    return _reshape_view(input, input.shape[:d] + (1,) + input.shape[d:], g.strides[:d] + (stride,) + g.strides[d:],
                         "UnsqueezeBackward0")


def _permuted(input, perm, name):
    g = _views.geometry(input)
    return _views.view(input, ("perm", tuple(perm)), (), name, tuple(input.shape[p] for p in perm),
                       tuple(g.strides[p] for p in perm), g.offset)


@tensor_method()
def permute(input, *dims):
    dims = parse_size(dims, "permute", "dims")
    if len(dims) != input.ndim:
        raise RuntimeError(f"permute(sparse_coo): number of dimensions in the tensor input does not match the "
                           f"length of the desired ordering of dimensions i.e. input.dim() = {input.ndim} is not "
                           f"equal to len(dims) = {len(dims)}")
    perm = tuple(wrap_dim(d, input.ndim) for d in dims)
    if len(set(perm)) != len(perm):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return _permuted(input, perm, "PermuteBackward0")


def _swap(input, dim0, dim1, name):
    a, b = wrap_dim(dim0, input.ndim, "transpose", "dim0"), wrap_dim(dim1, input.ndim, "transpose", "dim1")
    perm = list(range(input.ndim))
    if perm:  # a 0-d tensor: transpose(0, 0) is the identity (still a new tensor, as PyTorch's view)
        perm[a], perm[b] = perm[b], perm[a]
    return _permuted(input, perm, name)


@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    return _swap(input, dim0, dim1, "TransposeBackward0")


@tensor_method()
def t(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _swap(input, 0, -1, "TBackward0") if input.ndim == 2 else _permuted(input, tuple(range(input.ndim)),
                                                                                  "TBackward0")


@tensor_method("transpose_", "swapaxes_", "swapdims_")
def transpose_(input, dim0, dim1):
    a, b = wrap_dim(dim0, input.ndim, "transpose", "dim0"), wrap_dim(dim1, input.ndim, "transpose", "dim1")
    perm = list(range(input.ndim))
    if perm:
        perm[a], perm[b] = perm[b], perm[a]
    return _view_writes.reshape_inplace(input, lambda: _permuted(input, perm, "TransposeBackward1"),
                                  lambda v: ("perm", tuple(perm)))


@tensor_method()
def t_(input):
    if input.ndim > 2:
        raise RuntimeError(f"t_() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    perm = (1, 0) if input.ndim == 2 else tuple(range(input.ndim))
    return _view_writes.reshape_inplace(input, lambda: _permuted(input, perm, "TBackward1"), lambda v: ("perm", perm))


@tensor_method()
def squeeze_(input, dim=None):
    old = tuple(input.shape)
    return _view_writes.reshape_inplace(input, lambda: squeeze(input, dim), lambda v: ("reshape", tuple(v.shape), old))


@tensor_method()
def unsqueeze_(input, dim):
    old = tuple(input.shape)
    return _view_writes.reshape_inplace(input, lambda: unsqueeze(input, dim), lambda v: ("reshape", tuple(v.shape), old))


Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


@tensor_method()
def expand(input, *sizes):
    sizes = parse_size(sizes, "expand")
    if len(sizes) < input.ndim:
        raise RuntimeError(f"expand(jgrad.{input.dtype.name}{{{list(input.shape)}}}, size={list(sizes)}): the "
                           f"number of sizes provided ({len(sizes)}) must be greater or equal to the number of "
                           f"dimensions in the tensor ({input.ndim})")
    lead = len(sizes) - input.ndim
    for i in range(lead):
        if sizes[i] < 0:
            raise RuntimeError(f"The expanded size of the tensor ({sizes[i]}) isn't allowed in a leading, "
                               f"non-existing dimension {i}")
    shape = tuple(input.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
    for i, s in enumerate(input.shape):
        if s != 1 and s != shape[i + lead]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[i + lead]}) must match the existing size "
                               f"({s}) at non-singleton dimension {i + lead}.  Target sizes: {list(sizes)}.  "
                               f"Tensor sizes: {list(input.shape)}")
        if shape[i + lead] < 0:  # PyTorch's wording for a negative size where the tensor has a 1
            raise RuntimeError("numel: integer multiplication overflow")
    shape = check_extent(shape, input.dtype.itemsize, "expand")
    g = _views.geometry(input)
    strides = (0,) * lead + tuple(0 if s == 1 and shape[i + lead] != 1 else g.strides[i]
                                  for i, s in enumerate(input.shape))
    return _views.view(input, ("expand", tuple(input.shape), shape), (), "ExpandBackward0", shape, strides, g.offset)


@tensor_method()
def expand_as(input, other):
    return expand(input, other.shape)


def broadcast_to(input, shape):
    return expand(input, parse_size(shape, "broadcast_to", pos=None, varargs=False))


@tensor_method()
def contiguous(input, memory_format=None):
    """The tensor itself when its elements are laid out contiguously, else a contiguous copy."""
    g = _views.geometry(input)
    if _layout.is_contiguous(g.shape, g.strides):
        return input
    return input.clone()


@tensor_method()
def is_contiguous(input, memory_format=None) -> bool:
    """Whether the strides lay the elements out in order: row-major (the default format) or, for
    ``channels_last``/``channels_last_3d``, with the channel dimension innermost."""
    g = _views.geometry(input)
    name = getattr(memory_format, "_name", "contiguous_format")
    if name in ("channels_last", "channels_last_3d"):
        order = (0, 2, 3, 1) if name == "channels_last" else (0, 2, 3, 4, 1)
        if input.ndim != len(order):
            return False
        return _layout.is_contiguous(tuple(g.shape[d] for d in order), tuple(g.strides[d] for d in order))
    return _layout.is_contiguous(g.shape, g.strides)


@tensor_method()
def stride(input, dim=None):
    """Strides in elements, as PyTorch reports them for this tensor's place in its storage."""
    s = _views.geometry(input).strides
    return s if dim is None else s[wrap_dim(dim, input.ndim)]


@tensor_method()
def storage_offset(input) -> int:
    return _views.geometry(input).offset


@tensor_method()
def diagonal(input, offset=0, dim1=0, dim2=1):
    """The diagonal as a view (``offset`` above the main one, or below when negative), moved to the last dim."""
    offset = as_index_or(offset, "diagonal", "offset", "int", pos=None)
    if input.ndim < 2:
        raise RuntimeError(f"diagonal dimensions requires ndim larger than 1, but got ndim {input.ndim}")
    d1, d2 = wrap_dim(dim1, input.ndim), wrap_dim(dim2, input.ndim)
    if d1 == d2:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    g = _views.geometry(input)
    n1, n2 = input.shape[d1], input.shape[d2]
    n = builtins.max(builtins.min(n1, n2 - offset) if offset >= 0 else builtins.min(n1 + offset, n2), 0)
    start = g.offset
    if n:
        start += offset * g.strides[d2] if offset >= 0 else -offset * g.strides[d1]
    keep = [i for i in range(input.ndim) if i not in (d1, d2)]
    shape = tuple(input.shape[i] for i in keep) + (n,)
    strides = tuple(g.strides[i] for i in keep) + (g.strides[d1] + g.strides[d2],)
    return _views.view(input, ("diagonal", offset, d1, d2), (), "DiagonalBackward0", shape, strides, start)


@tensor_method()
def unfold(input, dimension, size, step):
    """Windows of ``size`` elements ``step`` apart along ``dimension``, as a view with a new last dim."""
    g = _views.geometry(input)
    d = wrap_dim(dimension, builtins.max(input.ndim, 1))
    n = input.shape[d] if input.ndim else 1
    if size > n:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {n} but size is {size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    if input.ndim == 0:
        return _reshape_view(input, (1,), (1,), "UnfoldBackward0")
    windows = (n - size) // step + 1
    shape = input.shape[:d] + (windows,) + input.shape[d + 1:] + (size,)
    strides = g.strides[:d] + (g.strides[d] * step,) + g.strides[d + 1:] + (g.strides[d],)
    return _views.view(input, ("unfold", d, size, step), (), "UnfoldBackward0", shape, strides, g.offset)


@tensor_method()
def as_strided(input, size, stride, storage_offset=None):
    """A view of ``input``'s storage with the given sizes, strides and offset (in elements)."""
    size = parse_size(size, "as_strided", "size", pos=None, varargs=False)
    stride = parse_size(stride, "as_strided", "stride", pos=None, varargs=False)
    if len(size) != len(stride):
        raise RuntimeError("mismatch in length of strides and shape")
    if builtins.any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: Negative strides are not supported at the moment, got strides: {list(stride)}")
    offset = _views.geometry(input).offset if storage_offset is None else storage_offset
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    need = offset + builtins.sum((n - 1) * st for n, st in zip(size, stride)) + 1 if 0 not in size else 0
    have = _views.alias_of(input).storage.root.numel()
    if need > have:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                           f"itemsize {input.dtype.itemsize} requiring a storage size of {need * input.dtype.itemsize} "
                           f"are out of bounds for storage of size {have * input.dtype.itemsize}")
    return _views.as_strided(input, size, stride, offset)


CAT = Op("CatBackward0", lambda *xs, dim: jnp.concatenate(xs, axis=dim))
STACK = Op("StackBackward0", lambda *xs, dim: jnp.stack(xs, axis=dim))


def _tensor_list(tensors, name):
    """PyTorch's ``TypeError`` wording for a ``tensors`` argument that is not a sequence of tensors."""
    if isinstance(tensors, Tensor) or not isinstance(tensors, (tuple, list)):
        raise TypeError(f"{name}(): argument 'tensors' (position 1) must be tuple of Tensors, not "
                        f"{type_name(tensors)}")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"expected Tensor as element {i} in argument 0, but got {type_name(t)}")
    return list(tensors)


def cat(tensors, dim=0):
    """Concatenate along an existing dimension."""
    tensors = _tensor_list(tensors, "cat")
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    ref = next((t for t in tensors if t.shape != (0,)), tensors[0])
    # PyTorch skips legacy empty 1-D tensors (shape [0]) next to tensors of other ranks
    tensors = [t for t in tensors if t.shape != (0,) or ref.ndim == 1]
    d = wrap_dim(dim, ref.ndim)
    for i, t in enumerate(tensors):
        if t.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {t.ndim}")
        for k in range(ref.ndim):
            if k != d and t.shape[k] != ref.shape[k]:
                raise RuntimeError(f"Sizes of tensors must match except in dimension {d}. Expected size "
                                   f"{ref.shape[k]} but got size {t.shape[k]} for tensor number {i} in the list.")
    return _bounds.join(call(CAT, *tensors, dim=d), tensors)  # (indices put together stay in range)


concat = concatenate = cat


def stack(tensors, dim=0):
    """Stack along a new dimension."""
    tensors = _tensor_list(tensors, "stack")
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} at "
                               f"entry 0 and {list(t.shape)} at entry {i}")
    return _bounds.join(call(STACK, *tensors, dim=wrap_dim(dim, tensors[0].ndim + 1)), tensors)


def _slices(input, d, sections):
    """One index step per section along ``d`` (start, length), with PyTorch's geometry."""
    g = _views.geometry(input)
    out, start = [], 0
    for n in sections:
        sizes = tuple(n if i == d else s for i, s in enumerate(input.shape))
        step = ("index", sizes, (1,) * input.ndim, tuple(range(input.ndim)), (d,))
        out.append((step, (start,), sizes, g.strides, g.offset + start * g.strides[d]))
        start += n
    return out


@tensor_method()
def split(input, split_size_or_sections, dim=0):
    d = wrap_dim(dim, input.ndim, "split")
    n = input.shape[d]
    if not isinstance(split_size_or_sections, (tuple, list)):
        s = as_index_or(split_size_or_sections, "split_with_sizes", "split_sizes",
                        "tuple of ints", pos=2)
        if s < 0:
            raise RuntimeError(f"split expects split_size be non-negative, but got split_size={s}")
        if s == 0 and n:
            raise RuntimeError(f"split_size can only be 0 if dimension size is 0, but got dimension size of {n}")
        sections = tuple([s] * (n // s) + ([n % s] if n % s else [])) if n else (0,)
        name = "SplitBackward0"
    else:
        sections = parse_size(split_size_or_sections, "split_with_sizes", "split_sizes", pos=2, varargs=False)
        if builtins.any(x < 0 for x in sections):
            raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                               f"split_sizes={list(sections)}")
        if builtins.sum(sections) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {d}), but got split_sizes={list(sections)}")
        name = "SplitWithSizesBackward0"
    return _views.view_multi(input, _slices(input, d, sections), name)


@tensor_method()
def chunk(input, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input.ndim)
    size = builtins.max(-(-input.shape[d] // chunks), 1)
    return split(input, size, d)


@tensor_method()
def unbind(input, dim=0):
    if input.ndim == 0:
        raise IndexError("Dimension specified as 0 but tensor has no dimensions")
    d = wrap_dim(dim, input.ndim)
    pieces = []
    for step, dyn, sizes, strides, offset in _slices(input, d, (1,) * input.shape[d]):
        keep = tuple(i for i in range(input.ndim) if i != d)
        step = step[:3] + (keep, step[4])
        pieces.append((step, dyn, tuple(sizes[i] for i in keep), tuple(strides[i] for i in keep), offset))
    return _views.view_multi(input, pieces, "UnbindBackward0") if pieces else ()


REPEAT = Op("RepeatBackward0", lambda a, reps: jnp.tile(a, reps))


@tensor_method()
def repeat(input, *sizes):
    sizes = parse_size(sizes, "repeat", "repeats")
    if len(sizes) < input.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    padded = (1,) * (len(sizes) - input.ndim) + tuple(input.shape)
    check_new_shape(tuple(a * r for a, r in zip(padded, sizes)), input.dtype.itemsize, "repeat")
    return call(REPEAT, input, reps=sizes)


FLIP = Op("FlipBackward0", lambda a, dims: jnp.flip(a, dims), lambda ctx, g: (jnp.flip(g, ctx.attrs["dims"]),),
          save=())


@tensor_method()
def flip(input, dims):
    dims = norm_dim(dims, input.ndim)
    return call(FLIP, input, dims=dims if input.ndim else ())


ROLL = Op("RollBackward0", lambda a, shifts, dims: jnp.roll(a, shifts, dims))


def _int_tuple(v, name, arg, pos):
    if isinstance(v, (tuple, list)):
        return parse_size(v, name, arg, pos=pos, varargs=False)
    return (as_index_or(v, name, arg, "tuple of ints", pos=pos),)


@tensor_method()
def roll(input, shifts, dims=None):
    shifts = _int_tuple(shifts, "roll", "shifts", 1)
    dims = () if dims is None else _int_tuple(dims, "roll", "dims", 2)
    if not shifts:
        raise RuntimeError("`shifts` required")
    if not dims and len(shifts) == 1:  # roll the flattened tensor
        return call(ROLL, input, shifts=shifts[0], dims=None)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
    if input.ndim == 0:
        raise IndexError(f"Dimension specified as {dims[0]} but tensor has no dimensions")
    return call(ROLL, input, shifts=shifts, dims=tuple(wrap_dim(d, input.ndim) for d in dims))


TRIL = Op("TrilBackward0", lambda a, k: jnp.tril(a, k), lambda ctx, g: (jnp.tril(g, ctx.attrs["k"]),), save=())
TRIU = Op("TriuBackward0", lambda a, k: jnp.triu(a, k), lambda ctx, g: (jnp.triu(g, ctx.attrs["k"]),), save=())


def _tri(op, name, input, diagonal):
    expect_tensor(input, name)
    if input.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    return call(op, input, k=as_index_or(diagonal, name, "diagonal", "int", pos=None))


@tensor_method()
def tril(input, diagonal=0):
    return _tri(TRIL, "tril", input, diagonal)


@tensor_method()
def triu(input, diagonal=0):
    return _tri(TRIU, "triu", input, diagonal)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad_fwd(a, v, widths, mode):
    if mode == "constant":
        return jnp.pad(a, widths, mode="constant", constant_values=jnp.asarray(v, a.dtype))
    return jnp.pad(a, widths, mode=mode)


PAD = Op("ConstantPadNdBackward0", _pad_fwd)


def pad(input, pad, mode="constant", value=None):
    """``torch.nn.functional.pad``: ``pad`` lists (left, right) pairs from the last dimension."""
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > input.ndim:
        raise RuntimeError(f"Padding length should be less than or equal to two times the input dimension but got "
                           f"padding length {len(pad)} and input of dimension {input.ndim}")
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"Unsupported padding mode {mode!r}: use one of {list(_PAD_MODES)}")
    widths = [(0, 0)] * input.ndim
    for i in range(len(pad) // 2):
        widths[input.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if builtins.any(lo < 0 or hi < 0 for lo, hi in widths):
        out = input
        sl = tuple(slice(-lo if lo < 0 else None, hi if hi < 0 else None) for lo, hi in widths)
        out = out[sl]
        widths = [(builtins.max(lo, 0), builtins.max(hi, 0)) for lo, hi in widths]
        input = out
    return call(PAD, input, 0 if value is None else value, widths=tuple(widths), mode=_PAD_MODES[mode])
