"""The program behind one guard key of ``jg.compile``: the call captured once, replayed with each call's arguments.

``capture(fn, args, kwargs, leaves)`` runs ``fn`` once under a graph capture (``jgrad.graphs``) on
*placeholders*: one tensor per tensor argument, holding the argument's array. What the call read that existed
before it (parameters, optimizer state, closure tensors) is an input of the executable read afresh at every
replay, so the program follows their values without knowing them. ``Program.run`` binds the call's arrays to
the placeholders (no copy: arrays never change), replays, and returns new tensors on the results.

Two kinds of program:

* a **step**: no output needs autograd afterwards (grad mode off, nothing requires grad, or the function ran
  its own ``backward()``, as a training step does). One graph; outputs come back detached.
* a **differentiable** call: an output still has a live autograd graph. The forward graph and the backward
  graph (``autograd.grad`` of those outputs with respect to every tensor the call differentiates: the
  arguments and the leaves it reached, parameters included) are captured back to back, as
  ``make_graphed_callables`` does, and each call is an autograd ``Function`` whose forward replays the one and
  whose backward replays the other. The forward's saved values are kept per call (arrays), so a second call
  before the first one's backward does not overwrite them.

Attributes the capture changed that a replay does not (a leaf's ``.grad`` object) are noted and put back
after each replay; when a capture is abandoned (a host read, an error), the ``.grad`` objects it created are
dropped again, so the eager run that follows sees the state before the capture.

Imports ``graphs``, ``_capture``, ``_tensor``, ``_recorder``, ``streams``, ``_segment`` and autograd.
Used by ``jgrad.compiler``.
"""
from __future__ import annotations

import jax

from . import _segment
from ._capture import CaptureError
from ..core._dtype import x64_scope
from ..core._recorder import Buffer
from ..core._tensor import Tensor
from ..autograd import Function, grad as _autograd_grad, once_differentiable
from ..autograd.grad_mode import no_grad, state as _grad_state
from ..autograd import node as _node
from ..autograd.node import AccumulateGrad
from ..graphs import Graph, graph as _graph_ctx
from ..streams import Stream

_flatten = jax.tree_util.tree_flatten
_unflatten = jax.tree_util.tree_unflatten
_capture_streams: dict = {}


class Break(Exception):
    """The capture of a compiled call could not record it (a host read inside, say); ``reason`` says why."""

    def __init__(self, reason, error=None):
        super().__init__(reason)
        self.reason, self.error = reason, error


def array_of(t):
    """The array a tensor holds now (a view's value, a pending "auto"-mode result run first)."""
    d = t._fresh()._data
    if type(d) is Buffer:
        v = d.value
        if v is None:
            raise d.missing("An argument of a compiled function")
        return v
    return d


def _placeholder(t):
    return Tensor._make(array_of(t), t._device, t._stream, t._req)


def _stream_for(device):
    s = _capture_streams.get(device)
    if s is None:
        s = _capture_streams[device] = Stream(device)
    return s


def _own_buffer(t, cap):
    d = t._data
    return type(d) is Buffer and d.owner is cap


WARM_UP = "an optimizer made its state during the call: it runs eagerly once (a warm-up), then compiles"


class _ProbeDone(Exception):
    pass


class _Undo:
    """What a capture changed outside its tensors' storage, put back when it is abandoned: the ``.grad``
    objects it created (they never get a value) and the optimizers' state dicts (state made lazily inside)."""

    def __init__(self, leaves, optimizers):
        self.cap = None
        self.leaves = leaves
        self.grads = [(t, t._grad) for t in leaves]
        self.states = [(opt, {p: (st, dict(st)) for p, st in opt.state.items()}) for opt in optimizers]

    def new_state(self):
        """Whether an optimizer made state during the capture (its first step for a parameter)."""
        for opt, saved in self.states:
            for p, st in opt.state.items():
                if st and (p not in saved or len(saved[p][1]) != len(st)):
                    return True
        return False

    def __call__(self):
        for t, g in self.grads:
            if t._grad is not g:
                t._grad = g
        cap = self.cap
        if cap is not None:  # other leaves the call read: a .grad made inside it had none before
            for kind, t in cap.inputs:
                if kind == "tensor" and t._req and t._grad_fn is None and t.grad is not None \
                        and _own_buffer(t.grad, cap):
                    t.grad = None
        for opt, saved in self.states:
            for p in [p for p in opt.state if p not in saved]:
                del opt.state[p]
            for p, (st, content) in saved.items():
                st.clear()
                st.update(content)
                opt.state[p] = st


_snapshot = _Undo


