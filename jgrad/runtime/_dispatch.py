"""The one door every op goes through: ``call(op, *args, **attrs)``.

1. find the op's ``jax.jit`` kernel for these static attributes (cached);
2. (capture) record instead of run, when the current stream is capturing;
3. run the kernel on the input arrays (JAX dispatches asynchronously);
4. stamp the outputs with the current stream;
5. if grad mode is on and an input requires grad, record an ``OpNode`` (``_tape.record``).

An op's backward is a jax function too, compiled per ``needs_input_grad``
mask, so gradients nobody asked for are never computed. Under
``create_graph=True`` the backward is itself dispatched as an op whose
backward comes from ``jax.vjp``, so derivatives of any order work.

Imports the layers below the door: ``_tensor``, ``_device``, ``_dtype``, ``streams``, ``_recorder``,
``_capture``, ``_segment``, ``_tape`` and autograd (``engine``, ``node``, ``grad_mode``). Imported by
the op library, ``_checks``, ``_backward_plan``, ``_dlpack``, ``graphs`` and the fused updates of
``nn``/``optim``; never by autograd, streams or the recorder (tests/test_layering.py).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import weakref

from ..core import _dtype
from . import _kernel_cache, _segment, _tape, _trace_log
from ._trace_log import active as _tracing
from ..core._device import get_default_device, resolve_devices
from ..core import _tensor as _tensor_mod
from ..core._tensor import Tensor
from ..streams import (_current_for, _defaults as _default_streams, _overrides, _san as _sanitizing,
                       _tls as _stream_tls)
from ..streams import active_captures as _active_captures
from ..streams import check_access, host_read, record_new
from ..streams import _sync_hooks, _prune
from ..core._recorder import Buffer, abstract
from ._capture import CaptureError, concrete
from ..autograd.engine import output_mask
from ..autograd.grad_mode import state as _state
from ..autograd.node import Node, SavedVariable, _SECOND_BACKWARD

_ALL_OPS: list = []
_weakref = weakref.ref
_auto = _segment.auto  # [True] in "auto" (tiered) execution mode: kernels are recorded (Note [Tiered execution])
_open_segments = _segment._open
_NOT_RECORDED = _segment.NOT_RECORDED
_x64 = _dtype.x64_scope  # every kernel runs with JAX's 64-bit types on (thread-locally)
# x64_scope()'s thread-local swap, for the eager hot path (None on a jax without it: x64_scope() then)
_x64_swap = _dtype._X64_STATE.swap_local if _dtype._X64_STATE is not None else None
_x64_set = _dtype._X64_STATE.set_local if _dtype._X64_STATE is not None else None


class Op:
    """An op: a jax forward, a jax backward formula (or ``jax.vjp``), and what to save.

    ``forward(*arrays, **attrs)`` returns an array or a tuple of arrays.
    ``backward(ctx, *grads)`` returns one gradient (or None) per positional
    input; ``ctx`` has ``saved`` (inputs named in ``save``, else None),
    ``outputs`` (when ``save_outputs``), ``needs_input_grad``, ``attrs`` and
    ``in_avals``. Without ``backward`` the gradient is ``jax.vjp`` of forward.
    """

    __slots__ = ("name", "forward", "backward", "save", "save_outputs", "num_outputs", "differentiable",
                 "edge_args", "dynamic_scalars", "_kernels", "_bwd_kernels", "_derived", "__weakref__")

    def __init__(self, name, forward, backward=None, *, save=None, save_outputs=False, num_outputs=1,
                 differentiable=True, edge_args=None, dynamic_scalars=False):
        self.name = name
        # Python scalars among the positional inputs are data, not structure, in "auto" mode (a view's slice
        # offsets): a new value is not a new segment structure. (Eager kernels trace them anyway.)
        self.dynamic_scalars = dynamic_scalars
        # The positional inputs that are graph inputs of the node (one edge each, None when not
        # a tensor requiring grad); None: all of them. PyTorch keeps an edge for a Python scalar
        # of binary arithmetic (`x * 2`: MulBackward0 has two next functions) but none for
        # attribute-like arguments (`x.clamp(0, 1)`: ClampBackward1 has one): ops say which.
        self.edge_args = tuple(edge_args) if edge_args is not None else None
        self.forward = forward
        self.backward = backward
        # Without a formula every input is saved (jax.vjp recomputes the forward).
        self.save = tuple(save) if save is not None else (None if backward is not None else "all")
        self.save_outputs = save_outputs
        self.num_outputs = num_outputs
        self.differentiable = differentiable
        self._kernels = {}
        self._bwd_kernels = {}
        self._derived = {}
        _ALL_OPS.append(self)

    def __repr__(self):
        return f"<jgrad op {self.name}>"

    def kernel(self, key, attrs):
        fn = self._kernels.get(key)
        if fn is None:
            fwd = self.forward

            def forward(*a):
                return fwd(*a, **attrs)

            forward.__name__ = forward.__qualname__ = f"{self.name}_forward"  # named in errors and profiles
            fn = _kernel_cache.Kernel(forward)  # jax.jit, with new shapes interpreted (Note [New shapes])
            self._kernels[key] = fn
            _kernel_cache.made(fn, self._kernels, key)
        return fn

    def backward_kernel(self, key, attrs, mask, in_avals):
        k = (key, mask, in_avals)
        fn = self._bwd_kernels.get(k)
        if fn is None:
            body = _backward_body(self, attrs, mask, in_avals)
            body.__name__ = body.__qualname__ = f"{self.name}_backward"
            fn = _kernel_cache.Kernel(body, tree=True)
            self._bwd_kernels[k] = fn
            _kernel_cache.made(fn, self._bwd_kernels, k)
        return fn


def clear_kernel_caches() -> None:
    """Forget compiled kernels (after changing the default dtype or matmul precision)."""
    for op in _ALL_OPS:
        op._kernels.clear()
        op._bwd_kernels.clear()
    _kernel_cache.forget_all()


class BackwardContext:
    """What a backward formula sees (at trace time)."""

    __slots__ = ("saved", "outputs", "needs_input_grad", "attrs", "in_avals")

    def __init__(self, saved, outputs, needs, attrs, in_avals):
        self.saved, self.outputs, self.needs_input_grad, self.attrs, self.in_avals = saved, outputs, needs, attrs, in_avals


def sum_to(g, shape):
    """Reduce a broadcast gradient ``g`` back to ``shape``."""
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(i + lead for i, s in enumerate(shape) if s == 1 and g.shape[i + lead] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


def _vjp_backward(op, attrs):
    """A backward formula derived with jax.vjp from the forward (inputs all saved)."""
    fwd = op.forward

    def backward(ctx, *grads):
        primals = list(ctx.saved)
        idx = [i for i, need in enumerate(ctx.needs_input_grad) if need]

        def partial_fwd(*diff):
            full = list(primals)
            for j, i in enumerate(idx):
                full[i] = diff[j]
            return fwd(*full, **attrs)

        out, vjp = jax.vjp(partial_fwd, *[primals[i] for i in idx])
        outs = out if isinstance(out, tuple) else (out,)
        cts = tuple(g if jnp.issubdtype(o.dtype, jnp.inexact) else np.zeros(o.shape, jax.dtypes.float0)
                    for g, o in zip(grads, outs))
        res = vjp(cts if isinstance(out, tuple) else cts[0])
        full = [None] * len(primals)
        for j, i in enumerate(idx):
            full[i] = res[j]
        return full

    return backward


def _backward_body(op, attrs, mask, in_avals):
    formula = op.backward if op.backward is not None else _vjp_backward(op, attrs)

    def body(saved, outputs, grads):
        ctx = BackwardContext(saved, outputs, mask, attrs, in_avals)
        res = formula(ctx, *grads)
        out = []
        for i, r in enumerate(res):
            if not mask[i] or r is None or in_avals[i] is None:
                out.append(None)
                continue
            shape, dtype = in_avals[i]
            r = jnp.asarray(r)
            if r.shape != shape:
                r = sum_to(jnp.broadcast_to(r, jnp.broadcast_shapes(r.shape, shape)), shape)
            out.append(r.astype(dtype))
        return tuple(out)

    return body


class OpNode(Node):
    """The backward node of one dispatched op (``MulBackward0`` ...)."""

    # tensor_pos: op.edge_args, the positional inputs that have an edge (None: all). Backward
    # kernels stay positional: masks and results are scattered/gathered through it.
    # has_saved: some tensor was saved (scalars are plain attributes, never released).
    __slots__ = ("op", "key", "attrs", "saved", "saved_out", "in_avals", "device", "released", "tensor_pos",
                 "has_saved")

    def name(self):
        return self.op.name

    def release_variables(self):
        if not self.has_saved:
            return  # nothing saved: it may run again, as in PyTorch
        self.released = True  # first: a concurrent apply() that read saved=None then sees it
        self.saved = None
        self.saved_out = None

    def apply(self, grads):
        # Read the saved state once, then check `released`: another thread's backward over
        # the same graph may release it meanwhile (PyTorch guards this with the node mutex).
        saved_vars, saved_out = self.saved, self.saved_out
        if self.released:
            raise RuntimeError(_SECOND_BACKWARD)
        edges = self.next_edges
        mask = output_mask(edges)
        if True not in mask:
            return [None] * len(edges)
        if len(grads) == 1:
            if grads[0] is None:
                return [None] * len(edges)  # codegen's any_grad_defined: undefined in, undefined out
        elif all(g is None for g in grads):
            return [None] * len(edges)
        else:
            for i, g in enumerate(grads):
                if g is None:
                    meta = self.input_metadata[i]
                    with _x64():
                        grads[i] = Tensor._make(jnp.zeros(meta.shape, meta.dtype.np), meta.device, meta.stream)
        pos = self.tensor_pos
        if pos is not None:  # positional mask for the kernel
            full = [False] * len(self.in_avals)
            for j, p in enumerate(pos):
                full[p] = mask[j]
            mask = tuple(full)
        if _state.grad_enabled:
            out = self._apply_with_graph(grads, mask, saved_vars or (), saved_out)
            return out if pos is None else [out[p] for p in pos]
        op, key, in_avals = self.op, self.key, self.in_avals
        kernel = op.backward_kernel(key, self.attrs, mask, in_avals)
        if self.has_saved:
            # Version-check only what this kernel reads: PyTorch saves (and checks) only what a
            # formula uses, while a jax.vjp-derived backward saves every input (indexing reads
            # just the shape of its base, which may then be written in place).
            rk = (op, key, mask, in_avals)
            reads = _KERNEL_READS.get(rk)
            if reads is None:
                reads = _KERNEL_READS[rk] = _kernel_reads(kernel, saved_vars or (), saved_out or (), grads)
            saved = tuple([(_checked(s, self) if r else s.data) if type(s) is SavedVariable else s
                           for s, r in zip(saved_vars, reads[0])]) if saved_vars is not None else ()
            outs = tuple([_checked(s, self) if r else s.data for s, r in zip(saved_out, reads[1])]) \
                if saved_out else ()
        else:
            saved = tuple(saved_vars) if saved_vars is not None else ()
            outs = ()
        stream = self._stream
        cap = stream._capture if stream is not None else None
        raw = tuple([g._data for g in grads])
        if cap is not None:
            res = cap.record(kernel, (saved, outs, raw), stream, grads)  # grads made before capture are inputs
        else:
            if _active_captures:
                _outside_capture(self.name(), stream)
            if _sanitizing[0]:
                check_access([g for g in grads] + [_saved_view(s) for s in saved_vars or ()
                                                   if type(s) is SavedVariable], (), stream, self.name())
            res = _NOT_RECORDED
            if _auto[0]:
                dev = self.device
                seg = _open_segments.get(dev) or _segment.segment_for(dev)
                res = seg.record(kernel, (saved, outs, raw), stream)
            if res is _NOT_RECORDED:
                try:
                    with _x64():
                        res = kernel(saved, outs, raw)
                except TypeError:
                    res = _run_with_buffers(kernel, (saved, outs, raw), stream)
                pending = stream._pending  # _track, inlined
                for r in res:
                    if r is not None:
                        pending.append(_weakref(r))
                if len(pending) > stream._prune_at:
                    _prune(stream)
        dev = self.device
        out = [Tensor._make(r, dev, stream) if r is not None else None for r in res]
        if _sanitizing[0] and cap is None:
            record_new([t for t in out if t is not None], stream, self.name())
        return out if pos is None else [out[p] for p in pos]

    def _apply_with_graph(self, grads, mask, saved_vars, saved_out):
        """create_graph: dispatch the backward as an op, so it is itself differentiable."""
        bop = _derived_backward_op(self.op, self.key, self.attrs, mask, self.in_avals,
                                   tuple(s is not None for s in saved_vars), len(grads))
        saved = [s for s in saved_vars if s is not None]
        outs = list(saved_out) if saved_out else []
        known = _DERIVED_USED.get(bop)
        if known is None:
            raw = [s.data if type(s) is SavedVariable else s for s in saved + outs] + [g._data for g in grads]
            known = _DERIVED_USED[bop] = _used_inputs(bop, abstract(raw))
        used, constant = known
        # Saved tensors the formula never reads go in as plain arrays (and are not version-
        # checked), so the double-backward graph links only to what the derivative depends on,
        # as PyTorch's formula-built graph does: grad(x * a, x) depends on a alone, and a later
        # grad(., x) finds x unused.
        n = len(saved) + len(outs)
        flat = [(s.unpack(self) if u else s.value()) if type(s) is SavedVariable else s
                for s, u in zip(saved + outs, used)]
        flat += [g if u else g._data for g, u in zip(grads, used[n:])]
        if not any(isinstance(a, Tensor) for a in flat):
            flat[n] = grads[0]  # keep one Tensor argument: the result's device and stream come from it
        res = call(bop, *flat)
        res = res if isinstance(res, tuple) else (res,)
        if True in constant:
            res = [r.detach() if c else r for r, c in zip(res, constant)]
        it = iter(res)
        return [next(it) if m and self.in_avals[i] is not None else None for i, m in enumerate(mask)]

    def saved_layout(self):
        return tuple(s is not None for s in self.saved or ())


def _checked(s, node):
    if s.vc[0] != s.version:
        s.check(node)
    src = s.src
    if src is not None:
        t = src()
        if t is not None and t._alias is not None:
            return s.value()  # a view's storage may have been written through .data since
    return s.data  # what SavedVariable.value() returns for a tensor gone or sharing no storage


_DERIVED_USED: dict = {}  # derived backward op -> which of its inputs its computation reads
_KERNEL_READS: dict = {}  # (op, key, mask, in_avals) -> (saved entries read, saved outputs read)


def _is_var(v):
    return not hasattr(v, "val")  # Literals carry .val; Vars (and DropVars) do not


_LOOPS = ("scan", "while")


def _live_invars(jaxpr, live_out=None):
    """Dead-code analysis: which invars of ``jaxpr`` the (live) outputs depend on."""
    outs = jaxpr.outvars
    live = {v for v, lv in zip(outs, live_out or [True] * len(outs)) if lv and _is_var(v)}
    for eqn in reversed(jaxpr.eqns):
        outs_live = [_is_var(v) and v in live for v in eqn.outvars]
        if not (eqn.effects or any(outs_live)):
            continue
        inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
        inner = getattr(inner, "jaxpr", inner)
        # pjit / closed_call: look inside. Not a loop (scan, while): its carry feeds the next iteration, so an
        # input read only by a carry (an LSTM's recurrent weight in its backward scan) reaches every output.
        if (not eqn.effects and hasattr(inner, "eqns") and eqn.primitive.name not in _LOOPS
                and len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars)):
            live.update(v for v, lv in zip(eqn.invars, _live_invars(inner, outs_live)) if lv and _is_var(v))
        else:
            live.update(v for v in eqn.invars if _is_var(v))
    return [v in live for v in jaxpr.invars]


def _used_inputs(bop, flat):
    """Trace ``bop``'s forward once: (the inputs its outputs depend on, the outputs that depend on none).

    An output that depends on no input is a gradient that is identically zero (a derivative is linear
    in the incoming gradient), such as ReLU's second derivative. It is handed on detached, as PyTorch's
    formulas hand on ``zeros_like(grad)``: higher-order backward passes then skip the work behind it.
    """
    with _x64():
        jaxpr = jax.make_jaxpr(lambda *a: bop.forward(*a))(*flat).jaxpr
    n = len(jaxpr.outvars)
    per_output = [_live_invars(jaxpr, [i == j for i in range(n)]) for j in range(n)]
    return tuple(map(any, zip(*per_output))), tuple(not any(live) for live in per_output)


def _kernel_reads(kernel, saved, saved_out, grads):
    """Which saved entries and saved outputs a compiled backward kernel actually reads."""
    # A saved tensor under saved_tensors_hooks: its aval, so the trace runs no unpack hook.
    saved_raw = tuple((s.data if s.hooks is None else s.aval) if type(s) is SavedVariable else s for s in saved)
    outs_raw = tuple(s.data if s.hooks is None else s.aval for s in saved_out)
    with _x64():
        closed = jax.make_jaxpr(kernel)(*abstract((saved_raw, outs_raw, tuple(g._data for g in grads))))
    flags = iter(_live_invars(closed.jaxpr))
    leaves = jax.tree_util.tree_leaves

    def take(x):
        return any([next(flags) for _ in leaves(x)])

    return tuple(take(x) for x in saved_raw), tuple(take(x) for x in outs_raw)


def _derived_backward_op(op, key, attrs, mask, in_avals, layout, n_grads):
    k = (key, mask, in_avals, layout, n_grads)
    bop = op._derived.get(k)
    if bop is not None:
        return bop
    body = _backward_body(op, attrs, mask, in_avals)
    n_saved = sum(layout)
    n_out = n_grads if op.save_outputs else 0

    def forward(*flat):
        it = iter(flat[:n_saved])
        saved = tuple(next(it) if present else None for present in layout)
        outs = tuple(flat[n_saved:n_saved + n_out])
        grads = tuple(flat[n_saved + n_out:])
        res = body(saved, outs, grads)
        res = tuple(r for r in res if r is not None)
        return res if len(res) != 1 else res[0]

    n_res = sum(1 for i, m in enumerate(mask) if m and in_avals[i] is not None)
    bop = Op(op.name + "Backward", forward, num_outputs=n_res)
    op._derived[k] = bop
    return bop


# ---- the door ----------------------------------------------------------------
# While an autocast region is open (any thread), ``jgrad.amp`` puts its cast here: ``cast(op, args) -> args``.
autocast_hook = [None]


def call(op, *args, **attrs):
    """Run ``op`` on ``args`` (tensors and Python scalars) with static ``attrs``."""
    if autocast_hook[0] is not None:
        args = autocast_hook[0](op, args)
    return _call(op, args, tuple(attrs.items()) if attrs else (), attrs, None)


def call_factory(op, device, *scalars, **attrs):
    """Run ``op`` on Python ``scalars`` and no tensor (``full``, ``arange``...), placing its result on ``device``.

    Recorded in "auto" mode; during a capture it runs at once, as factories always have: the tensor then
    exists before the captured work that uses it (optimizer state made by a captured first ``step()`` is
    carried from replay to replay, not made afresh by each).
    """
    key = tuple(attrs.items())
    if _current_for(device)._capture is not None:
        kernel = op._kernels.get(key) or op.kernel(key, attrs)
        with jax.default_device(device.jax_device), _x64():
            return Tensor._make(kernel(*scalars), device)
    return _call(op, scalars, key, attrs, None, device)


def call_inplace(op, target, *args, **attrs):
    """Run ``op`` on ``(target, *args)`` and rebind ``target`` to the result (``add_`` ...)."""
    if forward_ad_hook is not None:  # a dual level is active: the target's tangent is updated too
        res = forward_ad_hook(lambda: call_inplace(op, target, *args, **attrs), op, (target,) + args, attrs, target)
        if res is not None:
            return res
    key = tuple(attrs.items()) if attrs else ()
    if target._inference and not _state.inference:
        raise RuntimeError(INFERENCE_INPLACE)
    if target._alias is not None:  # it shares its storage: the write reaches every view (jgrad.runtime._views)
        return _alias_inplace(op, target, args, key, attrs)
    if target._req and target._grad_fn is None and _state.grad_enabled:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
    return _call(op, (target,) + args, key, attrs, target)


INFERENCE_INPLACE = ("Inplace update to inference tensor outside InferenceMode is not allowed.You can make a clone to "
                     "get a normal tensor before doing inplace update.See https://github.com/pytorch/rfcs/pull/17 "
                     "for more details.")


# Installed by jgrad.runtime._views (it dispatches ops itself, so it sits above the door).
_alias_inplace = None  # _alias_inplace(op, target, args, key, attrs): an in-place op on a tensor sharing storage
_alias_store = None    # _alias_store(t, array): t's new value reaches its storage and the other views


def call_foreach(op, targets, *args, **attrs):
    """Rebind each of ``targets`` to the matching output of ``op(*targets, *args)`` (no history).

    The multi-tensor update of optimizers (PyTorch's ``_foreach`` kernels):
    one compiled kernel updates every parameter and state tensor at once.
    """
    if _state.grad_enabled and any(t._req for t in targets):
        raise RuntimeError(f"{op.name}: in-place update of tensors that require grad must run under "
                           "jgrad.no_grad() (optimizers do this in step()).")
    key = tuple(attrs.items()) if attrs else ()
    kernel = op._kernels.get(key) or op.kernel(key, attrs)
    arrays = [t._data if t._data is not None else t._stale_data() for t in targets]
    arrays += [(a._data if a._data is not None else a._stale_data()) if isinstance(a, Tensor) else a for a in args]
    dev = targets[0]._device if targets else get_default_device()
    stream = _current_for(dev)
    cap = stream._capture
    seg = None
    if cap is not None:
        outs = cap.record(kernel, arrays, stream, list(targets) + list(args))
    else:
        if _active_captures:
            _outside_capture(op.name, stream)
        outs = _NOT_RECORDED
        if _auto[0]:
            # Hyperparameters are dynamic inputs of the segment: a learning-rate schedule is not a new structure.
            seg = _open_segments.get(dev) or _segment.segment_for(dev)
            outs = seg.record(kernel, arrays, stream, dynamic_scalars=True)
            if outs is _NOT_RECORDED:
                seg = None
        if outs is _NOT_RECORDED:
            try:
                with _x64():
                    outs = kernel(*arrays)
            except TypeError:
                outs = _run_with_buffers(kernel, arrays, stream)
    if len(outs) != len(targets):
        raise RuntimeError(f"{op.name} returned {len(outs)} values for {len(targets)} targets")
    for t, o in zip(targets, outs):
        if o.shape != t.shape:
            raise RuntimeError(f"{op.name}: update of shape {list(o.shape)} for a tensor of shape {list(t.shape)}")
        if o.dtype != t._data.dtype:
            if cap is not None:
                raise RuntimeError(f"{op.name}: update of dtype {o.dtype} for a tensor of dtype {t._data.dtype} "
                                   "cannot be captured; make the kernel return the tensor's dtype.")
            if seg is not None:
                o = seg.record(_cast(t._data.dtype), (o,), stream)
            else:
                with _x64():
                    o = o.astype(t._data.dtype)
        if cap is not None:
            cap.write(t, o)
        elif seg is not None:
            o.holders.append(_weakref(t))
        if t._alias is not None:
            _alias_store(t, o)
        else:
            t._data = o
        t._vc[0] += 1
    return targets


# While a dual level is active (``jgrad.runtime._forward_ad``): ``hook(run, op, args, attrs, inplace)`` runs ``run()`` and
# gives the outputs of an op with dual inputs their tangents, or returns None (no dual input: run as usual).
forward_ad_hook = None


def _call(op, args, key, attrs, inplace, device=None):
    if forward_ad_hook is not None and inplace is None:
        res = forward_ad_hook(lambda: _call(op, args, key, attrs, None, device), op, args, attrs, None)
        if res is not None:
            return res
    kernel = op._kernels.get(key) or op.kernel(key, attrs)
    dev = None
    req = False
    mixed = False
    arrays = []
    for a in args:
        if isinstance(a, Tensor):
            data = a._data
            if data is None:
                sparse = getattr(a, "_sparse_call", None)  # a COO tensor has no dense storage: jgrad.ops.sparse_coo
                if sparse is not None:
                    return sparse(op, args, attrs, inplace)
                data = a._stale_data()  # a view a write made stale (its history may change too), or an error
            d = a._device
            if dev is None:
                dev = d
            elif d is not dev:
                mixed = True
            if a._req:
                req = True
            if _tracing[0]:  # a jgrad.func trace records the concrete arrays it reads (its trace cache re-reads them)
                _trace_log.read(a, data)
            arrays.append(data)
        else:
            arrays.append(a)
    if dev is None:
        dev = device or get_default_device()
    elif mixed:  # cold path: the device the op runs on (0-d tensors may come along), or PyTorch's error
        dev, args = resolve_devices(op.name, args, arrays)
    stream = (_overrides[0] and _stream_tls.current.get(dev)) or _default_streams.get(dev) or _current_for(dev)
    cap = stream._capture
    if cap is not None:
        return _call_captured(cap, op, kernel, key, attrs, args, arrays, dev, stream, inplace, req)
    if _active_captures:
        _outside_capture(op.name, stream)
    if _sanitizing[0]:
        check_access([a for a in args if isinstance(a, Tensor)], (inplace,) if inplace is not None else (),
                     stream, op.name)
    if _auto[0]:
        res = _call_recorded(op, kernel, key, attrs, args, arrays, dev, stream, inplace, req)
        if res is not _NOT_RECORDED:
            return res
    try:
        if device is None and _x64_swap is not None:
            prev = _x64_swap(True)  # x64_scope(), inlined: no context object and no method calls, ~0.4 us less
            try:
                out = kernel(*arrays)
            finally:
                _x64_set(prev)
        else:
            with _x64():
                if device is None:
                    out = kernel(*arrays)
                else:  # a factory: jax places what a jitted function of no arrays makes on its default device
                    with jax.default_device(dev.jax_device):
                        out = kernel(*arrays)
    except TypeError:
        out = _run_with_buffers(kernel, arrays, stream)
    multi = type(out) is tuple
    pending = stream._pending  # _track, inlined: this is the per-op hot path
    if multi:
        for o in out:
            pending.append(_weakref(o))
    else:
        pending.append(_weakref(out))
    if len(pending) > stream._prune_at:
        _prune(stream)
    record = req and op.differentiable and _state.grad_enabled
    if not record and inplace is None and not multi:  # the commonest case: one new tensor, no history
        res = Tensor._make(out, dev, stream)  # (looked up per call: inference mode swaps it for a marking one)
        if _sanitizing[0]:
            record_new((res,), stream, op.name)
        return res
    outs = out if multi else (out,)
    if inplace is not None:
        outs = (_inplace_result(op, inplace, outs[0]),) + tuple(outs[1:])
        inplace._stream = stream
    if not record:
        if inplace is not None:
            inplace._data = outs[0]
            inplace._vc[0] += 1
            return inplace
        res = tuple([Tensor._make(o, dev, stream) for o in outs])
    else:
        res = _tape.record(OpNode.__new__(OpNode), op, key, attrs, args, outs, dev, stream, inplace)
    if _sanitizing[0]:
        record_new([t for t in res if t is not inplace], stream, op.name)
    return res if multi else res[0]


class _Later:
    """An output that has no value yet, only its aval (what the tape reads of an output)."""

    __slots__ = ("aval",)

    def __init__(self, aval):
        self.aval = aval


def call_later(op, src, args, attrs, avals):
    """Tensors for ``op(src, *args)`` (outputs of ``avals``) that are recorded but not run: their values come
    later, when first read (views: ``jgrad.runtime._views``). Their node, when grad mode records one, is made now."""
    if src._data is None and getattr(src, "_sparse_call", None) is not None:
        src._sparse_call(op, None, attrs, None)  # a view of a sparse COO tensor: PyTorch's error (ops.sparse_coo)
    dev = src._device
    stream = (_overrides[0] and _stream_tls.current.get(dev)) or _default_streams.get(dev) or _current_for(dev)
    if src._req and _state.grad_enabled:
        outs = _tape.record(OpNode.__new__(OpNode), op, tuple(attrs.items()), attrs, (src,) + args,
                            tuple(_Later(a) for a in avals), dev, stream, None)
    else:
        outs = [Tensor._make(None, dev, stream) for _ in avals]
    for t, a in zip(outs, avals):
        t._data = None
        t._aval = a
    return outs


# ``_call(op, args, key, attrs, inplace_target)`` for callers that build the attribute key
# (``tuple(attrs.items())``) once instead of per call: Python operators.
call_keyed = _call


def _call_captured(cap, op, kernel, key, attrs, args, arrays, dev, stream, inplace, req):
    """``_call`` while ``stream`` captures: record the kernel; outputs are Buffers."""
    out = cap.record(kernel, arrays, stream, args)
    multi = type(out) is tuple
    outs = out if multi else (out,)
    if inplace is not None:
        res0 = outs[0]
        if _check_inplace(op, inplace, res0):
            raise CaptureError(f"in-place {op.name} changes the dtype of a tensor from {inplace._data.dtype} to "
                               f"{res0.dtype}, which cannot be captured; cast explicitly.")
        cap.write(inplace, res0)
        inplace._stream = stream
    if req and op.differentiable and _state.grad_enabled:
        res = _tape.record(OpNode.__new__(OpNode), op, key, attrs, args, outs, dev, stream, inplace)
    elif inplace is not None:
        inplace._data = outs[0]
        inplace._vc[0] += 1
        res = (inplace,) + tuple(Tensor._make(o, dev, stream) for o in outs[1:])
    else:
        res = tuple(Tensor._make(o, dev, stream) for o in outs)
    return res if multi else res[0]


def _call_recorded(op, kernel, key, attrs, args, arrays, dev, stream, inplace, req):
    """``_call`` in auto mode: record the kernel into the device's pending segment; outputs are Buffers."""
    seg = _open_segments.get(dev) or _segment.segment_for(dev)
    out = seg.record(kernel, arrays, stream, op.dynamic_scalars)
    if out is _NOT_RECORDED:
        return out
    multi = type(out) is tuple
    outs = out if multi else (out,)
    if inplace is not None:
        res0 = outs[0]
        if _check_inplace(op, inplace, res0):
            res0 = seg.record(_cast(inplace._data.dtype), (res0,), stream)
            outs = (res0,) + tuple(outs[1:])
        res0.holders.append(_weakref(inplace))  # the barrier rebinds it to the value
        inplace._stream = stream
    if req and op.differentiable and _state.grad_enabled:
        res = _tape.record(OpNode.__new__(OpNode), op, key, attrs, args, outs, dev, stream, inplace)
    elif inplace is not None:
        inplace._data = outs[0]
        inplace._vc[0] += 1
        res = (inplace,) + tuple(Tensor._make(o, dev, stream) for o in outs[1:])
    elif not multi:
        res = Tensor._make(out, dev, stream)
        if _sanitizing[0]:
            record_new((res,), stream, op.name)
        return res
    else:
        res = tuple(Tensor._make(o, dev, stream) for o in outs)
    if _sanitizing[0]:
        record_new([t for t in res if t is not inplace], stream, op.name)
    return res if multi else res[0]


_CASTS: dict = {}


def _cast(dtype):
    """The cached kernel casting to ``dtype`` (in-place results of another dtype, recorded)."""
    fn = _CASTS.get(dtype)
    if fn is None:
        dt = np.dtype(dtype)
        fn = _CASTS[dtype] = jax.jit(lambda a: a.astype(dt))
    return fn


def _outside_capture(what, stream):
    """Work issued on a stream that is not part of the capture under way: an error, not silent eager work."""
    for cap in list(_active_captures):
        cap.fail(f"{what} was issued on {stream}, which is not part of the capture of {cap.graph_name} on "
                 f"{cap.origin}: during a capture, work goes to the capturing stream or to streams that joined "
                 "it (side.wait_stream(capturing_stream)); put the tensors on the capture's device "
                 f"({cap.origin.device}) or capture on their device with jg.graph(g, stream=jg.Stream(device)).")


def _run_with_buffers(kernel, args, stream, spread=False):
    """A kernel whose arguments include captured buffers, outside their capture: use their values."""
    leaves = jax.tree_util.tree_leaves(args)
    if not any(type(x) is Buffer for x in leaves):
        raise  # noqa: PLE0704 - the TypeError being handled, not about buffers
    with _x64():
        return kernel(*concrete(args))


def _track(stream, arrays):
    """Remember (weakly) the work issued on ``stream``, for synchronize/query/events."""
    p = stream._pending
    for a in arrays:
        p.append(_weakref(a))
    if len(p) > stream._prune_at:
        _prune(stream)


def _check_inplace(op, target, res) -> bool:
    """PyTorch's checks of an in-place result (array or Buffer); True when it needs a cast."""
    if res.shape != target.shape:
        raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast shape "
                           f"{list(res.shape)}")
    if res.dtype == target._data.dtype:
        return False
    src, dst = _dtype.from_np(res.dtype), target.dtype
    if src._category > dst._category:
        raise RuntimeError(f"result type {_dtype.scalar_name(src)} can't be cast to the desired output type "
                           f"{_dtype.scalar_name(dst)}")
    return True


