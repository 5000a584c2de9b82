"""``DistributedDataParallel``: parameters replicated over a 1-D DeviceMesh, inputs sharded on the batch.

PyTorch's DDP runs one process per device, each on its part of the batch, and averages the
gradients with all-reduces hooked into backward. Here the program is global: DDP replicates the
parameters over the mesh (DTensors, ``Replicate()``) and shards each input tensor over the mesh on
dimension ``dim``; every op then runs as one SPMD program. The backward of an op that mixes the
sharded batch with a replicated parameter (``x.T @ grad`` of a linear layer) contracts over the
sharded dimension, so XLA inserts the all-reduce itself and the gradient comes out replicated.

Why that is PyTorch's average: with N ranks of b samples, PyTorch's gradient is
``(1/N) sum_r grad(L_r)`` where ``L_r`` is rank r's loss. When ``L_r`` is a mean over its b samples,
that is ``grad`` of the mean over all N*b samples, the loss a global program computes. (A loss that
*sums* over samples gives N times PyTorch's gradient: PyTorch still divides by N.) Optimizers run
unchanged: their fused update is one more SPMD kernel on replicated tensors.

Imports ``_tensor``, ``_device``, ``nn.module`` and ``jgrad.distributed`` (meshes, DTensors).
"""
from __future__ import annotations

import contextlib
import weakref
from collections import OrderedDict

import jax

from ...core._device import PLAIN_JOINS, MeshDevice
from ...core._tensor import Tensor
from ...distributed import ProcessGroup
from ...distributed._mesh import DeviceMesh, _kind
from ...distributed.tensor import DTensor, Replicate, Shard
from ...distributed.tensor._api import _distribute_
from ..module import Module


