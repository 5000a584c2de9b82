"""DTensors: jgrad Tensors whose array is a ``jax.Array`` sharded over a DeviceMesh.

A DTensor is an ordinary ``jgrad.Tensor`` whose ``_device`` is its mesh's ``MeshDevice`` and whose
storage is a global ``jax.Array`` with a ``NamedSharding`` over the mesh. There is no subclass: ops
dispatch as usual, each kernel's ``jax.jit`` sees sharded arrays and compiles an SPMD program
(GSPMD propagates the shardings and inserts the collectives), so outputs, gradients and optimizer
updates are DTensors too. ``placements`` are read off the array's sharding.

Moving a tensor onto, off or across meshes (``distribute_tensor``, ``full_tensor``, ``to_local``,
``DTensor.from_local``, ``redistribute``) is a transfer between device sets. JAX cannot compile
one into a program on another device set, so these run eagerly (their input's pending work runs
first in "auto" mode; inside a capture they are an error) and are differentiable through
``Function``s named as PyTorch's nodes (``FromTorchTensorBackward``, ``ToTorchTensorBackward``,
``RedistributeBackward``).

Imports ``_tensor``, ``_device``, ``_dtype``, ``streams``, autograd (``Function``, ``grad_mode``),
``distributed._mesh`` and ``placement_types``; ``distributed._collectives`` at the call.
"""
from __future__ import annotations

import functools
import inspect
import math

import jax
from jax.sharding import NamedSharding, PartitionSpec

from ...core import _dtype, _format
from ...core._device import PLAIN_JOINS, MeshDevice
from ...core._tensor import Tensor
from ...autograd.function import Function
from ...autograd.grad_mode import no_grad
from ... import streams as _streams
from .._mesh import DeviceMesh, _current_mesh
from .placement_types import Partial, Placement, Replicate, Shard


# ---- meshes and placements ---------------------------------------------------------------
def _mesh_arg(device_mesh, what):
    mesh = device_mesh if device_mesh is not None else _current_mesh()
    if mesh is None:
        raise RuntimeError(f"{what} needs a device_mesh (pass one, or call it inside `with mesh:`).")
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{what}: device_mesh must be a DeviceMesh, got {type(mesh).__name__}")
    return mesh


def _normalize(placements, mesh, ndim, what):
    """A tuple of one placement per mesh dimension, Shard dims made non-negative."""
    if placements is None:
        return (Replicate(),) * mesh.ndim
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"{what}: `placements` must have the same length as `device_mesh.ndim`! Found placements "
                         f"length: {len(placements)}, and device_mesh.ndim: {mesh.ndim}.")
    out = []
    for p in placements:
        if isinstance(p, Shard):
            if not -max(ndim, 1) <= p.dim < ndim:
                raise IndexError(f"{what}: {p!r} is out of range for a tensor of {ndim} dimension(s)")
            out.append(Shard(p.dim % ndim))
        elif isinstance(p, Replicate):
            out.append(p)
        elif isinstance(p, Partial):
            raise NotImplementedError(f"{what}: {p!r} is not supported by jgrad: a DTensor's array is one global "
                                      "jax.Array whose reductions XLA completes, so there are no partial sums to hold; "
                                      "use Replicate() or Shard(dim).")
        elif isinstance(p, Placement):
            raise NotImplementedError(f"{what}: placement {p!r} is not supported by jgrad (Shard and Replicate are)")
        else:
            raise TypeError(f"{what}: placements must be Shard(dim) or Replicate(), got {p!r}")
    return tuple(out)


def _sharding_for(mesh, placements, shape, what):
    """The NamedSharding that lays a tensor of ``shape`` out as ``placements`` on ``mesh`` (None: no checks)."""
    names = mesh.jax_mesh.axis_names
    ndim = len(shape) if shape is not None else max([p.dim + 1 for p in placements if isinstance(p, Shard)] + [0])
    per_dim = [[] for _ in range(ndim)]
    for i, p in enumerate(placements):
        if isinstance(p, Shard):
            per_dim[p.dim].append(names[i])
    for d, axes in enumerate(per_dim):
        n = math.prod(mesh.jax_mesh.shape[a] for a in axes)
        if shape is not None and axes and shape[d] % n:
            raise ValueError(
                f"{what}: {placements} splits dim {d} of a tensor of shape {list(shape)} into {n} shards, which does "
                f"not divide its size {shape[d]}. jax.Array shardings need even shards (PyTorch pads uneven "
                "ones; jgrad does not): pick a size divisible by the mesh dimension, or Replicate().")
    spec = PartitionSpec(*[None if not a else (a[0] if len(a) == 1 else tuple(a)) for a in per_dim])
    return NamedSharding(mesh.jax_mesh, spec)


