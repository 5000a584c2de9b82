"""``jgrad.distributed``: PyTorch's distributed names on JAX's SPMD (``torch.distributed``).

* ``init_device_mesh`` / ``DeviceMesh``: a ``jax.sharding.Mesh`` of devices; ``jgrad.distributed.tensor``
  distributes tensors over it (DTensors: sharded ``jax.Array``s, ops compiled by GSPMD).
* ``init_process_group`` / ``destroy_process_group``: ``jax.distributed.initialize``/``shutdown`` for runs
  of several processes (one per host or per device, on localhost or many hosts); a rank is a process.
* collectives on per-process tensors (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``,
  ``barrier``...), run as XLA collectives across the processes (gloo/MPI on CPUs, NCCL on GPUs).

See docs/distributed.md.

Imports its own modules. The package sits at the top of jgrad, beside ``nn``, and builds on the tensor,
the door and streams.
"""
from ._collectives import (ReduceOp, Work, all_gather, all_gather_into_tensor, all_reduce, barrier, broadcast,
                           reduce, reduce_scatter, reduce_scatter_tensor)
from ._mesh import DeviceMesh, init_device_mesh
from ._process_group import (ProcessGroup, destroy_process_group, get_backend, get_rank, get_world_size, group,
                             init_process_group, is_available, is_initialized, new_group)
from . import tensor  # noqa: E402  (DTensor methods of Tensor: placements, full_tensor, redistribute...)

__all__ = ["DeviceMesh", "ProcessGroup", "ReduceOp", "Work", "all_gather", "all_gather_into_tensor", "all_reduce",
           "barrier", "broadcast", "destroy_process_group", "get_backend", "get_rank", "get_world_size", "group",
           "init_device_mesh", "init_process_group", "is_available", "is_initialized", "new_group", "reduce",
           "reduce_scatter", "reduce_scatter_tensor", "tensor"]
