"""Tensor: a jax.Array plus autograd metadata and a version counter.

Ops are attached as methods by ``jgrad.ops`` (the op library owns them);
this module holds only storage, metadata and the autograd-facing methods.

Imports ``_dtype``, ``_device``, ``_tls``, ``_recorder`` (a tensor's storage may be a recorded
``Buffer``), ``_host_copies``, ``_format`` (``repr``), ``_factories`` (``Tensor(data)`` converts as the
factories do) and ``streams`` (``record_stream``). The tensor is the type every layer passes around, so it
sits below them and imports none of them: the methods that belong to a higher layer call what that layer
installs in ``above`` when it loads: the door (a pending value, host syncs), the engine (``backward``,
hook handles) and DLPack (``__dlpack__``). ``jgrad.ops`` attaches its methods to ``Tensor`` itself.
"""
from __future__ import annotations

import weakref
from weakref import ref as _weakref

import numpy as np

from . import _dtype, _factories, _host_copies  # the factory path (jgrad.ops.creation) owns conversion rules
from . import _device as _device_mod
from ._device import device as _device_cls, from_jax as _device_from_jax
from ._format import tensor_repr as _tensor_repr
from ._tls import state as _grad_state
from ._recorder import Buffer as _Buffer
from ..streams import Stream as _Stream


class _Above:
    """What the layers above the tensor install when they load (docs/design.md, "The house"): the tensor is the
    type every layer passes around, so it sits below them and never imports them."""
    materialize = host_sync = None        # jgrad.runtime._dispatch: a pending value; a host read (a barrier)
    backward = RemovableHandle = None     # jgrad.autograd: the engine's backward(); the handle of a hook
    export_dlpack = dlpack_device = None  # jgrad.runtime._dlpack: __dlpack__ and __dlpack_device__


above = _Above()


