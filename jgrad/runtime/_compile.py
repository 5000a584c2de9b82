"""Compiling recorded steps into one XLA executable: options, progress, and the capture's plan and cache.

``compile_plan`` turns a finished capture (``jgrad.runtime._capture.Capture``) into one ``jax.jit``-compiled
executable, cached by the capture's structure (``cache_info``/``cache_clear``); side-stream regions
are lowered with ``compute_on("gpu_stream:N")`` on a GPU. ``compiler_options`` (the XLA options of
captured executables on a GPU) and ``_Progress`` (a line on stderr for a long compile) are shared with
tiered segments (``jgrad.runtime._segment_run``). The knobs ``gpu_compiler_options``,
``side_stream_compiler_options`` and ``progress_after`` live here and are read at each compile.

Imports ``_recorder`` and ``_dtype``; used by ``graphs`` (which owns ``Graph``) and ``_segment_run``.
The recorder, the tensor and autograd never import it.
"""
from __future__ import annotations

import operator
import threading
import time
import warnings

import jax
import numpy as np

from ..core._dtype import x64_scope
from ..core._recorder import _as_aval, _aval_key, _layout, _tree_unflatten


#: Seconds a compile may take before a progress line goes to stderr (None: never).
progress_after = 2.0

#: XLA options for captured executables on a GPU (per executable: JAX's global config is left alone).
#: XLA runs sequences of at least ``xla_gpu_graph_min_graph_size`` kernels as one CUDA graph (a "command
#: buffer"); its default, 5, leaves the short runs between a capture's non-capturable ops to be launched
#: one by one. Set to None to compile with XLA's defaults.
gpu_compiler_options = {"xla_gpu_graph_min_graph_size": 1}

#: Added on a GPU when a capture has side-stream regions (compute_on('gpu_stream:N') calls). By default
#: XLA records a command buffer's kernels one after the other in its schedule, so a region on another
#: stream does not overlap inside the CUDA graph; "CONCURRENT" gives the graph only the data
#: dependencies as edges. Two chains of 20 128x128 matmuls on an H100: 77 us on two streams vs 100 us on
#: one (with XLA's default scheduling: 99 vs 102 us; RESULTS.md).
side_stream_compiler_options = {"xla_gpu_command_buffer_scheduling_mode": "CONCURRENT"}


def compiler_options(on_gpu: bool, side_stream_regions: bool):
    """The XLA options a capture compiles with (None: XLA's defaults)."""
    if not on_gpu:
        return None
    options = dict(gpu_compiler_options or {})
    if side_stream_regions:
        options.update(side_stream_compiler_options)
    return options or None


class _Progress:
    """Long compiles say so: a line on stderr after ``progress_after`` seconds, then every 10 s."""

    def __init__(self, what):
        self.what = what
        self.done = threading.Event()
        self.spoke = False

    def __enter__(self):
        if progress_after is not None:
            self.t0 = time.perf_counter()
            threading.Thread(target=self._tick, daemon=True, name="jgrad-compile-progress").start()
        return self

    def _tick(self):
        import sys
        wait = progress_after
        while not self.done.wait(wait):
            self.spoke = True
            print(f"jgrad: {self.what}... {time.perf_counter() - self.t0:.0f} s", file=sys.stderr, flush=True)
            wait = 10.0

    def __exit__(self, *exc):
        self.done.set()
        if self.spoke:
            import sys
            print(f"jgrad: {self.what}: done in {time.perf_counter() - self.t0:.1f} s", file=sys.stderr, flush=True)
        return False


class CacheInfo:
    __slots__ = ("hits", "misses", "compile_seconds", "size")

    def __init__(self, hits=0, misses=0, compile_seconds=0.0, size=0):
        self.hits, self.misses, self.compile_seconds, self.size = hits, misses, compile_seconds, size

    def __repr__(self):
        return (f"CacheInfo(hits={self.hits}, misses={self.misses}, compile_seconds={self.compile_seconds:.3f}, "
                f"size={self.size})")

    def _asdict(self):
        return {"hits": self.hits, "misses": self.misses, "compile_seconds": self.compile_seconds, "size": self.size}


_cache: dict = {}
_stats = CacheInfo()
_cache_lock = threading.Lock()


def cache_info() -> CacheInfo:
    """Hits, misses, total compile time and size of the executable cache of captured graphs."""
    return CacheInfo(_stats.hits, _stats.misses, _stats.compile_seconds, len(_cache))


def cache_clear() -> None:
    """Forget every cached executable (the statistics start again)."""
    with _cache_lock:
        _cache.clear()
        _stats.hits = _stats.misses = 0
        _stats.compile_seconds = 0.0


