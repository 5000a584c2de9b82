"""Views alias their base: PyTorch's storage model on immutable jax arrays.

Note [Views]
~~~~~~~~~~~~
What a storage holds. A jax array never changes, so a storage is not memory but a slot: ``Storage.root``,
a hidden tensor whose value is the newest value of the whole memory (in the shape of the tensor the
storage was made for). Every tensor on a storage is a member, with its ``Geometry`` (``jgrad.core._layout``):
the chain of view steps from the root to its value, and PyTorch's sizes/strides/offset. A tensor gets a
storage only when something first aliases it (a view, ``detach()``, ``.data``, ``untyped_storage()``);
until then its array is its memory, and nothing on the per-op path changes.

Writes. An in-place op on a member computes the new value of that member, then the root is rebuilt: for
the root's own geometry (``x.add_``, ``x.detach().add_``) the value is the root; for a view it is the
view's value scattered into the root (``scatter_chain``: one ``dynamic_update_slice`` for a basic slice,
the inverse permutation for a transpose, a reshape for ``view``). The writer holds its new value; the
other members are marked stale (``_data = None``, ``_aval`` keeps shape and dtype) and regenerate
lazily, once per write, when next read (``gather_chain`` on the root, one kernel). Members of the root's
own geometry take the root's value at once (no kernel). Both gather and scatter are ops through the
door, so "auto" mode records them (XLA fuses the scatter into the producer) and a capture records them.

Autograd (PyTorch's CopySlices). A view created by a view op has an autograd base (``_base``, the
root of its chain of differentiable views) and the chain from it. An in-place op on such a view, when
the op or the base has history, records ``CopySlices(base, new view value)``: its backward sends the
gradient's region to the op's node and the rest to the base's old history. The base takes that node as
its ``grad_fn``; every other view of it regenerates its history from the base when next used
(``AsStridedBackward0``, as PyTorch names it), so views taken earlier see the new history. PyTorch's
errors come first (``_check_inplace``): a view of a leaf, an output of a multi-output view op, a view
made in ``no_grad`` and written in grad mode, a custom Function's view output, and writes to memory
that overlaps itself (``expand``).

Versions. Views and ``detach()`` share the version counter (``_vc``) of what they view; ``.data`` has
its own. A saved tensor reads, at backward, what its storage holds when its version still matches
(``SavedVariable.value``): a write through ``.data`` is seen, as in PyTorch.

When a member writes and no other member is alive, the storage is dropped: the tensor goes back to
plain rebinding (and its array may again be donated to a compiled step).

This module is the read side (storages, making views, reading them); ``jgrad.runtime._view_writes`` the write
side (in-place ops on members, CopySlices, PyTorch's refusals).

Imports ``_layout``, ``_tensor``, ``_recorder``, ``_dispatch``, ``streams`` and ``autograd`` (grad mode,
nodes, custom Functions). Installs its hooks into ``_tensor`` (reading a view, ``detach``, ``.data``) and
``autograd.function`` when it loads; the op library calls ``view``/``view_multi``/``as_strided`` to make views.
"""
from __future__ import annotations

import itertools
import re
import weakref

import jax
import jax.numpy as jnp
import numpy as np

from . import _bounds, _dispatch, _trace_log
from ._kernel_cache import _Array
from ..core import _layout, _tensor
from ..core._layout import Geometry, gather_chain, scatter_chain
from ..core._dtype import x64_scope as _x64
from ..core._recorder import Buffer
from ..core._tensor import Tensor
from ..autograd import function as _function, node as _node
from ..autograd.grad_mode import state as _state

_weakref = weakref.ref
_call = _dispatch.call_keyed

# PyTorch's CreationMeta: how a view was made, which decides whether it may be written in place.
DEFAULT, NO_GRAD, MULTI_OUTPUT, IN_CUSTOM_FUNCTION = 0, 1, 2, 3

_clock = _tensor.write_clock  # bumped by every write of a storage; saved tensors compare it (SavedVariable.value)
_ptrs = itertools.count(1)


