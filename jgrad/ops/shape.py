"""Shape and indexing ops. Views are copies in jgrad (JAX arrays are immutable); every
op here is differentiable through its formula or ``jax.vjp``.

Imports ``_dispatch``, ``_checks`` (deferred index checks), ``_dtype``, ``_tensor`` and
``ops._registry``; ``ops.creation`` at the call.
"""
from __future__ import annotations

import builtins
import math

import jax.numpy as jnp
import numpy as np

from .. import _dtype
from .._dispatch import Op, call, call_inplace
from .._checks import check_range
from .._tensor import Tensor
from ._registry import (as_index, as_index_or, check_extent, expect_tensor, check_new_shape, norm_dim, parse_size, static, tensor_method,
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


def _reshape(input, shape, name):
    shape = _infer_shape(shape, input.numel())
    if not input.numel():  # the only case where a new shape's extent can overflow (its product is 0)
        check_extent(shape, input.dtype.itemsize, name)
    return call(RESHAPE, input, shape=shape)


@tensor_method()
def reshape(input, *shape):
    return _reshape(input, parse_size(shape, "reshape", "shape"), "reshape")


@tensor_method()
def view(input, *shape):
    return _reshape(input, parse_size(shape, "view"), "view")


@tensor_method()
def view_as(input, other):
    return reshape(input, other.shape)


reshape_as = view_as
tensor_method("reshape_as")(view_as)


@tensor_method()
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, 1)
    s, e = wrap_dim(start_dim, input.ndim, "flatten", "start_dim"), wrap_dim(end_dim, input.ndim, "flatten", "end_dim")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    shape = input.shape[:s] + (math.prod(input.shape[s:e + 1]),) + input.shape[e + 1:]
    return reshape(input, shape)


@tensor_method()
def unflatten(input, dim, sizes):
    d = wrap_dim(dim, input.ndim)
    sizes = _infer_shape(parse_size(sizes, "unflatten", "sizes", pos=None, varargs=False), input.shape[d])
    return reshape(input, input.shape[:d] + sizes + input.shape[d + 1:])


@tensor_method()
def squeeze(input, dim=None):
    if dim is None:
        shape = tuple(s for s in input.shape if s != 1)
    else:
        dims = norm_dim(dim, input.ndim, "squeeze")
        shape = tuple(s for i, s in enumerate(input.shape) if not (i in dims and s == 1))
    return reshape(input, shape)


@tensor_method()
def unsqueeze(input, dim):
    d = wrap_dim(dim, input.ndim + 1, "unsqueeze")
    return reshape(input, input.shape[:d] + (1,) + input.shape[d:])


def _perm_bwd(ctx, g):
    perm = ctx.attrs["perm"]
    return (jnp.transpose(g, np.argsort(perm)),)


def _perm_op(name):
    return Op(name, lambda a, perm: jnp.transpose(a, perm), _perm_bwd, save=())


PERMUTE, TRANSPOSE, T_OP = _perm_op("PermuteBackward0"), _perm_op("TransposeBackward0"), _perm_op("TBackward0")


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
    return call(PERMUTE, input, perm=perm)


def _swap(input, dim0, dim1, op):
    a, b = wrap_dim(dim0, input.ndim, "transpose", "dim0"), wrap_dim(dim1, input.ndim, "transpose", "dim1")
    perm = list(range(input.ndim))
    if perm:  # a 0-d tensor: transpose(0, 0) is the identity (still a new tensor, as PyTorch's view)
        perm[a], perm[b] = perm[b], perm[a]
    return call(op, input, perm=tuple(perm))


