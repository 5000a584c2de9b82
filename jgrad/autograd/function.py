"""Custom autograd Functions: ``class F(Function): forward(ctx, ...); backward(ctx, ...)``.

Imports ``_tensor``, ``node``, ``grad_mode``, ``_factories`` (zeros for ``materialize_grads``) and
``streams`` (a node runs on its forward's stream).
"""
from __future__ import annotations

import functools

from ..core import _factories
from ..core._tensor import Tensor
from ..streams import _current_for
from .grad_mode import no_grad, state as _state
from .node import InputMetadata, Node, SavedVariable, _SECOND_BACKWARD, gradient_edge


class FunctionCtx:
    """The ``ctx`` of a custom Function: what forward leaves for backward."""

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {tensors.index(t)} is "
                                f"of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    @property
    def saved_tensors(self):
        saved = getattr(self, "_saved", None)
        if saved is None:
            if getattr(self, "_released", False):
                raise RuntimeError(_SECOND_BACKWARD)
            return tuple(getattr(self, "to_save", ()))
        node = self._node
        if _state.grad_enabled:
            return tuple(s.unpack(node) if s is not None else None for s in saved)
        out = []
        for s in saved:
            if s is None:
                out.append(None)
                continue
            s.check(node)
            out.append(s.unpack(node) if s.leaf is not None else Tensor._make(s.data, s.device, s.stream))
        return tuple(out)

    saved_variables = saved_tensors

    def mark_dirty(self, *tensors):
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = tensors

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value


class BackwardCFunction(Node):
    """The node of a custom Function; named ``<Class>Backward``."""

    __slots__ = ("ctx", "fn_cls", "is_tensor_input")

    def name(self):
        return f"{self.fn_cls.__name__}Backward"

    def release_variables(self):
        self.ctx._saved = None
        self.ctx._released = True

    def apply(self, grads):
        ctx = self.ctx
        if getattr(ctx, "materialize_grads", True):
            for i, g in enumerate(grads):
                if g is None and self.input_metadata[i].dtype is not None:  # non-Tensor outputs get None
                    m = self.input_metadata[i]
                    grads[i] = _factories.zeros(m.shape, dtype=m.dtype, device=m.device)
        res = self.fn_cls.backward(ctx, *grads)
        if not isinstance(res, tuple):
            res = (res,)
        n = len(self.is_tensor_input)
        if len(res) != n:
            if len(res) > n and all(r is None for r in res[n:]):
                res = res[:n]
            else:
                raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients (expected {n}, "
                                   f"got {len(res)})")
        out = []
        for i, (r, is_t) in enumerate(zip(res, self.is_tensor_input)):
            if not is_t:
                if r is not None:
                    raise RuntimeError(f"function {self.name()} returned a gradient different than None at position "
                                       f"{i + 1}, but the corresponding forward input was not a Variable")
                out.append(None)
                continue
            if r is not None and not isinstance(r, Tensor):
                raise TypeError(f"function {self.name()} returned a {type(r).__name__} at position {i + 1}; "
                                "gradients must be Tensors or None")
            out.append(r)
        return out


class _FunctionMeta(type):
    def __init__(cls, name, bases, attrs):
        super().__init__(name, bases, attrs)


