"""``make_graphed_callables``: forward and backward of callables as replays of captured graphs.

A port of PyTorch's ``torch.cuda.make_graphed_callables``: warm up on a side
stream, capture each callable's forward (in order) and backward (in reverse
order, through ``autograd.grad``) into graphs sharing one pool, and wrap the
pair in an autograd Function whose forward and backward replay them.

Imports ``graphs`` (``Graph``), autograd (``Function``, ``grad``), ``streams``, ``_tensor`` and
``_factories`` (the gradient placeholders). Installs itself as ``graphs.make_graphed_callables``, since it
builds on ``Graph``; ``jgrad.nn`` installs ``Module`` here (a callable may be one), since nn sits above.
"""
from __future__ import annotations

from ..core._tensor import Tensor
from ..autograd import Function, grad as _grad, once_differentiable
from ..graphs import Graph, graph, graph_pool_handle
from ..core import _factories
from ..streams import Stream, stream as _stream_ctx
from .. import graphs as _graphs

_Module = [()]  # jgrad.nn.Module, installed by jgrad.nn when it loads (isinstance(c, ()) is False until then)


def _check(callables, sample_args):
    for c, args in zip(callables, sample_args):
        if isinstance(c, _Module[0]):
            if c._backward_hooks or c._forward_hooks or c._forward_pre_hooks:
                raise RuntimeError("Modules must not have hooks registered at the time they are passed. However, "
                                   "registering hooks on modules after passing them through "
                                   "make_graphed_callables is allowed.")
            if any(b.requires_grad for b in c.buffers()):
                raise RuntimeError("In any Module passed to make_graphed_callables, only parameters may be "
                                   "trainable. All buffers must have requires_grad=False.")
        if not isinstance(args, tuple) or not all(isinstance(a, Tensor) for a in args):
            raise TypeError("In the prototype API, sample_args for each callable must be a tuple of Tensors. "
                            "Other types and keyword args are not allowed.")


def _as_tuple(outputs):
    return (outputs,) if isinstance(outputs, Tensor) else tuple(outputs)


def make_graphed_callables(callables, sample_args):
    just_one = not isinstance(callables, tuple)
    if just_one:
        callables, sample_args = (callables,), (sample_args,)
    _check(callables, sample_args)
    params = [tuple(c.parameters()) if isinstance(c, _Module[0]) else () for c in callables]
    surfaces = [tuple(args) + p for args, p in zip(sample_args, params)]
    fwd_graphs = [Graph() for _ in callables]
    bwd_graphs = [Graph() for _ in callables]
    for g in fwd_graphs + bwd_graphs:  # the engine and the caller read every output of these at each step
        g._pack_outputs = False
    pool = graph_pool_handle()

    # Warm up on a side stream, so lazy one-time work (compiles) stays out of the captures.
    with _stream_ctx(Stream()):
        for func, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(3):
                outputs = _as_tuple(func(*args))
                _grad(outputs=outputs, inputs=tuple(i for i in surface if i.requires_grad),
                      grad_outputs=tuple(_factories.empty_like(o) for o in outputs), allow_unused=False)
            del outputs

    static_outputs, was_tensor = [], []
    for func, args, g in zip(callables, sample_args, fwd_graphs):
        with graph(g, pool=pool):
            outputs = func(*args)
        was_tensor.append(isinstance(outputs, Tensor))
        static_outputs.append(_as_tuple(outputs))

    # Backward graphs in reverse order, as they will run.
    grad_outputs, grad_inputs = [], []
    for surface, outs, g in zip(reversed(surfaces), reversed(static_outputs), reversed(bwd_graphs)):
        if not all(o.requires_grad for o in outs):
            raise RuntimeError("Outputs of graphed callables must require grad.")
        static_grad_outputs = tuple(_factories.empty_like(o) for o in outs)
        with graph(g, pool=pool):
            grads = _grad(outputs=outs, inputs=tuple(i for i in surface if i.requires_grad),
                          grad_outputs=static_grad_outputs, allow_unused=False)
        it = iter(grads)
        grad_outputs.append(static_grad_outputs)
        grad_inputs.append(tuple(next(it) if arg.requires_grad else None for arg in surface))
    grad_outputs.reverse()
    grad_inputs.reverse()

    result = []
    for i, func in enumerate(callables):
        graphed = _graphed_function(fwd_graphs[i], bwd_graphs[i], params[i], len(sample_args[i]), was_tensor[i],
                                    surfaces[i], static_outputs[i], grad_outputs[i], grad_inputs[i])
        if isinstance(func, _Module[0]):
            func.forward = _graphed_forward(func, func.training, graphed, func.forward)
            result.append(func)
        else:
            result.append(graphed)
    return result[0] if just_one else tuple(result)


def _graphed_function(fwd_graph, bwd_graph, module_params, n_user_args, output_was_tensor, surface,
                      static_outputs, static_grad_outputs, static_grad_inputs):
    class Graphed(Function):
        @staticmethod
        def forward(ctx, *inputs):
            for i in range(n_user_args):
                if surface[i]._data is not inputs[i]._data:
                    surface[i].copy_(inputs[i])
            fwd_graph.replay()
            return tuple(o.detach() for o in static_outputs)

        @staticmethod
        @once_differentiable
        def backward(ctx, *grads):
            for g, grad in zip(static_grad_outputs, grads):
                if grad is None:
                    g.zero_()  # an output that got no gradient contributes zeros
                elif g._data is not grad._data:
                    g.copy_(grad)
            bwd_graph.replay()
            return tuple(b.detach() if b is not None else None for b in static_grad_inputs)

    def functionalized(*user_args):
        if len(user_args) != n_user_args:
            raise TypeError(f"this graphed callable takes {n_user_args} positional tensors (as its sample_args), "
                            f"got {len(user_args)}")
        out = Graphed.apply(*(user_args + module_params))
        return out[0] if output_was_tensor else out

    return functionalized


def _graphed_forward(module, training, graphed, orig_forward):
    def forward(*user_args):
        # The graph was captured in one training/eval state; the other runs the module eagerly.
        if module.training == training:
            return graphed(*user_args)
        return orig_forward(*user_args)
    return forward


_graphs._graphed_impl[0] = make_graphed_callables
