"""The tape: what recording an op's ``OpNode`` costs, kept small.

Every differentiable op with an input that requires grad passes through
``record``, so it reads as little as it can per call: one pass over the inputs
for edges, ``in_avals`` and saved tensors, shapes and dtypes looked up per jax
aval (reading them off a ``jax.Array`` is slower than the rest of recording),
and one shared ``InputMetadata`` per stream and output aval.

Note [Objects a live graph keeps]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A graph that lives across many ops (REINFORCE keeps an episode's log-probabilities for its end; a language model,
a sequence's activations) keeps its nodes through Python's young collections into the oldest generation. A full
collection visits every object there, and one comes each time the oldest generation has grown by a quarter: each
object that gets there costs about four visits of a heap that, after a few hundred kernels compiled, is mostly
JAX's trace caches. Measured on the 2-core CPU, the collector took 16-19% of a REINFORCE run (a full collection
130-300 ms) and ~120 tracked objects per environment step got there. Where a recorded node can share an object
instead of owning one, it does: its ``in_avals`` (one tuple per signature, ``_IN_AVALS``), a single output's
``input_metadata`` (one tuple per aval and stream, ``_shared_metas``), and a bound segment buffer's holders
(``_recorder.NO_HOLDERS``); its saved inputs are a tuple, which the collector stops tracking when it holds only Nones
and numbers: 120 -> 97 per environment step in "auto" mode, 124 -> 109 in eager mode. What is left
is the graph itself: nodes, their edges, saved tensors with their version counters, and the buffers they hold.

Imports ``_tensor``, ``_recorder``, ``_dtype`` and autograd (``node``, ``anomaly``, ``grad_mode``): the
tape builds autograd's nodes. Used by ``_dispatch`` alone.
"""
from __future__ import annotations

from ..core import _dtype
from ..core._recorder import Buffer, _settled, aval_info
from ..core._tensor import Tensor
from ..autograd.anomaly import record_forward_trace
from ..autograd.grad_mode import state as _state
from ..autograd.node import InputMetadata, SavedVariable, _sequence_nr, grad_accumulator, gradient_edge


#: [True] once a node was recorded while ``saved_tensors_hooks`` were active (its saved tensors may have hooks):
#: until then the backward plan skips looking for them (``_backward_plan._walk``).
hooked_saves = [False]


def record(node, op, key, attrs, args, outs, dev, stream, inplace):
    """Fill in ``node``, the new OpNode of ``op``, and return the op's output tensors."""
    if _state.saved_hooks:
        hooked_saves[0] = True
    pos = op.edge_args
    edges, topo, in_avals, saved, has_saved = _scan_inputs(op, args, inplace, dev, stream, pos is None)
    if pos is not None:  # only these inputs get an edge
        pos = tuple(i for i in pos if i < len(args))
        edges, topo = _edges([args[i] for i in pos])
    node.next_edges = edges
    node.sequence_nr = next(_sequence_nr)
    node.topological_nr = topo
    node._stream = stream
    node.op, node.key, node.attrs, node.device, node.released, node.tensor_pos = op, key, attrs, dev, False, pos
    node.in_avals = in_avals
    node.saved = saved
    node.has_saved = has_saved or op.save_outputs
    results = _outputs(node, outs, dev, stream, inplace)
    node.saved_out = [SavedVariable(t, True) for t in results] if op.save_outputs else None
    if _state.anomaly_enabled:
        record_forward_trace(node)
    return results


def _scan_inputs(op, args, inplace, dev, stream, with_edges):
    """One pass over the inputs: edges (when ``with_edges``), topological_nr, in_avals, saved inputs, whether a
    tensor was saved."""
    edges, in_avals = [], []
    topo = 0
    save = op.save
    saved = None if save is None else []
    save_all = save == "all"
    has_saved = False
    for i, a in enumerate(args):
        if not isinstance(a, Tensor):
            if with_edges:
                edges.append(None)
            in_avals.append(None)
            if saved is not None:
                saved.append(a if save_all or i in save else None)
            continue
        d = a._data
        if type(d) is Buffer:
            info = d.info
            in_avals.append(info[0])
        else:
            info = _AVAL_INFO.get(getattr(d, "aval", None))
            if info is None and d is not None:
                info = _array_info(d)  # an aval seen for the first time (cached from now on)
            in_avals.append(info[0] if info is not None else _shape_dtype(a))
        if with_edges:
            fn = a._grad_fn
            if fn is not None:
                edges.append((fn, a._output_nr))
                if fn.topological_nr >= topo:
                    topo = fn.topological_nr + 1
            elif a._req:
                acc = a._grad_acc
                acc = acc() if acc is not None else None  # grad_accumulator's fast path, inlined
                if acc is None:
                    # A new AccumulateGrad takes the current stream of the leaf's device: the op's stream when the
                    # leaf is on the op's device, whose shared InputMetadata it can then use too.
                    acc = grad_accumulator(a, _shared_meta(stream._out_meta, info, dev, stream)
                                           if info is not None and a._device is dev else None)
                edges.append((acc, 0))
                topo = topo or 1  # AccumulateGrad's topological_nr is 0
            else:
                edges.append(None)
        if saved is not None:
            if save_all or i in save:
                saved.append(SavedVariable(a, False, a is inplace))
                has_saved = True
            else:
                saved.append(None)
    if has_saved and stream._capture is not None:
        _alias_saved(saved, stream._capture)
    if saved is not None:
        saved = tuple(saved)  # (one of Nones and numbers alone is untracked by the collector)
    in_avals = tuple(in_avals)
    shared = _IN_AVALS.get(in_avals)
    if shared is None:
        if len(_IN_AVALS) >= _IN_AVALS_MAX:
            _IN_AVALS.clear()
        shared = _IN_AVALS[in_avals] = in_avals
    return tuple(edges), topo, shared, saved, has_saved