class Function(metaclass=_FunctionMeta):
    """Define an op by its ``forward`` and ``backward``; call it with ``apply``.

    ``forward(ctx, *args)`` computes outputs (history is not recorded inside);
    ``backward(ctx, *grad_outputs)`` returns one gradient per forward input.
    ``forward(*args)`` with ``setup_context(ctx, inputs, output)`` works too.
    """

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for your custom "
                                  "autograd.Function to use it with backward mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom autograd.Function to use it with "
                                  "forward mode AD.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not overridden")

    @classmethod
    def apply(cls, *args, **kwargs):
        if forward_ad_hook is not None:  # a dual level is active: jgrad.runtime._forward_ad runs the jvp staticmethod
            return forward_ad_hook(cls, args, kwargs)
        return cls._apply(FunctionCtx(), args, kwargs)

    @classmethod
    def _apply(cls, ctx, args, kwargs):
        is_tensor = tuple(isinstance(a, Tensor) for a in args)
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._req for a in args)
        record = _state.grad_enabled and any(ctx.needs_input_grad)
        with no_grad():
            if cls.setup_context is not Function.setup_context:
                outputs = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, outputs)
            else:
                outputs = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        arg_ids = {id(a) for a in args if isinstance(a, Tensor)}
        for o in outs:  # views made in forward may not be written in place (PyTorch's IN_CUSTOM_FUNCTION)
            if isinstance(o, Tensor) and id(o) not in arg_ids and o._is_view():
                _custom_output_view(o, None)
        if not record:
            return outputs
        node = BackwardCFunction.__new__(BackwardCFunction)
        edges = tuple(gradient_edge(a) if t else None for a, t in zip(args, is_tensor))
        dirty = {id(t) for t in getattr(ctx, "dirty_tensors", ())}
        nondiff = {id(t) for t in getattr(ctx, "non_differentiable", ())}
        wrapped, metas, moved, dirty_views = [], [], [], []
        for i, o in enumerate(outs):
            if not isinstance(o, Tensor):
                wrapped.append(o)
                metas.append(InputMetadata((), None, None))
                continue
            o._fresh()
            if id(o) in dirty:
                if o._grad_fn is None and o._req:
                    raise RuntimeError("a leaf Variable that requires grad has been used in an in-place operation.")
                t = o
                if o._is_view():  # written through a view: the base's history is rebased (CopySlices), below
                    if len(outs) > 1:
                        raise RuntimeError(MULTIPLE_OUTPUTS_DIRTY_VIEW)
                    dirty_views.append(i)
                if t._retains_grad and t._grad_fn is not None and t._grad_fn._retains_grad_hooks:
                    # as for built-in in-place ops: the retains_grad hook follows the new grad_fn
                    hook = t._grad_fn._retains_grad_hooks.pop(t._output_nr, None)
                    if hook is not None:
                        moved.append((i, hook))
            elif id(o) in arg_ids:
                t = o.detach()  # an input returned as-is becomes a new output of this node: a view of the input
                _custom_output_view(t, o)
            else:
                t = o
            metas.append(InputMetadata.of(t))
            if i in dirty_views:
                pass
            elif id(o) not in nondiff and (t.dtype.is_floating_point or t.dtype.is_complex):
                t._grad_fn, t._output_nr, t._req = node, i, True
            else:
                t._req = False
            wrapped.append(t)
        Node.__init__(node, edges, tuple(metas))
        for i in dirty_views:
            o = wrapped[i]
            _dirty_view(o, Tensor._make(o._data, o._device, o._stream, True, node, i))
        if moved:
            node._retains_grad_hooks = dict(moved)
        node.ctx, node.fn_cls, node.is_tensor_input = ctx, cls, is_tensor
        ctx._node = node
        first = next((a for a in args if isinstance(a, Tensor)), None)
        if first is not None:
            node._stream = _current_for(first._device)  # backward runs on the forward's stream
        out_ids = {id(t): True for t in wrapped if isinstance(t, Tensor)}
        to_save = getattr(ctx, "to_save", ())
        ctx._saved = [SavedVariable(t, is_output=id(t) in out_ids and t._grad_fn is node) if t is not None else None
                      for t in to_save]
        ctx.to_save = ()
        return wrapped[0] if single else tuple(wrapped)


# Installed by jgrad.runtime._forward_ad while a dual level is active: ``hook(cls, args, kwargs)`` applies the Function.
forward_ad_hook = None
# Installed by jgrad.runtime._views (views are written through ops, above autograd).
_custom_output_view = None  # (out, src): out is a view made by a custom Function (of src, or already a view)
_dirty_view = None          # (view, value): a view marked dirty takes value's history through its base
MULTIPLE_OUTPUTS_DIRTY_VIEW = ""


class InplaceFunction(Function):
    def __init__(self, inplace=False):
        self.inplace = inplace


class _DelayedError(Node):
    __slots__ = ("msg",)

    def name(self):
        return "DelayedError"

    def apply(self, grads):
        raise RuntimeError(self.msg)


def once_differentiable(fn):
    """Mark a backward as not differentiable: a double backward through it raises."""

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not _state.grad_enabled:
            return outputs
        if not any(isinstance(a, Tensor) and a._req for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        err = _DelayedError.__new__(_DelayedError)
        Node.__init__(err, tuple(gradient_edge(a) for a in args if isinstance(a, Tensor) and a._req),
                      tuple(InputMetadata.of(o) if isinstance(o, Tensor) else InputMetadata((), None, None)
                            for o in outs))
        err.msg = "trying to differentiate twice a function that was marked with @once_differentiable"
        res = []
        for i, o in enumerate(outs):
            if isinstance(o, Tensor):
                o = Tensor._make(o._fresh()._data, o._device, o._stream, True, err, i)
            res.append(o)
        return res[0] if single else tuple(res)

    return wrapper