class Program:
    """One captured call: the graph(s), the placeholders and how the outputs come back."""

    def __init__(self):
        self.placeholders = []      # one per tensor argument, in flattening order
        self.mutated = []           # placeholder indices the call wrote in place (copied back to the argument)
        self.out_tree = None
        self.out_spec = []          # per output leaf: ("arg", i) | ("obj", tensor) | ("new", static) | ("const", v)
        self.grads = []             # (leaf, .grad object) the capture left: put back after each replay
        self.fwd = self.bwd = None
        self.differentiable = False
        # Differentiable programs only:
        self.surface = []           # the tensors gradients are taken with respect to (placeholders first)
        self.closure_leaves = []    # the non-argument leaves among them (extra inputs of the Function)
        self.static_grad_outputs = []
        self.static_grads = []
        self.diff_outputs = []      # indices into out_spec of the outputs that carry gradients
        self.saved_buffers = []     # buffers of the forward graph the backward graph reads

    # ---- capture ---------------------------------------------------------------------------------------
    def _prepare(self, args, kwargs):
        flat, tree = _flatten((args, kwargs))
        pos = [i for i, x in enumerate(flat) if isinstance(x, Tensor)]
        self.placeholders = [_placeholder(flat[i]) for i in pos]
        for i, ph in zip(pos, self.placeholders):
            flat[i] = ph
        return _unflatten(tree, flat)

    def probe(self, fn, args, kwargs, leaves, optimizers, device):
        """Record the call without compiling it, then put everything back: a graph break raises ``Break``."""
        a, kw = self._prepare(args, kwargs)
        undo = _snapshot(list(leaves) + self.placeholders, optimizers)
        g = Graph()
        try:
            with _graph_ctx(g, stream=_stream_for(device)):
                undo.cap = g._cap
                fn(*a, **kw)
                raise _ProbeDone
        except _ProbeDone:
            pass
        except CaptureError as e:
            raise Break(str(e), e) from None
        finally:
            undo()
            self.placeholders = []

    def capture(self, fn, args, kwargs, leaves, optimizers, device):
        a, kw = self._prepare(args, kwargs)
        known = list(leaves) + self.placeholders
        undo = _snapshot(known, optimizers)
        g = Graph()
        self.first_seq = next(_node._sequence_nr)  # nodes numbered below were made before this call
        body_done = False
        try:
            with _graph_ctx(g, stream=_stream_for(device)):
                cap = undo.cap = g._cap
                out = fn(*a, **kw)
                if undo.new_state():
                    raise _ProbeDone  # abandons the capture: the state must exist before one
                self._outputs(out, cap)
                live = self._live_outputs()
                if live:  # every saved value is read back per call: packing them would cost a copy
                    g._pack_outputs = False
                body_done = True
        except CaptureError as e:
            undo()
            raise Break(str(e), e) from None
        except _ProbeDone:
            undo()
            raise Break(WARM_UP) from None
        except BaseException as e:
            undo()
            if body_done and isinstance(e, Exception):  # the compile at the capture's end failed: run eagerly
                raise Break(f"compiling the captured call failed ({type(e).__name__}: {e})", e) from None
            raise
        self.fwd = g
        self.mutated = [i for i, ph in enumerate(self.placeholders) if id(ph) in cap.written]
        if any(self.placeholders[i]._req for i in self.mutated):
            raise Break("the function writes in place into an argument that requires grad")
        touched = {id(t): t for t, _ in cap.written.values()}
        for t in known + [obj for kind, obj in cap.inputs if kind == "tensor"]:
            touched.setdefault(id(t), t)
        self.grads = [(t, t.grad) for t in touched.values() if isinstance(t, Tensor) and t._req
                      and t._grad_fn is None and t.grad is not None and _own_buffer(t.grad, cap)]
        if live:
            self._capture_backward(live, cap, device)
        return self

    def _outputs(self, out, cap):
        flat, self.out_tree = _flatten(out)
        ph_index = {id(p): i for i, p in enumerate(self.placeholders)}
        spec = []
        for x in flat:
            if not isinstance(x, Tensor):
                spec.append(("const", x))
            elif id(x) in ph_index:
                spec.append(("arg", ph_index[id(x)]))
            elif _own_buffer(x, cap) and id(x) not in cap.written:
                spec.append(("new", x))
            else:
                spec.append(("obj", x))  # a tensor that existed before the call (a parameter, say): itself
        self.out_spec = spec

    def _live_outputs(self):
        """Indices of the new outputs whose autograd graph is still there (no backward consumed it)."""
        if not _grad_state.grad_enabled:
            return []
        live = []
        for i, (kind, x) in enumerate(self.out_spec):
            if kind == "new" and x._req and x._grad_fn is not None and not getattr(x._grad_fn, "released", False):
                live.append(i)
        return live

    def _capture_backward(self, live, cap, device):
        self.differentiable = True
        self.diff_outputs = live
        outs = [self.out_spec[i][1] for i in live]
        leaves = _reached_leaves(outs, self.first_seq)
        phs = [p for p in self.placeholders if p._req]
        self.surface = phs + [t for t in leaves if all(t is not p for p in phs)]
        self.closure_leaves = self.surface[len(phs):]
        with x64_scope():
            self.static_grad_outputs = [Tensor._make(jax.numpy.zeros(o.shape, o.dtype.np), o._device, None)
                                        for o in outs]
        bg = Graph()
        bg._pack_outputs = False
        try:
            with _graph_ctx(bg, pool=self.fwd.pool(), stream=_stream_for(device)):
                grads = _autograd_grad(outs, self.surface, grad_outputs=self.static_grad_outputs,
                                       allow_unused=True)
        except CaptureError as e:
            raise Break(str(e), e) from None
        self.static_grads = list(grads)
        self.bwd = bg
        plan = bg._plan
        self.saved_buffers = [obj for kind, obj in plan.donated + plan.kept if kind == 1]

    # ---- replay ----------------------------------------------------------------------------------------
    def bind(self, tensors):
        arrays = list(map(array_of, tensors))
        for ph, a in zip(self.placeholders, arrays):
            ph._data = a
        for i in self.mutated:  # its array is donated to the executable: give it a copy of the argument's
            ph = self.placeholders[i]
            with x64_scope():
                ph._data = jax.numpy.array(ph._data, copy=True)
        return arrays

    def replay_step(self, tensors):
        """Replay a step program with the call's tensors; return the output leaves."""
        self.bind(tensors)
        self.fwd.replay()
        return self._finish(tensors)

    def _finish(self, tensors):
        for t, gr in self.grads:
            if t._grad is not gr:
                t._grad = gr
        if self.mutated:
            with no_grad():
                for i in self.mutated:
                    tensors[i].copy_(self.placeholders[i])
        out = [self._leaf(kind, x, tensors) for kind, x in self.out_spec]
        for ph in self.placeholders:
            ph._data = None if not self.differentiable else ph._data
        return out

    def _leaf(self, kind, x, tensors):
        if kind == "const":
            return x
        if kind == "arg":
            return tensors[x]
        if kind == "obj":
            return x
        d = x._data
        if type(d) is Buffer:
            d = d.value
        return Tensor._make(d, x._device, x._stream)

    def call(self, tensors):
        """Run the program for one call: a step replays; a differentiable call goes through a Function."""
        if not self.differentiable or not _grad_state.grad_enabled:
            return self.replay_step(tensors)
        n = len(self.placeholders)
        box = []
        diff = _CompiledCall.apply(self, n, box, *tensors, *self.closure_leaves)
        leaves = box[0]  # the call's outputs; those that carry gradients come from the Function
        for i, t in zip(self.diff_outputs, diff):
            leaves[i] = t
        return leaves