#: One ``in_avals`` tuple per signature, shared by the nodes recorded with it (Note [Objects a live graph keeps]).
_IN_AVALS: dict = {}
_IN_AVALS_MAX = 4096


def _alias_saved(saved, cap):
    """Saved tensors of a captured node hold the value of each replay, not the value at capture."""
    for sv in saved:
        if type(sv) is SavedVariable:
            sv.data = _settled(sv.data)  # a tiered segment's result: its value
            if type(sv.data) is not Buffer:
                sv.data = cap.alias(sv.data)


def _edges(inputs):
    """``gradient_edge`` of each input (None for non-tensors) and the node's topological_nr."""
    edges = [gradient_edge(a) if isinstance(a, Tensor) else None for a in inputs]
    topo = max([e[0].topological_nr + 1 for e in edges if e is not None], default=0)
    return tuple(edges), topo


def _outputs(node, outs, dev, stream, inplace):
    """The node's output tensors and input_metadata; integer and bool outputs get no history."""
    shared = stream._out_meta
    if len(outs) == 1 and inplace is None:  # most ops: the loop below, unrolled
        o = outs[0]
        info = o.info if type(o) is Buffer else (_AVAL_INFO.get(o.aval) or _array_info(o))
        node.input_metadata = shared.get(info) or _shared_metas(shared, info, dev, stream)
        if info[2]:
            return (Tensor._make(o, dev, stream, True, node, 0),)
        return (Tensor._make(o, dev, stream, False, None, 0),)
    metas = []
    results = []
    for i, o in enumerate(outs):
        info = o.info if type(o) is Buffer else (_AVAL_INFO.get(o.aval) or _array_info(o))
        differentiable = info[2]
        meta = shared.get(info)
        metas.append(meta[0] if meta is not None else _shared_meta(shared, info, dev, stream))
        if i == 0 and inplace is not None:
            results.append(_rebind(inplace, o, node))
        else:
            results.append(Tensor._make(o, dev, stream, differentiable, node if differentiable else None, i))
    node.input_metadata = tuple(metas)
    return tuple(results)


def _shared_meta(shared, info, dev, stream):
    """The InputMetadata of ``info`` (an entry of ``_AVAL_INFO``) on ``stream``, shared by the nodes recorded there."""
    return _shared_metas(shared, info, dev, stream)[0]


def _shared_metas(shared, info, dev, stream):
    """``(InputMetadata,)`` of ``info`` on ``stream``: the ``input_metadata`` of every single-output node recorded
    there, one tuple for all of them (a node a live graph keeps holds no tuple of its own)."""
    metas = shared.get(info)
    if metas is None:
        metas = shared[info] = (InputMetadata(info[0][0], info[1] or _dtype.from_np(info[0][1]), dev, stream),)
    return metas


def _rebind(t, o, node):
    """The target of an in-place op becomes output 0 of ``node``, its retains_grad hook with it."""
    old_fn, old_nr = t._grad_fn, t._output_nr
    t._data = o
    t._vc[0] += 1
    t._grad_fn, t._output_nr, t._req = node, 0, True
    if t._retains_grad and old_fn is not None and old_fn._retains_grad_hooks:
        hook = old_fn._retains_grad_hooks.pop(old_nr, None)
        if hook is not None:
            node._retains_grad_hooks = {0: hook}
    return t


# jax aval -> ((shape, numpy dtype), jgrad dtype, differentiable): reading these off a jax.Array
# (Python properties, and jnp.issubdtype) costs more than the rest of recording an op.
_AVAL_INFO: dict = {}


def _shape_dtype(t):
    """A tensor's entry of ``in_avals``: (shape, numpy dtype)."""
    d = t._data
    return _array_info(d)[0] if d is not None else (t.shape, t._aval.dtype)


def _array_info(x):
    """((shape, numpy dtype), jgrad dtype, differentiable) of an array or a captured Buffer."""
    if type(x) is Buffer:
        return x.info
    aval = getattr(x, "aval", None)
    info = _AVAL_INFO.get(aval)
    if info is None:
        if aval is not None:
            info = _AVAL_INFO[aval] = aval_info(aval)
        else:  # a NumPy array
            from jax.core import ShapedArray
            info = aval_info(ShapedArray(x.shape, x.dtype))
    return info
