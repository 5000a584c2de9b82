"""Host copies of small results: what a compiled segment also wrote to pinned host memory, so that reading
it (``item()``, ``tolist()``) waits for the executable and copies nothing.

Why: on a GPU, JAX's read of a device array (``float(x)``) waits for the array, starts a device-to-host copy
and waits again: ~150-200 us on the H100 host, against ~15 us for PyTorch's ``item()``. A training loop that
reads its loss every step pays it every step. A compiled segment returns its 0-d results a second time, in
pinned host memory (the copy is part of the executable); reading that one costs ~55 us.

The copy is not free: an output in host memory adds ~100 us to each call of the executable on that host,
more than a step that never reads its loss would like to pay. So a structure gets host copies only once
one of its 0-d results was read: until it compiles, ``_segment`` *watches* its 0-d results, and a read of
a watched one marks the structure (``owner.scalars_read``). Used by ``_segment`` and ``_segment_run``
(which register copies and watches) and ``_tensor`` (which reads); imports ``_idmap`` only.
"""
from __future__ import annotations

from ._idmap import IdWeakMap

_copies = IdWeakMap()   # device array -> (its host copy or None, the watcher or None)


def register(array, host) -> None:
    """``host`` holds the same value as ``array`` (a jax.Array), in host memory; forgotten when ``array`` dies."""
    _copies[array] = (host, None)


def watch(array, owner) -> None:
    """A read of ``array`` (through ``lookup``) sets ``owner.scalars_read``."""
    _copies[array] = (None, owner)


def lookup(array):
    """The host copy of ``array``, or None (and a watched array's owner learns that it was read)."""
    entry = _copies.get(array)
    if entry is None:
        return None
    if entry[1] is not None:
        entry[1].scalars_read = True
    return entry[0]


def count() -> int:
    """How many host copies and watches are alive (tests use it)."""
    return len(_copies)
