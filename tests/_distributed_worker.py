"""One rank of tests/test_distributed_multiprocess.py: a run of 2 processes with 2 virtual CPU devices each.

The parent sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (as torchrun does) and XLA_FLAGS; this process
joins with init_process_group, runs collectives, DTensor transfers and a DDP training loop on its half of
each batch, and prints one JSON line of results for the parent to check."""
import json
import sys

import numpy as np

import jgrad as jg
import jgrad.distributed as dist
from jgrad import nn
from jgrad.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from jgrad.nn.parallel import DistributedDataParallel as DDP


def mlp(seed):
    jg.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))


def main():
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank, "world": world, "local_devices": len(jg.distributed._process_group.jax.local_devices())}

    # collectives: one tensor per process
    t = jg.tensor([rank + 1.0, 10.0 * rank])
    dist.all_reduce(t)
    out["all_reduce_sum"] = t.tolist()
    t = jg.tensor([rank + 1.0, -float(rank)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = t.tolist()
    t = jg.tensor([float(rank), 2.0 * rank + 1])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["all_reduce_avg"] = t.tolist()
    gathered = [jg.zeros(2) for _ in range(world)]
    dist.all_gather(gathered, jg.tensor([rank, rank + 0.5]))
    out["all_gather"] = [g.tolist() for g in gathered]
    cat = jg.zeros(2 * world)
    dist.all_gather_into_tensor(cat, jg.tensor([rank, rank + 0.5]))
    out["all_gather_into_tensor"] = cat.tolist()
    b = jg.tensor([100.0 + rank])
    dist.broadcast(b, src=1)
    out["broadcast_from_1"] = b.tolist()
    rs = jg.zeros(2)
    dist.reduce_scatter_tensor(rs, jg.arange(4.0) + 10 * rank)
    out["reduce_scatter_tensor"] = rs.tolist()
    dist.barrier()

    # DTensors over a mesh of both processes' devices
    mesh = dist.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
    data = np.arange(8.0).reshape(8, 1) + 100 * rank          # differs per rank: rank 0's is used
    d = distribute_tensor(jg.tensor(data), mesh, [Shard(0)])
    out["distribute_full"] = d.full_tensor().numpy().ravel().tolist()
    out["distribute_local"] = d.to_local().numpy().ravel().tolist()
    own = distribute_tensor(jg.tensor(data), mesh, [Shard(0)], src_data_rank=None)   # each rank's own rows
    out["no_src_rank_full"] = own.full_tensor().numpy().ravel().tolist()
    rep = distribute_tensor(jg.tensor(data), mesh, [Replicate()])
    out["replicate_local"] = rep.to_local().numpy().ravel().tolist()
    loc = DTensor.from_local(jg.tensor(np.full((2, 1), float(rank))), mesh, [Shard(0)])
    out["from_local_full"] = loc.full_tensor().numpy().ravel().tolist()
    out["from_local_shape"] = list(loc.shape)

    # DDP: each rank trains on its half of the global batch; the reference is one device on the full batch
    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((16, 6)).astype(np.float32), rng.standard_normal((16, 3)).astype(np.float32))
               for _ in range(3)]
    ddp = DDP(mlp(seed=rank), device_mesh=mesh)                # init_sync: rank 0's parameters everywhere
    ref = mlp(seed=0)
    for name, model in (("ddp", ddp), ("ref", ref)):
        opt = jg.optim.Adam(model.parameters(), lr=0.02)
        losses = []
        for xb, yb in batches:
            if model is ddp:  # as a PyTorch rank: its own part of the batch and of the targets, plain tensors
                x, y = jg.tensor(xb[8 * rank:8 * rank + 8]), jg.tensor(yb[8 * rank:8 * rank + 8])
            else:
                x, y = jg.tensor(xb), jg.tensor(yb)
            pred = model(x)
            if model is ddp:
                out_info = [type(pred._device).__name__, list(pred.shape), repr(pred)[:7]]
            loss = nn.functional.mse_loss(pred, y)
            opt.zero_grad()
            loss.backward()
            if len(losses) == 0:  # the first step's gradients (Adam's update would hide a scale)
                out[name + "_grads0"] = [(p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).numpy()
                                         .ravel().tolist() for p in model.parameters()]
            opt.step()
            losses.append(loss.item())
        out[name + "_losses"] = losses if model is ref else [losses, out_info]
        out[name + "_params"] = [(p.detach().full_tensor() if isinstance(p, DTensor) else p.detach()).numpy()
                                 .ravel().tolist() for p in model.parameters()]
    out["ddp_placements"] = sorted({str(p.placements) for p in ddp.parameters()})
    dist.destroy_process_group()
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
