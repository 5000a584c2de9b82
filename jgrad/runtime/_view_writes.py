"""Writing through views: an in-place op on a tensor that shares its storage (Note [Views] in ``_views``).

The write computes the member's new value and scatters it into the storage's root (``store``); an op that
autograd does not record runs as one kernel that reads the view, applies the op and writes it back
(``_write_fused``); one it records gets PyTorch's ``CopySlices`` node on the base (``write``). PyTorch's
refusals come first (``_check_inplace``).

Imports ``_views``, ``_layout``, ``_tensor``, ``_recorder``, ``_dispatch``, ``streams`` and ``autograd``.
Installs its hooks into ``_dispatch`` (``call_inplace``/``call_foreach`` on a member) and
``autograd.function`` (``mark_dirty`` on a view) when it loads; the op library calls ``check_region`` and
``reshape_inplace``, ``graphs`` calls ``rebound`` after a replay.
"""
from __future__ import annotations

import weakref

import jax
import jax.numpy as jnp

from . import _dispatch
from ..core import _layout
from ..core._dtype import x64_scope as _x64
from ..core._layout import gather_chain, scatter_chain
from ..core._recorder import Buffer
from ..core._tensor import Tensor
from ._views import (DEFAULT, Alias, _call, _clock, _fresh, _join, _mark_stale, _set_data, _view_error, offsets)
from ..autograd import function as _function
from ..autograd.grad_mode import state as _state
from ..streams import _current_for
from ..core._dtype import from_np

def _copy_slices_forward(base, w, *off, steps):
    return scatter_chain(base, w, steps, off[0] if off else ())


def _copy_slices_backward(ctx, g):
    steps, off = ctx.attrs["steps"], ctx.saved[2:]
    dyn = off[0] if off else ()
    region = gather_chain(g, steps, dyn)
    rest = scatter_chain(g, jnp.zeros(region.shape, g.dtype), steps, dyn)
    return (rest, region) + (None,) * len(off)


_CAST = _dispatch.Op("ToCopyBackward0", lambda a, dtype: a.astype(dtype), lambda ctx, g: (g.astype(ctx.in_avals[0][1]),),
                     save=())
COPY_SLICES = _dispatch.Op("CopySlices", _copy_slices_forward, _copy_slices_backward, save=(2,),
                           edge_args=(0, 1))
def reshape_inplace(t, make_view, inverse):
    """``t.t_()``, ``t.squeeze_()``...: ``t`` takes the value, geometry and history of the view ``make_view()``
    makes of it; ``inverse(view)`` is the step back from the new geometry to the old one, through which the
    views whose base is ``t`` now read it."""
    if t._alias is not None:
        _check_inplace(None, t, ())
    elif t._req and t._grad_fn is None and _state.grad_enabled:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    v = make_view()
    inverse = inverse(v)
    ta, va = t._alias, v._alias
    root = ta.storage.root
    for ref in ta.storage.members:
        m = ref()
        if m is not None and m is not t and m is not v and m._alias.base is t:
            steps, dyn = m._alias.chain
            m._alias.chain = ((inverse,) + steps, dyn)
            _mark_stale(m, root)
    chain = va.chain if ta.base is not None else ((), ())
    t._alias = Alias(ta.storage, va.geom, ta.base, chain, ta.creation, ta.out_nr)
    _join(ta.storage, t, t._alias)
    t._aval = v._aval  # t reads its new geometry out of the storage when next used, as the view would have
    t._data = None
    if v._grad_fn is not None:
        _rebase(t, v)
    t._vc[0] += 1
    return t


MULTIPLE_OUTPUTS_DIRTY_VIEW = (
    "If your Function modifies inplace an input that is a view of another Tensor, your Function cannot return more "
    "than one Tensor. This is not supported by the current autograd engine. You should either make sure the input "
    "is not a view (using .clone() for example) or make your Function only return one Tensor (potentially splitting "
    "it into two Functions: one doing the inplace that returns a single Tensor and a second one that does the other "
    "operations). You can ask on the forum https://discuss.pytorch.org/ if you need help to do this change.")


def dirty_view(t, value):
    """A custom Function wrote view ``t`` in place (``ctx.mark_dirty``): its base takes the new history, as
    after a built-in in-place op on a view."""
    a = t._alias
    if a.creation != DEFAULT:
        raise RuntimeError(_view_error(t, a, indirect=False))
    if a.base._grad_fn is None and a.base._req:
        raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    write(t, value)


# ---- writing ------------------------------------------------------------------------------
def store(t, value):
    """``t``'s whole value becomes ``value`` (an array or Buffer): the storage's root follows, the other
    members go stale. Autograd is the caller's business."""
    a = t._alias
    root = a.storage.root
    g = a.geom
    if g.steps:
        steps, dyn = g.write_chain()
        r = _call(COPY_SLICES, (_fresh(root), Tensor._make(value, t._device, t._stream)) + offsets(dyn, t._device),
                  (("steps", steps),), {"steps": steps}, None)
        _set_data(root, r._data)
    else:
        _set_data(root, value)
    _commit(t, value)


