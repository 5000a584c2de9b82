"""Warm executables: a new XLA:CPU executable is called once in the thread that compiled it, before the program uses it.

Used by ``_segment_run.compile_segment`` (segments compiled in the background: on zeros) and ``_kernel_cache`` (one
op's kernel compiled in the background for a new shape: on the inputs that asked for it). Imports jax, numpy and
``_dtype`` only.
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
# 800 ops 330-550 ms, then 3-6 ms). A segment or kernel compiled in the background would pay that at its first
# use, on the program's thread, which waits for it: LBFGS's hot "auto" run spent ~1.3 s more than the next run on
# one of XLA's threads, and the program waited. So the compiling thread calls a new segment executable once on
# zeros before a barrier may use it (``warm``), at the compile's low priority.
# Skipped: programs holding a loop (zeros might never end it) or a host callback (its effects), read off the jaxpr
# (the compiled HLO's text would hold the GIL for ~50 ms at 2000 ops); inputs over the caller's byte cap; other
# devices (not measured there). The result is dropped; the executable is pure, so nothing else changes.
#
# A kernel compiled in the background for a new shape (``_kernel_cache``) is warmed through its ``jax.jit``, on the
# inputs of the call that asked for the compile (``warm_call``), not on zeros: that also fills the jit's own
# dispatch cache, which the program's next call would otherwise fill through JAX's Python path. Plain JAX, a
# matmul and tanh at a new shape compiled in another thread, the main thread's first call: 1.9 ms not warmed,
# 0.49 ms warmed through the executable, 0.20 ms through the jit. Loops are fine there: the program's own inputs
# end them as its call does.


def warm(exe, specs, device, max_bytes, jaxpr):
    """Call a CPU executable once on zeros, in the thread that compiled it, so that its first call's one-time cost
    is not the program's (Note [Warm executables]). ``jaxpr``: the program it was compiled from. True when it ran;
    False when skipped (not a CPU, inputs over ``max_bytes``, a loop or a host callback in it, or the call failed),
    and the program's first call pays it."""
    if device.type != "cpu" or not max_bytes or _holds(jaxpr, _NOT_ON_ZEROS):
        return False
    nbytes = sum(x.size * x.dtype.itemsize for x in specs if isinstance(x, jax.ShapeDtypeStruct))
    if nbytes > max_bytes:
        return False
    try:
        with x64_scope():
            args = [jax.device_put(_zero(x), x.sharding or device.jax_device)
                    if isinstance(x, jax.ShapeDtypeStruct) else x for x in specs]
            jax.block_until_ready(exe(*args))
    except Exception:  # noqa: BLE001 - inputs it could not make as the executable wants them: its first call warms it
        return False
    return True


def warm_call(jitted, args, max_bytes, jaxpr):
    """Call ``jitted`` (a ``jax.jit`` function whose executable for ``args`` was just compiled) once on ``args``
    themselves, the inputs of the program's call that asked for the compile: XLA loads the executable, and the jit's
    own dispatch cache learns the signature, so the program's next call with these shapes runs at once (Note [Warm
    executables]). Only on CPU devices, for inputs of at most ``max_bytes``, and never for a host callback (its
    effects would happen twice; a loop ends as the program's own call ends it). The result is dropped. True when it
    ran."""
    leaves = jax.tree_util.tree_leaves(args)
    arrays = [x for x in leaves if isinstance(x, jax.Array)]
    if not max_bytes or not arrays or _holds(jaxpr, _CALLBACKS):
        return False
    if not all(d.platform == "cpu" for x in arrays for d in x.sharding.device_set):
        return False
    if sum(x.size * x.dtype.itemsize for x in arrays) > max_bytes:
        return False
    try:
        with x64_scope():
            jax.block_until_ready(jitted(*args))
    except Exception:  # noqa: BLE001 - the program's own call raises it, if it still does
        return False
    return True


#: Host callbacks: their effects would happen on made-up data, or twice.
_CALLBACKS = frozenset({"pure_callback", "io_callback", "debug_callback", "callback"})
#: Primitives an executable is not run on zeros with: a loop zeros might never end, host callbacks.
_NOT_ON_ZEROS = _CALLBACKS | {"while"}


def _holds(jaxpr, names):
    """Whether ``jaxpr`` (a Jaxpr or ClosedJaxpr) or one nested in it has an equation of a primitive in ``names``."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    return any(e.primitive.name in names for e in jaxpr.eqns) or any(_holds(j, names) for j in _subjaxprs(jaxpr))


def _zero(spec):
    if spec.weak_type and spec.shape == ():  # (a dynamic scalar: a Python number, weakly typed as it was)
        return spec.dtype.type(0).item()
    return np.zeros(spec.shape, spec.dtype)
