"""Experiments behind the capture notes (docs/capture.md, benchmarks/results/): plain jax, no jgrad in the timed code.

    PYTHONPATH=$PWD python benchmarks/diagnostics/gpu_xla_experiments.py

1. host cost per output of an executable (19 arguments; 1, 17 or 33 outputs);
2. the small MLP step under jax.jit, with the gradients as extra outputs or not, packed into one array or
   not, compiled with XLA's defaults or with jgrad's capture options (xla_gpu_graph_min_graph_size=1);
Prints one line per case; "host issue" is the Python time of the calls before the final block.
"""
import time, statistics, warnings, re, sys
warnings.filterwarnings("ignore")
import jax, jax.numpy as jnp
jax.config.update("jax_default_matmul_precision", "highest")
def tm(f, n=300):
    r=[]; iss=[]
    for _ in range(7):
        t0=time.perf_counter()
        for _ in range(n): o=f()
        t1=time.perf_counter()
        jax.block_until_ready(o); r.append((time.perf_counter()-t0)/n*1e6); iss.append((t1-t0)/n*1e6)
    return f"{statistics.median(r):.1f} us (host issue {statistics.median(iss):.1f})"
FUS = r"= \S+ fusion"
OPT = {"xla_gpu_graph_min_graph_size": 1}
# 1. per-output / per-arg host cost of a trivial executable
for nout in (1, 17, 33):
    xs = [jnp.ones((256,)) for _ in range(19)]
    f = jax.jit(lambda xs: [xs[i % 19] * 2.0 for i in range(nout)])
    f(xs)
    print(f"trivial, 19 args, {nout} outputs:", tm(lambda: f(xs)[0]))
# 2. small MLP jax.jit variants
D, B, L = 256, 64, 8
key = jax.random.PRNGKey(0)
ps = [(jax.random.normal(jax.random.fold_in(key, i), (D, D)) * 0.05, jnp.zeros((D,))) for i in range(L)]
x = jax.random.normal(key, (B, D)); y = jax.random.normal(jax.random.fold_in(key, 99), (B, D))
def loss(ps, x, y, T):
    h = x
    for i, (W, b) in enumerate(ps):
        h = (h @ W.T if T else h @ W) + b
        if i < L - 1: h = jax.nn.relu(h)
    return jnp.mean((h - y) ** 2)
def mk(T, grads_out):
    def step(ps, x, y):
        l, g = jax.value_and_grad(loss)(ps, x, y, T)
        new = jax.tree_util.tree_map(lambda p, gg: p - 0.01 * gg, ps, g)
        if grads_out == "packed":
            return l, new, jnp.concatenate([a.ravel() for a in jax.tree_util.tree_leaves(g)])
        return (l, new, g) if grads_out else (l, new)
    return step
for T in (True,):
    for go in (False, True, "packed"):
        for opts in (None, OPT):
            lo = jax.jit(mk(T, go), donate_argnums=(0,)).lower(ps, x, y)
            exe = lo.compile(compiler_options=dict(opts)) if opts else lo.compile()
            txt = exe.as_text()
            st = [jax.tree_util.tree_map(jnp.copy, ps)]
            def call():
                r = exe(st[0], x, y); st[0] = r[1]; return r[0]
            call()
            nf = len(re.findall(FUS, txt))
            print(f"mlp W.T={T} grads_out={go} opts={bool(opts)}: {tm(call)}; 'command_buffer' in text: {txt.count('command_buffer')}, fusions {nf}")