class Storage:
    """The memory its members share: a hidden root tensor holding the whole value, and the members."""

    __slots__ = ("root", "members", "written", "ptr", "__weakref__")

    def __init__(self, t):
        self.root = Tensor._make(t._data, t._device, t._stream)
        self.root._vc = t._vc  # the sanitizer keeps its record per version counter: the root's is the memory's
        self.members = []
        self.written = 0    # _clock at the last write (0: never written)
        self.ptr = None     # data_ptr() base, given on first ask

    def nbytes(self) -> int:
        return self.root.numel() * self.root.dtype.itemsize


class Alias:
    """A member's place: its storage and geometry; for a differentiable view its autograd base and the
    chain of steps (with their dynamic offsets) from the base, how it was made and its output number."""

    __slots__ = ("storage", "geom", "base", "chain", "creation", "out_nr", "fn_stale")

    def __init__(self, storage, geom, base=None, chain=((), ()), creation=DEFAULT, out_nr=0):
        self.storage, self.geom, self.base, self.chain = storage, geom, base, chain
        self.creation, self.out_nr = creation, out_nr
        self.fn_stale = False  # a write since its history was made: regenerate that too (from the base)


def _join(storage, t, alias):
    t._alias = alias
    members = storage.members
    members.append(_weakref(t))
    if len(members) > 32 and len(members) & (len(members) - 1) == 0:  # prune dead members now and then
        members[:] = [r for r in members if r() is not None]


def alias_of(t) -> Alias:
    """``t``'s alias, giving it a storage of its own first if it has none."""
    a = t._alias
    if a is None:
        st = Storage(t)
        a = Alias(st, Geometry.root(t.shape))
        _join(st, t, a)
    return a


def geometry(t) -> Geometry:
    """``t``'s geometry in its storage (a tensor that shares none is its own contiguous storage)."""
    a = t._alias
    return a.geom if a is not None else Geometry.root(t.shape)


# ---- the ops: reading a view, writing one back --------------------------------------------
_OFFSETS: dict = {}


def offsets(dyn, device):
    """A chain's dynamic offsets as the op argument they travel as: one int array, made once per value and
    device (a Python int would be copied to the device at every call), or nothing when there are none."""
    if not dyn:
        return ()
    key = (dyn, device)
    a = _OFFSETS.get(key)
    if a is None:
        if len(_OFFSETS) > 4096:  # offsets that change every step (a sliding window)
            _OFFSETS.clear()
        wide = max(dyn) > 2 ** 31 - 1
        with jax.default_device(device.jax_device), _x64():
            a = _OFFSETS[key] = jnp.asarray(np.array(dyn, np.int64 if wide else np.int32))
    return (a,)


def _view_forward(base, *off, steps):
    return gather_chain(base, steps, off[0] if off else ())


def _view_backward(ctx, g):
    steps, off = ctx.attrs["steps"], ctx.saved[1:]
    shape, dtype = ctx.in_avals[0]
    dyn = off[0] if off else ()
    # gather is linear: its transpose sends each element of g back where it was read (summing overlaps:
    # an expand's or an unfold's backward)
    back = jax.linear_transpose(lambda b: gather_chain(b, steps, dyn), jax.ShapeDtypeStruct(shape, g.dtype))
    return back(g) + (None,) * len(off)


_SAVE_DYN = (1,)  # the offsets are saved; the base never is
_VIEW_OPS: dict = {}


def view_op(name):
    """The view op called ``name`` (``SliceBackward0``...): reads ``steps`` of its input."""
    op = _VIEW_OPS.get(name)
    if op is None:
        op = _VIEW_OPS[name] = _dispatch.Op(name, _view_forward, _view_backward, save=_SAVE_DYN, edge_args=(0,))
    return op


REGENERATE = view_op("AsStridedBackward0")


def _multi_forward(base, pieces):
    return tuple(gather_chain(base, steps, dyn) for steps, dyn in pieces)


