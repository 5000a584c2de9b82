"""``jgrad.autograd``: backward, grad, custom Functions, grad mode, anomaly mode, gradcheck.

Imports the autograd modules, ``_tensor`` and ``_factories`` (the ``ones`` seed of a ``GradientEdge``);
never ``_dispatch``, the recorder or the op library (tests/test_layering.py).
"""
from __future__ import annotations

from ..core import _factories
from ..core import _tensor
from ..core._tensor import Tensor
from . import graph  # noqa: F401
from . import functional  # noqa: F401
from . import forward_ad  # noqa: F401  (its dispatch rule is installed by jgrad.runtime._forward_ad)
from .anomaly import detect_anomaly, is_anomaly_check_nan_enabled, is_anomaly_enabled, set_detect_anomaly
from .engine import engine as _engine, set_grad_trimming
from .function import Function, FunctionCtx, InplaceFunction, once_differentiable  # noqa: F401
from . import function  # noqa: F401
from .grad_mode import (enable_grad, inference_mode, is_grad_enabled, is_inference_mode_enabled, no_grad,  # noqa: F401
                        set_grad_enabled, state as _state)
from .gradcheck import GradcheckError, gradcheck, gradgradcheck
from .node import Node, RemovableHandle, gradient_edge, is_inference  # noqa: F401 (jg.is_inference)

__all__ = ["backward", "grad", "Function", "once_differentiable", "no_grad", "enable_grad", "set_grad_enabled",
           "is_grad_enabled", "inference_mode", "is_inference_mode_enabled", "detect_anomaly", "set_detect_anomaly", "gradcheck",
           "gradgradcheck", "GradcheckError", "queue_callback", "set_multithreading_enabled",
           "is_multithreading_enabled", "Node",
           "set_grad_trimming", "is_anomaly_enabled", "is_anomaly_check_nan_enabled"]


def _as_tuple(x):
    if x is None:
        return ()
    return (x,) if isinstance(x, (Tensor, graph.GradientEdge)) else tuple(x)


class _EdgeOutput:
    """A GradientEdge used as an output: its shape, dtype and device come from the node."""

    __slots__ = ("shape", "dtype", "_device", "_req")

    def __init__(self, edge):
        meta = edge.node.input_metadata[edge.output_nr]
        self.shape, self.dtype, self._device, self._req = tuple(meta.shape), meta.dtype, meta.device, True

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def new_ones(self, shape):
        return _factories.ones(shape, dtype=self.dtype, device=self._device)


def _make_grads(outputs, grads):
    new = []
    for i, (out, g) in enumerate(zip(outputs, grads)):
        if isinstance(out, graph.GradientEdge):
            out = _EdgeOutput(out)
        if isinstance(g, Tensor):
            if g.shape != out.shape:
                raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {list(g.shape)} and "
                                   f"output[{i}] has a shape of {list(out.shape)}.")
            if out.dtype.is_complex != g.dtype.is_complex:
                raise RuntimeError(f"For complex Tensors, both grad_output and output are required to have the "
                                   f"same dtype. Mismatch in dtype: grad_output[{i}] has a dtype of {g.dtype} and "
                                   f"output[{i}] has a dtype of {out.dtype}.")
            new.append(g)
        elif g is None:
            if out._req:
                if out.numel() != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                if not out.dtype.is_floating_point:
                    raise RuntimeError(f"grad can be implicitly created only for real scalar outputs but got "
                                       f"{out.dtype}")
                new.append(out.new_ones(out.shape))
            else:
                new.append(None)
        else:
            raise TypeError(f"gradients can be either Tensors or None, but got {type(g).__name__}")
    return new


def _grads_tuple(grads, n):
    if grads is None:
        return (None,) * n
    if isinstance(grads, Tensor):
        return (grads,)
    return tuple(grads)


class _Unreachable(Node):
    """The edge of an input with no grad accumulator: no gradient can reach it."""

    __slots__ = ()

    def apply(self, grads):
        return []


