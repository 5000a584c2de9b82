"""A guard for meshes of CPU devices: the default stream of a CPU mesh waits for its work every 16 launches.

On a host with few cores, XLA's CPU runtime (jaxlib 0.10.2 and 0.11.2) starves when a few tens of
programs with collectives are in flight on a mesh of (virtual) CPU devices: the participants of some
programs' all-reduce occupy its worker threads while another program's participant never gets one,
and after 40 s a rendezvous timeout aborts the process. Plain JAX shows it too (34 chained jitted
all-reduces on 4 virtual devices, 2 cores); 16 cores do not. Eager DTensor work launches one program
per op, so a DDP step of a small transformer gets there. Waiting for the stream's pending work every
``LIMIT`` launches keeps the count bounded; on a CPU that costs little (the work is the host's anyway).

The stream records its launches in ``Stream._pending`` (``jgrad.runtime._dispatch`` and the engine append one
weak reference per output), so the mesh's default stream gets a list that waits when it fills.
Streams made by the user (``jgrad.Stream(mesh)``) and tiered execution's first, op-by-op runs of a
segment are not covered: see docs/distributed.md, "Known limits".

Imports ``streams``.
"""
from __future__ import annotations

import jax

from .. import streams as _streams

#: Launches on a CPU mesh's default stream between two waits.
LIMIT = 16


class _Throttle(list):
    """A stream's pending work that waits for all of it every ``LIMIT`` appends."""

    __slots__ = ("count",)

    def __init__(self, items=()):
        super().__init__(items)
        self.count = 0

    def append(self, ref):
        list.append(self, ref)
        self.count += 1
        if self.count >= LIMIT:
            self.count = 0
            live = [a for a in (r() for r in self) if a is not None]
            if live:
                jax.block_until_ready(live)
            del self[:]  # all finished: nothing left to wait for


class _MeshStream(_streams.Stream):
    """The default stream of a CPU mesh: its pending list is a ``_Throttle`` whatever is assigned to it."""

    __slots__ = ("_pending_list",)

    @property
    def _pending(self):
        return self._pending_list

    @_pending.setter
    def _pending(self, value):
        self._pending_list = value if type(value) is _Throttle else _Throttle(value)


def guard(md) -> None:
    """Give CPU mesh device ``md`` a throttled default stream (unless it already has a default stream)."""
    if md.type != "cpu":
        return
    with _streams._defaults_lock:
        if md not in _streams._defaults:
            _streams._defaults[md] = _MeshStream(md, _id=-(len(_streams._defaults) + 1))
