"""The engine's fast path: a whole backward pass as one planned step (recorded in "auto" mode, run in eager mode).

Imports ``_dispatch`` (``OpNode``, the kernels a node reads), ``_segment``, ``_recorder``, ``_tensor``,
``streams`` and the engine (``GraphTask`` simulates the pass). ``jgrad/__init__`` imports it once
``_dispatch`` exists; it installs itself into the engine, which never imports it
(``autograd.engine.fast_paths``).

Note [Backward plans]
~~~~~~~~~~~~~~~~~~~~~
Why: in "auto" mode a node's kernel is only recorded, so what a backward pass costs is the
engine's own Python: the ready queue, input buffers, hook and stream checks, one record per node
(~15-45 us a node). When no user code can run during the pass, none of that is observable: the
order the engine would run the nodes in, which gradients it sums in which order, what each node's
``needs_input_grad`` mask is and which gradient ends up in which ``.grad`` are all functions of the
graph's structure. So the pass is planned once per structure, by simulating the engine on the
graph (its own ``GraphTask`` computes dependencies and ``exec_info``; the loop mirrors
``thread_main``/``evaluate_function``/``_dispatch_outputs``), and the plan's steps become one jax
function, recorded into the segment as a single step. Compiled, it is part of the step's one
executable; run op by op (the first tier), it calls each node's own cached backward kernel, as the
engine would have.

What the key holds: every node reachable from the roots, ranked by ``sequence_nr`` (creation
order, which fixes the engine's order; AccumulateGrad ties keep discovery order), each with its op,
attributes, input avals and edges given as ranks; the roots, the ``inputs=`` edges, whether
gradients accumulate, and gradient trimming. Equal keys are isomorphic graphs run in the same order.

Shapes: a plan's build asks each node's kernel for its outputs' avals (which are gradients, which are None)
through the recorder's shape cache, else the kernel's own ``jax.jit`` trace cache, which eager mode's call (or
an earlier plan's) filled at these shapes: no new trace, yet a formula that fails to trace raises here, in
``backward()``, as it would in eager mode. The plan's function then carries its own ``eval_shape``: its
results are sums of kernel outputs and seeds of one shape and dtype each, so recording it traces nothing (a
GAN's first step: 16 -> 2.3 ms of plan builds, 35 traces -> 2).

Eager mode: the engine's own Python is most of a small pass's time there too (~60 us a node against ~10-15 us for
the node's kernel on the 2-core CPU). So a pass whose structure eager mode has seen before (the second backward
of a training loop's step) runs its plan at once, kernel by kernel (``_Plan.run``): each node's kernel called as
``OpNode.apply`` calls it, the gradients summed in the engine's order by the same XLA add, each node's saved
tensors freed and each gradient dropped once used (the engine's memory profile), ``.grad`` set by AccumulateGrad's
rules. A structure seen once costs only its key (its first pass runs the engine); ``eager_plans = False`` turns
this off. The results are the engine's bit for bit (tests/test_execution.py); what differs is only a kernel that
raises mid-pass: no leaf's ``.grad`` has changed yet (docs/differences.md).

When it applies (else the engine runs as usual, with every semantic of engine.cpp): "auto" mode (or eager mode,
at a structure's second pass), no capture under way, no ``create_graph``, no anomaly mode, no stream sanitizer,
no profiler observing nodes, not inside another backward; every node an op's ``OpNode`` or a leaf's
``AccumulateGrad``, on one stream that is the caller's current stream; no tensor, node, retains_grad or
post-accumulate hook anywhere; no saved tensor modified in place, no node already freed (the engine raises those
errors itself); every gradient, seeds included, of the shape and dtype its consumer expects (else
``validate_outputs`` would reduce or cast it). So the fast path changes no result, only who computes it: the same
kernels, the same sums in the same order, PyTorch's AccumulateGrad rules for ``.grad``.
"""
from __future__ import annotations

import heapq
import itertools
import operator
from weakref import ref as _weakref

import jax
import jax.numpy as jnp

from . import _segment
from ._tape import hooked_saves as _hooked_saves
from ..core._recorder import _eval_shape, _tree_flatten, _tree_unflatten
from ._dispatch import OpNode, _KERNEL_READS, _kernel_reads, _run_with_buffers
from ._capture import concrete
from ..core._tensor import Tensor
from ..autograd import engine as _engine_mod
from ..autograd.engine import GraphTask, _tls, _trimming, node_observers
from ..autograd.grad_mode import state as _state
from ..autograd.node import _SECOND_BACKWARD, AccumulateGrad, GraphRoot, SavedVariable
from ..streams import _current_for, _prune, _san, active_captures as _active_captures
from ..core._dtype import x64_scope as _x64