def _run_backward(tensors, grads, keep_graph, create_graph, inputs, accumulate_grad):
    roots = []
    for i, t in enumerate(tensors):
        if isinstance(t, graph.GradientEdge):
            roots.append((t.node, t.output_nr))
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"element {i} of tensors is a {type(t).__name__}, not a Tensor")
        e = gradient_edge(t)
        if e is None:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
        roots.append(e)
    outputs = []
    for t in inputs:
        if isinstance(t, graph.GradientEdge):
            outputs.append((t.node, t.output_nr))  # an edge: its node's input, whatever tensor it was
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"inputs must be Tensors or GradientEdges, got {type(t).__name__}")
        if not t._req:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
        if accumulate_grad:
            t.retain_grad()
        if t._grad_fn is not None:
            outputs.append((t._grad_fn, t._output_nr))
        else:
            acc = t._grad_acc() if t._grad_acc is not None else None
            outputs.append((acc, 0) if acc is not None else (_Unreachable((), ()), 0))
    return _engine.execute(roots, list(grads), keep_graph, create_graph, accumulate_grad, outputs)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None,
             inputs=None) -> None:
    """Accumulate gradients of ``tensors`` into ``.grad`` of graph leaves (or of ``inputs``)."""
    if grad_variables is not None:
        grad_tensors = grad_variables
    if inputs is not None and len(_as_tuple(inputs)) == 0:
        raise RuntimeError("'inputs' argument to backward() cannot be empty.")
    tensors = _as_tuple(tensors)
    grads = _make_grads(tensors, _grads_tuple(grad_tensors, len(tensors)))
    if retain_graph is None:
        retain_graph = create_graph
    _run_backward(tensors, grads, retain_graph, create_graph, _as_tuple(inputs), True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Return the gradients of ``outputs`` w.r.t. ``inputs`` (nothing is accumulated into ``.grad``)."""
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when materialize_grads=True, but got: "
                         "allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _as_tuple(outputs)
    if is_grads_batched:
        return _batched_grad(grad, outputs, _as_tuple(inputs), _grads_tuple(grad_outputs, len(outputs)),
                             retain_graph, create_graph, allow_unused, materialize_grads)
    inputs_t = _as_tuple(inputs)
    grads = _make_grads(outputs, _grads_tuple(grad_outputs, len(outputs)))
    if retain_graph is None:
        retain_graph = create_graph
    result = _run_backward(outputs, grads, retain_graph, create_graph, inputs_t, False)
    out = []
    for t, r in zip(inputs_t, result):
        if r is None:
            if not allow_unused:
                raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                                   "Set allow_unused=True if this is the desired behavior.")
            if materialize_grads:
                if isinstance(t, graph.GradientEdge):
                    raise RuntimeError("materialize_grads cannot be used when the given input is a GradientEdge")
                # zeros_like(input, requires_grad=create_graph): differentiable again under create_graph
                r = t.new_zeros(t.shape, requires_grad=bool(create_graph))
        out.append(r)
    return tuple(out)


# Installed by jgrad.func: grad(..., is_grads_batched=True), the engine run once under vmap.
_batched_grad = None


def queue_callback(callback) -> None:
    """Run ``callback()`` once the running backward has computed every gradient."""
    _engine.queue_callback(callback)


def is_multithreading_enabled() -> bool:
    """Whether backward may run device work on the engine's device threads (this thread's setting)."""
    return _state.multithreading_enabled


class set_multithreading_enabled:
    """Run backward on device threads (default) or all on the calling thread."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self.prev = _state.multithreading_enabled
        _state.multithreading_enabled = self.mode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _state.multithreading_enabled = self.prev

    def __call__(self, fn):
        import functools

        _state.multithreading_enabled = self.prev  # as a decorator, only calls are affected

        @functools.wraps(fn)
        def wrapper(*a, **k):
            with set_multithreading_enabled(self.mode):
                return fn(*a, **k)
        return wrapper


# The tensor sits below the engine (docs/design.md, "The house"): Tensor.backward() and hook handles come from here.
_tensor.above.backward, _tensor.above.RemovableHandle = backward, RemovableHandle