def _commit(t, value):
    """The root was written through ``t``, whose value is now ``value``: the other members go stale (or, when
    there are none, ``t`` leaves the storage)."""
    st = t._alias.storage
    root = st.root
    _set_data(t, value)
    _clock[0] += 1
    st.written = _clock[0]
    if type(value) is Buffer and value.owner.active:  # a capture: each replay rewrites this storage
        captured = value.owner.__dict__.setdefault("storages", weakref.WeakSet())
        captured.add(st)
    alone = True
    for ref in st.members:
        m = ref()
        if m is not None and m is not t:
            alone = False
            _mark_stale(m, root)
    if alone:
        t._alias = None  # nobody else sees this memory: back to plain rebinding
        st.members = []


def write(t, value):
    """Write ``value`` (a tensor, possibly with history) into member ``t`` as an in-place op's result."""
    a = t._alias
    base = a.base
    if base is not None and _state.grad_enabled and (value._req or base._req):
        chain_steps, chain_dyn = _write_chain_from_base(a)
        _fresh(base)
        new_base = _call(COPY_SLICES, (base, value) + offsets(chain_dyn, base._device), (("steps", chain_steps),),
                         {"steps": chain_steps}, None)
        _rebase(base, new_base)
        store(base, new_base._data)  # t goes stale with the other members: its history comes from the base's
    else:
        if value._req and _state.grad_enabled:
            t._grad_fn, t._output_nr, t._req = value._grad_fn, value._output_nr, True
        store(t, value._data)
    t._vc[0] += 1
    t._stream = value._stream


def _write_chain_from_base(a):
    """The chain that writes a view into its base; by address (as ``Geometry.write_chain``) where it goes
    through an expand, which needs the base laid out contiguously."""
    steps, dyn = a.chain
    if not any(st[0] in _layout._BY_ADDRESS for st in steps):
        return steps, dyn
    bg = a.base._alias.geom
    if not _layout.is_contiguous(bg.shape, bg.strides):
        raise RuntimeError("jgrad cannot write through an expanded view of a non-contiguous tensor while autograd "
                           "records it; clone() the base first.")
    g = a.geom
    return (("strided", g.shape, g.strides, g.offset - bg.offset),), ()


def _rebase(t, new):
    """``t`` (not a view) takes ``new``'s history, as an in-place op's output (its retains_grad hook moves)."""
    old_fn, old_nr = t._grad_fn, t._output_nr
    t._grad_fn, t._output_nr, t._req = new._grad_fn, new._output_nr, True
    if t._retains_grad and old_fn is not None and old_fn._retains_grad_hooks:
        hook = old_fn._retains_grad_hooks.pop(old_nr, None)
        if hook is not None and t._grad_fn is not None:
            t._grad_fn._retains_grad_hooks = {0: hook}


def inplace(op, target, args, key, attrs):
    """``call_inplace`` on a member of a storage: PyTorch's checks, the op, then the write."""
    _check_inplace(op, target, args)
    if _dispatch._sanitizing[0]:  # a write through a view writes the memory every view of it reads
        _dispatch.check_access([x for x in args if isinstance(x, Tensor)], (target,),
                               _current_for(target._device), op.name)
    a = target._alias
    if not a.geom.steps:  # the root's own geometry: an in-place op as usual, then the storage follows
        res = _call(op, (target,) + args, key, attrs, target)
        if target._alias is not None:
            store(target, target._data)
        return res
    if not (_state.grad_enabled and (target._req or any(isinstance(x, Tensor) and x._req for x in args))):
        return _write_fused(op, target, args, key, attrs)
    _fresh(target)
    # the op's node saves the value it overwrites (PyTorch's original self) with a version of its own
    original = Tensor._make(target._data, target._device, target._stream, target._req, target._grad_fn,
                            target._output_nr)
    out = _call(op, (original,) + args, key, attrs, None)
    first = out[0] if type(out) is tuple else out
    if _dispatch._check_inplace(op, target, first._data):
        first = _call(_CAST, (first,), (("dtype", target.dtype.np),), {"dtype": target.dtype.np}, None)
    write(target, first)
    return (target,) + tuple(out[1:]) if type(out) is tuple else target


_WRITE_OPS: dict = {}
_RESULTS: dict = {}


def _write_op(op):
    """``op`` applied to a view inside the write back: read the view, run the op, scatter it into the root (one
    kernel for an in-place op through a view that autograd does not record)."""
    w = _WRITE_OPS.get(op)
    if w is None:
        fwd = op.forward

        def forward(root, *rest, read, write, n_read, n_write, inner):
            # rest: the read chain's offsets (an array, or nothing), the write chain's, then the op's arguments
            rdyn = rest[0] if n_read else ()
            view = gather_chain(root, read, rdyn)
            out = fwd(view, *rest[n_read + n_write:], **dict(inner))
            out = (out[0] if isinstance(out, tuple) else out).astype(view.dtype)
            if write is None:
                return scatter_chain(root, out, read, rdyn), out
            return scatter_chain(root, out, write, rest[n_read] if n_write else ()), out

        w = _WRITE_OPS[op] = _dispatch.Op(op.name, forward, differentiable=False, num_outputs=2)
    return w