#: Plans kept before the cache starts afresh.
max_plans = 10_000
#: Turn the fast path off (the engine then runs every backward node by node in "auto" mode too).
enabled = True

#: Eager mode runs a backward whose structure it has seen before through its plan, kernel by kernel (Note [Backward
#: plans]); False leaves every eager backward to the engine.
eager_plans = True

_plans: dict = {}
_seen: set = set()  # eager mode: the hashes of the structures seen once (a plan is built at the second)
_auto = _segment.auto
_SKIP = object()  # the plan of a structure the fast path declines (e.g. the engine would raise)


def _eligible_node(fn, stream):
    """Whether the engine would run ``fn`` without user code, on ``stream``."""
    if fn._stream is not stream or fn._tensor_pre_hooks or fn._retains_grad_hooks or fn._pre_hooks \
            or fn._post_hooks:
        return False
    t = type(fn)
    if t is OpNode:  # an unpack hook (checkpoint's recomputation) is user code: it runs in the engine, in order
        return not fn.released and not any(type(s) is SavedVariable and s.hooks is not None
                                           for s in (fn.saved or ())) and not any(
            s.hooks is not None for s in (fn.saved_out or ()))
    if t is AccumulateGrad:
        var = fn.variable
        return var._grad_fn is None and not var._hooks and not var._post_acc_hooks
    return False


def _walk(root_edges, stream):
    """Every node reachable from the roots (None when one is not eligible), in discovery order.

    (``_eligible_node`` inlined for the common nodes: this runs once per backward pass, over every node.)"""
    seen = set()
    add = seen.add
    nodes = []
    append = nodes.append
    stack = [e[0] for e in reversed(root_edges)]
    pop, push = stack.pop, stack.append
    hooked = _hooked_saves[0]
    while stack:
        fn = pop()
        if fn in seen:
            continue
        add(fn)
        t = type(fn)
        if fn._stream is not stream or fn._tensor_pre_hooks or fn._retains_grad_hooks or fn._pre_hooks \
                or fn._post_hooks:
            return None
        if t is OpNode:
            if fn.released or (hooked and not _eligible_node(fn, stream)):
                return None
        elif t is AccumulateGrad:
            var = fn.variable
            if var._grad_fn is not None or var._hooks or var._post_acc_hooks:
                return None
        else:
            return None
        append(fn)
        for e in reversed(fn.next_edges):
            if e is not None and e[0] not in seen:
                push(e[0])
    return nodes


def _structure_key(nodes, root_edges, outputs, accumulate_grad):
    nodes.sort(key=_seq_nr, reverse=True)  # (stable: AccumulateGrad ties keep discovery order)
    rank = {fn: i for i, fn in enumerate(nodes)}
    parts = []
    append = parts.append
    for fn in nodes:
        edges = tuple([(rank[e[0]], e[1]) if e is not None else None for e in fn.next_edges])
        if type(fn) is OpNode:
            append((fn.op, fn.key, fn.in_avals, fn.tensor_pos, edges))
        else:
            append(edges)
    key = (tuple(parts), tuple([(rank[e[0]], e[1]) for e in root_edges]),
           tuple([(rank.get(e[0], -1), e[1]) for e in outputs]), accumulate_grad, _trimming[0])
    return key, rank


_seq_nr = operator.attrgetter("sequence_nr")
_add = jax.jit(operator.add)  # the engine's sum of two gradients (InputBuffer.add: jgrad's add kernel), as one call


def _summed(contribs, vals, seeds, add):
    """An input gradient: its contributions (kernel outputs in ``vals``, or seeds) summed in the engine's order."""
    c = contribs[0]
    v = vals[c] if c[0] != "seed" else seeds[c[1]]
    for c in contribs[1:]:
        v = add(v, vals[c] if c[0] != "seed" else seeds[c[1]])
    return v