def _multi_backward(ctx, *grads):
    shape, _ = ctx.in_avals[0]
    acc = jnp.zeros(shape, grads[0].dtype)
    for (steps, dyn), g in zip(ctx.attrs["pieces"], grads):
        acc = scatter_chain(acc, g, steps, dyn)
    return (acc,)


_MULTI_OPS: dict = {}


def _multi_op(name):
    op = _MULTI_OPS.get(name)
    if op is None:
        op = _MULTI_OPS[name] = _dispatch.Op(name, _multi_forward, _multi_backward, save=(), num_outputs=-1)
    return op


# ---- making views ------------------------------------------------------------------------
_AVALS: dict = {}


def _aval(shape, dtype):
    a = _AVALS.get((shape, dtype))
    if a is None:
        a = _AVALS[(shape, dtype)] = jax.core.ShapedArray(shape, dtype)
    return a


#: Eager mode computes a view of a source with at most this many elements when it makes it.
EAGER_VIEW_MAX = 1 << 16


def _read_now(src, outputs=1) -> bool:
    """Whether a view of ``src`` (``outputs`` views of it made by one op) is computed when made, by one op through
    the door, rather than lazily.

    While "auto" mode records: always. A lazy view would cost a node now and a recorded read later, and in a
    recorded step a view is almost always read; a compiled segment drops a read nobody uses. In eager mode: for a
    small source whose value is a concrete array (tracers and pending values stay lazy). A view that is read
    then costs ~5% less host time (instructions, ``x.unsqueeze(0) + 1``), and iterating over a tensor's rows ~30%
    less (``unbind``: one kernel for every row, not a read per row); a view never read costs ~2x a lazy one. A
    large source stays lazy: a view that is never read (``x[0].fill_(1)``) copies nothing; so do more than 64
    views made at once, whose one kernel would cost its compile where lazy views share one read kernel."""
    if _dispatch._auto[0]:
        return True
    d = src._data
    return type(d) is _Array and d.size <= EAGER_VIEW_MAX and outputs <= 64


def view(src, step, dyn, name, shape, strides, offset):
    """The view of ``src`` that ``step`` (with offsets ``dyn``) reads, made by the op called ``name``, with
    PyTorch's geometry (``shape``, ``strides``, ``offset``).

    A view of a large tensor runs nothing when made: its node is recorded now, its value is read from the
    storage when first used (one kernel for a chain of views), as PyTorch's views cost no copy. A view of a
    small one is computed at once (``_read_now``)."""
    src_alias = alias_of(src)
    offs = offsets(tuple(dyn), src._device)
    if _read_now(src):
        out = _dispatch.call(view_op(name), src, *offs, steps=(step,))
        out._aval = _aval(tuple(shape), src.dtype.np)  # a later write may make it stale (no value, its shape kept)
    else:
        (out,) = _dispatch.call_later(view_op(name), src, offs, {"steps": (step,)},
                                      (_aval(tuple(shape), src.dtype.np),))
    geom = src_alias.geom.then(step, dyn, shape, strides, offset)
    _attach(out, src, src_alias, geom, ((step,), tuple(dyn)))
    if src._bounds is not None:
        _bounds.inherit(out, src)
    return out


def as_strided(src, size, stride, offset):
    """``as_strided``: a view of ``src``'s whole storage, whatever ``src``'s own geometry."""
    a = alias_of(src)
    step = ("strided", tuple(size), tuple(stride), offset)
    root = a.storage.root
    geom = Geometry((step,), (), tuple(size), tuple(stride), offset)
    if a.geom.steps:  # relative to src: src's elements in memory order, when src is contiguous
        if not _layout.is_contiguous(a.geom.shape, a.geom.strides):
            out = _dispatch.call(view_op("AsStridedBackward0"), _fresh(root), steps=(step,))
            _attach(out, None, a, geom, None)
            return out
        step = ("strided", tuple(size), tuple(stride), offset - a.geom.offset)
    out = _dispatch.call(view_op("AsStridedBackward0"), src, steps=(step,))
    _attach(out, src, a, geom, ((step,), ()))
    return out