def _write_fused(op, target, args, key, attrs):
    shape, dtype = target.shape, target.dtype.np
    res = _result_aval(op, key, attrs, shape, dtype, args)
    _dispatch._check_inplace(op, _Shaped(shape, dtype), res)  # PyTorch's shape and dtype refusals
    a = target._alias
    st = a.storage
    read = a.geom.steps, a.geom.dyn
    write = a.geom.write_chain()
    if write[0] is read[0]:
        write = None, ()  # written back through the same chain: its offsets are passed once
    wop = _write_op(op)
    dev = target._device
    roff, woff = offsets(read[1], dev), offsets(write[1], dev)
    wattrs = {"read": read[0], "write": write[0], "n_read": len(roff), "n_write": len(woff), "inner": key}
    new_root, value = _call(wop, (st.root,) + roff + woff + args, tuple(wattrs.items()), wattrs, None)
    _set_data(st.root, new_root._data)
    _commit(target, value._data)
    target._vc[0] += 1
    target._stream = value._stream
    return target


class _Shaped:
    """What ``_dispatch._check_inplace`` reads of an in-place target: its shape and its array's dtype."""

    __slots__ = ("shape", "_data")

    def __init__(self, shape, dtype):
        self.shape, self._data = shape, jax.ShapeDtypeStruct(shape, dtype)

    @property
    def dtype(self):
        return from_np(self._data.dtype)


def _result_aval(op, key, attrs, shape, dtype, args):
    """The aval ``op`` returns for a target of (shape, dtype) and ``args`` (cached per structure)."""
    k = (op, key, shape, dtype) + tuple((tuple(x.shape), x.dtype) if isinstance(x, Tensor) else type(x)
                                        for x in args)
    r = _RESULTS.get(k)
    if r is None:
        specs = [jax.ShapeDtypeStruct(x.shape, x.dtype.np) if isinstance(x, Tensor) else x for x in args]
        with _x64():
            out = jax.eval_shape(lambda v, *xs: op.forward(v, *xs, **attrs), jax.ShapeDtypeStruct(shape, dtype), *specs)
        r = _RESULTS[k] = out[0] if isinstance(out, tuple) else out
    return r


def _check_inplace(op, t, args):
    """PyTorch's refusals before an in-place op on a member (check_inplace, handle_view_on_rebase)."""
    a = t._alias
    if a.geom.overlaps() and (op is None or op.name not in _FILLS):
        raise RuntimeError("unsupported operation: more than one element of the written-to tensor refers to a single "
                           "memory location. Please clone() the tensor before performing the operation.")
    if op is not None and op.name != "CopySlices":  # x[i] = v checks the written region (check_region)
        check_region(a.geom, a.storage, args)
    if not _state.grad_enabled:
        return
    base = a.base
    t_req = t._req or (base is not None and base._req)  # a view requires grad when its base does
    if not (t_req or any(isinstance(x, Tensor) and x._req for x in args)):
        return
    if base is not None:
        if a.creation != DEFAULT:
            raise RuntimeError(_view_error(t, a, indirect=False))
        if t_req and base._grad_fn is None and base._req:
            raise RuntimeError("a view of a leaf Variable that requires grad is being used in an in-place operation.")
    elif t._req and t._grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


# In-place ops that may write memory an element shares with others (PyTorch's fill_ and zero_ do not check):
# every element gets the same value, so which copy is written last does not matter.
_FILLS = frozenset({"FillBackward0", "ZeroBackward0"})


def check_region(geom, storage, args):
    """PyTorch's partial-overlap refusal: an input that shares some, not all, of the memory being written."""
    for x in args:
        if isinstance(x, Tensor) and x._alias is not None and x._alias.storage is storage:
            if _layout.partial_overlap(geom, x._alias.geom):
                raise RuntimeError("unsupported operation: some elements of the input tensor and the written-to tensor "
                                   "refer to a single memory location. Please clone() the tensor before performing "
                                   "the operation.")


def rebound(storages):
    """After a graph's replay wrote these storages (captured writes): the members the replay did not bind go
    stale, so that they read the replay's values."""
    for st in list(storages):
        root = st.root
        for ref in st.members:
            m = ref()
            if m is not None and not (type(m._data) is Buffer and not m._data.owner.segment):
                _mark_stale(m, root)
        _clock[0] += 1
        st.written = _clock[0]



_function.MULTIPLE_OUTPUTS_DIRTY_VIEW = MULTIPLE_OUTPUTS_DIRTY_VIEW
_function._dirty_view = dirty_view
_dispatch._alias_inplace = inplace
_dispatch._alias_store = store
