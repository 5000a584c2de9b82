"""Layouts: where a view's elements sit in its storage, as PyTorch's geometry and as jax code.

A layout is the chain of view steps that takes a storage's root array to a tensor's value, plus the
geometry PyTorch reports for it (sizes, strides and offset, in elements). The steps are pure jax:
``gather_chain`` reads a view out of its root, ``scatter_chain`` writes a new value of the view back
into the root. Both are traced inside a jitted kernel per chain structure; slice offsets are dynamic
arguments (``dyn``), so a slice at a new offset runs the same compiled kernel.

Imports jax and NumPy only: the runtime (``jgrad.runtime._views``) builds tensors and ops on top of it.

A step is a tuple whose first entry names its kind; the others are static (part of the kernel key):
- ``("index", sizes, steps, out_map, moved)``: basic indexing. Dimension ``d`` keeps ``sizes[d]``
  elements ``steps[d]`` apart, starting at 0 or, for the dimensions listed in ``moved``, at the
  matching entry of ``dyn``; then the block is reshaped: output dimension ``k`` is input dimension
  ``out_map[k]``, or a new one of size 1 where that is -1 (integer indices drop dimensions, ``None``
  adds them).
- ``("reshape", in_shape, out_shape)``, ``("perm", perm)``, ``("expand", in_shape, out_shape)``.
- ``("diagonal", offset, dim1, dim2)``, ``("unfold", dim, size, step)``.
- ``("strided", size, stride, offset)``: ``as_strided`` over the flattened input.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from jax import lax


# ---- geometry (host side) ---------------------------------------------------------------
def contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


def is_contiguous(shape, strides) -> bool:
    """PyTorch's rule: sizes of 1 are skipped, an empty tensor is contiguous."""
    if 0 in shape:
        return True
    expected = 1
    for s, st in zip(reversed(shape), reversed(strides)):
        if s != 1:
            if st != expected:
                return False
            expected *= s
    return True


