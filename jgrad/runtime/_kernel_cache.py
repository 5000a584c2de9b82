"""Bounds on the ops' compiled kernels (``_dispatch.Op.kernel`` and ``Op.backward_kernel``).

An op's kernel is one ``jax.jit`` function per set of static attributes, and JAX keeps one compiled
executable in it per input shape: a loop whose batch size changes every step compiles every kernel it
runs once per size and used to keep them all (about 15-25 MB per shape for a small MLP's training step on
a CPU). Two knobs bound that:

- ``max_executables``: the compiled executables kept over all kernels. Past it, the kernels holding the
  most executables (the ones whose shapes churn) forget theirs (``clear_cache``); a shape that comes back
  compiles again. Counted every ``check_every`` XLA compiles (JAX reports each through ``jax.monitoring``),
  so a kernel that is only hit costs nothing.
- ``max_keys_per_op``: kernels kept per op (one per set of static attributes); the oldest goes first.

The kernel functions stay (a tiered segment's structure names them): only their executables go.
Imports nothing of jgrad; ``_dispatch`` calls ``made``.
"""
from __future__ import annotations

import threading

import jax

#: Compiled executables kept over all op kernels (forward and backward) before the largest caches are cleared.
max_executables = 512
#: Kernels (sets of static attributes) kept per op and direction; the oldest is dropped past it.
max_keys_per_op = 1024
#: How many XLA compiles pass between two counts of the executables.
check_every = 16

_kernels: dict = {}  # jitted kernel -> (the op's cache dict, its key there)
_compiles = [0]
_lock = threading.Lock()


def made(fn, cache, key) -> None:
    """``fn`` was just stored as ``cache[key]`` (an op's kernels by static attributes)."""
    with _lock:
        _kernels[fn] = (cache, key)
        while len(cache) > max(1, max_keys_per_op):
            old_key = next(iter(cache))
            old = cache.pop(old_key)
            _kernels.pop(old, None)
            _clear(old)


def _on_event(name, duration, **kwargs) -> None:
    """JAX compiled something (a kernel for a new input shape, or one whose executable was dropped)."""
    if name == "/jax/core/compile/backend_compile_duration":
        _compiles[0] += 1
        if _compiles[0] % max(1, check_every) == 0:
            enforce()


def _size(fn) -> int:
    try:
        return fn._cache_size()
    except Exception:  # noqa: BLE001 - not a jax.jit function (a transfer's plain lambda)
        return 0


def _clear(fn) -> None:
    clear = getattr(fn, "clear_cache", None)
    if clear is not None:
        clear()


def executables() -> int:
    """Compiled executables the op kernels hold now."""
    return sum(_size(fn) for fn in list(_kernels))


def enforce() -> None:
    """Past ``max_executables``, clear the kernels with the most executables until a quarter is free."""
    sizes = [(_size(fn), fn) for fn in list(_kernels)]
    total = sum(n for n, _ in sizes)
    if total <= max_executables:
        return
    sizes.sort(key=lambda nf: -nf[0])
    target = max_executables * 3 // 4
    for n, fn in sizes:
        if total <= target or n == 0:
            break
        _clear(fn)
        total -= n


def forget_all() -> None:
    """Every kernel was dropped (``_dispatch.clear_kernel_caches``)."""
    with _lock:
        _kernels.clear()


jax.monitoring.register_event_duration_secs_listener(_on_event)