def try_execute(engine, root_edges, grads, keep_graph, create_graph, accumulate_grad, outputs):
    """Run the backward pass through a plan, or return NotImplemented (the engine then runs it)."""
    auto = _auto[0]
    if not (enabled if auto else eager_plans) or create_graph or _state.anomaly_enabled or node_observers \
            or _san[0] or _tls.graph_task is not None or not root_edges:
        return NotImplemented
    stream = root_edges[0][0]._stream
    if stream is None or stream._capture is not None or _active_captures or _current_for(stream.device) is not stream:
        return NotImplemented  # a capture records the engine's nodes itself
    for g, (fn, nr) in zip(grads, root_edges):
        if g is None or g._stream not in (stream, None):
            return NotImplemented
        m = fn.input_metadata[nr]
        if g.shape != tuple(m.shape) or g.dtype != m.dtype:
            return NotImplemented  # a seed validate_outputs would reduce or cast
    nodes = _walk(root_edges, stream)
    if nodes is None:
        return NotImplemented
    key, rank = _structure_key(nodes, root_edges, outputs, accumulate_grad)
    plan = _plans.get(key)
    if plan is None:
        if not auto:  # eager mode: a structure pays for its plan once it repeats
            h = hash(key)  # (a collision only builds a plan one pass early: the plan is of this graph)
            if h not in _seen:
                if len(_seen) >= max_plans:
                    _seen.clear()
                _seen.add(h)
                return NotImplemented
        if len(_plans) >= max_plans:
            _plans.clear()
        plan = _plans[key] = _Plan.build(engine, root_edges, grads, outputs, accumulate_grad, nodes, rank)
    if plan is _SKIP:
        return NotImplemented
    if not auto:
        return plan.run(nodes, grads, keep_graph, stream)
    args = plan.arguments(nodes)
    if args is None:
        return NotImplemented
    seg = _segment.segment_for(stream.device)
    res = seg.record(plan.fn, args + ([g._data for g in grads],), stream)
    if res is _segment.NOT_RECORDED:
        return NotImplemented
    return plan.finish(nodes, res, keep_graph, stream)


