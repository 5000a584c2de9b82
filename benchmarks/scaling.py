"""Data-parallel scaling: a DDP training step on 1, 2 and 4 devices (virtual CPU devices by default).

    python -m benchmarks.scaling [--quick] [--device cpu|gpu] [--devices 1,2,4] [--json out.json]

On the CPU the process starts with ``--xla_force_host_platform_device_count=4`` (set here, before
JAX starts, unless XLA_FLAGS already names a count). Two models, strong scaling (the global batch is
fixed, the mesh grows):

(a) small MLP: 4 Linear layers 256 -> 256, ReLU between, batch 256, MSE, SGD (lr 1e-2), float32;
(b) a 2-layer GPT-style transformer built from jgrad.nn (pre-LayerNorm blocks: causal self-attention
    with 4 heads, GELU MLP; width 128, context 64, batch 16, a 64-way head, cross-entropy), AdamW;
    nanoGPT's ``bias=False`` configuration (no biases in Linear and LayerNorm layers), which also keeps
    the number of gradient all-reduces per step (one per parameter) at 14.

Variants per model: plain jgrad on one device (no mesh), ``DistributedDataParallel`` over a 1-D mesh of
N devices in eager mode and in tiered ("auto") mode, and for the MLP the same step as one
``jax.jit``-ed SPMD function over the same mesh (parameters replicated, batch sharded: the compiled
floor). Before timing, the first step's loss of every variant is checked against plain jgrad's.
Every step is waited on before the clock stops (``jg.synchronize()``, which also runs auto mode's
pending work). Medians over interleaved batches; ratios against the 1-device DDP row and plain jgrad.

Virtual CPU devices share the host's cores, and XLA's CPU collectives are memory copies: CPU figures
say whether the SPMD path works and what it costs per step, not how a GPU mesh scales.

On the CPU every timed call is one step followed by a wait, and tiered mode compiles a step the first time
it sees it, in the foreground (``_segment.compile_after = 1``, ``background_compile = False``):
on a host with few cores (2 here) XLA's CPU runtime starves when some tens of programs with collectives
are in flight on the virtual devices (a rendezvous timeout then aborts the process; docs/distributed.md,
"Known limits"), and an unsynchronised loop, or a step run op by op while a background compile takes
the cores, gets there.
"""
from __future__ import annotations

import math
import os
import sys

if "--device" not in sys.argv or sys.argv[sys.argv.index("--device") + 1] == "cpu":
    _flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in _flags:  # before JAX starts: a benchmark's own setting
        os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=4").strip()

import numpy as np  # noqa: E402

if __package__ in (None, ""):  # run as a script: python benchmarks/scaling.py
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks import common  # noqa: E402
else:
    from . import common

MLP_DEPTH, MLP_WIDTH, MLP_BATCH, MLP_LR = 4, 256, 256, 1e-2
GPT = dict(n_layer=2, n_head=4, n_embd=128, block_size=64, vocab=64, batch=16)


