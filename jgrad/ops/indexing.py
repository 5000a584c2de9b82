"""Indexing: ``t[index]`` (basic indices are views, ``jgrad.runtime._views``; tensors, lists and masks copy),
``t[index] = value``, ``narrow``/``select``, ``gather``/``scatter``/``index_select``, ``masked_fill`` and
``nonzero``. Indices are checked as PyTorch checks them; values of tensor indices on the device are checked
there (``_checks``, reported at the next host sync).

Imports ``_dispatch``, ``_views``/``_view_writes``/``_layout`` (views), ``_checks``, ``_dtype``, ``_tensor``,
``autograd.grad_mode`` and ``ops._registry``; ``ops.creation`` at the call.
"""
from __future__ import annotations

import builtins

import jax.numpy as jnp
import numpy as np

from ..core import _dtype, _layout
from ..runtime import _view_writes, _views
from ..runtime._dispatch import Op, call, call_inplace
from ..runtime._checks import check_range
from ..core._tensor import Tensor
from ..autograd.grad_mode import state as _grad_state
from ._registry import as_index_or, tensor_method, wrap_dim

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


# mode="clip": an index out of range (reported by its deferred check) reads a clamped element, not NaN
GATHER = Op("GatherBackward0", lambda a, idx, dim: jnp.take_along_axis(_block(a, idx.shape, dim), idx, axis=dim,
                                                                       mode="clip"))
SCATTER = Op("ScatterBackward0", lambda a, idx, src, dim: a.at[_scatter_index(idx, dim)].set(
    _scatter_src(src, idx, a.dtype)))
def _scatter_add_fwd(a, idx, src, dim):
    if a.dtype == jnp.bool_:  # PyTorch adds booleans as a logical or (XLA's scatter-add refuses bool)
        return a.at[_scatter_index(idx, dim)].max(_scatter_src(src, idx, a.dtype))
    return a.at[_scatter_index(idx, dim)].add(_scatter_src(src, idx, a.dtype))


SCATTER_ADD = Op("ScatterAddBackward0", _scatter_add_fwd)
INDEX_SELECT = Op("IndexSelectBackward0", lambda a, idx, dim: jnp.take(a, idx.reshape(-1), axis=dim,
                                                                                mode="clip"))


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


MASKED_FILL = Op("MaskedFillBackward0", lambda a, mask, v: jnp.where(mask, jnp.asarray(v, a.dtype), a))


@tensor_method()
def masked_fill(input, mask, value):
    return call(MASKED_FILL, input, mask, value)


@tensor_method("masked_fill_")
def masked_fill_(input, mask, value):
    return call_inplace(MASKED_FILL, input, mask, value)


NONZERO = Op("nonzero", lambda a: a, differentiable=False)


@tensor_method()
def nonzero(input, *, as_tuple=False):
    """Indices of non-zero entries (a host sync: the output shape depends on the data)."""
    from .creation import tensor
    input._host_sync("nonzero()")
    v = np.asarray(input._value)
    # a 0-d input is one element with no dimensions to index: PyTorch gives shape (n, 0), or one index 0 per hit
    idx = (np.flatnonzero(v),) if v.ndim == 0 else np.nonzero(v)
    if v.ndim == 0 and not as_tuple:
        return tensor(np.zeros((len(idx[0]), 0), _dtype._index_dtype().np), device=input.device)
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