def _on_stream(fn, k, n_out):
    """``fn`` (whose own kernels' jits are inlined) annotated to run on XLA GPU stream ``k``.

    compute_on's API differs across jax versions. The region must hold no further call: XLA (jaxlib
    0.11.2) rejects a stream-annotated call that reaches its work through a nested call ("No
    ExecutionStreamId found for call-start"), so the function transform gets ``fn`` itself.
    """
    import inspect
    from jax.experimental.compute_on import compute_on
    params = inspect.signature(compute_on).parameters
    if "out_memory_spaces" not in params:        # jax <= 0.10: a context manager that annotates jit calls
        return compute_on(f"gpu_stream:{k}")(jax.jit(fn))
    spaces = [jax.memory.Space.Device] * n_out   # newer jax: a function transform
    return compute_on(fn, compute_type=f"gpu_stream:{k}", out_memory_spaces=spaces)


def _region_runner(steps, stream_index, on_gpu):
    """The trace as a function of (env); side-stream regions run under compute_on on GPU."""
    def run_steps(env, group):
        for fn, treedef, refs, outs, _ in group:
            args = _tree_unflatten(treedef, [r[2] if r[0] == "l" else env[r] for r in refs])
            res = jax.tree_util.tree_leaves(fn(*args))
            for i, v in zip(outs, res):
                env[("b", i)] = v

    if not on_gpu or len(stream_index) < 2:
        return lambda env: run_steps(env, steps)

    from jax.experimental.compute_on import compute_on
    groups, cur = [], []
    for st in steps:
        if cur and cur[-1][4] is not st[4]:
            groups.append(cur)
            cur = []
        cur.append(st)
    if cur:
        groups.append(cur)

    def region(group):
        k = stream_index[group[0][4]]
        if k == 0:
            return lambda env: run_steps(env, group)
        needed = sorted({r for st in group for r in st[2] if r[0] != "l"} - {("b", i) for st in group for i in st[3]},
                        key=repr)
        produced = [("b", i) for st in group for i in st[3]]

        def body_fn(vals):
            env = dict(zip(needed, vals))
            with jax.disable_jit():  # the kernels' own jits inlined: see _on_stream
                run_steps(env, group)
            return [env[p] for p in produced]

        body = _on_stream(body_fn, k, len(produced))

        def apply(env):
            for p, v in zip(produced, body([env[n] for n in needed])):
                env[p] = v
        return apply

    parts = [region(g) for g in groups]

    def run_all(env):
        for p in parts:
            p(env)
    return run_all


def compile_plan(cap, outputs, donated, packed=(), state=()):
    """The cached (executable, donated, kept, split, state_split) for this capture.

    ``state`` is a list of (donated input index, its update buffer), sorted by dtype: those inputs arrive as
    one flat array per dtype and their updates leave the same way, first. The executable takes
    (state flats, other donated values, kept values, constants) and returns the state flats, ``outputs`` one
    by one, then ``packed`` (grouped by dtype, in order) as one flat array per dtype; ``split`` and
    ``state_split`` turn flats back into the buffers' values (None when nothing is packed).
    """
    steps = tuple((fn, treedef, refs, outs, st) for fn, treedef, refs, outs, st in cap.steps)
    stream_index = {}
    for st in [cap.origin] + [s for s in cap.streams if s is not cap.origin]:
        stream_index.setdefault(st, len(stream_index))
    dev = cap.origin.device
    on_gpu = dev.type != "cpu"
    gate = _gate_of(cap, donated)
    in_keys = tuple(_aval_key(a) for a in cap._input_arrays) + tuple(_layout(a) for a in cap._input_arrays)
    key = (tuple((fn, treedef, refs, outs, stream_index[st]) for fn, treedef, refs, outs, st in steps),
           tuple((tuple(a.shape), np.dtype(a.dtype), a.weak_type) for a in cap.avals),
           in_keys, tuple(_aval_key(c) for c in cap.consts), tuple(b.index for b in outputs),
           tuple(b.index for b in packed), tuple((i, b.index) for i, b in state), tuple(donated), str(dev), on_gpu,
           tuple(sorted((compiler_options(on_gpu, len(stream_index) > 1) or {}).items())), gate)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _stats.hits += 1
            return hit
    n_in = len(cap.inputs)
    kept = [i for i in range(n_in) if i not in set(donated)]
    in_state = {i for i, _ in state}
    donated = [i for i in donated if i not in in_state]
    out_idx = [b.index for b in outputs]
    groups = _dtype_groups(packed)
    state_groups = _dtype_groups(state, dtype=lambda ib: ib[1].dtype)
    try:
        entry, dt = _compile(cap, steps, stream_index, on_gpu, donated, kept, out_idx, groups, state_groups, gate)
    except Exception as e:  # noqa: BLE001 - stream annotations are an optimisation: fall back, loudly
        if not (on_gpu and len(stream_index) > 1):
            raise
        warnings.warn(f"Compiling the side-stream regions of {cap.graph_name} (compute_on regions, concurrent "
                      f"command-buffer scheduling) failed ({type(e).__name__}: {e}); they run inlined on one "
                      "stream instead.", RuntimeWarning)
        entry, dt = _compile(cap, steps, stream_index, False, donated, kept, out_idx, groups, state_groups, gate)
    with _cache_lock:
        _stats.misses += 1
        _stats.compile_seconds += dt
        _cache[key] = entry
    return entry


