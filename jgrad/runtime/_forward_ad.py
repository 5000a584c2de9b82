"""Forward-mode AD's dispatch rule: the tangents of dual tensors through every op (``autograd.forward_ad``).

While a dual level is active, three hooks are installed (none costs anything otherwise):

- the op door (``_dispatch.forward_ad_hook``): an op with an input that has a tangent runs as usual, and
  its outputs get the tangents ``jax.jvp`` of the op's kernel gives. That derivative is itself an op
  through the door (``<Op>Jvp``), so it is recorded on the tape like any op: a tangent can be
  differentiated (reverse over forward), and a backward pass under ``create_graph=True`` dispatches its
  backward ops with dual saved tensors, which gives forward over reverse. The tangent is computed before
  the op runs, so an in-place op sees its inputs' old values; the target's tangent is then updated in place
  (``copy_``), so its views and its base see the new tangent too.
- custom Functions (``function.forward_ad_hook``): the ``jvp`` staticmethod gives the outputs' tangents;
  ``forward`` runs without tangents, as in PyTorch.
- ``SavedVariable``: a saved tensor keeps the tangent of the tensor saved, and gets it back when unpacked
  for a double backward (PyTorch's SavedVariable saves the forward grad too).

Also swapped in while a level is active: ``Tensor.detach_`` (drops the tangent) and the in-place view ops
(``t_``, ``transpose_``, ``squeeze_``...: the tangent changes shape in place with the tensor).

A tensor's tangent lives in its ``__dict__`` (``_fw_grad``: the level's token and the tangent tensor). Views
follow PyTorch (Note [Forward Grad View/inplace]): a view with no tangent of its own takes, when first
asked, the same view of its base's tangent (``as_strided`` with the view's geometry), so an in-place op on
the view writes its base's tangent; an in-place op on a view of a tensor without a tangent gives the base a
zero tangent first. ``detach()`` drops the tangent (its result is not a view).

Imports ``_dispatch``, ``_views``, ``_factories``, ``_tensor`` and ``autograd``: the layer above the door.
"""
from __future__ import annotations

import sys
import threading
import weakref

import jax

from . import _dispatch, _views
from ..core._tensor import Tensor
from ..autograd import forward_ad as _api, function as _function, node as _node

_tls = threading.local()
_state = {"token": None, "holders": []}
_VIEW_FORWARDS = (_views._view_forward, _views._multi_forward)
_orig_unpack = _node.SavedVariable.unpack
_orig_init = _node.SavedVariable.__init__
_orig_detach_ = Tensor.detach_


class _Busy:
    """Ops run inside it get no tangents: the primal op of a dual call, the tangent op, the tangent's update."""

    def __enter__(self):
        self.prev = getattr(_tls, "busy", False)
        _tls.busy = True

    def __exit__(self, *exc):
        _tls.busy = self.prev


# ---- tangents --------------------------------------------------------------------------------------------------
def tangent_of(t):
    """``t``'s tangent at the active level, or None; a view without one takes the view of its base's tangent."""
    e = t.__dict__.get("_fw_grad")
    token = _state["token"]
    if e is not None and e[0] is token:
        return e[1]
    a = t._alias
    if a is not None and a.base is not None:
        tb = tangent_of(a.base)
        if tb is not None:
            tv = _view_of(tb, a.base, t)
            set_tangent(t, tv)
            return tv
    return None


def set_tangent(t, tangent):
    t.__dict__["_fw_grad"] = (_state["token"], tangent)
    holders = _state["holders"]
    holders.append(weakref.ref(t))
    if len(holders) > 1024 and len(holders) & (len(holders) - 1) == 0:  # prune dead tensors now and then
        holders[:] = [r for r in holders if r() is not None]


def _view_of(tb, base, v):
    """The view of ``base``'s tangent ``tb`` that ``v`` is of ``base``: by geometry when ``tb`` is laid out as
    ``base`` (PyTorch's as_strided fallback), else the chain of view steps read out of ``tb`` (a copy)."""
    with _Busy():
        if tuple(tb.stride()) == tuple(base.stride()):
            return tb.as_strided(v.shape, v.stride(), tb.storage_offset() + v.storage_offset() - base.storage_offset())
        steps, dyn = v._alias.chain
        return _dispatch.call(_views.REGENERATE, tb, *_views.offsets(dyn, tb._device), steps=steps)


# ---- the op door -----------------------------------------------------------------------------------------------
_JVP_OPS: dict = {}