def _placements_of(sharding, mesh):
    """The placements of an array with ``sharding`` on ``mesh`` (one per mesh dimension)."""
    out = [Replicate()] * mesh.ndim
    if isinstance(sharding, NamedSharding):
        names = list(sharding.mesh.axis_names)
        for d, entry in enumerate(sharding.spec):
            if entry is None:
                continue
            for ax in (entry if isinstance(entry, tuple) else (entry,)):
                out[names.index(ax)] = Shard(d)
        return tuple(out)
    if sharding.is_fully_replicated:
        return tuple(out)
    raise RuntimeError(f"this tensor's array has a sharding ({sharding}) that is not a layout over its mesh "
                       f"{mesh}; redistribute it to give it placements.")


# ---- moving tensors between device sets ----------------------------------------------
def _value(t, what):
    """``t``'s array for a transfer: a barrier for pending work; an error during a capture."""
    for cap in list(_streams.active_captures):
        cap.fail(f"{what} moves a tensor between devices (onto, off or across a DeviceMesh), which runs eagerly and "
                 f"cannot be captured by {cap.graph_name}: distribute the tensors before the capture.")
    return t._value


@functools.lru_cache(maxsize=None)
def _replicator(sharding):
    return jax.jit(lambda a: a, out_shardings=sharding)


@_dtype.with_x64
def _onto(value, sharding, how):
    """A global array with ``sharding`` from this process's ``value``: the full tensor (``how="full"``) or
    its local part (``"local"``, or ``("local", global_shape)``)."""
    if sharding.is_fully_addressable:
        return jax.device_put(value, sharding)
    if how == "full":
        return jax.make_array_from_callback(value.shape, sharding, lambda idx: value[idx])
    return jax.make_array_from_process_local_data(sharding, value, how[1] if isinstance(how, tuple) else None)


@_dtype.with_x64
def _off(arr, dev, how):
    """This process's full tensor (``how="full"``) or local part (``"local"``) of ``arr``, on ``dev``."""
    if arr.is_fully_addressable:
        return jax.device_put(arr, dev.jax_device)
    if how == "full":
        rep = _replicator(NamedSharding(arr.sharding.mesh, PartitionSpec()))(arr)
        return jax.device_put(rep.addressable_shards[0].data, dev.jax_device)
    from jax.experimental import multihost_utils
    local = multihost_utils.global_array_to_host_local_array(arr, arr.sharding.mesh, arr.sharding.spec)
    return jax.device_put(local, dev.jax_device)


def _made(arr, dev, src, what):
    """The output tensor of a transfer, stamped with ``dev``'s current stream (and seen by the sanitizer)."""
    stream = _streams._current_for(dev)
    out = Tensor._make(arr, dev, stream)
    if _streams._san[0]:
        _streams.check_access([src], (), _streams._current_for(src._device), what)
        _streams.record_new([out], stream, what)
    return out


class FromTorchTensor(Function):
    """A plain tensor onto a mesh (its gradient comes back off the mesh)."""

    @staticmethod
    def forward(ctx, t, md, sharding, how):
        ctx.src, ctx.how = t._device, how
        return _made(_onto(_value(t, "distributing a tensor"), sharding, how), md, t, "FromTorchTensor")

    @staticmethod
    def backward(ctx, grad):
        return ToTorchTensor.apply(grad, ctx.src, ctx.how, None), None, None, None


class ToTorchTensor(Function):
    """A DTensor off its mesh onto one device (its gradient goes back with ``grad_sharding`` or its own layout)."""

    @staticmethod
    def forward(ctx, t, dev, how, grad_sharding):
        arr = _value(t, "full_tensor()/to_local()")
        ctx.md, ctx.how = t._device, how
        ctx.sharding = grad_sharding if grad_sharding is not None else arr.sharding
        return _made(_off(arr, dev, how), dev, t, "ToTorchTensor")

    @staticmethod
    def backward(ctx, grad):
        return FromTorchTensor.apply(grad, ctx.md, ctx.sharding, ctx.how), None, None, None


class Redistribute(Function):
    """A DTensor laid out anew (or moved to another mesh); its gradient goes back to the old layout."""

    @staticmethod
    def forward(ctx, t, md, sharding, grad_sharding):
        arr = _value(t, "redistribute()")
        ctx.md = t._device
        ctx.sharding = grad_sharding if grad_sharding is not None else arr.sharding
        with _dtype.x64_scope():
            arr = jax.device_put(arr, sharding)
        return _made(arr, md, t, "Redistribute")

    @staticmethod
    def backward(ctx, grad):
        return Redistribute.apply(grad, ctx.md, ctx.sharding, None), None, None, None


