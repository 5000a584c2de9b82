"""PyTorch <-> jgrad through DLPack (zero copy on the same device), and jgrad functions inside torch autograd.

PyTorch is optional: importing ``interop`` or ``jgrad`` never imports it, and
these functions raise ``ImportError`` naming the extra to install
(``pip install "jgrad[torch]"``) when it is missing.

``to_torch(t)``
    A ``torch.Tensor`` sharing ``t``'s buffer (CPU <-> CPU, CUDA <-> GPU; every
    dtype, bfloat16 included; 0-d and empty). No history crosses (``t`` may
    require grad; the result does not): use ``wrap`` for that. On a GPU the
    DLPack stream handshake makes torch's current stream wait for jgrad's
    buffer; no host sync.

``from_torch(x)``
    A jgrad tensor sharing ``x``'s memory. Transposed (permuted) layouts are
    shared too; other non-contiguous views, conjugate/negative views (resolved
    by torch first: their values, not their raw buffers) and CPU tensors not
    aligned to 64 bytes (``x[1:]``) are copied when ``copy`` is None/True and
    refused with ``BufferError`` when ``copy=False``.

Mutation semantics
    jgrad never writes into a shared buffer: ``x = to_torch(t); t.add_(1)``
    rebinds ``t`` and leaves ``x`` unchanged. torch *can* write into a shared
    buffer (torch has no read-only tensors): ``x.add_(1)`` on a tensor shared
    with jgrad changes what jgrad sees, in either direction. JAX assumes its
    arrays are immutable, so that is unsafe; pass ``copy=True`` to
    ``to_torch``/``from_torch`` for a tensor that torch will modify in place.
    ``wrap`` saves its inputs and outputs with ``ctx.save_for_backward``, so an
    in-place change between forward and backward raises torch's usual error.

``from_torch_state_dict(obj, copy=None)`` / ``to_torch_state_dict(obj, copy=None)``
    Every tensor of a nested structure (a ``state_dict``, an optimizer's, a checkpoint dict)
    converted with ``from_torch``/``to_torch`` (zero copy where possible; ``copy=True`` when the
    torch side keeps training, as shared memory it writes would change jgrad's tensors), the rest kept as is:
    ``jg_model.load_state_dict(from_torch_state_dict(torch_model.state_dict()))`` gives a jgrad
    model PyTorch's weights; ``torch.save(to_torch_state_dict(jg_model.state_dict()), path)``
    writes a checkpoint PyTorch loads. (``jg.load(path)`` reads ``torch.save`` files directly.)

``wrap(fn)``
    ``fn`` (tensors in, a tensor or a tuple of tensors out, any jgrad code) as
    a function of torch tensors usable inside a torch autograd graph: a
    ``torch.autograd.Function`` whose forward shares the torch inputs with
    jgrad (zero copy; floating inputs that require grad become jgrad leaves
    that require grad), runs ``fn`` with grad enabled and shares the outputs
    back; its backward runs ``jg.autograd.grad`` on the kept jgrad graph with
    torch's incoming gradients and hands jgrad's gradients to torch. Once
    differentiable (``create_graph=True`` through it is an error); the jgrad
    graph is kept until the torch graph is freed, so ``retain_graph=True``
    works. Non-tensor arguments pass through to ``fn`` unchanged.

Imports ``jgrad.core._tensor`` and ``jgrad.runtime._dlpack``; torch at the call (``_torch()``), never at import.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

from jgrad.core._tensor import Tensor

from jgrad.runtime._dlpack import _exportable, from_dlpack

__all__ = ["to_torch", "from_torch", "from_torch_state_dict", "to_torch_state_dict", "wrap"]

_EXTRA = 'pip install "jgrad[torch]"'


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"interop.torch needs PyTorch, which is not installed: {_EXTRA}") from e
    return torch


def to_torch(t, *, copy=None):
    """A ``torch.Tensor`` sharing ``t``'s buffer (``copy=True``: a private copy). No history crosses."""
    torch = _torch()
    _exportable(t, "interop.torch.to_torch()", allow_requires_grad=True)
    src = t.detach() if t._req else t
    out = torch.from_dlpack(src)
    if copy:
        out = out.clone()
    return out


def from_torch(x, *, device=None, copy=None):
    """A jgrad tensor sharing ``x``'s memory (copied only where ``copy`` allows; see the module docstring)."""
    torch = _torch()
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"interop.torch.from_torch(): expected a torch.Tensor, got {type(x).__name__}")
    # Conjugate and negative views are resolved (copied) on the way, or refused with copy=False: DLPack
    # carries no lazy bits, and torch exports a negative view's unresolved buffer (jgrad/runtime/_dlpack.py).
    return from_dlpack(x.detach(), device=device, copy=copy)