def _gate_of(cap, donated):
    """(flag buffers, ((input, its update buffer), ...)) of a capture with device-side checks: a replay whose
    checks fail writes nothing in place (the tensors keep their values; chosen inside the executable)."""
    flags = tuple(c.flag._data.index for c in cap.checks if getattr(c.flag._data, "owner", None) is cap)
    if not flags:
        return ((), ())
    final = getattr(cap, "final", {})
    writes = tuple((i, final[id(obj)].index) for i in donated for kind, obj in (cap.inputs[i],)
                   if kind == "tensor" and id(obj) in final)
    return flags, writes


def _apply_gate(env, gate):
    flags, writes = gate
    if not flags or not writes:
        return
    ok = jax.numpy.all(jax.numpy.stack([env[("b", f)][0] for f in flags]) != 0)
    for i, b in writes:
        env[("b", b)] = jax.numpy.where(ok, env[("b", b)], env[("i", i)])


def _dtype_groups(items, dtype=operator.attrgetter("dtype")):
    """[[item, ...] per dtype], in order: the items must arrive sorted by dtype."""
    groups = []
    for x in items:
        if groups and dtype(groups[-1][0]) == dtype(x):
            groups[-1].append(x)
        else:
            groups.append([x])
    return groups


def _splitter(groups, sharding):
    """The compiled inverse of packing: flat arrays -> the packed buffers' values."""
    def split(flats):
        out = []
        for flat, group in zip(flats, groups):
            at = 0
            for b in group:
                out.append(jax.lax.slice(flat, (at,), (at + b.size,)).reshape(b.shape))
                at += b.size
        return out
    specs = [jax.ShapeDtypeStruct((sum(b.size for b in g),), g[0].dtype, sharding=sharding) for g in groups]
    return jax.jit(split).lower(specs).compile()


def _compile(cap, steps, stream_index, on_gpu, donated, kept, out_idx, groups, state_groups, gate=((), ())):
    runner = _region_runner(steps, stream_index, on_gpu)
    packed_idx = [[b.index for b in g] for g in groups]
    state_idx = [[b.index for _, b in g] for g in state_groups]

    def run(state_flats, donated_vals, kept_vals, consts):
        env = {}
        for flat, group in zip(state_flats, state_groups):
            at = 0
            for i, b in group:
                env[("i", i)] = jax.lax.slice(flat, (at,), (at + b.size,)).reshape(b.shape)
                at += b.size
        for i, v in zip(donated, donated_vals):
            env[("i", i)] = v
        for i, v in zip(kept, kept_vals):
            env[("i", i)] = v
        for i, v in enumerate(consts):
            env[("c", i)] = v
        runner(env)
        _apply_gate(env, gate)
        def flat(g):
            return jax.numpy.concatenate([env[("b", i)].ravel() for i in g])
        return [flat(g) for g in state_idx] + [env[("b", i)] for i in out_idx] + [flat(g) for g in packed_idx]

    arrays = cap._input_arrays
    # Every argument lives on the capture's device (jax's default device may be another one); on a mesh's
    # device (jgrad.distributed), a DTensor's array keeps its layout and the rest is replicated.
    where = cap.origin.device._placement
    sharding = where if isinstance(where, jax.sharding.Sharding) else jax.sharding.SingleDeviceSharding(where)

    def spec(x):
        a = _as_aval(x)  # constants are arrays: Python scalars are literals of the plan
        return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False),
                                    sharding=_layout(x) or sharding)

    t0 = time.perf_counter()
    with warnings.catch_warnings(), _Progress(f"compiling the capture of {cap.graph_name} ({len(steps)} kernels)"), \
            x64_scope():
        warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
        state_specs = [jax.ShapeDtypeStruct((sum(b.size for _, b in g),), g[0][1].dtype, sharding=sharding)
                       for g in state_groups]
        lowered = jax.jit(run, donate_argnums=(0, 1)).lower(
            state_specs, [spec(arrays[i]) for i in donated], [spec(arrays[i]) for i in kept],
            [spec(c) for c in cap.consts])
        options = compiler_options(cap.origin.device.type != "cpu", on_gpu and len(stream_index) > 1)
        compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
        split = _splitter(groups, sharding) if groups else None
        state_split = _splitter([[b for _, b in g] for g in state_groups], sharding) if state_groups else None
    return (compiled, tuple(donated), tuple(kept), split, state_split), time.perf_counter() - t0
