"""Graph nodes: Node, Edge, AccumulateGrad, GraphRoot, SavedVariable, hook handles.

The shapes follow torch/csrc/autograd/function.h: a Node has ``next_edges``
(one per forward input), ``input_metadata`` (one per forward output), a
``sequence_nr`` (creation order, the ready queue's priority) and a
``topological_nr`` (longest path to a leaf, for pruning in ``grad(inputs=)``).

Imports ``_tensor``, ``_dtype``, ``streams`` (a node's stream), ``grad_mode`` and ``anomaly``.
"""
from __future__ import annotations

import itertools
import sys
import threading
import weakref

import jax as _jax

from ..core._dtype import from_np
from ..core._tensor import Tensor, write_clock as _write_clock
from ..streams import _current_for
from .anomaly import record_forward_trace as _record_forward_trace
from .grad_mode import no_grad as _no_grad, state as _state

_UINT64_MAX = sys.maxsize  # AccumulateGrad runs as soon as it is ready, as in PyTorch
_sequence_nr = itertools.count()
_weakref = weakref.ref
_RLock = getattr(threading, "_CRLock", None) or threading.RLock  # threading.RLock() makes one, through a Python call


class RemovableHandle:
    """Returned by every ``register_*hook``; ``remove()`` unregisters the hook."""

    _ids = itertools.count()
    __slots__ = ("_store", "id", "__weakref__")

    def __init__(self, store: dict, hook):
        self.id = next(RemovableHandle._ids)
        self._store = weakref.ref(store) if hasattr(store, "__weakref__") else (lambda s=store: s)
        store[self.id] = hook

    def remove(self) -> None:
        store = self._store()
        if store is not None:
            store.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


class _HookDict(dict):
    """A dict that a RemovableHandle may reference weakly."""

    __slots__ = ("__weakref__",)


class InputMetadata:
    """What the engine checks a gradient against (shape, dtype, device, stream).

    Never mutated once made: nodes recorded on one stream share one per output shape and dtype.
    """

    __slots__ = ("shape", "dtype", "device", "stream")

    def __init__(self, shape, dtype, device, stream=None):
        self.shape, self.dtype, self.device, self.stream = shape, dtype, device, stream

    @classmethod
    def of(cls, t: Tensor):
        return cls(t.shape, t.dtype, t._device, t._stream)


class Node:
    """A node of the backward graph (``torch.autograd.graph.Node``)."""

    __slots__ = ("next_edges", "sequence_nr", "topological_nr", "input_metadata", "_stream", "__weakref__",
                 "__dict__")

    # Hooks, metadata and anomaly traces are rare: class-level defaults that an instance
    # overrides in its __dict__ when it gets one, so that recording a node need not set them.
    _tensor_pre_hooks = None
    _retains_grad_hooks = None  # output_nr -> retains_grad hook
    _pre_hooks = None
    _post_hooks = None
    _metadata = None
    _anomaly_trace = None
    _stale_message = None  # a view's history that may not be regenerated: why (jgrad.runtime._views)
    _leaf_hooks = False  # True where _tensor_hooks() reads hooks kept elsewhere (AccumulateGrad: the leaf's)

    def __init__(self, next_edges=(), input_metadata=(), sequence_nr=None):
        self.next_edges = next_edges
        self.input_metadata = input_metadata
        self.sequence_nr = next(_sequence_nr) if sequence_nr is None else sequence_nr
        topo = 0
        for e in next_edges:
            if e is not None and e[0].topological_nr >= topo:
                topo = e[0].topological_nr + 1
        self.topological_nr = topo
        self._stream = None
        if _state.anomaly_enabled:
            _record_forward_trace(self)

    # ---- what subclasses provide ---------------------------------------
    def name(self) -> str:
        return type(self).__name__

    def apply(self, grads: list) -> list:
        """Map gradients w.r.t. forward outputs to gradients w.r.t. forward inputs."""
        raise NotImplementedError(f"{self.name()} does not implement apply()")

    def release_variables(self) -> None:
        """Free saved tensors (called after a backward without retain_graph)."""

    # ---- introspection (torch.autograd.graph.Node) ---------------------
    @property
    def next_functions(self):
        return tuple((e[0], e[1]) if e is not None else (None, 0) for e in self.next_edges)

    @property
    def num_inputs(self) -> int:
        return len(self.input_metadata)

    @property
    def metadata(self) -> dict:
        if self._metadata is None:
            self._metadata = {}
        return self._metadata

    def stream(self):
        """The stream this node's forward ran on (its backward runs there too)."""
        return self._stream

    def __call__(self, *grads):
        if len(grads) != len(self.input_metadata):  # python_cpp_function.cpp's argument check
            raise TypeError(f"expected {len(self.input_metadata)} arguments, got {len(grads)} instead")
        return self.apply(list(grads))

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    # ---- hooks -----------------------------------------------------------
    def register_hook(self, fn):
        """Post-hook ``fn(grad_inputs, grad_outputs) -> grad_inputs | None``, run after the node."""
        if self._post_hooks is None:
            self._post_hooks = _HookDict()
        return RemovableHandle(self._post_hooks, fn)

    def register_prehook(self, fn):
        """Pre-hook ``fn(grad_outputs) -> grad_outputs | None``, run before the node."""
        if self._pre_hooks is None:
            self._pre_hooks = _HookDict()
        return RemovableHandle(self._pre_hooks, fn)

    def _add_tensor_pre_hook(self, fn, output_nr):
        if self._tensor_pre_hooks is None:
            self._tensor_pre_hooks = _HookDict()
        return RemovableHandle(self._tensor_pre_hooks, (output_nr, fn))

    def _tensor_hooks(self):
        """(output_nr, hook) pairs registered through ``Tensor.register_hook``."""
        return list(self._tensor_pre_hooks.values()) if self._tensor_pre_hooks else ()