def _basic_index(input, idx):
    """A basic index (integers, slices, ``None``, ``...``) as a view step: (step, starts, shape, strides, offset,
    name), with PyTorch's checks; None for an index with tensors, lists or booleans (advanced: a copy)."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    for i in idx:
        if not (i is None or i is Ellipsis or isinstance(i, slice)
                or (isinstance(i, (builtins.int, np.integer)) and not isinstance(i, (builtins.bool, np.bool_)))):
            return None
    used = builtins.sum(1 for i in idx if i is not None and i is not Ellipsis)
    if used > input.ndim:
        raise IndexError(f"too many indices for tensor of dimension {input.ndim}")
    if builtins.sum(1 for i in idx if i is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    ell = [k for k, i in enumerate(idx) if i is Ellipsis]
    fill = (slice(None),) * (input.ndim - used)
    idx = idx[:ell[0]] + fill + idx[ell[0] + 1:] if ell else idx + fill
    g = _views.geometry(input)
    shape, strides = input.shape, g.strides
    starts, sizes, steps, out_map, out_strides = [], [], [], [], []
    offset, d, ints = g.offset, 0, False
    for i in idx:
        if i is None:
            out_map.append(-1)
            out_strides.append(shape[d] * strides[d] if d < input.ndim else 1)
        elif isinstance(i, slice):
            step = 1 if i.step is None else builtins.int(i.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start, stop, _ = slice(_int_or_none(i.start), _int_or_none(i.stop), step).indices(shape[d])
            n = builtins.max(0, -(-(stop - start) // step))
            starts.append(start), sizes.append(n), steps.append(step), out_map.append(d)
            out_strides.append(strides[d] * step)
            offset += start * strides[d]
            d += 1
        else:
            n = shape[d]
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {n}")
            i = builtins.int(i) % n
            starts.append(i), sizes.append(1), steps.append(1)
            offset += i * strides[d]
            d, ints = d + 1, True
    out_shape = tuple(sizes[k] if k >= 0 else 1 for k in out_map)
    name = "SelectBackward0" if ints else ("SliceBackward0" if input.ndim else "AliasBackward0")
    # a dimension taken whole is not moved: only the others' starts are (dynamic) arguments of the kernels
    moved = tuple(d for d in range(input.ndim) if not (starts[d] == 0 and sizes[d] == shape[d] and steps[d] == 1))
    return (("index", tuple(sizes), tuple(steps), tuple(out_map), moved), tuple(starts[d] for d in moved), out_shape,
            tuple(out_strides), offset, name)


def _getitem(self, idx):
    basic = _basic_index(self, idx)
    if basic is not None:
        step, starts, shape, strides, offset, name = basic
        return _views.view(self, step, starts, name, shape, strides, offset)
    spec, tensors = _index_spec(self, idx)
    return call(GETITEM, self, *tensors, spec=spec)


def _set_slice_fwd(a, v, *off, steps):
    dyn = off[0] if off else ()
    region = _layout.gather_chain(a, steps, dyn)
    return _layout.scatter_chain(a, jnp.broadcast_to(jnp.asarray(v), region.shape), steps, dyn)


def _set_slice_bwd(ctx, g):
    steps, off = ctx.attrs["steps"], ctx.saved[2:]
    dyn = off[0] if off else ()
    region = _layout.gather_chain(g, steps, dyn)
    return (_layout.scatter_chain(g, jnp.zeros(region.shape, g.dtype), steps, dyn), region) + (None,) * len(off)


# x[basic index] = value: PyTorch writes through a view (x[index].copy_(value)), so x's new node is CopySlices
SET_SLICE = Op("CopySlices", _set_slice_fwd, _set_slice_bwd, save=(2,), edge_args=(0, 1))


def _setitem(self, idx, value):
    if isinstance(value, Tensor) and value.device is not self.device:
        value = value.to(self.device)
    basic = _basic_index(self, idx)
    if basic is not None and self._alias is not None and self._alias.geom.steps:
        if not isinstance(value, Tensor):
            value = jnp.asarray(value)  # copy_ casts it (as PyTorch's setitem copies a scalar tensor)
        self[idx].copy_(value)  # through a view: PyTorch's t[idx].copy_(value), region by region
        return
    if basic is not None:
        step, starts, shape, strides, offset, _ = basic
        _check_value_shape(value.shape if isinstance(value, Tensor) else np.shape(value), shape)
        if self._alias is not None:  # the value may be a view of the memory it is written into
            _view_writes.check_region(_layout.Geometry((), (), shape, strides, offset), self._alias.storage, (value,))
        if self._req and self._grad_fn is None and _grad_state.grad_enabled:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
        call_inplace(SET_SLICE, self, value, *_views.offsets(starts, self._device), steps=(step,))
        return
    spec, tensors = _index_spec(self, idx)
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