class _Plan:
    """One structure's backward: the steps (kernels and where their gradients come from), as one function."""

    __slots__ = ("steps", "executed", "leaves", "captured", "kernels", "out_avals", "fn", "frees", "unstepped")

    @classmethod
    def build(cls, engine, root_edges, grads, outputs, accumulate_grad, nodes, rank):
        try:
            return cls(engine, root_edges, grads, outputs, accumulate_grad, nodes, rank)
        except _Decline:
            return _SKIP

    def __init__(self, engine, root_edges, grads, outputs, accumulate_grad, nodes, rank):
        sim = _Simulation(engine, root_edges, grads, outputs, accumulate_grad, rank)
        self.steps = sim.steps          # (node rank, mask, reads, input gradients (value lists | zeros spec))
        self.executed = sim.executed    # ranks of the OpNodes the engine would run (and then free)
        self.leaves = sim.leaves        # (AccumulateGrad rank, value list)
        self.captured = sim.captured    # per grad() input: value list or None
        self.kernels = [nodes[r].op.backward_kernel(nodes[r].key, nodes[r].attrs, m, nodes[r].in_avals)
                        for r, m, _, _ in self.steps]
        self.out_avals = sim.out_avals  # per step: its kernel's outputs' avals (None: no gradient)
        self.fn = self._function()
        last = {}  # a kernel output -> the step that reads it last (a run op by op drops it then, as the engine does)
        for j, (_, _, _, ins) in enumerate(self.steps):
            for c in ins:
                if type(c) is list:
                    for v in c:
                        if v[0] == "out":
                            last[v] = j
        kept = {v for _, c in self.leaves for v in c} | {v for c in self.captured if c for v in c}
        self.frees = [[] for _ in self.steps]
        for v, j in last.items():
            if v not in kept:  # (a gradient grad() returns may also flow on, to inputs= beyond it)
                self.frees[j].append(v)
        stepped = {r for r, _, _, _ in self.steps}
        self.unstepped = [r for r in self.executed if r not in stepped]  # run, no kernel (no gradient needed)

    def _function(self):
        steps, kernels = self.steps, self.kernels
        leaves, captured = self.leaves, [c for c in self.captured if c]

        def backward_pass(saved, saved_out, seeds):
            vals = {}
            for j, (kernel, (_, _, _, ins)) in enumerate(zip(kernels, steps)):
                g = tuple(_summed(c, vals, seeds, operator.add) if type(c) is list else jnp.zeros(c[0], c[1])
                          for c in ins)
                res = kernel(saved[j], saved_out[j], g)
                for p, r in enumerate(res):
                    if r is not None:
                        vals[("out", j, p)] = r
            return tuple(_summed(c, vals, seeds, operator.add) for _, c in leaves) + tuple(
                _summed(c, vals, seeds, operator.add) for c in captured)

        backward_pass.__name__ = f"backward_pass_of_{len(steps)}_nodes"
        backward_pass.n_ops = len(steps)  # what its compile costs is that of its nodes' kernels (``_segment``)
        backward_pass.eval_shape = _shape_form([c for _, c in leaves] + captured, self.out_avals)
        return backward_pass

    def arguments(self, nodes):
        """(saved, saved outputs) per step, version-checked as the engine would; None if a check fails."""
        saved_all, outs_all = [], []
        for (r, mask, reads, _), kernel in zip(self.steps, self.kernels):
            fn = nodes[r]
            if fn.released:
                return None
            op = fn.op
            k = op._bwd_kernels.get((fn.key, mask, fn.in_avals))  # (backward_kernel's cache, without the call)
            if k is not kernel and op.backward_kernel(fn.key, fn.attrs, mask, fn.in_avals) is not kernel:
                return None
            sv = fn.saved
            if sv is None:
                saved_all.append(())
            else:
                row = []
                for s, read in zip(sv, reads[0]):
                    if type(s) is SavedVariable:
                        if read and s.vc[0] != s.version:
                            return None  # the engine raises the in-place modification error
                        row.append(_saved_value(s))
                    else:
                        row.append(s)
                saved_all.append(tuple(row))
            so = fn.saved_out
            if so:
                row = []
                for s, read in zip(so, reads[1]):
                    if read and s.vc[0] != s.version:
                        return None
                    row.append(_saved_value(s))
                outs_all.append(tuple(row))
            else:
                outs_all.append(())
        return (saved_all, outs_all)

    def run(self, nodes, grads, keep_graph, stream):
        """Eager mode: the pass now, each node's kernel called as ``OpNode.apply`` calls it, the same sums in the
        same order; each node's saved tensors are freed and each gradient dropped once used, as the engine does.
        NotImplemented when a saved tensor was modified in place (the engine raises that error itself)."""
        args = self.arguments(nodes)
        if args is None:
            return NotImplemented
        saved_all, outs_all = args
        seeds = concrete([g._fresh()._data for g in grads])  # (an "auto" mode tensor not run yet: its value)
        vals = {}

        def value(contribs):
            return _summed(contribs, vals, seeds, _add)

        pending = stream._pending
        release = not keep_graph
        with _x64():
            for j, (kernel, (r, _, _, ins), frees) in enumerate(zip(self.kernels, self.steps, self.frees)):
                g = tuple([value(c) if type(c) is list else jnp.zeros(c[0], c[1]) for c in ins])
                try:
                    res = kernel(saved_all[j], outs_all[j], g)
                except TypeError:  # saved by "auto" mode and not run yet: their values (as OpNode.apply)
                    res = _run_with_buffers(kernel, (saved_all[j], outs_all[j], g), stream)
                saved_all[j] = outs_all[j] = g = None
                if release:
                    nodes[r].release_variables()
                for p, a in enumerate(res):
                    if a is not None:
                        vals[("out", j, p)] = a
                        pending.append(_weakref(a))
                for v in frees:
                    del vals[v]
            out = [value(c) for _, c in self.leaves] + [value(c) for c in self.captured if c]
        if len(pending) > stream._prune_at:
            _prune(stream)
        return self.finish(nodes, out, keep_graph, stream, self.unstepped)

    def finish(self, nodes, res, keep_graph, stream, to_release=None):
        """AccumulateGrad's rules for every leaf, the ``grad()`` results, then free the saved tensors."""
        dev = stream.device
        prev = _state.grad_enabled
        _state.grad_enabled = False  # as on the engine's thread: grad mode is create_graph (off)
        try:
            for k, (r, _) in enumerate(self.leaves):
                acc = nodes[r]
                var = acc.variable
                if not var._req:
                    continue
                new = Tensor._make(res[k], dev, stream)
                with acc.mutex:
                    if var._grad is None:
                        var._grad = new  # accumulate_grad.h steals a gradient nobody else holds
                    elif var._grad._req:
                        var._grad = var._grad + new
                    else:
                        var._grad._inplace_accumulate(new)
        finally:
            _state.grad_enabled = prev
        out = []
        k = len(self.leaves)
        for c in self.captured:
            if c:
                out.append(Tensor._make(res[k], dev, stream))
                k += 1
            else:
                out.append(None)
        if not keep_graph:
            for r in self.executed if to_release is None else to_release:
                nodes[r].release_variables()
        return out


