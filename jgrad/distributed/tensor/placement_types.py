"""Placements: how a tensor is laid out along each dimension of a DeviceMesh (``Shard``, ``Replicate``).

Imports nothing of jgrad.
"""
from __future__ import annotations


class Placement:
    """The base class of placements (``torch.distributed.tensor.placement_types.Placement``)."""

    def is_shard(self, dim=None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op=None) -> bool:
        return False


class Shard(Placement):
    """Split tensor dimension ``dim`` into equal chunks along a mesh dimension."""

    __slots__ = ("dim",)

    def __init__(self, dim: int = 0):
        if not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def is_shard(self, dim=None) -> bool:
        return dim is None or dim == self.dim

    def __eq__(self, other):
        return type(other) is Shard and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def __str__(self):
        return f"S({self.dim})"


class Replicate(Placement):
    """A full copy of the tensor on every device along a mesh dimension."""

    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def __eq__(self, other):
        return type(other) is Replicate

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"

    def __str__(self):
        return "R"


class Partial(Placement):
    """Pending reduction along a mesh dimension (PyTorch's ``Partial``): each device holds a term of a sum.

    jgrad never produces it: a DTensor's storage is one global ``jax.Array``, and XLA completes the
    reductions it inserts (an op whose result would be a partial sum in PyTorch gives a replicated or
    sharded array here). Asking for it in ``distribute_tensor``/``redistribute`` is an error.
    """

    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op: str = "sum"):
        self.reduce_op = reduce_op

    def is_partial(self, reduce_op=None) -> bool:
        return reduce_op is None or reduce_op == self.reduce_op

    def __eq__(self, other):
        return type(other) is Partial and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("Partial", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"

    def __str__(self):
        return f"P({self.reduce_op})"