def view_strides(oldshape, oldstride, newshape):
    """The strides of ``newshape`` viewing memory laid out as (``oldshape``, ``oldstride``), or None where no
    view exists (PyTorch's ``computeStride``: a dimension of the new shape may not span two non-contiguous
    chunks of the old one)."""
    if not oldshape:
        return (1,) * len(newshape)
    if math.prod(oldshape) == 0:
        return tuple(oldstride) if tuple(oldshape) == tuple(newshape) else contiguous_strides(newshape)
    newstride = [0] * len(newshape)
    view_d = len(newshape) - 1
    chunk_base = oldstride[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(oldshape) - 1, -1, -1):
        tensor_numel *= oldshape[tensor_d]
        if tensor_d == 0 or (oldshape[tensor_d - 1] != 1 and oldstride[tensor_d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or newshape[view_d] == 1):
                newstride[view_d] = view_numel * chunk_base
                view_numel *= newshape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base = oldstride[tensor_d - 1]
                tensor_numel = view_numel = 1
    return tuple(newstride) if view_d == -1 else None


def has_internal_overlap(shape, strides) -> bool:
    """Whether two elements share memory: a stride of 0 over more than one element, or strides that let two
    index tuples reach the same offset. Sorted strides that each pass the reach of the smaller ones cannot
    overlap; otherwise the offsets are counted (up to a million elements; beyond, as PyTorch's "too hard",
    no overlap is assumed)."""
    dims = sorted((abs(st), s) for s, st in zip(shape, strides) if s > 1)
    if not dims:
        return False
    if dims[0][0] == 0:
        return True
    reach = 0  # furthest offset reachable with the dimensions so far
    for st, s in dims:
        if st <= reach:
            break
        reach += st * (s - 1)
    else:
        return False
    n = math.prod(s for _, s in dims)
    if n > 1_000_000:
        return False
    offsets = np.zeros((), np.int64)
    for st, s in dims:
        offsets = (offsets[..., None] + np.arange(s) * st)
    return np.unique(offsets).size < n


def is_non_overlapping_and_dense(shape, strides) -> bool:
    """Whether the elements fill a block of memory exactly, in some order of the dimensions (PyTorch's rule)."""
    dims = sorted((st, n) for n, st in zip(shape, strides) if n != 1)
    expected = 1
    for st, n in dims:
        if st != expected:
            return False
        expected *= n
    return True


def partial_overlap(a, b) -> bool:
    """PyTorch's ``get_overlap_status(a, b) == PARTIAL`` for two geometries on one storage: both dense blocks
    whose ranges intersect without being the same tensor (anything harder is allowed, as in PyTorch)."""
    if 0 in a.shape or 0 in b.shape:
        return False
    if not (is_non_overlapping_and_dense(a.shape, a.strides) and is_non_overlapping_and_dense(b.shape, b.strides)):
        return False
    a0, a1 = a.offset, a.offset + math.prod(a.shape)
    b0, b1 = b.offset, b.offset + math.prod(b.shape)
    if a0 == b0 and a1 == b1 and a.shape == b.shape and a.strides == b.strides:
        return False
    return a0 < b1 and b0 < a1


def extent(shape, strides, offset):
    """[first, last] element offsets a tensor touches (None when it is empty)."""
    if 0 in shape:
        return None
    lo = hi = offset
    for s, st in zip(shape, strides):
        if st >= 0:
            hi += (s - 1) * st
        else:
            lo += (s - 1) * st
    return lo, hi


class Geometry:
    """PyTorch's view of a tensor's memory: sizes, strides and offset (elements), and the chain that reads it."""

    __slots__ = ("steps", "dyn", "shape", "strides", "offset", "_overlap")

    def __init__(self, steps, dyn, shape, strides, offset):
        self.steps, self.dyn, self.shape, self.strides, self.offset = steps, dyn, shape, strides, offset
        self._overlap = None

    def overlaps(self) -> bool:
        """Whether two of its elements share memory (then it cannot be written through)."""
        if self._overlap is None:
            self._overlap = has_internal_overlap(self.shape, self.strides)
        return self._overlap

    def write_chain(self):
        """(steps, dyn) that write a new value of this tensor into its root. A chain through an ``expand`` (or
        windows that share elements) cannot be inverted step by step: it is written by address instead, one
        element per position of this geometry (the root is contiguous: an address is a flat index)."""
        if any(st[0] in _BY_ADDRESS for st in self.steps):
            return (("strided", self.shape, self.strides, self.offset),), ()
        return self.steps, self.dyn

    @classmethod
    def root(cls, shape):
        return cls((), (), tuple(shape), contiguous_strides(shape), 0)

    def then(self, step, dyn, shape, strides, offset):
        return Geometry(self.steps + (step,), self.dyn + tuple(dyn), tuple(shape), tuple(strides), offset)


_BY_ADDRESS = frozenset({"expand", "unfold", "strided"})


def n_dyn(step) -> int:
    return len(step[4]) if step[0] == "index" else 0


def _starts(step, dyn):
    """The start of every dimension of an index step: 0, or its dynamic offset (of the offsets' dtype: a slice's
    starts share one integer type)."""
    dt = getattr(dyn, "dtype", None)
    starts = [0 if dt is None or not step[4] else jnp.zeros((), dt)] * len(step[1])
    for d, v in zip(step[4], dyn):
        starts[d] = v
    return starts


def split_dyn(steps, dyn):
    """``dyn`` cut per step."""
    out, k = [], 0
    for st in steps:
        n = n_dyn(st)
        out.append(dyn[k:k + n])  # a tuple of ints, or a slice of the offsets array
        k += n
    return out


# ---- the steps as jax code (traced inside kernels) ----------------------------------------
def _spans(sizes, steps):
    return tuple((n - 1) * s + 1 if n else 0 for n, s in zip(sizes, steps))


def _strided_index(in_size, size, stride, offset):
    idx = jnp.asarray(offset, dtype=np.int64 if in_size > 2 ** 31 - 1 else np.int32)
    for d, (n, st) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n) * st).reshape(shape)
    return jnp.broadcast_to(idx, size)