class GraphRoot(Node):
    """The root of a backward call with several outputs: emits the given gradients."""

    __slots__ = ("outputs",)

    def __init__(self, edges, grads):
        super().__init__(tuple(edges), (), sequence_nr=_UINT64_MAX)
        self.outputs = list(grads)

    def apply(self, grads):
        return list(self.outputs)


class AccumulateGrad(Node):
    """The sink of a leaf tensor: accumulates into ``variable.grad``."""

    __slots__ = ("variable", "mutex")

    def __init__(self, variable: Tensor, meta=None):
        # PyTorch's AccumulateGrad takes the stream current when it is created (first use of the leaf).
        # Made for every op on a leaf whose graph was freed, so Node.__init__ is inlined here. ``meta``: the
        # variable's InputMetadata on that stream, when the caller has it (the tape shares one per stream).
        if meta is None:
            dev = variable._device
            meta = InputMetadata(variable.shape, variable.dtype, dev, _current_for(dev))
        stream = meta.stream
        self.next_edges = ()
        self.input_metadata = (meta,)
        self.sequence_nr = _UINT64_MAX
        self.topological_nr = 0
        self._stream = stream
        if _state.anomaly_enabled:
            _record_forward_trace(self)
        self.variable = variable
        # accumulate_grad.cpp's mutex_: backward calls from several threads (or device
        # threads) may accumulate into the same .grad at once (Note [Thread Safety on
        # Autograd Node]). Reentrant so a post-accumulate hook may run a nested backward.
        self.mutex = _RLock()

    _leaf_hooks = True

    def _tensor_hooks(self):
        hooks = self.variable._hooks
        return [(0, h) for h in hooks.values()] if hooks else ()

    def apply(self, grads):
        new_grad = grads[0]
        if new_grad is None:
            return []
        var = self.variable
        if var._grad_fn is not None:
            raise RuntimeError("leaf variable has been moved into the graph interior")
        if not var._req:
            return []
        with self.mutex:
            if var._grad is None:
                if _state.grad_enabled and new_grad._req:
                    # create_graph: a copy that keeps the history (clone_obey_contract).
                    var._grad = new_grad.clone()
                elif (sys.getrefcount(new_grad) <= _STEAL_REFS + (self._post_hooks is not None)
                      and not new_grad._req and new_grad._grad_fn is None and new_grad._alias is None):
                    # accumulate_grad.h steals new_grad when nothing user-visible refers to it
                    # (use_count <= 1 + has post hooks), so .grad aliases what post hooks see.
                    var._grad = new_grad
                else:
                    # A fresh Tensor object: the caller may hold new_grad (e.g. x.backward(g)).
                    var._grad = g = Tensor._make(new_grad._data, new_grad._device, new_grad._stream)
                    if len(new_grad._vc) > 1:
                        g._vc.append(new_grad._vc[1])  # the stream sanitizer's record of who wrote it
            elif _state.grad_enabled or var._grad._req:
                var._grad = var._grad + new_grad
            else:
                var._grad._inplace_accumulate(new_grad)
            if var._post_acc_hooks:
                for hook in list(var._post_acc_hooks.values()):
                    if hook(var) is not None:
                        raise RuntimeError("Tensor post accumulate grad hooks should return None.")
        return []