def _convert(obj, is_source, convert):
    if is_source(obj):
        return convert(obj)
    if isinstance(obj, dict):
        out = type(obj)() if type(obj) in (dict, OrderedDict) else {}
        for k, v in obj.items():
            out[k] = _convert(v, is_source, convert)
        if hasattr(obj, "_metadata"):
            out._metadata = obj._metadata
        return out
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_convert(v, is_source, convert) for v in obj)
    return obj


def from_torch_state_dict(obj, *, copy=None):
    """``obj`` with every ``torch.Tensor`` (nested in dicts, lists, tuples) a jgrad tensor (``from_torch``).

    ``copy=True`` when torch will keep modifying its tensors in place (an optimizer, BatchNorm's running
    statistics): jgrad must not share memory that changes under it.
    """
    torch = _torch()
    return _convert(obj, lambda x: isinstance(x, torch.Tensor), lambda x: from_torch(x.detach(), copy=copy))


def to_torch_state_dict(obj, *, copy=None):
    """``obj`` with every jgrad tensor (nested in dicts, lists, tuples) a ``torch.Tensor`` (``to_torch``)."""
    _torch()
    return _convert(obj, lambda x: isinstance(x, Tensor), lambda x: to_torch(x.detach(), copy=copy))


class _Fn:
    """Holds the wrapped jgrad function (a non-tensor argument of ``Function.apply``)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


def _ptr(arr):
    try:
        return arr.unsafe_buffer_pointer()
    except Exception:
        return None


_FUNCTION = []


def _function_class():
    if _FUNCTION:
        return _FUNCTION[0]
    torch = _torch()
    from torch.autograd.function import once_differentiable

    import jgrad as jg

    class JgradFunction(torch.autograd.Function):
        """A jgrad function inside torch autograd (see ``interop.torch.wrap``)."""

        @staticmethod
        def forward(ctx, holder, *args):
            jargs, jin = [], []
            for a in args:
                if isinstance(a, torch.Tensor):
                    j = from_torch(a)
                    if a.requires_grad and (a.is_floating_point() or a.is_complex()):
                        j.requires_grad_(True)
                    jargs.append(j)
                    jin.append(j)
                else:
                    jargs.append(a)
                    jin.append(None)
            with jg.enable_grad():
                out = holder.fn(*jargs)
            single = isinstance(out, Tensor)
            outs = (out,) if single else tuple(out)
            if not all(isinstance(o, Tensor) for o in outs):
                raise TypeError("interop.torch.wrap: fn must return a jgrad Tensor or a tuple of Tensors, got "
                                f"{type(out).__name__}")
            in_ptrs = {_ptr(j._data) for j in jin if j is not None and j.numel()}
            touts = []
            for o in outs:
                x = to_torch(o)
                if o.numel() and _ptr(o._data) in in_ptrs:
                    x = x.clone()          # an output that is an input's buffer: torch must not see an alias
                touts.append(x)
            ctx.jg_inputs = jin
            ctx.jg_outputs = outs
            ctx.single = single
            ctx.save_for_backward(*[a for a in args if isinstance(a, torch.Tensor)], *touts)
            for o, x in zip(outs, touts):
                if not (o.dtype.is_floating_point or o.dtype.is_complex):
                    ctx.mark_non_differentiable(x)
            return touts[0] if single else tuple(touts)

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            ctx.saved_tensors    # torch's version check: inputs/outputs modified in place since forward
            roots, gouts, in_ptrs = [], [], set()
            for o, g in zip(ctx.jg_outputs, grads):
                if g is None or not o._req:
                    continue
                jgo = from_torch(g)
                roots.append(o)
                gouts.append(jgo)
                if jgo.numel():
                    in_ptrs.add(_ptr(jgo._data))
            idx = [i for i, j in enumerate(ctx.jg_inputs) if j is not None and j._req]
            result = [None] * (1 + len(ctx.jg_inputs))
            if roots and idx:
                gs = jg.autograd.grad(roots, [ctx.jg_inputs[i] for i in idx], grad_outputs=gouts,
                                      retain_graph=True, allow_unused=True)
                for i, g in zip(idx, gs):
                    if g is None:
                        continue
                    x = to_torch(g)
                    if g.numel() and _ptr(g._data) in in_ptrs:
                        x = x.clone()      # jgrad passed torch's own gradient through: do not alias it
                    result[1 + i] = x
            return tuple(result)

    _FUNCTION.append(JgradFunction)
    return JgradFunction


def wrap(fn):
    """``fn`` (a jgrad function) as a function of torch tensors that torch autograd differentiates."""
    _torch()

    @functools.wraps(fn)
    def wrapper(*args):
        return _function_class().apply(_Fn(fn), *args)

    wrapper.jgrad_fn = fn
    return wrapper
