"""Collectives on per-process tensors (``torch.distributed.all_reduce`` ...), through XLA's collectives.

Each process's tensor becomes one shard of a global ``jax.Array`` over a 1-D mesh with one device per
member process (``ProcessGroup._mesh``); one jitted reduction or gather over that array runs XLA's
collectives across processes (gloo or MPI on CPUs, NCCL on GPUs); each process keeps its shard of the
result. The tensor is updated in place (its storage rebound, its version bumped), as PyTorch does.

Imports ``_tensor``, ``_device``, ``_dtype``, ``grad_mode``, ``_process_group``, ``ops.shape``
(``cat``/``stack``) and ``streams``.
"""
from __future__ import annotations

import enum
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from ..core import _dtype
from ..core._device import MeshDevice
from ..core._tensor import Tensor
from ..autograd.grad_mode import state as _grad_state
from ._process_group import _resolve
from ..autograd.grad_mode import no_grad
from ..ops.shape import cat, stack
from ..streams import synchronize
from ..core._device import get_default_device


class ReduceOp(enum.Enum):
    """How ``all_reduce``/``reduce_scatter`` combine the ranks' tensors (``torch.distributed.ReduceOp``)."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"

    def __repr__(self):
        return f"<ReduceOp.{self.name}>"


def _reducer(op, dtype):
    op = op if isinstance(op, ReduceOp) else ReduceOp[str(op).upper()]
    floating = jnp.issubdtype(dtype, jnp.inexact)
    if op is ReduceOp.AVG and not floating:
        raise ValueError(f"ReduceOp.AVG needs a floating-point tensor, got {np.dtype(dtype)}")
    if op in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR) and floating:
        raise ValueError(f"ReduceOp.{op.name} needs an integer or bool tensor, got {np.dtype(dtype)}")
    return op, {ReduceOp.SUM: lambda a: a.sum(0, dtype=a.dtype), ReduceOp.AVG: lambda a: a.mean(0, dtype=a.dtype),
                ReduceOp.PRODUCT: lambda a: a.prod(0, dtype=a.dtype), ReduceOp.MIN: lambda a: a.min(0),
                ReduceOp.MAX: lambda a: a.max(0),
                ReduceOp.BAND: lambda a: jnp.bitwise_and.reduce(a, axis=0),
                ReduceOp.BOR: lambda a: jnp.bitwise_or.reduce(a, axis=0),
                ReduceOp.BXOR: lambda a: jnp.bitwise_xor.reduce(a, axis=0)}[op]


class Work:
    """The handle of a collective (``async_op=True``): ``wait()``, ``is_completed()``."""

    def __init__(self, arrays):
        self._arrays = arrays

    def wait(self, timeout=None) -> bool:
        for a in self._arrays:
            a.block_until_ready()
        return True

    def is_completed(self) -> bool:
        return all(a.is_ready() for a in self._arrays)

    def result(self):
        return self._arrays


def _check(t, what, inplace=True):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what} expects a jgrad Tensor, got {type(t).__name__}")
    if isinstance(t._device, MeshDevice):
        raise TypeError(f"{what} combines one tensor per process; this one is a DTensor on {t._device}, which is "
                        "already one global tensor (use t.redistribute(...) or t.full_tensor() instead).")
    if inplace and t._req and t._grad_fn is None and _grad_state.grad_enabled:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")


@_dtype.with_x64
def _stack(group, arrays, kind):
    """The global array (ranks, *shape) whose shard on this process is ``arrays`` stacked."""
    mesh = group._mesh(kind)
    mine = [d for d in mesh.devices.flat if d.process_index == jax.process_index()][0]
    local = jnp.stack([jnp.asarray(a) for a in arrays]) if len(arrays) > 1 else jnp.asarray(arrays[0])[None]
    local = jax.device_put(local, mine)
    shape = (group.size() * local.shape[0],) + local.shape[1:]
    return jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, P("ranks")), [local]), mesh


@functools.lru_cache(maxsize=None)
def _compiled(fn_key, mesh, out_spec):
    fn = _FNS[fn_key[0]](*fn_key[1:])
    return jax.jit(fn, out_shardings=NamedSharding(mesh, out_spec))


def _reduce_fn(op, dtype):
    return _reducer(op, dtype)[1]


def _reduce_scatter_fn(op, dtype, n):
    red = _reducer(op, dtype)[1]

    def fn(a):  # a: (n ranks, n chunks * k, ...) -> (n chunks, k, ...): rank r keeps chunk r
        r = red(a)
        return r.reshape((n, r.shape[0] // n) + r.shape[1:])
    return fn


_FNS = {"reduce": _reduce_fn, "reduce_scatter": _reduce_scatter_fn,
        "gather": lambda: (lambda a: a), "pick": lambda src: (lambda a: a[src])}


def _local(out):
    """This process's shard of a collective's result, as a single-device array."""
    return out.addressable_shards[0].data


@_dtype.with_x64
def _rebind(t, arr):
    arr = jax.device_put(arr.reshape(t.shape), t._device.jax_device).astype(t._value.dtype)
    t._set_storage(arr)
    t._vc[0] += 1


@_dtype.with_x64
def _run(group, t, key, out_spec):
    g = _resolve(group)
    if g.rank() < 0:
        return None
    kind = t._device.type
    x, mesh = _stack(g, [t._value], kind)
    return _compiled(key, mesh, out_spec)(x)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the ranks of ``group`` (WORLD) and write the result into it on every rank."""
    _check(tensor, "all_reduce")
    op, _ = _reducer(op, tensor._value.dtype)
    out = _run(group, tensor, ("reduce", op, np.dtype(tensor._value.dtype)), P())
    if out is None:
        return None
    _rebind(tensor, _local(out))
    return Work([tensor._data]) if async_op else None