def _shape_form(results, out_avals):
    """``backward_pass``'s ``eval_shape`` without tracing it (``_recorder.shapes_of`` asks it first).

    Each result is a list of values summed in order: kernel outputs, whose avals the plan's build took from each
    kernel (``kernel_shapes``), and seeds, whose avals come with the call. ``a + b`` of equal shapes and dtypes
    has that shape and dtype, weakly typed only when both are; anything else (never met: the engine's input
    buffers hold one shape per input) returns None, and the recorder traces the plan as before.
    """
    fixed = [[out_avals[c[1]][c[2]] if c[0] != "seed" else c[1] for c in contribs] for contribs in results]

    def eval_shape(saved, saved_out, seeds):
        out = []
        for avals in fixed:
            shape = dtype = None
            weak = True
            for a in avals:
                if type(a) is int:  # ("seed", k)
                    a = seeds[a]
                if shape is None:
                    shape, dtype = a.shape, a.dtype
                elif a.shape != shape or a.dtype != dtype:
                    return None
                weak = weak and getattr(a, "weak_type", False)
            out.append(jax.ShapeDtypeStruct(shape, dtype, weak_type=weak))
        return tuple(out)

    return eval_shape


def kernel_shapes(kernel, saved, saved_out, grads):
    """``jax.eval_shape(kernel, saved, saved_out, grads)`` (avals; None where the kernel gives no gradient), without
    a new trace: the recorder's shape cache (shared with the kernels that auto mode records node by node), else
    the kernel's own ``jax.jit`` trace cache (eager mode's call, or an earlier plan's, traced it at these shapes:
    ~0.05 ms a node instead of ~0.4 ms for a new trace). An error in the formula raises here, in ``backward()``,
    as in eager mode."""
    leaves, treedef = _tree_flatten((saved, saved_out, grads))
    out_leaves, out_tree = _eval_shape(kernel, treedef, leaves)
    return _tree_unflatten(out_tree, out_leaves)


def _saved_value(s):
    """``s.value()``, its common case inlined: the saved tensor is gone or shares no storage."""
    src = s.src
    t = src() if src is not None else None
    if t is None or t._alias is None:
        return s.data
    return s.value()


class _Decline(Exception):
    """The simulation met something the fast path leaves to the engine."""