# References to an incoming gradient that only the engine holds while AccumulateGrad
# runs: the input buffer's list, apply's local, getrefcount's argument (+1 for the
# copy call_function keeps for post hooks).
_STEAL_REFS = 3
_grad_acc_lock = threading.Lock()


def grad_accumulator(t: Tensor, meta=None) -> AccumulateGrad:
    """The (weakly cached) AccumulateGrad of leaf ``t``, as ``impl::grad_accumulator``. ``meta``: the InputMetadata
    a new one gets (``t``'s shape, dtype and device, and the stream current there), when the caller has it."""
    acc = t._grad_acc() if t._grad_acc is not None else None
    if acc is None:
        with _grad_acc_lock:  # autograd_meta->mutex_: one accumulator per leaf, even across threads
            acc = t._grad_acc() if t._grad_acc is not None else None
            if acc is None:
                acc = AccumulateGrad(t, meta)
                t._grad_acc = _weakref(acc)
    return acc


def gradient_edge(t: Tensor):
    """The edge a gradient for ``t`` flows along: (grad_fn, output_nr) or (AccumulateGrad, 0)."""
    if t._data is None and t._alias is not None:
        t.grad_fn  # a view a write made stale: its history first (or PyTorch's error)
    if t._grad_fn is not None:
        return (t._grad_fn, t._output_nr)
    if t._req:
        return (grad_accumulator(t), 0)
    return None


_INFERENCE_SAVED = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in inference mode in "
    "computation tracked by autograd. To work around this, you can make a clone to get a normal tensor and use it "
    "in autograd, or use `jgrad.no_grad()` instead of `jgrad.inference_mode()`.")
Tensor._inference = False  # True on a tensor made in inference mode (jgrad.autograd.grad_mode.inference_mode)
Tensor.is_inference = lambda self: self._inference
Tensor.is_inference.__doc__ = "Whether this tensor was made in inference mode (an inference tensor)."


def is_inference(input) -> bool:  # noqa: A002 - PyTorch's argument name
    """Whether ``input`` is an inference tensor (made in inference mode), as ``torch.is_inference``."""
    if not isinstance(input, Tensor):
        raise TypeError(f"is_inference(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}")
    return input._inference


_SECOND_BACKWARD = (
    "Trying to backward through the graph a second time (or directly access saved tensors after they "
    "have already been freed). Saved intermediate values of the graph are freed when you call "
    ".backward() or autograd.grad(). Specify retain_graph=True if you need to backward through the "
    "graph a second time or if you need to access saved tensors after calling backward.")