def _reached_leaves(outs, first_seq):
    """The leaves requiring grad whose AccumulateGrad the outputs' graph reaches, in the order first reached.

    A node made before the capture (the history of a tensor created outside the call that is not an argument)
    cannot be a replayed input: such a call is not compiled (``Break``).
    """
    seen, leaves, stack = set(), [], [o._grad_fn for o in outs]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, AccumulateGrad):
            leaves.append(node.variable)
            continue
        if node.sequence_nr < first_seq:
            raise Break("an output depends on the autograd history of a tensor made outside the call that is "
                        "not one of its arguments (pass that tensor as an argument)")
        for e in node.next_edges:
            if e is not None and e[0] is not None:
                stack.append(e[0])
    return leaves


class _CompiledCall(Function):
    """One call of a differentiable program: the forward graph's replay, then the backward graph's."""

    @staticmethod
    def forward(ctx, prog, n, box, *inputs):
        tensors = list(inputs[:n])
        prog.bind(tensors)
        prog.fwd.replay()
        leaves = prog._finish(tensors)
        box.append(leaves)
        ctx.prog = prog
        ctx.saved = [b.value for b in prog.saved_buffers]
        ctx.args = [ph._data for ph in prog.placeholders]
        return tuple(leaves[i] for i in prog.diff_outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        prog = ctx.prog
        for b, v in zip(prog.saved_buffers, ctx.saved):
            b._val = v
        for ph, a in zip(prog.placeholders, ctx.args):
            ph._data = a
        for static, g in zip(prog.static_grad_outputs, grads):
            if g is not None:
                static._data = array_of(g)
            else:
                with x64_scope():
                    static._data = jax.numpy.zeros(static.shape, static.dtype.np)
        prog.bwd.replay()
        by_id = {id(t): g for t, g in zip(prog.surface, prog.static_grads)}
        out = [None, None, None]
        for ph in prog.placeholders:
            g = by_id.get(id(ph)) if ph._req else None
            out.append(_fresh(g))
        out.extend(_fresh(by_id.get(id(t))) for t in prog.closure_leaves)
        return tuple(out)


def _fresh(g):
    if g is None:
        return None
    d = g._data
    if type(d) is Buffer:
        d = d.value
    return Tensor._make(d, g._device, g._stream)


def flush():
    """Run pending "auto"-mode work before a capture reads it (a capture beginning is a barrier anyway)."""
    _segment.flush_all()
