"""Warm executables: a new XLA:CPU executable is called once on zeros in the thread that compiled it.

Used by ``_segment_run.compile_segment`` (segments compiled in the background) and ``_kernel_cache`` (one op's
kernel compiled in the background). Imports jax and numpy only.
"""
from __future__ import annotations

import jax
import numpy as np
from jax.extend.core import subjaxprs as _subjaxprs

from ..core._dtype import x64_scope

# Note [Warm executables]
# ~~~~~~~~~~~~~~~~~~~~~~~
# An XLA:CPU executable's first call costs far more than its later ones: XLA finishes loading its kernels then
# (jax 0.10.2, 2-core CPU: a 50-op function's first call 30 ms and then 0.2-0.5 ms; 200 ops 90-120 ms, then ~1 ms;
# 800 ops 330-550 ms, then 3-6 ms; one op's kernel 0.8-2 ms, then 0.03-0.2 ms). A segment or kernel compiled in
# the background would pay that at its first use, on the program's thread, which waits for it: LBFGS's hot "auto"
# run spent ~1.3 s more than the next run on one of XLA's threads, and the program waited. So the compiling thread
# calls the new executable once on zeros before the program may use it (``warm``), at the compile's low priority.
# A kernel's executable is the one its ``jax.jit`` runs from then on: JAX caches the compile of a lowered program,
# so ``jit.lower(...).compile()`` and the jit's next call share it. Skipped: programs holding a loop (zeros might
# never end it) or a host callback (its effects), read off the jaxpr (the compiled HLO's text would hold the GIL
# for ~50 ms at 2000 ops); inputs over the caller's byte cap; other devices (not measured there). The result is
# dropped; the executable is pure, so nothing else changes.


def warm(exe, specs, device, max_bytes, jaxpr):
    """Call a CPU executable once on zeros, in the thread that compiled it, so that its first call's one-time cost
    is not the program's (Note [Warm executables]). ``specs``: its positional arguments, a pytree whose
    ``jax.ShapeDtypeStruct`` leaves become zeros (other leaves are passed as they are); ``device``: the jgrad device
    it runs on, or None to read it off the specs' shardings. ``jaxpr``: the program it was compiled from. True when
    it ran; False when skipped (not a CPU, inputs over ``max_bytes``, a loop or a host callback in it, or the call
    failed), and the program's first call pays it."""
    structs = [x for x in jax.tree_util.tree_leaves(specs) if isinstance(x, jax.ShapeDtypeStruct)]
    if not max_bytes or not _on_cpu(structs, device) or _holds(jaxpr, _NOT_ON_ZEROS):
        return False
    if sum(x.size * x.dtype.itemsize for x in structs) > max_bytes:
        return False
    place = device.jax_device if device is not None else None
    try:
        with x64_scope():
            args = jax.tree_util.tree_map(
                lambda x: jax.device_put(_zero(x), x.sharding or place) if isinstance(x, jax.ShapeDtypeStruct)
                else x, specs)
            jax.block_until_ready(exe(*args))
    except Exception:  # noqa: BLE001 - inputs it could not make as the executable wants them: its first call warms it
        return False
    return True


def spec_of(x):
    """``x``'s ``jax.ShapeDtypeStruct`` (with its sharding and weak type) for a jax array; anything else as is."""
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=x.weak_type)
    return x


def _on_cpu(structs, device):
    if device is not None:
        return device.type == "cpu"
    # (every input placed, each on CPU devices only: where the executable will run)
    return bool(structs) and all(x.sharding is not None and all(d.platform == "cpu" for d in x.sharding.device_set)
                                 for x in structs)


#: Primitives an executable is not run on zeros with: a loop zeros might never end, host callbacks (their effects).
_NOT_ON_ZEROS = frozenset({"while", "pure_callback", "io_callback", "debug_callback", "callback"})


def _holds(jaxpr, names):
    """Whether ``jaxpr`` (a Jaxpr or ClosedJaxpr) or one nested in it has an equation of a primitive in ``names``."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    return any(e.primitive.name in names for e in jaxpr.eqns) or any(_holds(j, names) for j in _subjaxprs(jaxpr))


def _zero(spec):
    if spec.weak_type and spec.shape == ():  # (a dynamic scalar: a Python number, weakly typed as it was)
        return spec.dtype.type(0).item()
    return np.zeros(spec.shape, spec.dtype)