def _jvp_op(op, attrs, idx, n):
    """The op computing ``op``'s output tangents from its ``n`` inputs and the tangents of inputs ``idx``."""
    key = (op, tuple(attrs.items()), idx, n)
    jop = _JVP_OPS.get(key)
    if jop is None:
        fwd = op.forward

        def forward(*a):
            prim, tans = a[:n], a[n:]

            def f(*d):
                full = list(prim)
                for j, i in enumerate(idx):
                    full[i] = d[j]
                return fwd(*full, **attrs)

            ps = tuple(prim[i] for i in idx)
            ts = tuple(t.astype(p.dtype) for t, p in zip(tans, ps))
            _, out = jax.jvp(f, ps, ts)
            outs = out if isinstance(out, tuple) else (out,)
            return tuple(o for o in outs if o.dtype != jax.dtypes.float0)  # integer outputs have no tangent

        jop = _JVP_OPS[key] = _dispatch.Op(op.name + "Jvp", forward, num_outputs=-1)
    return jop


def _door(run, op, args, attrs, inplace):
    """``_dispatch.forward_ad_hook``: None when no input has a tangent (or inside the rule), else the op's result
    with its outputs' tangents."""
    if getattr(_tls, "busy", False) or not op.differentiable or op.forward in _VIEW_FORWARDS:
        return None  # a view's tangent is the view of its base's (tangent_of)
    tans = None
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            t = tangent_of(a)
            if t is not None:
                if tans is None:
                    tans = [None] * len(args)
                tans[i] = t
    if tans is None:
        return None
    idx = tuple(i for i, t in enumerate(tans) if t is not None)
    jop = _jvp_op(op, attrs, idx, len(args))
    with _Busy():
        t_out = _dispatch.call_keyed(jop, tuple(args) + tuple(tans[i] for i in idx), (), {}, None)
        res = run()
    outs = res if type(res) is tuple else (res,)
    it = iter(t_out)
    for k, o in enumerate(outs):
        if not (isinstance(o, Tensor) and (o.dtype.is_floating_point or o.dtype.is_complex)):
            continue
        nt = next(it, None)
        if nt is None:
            break
        if k == 0 and inplace is not None:
            _update_inplace(o, nt)
        else:
            set_tangent(o, nt)
        fn = o._grad_fn
        for sv in getattr(fn, "saved_out", None) or ():  # saved when the outputs had no tangent yet
            if sv.src is not None and sv.src() is o:
                _keep_tangent(sv, tangent_of(o))
    return res


def _update_inplace(target, nt):
    """An in-place op wrote ``target``: its tangent becomes ``nt``, written in place when it has one (its views
    and base see it); a view of a tensor without a tangent gives its base a zero tangent first (PyTorch)."""
    with _Busy():
        if nt.dtype != target.dtype:
            nt = nt.to(target.dtype)
        tt = tangent_of(target)
        if tt is None:
            a = target._alias
            if a is None or a.base is None:
                set_tangent(target, nt)
                return
            set_tangent(a.base, a.base.new_zeros(a.base.shape))
            tt = tangent_of(target)
        tt.copy_(nt)


# ---- custom Functions --------------------------------------------------------------------------------------------
def _function_apply(cls, args, kwargs):
    """``Function.apply`` while a level is active: ``forward`` without tangents, then ``jvp`` for the outputs'."""
    tans = [tangent_of(a) if isinstance(a, Tensor) else None for a in args]
    ctx = _function.FunctionCtx()
    if all(t is None for t in tans):
        return cls._apply(ctx, args, kwargs)
    if cls.jvp is _function.Function.jvp:
        _function.Function.jvp(ctx)  # PyTorch's NotImplementedError
    with _Busy():
        out = cls._apply(ctx, args, kwargs)
        grads = [t if t is not None else (a.new_zeros(a.shape) if isinstance(a, Tensor) else None)
                 for a, t in zip(args, tans)]
        # inside jvp, ctx.saved_tensors are what save_for_forward saved, as primals (PyTorch's)
        kept = {k: ctx.__dict__[k] for k in ("_saved", "to_save") if k in ctx.__dict__}
        ctx._saved, ctx.to_save = None, tuple(_alias(t) if isinstance(t, Tensor) and tangent_of(t) is not None
                                              else t for t in getattr(ctx, "saved_for_forward", ()))
        try:
            res = cls.jvp(ctx, *grads)
        finally:
            del ctx._saved, ctx.to_save
            ctx.__dict__.update(kept)
    outs = out if isinstance(out, tuple) else (out,)
    res = res if isinstance(res, tuple) else (res,)
    if len(res) != len(outs):
        raise RuntimeError(f"Function's jvp returned an invalid number of forward gradients (expected {len(outs)} "
                           f"but got {len(res)})")
    for o, t in zip(outs, res):
        if isinstance(o, Tensor) and t is not None:
            if tuple(t.shape) != tuple(o.shape):
                raise RuntimeError(_size_error(o, t))
            if tangent_of(o) is not t:
                set_tangent(o, t)
    return out