@tensor_method("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    return _swap(input, dim0, dim1, TRANSPOSE)


@tensor_method()
def t(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {input.ndim}D")
    return _swap(input, 0, -1, T_OP) if input.ndim == 2 else call(T_OP, input, perm=tuple(range(input.ndim)))


Tensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


EXPAND = Op("ExpandBackward0", lambda a, shape: jnp.broadcast_to(a, shape), lambda ctx, g: (g,), save=())


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
    return call(EXPAND, input, shape=check_extent(shape, input.dtype.itemsize, "expand"))


@tensor_method()
def expand_as(input, other):
    return expand(input, other.shape)


def broadcast_to(input, shape):
    return expand(input, parse_size(shape, "broadcast_to", pos=None, varargs=False))


@tensor_method()
def contiguous(input, memory_format=None):
    return input


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
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
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
    return call(CAT, *tensors, dim=d)


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
    return call(STACK, *tensors, dim=wrap_dim(dim, tensors[0].ndim + 1))


def _split_fwd(a, sections, dim):
    return tuple(jnp.split(a, np.cumsum(sections)[:-1].tolist(), axis=dim))


SPLIT = Op("SplitBackward0", _split_fwd, num_outputs=-1)


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
    else:
        sections = parse_size(split_size_or_sections, "split_with_sizes", "split_sizes", pos=2, varargs=False)
        if builtins.any(x < 0 for x in sections):
            raise RuntimeError(f"split_with_sizes expects split_sizes have only non-negative entries, but got "
                               f"split_sizes={list(sections)}")
        if builtins.sum(sections) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {d}), but got split_sizes={list(sections)}")
    out = call(SPLIT, input, sections=sections, dim=d)
    return out if isinstance(out, tuple) else (out,)


@tensor_method()
def chunk(input, chunks, dim=0):
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    d = wrap_dim(dim, input.ndim)
    size = builtins.max(-(-input.shape[d] // chunks), 1)
    return split(input, size, d)


@tensor_method()
def unbind(input, dim=0):
    d = wrap_dim(dim, input.ndim)
    return tuple(squeeze(p, d) for p in split(input, 1, d))


def _block(a, shape, skip):
    """The leading ``shape`` block of ``a`` in every dimension but ``skip`` (index smaller than input)."""
    return a[tuple(slice(None) if i == skip else slice(0, n) for i, n in enumerate(shape))]


def _scatter_index(idx, dim):
    """Full coordinates for ``a.at[...]``: ``idx`` along ``dim``, the position itself elsewhere."""
    grids = jnp.indices(idx.shape, sparse=True)
    return tuple(idx if i == dim else grids[i] for i in range(idx.ndim))


def _scatter_src(src, idx, dtype):
    src = jnp.asarray(src)
    if src.ndim:
        src = _block(src, idx.shape, None)
    return jnp.broadcast_to(src.astype(dtype), idx.shape)


GATHER = Op("GatherBackward0", lambda a, idx, dim: jnp.take_along_axis(_block(a, idx.shape, dim), idx, axis=dim))
SCATTER = Op("ScatterBackward0", lambda a, idx, src, dim: a.at[_scatter_index(idx, dim)].set(
    _scatter_src(src, idx, a.dtype)))
SCATTER_ADD = Op("ScatterAddBackward0", lambda a, idx, src, dim: a.at[_scatter_index(idx, dim)].add(
    _scatter_src(src, idx, a.dtype)))
INDEX_SELECT = Op("IndexSelectBackward0", lambda a, idx, dim: jnp.take(a, idx.reshape(-1), axis=dim))


def _out_of_bounds(cls, dim, size):
    """PyTorch's error for an index out of range (as ``_checks.check_range``'s ``make_error``)."""
    return lambda bad: cls(f"index {bad} is out of bounds for dimension {dim} with size {size}")


def _check_values(input, d, index, name):
    """The indices' values in ``[0, size)`` along ``d`` (on the device: reported at the next host sync)."""
    check_range(index, 0, input.shape[d] if input.ndim else 1, _out_of_bounds(RuntimeError, d, input.shape[d]
                                                                              if input.ndim else 1), name)
    return d


def _check_index(input, dim, index, name, src=None):
    """PyTorch's checks of gather/scatter: int index, same rank, index no larger than input, values in range."""
    if index.dtype.is_floating_point or index.dtype is _dtype.bool:
        raise RuntimeError(f"{name}(): Expected dtype int64 for index")
    d = wrap_dim(dim, input.ndim)
    if index.ndim != input.ndim and index.numel() > 0:
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for i in range(index.ndim):
        if i != d and index.shape[i] > input.shape[i]:
            raise RuntimeError(f"Size does not match at dimension {i} expected index {list(index.shape)} to be no "
                               f"larger than self {list(input.shape)} apart from dimension {d}")
        if isinstance(src, Tensor) and src.ndim and index.shape[i] > src.shape[i]:
            raise RuntimeError(f"Expected index {list(index.shape)} to be no larger than src "
                               f"{list(src.shape)} in dimension {i}")
    return _check_values(input, d, index, name)


@tensor_method()
def gather(input, dim, index):
    return call(GATHER, input, index, dim=_check_index(input, dim, index, "gather"))


@tensor_method()
def scatter(input, dim, index, src=None, value=None):
    src = value if src is None else src
    return call(SCATTER, input, index, src, dim=_check_index(input, dim, index, "scatter", src))


@tensor_method()
def scatter_add(input, dim, index, src):
    return call(SCATTER_ADD, input, index, src, dim=_check_index(input, dim, index, "scatter_add", src))


@tensor_method("scatter_")
def scatter_(input, dim, index, src=None, value=None):
    src = value if src is None else src
    return call_inplace(SCATTER, input, index, src, dim=_check_index(input, dim, index, "scatter_", src))


@tensor_method("scatter_add_")
def scatter_add_(input, dim, index, src):
    return call_inplace(SCATTER_ADD, input, index, src, dim=_check_index(input, dim, index, "scatter_add_", src))


@tensor_method()
def index_select(input, dim, index):
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype.is_floating_point or index.dtype is _dtype.bool:
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    d = wrap_dim(dim, input.ndim)
    check_range(index, 0, input.shape[d] if input.ndim else 1, lambda bad: IndexError("index out of range in self"),
                "index_select")
    return call(INDEX_SELECT, input, index, dim=d)


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


MASKED_FILL = Op("MaskedFillBackward0", lambda a, mask, v: jnp.where(mask, jnp.asarray(v, a.dtype), a))


@tensor_method()
def masked_fill(input, mask, value):
    return call(MASKED_FILL, input, mask, value)


@tensor_method("masked_fill_")
def masked_fill_(input, mask, value):
    return call_inplace(MASKED_FILL, input, mask, value)


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


NONZERO = Op("nonzero", lambda a: a, differentiable=False)


@tensor_method()
def nonzero(input, *, as_tuple=False):
    """Indices of non-zero entries (a host sync: the output shape depends on the data)."""
    from .creation import tensor
    input._host_sync("nonzero()")
    idx = np.nonzero(np.asarray(input._value))
    dt = _dtype._index_dtype()
    if as_tuple:
        return tuple(tensor(i.astype(dt.np), device=input.device) for i in idx)
    return tensor(np.stack(idx, axis=1).astype(dt.np), device=input.device)


# ---- indexing ----------------------------------------------------------------------
_T = "<tensor>"


def _consumed(i):
    """How many dimensions of the indexed tensor an index entry uses."""
    if i is None or i is Ellipsis or isinstance(i, (builtins.bool, np.bool_)):
        return 0
    if isinstance(i, (Tensor, np.ndarray)) and i.dtype in (_dtype.bool, np.bool_):
        return i.ndim
    return 1


def _index_spec(input, idx):
    """Split an index into a static spec (the kernel's cache key) and the tensors it uses (dynamic),
    checking it as PyTorch does. Boolean masks become integer indices (a host sync)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    idx = tuple(np.asarray(i) if isinstance(i, list) else i for i in idx)
    used = builtins.sum(_consumed(i) for i in idx)
    if used > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    spec, tensors, dim = [], [], 0
    for i in idx:
        if i is Ellipsis:
            spec.append(i)
            dim += input.ndim - used
        elif i is None:
            spec.append(None)
        elif isinstance(i, slice):
            spec.append(("slice", _int_or_none(i.start), _int_or_none(i.stop), _int_or_none(i.step)))
            dim += 1
        elif _consumed(i) != 1 or isinstance(i, (Tensor, np.ndarray)) and i.dtype in (_dtype.bool, np.bool_):
            dim = _mask_index(input, i, dim, spec, tensors)
        elif isinstance(i, (Tensor, np.ndarray)):
            t = _int_index(input, i, dim)
            n = input.shape[dim]
            check_range(t, -n, n, _out_of_bounds(IndexError, dim, n), "indexing")
            tensors.append(t)
            spec.append(_T)
            dim += 1
        elif isinstance(i, (int, np.integer)):
            n = input.shape[dim]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {n}")
            spec.append(builtins.int(i))
            dim += 1
        else:
            raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
                             f"valid indices (got {type(i).__name__})")
    return tuple(spec), tensors


def _int_index(input, i, dim):
    """An integer index array; host data (lists, NumPy) is bounds-checked as PyTorch does."""
    from .creation import tensor
    if isinstance(i, Tensor):
        if i.dtype.is_floating_point or i.dtype.is_complex:
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        return i
    if i.dtype.kind not in "iu":
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    n = input.shape[dim]
    bad = i[(i >= n) | (i < -n)]
    if bad.size:
        raise IndexError(f"index {bad.flat[0]} is out of bounds for dimension {dim} with size {n}")
    return tensor(i.astype(_dtype._index_dtype().np), device=input.device)


def _mask_index(input, mask, dim, spec, tensors):
    """A boolean mask over ``mask.ndim`` dimensions from ``dim``: its nonzero coordinates (host sync)."""
    from .creation import tensor
    if isinstance(mask, (builtins.bool, np.bool_)) or mask.ndim == 0:
        # x[True] adds a dimension of size 1, x[False] one of size 0. Tagged: in the kernel cache key
        # a bare True would equal the integer index 1 (True == 1, same hash).
        spec.append(("bool", builtins.bool(mask)))
        return dim
    if not isinstance(mask, Tensor):
        mask = tensor(mask, device=input.device)
    for k, size in enumerate(mask.shape):
        if size != input.shape[dim + k]:
            raise IndexError(f"The shape of the mask {list(mask.shape)} at index {k} does not match the shape of "
                             f"the indexed tensor {list(input.shape)} at index {dim + k}")
    spec.extend([_T] * mask.ndim)
    tensors.extend(nonzero(mask, as_tuple=True))
    return dim + mask.ndim


def _int_or_none(v):
    return None if v is None else builtins.int(v)


def _build_index(spec, tensors):
    it = iter(tensors)
    out = []
    for s in spec:
        if s is _T or s == _T:
            out.append(next(it))
        elif isinstance(s, tuple):
            out.append(slice(s[1], s[2], s[3]) if s[0] == "slice" else s[1])
        else:
            out.append(s)
    return tuple(out)


GETITEM = Op("IndexBackward0", lambda a, *idx, spec: a[_build_index(spec, idx)])


def _setitem_fwd(a, v, *idx, spec):
    index = _build_index(spec, idx)
    _check_value_shape(jnp.shape(v), a[index].shape)  # traced: a[index] costs nothing at run time
    return a.at[index].set(jnp.asarray(v).astype(a.dtype))


def _check_value_shape(vshape, target):
    """PyTorch's wording when the assigned value does not broadcast to the indexed region."""
    if len(vshape) > len(target):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(vshape)} cannot be broadcast to indexing "
                           f"result of shape {list(target)}")
    for k in range(1, len(vshape) + 1):
        if vshape[-k] != 1 and vshape[-k] != target[-k]:
            raise RuntimeError(f"The expanded size of the tensor ({target[-k]}) must match the existing size "
                               f"({vshape[-k]}) at non-singleton dimension {len(target) - k}.  Target sizes: "
                               f"{list(target)}.  Tensor sizes: {list(vshape)}")


SETITEM = Op("IndexPutBackward0", _setitem_fwd)


def _getitem(self, idx):
    spec, tensors = _index_spec(self, idx)
    return call(GETITEM, self, *tensors, spec=spec)


def _setitem(self, idx, value):
    spec, tensors = _index_spec(self, idx)
    if isinstance(value, Tensor) and value.device is not self.device:
        value = value.to(self.device)
    call_inplace(SETITEM, self, value, *tensors, spec=spec)


Tensor.__getitem__ = _getitem
Tensor.__setitem__ = _setitem


@tensor_method()
def narrow(input, dim, start, length):
    """PyTorch's checks (a 0-d tensor, a negative length, ``start`` out of range, past the end), then a slice."""
    if input.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if isinstance(start, Tensor):
        if start.ndim != 0 or start.dtype.is_floating_point or start.dtype.is_complex or start.dtype is _dtype.bool:
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        start = builtins.int(start.item())  # a host read, as PyTorch's narrow(Tensor start) makes
    start = as_index_or(start, "narrow", "start", "int", pos=None)
    length = as_index_or(length, "narrow", "length", "int", pos=None)
    if length < 0:
        raise RuntimeError("narrow(): length must be non-negative.")
    d = wrap_dim(dim, input.ndim, "narrow")
    n = input.shape[d]
    if not -n <= start <= n:
        raise IndexError(f"start out of range (expected to be in range of [{-n}, {n}], but got {start})")
    if start < 0:
        start += n
    if start > n - length:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size ({n}).")
    return _getitem(input, (slice(None),) * d + (slice(start, start + length),))


@tensor_method()
def select(input, dim, index):
    d = wrap_dim(dim, input.ndim)
    return _getitem(input, (slice(None),) * d + (index,))