def reduce(tensor, dst=0, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``tensor`` over the ranks; only rank ``dst`` receives the result (the others keep theirs)."""
    _check(tensor, "reduce")
    op, _ = _reducer(op, tensor._value.dtype)
    out = _run(group, tensor, ("reduce", op, np.dtype(tensor._value.dtype)), P())
    if out is None:
        return None
    if _resolve(group).rank() == _group_rank(group, dst):
        _rebind(tensor, _local(out))
    return Work([tensor._data]) if async_op else None


def _group_rank(group, global_rank):
    g = _resolve(group)
    if global_rank not in g.ranks:
        raise ValueError(f"rank {global_rank} is not a member of {g}")
    return g.ranks.index(global_rank)


def broadcast(tensor, src=0, group=None, async_op=False):
    """Write rank ``src``'s ``tensor`` into ``tensor`` on every rank of ``group``."""
    _check(tensor, "broadcast")
    out = _run(group, tensor, ("pick", _group_rank(group, src)), P())
    if out is None:
        return None
    _rebind(tensor, _local(out))
    return Work([tensor._data]) if async_op else None


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Fill ``tensor_list`` (one tensor per rank, in rank order) with every rank's ``tensor``."""
    _check(tensor, "all_gather", inplace=False)
    g = _resolve(group)
    if len(tensor_list) != g.size():
        raise ValueError(f"all_gather needs a tensor_list of {g.size()} tensors (one per rank), got {len(tensor_list)}")
    for o in tensor_list:
        _check(o, "all_gather")
        if o.shape != tensor.shape:
            raise ValueError(f"all_gather: output tensors must have the input's shape {list(tensor.shape)}, got "
                             f"{list(o.shape)}")
    out = _run(group, tensor, ("gather",), P())
    if out is None:
        return None
    full = _local(out)
    for i, o in enumerate(tensor_list):
        _rebind(o, full[i])
    return Work([o._data for o in tensor_list]) if async_op else None


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    """Concatenate every rank's ``input_tensor`` along dim 0 into ``output_tensor`` (or stack it)."""
    _check(input_tensor, "all_gather_into_tensor", inplace=False)
    _check(output_tensor, "all_gather_into_tensor")
    g = _resolve(group)
    n, shape = g.size(), tuple(input_tensor.shape)
    stacked, cat = (n,) + shape, ((n * shape[0],) + shape[1:] if shape else None)
    if tuple(output_tensor.shape) not in (stacked, cat):
        raise ValueError(f"all_gather_into_tensor: output of shape {list(output_tensor.shape)} cannot hold {n} inputs "
                         f"of shape {list(shape)} (expected {list(cat or stacked)} or {list(stacked)})")
    out = _run(group, input_tensor, ("gather",), P())
    if out is None:
        return None
    _rebind(output_tensor, _local(out).reshape(output_tensor.shape))
    return Work([output_tensor._data]) if async_op else None


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input`` (``world_size`` chunks along dim 0) over the ranks; rank r gets chunk r in ``output``."""
    _check(input, "reduce_scatter_tensor", inplace=False)
    _check(output, "reduce_scatter_tensor")
    g = _resolve(group)
    n = g.size()
    if not input.shape or input.shape[0] != n * (output.shape[0] if output.shape else 1) or \
            tuple(input.shape[1:]) != tuple(output.shape[1:]):
        raise ValueError(f"reduce_scatter_tensor: input of shape {list(input.shape)} must be {n} chunks of the "
                         f"output's shape {list(output.shape)} along dim 0")
    op, _ = _reducer(op, input._value.dtype)
    out = _run(group, input, ("reduce_scatter", op, np.dtype(input._value.dtype), n), P("ranks"))
    if out is None:
        return None
    _rebind(output, _local(out)[0])
    return Work([output._data]) if async_op else None


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None, async_op=False):
    """Reduce ``input_list`` (one tensor per rank) over the ranks; rank r gets the reduced entry r in ``output``."""
    g = _resolve(group)
    if len(input_list) != g.size():
        raise ValueError(f"reduce_scatter needs an input_list of {g.size()} tensors (one per rank), got "
                         f"{len(input_list)}")
    for t in input_list:
        _check(t, "reduce_scatter", inplace=False)
        if t.shape != output.shape:
            raise ValueError(f"reduce_scatter: every input must have the output's shape {list(output.shape)}, got "
                             f"{list(t.shape)}")
    with no_grad():
        flat = cat(list(input_list), 0) if output.shape else stack(list(input_list))
    return reduce_scatter_tensor(output, flat, op, group, async_op)


def barrier(group=None, async_op=False, device_ids=None):
    """Block until every rank of ``group`` reaches this call (and this process's pending work has run)."""
    synchronize()
    g = _resolve(group)
    if g.rank() < 0:
        return None
    kind = "gpu" if device_ids else _kind_of_world()
    x, mesh = _stack(g, [np.zeros((), np.int32)], kind)
    out = _compiled(("reduce", ReduceOp.SUM, np.dtype(np.int32)), mesh, P())(x)
    out.block_until_ready()
    return Work([out]) if async_op else None


def _kind_of_world():
    return get_default_device().type