class Tensor:
    """A multi-dimensional array whose storage is an immutable ``jax.Array``.

    In-place ops rebind the storage and bump ``_version``; views share their base's storage and version
    counter, and a write through any of them reaches all (Note [Views] in ``jgrad/runtime/_views.py``).
    """

    __slots__ = ("_data", "_req", "_grad_fn", "_output_nr", "_vc", "_device", "_stream", "__weakref__",
                 "__dict__")

    # What most tensors never set: class-level defaults, overridden in the instance's __dict__
    # when set, so that every op's Tensor._make need not store them.
    _grad = None
    _hooks = None  # hooks of a leaf (a non-leaf's live on its grad_fn)
    _retains_grad = False
    _grad_acc = None  # weakref of the leaf's AccumulateGrad
    _post_acc_hooks = None
    _aval = None  # shape and dtype when _data is None
    _capture = None
    _alias = None  # where this tensor sits in a storage it shares (jgrad.runtime._views.Alias), once aliased
    _slot_gen = 0  # bumped when ``t.data = other`` points this tensor at other memory (saved tensors compare it)
    _bounds = None  # known integer bounds of its values (jgrad.runtime._bounds: an index made in range)

    # ---- construction --------------------------------------------------
    def __init__(self, data=None, *, dtype=None, device=None, requires_grad=False):
        arr = _factories.as_array(data if data is not None else [], dtype, device, copy=True)
        _init(self, arr, _device_from_array(arr, device), requires_grad)

    @classmethod
    def _make(cls, data, device, stream=None, req=False, grad_fn=None, output_nr=0):
        t = object.__new__(cls)
        t._data = data
        t._device = device
        t._stream = stream
        t._req = req
        t._grad_fn = grad_fn
        t._output_nr = output_nr
        t._vc = [0]
        if type(data) is _Buffer:
            data.holders.append(_weakref(t))  # replay rebinds it to the value
        return t

    # ---- metadata ------------------------------------------------------
    @property
    def data(self) -> "Tensor":
        """A tensor on this one's storage, without history and with its own version counter (PyTorch's
        ``.data``): an in-place op through it (``p.data.mul_(2)``) changes this tensor and every view of it, and
        does not bump the version that autograd checks saved tensors against."""
        return _alias(self, own_version=True)

    @data.setter
    def data(self, other: "Tensor"):
        if isinstance(other, Tensor):
            _set_data_to(self, other)  # PyTorch's set_data: this tensor now shares other's storage and device
        else:
            self._set_storage(other)

    def _set_storage(self, arr):
        """Point this tensor at the array ``arr`` (other memory), without touching history or the version."""
        if type(arr) is _Buffer:
            if arr.owner.active:
                arr.owner.write(self, arr)
            else:
                arr.holders.append(_weakref(self))
        self._data = arr
        if self._aval is not None:
            self._aval = None
        if self._alias is not None:
            self._alias = None  # its views keep the old memory, as PyTorch's views keep their storage
        self._slot_gen += 1

    @property
    def _value(self):
        """The jax.Array, or an error if this tensor has no data yet (capture)."""
        d = self._data
        if d is None and self._alias is not None:
            _regenerate(self, False)  # a view not read yet, or one a write through another view made stale
            d = self._data
        if d is None or type(d) is _Buffer:
            return above.materialize(self)
        return d

    def _stale_data(self):
        """``_data`` of a tensor whose ``_data`` is None: regenerated from its storage (possibly a pending
        Buffer), or the error of a tensor that has no data (a capture's placeholder). An op reads it: when grad
        mode records, the history is regenerated too."""
        if self._alias is not None:
            _regenerate(self, None)
            return self._data
        return self._value

    def _fresh(self) -> "Tensor":
        """This tensor with its value (a view reads it from its storage when first used)."""
        if self._data is None and self._alias is not None:
            _regenerate(self, False)
        return self

    @property
    def shape(self) -> tuple:
        d = self._data
        return (d if d is not None else self._aval).shape

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[dim]

    @property
    def dtype(self) -> _dtype.dtype:
        d = self._data
        return _dtype.from_np((d if d is not None else self._aval).dtype)

    @property
    def device(self):
        """The device; for a tensor distributed over a mesh (DTensor), the mesh's first device of this process."""
        d = self._device
        return d if type(d) is _device_cls else d.local

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    @property
    def is_cuda(self) -> bool:
        return self._device.type == "gpu"

    @property
    def _version(self) -> int:
        return self._vc[0]

    @property
    def _base(self):
        """The tensor this one is a view of (the root of its chain of views), or None when it is not a view."""
        a = self._alias
        return a.base if a is not None else None

    def _is_view(self) -> bool:
        a = self._alias
        return a is not None and a.base is not None

    def _bump_version(self):
        self._vc[0] += 1

    # ---- autograd metadata --------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._req

    @requires_grad.setter
    def requires_grad(self, flag):
        self.requires_grad_(flag)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        """Set ``requires_grad`` on a leaf, in place."""
        if self._grad_fn is not None:
            if not requires_grad:
                raise RuntimeError(
                    "you can only change requires_grad flags of leaf variables. If you want to use a "
                    "computed variable in a subgraph that doesn't require differentiation use "
                    "var_no_grad = var.detach().")
            return self
        if requires_grad and not (self.dtype.is_floating_point or self.dtype.is_complex):
            raise RuntimeError(
                f"only Tensors of floating point and complex dtype can require gradients, got {self.dtype}")
        self._req = bool(requires_grad)
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def grad_fn(self):
        if self._data is None and self._alias is not None:
            _regenerate(self, True)  # a view whose base was written: its history comes from the base's new one
        fn = self._grad_fn
        if fn is not None and fn._stale_message is not None:
            raise RuntimeError(fn._stale_message)
        return fn

    @property
    def output_nr(self) -> int:
        return self._output_nr

    @property
    def grad(self):
        if self._grad_fn is not None and not self._retains_grad and _grad_state.grad_enabled:
            import warnings
            warnings.warn(
                "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
                "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
                "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor.",
                UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, new):
        if new is not None:
            if not isinstance(new, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(new).__name__}")
            if new.shape != self.shape:
                raise RuntimeError(f"assigned grad has data of a different size: expected {list(self.shape)}, got {list(new.shape)}")
            if new.dtype is not self.dtype:
                raise RuntimeError(f"assigned grad has data of a different type: expected {self.dtype}, got {new.dtype}")
            if new._device is not self._device:
                raise RuntimeError(f"assigned grad has data located on a different device: expected {self._device}, got {new._device}")
        self._grad = new

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad

    def retain_grad(self) -> None:
        """Populate ``.grad`` of this non-leaf tensor during backward."""
        if not self._req:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._grad_fn is None or self._retains_grad:
            return
        fn = self._grad_fn
        if fn._retains_grad_hooks is None:
            fn._retains_grad_hooks = {}
        fn._retains_grad_hooks[self._output_nr] = _RetainGradHook(self)
        self._retains_grad = True

    def register_hook(self, hook):
        """Register ``hook(grad) -> Tensor | None`` run when this tensor's gradient is computed.

        Returns a handle with ``remove()``.
        """
        if not self._req:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._grad_fn is None:
            if self._hooks is None:
                self._hooks = {}
            return above.RemovableHandle(self._hooks, hook)
        return self._grad_fn._add_tensor_pre_hook(hook, self._output_nr)

    def register_post_accumulate_grad_hook(self, hook):
        """Register ``hook(tensor)`` run after ``.grad`` of this leaf has been accumulated."""
        if self._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if not self._req:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = {}
        return above.RemovableHandle(self._post_acc_hooks, hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Compute the gradient of this tensor w.r.t. graph leaves (``torch.Tensor.backward``)."""
        above.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def detach(self) -> "Tensor":
        """A new tensor on the same storage and version counter, without history."""
        d = self._data
        if type(d) is _Buffer and not d.owner.active and not d.owner.segment and d.value is not None:
            # a graph's output: the detached tensor keeps this replay's value, not the next replay's
            t = Tensor._make(d.value, self._device, self._stream)
            t._vc = self._vc
            return t
        if d is None and self._alias is None:  # a capture's placeholder: no storage to share yet
            t = Tensor._make(d, self._device, self._stream)
            t._vc = self._vc
            t._aval = self._aval
            if self._capture is not None:
                t._capture = self._capture
            return t
        return _alias(self, own_version=False)

    def detach_(self) -> "Tensor":
        """Detach this tensor from its history in place."""
        a = self._alias
        if a is not None and a.base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead. If you are using "
                               "DistributedDataParallel (DDP) for training, and gradient_as_bucket_view is set "
                               "as True, gradients are views of DDP buckets, and hence detach_() cannot be called "
                               "on these gradients. To fix this error, please refer to the Optimizer.zero_grad() "
                               "function in torch/optim/optimizer.py as the solution.")
        self._grad_fn = None
        self._output_nr = 0
        self._req = False
        return self

    # ---- host access ---------------------------------------------------
    def _host_sync(self, what):
        above.host_sync(self, what)

    def item(self):
        """The value of a one-element tensor as a Python number."""
        self._host_sync("Tensor.item()")
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self._host_value().item()

    def tolist(self):
        self._host_sync("Tensor.tolist()")
        return np.asarray(self._host_value()).tolist()

    def _host_value(self):
        # a compiled segment's 0-d result may also sit in pinned host memory: reading it costs no transfer
        d = self._value
        h = _host_copies.lookup(d)
        return d if h is None else h

    def numpy(self, *, force: bool = False) -> np.ndarray:
        """A read-only NumPy view of a CPU tensor (zero copy where JAX allows)."""
        self._host_sync("Tensor.numpy()")
        if self._req and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        if self._device.type != "cpu" and not force:
            raise TypeError(f"can't convert {self._device} device type tensor to numpy. Use Tensor.cpu() to "
                            "copy the tensor to host memory first.")
        return np.asarray(self._value)

    def __array__(self, dtype=None, copy=None):
        """NumPy 2 protocol: copy=True always copies; copy=False raises ValueError where a copy is needed.

        A tensor that requires grad is refused, as PyTorch refuses it (``np.asarray(t.detach())`` works)."""
        if self._req:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        self._host_sync("Tensor.__array__()")
        v = self._value
        a = np.asarray(v)
        if copy is False:
            why = None
            if dtype is not None and np.dtype(dtype) != a.dtype:
                why = f"the tensor's dtype is {self.dtype}, not {np.dtype(dtype)}"
            elif a.size and not _aliases(a, v):
                why = f"the tensor is on {self._device}, not in host memory"
            if why:
                raise ValueError(f"Unable to avoid copy while creating an array as requested: {why}.")
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __bool__(self):
        self._host_sync("bool(Tensor)")
        if self.numel() != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self._value)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))  # PyTorch's: the rows are views made by one op

    __hash__ = object.__hash__

    def __repr__(self):
        return _tensor_repr(self)

    def __reduce_ex__(self, proto):
        return (_rebuild, (np.asarray(self._value), str(self.device), self._req))

    def __deepcopy__(self, memo):
        """PyTorch's deepcopy: graph leaves only; the copy keeps ``requires_grad``, the version and a deep copy of
        ``.grad`` and of the attributes set on the tensor; it shares no state with the original (a new version
        counter, no hooks). The array is shared: jgrad's arrays are immutable, and in-place ops rebind."""
        if self._grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy protocol at the "
                "moment.  If you were attempting to deepcopy a module, this may be because of a "
                "torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
        if id(self) in memo:
            return memo[id(self)]
        new = type(self)._make(self._value, self._device, self._stream, self._req)
        new._vc = [self._vc[0]]
        if self._aval is not None:
            new._aval = self._aval
        memo[id(self)] = new
        if self._grad is not None:
            new._grad = self._grad.__deepcopy__(memo)
        extra = {k: v for k, v in self.__dict__.items() if k not in _UNCOPIED}
        if extra:
            import copy
            new.__dict__.update(copy.deepcopy(extra, memo))
        return new

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        # DLPack sits above the tensor (it is a host sync, a barrier)
        return above.export_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return above.dlpack_device(self)


# Per-tensor autograd and stream state that a deep copy starts afresh (PyTorch's copy has no hooks either).
_UNCOPIED = frozenset({"_grad", "_hooks", "_retains_grad", "_grad_acc", "_post_acc_hooks", "_aval", "_capture",
                       "_alias", "_slot_gen", "_bounds",
                       "_recorded_streams"})


# Installed by jgrad.runtime._views (above the tensor: it dispatches the ops that read and write views).
_regenerate = None   # _regenerate(t): give a stale member of a storage its value (and history)
_alias = None        # _alias(t, own_version): detach() / .data, a tensor without history on t's storage
_set_data_to = None  # _set_data_to(t, other): t.data = other
#: Bumped by every write of a shared storage; a saved tensor compares it to see writes through ``.data``.
write_clock = [0]


def _aliases(a: np.ndarray, v) -> bool:
    """Whether NumPy array ``a`` is a view of jax array ``v``'s buffer (no copy was made)."""
    try:
        return a.ctypes.data == v.unsafe_buffer_pointer()
    except Exception:  # sharded or non-addressable arrays have no single buffer
        return False


def _rebuild(arr, dev, req):
    return _factories.tensor(arr, device=dev, requires_grad=req)


def _device_from_array(arr, requested):
    if requested is not None:
        return _device_cls(requested)
    return _device_from_jax(next(iter(arr.devices())))


def _init(t, arr, dev, requires_grad):
    t._data = arr
    t._device = dev
    t._stream = None
    t._req = False
    t._grad_fn = None
    t._output_nr = 0
    t._vc = [0]
    if requires_grad:
        t.requires_grad_(True)


class _RetainGradHook:
    """retains_grad hook: stores the incoming gradient on the (weakly held) tensor."""

    __slots__ = ("ref",)

    def __init__(self, tensor):
        self.ref = weakref.ref(tensor)

    def __call__(self, grad):
        t = self.ref()
        if t is None or grad is None:
            return grad
        if t._grad is None:
            # PyTorch stores grad.clone(): under create_graph (grad mode on) the copy keeps
            # the gradient's history; otherwise a fresh tensor object (values are immutable).
            if _grad_state.grad_enabled and grad._req:
                t._grad = grad.clone()
            else:
                t._grad = Tensor._make(grad._fresh()._data, grad._device, grad._stream)
        else:
            t._grad = t._grad + grad
        return grad


def _record_stream(self, stream) -> None:
    """Mark this tensor as used on ``stream`` (``Tensor.record_stream``).

    XLA frees a buffer only when no computation still uses it, so jgrad needs
    no allocator bookkeeping; the stream is validated and remembered.
    """
    if not isinstance(stream, _Stream):
        raise TypeError(f"record_stream(): argument 'stream' must be a jgrad.Stream, not {type(stream).__name__}")
    if stream.device is not self._device:
        raise RuntimeError(f"record_stream(): stream is on {stream.device} but the tensor is on {self._device}")
    self.__dict__.setdefault("_recorded_streams", set()).add(stream)


Tensor.record_stream = _record_stream
_device_mod.Tensor = Tensor  # resolve_devices looks at tensors