def _size_error(primal, tangent):
    return ("Trying to set a forward gradient that has a different size than that of the original Tensor, this is "
            f"not supported. Tensor is of size {list(primal.shape)} while the given forward gradient is of size "
            f"{list(tangent.shape)}.")


# ---- saved tensors, detach_ --------------------------------------------------------------------------------------
class _Src:
    """A saved tensor's ``src`` (a weak reference to what was saved) that also keeps its tangent at the level."""

    __slots__ = ("ref", "tangent", "token")

    def __init__(self, ref, tangent):
        self.ref, self.tangent, self.token = ref, tangent, _state["token"]

    def __call__(self):
        return self.ref() if self.ref is not None else None


def _keep_tangent(sv, tangent):
    if tangent is not None and type(sv.src) is not _Src:
        sv.src = _Src(sv.src, tangent)


def _init(self, t, is_output=False, own_version=False):
    _orig_init(self, t, is_output, own_version)
    _keep_tangent(self, tangent_of(t))


def _unpack(self, node):
    t = _orig_unpack(self, node)
    src = self.src
    if type(src) is _Src and src.token is _state["token"] and t is not src() and tangent_of(t) is None:
        set_tangent(t, src.tangent)
    return t


def _detach_(self):
    self.__dict__.pop("_fw_grad", None)
    return _orig_detach_(self)


# The in-place view ops change a tensor's shape: its tangent changes the same way, in place (as PyTorch's).
_VIEW_INPLACE = ("t_", "transpose_", "swapaxes_", "swapdims_", "squeeze_", "unsqueeze_")
_orig_view_inplace = {name: getattr(Tensor, name) for name in _VIEW_INPLACE}


def _view_inplace(name):
    orig = _orig_view_inplace[name]

    def method(self, *args, **kwargs):
        tt = tangent_of(self)
        out = orig(self, *args, **kwargs)
        if tt is not None:
            with _Busy():
                orig(tt, *args, **kwargs)
            set_tangent(self, tt)
        return out

    method.__name__ = method.__qualname__ = name
    method.__doc__ = orig.__doc__
    return method


_patched_view_inplace = {name: _view_inplace(name) for name in _VIEW_INPLACE}


# ---- the API's implementation ------------------------------------------------------------------------------------
_ALIAS = _dispatch.Op("AliasBackward0", lambda a: a, lambda ctx, g: (g,), save=())


def _alias(t):
    """A tensor on ``t``'s memory and version counter, not a view (so it takes no tangent from ``t``), with
    ``t``'s autograd history behind it."""
    with _Busy():
        d = t.detach()
        r = _dispatch.call(_ALIAS, t)
    if r._grad_fn is not None:
        d._grad_fn, d._output_nr, d._req = r._grad_fn, 0, True
    return d


def make_dual(tensor, tangent):
    if tangent_of(tensor) is not None:
        raise RuntimeError("Making a dual Tensor based on a Tensor that already has a forward gradient at the same "
                           "level 0 is not supported.")
    if tuple(tangent.shape) != tuple(tensor.shape):
        raise RuntimeError(_size_error(tensor, tangent))
    if tangent.dtype != tensor.dtype:  # jax.jvp needs a tangent of the primal's dtype
        with _Busy():
            tangent = tangent.to(tensor.dtype)
    dual = _alias(tensor)
    set_tangent(dual, tangent)
    return dual


def unpack_dual(tensor):
    return _alias(tensor), tangent_of(tensor)


def activate():
    _state["token"] = object()
    _state["holders"] = []
    _dispatch.forward_ad_hook = _door
    _function.forward_ad_hook = _function_apply
    _node.SavedVariable.unpack = _unpack
    _node.SavedVariable.__init__ = _init
    Tensor.detach_ = _detach_
    for name, method in _patched_view_inplace.items():
        setattr(Tensor, name, method)


def deactivate():
    _dispatch.forward_ad_hook = None
    _function.forward_ad_hook = None
    _node.SavedVariable.unpack = _orig_unpack
    _node.SavedVariable.__init__ = _orig_init
    Tensor.detach_ = _orig_detach_
    for name, method in _orig_view_inplace.items():
        setattr(Tensor, name, method)
    token = _state["token"]
    for ref in _state["holders"]:
        t = ref()
        if t is not None:
            e = t.__dict__.get("_fw_grad")
            if e is not None and e[0] is token:
                del t.__dict__["_fw_grad"]
    _state["token"], _state["holders"] = None, []


_api._impl = sys.modules[__name__]