def view_multi(src, pieces, name):
    """Several views of ``src`` made by one op (``split``, ``chunk``, ``unbind``): one node, and outputs that
    may not be written in place while autograd records (PyTorch's multi-output views).

    ``pieces`` is a list of (step, dyn, shape, strides, offset)."""
    src_alias = alias_of(src)
    op_pieces = tuple(((step,), tuple(dyn)) for step, dyn, *_ in pieces)
    dt = src.dtype.np
    if _read_now(src, len(pieces)):  # one op now for every piece (``unbind``'s rows)
        outs = _dispatch.call(_multi_op(name), src, pieces=op_pieces)
        for out, (_, _, shape, _, _) in zip(outs, pieces):
            out._aval = _aval(tuple(shape), dt)
    else:
        outs = _dispatch.call_later(_multi_op(name), src, (), {"pieces": op_pieces},
                                    [_aval(tuple(shape), dt) for _, _, shape, _, _ in pieces])
    for i, (out, (step, dyn, shape, strides, offset)) in enumerate(zip(outs, pieces)):
        geom = src_alias.geom.then(step, dyn, shape, strides, offset)
        _attach(out, src, src_alias, geom, ((step,), tuple(dyn)), MULTI_OUTPUT, i)
        if src._bounds is not None:
            _bounds.inherit(out, src)
    return tuple(outs)


def _attach(out, src, src_alias, geom, chain, creation=DEFAULT, out_nr=0):
    """Make ``out`` (just computed from ``src``) a member of ``src``'s storage: a differentiable view of
    ``src``'s base (``src`` itself when it is not a view) that shares its version counter."""
    if src is None:  # a view read from the root itself (not through src's value)
        _join(src_alias.storage, out, Alias(src_alias.storage, geom, None, ((), ()), DEFAULT))
        return
    base = src_alias.base
    if not _state.grad_enabled:
        creation = NO_GRAD  # PyTorch: no_grad wins over multi-output
        if src._req and out._grad_fn is None:
            out._req = True  # PyTorch: a view made in no_grad of a tensor requiring grad requires grad (a leaf)
    if base is not None:
        chain = (src_alias.chain[0] + chain[0], src_alias.chain[1] + chain[1])
        if creation == DEFAULT:
            creation = src_alias.creation  # PyTorch propagates how the first view was made
    else:
        base = src
    out._vc = src._vc
    _join(src_alias.storage, out, Alias(src_alias.storage, geom, base, chain, creation, out_nr))


def alias(src, *, own_version):
    """A tensor without history on ``src``'s memory: ``detach()`` (shares the version) or ``.data`` (its own)."""
    a = alias_of(src)
    _fresh(src)
    t = Tensor._make(src._data, src._device, src._stream)
    if not own_version:
        t._vc = src._vc
    _join(a.storage, t, Alias(a.storage, a.geom))
    return t


def custom_output_view(out, src):
    """An output of a custom Function that is its input ``src`` returned as-is (a view of it, sharing its
    version), or (``src`` None) a view made in its forward: writing it in place is an error."""
    if src is None:
        out._alias.creation = IN_CUSTOM_FUNCTION
        return
    a = alias_of(src)
    base = a.base if a.base is not None else src
    chain = a.chain if a.base is not None else ((), ())
    out._vc = src._vc
    _join(a.storage, out, Alias(a.storage, a.geom, base, chain, IN_CUSTOM_FUNCTION))


# ---- reading a stale member ---------------------------------------------------------------
def _fresh(t):
    if t._data is None and t._alias is not None:
        regenerate(t, history=False)
    return t