def _inplace_result(op, target, res):
    if _check_inplace(op, target, res):
        with _x64():
            return res.astype(target.dtype.np)
    return res


# ---- host syncs and abstract tensors (capture fills these in) -------------------
def host_sync(tensor, what: str) -> None:
    """Before a host read: an error during capture; a stream access for the sanitizer; pending checks."""
    for cap in list(_active_captures):
        cap.on_host_sync(what)
    if _sanitizing[0] and tensor is not None:
        host_read(tensor, what)
    for hook in _sync_hooks:
        hook(what, None)


def _saved_view(s):
    """A handle on a saved tensor's storage, for the sanitizer (shares its version counter)."""
    t = Tensor._make(s.data, s.device, s.stream)
    t._vc = s.vc
    return t


def materialize(tensor):
    """The array of a tensor whose ``_data`` is not an array: a captured buffer's value, or an error."""
    d = tensor._data
    if type(d) is Buffer:
        if d.value is not None:
            return d.value
        raise d.missing()
    raise RuntimeError(f"This tensor (shape {list(tensor.shape)}, dtype {tensor.dtype}) has no data.")


# The tensor and dtypes sit below the door and never import it (docs/design.md, "The house"): a pending value and a
# host read reach it through the tensor's hooks, and a new default dtype drops the compiled kernels.
_tensor_mod.above.materialize, _tensor_mod.above.host_sync = materialize, host_sync
_dtype.default_dtype_hooks.append(clear_kernel_caches)