# ------------------------------------------------------------------------------ models
def mlp(jg, seed):
    nn = jg.nn
    jg.manual_seed(seed)
    layers = []
    for i in range(MLP_DEPTH):
        layers.append(nn.Linear(MLP_WIDTH, MLP_WIDTH))
        if i < MLP_DEPTH - 1:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def gpt(jg, seed):
    """A GPT-style stack of pre-LayerNorm transformer blocks on float inputs (B, T, C)."""
    nn = jg.nn
    C, H, T, V = GPT["n_embd"], GPT["n_head"], GPT["block_size"], GPT["vocab"]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(C, 3 * C, bias=False)
            self.proj = nn.Linear(C, C, bias=False)
            self.register_buffer("causal", jg.tril(jg.ones(T, T)).bool())  # replicated by DDP like any buffer

        def forward(self, x):
            B = x.shape[0]
            q, k, v = self.qkv(x).split(C, dim=-1)
            q, k, v = (t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = jg.where(self.causal, att, -1e9).softmax(-1)
            return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm(C, bias=False), Attention()
            self.ln2 = nn.LayerNorm(C, bias=False)
            self.mlp = nn.Sequential(nn.Linear(C, 4 * C, bias=False), nn.GELU(), nn.Linear(4 * C, C, bias=False))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(*[Block() for _ in range(GPT["n_layer"])])
            self.ln_f, self.head = nn.LayerNorm(C, bias=False), nn.Linear(C, V, bias=False)

        def forward(self, x):
            return self.head(self.ln_f(self.blocks(x))).reshape(-1, V)

    jg.manual_seed(seed)
    return Model()


def batches(which, n=2):
    rng = np.random.default_rng(0)
    if which == "mlp":
        return [(rng.standard_normal((MLP_BATCH, MLP_WIDTH), dtype=np.float32),
                 rng.standard_normal((MLP_BATCH, MLP_WIDTH), dtype=np.float32)) for _ in range(n)]
    B, T, C, V = GPT["batch"], GPT["block_size"], GPT["n_embd"], GPT["vocab"]
    return [(rng.standard_normal((B, T, C), dtype=np.float32), rng.integers(0, V, (B * T,)).astype(np.int32))
            for _ in range(n)]


# ------------------------------------------------------------------------------ steps
def jgrad_step(jg, which, n_devices, kind, mode):
    """(step() -> loss tensor, first loss) for plain jgrad (n_devices None) or DDP over n devices."""
    from jgrad.distributed import init_device_mesh
    from jgrad.distributed.tensor import DTensor, Shard
    from jgrad.nn.parallel import DistributedDataParallel as DDP

    model = (mlp if which == "mlp" else gpt)(jg, 0)
    mesh = None
    if n_devices is not None:
        mesh = init_device_mesh(kind, (n_devices,), mesh_dim_names=("dp",))
        model = DDP(model, device_mesh=mesh)
    if which == "mlp":
        opt, loss_fn = jg.optim.SGD(model.parameters(), lr=MLP_LR), jg.nn.functional.mse_loss
    else:
        opt, loss_fn = jg.optim.AdamW(model.parameters(), lr=1e-3), jg.nn.functional.cross_entropy
    data = [(jg.tensor(x), jg.tensor(y)) for x, y in batches(which)]
    if mesh is not None:
        data = [(x, DTensor.from_local(y, mesh, [Shard(0)])) for x, y in data]
    i = [0]

    def step():
        x, y = data[i[0] % len(data)]
        i[0] += 1
        with jg.execution_mode(mode):
            loss = loss_fn(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    first = step().item()
    return step, first


def jax_spmd_step(n_devices, kind):
    """The MLP step as one jax.jit-ed SPMD function: parameters replicated, batch sharded over n devices."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import jgrad as jg
    model = mlp(jg, 0)
    params = [jnp.asarray(p.detach().numpy()) for p in model.parameters()]
    mesh = jax.make_mesh((n_devices,), ("dp",), axis_types=(jax.sharding.AxisType.Auto,),
                         devices=jax.devices(kind)[:n_devices])
    rep, shard = NamedSharding(mesh, P()), NamedSharding(mesh, P("dp"))
    params = [jax.device_put(p, rep) for p in params]
    data = [(jax.device_put(x, shard), jax.device_put(y, shard)) for x, y in batches("mlp")]

    def loss_fn(ps, x, y):
        h = x
        for j in range(0, len(ps), 2):
            h = h @ ps[j].T + ps[j + 1]
            if j < len(ps) - 2:
                h = jax.nn.relu(h)
        return ((h - y) ** 2).mean()

    @jax.jit
    def update(ps, x, y):
        loss, g = jax.value_and_grad(loss_fn)(ps, x, y)
        return loss, [p - MLP_LR * gp for p, gp in zip(ps, g)]

    state = {"ps": params, "i": 0}

    def step():
        x, y = data[state["i"] % len(data)]
        state["i"] += 1
        loss, state["ps"] = update(state["ps"], x, y)
        return loss

    first = float(step())
    return step, first


# ------------------------------------------------------------------------------ main
def bench(which, args, kind, repeat):
    import jgrad as jg
    from jgrad.runtime import _segment

    if kind == "cpu":  # see the module docstring: in-flight collectives on the CPU
        _segment.background_compile = False
        _segment.compile_after = 1  # no op-by-op first run: it launches every kernel without a wait
    one = 1 if kind == "cpu" else None       # calls per timed batch
    variants, firsts = [], {}
    print(f"  . building plain jgrad ({which})", file=sys.stderr, flush=True)
    step, firsts["jgrad 1 device"] = jgrad_step(jg, which, None, kind, "eager")
    variants.append(common.Variant("jgrad 1 device", step, sync=jg.synchronize, number=one))
    for n in args.devices:
        for mode in ("eager", "auto"):
            name = f"DDP {n} dev {mode}"
            print(f"  . building {name}", file=sys.stderr, flush=True)
            step, firsts[name] = jgrad_step(jg, which, n, kind, mode)
            variants.append(common.Variant(name, step, sync=jg.synchronize, number=one))
        if which == "mlp":
            name = f"jax.jit SPMD {n} dev"
            step, firsts[name] = jax_spmd_step(n, kind)
            variants.append(common.Variant(name, step, number=one))
    ref = firsts["jgrad 1 device"]
    worst = max(abs(v - ref) / abs(ref) for v in firsts.values())
    print(f"\nfirst-step loss, plain jgrad: {ref:.6f}; largest relative difference of any variant: {worst:.1e}")
    results = common.compare(variants, repeat=repeat)
    base = f"DDP {args.devices[0]} dev eager"
    title = ("small MLP step (4x Linear 256, batch 256, SGD)" if which == "mlp" else
             "GPT-style step (2 blocks, width 128, context 64, batch 16, AdamW)")
    return common.table(f"{title}, strong scaling over 1-D meshes", results, [base, "jgrad 1 device"])


def main(argv=None):
    p = common.base_parser(__doc__.split("\n\n")[0])
    p.add_argument("--devices", default="1,2,4", help="mesh sizes (default 1,2,4)")
    p.add_argument("--only", choices=("mlp", "gpt"), default=None, help="run one model")
    args = p.parse_args(argv)
    args.devices = [int(n) for n in args.devices.split(",")]
    jdev, tdev = common.setup_device(args.device)
    import jax
    env = common.environment(jdev, tdev)
    env["devices"] = f"{len(jax.devices(args.device))} {args.device} devices"
    common.print_header("jgrad data-parallel scaling (DistributedDataParallel on a DeviceMesh)", env)
    print(f"- {env['devices']}")
    repeat = args.repeat or (5 if args.quick else 11)
    tables = []
    for which in ("mlp", "gpt"):
        if args.only in (None, which):
            tables.append(bench(which, args, args.device, repeat))
    common.print_footer(env)
    common.dump_json(args.json, {"env": env, "tables": tables})


if __name__ == "__main__":
    main()