class _StaleHistory(_node.Node):
    """The history of a view that may not be regenerated (PyTorch raises when its grad_fn is read): reading
    ``grad_fn`` raises, and a backward that reaches it raises."""

    __slots__ = ()

    def __init__(self, message):
        self._stale_message = message
        self.next_edges, self.input_metadata, self.topological_nr = (), (), 0
        self.sequence_nr, self._stream = next(_node._sequence_nr), None

    def name(self):
        return "StaleViewHistory"

    def apply(self, grads):
        raise RuntimeError(self._stale_message)


#: Views of concrete memory regenerated inside a jgrad.func trace, with their state before it:
#: ``forget_traced_views`` makes them stale again when the trace ends (their arrays are its tracers).
_TRACED_VIEWS: list = []


def regenerate(t, history=None):
    """Give a member without a value its value: a view not read yet, or one a write made stale, whose history,
    when it has some, comes anew from its base (``AsStridedBackward0``, as PyTorch's). ``history``: the caller
    reads the history (an op recording, ``grad_fn``), so a view that may not get a new one raises now;
    None: when grad mode is on. Under a JAX trace the regeneration is staged into it (the trace reads the
    storage's root, so a cached trace reads it anew), and the view is remembered for ``forget_traced_views``."""
    a = t._alias
    if not _trace_log.active[0]:  # no jgrad.func trace on any thread: the common case
        return _regenerate(t, history, a)
    before = (t._grad_fn, t._output_nr, t._req, a.fn_stale)
    _regenerate(t, history, a)
    d = t._data
    if isinstance(d, jax.core.Tracer) and not isinstance(a.storage.root._data, jax.core.Tracer):
        _TRACED_VIEWS.append((weakref.ref(t), d, before))


def forget_traced_views():
    """At the end of a trace: each view regenerated in it from concrete memory goes back to its state before
    (stale, its shape and dtype kept), so that it never keeps a tracer, and regenerates when next read."""
    while _TRACED_VIEWS:
        ref, d, (grad_fn, output_nr, req, fn_stale) = _TRACED_VIEWS.pop()
        t = ref()
        if t is None or t._data is not d or t._alias is None:
            continue
        t._aval = _aval(tuple(d.shape), d.dtype)
        t._data = None
        t._grad_fn, t._output_nr, t._req = grad_fn, output_nr, req
        t._alias.fn_stale = fn_stale


def _regenerate(t, history, a):
    base = a.base
    if a.fn_stale and base is not None and base._req:
        if a.creation == DEFAULT:
            prev = _state.grad_enabled
            _state.grad_enabled = True  # PyTorch regenerates a view's grad_fn whatever the grad mode
            try:
                r = _call(REGENERATE, (_fresh(base),) + offsets(a.chain[1], base._device), (("steps", a.chain[0]),),
                          {"steps": a.chain[0]}, None)
            finally:
                _state.grad_enabled = prev
            t._grad_fn, t._output_nr, t._req = r._grad_fn, 0, True
            a.fn_stale = False
            _set_data(t, r._data)
            return
        message = _view_error(t, a, indirect=True)
        if history or (history is None and _state.grad_enabled):
            raise RuntimeError(message)
        t._grad_fn = _StaleHistory(message)
    a.fn_stale = False
    root = a.storage.root
    g = a.geom
    if not g.steps:
        _set_data(t, root._data)
        return
    r = _call(REGENERATE, (root,) + offsets(g.dyn, root._device), (("steps", g.steps),), {"steps": g.steps}, None)
    _set_data(t, r._data)


def _set_data(t, value):
    if type(value) is Buffer:
        owner = value.owner
        if owner.segment:
            value.holders.append(_weakref(t))  # the barrier rebinds it to the value
        elif owner.active:
            owner.write(t, value)  # a capture: t gets its old value back at the end, the replay's after each replay
    t._data = value


def _mark_stale(m, root):
    g = m._alias.geom
    if not g.steps:
        _set_data(m, root._data)
        return
    d = m._data
    if d is not None:
        m._aval = _aval(tuple(d.shape), d.dtype)
        m._data = None
    a = m._alias
    a.fn_stale = True
    if a.base is not None and a.creation != NO_GRAD and a.base._req:
        m._req = True


