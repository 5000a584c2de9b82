"""``jgrad.distributed.tensor``: DTensors (``torch.distributed.tensor``) on sharded ``jax.Array``s.

``distribute_tensor(t, mesh, [Shard(0)])`` gives a jgrad ``Tensor`` whose array is sharded over the
mesh; ops on it run as SPMD programs (GSPMD), autograd and optimizers work through them, and
``t.placements``, ``t.device_mesh``, ``t.full_tensor()``, ``t.to_local()``, ``t.redistribute(...)``
describe and move it. See docs/distributed.md.

Imports ``_api``, ``placement_types`` and ``distributed._mesh``.
"""
from ._api import DTensor, distribute_module, distribute_tensor
from .placement_types import Partial, Placement, Replicate, Shard
from .._mesh import DeviceMesh, init_device_mesh

__all__ = ["DTensor", "DeviceMesh", "Partial", "Placement", "Replicate", "Shard", "distribute_module", "distribute_tensor",
           "init_device_mesh"]