# ---- the public API --------------------------------------------------------------------
def _mesh_device(t, what):
    d = t._device
    if type(d) is not MeshDevice:
        raise AttributeError(f"'{type(t).__name__}' object has no attribute '{what}': this tensor (shape "
                             f"{list(t.shape)}, on {d}) is not distributed over a DeviceMesh; make one with "
                             "jgrad.distributed.tensor.distribute_tensor.")
    return d


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """``tensor`` laid out over ``device_mesh`` as ``placements`` (``Shard(dim)``/``Replicate()`` per mesh dim).

    The result is a new leaf (``requires_grad`` copied, as PyTorch's). Every process passes the whole
    tensor; with several processes, rank ``src_data_rank``'s data is used (broadcast first), or each
    process's own when it is None. Shards must be even (a ``jax.Array`` rule).
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"distribute_tensor expects a jgrad Tensor, got {type(tensor).__name__}")
    mesh = _mesh_arg(device_mesh, "distribute_tensor")
    placements = _normalize(placements, mesh, tensor.ndim, "distribute_tensor")
    if type(tensor._device) is MeshDevice:
        if tensor._device is mesh._device and tensor.placements == placements:
            return tensor
        raise ValueError(f"Cannot distribute a DTensor (on {tensor._device}, placements {tensor.placements}) to "
                         f"{mesh} with placements {placements}: use redistribute(device_mesh, placements).")
    sharding = _sharding_for(mesh, placements, tuple(tensor.shape), "distribute_tensor")
    with no_grad():
        src = tensor.detach()
        if src_data_rank is not None and not sharding.is_fully_addressable and jax.process_count() > 1:
            from .._collectives import broadcast
            src = src.clone()
            broadcast(src, src=src_data_rank)
        out = FromTorchTensor.apply(src, mesh._device, sharding, "full")
    if tensor.requires_grad:
        out.requires_grad_(True)
    return out


def _distribute_(t, mesh, placements, src_data_rank=0):
    """Distribute ``t`` in place: same object, its storage and device rebound (parameters keep their identity)."""
    if type(t._device) is MeshDevice:
        if t._device is not mesh._device:
            raise ValueError(f"a tensor of shape {list(t.shape)} is already distributed over {t._device}, not {mesh}")
        return t
    new = distribute_tensor(t.detach(), mesh, placements, src_data_rank=src_data_rank)
    t._set_storage(new._data)
    t._device, t._stream = new._device, new._stream
    if t._grad is not None:
        t._grad = distribute_tensor(t._grad.detach(), mesh, placements, src_data_rank=src_data_rank)
    return t


def distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None, output_fn=None):
    """Distribute ``module``'s parameters and buffers over ``device_mesh`` (``torch...distribute_module``).

    ``partition_fn(name, submodule, device_mesh)`` distributes each submodule's parameters as it likes;
    whatever it leaves plain is replicated. jgrad replicates in place: the Parameter objects stay the
    same (an optimizer made before keeps working). ``input_fn(module, inputs, device_mesh)`` and
    ``output_fn(module, outputs, device_mesh)`` become forward pre/post hooks.
    """
    mesh = _mesh_arg(device_mesh, "distribute_module")
    if getattr(module, "_distribute_module_applied", False):
        raise RuntimeError("distribute_module should only be called once on a module, but it has already been "
                           "called on this module!")
    if partition_fn is not None:
        for name, sub in module.named_modules():
            partition_fn(name, sub, mesh)
    for sub in module.modules():
        for p in sub._parameters.values():
            if p is not None:
                _distribute_(p, mesh, None)
        for b in sub._buffers.values():
            if b is not None:
                _distribute_(b, mesh, None)
    if input_fn is not None:
        n = len(inspect.signature(input_fn).parameters)
        if n == 3:
            module.register_forward_pre_hook(lambda mod, inputs: input_fn(mod, inputs, mesh))
        elif n == 2:
            module.register_forward_pre_hook(lambda mod, inputs: input_fn(inputs, mesh))
        else:
            raise ValueError(f"input_fn should take in 3 arguments, but got {n} arguments!")
    if output_fn is not None:
        n = len(inspect.signature(output_fn).parameters)
        if n == 3:
            module.register_forward_hook(lambda mod, inputs, outputs: output_fn(mod, outputs, mesh))
        elif n == 2:
            module.register_forward_hook(lambda mod, inputs, outputs: output_fn(outputs, mesh))
        else:
            raise ValueError(f"output_fn should take in 3 arguments, but got {n} arguments!")
    module._distribute_module_applied = True
    return module


class _DTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and type(obj._device) is MeshDevice


class DTensor(metaclass=_DTensorMeta):
    """What ``isinstance(t, DTensor)`` tests: a jgrad Tensor distributed over a DeviceMesh.

    jgrad has no DTensor subclass: a DTensor is a ``Tensor`` whose array is sharded over a mesh.
    Make one with ``distribute_tensor`` or ``DTensor.from_local``.
    """

    def __new__(cls, *args, **kwargs):
        raise TypeError("DTensor is not constructed directly in jgrad: use distribute_tensor(t, mesh, placements) "
                        "or DTensor.from_local(local_tensor, mesh, placements).")

    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None):
        """A DTensor from this process's part (differentiable).

        With one process per device (PyTorch's setting) the part is the rank's shard; a process that
        drives several devices passes the part of all of them, so in a one-process run the local tensor
        is the whole tensor. ``shape``: the global shape, when it cannot be inferred.
        """
        if run_check:
            raise NotImplementedError("DTensor.from_local(run_check=True) is not supported by jgrad: JAX assembles "
                                      "the global array from each process's part without checking replicas.")
        if stride is not None:
            raise NotImplementedError("DTensor.from_local(stride=...): jgrad tensors have no strides")
        mesh = _mesh_arg(device_mesh, "DTensor.from_local")
        placements = _normalize(placements, mesh, local_tensor.ndim, "DTensor.from_local")
        if type(local_tensor._device) is MeshDevice:
            raise ValueError(f"DTensor.from_local expects a plain tensor, got a DTensor on {local_tensor._device}")
        sharding = _sharding_for(mesh, placements, None, "DTensor.from_local")
        if sharding.is_fully_addressable:
            if shape is not None and tuple(shape) != tuple(local_tensor.shape):
                raise ValueError(f"DTensor.from_local: this process holds every device of {mesh}, so its local "
                                 f"tensor (shape {list(local_tensor.shape)}) is the whole tensor, not shape "
                                 f"{list(shape)}")
            _sharding_for(mesh, placements, tuple(local_tensor.shape), "DTensor.from_local")
        how = "local" if shape is None else ("local", tuple(shape))
        return FromTorchTensor.apply(local_tensor, mesh._device, sharding, how)


# ---- DTensor methods of Tensor ---------------------------------------------------------
def _placements(self):
    """One placement per mesh dimension (``Shard(dim)`` or ``Replicate()``), read off the array's sharding.

    In "auto" execution mode this is a barrier for the tensor's pending work (the layout is GSPMD's choice).
    """
    md = _mesh_device(self, "placements")
    return _placements_of(self._value.sharding, md.device_mesh)


def _device_mesh(self):
    """The DeviceMesh this tensor is distributed over."""
    return _mesh_device(self, "device_mesh").device_mesh


def _grad_sharding(self, grad_placements, what):
    if grad_placements is None:
        return None
    md = self._device
    return _sharding_for(md.device_mesh, _normalize(grad_placements, md.device_mesh, self.ndim, what),
                         tuple(self.shape), what)


def full_tensor(self, *, grad_placements=None):
    """The whole tensor as a plain tensor on ``self.device`` (differentiable; its gradient comes back with
    ``grad_placements``, else with this tensor's placements)."""
    md = _mesh_device(self, "full_tensor")
    return ToTorchTensor.apply(self, md.local, "full", _grad_sharding(self, grad_placements, "full_tensor"))


def to_local(self, *, grad_placements=None):
    """This process's part as a plain tensor on ``self.device`` (differentiable).

    With one process per device (PyTorch's setting) that is the rank's shard; in a one-process run
    the process holds every shard, so it is the whole tensor.
    """
    md = _mesh_device(self, "to_local")
    return ToTorchTensor.apply(self, md.local, "local", _grad_sharding(self, grad_placements, "to_local"))


def redistribute(self, device_mesh=None, placements=None, *, async_op=False):
    """This DTensor laid out as ``placements`` (on ``device_mesh``, default its own); differentiable."""
    md = _mesh_device(self, "redistribute")
    mesh = device_mesh if device_mesh is not None else md.device_mesh
    if placements is None:
        raise RuntimeError("placements is needed for redistribute!")
    placements = _normalize(placements, mesh, self.ndim, "redistribute")
    sharding = _sharding_for(mesh, placements, tuple(self.shape), "redistribute")
    if mesh._device is md and self._value.sharding == sharding:
        return self
    return Redistribute.apply(self, mesh._device, sharding, None)


Tensor.placements = property(_placements)
Tensor.device_mesh = property(_device_mesh)
Tensor.full_tensor = full_tensor
Tensor.to_local = to_local
Tensor.redistribute = redistribute


def _repr(t, body):
    """``DTensor(local_tensor=..., device_mesh=..., placements=...)`` (the local tensor is the process's part).

    On the mesh of a live DistributedDataParallel a tensor prints plain, as a PyTorch DDP program's outputs
    and losses do (they are plain tensors there): ``tensor(1.1383, grad_fn=<NllLossBackward0>)``."""
    md = t._device
    join = PLAIN_JOINS.get(md)
    if join is not None and join.alive():
        return body
    return f"DTensor(local_tensor={body}, device_mesh={md.device_mesh}, placements={_placements(t)})"


_format.dtensor_repr = _repr  # a DTensor prints as PyTorch's DTensor does