class DistributedDataParallel(Module):
    """Data parallelism over a 1-D ``device_mesh`` (``torch.nn.parallel.DistributedDataParallel``).

    ``module``'s parameters and buffers become replicated DTensors in place (the same Parameter
    objects: an optimizer made before or after works unchanged). ``forward`` shards every plain tensor
    argument on dimension ``dim`` over the mesh (``DTensor.from_local``: each process passes its own
    part of the batch; in a one-process run, the whole batch) and returns the module's output: a DTensor
    in a one-process run; with several processes this process's part of it, a plain tensor (``_local``).
    A plain target meets it as in PyTorch (``mse_loss(ddp_model(x), y)``): a plain tensor shaped like this
    process's part of the output joins sharded like the batch, any other plain tensor replicated
    (``_plain_join``).

    Without ``device_mesh`` (and ``process_group``) the mesh spans every device of the parameters'
    type (every process's); with ``process_group``, the devices of its ranks. ``init_sync`` broadcasts
    rank 0's parameters (several processes). Bucketing, ``find_unused_parameters``, ``static_graph``
    and ``gradient_as_bucket_view`` have nothing to tune: XLA places the reduction inside the compiled
    backward.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False,
                 forward_sync_buffers=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel wraps a jgrad.nn.Module, got {type(module).__name__}")
        if process_group is not None and device_mesh is not None:
            raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        if mixed_precision is not None or delay_all_reduce_named_params is not None \
                or param_to_hook_all_reduce is not None:
            raise NotImplementedError("DistributedDataParallel(mixed_precision=..., delay_all_reduce_named_params=..., "
                                      "param_to_hook_all_reduce=...) is not supported by jgrad: XLA schedules the "
                                      "gradient reduction inside the compiled backward.")
        if device_mesh is None:
            device_mesh = _default_mesh(module, process_group)
        if not isinstance(device_mesh, DeviceMesh):
            raise TypeError(f"device_mesh must be a DeviceMesh, got {type(device_mesh).__name__}")
        if device_mesh.ndim != 1:
            raise RuntimeError(f"Only 1D device mesh is supported, but got {device_mesh}.")
        self.module = module
        self.device_mesh = device_mesh
        self.dim = dim
        # torch 2.13: broadcast_buffers (deprecated, default None meaning True) and forward_sync_buffers, which wins
        self.broadcast_buffers = True if broadcast_buffers is None else broadcast_buffers
        self.forward_sync_buffers = self.broadcast_buffers if forward_sync_buffers is None else forward_sync_buffers
        self.batched_grad_copy = batched_grad_copy
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = static_graph
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = self.forward_sync_buffers
        src = 0 if init_sync else None
        replicate = [Replicate()]
        for p in module.parameters():
            _distribute_(p, device_mesh, replicate, src_data_rank=src)
        for b in module.buffers():
            _distribute_(b, device_mesh, replicate, src_data_rank=src)
        owners = _OWNERS.setdefault(device_mesh._device, weakref.WeakSet())
        owners.add(self)
        PLAIN_JOINS[device_mesh._device] = _plain_join(device_mesh, dim, owners)

    def forward(self, *inputs, **kwargs):
        """Shard the tensor arguments on ``dim`` over the mesh, then run the module. With several processes, an
        output sharded on ``dim`` comes back as this process's part, a plain tensor (``_local``)."""
        inputs, kwargs = self._shard(inputs), self._shard(kwargs)
        out = self.module(*inputs, **kwargs)
        processes = self.device_mesh.size() // max(1, len(self.device_mesh._jax_mesh.local_devices))
        return out if processes == 1 else self._local(out, processes)

    def _local(self, obj, processes):
        """PyTorch's DDP hands each rank its own output: a tensor sharded on ``dim`` becomes this process's part
        (``to_local``, differentiable), so the rank's plain target and loss meet it as in PyTorch. Each rank's
        backward then feeds its part of the global gradient, and the parameters' gradient is the sum of the
        ranks' loss gradients; the hook divides by the number of processes, PyTorch's average."""
        if isinstance(obj, Tensor):
            if type(obj._device) is not MeshDevice or obj.placements != (Shard(self.dim),):
                return obj
            local = obj.to_local()
            if local.requires_grad:
                local.register_hook(lambda g: g / processes)
            return local
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):
            return type(obj)(*(self._local(o, processes) for o in obj))
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._local(o, processes) for o in obj)
        if isinstance(obj, dict):
            return type(obj)((k, self._local(v, processes)) for k, v in obj.items())
        return obj

    def _shard(self, obj):
        if isinstance(obj, Tensor):
            if type(obj._device) is MeshDevice:
                return obj
            place = [Shard(self.dim)] if obj.ndim > self.dim else [Replicate()]
            return DTensor.from_local(obj, self.device_mesh, place)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*(self._shard(o) for o in obj))
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._shard(o) for o in obj)
        if isinstance(obj, dict):
            return type(obj)((k, self._shard(v)) for k, v in obj.items())
        return obj

    @contextlib.contextmanager
    def no_sync(self):
        """PyTorch skips the gradient all-reduce inside; here gradients are global at every backward.

        The accumulated result is the same: PyTorch's final all-reduce averages the per-rank sums of
        the accumulated steps' gradients, which is the sum of the steps' averaged gradients that a
        global program accumulates.
        """
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Load a state dict of plain tensors (a saved or a single-device model's) into the replicated model."""
        own = dict(self.named_parameters())
        own.update(dict(self.named_buffers()))
        fixed = OrderedDict()
        for k, v in state_dict.items():
            target = own.get(k)
            if isinstance(v, Tensor) and target is not None and type(target._device) is MeshDevice \
                    and type(v._device) is not MeshDevice and tuple(v.shape) == tuple(target.shape):
                from ...distributed.tensor import distribute_tensor
                v = distribute_tensor(v.detach(), target.device_mesh, target.placements, src_data_rank=None)
            fixed[k] = v
        if hasattr(state_dict, "_metadata"):
            fixed._metadata = state_dict._metadata
        return super().load_state_dict(fixed, strict, assign)

    def register_comm_hook(self, state, hook):
        raise NotImplementedError("DistributedDataParallel.register_comm_hook is not supported by jgrad: the gradient "
                                  "reduction is an XLA collective inside the compiled backward, not a hook point.")


_OWNERS: dict = {}  # MeshDevice -> the live DistributedDataParallel modules over it


def _plain_join(mesh, dim, owners):
    """How a plain tensor joins an op on DDP's mesh (``_device.PLAIN_JOINS``), as in a PyTorch DDP program where
    it meets each rank's part of the output: a tensor whose size on ``dim`` is this process's part of a mesh
    operand's (a target, class labels) is that part, sharded on ``dim`` like the batch; any other is a
    constant every rank holds, replicated. One that requires grad is refused (PyTorch's mixing error: its
    gradient would be a DTensor), and so is every plain tensor once no DDP over the mesh lives. (With several
    processes the output itself comes back local: ``DistributedDataParallel._local``.)"""
    per_process = mesh.size() // max(1, len(mesh._jax_mesh.local_devices))

    def join(t, args):
        if t.requires_grad or not owners:
            return None
        sharded = t.ndim > dim and any(isinstance(a, Tensor) and a._device is mesh._device and a.ndim > dim
                                       and a.shape[dim] == t.shape[dim] * per_process for a in args)
        place = [Shard(dim)] if sharded else [Replicate()]
        return DTensor.from_local(t.detach(), mesh, place)

    join.alive = lambda: bool(owners)  # while true, the mesh's tensors also print plain (distributed.tensor._repr)
    return join


def _default_mesh(module, process_group):
    """A 1-D mesh over every device of the parameters' type (of ``process_group``'s ranks when given)."""
    params = list(module.parameters())
    kind = params[0].device.type if params else "cpu"
    devs = jax.devices(_kind(kind))
    if process_group is not None:
        if not isinstance(process_group, ProcessGroup):
            raise TypeError(f"process_group must be a jgrad.distributed ProcessGroup, got "
                            f"{type(process_group).__name__}")
        ranks = [i for i, d in enumerate(devs) if d.process_index in process_group.ranks]
    else:
        ranks = list(range(len(devs)))
    return DeviceMesh(kind, ranks)