def gather(step, x, dyn):
    kind = step[0]
    if kind == "index":
        _, sizes, steps, out_map, _ = step
        if sizes:
            x = lax.dynamic_slice(x, _starts(step, dyn), _spans(sizes, steps))
            if any(s != 1 for s in steps):
                x = x[tuple(slice(None, None, s) for s in steps)]
        return x.reshape(tuple(sizes[d] if d >= 0 else 1 for d in out_map))
    if kind == "reshape":
        return x.reshape(step[2])
    if kind == "perm":
        return jnp.transpose(x, step[1])
    if kind == "expand":
        return jnp.broadcast_to(x, step[2])
    if kind == "diagonal":
        return jnp.diagonal(x, step[1], step[2], step[3])
    if kind == "unfold":
        _, dim, size, stp = step
        windows = (x.shape[dim] - size) // stp + 1
        idx = np.arange(windows)[:, None] * stp + np.arange(size)[None, :]
        return jnp.moveaxis(jnp.moveaxis(x, dim, -1)[..., idx], -2, dim)
    if kind == "strided":
        _, size, stride, offset = step
        return x.reshape(-1)[_strided_index(x.size, size, stride, offset)]
    raise ValueError(f"unknown view step {kind!r}")


def scatter(step, x, w, dyn):
    """``x`` with the elements that ``gather(step, x)`` reads replaced by ``w`` (no overlap: checked before)."""
    kind = step[0]
    w = w.astype(x.dtype)
    if kind == "index":
        _, sizes, steps, _, _ = step
        w = w.reshape(sizes)
        if not sizes:
            return w
        starts = _starts(step, dyn)
        if all(s == 1 for s in steps):
            return lax.dynamic_update_slice(x, w, starts)
        block = lax.dynamic_slice(x, starts, _spans(sizes, steps))
        block = block.at[tuple(slice(None, None, s) for s in steps)].set(w)
        return lax.dynamic_update_slice(x, block, starts)
    if kind == "reshape":
        return w.reshape(step[1])
    if kind == "perm":
        return jnp.transpose(w, tuple(np.argsort(step[1])))
    if kind == "expand":  # only a fill writes through an expand (every copy of an element gets the same value)
        _, in_shape, out_shape = step
        lead = len(out_shape) - len(in_shape)
        w = w[(0,) * lead]
        return w[tuple(slice(0, 1) if n == 1 and m != 1 else slice(None) for n, m in zip(in_shape, out_shape[lead:]))]
    if kind == "diagonal":
        _, off, d1, d2 = step
        xt = jnp.moveaxis(x, (d1, d2), (-2, -1))
        n = w.shape[-1]
        rows, cols = np.arange(n) + max(-off, 0), np.arange(n) + max(off, 0)
        return jnp.moveaxis(xt.at[..., rows, cols].set(w), (-2, -1), (d1, d2))
    if kind == "unfold":
        _, dim, size, stp = step
        windows = (x.shape[dim] - size) // stp + 1
        idx = np.arange(windows)[:, None] * stp + np.arange(size)[None, :]
        xt = jnp.moveaxis(x, dim, -1).at[..., idx].set(jnp.moveaxis(w, dim, -2))
        return jnp.moveaxis(xt, -1, dim)
    if kind == "strided":
        _, size, stride, offset = step
        idx = _strided_index(x.size, size, stride, offset).reshape(-1)
        return x.reshape(-1).at[idx].set(w.reshape(-1)).reshape(x.shape)
    raise ValueError(f"view step {kind!r} cannot be written through")


def gather_chain(x, steps, dyn):
    for st, d in zip(steps, split_dyn(steps, dyn)):
        x = gather(st, x, d)
    return x


def scatter_chain(x, w, steps, dyn):
    """``x`` (the chain's input) with the chain's output replaced by ``w``."""
    per = split_dyn(steps, dyn)
    levels = [x]
    for st, d in zip(steps[:-1], per[:-1]):
        levels.append(gather(st, levels[-1], d))
    for st, d, lv in zip(reversed(steps), reversed(per), reversed(levels)):
        w = scatter(st, lv, w, d)
    return w