def _view_error(t, a, indirect):
    """PyTorch's message (handle_view_on_rebase) for writing a view that may not be written."""
    what = "its base or another view of its base has been" if indirect else "is being"
    fn = t._grad_fn
    nr = a.out_nr if a.creation == MULTI_OUTPUT else t._output_nr
    op = re.sub(r"Backward\d*$", "", fn.name()) if fn is not None else None  # PyTorch names the forward op
    if a.creation == NO_GRAD or fn is None:
        prefix = f"Output {nr} of {op} is a view of a view which was created in" if fn is not None else \
            "A view was created in"
        msg = f"{prefix} no_grad mode and {what} modified inplace with grad mode enabled."
    else:
        msg = f"Output {nr} of {op} is a view and {what} modified inplace."
    if a.creation == MULTI_OUTPUT:
        return (msg + " This view is the output of a function that returns multiple views. Such functions do not "
                "allow the output views to be modified inplace. You should replace the inplace operation by an "
                "out-of-place one.")
    if a.creation == NO_GRAD:
        return (msg + " Given that this use case is ambiguous and error-prone, it is forbidden. You can clarify your "
                "code by moving both the view and the inplace either both inside the no_grad block (if you don't "
                "want the inplace to be tracked) or both outside (if you want the inplace to be tracked).")
    return (msg + " This view was created inside a custom Function (or because an input was returned as-is) and "
            "the autograd logic to handle view+inplace would override the custom backward associated with the "
            "custom Function, leading to incorrect gradients. This behavior is forbidden. You can fix this by "
            "cloning the output of the custom Function.")


def set_data_to(t, other):
    """``t.data = other``: ``t`` now shares ``other``'s storage (PyTorch's ``set_data``), keeping its history
    and version counter; its old views keep the old memory."""
    a = alias_of(other)
    _fresh(other)
    _set_data(t, other._data)
    t._device, t._stream = other._device, other._stream
    if t._aval is not None:
        t._aval = None
    t._slot_gen += 1
    _join(a.storage, t, Alias(a.storage, a.geom))


class UntypedStorage:
    """What ``Tensor.untyped_storage()`` returns: the memory a tensor shares with its views, by identity.

    jgrad's memory is an immutable array per write, so there is no address; ``data_ptr()`` is a number that
    stays the same for this storage while it lives, spaced so that elements of different storages never
    share one (what tests of aliasing compare)."""

    __slots__ = ("_storage",)

    def __init__(self, storage):
        self._storage = storage

    def data_ptr(self) -> int:
        st = self._storage
        if st.ptr is None:
            st.ptr = next(_ptrs) << 40
        return st.ptr

    def nbytes(self) -> int:
        return self._storage.nbytes()

    def size(self) -> int:
        return self.nbytes()

    def __len__(self):
        return self.nbytes()

    @property
    def device(self):
        return self._storage.root.device

    def __eq__(self, other):
        return isinstance(other, UntypedStorage) and other._storage is self._storage

    def __hash__(self):
        return id(self._storage)

    def __repr__(self):
        return f"<jgrad.UntypedStorage of {self.nbytes()} bytes on {self.device}>"


def _untyped_storage(self):
    """The storage this tensor shares with its views (``torch.Tensor.untyped_storage``)."""
    return UntypedStorage(alias_of(self._fresh()).storage)


def _data_ptr(self) -> int:
    """A stable address of this tensor's first element: its storage's ``data_ptr()`` plus its offset in bytes."""
    a = alias_of(self._fresh())
    return UntypedStorage(a.storage).data_ptr() + a.geom.offset * self.dtype.itemsize


Tensor.untyped_storage = _untyped_storage
Tensor.data_ptr = _data_ptr
_function._custom_output_view = custom_output_view
_tensor._regenerate = regenerate
_tensor._alias = alias
_tensor._set_data_to = set_data_to