class _Simulation:
    """The engine's loop over symbolic gradients: which kernel runs when, summing what."""

    def __init__(self, engine, root_edges, grads, outputs, accumulate_grad, rank):
        task = GraphTask(True, False, 0, None, [e[0] for e in root_edges])
        single = len(root_edges) == 1
        graph_root = root_edges[0][0] if single else GraphRoot(root_edges, list(grads))
        min_topo = min((e[0].topological_nr for e in outputs), default=0) if outputs else 0
        engine._compute_dependencies(graph_root, task, min_topo)
        if outputs:
            task.init_to_execute(graph_root, outputs, accumulate_grad, min_topo)
        self.rank, self.task = rank, task
        self.steps, self.leaves, self.executed = [], [], []
        self.out_avals = []  # per step: the kernel's outputs' avals (None where no gradient)
        self.captured = [None] * len(task.captured_vars)
        self.heap, self.not_ready, self.tiebreak = [], {}, itertools.count()
        if single:
            buf = [[] for _ in graph_root.input_metadata]
            buf[root_edges[0][1]].append(("seed", 0))
        else:
            buf = []
        self._push(graph_root, buf)
        while self.heap:
            fn, buf = heapq.heappop(self.heap)[2:]
            self._evaluate(fn, buf, graph_root, single)
        if self.not_ready:
            raise _Decline("could not compute gradients for some functions")

    def _push(self, fn, buf):
        heapq.heappush(self.heap, (-fn.sequence_nr, next(self.tiebreak), fn, buf))

    def _should_execute(self, fn):
        info = self.task.exec_info.get(fn)
        return info is not None and info.should_execute()

    def _evaluate(self, fn, inputs, graph_root, single):
        exec_info = self.task.exec_info
        if exec_info:
            info = exec_info.get(fn)
            if info is None:
                return
            if info.captures:
                for input_nr, output_idx in info.captures:
                    self.captured[output_idx] = list(inputs[input_nr]) or None
            if not info.needed:
                return
        if fn is graph_root and not single:
            outs = [[("seed", k)] for k in range(len(fn.next_edges))]
        elif type(fn) is AccumulateGrad:
            if inputs[0]:
                self.leaves.append((self.rank[fn], list(inputs[0])))
            return
        else:
            self.executed.append(self.rank[fn])
            outs = self._op_node(fn, inputs)
        self._dispatch(fn, outs)

    def _op_node(self, fn, inputs):
        """OpNode.apply on symbolic gradients: a step, and its outputs per edge (value lists or None)."""
        edges = fn.next_edges
        mask = tuple([self._mask(e) for e in edges])
        if True not in mask or all(not c for c in inputs):
            return [None] * len(edges)
        ins = [list(c) if c else (m.shape, m.dtype.np) for c, m in zip(inputs, fn.input_metadata)]
        pos = fn.tensor_pos
        if pos is not None:
            full = [False] * len(fn.in_avals)
            for j, p in enumerate(pos):
                full[p] = mask[j]
            mask = tuple(full)
        kernel = fn.op.backward_kernel(fn.key, fn.attrs, mask, fn.in_avals)
        # Shapes only: a tensor saved under saved_tensors_hooks gives its aval (no unpack hook runs).
        fn_saved, fn_saved_out = fn.saved, fn.saved_out  # read once: another thread's backward may free them
        if fn.released:  # freed since the plan was chosen (a concurrent backward without retain_graph)
            raise RuntimeError(_SECOND_BACKWARD)
        saved = tuple(((s.data if s.hooks is None else s.aval) if type(s) is SavedVariable else s)
                      for s in fn_saved) if fn_saved is not None else ()
        saved_out = tuple(s.data if s.hooks is None else s.aval for s in fn_saved_out) if fn_saved_out else ()
        g_avals = tuple(jax.ShapeDtypeStruct(m.shape, m.dtype.np) for m in fn.input_metadata)
        res = kernel_shapes(kernel, saved, saved_out, g_avals)
        rk = (fn.op, fn.key, mask, fn.in_avals)
        reads = _KERNEL_READS.get(rk)
        if reads is None:
            if fn_saved_out or any(type(s) is SavedVariable for s in fn_saved or ()):
                reads = _KERNEL_READS[rk] = _kernel_reads(kernel, fn_saved or (), fn_saved_out or (),
                                                          [_Abstract(a) for a in g_avals])
            else:  # no saved tensor: nothing to version-check (a trace would say so; not cached: a flag is
                reads = (tuple([False] * len(fn_saved or ())), ())  # only read for a SavedVariable)
        for e, r in zip(edges, res if pos is None else [res[p] for p in pos]):
            if e is not None and r is not None:
                m = e[0].input_metadata[e[1]]
                if tuple(r.shape) != tuple(m.shape) or r.dtype != m.dtype.np:
                    raise _Decline(f"{fn.name()} gives a gradient that validate_outputs would reduce or cast")
        j = len(self.steps)
        self.steps.append((self.rank[fn], mask, reads, ins))
        self.out_avals.append(res)
        outs = [[("out", j, p)] if r is not None else None for p, r in enumerate(res)]
        return outs if pos is None else [outs[p] for p in pos]

    def _mask(self, edge):
        if edge is None:
            return False
        if not self.task.exec_info or not _trimming[0]:
            return True
        return self._should_execute(edge[0])

    def _dispatch(self, fn, outs):
        """_dispatch_outputs: dependencies, input buffers (a gradient is a list of values summed in order)."""
        exec_info = self.task.exec_info
        deps, not_ready = self.task.dependencies, self.not_ready
        for i, edge in enumerate(fn.next_edges):
            if edge is None:
                continue
            nxt, input_nr = edge
            count = deps.get(nxt)
            if count is None:
                raise _Decline(f"dependency not found for {nxt.name()}")
            ready = count == 1
            if ready:
                del deps[nxt]
            else:
                deps[nxt] = count - 1
            buf = not_ready.get(nxt)
            if buf is None:
                if exec_info and not self._should_execute(nxt):
                    continue
                buf = [[] for _ in nxt.input_metadata]
                if outs[i] is not None:
                    buf[input_nr].extend(outs[i])
                if ready:
                    self._push(nxt, buf)
                else:
                    not_ready[nxt] = buf
            else:
                if outs[i] is not None:
                    buf[input_nr].extend(outs[i])
                if ready:
                    del not_ready[nxt]
                    self._push(nxt, buf)


class _Abstract:
    """What ``_kernel_reads`` reads of a gradient tensor: ``._data`` (an aval is enough)."""

    __slots__ = ("_data",)

    def __init__(self, aval):
        self._data = aval


def _install():
    _engine_mod.fast_paths.append(try_execute)


_install()