class SavedVariable:
    """A tensor saved for backward: its value, version and how to rebuild its history.

    Values are immutable jax arrays, so saving never copies; the version check
    reproduces PyTorch's error when the tensor was modified in place later.
    """

    __slots__ = ("data", "vc", "version", "leaf", "grad_fn", "output_nr", "is_output", "device", "stream", "src",
                 "seen", "slot_gen", "hooks", "aval")

    def __init__(self, t: Tensor, is_output=False, own_version=False):
        if t._inference and not _state.inference:
            raise RuntimeError(_INFERENCE_SAVED)
        self.hooks = None
        if _state.saved_hooks:
            return self._pack(t, is_output, _state.saved_hooks[-1])
        # (One tuple assignment: every op with an input that requires grad saves one or two of these.)
        if own_version:  # the value an in-place op overwrote (PyTorch's original_self)
            self.vc, self.version, self.src = [0], 0, None
        else:
            # src: where to look for a write that does not bump the version (through ``.data``): see value().
            vc = t._vc
            self.vc, self.version, self.src = vc, vc[0], _weakref(t)
        grad_fn = t._grad_fn
        if is_output:
            leaf = grad_fn = None  # rebuilt from the owning node: no cycle
        elif grad_fn is not None:
            leaf = None
        else:
            leaf = t if t._req else None
        (self.data, self.device, self.stream, self.seen, self.slot_gen, self.is_output, self.output_nr, self.leaf,
         self.grad_fn) = (t._data, t._device, t._stream, _write_clock[0], t._slot_gen, is_output, t._output_nr, leaf,
                          grad_fn)

    def _pack(self, t, is_output, hooks):
        """Saved under ``saved_tensors_hooks``: keep what ``pack_hook(t)`` returns. ``data`` stays unset, so reading
        it runs the unpack hook (``__getattr__``); the version is not checked, as in PyTorch."""
        pack, unpack = hooks
        self.vc, self.version, self.src = [0], 0, None
        self.device, self.stream, self.is_output, self.output_nr = t._device, t._stream, is_output, t._output_nr
        self.seen, self.slot_gen = 0, 0
        self.leaf = t if (t._grad_fn is None and t._req) else None
        self.grad_fn = None if is_output else t._grad_fn
        version = t._vc[0]
        with _no_grad():
            packed = pack(t)
        if t._vc[0] != version:
            raise RuntimeError(
                "A saved tensor pack hook is modifying its input in place. Tensors provided as input to pack hook "
                "cannot be modified by in-place operations as this can lead to unexpected side-effects. Please "
                "open an issue if you need to perform in-place operations on the input to a pack hook.")
        self.hooks = (packed, unpack)
        d = t._data if t._data is not None else t._aval
        # What a kernel's trace needs (shape and dtype), not the value: save_on_cpu frees the device copy.
        a = getattr(d, "aval", d)
        self.aval = _jax.ShapeDtypeStruct(a.shape, a.dtype)

    def __getattr__(self, name):
        if name != "data" or self.hooks is None:
            raise AttributeError(name)
        return self._unpacked()

    def _unpacked(self):
        """The unpack hook's tensor's value."""
        packed, unpack = self.hooks
        out = unpack(packed)
        if not isinstance(out, Tensor):
            raise TypeError("Output of saved tensor unpack_hook expected to be a Tensor but got result of type "
                            f"{type(out).__name__}")
        return out._data if out._data is not None else out._stale_data()

    def check(self, node):
        if self.vc[0] != self.version:
            shape = list(self.data.shape) if self.data is not None else "?"
            dt = from_np(self.data.dtype) if self.data is not None else "?"
            # saved_variable.cpp names the tensor's grad_fn as it was when saved (the owning
            # node for a saved output); leaves have none.
            owner = node if self.is_output else self.grad_fn
            where = f", which is output {self.output_nr} of {owner.name()}," if owner is not None else ""
            if _state.anomaly_enabled:
                hint = ("Hint: the backtrace further above shows the operation that failed to compute its "
                        "gradient. The variable in question was changed in there or anywhere later. Good luck!")
            else:
                hint = ("Hint: enable anomaly detection to find the operation that failed to compute its "
                        "gradient, with jgrad.autograd.set_detect_anomaly(True).")
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: [{dt} {shape}]{where} is at version {self.vc[0]}; expected version "
                f"{self.version} instead. {hint}")

    def value(self):
        """What the saved tensor's memory holds now (its version being checked already).

        PyTorch saves the tensor's storage: a write that does not bump the saved version (through ``.data``,
        which has a version counter of its own) is what backward reads. The value saved is it unless the
        tensor, still alive and still on the same memory, shares a storage written since the save."""
        src = self.src
        if src is None:
            return self.data
        t = src()
        if t is None:
            return self.data
        a = t._alias
        if a is None or a.storage.written <= self.seen or t._slot_gen != self.slot_gen:
            return self.data
        return t._stale_data() if t._data is None else t._data

    def unpack(self, node) -> Tensor:
        """The saved tensor, connected to its history (for create_graph)."""
        self.check(node)
        if self.hooks is not None:
            data = self._unpacked()
            if self.leaf is not None:  # the unpacked value, its gradient going to the leaf's accumulator
                t = Tensor._make(data, self.device, self.stream, True)
                t._grad_acc = weakref.ref(grad_accumulator(self.leaf))
                return t
        elif self.leaf is not None:
            return self.leaf
        else:
            data = self.value()
        if self.is_output:
            return Tensor._make(data, self.device, self.stream, True, node, self.output_nr)
        if self.grad_fn is not None:
            return Tensor._make(data, self.device, self.stream, True, self.grad_fn, self.output_nr)
        return Tensor._make(data, self.device, self.stream)
